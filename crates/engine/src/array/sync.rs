//! Member management and online recovery.
//!
//! A member added to a degraded array takes a free slot as *recovering*: below its recovery
//! point it is current and is read and written like any in-sync member; above it, it is
//! neither read nor written, and the rebuild fills it later from the others. The rebuild
//! walks the member in windows. Before copying a window it raises a barrier on the array
//! regions the window holds ([`super::gate`]): writes in flight there finish first, new ones
//! wait, so the copy reads the newest data, and once the recovery point has moved past the
//! window every later write lands on the new member too. Nothing older is ever written over
//! something newer. The recovery point is checkpointed in the member's superblock (md's
//! recovery_offset), so a restart resumes where it stopped.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use raidd_layout::{Geometry, Reverse, SECTOR_SIZE};
use raidd_md::DevRole;
use raidd_rt::{AlignedBuf, IoVecMut, SharedBuf};
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

use super::{Array, SlotState};
use crate::error::{Error, ErrorKind, Result};
use crate::member::write_bytes;
use crate::member::Member;

/// What a background pass over the array does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SyncKind {
    /// Rebuild one member from the others.
    Recovery,
    /// Make redundancy match the data everywhere (after an unclean shutdown).
    Resync,
    /// Read everything and count mismatches (md's `check`).
    Check,
    /// As check, and rewrite what does not match (md's `repair`).
    Repair,
    /// Copy a working member onto a new one, then retire it (`raidd replace`).
    Replace,
}

impl std::fmt::Display for SyncKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SyncKind::Recovery => "recovery",
            SyncKind::Resync => "resync",
            SyncKind::Check => "check",
            SyncKind::Repair => "repair",
            SyncKind::Replace => "replace",
        })
    }
}

/// How a pass runs. Speed limits are in KiB/s per member, as md's sync_speed_min/max: above
/// `min` the pass yields to foreground I/O; it never goes faster than `max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyncLimits {
    pub min_kib_s: u64,
    pub max_kib_s: u64,
    /// Member bytes per window (rounded up to whole chunks): writes to the array region a
    /// window holds wait while it is copied.
    pub window_bytes: u64,
}

impl Default for SyncLimits {
    fn default() -> Self {
        // md's speed defaults.
        SyncLimits {
            min_kib_s: 1_000,
            max_kib_s: 200_000,
            window_bytes: 4 << 20,
        }
    }
}

impl SyncLimits {
    /// No throttling at all (tests, benchmarks of the raw rate).
    pub const UNLIMITED: SyncLimits = SyncLimits {
        min_kib_s: u64::MAX,
        max_kib_s: u64::MAX,
        window_bytes: 4 << 20,
    };

    fn unthrottled(&self) -> bool {
        self.min_kib_s == u64::MAX && self.max_kib_s == u64::MAX
    }
}

/// A running pass: what `raidd status` shows.
#[derive(Debug)]
pub struct SyncProgress {
    pub kind: SyncKind,
    /// The member being rebuilt (recovery).
    pub role: Option<usize>,
    /// Sectors to cover, per member.
    pub total: u64,
    pub(super) done: AtomicU64,
    /// Where this run started (a resumed recovery starts part way).
    start: u64,
    mismatches: AtomicU64,
    /// Mismatch locations logged so far (the log is capped).
    pub(super) logged: AtomicU64,
    started: Instant,
    cancel: AtomicBool,
}

impl SyncProgress {
    pub fn done(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }
    pub fn mismatches(&self) -> u64 {
        self.mismatches.load(Ordering::Relaxed)
    }
    pub(crate) fn add_mismatches(&self, sectors: u64) {
        self.mismatches.fetch_add(sectors, Ordering::Relaxed);
    }
    pub(super) fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Acquire)
    }
}

/// A snapshot of a running pass, in bytes of the space it walks (member bytes for recovery
/// and parity levels, array bytes for mirrors).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SyncStatus {
    pub kind: SyncKind,
    pub member: Option<String>,
    pub done_bytes: u64,
    pub total_bytes: u64,
    pub percent: f64,
    pub speed_bytes_s: u64,
    pub eta_s: Option<u64>,
    /// Sectors found inconsistent so far (md's mismatch_cnt).
    pub mismatch_sectors: u64,
}

/// How a finished pass ended.
#[derive(Clone, Debug, Serialize)]
pub struct LastSync {
    pub kind: SyncKind,
    /// `finished`, `interrupted` or `failed`.
    pub outcome: &'static str,
    pub member: Option<String>,
    pub mismatch_sectors: u64,
    pub seconds: f64,
}

