//! An NBD server as a sweep target, so one sweep measures raidd, nbdkit or qemu-nbd alike:
//! one connection per worker (Iometer's worker per target), its requests pipelined up to
//! the worker's queue depth. Fixed newstyle, `NBD_OPT_GO`, simple replies: what every server
//! speaks. The protocol's bytes are raidd-nbd's sans-io client; this is the thin shell
//! around a socket.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::Duration;

use raidd_nbd::client::{self, Info, ReplyHeader};
use raidd_nbd::consts::{INFO_EXPORT, OPT_GO, REP_INFO};
use raidd_nbd::request::{Command, Request};

/// Where an NBD export is: `nbd://HOST[:PORT][/EXPORT]` (port 10809, export "" unless
/// given).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NbdUrl {
    pub host: String,
    pub port: u16,
    pub export: String,
}

impl NbdUrl {
    pub fn parse(s: &str) -> Result<NbdUrl, String> {
        let bad = |why: &str| format!("{s:?}: {why} (nbd://HOST[:PORT][/EXPORT])");
        let rest = s
            .strip_prefix("nbd://")
            .ok_or_else(|| bad("not an nbd:// URL"))?;
        let (hostport, export) = rest.split_once('/').unwrap_or((rest, ""));
        let (host, port) = host_port(hostport, 10809).ok_or_else(|| bad("bad port"))?;
        if host.is_empty() {
            return Err(bad("no host"));
        }
        if export.len() > 4096 {
            return Err(bad("export name over 4096 bytes"));
        }
        Ok(NbdUrl {
            host: host.to_string(),
            port,
            export: export.to_string(),
        })
    }
}

impl std::fmt::Display for NbdUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "nbd://{}:{}/{}", self.host, self.port, self.export)
    }
}

/// `HOST[:PORT]` of a URL (an IPv6 literal in brackets), the port `default` when absent:
/// `None` for a port that is not a number.
pub fn host_port(hostport: &str, default: u16) -> Option<(&str, u16)> {
    let (host, port) = match hostport.rsplit_once(':') {
        // An IPv6 literal is bracketed: its colons are not the port's.
        Some((h, p)) if !p.contains(']') => (h, p.parse::<u16>().ok()?),
        _ => (hostport, default),
    };
    Some((host.trim_start_matches('[').trim_end_matches(']'), port))
}

/// Longest the handshake may take: a server that does not answer is an error, not a hang.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Opens a connection and negotiates the export: the socket, ready for transmission, and
/// the export's size.
pub fn handshake(url: &NbdUrl) -> Result<(TcpStream, u64), String> {
    let fail = |what: &str, e: std::io::Error| format!("{url}: {what}: {e}");
    let addr = (url.host.as_str(), url.port)
        .to_socket_addrs()
        .map_err(|e| fail("cannot resolve", e))?
        .next()
        .ok_or_else(|| format!("{url}: no address"))?;
    let mut s = TcpStream::connect_timeout(&addr, HANDSHAKE_TIMEOUT)
        .map_err(|e| fail("cannot connect", e))?;
    s.set_read_timeout(Some(HANDSHAKE_TIMEOUT))
        .map_err(|e| fail("socket", e))?;
    let mut greeting = [0u8; client::GREETING_LEN];
    s.read_exact(&mut greeting)
        .map_err(|e| fail("no greeting", e))?;
    let flags = client::parse_greeting(&greeting).map_err(|e| format!("{url}: {e}"))?;
    let mut out = client::client_flags(flags, true).to_be_bytes().to_vec();
    client::option(
        &mut out,
        OPT_GO,
        &client::info_data(url.export.as_bytes(), &[INFO_EXPORT]),
    );
    s.write_all(&out).map_err(|e| fail("handshake", e))?;
    let mut size = None;
    let mut got: Vec<u8> = Vec::new();
    loop {
        match client::parse_option_reply(&got).map_err(|e| format!("{url}: {e}"))? {
            Some((reply, used)) => {
                got.drain(..used);
                if reply.is_error() {
                    return Err(format!(
                        "{url}: the server refused the export: {}",
                        String::from_utf8_lossy(&reply.data)
                    ));
                }
                if reply.kind == REP_INFO {
                    if let Ok(Info::Export { size: s, .. }) = client::parse_info(&reply.data) {
                        size = Some(s);
                    }
                }
                if reply.is_final() {
                    break;
                }
            }
            None => {
                let mut buf = [0u8; 4096];
                let n = s.read(&mut buf).map_err(|e| fail("handshake", e))?;
                if n == 0 {
                    return Err(format!("{url}: the server closed during the handshake"));
                }
                got.extend_from_slice(&buf[..n]);
                if got.len() > 1 << 20 {
                    return Err(format!("{url}: option replies over 1 MiB"));
                }
            }
        }
    }
    s.set_read_timeout(None).map_err(|e| fail("socket", e))?;
    let size = size.ok_or_else(|| format!("{url}: the server gave no export size"))?;
    Ok((s, size))
}

/// A request waiting for its reply.
struct Pending {
    /// Bytes of data a successful reply carries (a READ's length).
    read_len: usize,
    reply: Option<Result<Vec<u8>, String>>,
    waker: Option<Waker>,
}

