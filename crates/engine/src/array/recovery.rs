//! Online recovery and replacement.
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

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use raidd_layout::{Geometry, Reverse, SECTOR_SIZE};
use raidd_rt::{AlignedBuf, IoVecMut, SharedBuf};
use smallvec::SmallVec;

use super::host::Host;
use super::mapped::MappedIo;
use super::member_io;
use super::misread::Misreads;
use super::pass::{SyncKind, SyncLimits, SyncProgress};
use super::passes::{SyncGuard, Throttle};
use super::{Array, MetaWrite, SlotState};
use crate::error::{Error, ErrorKind, Result};
use crate::member::write_bytes;
use crate::member::Member;
use crate::meta::Metadata;

/// Rebuild windows copied at the same time.
const WINDOWS_IN_FLIGHT: usize = 4;
/// How often a running recovery records its progress in the superblocks.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(2);

impl Array {
    /// Rebuilds a recovering slot from the others while the array serves I/O, from its
    /// recovery point to the end; on success the slot is in sync. Stops early (keeping its
    /// progress) when cancelled or when the member or the array fails.
    pub async fn recover(&self, role: usize, limits: SyncLimits) -> Result<()> {
        self.check_writable()?;
        let p = self.parts();
        if role >= p.slots.len() || p.slots.state(role) != SlotState::Recovering {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("{}: slot {role} is not waiting for recovery", self.name()),
            ));
        }
        // The member's copy of the bitmap is read once it is in sync; whatever it holds now
        // (none, or bits of when it left) is replaced before it gets there.
        let failed = p.intent.write_whole(p.meta).await;
        self.superblocks_failed(failed, MetaWrite::Bitmap).await;
        let shape = p.shapes.current();
        let total = shape.geometry().member_used_sectors(role);
        let chunk = u64::from(shape.geometry().chunk_sectors()).max(1);
        // A recovery point from the kernel need not be chunk aligned: start at its chunk.
        let mut pos = p.slots.recovered(role) / chunk * chunk;
        let progress = p
            .passes
            .begin(self.name(), SyncKind::Recovery, Some(role), total, pos)?;
        let name = member_name(self, role);
        let guard = SyncGuard::new(p.passes, progress.clone(), Some(name.clone()));
        tracing::info!(array = %self.name(), member = %name, from_sector = pos, "recovery started");
        let window = shape.sync_window(limits.window_bytes);
        let mut throttle = Throttle::new(limits, || self.parts().counters.foreground(), pos);
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
                if !throttle.allows(issued) {
                    break;
                }
                // Members that complete at once (memory) never suspend: let others run.
                raidd_rt::yield_now().await;
                let end = (issued + window).min(total);
                inflight.push_back(recover_window(self, role, issued..end));
                issued = end;
            }
            if inflight.is_empty() {
                if stopping || issued >= total {
                    break;
                }
                throttle.pace(issued, &progress).await;
                continue;
            }
            let Some(done) = futures::StreamExt::next(&mut inflight).await else {
                break;
            };
            let (end, barrier) = done?;
            debug_assert!(end > pos && end <= total, "windows complete in order");
            p.slots.recovered_to(role, end);
            drop(barrier);
            pos = end;
            progress.done.store(pos, Ordering::Relaxed);
            self.check_alive()?;
            if p.slots.state(role) != SlotState::Recovering {
                return Err(Error::new(
                    ErrorKind::Io,
                    format!("{}: {name} failed during recovery", self.name()),
                ));
            }
            if checkpoint.elapsed() >= CHECKPOINT_EVERY && pos < total {
                checkpoint_at(self, role, pos).await;
                checkpoint = Instant::now();
            }
        }
        if pos < total {
            debug_assert!(stopping, "windows ended early without a stop");
            checkpoint_at(self, role, pos).await;
            tracing::info!(array = %self.name(), member = %name, at_sector = pos, "recovery interrupted");
            return Err(Error::new(
                ErrorKind::Interrupted,
                format!(
                    "{}: recovery of {name} stopped at sector {pos}",
                    self.name()
                ),
            ));
        }
        recovered(self, role, &name).await?;
        self.check_alive()?;
        tracing::info!(array = %self.name(), member = %name, "recovery finished");
        super::dab_follows_redundancy(self).await;
        guard.finish();
        Ok(())
    }

    /// Copies slot `role`'s member onto `new` while the array serves I/O, then puts `new`
    /// in the slot and lists the old member as failed (for `remove`). The array stays
    /// redundant throughout: the old member serves until the end, and every write below
    /// the copy point goes to both. If the old member fails meanwhile the replace stops and
    /// `new` waits as a spare (a recovery then rebuilds the slot onto it). With checksums, a
    /// block of the old member that does not match its tag is rebuilt onto it from the
    /// others first, and the replace goes on.
    pub async fn replace(
        &self,
        role: usize,
        new: Arc<dyn Member>,
        limits: SyncLimits,
    ) -> Result<()> {
        let new = self.admit(new);
        self.check_writable()?;
        self.check_alive()?;
        let p = self.parts();
        let changing = p.slots.lock_changes().await;
        let meta = check_replace(self, role, &new)?;
        let total = self.geometry().member_used_sectors(role);
        let progress = p
            .passes
            .begin(self.name(), SyncKind::Replace, Some(role), total, 0)?;
        let guard = SyncGuard::new(p.passes, progress.clone(), Some(member_name(self, role)));
        let old = Arc::clone(&p.slots.member_ref(role));
        let (old_name, new_name) = (old.info().name.clone(), new.info().name.clone());
        // The new member carries a spare's superblock while it is built: a restart meanwhile
        // sees a spare, for md as for raidd.
        let (new, id) = super::checksums::joining(meta, p.slots, new).await?;
        let added = meta.add_member(None, new.clone(), None, &id).await?;
        let (data_offset, failed) = (added.data_offset, added.failed);
        self.superblocks_failed(failed, MetaWrite::Superblock).await;
        p.slots
            .begin_replace(&changing, role, new.clone(), data_offset);
        drop(changing);
        tracing::info!(array = %self.name(), member = %old_name, with = %new_name, "replace started");
        let copy = Copy {
            role,
            old: &old,
            new: &new,
            data_offset,
            total,
        };
        let result = copy_to_replacement(self, copy, limits, &progress).await;
        // The swap below needs the slot still working; hold the change lock from here on.
        let changing = p.slots.lock_changes().await;
        let result = result.and_then(|()| {
            if p.slots.state(role) != SlotState::InSync {
                Err(Error::new(
                    ErrorKind::Io,
                    format!("{}: {old_name} failed as the replace finished", self.name()),
                ))
            } else if !p.slots.is_replacing(role) {
                Err(Error::new(
                    ErrorKind::Io,
                    format!(
                        "{}: {new_name} failed a write as the replace finished",
                        self.name()
                    ),
                ))
            } else {
                Ok(())
            }
        });
        if let Err(e) = result {
            p.slots.abandon_replace(role);
            // The new member stays the array's spare: a failed slot claims it.
            p.slots.add_spare(new);
            return Err(e);
        }
        // Swap: every write since the copy finished went to both. Its partial parity log
        // starts empty, and the next unit goes to its start.
        if let Some(ppl) = p.ppl {
            if let Err(e) = ppl.attach(&*new, role).await {
                p.slots.abandon_replace(role);
                p.slots.add_spare(new);
                return Err(Error::io(
                    format!("{new_name}: writing its partial parity log"),
                    e,
                ));
            }
        }
        let failed = meta.complete_replacement(role, &new).await?;
        p.slots.complete_replace(&changing, role);
        self.superblocks_failed(failed, MetaWrite::Superblock).await;
        drop(changing);
        tracing::info!(array = %self.name(), member = %old_name, with = %new_name, "replace finished");
        guard.finish();
        Ok(())
    }
}

