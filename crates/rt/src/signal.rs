//! Waiting for signals as a future: the signals are blocked for the process and read from a
//! signalfd through the thread's driver, so a daemon's main loop can `select` on SIGTERM
//! next to its sockets.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;

use crate::driver::{cqe_result, Op, OpKind, STREAM_OFFSET};
use crate::executor::driver;

/// A set of signals delivered to [`Signals::recv`] instead of their default action.
#[derive(Debug)]
pub struct Signals {
    fd: Arc<OwnedFd>,
}

impl Signals {
    /// Blocks `signals` in the calling thread and opens a signalfd for them. Call it before
    /// starting other threads: they inherit the mask, so no thread takes the default action.
    pub fn new(signals: &[i32]) -> io::Result<Signals> {
        // SAFETY: sigset_t is plain data; sigemptyset initialises it.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` is a valid sigset_t we own.
        unsafe { libc::sigemptyset(&mut set) };
        for &s in signals {
            // SAFETY: as above; an invalid number is reported, not undefined.
            if unsafe { libc::sigaddset(&mut set, s) } != 0 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{s} is not a signal number"),
                ));
            }
        }
        // SAFETY: `set` is initialised; the old mask is not wanted.
        let r = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
        if r != 0 {
            return Err(io::Error::from_raw_os_error(r));
        }
        // SAFETY: creates a new descriptor from an initialised set.
        let fd = unsafe { libc::signalfd(-1, &set, libc::SFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Signals {
            // SAFETY: signalfd returned a fresh descriptor that we own.
            fd: Arc::new(unsafe { OwnedFd::from_raw_fd(fd) }),
        })
    }

    /// The next signal's number. Dropping the future cancels the read; a signal that arrives
    /// just as it is cancelled may be consumed by it, so keep one `recv` alive (e.g. in a
    /// dedicated task) rather than re-creating it in a `select` loop. With the synchronous backend the read blocks the thread
    /// until a signal arrives, so there it is only useful once nothing else needs to run.
    pub async fn recv(&self) -> io::Result<i32> {
        const SIZE: usize = std::mem::size_of::<libc::signalfd_siginfo>();
        let mut buf = vec![0u8; SIZE].into_boxed_slice();
        let kind = OpKind::Read {
            fd: self.fd.as_raw_fd(),
            ptr: buf.as_mut_ptr(),
            len: SIZE as u32,
            offset: STREAM_OFFSET,
        };
        // SAFETY: the pointer is into `buf`'s heap allocation, owned by the op; the
        // descriptor is kept open by the Arc the op owns.
        let op = unsafe { Op::start(&driver(), kind, (buf, self.fd.clone())) };
        let (res, (buf, _fd)) = op.await;
        let n = cqe_result(res)?;
        if n < 4 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "short read from signalfd",
            ));
        }
        // ssi_signo is the first field (u32, native endian).
        Ok(u32::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]) as i32)
    }
}
