//! The stripe cache's two governors, which decide per thread whether keeping rows and
//! gathering writes pay: both are only heuristics, and either answer is correct.

use std::sync::atomic::{AtomicU64, Ordering};

use super::super::counters::{bump, sum, PerThread};

/// Keeps of rows judged at a time by the keep governor.
pub(super) const KEEP_WINDOW: u64 = 1024;
/// Batches that keep nothing after a window that did not pay.
pub(super) const KEEP_PAUSE: u64 = 16 * KEEP_WINDOW;

/// Batches through the cache judged at a time by the alone governor.
pub(super) const ALONE_WINDOW: u64 = 64;
/// Small writes that may go alone after a window in which gathering did not pay.
pub(super) const ALONE_RUN: u64 = 64 * ALONE_WINDOW;

/// One thread's stripe-cache counters and keep governor, alone on its cache lines: a batch
/// counts and judges on its own thread, so no line is written by every core on every batch.
///
/// The governor: a kept row costs a copy and memory, and pays only when a later write to
/// the same rows skips its pre-reads. Writes spread wide (random over a big array) almost
/// never come back while the rows are kept, and then keeping costs about 30% of small-write
/// throughput for nothing. Each window of kept batches is judged by its hits; after one with
/// fewer than 1 in 16, keeping pauses for a while and then tries again. Only a heuristic:
/// keeping or not is correct either way (threads past the owned shards share one and may
/// blur its windows).
#[derive(Debug, Default)]
#[repr(align(128))]
struct Stats {
    batches: AtomicU64,
    gathered_parts: AtomicU64,
    hits: AtomicU64,
    /// Kept batches in the current window.
    kept: AtomicU64,
    /// `hits` when the current window began.
    hits_at_start: AtomicU64,
    /// Batches left in a pause.
    pause: AtomicU64,
    /// The alone governor: `batches`, `gathered_parts` and `hits` when its window began,
    /// and the small writes that may still go alone.
    window_batches: AtomicU64,
    window_gathered: AtomicU64,
    window_hits: AtomicU64,
    alone_left: AtomicU64,
}

/// The keep governor and the alone governor, over per-thread [`Stats`].
///
/// The alone governor: a window of batches through the cache in which fewer than 1 in 16
/// gathered a second part or found its rows kept grants a run of small writes that skip
/// the cache (see `Alone` in policy.rs); a window in which gathering pays grants none.
#[derive(Debug, Default)]
pub(super) struct Governor {
    stats: PerThread<Stats>,
}

impl Governor {
    /// Whether a small write on this thread may go alone now; each yes spends one of the
    /// run a window granted.
    pub(super) fn alone(&self) -> bool {
        let (st, owned) = self.stats.mine();
        let left = st.alone_left.load(Ordering::Relaxed);
        debug_assert!(left <= ALONE_RUN, "a window grants at most a run");
        if left == 0 {
            return false;
        }
        if owned {
            st.alone_left.store(left - 1, Ordering::Relaxed);
            true
        } else {
            st.alone_left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |l| l.checked_sub(1))
                .is_ok()
        }
    }

    /// Counts a batch of `parts` in this thread's stats, and judges the alone governor's
    /// window once it is full.
    pub(super) fn count_batch(&self, parts: usize) {
        let (st, owned) = self.stats.mine();
        bump(&st.batches, 1, owned);
        if parts > 1 {
            bump(&st.gathered_parts, parts as u64 - 1, owned);
        }
        Self::judge_alone(st);
    }

    fn judge_alone(st: &Stats) {
        let batches = st.batches.load(Ordering::Relaxed);
        let n = batches.wrapping_sub(st.window_batches.load(Ordering::Relaxed));
        if n < ALONE_WINDOW {
            return;
        }
        let gathered = st.gathered_parts.load(Ordering::Relaxed);
        let hits = st.hits.load(Ordering::Relaxed);
        let g = gathered.wrapping_sub(st.window_gathered.swap(gathered, Ordering::Relaxed));
        let h = hits.wrapping_sub(st.window_hits.swap(hits, Ordering::Relaxed));
        st.window_batches.store(batches, Ordering::Relaxed);
        if g * 16 < n && h * 16 < n {
            st.alone_left.store(ALONE_RUN, Ordering::Relaxed);
        }
    }

    /// A batch found its rows kept.
    pub(super) fn hit(&self) {
        let (st, owned) = self.stats.mine();
        bump(&st.hits, 1, owned);
    }

    /// Whether this batch should keep its rows (see [`Governor`]).
    pub(super) fn keeping(&self) -> bool {
        let (st, owned) = self.stats.mine();
        let p = st.pause.load(Ordering::Relaxed);
        if p > 0 {
            if owned {
                st.pause.store(p - 1, Ordering::Relaxed);
            } else {
                let _ = st
                    .pause
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |p| p.checked_sub(1));
            }
            return false;
        }
        true
    }

    /// A batch kept its rows: counts it in this thread's window and judges a full window.
    pub(super) fn kept(&self) {
        let (st, owned) = self.stats.mine();
        bump(&st.kept, 1, owned);
        let n = st.kept.load(Ordering::Relaxed);
        debug_assert!(n <= KEEP_WINDOW || !owned, "a window is judged as it fills");
        if n >= KEEP_WINDOW {
            st.kept.store(0, Ordering::Relaxed);
            let hits = st.hits.load(Ordering::Relaxed);
            let start = st.hits_at_start.swap(hits, Ordering::Relaxed);
            if hits.saturating_sub(start) * 16 < n {
                st.pause.store(KEEP_PAUSE, Ordering::Relaxed);
            }
        }
    }

    /// Batches run, parts that joined another's batch, and batches that found their rows
    /// kept (all threads).
    pub(super) fn totals(&self) -> (u64, u64, u64) {
        (
            sum(&self.stats, |s| &s.batches),
            sum(&self.stats, |s| &s.gathered_parts),
            sum(&self.stats, |s| &s.hits),
        )
    }
}
