//! A client connection's byte stream: plain TCP, or TLS (rustls, after STARTTLS) over it.
//! Receives go through [`Input`], a receive-ahead buffer; sends take owned parts so plain
//! connections send read data straight from the array's buffers. rustls is driven sans-io:
//! ciphertext moves through the socket with the runtime's operations and the session is
//! borrowed only between awaits, so the reader and writer tasks can share it.

use std::cell::RefCell;
use std::io::{self, Read, Write};
use std::sync::Arc;

use std::rc::Rc;

use raidd_rt::net::{IoBufMut, Part, Stream};
use raidd_rt::AlignedBuf;

use crate::watch::{Wait, Watch};

/// Size of a connection's receive-ahead buffer.
const INPUT_BUF: usize = 16 * 1024;
/// A payload is received in pieces of at most this much (each one system call or ring
/// operation), so the watchdog sees it arrive: a stall is no piece within the time limit.
const RECV_PIECE: usize = 1 << 20;

pub struct Link {
    pub sock: Stream,
    tls: Option<RefCell<rustls::ServerConnection>>,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Link({:?}, tls: {})", self.sock, self.tls.is_some())
    }
}

fn tls_error(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("TLS: {e}"))
}

impl Link {
    pub fn plain(sock: Stream) -> Link {
        Link { sock, tls: None }
    }

    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Sends everything rustls has queued (handshake messages, records, alerts).
    async fn flush_tls(&self) -> io::Result<()> {
        let Some(tls) = &self.tls else { return Ok(()) };
        loop {
            let mut out = Vec::new();
            {
                let mut c = tls.borrow_mut();
                while c.wants_write() {
                    c.write_tls(&mut out)?;
                }
            }
            if out.is_empty() {
                return Ok(());
            }
            let (r, _) = self.sock.write_all(out).await;
            r?;
        }
    }

    /// Sends the parts in order.
    pub async fn send(&self, parts: Vec<Part>) -> io::Result<()> {
        self.send_from(parts, 0).await.0
    }

    /// Sends the parts in order after their first `sent` bytes, which [`Link::try_send`]
    /// sent (always 0 on TLS), and hands the Vec back for reuse.
    pub async fn send_from(&self, parts: Vec<Part>, sent: usize) -> (io::Result<()>, Vec<Part>) {
        match &self.tls {
            None => self.sock.write_all_vectored_from(parts, sent).await,
            Some(tls) => {
                debug_assert_eq!(sent, 0, "nothing goes out directly on TLS");
                let written = {
                    let mut c = tls.borrow_mut();
                    parts
                        .iter()
                        .try_for_each(|p| c.writer().write_all(p.bytes()))
                };
                let r = match written {
                    Ok(()) => self.flush_tls().await,
                    Err(e) => Err(e),
                };
                (r, parts)
            }
        }
    }

    /// Sends what the socket takes now, without waiting: the bytes sent. 0 on TLS, whose
    /// records go out whole through [`Link::send`].
    pub fn try_send(&self, parts: &[Part]) -> io::Result<usize> {
        if self.tls.is_some() {
            return Ok(0);
        }
        self.sock.try_send_vectored(parts)
    }

    /// Upgrades to TLS as the server. `input` may already hold the first bytes of the
    /// client's TLS handshake; they are handed to rustls first.
    pub async fn start_tls(
        &mut self,
        config: Arc<rustls::ServerConfig>,
        input: &mut Input,
    ) -> io::Result<()> {
        let mut conn = rustls::ServerConnection::new(config).map_err(tls_error)?;
        // Replies are bounded by the connection's in-flight limits, not by rustls's default
        // 64 KiB, which a single 64 KiB read reply would exceed.
        conn.set_buffer_limit(None);
        self.tls = Some(RefCell::new(conn));
        let mut pending = input.take_buffered();
        debug_assert_eq!(input.available(), 0, "the buffered bytes went to rustls");
        loop {
            if !pending.is_empty() {
                self.absorb(&pending).await?;
            }
            self.flush_tls().await?;
            let handshaking = self
                .tls
                .as_ref()
                .is_some_and(|t| t.borrow().is_handshaking());
            if !handshaking {
                return Ok(());
            }
            let (r, buf) = self.sock.read(vec![0u8; INPUT_BUF]).await;
            let n = r?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the client closed during the TLS handshake",
                ));
            }
            pending = buf;
            pending.truncate(n);
        }
    }

    /// Hands received ciphertext to rustls. On a TLS error the alert rustls queued is sent
    /// before the error is returned.
    async fn absorb(&self, mut bytes: &[u8]) -> io::Result<()> {
        let Some(tls) = &self.tls else { return Ok(()) };
        let failed = {
            let mut c = tls.borrow_mut();
            let mut failed = None;
            while !bytes.is_empty() && failed.is_none() {
                c.read_tls(&mut bytes)?;
                failed = c.process_new_packets().err();
            }
            failed
        };
        if let Some(e) = failed {
            let _ = self.flush_tls().await;
            return Err(tls_error(e));
        }
        Ok(())
    }

    /// Appends at least one received byte (plaintext) to `input`.
    async fn fill(&self, input: &mut Input) -> io::Result<()> {
        input.compact();
        debug_assert!(
            input.end < input.buf.len(),
            "room to receive into after compacting"
        );
        let Some(tls) = &self.tls else {
            let buf = std::mem::take(&mut input.buf);
            let from = input.end;
            let (r, b) = self.sock.read(Tail { buf, from }).await;
            input.buf = b.buf;
            return match r? {
                0 => Err(closed()),
                n => {
                    input.end += n;
                    debug_assert!(input.end <= input.buf.len(), "received within the buffer");
                    Ok(())
                }
            };
        };
        loop {
            // Plaintext rustls already holds.
            {
                let mut c = tls.borrow_mut();
                let end = input.end;
                match c.reader().read(&mut input.buf[end..]) {
                    Ok(0) => return Err(closed()),
                    Ok(n) => {
                        input.end += n;
                        return Ok(());
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
            }
            // The ciphertext buffer is kept with the input: one allocation per connection.
            let mut cipher = std::mem::take(&mut input.cipher);
            cipher.resize(INPUT_BUF, 0);
            let (r, cipher) = self.sock.read(cipher).await;
            input.cipher = cipher;
            let n = r?;
            if n == 0 {
                return Err(closed());
            }
            self.absorb(&input.cipher[..n]).await?;
            // Key updates and the like may want an answer.
            self.flush_tls().await?;
        }
    }
}

fn closed() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "the peer closed the connection",
    )
}

