//! The array's members in their slots (md roles), the spares it holds beside them, and the
//! failed members taken out of a slot until they are removed: [`Slots`] owns all of it, and
//! every change of a slot's state is one of its transitions.
//!
//! A slot is in one of four states ([`SlotState`]): in sync, recovering (current below its
//! recovery point), faulty, or missing. Beside its state it may be *replacing* (a member is
//! being built to take its place, current below its copy point) and *write-mostly* (md's
//! devflags: read only when no other copy can be). Spares (md's role 0xffff) are members
//! held outside the roles; a spare enters a slot by [`Transition::Admit`].
//!
//! Which transition may start from which state is one pure table ([`Transition::target`]),
//! tested exhaustively; each transition method asserts it and says what the caller writes
//! to the superblocks around it. The data path only reads: states through one atomic per
//! slot, members through the calling thread's shard of the slot's member
//! (`slot_member.rs`). Changes of membership (admit, remove, replace) take the slots'
//! change lock ([`Slots::lock_changes`]) and prove it with the guard they are given, so two
//! of them never pick the same slot; failing a slot needs no lock (any I/O may do it).
//!
//! An array with md's write journal also holds its journal member here (role 0xfffd,
//! `journal_slot.rs`): while the journal is not working the array takes no writes.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};

use raidd_layout::SECTOR_SIZE;

use super::journal_slot::{JournalParts, JournalSlot, JournalState};
use super::member_counts::MemberCounts;
use super::report::{MemberIoStatus, SlotState, SlotStatus};
use super::slot_member::{MemberRef, SlotMember};
use crate::member::Member;

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

/// A change of a slot's state (or of its replacing flag).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Transition {
    /// An I/O error or the administrator: a working member stops being used.
    Fail,
    /// A member (new, a spare, or a former member re-added) takes a free slot and is
    /// rebuilt from its recovery point.
    Admit,
    /// The rebuild reached the end: the member serves the whole slot.
    FinishRecovery,
    /// A failed member leaves its slot.
    Remove,
    /// A member starts being built to take a working member's place.
    BeginReplace,
    /// The replacement is complete and takes the slot; the old member is listed as failed.
    CompleteReplace,
    /// The replacement is given up (a member failed, or the pass stopped).
    AbandonReplace,
}

impl Transition {
    #[cfg(test)]
    pub(crate) const ALL: [Transition; 7] = [
        Transition::Fail,
        Transition::Admit,
        Transition::FinishRecovery,
        Transition::Remove,
        Transition::BeginReplace,
        Transition::CompleteReplace,
        Transition::AbandonReplace,
    ];

    /// The state and replacing flag a slot in `from` (replacing or not) moves to, or `None`
    /// where the transition is not allowed from there. Only an in-sync slot starts a
    /// replacement, and only one at a time; a slot that fails while replacing keeps the flag
    /// until the replace notices and abandons it (admitting a spare there meanwhile is
    /// allowed, as md claims a spare for a failed slot at once).
    pub(crate) const fn target(
        self,
        from: SlotState,
        replacing: bool,
    ) -> Option<(SlotState, bool)> {
        use SlotState::*;
        match (self, from, replacing) {
            (Transition::Fail, InSync | Recovering, r) => Some((Faulty, r)),
            (Transition::Admit, Missing | Faulty, r) => Some((Recovering, r)),
            (Transition::FinishRecovery, Recovering, r) => Some((InSync, r)),
            (Transition::Remove, Faulty, false) => Some((Missing, false)),
            (Transition::BeginReplace, InSync, false) => Some((InSync, true)),
            (Transition::CompleteReplace, InSync, true) => Some((InSync, false)),
            (Transition::AbandonReplace, s, true) => Some((s, false)),
            _ => None,
        }
    }
}

/// Proof that the caller holds the slots' change lock (see [`Slots::lock_changes`]).
#[derive(Debug)]
pub struct Changing<'a>(#[allow(dead_code)] futures::lock::MutexGuard<'a, ()>);

/// How [`Slots::fail`] went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failed {
    /// The slot was working and is faulty now: the caller records it on disk.
    Marked,
    /// It was not working (someone else failed it, or it never was).
    NotWorking,
    /// The error came from a member the slot no longer holds: ignored.
    Stale,
}

