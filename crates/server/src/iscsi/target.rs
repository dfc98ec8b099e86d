//! What the iSCSI targets share across connections and threads: the targets and their
//! LUNs over the daemon's arrays, reservations, unit attentions, the sessions' nexuses and
//! the write gate of each LUN.

use std::collections::{HashMap, VecDeque};
use std::future::poll_fn;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::task::{Poll, Waker};
use std::time::Duration;

use raidd_engine::{Extent, Member};
use raidd_iscsi::login::{Portal, TargetEntry};
use raidd_iscsi::{Secret, TargetLimits};
use raidd_scsi::{LunInfo, ModeState, Reservations, Sense};

use super::config::{ChapConfig, IscsiConfig, LunConfig};
use super::pr_store;
use crate::frontend::Serving;

/// What raidd accepts in one data segment (declared as MaxRecvDataSegmentLength).
pub const MAX_RECV_SEGMENT: u32 = 256 * 1024;
/// Largest SCSI transfer (VPD B0 MAXIMUM TRANSFER LENGTH), bytes: NBD's bound too.
pub const MAX_TRANSFER: u32 = 32 << 20;
/// Commands a session may have outstanding (the CmdSN window).
pub const CMD_WINDOW: u32 = 128;

/// One logical unit: an array, or a volume of one, as SCSI sees it.
pub struct Lun {
    pub number: u64,
    pub extent: Extent,
    /// The volume it serves (none: the whole array).
    pub volume: Option<String>,
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
    pub atomic: WriteGate,
    /// Reads, writes and SYNCHRONIZE CACHE: counts, bytes, latency.
    pub latency: crate::latency::Latency,
}

impl std::fmt::Debug for Lun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Lun({} -> {})", self.number, self.extent.name())
    }
}

impl Lun {
    /// Whether it takes no writes now: configured so, or its array is read-only.
    pub fn read_only(&self) -> bool {
        self.info.read_only || self.extent.is_read_only()
    }

    /// Its description as a command sees it now (the write-protect flag of the moment).
    pub fn info_now(&self) -> std::borrow::Cow<'_, raidd_scsi::LunInfo> {
        if self.read_only() == self.info.read_only {
            return std::borrow::Cow::Borrowed(&self.info);
        }
        let mut info = self.info.clone();
        info.read_only = true;
        std::borrow::Cow::Owned(info)
    }

    /// Queues a unit attention for every nexus in `nexuses` (except `except`); one that
    /// waits already is not queued twice (as a SCSI target keeps one condition of a kind).
    pub fn attention_for(&self, nexuses: &[String], except: Option<&str>, sense: &Sense) {
        let mut map = lock(&self.attentions);
        for n in nexuses {
            if Some(n.as_str()) != except {
                let q = map.entry(n.clone()).or_default();
                if !q.contains(sense) {
                    q.push_back(sense.clone());
                }
            }
        }
        debug_assert!(
            nexuses
                .iter()
                .all(|n| Some(n.as_str()) == except || map.get(n).is_some_and(|q| !q.is_empty())),
            "every other nexus has the attention queued"
        );
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
        let pending = map.values().any(|q| !q.is_empty());
        self.attentions_pending.store(pending, Ordering::Release);
        s
    }
}

/// The LUN state's mutexes (a poisoned one is a bug: see `crate::POISONED`).
pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().expect(crate::POISONED)
}

/// A target and its LUNs. LUNs come and go while it serves (`raidd lun add|remove`,
/// SIGHUP); a command holds its LUN from the moment it arrives, so one removed under it
/// still finishes against the array it began on.
#[derive(Debug)]
pub struct Target {
    pub name: String,
    /// Never empty: a target's last LUN is not removed while it serves.
    luns: RwLock<Vec<Arc<Lun>>>,
}

