//! Writes of a parity array: alone by read-modify-write, or through the stripe cache where
//! writes to one stripe meet and the request that finds the stripe idle leads the batch.

use std::ops::Range;
use std::sync::Arc;

use raidd_layout::{ParityGeometry, SECTOR_SIZE};
use raidd_rt::recycle::Table;
use raidd_rt::{IoVec, PooledFuture, SharedBuf};
use smallvec::SmallVec;

use super::super::join::{join_inline, Futures};
use super::batch::OpenBatch;
use super::cache::{give_cached_list, Cached, StripeCache};
use super::logged::{alone_rows, log_stripe, on_pages, Logs, StripeWrite};
use super::mailbox::{give_signal, Outcome, Signal};
use super::policy::Gather;
use super::rebuild::q_index;
use super::shares::{stripe_shares, ChunkCover, Part, Parts, StripeShares};
use super::strategy::Strategy;
use super::{stripe_end, Host, ParityIo};
use crate::error::Result;
use crate::iov::{Batch, Bytes, Req};

/// The parts taken from each stripe of a run, in stripe order.
type RunParts = Table<[Parts; 1]>;

/// The kept contents of each stripe of a run, in stripe order.
type RunKept = Table<[Vec<Cached>; 1]>;

/// Whether a write within one chunk reads no more members by read-modify-write (the chunk
/// and each parity) than by reconstruct-write (the other data chunks). Where it reads more
/// (RAID5 over 3, RAID6 over 4 or 5) small writes never go alone: the cache's planner writes
/// them better. Decided before the governor spends a write.
fn rmw_reads_least(pg: &ParityGeometry) -> bool {
    let parity = pg.members - pg.data_members();
    pg.data_members() > 1 + parity
}

impl ParityIo {
    pub(crate) async fn write(&self, host: &impl Host, offset: u64, iov: IoVec) -> Result<()> {
        let req = Req::shared(iov);
        let len = req.len() as u64;
        let pg = host.parity_shape();
        let mut shares = stripe_shares(pg, offset / SECTOR_SIZE, len / SECTOR_SIZE);
        if shares.stripes() == 1 {
            // The common small write: one share, no futures to join.
            let (stripe, cover) = shares.next().expect("one stripe");
            let alone = cover
                .single()
                .filter(|_| rmw_reads_least(pg) && self.cache.alone());
            if let Some((dd, rows)) = alone {
                let alone = PooledFuture::new(self.write_alone(host, stripe, dd, rows, &req));
                if let Some(r) = alone.await {
                    Req::give(req);
                    return r;
                }
            }
            return self
                .follow(host, self.attach(stripe, req, offset, cover, false))
                .await;
        }
        // In a block of its own (pooled): its tables would otherwise be part of every small
        // write's state.
        PooledFuture::new(self.write_stripes(host, req, offset, shares)).await
    }

