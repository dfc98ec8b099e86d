//! Files and block devices driven through the thread's driver.

use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;

use crate::buf::{AlignedBuf, BufSlice, BufSliceMut, IoVec, IoVecMut};
use crate::driver::{cqe_result, Dispatch, Op, OpKind, WORKER_MAX_OP};
use crate::executor::driver;
use crate::recycle;

pub use crate::sizes::IOV_MAX;

/// A file handle for asynchronous positioned I/O. Cloning is cheap; the descriptor stays open
/// while any clone or any in-flight operation on it exists, so a queued SQE never refers to a
/// closed (and possibly reused) descriptor number.
#[derive(Clone)]
pub struct File {
    fd: Arc<OwnedFd>,
    /// How its operations reach the kernel (see [`Dispatch`]).
    dispatch: Dispatch,
}

impl fmt::Debug for File {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "File(fd {})", self.fd.as_raw_fd())
    }
}

impl From<std::fs::File> for File {
    fn from(f: std::fs::File) -> File {
        File {
            fd: Arc::new(OwnedFd::from(f)),
            dispatch: Dispatch::Ring,
        }
    }
}

impl AsRawFd for File {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// The iovec array of a vectored op: on the heap, so its address is stable for the kernel
/// while the op owns it, and from a per-thread list of emptied arrays, so a member read or
/// write allocates none once the thread is warm.
struct Iovecs(Vec<libc::iovec>);

/// The largest iovec array kept for reuse (in iovecs).
const IOVECS_KEPT_CAP: usize = 64;

impl Iovecs {
    fn new(parts: impl Iterator<Item = (*mut u8, usize)>) -> Iovecs {
        let mut v = recycle::vec_with_room(parts.size_hint().0);
        v.extend(parts.map(|(ptr, len)| libc::iovec {
            iov_base: ptr.cast(),
            iov_len: len,
        }));
        debug_assert!(v.len() <= IOV_MAX, "at most IOV_MAX iovecs per operation");
        Iovecs(v)
    }

    fn as_ptr(&self) -> *const libc::iovec {
        self.0.as_ptr()
    }

    fn len(&self) -> usize {
        self.0.len()
    }
}

impl Drop for Iovecs {
    fn drop(&mut self) {
        recycle::keep_vec(std::mem::take(&mut self.0), IOVECS_KEPT_CAP);
    }
}

fn io_len(len: usize) -> u32 {
    u32::try_from(len).expect("single I/O larger than 4 GiB")
}

impl File {
    /// How this handle's operations reach the kernel.
    pub fn dispatch(&self) -> Dispatch {
        self.dispatch
    }

    /// Sets how this handle's operations reach the kernel: [`Dispatch::Inline`] for
    /// memory-backed files (tmpfs), [`Dispatch::Worker`] for files whose filesystem blocks
    /// the submitter (FUSE, network filesystems).
    pub fn set_dispatch(&mut self, how: Dispatch) {
        self.dispatch = how;
    }

    /// Reads up to `buf.len()` bytes at `offset`. Returns the byte count (0 at end of file).
    pub async fn read_at(
        &self,
        mut buf: AlignedBuf,
        offset: u64,
    ) -> (io::Result<usize>, AlignedBuf) {
        let kind = OpKind::Read {
            fd: self.as_raw_fd(),
            ptr: buf.as_mut_ptr(),
            len: io_len(buf.len()),
            offset,
        };
        // SAFETY: the pointer is into `buf`'s heap allocation, which the op owns and which
        // does not move when `buf` moves; the fd is kept open by the cloned Arc.
        let op = unsafe { Op::start_on(&driver(), self.dispatch, kind, (buf, self.fd.clone())) };
        let (res, (buf, _fd)) = op.await;
        let res = cqe_result(res);
        debug_assert!(
            res.as_ref().map_or(true, |&n| n <= buf.len()),
            "read past its buffer"
        );
        (res, buf)
    }

    /// Writes up to `buf.len()` bytes at `offset`. Returns the byte count.
    pub async fn write_at(&self, buf: AlignedBuf, offset: u64) -> (io::Result<usize>, AlignedBuf) {
        let kind = OpKind::Write {
            fd: self.as_raw_fd(),
            ptr: buf.as_ptr(),
            len: io_len(buf.len()),
            offset,
        };
        // SAFETY: as in read_at; the kernel only reads through the pointer.
        let op = unsafe { Op::start_on(&driver(), self.dispatch, kind, (buf, self.fd.clone())) };
        let (res, (buf, _fd)) = op.await;
        (cqe_result(res), buf)
    }

