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
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Waker};

use io_uring::{opcode, squeue, types, IoUring, Probe};
use smallvec::SmallVec;

use crate::arena::Arena;
use crate::merge::{Extent, Plug};
use crate::slab::{Key, Slab};

/// user_data of the eventfd read that lets other threads wake a sleeping driver. A slab key
/// never has index 0xffff_ffff, so this cannot collide.
const EVENTFD_TOKEN: u64 = u64::MAX;
/// user_data of cancellation requests; their completions carry nothing we need.
const CANCEL_TOKEN: u64 = u64::MAX - 1;

const RING_ENTRIES: u32 = 256;
/// Busy rounds for which queued submissions may wait for the next enter (see `Driver::park`).
const MAX_DEFERRED_ROUNDS: u32 = 2;

/// The offset of a read from a stream (pipe, eventfd, signalfd): io_uring's "current
/// position", which streams ignore; the synchronous backend uses read(2) for it.
pub(crate) const STREAM_OFFSET: u64 = u64::MAX;

/// An operation the driver can run, by io_uring or by a plain system call.
#[derive(Clone, Copy, Debug)]
pub(crate) enum OpKind {
    Read {
        fd: RawFd,
        ptr: *mut u8,
        len: u32,
        offset: u64,
    },
    Write {
        fd: RawFd,
        ptr: *const u8,
        len: u32,
        offset: u64,
    },
    Readv {
        fd: RawFd,
        iov: *const libc::iovec,
        count: u32,
        offset: u64,
    },
    Writev {
        fd: RawFd,
        iov: *const libc::iovec,
        count: u32,
        offset: u64,
    },
    Fsync {
        fd: RawFd,
        datasync: bool,
    },
    Fallocate {
        fd: RawFd,
        mode: i32,
        offset: u64,
        len: u64,
    },
    /// Accepts a connection on a listening socket (the new descriptor is close-on-exec).
    Accept {
        fd: RawFd,
    },
    /// Receives from a connected socket.
    Recv {
        fd: RawFd,
        ptr: *mut u8,
        len: u32,
        /// MSG_WAITALL: complete only when `len` bytes arrived (or EOF/error).
        wait_all: bool,
    },
    /// Sends a message (gathered from its iovecs) on a connected socket, never raising
    /// SIGPIPE.
    SendMsg {
        fd: RawFd,
        msg: *const libc::msghdr,
    },
    /// `duration` mirrors `*ts` for the synchronous fallback (the io_uring type is opaque).
    Timeout {
        ts: *const types::Timespec,
        duration: std::time::Duration,
    },
}

impl OpKind {
    /// Whether this is a read or write at a position in a file (not a stream, not a
    /// socket): what the plug holds and what may use registered buffers.
    fn positioned(self) -> bool {
        match self {
            OpKind::Read { offset, .. }
            | OpKind::Write { offset, .. }
            | OpKind::Readv { offset, .. }
            | OpKind::Writev { offset, .. } => offset != STREAM_OFFSET,
            _ => false,
        }
    }

    /// Where a positioned file read or write goes; None for every other operation (streams
    /// and sockets included), which the plug never holds.
    fn extent(self) -> Option<Extent> {
        let (fd, write, offset, len, iovs) = match self {
            OpKind::Read {
                fd, len, offset, ..
            } => (fd, false, offset, u64::from(len), 1),
            OpKind::Write {
                fd, len, offset, ..
            } => (fd, true, offset, u64::from(len), 1),
            OpKind::Readv {
                fd,
                iov,
                count,
                offset,
            } => (fd, false, offset, iov_bytes(iov, count), count as usize),
            OpKind::Writev {
                fd,
                iov,
                count,
                offset,
            } => (fd, true, offset, iov_bytes(iov, count), count as usize),
            _ => return None,
        };
        (offset != STREAM_OFFSET && len > 0).then_some(Extent {
            fd,
            write,
            offset,
            len,
            iovs,
        })
    }