    /// Writes pieces of one stripe (each an array byte offset and its windows, within the
    /// stripe) as one batch: every piece is attached before any is led, so the leader takes
    /// them all, and one parity computation (and one journal record of it) covers every row
    /// they write. The write-back cache takes a stripe's pages to the members this way
    /// (`write_back.rs`): the parity it logs must cover all the stripe's cached data.
    pub(crate) async fn write_pieces(
        &self,
        host: &impl Host,
        stripe: u64,
        pieces: Vec<(u64, IoVec)>,
    ) -> Result<()> {
        let pg = host.parity_shape();
        let shares: Vec<Share<'_>> = pieces
            .into_iter()
            .map(|(offset, iov)| {
                let req = Req::shared(iov);
                let sectors = req.len() as u64 / SECTOR_SIZE;
                let mut s = stripe_shares(pg, offset / SECTOR_SIZE, sectors);
                let (at, cover) = s.next().expect("a piece has bytes");
                assert!(
                    at == stripe && s.next().is_none(),
                    "a piece within stripe {stripe}"
                );
                self.attach(stripe, req, offset, cover, true)
            })
            .collect();
        futures::future::join_all(shares.into_iter().map(|s| self.follow(host, s)))
            .await
            .into_iter()
            .collect()
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
        host: &impl Host,
        stripe: u64,
        dd: usize,
        rows: Range<u64>,
        req: &Req,
    ) -> Option<Result<()>> {
        if host.journal().is_some() && !on_pages(&rows) {
            return None; // the journal logs whole 4 KiB rows: the cache's batch reads them
        }
        let pg = host.parity_shape();
        let map = pg.stripe_map(stripe);
        let end = stripe_end(pg, stripe);
        let data = map.data[dd];
        let mut members: SmallVec<[usize; 3]> = smallvec::smallvec![data, map.p];
        members.extend(map.q);
        let ready = || host.parity_trusted(end) && members.iter().all(|&m| host.in_sync_at(m, end));
        if !ready() {
            return None;
        }
        let _lock = self.locks.lock(stripe, stripe).await;
        if !ready() {
            return None;
        }
        give_cached_list(self.cache.claim(stripe)?);
        let mut old = match self.read_rows_mended(host, stripe, &rows, &members).await {
            Ok(old) => old,
            Err(e) => return Some(Err(e)),
        };
        if members.iter().any(|&m| old[m].is_none()) {
            return None; // a member failed the read: the cache plans without it
        }
        let len = req.len();
        debug_assert_eq!(len as u64, (rows.end - rows.start) * SECTOR_SIZE);
        let new = req.bytes(0..len);
        if let Bytes::Copy(c) = &new {
            host.counters().add(|s| &s.copied_bytes, c.len() as u64);
        }
        let d = old[data].take().expect("read above");
        let mut p = old[map.p].take().expect("read above");
        let mut q = map.q.map(|q| old[q].take().expect("read above"));
        raidd_parity::rmw_update(q_index(&map, dd), &d, &new, &mut p, q.as_deref_mut());
        let mut log = Logs::default();
        if host.ppl().is_some() {
            let mut written: SmallVec<[SmallVec<[Range<u64>; 4]>; 8]> =
                (0..pg.data_members()).map(|_| SmallVec::new()).collect();
            written[dd].push(rows.clone());
            let w = StripeWrite {
                stripe,
                map: &map,
                written,
                parity: Some(&p[..len]),
                rows: rows.clone(),
            };
            log_stripe(
                host,
                &w,
                end,
                |_, r, each| {
                    let at = ((r.start - rows.start) * SECTOR_SIZE) as usize;
                    let n = ((r.end - r.start) * SECTOR_SIZE) as usize;
                    each(r.start, &new[at..at + n]);
                },
                &mut log.ppl,
            );
        }
        let parity = [Some(SharedBuf::new(p)), q.map(SharedBuf::new)];
        if host.journal().is_some() {
            let at = (stripe, dd, &rows);
            log.journal = alone_rows(pg, at, &new, parity.iter().flatten());
        }
        drop(new);
        self.count_strategy(host, Strategy::ReadModifyWrite);
        // A member that failed while the reads were out (another request's error) is not
        // written, as in a batch: its new contents live in the parity, or the parity is
        // gone and the data stands alone.
        let sector = pg.member_sector(stripe, rows.start);
        let mut writes = Batch::default();
        if host.in_sync_at(data, end) {
            writes.push_all(data, host.member_offset(data, sector), req.take(0..len));
        }
        let [p, q] = parity;
        let parity_bufs = p.map(|p| (map.p, p)).into_iter().chain(map.q.zip(q));
        for (m, buf) in parity_bufs.filter(|(m, _)| host.in_sync_at(*m, end)) {
            let at = host.member_offset(m, sector);
            writes.push(m, at, buf.slice(0..len).expect("parity is only read"));
        }
        if let Err(e) = host.check_alive() {
            return Some(Err(e));
        }
        if log.is_empty() {
            return Some(self.written(host, &host.issue_writes(writes.into_ios()).await));
        }
        Some(PooledFuture::new(self.issue_logged(host, writes, log)).await)
    }

