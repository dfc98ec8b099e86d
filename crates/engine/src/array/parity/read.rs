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

/// Rows a write mends at a time: md's 4 KiB unit.
const MEND_ROWS: u64 = 8;

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
        // The reconstructions note what they could not read too (one at a time: a borrow
        // never spans an await).
        let noted = std::cell::RefCell::new(std::mem::take(misreads));
        // Reconstructions of different stripes run concurrently (each locks its stripe).
        let rebuilt = futures::future::join_all(slow.iter().map(|&i| {
            let p = &pieces[i];
            let loc = p.copies[0];
            if !host.in_sync_at(loc.member, loc.sector + p.sectors) {
                host.counters().add(|s| &s.degraded_reads, 1);
            }
            let (stripe, dd, off) = host.parity_shape().locate(p.array_sector);
            self.reconstruct_chunk(host, stripe, dd, off..off + p.sectors, &noted)
        }))
        .await;
        *misreads = noted.into_inner();
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
    /// from its own where it is in sync and not among the misreads `noted`). A member that
    /// cannot give the rows but stays in its slot is noted too, for the caller to correct.
    async fn reconstruct_chunk(
        &self,
        host: &impl Host,
        stripe: u64,
        dd: usize,
        rows: Range<u64>,
        noted: &std::cell::RefCell<Misreads>,
    ) -> Result<AlignedBuf> {
        let _guard = self.locks.lock(stripe, stripe).await;
        let pg = host.parity_shape();
        let map = pg.stripe_map(stripe);
        let target = map.data[dd];
        let end = stripe_end(pg, stripe);
        let at = pg.member_sector(stripe, rows.start);
        let span = at..at + (rows.end - rows.start);
        let usable = |m: usize| !noted.borrow().avoids(m, span.clone()) && host.in_sync_at(m, end);
        // Each attempt that fails fails a member or notes one, which no later one reads.
        for _attempt in 0..=pg.members {
            host.check_alive()?;
            let direct = usable(target);
            let present: SmallVec<[usize; 16]> = if direct {
                // In sync (the bypass is off, or it recovered meanwhile): read it directly.
                smallvec::smallvec![target]
            } else {
                (0..pg.members).filter(|&m| usable(m)).collect()
            };
            let (mut blocks, kept) = self
                .read_rows_keeping(host, stripe, &rows, &present)
                .await?;
            for &m in &kept {
                noted
                    .borrow_mut()
                    .push(host.slots(), m, at, rows.end - rows.start);
            }
            if present.iter().any(|&m| blocks[m].is_none()) {
                continue; // a read failed: its member is faulty now, or noted
            }
            if direct {
                return Ok(blocks[target].take().expect("read above"));
            }
            let len = ((rows.end - rows.start) * SECTOR_SIZE) as usize;
            rebuild_blocks(&map, &mut blocks, len)?;
            return Ok(blocks[target].take().expect("rebuilt"));
        }
        Err(host.lost_error())
    }

    /// [`ParityIo::read_rows`] for a write, which holds the stripe: rows a member could not
    /// give are mended ([`ParityIo::mend_rows`]) where it stays in its slot; an entry stays
    /// `None` only where its member is failed now.
    pub(crate) async fn read_rows_mended(
        &self,
        host: &impl Host,
        stripe: u64,
        rows: &Range<u64>,
        members: &[usize],
    ) -> Result<Blocks> {
        let (mut blocks, kept) = self.read_rows_keeping(host, stripe, rows, members).await?;
        // Boxed: the mend is rare, and inline its state would be part of every write's
        // (past the pooled sizes: an allocation per large write).
        for &m in &kept {
            blocks[m] = Box::pin(self.mend_rows(host, stripe, rows, m)).await?;
        }
        Ok(blocks)
    }

    /// Rows `rows` of `stripe` on slot `m`, whose read for a write failed but whose member
    /// was kept ([`ParityIo::read_rows_keeping`]), read again 4 KiB of rows at a time from
    /// every member in sync; the rows a member cannot give, `m`'s or another's, are rebuilt
    /// from the others, written back and read back (md's `R5_ReadError`, then
    /// `R5_ReWrite`). The caller holds the stripe (a batch, or the lock of a write alone):
    /// nothing else writes these rows meanwhile. `m`'s rows, or `None` once a member is
    /// failed (more rows lost than parity covers, parity not yet trusted there, a rewrite
    /// or a read that failed outright): the caller plans again.
    async fn mend_rows(
        &self,
        host: &impl Host,
        stripe: u64,
        rows: &Range<u64>,
        m: usize,
    ) -> Result<Option<AlignedBuf>> {
        let pg = host.parity_shape();
        let end = stripe_end(pg, stripe);
        let map = pg.stripe_map(stripe);
        let redundancy = 1 + usize::from(map.q.is_some());
        let members: SmallVec<[usize; 16]> = (0..pg.members)
            .filter(|&x| host.in_sync_at(x, end))
            .collect();
        let mut out = AlignedBuf::zeroed(((rows.end - rows.start) * SECTOR_SIZE) as usize);
        // 4 KiB of rows at a time (md's unit): another member may fail other rows of the
        // stripe, and each row is rebuilt from the members that give it.
        let mut row = rows.start;
        while row < rows.end {
            let next = ((row / MEND_ROWS + 1) * MEND_ROWS).min(rows.end);
            let (mut blocks, kept) = self
                .read_rows_keeping(host, stripe, &(row..next), &members)
                .await?;
            if members
                .iter()
                .any(|&x| blocks[x].is_none() && !kept.contains(&x))
            {
                return Ok(None); // a member failed outright: the caller plans again
            }
            let len = ((next - row) * SECTOR_SIZE) as usize;
            if !kept.is_empty() {
                let rebuilt = host.parity_trusted(end)
                    && kept.len() <= redundancy
                    && rebuild_blocks(&map, &mut blocks, len).is_ok();
                for &x in &kept {
                    let member = host.slots().member(x);
                    let (Some(member), Some(data), true) = (member, &blocks[x], rebuilt) else {
                        let member = host.slots().member(x);
                        member_io::fail_unreadable(host, x, member.as_ref()).await;
                        continue;
                    };
                    let sector = pg.member_sector(stripe, row);
                    member_io::rewrite(host, x, &member, sector, data.clone()).await;
                }
                if !host.in_sync_at(m, end) || !rebuilt {
                    return Ok(None);
                }
            }
            let at = ((row - rows.start) * SECTOR_SIZE) as usize;
            // Failed meanwhile (another I/O's error), it is out of `members`: plan again.
            let Some(b) = blocks[m].as_ref() else {
                return Ok(None);
            };
            out[at..at + len].copy_from_slice(b);
            row = next;
        }
        Ok(Some(out))
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
