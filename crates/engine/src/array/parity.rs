//! RAID4/5/6 I/O.
//!
//! Reads of in-sync members go straight into the client's buffer without touching any lock
//! or cache (seed 004 5.3: read bypass). Data of a missing member is reconstructed from the
//! rest of its stripe under the stripe's lock.
//!
//! A write locks the stripes it touches and, per stripe, picks the cheapest way to keep
//! parity right with the members it has: a full-stripe write (no reads), reconstruct-write
//! (read the untouched data), read-modify-write (read old data and parity), or, when a
//! missing member's old data is needed, reconstruct the stripe first. Member I/O for all the
//! stripes of a request is issued together and joined per member, so a long sequential write
//! becomes one vectored write per member, data straight from the client's buffer.
//! (The stripe cache that gathers writes across requests is the fast-path work's.)

use std::collections::HashSet;
use std::ops::Range;
use std::sync::atomic::Ordering;

use raidd_layout::{ParityGeometry, StripeMap, StripeRole, SECTOR_SIZE};
use raidd_parity::Lost;
use raidd_rt::{AlignedBuf, IoVec, IoVecMut, SharedBuf};
use smallvec::SmallVec;

use super::Array;
use crate::error::{Error, ErrorKind, Result};
use crate::iov::{Batch, Req, ReqMut};

/// How one stripe's parity is kept right by a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Strategy {
    /// Every data chunk is new: compute parity from the request alone.
    FullStripe,
    /// Read the data the request does not replace, compute parity from all data.
    ReconstructWrite,
    /// Read old data and old parity, apply the difference.
    ReadModifyWrite,
    /// A missing member's old data is needed: read everything present, rebuild the missing
    /// blocks, then compute parity as reconstruct-write does.
    Rebuild,
    /// No parity member is left: write the data only.
    DataOnly,
}

/// One stripe's share of a write.
#[derive(Debug)]
struct StripeWrite {
    stripe: u64,
    map: StripeMap,
    /// Rows (sector offsets within the chunk) the write touches in any chunk.
    rows: Range<u64>,
    /// Per data chunk (dd): the rows it gets new data for.
    cover: SmallVec<[Option<Range<u64>>; 16]>,
    strategy: Strategy,
    /// Old contents over `rows`, per member, once read.
    old: Vec<Option<AlignedBuf>>,
}

/// Chooses the strategy for a stripe and the members whose old contents it needs.
pub(crate) fn choose_strategy(
    map: &StripeMap,
    cover: &[Option<Range<u64>>],
    rows: &Range<u64>,
    chunk_sectors: u64,
    in_sync: impl Fn(usize) -> bool,
) -> (Strategy, SmallVec<[usize; 16]>) {
    let p_ok = in_sync(map.p);
    let q_ok = map.q.is_some_and(&in_sync);
    if !p_ok && !q_ok {
        return (Strategy::DataOnly, SmallVec::new());
    }
    let full = |dd: usize| cover[dd].as_ref() == Some(rows);
    if *rows == (0..chunk_sectors) && (0..cover.len()).all(full) {
        return (Strategy::FullStripe, SmallVec::new());
    }
    let rcw: SmallVec<[usize; 16]> = (0..cover.len())
        .filter(|&dd| !full(dd))
        .map(|dd| map.data[dd])
        .collect();
    let rcw_ok = rcw.iter().all(|&m| in_sync(m));
    let mut rmw: SmallVec<[usize; 16]> = (0..cover.len())
        .filter(|&dd| cover[dd].is_some())
        .map(|dd| map.data[dd])
        .collect();
    let rmw_ok = rmw.iter().all(|&m| in_sync(m));
    if p_ok {
        rmw.push(map.p);
    }
    if let Some(q) = map.q.filter(|_| q_ok) {
        rmw.push(q);
    }
    match (rcw_ok, rmw_ok) {
        (true, true) if rmw.len() < rcw.len() => (Strategy::ReadModifyWrite, rmw),
        (true, _) => (Strategy::ReconstructWrite, rcw),
        (false, true) => (Strategy::ReadModifyWrite, rmw),
        (false, false) => {
            let all = (0..map.data.len() + 1 + usize::from(map.q.is_some()))
                .map(|i| member_of_slot(map, i))
                .filter(|&m| in_sync(m))
                .collect();
            (Strategy::Rebuild, all)
        }
    }
}

