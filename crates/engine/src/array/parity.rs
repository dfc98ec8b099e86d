//! RAID4/5/6 I/O.
//!
//! Reads of in-sync members go straight into the client's buffer without touching any lock
//! or cache (seed 004 5.3: read bypass). Data of a missing member is reconstructed from the
//! rest of its stripe under the stripe's lock.
//!
//! A write is cut into its share of each stripe and attached to the stripe's head in the
//! stripe cache (`stripe_cache.rs`), where writes to the same stripe meet. The request that
//! finds a stripe idle leads it: it takes every share pending there as one batch, and per
//! batch picks the cheapest way to keep parity right with the members it has and the rows
//! the cache already knows: a full-stripe write (no reads), reconstruct-write (read the
//! untouched data), read-modify-write (read old data and parity), or, when a missing member's
//! old data is needed, reconstruct the stripe first. Data goes to the members straight from
//! the clients' buffers, parity from scratch buffers, which the cache then keeps. Member
//! writes are joined per member, within a batch and across the consecutive whole stripes
//! of one request, which it leads together: a long sequential write becomes one vectored
//! write per member.

use std::collections::HashSet;
use std::ops::Range;
use std::sync::Arc;

use raidd_layout::{ParityGeometry, StripeMap, StripeRole, SECTOR_SIZE};
use raidd_parity::Lost;
use raidd_rt::recycle::Table;
use raidd_rt::{AlignedBuf, BufSlice, IoVec, IoVecMut, PooledFuture, SharedBuf};
use smallvec::SmallVec;

use super::member_io::{join_inline, Futures};
use super::stripe_cache::{
    stripe_shares, Blocks, Cached, ChunkCover, Gather, Outcome, Part, Parts, Segs, Signal,
    StripeCache, StripeShares, CACHE_MAX_RANGES, CACHE_MAX_ROWS,
};
use super::{recycle, Array};
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

/// How much of a data chunk's rows a batch writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cover {
    None,
    Partial,
    Full,
}

