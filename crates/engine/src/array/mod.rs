//! A running array: the members in their slots, their health, and the I/O paths.
//!
//! [`Array`] is a facade over parts, each owning its state and changed only through its
//! own methods: [`Slots`] (members, their states and transitions, spares), [`Shapes`] (how
//! array sectors map to member sectors), the level paths (`mapped.rs`, `parity/`, behind
//! the port `host.rs`), the gate (`gate.rs`: write passes and sync barriers), the
//! write-intent bitmap (`bitmap.rs`), [`Passes`] (sync passes and md's resync point), and
//! the metadata (`crate::meta`). Recovery, scrub, membership and the status report are
//! topics of their own (`recovery.rs`, `scrub.rs`, `membership.rs`, `status.rs`), each an
//! entry point on `Array` over the parts' methods (`Array::parts`).
//!
//! The data path takes no lock shared by all requests: member health is a per-slot atomic,
//! the shape is immutable, parity stripes lock individually, and the metadata lock is
//! taken only when the array's state changes (first write after a clean start, a failure,
//! shutdown).

pub mod add_checksums;
mod bitmap;
mod checksums;
mod consistency;
mod correct;
mod counters;
mod gate;
mod host;
mod join;
mod journal;
mod journal_replay;
mod journal_slot;
mod latch;
mod mapped;
mod member_counts;
mod member_io;
mod membership;
mod misread;
mod narrow;
mod parity;
mod pass;
mod passes;
mod ports;
mod ppl;
mod ppl_recover;
mod recovery;
pub mod rederive;
mod report;
mod scrub;
mod shape;
mod slot_member;
mod slots;
mod start;
mod status;
mod stripe_holds;
mod write_back;

use std::fmt;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use raidd_layout::{Geometry, SECTOR_SIZE};
use raidd_rt::{AlignedBuf, IoVec, IoVecMut, SharedBuf};

use crate::error::{Error, ErrorKind, Result};
use crate::member::{Member, MemberFuture, MemberInfo};
use crate::meta::Metadata;
use bitmap::IntentLog;
use counters::Counters;
use gate::Gate;
use host::Host;
pub(crate) use journal::stripe_log_sectors;
pub use journal_replay::JournalRecovered;
pub use journal_slot::{JournalParts, JournalState, RingPlace};
pub(crate) use ppl::{log_area as ppl_log_area, write_empty as write_empty_ppl, LogArea};

use mapped::MappedIo;
use member_io::Owner;
use misread::Misreads;
use parity::ParityIo;
pub use parity::{Alone, Gather, DEFAULT_CACHE_BYTES, DEFAULT_INFLIGHT_STRIPES};
pub use pass::{Added, LastSync, SyncKind, SyncLimits, SyncProgress, SyncStatus};
pub use passes::Passes;
pub use report::{
    ArrayState, ArrayStatus, BitmapStatus, ConsistencyPolicy, CounterStatus, JournalMode,
    JournalStatus, MemberDab, MemberIoStatus, PplRecovered, SlotState, SlotStatus,
    StripeCacheStatus,
};
pub use shape::{Shape, Shapes};
pub use slots::{Changing, Failed, SlotParts, Slots};

/// Everything needed to start an array (from assembly, creation or a test).
#[derive(Clone, Debug)]
pub struct ArrayParts {
    pub name: String,
    pub uuid: [u8; 16],
    pub geometry: Geometry,
    /// One entry per role; `None` = missing.
    pub slots: Vec<Option<SlotParts>>,
    pub spares: Vec<Arc<dyn Member>>,
    /// The write journal, where the array has md's JOURNAL feature.
    pub journal: Option<JournalParts>,
    /// The partial parity log, where the array has md's PPL (RAID5).
    pub ppl: Option<PplParts>,
    pub read_only: bool,
}

/// Where each member's partial parity log lives: per role, the byte offset of its area on
/// the member and the area (`None`: no member, or none with an area).
#[derive(Clone, Debug)]
pub struct PplParts {
    pub areas: Vec<Option<(u64, raidd_md::ppl::Area)>>,
}

/// The I/O paths of the array's level family, and what they keep.
enum Levels {
    /// Linear, RAID0, RAID1, RAID10: data placed, never computed.
    Mapped(MappedIo),
    /// RAID4/5/6, and what they keep (stripe locks, the stripe cache).
    Parity(ParityIo),
}

impl Levels {
    /// Whether a read of one in-sync member may go straight to it: always, unless the
    /// parity path must see every read (its read bypass turned off).
    fn read_bypass(&self) -> bool {
        match self {
            Levels::Mapped(_) => true,
            Levels::Parity(p) => p.read_bypass(),
        }
    }

    fn parity(&self) -> Option<&ParityIo> {
        match self {
            Levels::Parity(p) => Some(p),
            Levels::Mapped(_) => None,
        }
    }
}