/// The name of slot `role`'s member (empty for an empty slot).
fn member_name(array: &Array, role: usize) -> String {
    array
        .slots()
        .member(role)
        .map(|m| m.info().name.clone())
        .unwrap_or_default()
}

/// Reads and writes from clients so far (a pass yields to them above its minimum speed).
/// A recovery that copied every sector: the member is flushed, in sync, and recorded so
/// in the superblocks.
async fn recovered(array: &Array, role: usize, name: &str) -> Result<()> {
    let p = array.parts();
    let member = p.slots.member_ref(role);
    if let Err(e) = member.flush().await {
        p.slots.io(role).failed_write();
        member_io::Owner::fail_member_io(array, role, &member, &e).await;
        return Err(Error::io(format!("{}: flushing {name}", array.name()), e));
    }
    if !p.slots.finish_recovery(role) {
        return Err(Error::new(
            ErrorKind::Io,
            format!("{}: {name} failed during recovery", array.name()),
        ));
    }
    if let Some(meta) = p.meta {
        array
            .superblocks_failed(
                meta.set_recovery(role, None, false).await,
                MetaWrite::Superblock,
            )
            .await;
    }
    Ok(())
}

/// Records slot `role`'s recovery point `pos` in the superblocks (md's recovery_offset).
async fn checkpoint_at(array: &Array, role: usize, pos: u64) {
    let p = array.parts();
    if let Some(meta) = p.meta {
        let by_bitmap = p.slots.recovering_by_bitmap(role);
        let failed = meta.set_recovery(role, Some(pos), by_bitmap).await;
        array
            .superblocks_failed(failed, MetaWrite::Superblock)
            .await;
    }
}

