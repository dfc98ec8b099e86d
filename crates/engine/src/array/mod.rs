//! A running array: the members in their slots, their health, and the I/O paths.
//!
//! The data path takes no lock shared by all requests: member health is a per-slot atomic,
//! the geometry is immutable, parity stripes lock individually, and the metadata lock is
//! taken only when the array's state changes (first write after a clean start, a failure,
//! shutdown).

mod bitmap;
mod counters;
mod gate;
mod join;
mod mapped;
mod member_counts;
mod member_io;
mod membership;
mod parity;
mod parity_host;
mod pass;
mod passes;
mod recovery;
mod report;
mod scrub;
mod slot_member;
mod status;

use std::fmt;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use futures::future::LocalBoxFuture;
use raidd_layout::{Geometry, SECTOR_SIZE};
use raidd_rt::{AlignedBuf, IoVec, IoVecMut, SharedBuf};

use crate::error::{Error, ErrorKind, Result};
use crate::member::{Member, MemberFuture, MemberInfo};
use crate::meta::Metadata;
use counters::Counters;
use gate::Gate;
use parity::ParityIo;
pub use parity::{Alone, Gather, DEFAULT_CACHE_BYTES, DEFAULT_INFLIGHT_STRIPES};
pub use pass::{Added, LastSync, SyncKind, SyncLimits, SyncProgress, SyncStatus};
pub use report::{
    ArrayState, ArrayStatus, BitmapStatus, CounterStatus, MemberDab, MemberIoStatus, SlotState,
    SlotStatus, StripeCacheStatus,
};
use slot_member::{MemberRef, SlotMember};

/// Aligned, so that the atomics read on every I/O and written almost never share no line
/// with another slot's. (Its member is taken through per-thread shards of their own.)
#[derive(Debug)]
#[repr(align(128))]
struct Slot {
    /// Replaced only by member management (add, replace, remove).
    member: SlotMember,
    /// Byte offset of the member's data area (md's data_offset).
    data_offset: AtomicU64,
    state: AtomicU8,
    /// While recovering: member sectors below this hold current data (md's recovery_offset).
    /// Moves only under a gate barrier on the region it passes.
    recovered: AtomicU64,
    /// A member being built to take this slot's place (`raidd replace`) and its data offset:
    /// below `replaced` it is current and gets every write the slot's member gets.
    replacement: RwLock<Option<(Arc<dyn Member>, u64)>>,
    replaced: AtomicU64,
    /// Whether `replacement` is set (checked on every write without the lock).
    replacing: AtomicBool,
    /// While recovering: the member came back to its own slot, current up to the chunks the
    /// write-intent bitmap marks, so the recovery rebuilds only those (md's re-add).
    by_bitmap: AtomicBool,
    /// md's write-mostly (superblock devflags): reads go elsewhere while they can.
    write_mostly: AtomicBool,
    /// What the slot's member did (I/O and errors), since it took the slot.
    io: member_counts::MemberCounts,
}

impl Slot {
    /// A slot as assembly or creation hands it over. `by_bitmap_ok`: a re-add by bitmap
    /// may resume as one (bitmap loaded, no resync due: its bits then also stand for
    /// chunks the resync must visit; see `may_recover_by_bitmap`).
    fn from_parts(s: Option<SlotParts>, by_bitmap_ok: bool) -> Slot {
        let Some(s) = s else {
            return Slot::new(None, 0, SlotState::Missing, 0);
        };
        let state = match s.recovered {
            None => SlotState::InSync,
            Some(_) => SlotState::Recovering,
        };
        let rec = s.recovered.unwrap_or(0);
        let slot = Slot::new(Some(s.member), s.data_offset, state, rec);
        let by_bitmap = s.by_bitmap && s.recovered.is_some() && by_bitmap_ok;
        slot.by_bitmap.store(by_bitmap, Ordering::Relaxed);
        slot.write_mostly.store(s.write_mostly, Ordering::Relaxed);
        slot
    }

