//! Sockets driven through the thread's driver: TCP and Unix listeners, and connected streams
//! whose reads land in owned buffers (an aligned window can receive a write payload that then
//! goes to disk with O_DIRECT, no copy) and whose sends gather many owned parts into one
//! `sendmsg`.
//!
//! Sockets stay in blocking mode: io_uring waits for readiness itself. The synchronous
//! fallback runs the same calls blocking, which serves one connection per thread at a time;
//! a server should insist on io_uring ([`crate::backend`]).

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::Arc;

use crate::buf::{AlignedBuf, BufSlice, BufSliceMut};
use crate::driver::{cqe_result, Op, OpKind};
use crate::executor::driver;
use crate::fs::IOV_MAX;

use smallvec::SmallVec;

/// An owned buffer a socket can receive into: its bytes stay at one address while the
/// kernel holds them, whatever happens to the future.
pub trait IoBufMut: 'static {
    /// Start of the bytes to fill.
    fn io_ptr_mut(&mut self) -> *mut u8;
    /// How many bytes to fill.
    fn io_len(&self) -> usize;
}

/// An owned buffer a socket can send from.
pub trait IoBuf: 'static {
    fn io_ptr(&self) -> *const u8;
    fn io_len(&self) -> usize;
}

impl IoBufMut for Vec<u8> {
    fn io_ptr_mut(&mut self) -> *mut u8 {
        self.as_mut_ptr()
    }
    fn io_len(&self) -> usize {
        self.len()
    }
}

impl IoBufMut for AlignedBuf {
    fn io_ptr_mut(&mut self) -> *mut u8 {
        self.as_mut_ptr()
    }
    fn io_len(&self) -> usize {
        self.len()
    }
}

impl IoBufMut for BufSliceMut {
    fn io_ptr_mut(&mut self) -> *mut u8 {
        self.as_mut_ptr()
    }
    fn io_len(&self) -> usize {
        self.len()
    }
}

impl IoBuf for Vec<u8> {
    fn io_ptr(&self) -> *const u8 {
        self.as_ptr()
    }
    fn io_len(&self) -> usize {
        self.len()
    }
}

impl IoBuf for AlignedBuf {
    fn io_ptr(&self) -> *const u8 {
        self.as_ptr()
    }
    fn io_len(&self) -> usize {
        self.len()
    }
}

impl IoBuf for BufSlice {
    fn io_ptr(&self) -> *const u8 {
        self.as_ptr()
    }
    fn io_len(&self) -> usize {
        self.len()
    }
}

impl IoBuf for &'static [u8] {
    fn io_ptr(&self) -> *const u8 {
        self.as_ptr()
    }
    fn io_len(&self) -> usize {
        self.len()
    }
}

/// One part of a gathered send.
#[derive(Debug)]
pub enum Part {
    /// Small owned bytes (protocol headers).
    Bytes(Vec<u8>),
    /// A header of up to [`HEADER_INLINE`] bytes, held inline: a reply header costs no
    /// allocation (see [`Part::header`]).
    Header(Header),
    /// A window of a data buffer (read payloads).
    Slice(BufSlice),
}

/// The most bytes a [`Part::Header`] holds: an NBD structured reply's data chunk header
/// (28) and an iSCSI basic header segment with its digest (52) fit.
pub const HEADER_INLINE: usize = 56;

/// Bytes of a [`Part::Header`].
#[derive(Clone, Copy)]
pub struct Header {
    len: u8,
    bytes: [u8; HEADER_INLINE],
}

impl fmt::Debug for Header {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Header({} bytes)", self.len)
    }
}

impl Part {
    /// `bytes` as a part: inline when they fit in [`HEADER_INLINE`], otherwise copied into
    /// a [`Part::Bytes`].
    pub fn header(bytes: &[u8]) -> Part {
        if bytes.len() > HEADER_INLINE {
            return Part::Bytes(bytes.to_vec());
        }
        let mut h = Header {
            len: bytes.len() as u8,
            bytes: [0; HEADER_INLINE],
        };
        h.bytes[..bytes.len()].copy_from_slice(bytes);
        debug_assert_eq!(
            usize::from(h.len),
            bytes.len(),
            "an inline header keeps its length"
        );
        Part::Header(h)
    }

