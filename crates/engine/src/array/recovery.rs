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

use super::pass::{SyncKind, SyncLimits, SyncProgress};
use super::passes::{SyncGuard, Throttle};
use super::{Array, SlotState};
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
        if self.slot_state(role) != SlotState::Recovering {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("{}: slot {role} is not waiting for recovery", self.name),
            ));
        }
        // The member's copy of the bitmap is read once it is in sync; whatever it holds now
        // (none, or bits of when it left) is replaced before it gets there.
        self.write_whole_intent().await;
        let total = self.geometry.member_used_sectors(role);
        let chunk = u64::from(self.geometry.chunk_sectors()).max(1);
        // A recovery point from the kernel need not be chunk aligned: start at its chunk.
        let mut pos = self.slots[role].recovered.load(Ordering::Acquire) / chunk * chunk;
        let progress = self.begin_sync(SyncKind::Recovery, Some(role), total, pos)?;
        let guard = SyncGuard::new(self, progress.clone());
        let name = self
            .member(role)
            .map(|m| m.info().name.clone())
            .unwrap_or_default();
        tracing::info!(array = %self.name, member = %name, from_sector = pos, "recovery started");
        let window = self.sync_window(limits.window_bytes);
        let mut throttle = Throttle::new(limits, self, pos);
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
                if !throttle.allows(self, issued) {
                    break;
                }
                // Members that complete at once (memory) never suspend: let others run.
                raidd_rt::yield_now().await;
                let end = (issued + window).min(total);
                inflight.push_back(self.recover_window(role, issued..end));
                issued = end;
            }
            if inflight.is_empty() {
                if stopping || issued >= total {
                    break;
                }
                throttle.pace(self, issued, &progress).await;
                continue;
            }
            let Some(done) = futures::StreamExt::next(&mut inflight).await else {
                break;
            };
            let (end, barrier) = done?;
            self.slots[role].recovered.store(end, Ordering::Release);
            drop(barrier);
            pos = end;
            progress.done.store(pos, Ordering::Relaxed);
            self.check_alive()?;
            if self.slot_state(role) != SlotState::Recovering {
                return Err(Error::new(
                    ErrorKind::Io,
                    format!("{}: {name} failed during recovery", self.name),
                ));
            }
            if checkpoint.elapsed() >= CHECKPOINT_EVERY && pos < total {
                self.checkpoint(role, pos).await;
                checkpoint = Instant::now();
            }
        }
        if pos < total {
            debug_assert!(stopping, "windows ended early without a stop");
            self.checkpoint(role, pos).await;
            tracing::info!(array = %self.name, member = %name, at_sector = pos, "recovery interrupted");
            return Err(Error::new(
                ErrorKind::Interrupted,
                format!("{}: recovery of {name} stopped at sector {pos}", self.name),
            ));
        }
        self.recovered(role, &name).await?;
        self.check_alive()?;
        tracing::info!(array = %self.name, member = %name, "recovery finished");
        guard.finish();
        Ok(())
    }

    /// A recovery that copied every sector: the member is flushed, in sync, and recorded so
    /// in the superblocks.
    async fn recovered(&self, role: usize, name: &str) -> Result<()> {
        let member = self.member_ref(role);
        if let Err(e) = member.flush().await {
            self.slots[role].io.failed(true);
            self.fail_member_io(role, &member, &e).await;
            return Err(Error::io(format!("{}: flushing {name}", self.name), e));
        }
        if self.slots[role]
            .state
            .compare_exchange(
                SlotState::Recovering as u8,
                SlotState::InSync as u8,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_err()
        {
            return Err(Error::new(
                ErrorKind::Io,
                format!("{}: {name} failed during recovery", self.name),
            ));
        }
        self.slots[role].by_bitmap.store(false, Ordering::Release);
        if let Some(meta) = &self.meta {
            self.superblocks_failed(meta.set_recovery(role, None, false).await)
                .await;
        }
        Ok(())
    }

    async fn checkpoint(&self, role: usize, pos: u64) {
        if let Some(meta) = &self.meta {
            let by_bitmap = self.slots[role].by_bitmap.load(Ordering::Acquire);
            self.superblocks_failed(meta.set_recovery(role, Some(pos), by_bitmap).await)
                .await;
        }
    }

    /// Rebuilds member sectors `range` of slot `role` under a barrier; returns the end of
    /// the range and the barrier, which the caller drops after moving the recovery point.
    async fn recover_window(
        &self,
        role: usize,
        range: std::ops::Range<u64>,
    ) -> Result<(u64, super::gate::Barrier<'_>)> {
        let regions = self.regions_of(role, range.clone());
        let barrier = self.gate.barrier(regions.iter().copied()).await;
        // A member re-added by its bitmap holds current data wherever no bit is set. Looked
        // at under the barrier: a write that reached these regions since the member left has
        // set its bit (none is cleared while the slot recovers, the array being degraded).
        if self.slots[role].by_bitmap.load(Ordering::Acquire) && !self.intent_set_in(&regions) {
            return Ok((range.end, barrier));
        }
        match &self.geometry {
            Geometry::Parity(pg) => {
                let chunk = u64::from(pg.chunk_sectors);
                let stripes = range.start / chunk..range.end.div_ceil(chunk);
                futures::future::try_join_all(stripes.map(|s| self.recover_stripe(role, s)))
                    .await?;
            }
            _ => {
                let runs = self.data_runs(role, range.clone());
                futures::future::try_join_all(runs.iter().map(|r| self.copy_run(role, r))).await?;
            }
        }
        Ok((range.end, barrier))
    }

    /// The array regions (sector, count) that member sectors `range` of `role` hold: what a
    /// pass over that range must keep writes out of.
    fn regions_of(&self, role: usize, range: std::ops::Range<u64>) -> Vec<(u64, u64)> {
        match &self.geometry {
            Geometry::Parity(pg) => {
                let chunk = u64::from(pg.chunk_sectors);
                let stripes = range.start / chunk..range.end.div_ceil(chunk);
                let per = pg.stripe_data_sectors();
                vec![(stripes.start * per, (stripes.end - stripes.start) * per)]
            }
            _ => self
                .data_runs(role, range)
                .iter()
                .map(|r| (r.array_sector, r.sectors))
                .collect(),
        }
    }

    /// Copies slot `role`'s member onto `new` while the array serves I/O, then puts `new`
    /// in the slot and lists the old member as failed (for `remove`). The array stays
    /// redundant throughout: the old member serves until the end, and every write below
    /// the copy point goes to both. If the old member fails meanwhile the replace stops and
    /// `new` waits as a spare (a recovery then rebuilds the slot onto it).
    pub async fn replace(
        &self,
        role: usize,
        new: Arc<dyn Member>,
        limits: SyncLimits,
    ) -> Result<()> {
        let new = self.admit(new);
        self.check_writable()?;
        self.check_alive()?;
        let membership = self.membership.lock().await;
        let meta = self.check_replace(role, &new)?;
        let total = self.geometry.member_used_sectors(role);
        let progress = self.begin_sync(SyncKind::Replace, Some(role), total, 0)?;
        let guard = SyncGuard::new(self, progress.clone());
        let old = Arc::clone(&self.member_ref(role));
        let (old_name, new_name) = (old.info().name.clone(), new.info().name.clone());
        // The new member carries a spare's superblock while it is built: a restart meanwhile
        // sees a spare, for md as for raidd.
        let added = meta.add_member(None, new.clone(), None).await?;
        let (data_offset, failed) = (added.data_offset, added.failed);
        self.superblocks_failed(failed).await;
        let slot = &self.slots[role];
        slot.replaced.store(0, Ordering::Release);
        *slot.replacement.write().expect(crate::POISONED) = Some((new.clone(), data_offset));
        slot.replacing.store(true, Ordering::Release);
        drop(membership);
        tracing::info!(array = %self.name, member = %old_name, with = %new_name, "replace started");
        let copy = Copy {
            role,
            old: &old,
            new: &new,
            data_offset,
            total,
        };
        let result = self.copy_to_replacement(copy, limits, &progress).await;
        // The swap below needs the slot still working; hold membership from here on.
        let membership = self.membership.lock().await;
        let result = result.and_then(|()| {
            if self.slot_state(role) == SlotState::InSync {
                Ok(())
            } else {
                Err(Error::new(
                    ErrorKind::Io,
                    format!("{}: {old_name} failed as the replace finished", self.name),
                ))
            }
        });
        if let Err(e) = result {
            slot.replacing.store(false, Ordering::Release);
            slot.replacement.write().expect(crate::POISONED).take();
            // The new member stays the array's spare: a failed slot claims it.
            self.spares_list.lock().expect(crate::POISONED).push(new);
            return Err(e);
        }
        // Swap: every write since the copy finished went to both.
        let failed = meta.complete_replacement(role, &new).await?;
        slot.write_mostly.store(false, Ordering::Relaxed); // the new member's own: none
        slot.member.replace(Some(new));
        slot.io.reset();
        slot.replacing.store(false, Ordering::Release);
        slot.replacement.write().expect(crate::POISONED).take();
        self.detached.lock().expect(crate::POISONED).push(old);
        self.superblocks_failed(failed).await;
        drop(membership);
        tracing::info!(array = %self.name, member = %old_name, with = %new_name, "replace finished");
        guard.finish();
        Ok(())
    }

    /// Whether slot `role`'s member may be replaced by `new`: the array's metadata, in
    /// which the replacement is recorded.
    fn check_replace(&self, role: usize, new: &Arc<dyn Member>) -> Result<&Metadata> {
        let Some(meta) = &self.meta else {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!(
                    "{} has no md metadata to record a replacement in",
                    self.name
                ),
            ));
        };
        if role >= self.slots.len() || self.slot_state(role) != SlotState::InSync {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "{}: slot {role} has no working member to replace",
                    self.name
                ),
            ));
        }
        let new_name = &new.info().name;
        if self.member_names().contains(new_name) {
            return Err(Error::new(
                ErrorKind::Conflict,
                format!("{new_name} is already part of {}", self.name),
            ));
        }
        Ok(meta)
    }

    /// Copies the slot's member onto its replacement window by window, each under a gate
    /// barrier (writes meanwhile go to both once the copy has passed them), then flushes it.
    async fn copy_to_replacement(
        &self,
        c: Copy<'_>,
        limits: SyncLimits,
        progress: &SyncProgress,
    ) -> Result<()> {
        let (role, slot) = (c.role, &self.slots[c.role]);
        let (old_name, new_name) = (&c.old.info().name, &c.new.info().name);
        if c.data_offset != slot.data_offset.load(Ordering::Relaxed) {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!(
                    "{}: {old_name} has its data at a different offset than new members get",
                    self.name
                ),
            ));
        }
        let window = self.sync_window(limits.window_bytes);
        let mut throttle = Throttle::new(limits, self, 0);
        let mut pos = 0;
        while pos < c.total {
            self.check_alive()?;
            if self.slot_state(role) != SlotState::InSync || !slot.replacing.load(Ordering::Acquire)
            {
                return Err(Error::new(
                    ErrorKind::Io,
                    format!(
                        "{}: the replace of {old_name} stopped: a member failed",
                        self.name
                    ),
                ));
            }
            if progress.cancelled() {
                return Err(Error::new(
                    ErrorKind::Interrupted,
                    format!("{}: the replace of {old_name} was stopped", self.name),
                ));
            }
            throttle.pace(self, pos, progress).await;
            if progress.cancelled() {
                continue; // reported at the top of the loop
            }
            raidd_rt::yield_now().await;
            let end = (pos + window).min(c.total);
            let barrier = self.gate.barrier(self.regions_of(role, pos..end)).await;
            let len = ((end - pos) * SECTOR_SIZE) as usize;
            let at = self.member_offset(role, pos);
            slot.io.issued(false, len as u64);
            let data = match crate::member::read_bytes(&**c.old, at, len).await {
                Ok(d) => d,
                Err(e) => {
                    slot.io.failed(false);
                    self.fail_member_io(role, c.old, &e).await;
                    return Err(Error::io(format!("{}: reading {old_name}", self.name), e));
                }
            };
            write_bytes(&**c.new, c.data_offset + pos * SECTOR_SIZE, data)
                .await
                .map_err(|e| Error::io(format!("{}: writing {new_name}", self.name), e))?;
            slot.replaced.store(end, Ordering::Release);
            drop(barrier);
            pos = end;
            progress.done.store(pos, Ordering::Relaxed);
        }
        c.new
            .flush()
            .await
            .map_err(|e| Error::io(format!("{}: flushing {new_name}", self.name), e))
    }

    /// The array data that member sectors `range` of `role` hold, as runs contiguous on both
    /// sides (mirrored levels).
    fn data_runs(&self, role: usize, range: std::ops::Range<u64>) -> Vec<Run> {
        let chunk = u64::from(self.geometry.chunk_sectors());
        let mut runs: Vec<Run> = Vec::new();
        let mut sec = range.start;
        while sec < range.end {
            let n = if chunk == 0 {
                range.end - sec
            } else {
                (chunk - sec % chunk).min(range.end - sec)
            };
            if let Reverse::Data { array_sector, .. } = self.geometry.reverse(role, sec) {
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

    /// Copies one run from the working copies onto the recovering member.
    async fn copy_run(&self, role: usize, run: &Run) -> Result<()> {
        let len = (run.sectors * SECTOR_SIZE) as usize;
        let buf = SharedBuf::new(AlignedBuf::for_overwrite(len));
        let mut iov = IoVecMut::new();
        iov.push(buf.slice_mut(0..len).expect("fresh buffer"));
        let pieces = self.geometry.pieces(run.array_sector, run.sectors);
        let (r, iov) = self
            .mapped_read(run.array_sector * SECTOR_SIZE, iov, &pieces)
            .await;
        drop(iov);
        r?;
        let data = buf.try_into_inner().expect("read released the buffer");
        self.write_member_data(role, run.member_sector, data).await
    }

    /// Writes `data` at member sector `sector` of slot `role` (a rebuilt region, repaired
    /// redundancy); a member that fails the write is failed.
    pub(super) async fn write_member_data(
        &self,
        role: usize,
        sector: u64,
        data: AlignedBuf,
    ) -> Result<()> {
        let member = self.member_ref(role);
        let io = &self.slots[role].io;
        io.issued(true, data.len() as u64);
        if let Err(e) = write_bytes(&**member, self.member_offset(role, sector), data).await {
            io.failed(true);
            self.fail_member_io(role, &member, &e).await;
            return Err(Error::io(
                format!("{}: writing {}", self.name, member.info().name),
                e,
            ));
        }
        Ok(())
    }

    /// Rebuilds `role`'s chunk of `stripe` (data or parity) from the other members.
    async fn recover_stripe(&self, role: usize, stripe: u64) -> Result<()> {
        let pio = self.parity_io();
        let pg = pio.pg();
        let chunk = u64::from(pg.chunk_sectors);
        let map = pg.stripe_map(stripe);
        let end = pio.stripe_end(stripe);
        let len = (chunk * SECTOR_SIZE) as usize;
        for _attempt in 0..=self.slots.len() {
            self.check_alive()?;
            let present: SmallVec<[usize; 16]> = (0..self.slots.len())
                .filter(|&m| m != role && self.in_sync_at(m, end))
                .collect();
            let mut blocks = pio.read_rows(self, stripe, &(0..chunk), &present).await?;
            if present.iter().any(|&m| blocks[m].is_none()) {
                continue; // a read failed and its member is now faulty: try again
            }
            super::parity::rebuild_blocks(&map, &mut blocks, len)?;
            let data = blocks[role].take().expect("rebuilt");
            return self
                .write_member_data(role, pg.member_sector(stripe, 0), data)
                .await;
        }
        Err(self.lost_error())
    }
}

/// Array data held contiguously by a member.
#[derive(Clone, Copy, Debug)]
struct Run {
    member_sector: u64,
    array_sector: u64,
    sectors: u64,
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