pub struct Array {
    name: String,
    uuid: [u8; 16],
    info: MemberInfo,
    read_only: bool,
    shapes: Shapes,
    slots: Slots,
    meta: Option<Metadata>,
    levels: Levels,
    /// Keeps sync work (recovery, resync, repair) and writes to the same region apart.
    gate: Gate,
    /// md's internal write-intent bitmap, when the array has one (and is writable).
    intent: IntentLog,
    /// md's partial parity log, when the array has one: every RAID5 stripe write goes
    /// through it first (`ppl.rs`, `parity/logged.rs`). Swapped only while every write is
    /// held at the gate (`consistency.rs`).
    ppl: RwLock<Option<ppl::Ppl>>,
    /// md's write journal: every RAID4/5/6 stripe write is logged there first once it is
    /// started (`journal.rs`, `start.rs`, `parity/logged.rs`).
    journal: journal::JournalLog,
    /// The write journal's write-back cache (idle in write-through mode, md's default).
    cache: write_back::WriteBack,
    passes: Passes,
    /// Set once too many members have failed to serve every sector.
    failed: AtomicBool,
    /// Safe mode's view of the write count, and since when it has not moved.
    idle_since: Mutex<(u64, std::time::Instant)>,
    /// The DMA-aligned buffer the members sit behind, if any: members added later (a
    /// spare, a replacement) are put behind it too.
    dab: std::sync::OnceLock<Arc<crate::member::DabPool>>,
    counters: Counters,
}

/// The array's parts, lent to its topic modules (recovery, scrub, membership, the bitmap's
/// sweep, status): each is used through its own methods.
struct Parts<'a> {
    shapes: &'a Shapes,
    slots: &'a Slots,
    meta: Option<&'a Metadata>,
    gate: &'a Gate,
    intent: &'a IntentLog,
    passes: &'a Passes,
    parity: Option<&'a ParityIo>,
    ppl: Option<ppl::Ppl>,
    journal: &'a journal::JournalLog,
    cache: &'a write_back::WriteBack,
    counters: &'a Counters,
}

impl fmt::Debug for Array {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Array")
            .field("name", &self.name)
            .field("level", &self.geometry().level())
            .field("size", &self.info.size_bytes)
            .finish()
    }
}

/// How [`Array::close`] left the array.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Closed {
    /// Flushed, and marked clean (or it needs no marking: read-only, no redundancy, failed).
    Clean,
    /// Writes were still in flight: flushed, but the superblocks stay dirty.
    LeftDirty,
    /// A resync it needs has not finished: it stays marked for one.
    NeedsResync,
}

/// Which metadata write failed on a member (what its failure is logged as).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MetaWrite {
    Superblock,
    Bitmap,
}

/// md-style UUID text: 8:8:8:8 hex.
pub fn uuid_string(u: &[u8; 16]) -> String {
    let hex: String = u.iter().map(|b| format!("{b:02x}")).collect();
    debug_assert_eq!(hex.len(), 32, "two hex digits a byte");
    format!(
        "{}:{}:{}:{}",
        &hex[0..8],
        &hex[8..16],
        &hex[16..24],
        &hex[24..32]
    )
}

pub(crate) fn layout_name(g: &Geometry) -> Option<String> {
    match g {
        Geometry::Parity(p) => Some(p.layout.to_string()),
        Geometry::Raid10(r) => Some(r.layout.to_string()),
        _ => None,
    }
}

impl Array {
    /// Starts an array without md metadata (tests, simulations, nested test setups).
    pub fn new(parts: ArrayParts) -> Result<Array> {
        Array::build(parts, None)
    }

