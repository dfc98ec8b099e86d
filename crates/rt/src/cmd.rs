//! Device commands through the thread's ring (IORING_OP_URING_CMD): how a ublk server
//! fetches and completes block requests on the same ring as its other I/O.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

use crate::driver::{Dispatch, Op, OpKind};
use crate::executor::driver;

/// Sends command `cmd_op` with its 16 bytes `cmd` to the device `fd` and waits for its
/// completion: the CQE's result (a negative errno is returned as it is, for the caller to
/// read in the device's terms). `keep` is memory the command names (a buffer whose address
/// is in `cmd`): it is held until the kernel completes the command, even if this future is
/// dropped first, and handed back. Threads without a ring get EOPNOTSUPP.
pub async fn uring_cmd16<T: 'static>(
    fd: &Arc<OwnedFd>,
    cmd_op: u32,
    cmd: [u8; 16],
    keep: T,
) -> (i32, T) {
    let kind = OpKind::UringCmd {
        fd: fd.as_raw_fd(),
        cmd_op,
        cmd,
    };
    // SAFETY: the memory the command names is `keep`'s, which the op owns until its
    // completion (or its orphan does, if this future is dropped); the descriptor is kept
    // open by the Arc the op owns.
    let op = unsafe { Op::start_on(&driver(), Dispatch::Ring, kind, (fd.clone(), keep)) };
    let (res, (_, keep)) = op.await;
    (res, keep)
}

/// Whether this thread's driver can carry device commands.
pub fn supported() -> bool {
    driver().backend() == crate::Backend::IoUring
}

/// A negative CQE result as an error.
pub fn check(res: i32) -> io::Result<i32> {
    if res < 0 {
        Err(io::Error::from_raw_os_error(-res))
    } else {
        Ok(res)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file without commands of its own answers EOPNOTSUPP, through the ring or the
    /// blocking backend alike, and the kept memory comes back.
    #[test]
    fn commands_reach_the_device_and_keep_their_memory() {
        crate::block_on(async {
            let path = std::env::temp_dir().join(format!("raidd-cmd-{}", std::process::id()));
            let f = std::fs::File::create(&path).expect("a scratch file");
            let _ = std::fs::remove_file(&path);
            let fd = Arc::new(OwnedFd::from(f));
            let (res, kept) = uring_cmd16(&fd, 0xc010_7520, [0; 16], vec![7u8; 4]).await;
            assert_eq!(res, -libc::EOPNOTSUPP);
            assert_eq!(kept, vec![7u8; 4]);
            assert!(check(res).is_err() && check(3).is_ok());
        });
    }
}