/// Chooses the strategy for a stripe and the members whose old contents it must read.
/// `in_sync(m)`: the member holds current data there (and takes the write); `known(m)`: its
/// contents over the rows are already at hand (the stripe cache), so they cost no read.
/// `parity_trusted`: the parity on the members matches the data (false where a resync is
/// still due: there reconstruct-write wins whenever it can, so that the write leaves its rows
/// consistent, as md does; see `Array::parity_trusted`).
///
/// Otherwise the strategy with the fewest member reads wins. A tie (one chunk of a RAID5
/// stripe of four, of a RAID6 stripe of six) goes to read-modify-write: it touches only the
/// members it changes and writes each where it has just read, which memory and cached
/// members serve from what the read brought in, and it leaves the other members to other
/// stripes. md breaks ties the other way, so that every row of the stripe is known after;
/// here that never paid, not even when kept rows are written again (docs/BENCHMARKS.md,
/// "Ties between read-modify-write and reconstruct-write": RMW +11% to +29% IOPS on memory,
/// level on files).
pub(crate) fn choose_strategy(
    map: &StripeMap,
    cover: &[Cover],
    whole_chunk: bool,
    parity_trusted: bool,
    in_sync: impl Fn(usize) -> bool,
    known: impl Fn(usize) -> bool,
) -> (Strategy, SmallVec<[usize; 16]>) {
    let p_ok = in_sync(map.p);
    let q_ok = map.q.is_some_and(&in_sync);
    if !p_ok && !q_ok {
        return (Strategy::DataOnly, SmallVec::new());
    }
    if whole_chunk && cover.iter().all(|c| *c == Cover::Full) {
        return (Strategy::FullStripe, SmallVec::new());
    }
    let have = |m: usize| known(m) || in_sync(m);
    // Counted first, and only the winner's reads collected: a small write calls this once
    // per batch, and four lists built to keep one cost more than the rest of the choice.
    let rcw = |dd: &usize| cover[*dd] != Cover::Full;
    let rmw = |dd: &usize| cover[*dd] != Cover::None;
    let parity = [Some(map.p).filter(|_| p_ok), map.q.filter(|_| q_ok)];
    let (mut rcw_ok, mut rmw_ok, mut rcw_reads, mut rmw_reads) = (true, true, 0, 0);
    for dd in 0..cover.len() {
        let m = map.data[dd];
        let (ok, read) = (have(m), usize::from(!known(m)));
        if rcw(&dd) {
            rcw_ok &= ok;
            rcw_reads += read;
        }
        if rmw(&dd) {
            rmw_ok &= ok;
            rmw_reads += read;
        }
    }
    rmw_reads += parity.iter().flatten().filter(|&&m| !known(m)).count();
    let strategy = match (rcw_ok, rmw_ok) {
        (true, true) if parity_trusted && rmw_reads <= rcw_reads => Strategy::ReadModifyWrite,
        (true, _) => Strategy::ReconstructWrite,
        (false, true) => Strategy::ReadModifyWrite,
        (false, false) => Strategy::Rebuild,
    };
    let data = |dd: usize| map.data[dd];
    let reads: SmallVec<[usize; 16]> = match strategy {
        Strategy::ReconstructWrite => (0..cover.len())
            .filter(rcw)
            .map(data)
            .filter(|&m| !known(m))
            .collect(),
        Strategy::ReadModifyWrite => (0..cover.len())
            .filter(rmw)
            .map(data)
            .chain(parity.iter().flatten().copied())
            .filter(|&m| !known(m))
            .collect(),
        _ => (0..map.data.len() + 1 + usize::from(map.q.is_some()))
            .map(|i| member_of_slot(map, i))
            .filter(|&m| have(m) && !known(m))
            .collect(),
    };
    let counted = match strategy {
        Strategy::ReconstructWrite => Some(rcw_reads),
        Strategy::ReadModifyWrite => Some(rmw_reads),
        _ => None, // a rebuild's reads are collected only
    };
    debug_assert!(
        counted.is_none_or(|n| n == reads.len()),
        "reads counted and collected differ"
    );
    (strategy, reads)
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

    /// Reads `iov` at `offset`, whose `pieces` the caller mapped.
    pub(super) async fn parity_read(
        &self,
        offset: u64,
        iov: IoVecMut,
        pieces: &[raidd_layout::Piece],
    ) -> (Result<()>, IoVecMut) {
        let mut req = ReqMut::new(iov);
        let mut slow: SmallVec<[usize; 4]> = SmallVec::new();
        let mut batch = Batch::default();
        // Inline for a request of up to 16 pieces (a 1 MiB read of 64K chunks).
        let mut chosen: Table<[(usize, usize); 16]> = Table::with_room(pieces.len());
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
        for (member, r, (iov, layout)) in self.issue_reads(batch.into_ios()).await {
            if crate::member::windows_lost(&r) {
                return (Err(self.lost_windows(member)), req.into_partial());
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
            self.counters.add(|s| &s.degraded_reads, 1);
            let (stripe, dd, off) = self.pg().locate(p.array_sector);
            self.reconstruct_chunk(stripe, dd, off..off + p.sectors)
        }))
        .await;
        for (&i, data) in slow.iter().zip(rebuilt) {
            match data {
                Ok(data) => {
                    let start = (pieces[i].array_sector * SECTOR_SIZE - offset) as usize;
                    self.counters.add(|s| &s.copied_bytes, data.len() as u64);
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
    ) -> Result<Blocks> {
        let len = ((rows.end - rows.start) * SECTOR_SIZE) as usize;
        let sector = self.pg().member_sector(stripe, rows.start);
        let bufs: SmallVec<[(usize, SharedBuf); 6]> = members
            .iter()
            // Each read fills its whole buffer (or fails and the buffer is dropped).
            .map(|&m| (m, SharedBuf::new(AlignedBuf::for_overwrite(len))))
            .collect();
        let mut batch = Batch::default();
        for (m, b) in &bufs {
            batch.push(
                *m,
                self.member_offset(*m, sector),
                b.slice_mut(0..len).expect("fresh"),
            );
        }
        let mut out: Blocks = (0..self.slots.len()).map(|_| None).collect();
        let results = self.issue_scratch_reads(batch.into_ios()).await;
        for (m, b) in bufs {
            if !results.iter().any(|(f, r)| *f == m && r.is_err()) {
                out[m] = Some(b.try_into_inner().expect("scratch released"));
            }
        }
        self.check_alive()?;
        Ok(out)
    }

    pub(super) async fn parity_write(&self, offset: u64, iov: IoVec) -> Result<()> {
        let req = recycle::req(iov);
        let len = req.len() as u64;
        let mut shares = stripe_shares(self.pg(), offset / SECTOR_SIZE, len / SECTOR_SIZE);
        if shares.stripes() == 1 {
            // The common small write: one share, no futures to join.
            let (stripe, cover) = shares.next().expect("one stripe");
            let alone = cover
                .single()
                .filter(|_| self.rmw_reads_least() && self.cache.alone());
            if let Some((dd, rows)) = alone {
                let alone = PooledFuture::new(self.write_alone(stripe, dd, rows, &req));
                if let Some(r) = alone.await {
                    recycle::give_req(req);
                    return r;
                }
            }
            return self.follow(self.attach(stripe, req, offset, cover)).await;
        }
        // In a block of its own (pooled): its tables would otherwise be part of every small
        // write's state.
        PooledFuture::new(self.write_stripes(req, offset, shares)).await
    }

    /// Whether a write within one chunk reads no more members by read-modify-write (the
    /// chunk and each parity) than by reconstruct-write (the other data chunks). Where it
    /// reads more (RAID5 over 3, RAID6 over 4 or 5) small writes never go alone: the
    /// cache's planner writes them better. Decided before the governor spends a write.
    fn rmw_reads_least(&self) -> bool {
        let pg = self.pg();
        let parity = pg.members - pg.data_members();
        pg.data_members() > 1 + parity
    }

    /// A write within one data chunk, alone on its stripe, by read-modify-write straight to
    /// the members: under the stripe's lock, the old data and parity are read, the parity
    /// updated, and data and parity written, with none of the cache's gathering (rows the
    /// cache kept of the stripe are dropped). `None`, with nothing written, when parts wait
    /// on the stripe or a leader works on it, a member it needs is not in sync, parity is
    /// not trusted yet, or a read fails: the caller then writes through the cache, which
    /// handles all of these.
    async fn write_alone(
        &self,
        stripe: u64,
        dd: usize,
        rows: Range<u64>,
        req: &Req,
    ) -> Option<Result<()>> {
        let pg = self.pg();
        let map = pg.stripe_map(stripe);
        let end = self.stripe_end(stripe);
        let data = map.data[dd];
        let mut members: SmallVec<[usize; 3]> = smallvec::smallvec![data, map.p];
        members.extend(map.q);
        let ready = || self.parity_trusted(end) && members.iter().all(|&m| self.in_sync_at(m, end));
        if !ready() {
            return None;
        }
        let _lock = self.locks.lock(stripe, stripe).await;
        if !ready() {
            return None;
        }
        recycle::give_cached_list(self.cache.claim(stripe)?);
        let mut old = match self.read_rows(stripe, &rows, &members).await {
            Ok(old) => old,
            Err(e) => return Some(Err(e)),
        };
        if members.iter().any(|&m| old[m].is_none()) {
            return None; // a member failed the read: the cache plans without it
        }
        let len = req.len();
        debug_assert_eq!(len as u64, (rows.end - rows.start) * SECTOR_SIZE);
        let new = req.bytes(0..len);
        if let crate::iov::Bytes::Copy(c) = &new {
            self.counters.add(|s| &s.copied_bytes, c.len() as u64);
        }
        let d = old[data].take().expect("read above");
        let mut p = old[map.p].take().expect("read above");
        let mut q = map.q.map(|q| old[q].take().expect("read above"));
        raidd_parity::rmw_update(q_index(&map, dd), &d, &new, &mut p, q.as_deref_mut());
        drop(new);
        self.count_strategy(Strategy::ReadModifyWrite);
        // A member that failed while the reads were out (another request's error) is not
        // written, as in a batch: its new contents live in the parity, or the parity is
        // gone and the data stands alone.
        let sector = pg.member_sector(stripe, rows.start);
        let mut writes = Batch::default();
        if self.in_sync_at(data, end) {
            writes.push_all(data, self.member_offset(data, sector), req.take(0..len));
        }
        let parity_bufs = std::iter::once((map.p, p)).chain(map.q.zip(q));
        for (m, buf) in parity_bufs.filter(|(m, _)| self.in_sync_at(*m, end)) {
            let at = self.member_offset(m, sector);
            writes.push(m, at, SharedBuf::new(buf).slice(0..len).expect("fresh"));
        }
        if let Err(e) = self.check_alive() {
            return Some(Err(e));
        }
        Some(self.written(&self.issue_writes(writes.into_ios()).await))
    }

    fn attach(&self, stripe: u64, req: Arc<Req>, offset: u64, cover: ChunkCover) -> Share<'_> {
        Share {
            cache: &self.cache,
            stripe,
            signal: Some(self.cache.attach(stripe, req, offset, cover)),
            armed: true,
        }
    }

    /// A write over several stripes. Consecutive whole stripes that this request finds idle
    /// are led together as one run, so their member writes join per member: a long
    /// sequential write becomes one vectored write per member, not one per member and
    /// stripe (seed 002: I/O split into small units). Every other share goes its own way.
    async fn write_stripes(&self, req: Arc<Req>, offset: u64, stripes: StripeShares) -> Result<()> {
        let data = self.pg().data_members();
        // Every share is attached (and guarded) before anything waits.
        let mut shares: Table<[(Share<'_>, bool); 4]> = stripes
            .map(|(stripe, cover)| {
                let w = cover.covers_stripe(data);
                (self.attach(stripe, req.clone(), offset, cover), w)
            })
            .collect();
        drop(req);
        let mut shares = shares.drain(..).peekable();
        // Each run or share in a pooled block, joined in place: nothing allocated (past four,
        // the tables are on blocks kept per thread).
        let mut futs: Futures<PooledFuture<'_, Result<()>>> = Futures::with_room(shares.len());
        while let Some((share, whole)) = shares.next() {
            let mut run: Run<'_> = if whole {
                Table::with_room(1 + shares.len())
            } else {
                Table::default()
            };
            run.push(share);
            if whole && run[0].signal().holds_lead() {
                while let Some((next, true)) = shares.peek() {
                    if !next.signal().holds_lead() {
                        break;
                    }
                    let (next, _) = shares.next().expect("peeked");
                    debug_assert_eq!(next.stripe, run[run.len() - 1].stripe + 1);
                    run.push(next);
                }
            }
            if run.len() == 1 {
                futs.push(PooledFuture::new(
                    self.follow(run.pop().expect("one share")),
                ));
            } else {
                futs.push(PooledFuture::new(self.lead_run(run)));
            }
        }
        join_inline(futs).await.into_iter().collect()
    }

    /// Waits for a share's batch to be written, leading the stripe whenever it is handed
    /// this share.
    async fn follow(&self, mut share: Share<'_>) -> Result<()> {
        loop {
            match share.signal().wait().await {
                Outcome::Done(r) => {
                    share.armed = false;
                    return r;
                }
                Outcome::Lead => self.lead(&[(share.stripe, share.signal())]).await,
            }
        }
    }

    /// Leads consecutive stripes whose leads these shares hold, as one batch of member I/O.
    async fn lead_run(&self, run: Run<'_>) -> Result<()> {
        let held: Table<[(u64, &Signal); 4]> = run
            .iter()
            .map(|s| {
                let lead = s.signal().take_lead();
                assert!(lead, "stripe {} led by another", s.stripe);
                (s.stripe, s.signal())
            })
            .collect();
        self.lead(&held).await;
        drop(held);
        // Each share's outcome is posted; collect them in order.
        let mut out = Ok(());
        for share in run {
            let r = self.follow(share).await;
            if out.is_ok() {
                out = r;
            }
        }
        out
    }

    /// Runs one batch on each of the consecutive stripes these signals lead, then hands each
    /// stripe on.
    async fn lead(&self, held: &[(u64, &Signal)]) {
        let (parts, mut kept) = (
            recycle::RunParts::with_room(held.len()),
            recycle::RunKept::with_room(held.len()),
        );
        let mut leading = Leading {
            cache: &self.cache,
            held,
            parts,
            done: false,
        };
        let pg = self.pg();
        let (data, chunk) = (pg.data_members(), u64::from(pg.chunk_sectors));
        if self.cache.gather() == Gather::Plug
            && !held
                .iter()
                .all(|(s, _)| self.cache.pending_full(*s, data, chunk))
        {
            // A partial stripe: let the requests already arriving join before starting.
            raidd_rt::unplugged().await;
        }
        let _slot = self.cache.slot().await;
        // Degraded reads reconstruct under the same per-stripe lock, so they never see a
        // stripe half written.
        let (first, last) = (held[0].0, held[held.len() - 1].0);
        debug_assert_eq!(
            last - first + 1,
            held.len() as u64,
            "a run of consecutive stripes"
        );
        let _lock = self.locks.lock(first, last).await;
        for (stripe, _) in held {
            let taken = self.cache.take(*stripe);
            leading.parts.push(taken.parts);
            kept.push(taken.cached);
        }
        let r = match (&leading.parts[..], &mut kept[..]) {
            ([parts], [kept]) => self.run_batch(held[0].0, parts, kept).await,
            // In a block of its own (pooled): a run's tables would otherwise be part of every
            // small write's state.
            (parts, kept) => PooledFuture::new(self.run_batches(held, parts, kept)).await,
        };
        let mut parts = std::mem::take(&mut leading.parts);
        leading.done = true;
        for (((stripe, _), parts), kept) in held.iter().zip(parts.drain(..)).zip(kept.drain(..)) {
            self.cache.finish(*stripe, kept, parts, &r);
        }
    }

    /// Writes one stripe's batch. On return `kept` holds its contents worth keeping.
    async fn run_batch(&self, stripe: u64, parts: &[Part], kept: &mut Vec<Cached>) -> Result<()> {
        let Some(mut open) = self.open_batch(stripe, parts, kept) else {
            return Ok(());
        };
        let mut writes = Batch::default();
        let mut r = self.stage_batch(&mut open, parts, &mut writes).await;
        if r.is_ok() {
            // Awaited here, not in a helper future: one future less moved per small write.
            r = self.written(&self.issue_writes(writes.into_ios()).await);
        }
        self.settle_batch(open, r.is_ok(), kept);
        r
    }

    /// Writes the batches of consecutive stripes (`parts[i]` on `held[i]`) as one: reads
    /// and parity stripe by stripe, then every member write at once, joined per member
    /// across the stripes. On return `kept[i]` holds stripe i's contents worth keeping.
    async fn run_batches(
        &self,
        held: &[(u64, &Signal)],
        parts: &[Parts],
        kept: &mut [Vec<Cached>],
    ) -> Result<()> {
        let mut open: Table<[(usize, OpenBatch); 4]> = Table::with_room(held.len());
        for (i, (stripe, _)) in held.iter().enumerate() {
            if let Some(o) = self.open_batch(*stripe, &parts[i], &mut kept[i]) {
                open.push((i, o));
            }
        }
        let mut writes = Batch::default();
        let mut r = Ok(());
        for (i, o) in &mut open {
            r = self.stage_batch(o, &parts[*i], &mut writes).await;
            if r.is_err() {
                break;
            }
        }
        if r.is_ok() {
            r = self.written(&self.issue_writes(writes.into_ios()).await);
        }
        for (i, o) in open.drain(..) {
            self.settle_batch(o, r.is_ok(), &mut kept[i]);
        }
        r
    }

    /// A batch's outcome from its member writes' results: a member that failed was failed,
    /// and the batch still succeeds while the array lives (each stripe lost at most what its
    /// parity covers).
    fn written(&self, results: &[(usize, std::io::Result<()>)]) -> Result<()> {
        if results.iter().any(|(_, r)| r.is_err()) {
            self.check_alive()
        } else {
            Ok(())
        }
    }

    /// A stripe's batch as it starts: what its parts write, and the rows it works over (kept
    /// rows that hold the batch, or its own). `None` for a batch with nothing to write.
    fn open_batch(&self, stripe: u64, parts: &[Part], kept: &mut Vec<Cached>) -> Option<OpenBatch> {
        let pg = self.pg();
        let k = pg.data_members();
        let chunk = u64::from(pg.chunk_sectors);
        let mut segs: SmallVec<[Segs; 8]> = (0..k).map(|_| Segs::default()).collect();
        for (i, p) in parts.iter().enumerate() {
            for (dd, r) in p.cover.iter() {
                segs[dd].insert(r, i);
            }
        }
        let hull = segs
            .iter()
            .filter_map(Segs::hull)
            .reduce(|a, b| a.start.min(b.start)..a.end.max(b.end))?;
        let (rows, old) = match kept
            .iter()
            .position(|c| c.rows.start <= hull.start && hull.end <= c.rows.end)
        {
            Some(i) => {
                self.cache.hit();
                let c = kept.remove(i);
                (c.rows, c.blocks)
            }
            None => (
                hull.clone(),
                (0..self.slots.len()).map(|_| None).collect::<Blocks>(),
            ),
        };
        // Small rows of a partial stripe are kept for the next write, while keeping pays;
        // big writes and whole stripes stream through uncopied.
        let whole = segs.iter().all(|s| s.covers(&(0..chunk)));
        let keep = !whole
            && rows.end - rows.start <= CACHE_MAX_ROWS
            && self.cache.cache_bytes() > 0
            && self.cache.keeping();
        Some(OpenBatch {
            stripe,
            map: pg.stripe_map(stripe),
            segs,
            rows,
            hull,
            keep,
            old,
            parity: SmallVec::new(),
        })
    }

    /// After the batch's writes: the parity buffers come back, and the stripe's kept rows
    /// are brought up to date (`ok`: the batch succeeded).
    fn settle_batch(&self, mut o: OpenBatch, ok: bool, kept: &mut Vec<Cached>) {
        for (m, shared, valid) in o.parity.drain(..) {
            o.old[m] = shared.try_into_inner().ok().filter(|_| valid);
        }
        if !ok {
            // What reached the members is uncertain: keep nothing of this stripe.
            kept.clear();
            return;
        }
        // Other kept ranges that overlap what the batch wrote are stale now.
        let rows = o.rows;
        kept.retain(|c| c.rows.end <= rows.start || c.rows.start >= rows.end);
        if o.keep {
            self.cache.kept();
            if kept.capacity() == 0 {
                *kept = super::recycle::cached_list();
            }
            kept.push(Cached {
                rows,
                blocks: o.old,
            });
            if kept.len() > CACHE_MAX_RANGES {
                kept.remove(0);
            }
        }
    }

    /// The batch's reads and parity over `o.rows` (which hold `o.hull`, the rows the parts
    /// write); its member writes go into `writes`. With `o.keep`, once settled `o.old`
    /// holds every member's new contents over the rows where they are known.
    async fn stage_batch(
        &self,
        o: &mut OpenBatch,
        parts: &[Part],
        writes: &mut Batch<BufSlice>,
    ) -> Result<()> {
        let pg = self.pg();
        let chunk = u64::from(pg.chunk_sectors);
        let (stripe, map, segs, keep) = (o.stripe, &o.map, &o.segs, o.keep);
        let (rows, hull, old) = (&o.rows, &o.hull, &mut o.old);
        let len = ((rows.end - rows.start) * SECTOR_SIZE) as usize;
        let cover: SmallVec<[Cover; 16]> = segs
            .iter()
            .map(|s| {
                if s.covers(rows) {
                    Cover::Full
                } else if s.is_empty() {
                    Cover::None
                } else {
                    Cover::Partial
                }
            })
            .collect();
        let end = self.stripe_end(stripe);
        let trusted = self.parity_trusted(end);
        let mut strategy = Strategy::FullStripe;
        let mut planned = false;
        for _attempt in 0..=self.slots.len() {
            self.check_alive()?;
            let (s, reads) = choose_strategy(
                map,
                &cover,
                *rows == (0..chunk),
                trusted,
                |m| self.in_sync_at(m, end),
                |m| old[m].is_some(),
            );
            strategy = s;
            if reads.is_empty() {
                planned = true;
                break;
            }
            let got = self.read_rows(stripe, rows, &reads).await?;
            let mut complete = true;
            for (m, b) in got.into_iter().enumerate() {
                if let Some(b) = b {
                    old[m] = Some(b);
                } else if reads.contains(&m) {
                    complete = false; // that member failed: plan again without it
                }
            }
            if complete {
                planned = true;
                break;
            }
        }
        if !planned {
            return Err(self.lost_error());
        }
        self.count_strategy(strategy);
        let copied = |n: usize| {
            self.counters.add(|s| &s.copied_bytes, n as u64);
        };
        let bytes = |dd: usize, r: &Range<u64>, part: usize| -> crate::iov::Bytes {
            let p = &parts[part];
            let start = pg.array_sector(stripe, dd, r.start) * SECTOR_SIZE - p.offset;
            let n = (r.end - r.start) * SECTOR_SIZE;
            let b = p.req.bytes(start as usize..(start + n) as usize);
            if let crate::iov::Bytes::Copy(c) = &b {
                copied(c.len()); // the range straddles the client's windows
            }
            b
        };
        let at = |r: &Range<u64>| {
            ((r.start - rows.start) * SECTOR_SIZE) as usize
                ..((r.end - rows.start) * SECTOR_SIZE) as usize
        };
        // Whether the new P and Q are right (read-modify-write on a parity block whose old
        // contents were neither read nor known computes garbage, which is not written and
        // must not be kept either).
        let mut valid = [true, true];
        // A full stripe's data chunks, in parity order. A chunk that one part writes whole
        // over the rows is a window lent for parity that stays here to be the chunk's
        // member write too: lent once, not again.
        let mut chunks: SmallVec<[Option<NewChunk>; 8]> = SmallVec::new();
        let (p, q) = match strategy {
            Strategy::DataOnly => {
                // Parity is gone, so nothing below keeps the rows known: drop them.
                old.iter_mut().for_each(|b| *b = None);
                (None, None)
            }
            Strategy::ReadModifyWrite => {
                valid = [
                    old[map.p].is_some(),
                    map.q.is_some_and(|q| old[q].is_some()),
                ];
                let mut p = old[map.p].take().unwrap_or_else(|| AlignedBuf::zeroed(len));
                let mut q = map
                    .q
                    .map(|q| old[q].take().unwrap_or_else(|| AlignedBuf::zeroed(len)));
                for (dd, s) in segs.iter().enumerate() {
                    let m = map.data[dd];
                    let qi = q_index(map, dd);
                    for (r, part) in &s.0 {
                        let new = bytes(dd, r, *part);
                        let d = old[m].as_mut().expect("RMW read the old data");
                        let w = at(r);
                        raidd_parity::rmw_update(
                            qi,
                            &d[w.clone()],
                            &new,
                            &mut p[w.clone()],
                            q.as_mut().map(|q| &mut q[w.clone()]),
                        );
                        if keep {
                            d[w].copy_from_slice(&new);
                            copied(new.len());
                        }
                    }
                }
                (Some(p), q)
            }
            Strategy::FullStripe | Strategy::ReconstructWrite | Strategy::Rebuild => {
                if strategy == Strategy::Rebuild {
                    let mut blocks: Blocks = old.iter_mut().map(Option::take).collect();
                    // A member that is neither current nor known is what the rebuild recovers.
                    rebuild_blocks(map, &mut blocks, len)?;
                    for (o, b) in old.iter_mut().zip(blocks) {
                        *o = b;
                    }
                }
                // Every data chunk's new contents over the rows, in parity order: borrowed
                // from a request where one part writes the whole chunk, from several where
                // parts together write it (a full stripe gathered from small requests), else
                // old + new.
                let k = segs.len();
                chunks.extend((0..k).map(|_| None));
                for (dd, s) in segs.iter().enumerate() {
                    let m = map.data[dd];
                    let b = match s.0.as_slice() {
                        [(r, part)] if r == rows => NewChunk::Whole(bytes(dd, r, *part)),
                        list => match old[m].take() {
                            Some(mut d) => {
                                for (r, part) in list {
                                    let new = bytes(dd, r, *part);
                                    d[at(r)].copy_from_slice(&new);
                                    copied(new.len());
                                }
                                NewChunk::Whole(crate::iov::Bytes::Copy(d))
                            }
                            None => {
                                // Nothing old was read: the parts write every row, and
                                // parity is generated piece by piece from their windows
                                // (segments are sorted and disjoint, so the pieces are too).
                                assert!(s.covers(rows), "old data was read or rebuilt");
                                let mut pieces = recycle::piece_list();
                                pieces.extend(
                                    list.iter().map(|(r, part)| (at(r), bytes(dd, r, *part))),
                                );
                                NewChunk::Pieces(pieces)
                            }
                        },
                    };
                    chunks[q_index(map, dd)] = Some(b);
                }
                // Over kept rows wider than the batch, parity changes only where the batch
                // writes: start from the kept parity and generate the hull's rows alone (a 4K
                // write into 64K of kept rows generated all 64K: half of its time).
                let parity_known = old[map.p].is_some() && map.q.is_none_or(|q| old[q].is_some());
                let span = if parity_known { at(hull) } else { 0..len };
                // Generation writes every byte of P and Q over the span; outside it they are
                // the kept contents, still right.
                let mut parity_buf = |m: usize| match old[m].take() {
                    Some(b) if parity_known => b,
                    _ => AlignedBuf::for_overwrite(len),
                };
                let mut p = parity_buf(map.p);
                let mut q = map.q.map(&mut parity_buf);
                // One generation per stretch that every chunk holds in one piece: the whole
                // span unless some chunk came in pieces.
                let mut cuts: SmallVec<[usize; 32]> = smallvec::smallvec![span.start, span.end];
                for c in &chunks {
                    if let Some(NewChunk::Pieces(pieces)) = c {
                        cuts.extend(
                            pieces
                                .iter()
                                .map(|(w, _)| w.start)
                                .filter(|&x| x > span.start && x < span.end),
                        );
                    }
                }
                cuts.sort_unstable();
                cuts.dedup();
                for w in cuts.windows(2) {
                    let part = w[0]..w[1];
                    let data: SmallVec<[&[u8]; 8]> = chunks
                        .iter()
                        .map(|c| c.as_ref().expect("every chunk").slice(part.clone()))
                        .collect();
                    match q.as_mut() {
                        Some(q) => {
                            raidd_parity::gen_pq(&data, &mut p[part.clone()], &mut q[part.clone()])
                        }
                        None => raidd_parity::xor_gen(&mut p[part.clone()], &data),
                    }
                }
                // Keep what is now known (copying borrowed chunks only when it will be kept).
                for (dd, c) in segs.iter().enumerate() {
                    let m = map.data[dd];
                    let slot = &mut chunks[q_index(map, dd)];
                    let known = |chunk: &NewChunk| {
                        keep.then(|| {
                            let mut b = AlignedBuf::for_overwrite(len);
                            for (w, bytes) in chunk.pieces() {
                                copied(w.len());
                                b[w].copy_from_slice(bytes);
                            }
                            b
                        })
                    };
                    old[m] = match slot.take() {
                        Some(NewChunk::Whole(crate::iov::Bytes::Copy(b))) => Some(b),
                        Some(chunk @ NewChunk::Whole(crate::iov::Bytes::Window(_))) => {
                            let b = known(&chunk);
                            *slot = Some(chunk); // the member write, below
                            b
                        }
                        Some(chunk) => {
                            let b = known(&chunk);
                            chunk.recycle();
                            b
                        }
                        None => None,
                    };
                    debug_assert!(!c.is_empty() || old[m].is_some());
                }
                (Some(p), q)
            }
        };
        // Data from the clients' buffers (zero copy), parity from scratch over the rows the
        // batch changed.
        for (dd, s) in segs.iter().enumerate() {
            let m = map.data[dd];
            if !self.in_sync_at(m, end) {
                continue; // its new contents live in the parity
            }
            if let Some(w) = chunks
                .get_mut(q_index(map, dd))
                .and_then(NewChunk::take_window)
            {
                debug_assert!(matches!(s.0.as_slice(), [(r, _)] if r == rows));
                let at = self.member_offset(m, pg.member_sector(stripe, rows.start));
                writes.push(m, at, w);
                continue;
            }
            for (r, part) in &s.0 {
                let p = &parts[*part];
                let start =
                    (pg.array_sector(stripe, dd, r.start) * SECTOR_SIZE - p.offset) as usize;
                let n = ((r.end - r.start) * SECTOR_SIZE) as usize;
                let at = self.member_offset(m, pg.member_sector(stripe, r.start));
                writes.push_all(m, at, p.req.take(start..start + n));
            }
        }
        let sector = pg.member_sector(stripe, hull.start);
        for ((member, buf), ok) in [(Some(map.p), p), (map.q, q)].into_iter().zip(valid) {
            let (Some(m), Some(buf)) = (member, buf) else {
                continue;
            };
            let shared = SharedBuf::new(buf);
            if self.in_sync_at(m, end) {
                debug_assert!(ok, "writing parity computed from unknown old parity");
                writes.push(
                    m,
                    self.member_offset(m, sector),
                    shared.slice(at(hull)).expect("fresh"),
                );
            }
            o.parity.push((m, shared, ok));
        }
        Ok(())
    }

    fn count_strategy(&self, s: Strategy) {
        self.counters.add(
            |c| match s {
                Strategy::FullStripe => &c.full_stripe_writes,
                Strategy::ReconstructWrite | Strategy::DataOnly => &c.rcw_writes,
                Strategy::ReadModifyWrite => &c.rmw_writes,
                Strategy::Rebuild => &c.reconstruct_writes,
            },
            1,
        );
    }
}

/// Consecutive whole stripes' shares led together, in stripe order (a table kept per thread
/// past four).
type Run<'a> = Table<[Share<'a>; 4]>;

/// A request's share of one stripe, attached to its head. If its future is dropped the
/// stripe must not wait for it (nor stay led by it).
struct Share<'a> {
    cache: &'a StripeCache,
    stripe: u64,
    /// Always set; taken only when the share is dropped.
    signal: Option<Arc<Signal>>,
    armed: bool,
}

