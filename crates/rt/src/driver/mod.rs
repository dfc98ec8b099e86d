//! The per-thread I/O driver: one io_uring per thread, or synchronous system calls where
//! io_uring is unavailable (seccomp in some containers, `RAIDD_NO_URING=1`).
//!
//! Operations are futures ([`Op`]) that own every resource the kernel touches (buffers, iovec
//! arrays, timespecs). If an `Op` is dropped before its completion arrives, its resources move
//! into the driver's slab as an orphan and are freed only when the kernel is done with them.
//! SQEs are not submitted one by one: they queue until the executor runs out of ready tasks
//! and parks, so a burst of member I/Os from many tasks costs one `io_uring_enter`.
//! Positioned file reads and writes wait in a plug ([`crate::merge`]) until then, and
//! contiguous ones leave as one vectored operation whose completion is split among them.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::fmt;
use std::future::Future;
use std::io;
use std::marker::PhantomData;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

mod op;
mod state;
mod sync;
mod uring;

use crate::merge::Plug;
use crate::slab::{Key, Slab};
pub(crate) use state::Driver;
pub use state::IoStats;
use state::{Gathered, Slot};
use uring::{
    new_ring, register_arena_with, register_wait_fd, ring_wait_default, uring_allowed,
    CANCEL_TOKEN, EVENTFD_TOKEN,
};

pub(crate) use op::{OpKind, STREAM_OFFSET};
pub use uring::RingWait;

/// How an operation reaches the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Dispatch {
    /// Through the ring: the kernel tries it without blocking and hands it to one of its
    /// worker threads if it would block.
    #[default]
    Ring,
    /// Through the ring, straight to a kernel worker thread (IOSQE_ASYNC): for files whose
    /// filesystem blocks even when asked not to (FUSE, network filesystems), which would
    /// otherwise stall the submitting thread, and everything on it, for as long as the
    /// file's server takes (for ever, when it hangs).
    ///
    /// These filesystems split a transfer into requests to their server, and one of them
    /// may fail alone. Linux 6.18's io_uring then finishes the transfer from the wrong file
    /// offset and reports success (`fio --ioengine=io_uring` shows it on a FUSE file whose
    /// second 128 KiB of a 256 KiB read fails: the read succeeds and fails verification;
    /// `pread` gets EIO). So their positioned transfers are never gathered, and
    /// `File` (`fs.rs`) cuts them into pieces of at most [`WORKER_MAX_OP`] bytes, one
    /// request each on FUSE's default: a piece fails whole or not at all.
    Worker,
    /// On the spot, as a system call: for memory-backed files (tmpfs), whose I/O is a copy
    /// that never waits, where a ring would pay a worker's context switches for it.
    Inline,
}

/// The longest positioned transfer sent to a [`Dispatch::Worker`] file: FUSE's default
/// request size (32 pages).
pub const WORKER_MAX_OP: usize = 128 << 10;

/// Gathered operations whose storage is kept for reuse.
const GATHERED_KEPT: usize = 32;

/// Which backend this thread's driver uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    IoUring,
    Sync,
}

impl fmt::Debug for Driver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Driver")
            .field("backend", &self.backend())
            .field("in_flight", &self.ops.borrow().len())
            .finish()
    }
}

/// Whether this process gathers contiguous file I/O (`RAIDD_NO_GATHER=1` turns it off, to
/// compare).
fn gather_default() -> bool {
    static GATHER: OnceLock<bool> = OnceLock::new();
    *GATHER.get_or_init(|| std::env::var_os("RAIDD_NO_GATHER").is_none_or(|v| v == "0"))
}

