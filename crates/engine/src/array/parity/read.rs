//! Reads of a parity array: straight from the members that are current, reconstructed
//! under the stripe's lock where a member is not. With the read bypass off, every chunk
//! takes the locked way, read into a buffer of its own and copied.

use std::collections::HashSet;
use std::ops::Range;

use raidd_layout::{Piece, SECTOR_SIZE};
use raidd_rt::recycle::Table;
use raidd_rt::{AlignedBuf, IoVecMut, SharedBuf};
use smallvec::SmallVec;

use super::cache::Blocks;
use super::rebuild::rebuild_blocks;
use super::{stripe_end, Host, ParityIo};
use crate::error::Result;
use crate::iov::{Batch, ReqMut};
use crate::member::windows_lost;

impl ParityIo {
    /// Reads `iov` at `offset`, whose `pieces` the caller mapped.
    pub(crate) async fn read(
        &self,
        host: &impl Host,
        offset: u64,
        iov: IoVecMut,
        pieces: &[Piece],
    ) -> (Result<()>, IoVecMut) {
        let mut req = ReqMut::new(iov);
        let mut slow: SmallVec<[usize; 4]> = SmallVec::new();
        let mut batch = Batch::default();
        // Inline for a request of up to 16 pieces (a 1 MiB read of 64K chunks).
        let mut chosen: Table<[(usize, usize); 16]> = Table::with_room(pieces.len());
        let bypass = self.read_bypass();
        for (i, p) in pieces.iter().enumerate() {
            let loc = p.copies[0];
            if !bypass || !host.in_sync_at(loc.member, loc.sector + p.sectors) {
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
        let mut failed = HashSet::new();
        for (member, r, (iov, layout)) in host.issue_reads(batch.into_ios()).await {
            if windows_lost(&r) {
                return (Err(host.lost_windows(member)), req.into_partial());
            }
            req.restore(&layout, iov);
            if r.is_err() {
                failed.insert(member);
            }
        }
        slow.extend(
            chosen
                .into_iter()
                .filter(|(_, m)| failed.contains(m))
                .map(|(i, _)| i),
        );
        // Reconstructions of different stripes run concurrently (each locks its stripe).
        let rebuilt = futures::future::join_all(slow.iter().map(|&i| {
            let p = &pieces[i];
            let loc = p.copies[0];
            if !host.in_sync_at(loc.member, loc.sector + p.sectors) {
                host.counters().add(|s| &s.degraded_reads, 1);
            }
            let (stripe, dd, off) = host.parity_shape().locate(p.array_sector);
            self.reconstruct_chunk(host, stripe, dd, off..off + p.sectors)
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

    /// Data of chunk `dd` of `stripe` over `rows`, rebuilt from the other members.
    async fn reconstruct_chunk(
        &self,
        host: &impl Host,
        stripe: u64,
        dd: usize,
        rows: Range<u64>,
    ) -> Result<AlignedBuf> {
        let _guard = self.locks.lock(stripe, stripe).await;
        let pg = host.parity_shape();
        let map = pg.stripe_map(stripe);
        let target = map.data[dd];
        let end = stripe_end(pg, stripe);
        for _attempt in 0..=pg.members {
            host.check_alive()?;
            if host.in_sync_at(target, end) {
                // In sync (the bypass is off, or it recovered meanwhile): read it directly.
                let mut blocks = self.read_rows(host, stripe, &rows, &[target]).await?;
                if let Some(b) = blocks[target].take() {
                    return Ok(b);
                }
                continue;
            }
            let present: SmallVec<[usize; 16]> = (0..pg.members)
                .filter(|&m| host.in_sync_at(m, end))
                .collect();
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
        let results = host.issue_scratch_reads(batch.into_ios()).await;
        for (m, b) in bufs {
            if !results.iter().any(|(f, r)| *f == m && r.is_err()) {
                out[m] = Some(b.try_into_inner().expect("scratch released"));
            }
        }
        host.check_alive()?;
        Ok(out)
    }
}