    /// The bytes this part sends.
    pub fn bytes(&self) -> &[u8] {
        match self {
            Part::Bytes(v) => v,
            Part::Header(h) => {
                debug_assert!(usize::from(h.len) <= HEADER_INLINE);
                &h.bytes[..usize::from(h.len)]
            }
            Part::Slice(s) => s.as_slice(),
        }
    }
}

fn io_len32(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

fn closed_early() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "the peer closed the connection",
    )
}

/// A connected stream socket (TCP or Unix). Clones share the descriptor, so a reader task
/// and a writer task can use one connection (also from tasks on other threads' runtimes: a
/// `Stream` is `Send`); it closes when the last clone and the last in-flight operation are
/// gone. Dropping any of its futures mid-flight is safe: the buffers it lent the kernel stay
/// alive until the cancelled operation completes. Bytes a dropped receive already took are
/// lost to the connection, so drop reads only when abandoning the connection.
#[derive(Clone)]
pub struct Stream {
    fd: Arc<OwnedFd>,
}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Stream(fd {})", self.fd.as_raw_fd())
    }
}

/// A TCP connection: the same type as [`UnixStream`], so code serves both alike.
pub type TcpStream = Stream;
/// A Unix stream connection: the same type as [`TcpStream`].
pub type UnixStream = Stream;

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl From<std::net::TcpStream> for Stream {
    fn from(s: std::net::TcpStream) -> Stream {
        // Latency of small replies matters more than packet count; replies are gathered
        // into one send already.
        let _ = s.set_nodelay(true);
        Stream {
            fd: Arc::new(OwnedFd::from(s)),
        }
    }
}

impl From<std::os::unix::net::UnixStream> for Stream {
    fn from(s: std::os::unix::net::UnixStream) -> Stream {
        Stream {
            fd: Arc::new(OwnedFd::from(s)),
        }
    }
}

impl Stream {
    /// Receives up to `buf.io_len()` bytes into `buf`. `Ok(0)`: the peer closed.
    pub async fn read<B: IoBufMut>(&self, buf: B) -> (io::Result<usize>, B) {
        self.recv_from(buf, 0, false).await
    }

    /// Receives into `buf[start..]`; with `wait_all` the kernel keeps receiving until that
    /// is full, so a large payload costs one operation instead of one per segment.
    async fn recv_from<B: IoBufMut>(
        &self,
        mut buf: B,
        start: usize,
        wait_all: bool,
    ) -> (io::Result<usize>, B) {
        debug_assert!(start <= buf.io_len(), "a receive starts inside its buffer");
        let len = buf.io_len().saturating_sub(start);
        let kind = OpKind::Recv {
            fd: self.as_raw_fd(),
            // start <= io_len, so this stays inside the buffer (or one past its end).
            ptr: buf.io_ptr_mut().wrapping_add(start.min(buf.io_len())),
            len: io_len32(len),
            wait_all,
        };
        // SAFETY: the pointer is into `buf`'s heap bytes, which the op owns and which do not
        // move when `buf` moves; the descriptor is kept open by the cloned Arc.
        let op = unsafe { Op::start(&driver(), kind, (buf, self.fd.clone())) };
        let (res, (buf, _fd)) = op.await;
        let res = cqe_result(res);
        debug_assert!(
            res.as_ref().map_or(true, |&n| n <= len),
            "the kernel received more than it was given room for"
        );
        (res, buf)
    }

    /// Fills all of `buf`; `UnexpectedEof` if the peer closes first.
    pub async fn read_exact<B: IoBufMut>(&self, buf: B) -> (io::Result<()>, B) {
        self.read_exact_from(buf, 0).await
    }