impl Driver {
    pub(crate) fn new() -> io::Result<Driver> {
        // SAFETY: plain syscall; the result is checked.
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if efd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: efd is a fresh descriptor that we own.
        let eventfd = Arc::new(unsafe { OwnedFd::from_raw_fd(efd) });
        let ring = if uring_allowed() {
            Some(new_ring()?)
        } else {
            None
        };
        let fixed = ring.as_ref().and_then(register_arena_with);
        let wait_fd = match (&ring, ring_wait_default()) {
            (Some(ring), RingWait::Poll) => register_wait_fd(ring),
            _ => None,
        };
        let ring = ring.map(RefCell::new);
        Ok(Driver {
            ring,
            ops: RefCell::new(Slab::default()),
            unsubmitted: Cell::new(0),
            deferred_rounds: Cell::new(0),
            poll: Cell::new(std::time::Duration::ZERO),
            eventfd,
            eventfd_buf: Box::new(Cell::new(0)),
            eventfd_armed: Cell::new(false),
            sync_timers: RefCell::new(Vec::new()),
            plug: RefCell::new(Plug::default()),
            gather: Cell::new(gather_default()),
            fixed,
            gathered_free: RefCell::new(Vec::new()),
            stats: Cell::new(IoStats::default()),
            wait_fd,
        })
    }

    /// Turns gathering of contiguous file I/O on or off for this thread.
    pub(crate) fn set_gather(&self, on: bool) {
        self.flush_plug();
        self.gather.set(on);
    }

    pub(crate) fn stats(&self) -> IoStats {
        self.stats.get()
    }

    fn count(&self, f: impl FnOnce(&mut IoStats)) {
        let mut s = self.stats.get();
        f(&mut s);
        self.stats.set(s);
    }

    /// Entries waiting for the next enter: pushed, or held in the plug.
    fn queued(&self) -> usize {
        self.unsubmitted.get() as usize + self.plug.borrow().len()
    }

    /// Queues a positioned read or write in the plug, or pushes any other operation;
    /// `worker`: straight to a kernel worker (see [`Dispatch::Worker`]).
    fn start(&self, key: Key, kind: OpKind, worker: bool) {
        debug_assert!(
            self.ops.borrow().get(key).is_some(),
            "an operation has its slot before it starts"
        );
        if let Some(e) = kind.extent() {
            self.count(|s| s.file_ops += 1);
            // Never a worker's: see `Dispatch::Worker`.
            if self.gather.get() && !worker {
                self.plug.borrow_mut().add(e, (key, kind, e.len, worker));
                return;
            }
        }
        self.push_op(key, kind, worker);
    }

    /// Completes a gathered operation's parts: each with its own length when the whole
    /// came back, otherwise by issuing them again one by one, so that an error or a short
    /// transfer reaches exactly the parts it concerns.
    fn complete_gathered(&self, mut g: Box<Gathered>, res: i32) {
        debug_assert!(g.parts.len() >= 2, "a gathered operation carries several");
        debug_assert_eq!(
            g.parts.iter().map(|p| p.2).sum::<u64>(),
            g.len,
            "a gathered operation is its parts"
        );
        if u64::try_from(res).is_ok_and(|n| n == g.len) {
            for &(key, _, len, _) in &g.parts {
                self.complete(key.to_u64(), i32::try_from(len).unwrap_or(i32::MAX));
            }
        } else {
            self.count(|s| s.split_again += 1);
            for &(key, kind, _, worker) in &g.parts {
                self.push_op(key, kind, worker);
            }
        }
        g.iovs.clear();
        g.parts.clear();
        let mut free = self.gathered_free.borrow_mut();
        if free.len() < GATHERED_KEPT {
            free.push(g);
        }
        debug_assert!(
            free.len() <= GATHERED_KEPT,
            "kept gathered storage is bounded"
        );
    }

    pub(crate) fn backend(&self) -> Backend {
        if self.ring.is_some() {
            Backend::IoUring
        } else {
            Backend::Sync
        }
    }

    pub(crate) fn eventfd_handle(&self) -> Arc<OwnedFd> {
        self.eventfd.clone()
    }

    /// Operations submitted and not yet completed (orphans included).
    pub(crate) fn in_flight(&self) -> usize {
        self.ops.borrow().len()
    }