    /// Appends the operation's buffers, as iovecs, to `out` (only for kinds with an extent).
    fn push_iovecs(self, out: &mut Vec<libc::iovec>) {
        match self {
            OpKind::Read { ptr, len, .. } => out.push(libc::iovec {
                iov_base: ptr.cast(),
                iov_len: len as usize,
            }),
            OpKind::Write { ptr, len, .. } => out.push(libc::iovec {
                iov_base: ptr.cast_mut().cast(),
                iov_len: len as usize,
            }),
            OpKind::Readv { iov, count, .. } | OpKind::Writev { iov, count, .. } => {
                out.extend_from_slice(iovecs(iov, count))
            }
            _ => unreachable!("only positioned reads and writes are gathered"),
        }
    }

    /// The operation as a fixed-buffer one when every byte it transfers lies in the
    /// registered arena (and, for vectored ones, the kernel has vectored fixed operations).
    fn fixed_sqe(self, f: Fixed) -> Option<squeue::Entry> {
        if !self.positioned() {
            return None;
        }
        let all_in = |iov, count| {
            f.vectored
                && iovecs(iov, count)
                    .iter()
                    .all(|v| f.arena.contains(v.iov_base.cast(), v.iov_len))
        };
        Some(match self {
            OpKind::Read {
                fd,
                ptr,
                len,
                offset,
            } if f.arena.contains(ptr, len as usize) => {
                opcode::ReadFixed::new(types::Fd(fd), ptr, len, FIXED_INDEX)
                    .offset(offset)
                    .build()
            }
            OpKind::Write {
                fd,
                ptr,
                len,
                offset,
            } if f.arena.contains(ptr, len as usize) => {
                opcode::WriteFixed::new(types::Fd(fd), ptr, len, FIXED_INDEX)
                    .offset(offset)
                    .build()
            }
            OpKind::Readv {
                fd,
                iov,
                count,
                offset,
            } if all_in(iov, count) => {
                opcode::ReadvFixed::new(types::Fd(fd), iov, count, FIXED_INDEX)
                    .offset(offset)
                    .build()
            }
            OpKind::Writev {
                fd,
                iov,
                count,
                offset,
            } if all_in(iov, count) => {
                opcode::WritevFixed::new(types::Fd(fd), iov, count, FIXED_INDEX)
                    .offset(offset)
                    .build()
            }
            _ => return None,
        })
    }

    fn sqe(self) -> squeue::Entry {
        match self {
            OpKind::Read {
                fd,
                ptr,
                len,
                offset,
            } => opcode::Read::new(types::Fd(fd), ptr, len)
                .offset(offset)
                .build(),
            OpKind::Write {
                fd,
                ptr,
                len,
                offset,
            } => opcode::Write::new(types::Fd(fd), ptr, len)
                .offset(offset)
                .build(),
            OpKind::Readv {
                fd,
                iov,
                count,
                offset,
            } => opcode::Readv::new(types::Fd(fd), iov, count)
                .offset(offset)
                .build(),
            OpKind::Writev {
                fd,
                iov,
                count,
                offset,
            } => opcode::Writev::new(types::Fd(fd), iov, count)
                .offset(offset)
                .build(),
            OpKind::Fsync { fd, datasync } => {
                let flags = if datasync {
                    types::FsyncFlags::DATASYNC
                } else {
                    types::FsyncFlags::empty()
                };
                opcode::Fsync::new(types::Fd(fd)).flags(flags).build()
            }
            OpKind::Fallocate {
                fd,
                mode,
                offset,
                len,
            } => opcode::Fallocate::new(types::Fd(fd), len)
                .offset(offset)
                .mode(mode)
                .build(),
            OpKind::Accept { fd } => {
                opcode::Accept::new(types::Fd(fd), std::ptr::null_mut(), std::ptr::null_mut())
                    .flags(libc::SOCK_CLOEXEC)
                    .build()
            }
            OpKind::Recv {
                fd,
                ptr,
                len,
                wait_all,
            } => opcode::Recv::new(types::Fd(fd), ptr, len)
                .flags(if wait_all { libc::MSG_WAITALL } else { 0 })
                .build(),
            // WAITALL: the kernel keeps sending as the socket drains, so a large reply is one
            // operation rather than one per socket-buffer's worth.
            OpKind::SendMsg { fd, msg } => opcode::SendMsg::new(types::Fd(fd), msg)
                .flags((libc::MSG_NOSIGNAL | libc::MSG_WAITALL) as u32)
                .build(),
            OpKind::Timeout { ts, .. } => opcode::Timeout::new(ts).build(),
        }
    }

