//! The md metadata of a running array: every member's superblock, kept in memory and written
//! back when the array's state changes (clean/dirty, a member failed). Every superblock write
//! is read back and compared (seed 004, 6.4: "writes to the RAID super block are NOT
//! CHECKED"); a member whose superblock cannot be written is failed like any other.
//!
//! Event counts go up by one with every change, so on the next assembly a member that missed
//! a change (it failed, or was absent) is recognised as stale.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use futures::lock::Mutex;
use raidd_md::{feature, BitmapSuper, DevRole, Superblock, MAX_SECTOR};

use crate::error::{Error, ErrorKind, Result};
use crate::member::{read_bytes, write_bytes, Member, TagFacts};

/// Bytes of a superblock block: read-modify-written whole so 4 KiB-sector members work.
const SB_BLOCK: usize = 4096;

/// The array-wide state a commit writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CleanState {
    /// Shut down cleanly or never written: resync_offset = MaxSector.
    Clean,
    /// Writes may be in flight: an unclean stop needs a resync (resync_offset = 0).
    Dirty,
}

/// A member written into a slot or the spares ([`Metadata::add_member`]).
pub(crate) struct MemberAdded {
    /// Byte offset of its data area.
    pub(crate) data_offset: u64,
    /// Its superblock says it recovers by the write-intent bitmap.
    pub(crate) by_bitmap: bool,
    /// Slots whose superblock write failed.
    pub(crate) failed: Vec<usize>,
}

/// One member's superblock and where it lives.
#[derive(Clone, Debug)]
pub(crate) struct MemberSb {
    pub(crate) sb: Superblock,
    pub(crate) member: Arc<dyn Member>,
}

#[derive(Debug)]
pub(crate) struct MetaState {
    /// Superblocks of the members that receive updates: in-sync slots (by role) and spares.
    pub(crate) slots: Vec<Option<MemberSb>>,
    pub(crate) spares: Vec<MemberSb>,
    /// The write journal's member (md's role 0xfffd), while it works: its superblock keeps
    /// the log's tail (`journal_tail`, in `recovery_offset`'s place).
    pub(crate) journal: Option<MemberSb>,
    pub(crate) events: u64,
    pub(crate) clean: CleanState,
    /// Role changes since assembly, applied to every superblock in order: (dev_number, raw
    /// role). A failed member becomes faulty; an added one takes its slot.
    roles: Vec<(u32, u16)>,
    /// Failed members still attached to the array (until removed): their device numbers
    /// are not reused.
    failed_devs: Vec<(u32, Arc<dyn Member>)>,
    bitmap: Option<BitmapSuper>,
}

/// Metadata of a running array.
#[derive(Debug)]
pub(crate) struct Metadata {
    state: Mutex<MetaState>,
    dirty: AtomicBool,
    /// The internal bitmap's chunk size and bits as assembly read them.
    pub(crate) bitmap_at_start: Option<(u32, Vec<u8>)>,
    /// How often idle bits are cleared: the bitmap's daemon_sleep (mdadm's --delay), 5 s
    /// when out of range, as the kernel takes it.
    pub(crate) bitmap_period: Option<std::time::Duration>,
}

fn now_md_time() -> u64 {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    Superblock::join_time(d.as_secs(), d.subsec_micros())
}

