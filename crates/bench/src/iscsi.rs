//! An iSCSI target as a sweep target, so one sweep measures raidd or tgt alike: one session
//! of one connection per worker, its commands pipelined up to the worker's queue depth
//! within the target's command window. No authentication, no digests; writes send what
//! the target allows as immediate data and the rest as Data-Out answering R2Ts. The PDUs
//! are raidd-iscsi's; this is the thin shell around a socket.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::Duration;

use raidd_iscsi::pdu::{build, op, Bhs, BHS_LEN};

/// Where an iSCSI LUN is: `iscsi://HOST[:PORT]/TARGET/LUN`, as libiscsi writes it (port
/// 3260 unless given).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IscsiUrl {
    pub host: String,
    pub port: u16,
    pub target: String,
    pub lun: u64,
}

impl IscsiUrl {
    pub fn parse(s: &str) -> Result<IscsiUrl, String> {
        let bad = |why: &str| format!("{s:?}: {why} (iscsi://HOST[:PORT]/TARGET/LUN)");
        let rest = s
            .strip_prefix("iscsi://")
            .ok_or_else(|| bad("not an iscsi:// URL"))?;
        let mut parts = rest.splitn(3, '/');
        let hostport = parts.next().unwrap_or_default();
        let target = parts.next().ok_or_else(|| bad("no target"))?;
        let lun = parts
            .next()
            .ok_or_else(|| bad("no LUN"))?
            .parse::<u64>()
            .map_err(|_| bad("bad LUN"))?;
        if hostport.contains('@') {
            return Err(bad("CHAP credentials are not supported by bench sweep"));
        }
        let (host, port) = super::nbd::host_port(hostport, 3260).ok_or_else(|| bad("bad port"))?;
        if host.is_empty() || target.is_empty() || lun > 255 {
            return Err(bad("no host, no target, or a LUN over 255"));
        }
        Ok(IscsiUrl {
            host: host.into(),
            port,
            target: target.into(),
            lun,
        })
    }
}

impl std::fmt::Display for IscsiUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "iscsi://{}:{}/{}/{}",
            self.host, self.port, self.target, self.lun
        )
    }
}

const INITIATOR: &str = "iqn.2026-11.org.raidd:bench";
const TIMEOUT: Duration = Duration::from_secs(10);
/// What this initiator receives in one PDU at most.
const OUR_MAX_RECV: u32 = 262_144;

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// What the login settled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Negotiated {
    /// The next command's CmdSN (the login's, 0, at first), the command window and the
    /// status numbering: as the login left them, then as set-up commands move them.
    pub cmdsn: u32,
    pub max_cmdsn: u32,
    pub exp_statsn: u32,
    /// The most the target takes in one PDU.
    pub max_send: u32,
    pub immediate_data: bool,
    pub first_burst: u32,
    pub max_burst: u32,
}

/// The operational keys from the target's answer, over our offer's defaults.
pub fn negotiated(pairs: &[(String, String)]) -> Negotiated {
    let mut n = Negotiated {
        cmdsn: 0,
        max_cmdsn: 0,
        exp_statsn: 1,
        max_send: 8192,
        immediate_data: true,
        first_burst: 65_536,
        max_burst: 262_144,
    };
    let num = |v: &str, d: u32| v.parse::<u32>().unwrap_or(d).max(512);
    for (k, v) in pairs {
        match k.as_str() {
            "MaxRecvDataSegmentLength" => n.max_send = num(v, n.max_send),
            "ImmediateData" => n.immediate_data = v == "Yes",
            "FirstBurstLength" => n.first_burst = num(v, n.first_burst),
            "MaxBurstLength" => n.max_burst = num(v, n.max_burst),
            _ => {}
        }
    }
    n
}

/// Sends one PDU (no digests) on a blocking socket.
fn send(s: &mut TcpStream, h: &[u8; BHS_LEN], data: &[u8]) -> std::io::Result<()> {
    let mut v = h.to_vec();
    v.extend_from_slice(data);
    v.resize(v.len() + (4 - data.len() % 4) % 4, 0);
    s.write_all(&v)
}

