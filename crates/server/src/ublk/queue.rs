//! One ublk queue on one worker thread: a task per tag, each fetching a request through the
//! worker's ring (the same ring its member I/O goes through), serving it on the device's
//! extent, and committing the result with the fetch of its next request. A tag's buffer is
//! its own for the device's life: the kernel copies a write's data into it before the
//! fetch completes, and a read's data out of it at the commit.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

use raidd_engine::Extent;
use raidd_rt::{AlignedBuf, IoVec, IoVecMut, SharedBuf};
use raidd_ublk::abi::{self, IoCmd, IoDesc, IoOp, IO_DESC_LEN};
use raidd_ublk::request::{self, Action, Limits};

/// A queue's descriptors, mapped read-only from /dev/ublkcN: the kernel writes a tag's
/// descriptor before it completes the tag's fetch.
#[derive(Debug)]
pub struct Descs {
    ptr: *const u8,
    len: usize,
    depth: u16,
}

// SAFETY: the mapping is read-only shared memory that lives until Drop; reading it from any
// thread is what the kernel expects (one queue's tags are read on its worker only).
unsafe impl Send for Descs {}
// SAFETY: as above: only reads, of memory the kernel writes before completing a fetch.
unsafe impl Sync for Descs {}

impl Descs {
    /// Maps queue `q`'s descriptors of `cdev`.
    pub fn map(cdev: &OwnedFd, q: u16, depth: u16) -> io::Result<Descs> {
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let len = abi::desc_area_len(depth, page);
        let offset = abi::desc_offset(q, page);
        // SAFETY: a new read-only shared mapping of the device at the offset the driver
        // gives queue q; nothing else refers to its address until this returns it.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                cdev.as_raw_fd(),
                offset as libc::off_t,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Descs {
            ptr: ptr.cast(),
            len,
            depth,
        })
    }

    /// The descriptor of `tag`'s request.
    pub fn get(&self, tag: u16) -> IoDesc {
        assert!(tag < self.depth, "tag {tag} of a queue of {}", self.depth);
        let mut b = [0u8; IO_DESC_LEN];
        // SAFETY: tag < depth, so the descriptor lies inside the mapping; the kernel wrote
        // it before completing the fetch this follows, and does not touch it until the
        // tag's commit.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.ptr.add(usize::from(tag) * IO_DESC_LEN),
                b.as_mut_ptr(),
                IO_DESC_LEN,
            )
        };
        IoDesc::decode(&b)
    }
}

impl Drop for Descs {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.ptr.cast_mut().cast(), self.len) };
    }
}

/// What a queue's tags share.
#[derive(Debug)]
pub struct Queue {
    /// /dev/ublkbN's number, for the log.
    pub id: u32,
    pub q: u16,
    pub depth: u16,
    pub max_io: u32,
    pub cdev: Arc<OwnedFd>,
    pub descs: Descs,
    pub extent: Extent,
    pub limits: Limits,
}

/// Serves the queue until the device stops (every tag's fetch completes with ABORT).
pub async fn run(queue: Arc<Queue>) {
    let tags: Vec<_> = (0..queue.depth)
        .map(|tag| raidd_rt::spawn_local(tag_loop(queue.clone(), tag)))
        .collect();
    for t in tags {
        t.await;
    }
    tracing::debug!(device = queue.id, queue = queue.q, "ublk queue stopped");
}

async fn tag_loop(queue: Arc<Queue>, tag: u16) {
    let mut buf = AlignedBuf::zeroed(queue.max_io as usize);
    let mut op = IoOp::Fetch;
    let mut result = 0;
    loop {
        let cmd = IoCmd {
            queue: queue.q,
            tag,
            result,
            addr: buf.as_ptr() as u64,
        };
        let (res, back) = raidd_rt::cmd::uring_cmd16(&queue.cdev, op.op(), cmd.encode(), buf).await;
        buf = back;
        if res == abi::IO_RES_ABORT {
            return;
        }
        if res != abi::IO_RES_OK {
            tracing::error!(
                device = queue.id,
                queue = queue.q,
                tag,
                "ublk {op:?} failed: {}",
                io::Error::from_raw_os_error(-res)
            );
            return;
        }
        let desc = queue.descs.get(tag);
        (result, buf) = match request::decode(&desc, &queue.limits) {
            Ok(action) => serve(&queue, action, buf).await,
            Err(e) => {
                tracing::warn!(device = queue.id, ?desc, "ublk request refused");
                (e, buf)
            }
        };
        op = IoOp::CommitAndFetch;
    }
}

/// The engine's error as the block layer sees it.
fn errno(e: &raidd_engine::Error) -> i32 {
    let errno = match e.kind() {
        raidd_engine::ErrorKind::ReadOnly => -libc::EROFS,
        _ => -libc::EIO,
    };
    debug_assert!(errno < 0, "a failure is a negative errno");
    errno
}