impl Metadata {
    pub(crate) fn new(
        slots: Vec<Option<MemberSb>>,
        spares: Vec<MemberSb>,
        journal: Option<MemberSb>,
        bitmap: Option<(BitmapSuper, Vec<u8>)>,
    ) -> Metadata {
        let bitmap_at_start = bitmap.as_ref().map(|(b, bits)| (b.chunksize, bits.clone()));
        let bitmap_period = bitmap.as_ref().map(|(b, _)| {
            let secs = match b.daemon_sleep {
                s @ 1..=86_400 => s,
                _ => 5,
            };
            std::time::Duration::from_secs(u64::from(secs))
        });
        let bitmap = bitmap.map(|(b, _)| b);
        let newest = slots.iter().flatten().chain(spares.iter()).map(|m| &m.sb);
        let events = newest.clone().map(|sb| sb.events).max().unwrap_or(0);
        let clean = if newest.into_iter().all(|sb| sb.resync_offset == MAX_SECTOR) {
            CleanState::Clean
        } else {
            CleanState::Dirty
        };
        Metadata {
            bitmap_at_start,
            bitmap_period,
            dirty: AtomicBool::new(clean == CleanState::Dirty),
            state: Mutex::new(MetaState {
                slots,
                spares,
                journal,
                events,
                clean,
                roles: Vec::new(),
                failed_devs: Vec::new(),
                bitmap,
            }),
        }
    }

    /// Whether the superblocks say writes may be in flight.
    pub(crate) fn is_dirty(&self) -> bool {
        self.dirty.load(Ordering::Acquire)
    }

    pub(crate) async fn events(&self) -> u64 {
        self.state.lock().await.events
    }

    /// Records that the slot's member failed and drops it from further updates. Returns the
    /// slots whose superblock writes failed during the commit (they must be failed too).
    /// The event count and the bitmap's events_cleared (`None` without a bitmap), read
    /// together.
    pub(crate) async fn events_and_cleared(&self) -> (u64, Option<u64>) {
        let st = self.state.lock().await;
        (st.events, st.bitmap.as_ref().map(|b| b.events_cleared))
    }

    pub(crate) async fn record_failure(&self, slot: usize) -> Vec<usize> {
        let mut st = self.state.lock().await;
        if let Some(m) = st.slots.get_mut(slot).and_then(Option::take) {
            st.failed(m);
        }
        let failed = commit(&mut st).await;
        debug_assert!(
            st.slots[slot].is_none(),
            "a failed slot takes no more updates"
        );
        failed
    }

    /// Writes a superblock onto `member` that makes it the recovering member of slot `role`
    /// (`Some`, md's recovery_offset feature from 0) or a spare (`None`), and records the
    /// new role in every superblock. A failed member the slot held keeps its device number
    /// until it is removed; a spare of this array taking a slot keeps its own.
    ///
    /// `by_bitmap_at`: the member may recover by the write-intent bitmap if its data area
    /// stays at this offset (sectors, from its old superblock); then its superblock says so
    /// (md's RECOVERY_BITMAP), so an interrupted re-add resumes as one, here or in the kernel.
    /// `id`: what [`Metadata::joining`] said of it.
    pub(crate) async fn add_member(
        &self,
        role: Option<usize>,
        member: Arc<dyn Member>,
        by_bitmap_at: Option<u64>,
        id: &TagFacts,
    ) -> Result<MemberAdded> {
        let mut st = self.state.lock().await;
        let reference = st.reference()?;
        let size = member.info().size_bytes / 512;
        debug_assert!(
            id.array_uuid == reference.set_uuid
                && id.data_offset == reference.data_offset
                && id.data_size >= reference.size
                && id.data_offset + id.data_size <= size,
            "{}: {id:?} is what `joining` said of it",
            member.info().name
        );
        // Before anything here changes (the log lies where the reference places its own):
        // rebuilt whole, or re-added by its bitmap only with an empty log
        // (`Array::add_member`), it keeps no bad block of an earlier life.
        crate::md_io::clear_bad_blocks(&*member, &reference).await?;
        let was_spare = st
            .spares
            .iter()
            .position(|s| Arc::ptr_eq(&s.member, &member))
            .map(|i| st.spares.remove(i).sb.dev_number);
        let dev = st.free_dev(was_spare, reference.dev_roles.len())?;
        let mut sb = reference;
        sb.dev_number = dev;
        sb.device_uuid = id.device_uuid;
        sb.data_size = id.data_size;
        sb.cnt_corrected_read = 0;
        // The reference's own: its devflags (write-mostly is the device's, not the array's),
        // its bad-block flag (this member's log was emptied above), and whether it is being
        // rebuilt itself.
        sb.devflags = 0;
        sb.feature_map &= !feature::BAD_BLOCKS;
        let by_bitmap = role.is_some() && by_bitmap_at == Some(sb.data_offset);
        mark_recovery(&mut sb, role.map(|_| 0), by_bitmap);
        let raw_role = match role {
            Some(r) => DevRole::Active(r as u16).to_raw(),
            None => DevRole::Spare.to_raw(),
        };
        sb.dev_roles[dev as usize] = raw_role;
        st.roles.push((dev, raw_role));
        let data_offset = sb.data_offset * 512;
        debug_assert!(
            sb.data_offset + sb.data_size <= size,
            "the data area fits the member"
        );
        debug_assert!(!by_bitmap || sb.feature_map & feature::RECOVERY_BITMAP != 0);
        let m = MemberSb { sb, member };
        match role {
            Some(r) => {
                debug_assert!(st.slots[r].is_none(), "a member is added to a free slot");
                st.slots[r] = Some(m)
            }
            None => st.spares.push(m),
        }
        Ok(MemberAdded {
            data_offset,
            by_bitmap,
            failed: commit(&mut st).await,
        })
    }

