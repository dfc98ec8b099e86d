//! I/O for the levels whose data is only placed, never computed: linear, RAID0, RAID1,
//! RAID10. Reads go to one copy (rotating over the copies per request) and are retried on
//! another copy when a member fails; writes go to every in-sync copy.

use std::collections::HashSet;

use raidd_layout::{Piece, SECTOR_SIZE};
use raidd_rt::recycle::Table;
use raidd_rt::{IoVec, IoVecMut};
use smallvec::SmallVec;

use super::Array;
use crate::error::{Error, ErrorKind, Result};
use crate::iov::{Batch, Req, ReqMut};

impl Array {
    /// The pieces of a request's bytes, on a table kept per thread when they are more than
    /// a small request's two.
    #[inline(always)]
    pub(super) fn pieces_of(&self, offset: u64, len: u64) -> Table<[Piece; 2]> {
        let (sector, count) = (offset / SECTOR_SIZE, len / SECTOR_SIZE);
        let mut pieces = if count <= u64::from(self.geometry.chunk_sectors()) {
            // Within a chunk's length: at most two chunks, inline.
            Table::default()
        } else {
            Table::with_room(self.geometry.piece_room(sector, count))
        };
        self.geometry.pieces_into(sector, count, &mut pieces);
        pieces
    }

    /// Byte range of a piece within a request that starts at `offset`.
    fn piece_range(offset: u64, p: &Piece) -> std::ops::Range<usize> {
        let start = (p.array_sector * SECTOR_SIZE - offset) as usize;
        start..start + (p.sectors * SECTOR_SIZE) as usize
    }

    /// Reads `iov` at `offset`, whose `pieces` the caller mapped.
    pub(super) async fn mapped_read(
        &self,
        offset: u64,
        iov: IoVecMut,
        pieces: &[Piece],
    ) -> (Result<()>, IoVecMut) {
        let mut req = ReqMut::new(iov);
        // Inline for a request of up to 16 pieces (a 1 MiB read of 64K chunks).
        let mut pending: Table<[usize; 16]> = (0..pieces.len()).collect();
        // Each failed attempt fails at least one member, so this ends.
        for _attempt in 0..=self.slots.len() {
            if pending.is_empty() {
                return (Ok(()), req.into_iov());
            }
            let mut batch = Batch::default();
            let mut chosen: Table<[(usize, usize); 16]> = Table::with_room(pending.len());
            for &i in &pending {
                let p = &pieces[i];
                let Some(loc) = self.readable_copy(p) else {
                    let e = self.lost_piece(p);
                    return (Err(e), req.into_iov());
                };
                chosen.push((i, loc.member));
                let range = Self::piece_range(offset, p);
                let base = self.member_offset(loc.member, loc.sector);
                for t in req.take(range.clone()) {
                    let at = base + (t.req_off - range.start) as u64;
                    batch.push(loc.member, at, t);
                }
            }
            let mut failed = HashSet::new();
            for (member, r, (iov, layout)) in self.issue_reads(batch.into_ios()).await {
                if crate::member::windows_lost(&r) {
                    return (Err(self.lost_windows(member)), req.into_partial());
                }
                req.restore(&layout, iov);
                if r.is_err() {
                    failed.insert(member);
                }
            }
            pending = chosen
                .into_iter()
                .filter(|(_, m)| failed.contains(m))
                .map(|(i, _)| i)
                .collect();
        }
        (Err(self.lost_error()), req.into_iov())
    }

    /// Writes a piece to each of its copies from the caller's windows; it stands if a copy
    /// that is still in sync took it.
    async fn write_copies(&self, p: &Piece, iov: IoVec) -> Result<()> {
        if let [loc] = p.copies.as_slice() {
            return match self.write_extent(loc.member, loc.sector, iov).await {
                Ok(()) => Ok(()),
                Err(_) => Err(self.lost_piece(p)), // the only copy failed
            };
        }
        let at: SmallVec<[(usize, u64); 4]> = p
            .copies
            .iter()
            .map(|l| (l.member, self.member_offset(l.member, l.sector)))
            .collect();
        let results = self.write_same(&at, iov).await;
        let landed = p
            .copies
            .iter()
            .zip(&results)
            .any(|(l, r)| r.is_ok() && self.in_sync_at(l.member, l.sector + p.sectors));
        if landed {
            Ok(())
        } else {
            Err(self.lost_piece(p))
        }
    }