    pub(crate) fn build(parts: ArrayParts, meta: Option<Metadata>) -> Result<Array> {
        let g = &parts.geometry;
        let block_size = check_parts(&parts)?;
        let size_bytes =
            g.array_sectors() * SECTOR_SIZE / u64::from(block_size) * u64::from(block_size);
        // Seeks cost time if any member seeks (clients use this for their I/O scheduling).
        let rotational = parts
            .slots
            .iter()
            .flatten()
            .map(|s| &s.member)
            .chain(&parts.spares)
            .any(|m| m.info().rotational);
        let intent = match (&meta, parts.read_only, parts.geometry.redundancy()) {
            (Some(m), false, r) if r > 0 => m
                .bitmap_at_start
                .as_ref()
                .map(|(chunk, bits)| bitmap::WriteIntent::new(&parts.geometry, *chunk, bits)),
            _ => None,
        };
        // The superblocks say whether the stop was unclean (md writes resync_offset 0 while
        // writes may be in flight, bitmap or not); a bitmap then narrows the resync to its
        // set chunks. Its bits alone do not mean unclean: they stay set while the array is
        // degraded, clean stops included.
        let unclean = meta.as_ref().is_some_and(Metadata::is_dirty)
            && intent.as_ref().is_none_or(|wi| wi.dirty_chunks() > 0);
        // Read-only arrays load no intent, but say what a writable start would do.
        let bitmap_loaded = meta.as_ref().is_some_and(|m| m.bitmap_at_start.is_some());
        let period = meta.as_ref().and_then(|m| m.bitmap_period);
        let levels = match parts.geometry.as_parity() {
            Some(_) => Levels::Parity(ParityIo::new()),
            None => Levels::Mapped(MappedIo),
        };
        debug_assert!(
            size_bytes.is_multiple_of(u64::from(block_size)),
            "an array's size is whole blocks"
        );
        let journal_place = parts
            .journal
            .as_ref()
            .filter(|j| j.member.is_some())
            .and_then(|j| j.place);
        Ok(Array {
            info: MemberInfo {
                name: format!("array:{}", parts.name),
                size_bytes,
                block_size,
                rotational,
                max_transfer: None,
            },
            name: parts.name,
            uuid: parts.uuid,
            levels,
            shapes: Shapes::one(Shape::new(parts.geometry)),
            slots: Slots::new(
                parts.slots,
                parts.spares,
                parts.journal,
                bitmap_loaded && !unclean,
            ),
            read_only: parts.read_only,
            meta,
            gate: Gate::default(),
            intent: IntentLog::new(intent, period),
            ppl: RwLock::new(parts.ppl.and_then(|p| {
                ppl::Ppl::new(
                    raidd_md::ppl::signature(&parts.uuid),
                    p.areas
                        .into_iter()
                        .map(|a| a.map(|(at, area)| ppl::LogArea { at, area }))
                        .collect(),
                )
            })),
            journal: journal::JournalLog::new(journal_place),
            cache: write_back::WriteBack::default(),
            passes: Passes::new(unclean),
            failed: AtomicBool::new(false),
            idle_since: Mutex::new((0, std::time::Instant::now())),
            dab: std::sync::OnceLock::new(),
            counters: Counters::default(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn uuid(&self) -> [u8; 16] {
        self.uuid
    }

    /// The array's layout (its current shape's; see [`Array::shapes`]).
    pub fn geometry(&self) -> &Geometry {
        self.shapes.current().geometry()
    }

    /// How array sectors map to member sectors: one shape, or two during a reshape.
    pub fn shapes(&self) -> &Shapes {
        &self.shapes
    }

    pub fn size_bytes(&self) -> u64 {
        self.info.size_bytes
    }

    pub fn block_size(&self) -> u32 {
        self.info.block_size
    }

    /// Whether the array refuses writes: started read-only, or its write journal is not
    /// working (md forces such an array read-only; `detail` says which).
    pub fn is_read_only(&self) -> bool {
        self.read_only || self.slots.journal_blocks_writes()
    }

    /// The members in their slots, the spares, and failed members not yet removed.
    pub fn slots(&self) -> &Slots {
        &self.slots
    }

    /// The running sync pass, the last one's result, and whether a resync is due.
    pub fn passes(&self) -> &Passes {
        &self.passes
    }

    /// The parts, for the array's topic modules.
    fn parts(&self) -> Parts<'_> {
        Parts {
            shapes: &self.shapes,
            slots: &self.slots,
            meta: self.meta.as_ref(),
            gate: &self.gate,
            intent: &self.intent,
            passes: &self.passes,
            parity: self.levels.parity(),
            ppl: self.ppl(),
            journal: &self.journal,
            cache: &self.cache,
            counters: &self.counters,
        }
    }

    /// The shape that holds the bytes `[offset, offset + len)`.
    fn shape(&self, offset: u64, len: u64) -> &Shape {
        self.shapes
            .covering(offset / SECTOR_SIZE, len / SECTOR_SIZE)
    }

    pub fn is_failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    pub fn is_degraded(&self) -> bool {
        (0..self.slots.len()).any(|r| !self.slots.in_sync(r))
    }

    /// Whether the array was not shut down cleanly and has not been resynced since.
    pub fn needs_resync(&self) -> bool {
        self.passes.needs_resync()
    }

    fn check_range(&self, offset: u64, len: u64, write: bool) -> Result<()> {
        let bs = u64::from(self.info.block_size);
        if !offset.is_multiple_of(bs) || !len.is_multiple_of(bs) {
            return Err(Error::new(
                ErrorKind::Unaligned,
                format!(
                    "{}: I/O {offset}+{len} is not aligned to {bs} bytes",
                    self.name
                ),
            ));
        }
        if offset
            .checked_add(len)
            .is_none_or(|end| end > self.info.size_bytes)
        {
            return Err(Error::new(
                ErrorKind::OutOfRange,
                format!(
                    "{}: I/O {offset}+{len} is beyond the end of the array ({} bytes)",
                    self.name, self.info.size_bytes
                ),
            ));
        }
        if write && self.is_read_only() {
            return Err(self.read_only_error());
        }
        debug_assert!(offset + len <= self.info.size_bytes && offset.is_multiple_of(bs));
        self.check_alive()
    }

    fn check_alive(&self) -> Result<()> {
        if self.failed.load(Ordering::Acquire) {
            return Err(lost(&self.name));
        }
        Ok(())
    }

    fn check_writable(&self) -> Result<()> {
        if self.is_read_only() {
            return Err(self.read_only_error());
        }
        Ok(())
    }

    fn read_only_error(&self) -> Error {
        let why = match self.slots.journal_state() {
            Some(s) if !self.read_only && !s.allows_writes() => {
                format!(" (its write journal is {s:?})").to_lowercase()
            }
            _ => String::new(),
        };
        Error::new(
            ErrorKind::ReadOnly,
            format!("{} is read-only{why}", self.name),
        )
    }

    /// Marks a slot faulty after an I/O error, records it in the superblocks of the others
    /// before returning (so nothing is acknowledged that relies on the failure being
    /// unrecorded), and fails the array when it can no longer serve.
    async fn fail_slot(&self, role: usize, why: &io::Error) {
        self.fail_slot_with(role, None, why).await
    }

    /// [`Array::fail_slot`] for an I/O error of `member`: does nothing when the slot holds
    /// another member by now. An error that arrives late from a member that was failed and
    /// replaced meanwhile must not fail its replacement (seen: a rebuild that never ran
    /// because a write to the removed member failed after the new one was added).
    async fn fail_slot_with(&self, role: usize, member: Option<&Arc<dyn Member>>, why: &io::Error) {
        match self.slots.fail(role, member) {
            slots::Failed::Stale => {
                if let Some(m) = member {
                    tracing::debug!(array = %self.name, member = %m.info().name, role,
                        "error from a member no longer in its slot ignored: {why}");
                }
                return;
            }
            slots::Failed::NotWorking => {
                // Someone else failed it; wait until their superblock update is done.
                if let Some(meta) = &self.meta {
                    meta.barrier().await;
                }
                return;
            }
            slots::Failed::Marked => {}
        }
        debug_assert_eq!(self.slots.state(role), SlotState::Faulty);
        let name = self
            .slots
            .member(role)
            .map(|m| m.info().name.clone())
            .unwrap_or_default();
        tracing::warn!(array = %self.name, member = %name, role, "member failed: {why}");
        self.note_survival();
        if self.read_only {
            return; // never write to members of a read-only array, not even superblocks
        }
        let Some(meta) = &self.meta else {
            return Box::pin(dab_follows_redundancy(self)).await;
        };
        let mut more = meta.record_failure(role).await;
        while let Some(r) = more.pop() {
            if self.slots.fail(r, None) == slots::Failed::Marked {
                tracing::warn!(array = %self.name, role = r, "member failed its superblock update");
                self.note_survival();
                more.extend(meta.record_failure(r).await);
            }
        }
        // Boxed: its flush may fail a member, which comes back here.
        Box::pin(dab_follows_redundancy(self)).await;
    }

    fn note_survival(&self) {
        debug_assert!(
            !self.is_failed() || !self.geometry().survives(&self.slots.missing_mask()),
            "a failed array has lost too many members"
        );
        if !self.geometry().survives(&self.slots.missing_mask())
            && !self.failed.swap(true, Ordering::AcqRel)
        {
            tracing::error!(array = %self.name, "array failed: too many members lost");
        } else if self.is_degraded() {
            tracing::warn!(array = %self.name, "array is degraded");
        }
    }

    /// Fails the slots whose superblock (or bitmap) update failed: their metadata is
    /// unknown now.
    async fn superblocks_failed(&self, slots: Vec<usize>, what: MetaWrite) {
        let why = match what {
            MetaWrite::Superblock => "superblock update failed",
            MetaWrite::Bitmap => "bitmap update failed",
        };
        for r in slots {
            debug_assert!(r < self.slots.len(), "a failed metadata write names a slot");
            self.fail_slot(r, &io::Error::other(why)).await;
        }
    }

    /// Admits a write past the sync barriers. Levels without redundancy never sync, so
    /// their writes skip the gate.
    async fn enter_gate(&self, offset: u64, len: u64) -> Option<gate::WritePass<'_>> {
        debug_assert!(
            len > 0 && offset.is_multiple_of(SECTOR_SIZE),
            "a write of sectors"
        );
        if self.geometry().redundancy() == 0 {
            return None;
        }
        Some(
            self.gate
                .enter([(offset / SECTOR_SIZE, len / SECTOR_SIZE)])
                .await,
        )
    }

    /// Records a write of `len` bytes at `offset` in the write-intent bitmap: the bits of its
    /// chunks are on every member (durably) before this returns; the hold keeps them set
    /// until the write is done.
    async fn note_intent(&self, offset: u64, len: u64) -> Result<Option<bitmap::Intent>> {
        let sectors = (offset / SECTOR_SIZE, len / SECTOR_SIZE);
        let Some((hold, failed)) = self
            .intent
            .note(self.meta.as_ref(), sectors.0, sectors.1)
            .await
        else {
            return Ok(None);
        };
        if !failed.is_empty() {
            self.superblocks_failed(failed, MetaWrite::Bitmap).await;
            self.check_alive()?;
        }
        Ok(Some(hold))
    }

    /// Before the first write after a clean start (or after safe mode marked the array
    /// clean), record in the superblocks that writes may be in flight, so an unclean stop is
    /// detected and resynced. Foreground writes call this inside their gate pass, which is
    /// what keeps them apart from [`Array::mark_clean_if_idle`]. Levels without redundancy
    /// have nothing to resync and stay clean (md's raid0 and linear never mark dirty).
    async fn ensure_dirty(&self) -> Result<()> {
        // An array with a write journal stays clean, as md keeps it: every write in flight
        // is in the log, which each start replays; the kernel refuses a dirty degraded
        // array even with a journal.
        let journal = self.slots.journal_state().is_some();
        match &self.meta {
            Some(meta) if !meta.is_dirty() && self.geometry().redundancy() > 0 && !journal => {
                self.superblocks_failed(meta.mark_dirty().await, MetaWrite::Superblock)
                    .await;
                checksums::mark_dirty(&self.slots, meta).await;
                debug_assert!(meta.is_dirty(), "marked dirty before any data goes out");
                self.check_alive()
            }
            _ => Ok(()),
        }
    }

    /// Clears idle write-intent bits once per flush period (md's bitmap daemon; the
    /// bitmap's daemon_sleep, 5 s as mdadm writes it): the daemon calls this often; it does
    /// the work when the period has passed.
    pub async fn write_intent_tick(&self) {
        if self.intent.sweep_due() {
            self.sweep_intent(false).await;
        }
        // The write-back cache's pages held for a period go to the members.
        if let Err(e) = self.cache.tick(self).await {
            tracing::warn!(array = %self.name, "write-back cache: {e}");
        }
    }

    /// Chunks whose write-intent bit is set, out of all (`None` without a bitmap).
    pub fn write_intent(&self) -> Option<(usize, usize)> {
        self.intent.counts()
    }

    /// Clears the write-intent bits of chunks with nothing in flight that were not written
    /// in the last flush period (`all`: of every chunk with nothing in flight), after
    /// flushing the members so the data those bits covered is durable. Bits stay while the
    /// array is degraded, and while a resync is due: the bits found at an unclean start say
    /// where it must go (md keeps those chunks NEEDED until its resync passes them); cleared
    /// before it has, a stop would leave the superblocks dirty over clear bits, and the next
    /// start would resync nothing.
    async fn sweep_intent(&self, all: bool) {
        if self.is_degraded() || self.is_failed() || self.needs_resync() {
            return;
        }
        let failed = self
            .intent
            .sweep(self.meta.as_ref(), all, || async {
                self.flush().await.is_ok()
            })
            .await;
        self.superblocks_failed(failed, MetaWrite::Bitmap).await;
    }

    /// md's safe mode: once no write has started for `delay`, flushes the members and marks
    /// the superblocks clean, so a crash of an idle server needs no resync (and a degraded
    /// parity array still starts after it). The next write marks them dirty again before it
    /// reaches a member. The daemon calls this often; returns whether it marked clean now.
    ///
    /// Writes in flight are found through the gate: a whole-array barrier is raised only
    /// when no write holds a pass, and it holds new writes back until the superblocks say
    /// clean; a write that passes after it marks dirty first ([`Array::ensure_dirty`] runs
    /// inside the pass). Sync passes that write (resync, repair) keep the array dirty.
    pub async fn mark_clean_if_idle(&self, delay: std::time::Duration) -> bool {
        let Some(meta) = &self.meta else {
            return false;
        };
        if !meta.is_dirty() || self.read_only || self.is_failed() || self.needs_resync() {
            return false;
        }
        let writes = self.counters.sum(|s| &s.writes);
        {
            let mut seen = self.idle_since.lock().expect(crate::POISONED);
            if seen.0 != writes {
                *seen = (writes, std::time::Instant::now());
                return false;
            }
            if seen.1.elapsed() < delay {
                return false;
            }
        }
        let Some(barrier) = self.gate.try_barrier_all() else {
            return false;
        };
        if self.flush().await.is_err() {
            return false;
        }
        let busy = || self.passes.writing() || self.needs_resync();
        let marked = match meta.mark_clean_unless(busy).await {
            Some(failed) => {
                self.superblocks_failed(failed, MetaWrite::Superblock).await;
                checksums::mark_clean(&self.slots, &self.name, meta.events().await).await;
                true
            }
            None => false,
        };
        drop(barrier);
        debug_assert!(!marked || !meta.is_dirty(), "what safe mode marks is clean");
        if marked {
            tracing::debug!(array = %self.name, "idle: marked clean");
        }
        marked
    }

    /// Reads `iov`'s total length at `offset`. The windows come back whatever the outcome,
    /// but for [`ErrorKind::TimedOut`]: a member that did not answer in time (and is failed
    /// now) kept some, and may still write into them; the caller reads again into new ones
    /// ([`Array::read_new`] does).
    ///
    /// The checks run when it is called; the future it returns is the members' read itself
    /// (its state no larger than theirs), or, where the write-back cache holds pages in the
    /// range, that read and the pages copied over it, in a block of its own.
    pub fn read(
        &self,
        offset: u64,
        iov: IoVecMut,
    ) -> impl std::future::Future<Output = (Result<()>, IoVecMut)> + '_ {
        use futures::future::Either;
        let len: u64 = iov.iter().map(|w| w.len() as u64).sum();
        if let Err(e) = self.check_range(offset, len, false) {
            return Either::Left(std::future::ready((Err(e), iov)));
        }
        if len == 0 {
            return Either::Left(std::future::ready((Ok(()), iov)));
        }
        self.counters.add(|s| &s.reads, 1);
        self.counters.add(|s| &s.read_bytes, len);
        // Pages the write-back cache holds are taken before the members are read, and
        // copied over what they return.
        match self.cache.snapshot(offset, len) {
            None => Either::Right(Either::Left(read_members(self, offset, len, iov))),
            Some(held) => Either::Right(Either::Right(raidd_rt::PooledFuture::new(async move {
                let (r, iov) = read_members(self, offset, len, iov).await;
                match r {
                    Ok(()) => (r, write_back::overlay(&held, offset, iov)),
                    Err(_) => (r, iov),
                }
            }))),
        }
    }

    /// Reads `len` bytes at `offset` into a new buffer. A read whose buffer a member that
    /// timed out kept (see [`Array::read`]) is read again into a new one, from the members
    /// left: at most once per member.
    pub async fn read_new(&self, offset: u64, len: usize) -> Result<SharedBuf> {
        let mut attempt = 0;
        loop {
            let buf = SharedBuf::new(AlignedBuf::for_overwrite(len));
            let mut iov = IoVecMut::new();
            if len > 0 {
                iov.push(
                    buf.slice_mut(0..len)
                        .expect("a fresh buffer has no windows out"),
                );
            }
            let (r, iov) = self.read(offset, iov).await;
            drop(iov);
            match r {
                Err(e) if e.kind() == ErrorKind::TimedOut && attempt < self.slots.len() => {
                    attempt += 1;
                    tracing::warn!(array = %self.name, "{e}");
                }
                r => return r.map(|()| buf),
            }
        }
    }

    /// Writes `iov` at `offset`; on success every byte is on enough members to survive what
    /// the level promises.
    pub async fn write(&self, offset: u64, iov: IoVec) -> Result<()> {
        let len: u64 = iov.iter().map(|w| w.len() as u64).sum();
        self.check_range(offset, len, true)?;
        if len == 0 {
            return Ok(());
        }
        self.counters.add(|s| &s.writes, 1);
        self.counters.add(|s| &s.written_bytes, len);
        // With a write journal, the write-back cache takes the write where it is on; the
        // journal's mode stays as it is while the write runs.
        let cache = &self.cache;
        let journal = self.journal.live();
        let _mode = match &journal {
            Some(_) => Some(cache.pass().await),
            None => None,
        };
        if let (Some(j), true) = (&journal, cache.is_on()) {
            return cache.write(self, j, offset, iov).await;
        }
        let _pass = self.enter_gate(offset, len).await;
        self.ensure_dirty().await?;
        let _intent = self.note_intent(offset, len).await?;
        match &self.levels {
            Levels::Parity(p) => p.write(self, offset, iov).await,
            Levels::Mapped(m) => {
                let pieces = self.shape(offset, len).pieces_of(offset, len);
                m.write(self, offset, iov, &pieces).await
            }
        }
    }

    /// Sets the RAID4/5/6 stripe cache: bytes of stripe contents it may keep (0: keep none)
    /// and how partial stripes gather company. Takes effect for the next batches; other
    /// levels ignore it.
    pub fn set_stripe_cache(&self, bytes: usize, gather: Gather) {
        if let Some(p) = self.levels.parity() {
            p.set_stripe_cache(bytes, gather);
        }
    }

    /// Names the DMA-aligned buffer the members were put behind, so that members added later
    /// go behind it too ([`Array::admit`]). Set once; a second pool is ignored.
    pub fn set_dab(&self, pool: Arc<crate::member::DabPool>) {
        let _ = self.dab.set(pool);
        // Nothing is held yet: a start without redundancy only keeps the pool from
        // holding writes.
        if let Some(false) = dab_redundancy(self) {
            tracing::warn!(array = %self.name, "{DAB_SUSPENDED}");
        }
    }

    /// A member joining the array (added, or replacing another): behind the array's buffer
    /// when it has one and the member is not behind one already.
    fn admit(&self, member: Arc<dyn Member>) -> Arc<dyn Member> {
        match self.dab.get() {
            Some(pool) if member.dab().is_none() => Arc::new(pool.wrap(member)),
            _ => member,
        }
    }

    /// Sets whether RAID4/5/6 reads of in-sync members go straight into the client's
    /// buffers (on, the default) or through a buffer per chunk under the stripe's lock
    /// (seed 004's comparison). Other levels ignore it.
    pub fn set_read_bypass(&self, on: bool) {
        if let Some(p) = self.levels.parity() {
            p.set_read_bypass(on);
        }
    }

    /// Sets whether RAID4/5/6 small writes that find their stripe idle skip the stripe
    /// cache ([`Alone`]; `Auto` unless set).
    pub fn set_write_alone(&self, alone: Alone) {
        if let Some(p) = self.levels.parity() {
            p.set_write_alone(alone);
        }
    }

    /// Makes every acknowledged write durable on every in-sync member.
    pub async fn flush(&self) -> Result<()> {
        if let Some(r) = self.cache.flush(self).await {
            return r;
        }
        self.flush_members(|_| true).await
    }

    /// Makes an acknowledged write of `len` bytes at `offset` durable (FUA): flushes only the
    /// members that write went to (its data's copies, and the parity of its stripes).
    pub async fn flush_range(&self, offset: u64, len: u64) -> Result<()> {
        self.check_range(offset, len, true)?;
        if let Some(r) = self.cache.flush(self).await {
            return r;
        }
        let written = self
            .shape(offset, len)
            .geometry()
            .members_written(offset / SECTOR_SIZE, len / SECTOR_SIZE);
        debug_assert_eq!(written.len(), self.slots.len(), "a flag per slot");
        self.flush_members(|r| written[r]).await
    }

    /// Flushes the in-sync members `which` picks, failing those whose flush fails.
    async fn flush_members(&self, which: impl Fn(usize) -> bool) -> Result<()> {
        self.check_alive()?;
        let roles: Vec<usize> = (0..self.slots.len())
            .filter(|&r| which(r) && self.slots.takes_writes(r))
            .collect();
        futures::future::join_all(roles.iter().map(|&r| async move {
            let member = self.slots.member_ref(r);
            if let Err(e) = member.flush().await {
                self.slots.io(r).failed_write();
                self.fail_member_io(r, &member, &e).await;
            }
        }))
        .await;
        self.check_alive()
    }

    /// Discards a range (advisory: later reads return zeros or old data). Parity levels
    /// ignore discards: a discarded data chunk would no longer match its parity.
    pub async fn discard(&self, offset: u64, len: u64) -> Result<()> {
        self.check_range(offset, len, true)?;
        let Levels::Mapped(m) = &self.levels else {
            return Ok(());
        };
        if len == 0 {
            return Ok(());
        }
        let _pass = self.enter_gate(offset, len).await;
        self.ensure_dirty().await?;
        let _intent = self.note_intent(offset, len).await?;
        let pieces = self.shape(offset, len).pieces_of(offset, len);
        m.discard(self, &pieces).await
    }

    /// Convenience: reads `len` bytes at `offset` into a new buffer ([`Array::read_new`]).
    pub async fn read_to_buf(&self, offset: u64, len: usize) -> Result<AlignedBuf> {
        let buf = self.read_new(offset, len).await?;
        Ok(buf.try_into_inner().expect("read released the buffer"))
    }

    /// Convenience: writes `data` at `offset`.
    pub async fn write_buf(&self, offset: u64, data: AlignedBuf) -> Result<()> {
        let len = data.len();
        let buf = SharedBuf::new(data);
        let mut iov = IoVec::new();
        iov.push(buf.slice(0..len).expect("fresh buffer"));
        self.write(offset, iov).await
    }

    /// Shutdown: under a whole-array barrier raised only while no write holds a pass (as
    /// safe mode does), flushes and records in the superblocks that the array is
    /// consistent. A write still in flight (a stop that gave up waiting for its requests)
    /// may have left parity or mirrors behind its data: then what is on the members is
    /// flushed, but the superblocks stay dirty and the next start resyncs (only what the
    /// bitmap marks, where there is one). Writes that come after a clean close mark the
    /// array dirty again before they reach a member.
    pub async fn close(&self) -> Result<Closed> {
        // Pages the write-back cache holds go to the members first (a read-only array's
        // too: its journal failed with pages held).
        if let Err(e) = self.cache.drain(self).await {
            tracing::warn!(array = %self.name, "write-back cache not emptied: {e} (the journal keeps its pages)");
        }
        if self.read_only || self.failed.load(Ordering::Acquire) {
            return Ok(Closed::Clean);
        }
        // The barrier first: nothing may start between the flush and the marking.
        let Some(barrier) = self.gate.try_barrier_all() else {
            self.flush().await?;
            tracing::warn!(array = %self.name, "closed with writes in flight: left marked unclean, the next start resyncs");
            return Ok(Closed::LeftDirty);
        };
        self.flush().await?;
        // Everything is on the members: no chunk needs its bit any more.
        self.sweep_intent(true).await;
        if self.needs_resync() {
            tracing::warn!(array = %self.name, "closed before its resync finished: it stays marked unclean");
            return Ok(Closed::NeedsResync);
        }
        if let Some(meta) = &self.meta {
            if meta.is_dirty() {
                self.superblocks_failed(meta.mark_clean().await, MetaWrite::Superblock)
                    .await;
            }
            debug_assert!(
                !meta.is_dirty(),
                "a clean close leaves the superblocks clean"
            );
            checksums::mark_clean(&self.slots, &self.name, meta.events().await).await;
        }
        drop(barrier);
        Ok(Closed::Clean)
    }

    /// Makes redundancy match the data everywhere (the initial sync of a new array, a resync
    /// after an unclean shutdown), then marks the array clean: the offline form, for the CLI.
    /// `progress(done_bytes, total_bytes)` follows it. The daemon runs [`Array::scrub`] with
    /// [`SyncKind::Resync`] while serving instead.
    pub async fn resync(&self, mut progress: impl FnMut(u64, u64)) -> Result<()> {
        self.check_writable()?;
        if !self.can_scrub_now() {
            let total = self.info.size_bytes;
            progress(total, total);
            return Ok(());
        }
        self.scrub(SyncKind::Resync, SyncLimits::UNLIMITED, progress)
            .await?;
        self.close().await.map(|_| ())
    }
}

/// The error of I/O once too many members have failed.
fn lost(array: &str) -> Error {
    Error::new(
        ErrorKind::Io,
        format!("{array}: too many members failed; the array cannot serve this I/O"),
    )
}

/// The error of a read whose windows a member that timed out (and was failed) kept.
fn lost_windows(array: &str, role: usize) -> Error {
    Error::new(
        ErrorKind::TimedOut,
        format!(
            "{array}: member {role} did not answer in time and was failed; read again into new \
             buffers"
        ),
    )
}

/// Where a read starts among the copies: rotating per thread, so mirrors share reads without
/// a counter that every core writes.
fn rotation() -> usize {
    thread_local!(static NEXT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) });
    NEXT.with(|n| {
        let r = n.get();
        n.set(r.wrapping_add(1));
        r
    })
}