    /// What the superblock of `member`, joining the array, will say: a spare of the array
    /// keeps its own device UUID and data area; a new member gets a fresh UUID and all it
    /// holds past the data offset, or with checksum `tags` whole chunks with room for their
    /// tags past them.
    pub(crate) async fn joining(&self, member: &dyn Member, tags: bool) -> Result<TagFacts> {
        let st = self.state.lock().await;
        let reference = st.reference()?;
        if let Some(s) = st
            .spares
            .iter()
            .find(|s| std::ptr::addr_eq(&*s.member, member))
        {
            return Ok(TagFacts::of(&s.sb, st.events));
        }
        let size = member.info().size_bytes / 512;
        let need = reference.data_offset + reference.size;
        let data_size = if tags {
            let unit = u64::from(reference.chunksize).max(raidd_md::tags::BLOCK_SECTORS);
            raidd_md::tags::Geometry::fit(size, reference.data_offset, unit).map(|g| g.data_size)
        } else {
            size.checked_sub(reference.data_offset)
        };
        let Some(data_size) = data_size.filter(|&d| d >= reference.size) else {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "{} has {} KiB; the array needs {} KiB per member{}",
                    member.info().name,
                    size / 2,
                    need / 2,
                    if tags {
                        " and room for its checksum tags"
                    } else {
                        ""
                    }
                ),
            ));
        };
        let mut facts = TagFacts::of(&reference, st.events);
        getrandom::fill(&mut facts.device_uuid)
            .map_err(|e| Error::new(ErrorKind::Io, format!("no randomness for a UUID: {e}")))?;
        facts.data_size = data_size;
        debug_assert!(
            facts.data_offset + facts.data_size <= size && facts.data_size >= reference.size,
            "{facts:?} fits {size} sectors"
        );
        Ok(facts)
    }

    /// A replacement built for slot `role` takes it: the member it replaces is recorded as
    /// failed, the replacement (added as a spare) becomes active in the slot.
    pub(crate) async fn complete_replacement(
        &self,
        role: usize,
        new: &Arc<dyn Member>,
    ) -> Result<Vec<usize>> {
        let mut st = self.state.lock().await;
        let i = st
            .spares
            .iter()
            .position(|s| Arc::ptr_eq(&s.member, new))
            .ok_or_else(|| Error::new(ErrorKind::Io, "the replacement's superblock is gone"))?;
        let mut m = st.spares.remove(i);
        if let Some(old) = st.slots[role].take() {
            st.failed(old);
        }
        let raw_role = DevRole::Active(role as u16).to_raw();
        m.sb.dev_roles[m.sb.dev_number as usize] = raw_role;
        st.roles.push((m.sb.dev_number, raw_role));
        debug_assert!(
            st.slots[role].is_none(),
            "the replaced member left the slot"
        );
        st.slots[role] = Some(m);
        Ok(commit(&mut st).await)
    }

    /// Records a recovering member's progress (`Some(sector)`, and whether it recovers by
    /// the write-intent bitmap) or its completion (`None`).
    pub(crate) async fn set_recovery(
        &self,
        role: usize,
        recovered: Option<u64>,
        by_bitmap: bool,
    ) -> Vec<usize> {
        let mut st = self.state.lock().await;
        let Some(m) = st.slots.get_mut(role).and_then(Option::as_mut) else {
            return Vec::new();
        };
        mark_recovery(&mut m.sb, recovered, by_bitmap);
        commit(&mut st).await
    }

    /// Every member's superblock as it stands, with its slot (`None`: a spare).
    pub(crate) async fn superblocks(&self) -> Vec<(Option<usize>, MemberSb)> {
        let st = self.state.lock().await;
        let slots = st.slots.iter().enumerate();
        let slots = slots.filter_map(|(r, m)| m.clone().map(|m| (Some(r), m)));
        slots
            .chain(st.spares.iter().map(|m| (None, m.clone())))
            .collect()
    }

    /// Changes every member's superblock with `change` (a policy they all share) and
    /// commits. Returns the slots whose superblock write failed.
    pub(crate) async fn change_all(&self, change: impl Fn(&mut Superblock)) -> Vec<usize> {
        let mut st = self.state.lock().await;
        for m in st.slots.iter_mut().flatten() {
            change(&mut m.sb);
        }
        for m in st.spares.iter_mut() {
            change(&mut m.sb);
        }
        commit(&mut st).await
    }

    /// Puts an internal bitmap on the array (its header, which every commit writes from now
    /// on) or takes it off, changes every superblock with `change`, and commits. A new
    /// bitmap's bits start clear with nothing in flight, so they clear every event up to
    /// this commit: a member that missed writes before it is rebuilt whole. Returns the
    /// slots whose superblock write failed.
    pub(crate) async fn set_bitmap(
        &self,
        bitmap: Option<BitmapSuper>,
        change: impl Fn(&mut Superblock),
    ) -> Vec<usize> {
        let mut st = self.state.lock().await;
        let next = st.events + 1;
        st.bitmap = bitmap.map(|mut b| {
            b.events = next;
            b.events_cleared = next;
            b
        });
        for m in st.slots.iter_mut().flatten() {
            change(&mut m.sb);
        }
        for m in st.spares.iter_mut() {
            change(&mut m.sb);
        }
        let failed = commit(&mut st).await;
        debug_assert!(st.bitmap.as_ref().is_none_or(|b| b.events == st.events));
        failed
    }

    /// Records where the write journal's log now starts (its superblock's `journal_tail`)
    /// and commits, as md's reclaim does. An error when the journal's superblock could not
    /// be written (the journal has failed then).
    pub(crate) async fn set_journal_tail(&self, tail: u64) -> std::io::Result<Vec<usize>> {
        let mut st = self.state.lock().await;
        let Some(j) = st.journal.as_mut() else {
            return Err(std::io::Error::other("the array has no working journal"));
        };
        j.sb.recovery_offset = tail;
        let failed = commit(&mut st).await;
        match st.journal {
            Some(_) => Ok(failed),
            None => Err(std::io::Error::other(
                "the journal's superblock could not be written",
            )),
        }
    }

    /// Makes `member` the array's write journal (md's `--add-journal`, in place of a failed
    /// or missing one): a superblock with role 0xfffd, a free device number and the log's
    /// tail at 0, written with an empty meta block (sequence `seq`) at the log's start
    /// before any superblock names it; then every superblock records the role. Returns its
    /// superblock and the slots whose superblock write failed. `min_log` sectors at least.
    pub(crate) async fn attach_journal(
        &self,
        member: Arc<dyn Member>,
        seq: u64,
        min_log: u64,
    ) -> Result<(Superblock, Vec<usize>)> {
        let mut st = self.state.lock().await;
        debug_assert!(
            st.journal.is_none(),
            "a journal is attached in place of none"
        );
        let reference = st.reference()?;
        let name = member.info().name.clone();
        let size = member.info().size_bytes / 512;
        let log = size.saturating_sub(reference.data_offset);
        if log < min_log {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "{name}: a write journal for this array needs {} KiB past the metadata \
                     area ({} KiB), it has {} KiB",
                    min_log / 2,
                    reference.data_offset / 2,
                    log / 2
                ),
            ));
        }
        crate::md_io::clear_bad_blocks(&*member, &reference).await?;
        let dev = st.free_dev(None, reference.dev_roles.len())?;
        let mut sb = reference;
        sb.dev_number = dev;
        getrandom::fill(&mut sb.device_uuid)
            .map_err(|e| Error::new(ErrorKind::Io, format!("no randomness for a UUID: {e}")))?;
        sb.data_size = log;
        sb.devflags = 0;
        sb.cnt_corrected_read = 0;
        sb.feature_map &=
            !(feature::BAD_BLOCKS | feature::RECOVERY_OFFSET | feature::RECOVERY_BITMAP);
        sb.recovery_offset = 0;
        let role = DevRole::Journal.to_raw();
        // A journal the superblocks still name (it went missing) is recorded failed.
        let old: Vec<u32> = (0..sb.dev_roles.len() as u32)
            .filter(|&d| d != dev && sb.dev_roles[d as usize] == role)
            .collect();
        for d in old {
            sb.dev_roles[d as usize] = DevRole::Faulty.to_raw();
            st.roles.push((d, DevRole::Faulty.to_raw()));
        }
        sb.dev_roles[dev as usize] = role;
        let block = raidd_md::journal::MetaBlock::empty(seq, 0)
            .encode(raidd_md::journal::uuid_checksum(&sb.set_uuid))
            .map_err(|e| Error::new(ErrorKind::Io, e.to_string()))?;
        let io = |e| Error::io(format!("{name}: writing the journal's first block"), e);
        write_bytes(
            &*member,
            sb.data_offset * 512,
            raidd_rt::AlignedBuf::from_slice(&block),
        )
        .await
        .map_err(io)?;
        let m = MemberSb {
            sb: sb.clone(),
            member,
        };
        write_member(&m, None)
            .await
            .map_err(|e| Error::io(format!("{name}: writing its superblock"), e))?;
        st.roles.push((dev, role));
        st.journal = Some(m);
        let failed = commit(&mut st).await;
        Ok((sb, failed))
    }

    /// Records the journal as failed (role 0xfffe in every superblock) and commits; it
    /// takes no more updates. Returns the slots whose superblock write failed.
    pub(crate) async fn fail_journal(&self) -> Vec<usize> {
        let mut st = self.state.lock().await;
        let Some(j) = st.journal.take() else {
            return Vec::new();
        };
        st.failed(j);
        commit(&mut st).await
    }

    /// Forgets a failed member (it was removed from the array): its device number is free.
    pub(crate) async fn forget_failed(&self, member: &Arc<dyn Member>) {
        let mut st = self.state.lock().await;
        st.failed_devs.retain(|(_, m)| !Arc::ptr_eq(m, member));
    }

    /// Marks the array dirty before its first write (a no-op when it already is).
    pub(crate) async fn mark_dirty(&self) -> Vec<usize> {
        if self.is_dirty() {
            return Vec::new();
        }
        self.mark_dirty_in_turn().await
    }

    /// As [`Metadata::mark_dirty`], but always in turn with other state changes: it waits
    /// for a [`Metadata::mark_clean_unless`] in progress, which the lock-free check could
    /// overlap. For writers the gate does not keep apart from marking clean (sync work).
    pub(crate) async fn mark_dirty_in_turn(&self) -> Vec<usize> {
        let mut st = self.state.lock().await;
        if st.clean == CleanState::Dirty {
            return Vec::new();
        }
        st.clean = CleanState::Dirty;
        let failed = commit(&mut st).await;
        self.dirty.store(true, Ordering::Release);
        debug_assert!(self.is_dirty() && st.clean == CleanState::Dirty);
        failed
    }

    /// Marks the array clean after a flush (clean shutdown, or a completed resync).
    pub(crate) async fn mark_clean(&self) -> Vec<usize> {
        let mut st = self.state.lock().await;
        self.clean_locked(&mut st).await
    }

    /// Marks the array clean unless `busy()` holds once the state is locked (a writer that
    /// marks dirty through [`Metadata::mark_dirty_in_turn`] has started). `None`: busy,
    /// nothing written.
    pub(crate) async fn mark_clean_unless(&self, busy: impl Fn() -> bool) -> Option<Vec<usize>> {
        let mut st = self.state.lock().await;
        if busy() {
            return None;
        }
        Some(self.clean_locked(&mut st).await)
    }

    async fn clean_locked(&self, st: &mut MetaState) -> Vec<usize> {
        st.clean = CleanState::Clean;
        let failed = commit(st).await;
        self.dirty.store(false, Ordering::Release);
        debug_assert!(!self.is_dirty() && st.clean == CleanState::Clean);
        failed
    }

    /// Writes the bitmap's bits to every member that takes updates, durably (each member is
    /// flushed after). Returns the slots whose write failed (they must be failed).
    ///
    /// `clearing`: the bits clear some that were set. The header then first records the
    /// current event count as events_cleared: a member that left the array before now (its
    /// events are older) may have missed writes whose bits go now, so neither raidd nor the
    /// kernel may bring it back by recovering only the chunks still set (md's re-add rule,
    /// member events >= events_cleared).
    pub(crate) async fn write_bitmap_bits(&self, bits: &[u8], clearing: bool) -> Vec<usize> {
        let mut st = self.state.lock().await;
        let events = st.events;
        let header = match st.bitmap.as_mut() {
            Some(bm) if clearing && bm.events_cleared < events => {
                bm.events_cleared = events;
                Some(bm.clone())
            }
            _ => None,
        };
        debug_assert!(
            st.bitmap
                .as_ref()
                .is_none_or(|bm| bm.events_cleared <= events),
            "bits are never cleared ahead of the event count"
        );
        let targets: Vec<(Option<usize>, MemberSb)> = st
            .slots
            .iter()
            .enumerate()
            .filter_map(|(r, m)| m.clone().map(|m| (Some(r), m)))
            .chain(st.spares.iter().map(|m| (None, m.clone())))
            .collect();
        let results = futures::future::join_all(
            targets
                .iter()
                .map(|(_, m)| write_bits(m, header.as_ref(), bits)),
        )
        .await;
        let mut failed = Vec::new();
        for ((slot, m), r) in targets.iter().zip(results) {
            if let Err(e) = r {
                tracing::error!("{}: bitmap update failed: {e}", m.member.info().name);
                if let Some(s) = slot {
                    failed.push(*s);
                }
            }
        }
        // A bitmap found out of date counted every chunk as set; these bits (a superset of
        // what is dirty) are now on every member that takes them, so the next superblock
        // commit may write its header unmarked.
        if let Some(bm) = st.bitmap.as_mut() {
            if failed.is_empty() {
                bm.set_stale(false);
            }
        }
        failed
    }

    /// Waits for a commit in progress (one that records a failure we depend on) to finish.
    pub(crate) async fn barrier(&self) {
        drop(self.state.lock().await);
    }
}