    /// Fills `buf[start..]` (the caller already has the first `start` bytes).
    pub async fn read_exact_from<B: IoBufMut>(&self, buf: B, start: usize) -> (io::Result<()>, B) {
        let total = buf.io_len();
        let mut done = start.min(total);
        let mut buf = buf;
        while done < total {
            let (res, b) = self.recv_from(buf, done, true).await;
            buf = b;
            match res {
                Ok(0) => return (Err(closed_early()), buf),
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return (Err(e), buf),
            }
        }
        debug_assert_eq!(done, total, "a full read fills its buffer exactly");
        (Ok(()), buf)
    }

    /// Sends all of `buf`.
    pub async fn write_all<B: IoBuf>(&self, buf: B) -> (io::Result<()>, B) {
        let one: Box<dyn AnyBuf> = Box::new(buf);
        let (res, mut parts) = self.send_parts(vec![one], 0).await;
        match parts.pop().map(|b| b.into_any().downcast::<B>()) {
            Some(Ok(b)) => (res, *b),
            _ => unreachable!("the part handed back is the one sent"),
        }
    }

    /// Sends every part, in order, with few system calls: one `sendmsg` per chunk of up to
    /// `SEND_CHUNK` bytes and IOV_MAX parts, resumed after short sends. Hands the parts
    /// back.
    pub async fn write_all_vectored(&self, parts: Vec<Part>) -> (io::Result<()>, Vec<Part>) {
        self.write_all_vectored_from(parts, 0).await
    }

    /// [`Stream::write_all_vectored`] of what follows the first `sent` bytes of `parts`
    /// (which an earlier [`Stream::try_send_vectored`] sent).
    pub async fn write_all_vectored_from(
        &self,
        parts: Vec<Part>,
        sent: usize,
    ) -> (io::Result<()>, Vec<Part>) {
        self.send_parts(parts, sent).await
    }

    /// Sends what the socket takes now, without waiting, in chunks like
    /// [`Stream::write_all_vectored`]: the bytes sent (0 when the socket is full). The
    /// caller keeps the parts and sends the rest later.
    pub fn try_send_vectored(&self, parts: &[Part]) -> io::Result<usize> {
        self.send_ready(parts, 0)
    }

    /// Sends chunks of `parts` after their first `sent` bytes while the socket takes them
    /// without waiting: how far the parts are sent now.
    fn send_ready<T: SendBytes>(&self, parts: &[T], mut sent: usize) -> io::Result<usize> {
        let total: usize = parts.iter().map(|p| p.bytes().len()).sum();
        while sent < total {
            match self.send_now(&iovecs(parts, sent, SEND_CHUNK))? {
                0 => break,
                n => sent += n,
            }
        }
        debug_assert!(sent <= total, "never more sent than the parts hold");
        Ok(sent)
    }