/// Rebuilds member sectors `range` of slot `role` under a barrier; returns the end of the
/// range and the barrier, which the caller drops after moving the recovery point.
async fn recover_window(
    array: &Array,
    role: usize,
    range: std::ops::Range<u64>,
) -> Result<(u64, super::gate::Barrier<'_>)> {
    let p = array.parts();
    let regions = regions_of(array, role, range.clone());
    let barrier = p.gate.barrier(regions.iter().copied()).await;
    // A member re-added by its bitmap holds current data wherever no bit is set. Looked at
    // under the barrier: a write that reached these regions since the member left has set
    // its bit (none is cleared while the slot recovers, the array being degraded).
    if p.slots.recovering_by_bitmap(role) && !p.intent.set_in(&regions) {
        return Ok((range.end, barrier));
    }
    rebuild_range(array, role, range.clone()).await?;
    Ok((range.end, barrier))
}

/// Rebuilds member sectors `range` of slot `role` from the other members and writes them
/// to its member; the caller holds a barrier over them.
async fn rebuild_range(array: &Array, role: usize, range: std::ops::Range<u64>) -> Result<()> {
    match array.parts().shapes.current().geometry() {
        Geometry::Parity(pg) => {
            let chunk = u64::from(pg.chunk_sectors);
            let stripes = range.start / chunk..range.end.div_ceil(chunk);
            futures::future::try_join_all(stripes.map(|s| recover_stripe(array, role, s))).await?;
        }
        _ => {
            let runs = data_runs(array, role, range);
            futures::future::try_join_all(runs.iter().map(|r| recover_run(array, role, r))).await?;
        }
    }
    Ok(())
}

/// The array regions (sector, count) that member sectors `range` of `role` hold: what a
/// pass over that range must keep writes out of.
pub(super) fn regions_of(
    array: &Array,
    role: usize,
    range: std::ops::Range<u64>,
) -> Vec<(u64, u64)> {
    match array.geometry() {
        Geometry::Parity(pg) => {
            let chunk = u64::from(pg.chunk_sectors);
            let stripes = range.start / chunk..range.end.div_ceil(chunk);
            let per = pg.stripe_data_sectors();
            vec![(stripes.start * per, (stripes.end - stripes.start) * per)]
        }
        _ => data_runs(array, role, range)
            .iter()
            .map(|r| (r.array_sector, r.sectors))
            .collect(),
    }
}

/// Whether slot `role`'s member may be replaced by `new`: the array's metadata, in which
/// the replacement is recorded.
fn check_replace<'a>(array: &'a Array, role: usize, new: &Arc<dyn Member>) -> Result<&'a Metadata> {
    let p = array.parts();
    let Some(meta) = p.meta else {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "{} has no md metadata to record a replacement in",
                array.name()
            ),
        ));
    };
    if role >= p.slots.len()
        || p.slots.state(role) != SlotState::InSync
        || p.slots.is_replacing(role)
    {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!(
                "{}: slot {role} has no working member to replace",
                array.name()
            ),
        ));
    }
    let new_name = &new.info().name;
    if p.slots.names().contains(new_name) {
        return Err(Error::new(
            ErrorKind::Conflict,
            format!("{new_name} is already part of {}", array.name()),
        ));
    }
    Ok(meta)
}