/// Checks that the parts make an array that can run: a member per raid device (or none),
/// each large enough and aligned to the block size, and enough of them present. Returns
/// the array's block size (the largest of its members').
fn check_parts(parts: &ArrayParts) -> Result<u32> {
    let g = &parts.geometry;
    if parts.slots.len() != g.members() {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!(
                "{} slots given for {} raid devices",
                parts.slots.len(),
                g.members()
            ),
        ));
    }
    let mut block_size = 512u32;
    let mut missing = Vec::with_capacity(parts.slots.len());
    for (role, s) in parts.slots.iter().enumerate() {
        // A member part way through its rebuild cannot serve its whole slot yet.
        missing.push(s.as_ref().is_none_or(|s| s.recovered.is_some()));
        let Some(s) = s else { continue };
        let info = s.member.info();
        block_size = block_size.max(info.block_size);
        let need = s.data_offset + g.member_used_sectors(role) * SECTOR_SIZE;
        if info.size_bytes < need {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "{} (role {role}) has {} bytes, the array needs {need}",
                    info.name, info.size_bytes
                ),
            ));
        }
    }
    for s in parts.slots.iter().flatten() {
        if s.data_offset % u64::from(block_size) != 0 {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "{}: data offset {} is not a multiple of the block size {block_size}",
                    s.member.info().name,
                    s.data_offset
                ),
            ));
        }
    }
    if !g.survives(&missing) {
        let present = missing.iter().filter(|m| !**m).count();
        return Err(Error::new(
            ErrorKind::InsufficientMembers,
            format!(
                "{}: {present} of {} members present, not enough to run {}",
                parts.name,
                g.members(),
                g.level()
            ),
        ));
    }
    Ok(block_size)
}