    fn new(
        member: Option<Arc<dyn Member>>,
        data_offset: u64,
        state: SlotState,
        recovered: u64,
    ) -> Slot {
        Slot {
            member: SlotMember::new(member),
            data_offset: AtomicU64::new(data_offset),
            state: AtomicU8::new(state as u8),
            recovered: AtomicU64::new(recovered),
            replacement: RwLock::new(None),
            replaced: AtomicU64::new(0),
            replacing: AtomicBool::new(false),
            by_bitmap: AtomicBool::new(false),
            write_mostly: AtomicBool::new(false),
            io: member_counts::MemberCounts::default(),
        }
    }
}

/// What a slot is built from.
#[derive(Clone, Debug)]
pub struct SlotParts {
    pub member: Arc<dyn Member>,
    /// Byte offset of the data area on the member.
    pub data_offset: u64,
    /// A member whose rebuild stopped part way: sectors below this are current.
    pub recovered: Option<u64>,
    /// That rebuild was a re-add by the write-intent bitmap (md's RECOVERY_BITMAP): beyond
    /// the recovery point the member is current except where bits are set. Honoured only
    /// with the array's bitmap loaded and no resync due; otherwise the rebuild goes on whole.
    pub by_bitmap: bool,
    /// md's write-mostly: read from it only when no other copy can be (a slow mirror half).
    pub write_mostly: bool,
}

/// Everything needed to start an array (from assembly, creation or a test).
#[derive(Clone, Debug)]
pub struct ArrayParts {
    pub name: String,
    pub uuid: [u8; 16],
    pub geometry: Geometry,
    /// One entry per role; `None` = missing.
    pub slots: Vec<Option<SlotParts>>,
    pub spares: Vec<Arc<dyn Member>>,
    pub read_only: bool,
}

pub struct Array {
    name: String,
    uuid: [u8; 16],
    geometry: Geometry,
    slots: Vec<Slot>,
    read_only: bool,
    meta: Option<Metadata>,
    info: MemberInfo,
    /// RAID4/5/6 reads and writes, and what they keep (stripe locks, the stripe cache);
    /// `None` on other levels.
    parity: Option<ParityIo>,
    /// Keeps sync work (recovery, resync, repair) and writes to the same region apart.
    gate: Gate,
    /// The sync work running now, if any (one at a time, as md).
    sync: Mutex<pass::SyncSlot>,
    /// Failed members taken out of their slot (by a replacement), until removed.
    detached: Mutex<Vec<Arc<dyn Member>>>,
    /// Spares of this array (members with md's spare role).
    spares_list: Mutex<Vec<Arc<dyn Member>>>,
    /// Serialises changes of membership (add, remove, the start and end of a replace): each
    /// looks at the slots, writes superblocks, then changes the slots.
    membership: futures::lock::Mutex<()>,
    /// Set once too many members have failed to serve every sector.
    failed: AtomicBool,
    /// md's resync_offset: `u64::MAX` once the array is known consistent (a clean start, a
    /// finished resync); after an unclean stop, the member sector below which a resync pass
    /// has made parity consistent (it only grows, and only parity arrays move it from 0).
    /// Writes above it must not trust the parity on the members (`parity_trusted`).
    resync_point: AtomicU64,
    /// md's internal write-intent bitmap, when the array has one (and is writable).
    intent: Option<bitmap::WriteIntent>,
    /// When the write-intent bits were last swept for clearing.
    intent_swept: Mutex<std::time::Instant>,
    /// Safe mode's view of the write count, and since when it has not moved.
    idle_since: Mutex<(u64, std::time::Instant)>,
    /// The DMA-aligned buffer the members sit behind, if any: members added later (a
    /// spare, a replacement) are put behind it too.
    dab: std::sync::OnceLock<Arc<crate::member::DabPool>>,
    counters: Counters,
}

impl fmt::Debug for Array {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Array")
            .field("name", &self.name)
            .field("level", &self.geometry.level())
            .field("size", &self.info.size_bytes)
            .finish()
    }
}