impl Share<'_> {
    fn signal(&self) -> &Signal {
        self.signal
            .as_deref()
            .expect("a share's mailbox lives as long as the share")
    }
}

impl Drop for Share<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.cache.abandon(self.stripe, self.signal());
        } else if let Some(s) = self.signal.take() {
            recycle::give_signal(s);
        }
    }
}

/// A stripe's batch between its start and its settling.
struct OpenBatch {
    stripe: u64,
    map: StripeMap,
    segs: SmallVec<[Segs; 8]>,
    rows: Range<u64>,
    hull: Range<u64>,
    keep: bool,
    old: Blocks,
    /// Parity written: member, buffer, and whether it is right (may be kept).
    parity: SmallVec<[(usize, SharedBuf, bool); 2]>,
}

/// A leader's hold on its stripes; if its future is dropped each lead passes on and the
/// parts it took are told they failed.
struct Leading<'a, 'b> {
    cache: &'a StripeCache,
    held: &'b [(u64, &'a Signal)],
    /// The parts taken so far, per held stripe in order.
    parts: recycle::RunParts,
    done: bool,
}

impl Drop for Leading<'_, '_> {
    fn drop(&mut self) {
        if !self.done {
            let mut parts = std::mem::take(&mut self.parts).into_iter();
            for (stripe, own) in self.held {
                self.cache
                    .resign(*stripe, own, parts.next().unwrap_or_default());
            }
        }
    }
}

