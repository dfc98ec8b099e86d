//! I/O for the levels whose data is only placed, never computed: linear, RAID0, RAID1,
//! RAID10. Reads go to one copy (the array's read policy picks it: rotating over the copies,
//! see [`Host::readable_copy`]) and are retried on another copy when a member fails; writes
//! go to every in-sync copy. [`MappedIo`] sees the array only through [`Host`], as the
//! parity path does.

use std::collections::HashSet;

use raidd_layout::{Loc, Piece, SECTOR_SIZE};
use raidd_rt::recycle::Table;
use raidd_rt::{IoVec, IoVecMut};
use smallvec::SmallVec;

use super::host::Host;
use super::member_io;
use super::misread::Misreads;
use crate::error::{Error, ErrorKind, Result};
use crate::iov::{Batch, Req, ReqMut};

/// The read, write and discard paths of linear, RAID0, RAID1 and RAID10 arrays. They keep
/// no state of their own: what they need is the array's, through [`Host`].
#[derive(Debug, Default)]
pub(crate) struct MappedIo;

/// Byte range of a piece within a request that starts at `offset`.
fn piece_range(offset: u64, p: &Piece) -> std::ops::Range<usize> {
    debug_assert!(
        p.array_sector * SECTOR_SIZE >= offset,
        "a piece before its request"
    );
    let start = (p.array_sector * SECTOR_SIZE - offset) as usize;
    start..start + (p.sectors * SECTOR_SIZE) as usize
}

fn lost_piece(host: &impl Host, p: &Piece) -> Error {
    Error::new(
        ErrorKind::Io,
        format!(
            "{}: no working copy of sectors {}..{} is left",
            host.name(),
            p.array_sector,
            p.array_sector + p.sectors
        ),
    )
}

impl MappedIo {
    /// Reads `iov` at `offset`, whose `pieces` the caller mapped. A copy whose member
    /// failed the read but stays in its slot is noted in `misreads` for the caller to
    /// correct, and no copy of a slot noted there is read.
    pub(crate) async fn read(
        &self,
        host: &impl Host,
        offset: u64,
        iov: IoVecMut,
        pieces: &[Piece],
        misreads: &mut Misreads,
    ) -> (Result<()>, IoVecMut) {
        let mut req = ReqMut::new(iov);
        // Inline for a request of up to 16 pieces (a 1 MiB read of 64K chunks).
        let mut pending: Table<[usize; 16]> = (0..pieces.len()).collect();
        // Each failed attempt fails a member or notes it in `misreads`, which no later
        // attempt reads, so this ends.
        for _attempt in 0..=host.slots().len() {
            if pending.is_empty() {
                return (Ok(()), req.into_iov());
            }
            // Every piece's copy is chosen before any window is lent to a read: a request
            // that fails for a piece with no copy left gets all its windows back.
            let mut chosen: Table<[(usize, Loc); 16]> = Table::with_room(pending.len());
            for &i in &pending {
                let p = &pieces[i];
                let Some(loc) = host.readable_copy(p, misreads) else {
                    let e = lost_piece(host, p);
                    return (Err(e), req.into_iov());
                };
                chosen.push((i, loc));
            }
            let mut batch = Batch::default();
            for &(i, loc) in &chosen {
                let p = &pieces[i];
                let range = piece_range(offset, p);
                let base = host.member_offset(loc.member, loc.sector);
                for t in req.take(range.clone()) {
                    let at = base + (t.req_off - range.start) as u64;
                    batch.push(loc.member, at, t);
                }
            }
            let failed = match member_io::read_into(host, batch, &mut req).await {
                Ok(failed) => failed,
                Err(member) => return (Err(host.lost_windows(member)), req.into_partial()),
            };
            // The pieces those I/Os held are read again elsewhere; where the member stays,
            // they are noted for correction.
            pending = Table::with_room(chosen.len());
            for (i, loc) in chosen {
                let sectors = pieces[i].sectors;
                let at = host.member_offset(loc.member, loc.sector);
                if let Some(kept) = failed.of(loc.member, at, sectors * SECTOR_SIZE) {
                    if kept {
                        misreads.push(host.slots(), loc.member, loc.sector, sectors);
                    }
                    pending.push(i);
                }
            }
        }
        (Err(host.lost_error()), req.into_iov())
    }