/// Aligned, so that the atomics read on every I/O and written almost never share no line
/// with another slot's. (Its member is taken through per-thread shards of their own.)
#[derive(Debug)]
#[repr(align(128))]
struct Slot {
    member: SlotMember,
    /// Byte offset of the member's data area (md's data_offset).
    data_offset: AtomicU64,
    state: AtomicU8,
    /// While recovering: member sectors below this hold current data (md's recovery_offset).
    /// Moves only under a gate barrier on the region it passes.
    recovered: AtomicU64,
    /// A member being built to take this slot's place and its data offset: below
    /// `replaced` it is current and gets every write the slot's member gets.
    replacement: RwLock<Option<(Arc<dyn Member>, u64)>>,
    replaced: AtomicU64,
    /// Whether `replacement` is set (checked on every write without the lock).
    replacing: AtomicBool,
    /// While recovering: the member came back to its own slot, current up to the chunks the
    /// write-intent bitmap marks, so the recovery rebuilds only those (md's re-add).
    by_bitmap: AtomicBool,
    write_mostly: AtomicBool,
    /// What the slot's member did (I/O and errors), since it took the slot.
    io: MemberCounts,
}

impl Slot {
    fn new(parts: Option<SlotParts>, by_bitmap_ok: bool) -> Slot {
        let (member, data_offset, state, recovered) = match &parts {
            None => (None, 0, SlotState::Missing, 0),
            Some(s) => match s.recovered {
                None => (Some(s.member.clone()), s.data_offset, SlotState::InSync, 0),
                Some(r) => (
                    Some(s.member.clone()),
                    s.data_offset,
                    SlotState::Recovering,
                    r,
                ),
            },
        };
        let by_bitmap = parts
            .as_ref()
            .is_some_and(|s| s.by_bitmap && s.recovered.is_some() && by_bitmap_ok);
        Slot {
            member: SlotMember::new(member),
            data_offset: AtomicU64::new(data_offset),
            state: AtomicU8::new(state as u8),
            recovered: AtomicU64::new(recovered),
            replacement: RwLock::new(None),
            replaced: AtomicU64::new(0),
            replacing: AtomicBool::new(false),
            by_bitmap: AtomicBool::new(by_bitmap),
            write_mostly: AtomicBool::new(parts.as_ref().is_some_and(|s| s.write_mostly)),
            io: MemberCounts::default(),
        }
    }

    fn state(&self) -> SlotState {
        SlotState::from_u8(self.state.load(Ordering::Acquire))
    }

    /// Moves the slot by `t`, asserting the transition is allowed from where it is (the
    /// callers hold the change lock or, for `Fail`, use [`Slot::try_fail`]).
    fn apply(&self, role: usize, t: Transition) {
        let (from, replacing) = (self.state(), self.replacing.load(Ordering::Acquire));
        let Some((to, still)) = t.target(from, replacing) else {
            panic!("slot {role}: {t:?} is not allowed from {from:?} (replacing: {replacing})");
        };
        self.state.store(to as u8, Ordering::Release);
        self.replacing.store(still, Ordering::Release);
    }

    /// [`Transition::Fail`] by compare and swap: any thread may fail a working slot, once.
    fn try_fail(&self) -> bool {
        let mut cur = self.state.load(Ordering::Acquire);
        loop {
            let from = SlotState::from_u8(cur);
            let Some((to, _)) = Transition::Fail.target(from, false) else {
                return false;
            };
            match self
                .state
                .compare_exchange(cur, to as u8, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return true,
                Err(now) => cur = now,
            }
        }
    }
}

/// Every member the array holds: one slot per role, the spares, and failed members taken
/// out of their slot (by a replacement or an admitted spare) until removed.
#[derive(Debug)]
pub struct Slots {
    slots: Vec<Slot>,
    spares: Mutex<Vec<Arc<dyn Member>>>,
    detached: Mutex<Vec<Arc<dyn Member>>>,
    /// The write journal, where the array has md's JOURNAL feature.
    journal: Option<JournalSlot>,
    /// Serialises changes of membership (admit, remove, the start and end of a replace):
    /// each looks at the slots, writes superblocks, then changes the slots.
    changes: futures::lock::Mutex<()>,
}

impl Slots {
    /// The slots as assembly or creation hands them over. `by_bitmap_ok`: a re-add by
    /// bitmap may resume as one (bitmap loaded, no resync due: its bits then also stand for
    /// chunks the resync must visit).
    pub(super) fn new(
        parts: Vec<Option<SlotParts>>,
        spares: Vec<Arc<dyn Member>>,
        journal: Option<JournalParts>,
        by_bitmap_ok: bool,
    ) -> Slots {
        Slots {
            slots: parts
                .into_iter()
                .map(|p| Slot::new(p, by_bitmap_ok))
                .collect(),
            spares: Mutex::new(spares),
            detached: Mutex::new(Vec::new()),
            journal: journal.map(JournalSlot::new),
            changes: futures::lock::Mutex::new(()),
        }
    }

