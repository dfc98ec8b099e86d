//! The operations a driver runs, as both backends see them: what the kernel is asked to do,
//! and the memory it reads or writes, which the `Op` carrying it owns.

use std::os::fd::RawFd;

use io_uring::types;

use crate::merge::Extent;

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
    /// A device's own command (IORING_OP_URING_CMD with 16 bytes of command: ublk's I/O
    /// commands). Only a ring can carry it.
    UringCmd {
        fd: RawFd,
        cmd_op: u32,
        cmd: [u8; 16],
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
    pub(super) fn positioned(self) -> bool {
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
    pub(super) fn extent(self) -> Option<Extent> {
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
    pub(super) fn push_iovecs(self, out: &mut Vec<libc::iovec>) {
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
}

/// The iovecs an operation points at.
pub(super) fn iovecs<'a>(iov: *const libc::iovec, count: u32) -> &'a [libc::iovec] {
    if count == 0 {
        return &[];
    }
    // SAFETY: an OpKind's iovec array is owned by the Op that carries it (or by its orphan
    // in the slab), which lives until the operation's completion, and the driver reads it
    // only before that.
    unsafe { std::slice::from_raw_parts(iov, count as usize) }
}

pub(super) fn iov_bytes(iov: *const libc::iovec, count: u32) -> u64 {
    iovecs(iov, count).iter().map(|v| v.iov_len as u64).sum()
}