    /// Writes a piece to each of its copies from the caller's windows; it stands if a copy
    /// that is still in sync took it.
    async fn write_copies(&self, host: &impl Host, p: &Piece, iov: IoVec) -> Result<()> {
        if let [loc] = p.copies.as_slice() {
            let at = host.member_offset(loc.member, loc.sector);
            return match member_io::write_member(host, loc.member, at, iov).await {
                Ok(()) => Ok(()),
                Err(_) => Err(lost_piece(host, p)), // the only copy failed
            };
        }
        let at: SmallVec<[(usize, u64); 4]> = p
            .copies
            .iter()
            .map(|l| (l.member, host.member_offset(l.member, l.sector)))
            .collect();
        let results = member_io::write_same(host, &at, iov).await;
        let landed = p
            .copies
            .iter()
            .zip(&results)
            .any(|(l, r)| r.is_ok() && host.in_sync_at(l.member, l.sector + p.sectors));
        if landed {
            Ok(())
        } else {
            Err(lost_piece(host, p))
        }
    }

    /// Writes `iov` at `offset`, whose `pieces` the caller mapped.
    pub(crate) async fn write(
        &self,
        host: &impl Host,
        offset: u64,
        iov: IoVec,
        pieces: &[Piece],
    ) -> Result<()> {
        // One extent whose copies are all in sync (every write within a chunk of a healthy
        // array): straight to each copy's member with the caller's windows, no batch. A
        // slot being rebuilt or replaced takes the general path, which handles both.
        if let [p] = pieces {
            let direct = p.copies.iter().all(|l| {
                host.in_sync_at(l.member, l.sector + p.sectors)
                    && !host.slots().is_replacing(l.member)
            });
            if direct {
                return self.write_copies(host, p, iov).await;
            }
        }
        let req = Req::new(iov);
        let mut batch = Batch::default();
        for p in pieces {
            let range = piece_range(offset, p);
            let mut any = false;
            // A member being rebuilt takes the piece when any of it lies below its recovery
            // point: the part below was copied already and would otherwise never get this
            // data (the part above is copied again later, with this data, after the write).
            for loc in p
                .copies
                .iter()
                .filter(|l| host.slots().takes_write_at(l.member, l.sector))
            {
                any |= host.in_sync_at(loc.member, loc.sector + p.sectors);
                let base = host.member_offset(loc.member, loc.sector);
                let mut at = base;
                for w in req.take(range.clone()) {
                    let n = w.len() as u64;
                    batch.push(loc.member, at, w);
                    at += n;
                }
            }
            if !any {
                return Err(lost_piece(host, p));
            }
        }
        let mut failed = HashSet::new();
        for (member, r) in host.issue_writes(batch.into_ios()).await {
            if r.is_err() {
                failed.insert(member);
            }
        }
        if failed.is_empty() {
            return Ok(());
        }
        // The write stands if every piece reached at least one copy that is still good.
        for p in pieces {
            let landed = p.copies.iter().any(|l| {
                !failed.contains(&l.member) && host.in_sync_at(l.member, l.sector + p.sectors)
            });
            if !landed {
                return Err(lost_piece(host, p));
            }
        }
        Ok(())
    }

    /// Discards `len` bytes at `offset`, whose `pieces` the caller mapped, on every copy
    /// that holds current data there.
    pub(crate) async fn discard(&self, host: &impl Host, pieces: &[Piece]) -> Result<()> {
        let mut ranges: Vec<(usize, u64, u64)> = Vec::new();
        for p in pieces {
            for loc in p
                .copies
                .iter()
                .filter(|l| host.in_sync_at(l.member, l.sector + p.sectors))
            {
                ranges.push((
                    loc.member,
                    host.member_offset(loc.member, loc.sector),
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
        member_io::discard(host, &merged).await;
        host.check_alive()
    }
}