fn to_io(e: Error) -> io::Error {
    io::Error::from_raw_os_error(e.errno())
}

/// An array is a member too: RAID0 over RAID5 groups (the papers' multi-stage striping).
/// An array's read from its members (no cache in the way): [`Array::read`]'s own path.
async fn read_members(a: &Array, offset: u64, len: u64, iov: IoVecMut) -> (Result<()>, IoVecMut) {
    // One extent on one readable copy (every small read, and any read within a chunk):
    // the caller's windows go to that member as they are, with nothing to plan. Reads
    // bypass the stripe cache (it is write-through), so parity levels take this path too.
    let pieces = a.shape(offset, len).pieces_of(offset, len);
    // One piece of an in-sync member goes straight to it, unless the parity path must
    // see every read (its read bypass turned off).
    let direct = a.levels.read_bypass();
    // The copy is chosen before the read: nothing of the choice is held while it runs.
    let single = match pieces.as_slice() {
        [p] if direct => {
            Host::readable_copy(a, p, &Misreads::default()).map(|loc| (loc, p.sectors))
        }
        _ => None,
    };
    let (iov, misread) = match single {
        Some((loc, sectors)) => {
            let at = a.slots.member_offset(loc.member, loc.sector);
            match member_io::read_member(a, loc.member, at, iov).await {
                (Ok(()), iov, _) => return (Ok(()), iov),
                (r, iov, _) if crate::member::windows_lost(&r) => {
                    return (Err(Host::lost_windows(a, loc.member)), iov)
                }
                // Kept in its slot: read the piece elsewhere, then correct it.
                (Err(_), iov, true) => (iov, Some((loc, sectors))),
                (Err(_), iov, false) => (iov, None), // that member is failed now: plan without it
            }
        }
        None => (iov, None),
    };
    // The general path runs in a block of its own (from the thread's pool): it holds a
    // batch of member reads while it waits, and inline it would make every read's state
    // in flight that large, the small reads that never take it included (about 4.7 KB
    // instead of 0.9 KB). It is taken by reads the layout splits and by reads whose
    // member failed.
    raidd_rt::PooledFuture::new(async move {
        let mut misreads = Misreads::default();
        if let Some((loc, sectors)) = misread {
            misreads.push(&a.slots, loc.member, loc.sector, sectors);
        }
        let mut iov = iov;
        // A read that failed only because every copy of some piece could not give part of
        // it is read again once those parts are corrected from the copies that could (md
        // corrects, then reads again).
        let mut again = true;
        loop {
            let (r, back) = match &a.levels {
                Levels::Parity(p) => p.read(a, offset, iov, &pieces, &mut misreads).await,
                Levels::Mapped(m) => m.read(a, offset, iov, &pieces, &mut misreads).await,
            };
            if misreads.is_empty() {
                return (r, back);
            }
            Host::correct(a, std::mem::take(&mut misreads)).await;
            match r {
                Err(e) if again && e.kind() == ErrorKind::Io => {
                    again = false;
                    iov = back;
                }
                r => return (r, back),
            }
        }
    })
    .await
}

