//! raidd's runtime: one single-threaded executor per thread, each with its own io_uring
//! (thread-per-core, no lock shared by all threads on the data path), owned aligned buffers
//! for O_DIRECT, and file operations that are safe to drop mid-flight.
//!
//! ```no_run
//! let data = raidd_rt::block_on(async {
//!     let f = raidd_rt::fs::File::from(std::fs::File::open("/etc/hostname").unwrap());
//!     let (res, buf) = f.read_at(raidd_rt::AlignedBuf::zeroed(4096), 0).await;
//!     res.map(|n| buf[..n].to_vec())
//! });
//! ```

pub mod alloc_count;
mod arena;
mod borrows;
pub mod buf;
pub mod cmd;
mod digests;
mod driver;
mod executor;
pub mod fs;
mod merge;
pub mod net;
mod pooled;
pub mod recycle;
pub mod shard;
pub mod signal;
mod sizes;
mod slab;
pub mod time;

pub use arena::{register_arena, MAX_ARENA};
pub use buf::{AlignedBuf, BorrowError, BufSlice, BufSliceMut, IoVec, IoVecMut, SharedBuf, ALIGN};
pub use driver::{Backend, Dispatch, IoStats, RingWait, WORKER_MAX_OP};
pub use executor::{
    backend, block_on, idle, io_stats, ring_wait, set_gather, set_poll, shutdown, spawn_detached,
    spawn_local, unplugged, yield_now, JoinHandle,
};
pub use pooled::{PooledFuture, BLOCK_ALIGN};

/// What a lock that a panicking thread held says: `raidd serve` aborts on panic, so a
/// poisoned lock is a bug to stop at, never state to go on with.
pub(crate) const POISONED: &str = "a thread panicked while holding this lock";