/// Records in `sb` whether its member is being rebuilt and from where (`Some(sector)`, md's
/// recovery offset), and whether by the write-intent bitmap (md's RECOVERY_BITMAP).
fn mark_recovery(sb: &mut Superblock, recovered: Option<u64>, by_bitmap: bool) {
    debug_assert!(
        recovered.is_some() || !by_bitmap,
        "a re-add by bitmap is a recovery"
    );
    sb.feature_map &= !(feature::RECOVERY_OFFSET | feature::RECOVERY_BITMAP);
    sb.recovery_offset = recovered.unwrap_or(0);
    if recovered.is_some() {
        sb.feature_map |= feature::RECOVERY_OFFSET;
        if by_bitmap {
            sb.feature_map |= feature::RECOVERY_BITMAP;
        }
    }
}

/// Writes the current state to every member that takes updates. Returns the slots whose write
/// failed (their superblock is now unknown: they must be failed).
async fn commit(st: &mut MetaState) -> Vec<usize> {
    let before = st.events;
    st.events += 1;
    debug_assert!(st.events > before, "every commit moves the event count on");
    let utime = now_md_time();
    // A member being rebuilt counts (md's mddev->degraded): its bits are still what it
    // lacks, and events_cleared equal to events would tell the kernel there are none to
    // keep for it (md_bitmap_load then skips every chunk of a re-add by bitmap).
    let degraded = st.slots.iter().any(|m| {
        m.as_ref()
            .is_none_or(|m| m.sb.feature_map & feature::RECOVERY_OFFSET != 0)
    });
    let resync_offset = match st.clean {
        CleanState::Clean => MAX_SECTOR,
        CleanState::Dirty => 0,
    };
    let (events, roles) = (st.events, st.roles.clone());
    let update = |sb: &mut Superblock| {
        sb.events = events;
        sb.utime = utime;
        sb.resync_offset = resync_offset;
        for &(dev, role) in &roles {
            if let Some(r) = sb.dev_roles.get_mut(dev as usize) {
                *r = role;
            }
        }
    };
    let mut writes = Vec::new();
    for (slot, m) in st.slots.iter_mut().enumerate() {
        if let Some(m) = m {
            update(&mut m.sb);
            writes.push((Some(slot), m.clone()));
        }
    }
    for m in st.spares.iter_mut() {
        update(&mut m.sb);
        writes.push((None, m.clone()));
    }
    if let Some(j) = st.journal.as_mut() {
        update(&mut j.sb);
    }
    let journal = st.journal.clone();
    let bitmap = st.bitmap.as_mut().map(|b| {
        b.events = events;
        if st.clean == CleanState::Clean && !degraded {
            b.events_cleared = events;
        }
        b.clone()
    });
    // The bits themselves belong to the array's write-intent tracking (array/bitmap.rs).
    let results =
        futures::future::join_all(writes.iter().map(|(_, m)| write_member(m, bitmap.as_ref())))
            .await;
    if let Some(j) = journal {
        // The journal keeps no bitmap: its superblock alone.
        if let Err(e) = write_member(&j, None).await {
            tracing::error!(
                "{}: journal superblock update failed: {e}",
                j.member.info().name
            );
            st.journal = None;
            st.failed(j);
        }
    }
    let mut failed = Vec::new();
    for ((slot, m), r) in writes.iter().zip(results) {
        if let Err(e) = r {
            tracing::error!("{}: superblock update failed: {e}", m.member.info().name);
            if let Some(slot) = slot {
                failed.push(*slot);
            }
        }
    }
    for &slot in &failed {
        if let Some(m) = st.slots[slot].take() {
            st.failed(m);
        }
    }
    debug_assert!(failed.iter().all(|&s| st.slots[s].is_none()));
    failed
}