    /// One vectored read into the windows of `iov`, at most [`IOV_MAX`] of them.
    pub async fn readv_at(&self, mut iov: IoVecMut, offset: u64) -> (io::Result<usize>, IoVecMut) {
        assert!(iov.len() <= IOV_MAX, "{} iovecs exceed IOV_MAX", iov.len());
        let vecs = Iovecs::new(iov.iter_mut().map(|s| (s.as_mut_ptr(), s.len())));
        let kind = OpKind::Readv {
            fd: self.as_raw_fd(),
            iov: vecs.as_ptr(),
            count: vecs.len() as u32,
            offset,
        };
        // SAFETY: `vecs` (heap) and every window it points into (exclusive BufSliceMuts,
        // which keep their buffer alive) are owned by the op until completion.
        let op =
            unsafe { Op::start_on(&driver(), self.dispatch, kind, (vecs, iov, self.fd.clone())) };
        let (res, (_vecs, iov, _fd)) = op.await;
        let res = cqe_result(res);
        debug_assert!(
            res.as_ref()
                .map_or(true, |&n| n <= crate::buf::iov_mut_len(&iov)),
            "a vectored read filled more than its windows"
        );
        (res, iov)
    }

    /// One vectored write from the windows of `iov`, at most [`IOV_MAX`] of them.
    pub async fn writev_at(&self, iov: IoVec, offset: u64) -> (io::Result<usize>, IoVec) {
        assert!(iov.len() <= IOV_MAX, "{} iovecs exceed IOV_MAX", iov.len());
        let vecs = Iovecs::new(iov.iter().map(|s| (s.as_ptr().cast_mut(), s.len())));
        let kind = OpKind::Writev {
            fd: self.as_raw_fd(),
            iov: vecs.as_ptr(),
            count: vecs.len() as u32,
            offset,
        };
        // SAFETY: as in readv_at; the kernel only reads through these pointers.
        let op =
            unsafe { Op::start_on(&driver(), self.dispatch, kind, (vecs, iov, self.fd.clone())) };
        let (res, (_vecs, iov, _fd)) = op.await;
        (cqe_result(res), iov)
    }

    /// Reads exactly the windows' total length at `offset`, resuming after short reads. On
    /// a [`Dispatch::Worker`] file, in pieces of at most [`WORKER_MAX_OP`] bytes read
    /// together (see there why); the windows come back as they were lent.
    pub async fn readv_exact_at(&self, iov: IoVecMut, offset: u64) -> (io::Result<()>, IoVecMut) {
        let total: usize = iov.iter().map(BufSliceMut::len).sum();
        if self.dispatch == Dispatch::Worker && total > WORKER_MAX_OP {
            return self.readv_exact_in_pieces(iov, offset).await;
        }
        self.readv_exact_once(iov, offset, total).await
    }

    async fn readv_exact_in_pieces(
        &self,
        iov: IoVecMut,
        offset: u64,
    ) -> (io::Result<()>, IoVecMut) {
        let (groups, continues) = cut_mut(iov, WORKER_MAX_OP);
        let mut at = offset;
        let reads = groups.into_iter().map(|g| {
            let len = crate::buf::iov_mut_len(&g);
            let o = at;
            at += len as u64;
            self.readv_exact_once(g, o, len)
        });
        let mut res = Ok(());
        let mut back = Vec::new();
        for (r, g) in futures::future::join_all(reads).await {
            if res.is_ok() {
                res = r;
            }
            back.push(g);
        }
        (res, rejoin_mut(back, &continues))
    }

    async fn readv_exact_once(
        &self,
        iov: IoVecMut,
        offset: u64,
        total: usize,
    ) -> (io::Result<()>, IoVecMut) {
        let (res, iov) = self.readv_at(iov, offset).await;
        match res {
            Ok(n) if n == total => (Ok(()), iov),
            Ok(0) => (Err(eof(offset)), iov),
            Ok(n) => self.finish_short_read(iov, offset, n, total).await,
            Err(e) => (Err(e), iov),
        }
    }