    /// Hands queued work to the kernel and processes completions. With `block`, sleeps until
    /// at least one completion (or a wake from another thread) arrives.
    pub(crate) fn park(&self, block: bool) {
        if self.ring.is_none() {
            self.park_sync(block);
        } else {
            self.park_ring(block);
        }
    }

    /// Submits what is queued and takes in every completion the kernel has, without
    /// waiting (with deferred task work, completions only arrive in an enter that asks for
    /// events).
    pub(crate) fn poll_nowait(&self) {
        if self.ring.is_none() {
            self.park_sync(false);
        } else {
            self.poll_ring_nowait();
        }
    }

    pub(super) fn complete(&self, user_data: u64, res: i32) {
        if user_data == EVENTFD_TOKEN {
            self.eventfd_armed.set(false);
            return;
        }
        if user_data == CANCEL_TOKEN {
            return;
        }
        let key = Key::from_u64(user_data);
        debug_assert_eq!(key.to_u64(), user_data, "user_data is an op's key");
        let mut ops = self.ops.borrow_mut();
        let Some(slot) = ops.get_mut(key) else {
            panic!("completion for unknown op {key:?}");
        };
        if let Slot::Gathered(_) = slot {
            let Some(Slot::Gathered(g)) = ops.remove(key) else {
                unreachable!("the slot was just seen gathered");
            };
            drop(ops);
            self.complete_gathered(g, res);
            return;
        }
        match std::mem::replace(slot, Slot::Done(res)) {
            Slot::Waiting(waker) => {
                drop(ops);
                if let Some(w) = waker {
                    w.wake();
                }
            }
            Slot::Orphan(resources) => {
                ops.remove(key);
                drop(ops);
                drop(resources);
            }
            Slot::Done(_) => panic!("op {key:?} completed twice"),
            Slot::Gathered(_) => unreachable!("gathered slots are handled above"),
        }
    }
}

/// How long a driver being dropped waits for the kernel to give back what it was lent.
const DROP_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

impl Drop for Driver {
    fn drop(&mut self) {
        if self.ring.is_none() {
            return;
        }
        // Wake our own eventfd read so it completes, then wait until the kernel has returned
        // every buffer it was lent: freeing them earlier would let it write into freed memory.
        let one = 1u64;
        // SAFETY: writes 8 bytes from `one` to our eventfd.
        unsafe { libc::write(self.eventfd.as_raw_fd(), (&one as *const u64).cast(), 8) };
        let deadline = std::time::Instant::now() + DROP_WAIT;
        while self.in_flight() > 0 || self.eventfd_armed.get() {
            if std::time::Instant::now() >= deadline {
                // An operation the kernel never finishes (a hung network or FUSE file, an
                // abandoned timed-out member I/O): its buffers and the ring stay allocated
                // for the rest of the process rather than be freed under the kernel.
                tracing::warn!(
                    "{} I/O operations never completed; leaving their memory allocated",
                    self.in_flight()
                );
                std::mem::forget(std::mem::take(&mut *self.ops.borrow_mut()));
                std::mem::forget(self.ring.take());
                return;
            }
            self.submit_wait_for(std::time::Duration::from_millis(100));
            self.reap();
        }
    }
}

/// A submitted operation. Resolves to the kernel's result and the resources it lent.
pub(crate) struct Op<T: 'static> {
    driver: Rc<Driver>,
    state: OpState,
    data: Option<T>,
    _not_send: PhantomData<*const ()>,
}

enum OpState {
    InFlight(Key),
    Ready(i32),
    Finished,
}

