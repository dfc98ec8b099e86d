//! The iSCSI target (RFC 7143): targets and LUNs over the daemon's arrays.
//!
//! A connection logs in through `raidd_iscsi`'s login state machine and then runs the full
//! feature phase ([`conn`]): one reader takes PDUs off the socket (Data-Out payloads land
//! straight in the command's aligned buffer), a task per SCSI command runs it against the
//! array ([`task`]) and queues its PDUs, and one writer sends whatever is queued with a
//! single gathered `sendmsg` (Data-In straight from the buffer the array filled). SCSI
//! semantics (CDB checks, sense data, VPD and mode pages, persistent reservations) are
//! `raidd_scsi`'s pure functions; this module moves bytes and keeps the sequence numbers.
//!
//! Sessions have one connection (MaxConnections=1) and error recovery level 0: a broken
//! connection ends its session, and the initiator logs in again.

mod conn;
mod pr_store;
mod task;

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::{self, Either};
use raidd_engine::{Array, Member};
use raidd_iscsi::login::{self, Login, Portal, Step, TargetEntry};
use raidd_iscsi::pdu::{self, Bhs, Digests, LoginHeader, Request, Seq, BHS_LEN};
use raidd_iscsi::{Secret, TargetLimits};
use raidd_rt::net::Part;
use raidd_scsi::{LunInfo, ModeState, Reservations, Sense};

use crate::budget::Account;
use crate::config::{ChapConfig, IscsiConfig};
use crate::link::{Input, Link};
use crate::logtext::Escaped;
use crate::shared::{SharedState, Stop};
use crate::watch::{Wait, Watch};

/// A client must log in within this time.
const LOGIN_TIMEOUT: Duration = Duration::from_secs(30);
/// The data segment a login PDU may carry (text keys; CHAP values are the longest).
const LOGIN_DATA_MAX: usize = 64 * 1024;
/// What raidd accepts in one data segment (declared as MaxRecvDataSegmentLength).
pub const MAX_RECV_SEGMENT: u32 = 256 * 1024;
/// Largest SCSI transfer (VPD B0 MAXIMUM TRANSFER LENGTH), bytes: NBD's bound too.
pub const MAX_TRANSFER: u32 = 32 << 20;
/// Commands a session may have outstanding (the CmdSN window).
pub const CMD_WINDOW: u32 = 128;

/// One logical unit: an array as SCSI sees it.
pub struct Lun {
    pub number: u64,
    pub array: Arc<Array>,
    pub info: LunInfo,
    pub mode: Mutex<ModeState>,
    pub reservations: Mutex<Reservations>,
    /// Set once any registration exists, so commands skip the reservation lock until then.
    pub reservations_used: AtomicBool,
    /// Where the reservations are kept across restarts (APTPL).
    pub reservations_file: PathBuf,
    /// Unit attentions waiting for each initiator port (I_T nexus).
    pub attentions: Mutex<HashMap<String, VecDeque<Sense>>>,
    pub attentions_pending: AtomicBool,
    /// COMPARE AND WRITE runs alone against the LUN's other writes.
    pub atomic: task::WriteGate,
}

impl std::fmt::Debug for Lun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Lun({} -> {})", self.number, self.array.name())
    }
}

impl Lun {
    /// Queues a unit attention for every nexus in `nexuses` (except `except`).
    pub fn attention_for(&self, nexuses: &[String], except: Option<&str>, sense: &Sense) {
        let mut map = lock(&self.attentions);
        for n in nexuses {
            if Some(n.as_str()) != except {
                map.entry(n.clone()).or_default().push_back(sense.clone());
            }
        }
        self.attentions_pending
            .store(map.values().any(|q| !q.is_empty()), Ordering::Release);
    }

    /// Takes the oldest unit attention waiting for `nexus`.
    pub fn take_attention(&self, nexus: &str) -> Option<Sense> {
        if !self.attentions_pending.load(Ordering::Acquire) {
            return None;
        }
        let mut map = lock(&self.attentions);
        let s = map.get_mut(nexus).and_then(|q| q.pop_front());
        self.attentions_pending
            .store(map.values().any(|q| !q.is_empty()), Ordering::Release);
        s
    }
}