/// md's bitmap daemon period (the bitmap's daemon_sleep as mdadm writes it).
const INTENT_PERIOD: std::time::Duration = std::time::Duration::from_secs(5);

/// md-style UUID text: 8:8:8:8 hex.
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

pub fn uuid_string(u: &[u8; 16]) -> String {
    let hex: String = u.iter().map(|b| format!("{b:02x}")).collect();
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
        let slots: Vec<Slot> = parts
            .slots
            .into_iter()
            .map(|s| Slot::from_parts(s, bitmap_loaded && !unclean))
            .collect();
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
            parity: parts.geometry.as_parity().cloned().map(ParityIo::new),
            geometry: parts.geometry,
            slots,
            read_only: parts.read_only,
            meta,
            gate: Gate::default(),
            sync: Mutex::new(pass::SyncSlot::default()),
            detached: Mutex::new(Vec::new()),
            spares_list: Mutex::new(parts.spares),
            membership: futures::lock::Mutex::new(()),
            failed: AtomicBool::new(false),
            resync_point: AtomicU64::new(if unclean { 0 } else { u64::MAX }),
            intent,
            intent_swept: Mutex::new(std::time::Instant::now()),
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

    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    pub fn size_bytes(&self) -> u64 {
        self.info.size_bytes
    }

    pub fn block_size(&self) -> u32 {
        self.info.block_size
    }

    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    pub fn slot_state(&self, role: usize) -> SlotState {
        SlotState::from_u8(self.slots[role].state.load(Ordering::Acquire))
    }

    pub(crate) fn in_sync(&self, role: usize) -> bool {
        self.slot_state(role) == SlotState::InSync
    }

    /// Whether a slot holds current data for its member sectors below `end`: in sync, or
    /// recovering and already rebuilt past `end`. Such a slot is read and written there.
    pub(crate) fn in_sync_at(&self, role: usize, end: u64) -> bool {
        match self.slot_state(role) {
            SlotState::InSync => true,
            SlotState::Recovering => end <= self.slots[role].recovered.load(Ordering::Acquire),
            _ => false,
        }
    }

    /// Whether a write starting at member-data sector `start` must go to the slot: in sync,
    /// or recovering with `start` below the recovery point.
    pub(crate) fn takes_write_at(&self, role: usize, start: u64) -> bool {
        match self.slot_state(role) {
            SlotState::InSync => true,
            SlotState::Recovering => start < self.slots[role].recovered.load(Ordering::Acquire),
            _ => false,
        }
    }

    /// Whether a slot takes writes at all (in sync or being rebuilt).
    pub(crate) fn takes_writes(&self, role: usize) -> bool {
        matches!(
            self.slot_state(role),
            SlotState::InSync | SlotState::Recovering
        )
    }

    pub(crate) fn missing_mask(&self) -> Vec<bool> {
        (0..self.slots.len()).map(|r| !self.in_sync(r)).collect()
    }

    /// Too many members lost: the array serves nothing any more.
    pub fn is_failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    pub fn is_degraded(&self) -> bool {
        (0..self.slots.len()).any(|r| !self.in_sync(r))
    }

    /// The slots not in sync (missing, faulty or recovering), in order.
    pub fn slots_not_in_sync(&self) -> Vec<usize> {
        (0..self.slots.len())
            .filter(|&r| !self.in_sync(r))
            .collect()
    }

    /// The member in a slot (whatever its state).
    pub fn member(&self, role: usize) -> Option<Arc<dyn Member>> {
        self.slots
            .get(role)
            .and_then(|s| s.member.get())
            .map(|m| Arc::clone(&m))
    }

    /// The member of a slot that I/O was planned to, as the data path takes it (no line
    /// shared by all threads is written).
    fn member_ref(&self, role: usize) -> MemberRef {
        self.slots[role]
            .member
            .get()
            .expect("I/O planned to an empty slot")
    }

    /// Where the slot's data starts on its member, in bytes.
    pub fn data_offset(&self, role: usize) -> u64 {
        self.slots[role].data_offset.load(Ordering::Relaxed)
    }

    /// Byte offset on the member of member-data sector `sector`.
    pub(crate) fn member_offset(&self, role: usize, sector: u64) -> u64 {
        self.slots[role].data_offset.load(Ordering::Relaxed) + sector * SECTOR_SIZE
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
        if write && self.read_only {
            return Err(Error::new(
                ErrorKind::ReadOnly,
                format!("{} is read-only", self.name),
            ));
        }
        self.check_alive()
    }

    fn check_alive(&self) -> Result<()> {
        if self.failed.load(Ordering::Acquire) {
            return Err(self.lost_error());
        }
        Ok(())
    }

    fn lost_error(&self) -> Error {
        Error::new(
            ErrorKind::Io,
            format!(
                "{}: too many members failed; the array cannot serve this I/O",
                self.name
            ),
        )
    }

    /// Marks a slot faulty after an I/O error, records it in the superblocks of the others
    /// before returning (so nothing is acknowledged that relies on the failure being
    /// unrecorded), and fails the array when it can no longer serve.
    pub(crate) async fn fail_slot(&self, role: usize, why: &io::Error) {
        self.fail_slot_with(role, None, why).await
    }

    /// [`Array::fail_slot`] for an I/O error of `member`: does nothing when the slot holds
    /// another member by now. An error that arrives late from a member that was failed and
    /// replaced meanwhile must not fail its replacement (seen: a rebuild that never ran
    /// because a write to the removed member failed after the new one was added).
    ///
    /// Boxed: every future that issues member I/O may call this, and the failure path
    /// (superblock updates on every member) would otherwise be part of every request's
    /// state in flight.
    pub(crate) fn fail_member_io<'a>(
        &'a self,
        role: usize,
        member: &'a Arc<dyn Member>,
        why: &'a io::Error,
    ) -> LocalBoxFuture<'a, ()> {
        Box::pin(self.fail_slot_with(role, Some(member), why))
    }

    async fn fail_slot_with(&self, role: usize, member: Option<&Arc<dyn Member>>, why: &io::Error) {
        let marked = {
            // Held while marking, so the slot cannot take a new member in between.
            let current = self.slots[role].member.read();
            if let Some(m) = member {
                if !current.as_ref().is_some_and(|c| same_member(c, m)) {
                    tracing::debug!(array = %self.name, member = %m.info().name, role,
                        "error from a member no longer in its slot ignored: {why}");
                    return;
                }
            }
            self.mark_faulty(role)
        };
        if !marked {
            // Someone else failed it; wait until their superblock update is done.
            if let Some(meta) = &self.meta {
                meta.barrier().await;
            }
            return;
        }
        let name = self
            .member(role)
            .map(|m| m.info().name.clone())
            .unwrap_or_default();
        tracing::warn!(array = %self.name, member = %name, role, "member failed: {why}");
        self.note_survival();
        if self.read_only {
            return; // never write to members of a read-only array, not even superblocks
        }
        let Some(meta) = &self.meta else { return };
        let mut more = meta.record_failure(role).await;
        while let Some(r) = more.pop() {
            if self.mark_faulty(r) {
                tracing::warn!(array = %self.name, role = r, "member failed its superblock update");
                self.note_survival();
                more.extend(meta.record_failure(r).await);
            }
        }
    }

    /// Moves a working slot (in sync or recovering) to faulty; false if it was not working.
    fn mark_faulty(&self, role: usize) -> bool {
        let st = &self.slots[role].state;
        let mut cur = st.load(Ordering::Acquire);
        loop {
            if cur != SlotState::InSync as u8 && cur != SlotState::Recovering as u8 {
                return false;
            }
            match st.compare_exchange(
                cur,
                SlotState::Faulty as u8,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return true,
                Err(now) => cur = now,
            }
        }
    }

    fn note_survival(&self) {
        if !self.geometry.survives(&self.missing_mask())
            && !self.failed.swap(true, Ordering::AcqRel)
        {
            tracing::error!(array = %self.name, "array failed: too many members lost");
        } else if self.is_degraded() {
            tracing::warn!(array = %self.name, "array is degraded");
        }
    }

    /// Admits a write past the sync barriers. Levels without redundancy never sync, so
    /// their writes skip the gate.
    async fn enter_gate(&self, offset: u64, len: u64) -> Option<gate::WritePass<'_>> {
        if self.geometry.redundancy() == 0 {
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
    async fn note_intent(&self, offset: u64, len: u64) -> Result<Option<bitmap::Intent<'_>>> {
        let Some(wi) = &self.intent else {
            return Ok(None);
        };
        let (hold, missing) = wi.start(wi.sync_range(offset / SECTOR_SIZE, len / SECTOR_SIZE));
        if missing {
            let (guard, image) = wi.set_bits(&hold).await;
            if let (Some(image), Some(meta)) = (image, &self.meta) {
                self.write_bits(meta, &image, false).await;
            }
            drop(guard);
            self.check_alive()?;
        }
        Ok(Some(hold))
    }

    /// Writes every write-intent bit to every member, as md does when a recovery starts: a
    /// member's copy is only as new as the last change of bits it took, and one just added
    /// took none (its copy is not read while it is rebuilt, but it is once it is in sync).
    pub(super) async fn write_whole_intent(&self) {
        let (Some(wi), Some(meta)) = (&self.intent, &self.meta) else {
            return;
        };
        let (guard, image) = wi.current().await;
        self.write_bits(meta, &image, false).await;
        drop(guard);
    }

    /// Writes a bit image to every member (see `Metadata::write_bitmap_bits`) and fails the
    /// slots whose write failed; whether every write succeeded.
    async fn write_bits(&self, meta: &Metadata, image: &[u8], clearing: bool) -> bool {
        let failed = meta.write_bitmap_bits(image, clearing).await;
        let ok = failed.is_empty();
        for r in failed {
            self.fail_slot(r, &io::Error::other("bitmap update failed"))
                .await;
        }
        ok
    }

    /// Clears the write-intent bits of chunks with nothing in flight that were not written
    /// in the last flush period (`all`: of every chunk with nothing in flight), after
    /// flushing the members so the data those bits covered is durable. Bits stay while the
    /// array is degraded, and while a resync is due: the bits found at an unclean start say
    /// where it must go (md keeps those chunks NEEDED until its resync passes them); cleared
    /// before it has, a stop would leave the superblocks dirty over clear bits, and the next
    /// start would resync nothing.
    async fn sweep_intent(&self, all: bool) {
        let (Some(wi), Some(meta)) = (&self.intent, &self.meta) else {
            return;
        };
        if self.is_degraded() || self.is_failed() || self.needs_resync() {
            return;
        }
        let (guard, image) = wi.begin_clear(all).await;
        let Some(image) = image else { return };
        let flushed = self.flush().await.is_ok();
        let ok = flushed && self.write_bits(meta, &image, true).await;
        wi.cleared(ok);
        drop(guard);
    }

    /// How often idle write-intent bits are cleared (the bitmap's daemon_sleep).
    fn intent_period(&self) -> std::time::Duration {
        self.meta
            .as_ref()
            .and_then(|m| m.bitmap_period)
            .unwrap_or(INTENT_PERIOD)
    }

    /// Clears idle write-intent bits once per flush period (md's bitmap daemon; the
    /// bitmap's daemon_sleep, 5 s as mdadm writes it): the daemon calls this often; it does
    /// the work when the period has passed.
    pub async fn write_intent_tick(&self) {
        if self.intent.is_none() {
            return;
        }
        {
            let mut last = self.intent_swept.lock().expect(crate::POISONED);
            if last.elapsed() < self.intent_period() {
                return;
            }
            *last = std::time::Instant::now();
        }
        self.sweep_intent(false).await;
    }

    /// Whether a write-intent bit is set for any of the array regions `(sector, count)`
    /// (true without a bitmap: nothing says they are clean).
    pub(super) fn intent_set_in(&self, regions: &[(u64, u64)]) -> bool {
        let Some(wi) = &self.intent else {
            return true;
        };
        regions.iter().any(|&(sector, count)| {
            wi.chunk_range(&wi.sync_range(sector, count))
                .any(|c| wi.is_set(c))
        })
    }

    /// Chunks whose write-intent bit is set, out of all (`None` without a bitmap).
    pub fn write_intent(&self) -> Option<(usize, usize)> {
        self.intent
            .as_ref()
            .map(|wi| (wi.dirty_chunks(), wi.chunks()))
    }

    /// Before the first write after a clean start (or after safe mode marked the array
    /// clean), record in the superblocks that writes may be in flight, so an unclean stop is
    /// detected and resynced. Foreground writes call this inside their gate pass, which is
    /// what keeps them apart from [`Array::mark_clean_if_idle`]. Levels without redundancy
    /// have nothing to resync and stay clean (md's raid0 and linear never mark dirty).
    async fn ensure_dirty(&self) -> Result<()> {
        match &self.meta {
            Some(meta) if !meta.is_dirty() && self.geometry.redundancy() > 0 => {
                self.superblocks_failed(meta.mark_dirty().await).await;
                self.check_alive()
            }
            _ => Ok(()),
        }
    }

    /// Fails the slots whose superblock update failed (their metadata is unknown now).
    pub(super) async fn superblocks_failed(&self, slots: Vec<usize>) {
        for r in slots {
            self.fail_slot(r, &io::Error::other("superblock update failed"))
                .await;
        }
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
        let writing_sync = || {
            self.sync_progress()
                .is_some_and(|p| matches!(p.kind, SyncKind::Resync | SyncKind::Repair))
        };
        let marked = match meta
            .mark_clean_unless(|| writing_sync() || self.needs_resync())
            .await
        {
            Some(failed) => {
                self.superblocks_failed(failed).await;
                true
            }
            None => false,
        };
        drop(barrier);
        if marked {
            tracing::debug!(array = %self.name, "idle: marked clean");
        }
        marked
    }

    /// A copy of `p` that can be read now: data levels rotate over the in-sync copies,
    /// write-mostly members only when no other copy can be read (md's write-mostly);
    /// parity levels have one, the data member's. Until a resync has run, copies may differ
    /// where writes were in flight: every read then goes to the first in-sync copy, the one
    /// the resync keeps (md's choose_first), so no read returns a version the resync then
    /// replaces.
    fn readable_copy(&self, p: &raidd_layout::Piece) -> Option<raidd_layout::Loc> {
        let n = p.copies.len();
        if n == 1 || self.needs_resync() {
            return p
                .copies
                .iter()
                .copied()
                .find(|l| self.in_sync_at(l.member, l.sector + p.sectors));
        }
        let rot = self.rotation();
        let readable = |l: &raidd_layout::Loc| self.in_sync_at(l.member, l.sector + p.sectors);
        let copies = || (0..n).map(|k| p.copies[(rot + k) % n]);
        copies()
            .find(|l| !self.slots[l.member].write_mostly.load(Ordering::Relaxed) && readable(l))
            .or_else(|| copies().find(readable))
    }

    /// Whether slot `role`'s member is write-mostly (md's devflags): read only when no other
    /// copy can be.
    pub fn write_mostly(&self, role: usize) -> bool {
        self.slots
            .get(role)
            .is_some_and(|s| s.write_mostly.load(Ordering::Relaxed))
    }

    /// Writes one member extent straight from the caller's windows (the fast path of a
    /// write that the layout does not split).
    pub(super) async fn write_extent(
        &self,
        role: usize,
        sector: u64,
        iov: IoVec,
    ) -> io::Result<()> {
        self.write_member(role, self.member_offset(role, sector), iov)
            .await
    }

    /// Whether a replacement is being built for the slot (its writes go to both).
    pub(super) fn is_replacing(&self, role: usize) -> bool {
        self.slots[role].replacing.load(Ordering::Acquire)
    }

    /// Where a read starts among the copies: rotating per thread, so mirrors share reads
    /// without a counter that every core writes.
    pub(super) fn rotation(&self) -> usize {
        thread_local!(static NEXT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) });
        NEXT.with(|n| {
            let r = n.get();
            n.set(r.wrapping_add(1));
            r
        })
    }

    /// Reads `iov`'s total length at `offset`. The windows come back whatever the outcome,
    /// but for [`ErrorKind::TimedOut`]: a member that did not answer in time (and is failed
    /// now) kept some, and may still write into them; the caller reads again into new ones
    /// ([`Array::read_new`] does).
    pub async fn read(&self, offset: u64, iov: IoVecMut) -> (Result<()>, IoVecMut) {
        let len: u64 = iov.iter().map(|w| w.len() as u64).sum();
        if let Err(e) = self.check_range(offset, len, false) {
            return (Err(e), iov);
        }
        if len == 0 {
            return (Ok(()), iov);
        }
        self.counters.add(|s| &s.reads, 1);
        self.counters.add(|s| &s.read_bytes, len);
        // One extent on one readable copy (every small read, and any read within a chunk):
        // the caller's windows go to that member as they are, with nothing to plan. Reads
        // bypass the stripe cache (it is write-through), so parity levels take this path too.
        let pieces = self.pieces_of(offset, len);
        // One piece of an in-sync member goes straight to it, unless the parity path must
        // see every read (its read bypass turned off).
        let direct = self.parity.as_ref().is_none_or(|p| p.read_bypass());
        let iov = match pieces.as_slice() {
            [p] if direct => match self.readable_copy(p) {
                Some(loc) => {
                    let at = self.member_offset(loc.member, loc.sector);
                    match self.read_member(loc.member, at, iov).await {
                        (Ok(()), iov) => return (Ok(()), iov),
                        (r, iov) if crate::member::windows_lost(&r) => {
                            return (Err(self.lost_windows(loc.member)), iov)
                        }
                        (Err(_), iov) => iov, // that member is failed now: plan without it
                    }
                }
                None => iov,
            },
            _ => iov,
        };
        // The general path runs in a block of its own (from the thread's pool): it holds a
        // batch of member reads while it waits, and inline it would make every read's state
        // in flight that large, the small reads that never take it included (about 4.7 KB
        // instead of 0.9 KB). It is taken by reads the layout splits and by reads whose
        // member failed.
        match &self.parity {
            Some(p) => raidd_rt::PooledFuture::new(p.read(self, offset, iov, &pieces)).await,
            None => raidd_rt::PooledFuture::new(self.mapped_read(offset, iov, &pieces)).await,
        }
    }

    /// The parity path of a RAID4/5/6 array (scrub and recovery of parity stripes).
    fn parity_io(&self) -> &ParityIo {
        self.parity
            .as_ref()
            .expect("parity stripes on a parity array")
    }

    /// The error of a read whose windows a member that timed out (and was failed) kept.
    pub(super) fn lost_windows(&self, role: usize) -> Error {
        Error::new(
            ErrorKind::TimedOut,
            format!(
                "{}: member {role} did not answer in time and was failed; read again into new \
                 buffers",
                self.name
            ),
        )
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
        let _pass = self.enter_gate(offset, len).await;
        self.ensure_dirty().await?;
        let _intent = self.note_intent(offset, len).await?;
        match &self.parity {
            Some(p) => p.write(self, offset, iov).await,
            None => self.mapped_write(offset, iov).await,
        }
    }

    /// Sets the RAID4/5/6 stripe cache: bytes of stripe contents it may keep (0: keep none)
    /// and how partial stripes gather company. Takes effect for the next batches; other
    /// levels ignore it.
    pub fn set_stripe_cache(&self, bytes: usize, gather: Gather) {
        if let Some(p) = &self.parity {
            p.set_stripe_cache(bytes, gather);
        }
    }

    /// Names the DMA-aligned buffer the members were put behind, so that members added later
    /// go behind it too ([`Array::admit`]). Set once; a second pool is ignored.
    pub fn set_dab(&self, pool: Arc<crate::member::DabPool>) {
        let _ = self.dab.set(pool);
    }

    /// A member joining the array (added, or replacing another): behind the array's buffer
    /// when it has one and the member is not behind one already.
    pub(crate) fn admit(&self, member: Arc<dyn Member>) -> Arc<dyn Member> {
        match self.dab.get() {
            Some(pool) if member.dab().is_none() => Arc::new(pool.wrap(member)),
            _ => member,
        }
    }

    /// Sets whether RAID4/5/6 reads of in-sync members go straight into the client's
    /// buffers (on, the default) or through a buffer per chunk under the stripe's lock
    /// (seed 004's comparison). Other levels ignore it.
    pub fn set_read_bypass(&self, on: bool) {
        if let Some(p) = &self.parity {
            p.set_read_bypass(on);
        }
    }

    /// Sets whether RAID4/5/6 small writes that find their stripe idle skip the stripe
    /// cache ([`Alone`]; `Auto` unless set).
    pub fn set_write_alone(&self, alone: Alone) {
        if let Some(p) = &self.parity {
            p.set_write_alone(alone);
        }
    }

    /// Makes every acknowledged write durable on every in-sync member.
    pub async fn flush(&self) -> Result<()> {
        self.flush_members(|_| true).await
    }

    /// Makes an acknowledged write of `len` bytes at `offset` durable (FUA): flushes only the
    /// members that write went to (its data's copies, and the parity of its stripes).
    pub async fn flush_range(&self, offset: u64, len: u64) -> Result<()> {
        self.check_range(offset, len, true)?;
        let written = self
            .geometry
            .members_written(offset / SECTOR_SIZE, len / SECTOR_SIZE);
        self.flush_members(|r| written[r]).await
    }

    /// Flushes the in-sync members `which` picks, failing those whose flush fails.
    async fn flush_members(&self, which: impl Fn(usize) -> bool) -> Result<()> {
        self.check_alive()?;
        let roles: Vec<usize> = (0..self.slots.len())
            .filter(|&r| which(r) && self.takes_writes(r))
            .collect();
        futures::future::join_all(roles.iter().map(|&r| async move {
            let member = self.member_ref(r);
            if let Err(e) = member.flush().await {
                self.slots[r].io.failed(true);
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
        if len == 0 || self.geometry.level().has_parity() {
            return Ok(());
        }
        let _pass = self.enter_gate(offset, len).await;
        self.ensure_dirty().await?;
        let _intent = self.note_intent(offset, len).await?;
        self.mapped_discard(offset, len).await
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
                self.superblocks_failed(meta.mark_clean().await).await;
            }
        }
        drop(barrier);
        Ok(Closed::Clean)
    }

    /// Whether the array was not shut down cleanly and has not been resynced since.
    pub fn needs_resync(&self) -> bool {
        self.resync_point.load(Ordering::Acquire) != u64::MAX
    }

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

/// Whether two handles are the same member (by address: vtables of one type may differ
/// between codegen units).
fn same_member(a: &Arc<dyn Member>, b: &Arc<dyn Member>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
}

fn read_lock<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().expect(crate::POISONED)
}

fn names(l: &Mutex<Vec<Arc<dyn Member>>>) -> Vec<String> {
    l.lock()
        .expect(crate::POISONED)
        .iter()
        .map(|m| m.info().name.clone())
        .collect()
}

fn to_io(e: Error) -> io::Error {
    io::Error::from_raw_os_error(e.errno())
}

/// An array is a member too: RAID0 over RAID5 groups (the papers' multi-stage striping).
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
