//! The blocking backend, where io_uring is unavailable: each operation is a system call made
//! when it starts, and only timeouts wait, on the thread's timer list.

use std::io;
use std::os::fd::AsRawFd;

use super::op::{OpKind, STREAM_OFFSET};
use super::state::{take_eventfd, Driver};
use crate::slab::Key;

/// What a CQE would carry for a system call's return value `r`: the result or the
/// negative errno.
fn ret(r: isize) -> i32 {
    if r < 0 {
        -io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)
    } else {
        i32::try_from(r).unwrap_or(i32::MAX)
    }
}

impl OpKind {
    /// Runs the operation with a blocking system call; returns what a CQE would (result or
    /// negative errno).
    pub(super) fn run_sync(self) -> i32 {
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
            OpKind::Accept { .. } | OpKind::Recv { .. } | OpKind::SendMsg { .. } => {
                ret(self.run_socket())
            }
            // Device commands exist only as ring operations.
            OpKind::UringCmd { .. } => -libc::EOPNOTSUPP,
            OpKind::Timeout { .. } => unreachable!("sync timeouts are driven by park_sync"),
        }
    }

    /// The socket operations, as system calls: the call's return value.
    fn run_socket(self) -> isize {
        match self {
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
                r as isize
            }
            OpKind::Recv {
                fd,
                ptr,
                len,
                wait_all,
            } => {
                let flags = if wait_all { libc::MSG_WAITALL } else { 0 };
                // SAFETY: ptr is valid for len bytes of writes (owned by the op).
                unsafe { libc::recv(fd, ptr.cast(), len as usize, flags) }
            }
            OpKind::SendMsg { fd, msg } => {
                // SAFETY: msg and the iovecs it points to are owned by the op.
                unsafe { libc::sendmsg(fd, msg, libc::MSG_NOSIGNAL) }
            }
            _ => unreachable!("not a socket operation"),
        }
    }
}

impl Driver {
    /// The synchronous backend completes I/O at submission, so parking only waits for the
    /// next timer or a wake from another thread.
    pub(super) fn park_sync(&self, block: bool) {
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

    /// Starts a timeout of the synchronous backend: `key` completes at `deadline`.
    pub(super) fn add_sync_timer(&self, deadline: std::time::Instant, key: Key) {
        self.sync_timers.borrow_mut().push((deadline, key));
    }

    /// Drops the timeout of `key` (its future is gone).
    pub(super) fn forget_sync_timer(&self, key: Key) {
        self.sync_timers.borrow_mut().retain(|(_, k)| *k != key);
    }
}