    /// Runs the operation with a blocking system call; returns what a CQE would (result or
    /// negative errno).
    fn run_sync(self) -> i32 {
        fn ret(r: isize) -> i32 {
            if r < 0 {
                -io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::EIO)
            } else {
                i32::try_from(r).unwrap_or(i32::MAX)
            }
        }
        // The Op that carries this kind owns the buffers and iovecs it points to, and they
        // outlive this synchronous call.
        match self {
            OpKind::Read {
                fd,
                ptr,
                len,
                offset,
            } => {
                // SAFETY: ptr is valid for len bytes of writes (owned by the op).
                ret(unsafe {
                    if offset == STREAM_OFFSET {
                        libc::read(fd, ptr.cast(), len as usize)
                    } else {
                        libc::pread(fd, ptr.cast(), len as usize, offset as libc::off_t)
                    }
                })
            }
            OpKind::Write {
                fd,
                ptr,
                len,
                offset,
            } => {
                // SAFETY: ptr is valid for len bytes of reads (owned by the op).
                ret(unsafe { libc::pwrite(fd, ptr.cast(), len as usize, offset as libc::off_t) })
            }
            OpKind::Readv {
                fd,
                iov,
                count,
                offset,
            } => {
                // SAFETY: iov points at count iovecs, each valid for writes (owned by the op).
                ret(unsafe { libc::preadv(fd, iov, count as i32, offset as libc::off_t) })
            }
            OpKind::Writev {
                fd,
                iov,
                count,
                offset,
            } => {
                // SAFETY: iov points at count iovecs, each valid for reads (owned by the op).
                ret(unsafe { libc::pwritev(fd, iov, count as i32, offset as libc::off_t) })
            }
            OpKind::Fsync { fd, datasync } => {
                // SAFETY: plain syscall on a descriptor.
                let r = unsafe {
                    if datasync {
                        libc::fdatasync(fd)
                    } else {
                        libc::fsync(fd)
                    }
                };
                ret(r as isize)
            }
            OpKind::Fallocate {
                fd,
                mode,
                offset,
                len,
            } => {
                // SAFETY: plain syscall on a descriptor.
                let r =
                    unsafe { libc::fallocate(fd, mode, offset as libc::off_t, len as libc::off_t) };
                ret(r as isize)
            }
            OpKind::Accept { fd } => {
                // SAFETY: plain syscall; null address arguments are allowed.
                let r = unsafe {
                    libc::accept4(
                        fd,
                        std::ptr::null_mut(),
                        std::ptr::null_mut(),
                        libc::SOCK_CLOEXEC,
                    )
                };
                ret(r as isize)
            }
            OpKind::Recv {
                fd,
                ptr,
                len,
                wait_all,
            } => {
                let flags = if wait_all { libc::MSG_WAITALL } else { 0 };
                // SAFETY: ptr is valid for len bytes of writes (owned by the op).
                ret(unsafe { libc::recv(fd, ptr.cast(), len as usize, flags) })
            }
            OpKind::SendMsg { fd, msg } => {
                // SAFETY: msg and the iovecs it points to are owned by the op.
                ret(unsafe { libc::sendmsg(fd, msg, libc::MSG_NOSIGNAL) })
            }
            OpKind::Timeout { .. } => unreachable!("sync timeouts are driven by park_sync"),
        }
    }
}

/// The iovecs an operation points at.
fn iovecs<'a>(iov: *const libc::iovec, count: u32) -> &'a [libc::iovec] {
    if count == 0 {
        return &[];
    }
    // SAFETY: an OpKind's iovec array is owned by the Op that carries it (or by its orphan
    // in the slab), which lives until the operation's completion, and the driver reads it
    // only before that.
    unsafe { std::slice::from_raw_parts(iov, count as usize) }
}

fn iov_bytes(iov: *const libc::iovec, count: u32) -> u64 {
    iovecs(iov, count).iter().map(|v| v.iov_len as u64).sum()
}

enum Slot {
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
struct Gathered {
    iovs: Vec<libc::iovec>,
    parts: SmallVec<[Queued; 8]>,
    len: u64,
}

/// An operation in the plug or in a gathered one: its key, what it is, its length in bytes
/// (known from its extent when it was queued), and whether it must go to a kernel worker.
type Queued = (Key, OpKind, u64, bool);

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
    Worker,
    /// On the spot, as a system call: for memory-backed files (tmpfs), whose I/O is a copy
    /// that never waits, where a ring would pay a worker's context switches for it.
    Inline,
}

