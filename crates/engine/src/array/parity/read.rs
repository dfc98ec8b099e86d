//! Reads of a parity array: straight from the members that are current, reconstructed
//! under the stripe's lock where a member is not. With the read bypass off, every chunk
//! takes the locked way, read into a buffer of its own and copied.

use std::ops::Range;

use raidd_layout::{Piece, SECTOR_SIZE};
use raidd_rt::recycle::Table;
use raidd_rt::{AlignedBuf, IoVecMut, SharedBuf};
use smallvec::SmallVec;

use super::cache::Blocks;
use super::rebuild::rebuild_blocks;
use super::{stripe_end, Host, ParityIo};
use crate::array::member_io;
use crate::array::member_io::OnReadError;
use crate::array::misread::Misreads;
use crate::error::Result;
use crate::iov::{Batch, ReqMut};

impl ParityIo {
    /// Reads `iov` at `offset`, whose `pieces` the caller mapped. A chunk whose member
    /// failed the read but stays in its slot is rebuilt from the others and noted in
    /// `misreads` for the caller to correct; no slot noted there is read.
    pub(crate) async fn read(
        &self,
        host: &impl Host,
        offset: u64,
        iov: IoVecMut,
        pieces: &[Piece],
        misreads: &mut Misreads,
    ) -> (Result<()>, IoVecMut) {
        let mut req = ReqMut::new(iov);
        let mut slow: SmallVec<[usize; 4]> = SmallVec::new();
        let mut batch = Batch::default();
        // Inline for a request of up to 16 pieces (a 1 MiB read of 64K chunks).
        let mut chosen: Table<[(usize, usize); 16]> = Table::with_room(pieces.len());
        let bypass = self.read_bypass();
        for (i, p) in pieces.iter().enumerate() {
            let loc = p.copies[0];
            if !bypass
                || misreads.avoids(loc.member, loc.sector..loc.sector + p.sectors)
                || !host.in_sync_at(loc.member, loc.sector + p.sectors)
            {
                slow.push(i);
                continue;
            }
            chosen.push((i, loc.member));
            let start = (p.array_sector * SECTOR_SIZE - offset) as usize;
            let base = host.member_offset(loc.member, loc.sector);
            for t in req.take(start..start + (p.sectors * SECTOR_SIZE) as usize) {
                let at = base + (t.req_off - start) as u64;
                batch.push(loc.member, at, t);
            }
        }
        let failed = match member_io::read_into(host, batch, &mut req).await {
            Ok(failed) => failed,
            Err(member) => return (Err(host.lost_windows(member)), req.into_partial()),
        };
        // The chunks those I/Os held are rebuilt from the others; where the member stays,
        // they are noted for correction.
        for (i, m) in chosen {
            let loc = pieces[i].copies[0];
            let at = host.member_offset(m, loc.sector);
            if let Some(kept) = failed.of(m, at, pieces[i].sectors * SECTOR_SIZE) {
                if kept {
                    misreads.push(host.slots(), m, loc.sector, pieces[i].sectors);
                }
                slow.push(i);
            }
        }
        let misreads = &*misreads;
        // Reconstructions of different stripes run concurrently (each locks its stripe).
        let rebuilt = futures::future::join_all(slow.iter().map(|&i| {
            let p = &pieces[i];
            let loc = p.copies[0];
            if !host.in_sync_at(loc.member, loc.sector + p.sectors) {
                host.counters().add(|s| &s.degraded_reads, 1);
            }
            let (stripe, dd, off) = host.parity_shape().locate(p.array_sector);
            self.reconstruct_chunk(host, stripe, dd, off..off + p.sectors, misreads)
        }))
        .await;
        for (&i, data) in slow.iter().zip(rebuilt) {
            match data {
                Ok(data) => {
                    let start = (pieces[i].array_sector * SECTOR_SIZE - offset) as usize;
                    host.counters().add(|s| &s.copied_bytes, data.len() as u64);
                    req.fill(start..start + data.len(), &data);
                }
                Err(e) => return (Err(e), req.into_iov()),
            }
        }
        (Ok(()), req.into_iov())
    }