/// The buffer back from a request's windows (a copy in a fresh one if someone still holds
/// a window, so the kernel is never given memory another party may write).
fn reclaim(shared: SharedBuf, len: usize) -> AlignedBuf {
    match shared.try_into_inner() {
        Ok(b) => b,
        Err(shared) => {
            let mut fresh = AlignedBuf::zeroed(len);
            if let Ok(w) = shared.slice(0..shared.len()) {
                let n = w.len().min(len);
                fresh[..n].copy_from_slice(&w.as_slice()[..n]);
            }
            debug_assert_eq!(fresh.len(), len, "a tag's buffer keeps its size");
            fresh
        }
    }
}

/// Serves one request; the result to commit (bytes done, or a negative errno) and the
/// tag's buffer.
async fn serve(queue: &Queue, action: Action, buf: AlignedBuf) -> (i32, AlignedBuf) {
    let extent = &queue.extent;
    let max = queue.max_io as usize;
    match action {
        Action::Read { offset, len } => {
            debug_assert!(
                len as usize <= max && len as usize <= buf.len(),
                "within the tag's buffer"
            );
            let shared = SharedBuf::new(buf);
            let mut iov = IoVecMut::new();
            match shared.slice_mut(0..len as usize) {
                Ok(w) => iov.push(w),
                Err(_) => return (-libc::EIO, reclaim(shared, max)),
            }
            let (r, iov) = extent.read(offset, iov).await;
            drop(iov);
            let buf = reclaim(shared, max);
            match r {
                Ok(()) => (len as i32, buf),
                Err(e) => {
                    tracing::warn!(device = queue.id, offset, len, "ublk read failed: {e}");
                    (errno(&e), buf)
                }
            }
        }
        Action::Write { offset, len, fua } => {
            debug_assert!(
                len as usize <= max && len as usize <= buf.len(),
                "within the tag's buffer"
            );
            let shared = SharedBuf::new(buf);
            let mut iov = IoVec::new();
            match shared.slice(0..len as usize) {
                Ok(w) => iov.push(w),
                Err(_) => return (-libc::EIO, reclaim(shared, max)),
            }
            let mut r = extent.write(offset, iov).await;
            if r.is_ok() && fua {
                r = extent.flush_range(offset, u64::from(len)).await;
            }
            let buf = reclaim(shared, max);
            match r {
                Ok(()) => (len as i32, buf),
                Err(e) => {
                    tracing::warn!(device = queue.id, offset, len, "ublk write failed: {e}");
                    (errno(&e), buf)
                }
            }
        }
        Action::Flush => (status(extent.flush().await, queue), buf),
        Action::Discard { offset, len } => (status(extent.discard(offset, len).await, queue), buf),
        Action::WriteZeroes { offset, len, .. } => {
            // Zeros are written, whatever the level: a discarded range may read back old
            // data, and WRITE_ZEROES promises zeros.
            (
                status(write_zeroes(extent, offset, len, max).await, queue),
                buf,
            )
        }
    }
}

fn status(r: raidd_engine::Result<()>, queue: &Queue) -> i32 {
    match r {
        Ok(()) => 0,
        Err(e) => {
            tracing::warn!(device = queue.id, "ublk request failed: {e}");
            errno(&e)
        }
    }
}

/// Writes zeros over `len` bytes at `offset`, a piece of at most `max` bytes at a time.
async fn write_zeroes(
    extent: &Extent,
    offset: u64,
    len: u64,
    max: usize,
) -> raidd_engine::Result<()> {
    let zeros = SharedBuf::new(AlignedBuf::zeroed(max.min(len as usize)));
    let mut done = 0u64;
    while done < len {
        let n = (len - done).min(zeros.len() as u64) as usize;
        let mut iov = IoVec::new();
        iov.push(zeros.slice(0..n).map_err(|e| {
            raidd_engine::Error::new(
                raidd_engine::ErrorKind::Io,
                format!("internal buffer error: {e}"),
            )
        })?);
        extent.write(offset + done, iov).await?;
        done += n as u64;
    }
    debug_assert_eq!(done, len, "every byte zeroed");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    /// The descriptors are read where the driver puts them: queue q's at q times the
    /// largest queue's area, tag t's at t descriptors into it (a file stands in for
    /// /dev/ublkcN: the same mmap, the same offsets).
    #[test]
    fn descriptors_are_read_from_their_queue_and_tag() {
        let path = std::env::temp_dir().join(format!("raidd-descs-{}", std::process::id()));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .expect("scratch file");
        let _ = std::fs::remove_file(&path);
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let want = |q: u16, tag: u16| IoDesc {
            op_flags: u32::from(q) << 8 | 1,
            nr_sectors: u32::from(tag) + 1,
            start_sector: u64::from(q) * 1000 + u64::from(tag),
            addr: 0,
        };
        for q in 0..3u16 {
            for tag in [0u16, 5, 63] {
                let at = abi::desc_offset(q, page) + u64::from(tag) * IO_DESC_LEN as u64;
                f.write_all_at(&want(q, tag).encode(), at).expect("write");
            }
        }
        let fd = OwnedFd::from(f);
        for q in 0..3u16 {
            let d = Descs::map(&fd, q, 64).expect("map");
            for tag in [0u16, 5, 63] {
                assert_eq!(d.get(tag), want(q, tag), "queue {q} tag {tag}");
            }
        }
    }
}