/// The index the registered arena has among a ring's fixed buffers.
const FIXED_INDEX: u16 = 0;

/// A ring's registration of the arena.
#[derive(Clone, Copy)]
struct Fixed {
    arena: &'static Arena,
    /// The kernel has vectored fixed reads and writes (6.15 and later).
    vectored: bool,
}

/// Registers the process's arena with `ring`, if there is one; logs once when the kernel
/// refuses (the locked-memory limit, for one), after which I/O simply is not fixed.
fn register_arena_with(ring: &IoUring) -> Option<Fixed> {
    let arena = crate::arena::get()?;
    // SAFETY: the arena is mapped for the rest of the process's life and never unmapped, so
    // the memory stays valid for as long as the ring may use it.
    if let Err(e) = unsafe { ring.submitter().register_buffers(&[arena.iovec()]) } {
        static WARNED: OnceLock<()> = OnceLock::new();
        WARNED.get_or_init(|| {
            tracing::warn!("cannot register buffer memory with io_uring ({e}); I/O is not fixed")
        });
        return None;
    }
    let mut probe = Probe::new();
    let vectored = ring.submitter().register_probe(&mut probe).is_ok()
        && probe.is_supported(opcode::ReadvFixed::CODE)
        && probe.is_supported(opcode::WritevFixed::CODE);
    Some(Fixed { arena, vectored })
}

/// Gathered operations whose storage is kept for reuse.
const GATHERED_KEPT: usize = 32;

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

/// Which backend this thread's driver uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    IoUring,
    Sync,
}

pub(crate) struct Driver {
    ring: Option<RefCell<IoUring>>,
    ops: RefCell<Slab<Slot>>,
    /// SQEs pushed but not yet submitted.
    unsubmitted: Cell<u32>,
    /// Non-blocking parks in a row that kept queued entries back (see `park`).
    deferred_rounds: Cell<u32>,
    /// How long a park that would sleep polls for completions first (zero: never).
    poll: Cell<std::time::Duration>,
    eventfd: Arc<OwnedFd>,
    eventfd_buf: Box<Cell<u64>>,
    eventfd_armed: Cell<bool>,
    /// Timeouts of the synchronous backend (io_uring keeps its own): deadline and op key.
    sync_timers: RefCell<Vec<(std::time::Instant, Key)>>,
    /// Positioned reads and writes queued for the next enter, and whether to queue them.
    plug: RefCell<Plug<Queued>>,
    gather: Cell<bool>,
    /// The arena, when this ring registered it.
    fixed: Option<Fixed>,
    /// The boxes themselves are what is reused: a slot holds one.
    #[allow(clippy::vec_box)]
    gathered_free: RefCell<Vec<Box<Gathered>>>,
    stats: Cell<IoStats>,
    /// With `RAIDD_RING_WAIT=poll`: an eventfd the ring signals when completion work
    /// arrives, which a sleeping thread waits on in poll(2) instead of in io_uring_enter.
    wait_fd: Option<OwnedFd>,
}

impl fmt::Debug for Driver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Driver")
            .field("backend", &self.backend())
            .field("in_flight", &self.ops.borrow().len())
            .finish()
    }
}

/// Whether io_uring works here; probed once per process, logged once when it does not.
fn uring_allowed() -> bool {
    static ALLOWED: OnceLock<bool> = OnceLock::new();
    *ALLOWED.get_or_init(|| {
        if std::env::var_os("RAIDD_NO_URING").is_some_and(|v| v != "0") {
            tracing::warn!("RAIDD_NO_URING is set: using synchronous system calls for I/O");
            return false;
        }
        match IoUring::new(2) {
            Ok(_) => true,
            Err(e) => {
                tracing::warn!(
                    "io_uring is unavailable ({e}); falling back to synchronous system calls, \
                     which serialise each thread's I/O"
                );
                false
            }
        }
    })
}

