//! A thread's driver: its state, which the backends (`uring`, `sync`) and the operations
//! (`mod.rs`) share. Each of them is an `impl Driver` block of its own topic; this module
//! only holds the data, so none of them imports another's.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::os::fd::{OwnedFd, RawFd};
use std::sync::Arc;
use std::task::Waker;

use io_uring::IoUring;
use smallvec::SmallVec;

use super::op::OpKind;
use crate::arena::Arena;
use crate::merge::Plug;
use crate::slab::{Key, Slab};

pub(super) enum Slot {
    Waiting(Option<Waker>),
    Done(i32),
    /// The future was dropped; keep its resources until the kernel completes the op.
    Orphan(#[allow(dead_code)] Box<dyn Any>),
    /// One vectored operation carrying several queued ones (their slots stay `Waiting` or
    /// `Orphan` until this one completes).
    Gathered(Box<Gathered>),
}

/// A gathered operation's own resources: the iovec array the kernel reads, and the parts
/// it completes, in file order.
#[derive(Default)]
pub(super) struct Gathered {
    pub(super) iovs: Vec<libc::iovec>,
    pub(super) parts: SmallVec<[Queued; 8]>,
    pub(super) len: u64,
}

/// An operation in the plug or in a gathered one: its key, what it is, its length in bytes
/// (known from its extent when it was queued), and whether it must go to a kernel worker.
pub(super) type Queued = (Key, OpKind, u64, bool);

pub(crate) struct Driver {
    pub(super) ring: Option<RefCell<IoUring>>,
    pub(super) ops: RefCell<Slab<Slot>>,
    /// SQEs pushed but not yet submitted.
    pub(super) unsubmitted: Cell<u32>,
    /// Non-blocking parks in a row that kept queued entries back (see `park`).
    pub(super) deferred_rounds: Cell<u32>,
    /// How long a park that would sleep polls for completions first (zero: never).
    pub(super) poll: Cell<std::time::Duration>,
    pub(super) eventfd: Arc<OwnedFd>,
    pub(super) eventfd_buf: Box<Cell<u64>>,
    pub(super) eventfd_armed: Cell<bool>,
    /// Timeouts of the synchronous backend (io_uring keeps its own): deadline and op key.
    pub(super) sync_timers: RefCell<Vec<(std::time::Instant, Key)>>,
    /// Positioned reads and writes queued for the next enter, and whether to queue them.
    pub(super) plug: RefCell<Plug<Queued>>,
    pub(super) gather: Cell<bool>,
    /// The arena, when this ring registered it.
    pub(super) fixed: Option<Fixed>,
    /// The boxes themselves are what is reused: a slot holds one.
    #[allow(clippy::vec_box)]
    pub(super) gathered_free: RefCell<Vec<Box<Gathered>>>,
    pub(super) stats: Cell<IoStats>,
    /// With `RAIDD_RING_WAIT=poll`: an eventfd the ring signals when completion work
    /// arrives, which a sleeping thread waits on in poll(2) instead of in io_uring_enter.
    pub(super) wait_fd: Option<OwnedFd>,
}

/// Empties a non-blocking eventfd; whether it had been signalled.
pub(super) fn take_eventfd(fd: RawFd) -> bool {
    let mut count = 0u64;
    // SAFETY: reads 8 bytes into `count`; the caller's eventfd is non-blocking.
    unsafe { libc::read(fd, (&mut count as *mut u64).cast(), 8) == 8 }
}

/// A ring's registration of the arena.
#[derive(Clone, Copy)]
pub(super) struct Fixed {
    pub(super) arena: &'static Arena,
    /// The kernel has vectored fixed reads and writes (6.15 and later).
    pub(super) vectored: bool,
}

/// What a thread's driver did with positioned file reads and writes (see [`crate::io_stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoStats {
    /// Positioned reads and writes started through the ring.
    pub file_ops: u64,
    /// Vectored operations the kernel got in place of two or more of them.
    pub gathered: u64,
    /// Operations that went out inside a gathered one.
    pub gathered_parts: u64,
    /// Gathered operations that failed or came back short, whose parts were then issued one
    /// by one so that each gets its own result.
    pub split_again: u64,
    /// Operations that went to the kernel as fixed-buffer ones (see
    /// [`crate::register_arena`]).
    pub fixed: u64,
}

impl IoStats {
    /// Operations the kernel got for the file reads and writes started.
    pub fn kernel_ops(&self) -> u64 {
        self.file_ops - self.gathered_parts + self.gathered
    }
}