/// Bytes received ahead of what is being parsed: one receive takes in as many queued
/// requests as have arrived, so a deep queue of small requests costs one system call per
/// batch rather than one per header. Every wait for the client is stamped on the
/// connection's [`Watch`]: the rest of a request that has begun is [`Wait::Request`].
pub struct Input {
    watch: Rc<Watch>,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Payload bytes copied out of the receive-ahead buffer so far (the rest of every
    /// payload is received straight into place): the server's own copies, for `status`.
    pub copied: u64,
    /// TLS only: received ciphertext (empty on plain connections).
    cipher: Vec<u8>,
}

impl std::fmt::Debug for Input {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Input")
            .field("buffered", &(self.end - self.start))
            .finish()
    }
}

impl Input {
    pub fn new(watch: Rc<Watch>) -> Input {
        Input {
            watch,
            buf: vec![0u8; INPUT_BUF],
            start: 0,
            end: 0,
            copied: 0,
            cipher: Vec::new(),
        }
    }

    fn available(&self) -> usize {
        debug_assert!(self.start <= self.end && self.end <= self.buf.len());
        self.end - self.start
    }

    fn compact(&mut self) {
        if self.start > 0 {
            let kept = self.available();
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            debug_assert_eq!(self.available(), kept, "compacting keeps what is buffered");
        }
    }

    fn take_buffered(&mut self) -> Vec<u8> {
        let v = self.buf[self.start..self.end].to_vec();
        self.start = 0;
        self.end = 0;
        v
    }

    /// Receives more of a request that has begun.
    async fn more(&mut self, link: &Link) -> io::Result<()> {
        self.watch.waiting(Wait::Request);
        let r = link.fill(self).await;
        self.watch.waiting(Wait::Nothing);
        r
    }

    /// The bytes up to and including the first `delim` (a text protocol's head: an HTTP
    /// request's ends at its blank line). With no `delim` among the first `max` bytes, those
    /// and one more come back without it, for the caller to refuse (`max` is at most the
    /// receive-ahead buffer's size less one).
    pub async fn until(&mut self, link: &Link, delim: &[u8], max: usize) -> io::Result<Vec<u8>> {
        debug_assert!(max < INPUT_BUF && !delim.is_empty());
        loop {
            let have = &self.buf[self.start..self.end];
            if let Some(p) = have.windows(delim.len()).position(|w| w == delim) {
                let v = have[..p + delim.len()].to_vec();
                self.start += v.len();
                return Ok(v);
            }
            if have.len() > max {
                let v = have[..=max].to_vec();
                self.start += v.len();
                return Ok(v);
            }
            self.more(link).await?;
        }
    }

    /// Exactly `n` bytes of a request (callers bound `n`).
    pub async fn exact(&mut self, link: &Link, n: usize) -> io::Result<Vec<u8>> {
        if n <= INPUT_BUF {
            while self.available() < n {
                self.more(link).await?;
            }
            let v = self.buf[self.start..self.start + n].to_vec();
            self.start += n;
            debug_assert_eq!(v.len(), n);
            return Ok(v);
        }
        let mut v = Vec::with_capacity(n);
        loop {
            let k = self.available().min(n - v.len());
            v.extend_from_slice(&self.buf[self.start..self.start + k]);
            self.start += k;
            if v.len() == n {
                return Ok(v);
            }
            self.more(link).await?;
        }
    }