/// Receives one PDU on a blocking socket: its header and data.
fn recv(s: &mut TcpStream) -> std::io::Result<(Bhs, Vec<u8>)> {
    let mut h = [0u8; BHS_LEN];
    s.read_exact(&mut h)?;
    let bhs = Bhs(h);
    let mut ahs = vec![0u8; bhs.ahs_len()];
    s.read_exact(&mut ahs)?;
    let n = bhs.data_len();
    if n > 16 << 20 {
        return Err(std::io::Error::other("a PDU of over 16 MiB"));
    }
    let mut d = vec![0u8; n + (4 - n % 4) % 4];
    s.read_exact(&mut d)?;
    d.truncate(n);
    Ok((bhs, d))
}

fn text(pairs: &[(&str, &str)]) -> Vec<u8> {
    let mut v = Vec::new();
    for (k, val) in pairs {
        raidd_iscsi::text::encode_pair(k, val, &mut v);
    }
    v
}

/// A new session's ISID: the random format, made of this process's ID and a count, so each
/// worker's session is new to the target (the same ISID again would reinstate, and so end,
/// the session another worker holds).
fn new_isid() -> [u8; 6] {
    static SESSIONS: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);
    let n = SESSIONS
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        .to_be_bytes();
    let pid = std::process::id().to_be_bytes();
    [0x80, pid[1], pid[2], pid[3], n[0], n[1]]
}

/// A login request of the session `isid` (TSIH 0: a new session).
fn login_pdu(isid: [u8; 6], csg: u8, nsg: u8, data: &[u8]) -> [u8; BHS_LEN] {
    let mut h = [0u8; BHS_LEN];
    h[0] = 0x40 | op::LOGIN;
    h[1] = 0x80 | (csg << 2) | nsg;
    h[5] = (data.len() >> 16) as u8;
    h[6] = (data.len() >> 8) as u8;
    h[7] = data.len() as u8;
    h[8..14].copy_from_slice(&isid);
    h
}

/// Logs in (no authentication): the socket, in full feature phase, and what was settled.
pub fn login(url: &IscsiUrl) -> Result<(TcpStream, Negotiated), String> {
    let fail = |what: &str, e: std::io::Error| format!("{url}: {what}: {e}");
    let addr = (url.host.as_str(), url.port)
        .to_socket_addrs()
        .map_err(|e| fail("cannot resolve", e))?
        .next()
        .ok_or_else(|| format!("{url}: no address"))?;
    let mut s =
        TcpStream::connect_timeout(&addr, TIMEOUT).map_err(|e| fail("cannot connect", e))?;
    s.set_read_timeout(Some(TIMEOUT))
        .map_err(|e| fail("socket", e))?;
    let _ = s.set_nodelay(true);
    let sec = text(&[
        ("InitiatorName", INITIATOR),
        ("TargetName", &url.target),
        ("SessionType", "Normal"),
        ("AuthMethod", "None"),
    ]);
    let ours = OUR_MAX_RECV.to_string();
    let opn = text(&[
        ("HeaderDigest", "None"),
        ("DataDigest", "None"),
        ("MaxRecvDataSegmentLength", &ours),
        ("InitialR2T", "Yes"),
        ("ImmediateData", "Yes"),
        ("MaxBurstLength", "262144"),
        ("FirstBurstLength", "65536"),
        ("ErrorRecoveryLevel", "0"),
    ]);
    let mut answer = Vec::new();
    let mut window = (0, 1);
    let isid = new_isid();
    for (csg, nsg, data) in [(0u8, 1u8, &sec), (1, 3, &opn)] {
        send(&mut s, &login_pdu(isid, csg, nsg, data), data).map_err(|e| fail("login", e))?;
        let (h, d) = recv(&mut s).map_err(|e| fail("login", e))?;
        if h.opcode() != op::LOGIN_RESPONSE {
            return Err(format!(
                "{url}: answered the login with opcode {:#x}",
                h.opcode()
            ));
        }
        if (h.0[36], h.0[37]) != (0, 0) {
            return Err(format!(
                "{url}: login refused (status {:#04x}{:02x})",
                h.0[36], h.0[37]
            ));
        }
        window = (be32(&h.0, 32), be32(&h.0, 24).wrapping_add(1));
        if csg == 1 {
            if h.0[1] & 0x83 != 0x83 {
                return Err(format!(
                    "{url}: the target did not go to full feature phase"
                ));
            }
            answer = raidd_iscsi::text::parse(&d)
                .map_err(|e| format!("{url}: the target's keys: {e:?}"))?;
        }
    }
    s.set_read_timeout(None).map_err(|e| fail("socket", e))?;
    let n = Negotiated {
        max_cmdsn: window.0,
        exp_statsn: window.1,
        ..negotiated(&answer)
    };
    Ok((s, n))
}

