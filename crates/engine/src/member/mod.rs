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
pub use dab::{
    block_for, DabCounters, DabMember, DabMode, DabPool, DEFAULT_BLOCK as DAB_DEFAULT_BLOCK,
    MAX_BLOCK as DAB_MAX_BLOCK, MIN_BLOCK as DAB_MIN_BLOCK,
};
pub use fault::{FaultControl, FaultMember, FaultPlan};
pub use file::{FileMember, OpenOptions};
pub use memory::MemMember;
pub use sim::{SimMember, SimWorld};