    /// One `sendmsg` that cannot block: the bytes sent, 0 when the socket is full.
    fn send_now(&self, vecs: &[libc::iovec]) -> io::Result<usize> {
        // SAFETY: msghdr is plain data; all-zero is a valid empty header.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = vecs.as_ptr().cast_mut();
        msg.msg_iovlen = vecs.len();
        // SAFETY: `msg` points at `vecs`, whose iovecs point into memory the caller keeps
        // alive across this synchronous call.
        let n = unsafe {
            libc::sendmsg(
                self.as_raw_fd(),
                &msg,
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        if n >= 0 {
            debug_assert!(
                n as usize <= vecs.iter().map(|v| v.iov_len).sum::<usize>(),
                "sendmsg sent more than it was given"
            );
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
            _ => Err(e),
        }
    }

    /// Sends `parts` after their first `sent` bytes and hands them back (the caller may
    /// reuse the Vec: a reply batch allocates nothing).
    async fn send_parts<T: SendBytes + 'static>(
        &self,
        parts: Vec<T>,
        sent: usize,
    ) -> (io::Result<()>, Vec<T>) {
        let total: usize = parts.iter().map(|p| p.bytes().len()).sum();
        let mut sent = sent.min(total);
        let mut parts = parts;
        loop {
            // First sends that cannot block: while the socket has room (the common case)
            // that is one system call per chunk instead of a submission and a wait for its
            // completion. Only a chunk that finds the socket full goes through the ring,
            // which waits for room.
            sent = match self.send_ready(&parts, sent) {
                Ok(s) => s,
                Err(e) => return (Err(e), parts),
            };
            if sent >= total {
                break;
            }
            // The next chunk: iovecs for what is left, starting inside the part where the
            // last send stopped.
            let vecs = iovecs(&parts, sent, SEND_CHUNK);
            // SAFETY: msghdr is plain data; all-zero is a valid empty header.
            let mut msg: Box<libc::msghdr> = Box::new(unsafe { std::mem::zeroed() });
            msg.msg_iovlen = vecs.len();
            // The ring's copy of the header and iovecs: boxed, so their addresses hold
            // while the op is in flight (the synchronous sends keep theirs on the stack).
            let vecs = vecs.into_boxed_slice();
            msg.msg_iov = vecs.as_ptr().cast_mut();
            let kind = OpKind::SendMsg {
                fd: self.as_raw_fd(),
                msg: &*msg,
            };
            // SAFETY: `msg` and `vecs` are boxed (stable addresses) and, with the parts whose
            // bytes the iovecs point into (heap memory that does not move with the Vec), are
            // owned by the op until it completes.
            let op = unsafe { Op::start(&driver(), kind, (msg, vecs, parts, self.fd.clone())) };
            let (res, (_msg, _vecs, p, _fd)) = op.await;
            parts = p;
            match cqe_result(res) {
                Ok(0) => {
                    return (
                        Err(io::Error::new(
                            io::ErrorKind::WriteZero,
                            "socket sent 0 bytes",
                        )),
                        parts,
                    )
                }
                Ok(n) => sent += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return (Err(e), parts),
            }
        }
        debug_assert_eq!(sent, total, "a whole send sends every byte, no more");
        (Ok(()), parts)
    }

    /// Shuts down one or both directions (a blocking call; it does not wait).
    pub fn shutdown(&self, how: std::net::Shutdown) -> io::Result<()> {
        let how = match how {
            std::net::Shutdown::Read => libc::SHUT_RD,
            std::net::Shutdown::Write => libc::SHUT_WR,
            std::net::Shutdown::Both => libc::SHUT_RDWR,
        };
        // SAFETY: plain syscall on a descriptor we own.
        let r = unsafe { libc::shutdown(self.as_raw_fd(), how) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// The peer's address, for TCP connections.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        let dup = self.fd.try_clone()?;
        let s = std::net::TcpStream::from(dup);
        s.peer_addr()
    }
}

/// The most one `sendmsg` carries. Within one call the kernel stops to process the
/// socket's backlog (the acknowledgements that arrived meanwhile) after every 16 buffers of
/// up to 64 KiB it fills; a larger send pays that in the middle of its copying. On loopback
/// with BBR that cut 1 MiB NBD read replies to 0.7 of nbdkit's rate (which sends each
/// reply's data in one call of 1 MiB, within the 16); in chunks of 15 such buffers they
/// run at 1.1 of it.
const SEND_CHUNK: usize = 15 * 64 * 1024;

/// What a send's iovecs point into.
trait SendBytes {
    fn bytes(&self) -> &[u8];
}

impl SendBytes for Part {
    fn bytes(&self) -> &[u8] {
        Part::bytes(self)
    }
}

impl SendBytes for Box<dyn AnyBuf> {
    fn bytes(&self) -> &[u8] {
        AnyBuf::bytes(&**self)
    }
}

/// iovecs for at most `limit` bytes of `parts`, after the first `skip` (and at most
/// [`IOV_MAX`] of them). A reply's few parts fit inline, so a send allocates nothing.
fn iovecs<T: SendBytes>(
    parts: &[T],
    mut skip: usize,
    mut limit: usize,
) -> SmallVec<[libc::iovec; 8]> {
    let mut vecs = SmallVec::new();
    for b in parts.iter().map(T::bytes) {
        if skip >= b.len() {
            skip -= b.len();
            continue;
        }
        if vecs.len() == IOV_MAX || limit == 0 {
            break;
        }
        let len = (b.len() - skip).min(limit);
        limit -= len;
        vecs.push(libc::iovec {
            iov_base: b[skip..].as_ptr().cast_mut().cast(),
            iov_len: len,
        });
        skip = 0;
    }
    debug_assert!(vecs.len() <= IOV_MAX, "at most IOV_MAX iovecs per call");
    vecs
}

/// One typed buffer, for `write_all`, which hands it back as its own type.
trait AnyBuf {
    fn bytes(&self) -> &[u8];
    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any>;
}

impl<B: IoBuf> AnyBuf for B {
    fn bytes(&self) -> &[u8] {
        // SAFETY: an IoBuf's pointer is valid for io_len bytes while it is alive.
        unsafe { std::slice::from_raw_parts(self.io_ptr(), self.io_len()) }
    }
    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any> {
        self
    }
}

async fn accept_fd(fd: &Arc<OwnedFd>) -> io::Result<OwnedFd> {
    let kind = OpKind::Accept { fd: fd.as_raw_fd() };
    // SAFETY: accept takes no pointers (null address arguments); the listening descriptor
    // is kept open by the Arc the op owns.
    let op = unsafe { Op::start(&driver(), kind, fd.clone()) };
    let (res, _fd) = op.await;
    let n = cqe_result(res)?;
    let raw = RawFd::try_from(n).map_err(|_| io::Error::other("accept returned a bad fd"))?;
    debug_assert_ne!(raw, fd.as_raw_fd(), "accept gives a descriptor of its own");
    // SAFETY: accept returned a fresh descriptor that nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// A TCP listening socket.
#[derive(Debug)]
pub struct TcpListener {
    fd: Arc<OwnedFd>,
    local: SocketAddr,
}

impl TcpListener {
    /// Binds and listens (std sets SO_REUSEADDR, so a restarted daemon can bind at once).
    pub fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
        TcpListener::from_std(std::net::TcpListener::bind(addr)?)
    }

    pub fn from_std(l: std::net::TcpListener) -> io::Result<TcpListener> {
        let local = l.local_addr()?;
        Ok(TcpListener {
            fd: Arc::new(OwnedFd::from(l)),
            local,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The next connection (TCP_NODELAY set) and its peer. Dropping the future cancels
    /// the accept.
    pub async fn accept(&self) -> io::Result<(Stream, SocketAddr)> {
        let fd = accept_fd(&self.fd).await?;
        // SAFETY: `fd` is a connected TCP socket we own; ownership moves into the std type.
        let s = unsafe { std::net::TcpStream::from_raw_fd(fd.into_raw_fd()) };
        let peer = s.peer_addr()?;
        Ok((Stream::from(s), peer))
    }
}

/// A Unix stream listening socket.
#[derive(Debug)]
pub struct UnixListener {
    fd: Arc<OwnedFd>,
}

impl UnixListener {
    /// Binds and listens at `path` (which must not exist; permissions are the caller's).
    pub fn bind(path: &Path) -> io::Result<UnixListener> {
        Ok(UnixListener::from_std(
            std::os::unix::net::UnixListener::bind(path)?,
        ))
    }

    pub fn from_std(l: std::os::unix::net::UnixListener) -> UnixListener {
        UnixListener {
            fd: Arc::new(OwnedFd::from(l)),
        }
    }

    /// The next connection. Dropping the future cancels the accept.
    pub async fn accept(&self) -> io::Result<Stream> {
        let fd = accept_fd(&self.fd).await?;
        Ok(Stream { fd: Arc::new(fd) })
    }
}