    fn lost_piece(&self, p: &Piece) -> Error {
        Error::new(
            ErrorKind::Io,
            format!(
                "{}: no working copy of sectors {}..{} is left",
                self.name,
                p.array_sector,
                p.array_sector + p.sectors
            ),
        )
    }

    pub(super) async fn mapped_write(&self, offset: u64, iov: IoVec) -> Result<()> {
        let len: u64 = iov.iter().map(|w| w.len() as u64).sum();
        let pieces = self.pieces_of(offset, len);
        // One extent whose copies are all in sync (every write within a chunk of a healthy
        // array): straight to each copy's member with the caller's windows, no batch. A
        // slot being rebuilt or replaced takes the general path, which handles both.
        if let [p] = pieces.as_slice() {
            let direct = p.copies.iter().all(|l| {
                self.in_sync_at(l.member, l.sector + p.sectors) && !self.is_replacing(l.member)
            });
            if direct {
                return self.write_copies(p, iov).await;
            }
        }
        let req = Req::new(iov);
        let mut batch = Batch::default();
        for p in &pieces {
            let range = Self::piece_range(offset, p);
            let mut any = false;
            // A member being rebuilt takes the piece when any of it lies below its recovery
            // point: the part below was copied already and would otherwise never get this
            // data (the part above is copied again later, with this data, after the write).
            for loc in p
                .copies
                .iter()
                .filter(|l| self.takes_write_at(l.member, l.sector))
            {
                any |= self.in_sync_at(loc.member, loc.sector + p.sectors);
                let base = self.member_offset(loc.member, loc.sector);
                let mut at = base;
                for w in req.take(range.clone()) {
                    let n = w.len() as u64;
                    batch.push(loc.member, at, w);
                    at += n;
                }
            }
            if !any {
                return Err(self.lost_piece(p));
            }
        }
        let mut failed = HashSet::new();
        for (member, r) in self.issue_writes(batch.into_ios()).await {
            if r.is_err() {
                failed.insert(member);
            }
        }
        if failed.is_empty() {
            return Ok(());
        }
        // The write stands if every piece reached at least one copy that is still good.
        for p in &pieces {
            let landed = p.copies.iter().any(|l| {
                !failed.contains(&l.member) && self.in_sync_at(l.member, l.sector + p.sectors)
            });
            if !landed {
                return Err(self.lost_piece(p));
            }
        }
        Ok(())
    }

    pub(super) async fn mapped_discard(&self, offset: u64, len: u64) -> Result<()> {
        let mut ranges: Vec<(usize, u64, u64)> = Vec::new();
        for p in self.pieces_of(offset, len) {
            for loc in p
                .copies
                .iter()
                .filter(|l| self.in_sync_at(l.member, l.sector + p.sectors))
            {
                ranges.push((
                    loc.member,
                    self.member_offset(loc.member, loc.sector),
                    p.sectors * SECTOR_SIZE,
                ));
            }
        }
        ranges.sort_unstable();
        let mut merged: Vec<(usize, u64, u64)> = Vec::new();
        for (m, off, n) in ranges {
            match merged.last_mut() {
                Some(last) if last.0 == m && last.1 + last.2 == off => last.2 += n,
                _ => merged.push((m, off, n)),
            }
        }
        futures::future::join_all(merged.iter().map(|&(m, off, n)| async move {
            let member = self.member_ref(m);
            if let Err(e) = member.discard(off, n).await {
                self.slots[m].io.failed(true);
                self.fail_member_io(m, &member, &e).await;
            }
        }))
        .await;
        // A replacement being built must keep matching its slot's member.
        for &(m, off, n) in &merged {
            if let Some((r, at)) = self.replacement_for(m, off, n) {
                if let Err(e) = r.discard(at, n).await {
                    self.abort_replacement(m, &e);
                }
            }
        }
        self.check_alive()
    }
}