/// Copies the slot's member onto its replacement window by window, each under a gate
/// barrier (writes meanwhile go to both once the copy has passed them), then flushes it.
async fn copy_to_replacement(
    array: &Array,
    c: Copy<'_>,
    limits: SyncLimits,
    progress: &SyncProgress,
) -> Result<()> {
    let p = array.parts();
    let (role, name) = (c.role, array.name());
    let (old_name, new_name) = (&c.old.info().name, &c.new.info().name);
    if c.data_offset != p.slots.data_offset(role) {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!("{name}: {old_name} has its data at a different offset than new members get"),
        ));
    }
    let window = p.shapes.current().sync_window(limits.window_bytes);
    let mut throttle = Throttle::new(limits, || array.parts().counters.foreground(), 0);
    let mut pos = 0;
    while pos < c.total {
        array.check_alive()?;
        if p.slots.state(role) != SlotState::InSync || !p.slots.is_replacing(role) {
            return Err(Error::new(
                ErrorKind::Io,
                format!("{name}: the replace of {old_name} stopped: a member failed"),
            ));
        }
        if progress.cancelled() {
            return Err(Error::new(
                ErrorKind::Interrupted,
                format!("{name}: the replace of {old_name} was stopped"),
            ));
        }
        throttle.pace(pos, progress).await;
        if progress.cancelled() {
            continue; // reported at the top of the loop
        }
        raidd_rt::yield_now().await;
        let end = (pos + window).min(c.total);
        let barrier = p.gate.barrier(regions_of(array, role, pos..end)).await;
        let len = ((end - pos) * SECTOR_SIZE) as usize;
        let at = p.slots.member_offset(role, pos);
        p.slots.io(role).issued(false, len as u64);
        let mut read = crate::member::read_bytes(&**c.old, at, len).await;
        if let Err(e) = &read {
            p.slots.io(role).failed_read(e);
            // With checksums a block that does not match (or another medium error) says
            // nothing against the rest of the old member: the window is rebuilt onto it
            // from the other members, under the barrier held, and read again.
            if crate::member::medium_error(e) && super::checksums::tagged(p.slots) {
                rebuild_range(array, role, pos..end).await?;
                read = crate::member::read_bytes(&**c.old, at, len).await;
            }
        }
        let data = match read {
            Ok(d) => d,
            Err(e) => {
                member_io::Owner::fail_member_io(array, role, c.old, &e).await;
                return Err(Error::io(format!("{name}: reading {old_name}"), e));
            }
        };
        write_bytes(&**c.new, c.data_offset + pos * SECTOR_SIZE, data)
            .await
            .map_err(|e| Error::io(format!("{name}: writing {new_name}"), e))?;
        p.slots.replaced_to(role, end);
        drop(barrier);
        pos = end;
        progress.done.store(pos, Ordering::Relaxed);
    }
    c.new
        .flush()
        .await
        .map_err(|e| Error::io(format!("{name}: flushing {new_name}"), e))
}