    /// Receives `buf[have..to]` straight into place on a plain connection, in pieces the
    /// watchdog sees arrive.
    async fn recv_into(
        &self,
        link: &Link,
        buf: AlignedBuf,
        mut have: usize,
        to: usize,
    ) -> (io::Result<()>, AlignedBuf) {
        debug_assert!(have <= to && to <= buf.len(), "receives inside its buffer");
        let mut w = Window { buf, to };
        while have < to {
            w.to = to.min(have + RECV_PIECE);
            self.watch.waiting(Wait::Request);
            let (r, back) = link.sock.read_exact_from(w, have).await;
            w = back;
            if let Err(e) = r {
                self.watch.waiting(Wait::Nothing);
                return (Err(e), w.buf);
            }
            have = w.to;
        }
        self.watch.waiting(Wait::Nothing);
        (Ok(()), w.buf)
    }

    /// Fills `buf[from..to]`: what is buffered is copied; on a plain connection the rest is
    /// received straight into place. The buffer comes back whatever the outcome.
    pub async fn fill_range(
        &mut self,
        link: &Link,
        mut buf: AlignedBuf,
        from: usize,
        to: usize,
    ) -> (io::Result<()>, AlignedBuf) {
        debug_assert!(from <= to && to <= buf.len());
        let mut have = from;
        loop {
            let n = self.available().min(to - have);
            buf[have..have + n].copy_from_slice(&self.buf[self.start..self.start + n]);
            self.start += n;
            self.copied += n as u64;
            have += n;
            if have == to {
                return (Ok(()), buf);
            }
            if !link.is_tls() {
                return self.recv_into(link, buf, have, to).await;
            }
            if let Err(e) = self.more(link).await {
                return (Err(e), buf);
            }
        }
    }

    /// The next fixed-size header. Until its first byte arrives the reader waits for
    /// `before` ([`Wait::Idle`] when nothing is in flight); after that, for the rest of a
    /// request.
    pub async fn header<const N: usize>(
        &mut self,
        link: &Link,
        before: Wait,
    ) -> io::Result<[u8; N]> {
        while self.available() < N {
            if self.available() > 0 {
                self.more(link).await?;
                continue;
            }
            self.watch.waiting(before);
            let r = link.fill(self).await;
            self.watch.waiting(Wait::Nothing);
            r?;
        }
        debug_assert!(N <= INPUT_BUF, "a header fits the receive-ahead buffer");
        let mut h = [0u8; N];
        h.copy_from_slice(&self.buf[self.start..self.start + N]);
        self.start += N;
        Ok(h)
    }

    /// `len` bytes of payload into an aligned buffer: what is buffered is copied; on a plain
    /// connection the rest is received straight into place.
    pub async fn payload(&mut self, link: &Link, len: usize) -> io::Result<AlignedBuf> {
        let (r, buf) = self
            .fill_range(link, AlignedBuf::for_overwrite(len), 0, len)
            .await;
        r.map(|()| buf)
    }

    /// Waits until some of a request that has begun is here (buffered), so what its bytes
    /// cost is taken once they arrive.
    pub async fn arriving(&mut self, link: &Link) -> io::Result<()> {
        while self.available() == 0 {
            self.more(link).await?;
        }
        Ok(())
    }

    /// Drops `len` bytes of payload.
    pub async fn skip(&mut self, link: &Link, mut len: usize) -> io::Result<()> {
        loop {
            let n = self.available().min(len);
            self.start += n;
            len -= n;
            if len == 0 {
                return Ok(());
            }
            self.more(link).await?;
        }
    }
}

/// The free tail of a receive buffer, as an owned buffer for `Stream::read`.
struct Tail {
    buf: Vec<u8>,
    from: usize,
}

impl IoBufMut for Tail {
    fn io_ptr_mut(&mut self) -> *mut u8 {
        self.buf[self.from..].as_mut_ptr()
    }
    fn io_len(&self) -> usize {
        self.buf.len() - self.from
    }
}

/// The first `to` bytes of an aligned buffer, as an owned buffer for `Stream::read`.
struct Window {
    buf: AlignedBuf,
    to: usize,
}

impl IoBufMut for Window {
    fn io_ptr_mut(&mut self) -> *mut u8 {
        self.buf.as_mut_ptr()
    }
    fn io_len(&self) -> usize {
        self.to
    }
}

/// The server's TLS configuration from PEM files.
pub fn server_config(
    cert: &std::path::Path,
    key: &std::path::Path,
) -> Result<Arc<rustls::ServerConfig>, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| format!("TLS certificate {}: {e}", cert.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("TLS certificate {}: {e}", cert.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "TLS certificate {}: no certificate in it",
            cert.display()
        ));
    }
    let key =
        PrivateKeyDer::from_pem_file(key).map_err(|e| format!("TLS key {}: {e}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("TLS certificate and key: {e}"))?;
    Ok(Arc::new(config))
}