impl Target {
    pub fn new(name: String, luns: Vec<Lun>) -> Target {
        assert!(!luns.is_empty(), "a target serves at least one LUN");
        Target {
            name,
            luns: RwLock::new(luns.into_iter().map(Arc::new).collect()),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Vec<Arc<Lun>>> {
        self.luns.read().expect(crate::POISONED)
    }

    pub fn lun(&self, number: u64) -> Option<Arc<Lun>> {
        self.read().iter().find(|l| l.number == number).cloned()
    }

    /// Its LUNs as they are now.
    pub fn luns(&self) -> Vec<Arc<Lun>> {
        self.read().clone()
    }

    /// Its LUN numbers now, as REPORT LUNS lists them.
    pub fn numbers(&self) -> Vec<u64> {
        self.read().iter().map(|l| l.number).collect()
    }

    /// A LUN of it (REPORT LUNS answers through any address, an absent LUN's too).
    pub fn any(&self) -> Arc<Lun> {
        let luns = self.read();
        debug_assert!(!luns.is_empty(), "a target keeps a LUN");
        luns[0].clone()
    }

    fn add(&self, lun: Lun) -> Result<(), String> {
        let mut luns = self.luns.write().expect(crate::POISONED);
        if luns.iter().any(|l| l.number == lun.number) {
            return Err(format!(
                "target {} has a LUN {} already",
                self.name, lun.number
            ));
        }
        luns.push(Arc::new(lun));
        Ok(())
    }

    fn replace(&self, lun: Lun) -> Result<Arc<Lun>, String> {
        let mut luns = self.luns.write().expect(crate::POISONED);
        let slot = luns
            .iter_mut()
            .find(|l| l.number == lun.number)
            .ok_or_else(|| format!("target {} has no LUN {}", self.name, lun.number))?;
        Ok(std::mem::replace(slot, Arc::new(lun)))
    }

    fn remove(&self, number: u64) -> Result<Arc<Lun>, String> {
        let mut luns = self.luns.write().expect(crate::POISONED);
        let at = luns
            .iter()
            .position(|l| l.number == number)
            .ok_or_else(|| format!("target {} has no LUN {number}", self.name))?;
        if luns.len() == 1 {
            return Err(format!(
                "LUN {number} is target {}'s only LUN: a target keeps one while it serves \
                 (take the target out of the config and restart to end it)",
                self.name
            ));
        }
        let gone = luns.remove(at);
        debug_assert!(!luns.is_empty(), "a target keeps a LUN");
        Ok(gone)
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
    /// The directory of the reservation files (APTPL).
    state_dir: PathBuf,
}

impl IscsiState {
    /// The I_T nexus `nexus` of target `t` is gone (logout or lost connection): its SPC-2
    /// reservations end (persistent ones stay, as SPC says).
    pub fn nexus_gone(&self, t: usize, nexus: &str) {
        debug_assert!(t < self.targets.len(), "target {t} is configured");
        for l in self.targets[t].luns() {
            if l.reservations_used.load(Ordering::Acquire) {
                lock(&l.reservations).nexus_lost(&raidd_scsi::Nexus {
                    initiator: nexus.to_string(),
                    target_port: l.info.target_port_id,
                });
            }
        }
    }

    pub(super) fn tsih(&self) -> u16 {
        loop {
            let t = self.next_tsih.fetch_add(1, Ordering::Relaxed);
            if t != 0 {
                return t;
            }
        }
    }

    /// The index of the target called `name`.
    pub fn target_index(&self, name: &str) -> Option<usize> {
        self.targets.iter().position(|t| t.name == name)
    }

    /// The LUN `config` describes, of target `t`, serving `serving`: its reservations
    /// restored from an earlier run (APTPL).
    pub fn build_lun(&self, t: usize, config: &LunConfig, serving: &Serving) -> Lun {
        build_lun(&self.state_dir, &self.targets[t].name, config, serving)
    }

    /// Adds `lun` to target `t`; every initiator port logged in to it is told its LUNs
    /// changed (a unit attention on each LUN it had), so it scans again.
    pub fn add_lun(&self, t: usize, lun: Lun) -> Result<(), String> {
        let number = lun.number;
        self.targets[t].add(lun)?;
        self.luns_changed(t, Some(number));
        Ok(())
    }

    /// Puts `lun` in place of target `t`'s LUN of its number (a changed entry: another
    /// array or volume); every initiator port is told on every LUN, this one too. Commands
    /// that arrived before finish on the one replaced.
    pub fn replace_lun(&self, t: usize, lun: Lun) -> Result<Arc<Lun>, String> {
        let was = self.targets[t].replace(lun)?;
        self.luns_changed(t, None);
        Ok(was)
    }

    /// Takes LUN `number` out of target `t` (not its last one): commands sent to it from
    /// now on find no unit there; the initiator ports are told as for an added one.
    pub fn remove_lun(&self, t: usize, number: u64) -> Result<Arc<Lun>, String> {
        let gone = self.targets[t].remove(number)?;
        self.luns_changed(t, Some(number));
        Ok(gone)
    }

    /// REPORTED LUNS DATA HAS CHANGED for every nexus of target `t`, on each of its LUNs
    /// but `except` (SPC-4 leaves it on the units the nexus can reach; a LUN just added is
    /// new to it).
    fn luns_changed(&self, t: usize, except: Option<u64>) {
        let nexuses = self.nexuses_of(t);
        let sense = Sense::reported_luns_changed();
        let luns = self.targets[t].luns();
        for l in luns.iter().filter(|l| Some(l.number) != except) {
            l.attention_for(&nexuses, None, &sense);
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

pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// SCSI's view of an array or a volume: its geometry is the array's, its size, name and
/// identifier its own.
pub fn lun_info(extent: &Extent, read_only: bool) -> LunInfo {
    let array = extent.array();
    let block_size = extent.block_size().max(512);
    let blocks = extent.size_bytes() / u64::from(block_size);
    let g = array.geometry();
    let chunk_blocks = (u64::from(g.chunk_sectors()) * 512 / u64::from(block_size)) as u32;
    let data_members = g.members().saturating_sub(g.redundancy()).max(1) as u32;
    let uuid = extent.id();
    let max_transfer_blocks = MAX_TRANSFER / block_size;
    debug_assert!(
        max_transfer_blocks > 0 && blocks > 0,
        "a LUN moves at least a block"
    );
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
        product: extent.name().to_string(),
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

fn reservations_file(dir: &Path, extent: &Extent, lun: u64, target: &str) -> PathBuf {
    let uuid = hex(&extent.id());
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

/// Builds the target's state from the config and what each LUN serves (`serving[t][k]` is
/// target t's LUN k's).
pub fn state(
    config: &IscsiConfig,
    serving: &[Vec<Serving>],
    listen: std::net::SocketAddr,
) -> std::io::Result<IscsiState> {
    debug_assert_eq!(
        config.targets.len(),
        serving.len(),
        "a serving list per target"
    );
    debug_assert!(
        config
            .targets
            .iter()
            .zip(serving)
            .all(|(t, s)| t.luns.len() == s.len()),
        "a serving per LUN"
    );
    let targets: Vec<Target> = config
        .targets
        .iter()
        .zip(serving)
        .map(|(t, serving)| {
            let luns = t.luns.iter().zip(serving);
            let luns = luns.map(|(l, s)| build_lun(&config.state_dir, &t.name, l, s));
            Target::new(t.name.clone(), luns.collect())
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
        state_dir: config.state_dir.clone(),
    })
}

fn build_lun(state_dir: &Path, target: &str, l: &LunConfig, s: &Serving) -> Lun {
    let extent = s.extent.clone();
    // Configured read-only; the array's own state is asked per command
    // (`Lun::read_only`): it changes, e.g. when a new journal is attached.
    let info = lun_info(&extent, l.read_only);
    let file = reservations_file(state_dir, &extent, l.lun, target);
    let reservations = load_reservations(&file);
    let used = !reservations.encode().is_empty() && reservations.aptpl();
    Lun {
        number: l.lun,
        mode: Mutex::new(ModeState::new(&info)),
        info,
        volume: s.volume.as_ref().map(|v| v.name.clone()),
        extent,
        reservations: Mutex::new(reservations),
        reservations_used: AtomicBool::new(used),
        reservations_file: file,
        attentions: Mutex::new(HashMap::new()),
        attentions_pending: AtomicBool::new(false),
        atomic: WriteGate::default(),
        latency: Default::default(),
    }
}

/// Writes share the LUN; COMPARE AND WRITE takes it alone, so its compare and its write
/// see no other write in between (SBC-3 atomicity). Taking the shared side is one lock of an
/// uncontended mutex.
#[derive(Debug, Default)]
pub struct WriteGate {
    inner: Mutex<GateState>,
}

#[derive(Debug, Default)]
struct GateState {
    shared: usize,
    exclusive: bool,
    /// Exclusive holders waiting; new shared holders queue behind them.
    exclusive_waiting: usize,
    waiters: Vec<Waker>,
}

pub struct GateGuard<'a> {
    gate: &'a WriteGate,
    exclusive: bool,
}

impl Drop for GateGuard<'_> {
    fn drop(&mut self) {
        let mut s = lock(&self.gate.inner);
        if self.exclusive {
            debug_assert!(s.exclusive && s.shared == 0, "an exclusive holder is alone");
            s.exclusive = false;
        } else {
            debug_assert!(s.shared > 0 && !s.exclusive, "shared holders are counted");
            s.shared -= 1;
        }
        for w in s.waiters.drain(..) {
            w.wake();
        }
    }
}

impl WriteGate {
    pub async fn shared(&self) -> GateGuard<'_> {
        poll_fn(|cx| {
            let mut s = lock(&self.inner);
            if !s.exclusive && s.exclusive_waiting == 0 {
                s.shared += 1;
                return Poll::Ready(GateGuard {
                    gate: self,
                    exclusive: false,
                });
            }
            s.waiters.push(cx.waker().clone());
            Poll::Pending
        })
        .await
    }

    pub async fn exclusive(&self) -> GateGuard<'_> {
        // Counted as waiting from the start, so shared holders stop queueing in front; the
        // count is returned however the wait ends (a dropped future included).
        struct Waiting<'a>(&'a WriteGate);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                let mut s = lock(&self.0.inner);
                debug_assert!(s.exclusive_waiting > 0, "a waiter was counted");
                s.exclusive_waiting -= 1;
                for w in s.waiters.drain(..) {
                    w.wake();
                }
            }
        }
        lock(&self.inner).exclusive_waiting += 1;
        let _waiting = Waiting(self);
        poll_fn(|cx| {
            let mut s = lock(&self.inner);
            if !s.exclusive && s.shared == 0 {
                debug_assert!(s.exclusive_waiting > 0, "this waiter is counted");
                s.exclusive = true;
                return Poll::Ready(GateGuard {
                    gate: self,
                    exclusive: true,
                });
            }
            s.waiters.push(cx.waker().clone());
            Poll::Pending
        })
        .await
    }
}
