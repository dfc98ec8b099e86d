//! The array's running pass, one at a time as md: starting one, watching it, cancelling it,
//! ending it however it ends ([`SyncGuard`]), and pacing it against foreground I/O
//! ([`Throttle`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use raidd_layout::SECTOR_SIZE;

use super::pass::{LastSync, SyncKind, SyncLimits, SyncProgress, SyncStatus};
use super::Array;
use crate::error::{Error, ErrorKind, Result};

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

    /// Member sectors per window: whole chunks, about `bytes`.
    pub(super) fn sync_window(&self, bytes: u64) -> u64 {
        let chunk = u64::from(self.geometry.chunk_sectors()).max(1);
        (bytes / SECTOR_SIZE).max(1).div_ceil(chunk) * chunk
    }
}
