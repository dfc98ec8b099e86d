//! What `raidd detail` and `raidd status` report of an array: plain types, serialised as
//! the JSON that crates/cli/JSON.md documents. `status.rs` fills them in.

use serde::Serialize;

use super::journal_slot::JournalState;
use super::pass::{LastSync, SyncStatus};

/// Health of one slot (md role).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SlotState {
    /// Holds current data; used for reads and writes.
    InSync,
    /// Failed while running (or refused at assembly): never used again until replaced.
    Faulty,
    /// No member in this slot.
    Missing,
    /// Being rebuilt: current below its recovery point, written there, read nowhere else.
    Recovering,
}

impl SlotState {
    pub(super) fn from_u8(v: u8) -> SlotState {
        match v {
            0 => SlotState::InSync,
            1 => SlotState::Faulty,
            3 => SlotState::Recovering,
            _ => SlotState::Missing,
        }
    }
}

/// Overall state, as `raidd detail` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ArrayState {
    /// Every member in sync; shut down cleanly (or not yet written).
    Clean,
    /// Every member in sync; writes may be in flight.
    Active,
    /// Serving, but with members missing or faulty.
    Degraded,
    /// Too many members lost to serve every sector.
    Failed,
}

#[derive(Clone, Debug, Serialize)]
pub struct SlotStatus {
    pub role: usize,
    pub member: Option<String>,
    pub state: SlotState,
    /// While recovering: bytes of the member's data area rebuilt so far.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recovered_bytes: Option<u64>,
    /// While recovering: only the chunks the write-intent bitmap marks are rebuilt (a
    /// former member re-added, [`Array::recovering_by_bitmap`]).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub by_bitmap: bool,
    /// md's write-mostly: read only when no other copy can be.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub write_mostly: bool,
    /// A member being built to replace this one (`raidd replace`), and how far.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replacement: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replaced_bytes: Option<u64>,
    /// What the slot's member did since it took the slot.
    pub io: MemberIoStatus,
}

/// What the member in a slot did since it took the slot (or the array started).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MemberIoStatus {
    pub reads: u64,
    pub writes: u64,
    pub read_bytes: u64,
    pub written_bytes: u64,
    /// Reads the member failed. An unreadable block of a member in an array with
    /// redundancy is rewritten from the other members (`corrected_errors`); any other read
    /// error fails the member.
    pub read_errors: u64,
    /// Writes and flushes the member failed.
    pub write_errors: u64,
    /// Blocks read that did not match their checksum tags (`zpool status`'s CKSUM
    /// column): corrected from redundancy as read errors are, and not counted in
    /// `read_errors`.
    pub checksum_errors: u64,
    /// Read errors corrected: the blocks rebuilt from redundancy, written back to the
    /// member and read back (md's per-device `errors`).
    pub corrected_errors: u64,
    /// Bytes rewritten on the member by those corrections (`zpool status`'s "repaired").
    pub repaired_bytes: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct ArrayStatus {
    pub name: String,
    pub uuid: String,
    pub level: String,
    pub layout: Option<String>,
    pub chunk_bytes: u64,
    pub raid_devices: usize,
    pub size_bytes: u64,
    pub block_size: u32,
    pub state: ArrayState,
    pub needs_resync: bool,
    pub read_only: bool,
    pub events: Option<u64>,
    pub slots: Vec<SlotStatus>,
    pub spares: Vec<String>,
    /// Failed members no longer in a slot, waiting to be removed.
    pub faulty: Vec<String>,
    /// The write journal (md's role 0xfffd), where the array has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub journal: Option<JournalStatus>,
    /// What keeps parity right across an unclean stop (md's `consistency_policy`).
    pub consistency_policy: ConsistencyPolicy,
    /// How its members' blocks are checksummed (`crc32c`), where they are
    /// (`raidd create --checksums`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checksums: Option<String>,
    /// Blocks of its members in sync whose checksum tags are being re-derived from the
    /// data (after an unclean stop, writes by the kernel, a member that joined): read
    /// unverified until then.
    #[serde(skip_serializing_if = "is_zero")]
    pub checksums_unverified_blocks: u64,
    /// What the partial parity log recovered when the array started after an unclean
    /// stop (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ppl_recovered: Option<PplRecovered>,
    pub sync: Option<SyncStatus>,
    /// The write-intent bitmap: chunks whose bit is set, and all chunks.
    pub bitmap: Option<BitmapStatus>,
    /// How the last pass ended (md keeps mismatch_cnt readable after a check).
    pub last_sync: Option<LastSync>,
    pub counters: CounterStatus,
}

