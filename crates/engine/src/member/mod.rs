//! Members: what an array is made of. Everything an array does to a member goes through the
//! [`Member`] trait (`contract`), so files, block devices, memory, fault injectors and other
//! arrays are interchangeable, and the same engine code runs against real and simulated
//! disks.

mod contract;
mod dab;
mod fault;
mod file;
mod memory;
mod sim;
mod syncs;

pub use contract::{
    read_bytes, windows_lost, write_bytes, DabCounts, Member, MemberFuture, MemberInfo,
};
pub use dab::{DabCounters, DabMember, DabPool};
pub use fault::{FaultControl, FaultMember, FaultPlan};
pub use file::{FileMember, OpenOptions};
pub use memory::MemMember;
pub use sim::{SimMember, SimWorld};