/// One command on a blocking socket, for the set-up before the pipelined phase: its
/// status, Data-In and sense data. CmdSN, ExpStatSN and MaxCmdSN move in `neg`.
fn command_sync(
    s: &mut TcpStream,
    neg: &mut Negotiated,
    lun: u64,
    cdb: &[u8],
    alloc: u32,
) -> Result<(u8, Vec<u8>, Vec<u8>), String> {
    let h = build::command(
        neg.cmdsn,
        lun,
        cdb,
        alloc > 0,
        false,
        alloc,
        neg.cmdsn,
        neg.exp_statsn,
        0,
    );
    neg.cmdsn = neg.cmdsn.wrapping_add(1);
    send(s, &h, &[]).map_err(|e| e.to_string())?;
    let mut data = Vec::new();
    loop {
        let (b, d) = recv(s).map_err(|e| e.to_string())?;
        let status = match b.opcode() {
            op::DATA_IN => {
                data.extend_from_slice(&d);
                if b.0[1] & 0x01 == 0 {
                    continue;
                }
                (b.0[3], Vec::new())
            }
            // The data segment of a response is the sense length, then the sense data.
            op::SCSI_RESPONSE => (b.0[3], d.get(2..).unwrap_or_default().to_vec()),
            op::NOP_IN | op::ASYNC => continue,
            other => return Err(format!("answered with opcode {other:#x}")),
        };
        neg.exp_statsn = be32(&b.0, 24).wrapping_add(1);
        neg.max_cmdsn = be32(&b.0, 32);
        return Ok((status.0, data, status.1));
    }
}

/// Clears the unit attention a new session may get (tgt reports a power-on reset to each):
/// TEST UNIT READY until the LUN answers GOOD.
fn ready(s: &mut TcpStream, neg: &mut Negotiated, lun: u64, url: &IscsiUrl) -> Result<(), String> {
    for _ in 0..4 {
        let (status, _, sense) =
            command_sync(s, neg, lun, &[0u8; 6], 0).map_err(|e| format!("{url}: {e}"))?;
        if status == 0 {
            return Ok(());
        }
        // CHECK CONDITION with UNIT ATTENTION: ask again.
        let unit_attention = status == 2 && sense.get(2).is_some_and(|k| k & 0x0f == 6);
        if !unit_attention {
            return Err(format!("{url}: TEST UNIT READY: status {status:#04x}"));
        }
    }
    Err(format!("{url}: the LUN keeps reporting unit attentions"))
}

/// The LUN's size in bytes and its block size, from READ CAPACITY(16) on a fresh login.
pub fn capacity(url: &IscsiUrl) -> Result<(u64, u32), String> {
    let (mut s, mut neg) = login(url)?;
    s.set_read_timeout(Some(TIMEOUT))
        .map_err(|e| format!("{url}: {e}"))?;
    let lun = u64::from_be_bytes(raidd_scsi::encode_lun(url.lun));
    ready(&mut s, &mut neg, lun, url)?;
    let mut cdb = [0u8; 16];
    cdb[0] = 0x9e;
    cdb[1] = 0x10;
    cdb[13] = 32;
    let (status, data, _) = command_sync(&mut s, &mut neg, lun, &cdb, 32)
        .map_err(|e| format!("{url}: READ CAPACITY(16): {e}"))?;
    if status != 0 || data.len() < 12 {
        return Err(format!(
            "{url}: READ CAPACITY(16) failed (status {status:#04x})"
        ));
    }
    let last = u64::from_be_bytes(data[0..8].try_into().map_err(|_| "short")?);
    let block = be32(&data, 8);
    if block == 0 || !block.is_power_of_two() {
        return Err(format!("{url}: block size {block}"));
    }
    Ok(((last + 1) * u64::from(block), block))
}

/// A command waiting for its end.
struct Pending {
    /// Data-In collected so far (reads).
    read: Vec<u8>,
    /// The data of a write, for the target's R2Ts.
    write: Option<Rc<Vec<u8>>>,
    done: Option<Result<(), String>>,
    waker: Option<Waker>,
}