impl MetaState {
    /// A device number no member uses (nor a failed one not yet removed): `own` (a spare's
    /// of this array) when it is free, else the lowest of the `roles` slots.
    fn free_dev(&self, own: Option<u32>, roles: usize) -> Result<u32> {
        let used: Vec<u32> = self
            .slots
            .iter()
            .flatten()
            .chain(self.spares.iter())
            .map(|m| m.sb.dev_number)
            .chain(self.failed_devs.iter().map(|(d, _)| *d))
            .collect();
        // A spare's own number is kept only where it has a role slot (a superblock may
        // carry one past them: md reads such a member as a spare).
        let dev = own
            .filter(|&d| (d as usize) < roles)
            .into_iter()
            .chain(0..roles as u32)
            .find(|d| !used.contains(d))
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::InvalidInput,
                    format!("every one of the {roles} device numbers is in use"),
                )
            })?;
        debug_assert!((dev as usize) < roles, "a device number has a role slot");
        Ok(dev)
    }

    /// A working slot's superblock, which a member joining the array copies.
    fn reference(&self) -> Result<Superblock> {
        self.slots
            .iter()
            .flatten()
            .next()
            .map(|m| m.sb.clone())
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::Io,
                    "no working member left to copy metadata from",
                )
            })
    }

    fn failed(&mut self, m: MemberSb) {
        debug_assert!(
            !self.failed_devs.iter().any(|(d, _)| *d == m.sb.dev_number),
            "a device number fails once"
        );
        self.roles.push((m.sb.dev_number, DevRole::Faulty.to_raw()));
        self.failed_devs.push((m.sb.dev_number, m.member));
    }
}

