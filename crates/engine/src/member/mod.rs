//! Members: what an array is made of. Everything an array does to a member goes through the
//! [`Member`] trait (`contract`), so files, block devices, memory and other arrays are
//! interchangeable, and the same engine code runs against real disks and the simulated and
//! fault-injecting members of `raidd-lab`.

mod checksummed;
mod contract;
mod dab;
mod file;
mod memory;
mod suspect;
mod syncs;

pub use checksummed::{
    open as open_checksums, read_header as read_tag_header, ChecksummedMember,
    Opened as ChecksumsOpened,
};
pub use contract::{
    assert_request, known_bad, medium_error, read_bytes, windows_lost, within, write_bytes,
    ChecksumCounts, Checksums, DabCounts, KnownBad, Member, MemberFuture, MemberInfo, TagFacts,
};
pub use dab::{
    block_for, DabCounters, DabMember, DabMode, DabPool, DEFAULT_BLOCK as DAB_DEFAULT_BLOCK,
    MAX_BLOCK as DAB_MAX_BLOCK, MIN_BLOCK as DAB_MIN_BLOCK,
};
pub use file::{FileMember, OpenOptions};
pub use memory::MemMember;