impl Member for Array {
    fn info(&self) -> &MemberInfo {
        &self.info
    }

    fn read(&self, offset: u64, iov: IoVecMut) -> MemberFuture<'_, (io::Result<()>, IoVecMut)> {
        MemberFuture::new(async move {
            let (r, iov) = Array::read(self, offset, iov).await;
            (r.map_err(to_io), iov)
        })
    }

    fn write(&self, offset: u64, iov: IoVec) -> MemberFuture<'_, io::Result<()>> {
        MemberFuture::new(async move { Array::write(self, offset, iov).await.map_err(to_io) })
    }

    fn flush(&self) -> MemberFuture<'_, io::Result<()>> {
        MemberFuture::new(async move { Array::flush(self).await.map_err(to_io) })
    }

    fn discard(&self, offset: u64, len: u64) -> MemberFuture<'_, io::Result<()>> {
        MemberFuture::new(async move { Array::discard(self, offset, len).await.map_err(to_io) })
    }
}

/// Logged when a write-back DAB stops holding writes.
const DAB_SUSPENDED: &str = "DAB write-back suspended: the array cannot lose another member, \
    so writes go to the members before they are acknowledged until it is redundant again";

/// Tells the array's write-back DMA-aligned buffer whether the array can lose a member now
/// (`DabPool::set_redundant`); `None` when that changed nothing. Only an array whose own
/// members are behind the buffer counts (an array of arrays leaves it to the inner ones).
fn dab_redundancy(a: &Array) -> Option<bool> {
    let pool = a.dab.get()?;
    let behind = (0..a.slots.len()).any(|r| a.slots.member(r).is_some_and(|m| m.dab().is_some()));
    if !behind {
        return None;
    }
    let missing = a.slots.missing_mask();
    debug_assert_eq!(
        missing.len(),
        a.geometry().members(),
        "a mask of every slot"
    );
    let redundant = (0..missing.len()).filter(|&r| !missing[r]).all(|r| {
        let mut m = missing.clone();
        m[r] = true;
        a.geometry().survives(&m)
    });
    pool.set_redundant(&a.name, redundant)
}

/// After a member failed or was rebuilt: a write-back buffer holds writes only while the
/// array can lose a member. When it stops, the members are flushed, so that every block
/// it held reaches its member and no acknowledged write lives in memory alone.
pub(crate) async fn dab_follows_redundancy(a: &Array) {
    match dab_redundancy(a) {
        Some(false) => {
            tracing::warn!(array = %a.name, "{DAB_SUSPENDED}");
            if a.flush_members(|_| true).await.is_err() {
                tracing::warn!(array = %a.name, "DAB blocks could not all be written back");
            }
        }
        Some(true) => {
            tracing::info!(array = %a.name, "DAB write-back resumed: the array can lose a member again");
        }
        None => {}
    }
}