/// How a thread with nothing to run waits for completions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingWait {
    /// In io_uring_enter, asking for one completion: one system call per sleep.
    Enter,
    /// In poll(2) on an eventfd registered with the ring (`RAIDD_RING_WAIT=poll`), after a
    /// non-waiting enter. One more system call per sleep, and the same results; for tools
    /// that keep a lock across system calls they do not know may block. valgrind 3.19 does
    /// that with io_uring_enter, so only this way does `raidd serve` run under callgrind.
    Poll,
}

/// The wait this process asks for (`RAIDD_RING_WAIT`: `enter`, the default, or `poll`).
fn ring_wait_default() -> RingWait {
    static WAIT: OnceLock<RingWait> = OnceLock::new();
    *WAIT.get_or_init(|| match std::env::var("RAIDD_RING_WAIT") {
        Ok(v) if v == "poll" => RingWait::Poll,
        Ok(v) if v == "enter" || v.is_empty() => RingWait::Enter,
        Ok(v) => {
            tracing::warn!("RAIDD_RING_WAIT={v:?} is neither \"enter\" nor \"poll\"; using enter");
            RingWait::Enter
        }
        Err(_) => RingWait::Enter,
    })
}

/// An eventfd registered with `ring`, for [`RingWait::Poll`]; `None` (after a warning)
/// where the kernel refuses it, and the thread then waits in io_uring_enter.
fn register_wait_fd(ring: &IoUring) -> Option<OwnedFd> {
    // SAFETY: plain syscall; the result is checked.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        tracing::warn!(
            "RAIDD_RING_WAIT=poll: no eventfd ({}); waiting in io_uring_enter",
            io::Error::last_os_error()
        );
        return None;
    }
    // SAFETY: fd is a fresh descriptor that we own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    match ring.submitter().register_eventfd(fd.as_raw_fd()) {
        Ok(()) => Some(fd),
        Err(e) => {
            tracing::warn!("RAIDD_RING_WAIT=poll: the ring refused an eventfd ({e}); waiting in io_uring_enter");
            None
        }
    }
}

/// Empties a non-blocking eventfd; whether it had been signalled.
fn take_eventfd(fd: RawFd) -> bool {
    let mut count = 0u64;
    // SAFETY: reads 8 bytes into `count`; the caller's eventfd is non-blocking.
    unsafe { libc::read(fd, (&mut count as *mut u64).cast(), 8) == 8 }
}

/// Whether this process gathers contiguous file I/O (`RAIDD_NO_GATHER=1` turns it off, to
/// compare).
fn gather_default() -> bool {
    static GATHER: OnceLock<bool> = OnceLock::new();
    *GATHER.get_or_init(|| std::env::var_os("RAIDD_NO_GATHER").is_none_or(|v| v == "0"))
}