/// A data chunk's new contents over a batch's rows, for parity generation.
enum NewChunk {
    /// One run of bytes over all the rows (borrowed from a request, or old + new copied).
    Whole(crate::iov::Bytes),
    /// Several parts' windows that together cover the rows, in row order, each with the
    /// byte range of the rows it covers (a list from the thread's, so that the chunk table
    /// stays small: inline, four pieces made each entry 200 bytes).
    Pieces(Vec<ChunkPiece>),
}

/// A piece of a chunk's new contents: the byte range of the rows it covers, and its bytes.
pub(super) type ChunkPiece = (Range<usize>, crate::iov::Bytes);

impl NewChunk {
    /// The bytes of the rows at `range` (of the batch's rows), which lie in one piece.
    fn slice(&self, range: Range<usize>) -> &[u8] {
        match self {
            NewChunk::Whole(b) => &b[range],
            NewChunk::Pieces(pieces) => {
                let (w, b) = pieces
                    .iter()
                    .find(|(w, _)| w.start <= range.start && range.start < w.end)
                    .expect("the pieces cover every row");
                assert!(range.end <= w.end, "a stretch crosses a piece boundary");
                &b[range.start - w.start..range.end - w.start]
            }
        }
    }

    /// The window of a chunk lent whole, taken out of `slot`; any other chunk stays.
    fn take_window(slot: &mut Option<NewChunk>) -> Option<BufSlice> {
        match slot.take() {
            Some(NewChunk::Whole(crate::iov::Bytes::Window(w))) => Some(w),
            other => {
                *slot = other;
                None
            }
        }
    }