    /// Writes all of the windows at `offset`, resuming after short writes. On a
    /// [`Dispatch::Worker`] file, in pieces of at most [`WORKER_MAX_OP`] bytes written
    /// together (see there why); what comes back is those pieces' windows.
    pub async fn writev_all_at(&self, iov: IoVec, offset: u64) -> (io::Result<()>, IoVec) {
        let total: usize = iov.iter().map(BufSlice::len).sum();
        if self.dispatch == Dispatch::Worker && total > WORKER_MAX_OP {
            let mut at = offset;
            let writes = cut(iov, WORKER_MAX_OP).into_iter().map(|g| {
                let len = crate::buf::iov_len(&g);
                let o = at;
                at += len as u64;
                self.writev_all_once(g, o, len)
            });
            let mut res = Ok(());
            let mut back = IoVec::new();
            for (r, g) in futures::future::join_all(writes).await {
                if res.is_ok() {
                    res = r;
                }
                back.extend(g);
            }
            return (res, back);
        }
        self.writev_all_once(iov, offset, total).await
    }

    async fn writev_all_once(
        &self,
        iov: IoVec,
        offset: u64,
        total: usize,
    ) -> (io::Result<()>, IoVec) {
        let (res, iov) = self.writev_at(iov, offset).await;
        match res {
            Ok(n) if n == total => (Ok(()), iov),
            Ok(0) => (
                Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "device wrote 0 bytes",
                )),
                iov,
            ),
            Ok(n) => self.finish_short_write(iov, offset, n, total).await,
            Err(e) => (Err(e), iov),
        }
    }

    /// Short transfers are rare (end of a file, signals); finish them one plain op at a time
    /// through a bounce buffer rather than complicating the vectored path.
    async fn finish_short_read(
        &self,
        mut iov: IoVecMut,
        offset: u64,
        mut done: usize,
        total: usize,
    ) -> (io::Result<()>, IoVecMut) {
        while done < total {
            let mut bounce = AlignedBuf::zeroed(total - done);
            let (res, b) = self.read_at(bounce, offset + done as u64).await;
            bounce = b;
            let n = match res {
                Ok(0) => return (Err(eof(offset + done as u64)), iov),
                Ok(n) => n,
                Err(e) => return (Err(e), iov),
            };
            scatter(&mut iov, done, &bounce[..n]);
            done += n;
        }
        debug_assert_eq!(done, total, "a short read is finished exactly");
        (Ok(()), iov)
    }

    async fn finish_short_write(
        &self,
        iov: IoVec,
        offset: u64,
        mut done: usize,
        total: usize,
    ) -> (io::Result<()>, IoVec) {
        let mut rest = Vec::with_capacity(total - done);
        let mut skip = done;
        for s in iov.iter() {
            let b = s.as_slice();
            if skip >= b.len() {
                skip -= b.len();
                continue;
            }
            rest.extend_from_slice(&b[skip..]);
            skip = 0;
        }
        while done < total {
            let already = total - rest.len();
            let chunk = AlignedBuf::from_slice(&rest[done - already..]);
            let (res, _) = self.write_at(chunk, offset + done as u64).await;
            match res {
                Ok(0) => {
                    let e = io::Error::new(io::ErrorKind::WriteZero, "device wrote 0 bytes");
                    return (Err(e), iov);
                }
                Ok(n) => done += n,
                Err(e) => return (Err(e), iov),
            }
        }
        debug_assert_eq!(done, total, "a short write is finished exactly");
        (Ok(()), iov)
    }

    /// Reads exactly `buf.len()` bytes at `offset`.
    pub async fn read_exact_at(
        &self,
        buf: AlignedBuf,
        offset: u64,
    ) -> (io::Result<()>, AlignedBuf) {
        let total = buf.len();
        let (res, mut buf) = self.read_at(buf, offset).await;
        let mut done = match res {
            Ok(n) if n == total => return (Ok(()), buf),
            Ok(0) => return (Err(eof(offset)), buf),
            Ok(n) => n,
            Err(e) => return (Err(e), buf),
        };
        // Rare: finish through a bounce buffer.
        while done < total {
            let (res, rest) = self
                .read_at(AlignedBuf::zeroed(total - done), offset + done as u64)
                .await;
            match res {
                Ok(0) => return (Err(eof(offset + done as u64)), buf),
                Ok(n) => {
                    buf[done..done + n].copy_from_slice(&rest[..n]);
                    done += n;
                }
                Err(e) => return (Err(e), buf),
            }
        }
        debug_assert_eq!(done, total, "an exact read reads its length");
        (Ok(()), buf)
    }

    /// Writes all of `buf` at `offset`.
    pub async fn write_all_at(&self, buf: AlignedBuf, offset: u64) -> (io::Result<()>, AlignedBuf) {
        let total = buf.len();
        let (res, buf) = self.write_at(buf, offset).await;
        match res {
            Ok(n) if n == total => (Ok(()), buf),
            Ok(0) => (
                Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "device wrote 0 bytes",
                )),
                buf,
            ),
            Ok(n) => {
                let rest = AlignedBuf::from_slice(&buf[n..]);
                let (res, _) = Box::pin(self.write_all_at(rest, offset + n as u64)).await;
                (res, buf)
            }
            Err(e) => (Err(e), buf),
        }
    }

    /// fdatasync (or fsync when `data_only` is false).
    pub async fn sync(&self, data_only: bool) -> io::Result<()> {
        let kind = OpKind::Fsync {
            fd: self.as_raw_fd(),
            datasync: data_only,
        };
        // SAFETY: no memory is lent; the fd is kept open by the Arc the op owns.
        let op = unsafe { Op::start_on(&driver(), self.dispatch, kind, self.fd.clone()) };
        cqe_result(op.await.0).map(|_| ())
    }

    /// fallocate(2) with `mode` (e.g. `FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE`, which also
    /// discards on block devices).
    pub async fn fallocate(&self, mode: i32, offset: u64, len: u64) -> io::Result<()> {
        let kind = OpKind::Fallocate {
            fd: self.as_raw_fd(),
            mode,
            offset,
            len,
        };
        // SAFETY: no memory is lent; the fd is kept open by the Arc the op owns.
        let op = unsafe { Op::start_on(&driver(), self.dispatch, kind, self.fd.clone()) };
        cqe_result(op.await.0).map(|_| ())
    }
}