    /// Data of chunk `dd` of `stripe` over `rows`, rebuilt from the other members (read
    /// from its own where it is in sync and not among the `misreads`).
    async fn reconstruct_chunk(
        &self,
        host: &impl Host,
        stripe: u64,
        dd: usize,
        rows: Range<u64>,
        misreads: &Misreads,
    ) -> Result<AlignedBuf> {
        let _guard = self.locks.lock(stripe, stripe).await;
        let pg = host.parity_shape();
        let map = pg.stripe_map(stripe);
        let target = map.data[dd];
        let end = stripe_end(pg, stripe);
        let at = pg.member_sector(stripe, rows.start);
        let span = at..at + (rows.end - rows.start);
        let usable = |m: usize| !misreads.avoids(m, span.clone()) && host.in_sync_at(m, end);
        for _attempt in 0..=pg.members {
            host.check_alive()?;
            if usable(target) {
                // In sync (the bypass is off, or it recovered meanwhile): read it directly.
                let mut blocks = self.read_rows(host, stripe, &rows, &[target]).await?;
                if let Some(b) = blocks[target].take() {
                    return Ok(b);
                }
                continue;
            }
            let present: SmallVec<[usize; 16]> = (0..pg.members).filter(|&m| usable(m)).collect();
            let mut blocks = self.read_rows(host, stripe, &rows, &present).await?;
            if present.iter().any(|&m| blocks[m].is_none()) {
                continue; // a read failed and its member is now faulty: try again
            }
            let len = ((rows.end - rows.start) * SECTOR_SIZE) as usize;
            rebuild_blocks(&map, &mut blocks, len)?;
            return Ok(blocks[target].take().expect("rebuilt"));
        }
        Err(host.lost_error())
    }

    /// Reads `rows` of `stripe` from each of `members` into fresh buffers, indexed by member.
    /// A member whose read fails is failed and its entry stays `None`.
    pub(crate) async fn read_rows(
        &self,
        host: &impl Host,
        stripe: u64,
        rows: &Range<u64>,
        members: &[usize],
    ) -> Result<Blocks> {
        let (blocks, kept) = self
            .read_rows_as(host, stripe, rows, members, OnReadError::Fail)
            .await?;
        debug_assert!(kept.is_empty(), "no member kept after a failed read");
        Ok(blocks)
    }

    /// [`ParityIo::read_rows`] for a caller that corrects what fails: a member whose read
    /// fails may stay in its slot (its entry `None`, its slot among those returned).
    pub(crate) async fn read_rows_keeping(
        &self,
        host: &impl Host,
        stripe: u64,
        rows: &Range<u64>,
        members: &[usize],
    ) -> Result<(Blocks, SmallVec<[usize; 2]>)> {
        self.read_rows_as(host, stripe, rows, members, OnReadError::Keep)
            .await
    }

    async fn read_rows_as(
        &self,
        host: &impl Host,
        stripe: u64,
        rows: &Range<u64>,
        members: &[usize],
        on_error: OnReadError,
    ) -> Result<(Blocks, SmallVec<[usize; 2]>)> {
        let len = ((rows.end - rows.start) * SECTOR_SIZE) as usize;
        let sector = host.parity_shape().member_sector(stripe, rows.start);
        let bufs: SmallVec<[(usize, SharedBuf); 6]> = members
            .iter()
            // Each read fills its whole buffer (or fails and the buffer is dropped).
            .map(|&m| (m, SharedBuf::new(AlignedBuf::for_overwrite(len))))
            .collect();
        let mut batch = Batch::default();
        for (m, b) in &bufs {
            batch.push(
                *m,
                host.member_offset(*m, sector),
                b.slice_mut(0..len).expect("fresh"),
            );
        }
        let mut out: Blocks = (0..host.parity_shape().members).map(|_| None).collect();
        let results: SmallVec<[(usize, bool, bool); 6]> = match on_error {
            OnReadError::Fail => host
                .issue_scratch_reads(batch.into_ios())
                .await
                .into_iter()
                .map(|(m, r)| (m, r.is_err(), false))
                .collect(),
            OnReadError::Keep => host
                .issue_scratch_reads_keeping(batch.into_ios())
                .await
                .into_iter()
                .map(|(m, r, kept)| (m, r.is_err(), kept))
                .collect(),
        };
        for (m, b) in bufs {
            if !results.iter().any(|&(f, failed, _)| f == m && failed) {
                out[m] = Some(b.try_into_inner().expect("scratch released"));
            }
        }
        let kept = results
            .iter()
            .filter(|&&(_, _, kept)| kept)
            .map(|&(m, ..)| m)
            .collect();
        host.check_alive()?;
        Ok((out, kept))
    }
}