    /// Gives a list of pieces back to the thread's (its windows are released now).
    fn recycle(self) {
        if let NewChunk::Pieces(list) = self {
            recycle::give_piece_list(list);
        }
    }

    /// The chunk as (byte range, bytes) pieces, in row order.
    fn pieces(&self) -> SmallVec<[(Range<usize>, &[u8]); 4]> {
        match self {
            NewChunk::Whole(b) => smallvec::smallvec![(0..b.len(), &**b)],
            NewChunk::Pieces(p) => p.iter().map(|(w, b)| (w.clone(), &**b)).collect(),
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

    use Cover::{Full, None as Untouched, Partial};

    #[test]
    fn strategy_prefers_fewest_reads() {
        let map = raid5_map();
        let all = |_| true;
        let nothing = |_| false;
        let full = [Full, Full, Full];
        assert_eq!(
            choose_strategy(&map, &full, true, true, all, nothing).0,
            Strategy::FullStripe
        );
        // Every chunk over part of the rows is not a full stripe: nothing to read.
        let (s, reads) = choose_strategy(&map, &full, false, true, all, nothing);
        assert_eq!((s, reads.len()), (Strategy::ReconstructWrite, 0));
        // One chunk of three: RMW reads 2 (old data + P), RCW reads 2 (other data): tie -> RMW.
        let one = [Full, Untouched, Untouched];
        let (s, reads) = choose_strategy(&map, &one, true, true, all, nothing);
        assert_eq!(
            (s, reads.as_slice()),
            (Strategy::ReadModifyWrite, &[0, 3][..])
        );
        // Two of three: RCW reads 1.
        let two = [Full, Full, Untouched];
        assert_eq!(
            choose_strategy(&map, &two, true, true, all, nothing)
                .1
                .as_slice(),
            &[2]
        );
        // A chunk with holes is read like an untouched one by RCW.
        let holes = [Partial, Full, Full];
        let (s, reads) = choose_strategy(&map, &holes, true, true, all, nothing);
        assert_eq!(
            (s, reads.as_slice()),
            (Strategy::ReconstructWrite, &[0][..])
        );
    }

    #[test]
    fn untrusted_parity_is_recomputed_whenever_it_can_be() {
        let map = raid5_map();
        let all = |_| true;
        let nothing = |_| false;
        let one = [Full, Untouched, Untouched];
        // A tie, and a write that RMW would serve with no read at all (old data and P
        // known), both go to RCW while parity may not match the data.
        let (s, reads) = choose_strategy(&map, &one, true, false, all, nothing);
        assert_eq!(
            (s, reads.as_slice()),
            (Strategy::ReconstructWrite, &[1, 2][..])
        );
        let (s, _) = choose_strategy(&map, &one, true, false, all, |m| m == 0 || m == 3);
        assert_eq!(s, Strategy::ReconstructWrite);
        // Where RCW cannot run (an untouched chunk's member gone), RMW is all there is.
        let (s, _) = choose_strategy(&map, &one, true, false, |m| m != 2, nothing);
        assert_eq!(s, Strategy::ReadModifyWrite);
        // A whole stripe computes parity from scratch anyway.
        let full = [Full, Full, Full];
        let (s, _) = choose_strategy(&map, &full, true, false, all, nothing);
        assert_eq!(s, Strategy::FullStripe);
    }

    #[test]
    fn known_rows_cost_no_reads() {
        let map = raid5_map();
        let all = |_| true;
        let one = [Partial, Untouched, Untouched];
        // Old data of the written chunk and P known: RMW with no read at all.
        let (s, reads) = choose_strategy(&map, &one, true, true, all, |m| m == 0 || m == 3);
        assert_eq!((s, reads.len()), (Strategy::ReadModifyWrite, 0));
        // Everything known: whichever strategy, nothing is read.
        let (_, reads) = choose_strategy(&map, &one, true, true, all, |_| true);
        assert!(reads.is_empty());
        // Only P known: RMW reads 1 (old data), RCW reads 2.
        let (s, reads) = choose_strategy(&map, &one, true, true, all, |m| m == 3);
        assert_eq!((s, reads.as_slice()), (Strategy::ReadModifyWrite, &[0][..]));
        // A missing member whose contents are known is no obstacle: with chunk 2 known too,
        // RCW reads only the partial chunk 0, where RMW would read 0 and P.
        let (s, reads) = choose_strategy(&map, &one, true, true, |m| m != 1, |m| m == 1 || m == 2);
        assert_eq!(
            (s, reads.as_slice()),
            (Strategy::ReconstructWrite, &[0][..])
        );
        // A partial write to a missing member's chunk rebuilds it, reading only what is
        // not known.
        let (s, reads) = choose_strategy(&map, &one, true, true, |m| m != 0, |m| m == 1);
        assert_eq!((s, reads.as_slice()), (Strategy::Rebuild, &[2, 3][..]));
    }

    #[test]
    fn strategy_adapts_to_missing_members() {
        let map = raid5_map();
        let nothing = |_| false;
        let one = [Full, Untouched, Untouched];
        // Parity gone: just write the data.
        assert_eq!(
            choose_strategy(&map, &one, true, true, |m| m != 3, nothing).0,
            Strategy::DataOnly
        );
        // An untouched chunk's member gone: RCW impossible, RMW works.
        let (s, r) = choose_strategy(&map, &one, true, true, |m| m != 2, nothing);
        assert_eq!((s, r.as_slice()), (Strategy::ReadModifyWrite, &[0, 3][..]));
        // The written chunk's member gone: RCW works.
        assert_eq!(
            choose_strategy(&map, &one, true, true, |m| m != 0, nothing).0,
            Strategy::ReconstructWrite
        );
        // Partially written chunk on a missing member: rebuild first.
        let part = [Partial, Full, Untouched];
        let (s, r) = choose_strategy(&map, &part, true, true, |m| m != 0, nothing);
        assert_eq!((s, r.as_slice()), (Strategy::Rebuild, &[1, 2, 3][..]));
    }

    /// The choice as first written, with every candidate's list built and then compared
    /// (and the rules added since: ties to RMW, RCW where parity is not trusted). The
    /// counting version must choose the same strategy and the same reads.
    fn model_choose_strategy(
        map: &StripeMap,
        cover: &[Cover],
        whole_chunk: bool,
        parity_trusted: bool,
        in_sync: impl Fn(usize) -> bool,
        known: impl Fn(usize) -> bool,
    ) -> (Strategy, Vec<usize>) {
        let p_ok = in_sync(map.p);
        let q_ok = map.q.is_some_and(&in_sync);
        if !p_ok && !q_ok {
            return (Strategy::DataOnly, vec![]);
        }
        if whole_chunk && cover.iter().all(|c| *c == Cover::Full) {
            return (Strategy::FullStripe, vec![]);
        }
        let have = |m: usize| known(m) || in_sync(m);
        let to_read =
            |set: &[usize]| -> Vec<usize> { set.iter().copied().filter(|&m| !known(m)).collect() };
        let rcw: Vec<usize> = (0..cover.len())
            .filter(|&dd| cover[dd] != Cover::Full)
            .map(|dd| map.data[dd])
            .collect();
        let mut rmw: Vec<usize> = (0..cover.len())
            .filter(|&dd| cover[dd] != Cover::None)
            .map(|dd| map.data[dd])
            .collect();
        let (rcw_ok, rmw_ok) = (rcw.iter().all(|&m| have(m)), rmw.iter().all(|&m| have(m)));
        if p_ok {
            rmw.push(map.p);
        }
        if let Some(q) = map.q.filter(|_| q_ok) {
            rmw.push(q);
        }
        let (rcw_reads, rmw_reads) = (to_read(&rcw), to_read(&rmw));
        match (rcw_ok, rmw_ok) {
            (true, true) if parity_trusted && rmw_reads.len() <= rcw_reads.len() => {
                (Strategy::ReadModifyWrite, rmw_reads)
            }
            (true, _) => (Strategy::ReconstructWrite, rcw_reads),
            (false, true) => (Strategy::ReadModifyWrite, rmw_reads),
            (false, false) => {
                let all: Vec<usize> = (0..map.data.len() + 1 + usize::from(map.q.is_some()))
                    .map(|i| member_of_slot(map, i))
                    .filter(|&m| have(m))
                    .collect();
                (Strategy::Rebuild, to_read(&all))
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn counted_choice_matches_the_model(
            n in 3usize..=12,
            raid6 in proptest::bool::ANY,
            rotate in 0usize..12,
            covers in proptest::collection::vec(0u8..3, 12),
            whole_chunk in proptest::bool::ANY,
            trusted in proptest::bool::ANY,
            in_sync in proptest::num::u16::ANY,
            known in proptest::num::u16::ANY,
        ) {
            let raid6 = raid6 && n >= 4;
            let k = n - 1 - usize::from(raid6);
            // Members in a rotated order: P, then Q, then the data.
            let at = |i: usize| (i + rotate) % n;
            let map = StripeMap {
                p: at(0),
                q: raid6.then(|| at(1)),
                data: (0..k).map(|dd| at(dd + 1 + usize::from(raid6))).collect(),
                q_coef: if raid6 { (0..k as u8).collect() } else { SmallVec::new() },
            };
            let cover: Vec<Cover> = covers[..k]
                .iter()
                .map(|c| [Cover::None, Cover::Partial, Cover::Full][usize::from(*c)])
                .collect();
            let in_sync = |m: usize| in_sync & (1 << m) != 0;
            let known = |m: usize| known & (1 << m) != 0;
            let (s, reads) = choose_strategy(&map, &cover, whole_chunk, trusted, in_sync, known);
            let (ms, mreads) =
                model_choose_strategy(&map, &cover, whole_chunk, trusted, in_sync, known);
            proptest::prop_assert_eq!(s, ms);
            proptest::prop_assert_eq!(reads.to_vec(), mreads);
        }
    }
}