fn eof(offset: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!("end of device at byte {offset}"),
    )
}

/// Copies `data` into the windows of `iov`, starting `skip` bytes in.
fn scatter(iov: &mut [BufSliceMut], mut skip: usize, mut data: &[u8]) {
    for w in iov.iter_mut() {
        if data.is_empty() {
            return;
        }
        let s = w.as_mut_slice();
        if skip >= s.len() {
            skip -= s.len();
            continue;
        }
        let n = (s.len() - skip).min(data.len());
        s[skip..skip + n].copy_from_slice(&data[..n]);
        data = &data[n..];
        skip = 0;
    }
    debug_assert!(data.is_empty(), "the windows hold every byte scattered");
}

/// Cuts `iov` into consecutive groups of at most `max` bytes, splitting a window where a
/// group ends inside it; `continues[k]` says whether the k-th piece (counted over all the
/// groups in order) continues the window before it.
fn cut_mut(iov: IoVecMut, max: usize) -> (Vec<IoVecMut>, Vec<bool>) {
    assert!(max > 0, "pieces of at least a byte");
    let mut groups = Vec::new();
    let mut continues = Vec::new();
    let mut group = IoVecMut::new();
    let mut room = max;
    for w in iov {
        let mut w = w;
        let mut first = true;
        while w.len() > room {
            let (head, tail) = w.split_at(room);
            group.push(head);
            continues.push(!first);
            first = false;
            groups.push(std::mem::take(&mut group));
            room = max;
            w = tail;
        }
        room -= w.len();
        group.push(w);
        continues.push(!first);
        if room == 0 {
            groups.push(std::mem::take(&mut group));
            room = max;
        }
    }
    if !group.is_empty() {
        groups.push(group);
    }
    debug_assert!(
        groups.iter().all(|g| crate::buf::iov_mut_len(g) <= max),
        "no group longer than its limit"
    );
    (groups, continues)
}