/// The running pass and the last one's result, swapped together so a watcher never sees
/// neither.
#[derive(Debug, Default)]
pub(super) struct SyncSlot {
    running: Option<Arc<SyncProgress>>,
    last: Option<LastSync>,
}

/// Ends the array's running pass when the pass ends, however it ends, recording how.
pub(super) struct SyncGuard<'a> {
    array: &'a Array,
    progress: Arc<SyncProgress>,
    member: Option<String>,
    finished: bool,
}

impl<'a> SyncGuard<'a> {
    pub(super) fn new(array: &'a Array, progress: Arc<SyncProgress>) -> SyncGuard<'a> {
        let member = progress
            .role
            .and_then(|r| array.member(r))
            .map(|m| m.info().name.clone());
        SyncGuard {
            array,
            progress,
            member,
            finished: false,
        }
    }

    pub(super) fn finish(mut self) {
        self.finished = true;
    }
}

impl Drop for SyncGuard<'_> {
    fn drop(&mut self) {
        let p = &self.progress;
        let outcome = if self.finished {
            "finished"
        } else if p.cancelled() {
            "interrupted"
        } else {
            "failed"
        };
        let mut slot = self.array.sync.lock().expect(crate::POISONED);
        slot.running = None;
        slot.last = Some(LastSync {
            kind: p.kind,
            outcome,
            member: self.member.take(),
            mismatch_sectors: p.mismatches(),
            seconds: p.started.elapsed().as_secs_f64(),
        });
    }
}

/// Paces a pass: never above `max`, and above `min` only while no foreground I/O arrives.
pub(super) struct Throttle {
    limits: SyncLimits,
    mark: Instant,
    mark_pos: u64,
    foreground: u64,
    /// When foreground I/O was last seen arriving.
    foreground_seen: Option<Instant>,
}

/// Foreground I/O seen this recently counts as "busy" (looks microseconds apart would
/// otherwise often see nothing new and let a burst of windows through).
const BUSY_FOR: Duration = Duration::from_millis(250);

impl Throttle {
    pub(super) fn new(limits: SyncLimits, array: &Array, pos: u64) -> Throttle {
        Throttle {
            limits,
            mark: Instant::now(),
            mark_pos: pos,
            foreground: array.foreground_ops(),
            foreground_seen: None,
        }
    }

    /// Whether the pass may go on at `pos` now (above `max`, or above `min` while
    /// foreground I/O arrives since the last look, it may not).
    pub(super) fn allows(&mut self, array: &Array, pos: u64) -> bool {
        if self.limits.unthrottled() {
            return true;
        }
        let secs = self.mark.elapsed().as_secs_f64().max(1e-3);
        let kib_s = (pos - self.mark_pos) as f64 / 2.0 / secs;
        let fg = array.foreground_ops();
        if fg != self.foreground {
            self.foreground = fg;
            self.foreground_seen = Some(Instant::now());
        }
        let busy = self.foreground_seen.is_some_and(|t| t.elapsed() < BUSY_FOR);
        let ok = kib_s <= self.limits.max_kib_s as f64
            && !(busy && kib_s > self.limits.min_kib_s as f64);
        if ok && self.mark.elapsed() > Duration::from_secs(3) {
            self.mark = Instant::now();
            self.mark_pos = pos;
        }
        ok
    }