/// One worker's session: commands from its slots, ends matched by task tag.
pub struct Session {
    stream: raidd_rt::net::Stream,
    neg: Negotiated,
    lun: u64,
    block: u32,
    send: futures::lock::Mutex<()>,
    pending: RefCell<HashMap<u32, Pending>>,
    itt: Cell<u32>,
    cmdsn: Cell<u32>,
    expstatsn: Cell<u32>,
    maxcmdsn: Cell<u32>,
    /// Slots waiting for the command window to open.
    window: RefCell<Vec<Waker>>,
    dead: RefCell<Option<String>>,
}

impl Session {
    pub fn open(url: &IscsiUrl, block: u32) -> Result<Rc<Session>, String> {
        let (mut s, mut neg) = login(url)?;
        let lun = u64::from_be_bytes(raidd_scsi::encode_lun(url.lun));
        s.set_read_timeout(Some(TIMEOUT))
            .map_err(|e| format!("{url}: {e}"))?;
        ready(&mut s, &mut neg, lun, url)?;
        s.set_read_timeout(None)
            .map_err(|e| format!("{url}: {e}"))?;
        let c = Rc::new(Session {
            stream: raidd_rt::net::Stream::from(s),
            neg,
            lun,
            block,
            send: futures::lock::Mutex::new(()),
            pending: RefCell::new(HashMap::new()),
            itt: Cell::new(neg.cmdsn.wrapping_add(1).max(1)),
            cmdsn: Cell::new(neg.cmdsn),
            expstatsn: Cell::new(neg.exp_statsn),
            maxcmdsn: Cell::new(neg.max_cmdsn),
            window: RefCell::new(Vec::new()),
            dead: RefCell::new(None),
        });
        raidd_rt::spawn_detached(Session::pdus(Rc::downgrade(&c), c.stream.clone()));
        Ok(c)
    }

    async fn recv(stream: &raidd_rt::net::Stream) -> Result<(Bhs, Vec<u8>), String> {
        let (r, h) = stream.read_exact(vec![0u8; BHS_LEN]).await;
        r.map_err(|e| format!("connection lost: {e}"))?;
        let bhs = Bhs(h.try_into().map_err(|_| "short header")?);
        let n = bhs.ahs_len() + bhs.data_len();
        if n > 16 << 20 {
            return Err("a PDU of over 16 MiB".into());
        }
        let padded = n + (4 - bhs.data_len() % 4) % 4;
        let mut d = Vec::new();
        if padded > 0 {
            let (r, got) = stream.read_exact(vec![0u8; padded]).await;
            r.map_err(|e| format!("connection lost: {e}"))?;
            d = got[bhs.ahs_len()..bhs.ahs_len() + bhs.data_len()].to_vec();
        }
        Ok((bhs, d))
    }

    /// Reads PDUs until the connection ends or its last user is gone.
    async fn pdus(me: std::rc::Weak<Session>, stream: raidd_rt::net::Stream) {
        let why = loop {
            let (b, d) = match Session::recv(&stream).await {
                Ok(p) => p,
                Err(e) => break e,
            };
            let Some(s) = me.upgrade() else { return };
            if let Err(e) = s.take(b, d).await {
                break e;
            }
        };
        if let Some(s) = me.upgrade() {
            *s.dead.borrow_mut() = Some(why.clone());
            for p in s.pending.borrow_mut().values_mut() {
                p.done.get_or_insert_with(|| Err(why.clone()));
                if let Some(w) = p.waker.take() {
                    w.wake();
                }
            }
            for w in s.window.borrow_mut().drain(..) {
                w.wake();
            }
        }
    }