/// One worker's connection: requests from its slots, replies matched by cookie.
pub struct Conn {
    stream: raidd_rt::net::Stream,
    /// One request goes onto the socket at a time (a write's payload is long).
    send: futures::lock::Mutex<()>,
    pending: RefCell<HashMap<u64, Pending>>,
    next: Cell<u64>,
    /// Why the connection failed, once it has.
    dead: RefCell<Option<String>>,
}

impl Conn {
    /// Connects, negotiates, and starts reading replies on this thread.
    pub fn open(url: &NbdUrl) -> Result<Rc<Conn>, String> {
        let (s, _) = handshake(url)?;
        let c = Rc::new(Conn {
            stream: raidd_rt::net::Stream::from(s),
            send: futures::lock::Mutex::new(()),
            pending: RefCell::new(HashMap::new()),
            next: Cell::new(1),
            dead: RefCell::new(None),
        });
        raidd_rt::spawn_detached(Conn::replies(Rc::downgrade(&c), c.stream.clone()));
        Ok(c)
    }

    /// Reads replies until the connection ends or its last user is gone.
    async fn replies(conn: std::rc::Weak<Conn>, stream: raidd_rt::net::Stream) {
        let why = loop {
            let (r, head) = stream.read_exact(vec![0u8; 16]).await;
            if let Err(e) = r {
                break format!("connection lost: {e}");
            }
            let Some(c) = conn.upgrade() else { return };
            let (error, cookie) = match client::parse_reply_header(&head) {
                Ok(Some((ReplyHeader::Simple { error, cookie }, 16))) => (error, cookie),
                Ok(_) => break "a structured reply, which was not negotiated".to_string(),
                Err(e) => break e.to_string(),
            };
            let Some(len) = c.pending.borrow().get(&cookie).map(|p| p.read_len) else {
                break format!("a reply to unknown cookie {cookie}");
            };
            let reply = if error != 0 {
                Err(format!("the server answered error {error}"))
            } else if len > 0 {
                let (r, data) = stream.read_exact(vec![0u8; len]).await;
                if let Err(e) = r {
                    break format!("connection lost: {e}");
                }
                Ok(data)
            } else {
                Ok(Vec::new())
            };
            let mut pending = c.pending.borrow_mut();
            if let Some(p) = pending.get_mut(&cookie) {
                p.reply = Some(reply);
                if let Some(w) = p.waker.take() {
                    w.wake();
                }
            }
        };
        if let Some(c) = conn.upgrade() {
            *c.dead.borrow_mut() = Some(why.clone());
            for p in c.pending.borrow_mut().values_mut() {
                p.reply.get_or_insert_with(|| Err(why.clone()));
                if let Some(w) = p.waker.take() {
                    w.wake();
                }
            }
        }
    }

    async fn call(
        &self,
        command: Command,
        offset: u64,
        length: u32,
        payload: &[u8],
    ) -> Result<Vec<u8>, String> {
        if let Some(why) = self.dead.borrow().clone() {
            return Err(why);
        }
        let cookie = self.next.get();
        self.next.set(cookie + 1);
        let read_len = if command == Command::Read {
            length as usize
        } else {
            0
        };
        self.pending.borrow_mut().insert(
            cookie,
            Pending {
                read_len,
                reply: None,
                waker: None,
            },
        );
        let r = Request {
            flags: 0,
            command,
            cookie,
            offset,
            length,
        };
        let mut out = Vec::with_capacity(28 + payload.len());
        client::request(&mut out, &r, payload);
        {
            let _turn = self.send.lock().await;
            let (sent, _) = self.stream.write_all(out).await;
            if let Err(e) = sent {
                self.pending.borrow_mut().remove(&cookie);
                return Err(format!("cannot send: {e}"));
            }
        }
        let reply = std::future::poll_fn(|cx| {
            let mut pending = self.pending.borrow_mut();
            let Some(p) = pending.get_mut(&cookie) else {
                return Poll::Ready(Err("request lost".to_string()));
            };
            match p.reply.take() {
                Some(r) => Poll::Ready(r),
                None => {
                    p.waker = Some(cx.waker().clone());
                    Poll::Pending
                }
            }
        })
        .await;
        self.pending.borrow_mut().remove(&cookie);
        reply
    }

    pub async fn read(&self, offset: u64, len: u32) -> Result<Vec<u8>, String> {
        self.call(Command::Read, offset, len, &[]).await
    }

    pub async fn write(&self, offset: u64, data: &[u8]) -> Result<(), String> {
        let len = u32::try_from(data.len()).map_err(|_| "a write over 4 GiB".to_string())?;
        self.call(Command::Write, offset, len, data)
            .await
            .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_with_defaults() {
        let u = NbdUrl::parse("nbd://127.0.0.1:10810/a").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.export.as_str()),
            ("127.0.0.1", 10810, "a")
        );
        let u = NbdUrl::parse("nbd://localhost").unwrap();
        assert_eq!((u.port, u.export.as_str()), (10809, ""));
        let u = NbdUrl::parse("nbd://[::1]:9/x").unwrap();
        assert_eq!((u.host.as_str(), u.port), ("::1", 9));
        for bad in ["http://x", "nbd://", "nbd://h:port/x", "nbd://:1/x"] {
            assert!(NbdUrl::parse(bad).is_err(), "{bad}");
        }
    }
}
