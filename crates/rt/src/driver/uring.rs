//! The io_uring backend: one ring per thread, submissions batched until the thread parks,
//! positioned file I/O gathered in the plug, fixed buffers where the arena is registered,
//! and the ways a thread with nothing to run waits for completions.

use std::cell::RefCell;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::OnceLock;

use io_uring::{opcode, squeue, types, IoUring, Probe};

use super::op::{iovecs, OpKind};
use super::state::{take_eventfd, Driver, Fixed, Slot};
use crate::slab::Key;

/// user_data of the eventfd read that lets other threads wake a sleeping driver. A slab key
/// never has index 0xffff_ffff, so this cannot collide.
pub(super) const EVENTFD_TOKEN: u64 = u64::MAX;

/// user_data of cancellation requests; their completions carry nothing we need.
pub(super) const CANCEL_TOKEN: u64 = u64::MAX - 1;

const RING_ENTRIES: u32 = 256;

/// Busy rounds for which queued submissions may wait for the next enter (see `Driver::park`).
const MAX_DEFERRED_ROUNDS: u32 = 2;

/// The index the registered arena has among a ring's fixed buffers.
const FIXED_INDEX: u16 = 0;

/// Registers the process's arena with `ring`, if there is one; logs once when the kernel
/// refuses (the locked-memory limit, for one), after which I/O simply is not fixed.
pub(super) fn register_arena_with(ring: &IoUring) -> Option<Fixed> {
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

/// Whether io_uring works here; probed once per process, logged once when it does not.
pub(super) fn uring_allowed() -> bool {
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
pub(super) fn ring_wait_default() -> RingWait {
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
pub(super) fn register_wait_fd(ring: &IoUring) -> Option<OwnedFd> {
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

/// A ring for this thread. Only this thread submits, and completions are needed only when
/// it asks for them, so the kernel may skip the cross-CPU interrupts and run completion work
/// when the thread next enters (6.1+); older kernels get a plain ring.
pub(super) fn new_ring() -> io::Result<IoUring> {
    IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(RING_ENTRIES)
        .or_else(|_| IoUring::builder().setup_coop_taskrun().build(RING_ENTRIES))
        .or_else(|_| IoUring::builder().build(RING_ENTRIES))
}

impl OpKind {
    /// The operation as a fixed-buffer one when every byte it transfers lies in the
    /// registered arena (and, for vectored ones, the kernel has vectored fixed operations).
    pub(super) fn fixed_sqe(self, f: Fixed) -> Option<squeue::Entry> {
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

    pub(super) fn sqe(self) -> squeue::Entry {
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
            OpKind::UringCmd { fd, cmd_op, cmd } => opcode::UringCmd16::new(types::Fd(fd), cmd_op)
                .cmd(cmd)
                .build(),
            OpKind::Timeout { ts, .. } => opcode::Timeout::new(ts).build(),
        }
    }
}

impl Driver {
    /// Pushes `kind` for `key`, as a fixed-buffer operation where its memory allows.
    pub(super) fn push_op(&self, key: Key, kind: OpKind, worker: bool) {
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
    pub(super) fn flush_plug(&self) {
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

    /// Pushes an SQE, flushing the queue to the kernel if it is full.
    pub(super) fn push(&self, entry: &squeue::Entry) {
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
    pub(super) fn submit_wait_for(&self, limit: std::time::Duration) {
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
    pub(super) fn submit(&self, want: usize) {
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
    pub(super) fn enter_nowait(&self, ring: &RefCell<IoUring>) -> io::Result<()> {
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
    pub(super) fn wait_in_poll(&self, ring: &RefCell<IoUring>, fd: &OwnedFd) {
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
    pub(super) fn arm_eventfd(&self) {
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
    pub(super) fn poll_for(&self, window: std::time::Duration) -> bool {
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

    pub(super) fn reap(&self) {
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

    /// [`Driver::park`] with a ring.
    pub(super) fn park_ring(&self, block: bool) {
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

    /// [`Driver::poll_nowait`] with a ring.
    pub(super) fn poll_ring_nowait(&self) {
        let Some(ring) = self.ring.as_ref() else {
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

    /// Asks the kernel to stop the operation of `key` early (its completion then comes
    /// back with an error, or not at all if it completed meanwhile).
    pub(super) fn cancel(&self, key: Key) {
        let cancel = opcode::AsyncCancel::new(key.to_u64())
            .build()
            .user_data(CANCEL_TOKEN);
        self.push(&cancel);
    }
}