    /// Raid devices: one slot per role.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    pub fn state(&self, role: usize) -> SlotState {
        self.slots[role].state()
    }

    /// The member in a slot (whatever its state).
    pub fn member(&self, role: usize) -> Option<Arc<dyn Member>> {
        self.slots
            .get(role)
            .and_then(|s| s.member.get())
            .map(|m| Arc::clone(&m))
    }

    /// Where the slot's data starts on its member, in bytes.
    pub fn data_offset(&self, role: usize) -> u64 {
        self.slots[role].data_offset.load(Ordering::Relaxed)
    }

    /// Whether slot `role`'s member is write-mostly (md's devflags): read only when no other
    /// copy can be.
    pub fn write_mostly(&self, role: usize) -> bool {
        self.slots
            .get(role)
            .is_some_and(|s| s.write_mostly.load(Ordering::Relaxed))
    }

    /// Whether slot `role` recovers only the chunks the write-intent bitmap marks (a member
    /// added back to its own slot, see `Array::add_member`).
    pub fn recovering_by_bitmap(&self, role: usize) -> bool {
        self.slots
            .get(role)
            .is_some_and(|s| s.by_bitmap.load(Ordering::Acquire))
    }

    /// The slots not in sync (missing, faulty or recovering), in order.
    pub fn not_in_sync(&self) -> Vec<usize> {
        (0..self.len()).filter(|&r| !self.in_sync(r)).collect()
    }

    /// Names of every member held: in the slots, the spares, and failed members not yet
    /// removed.
    pub fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = (0..self.len())
            .filter_map(|r| self.member(r).map(|m| m.info().name.clone()))
            .collect();
        v.extend(names(&self.spares));
        v.extend(names(&self.detached));
        v.extend(self.journal_member().map(|m| m.info().name.clone()));
        v
    }

    /// The journal's state, where the array has one (md's JOURNAL feature).
    pub fn journal_state(&self) -> Option<JournalState> {
        self.journal.as_ref().map(JournalSlot::state)
    }

    /// The journal member (active or failed), where there is one.
    pub fn journal_member(&self) -> Option<Arc<dyn Member>> {
        self.journal.as_ref().and_then(JournalSlot::member)
    }

    /// Whether the journal keeps the array from taking writes: it has one and it is not
    /// working (md forces such an array read-only).
    pub fn journal_blocks_writes(&self) -> bool {
        self.journal_state().is_some_and(|s| !s.allows_writes())
    }

    /// [`JournalTransition::Fail`](super::journal_slot::JournalTransition): an active
    /// journal becomes faulty, if it is still `member`. On disk: the caller records role
    /// 0xfffe for it in the superblocks (events + 1), and the array takes no more writes.
    pub fn fail_journal(&self, member: &Arc<dyn Member>) -> Failed {
        let Some(j) = &self.journal else {
            return Failed::Stale;
        };
        if !j.member().is_some_and(|m| same_member(&m, member)) {
            return Failed::Stale;
        }
        if j.try_fail() {
            Failed::Marked
        } else {
            Failed::NotWorking
        }
    }

    /// [`JournalTransition::Attach`](super::journal_slot::JournalTransition): `member`
    /// becomes the journal of an array whose journal is missing or faulty; the failed one
    /// is listed as detached until removed. On disk, written before: the member's
    /// superblock with role 0xfffd and an empty log, and the role in every superblock.
    pub fn attach_journal(&self, _: &Changing<'_>, member: Arc<dyn Member>) {
        let j = self
            .journal
            .as_ref()
            .expect("a journal is attached only to an array with the JOURNAL feature");
        if let Some(old) = j.attach(member) {
            lock(&self.detached).push(old);
        }
    }

    /// [`JournalTransition::Remove`](super::journal_slot::JournalTransition): the failed
    /// journal leaves the array. On disk: the caller drops it from the superblocks' roles.
    pub fn remove_journal(&self, _: &Changing<'_>) -> Arc<dyn Member> {
        self.journal
            .as_ref()
            .expect("only an array with a journal removes one")
            .remove()
    }

    /// The slot of the member called `name` (as [`Member::info`] names it).
    pub fn role_of(&self, name: &str) -> Option<usize> {
        (0..self.len()).find(|&r| self.member(r).is_some_and(|m| m.info().name == name))
    }

    pub(crate) fn in_sync(&self, role: usize) -> bool {
        self.state(role) == SlotState::InSync
    }

    /// Whether a slot holds current data for its member sectors below `end`: in sync, or
    /// recovering and already rebuilt past `end`. Such a slot is read and written there.
    pub(crate) fn in_sync_at(&self, role: usize, end: u64) -> bool {
        match self.state(role) {
            SlotState::InSync => true,
            SlotState::Recovering => end <= self.recovered(role),
            _ => false,
        }
    }

    /// Whether a write starting at member-data sector `start` must go to the slot: in sync,
    /// or recovering with `start` below the recovery point.
    pub(crate) fn takes_write_at(&self, role: usize, start: u64) -> bool {
        match self.state(role) {
            SlotState::InSync => true,
            SlotState::Recovering => start < self.recovered(role),
            _ => false,
        }
    }

    /// Whether a slot takes writes at all (in sync or being rebuilt).
    pub(crate) fn takes_writes(&self, role: usize) -> bool {
        matches!(self.state(role), SlotState::InSync | SlotState::Recovering)
    }

    /// Per role, whether it is not in sync (what a geometry's `survives` asks).
    pub(crate) fn missing_mask(&self) -> Vec<bool> {
        (0..self.len()).map(|r| !self.in_sync(r)).collect()
    }

    /// Whether a slot is missing or holds a failed member: a member may be admitted there.
    pub(crate) fn is_free(&self, role: usize) -> bool {
        matches!(self.state(role), SlotState::Missing | SlotState::Faulty)
    }

    /// The member of a slot that I/O was planned to, as the data path takes it (no line
    /// shared by all threads is written). A slot emptied since the plan (its failed member
    /// removed) gives a stand-in whose every I/O fails, so the I/O is handled as a failed
    /// member's.
    pub(super) fn member_ref(&self, role: usize) -> MemberRef {
        self.slots[role]
            .member
            .get()
            .unwrap_or_else(super::slot_member::removed)
    }

    /// Byte offset on the member of member-data sector `sector`.
    pub(crate) fn member_offset(&self, role: usize, sector: u64) -> u64 {
        self.data_offset(role) + sector * SECTOR_SIZE
    }

    /// While recovering: member sectors below this are current.
    pub(crate) fn recovered(&self, role: usize) -> u64 {
        self.slots[role].recovered.load(Ordering::Acquire)
    }

    /// Whether a replacement is being built for the slot (its writes go to both).
    pub(crate) fn is_replacing(&self, role: usize) -> bool {
        self.slots[role].replacing.load(Ordering::Acquire)
    }

    /// What slot `role`'s member did since it took the slot.
    pub(super) fn io(&self, role: usize) -> &MemberCounts {
        &self.slots[role].io
    }

    /// The replacement member of `role` and the byte offset on it that corresponds to a
    /// write of `len` bytes at byte `offset` of the slot's member, when the replacement
    /// is current there.
    pub(super) fn replacement_for(
        &self,
        role: usize,
        offset: u64,
        len: u64,
    ) -> Option<(Arc<dyn Member>, u64)> {
        let slot = &self.slots[role];
        if !slot.replacing.load(Ordering::Acquire) {
            return None;
        }
        let base = slot.data_offset.load(Ordering::Relaxed);
        debug_assert!(offset >= base, "a member I/O below the slot's data area");
        let rel = offset - base;
        if (rel + len).div_ceil(SECTOR_SIZE) > slot.replaced.load(Ordering::Acquire) {
            return None;
        }
        let (m, off) = read_lock(&slot.replacement).clone()?;
        Some((m, off + rel))
    }

    /// Slot `role` as `raidd detail` reports it.
    pub(super) fn status(&self, role: usize) -> SlotStatus {
        let slot = &self.slots[role];
        let state = slot.state();
        let recovering = state == SlotState::Recovering;
        SlotStatus {
            role,
            member: self.member(role).map(|m| m.info().name.clone()),
            state,
            recovered_bytes: recovering.then(|| self.recovered(role) * SECTOR_SIZE),
            by_bitmap: recovering && self.recovering_by_bitmap(role),
            write_mostly: self.write_mostly(role),
            replacement: read_lock(&slot.replacement)
                .as_ref()
                .map(|(m, _)| m.info().name.clone()),
            replaced_bytes: self
                .is_replacing(role)
                .then(|| slot.replaced.load(Ordering::Acquire) * SECTOR_SIZE),
            io: MemberIoStatus {
                checksum_errors: self
                    .member(role)
                    .and_then(|m| m.checksums().map(|c| c.counts().mismatches))
                    .unwrap_or(0),
                ..slot.io.status()
            },
        }
    }

    /// Names of the spares held.
    pub(super) fn spare_names(&self) -> Vec<String> {
        names(&self.spares)
    }

    /// Names of failed members taken out of their slot, not yet removed.
    pub(super) fn detached_names(&self) -> Vec<String> {
        names(&self.detached)
    }

    /// A spare to take into a free slot, if one is held.
    pub(super) fn take_spare(&self) -> Option<Arc<dyn Member>> {
        let mut v = lock(&self.spares);
        (!v.is_empty()).then(|| v.remove(0))
    }

    /// Holds `member` as a spare (md's role 0xffff): added while the array was whole, or a
    /// replacement given up. On disk: its superblock says spare (the caller wrote it).
    pub(super) fn add_spare(&self, member: Arc<dyn Member>) {
        lock(&self.spares).push(member);
    }

    /// Takes the failed member or the spare called `name` out of the array; `Some(true)`
    /// for a failed one (the caller drops it from the superblocks' roles).
    pub(super) fn take_listed(&self, name: &str) -> Option<(Arc<dyn Member>, bool)> {
        let take = |l: &Mutex<Vec<Arc<dyn Member>>>| {
            let mut v = lock(l);
            let i = v.iter().position(|m| m.info().name == name)?;
            Some(v.remove(i))
        };
        take(&self.detached)
            .map(|m| (m, true))
            .or_else(|| take(&self.spares).map(|m| (m, false)))
    }

    /// Takes the change lock: one change of membership at a time.
    pub async fn lock_changes(&self) -> Changing<'_> {
        Changing(self.changes.lock().await)
    }

    /// [`Transition::Fail`]: a working slot (in sync or recovering) becomes faulty, if it
    /// still holds `member` (when one is given: an error that arrives late from a member
    /// that was failed and replaced meanwhile must not fail its replacement). The shard of
    /// the slot's member is held while marking, so the slot cannot take a new member in
    /// between. On disk: the caller records the role as faulty (0xfffe, events + 1) in the
    /// survivors' superblocks before the request that saw the error completes.
    pub(crate) fn fail(&self, role: usize, member: Option<&Arc<dyn Member>>) -> Failed {
        let slot = &self.slots[role];
        let current = slot.member.read();
        if let Some(m) = member {
            if !current.as_ref().is_some_and(|c| same_member(c, m)) {
                return Failed::Stale;
            }
        }
        if slot.try_fail() {
            Failed::Marked
        } else {
            Failed::NotWorking
        }
    }

    /// [`Transition::Admit`]: `member` takes free slot `role` as recovering from sector 0
    /// (`by_bitmap`: only the chunks the write-intent bitmap marks), with its data at
    /// `data_offset`; a failed member the slot held is listed as detached until removed.
    /// Its counters start at zero; it is not write-mostly (its superblock carries no
    /// devflags). On disk, written before (`Metadata::add_member`): the member's superblock
    /// with this role and recovery_offset 0 (with RECOVERY_BITMAP for a re-add), and the
    /// role in every superblock.
    pub(super) fn admit(
        &self,
        _: &Changing<'_>,
        role: usize,
        member: Arc<dyn Member>,
        data_offset: u64,
        by_bitmap: bool,
    ) {
        let slot = &self.slots[role];
        let was = slot.state();
        slot.data_offset.store(data_offset, Ordering::Relaxed);
        slot.recovered.store(0, Ordering::Release);
        slot.by_bitmap.store(by_bitmap, Ordering::Release);
        slot.write_mostly.store(false, Ordering::Relaxed);
        let old = slot.member.replace(Some(member));
        debug_assert_eq!(
            old.is_some(),
            was == SlotState::Faulty,
            "slot {role}: a faulty slot holds its member, a missing one none"
        );
        if let Some(old) = old {
            lock(&self.detached).push(old);
        }
        slot.io.reset();
        slot.apply(role, Transition::Admit);
    }

    /// Moves a recovering slot's recovery point forward to `sector`: everything below it is
    /// current. Only under a gate barrier on the regions it passes, so no write lands on
    /// the wrong side of it. On disk: checkpointed by the caller now and then
    /// (`Metadata::set_recovery`), never ahead of what was written.
    pub(crate) fn recovered_to(&self, role: usize, sector: u64) {
        let slot = &self.slots[role];
        let before = slot.recovered.swap(sector, Ordering::AcqRel);
        // A recovery point from the kernel need not be chunk aligned and the pass starts
        // at its chunk, but its first window (whole chunks) ends past the point.
        debug_assert!(
            sector >= before,
            "slot {role}: recovery point moved back from {before} to {sector}"
        );
    }

    /// [`Transition::FinishRecovery`]: a recovering slot whose every sector was rebuilt is
    /// in sync; false when it failed meanwhile. On disk: the caller then clears its
    /// recovery_offset (`Metadata::set_recovery(role, None)`).
    pub(crate) fn finish_recovery(&self, role: usize) -> bool {
        let slot = &self.slots[role];
        let Some((to, _)) = Transition::FinishRecovery.target(SlotState::Recovering, false) else {
            unreachable!("FinishRecovery leaves Recovering")
        };
        let done = slot
            .state
            .compare_exchange(
                SlotState::Recovering as u8,
                to as u8,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok();
        if done {
            slot.by_bitmap.store(false, Ordering::Release);
        }
        done
    }

    /// [`Transition::Remove`]: a faulty slot gives up its member and is missing. On disk:
    /// the caller drops the member from the superblocks' roles (`Metadata::forget_failed`).
    pub(super) fn remove(&self, _: &Changing<'_>, role: usize) -> Arc<dyn Member> {
        let slot = &self.slots[role];
        slot.apply(role, Transition::Remove);
        slot.member
            .take()
            .expect("a faulty slot holds its member until removed")
    }

    /// [`Transition::BeginReplace`]: an in-sync slot starts copying onto `new`, whose data
    /// starts at `data_offset`; from now on writes below its copy point go to both. On
    /// disk, written before: `new` carries a spare's superblock while it is built.
    pub(super) fn begin_replace(
        &self,
        _: &Changing<'_>,
        role: usize,
        new: Arc<dyn Member>,
        data_offset: u64,
    ) {
        let slot = &self.slots[role];
        slot.replaced.store(0, Ordering::Release);
        *write_lock(&slot.replacement) = Some((new, data_offset));
        slot.apply(role, Transition::BeginReplace);
    }

    /// Moves a replacement's copy point forward: below `sector` it is current. Only under
    /// a gate barrier on the regions it passes.
    pub(super) fn replaced_to(&self, role: usize, sector: u64) {
        let before = self.slots[role].replaced.swap(sector, Ordering::AcqRel);
        debug_assert!(sector >= before, "slot {role}: copy point moved back");
    }

    /// [`Transition::AbandonReplace`]: the replacement is given up (any thread: a write to
    /// it failed, or the pass ended); the slot keeps its member. Returns the replacement,
    /// if one was being built. On disk: nothing (it carries a spare's superblock).
    pub(super) fn abandon_replace(&self, role: usize) -> Option<Arc<dyn Member>> {
        let slot = &self.slots[role];
        if !slot.replacing.swap(false, Ordering::AcqRel) {
            return None;
        }
        debug_assert!(
            Transition::AbandonReplace
                .target(slot.state(), true)
                .is_some_and(|(_, replacing)| !replacing),
            "slot {role}: a replacement is given up from any state"
        );
        write_lock(&slot.replacement).take().map(|(m, _)| m)
    }

    /// [`Transition::CompleteReplace`]: the replacement takes the slot (its counters start
    /// at zero, it is not write-mostly) and the old member is listed as failed, until
    /// removed. On disk, written before (`Metadata::complete_replacement`): the new member
    /// in the role, the old one faulty.
    pub(super) fn complete_replace(&self, _: &Changing<'_>, role: usize) {
        let slot = &self.slots[role];
        let (new, data_offset) = write_lock(&slot.replacement)
            .take()
            .expect("a replacing slot holds its replacement");
        assert_eq!(
            data_offset,
            slot.data_offset.load(Ordering::Relaxed),
            "slot {role}: a replacement's data starts where the member's does"
        );
        slot.write_mostly.store(false, Ordering::Relaxed);
        let old = slot.member.replace(Some(new));
        slot.io.reset();
        slot.apply(role, Transition::CompleteReplace);
        lock(&self.detached).extend(old);
    }
}