/// The array data that member sectors `range` of `role` hold, as runs contiguous on both
/// sides (mirrored levels).
pub(super) fn data_runs(array: &Array, role: usize, range: std::ops::Range<u64>) -> Vec<Run> {
    let g = array.geometry();
    let chunk = u64::from(g.chunk_sectors());
    let mut runs: Vec<Run> = Vec::new();
    let mut sec = range.start;
    while sec < range.end {
        let n = if chunk == 0 {
            range.end - sec
        } else {
            (chunk - sec % chunk).min(range.end - sec)
        };
        if let Reverse::Data { array_sector, .. } = g.reverse(role, sec) {
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

/// Copies one run from the working copies onto the recovering member; a copy that cannot
/// give its blocks now is failed, as it always was: this is a pass under a barrier, not a
/// client's read. With checksums it stays, as a parity rebuild's source does
/// ([`recover_stripe`]): rewritten from the rebuilt copy where another copy gave the run,
/// or, where none could, the rebuild stops there, naming it.
async fn recover_run(array: &Array, role: usize, run: &Run) -> Result<()> {
    let (r, misreads) = copy_run(array, role, run).await;
    if super::checksums::tagged(array.slots()) {
        return mend_sources(array, role, run, r, misreads).await;
    }
    for m in misreads.into_list() {
        let why = std::io::Error::from_raw_os_error(libc::EIO);
        array.fail_slot_with(m.role, m.member.as_ref(), &why).await;
    }
    r
}

/// A mirror rebuild's sources that could not give their part of `run` (`misreads`; `r`:
/// whether the run was copied from the others): the blocks of each that still fail are
/// rewritten from what slot `role` now holds, under the rebuild's barrier, and read back
/// (`member_io::rewrite`).
async fn mend_sources(
    array: &Array,
    role: usize,
    run: &Run,
    r: Result<()>,
    misreads: Misreads,
) -> Result<()> {
    if let Err(e) = r {
        if array.is_failed() || misreads.is_empty() {
            return Err(e);
        }
        return Err(Error::new(
            ErrorKind::Io,
            format!(
                "{}: array sectors {}+{} have no good copy ({e}): the rebuild stopped there; \
                 writing that region heals it",
                array.name(),
                run.array_sector,
                run.sectors
            ),
        ));
    }
    let g = array.geometry();
    for m in misreads.into_list() {
        let Some(member) = m.member.clone() else {
            continue; // the slot holds another member now
        };
        let Reverse::Data { array_sector, .. } = g.reverse(m.role, m.sector) else {
            continue;
        };
        debug_assert!(
            array_sector >= run.array_sector
                && array_sector + m.sectors <= run.array_sector + run.sectors,
            "a misread of the run lies in it"
        );
        let at = run.member_sector + (array_sector - run.array_sector);
        let target = array.slots().member(role);
        let copy = match target {
            Some(t) => {
                let offset = array.slots().member_offset(role, at);
                crate::member::read_bytes(&*t, offset, (m.sectors * SECTOR_SIZE) as usize).await
            }
            None => Err(std::io::Error::from_raw_os_error(libc::EIO)),
        };
        let data = match copy {
            Ok(data) => data,
            Err(e) => {
                array.fail_slot_with(m.role, Some(&member), &e).await;
                continue;
            }
        };
        // Only the blocks that still fail are rewritten (md corrects 4 KiB pages).
        let mut mine = vec![0u8; data.len()];
        let Ok(bad) = super::narrow::narrow(array, m.role, m.sector, &mut mine).await else {
            continue; // the member was failed by a read
        };
        for r in bad {
            let bytes = ((r.start - m.sector) * SECTOR_SIZE) as usize
                ..((r.end - m.sector) * SECTOR_SIZE) as usize;
            let mut fix = AlignedBuf::for_overwrite(bytes.len());
            fix.copy_from_slice(&data[bytes]);
            member_io::rewrite(array, m.role, &member, r.start, fix).await;
        }
    }
    Ok(())
}

/// Copies one run from the other copies onto slot `role`'s member (never read from it: it
/// is recovering, or its copy is the one being corrected); returns what other copies could
/// not give (their members kept in their slots), for the caller to fail or correct.
pub(super) async fn copy_run(array: &Array, role: usize, run: &Run) -> (Result<()>, Misreads) {
    let len = (run.sectors * SECTOR_SIZE) as usize;
    let buf = SharedBuf::new(AlignedBuf::for_overwrite(len));
    let mut iov = IoVecMut::new();
    iov.push(buf.slice_mut(0..len).expect("fresh buffer"));
    let (offset, bytes) = (run.array_sector * SECTOR_SIZE, run.sectors * SECTOR_SIZE);
    let pieces = array.parts().shapes.current().pieces_of(offset, bytes);
    let mut misreads = Misreads::avoiding(role);
    let (r, iov) = MappedIo
        .read(array, offset, iov, &pieces, &mut misreads)
        .await;
    drop(iov);
    if let Err(e) = r {
        return (Err(e), misreads);
    }
    let data = buf.try_into_inner().expect("read released the buffer");
    let r = member_io::write_data(array, role, run.member_sector, data).await;
    (r, misreads)
}

/// Rebuilds `role`'s chunk of `stripe` (data or parity) from the other members. A source
/// whose read fails is failed, as md fails it, unless the array has checksums: a block that
/// does not match its tag says nothing against the rest of its member, so the source stays
/// and, where parity covers both (RAID6), its block is rebuilt and rewritten too; where
/// nothing covers it, the rebuild stops there, naming it, and the array goes on serving
/// degraded (failing the source would lose it whole).
async fn recover_stripe(array: &Array, role: usize, stripe: u64) -> Result<()> {
    let chunk = u64::from(Host::parity_shape(array).chunk_sectors);
    if !super::checksums::tagged(array.slots()) {
        return recover_rows(array, role, stripe, 0..chunk, member_io::OnReadError::Fail).await;
    }
    let r = recover_rows(array, role, stripe, 0..chunk, member_io::OnReadError::Keep).await;
    match r {
        Err(e) if !array.is_failed() => Err(Error::new(
            ErrorKind::Io,
            format!(
                "{}: stripe {stripe} of slot {role} has no good copy ({e}): the rebuild stopped \
                 there; writing that region heals it",
                array.name()
            ),
        )),
        r => r,
    }
}

/// Rebuilds `rows` of `role`'s chunk of `stripe` (data or parity) from the other members
/// and writes them to it. A member whose read fails is failed (`OnReadError::Fail`: a
/// rebuild), or, for a correction (`Keep`), stays in its slot where its error is a medium
/// one: its rows are rebuilt too where parity covers both (RAID6), written back and read
/// back ([`member_io::rewrite`]); where it does not, nothing is written (`Err`): no member
/// holds those bytes.
pub(super) async fn recover_rows(
    array: &Array,
    role: usize,
    stripe: u64,
    rows: std::ops::Range<u64>,
    on_error: member_io::OnReadError,
) -> Result<()> {
    let p = array.parts();
    let pio = p.parity.expect("parity stripes on a parity array");
    let pg = Host::parity_shape(array);
    debug_assert!(
        rows.start < rows.end && rows.end <= u64::from(pg.chunk_sectors),
        "rows {rows:?} within a chunk"
    );
    let map = pg.stripe_map(stripe);
    let end = super::parity::stripe_end(pg, stripe);
    let len = ((rows.end - rows.start) * SECTOR_SIZE) as usize;
    let redundancy = 1 + usize::from(map.q.is_some());
    for _attempt in 0..=p.slots.len() {
        array.check_alive()?;
        let present: SmallVec<[usize; 16]> = (0..p.slots.len())
            .filter(|&m| m != role && p.slots.in_sync_at(m, end))
            .collect();
        let (mut blocks, kept) = match on_error {
            member_io::OnReadError::Fail => (
                pio.read_rows(array, stripe, &rows, &present).await?,
                SmallVec::new(),
            ),
            member_io::OnReadError::Keep => {
                pio.read_rows_keeping(array, stripe, &rows, &present)
                    .await?
            }
        };
        if present
            .iter()
            .any(|&m| blocks[m].is_none() && !kept.contains(&m))
        {
            continue; // a read failed and its member is now faulty: try again
        }
        if 1 + kept.len() > redundancy {
            return Err(Host::lost_error(array));
        }
        super::parity::rebuild_blocks(&map, &mut blocks, len)?;
        let sector = pg.member_sector(stripe, rows.start);
        for &x in &kept {
            if let (Some(member), Some(data)) = (p.slots.member(x), blocks[x].take()) {
                member_io::rewrite(array, x, &member, sector, data).await;
            }
        }
        let data = blocks[role].take().expect("rebuilt");
        return member_io::write_data(array, role, sector, data).await;
    }
    Err(Host::lost_error(array))
}

/// Array data held contiguously by a member.
#[derive(Clone, Copy, Debug)]
pub(super) struct Run {
    pub(super) member_sector: u64,
    pub(super) array_sector: u64,
    pub(super) sectors: u64,
}

/// What a replace copies: slot `role`'s member `old` onto `new`, whose data starts at
/// byte `data_offset`, over `total` member sectors.
struct Copy<'a> {
    role: usize,
    old: &'a Arc<dyn Member>,
    new: &'a Arc<dyn Member>,
    data_offset: u64,
    total: u64,
}