/// Members of a stripe in a fixed order: data chunks, then P, then Q.
fn member_of_slot(map: &StripeMap, i: usize) -> usize {
    let k = map.data.len();
    match i {
        i if i < k => map.data[i],
        i if i == k => map.p,
        _ => map.q.expect("slot beyond P on RAID5"),
    }
}

/// Index of data chunk `dd` in the order parity code wants (Q coefficient order for RAID6).
pub(super) fn q_index(map: &StripeMap, dd: usize) -> usize {
    if map.q.is_some() {
        usize::from(map.q_coef[dd])
    } else {
        dd
    }
}

/// Rebuilds the missing blocks of a stripe in place. `blocks[member]` holds each present
/// member's contents over the same rows; missing ones (None) are filled.
pub(super) fn rebuild_blocks(
    map: &StripeMap,
    blocks: &mut [Option<AlignedBuf>],
    len: usize,
) -> Result<()> {
    let k = map.data.len();
    let raid6 = map.q.is_some();
    let mut lost_idx: SmallVec<[(StripeRole, usize); 2]> = SmallVec::new();
    for i in 0..k + 1 + usize::from(raid6) {
        let m = member_of_slot(map, i);
        if blocks[m].is_none() {
            let role = map.role_of(m);
            let idx = match role {
                StripeRole::Data(dd) => q_index(map, dd),
                _ => 0,
            };
            lost_idx.push((role, idx));
            blocks[m] = Some(AlignedBuf::zeroed(len));
        }
    }
    let lost = match lost_idx.as_slice() {
        [] => return Ok(()),
        [(StripeRole::Data(_), i)] => Lost::Data(*i),
        [(StripeRole::P, _)] => Lost::P,
        [(StripeRole::Q, _)] => Lost::Q,
        [(StripeRole::Data(_), i), (StripeRole::Data(_), j)] => Lost::DataData(*i, *j),
        [(StripeRole::Data(_), i), (StripeRole::P, _)] => Lost::DataP(*i),
        [(StripeRole::Data(_), i), (StripeRole::Q, _)] => Lost::DataQ(*i),
        [(StripeRole::P, _), (StripeRole::Q, _)] => Lost::PQ,
        _ => {
            return Err(Error::new(
                ErrorKind::Io,
                "more blocks lost in a stripe than parity covers",
            ))
        }
    };
    if !raid6 && !matches!(lost, Lost::Data(_) | Lost::P) {
        return Err(Error::new(
            ErrorKind::Io,
            "more blocks lost in a stripe than parity covers",
        ));
    }
    // Borrow every block mutably at once, in parity order.
    let mut data: Vec<Option<&mut [u8]>> = (0..k).map(|_| None).collect();
    let mut p = None;
    let mut q = None;
    for (m, b) in blocks.iter_mut().enumerate() {
        let Some(b) = b.as_mut() else { continue };
        match map.role_of(m) {
            StripeRole::Data(dd) => data[q_index(map, dd)] = Some(&mut b[..]),
            StripeRole::P => p = Some(&mut b[..]),
            StripeRole::Q => q = Some(&mut b[..]),
        }
    }
    let mut data: Vec<&mut [u8]> = data
        .into_iter()
        .map(|d| d.expect("every block present"))
        .collect();
    let p = p.expect("P block present");
    raidd_parity::reconstruct(&mut data, p, q, lost);
    Ok(())
}

impl Array {
    pub(super) fn pg(&self) -> &ParityGeometry {
        self.geometry
            .as_parity()
            .expect("parity I/O on a parity array")
    }

    /// The member sector just past `stripe`: a recovering member serves the stripe once its
    /// recovery point has passed this.
    pub(super) fn stripe_end(&self, stripe: u64) -> u64 {
        let pg = self.pg();
        pg.member_sector(stripe, 0) + u64::from(pg.chunk_sectors)
    }