/// Read-modify-write of the block holding `bytes` at `offset`, then a read back to check.
async fn checked_patch(member: &dyn Member, offset: u64, bytes: &[u8]) -> std::io::Result<()> {
    let block = SB_BLOCK as u64;
    let start = offset / block * block;
    let end = (offset + bytes.len() as u64).div_ceil(block) * block;
    let len = (end - start) as usize;
    debug_assert!(start <= offset && offset + bytes.len() as u64 <= end);
    let mut buf = read_bytes(member, start, len).await?;
    let at = (offset - start) as usize;
    buf[at..at + bytes.len()].copy_from_slice(bytes);
    write_bytes(member, start, buf.clone()).await?;
    let back = read_bytes(member, start, len).await?;
    if back[..] != buf[..] {
        return Err(std::io::Error::other(format!(
            "metadata at byte {offset} did not read back as written"
        )));
    }
    Ok(())
}

/// Byte offset of a member's internal bitmap, if it has one.
fn bitmap_offset(sb: &Superblock) -> Option<u64> {
    if sb.feature_map & feature::BITMAP_OFFSET == 0 {
        return None;
    }
    (sb.super_offset * 512).checked_add_signed(i64::from(sb.bitmap_offset) * 512)
}

/// Writes one member's superblock (and bitmap header) and makes it durable before it
/// returns, as md writes superblocks with PREFLUSH and FUA: the dirty mark must be on the
/// member before the writes it covers are, even when a write-back buffer holds both.
async fn write_member(m: &MemberSb, bitmap: Option<&BitmapSuper>) -> std::io::Result<()> {
    let sb_off = m.sb.super_offset * 512;
    checked_patch(&*m.member, sb_off, &m.sb.encode()).await?;
    if let (Some(bm), Some(bm_off)) = (bitmap, bitmap_offset(&m.sb)) {
        checked_patch(&*m.member, bm_off, &bm.encode()).await?;
    }
    m.member.flush().await
}

/// Writes the bitmap's bits on one member (after its header, when given) and makes them
/// durable.
async fn write_bits(
    m: &MemberSb,
    header: Option<&BitmapSuper>,
    bits: &[u8],
) -> std::io::Result<()> {
    let Some(bm_off) = bitmap_offset(&m.sb) else {
        return Ok(());
    };
    if let Some(h) = header {
        // Before the bits: cleared bits never sit on disk under an older events_cleared.
        checked_patch(&*m.member, bm_off, &h.encode()).await?;
        m.member.flush().await?;
    }
    checked_patch(
        &*m.member,
        bm_off + raidd_md::bitmap::BITMAP_SUPER_LEN as u64,
        bits,
    )
    .await?;
    m.member.flush().await
}