/// The LUN state's mutexes (a poisoned one is a bug: see `crate::POISONED`).
pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().expect(crate::POISONED)
}

#[derive(Debug)]
pub struct Target {
    pub name: String,
    pub luns: Vec<Lun>,
}

impl Target {
    pub fn lun(&self, number: u64) -> Option<&Lun> {
        self.luns.iter().find(|l| l.number == number)
    }
}

/// What every worker shares for iSCSI.
#[derive(Debug)]
pub struct IscsiState {
    pub portal: Portal,
    pub targets: Vec<Target>,
    pub nop_interval: Option<Duration>,
    next_tsih: AtomicU16,
    /// The initiator ports logged in to each target (for unit attentions).
    pub nexuses: Mutex<Vec<(usize, String)>>,
    /// Where persistent reservations are saved.
    pub pr_store: pr_store::Store,
}

impl IscsiState {
    /// The I_T nexus `nexus` of target `t` is gone (logout or lost connection): its SPC-2
    /// reservations end (persistent ones stay, as SPC says).
    pub fn nexus_gone(&self, t: usize, nexus: &str) {
        for l in &self.targets[t].luns {
            if l.reservations_used.load(Ordering::Acquire) {
                lock(&l.reservations).nexus_lost(&raidd_scsi::Nexus {
                    initiator: nexus.to_string(),
                    target_port: l.info.target_port_id,
                });
            }
        }
    }

    fn tsih(&self) -> u16 {
        loop {
            let t = self.next_tsih.fetch_add(1, Ordering::Relaxed);
            if t != 0 {
                return t;
            }
        }
    }

    /// Initiator ports now logged in to target `t`.
    pub fn nexuses_of(&self, t: usize) -> Vec<String> {
        lock(&self.nexuses)
            .iter()
            .filter(|(x, _)| *x == t)
            .map(|(_, n)| n.clone())
            .collect()
    }
}