/// Whether two handles are the same member (by address: vtables of one type may differ
/// between codegen units).
pub(super) fn same_member(a: &Arc<dyn Member>, b: &Arc<dyn Member>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
}

fn names(l: &Mutex<Vec<Arc<dyn Member>>>) -> Vec<String> {
    lock(l).iter().map(|m| m.info().name.clone()).collect()
}

fn lock<T>(l: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    l.lock().expect(crate::POISONED)
}

fn read_lock<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().expect(crate::POISONED)
}

fn write_lock<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().expect(crate::POISONED)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::member::MemMember;

    const STATES: [SlotState; 4] = [
        SlotState::InSync,
        SlotState::Faulty,
        SlotState::Missing,
        SlotState::Recovering,
    ];

    /// md's rules, spelled out state by state: every transition from every state, both with
    /// and without a replacement in progress.
    #[test]
    fn the_transition_table_is_md_s() {
        use SlotState::*;
        for t in Transition::ALL {
            for from in STATES {
                for replacing in [false, true] {
                    let want = match t {
                        Transition::Fail => {
                            matches!(from, InSync | Recovering).then_some((Faulty, replacing))
                        }
                        Transition::Admit => {
                            matches!(from, Missing | Faulty).then_some((Recovering, replacing))
                        }
                        Transition::FinishRecovery => {
                            (from == Recovering).then_some((InSync, replacing))
                        }
                        Transition::Remove => {
                            (from == Faulty && !replacing).then_some((Missing, false))
                        }
                        Transition::BeginReplace => {
                            (from == InSync && !replacing).then_some((InSync, true))
                        }
                        Transition::CompleteReplace => {
                            (from == InSync && replacing).then_some((InSync, false))
                        }
                        Transition::AbandonReplace => replacing.then_some((from, false)),
                    };
                    assert_eq!(t.target(from, replacing), want, "{t:?} from {from:?}");
                }
            }
        }
    }

    /// No transition makes a slot replacing unless it is in sync, and nothing but
    /// BeginReplace sets the flag: a replacement is only ever built for a working member.
    #[test]
    fn only_an_in_sync_slot_starts_a_replacement() {
        for t in Transition::ALL {
            for from in STATES {
                if let Some((to, true)) = t.target(from, false) {
                    assert_eq!(
                        (t, from, to),
                        (
                            Transition::BeginReplace,
                            SlotState::InSync,
                            SlotState::InSync
                        )
                    );
                }
            }
        }
    }

    fn mem(name: &str) -> Arc<dyn Member> {
        Arc::new(MemMember::new(name, 1 << 20))
    }

    fn parts(name: &str) -> Option<SlotParts> {
        Some(SlotParts {
            member: mem(name),
            data_offset: 4096,
            recovered: None,
            by_bitmap: false,
            write_mostly: true,
        })
    }

    #[test]
    fn a_failed_member_is_detached_when_a_spare_takes_its_slot_and_removed_after() {
        let slots = Slots::new(
            vec![parts("a"), parts("b"), None],
            vec![mem("s")],
            None,
            false,
        );
        assert_eq!(slots.not_in_sync(), vec![2]);
        assert!(slots.write_mostly(0));
        let b = slots.member(1).expect("b");
        assert_eq!(slots.fail(1, Some(&mem("other"))), Failed::Stale);
        assert_eq!(slots.fail(1, Some(&b)), Failed::Marked);
        assert_eq!(slots.fail(1, None), Failed::NotWorking);
        raidd_rt::block_on(async move {
            let changing = slots.lock_changes().await;
            let spare = slots.take_spare().expect("a spare");
            slots.admit(&changing, 1, spare, 8192, false);
            assert_eq!(slots.state(1), SlotState::Recovering);
            assert_eq!(slots.detached_names(), vec!["b".to_string()]);
            assert_eq!(slots.data_offset(1), 8192);
            assert!(!slots.in_sync_at(1, 1));
            slots.recovered_to(1, 64);
            assert!(slots.in_sync_at(1, 64) && !slots.in_sync_at(1, 65));
            assert!(slots.takes_write_at(1, 63) && !slots.takes_write_at(1, 64));
            assert!(slots.finish_recovery(1));
            assert!(!slots.finish_recovery(1));
            assert_eq!(
                slots
                    .take_listed("b")
                    .map(|(m, f)| (m.info().name.clone(), f)),
                Some(("b".into(), true))
            );
            assert_eq!(slots.names(), vec!["a".to_string(), "s".to_string()]);
        });
    }

    #[test]
    fn a_replacement_takes_the_slot_and_lists_the_old_member() {
        let slots = Slots::new(vec![parts("a"), parts("b")], vec![], None, false);
        raidd_rt::block_on(async move {
            let changing = slots.lock_changes().await;
            slots.begin_replace(&changing, 0, mem("new"), 4096);
            assert!(slots.is_replacing(0));
            assert!(
                slots.replacement_for(0, 4096, 512).is_none(),
                "nothing copied yet"
            );
            slots.replaced_to(0, 8);
            let (m, at) = slots
                .replacement_for(0, 4096 + 512, 512)
                .expect("copied there");
            assert_eq!((m.info().name.as_str(), at), ("new", 4096 + 512));
            assert!(
                slots.replacement_for(0, 4096 + 3584, 1024).is_none(),
                "past the copy"
            );
            slots.complete_replace(&changing, 0);
            assert!(!slots.is_replacing(0));
            assert_eq!(
                slots.member(0).map(|m| m.info().name.clone()).as_deref(),
                Some("new")
            );
            assert!(!slots.write_mostly(0));
            assert_eq!(slots.detached_names(), vec!["a".to_string()]);
            assert!(slots.abandon_replace(0).is_none());
        });
    }

    #[test]
    #[should_panic(expected = "Remove is not allowed from InSync")]
    fn removing_a_working_member_stops_loudly() {
        let slots = Slots::new(vec![parts("a"), parts("b")], vec![], None, false);
        raidd_rt::block_on(async move {
            let changing = slots.lock_changes().await;
            slots.remove(&changing, 0);
        });
    }

    #[test]
    #[should_panic(expected = "BeginReplace is not allowed from Recovering")]
    fn a_recovering_slot_is_not_replaced() {
        let mut p = parts("a");
        if let Some(p) = p.as_mut() {
            p.recovered = Some(0);
        }
        let slots = Slots::new(vec![p, parts("b")], vec![], None, false);
        raidd_rt::block_on(async move {
            let changing = slots.lock_changes().await;
            slots.begin_replace(&changing, 0, mem("new"), 4096);
        });
    }

    #[test]
    fn a_failed_journal_stops_writes_until_a_new_one_is_attached() {
        let none = Slots::new(vec![parts("a"), parts("b")], vec![], None, false);
        assert_eq!(none.journal_state(), None);
        assert!(!none.journal_blocks_writes());
        let j = mem("j");
        let slots = Slots::new(
            vec![parts("a"), parts("b")],
            vec![],
            Some(JournalParts {
                member: Some(j.clone()),
                place: None,
            }),
            false,
        );
        assert_eq!(slots.journal_state(), Some(JournalState::Active));
        assert!(!slots.journal_blocks_writes());
        assert!(slots.names().contains(&"j".to_string()));
        assert_eq!(slots.fail_journal(&mem("other")), Failed::Stale);
        assert_eq!(slots.fail_journal(&j), Failed::Marked);
        assert_eq!(slots.fail_journal(&j), Failed::NotWorking);
        assert!(slots.journal_blocks_writes());
        raidd_rt::block_on(async move {
            let changing = slots.lock_changes().await;
            slots.attach_journal(&changing, mem("j2"));
            assert_eq!(slots.journal_state(), Some(JournalState::Active));
            assert!(!slots.journal_blocks_writes());
            assert_eq!(slots.detached_names(), vec!["j".to_string()]);
            assert_eq!(
                slots.fail_journal(&mem("j2")),
                Failed::Stale,
                "another member"
            );
            let j2 = slots.journal_member().expect("attached");
            assert_eq!(slots.fail_journal(&j2), Failed::Marked);
            let gone = slots.remove_journal(&changing);
            assert_eq!(gone.info().name, "j2");
            assert_eq!(slots.journal_state(), Some(JournalState::Missing));
            assert!(slots.journal_blocks_writes());
        });
    }

    #[test]
    #[should_panic(expected = "Remove is not allowed from Active")]
    fn removing_a_working_journal_stops_loudly() {
        let slots = Slots::new(
            vec![parts("a"), parts("b")],
            vec![],
            Some(JournalParts {
                member: Some(mem("j")),
                place: None,
            }),
            false,
        );
        raidd_rt::block_on(async move {
            let changing = slots.lock_changes().await;
            slots.remove_journal(&changing);
        });
    }
}