    /// Takes one PDU from the target.
    async fn take(&self, b: Bhs, d: Vec<u8>) -> Result<(), String> {
        let h = &b.0;
        match b.opcode() {
            op::SCSI_RESPONSE | op::DATA_IN | op::R2T | op::NOP_IN => {
                // StatSN advances with each status: a response, a Data-In carrying status,
                // a NOP-In answering a NOP-Out (not the target's own ping).
                let status = match b.opcode() {
                    op::SCSI_RESPONSE => true,
                    op::DATA_IN => h[1] & 0x01 != 0,
                    op::NOP_IN => b.itt() != u32::MAX,
                    _ => false,
                };
                if status {
                    self.expstatsn.set(be32(h, 24).wrapping_add(1));
                }
                let max = be32(h, 32);
                if (max.wrapping_sub(self.maxcmdsn.get()) as i32) > 0 {
                    self.maxcmdsn.set(max);
                    for w in self.window.borrow_mut().drain(..) {
                        w.wake();
                    }
                }
            }
            op::REJECT => return Err("the target rejected a PDU".into()),
            op::ASYNC => return Ok(()),
            other => return Err(format!("unexpected opcode {other:#x}")),
        }
        match b.opcode() {
            op::NOP_IN if b.itt() == u32::MAX => {
                // The target's ping: answer it with its transfer tag.
                let mut out = [0u8; BHS_LEN];
                out[0] = 0x40 | op::NOP_OUT;
                out[1] = 0x80;
                out[16..20].copy_from_slice(&u32::MAX.to_be_bytes());
                out[20..24].copy_from_slice(&h[20..24]);
                out[24..28].copy_from_slice(&self.cmdsn.get().to_be_bytes());
                out[28..32].copy_from_slice(&self.expstatsn.get().to_be_bytes());
                self.put(&out, &[]).await
            }
            op::NOP_IN => Ok(()),
            op::R2T => {
                self.answer_r2t(b.itt(), be32(h, 20), be32(h, 40), be32(h, 44))
                    .await
            }
            op::DATA_IN => {
                let mut pending = self.pending.borrow_mut();
                let p = pending.get_mut(&b.itt()).ok_or("Data-In for no command")?;
                let off = be32(h, 40) as usize;
                if off + d.len() > p.read.len() {
                    return Err("Data-In beyond the command's length".into());
                }
                p.read[off..off + d.len()].copy_from_slice(&d);
                if h[1] & 0x01 != 0 {
                    Session::finish(p, h[3]);
                }
                Ok(())
            }
            _ => {
                let mut pending = self.pending.borrow_mut();
                let p = pending
                    .get_mut(&b.itt())
                    .ok_or("a response for no command")?;
                Session::finish(p, if h[2] != 0 { 0xff } else { h[3] });
                Ok(())
            }
        }
    }

    fn finish(p: &mut Pending, status: u8) {
        p.done = Some(if status == 0 {
            Ok(())
        } else {
            Err(format!("SCSI status {status:#04x}"))
        });
        if let Some(w) = p.waker.take() {
            w.wake();
        }
    }

    /// Sends the Data-Out an R2T asks for, in PDUs the target takes.
    async fn answer_r2t(&self, itt: u32, ttt: u32, offset: u32, len: u32) -> Result<(), String> {
        let data = self
            .pending
            .borrow()
            .get(&itt)
            .and_then(|p| p.write.clone())
            .ok_or("an R2T for no write")?;
        let (start, end) = (offset as usize, offset as usize + len as usize);
        if end > data.len() {
            return Err("an R2T beyond the write".into());
        }
        let mut at = start;
        let mut datasn = 0;
        let mut out = Vec::new();
        while at < end {
            let n = (end - at).min(self.neg.max_send as usize);
            let h = build::data_out(itt, ttt, datasn, at as u32, at + n == end, n);
            out.extend_from_slice(&h);
            out.extend_from_slice(&data[at..at + n]);
            out.resize(out.len() + (4 - n % 4) % 4, 0);
            at += n;
            datasn += 1;
        }
        self.put_bytes(out).await
    }

    async fn put(&self, h: &[u8; BHS_LEN], data: &[u8]) -> Result<(), String> {
        let mut v = h.to_vec();
        v.extend_from_slice(data);
        v.resize(v.len() + (4 - data.len() % 4) % 4, 0);
        self.put_bytes(v).await
    }

    async fn put_bytes(&self, v: Vec<u8>) -> Result<(), String> {
        let _turn = self.send.lock().await;
        let (r, _) = self.stream.write_all(v).await;
        r.map_err(|e| format!("cannot send: {e}"))
    }

    /// Waits until the target's window admits CmdSN `sn`.
    async fn window_open(&self, sn: u32) -> Result<(), String> {
        std::future::poll_fn(|cx| {
            if let Some(why) = self.dead.borrow().clone() {
                return Poll::Ready(Err(why));
            }
            if (self.maxcmdsn.get().wrapping_sub(sn) as i32) >= 0 {
                Poll::Ready(Ok(()))
            } else {
                self.window.borrow_mut().push(cx.waker().clone());
                Poll::Pending
            }
        })
        .await
    }

