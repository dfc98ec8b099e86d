//! The array's sync passes, one at a time as md, and how far its redundancy is known to be
//! consistent: [`Passes`] owns the running pass, the last one's result and md's
//! resync_offset. [`SyncGuard`] ends a pass however it ends; [`Throttle`] paces one against
//! foreground I/O.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use raidd_layout::SECTOR_SIZE;

use super::pass::{LastSync, SyncKind, SyncLimits, SyncProgress, SyncStatus};
use crate::error::{Error, ErrorKind, Result};

/// The running pass and the last one's result, swapped together so a watcher never sees
/// neither.
#[derive(Debug, Default)]
struct SyncSlot {
    running: Option<Arc<SyncProgress>>,
    last: Option<LastSync>,
}

/// What sync work has run and is running on an array.
#[derive(Debug)]
pub struct Passes {
    slot: Mutex<SyncSlot>,
    /// md's resync_offset: `u64::MAX` once the array is known consistent (a clean start, a
    /// finished resync); after an unclean stop, the member sector below which a resync pass
    /// has made parity consistent (it only grows, and only parity arrays move it from 0).
    /// Writes above it must not trust the parity on the members (`parity_trusted`).
    resync_point: AtomicU64,
}

impl Passes {
    /// `unclean`: the array was not shut down cleanly, and a resync is due.
    pub(super) fn new(unclean: bool) -> Passes {
        Passes {
            slot: Mutex::new(SyncSlot::default()),
            resync_point: AtomicU64::new(if unclean { 0 } else { u64::MAX }),
        }
    }

    /// The pass running now, if any.
    pub fn progress(&self) -> Option<Arc<SyncProgress>> {
        self.lock().running.clone()
    }

    /// How the last pass ended, once one has.
    pub fn last(&self) -> Option<LastSync> {
        self.lock().last.clone()
    }

    /// Asks the running pass to stop at its next window (recovery keeps its progress).
    pub fn cancel(&self) -> bool {
        match self.progress() {
            Some(p) => {
                p.cancel.store(true, Ordering::Release);
                true
            }
            None => false,
        }
    }

    /// Whether the array was not shut down cleanly and has not been resynced since.
    pub fn needs_resync(&self) -> bool {
        self.resync_point.load(Ordering::Acquire) != u64::MAX
    }

    /// Whether a pass that writes redundancy from data (resync, repair) is running.
    pub(super) fn writing(&self) -> bool {
        self.progress()
            .is_some_and(|p| matches!(p.kind, SyncKind::Resync | SyncKind::Repair))
    }

    /// Starts a pass of `kind` over `total` sectors from `start` (of slot `role`, for a
    /// recovery or replace); refused while another runs.
    pub(super) fn begin(
        &self,
        array: &str,
        kind: SyncKind,
        role: Option<usize>,
        total: u64,
        start: u64,
    ) -> Result<Arc<SyncProgress>> {
        assert!(start <= total, "a pass starts inside what it covers");
        let mut cur = self.lock();
        if let Some(p) = cur.running.as_ref() {
            return Err(Error::new(
                ErrorKind::Conflict,
                format!("{array}: a {} is already running", p.kind),
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

    /// The running pass as `raidd detail` shows it; `member` names a slot's member.
    pub(super) fn status(&self, member: impl Fn(usize) -> Option<String>) -> Option<SyncStatus> {
        let p = self.progress()?;
        let done = p.done();
        debug_assert!(
            done >= p.start && done <= p.total,
            "a pass's progress is inside it"
        );
        let secs = p.started.elapsed().as_secs_f64();
        let rate = if secs > 0.0 {
            (done - p.start) as f64 * SECTOR_SIZE as f64 / secs
        } else {
            0.0
        };
        let left = p.total.saturating_sub(done) * SECTOR_SIZE;
        Some(SyncStatus {
            kind: p.kind,
            member: p.role.and_then(member),
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

    /// A resync finished: the array is consistent everywhere.
    pub(super) fn resync_done(&self) {
        self.resync_point.store(u64::MAX, Ordering::Release);
    }

    /// A resync pass has made parity consistent below member sector `sector`.
    pub(super) fn resynced_to(&self, sector: u64) {
        debug_assert!(sector < u64::MAX, "a resync point is a sector");
        self.resync_point.fetch_max(sector, Ordering::AcqRel);
    }

    /// Whether the parity on the members can be trusted below member sector `end`: the
    /// array was shut down cleanly, or a resync has passed `end` since. Until then an
    /// unclean stop may have left parity that does not match the data, and a write that
    /// updates it by difference (read-modify-write) would keep it wrong under the data it
    /// acknowledges: lost if a member then fails before the resync gets there (md forces
    /// reconstruct-write there for the same reason).
    pub(super) fn parity_trusted(&self, end: u64) -> bool {
        end <= self.resync_point.load(Ordering::Acquire)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SyncSlot> {
        self.slot.lock().expect(crate::POISONED)
    }
}

/// Ends the array's running pass when the pass ends, however it ends, recording how.
pub(super) struct SyncGuard<'a> {
    passes: &'a Passes,
    progress: Arc<SyncProgress>,
    member: Option<String>,
    finished: bool,
}

impl<'a> SyncGuard<'a> {
    /// `member`: the name of the member the pass works on (recovery, replace).
    pub(super) fn new(
        passes: &'a Passes,
        progress: Arc<SyncProgress>,
        member: Option<String>,
    ) -> SyncGuard<'a> {
        SyncGuard {
            passes,
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
        let mut slot = self.passes.lock();
        assert!(
            slot.running.as_ref().is_some_and(|r| Arc::ptr_eq(r, p)),
            "the pass that ends is the one running"
        );
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
/// `foreground` counts the array's reads and writes from clients so far.
pub(super) struct Throttle<F: Fn() -> u64> {
    limits: SyncLimits,
    foreground: F,
    mark: Instant,
    mark_pos: u64,
    seen: u64,
    /// When foreground I/O was last seen arriving.
    foreground_seen: Option<Instant>,
}

/// Foreground I/O seen this recently counts as "busy" (looks microseconds apart would
/// otherwise often see nothing new and let a burst of windows through).
const BUSY_FOR: Duration = Duration::from_millis(250);

impl<F: Fn() -> u64> Throttle<F> {
    pub(super) fn new(limits: SyncLimits, foreground: F, pos: u64) -> Throttle<F> {
        let seen = foreground();
        Throttle {
            limits,
            foreground,
            mark: Instant::now(),
            mark_pos: pos,
            seen,
            foreground_seen: None,
        }
    }

    /// Whether the pass may go on at `pos` now (above `max`, or above `min` while
    /// foreground I/O arrives since the last look, it may not).
    pub(super) fn allows(&mut self, pos: u64) -> bool {
        if self.limits.unthrottled() {
            return true;
        }
        debug_assert!(pos >= self.mark_pos, "a pass only moves forward");
        let secs = self.mark.elapsed().as_secs_f64().max(1e-3);
        let kib_s = (pos - self.mark_pos) as f64 / 2.0 / secs;
        let fg = (self.foreground)();
        if fg != self.seen {
            self.seen = fg;
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
    pub(super) async fn pace(&mut self, pos: u64, progress: &SyncProgress) {
        while !progress.cancelled() && !self.allows(pos) {
            raidd_rt::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