impl<T: 'static> Op<T> {
    /// Starts `kind`, whose pointers refer into `data`.
    ///
    /// # Safety
    /// Every pointer in `kind` must point into heap memory owned by `data` (or be otherwise
    /// valid until the op completes), which must not move or be freed while `data` is alive:
    /// the kernel may use it until the completion arrives, even after the `Op` is dropped.
    pub(crate) unsafe fn start(driver: &Rc<Driver>, kind: OpKind, data: T) -> Op<T> {
        // SAFETY: forwarded contract.
        unsafe { Op::start_on(driver, Dispatch::Ring, kind, data) }
    }

    /// Like [`Op::start`], dispatched as `how` says when the thread has a ring (timeouts
    /// always go to the ring as they are).
    ///
    /// # Safety
    /// As for [`Op::start`].
    pub(crate) unsafe fn start_on(
        driver: &Rc<Driver>,
        how: Dispatch,
        kind: OpKind,
        data: T,
    ) -> Op<T> {
        let timeout = matches!(kind, OpKind::Timeout { .. });
        let inline = how == Dispatch::Inline && !timeout;
        let state = if driver.ring.is_some() && !inline {
            let key = driver.ops.borrow_mut().insert(Slot::Waiting(None));
            driver.start(key, kind, how == Dispatch::Worker && !timeout);
            OpState::InFlight(key)
        } else if let OpKind::Timeout { duration, .. } = kind {
            let key = driver.ops.borrow_mut().insert(Slot::Waiting(None));
            driver.add_sync_timer(std::time::Instant::now() + duration, key);
            OpState::InFlight(key)
        } else {
            OpState::Ready(kind.run_sync())
        };
        debug_assert!(
            matches!(state, OpState::Ready(_))
                || matches!(state, OpState::InFlight(k) if driver.ops.borrow().get(k).is_some()),
            "an op in flight has its slot"
        );
        Op {
            driver: driver.clone(),
            state,
            data: Some(data),
            _not_send: PhantomData,
        }
    }
}

impl<T: 'static> Future for Op<T> {
    type Output = (i32, T);

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<(i32, T)> {
        // SAFETY: Op is never structurally pinned: no field is exposed pinned.
        let this = unsafe { self.get_unchecked_mut() };
        let res = match this.state {
            OpState::Ready(res) => res,
            OpState::Finished => panic!("Op polled after completion"),
            OpState::InFlight(key) => {
                let mut ops = this.driver.ops.borrow_mut();
                let slot = ops
                    .get_mut(key)
                    .expect("in-flight op missing from the slab");
                match slot {
                    Slot::Done(res) => {
                        let res = *res;
                        ops.remove(key);
                        res
                    }
                    Slot::Waiting(w) => {
                        if !w.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                            *w = Some(cx.waker().clone());
                        }
                        return Poll::Pending;
                    }
                    Slot::Orphan(_) | Slot::Gathered(_) => {
                        unreachable!("a live op's slot is its own")
                    }
                }
            }
        };
        this.state = OpState::Finished;
        let data = this.data.take().expect("op data taken twice");
        Poll::Ready((res, data))
    }
}

impl<T: 'static> Drop for Op<T> {
    fn drop(&mut self) {
        let OpState::InFlight(key) = self.state else {
            return;
        };
        let mut ops = self.driver.ops.borrow_mut();
        let Some(slot) = ops.get_mut(key) else { return };
        match slot {
            Slot::Done(_) => {
                ops.remove(key);
            }
            Slot::Waiting(_) => {
                let data = self.data.take().map(|d| Box::new(d) as Box<dyn Any>);
                *slot = Slot::Orphan(data.unwrap_or_else(|| Box::new(())));
                drop(ops);
                if self.driver.ring.is_none() {
                    // Only timers are in flight in the synchronous backend.
                    self.driver.forget_sync_timer(key);
                    self.driver.ops.borrow_mut().remove(key);
                    return;
                }
                // Nobody wants the result: ask the kernel to stop early (a timeout would
                // otherwise hold its slot, and runtime shutdown, until it expires).
                self.driver.cancel(key);
            }
            Slot::Orphan(_) | Slot::Gathered(_) => unreachable!("op orphaned twice"),
        }
    }
}

/// Converts a CQE result into an `io::Result` of the byte count.
pub(crate) fn cqe_result(res: i32) -> io::Result<usize> {
    debug_assert!(
        res != i32::MIN,
        "a completion's result is a count or an errno"
    );
    if res < 0 {
        Err(io::Error::from_raw_os_error(-res))
    } else {
        Ok(res as usize)
    }
}