/// md's consistency policies: what keeps parity (or mirrors) right across an unclean
/// stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ConsistencyPolicy {
    /// No redundancy: nothing to keep consistent.
    None,
    /// The whole array is resynced after an unclean stop.
    Resync,
    /// Only what the write-intent bitmap marks is resynced.
    Bitmap,
    /// RAID5's partial parity log recovers parity before the array serves.
    Ppl,
    /// md's write journal logs every write with its parity first (RAID4/5/6).
    Journal,
}

impl std::fmt::Display for ConsistencyPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ConsistencyPolicy::None => "none",
            ConsistencyPolicy::Resync => "resync",
            ConsistencyPolicy::Bitmap => "bitmap",
            ConsistencyPolicy::Ppl => "ppl",
            ConsistencyPolicy::Journal => "journal",
        })
    }
}

/// A start's recovery from the partial parity log (md's `recovered_entries` and
/// `mismatch_count`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PplRecovered {
    /// Entries applied.
    pub entries: u64,
    /// Blocks whose parity was rewritten.
    pub blocks: u64,
    /// Entries not applied (bad checksum, or not an entry md writes) and logs without a
    /// valid header: the array was then left to resync.
    pub not_applied: u64,
}

/// The write journal's member and state.
#[derive(Clone, Debug, Serialize)]
pub struct JournalStatus {
    pub member: Option<String>,
    pub state: JournalState,
    /// md's journal_mode: whether writes are acknowledged once logged (write-back).
    pub mode: JournalMode,
    /// What the write-back cache holds, and the most it may.
    pub cached_bytes: u64,
    pub cache_limit_bytes: u64,
    /// The log's size and the bytes between its tail and head (units not yet reclaimed),
    /// while the journal is in the write path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub used_bytes: Option<u64>,
    /// What the start replayed from the log.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recovered: Option<super::journal_replay::JournalRecovered>,
}

/// How the write journal acknowledges writes (md's `journal_mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum JournalMode {
    /// Once the members have them, logged first (md's default).
    #[default]
    WriteThrough,
    /// Once logged: the members get them later from the write-back cache; clients see a
    /// volatile cache, made durable by a flush.
    WriteBack,
}

impl std::fmt::Display for JournalMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            JournalMode::WriteThrough => "write-through",
            JournalMode::WriteBack => "write-back",
        })
    }
}

impl std::str::FromStr for JournalMode {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        match s {
            "write-through" => Ok(JournalMode::WriteThrough),
            "write-back" => Ok(JournalMode::WriteBack),
            _ => Err(format!(
                "unknown journal mode {s:?} (write-through or write-back)"
            )),
        }
    }
}

#[derive(Clone, Copy, Debug, Serialize)]
pub struct BitmapStatus {
    pub dirty: usize,
    pub chunks: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct CounterStatus {
    pub reads: u64,
    pub writes: u64,
    pub read_bytes: u64,
    pub written_bytes: u64,
    pub degraded_reads: u64,
    pub full_stripe_writes: u64,
    pub rmw_writes: u64,
    pub rcw_writes: u64,
    pub reconstruct_writes: u64,
    pub copied_bytes: u64,
    /// RAID4/5/6 only: the stripe cache.
    pub stripe_cache: Option<StripeCacheStatus>,
    /// Members behind a DMA-aligned buffer: what each buffer did (empty: none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dab: Vec<MemberDab>,
}

/// One member's DMA-aligned buffer counts.
#[derive(Clone, Debug, Serialize)]
pub struct MemberDab {
    pub member: String,
    #[serde(flatten)]
    pub counts: crate::member::DabCounts,
}

/// What the RAID4/5/6 stripe cache is doing.
#[derive(Clone, Debug, Serialize)]
pub struct StripeCacheStatus {
    /// How partial stripes gather company (`none`, `plug`, `limit:N`).
    pub gather: String,
    /// Whether small writes on an idle stripe skip the cache (`auto`, `always`, `never`).
    pub write_alone: String,
    /// Bytes of stripe contents it may keep, and keeps now.
    pub limit_bytes: usize,
    pub cached_bytes: usize,
    /// Batches run, and parts that joined a batch another request led.
    pub batches: u64,
    pub gathered: u64,
    /// Batches whose rows were all known already.
    pub hits: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
