//! A background pass over an array (recovery, resync, check, repair): what it is, how fast it
//! may go, how far it is, and how the last one ended. Plain state: the passes themselves run
//! in `passes` (the bookkeeping), `recovery` and `scrub`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use serde::{Deserialize, Serialize};

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

    pub(super) fn unthrottled(&self) -> bool {
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
    pub(super) start: u64,
    pub(super) mismatches: AtomicU64,
    /// Mismatch locations logged so far (the log is capped).
    pub(super) logged: AtomicU64,
    pub(super) started: Instant,
    pub(super) cancel: AtomicBool,
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

/// What an `add` did with the member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Added {
    /// It took this slot and needs recovery ([`Array::recover`]).
    Recovering(usize),
    /// The array has no free slot: it waits as a spare.
    Spare,
}