    pub(super) async fn parity_read(&self, offset: u64, iov: IoVecMut) -> (Result<()>, IoVecMut) {
        let len: u64 = iov.iter().map(|w| w.len() as u64).sum();
        let pieces = self
            .geometry
            .pieces(offset / SECTOR_SIZE, len / SECTOR_SIZE);
        let mut req = ReqMut::new(iov);
        let mut slow = Vec::new();
        let mut batch = Batch::default();
        let mut chosen = Vec::new();
        for (i, p) in pieces.iter().enumerate() {
            let loc = p.copies[0];
            if !self.in_sync_at(loc.member, loc.sector + p.sectors) {
                slow.push(i);
                continue;
            }
            chosen.push((i, loc.member));
            let start = (p.array_sector * SECTOR_SIZE - offset) as usize;
            let base = self.member_offset(loc.member, loc.sector);
            for t in req.take(start..start + (p.sectors * SECTOR_SIZE) as usize) {
                let at = base + (t.req_off - start) as u64;
                batch.push(loc.member, at, t);
            }
        }
        let mut failed = HashSet::new();
        for (member, r, iov, layout) in self.issue_reads(batch.into_ios()).await {
            req.restore(&layout, iov);
            if let Err(e) = r {
                self.fail_slot(member, &e).await;
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
            self.counters.degraded_reads.fetch_add(1, Ordering::Relaxed);
            let (stripe, dd, off) = self.pg().locate(p.array_sector);
            self.reconstruct_chunk(stripe, dd, off..off + p.sectors)
        }))
        .await;
        for (&i, data) in slow.iter().zip(rebuilt) {
            match data {
                Ok(data) => {
                    let start = (pieces[i].array_sector * SECTOR_SIZE - offset) as usize;
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
        stripe: u64,
        dd: usize,
        rows: Range<u64>,
    ) -> Result<AlignedBuf> {
        let _guard = self.locks.lock(stripe, stripe).await;
        let map = self.pg().stripe_map(stripe);
        let target = map.data[dd];
        let end = self.stripe_end(stripe);
        for _attempt in 0..=self.slots.len() {
            self.check_alive()?;
            if self.in_sync_at(target, end) {
                // Recovered meanwhile (a retry after another failure): read it directly.
                let mut blocks = self.read_rows(stripe, &rows, &[target]).await?;
                if let Some(b) = blocks[target].take() {
                    return Ok(b);
                }
                continue;
            }
            let present: SmallVec<[usize; 16]> = (0..self.slots.len())
                .filter(|&m| self.in_sync_at(m, end))
                .collect();
            let mut blocks = self.read_rows(stripe, &rows, &present).await?;
            if present.iter().any(|&m| blocks[m].is_none()) {
                continue; // a read failed and its member is now faulty: try again
            }
            let len = ((rows.end - rows.start) * SECTOR_SIZE) as usize;
            rebuild_blocks(&map, &mut blocks, len)?;
            return Ok(blocks[target].take().expect("rebuilt"));
        }
        Err(self.lost_error())
    }

    /// Reads `rows` of `stripe` from each of `members` into fresh buffers, indexed by member.
    /// A member whose read fails is failed and its entry stays `None`.
    pub(super) async fn read_rows(
        &self,
        stripe: u64,
        rows: &Range<u64>,
        members: &[usize],
    ) -> Result<Vec<Option<AlignedBuf>>> {
        let len = ((rows.end - rows.start) * SECTOR_SIZE) as usize;
        let sector = self.pg().member_sector(stripe, rows.start);
        let bufs: Vec<(usize, SharedBuf)> = members
            .iter()
            .map(|&m| (m, SharedBuf::new(AlignedBuf::zeroed(len))))
            .collect();
        let mut batch = Batch::default();
        for (m, b) in &bufs {
            batch.push(
                *m,
                self.member_offset(*m, sector),
                b.slice_mut(0..len).expect("fresh"),
            );
        }
        let mut out: Vec<Option<AlignedBuf>> = (0..self.slots.len()).map(|_| None).collect();
        let mut failed = HashSet::new();
        for (m, r) in self.issue_scratch_reads(batch.into_ios()).await {
            if let Err(e) = r {
                self.fail_slot(m, &e).await;
                failed.insert(m);
            }
        }
        for (m, b) in bufs {
            if !failed.contains(&m) {
                out[m] = Some(b.try_into_inner().expect("scratch released"));
            }
        }
        self.check_alive()?;
        Ok(out)
    }

    fn plan_stripes(&self, offset: u64, len: u64) -> Vec<StripeWrite> {
        let pg = self.pg();
        let chunk = u64::from(pg.chunk_sectors);
        let mut plans: Vec<StripeWrite> = Vec::new();
        for p in self
            .geometry
            .pieces(offset / SECTOR_SIZE, len / SECTOR_SIZE)
        {
            let (stripe, dd, off) = pg.locate(p.array_sector);
            debug_assert!(off + p.sectors <= chunk, "piece crosses a chunk");
            if plans.last().is_none_or(|w| w.stripe != stripe) {
                plans.push(StripeWrite {
                    stripe,
                    map: pg.stripe_map(stripe),
                    rows: off..off + p.sectors,
                    cover: (0..pg.data_members()).map(|_| None).collect(),
                    strategy: Strategy::FullStripe,
                    old: Vec::new(),
                });
            }
            let w = plans.last_mut().expect("pushed above");
            assert!(
                w.cover[dd].is_none(),
                "chunk {dd} of stripe {stripe} covered twice"
            );
            w.cover[dd] = Some(off..off + p.sectors);
            w.rows = w.rows.start.min(off)..w.rows.end.max(off + p.sectors);
        }
        plans
    }

    pub(super) async fn parity_write(&self, offset: u64, iov: IoVec) -> Result<()> {
        let req = Req::new(iov);
        let mut plans = self.plan_stripes(offset, req.len() as u64);
        let (first, last) = match (plans.first(), plans.last()) {
            (Some(f), Some(l)) => (f.stripe, l.stripe),
            _ => return Ok(()),
        };
        let _guard = self.locks.lock(first, last).await;
        self.read_old(&mut plans).await?;
        let mut batch = Batch::default();
        for w in &mut plans {
            self.count_strategy(w.strategy);
            let parity = self.compute_parity(w, &req, offset)?;
            self.queue_writes(w, &req, offset, parity, &mut batch);
        }
        let mut failed = false;
        for (member, r) in self.issue_writes(batch.into_ios()).await {
            if let Err(e) = r {
                self.fail_slot(member, &e).await;
                failed = true;
            }
        }
        if failed {
            // Each stripe lost at most what its parity covers, or the array failed.
            self.check_alive()?;
        }
        Ok(())
    }

    fn count_strategy(&self, s: Strategy) {
        let c = &self.counters;
        let counter = match s {
            Strategy::FullStripe => &c.full_stripe_writes,
            Strategy::ReconstructWrite | Strategy::DataOnly => &c.rcw_writes,
            Strategy::ReadModifyWrite => &c.rmw_writes,
            Strategy::Rebuild => &c.reconstruct_writes,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Chooses each stripe's strategy and reads the old contents it needs. A member that
    /// fails meanwhile is failed and the affected stripes are planned again.
    async fn read_old(&self, plans: &mut [StripeWrite]) -> Result<()> {
        let chunk = u64::from(self.pg().chunk_sectors);
        let mut todo: Vec<usize> = (0..plans.len()).collect();
        for _attempt in 0..=self.slots.len() {
            self.check_alive()?;
            let mut reads: Vec<(usize, usize, SharedBuf)> = Vec::new();
            let mut batch = Batch::default();
            for &i in &todo {
                let w = &mut plans[i];
                let end = self.stripe_end(w.stripe);
                let (strategy, members) = choose_strategy(&w.map, &w.cover, &w.rows, chunk, |m| {
                    self.in_sync_at(m, end)
                });
                w.strategy = strategy;
                w.old = (0..self.slots.len()).map(|_| None).collect();
                let len = ((w.rows.end - w.rows.start) * SECTOR_SIZE) as usize;
                let sector = self.pg().member_sector(w.stripe, w.rows.start);
                for m in members {
                    let b = SharedBuf::new(AlignedBuf::zeroed(len));
                    batch.push(
                        m,
                        self.member_offset(m, sector),
                        b.slice_mut(0..len).expect("fresh"),
                    );
                    reads.push((i, m, b));
                }
            }
            let mut failed = HashSet::new();
            for (m, r) in self.issue_scratch_reads(batch.into_ios()).await {
                if let Err(e) = r {
                    self.fail_slot(m, &e).await;
                    failed.insert(m);
                }
            }
            let mut again = Vec::new();
            for (i, m, b) in reads {
                if failed.contains(&m) {
                    again.push(i);
                } else {
                    plans[i].old[m] = Some(b.try_into_inner().expect("scratch released"));
                }
            }
            again.sort_unstable();
            again.dedup();
            if again.is_empty() {
                return Ok(());
            }
            todo = again;
        }
        Err(self.lost_error())
    }

    /// New bytes of `rows` of chunk `dd` (borrowed from the request where possible).
    fn new_bytes(
        &self,
        w: &StripeWrite,
        dd: usize,
        rows: &Range<u64>,
        req: &Req,
        offset: u64,
    ) -> crate::iov::Bytes {
        let start = self.pg().array_sector(w.stripe, dd, rows.start) * SECTOR_SIZE - offset;
        let len = (rows.end - rows.start) * SECTOR_SIZE;
        req.bytes(start as usize..(start + len) as usize)
    }

    /// Computes the stripe's new P and Q over its rows (None where no parity is written).
    fn compute_parity(
        &self,
        w: &mut StripeWrite,
        req: &Req,
        offset: u64,
    ) -> Result<(Option<AlignedBuf>, Option<AlignedBuf>)> {
        let len = ((w.rows.end - w.rows.start) * SECTOR_SIZE) as usize;
        let raid6 = w.map.q.is_some();
        match w.strategy {
            Strategy::DataOnly => Ok((None, None)),
            Strategy::ReadModifyWrite => {
                let mut p = w.old[w.map.p]
                    .take()
                    .unwrap_or_else(|| AlignedBuf::zeroed(len));
                let mut q = w
                    .map
                    .q
                    .map(|q| w.old[q].take().unwrap_or_else(|| AlignedBuf::zeroed(len)));
                for dd in 0..w.cover.len() {
                    let Some(c) = w.cover[dd].clone() else {
                        continue;
                    };
                    let old = w.old[w.map.data[dd]]
                        .as_ref()
                        .expect("RMW read the old data");
                    let new = self.new_bytes(w, dd, &c, req, offset);
                    let r = ((c.start - w.rows.start) * SECTOR_SIZE) as usize
                        ..((c.end - w.rows.start) * SECTOR_SIZE) as usize;
                    let qi = q_index(&w.map, dd);
                    raidd_parity::rmw_update(
                        qi,
                        &old[r.clone()],
                        &new,
                        &mut p[r.clone()],
                        q.as_mut().map(|q| &mut q[r.clone()]),
                    );
                }
                Ok((Some(p), q))
            }
            Strategy::FullStripe | Strategy::ReconstructWrite | Strategy::Rebuild => {
                if w.strategy == Strategy::Rebuild {
                    rebuild_blocks(&w.map, &mut w.old, len)?;
                }
                // Every data chunk's new contents over the rows, in parity order.
                let k = w.cover.len();
                let mut chunks: Vec<Option<crate::iov::Bytes>> = (0..k).map(|_| None).collect();
                for dd in 0..k {
                    let m = w.map.data[dd];
                    let bytes = match &w.cover[dd] {
                        Some(c) if *c == w.rows => self.new_bytes(w, dd, c, req, offset),
                        cover => {
                            let mut old = w.old[m].take().expect("old data was read or rebuilt");
                            if let Some(c) = cover {
                                let new = self.new_bytes(w, dd, c, req, offset);
                                let at = ((c.start - w.rows.start) * SECTOR_SIZE) as usize;
                                old[at..at + new.len()].copy_from_slice(&new);
                            }
                            crate::iov::Bytes::Copy(old)
                        }
                    };
                    chunks[q_index(&w.map, dd)] = Some(bytes);
                }
                let data: Vec<&[u8]> = chunks
                    .iter()
                    .map(|c| &c.as_ref().expect("every chunk")[..])
                    .collect();
                let mut p = AlignedBuf::zeroed(len);
                if raid6 {
                    let mut q = AlignedBuf::zeroed(len);
                    raidd_parity::gen_pq(&data, &mut p, &mut q);
                    Ok((Some(p), Some(q)))
                } else {
                    raidd_parity::xor_gen(&mut p, &data);
                    Ok((Some(p), None))
                }
            }
        }
    }

    /// Queues the stripe's data (from the request, zero copy) and parity writes.
    fn queue_writes(
        &self,
        w: &StripeWrite,
        req: &Req,
        offset: u64,
        (p, q): (Option<AlignedBuf>, Option<AlignedBuf>),
        batch: &mut Batch<raidd_rt::BufSlice>,
    ) {
        let pg = self.pg();
        let end = self.stripe_end(w.stripe);
        for (dd, c) in w.cover.iter().enumerate() {
            let Some(c) = c else { continue };
            let m = w.map.data[dd];
            if !self.in_sync_at(m, end) {
                continue; // its new contents live in the parity
            }
            let start = (pg.array_sector(w.stripe, dd, c.start) * SECTOR_SIZE - offset) as usize;
            let len = ((c.end - c.start) * SECTOR_SIZE) as usize;
            let mut at = self.member_offset(m, pg.member_sector(w.stripe, c.start));
            for win in req.take(start..start + len) {
                let n = win.len() as u64;
                batch.push(m, at, win);
                at += n;
            }
        }
        let sector = pg.member_sector(w.stripe, w.rows.start);
        for (member, buf) in [(Some(w.map.p), p), (w.map.q, q)] {
            let (Some(m), Some(buf)) = (member, buf) else {
                continue;
            };
            if !self.in_sync_at(m, end) {
                continue;
            }
            let len = buf.len();
            let shared = SharedBuf::new(buf);
            batch.push(
                m,
                self.member_offset(m, sector),
                shared.slice(0..len).expect("fresh"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use smallvec::smallvec;

    fn raid5_map() -> StripeMap {
        // 4 members, left-symmetric stripe 0: D0 D1 D2 P
        StripeMap {
            p: 3,
            q: None,
            data: smallvec![0, 1, 2],
            q_coef: SmallVec::new(),
        }
    }

    #[test]
    fn strategy_prefers_fewest_reads() {
        let map = raid5_map();
        let all = |_| true;
        let full = [Some(0..16), Some(0..16), Some(0..16)];
        assert_eq!(
            choose_strategy(&map, &full, &(0..16), 16, all).0,
            Strategy::FullStripe
        );
        // One chunk of three: RMW reads 2 (old data + P), RCW reads 2 (other data): tie -> RCW.
        let one = [Some(0..16), None, None];
        let (s, reads) = choose_strategy(&map, &one, &(0..16), 16, all);
        assert_eq!(
            (s, reads.as_slice()),
            (Strategy::ReconstructWrite, &[1, 2][..])
        );
        // Two of three: RCW reads 1.
        let two = [Some(0..16), Some(0..16), None];
        assert_eq!(
            choose_strategy(&map, &two, &(0..16), 16, all).1.as_slice(),
            &[2]
        );
    }

    #[test]
    fn strategy_adapts_to_missing_members() {
        let map = raid5_map();
        let one = [Some(0..16), None, None];
        // Parity gone: just write the data.
        assert_eq!(
            choose_strategy(&map, &one, &(0..16), 16, |m| m != 3).0,
            Strategy::DataOnly
        );
        // An untouched chunk's member gone: RCW impossible, RMW works.
        let (s, r) = choose_strategy(&map, &one, &(0..16), 16, |m| m != 2);
        assert_eq!((s, r.as_slice()), (Strategy::ReadModifyWrite, &[0, 3][..]));
        // The written chunk's member gone: RCW works.
        assert_eq!(
            choose_strategy(&map, &one, &(0..16), 16, |m| m != 0).0,
            Strategy::ReconstructWrite
        );
        // Partially written chunk on a missing member: rebuild first.
        let part = [Some(4..8), Some(0..16), None];
        let (s, r) = choose_strategy(&map, &part, &(0..16), 16, |m| m != 0);
        assert_eq!((s, r.as_slice()), (Strategy::Rebuild, &[1, 2, 3][..]));
    }
}