/// A ring for this thread. Only this thread submits, and completions are needed only when
/// it asks for them, so the kernel may skip the cross-CPU interrupts and run completion work
/// when the thread next enters (6.1+); older kernels get a plain ring.
fn new_ring() -> io::Result<IoUring> {
    IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(RING_ENTRIES)
        .or_else(|_| IoUring::builder().setup_coop_taskrun().build(RING_ENTRIES))
        .or_else(|_| IoUring::builder().build(RING_ENTRIES))
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
        if let Some(e) = kind.extent() {
            self.count(|s| s.file_ops += 1);
            if self.gather.get() {
                self.plug.borrow_mut().add(e, (key, kind, e.len, worker));
                return;
            }
        }
        self.push_op(key, kind, worker);
    }

    /// Pushes `kind` for `key`, as a fixed-buffer operation where its memory allows.
    fn push_op(&self, key: Key, kind: OpKind, worker: bool) {
        let fixed = self.fixed.and_then(|f| kind.fixed_sqe(f));
        if fixed.is_some() {
            self.count(|s| s.fixed += 1);
        }
        let mut entry = fixed.unwrap_or_else(|| kind.sqe());
        if worker {
            entry = entry.flags(squeue::Flags::ASYNC);
        }
        self.push(&entry.user_data(key.to_u64()));
    }

    /// Pushes what the plug holds: a run of one operation as itself, a longer run as one
    /// vectored operation over all its parts' buffers.
    fn flush_plug(&self) {
        if self.plug.borrow().is_empty() {
            return;
        }
        let mut runs = self.plug.borrow_mut().take();
        for run in runs.drain(..) {
            if let [(key, kind, _, worker)] = run.parts[..] {
                self.push_op(key, kind, worker);
                continue;
            }
            // The parts are on one file: they all go the way its first does.
            let worker = run.parts[0].3;
            let mut g = self.gathered_free.borrow_mut().pop().unwrap_or_default();
            for &(_, kind, _, _) in &run.parts {
                kind.push_iovecs(&mut g.iovs);
            }
            debug_assert_eq!(g.iovs.len(), run.iovs);
            g.len = run.end - run.start;
            let (iov, count) = (g.iovs.as_ptr(), g.iovs.len() as u32);
            let kind = if run.write {
                OpKind::Writev {
                    fd: run.fd,
                    iov,
                    count,
                    offset: run.start,
                }
            } else {
                OpKind::Readv {
                    fd: run.fd,
                    iov,
                    count,
                    offset: run.start,
                }
            };
            let parts = run.parts.len() as u64;
            g.parts.extend(run.parts);
            // The iovec array is the Vec's heap block, which stays put when the box moves.
            let key = self.ops.borrow_mut().insert(Slot::Gathered(g));
            self.push_op(key, kind, worker);
            self.count(|s| {
                s.gathered += 1;
                s.gathered_parts += parts;
            });
        }
        self.plug.borrow_mut().give_back(runs);
    }

    /// Completes a gathered operation's parts: each with its own length when the whole
    /// came back, otherwise by issuing them again one by one, so that an error or a short
    /// transfer reaches exactly the parts it concerns.
    fn complete_gathered(&self, mut g: Box<Gathered>, res: i32) {
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

    /// Pushes an SQE, flushing the queue to the kernel if it is full.
    fn push(&self, entry: &squeue::Entry) {
        let ring = self.ring.as_ref().expect("push without a ring");
        loop {
            let mut ring = ring.borrow_mut();
            // SAFETY: every pointer in `entry` refers to memory owned by an Op (or by the
            // driver for the eventfd read) that stays alive until the CQE is reaped.
            let pushed = unsafe { ring.submission().push(entry).is_ok() };
            if pushed {
                self.unsubmitted.set(self.unsubmitted.get() + 1);
                return;
            }
            drop(ring);
            self.submit(0);
        }
    }

    /// Submits queued SQEs and waits for a completion, at most `limit` (the end of a
    /// driver, which must not wait forever).
    fn submit_wait_for(&self, limit: std::time::Duration) {
        let Some(ring) = self.ring.as_ref() else {
            return;
        };
        self.flush_plug();
        let ts = types::Timespec::from(limit);
        let args = types::SubmitArgs::new().timespec(&ts);
        // ETIME (nothing completed in time) and EINTR just mean another round.
        if ring.borrow().submitter().submit_with_args(1, &args).is_ok() {
            self.unsubmitted.set(0);
        }
    }

    /// Submits queued SQEs, waiting for at least `want` completions.
    fn submit(&self, want: usize) {
        let Some(ring) = self.ring.as_ref() else {
            return;
        };
        self.flush_plug();
        if let (true, Some(fd)) = (want > 0, &self.wait_fd) {
            self.wait_in_poll(ring, fd);
            return;
        }
        loop {
            let r = ring.borrow().submit_and_wait(want);
            match r {
                Ok(_) => {
                    self.unsubmitted.set(0);
                    return;
                }
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                    // Completion queue full: make room and try again.
                    self.reap();
                    if want > 0 {
                        return;
                    }
                }
                Err(e) => panic!("io_uring_enter failed: {e}"),
            }
        }
    }

    /// One io_uring_enter that submits what is queued and runs the completion work the
    /// kernel deferred to this thread, without waiting for any (IORING_ENTER_GETEVENTS
    /// with no minimum: with deferred task work, completions arrive only in such an enter).
    fn enter_nowait(&self, ring: &RefCell<IoUring>) -> io::Result<()> {
        /// io_uring_enter's IORING_ENTER_GETEVENTS.
        const ENTER_GETEVENTS: u32 = 1;
        let n = self.unsubmitted.get();
        // SAFETY: a plain io_uring_enter on our own ring with no argument structure; the
        // entries it submits were pushed with their memory owned by their ops.
        let done = unsafe {
            ring.borrow()
                .submitter()
                .enter::<libc::sigset_t>(n, 0, ENTER_GETEVENTS, None)
        }?;
        self.unsubmitted.set(n.saturating_sub(done as u32));
        Ok(())
    }

    /// [`RingWait::Poll`]: submits and runs completion work in a non-waiting enter, and
    /// sleeps in poll(2) until the ring signals `fd` or another thread writes the wake
    /// eventfd, as long as no completion is there and no wake came.
    ///
    /// The wake eventfd is watched here, not read through the ring: the kernel (seen on
    /// 6.18) signals a registered eventfd from inside another eventfd's wake-up only once,
    /// so a ring read of the wake eventfd would wake this thread the first time and never
    /// again. Both eventfds are emptied before the enter, so what arrives after it ends
    /// the poll at once and nothing is lost; a wake taken from the counter returns, so the
    /// executor takes in the tasks it woke.
    fn wait_in_poll(&self, ring: &RefCell<IoUring>, fd: &OwnedFd) {
        loop {
            take_eventfd(fd.as_raw_fd());
            let woken = take_eventfd(self.eventfd.as_raw_fd());
            match self.enter_nowait(ring) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                // Completion queue full: there is something to reap.
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => return,
                Err(e) => panic!("io_uring_enter failed: {e}"),
            }
            if woken || !ring.borrow_mut().completion().is_empty() {
                return;
            }
            let mut pfds = [fd.as_raw_fd(), self.eventfd.as_raw_fd()].map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            });
            // SAFETY: pfds is a valid array of two pollfds for the duration of the call.
            // EINTR and the rest need no handling: the loop enters again either way.
            unsafe { libc::poll(pfds.as_mut_ptr(), 2, -1) };
        }
    }

    /// How this thread waits for completions: [`RingWait::Poll`] only where asked for and
    /// the ring took the eventfd.
    pub(crate) fn ring_wait(&self) -> RingWait {
        if self.wait_fd.is_some() {
            RingWait::Poll
        } else {
            RingWait::Enter
        }
    }

    /// Has the ring read the wake eventfd, so that a wake from another thread completes
    /// it (with [`RingWait::Poll`], poll(2) watches the eventfd instead).
    fn arm_eventfd(&self) {
        if self.eventfd_armed.get() || self.ring.is_none() || self.wait_fd.is_some() {
            return;
        }
        let entry = opcode::Read::new(
            types::Fd(self.eventfd.as_raw_fd()),
            self.eventfd_buf.as_ptr().cast(),
            8,
        )
        .build()
        .user_data(EVENTFD_TOKEN);
        self.push(&entry);
        self.eventfd_armed.set(true);
    }

    /// Sets the busy-poll window of this thread's parks (see [`crate::set_poll`]).
    pub(crate) fn set_poll(&self, d: std::time::Duration) {
        self.poll.set(d);
    }

    /// Submits what is queued and spins on non-waiting enters (which also run the deferred
    /// task work that posts completions) for up to `window`; true once something completed.
    fn poll_for(&self, window: std::time::Duration) -> bool {
        let Some(ring) = self.ring.as_ref() else {
            return false;
        };
        let start = std::time::Instant::now();
        self.flush_plug();
        loop {
            // An error here is met again by the next enter: the spin just goes on.
            let _ = self.enter_nowait(ring);
            let ready = !ring.borrow_mut().completion().is_empty();
            if ready {
                self.reap();
                return true;
            }
            if start.elapsed() >= window {
                return false;
            }
            std::hint::spin_loop();
        }
    }

    /// Hands queued work to the kernel and processes completions. With `block`, sleeps until
    /// at least one completion (or a wake from another thread) arrives.
    pub(crate) fn park(&self, block: bool) {
        if self.ring.is_none() {
            self.park_sync(block);
            return;
        }
        if block {
            self.arm_eventfd();
            self.deferred_rounds.set(0);
            if !self.poll.get().is_zero() && self.poll_for(self.poll.get()) {
                return;
            }
        } else if self.queued() == 0 || self.deferred_rounds.get() < MAX_DEFERRED_ROUNDS {
            // Between rounds of ready tasks, queued entries wait a little so they go out
            // with the next ones (a request's next receive with its reply's send) in one
            // enter; nothing queued means no enter at all (with deferred task work,
            // completions only arrive in a waiting enter anyway). A bounded number of
            // rounds keeps tasks that yield in a loop from holding submissions back.
            if self.queued() > 0 {
                self.deferred_rounds.set(self.deferred_rounds.get() + 1);
            }
            self.reap();
            return;
        }
        self.deferred_rounds.set(0);
        self.submit(usize::from(block));
        self.reap();
    }

    /// Submits what is queued and takes in every completion the kernel has, without
    /// waiting (with deferred task work, completions only arrive in an enter that asks for
    /// events).
    pub(crate) fn poll_nowait(&self) {
        let Some(ring) = self.ring.as_ref() else {
            self.park_sync(false);
            return;
        };
        self.flush_plug();
        loop {
            match self.enter_nowait(ring) {
                Ok(()) => break,
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                    self.reap();
                    continue;
                }
                Err(e) => panic!("io_uring_enter failed: {e}"),
            }
        }
        self.reap();
    }

    /// The synchronous backend completes I/O at submission, so parking only waits for the
    /// next timer or a wake from another thread.
    fn park_sync(&self, block: bool) {
        let now = std::time::Instant::now();
        let next = self.sync_timers.borrow().iter().map(|(d, _)| *d).min();
        let timeout_ms = match (block, next) {
            (false, _) => 0,
            (true, None) => -1,
            (true, Some(d)) => {
                let ms = d.saturating_duration_since(now).as_micros().div_ceil(1000);
                i32::try_from(ms).unwrap_or(i32::MAX)
            }
        };
        if timeout_ms != 0 {
            let mut pfd = libc::pollfd {
                fd: self.eventfd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: pfd is a valid pollfd for the duration of the call.
            unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
            take_eventfd(self.eventfd.as_raw_fd());
        }
        let now = std::time::Instant::now();
        let expired: Vec<Key> = {
            let mut timers = self.sync_timers.borrow_mut();
            let keys = timers
                .iter()
                .filter(|(d, _)| *d <= now)
                .map(|(_, k)| *k)
                .collect();
            timers.retain(|(d, _)| *d > now);
            keys
        };
        for key in expired {
            self.complete(key.to_u64(), -libc::ETIME);
        }
    }

    fn reap(&self) {
        let Some(ring) = self.ring.as_ref() else {
            return;
        };
        let mut done: smallvec::SmallVec<[(u64, i32); 32]> = smallvec::SmallVec::new();
        loop {
            {
                let mut ring = ring.borrow_mut();
                let mut cq = ring.completion();
                cq.sync();
                for cqe in &mut cq {
                    done.push((cqe.user_data(), cqe.result()));
                    if done.len() == done.capacity() {
                        break;
                    }
                }
            }
            if done.is_empty() {
                return;
            }
            for (user_data, res) in done.drain(..) {
                self.complete(user_data, res);
            }
        }
    }

    fn complete(&self, user_data: u64, res: i32) {
        if user_data == EVENTFD_TOKEN {
            self.eventfd_armed.set(false);
            return;
        }
        if user_data == CANCEL_TOKEN {
            return;
        }
        let key = Key::from_u64(user_data);
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
            let deadline = std::time::Instant::now() + duration;
            driver.sync_timers.borrow_mut().push((deadline, key));
            OpState::InFlight(key)
        } else {
            OpState::Ready(kind.run_sync())
        };
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
                    self.driver
                        .sync_timers
                        .borrow_mut()
                        .retain(|(_, k)| *k != key);
                    self.driver.ops.borrow_mut().remove(key);
                    return;
                }
                // Nobody wants the result: ask the kernel to stop early (a timeout would
                // otherwise hold its slot, and runtime shutdown, until it expires).
                let cancel = opcode::AsyncCancel::new(key.to_u64())
                    .build()
                    .user_data(CANCEL_TOKEN);
                self.driver.push(&cancel);
            }
            Slot::Orphan(_) | Slot::Gathered(_) => unreachable!("op orphaned twice"),
        }
    }
}

/// Converts a CQE result into an `io::Result` of the byte count.
pub(crate) fn cqe_result(res: i32) -> io::Result<usize> {
    if res < 0 {
        Err(io::Error::from_raw_os_error(-res))
    } else {
        Ok(res as usize)
    }
}