    /// Waits until the pass may go on, or is asked to stop. Call it holding no barrier:
    /// writes to a region under a barrier wait for as long as this sleeps.
    pub(super) async fn pace(&mut self, array: &Array, pos: u64, progress: &SyncProgress) {
        while !progress.cancelled() && !self.allows(array, pos) {
            raidd_rt::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// What an `add` did with the member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Added {
    /// It took this slot and needs recovery ([`Array::recover`]).
    Recovering(usize),
    /// The array has no free slot: it waits as a spare.
    Spare,
}

/// Rebuild windows copied at the same time.
const WINDOWS_IN_FLIGHT: usize = 4;
/// How often a running recovery records its progress in the superblocks.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(2);

impl Array {
    /// Reads and writes from clients so far (a pass yields to them above its minimum speed).
    fn foreground_ops(&self) -> u64 {
        self.counters.sum(|s| &s.reads) + self.counters.sum(|s| &s.writes)
    }

    pub(super) fn begin_sync(
        &self,
        kind: SyncKind,
        role: Option<usize>,
        total: u64,
        start: u64,
    ) -> Result<Arc<SyncProgress>> {
        let mut cur = self.sync.lock().expect(crate::POISONED);
        if let Some(p) = cur.running.as_ref() {
            return Err(Error::new(
                ErrorKind::Conflict,
                format!("{}: a {} is already running", self.name, p.kind),
            ));
        }
        let p = Arc::new(SyncProgress {
            kind,
            role,
            total,
            done: AtomicU64::new(start),
            start,
            mismatches: AtomicU64::new(0),
            logged: AtomicU64::new(0),
            started: Instant::now(),
            cancel: AtomicBool::new(false),
        });
        cur.running = Some(p.clone());
        Ok(p)
    }

    /// The pass running now, if any.
    pub fn sync_progress(&self) -> Option<Arc<SyncProgress>> {
        self.sync.lock().expect(crate::POISONED).running.clone()
    }

    /// How the last pass ended, once one has.
    pub fn last_sync(&self) -> Option<LastSync> {
        self.sync.lock().expect(crate::POISONED).last.clone()
    }

    pub(super) fn sync_status(&self) -> Option<SyncStatus> {
        let p = self.sync_progress()?;
        let done = p.done();
        let secs = p.started.elapsed().as_secs_f64();
        let rate = if secs > 0.0 {
            (done - p.start) as f64 * SECTOR_SIZE as f64 / secs
        } else {
            0.0
        };
        let left = p.total.saturating_sub(done) * SECTOR_SIZE;
        Some(SyncStatus {
            kind: p.kind,
            member: p
                .role
                .and_then(|r| self.member(r))
                .map(|m| m.info().name.clone()),
            done_bytes: done * SECTOR_SIZE,
            total_bytes: p.total * SECTOR_SIZE,
            percent: if p.total == 0 {
                100.0
            } else {
                done as f64 * 100.0 / p.total as f64
            },
            speed_bytes_s: rate as u64,
            eta_s: (rate >= 1.0).then(|| (left as f64 / rate) as u64),
            mismatch_sectors: p.mismatches(),
        })
    }

    /// Asks the running pass to stop at its next window (recovery keeps its progress).
    pub fn cancel_sync(&self) -> bool {
        match self.sync_progress() {
            Some(p) => {
                p.cancel.store(true, Ordering::Release);
                true
            }
            None => false,
        }
    }

    pub(super) fn check_writable(&self) -> Result<()> {
        if self.read_only {
            return Err(Error::new(
                ErrorKind::ReadOnly,
                format!("{} is read-only", self.name),
            ));
        }
        Ok(())
    }

    /// Names of every member the array holds: in its slots, its spares, and failed members
    /// not yet removed.
    pub fn member_names(&self) -> Vec<String> {
        let mut v: Vec<String> = (0..self.slots.len())
            .filter_map(|r| self.member(r).map(|m| m.info().name.clone()))
            .collect();
        v.extend(super::names(&self.spares_list));
        v.extend(super::names(&self.detached));
        v
    }

    /// The slot of the member called `name` (as [`Member::info`] names it).
    pub fn role_of(&self, name: &str) -> Option<usize> {
        (0..self.slots.len()).find(|&r| self.member(r).is_some_and(|m| m.info().name == name))
    }

    /// Fails a working member on request (`raidd fail`): as an I/O error would.
    pub async fn fail_member(&self, role: usize) -> Result<()> {
        self.check_writable()?;
        match self.slot_state(role) {
            SlotState::InSync | SlotState::Recovering => {}
            s => {
                return Err(Error::new(
                    ErrorKind::InvalidInput,
                    format!("{}: slot {role} is {s:?}, not a working member", self.name),
                ))
            }
        }
        self.fail_slot(role, &std::io::Error::other("failed by the administrator"))
            .await;
        Ok(())
    }

    /// Removes a failed member or a spare from the array (`raidd remove`) and returns it:
    /// nothing refers to it afterwards, so its device is free. Working members must be
    /// failed first.
    pub async fn remove_member(&self, name: &str) -> Result<Arc<dyn Member>> {
        self.check_writable()?;
        let _membership = self.membership.lock().await;
        let take = |l: &std::sync::Mutex<Vec<Arc<dyn Member>>>| {
            let mut v = l.lock().expect(crate::POISONED);
            let i = v.iter().position(|m| m.info().name == name)?;
            Some(v.remove(i))
        };
        if let Some(m) = take(&self.detached) {
            if let Some(meta) = &self.meta {
                meta.forget_failed(&m).await;
            }
            return Ok(m);
        }
        if let Some(m) = take(&self.spares_list) {
            return Ok(m);
        }
        let Some(role) = self.role_of(name) else {
            return Err(Error::new(
                ErrorKind::NotFound,
                format!("{name} is not a member of {}", self.name),
            ));
        };
        if self.slot_state(role) != SlotState::Faulty {
            return Err(Error::new(
                ErrorKind::Conflict,
                format!("{name} is working in {}; fail it first", self.name),
            ));
        }
        let m = self
            .take_slot_member(role)
            .expect("a faulty slot holds its member");
        self.slots[role]
            .state
            .store(SlotState::Missing as u8, Ordering::Release);
        if let Some(meta) = &self.meta {
            meta.forget_failed(&m).await;
        }
        Ok(m)
    }

    fn take_slot_member(&self, role: usize) -> Option<Arc<dyn Member>> {
        self.slots[role].member.take()
    }

    /// Adds a member (`raidd add`, or a spare claimed on failure). It takes the first slot
    /// that is missing or whose member failed (the failed member stays listed until
    /// removed) and starts as recovering; with no such slot it becomes a spare. The caller
    /// runs [`Array::recover`] for a recovering slot.
    ///
    /// A former member of this array goes back to its own slot if that is free, and if it
    /// missed nothing the write-intent bitmap does not mark, its recovery rebuilds only
    /// the marked chunks (md's re-add; [`Array::recovering_by_bitmap`]).
    pub async fn add_member(&self, member: Arc<dyn Member>) -> Result<Added> {
        self.check_writable()?;
        self.check_alive()?;
        let _membership = self.membership.lock().await;
        let Some(meta) = &self.meta else {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!("{} has no md metadata to record a new member in", self.name),
            ));
        };
        if self.geometry.redundancy() == 0 {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "{} is {}: it has no redundancy to rebuild a member from",
                    self.name,
                    self.geometry.level()
                ),
            ));
        }
        let name = member.info().name.clone();
        if self.member_names().contains(&name) {
            return Err(Error::new(
                ErrorKind::Conflict,
                format!("{name} is already part of {}", self.name),
            ));
        }
        let is_free =
            |r: usize| matches!(self.slot_state(r), SlotState::Missing | SlotState::Faulty);
        // A former member of this array goes back to its own slot when that is free.
        let old = crate::assemble::examine(&*member).await.ok();
        let own = old
            .as_ref()
            .filter(|sb| sb.set_uuid == self.uuid)
            .and_then(|sb| match sb.own_role() {
                DevRole::Active(r) if usize::from(r) < self.slots.len() => Some(usize::from(r)),
                _ => None,
            })
            .filter(|&r| is_free(r));
        let free = own.or_else(|| (0..self.slots.len()).find(|&r| is_free(r)));
        let Some(role) = free else {
            let failed = meta.add_member(None, member.clone(), None).await?.failed;
            self.spares_list.lock().expect(crate::POISONED).push(member);
            tracing::info!(array = %self.name, member = %name, "added as a spare");
            self.superblocks_failed(failed).await;
            return Ok(Added::Spare);
        };
        let detached = if self.slot_state(role) == SlotState::Faulty {
            self.take_slot_member(role)
        } else {
            None
        };
        // Its data is where it was only if the data area does not move (checked by `meta`).
        let by_bitmap_at = match (&old, own) {
            (Some(sb), Some(r))
                if r == role && self.may_recover_by_bitmap(meta, &*member, sb).await =>
            {
                Some(sb.data_offset)
            }
            _ => None,
        };
        let added = match meta
            .add_member(Some(role), member.clone(), by_bitmap_at)
            .await
        {
            Ok(x) => x,
            Err(e) => {
                if let Some(d) = detached {
                    self.slots[role].member.replace(Some(d));
                }
                return Err(e);
            }
        };
        if let Some(d) = detached {
            self.detached.lock().expect(crate::POISONED).push(d);
        }
        let slot = &self.slots[role];
        slot.data_offset.store(added.data_offset, Ordering::Relaxed);
        slot.recovered.store(0, Ordering::Release);
        let by_bitmap = added.by_bitmap;
        slot.by_bitmap.store(by_bitmap, Ordering::Release);
        // Its superblock carries no devflags (`Metadata::add_member`): not write-mostly.
        slot.write_mostly.store(false, Ordering::Relaxed);
        slot.member.replace(Some(member));
        slot.state
            .store(SlotState::Recovering as u8, Ordering::Release);
        if by_bitmap {
            tracing::info!(array = %self.name, member = %name, role, "re-added: recovering the chunks its bitmap marks");
        } else {
            tracing::info!(array = %self.name, member = %name, role, "added; recovery needed");
        }
        self.superblocks_failed(added.failed).await;
        Ok(Added::Recovering(role))
    }

    /// Whether a former member of this slot, with superblock `sb`, missed nothing but the
    /// chunks the write-intent bitmap marks (md's rule for a re-add): it was in sync when it
    /// left (no recovery offset), and no bit has been cleared since (its events are at
    /// least the bitmap's events_cleared, which clearing raises first). Not while a resync
    /// is due: the bits then also stand for chunks the resync must visit. Nor with bad
    /// blocks in its log: the kernel never wrote there, bit or not.
    async fn may_recover_by_bitmap(
        &self,
        meta: &crate::meta::Metadata,
        member: &dyn Member,
        sb: &raidd_md::Superblock,
    ) -> bool {
        if self.intent.is_none() || self.needs_resync() {
            return false;
        }
        let (events, cleared) = meta.events_and_cleared().await;
        let Some(cleared) = cleared else { return false };
        sb.feature_map & raidd_md::feature::RECOVERY_OFFSET == 0
            && sb.events >= cleared
            && sb.events <= events
            && crate::assemble::read_bad_blocks(member, sb)
                .await
                .is_ok_and(|bad| bad.is_empty())
    }

    /// Whether slot `role` recovers only the chunks the write-intent bitmap marks (a member
    /// added back to its own slot, see [`Array::add_member`]).
    pub fn recovering_by_bitmap(&self, role: usize) -> bool {
        self.slots
            .get(role)
            .is_some_and(|s| s.by_bitmap.load(Ordering::Acquire))
    }

    /// Takes a spare of this array (one assembled with md's spare role, or added while the
    /// array was whole) into a free slot. Returns the slot to recover, if one was taken.
    pub async fn claim_own_spare(&self) -> Result<Option<usize>> {
        let free = (0..self.slots.len())
            .any(|r| matches!(self.slot_state(r), SlotState::Missing | SlotState::Faulty));
        if !free {
            return Ok(None);
        }
        let spare = {
            let mut v = self.spares_list.lock().expect(crate::POISONED);
            if v.is_empty() {
                return Ok(None);
            }
            v.remove(0)
        };
        match self.add_member(spare).await? {
            Added::Recovering(r) => Ok(Some(r)),
            Added::Spare => Ok(None),
        }
    }

    /// Member sectors per window: whole chunks, about `bytes`.
    pub(super) fn sync_window(&self, bytes: u64) -> u64 {
        let chunk = u64::from(self.geometry.chunk_sectors()).max(1);
        (bytes / SECTOR_SIZE).max(1).div_ceil(chunk) * chunk
    }

    /// Rebuilds a recovering slot from the others while the array serves I/O, from its
    /// recovery point to the end; on success the slot is in sync. Stops early (keeping its
    /// progress) when cancelled or when the member or the array fails.
    pub async fn recover(&self, role: usize, limits: SyncLimits) -> Result<()> {
        self.check_writable()?;
        if self.slot_state(role) != SlotState::Recovering {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("{}: slot {role} is not waiting for recovery", self.name),
            ));
        }
        // The member's copy of the bitmap is read once it is in sync; whatever it holds now
        // (none, or bits of when it left) is replaced before it gets there.
        self.write_whole_intent().await;
        let total = self.geometry.member_used_sectors(role);
        let chunk = u64::from(self.geometry.chunk_sectors()).max(1);
        // A recovery point from the kernel need not be chunk aligned: start at its chunk.
        let mut pos = self.slots[role].recovered.load(Ordering::Acquire) / chunk * chunk;
        let progress = self.begin_sync(SyncKind::Recovery, Some(role), total, pos)?;
        let guard = SyncGuard::new(self, progress.clone());
        let name = self
            .member(role)
            .map(|m| m.info().name.clone())
            .unwrap_or_default();
        tracing::info!(array = %self.name, member = %name, from_sector = pos, "recovery started");
        let window = self.sync_window(limits.window_bytes);
        let mut throttle = Throttle::new(limits, self, pos);
        let mut checkpoint = Instant::now();
        // Windows overlap (one's writes with the next one's reads); each keeps its barrier
        // until the recovery point has moved past it, and the point moves in order.
        let mut inflight = futures::stream::FuturesOrdered::new();
        let mut issued = pos;
        let mut stopping = false;
        loop {
            // Issue while the limits allow without waiting. Sleeping for the limits happens
            // only with no window in flight: a window's barrier holds writes back until the
            // window is collected below.
            while !stopping && issued < total && inflight.len() < WINDOWS_IN_FLIGHT {
                if progress.cancelled() {
                    stopping = true;
                    break;
                }
                if !throttle.allows(self, issued) {
                    break;
                }
                // Members that complete at once (memory) never suspend: let others run.
                raidd_rt::yield_now().await;
                let end = (issued + window).min(total);
                inflight.push_back(self.recover_window(role, issued..end));
                issued = end;
            }
            if inflight.is_empty() {
                if stopping || issued >= total {
                    break;
                }
                throttle.pace(self, issued, &progress).await;
                continue;
            }
            let Some(done) = futures::StreamExt::next(&mut inflight).await else {
                break;
            };
            let (end, barrier) = done?;
            self.slots[role].recovered.store(end, Ordering::Release);
            drop(barrier);
            pos = end;
            progress.done.store(pos, Ordering::Relaxed);
            self.check_alive()?;
            if self.slot_state(role) != SlotState::Recovering {
                return Err(Error::new(
                    ErrorKind::Io,
                    format!("{}: {name} failed during recovery", self.name),
                ));
            }
            if checkpoint.elapsed() >= CHECKPOINT_EVERY && pos < total {
                self.checkpoint(role, pos).await;
                checkpoint = Instant::now();
            }
        }
        if pos < total {
            debug_assert!(stopping, "windows ended early without a stop");
            self.checkpoint(role, pos).await;
            tracing::info!(array = %self.name, member = %name, at_sector = pos, "recovery interrupted");
            return Err(Error::new(
                ErrorKind::Interrupted,
                format!("{}: recovery of {name} stopped at sector {pos}", self.name),
            ));
        }
        let member = self.member_ref(role);
        if let Err(e) = member.flush().await {
            self.fail_member_io(role, &member, &e).await;
            return Err(Error::io(format!("{}: flushing {name}", self.name), e));
        }
        if self.slots[role]
            .state
            .compare_exchange(
                SlotState::Recovering as u8,
                SlotState::InSync as u8,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_err()
        {
            return Err(Error::new(
                ErrorKind::Io,
                format!("{}: {name} failed during recovery", self.name),
            ));
        }
        self.slots[role].by_bitmap.store(false, Ordering::Release);
        if let Some(meta) = &self.meta {
            self.superblocks_failed(meta.set_recovery(role, None, false).await)
                .await;
        }
        self.check_alive()?;
        tracing::info!(array = %self.name, member = %name, "recovery finished");
        guard.finish();
        Ok(())
    }

    async fn checkpoint(&self, role: usize, pos: u64) {
        if let Some(meta) = &self.meta {
            let by_bitmap = self.slots[role].by_bitmap.load(Ordering::Acquire);
            self.superblocks_failed(meta.set_recovery(role, Some(pos), by_bitmap).await)
                .await;
        }
    }

    /// Rebuilds member sectors `range` of slot `role` under a barrier; returns the end of
    /// the range and the barrier, which the caller drops after moving the recovery point.
    async fn recover_window(
        &self,
        role: usize,
        range: std::ops::Range<u64>,
    ) -> Result<(u64, super::gate::Barrier<'_>)> {
        let regions = self.regions_of(role, range.clone());
        let barrier = self.gate.barrier(regions.iter().copied()).await;
        // A member re-added by its bitmap holds current data wherever no bit is set. Looked
        // at under the barrier: a write that reached these regions since the member left has
        // set its bit (none is cleared while the slot recovers, the array being degraded).
        if self.slots[role].by_bitmap.load(Ordering::Acquire) && !self.intent_set_in(&regions) {
            return Ok((range.end, barrier));
        }
        match &self.geometry {
            Geometry::Parity(pg) => {
                let chunk = u64::from(pg.chunk_sectors);
                let stripes = range.start / chunk..range.end.div_ceil(chunk);
                futures::future::try_join_all(stripes.map(|s| self.recover_stripe(role, s)))
                    .await?;
            }
            _ => {
                let runs = self.data_runs(role, range.clone());
                futures::future::try_join_all(runs.iter().map(|r| self.copy_run(role, r))).await?;
            }
        }
        Ok((range.end, barrier))
    }

    /// The array regions (sector, count) that member sectors `range` of `role` hold: what a
    /// pass over that range must keep writes out of.
    fn regions_of(&self, role: usize, range: std::ops::Range<u64>) -> Vec<(u64, u64)> {
        match &self.geometry {
            Geometry::Parity(pg) => {
                let chunk = u64::from(pg.chunk_sectors);
                let stripes = range.start / chunk..range.end.div_ceil(chunk);
                let per = pg.stripe_data_sectors();
                vec![(stripes.start * per, (stripes.end - stripes.start) * per)]
            }
            _ => self
                .data_runs(role, range)
                .iter()
                .map(|r| (r.array_sector, r.sectors))
                .collect(),
        }
    }

    /// Copies slot `role`'s member onto `new` while the array serves I/O, then puts `new`
    /// in the slot and lists the old member as failed (for `remove`). The array stays
    /// redundant throughout: the old member serves until the end, and every write below
    /// the copy point goes to both. If the old member fails meanwhile the replace stops and
    /// `new` waits as a spare (a recovery then rebuilds the slot onto it).
    pub async fn replace(
        &self,
        role: usize,
        new: Arc<dyn Member>,
        limits: SyncLimits,
    ) -> Result<()> {
        self.check_writable()?;
        self.check_alive()?;
        let membership = self.membership.lock().await;
        let Some(meta) = &self.meta else {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!(
                    "{} has no md metadata to record a replacement in",
                    self.name
                ),
            ));
        };
        if role >= self.slots.len() || self.slot_state(role) != SlotState::InSync {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "{}: slot {role} has no working member to replace",
                    self.name
                ),
            ));
        }
        let new_name = new.info().name.clone();
        if self.member_names().contains(&new_name) {
            return Err(Error::new(
                ErrorKind::Conflict,
                format!("{new_name} is already part of {}", self.name),
            ));
        }
        let total = self.geometry.member_used_sectors(role);
        let progress = self.begin_sync(SyncKind::Replace, Some(role), total, 0)?;
        let guard = SyncGuard::new(self, progress.clone());
        let old = Arc::clone(&self.member_ref(role));
        let old_name = old.info().name.clone();
        // The new member carries a spare's superblock while it is built: a restart meanwhile
        // sees a spare, for md as for raidd.
        let added = meta.add_member(None, new.clone(), None).await?;
        let (data_offset, failed) = (added.data_offset, added.failed);
        self.superblocks_failed(failed).await;
        let slot = &self.slots[role];
        slot.replaced.store(0, Ordering::Release);
        *slot.replacement.write().expect(crate::POISONED) = Some((new.clone(), data_offset));
        slot.replacing.store(true, Ordering::Release);
        drop(membership);
        tracing::info!(array = %self.name, member = %old_name, with = %new_name, "replace started");
        let window = self.sync_window(limits.window_bytes);
        let mut throttle = Throttle::new(limits, self, 0);
        let mut pos = 0;
        let result = async {
            if data_offset != slot.data_offset.load(Ordering::Relaxed) {
                return Err(Error::new(
                    ErrorKind::Unsupported,
                    format!(
                        "{}: {old_name} has its data at a different offset than new members get",
                        self.name
                    ),
                ));
            }
            while pos < total {
                self.check_alive()?;
                if self.slot_state(role) != SlotState::InSync
                    || !slot.replacing.load(Ordering::Acquire)
                {
                    return Err(Error::new(
                        ErrorKind::Io,
                        format!(
                            "{}: the replace of {old_name} stopped: a member failed",
                            self.name
                        ),
                    ));
                }
                if progress.cancelled() {
                    return Err(Error::new(
                        ErrorKind::Interrupted,
                        format!("{}: the replace of {old_name} was stopped", self.name),
                    ));
                }
                throttle.pace(self, pos, &progress).await;
                if progress.cancelled() {
                    continue; // reported at the top of the loop
                }
                raidd_rt::yield_now().await;
                let end = (pos + window).min(total);
                let barrier = self.gate.barrier(self.regions_of(role, pos..end)).await;
                let len = ((end - pos) * SECTOR_SIZE) as usize;
                let data = match crate::member::read_bytes(
                    &*old,
                    self.member_offset(role, pos),
                    len,
                )
                .await
                {
                    Ok(d) => d,
                    Err(e) => {
                        self.fail_member_io(role, &old, &e).await;
                        return Err(Error::io(format!("{}: reading {old_name}", self.name), e));
                    }
                };
                write_bytes(&*new, data_offset + pos * SECTOR_SIZE, data)
                    .await
                    .map_err(|e| Error::io(format!("{}: writing {new_name}", self.name), e))?;
                slot.replaced.store(end, Ordering::Release);
                drop(barrier);
                pos = end;
                progress.done.store(pos, Ordering::Relaxed);
            }
            new.flush()
                .await
                .map_err(|e| Error::io(format!("{}: flushing {new_name}", self.name), e))
        }
        .await;
        // The swap below needs the slot still working; hold membership from here on.
        let membership = self.membership.lock().await;
        let result = result.and_then(|()| {
            if self.slot_state(role) == SlotState::InSync {
                Ok(())
            } else {
                Err(Error::new(
                    ErrorKind::Io,
                    format!("{}: {old_name} failed as the replace finished", self.name),
                ))
            }
        });
        if let Err(e) = result {
            slot.replacing.store(false, Ordering::Release);
            slot.replacement.write().expect(crate::POISONED).take();
            // The new member stays the array's spare: a failed slot claims it.
            self.spares_list.lock().expect(crate::POISONED).push(new);
            return Err(e);
        }
        // Swap: every write since the copy finished went to both.
        let failed = meta.complete_replacement(role, &new).await?;
        slot.write_mostly.store(false, Ordering::Relaxed); // the new member's own: none
        slot.member.replace(Some(new));
        slot.replacing.store(false, Ordering::Release);
        slot.replacement.write().expect(crate::POISONED).take();
        self.detached.lock().expect(crate::POISONED).push(old);
        self.superblocks_failed(failed).await;
        drop(membership);
        tracing::info!(array = %self.name, member = %old_name, with = %new_name, "replace finished");
        guard.finish();
        Ok(())
    }

    /// The array data that member sectors `range` of `role` hold, as runs contiguous on both
    /// sides (mirrored levels).
    fn data_runs(&self, role: usize, range: std::ops::Range<u64>) -> Vec<Run> {
        let chunk = u64::from(self.geometry.chunk_sectors());
        let mut runs: Vec<Run> = Vec::new();
        let mut sec = range.start;
        while sec < range.end {
            let n = if chunk == 0 {
                range.end - sec
            } else {
                (chunk - sec % chunk).min(range.end - sec)
            };
            if let Reverse::Data { array_sector, .. } = self.geometry.reverse(role, sec) {
                match runs.last_mut() {
                    Some(last)
                        if last.member_sector + last.sectors == sec
                            && last.array_sector + last.sectors == array_sector =>
                    {
                        last.sectors += n
                    }
                    _ => runs.push(Run {
                        member_sector: sec,
                        array_sector,
                        sectors: n,
                    }),
                }
            }
            sec += n;
        }
        runs
    }

    /// Copies one run from the working copies onto the recovering member.
    async fn copy_run(&self, role: usize, run: &Run) -> Result<()> {
        let len = (run.sectors * SECTOR_SIZE) as usize;
        let buf = SharedBuf::new(AlignedBuf::for_overwrite(len));
        let mut iov = IoVecMut::new();
        iov.push(buf.slice_mut(0..len).expect("fresh buffer"));
        let pieces = self.geometry.pieces(run.array_sector, run.sectors);
        let (r, iov) = self
            .mapped_read(run.array_sector * SECTOR_SIZE, iov, &pieces)
            .await;
        drop(iov);
        r?;
        let data = buf.try_into_inner().expect("read released the buffer");
        self.write_member_data(role, run.member_sector, data).await
    }

    /// Writes `data` at member sector `sector` of slot `role` (a rebuilt region, repaired
    /// redundancy); a member that fails the write is failed.
    pub(super) async fn write_member_data(
        &self,
        role: usize,
        sector: u64,
        data: AlignedBuf,
    ) -> Result<()> {
        let member = self.member_ref(role);
        if let Err(e) = write_bytes(&**member, self.member_offset(role, sector), data).await {
            self.fail_member_io(role, &member, &e).await;
            return Err(Error::io(
                format!("{}: writing {}", self.name, member.info().name),
                e,
            ));
        }
        Ok(())
    }

    /// Rebuilds `role`'s chunk of `stripe` (data or parity) from the other members.
    async fn recover_stripe(&self, role: usize, stripe: u64) -> Result<()> {
        let pg = self.pg();
        let chunk = u64::from(pg.chunk_sectors);
        let map = pg.stripe_map(stripe);
        let end = self.stripe_end(stripe);
        let len = (chunk * SECTOR_SIZE) as usize;
        for _attempt in 0..=self.slots.len() {
            self.check_alive()?;
            let present: SmallVec<[usize; 16]> = (0..self.slots.len())
                .filter(|&m| m != role && self.in_sync_at(m, end))
                .collect();
            let mut blocks = self.read_rows(stripe, &(0..chunk), &present).await?;
            if present.iter().any(|&m| blocks[m].is_none()) {
                continue; // a read failed and its member is now faulty: try again
            }
            super::parity::rebuild_blocks(&map, &mut blocks, len)?;
            let data = blocks[role].take().expect("rebuilt");
            return self
                .write_member_data(role, pg.member_sector(stripe, 0), data)
                .await;
        }
        Err(self.lost_error())
    }
}

/// Array data held contiguously by a member.
#[derive(Clone, Copy, Debug)]
struct Run {
    member_sector: u64,
    array_sector: u64,
    sectors: u64,
}