/// The windows [`cut_mut`] cut, joined back as they were.
fn rejoin_mut(groups: Vec<IoVecMut>, continues: &[bool]) -> IoVecMut {
    let mut out = IoVecMut::new();
    for (w, &cont) in groups.into_iter().flatten().zip(continues) {
        match (cont, out.pop()) {
            (true, Some(prev)) => match prev.join(w) {
                Ok(joined) => out.push(joined),
                Err((prev, w)) => {
                    out.push(prev);
                    out.push(w);
                }
            },
            (_, prev) => {
                out.extend(prev);
                out.push(w);
            }
        }
    }
    out
}

/// Cuts `iov` into consecutive groups of at most `max` bytes (shared windows: a window a
/// group ends inside is taken as two sub-windows).
fn cut(iov: IoVec, max: usize) -> Vec<IoVec> {
    assert!(max > 0, "pieces of at least a byte");
    let mut groups = Vec::new();
    let mut group = IoVec::new();
    let mut room = max;
    for w in iov {
        let mut from = 0;
        while w.len() - from > room {
            group.push(w.sub(from..from + room));
            from += room;
            groups.push(std::mem::take(&mut group));
            room = max;
        }
        room -= w.len() - from;
        group.push(if from == 0 { w } else { w.sub(from..w.len()) });
        if room == 0 {
            groups.push(std::mem::take(&mut group));
            room = max;
        }
    }
    if !group.is_empty() {
        groups.push(group);
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SharedBuf;

    /// Windows of every length from 0 to 9 over two buffers, cut at every limit from 1 to
    /// 12: no group passes its limit, the pieces keep their order and bytes, and the
    /// windows join back as they were lent.
    #[test]
    fn transfers_are_cut_into_pieces_and_joined_back() {
        for max in 1..=12 {
            let a = SharedBuf::new(AlignedBuf::zeroed(64));
            let b = SharedBuf::new(AlignedBuf::zeroed(64));
            let mut lent = IoVecMut::new();
            let mut spans = Vec::new();
            let mut at = 0;
            for len in 0..10usize {
                let buf = if len % 3 == 0 { &b } else { &a };
                let start = if len % 3 == 0 { 6 * len } else { at };
                lent.push(buf.slice_mut(start..start + len).unwrap());
                spans.push((len % 3 == 0, start, len));
                if len % 3 != 0 {
                    at += len;
                }
            }
            let total: usize = spans.iter().map(|s| s.2).sum();
            let (mut groups, continues) = cut_mut(lent, max);
            assert!(groups.iter().all(|g| crate::buf::iov_mut_len(g) <= max));
            assert_eq!(
                groups
                    .iter()
                    .map(|g| crate::buf::iov_mut_len(g))
                    .sum::<usize>(),
                total
            );
            assert!(groups[..groups.len() - 1]
                .iter()
                .all(|g| crate::buf::iov_mut_len(g) == max));
            // Each byte written through the pieces lands where the window put it.
            let mut n = 0u8;
            for w in groups.iter_mut().flatten() {
                for x in w.as_mut_slice() {
                    n = n.wrapping_add(1);
                    *x = n;
                }
            }
            let back = rejoin_mut(groups, &continues);
            let shape: Vec<(usize, usize)> = back.iter().map(|w| (w.offset(), w.len())).collect();
            let want: Vec<(usize, usize)> = spans.iter().map(|s| (s.1, s.2)).collect();
            assert_eq!(shape, want, "max {max}");
            let bytes: Vec<u8> = back.iter().flat_map(|w| w.as_slice().to_vec()).collect();
            assert_eq!(bytes, (1..=total as u8).collect::<Vec<u8>>(), "max {max}");
        }
    }

    #[test]
    fn shared_windows_are_cut_into_pieces() {
        let a = SharedBuf::new(AlignedBuf::from_slice(&(0..40u8).collect::<Vec<_>>()));
        for max in 1..=12 {
            let iov: IoVec = [0..7, 7..20, 20..21, 21..40]
                .into_iter()
                .map(|r| a.slice(r).unwrap())
                .collect();
            let groups = cut(iov, max);
            assert!(groups.iter().all(|g| crate::buf::iov_len(g) <= max));
            let bytes: Vec<u8> = groups
                .iter()
                .flatten()
                .flat_map(|w| w.as_slice().to_vec())
                .collect();
            assert_eq!(bytes, (0..40u8).collect::<Vec<_>>(), "max {max}");
        }
    }
}