    /// Attaches a request's share of a stripe to its head (`logged`: its data is in the
    /// write journal already).
    fn attach(
        &self,
        stripe: u64,
        req: Arc<Req>,
        offset: u64,
        cover: ChunkCover,
        logged: bool,
    ) -> Share<'_> {
        Share {
            cache: &self.cache,
            stripe,
            signal: Some(self.cache.attach(stripe, req, offset, cover, logged)),
            armed: true,
        }
    }

    /// A write over several stripes. Consecutive whole stripes that this request finds idle
    /// are led together as one run, so their member writes join per member: a long
    /// sequential write becomes one vectored write per member, not one per member and
    /// stripe (seed 002: I/O split into small units). Every other share goes its own way.
    async fn write_stripes(
        &self,
        host: &impl Host,
        req: Arc<Req>,
        offset: u64,
        stripes: StripeShares,
    ) -> Result<()> {
        let data = host.parity_shape().data_members();
        // Every share is attached (and guarded) before anything waits.
        let mut shares: Table<[(Share<'_>, bool); 4]> = stripes
            .map(|(stripe, cover)| {
                let w = cover.covers_stripe(data);
                (self.attach(stripe, req.clone(), offset, cover, false), w)
            })
            .collect();
        drop(req);
        let mut shares = shares.drain(..).peekable();
        let max_run = host
            .journal()
            .map_or(usize::MAX, |j| j.run_limit(host.parity_shape()));
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
                while let Some((next, true)) = shares.peek().filter(|_| run.len() < max_run) {
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
                    self.follow(host, run.pop().expect("one share")),
                ));
            } else {
                futs.push(PooledFuture::new(self.lead_run(host, run)));
            }
        }
        join_inline(futs).await.into_iter().collect()
    }

    /// Waits for a share's batch to be written, leading the stripe whenever it is handed
    /// this share.
    async fn follow(&self, host: &impl Host, mut share: Share<'_>) -> Result<()> {
        loop {
            match share.signal().wait().await {
                Outcome::Done(r) => {
                    share.armed = false;
                    return r;
                }
                Outcome::Lead => self.lead(host, &[(share.stripe, share.signal())]).await,
            }
        }
    }

    /// Leads consecutive stripes whose leads these shares hold, as one batch of member I/O.
    async fn lead_run(&self, host: &impl Host, run: Run<'_>) -> Result<()> {
        let held: Table<[(u64, &Signal); 4]> = run
            .iter()
            .map(|s| {
                let lead = s.signal().take_lead();
                assert!(lead, "stripe {} led by another", s.stripe);
                (s.stripe, s.signal())
            })
            .collect();
        self.lead(host, &held).await;
        drop(held);
        // Each share's outcome is posted; collect them in order.
        let mut out = Ok(());
        for share in run {
            let r = self.follow(host, share).await;
            if out.is_ok() {
                out = r;
            }
        }
        out
    }

    /// Runs one batch on each of the consecutive stripes these signals lead, then hands each
    /// stripe on.
    async fn lead(&self, host: &impl Host, held: &[(u64, &Signal)]) {
        let (parts, mut kept) = (
            RunParts::with_room(held.len()),
            RunKept::with_room(held.len()),
        );
        let mut leading = Leading {
            cache: &self.cache,
            held,
            parts,
            done: false,
        };
        let pg = host.parity_shape();
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
            ([parts], [kept]) => self.run_stripe(host, held[0].0, parts, kept).await,
            // In a block of its own (pooled): a run's tables would otherwise be part of every
            // small write's state.
            (parts, kept) => PooledFuture::new(self.run_batches(host, held, parts, kept)).await,
        };
        let mut parts = std::mem::take(&mut leading.parts);
        leading.done = true;
        for (((stripe, _), parts), kept) in held.iter().zip(parts.drain(..)).zip(kept.drain(..)) {
            self.cache.finish(*stripe, kept, parts, &r);
        }
    }

    /// Writes the parts taken from one stripe: as one batch, unless the array keeps a
    /// partial parity log and they write chunks on both sides of one they leave alone at
    /// some row: then one part after the other, as md keeps such writes apart (the log
    /// names consecutive chunks only; see `raidd_md::ppl::segments`).
    async fn run_stripe(
        &self,
        host: &impl Host,
        stripe: u64,
        parts: &[Part],
        kept: &mut Vec<Cached>,
    ) -> Result<()> {
        if host.ppl().is_none() || parts.len() < 2 || !gap_between(host, parts) {
            return self.run_batch(host, stripe, parts, kept).await;
        }
        let mut out = Ok(());
        for i in 0..parts.len() {
            let r = self.run_batch(host, stripe, &parts[i..=i], kept).await;
            if out.is_ok() {
                out = r;
            }
        }
        out
    }

    /// Writes one stripe's batch. On return `kept` holds its contents worth keeping.
    async fn run_batch(
        &self,
        host: &impl Host,
        stripe: u64,
        parts: &[Part],
        kept: &mut Vec<Cached>,
    ) -> Result<()> {
        let Some(mut open) = self.open_batch(host, stripe, parts, kept) else {
            return Ok(());
        };
        let mut writes = Batch::default();
        let mut log = Logs::default();
        let mut r = self
            .stage_batch(host, &mut open, parts, &mut writes, &mut log)
            .await;
        if r.is_ok() && log.is_empty() {
            // Awaited here, not in a helper future: one future less moved per small write.
            r = self.written(host, &host.issue_writes(writes.into_ios()).await);
        } else if r.is_ok() {
            r = PooledFuture::new(self.issue_logged(host, writes, log)).await;
        }
        self.settle_batch(open, r.is_ok(), kept);
        r
    }

    /// Writes the batches of consecutive stripes (`parts[i]` on `held[i]`) as one: reads
    /// and parity stripe by stripe, then every member write at once, joined per member
    /// across the stripes. On return `kept[i]` holds stripe i's contents worth keeping.
    async fn run_batches(
        &self,
        host: &impl Host,
        held: &[(u64, &Signal)],
        parts: &[Parts],
        kept: &mut [Vec<Cached>],
    ) -> Result<()> {
        let mut open: Table<[(usize, OpenBatch); 4]> = Table::with_room(held.len());
        for (i, (stripe, _)) in held.iter().enumerate() {
            if let Some(o) = self.open_batch(host, *stripe, &parts[i], &mut kept[i]) {
                open.push((i, o));
            }
        }
        let mut writes = Batch::default();
        let mut log = Logs::default();
        let mut r = Ok(());
        for (i, o) in &mut open {
            r = self
                .stage_batch(host, o, &parts[*i], &mut writes, &mut log)
                .await;
            if r.is_err() {
                break;
            }
        }
        if r.is_ok() {
            // The run's entries join every log they go to at once (`Ppl::append`).
            r = self.issue_logged(host, writes, log).await;
        }
        for (i, o) in open.drain(..) {
            self.settle_batch(o, r.is_ok(), &mut kept[i]);
        }
        r
    }

    /// A batch's outcome from its member writes' results: a member that failed was failed,
    /// and the batch still succeeds while the array lives (each stripe lost at most what its
    /// parity covers).
    pub(super) fn written(
        &self,
        host: &impl Host,
        results: &[(usize, std::io::Result<()>)],
    ) -> Result<()> {
        if results.iter().any(|(_, r)| r.is_err()) {
            host.check_alive()
        } else {
            Ok(())
        }
    }
}

/// Whether parts of one stripe write, at some row, chunks on both sides of one they leave
/// alone.
fn gap_between(host: &impl Host, parts: &[Part]) -> bool {
    let mut written: SmallVec<[SmallVec<[Range<u64>; 4]>; 8]> =
        (0..host.parity_shape().data_members())
            .map(|_| SmallVec::new())
            .collect();
    for p in parts {
        for (dd, r) in p.cover.iter() {
            written[dd].push(r);
        }
    }
    raidd_md::ppl::has_gap(&written)
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
            give_signal(s);
        }
    }
}

/// A leader's hold on its stripes; if its future is dropped each lead passes on and the
/// parts it took are told they failed.
struct Leading<'a, 'b> {
    cache: &'a StripeCache,
    held: &'b [(u64, &'a Signal)],
    /// The parts taken so far, per held stripe in order.
    parts: RunParts,
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