fn secret(c: &Option<ChapConfig>) -> Option<Secret> {
    c.as_ref().map(|c| Secret {
        user: c.user.clone(),
        secret: c.secret.clone(),
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// SCSI's view of an array.
pub fn lun_info(array: &Array, read_only: bool) -> LunInfo {
    let block_size = array.block_size().max(512);
    let blocks = array.size_bytes() / u64::from(block_size);
    let g = array.geometry();
    let chunk_blocks = (u64::from(g.chunk_sectors()) * 512 / u64::from(block_size)) as u32;
    let data_members = g.members().saturating_sub(g.redundancy()).max(1) as u32;
    let uuid = array.uuid();
    let max_transfer_blocks = MAX_TRANSFER / block_size;
    LunInfo {
        block_size,
        blocks,
        physical_block_exp: 0,
        optimal_transfer_blocks: chunk_blocks.saturating_mul(data_members),
        optimal_granularity_blocks: chunk_blocks,
        max_transfer_blocks,
        read_only,
        thin: true,
        rotational: array.info().rotational,
        write_cache: true,
        vendor: "RAIDD".into(),
        // raidd-scsi cuts and pads these to their INQUIRY widths.
        product: array.name().to_string(),
        revision: concat!(
            env!("CARGO_PKG_VERSION_MAJOR"),
            ".",
            env!("CARGO_PKG_VERSION_MINOR")
        )
        .to_string(),
        serial: hex(&uuid),
        naa_id: uuid,
        target_port_id: 1,
        max_unmap_blocks: max_transfer_blocks,
        max_unmap_descriptors: 256,
        // No limit: WRITE SAME is written in pieces, and a length of 0 (to the end of the
        // LUN, VPD B0 WSNZ=0) must not be refused for its size.
        max_write_same_blocks: 0,
        max_compare_write_blocks: 255.min(max_transfer_blocks / 2).max(1) as u8,
    }
}

fn reservations_file(dir: &Path, array: &Array, lun: u64, target: &str) -> PathBuf {
    let uuid = hex(&array.uuid());
    let t: String = target
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    dir.join(format!("pr-{t}-lun{lun}-{uuid}"))
}

/// Reservations kept by an earlier run (APTPL), or none. A corrupt file is reported and
/// set aside, never fatal: losing reservations is what the initiator sees after a target
/// power loss without APTPL anyway.
fn load_reservations(path: &Path) -> Reservations {
    match std::fs::read(path) {
        Ok(bytes) => match Reservations::decode(&bytes) {
            Ok(r) => {
                tracing::info!(file = %path.display(), "persistent reservations restored");
                r
            }
            Err(e) => {
                tracing::error!(file = %path.display(), "persistent reservations unreadable ({e}); starting without them");
                Reservations::new()
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Reservations::new(),
        Err(e) => {
            tracing::error!(file = %path.display(), "cannot read persistent reservations ({e}); starting without them");
            Reservations::new()
        }
    }
}

/// Builds the target's state from the config and the assembled arrays (`arrays[i]` is the
/// root of config array i).
pub fn state(
    config: &IscsiConfig,
    arrays: &[Arc<Array>],
    listen: std::net::SocketAddr,
) -> std::io::Result<IscsiState> {
    let targets: Vec<Target> = config
        .targets
        .iter()
        .map(|t| Target {
            name: t.name.clone(),
            luns: t
                .luns
                .iter()
                .map(|l| {
                    let array = arrays[l.array].clone();
                    let read_only = l.read_only || array.is_read_only();
                    let info = lun_info(&array, read_only);
                    let file = reservations_file(&config.state_dir, &array, l.lun, &t.name);
                    let reservations = load_reservations(&file);
                    let used = !reservations.encode().is_empty() && reservations.aptpl();
                    Lun {
                        number: l.lun,
                        mode: Mutex::new(ModeState::new(&info)),
                        info,
                        array,
                        reservations: Mutex::new(reservations),
                        reservations_used: AtomicBool::new(used),
                        reservations_file: file,
                        attentions: Mutex::new(HashMap::new()),
                        attentions_pending: AtomicBool::new(false),
                        atomic: task::WriteGate::default(),
                    }
                })
                .collect(),
        })
        .collect();
    let portal = Portal {
        targets: config
            .targets
            .iter()
            .map(|t| TargetEntry {
                name: t.name.clone(),
                alias: t.alias.clone(),
                chap: secret(&t.chap),
                mutual: secret(&t.mutual_chap),
                initiators: t.initiators.clone(),
            })
            .collect(),
        limits: TargetLimits {
            max_recv_data_segment_length: MAX_RECV_SEGMENT,
            max_burst_length: MAX_TRANSFER,
            first_burst_length: MAX_RECV_SEGMENT,
            max_outstanding_r2t: 1,
            max_connections: 1,
            allow_immediate_data: true,
            allow_digests: true,
        },
        address: listen.to_string(),
        tpgt: 1,
        discovery_chap: secret(&config.discovery_chap),
    };
    Ok(IscsiState {
        portal,
        targets,
        nop_interval: config.nop_interval,
        next_tsih: AtomicU16::new(1),
        nexuses: Mutex::new(Vec::new()),
        pr_store: pr_store::Store::new()?,
    })
}

/// A received PDU: its header, parsed request and data segment (padding and digests
/// checked and dropped).
pub struct Pdu {
    pub bhs: Bhs,
    pub request: Request,
    pub data: Vec<u8>,
}

/// Why a connection ends.
#[derive(Debug)]
pub enum End {
    Io(std::io::Error),
    /// The initiator broke the protocol in a way that ends the connection.
    Protocol(String),
}

impl std::fmt::Display for End {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            End::Io(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                write!(f, "closed by the initiator")
            }
            End::Io(e) => write!(f, "{e}"),
            End::Protocol(s) => write!(f, "protocol error: {s}"),
        }
    }
}

impl From<std::io::Error> for End {
    fn from(e: std::io::Error) -> End {
        End::Io(e)
    }
}

/// Reads a header and what follows it up to the data segment; checks the header digest.
/// Until the header's first byte arrives the reader waits for `before`.
pub async fn read_header(
    link: &Link,
    input: &mut Input,
    digests: Digests,
    before: Wait,
) -> Result<(Bhs, Request, pdu::Framing), End> {
    let bhs = Bhs(input.header::<BHS_LEN>(link, before).await?);
    let framing = bhs.framing(digests);
    let tail = input.exact(link, framing.header_tail()).await?;
    let (ahs, hd) = tail.split_at(framing.ahs);
    if framing.header_digest {
        let got: [u8; 4] = hd.try_into().unwrap_or_default();
        if !raidd_iscsi::digest::matches(&[&bhs.0, ahs], got) {
            // Lengths in a header that fails its digest cannot be trusted: at error
            // recovery level 0 the connection ends.
            return Err(End::Protocol("header digest mismatch".into()));
        }
    }
    let request = Request::parse(&bhs, ahs).map_err(|e| End::Protocol(e.to_string()))?;
    Ok((bhs, request, framing))
}

/// Reads padding and the data digest after `data`; false when the digest does not match.
pub async fn read_data_tail(
    link: &Link,
    input: &mut Input,
    framing: &pdu::Framing,
    data: &[u8],
) -> Result<bool, End> {
    let n = framing.pad() + if framing.data_digest { 4 } else { 0 };
    if n == 0 {
        return Ok(true);
    }
    let tail = input.exact(link, n).await?;
    let (pad, dd) = tail.split_at(framing.pad());
    if framing.data_digest {
        let got: [u8; 4] = dd.try_into().unwrap_or_default();
        return Ok(raidd_iscsi::digest::matches(&[data, pad], got));
    }
    Ok(true)
}

/// A whole PDU whose data segment is at most `max_data` bytes. A data digest mismatch is
/// reported as `Ok(None)` after the PDU has been consumed.
pub async fn read_pdu(
    link: &Link,
    input: &mut Input,
    digests: Digests,
    max_data: usize,
) -> Result<Option<Pdu>, End> {
    let (bhs, request, framing) = read_header(link, input, digests, Wait::Nothing).await?;
    if framing.data > max_data {
        return Err(End::Protocol(format!(
            "data segment of {} bytes, more than the {max_data} allowed",
            framing.data
        )));
    }
    let data = input.exact(link, framing.data).await?;
    if !read_data_tail(link, input, &framing, &data).await? {
        return Ok(None);
    }
    Ok(Some(Pdu { bhs, request, data }))
}

/// Wire bytes for a target PDU: header (+ digest), data, padding (+ digest).
pub fn encode(header: [u8; BHS_LEN], data: &[u8], digests: Digests) -> Vec<u8> {
    let f = pdu::frame(&header, data, digests);
    [f.head(), data, f.tail()].concat()
}

/// Serves one initiator connection until it logs out, fails, or the daemon stops.
pub async fn serve_connection(
    link: Link,
    watch: Rc<Watch>,
    state: Arc<IscsiState>,
    shared: &SharedState,
    stop: Stop,
) {
    let peer = link
        .sock
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "?".into());
    let mut input = Input::new(watch.clone());
    let outcome = {
        let l = login_phase(&link, &mut input, &state);
        let timeout = raidd_rt::time::sleep(LOGIN_TIMEOUT);
        let stopping = stop.clone();
        futures::pin_mut!(l, timeout);
        match future::select(l, future::select(timeout, stopping)).await {
            Either::Left((r, _)) => Some(r),
            Either::Right(_) => None,
        }
    };
    let (negotiated, seq) = match outcome {
        Some(Ok(Some(n))) => n,
        Some(Ok(None)) => {
            tracing::info!(%peer, "iSCSI login refused");
            return;
        }
        Some(Err(why)) => {
            tracing::debug!(%peer, "iSCSI login ended: {}", Escaped(&why.to_string()));
            return;
        }
        None => {
            tracing::debug!(%peer, "iSCSI login timed out or the daemon is stopping");
            return;
        }
    };
    // The initiator's name came from the network: logged escaped.
    let initiator = Escaped(&negotiated.params.initiator_name).to_string();
    let target = negotiated.target;
    let isid = hex(&negotiated.isid);
    let nexus = format!("{},i,0x{isid}", negotiated.params.initiator_name);
    match target {
        Some(t) => {
            tracing::info!(%peer, %initiator, target = %state.targets[t].name, "iSCSI session started")
        }
        None => tracing::info!(%peer, %initiator, "iSCSI discovery session started"),
    }
    if let Some(t) = target {
        lock(&state.nexuses).push((t, nexus.clone()));
    }
    let account = Account::new(shared.budget.clone(), shared.iscsi_connection_memory);
    let why = conn::full_feature(conn::Setup {
        link,
        input,
        watch: watch.clone(),
        state: state.clone(),
        account,
        negotiated,
        seq,
        nexus: nexus.clone(),
        stop,
    })
    .await;
    let why = watch.closed_for().map_or(why, str::to_string);
    if let Some(t) = target {
        let mut n = lock(&state.nexuses);
        if let Some(i) = n.iter().position(|(x, s)| *x == t && *s == nexus) {
            n.swap_remove(i);
        }
    }
    tracing::info!(%peer, %initiator, "iSCSI session ended: {}", Escaped(&why));
}

/// Runs the login; `Ok(None)` when the target refused it (the refusal has been sent).
async fn login_phase(
    link: &Link,
    input: &mut Input,
    state: &IscsiState,
) -> Result<Option<(login::Negotiated, Seq)>, End> {
    let mut challenge = [0u8; 16];
    let mut id = [0u8; 1];
    getrandom::fill(&mut challenge)
        .and_then(|()| getrandom::fill(&mut id))
        .map_err(|e| End::Protocol(format!("no randomness for CHAP: {e}")))?;
    let mut machine = Login::new(&state.portal, challenge, id[0], state.tsih());
    let mut seq: Option<Seq> = None;
    loop {
        let Some(p) = read_pdu(link, input, Digests::default(), LOGIN_DATA_MAX).await? else {
            return Err(End::Protocol("login PDU with a bad digest".into()));
        };
        let Some(req) = login::LoginRequest::from_pdu(&p.request, p.data) else {
            return Err(End::Protocol(format!(
                "opcode {:#04x} before login completed",
                p.bhs.opcode()
            )));
        };
        let (itt, isid, cmdsn) = (req.itt, req.isid, req.cmdsn);
        // Login PDUs are immediate: CmdSN does not advance. The first response's StatSN
        // is ours to choose; the initiator's ExpStatSN guess is as good as any.
        let s = seq.get_or_insert(Seq {
            statsn: req.expstatsn,
            expcmdsn: cmdsn,
            maxcmdsn: cmdsn.wrapping_add(CMD_WINDOW - 1),
        });
        s.expcmdsn = cmdsn;
        s.maxcmdsn = cmdsn.wrapping_add(CMD_WINDOW - 1);
        let (resp, step) = machine.step(&state.portal, &req);
        let header = pdu::login_response(
            &LoginHeader {
                transit: resp.transit,
                cont: resp.cont,
                csg: resp.csg,
                nsg: resp.nsg,
                isid,
                tsih: resp.tsih,
                itt,
                status_class: resp.status_class,
                status_detail: resp.status_detail,
            },
            *s,
            resp.data.len(),
        );
        s.statsn = s.statsn.wrapping_add(1);
        link.send(vec![Part::Bytes(encode(
            header,
            &resp.data,
            Digests::default(),
        ))])
        .await?;
        match step {
            Step::Continue => {}
            Step::Close => return Ok(None),
            Step::FullFeature(n) => return Ok(Some((n, *s))),
        }
    }
}