    /// READ(16) or WRITE(16) of `len` bytes at byte `offset`.
    async fn rw(
        &self,
        offset: u64,
        len: usize,
        write: Option<Rc<Vec<u8>>>,
    ) -> Result<Vec<u8>, String> {
        if let Some(why) = self.dead.borrow().clone() {
            return Err(why);
        }
        let b = u64::from(self.block);
        if !offset.is_multiple_of(b) || !(len as u64).is_multiple_of(b) {
            return Err(format!("a request not in whole {b}-byte blocks"));
        }
        let itt = self.itt.get();
        self.itt.set(itt.wrapping_add(1).max(1));
        let sn = self.cmdsn.get();
        self.cmdsn.set(sn.wrapping_add(1));
        self.window_open(sn).await?;
        let mut cdb = [0u8; 16];
        cdb[0] = if write.is_some() { 0x8a } else { 0x88 };
        cdb[2..10].copy_from_slice(&(offset / b).to_be_bytes());
        cdb[10..14].copy_from_slice(&((len as u64 / b) as u32).to_be_bytes());
        let immediate = match &write {
            Some(_) if self.neg.immediate_data => len
                .min(self.neg.first_burst as usize)
                .min(self.neg.max_send as usize),
            _ => 0,
        };
        self.pending.borrow_mut().insert(
            itt,
            Pending {
                read: if write.is_none() {
                    vec![0u8; len]
                } else {
                    Vec::new()
                },
                write: write.clone(),
                done: None,
                waker: None,
            },
        );
        let h = build::command(
            itt,
            self.lun,
            &cdb,
            write.is_none(),
            write.is_some(),
            len as u32,
            sn,
            self.expstatsn.get(),
            immediate,
        );
        let data = write.as_ref().map(|w| &w[..immediate]).unwrap_or(&[]);
        if let Err(e) = self.put(&h, data).await {
            self.pending.borrow_mut().remove(&itt);
            return Err(e);
        }
        let done = std::future::poll_fn(|cx| {
            let mut pending = self.pending.borrow_mut();
            let Some(p) = pending.get_mut(&itt) else {
                return Poll::Ready(Err("command lost".to_string()));
            };
            match p.done.take() {
                Some(r) => Poll::Ready(r),
                None => {
                    p.waker = Some(cx.waker().clone());
                    Poll::Pending
                }
            }
        })
        .await;
        let p = self.pending.borrow_mut().remove(&itt);
        done.map(|()| p.map(|p| p.read).unwrap_or_default())
    }

    pub async fn read(&self, offset: u64, len: usize) -> Result<Vec<u8>, String> {
        self.rw(offset, len, None).await
    }

    pub async fn write(&self, offset: u64, data: &[u8]) -> Result<(), String> {
        self.rw(offset, data.len(), Some(Rc::new(data.to_vec())))
            .await
            .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_as_libiscsi_writes_them() {
        let u = IscsiUrl::parse("iscsi://127.0.0.1:3261/iqn.2026-11.org.raidd:vol/1").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.target.as_str(), u.lun),
            ("127.0.0.1", 3261, "iqn.2026-11.org.raidd:vol", 1)
        );
        assert_eq!(IscsiUrl::parse("iscsi://h/t/0").unwrap().port, 3260);
        for bad in [
            "nbd://h/t/0",
            "iscsi://h/t",
            "iscsi://h/t/x",
            "iscsi://h/t/300",
            "iscsi://u%p@h/t/0",
            "iscsi:///t/0",
        ] {
            assert!(IscsiUrl::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn negotiation_takes_the_targets_answers() {
        let kv = |k: &str, v: &str| (k.to_string(), v.to_string());
        let n = negotiated(&[
            kv("MaxRecvDataSegmentLength", "65536"),
            kv("ImmediateData", "No"),
            kv("FirstBurstLength", "16384"),
            kv("Unknown", "x"),
        ]);
        assert_eq!(
            n,
            Negotiated {
                cmdsn: 0,
                max_cmdsn: 0,
                exp_statsn: 1,
                max_send: 65536,
                immediate_data: false,
                first_burst: 16384,
                max_burst: 262_144
            }
        );
        // Nonsense values fall back to the offer, never below one sector.
        assert_eq!(
            negotiated(&[kv("MaxRecvDataSegmentLength", "0")]).max_send,
            512
        );
        assert_eq!(
            negotiated(&[kv("MaxRecvDataSegmentLength", "x")]).max_send,
            8192
        );
    }
}
