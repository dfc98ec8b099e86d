//! raidd's array engine: members (files, block devices, memory, fault injectors, other
//! arrays), arrays of every md level with degraded operation and failure handling, md v1.2
//! metadata, assembly and creation.
//!
//! The engine runs on `raidd-rt`: member I/O goes through the calling thread's io_uring,
//! and what waits (gathering, recovery pacing, member timeouts) waits on its executor and
//! timers. Layout math, parity and metadata encoding live in their own pure crates.

pub mod array;
pub mod assemble;
pub mod create;
pub mod error;
mod extent;
mod hash;
mod iov;
mod md_io;
pub mod member;
mod meta;
pub mod pattern;
pub mod tags;

pub use array::{
    Added, Alone, Array, ArrayParts, ArrayState, ArrayStatus, Closed, ConsistencyPolicy,
    CounterStatus, Gather, JournalMode, JournalParts, JournalState, JournalStatus, LastSync,
    PplParts, PplRecovered, SlotParts, SlotState, StripeCacheStatus, SyncKind, SyncLimits,
    SyncProgress, SyncStatus, DEFAULT_CACHE_BYTES,
};
pub use error::{Error, ErrorKind, Result};
pub use extent::Extent;
pub use member::{Member, MemberInfo};
/// How checksum tags are computed (`CreateSpec::checksums`).
pub use raidd_md::tags::Algorithm as ChecksumAlgorithm;

/// What a lock that a panicking thread held says: `raidd serve` aborts on panic, so a
/// poisoned lock is a bug to stop at, never state to go on with.
pub(crate) const POISONED: &str = "a thread panicked while holding this lock";
