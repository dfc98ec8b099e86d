//! One stripe's batch: what its parts write, the reads and parity that keep the stripe
//! right, and the member writes, staged for the leader to issue.

use std::ops::Range;

use raidd_layout::{ParityGeometry, StripeMap, SECTOR_SIZE};
use raidd_rt::recycle::{keep_vec, pop_vec};
use raidd_rt::{AlignedBuf, BufSlice, IoVec, SharedBuf};
use smallvec::SmallVec;

use super::super::counters::Counters;
use super::super::journal::JournalRow;
use super::cache::{cached_list, Blocks, Cached, CACHE_MAX_RANGES, CACHE_MAX_ROWS};
use super::logged::{lend, log_stripe, pieces_within, Logs, StripeWrite};
use super::rebuild::{q_index, rebuild_blocks};
use super::shares::{Part, Segs};
use super::strategy::{choose_strategy, Cover, Strategy};
use super::{stripe_end, Host, ParityIo};
use crate::error::Result;
use crate::iov::{Batch, Bytes};

/// An empty list for a chunk's pieces, from this thread's lists when it has one.
fn piece_list() -> Vec<ChunkPiece> {
    pop_vec()
}

/// Empties a chunk's pieces (their windows are released now) and keeps the list.
fn give_piece_list(list: Vec<ChunkPiece>) {
    // A chunk of 64 KiB gathered from 4 KiB writes comes in sixteen pieces.
    keep_vec(list, 256);
}

impl ParityIo {
    /// A stripe's batch as it starts: what its parts write, and the rows it works over (kept
    /// rows that hold the batch, or its own). `None` for a batch with nothing to write.
    pub(super) fn open_batch(
        &self,
        host: &impl Host,
        stripe: u64,
        parts: &[Part],
        kept: &mut Vec<Cached>,
    ) -> Option<OpenBatch> {
        let pg = host.parity_shape();
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
        // The journal logs whole 4 KiB rows (md's pages): the batch works over them.
        let span = match host.journal() {
            Some(_) => page_rows(&hull),
            None => hull.clone(),
        };
        let (rows, old) = match kept
            .iter()
            .position(|c| c.rows.start <= span.start && span.end <= c.rows.end)
        {
            Some(i) => {
                self.cache.hit();
                let c = kept.remove(i);
                (c.rows, c.blocks)
            }
            None => (span, (0..pg.members).map(|_| None).collect::<Blocks>()),
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
    pub(super) fn settle_batch(&self, mut o: OpenBatch, ok: bool, kept: &mut Vec<Cached>) {
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
                *kept = cached_list();
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
    /// Where the array keeps a partial parity log, the stripe's entries go into `log`.
    pub(super) async fn stage_batch(
        &self,
        host: &impl Host,
        o: &mut OpenBatch,
        parts: &[Part],
        writes: &mut Batch<BufSlice>,
        log: &mut Logs,
    ) -> Result<()> {
        let strategy = self.plan(host, o).await?;
        self.count_strategy(host, strategy);
        let new = NewRows {
            pg: host.parity_shape(),
            stripe: o.stripe,
            rows: o.rows.clone(),
            parts,
            counters: host.counters(),
        };
        if strategy == Strategy::Rebuild {
            // A member that is neither current nor known is what the rebuild recovers.
            rebuild_blocks(&o.map, &mut o.old, new.len())?;
        }
        // The journal's pages are the old contents with the new written over: taken before
        // the strategy below turns the old contents into the new.
        let journal = match host.journal() {
            Some(_) => {
                if strategy == Strategy::DataOnly {
                    self.read_partial(host, o).await?;
                }
                Some(new.journal_data(o))
            }
            None => None,
        };
        // A full stripe's data chunks, in parity order. A chunk that one part writes whole
        // over the rows is a window lent for parity that stays here to be the chunk's
        // member write too: lent once, not again.
        let mut chunks = Chunks::new();
        let parity = match strategy {
            Strategy::DataOnly => {
                // Parity is gone, so nothing below keeps the rows known: drop them.
                o.old.iter_mut().for_each(|b| *b = None);
                Parity::default()
            }
            Strategy::ReadModifyWrite => new.update_parity(o),
            Strategy::FullStripe | Strategy::ReconstructWrite | Strategy::Rebuild => {
                chunks = new.chunks(o);
                let parity = new.generate_parity(o, &chunks);
                new.keep_chunks(o, &mut chunks);
                parity
            }
        };
        let end = stripe_end(host.parity_shape(), o.stripe);
        if host.ppl().is_some() {
            let w = StripeWrite {
                stripe: o.stripe,
                map: &o.map,
                written: StripeWrite::written_of(&o.segs),
                parity: parity.bufs[0].as_deref().filter(|_| parity.valid[0]),
                rows: o.rows.clone(),
            };
            let segs = &o.segs;
            log_stripe(
                host,
                &w,
                end,
                |dd, rows, each| pieces_within(&segs[dd], rows, |r, p| new.bytes(dd, r, p), each),
                &mut log.ppl,
            );
        }
        self.queue_data(host, o, &new, &mut chunks, end, writes);
        self.queue_parity(host, o, parity, end, writes);
        if let Some(data) = journal {
            log.destage = parts.iter().all(|p| p.logged);
            log.journal
                .extend(journal_rows(host.parity_shape(), o, data));
        }
        Ok(())
    }

    /// Reads the old contents of the data chunks the batch writes part of, over its rows,
    /// where no strategy read them (parity gone: data alone is written): the journal logs
    /// whole pages.
    async fn read_partial(&self, host: &impl Host, o: &mut OpenBatch) -> Result<()> {
        let end = stripe_end(host.parity_shape(), o.stripe);
        let reads: SmallVec<[usize; 8]> = o
            .segs
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.is_empty() && !s.covers(&o.rows))
            .map(|(dd, _)| o.map.data[dd])
            .filter(|&m| o.old[m].is_none() && host.in_sync_at(m, end))
            .collect();
        if reads.is_empty() {
            return Ok(());
        }
        let got = self.read_rows(host, o.stripe, &o.rows, &reads).await?;
        for (m, b) in got.into_iter().enumerate() {
            if let Some(b) = b {
                o.old[m] = Some(b);
            }
        }
        Ok(())
    }

    /// Chooses the batch's strategy and reads what it needs into `o.old`; a member that
    /// fails a read is planned without, until the stripe has lost more than parity covers.
    async fn plan(&self, host: &impl Host, o: &mut OpenBatch) -> Result<Strategy> {
        let pg = host.parity_shape();
        let chunk = u64::from(pg.chunk_sectors);
        let cover: SmallVec<[Cover; 16]> = o
            .segs
            .iter()
            .map(|s| {
                if s.covers(&o.rows) {
                    Cover::Full
                } else if s.is_empty() {
                    Cover::None
                } else {
                    Cover::Partial
                }
            })
            .collect();
        let end = stripe_end(pg, o.stripe);
        let trusted = host.parity_trusted(end);
        for _attempt in 0..=pg.members {
            host.check_alive()?;
            let (strategy, reads) = choose_strategy(
                &o.map,
                &cover,
                o.rows == (0..chunk),
                trusted,
                |m| host.in_sync_at(m, end),
                |m| o.old[m].is_some(),
            );
            if reads.is_empty() {
                return Ok(strategy);
            }
            // Rows a member could not read are mended while the batch holds the stripe.
            let got = self
                .read_rows_mended(host, o.stripe, &o.rows, &reads)
                .await?;
            let mut complete = true;
            for (m, b) in got.into_iter().enumerate() {
                if let Some(b) = b {
                    o.old[m] = Some(b);
                } else if reads.contains(&m) {
                    complete = false; // that member failed: plan again without it
                }
            }
            if complete {
                return Ok(strategy);
            }
        }
        Err(host.lost_error())
    }

    /// Data from the clients' buffers (zero copy), to the members that take it.
    fn queue_data(
        &self,
        host: &impl Host,
        o: &OpenBatch,
        new: &NewRows<'_>,
        chunks: &mut Chunks,
        end: u64,
        writes: &mut Batch<BufSlice>,
    ) {
        let pg = host.parity_shape();
        let (stripe, map, rows) = (o.stripe, &o.map, &o.rows);
        for (dd, s) in o.segs.iter().enumerate() {
            let m = map.data[dd];
            if !host.in_sync_at(m, end) {
                continue; // its new contents live in the parity
            }
            if let Some(w) = chunks
                .get_mut(q_index(map, dd))
                .and_then(NewChunk::take_window)
            {
                debug_assert!(matches!(s.0.as_slice(), [(r, _)] if r == rows));
                let at = host.member_offset(m, pg.member_sector(stripe, rows.start));
                writes.push(m, at, w);
                continue;
            }
            for (r, part) in &s.0 {
                let at = host.member_offset(m, pg.member_sector(stripe, r.start));
                writes.push_all(m, at, new.take(dd, r, *part));
            }
        }
    }

    /// Parity from scratch buffers over the rows the batch changed, to the members that
    /// take it; the buffers stay with the batch until it settles.
    fn queue_parity(
        &self,
        host: &impl Host,
        o: &mut OpenBatch,
        parity: Parity,
        end: u64,
        writes: &mut Batch<BufSlice>,
    ) {
        let sector = host.parity_shape().member_sector(o.stripe, o.hull.start);
        let span = byte_range(&o.rows, &o.hull);
        let members = [Some(o.map.p), o.map.q];
        for ((member, buf), ok) in members.into_iter().zip(parity.bufs).zip(parity.valid) {
            let (Some(m), Some(buf)) = (member, buf) else {
                continue;
            };
            let shared = SharedBuf::new(buf);
            if host.in_sync_at(m, end) {
                debug_assert!(ok, "writing parity computed from unknown old parity");
                writes.push(
                    m,
                    host.member_offset(m, sector),
                    shared.slice(span.clone()).expect("fresh"),
                );
            }
            o.parity.push((m, shared, ok));
        }
    }

    pub(super) fn count_strategy(&self, host: &impl Host, s: Strategy) {
        host.counters().add(
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

/// A stripe's batch between its start and its settling.
pub(super) struct OpenBatch {
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

/// A full stripe's data chunks' new contents, in parity order (see [`NewChunk`]).
type Chunks = SmallVec<[Option<NewChunk>; 8]>;

/// New P and Q of a batch, and whether each is right: read-modify-write on a parity block
/// whose old contents were neither read nor known computes garbage, which is not written
/// and must not be kept either.
struct Parity {
    bufs: [Option<AlignedBuf>; 2],
    valid: [bool; 2],
}

impl Default for Parity {
    fn default() -> Parity {
        Parity {
            bufs: [None, None],
            valid: [true, true],
        }
    }
}

/// Sectors in a journal page (md's 4 KiB stripe unit).
const PAGE_ROWS: u64 = raidd_md::journal::BLOCK_SECTORS;

/// `r` widened to whole journal pages.
fn page_rows(r: &Range<u64>) -> Range<u64> {
    r.start / PAGE_ROWS * PAGE_ROWS..r.end.div_ceil(PAGE_ROWS) * PAGE_ROWS
}

/// A batch's journal rows: its data pages (`data`: chunk row, data chunk, page) grouped by
/// 4 KiB row, each row with its new P (and Q) where the batch has parity to write.
fn journal_rows(
    pg: &ParityGeometry,
    o: &OpenBatch,
    data: Vec<(u64, usize, BufSlice)>,
) -> Vec<JournalRow> {
    let mut rows: std::collections::BTreeMap<u64, JournalRow> = Default::default();
    // Every row the batch writes is logged with its parity, data pages or none.
    for s in &o.segs {
        for (r, _) in &s.0 {
            let p = page_rows(r);
            for start in (p.start..p.end).step_by(PAGE_ROWS as usize) {
                rows.entry(start).or_default();
            }
        }
    }
    for (start, dd, page) in data {
        let row = rows.entry(start).or_default();
        row.data.push((pg.array_sector(o.stripe, dd, start), page));
    }
    // The batch's new parity, as queued for the members: lent to the journal too.
    let buf_of = |m: Option<usize>| {
        o.parity
            .iter()
            .find(|(pm, _, _)| Some(*pm) == m)
            .map(|(_, shared, ok)| (shared, *ok))
    };
    let p = buf_of(Some(o.map.p)).filter(|(_, ok)| *ok).map(|(b, _)| b);
    let q = buf_of(o.map.q).map(|(b, _)| b);
    for (start, row) in rows.iter_mut() {
        let Some(p) = p else { break };
        let at = byte_range(&o.rows, &(*start..*start + PAGE_ROWS));
        let mut pages: SmallVec<[BufSlice; 2]> =
            smallvec::smallvec![p.slice(at.clone()).expect("parity is only read")];
        if o.map.q.is_some() {
            // A Q not computed right belongs to a member not in sync: nothing reads it.
            pages.push(match q {
                Some(q) => q.slice(at).expect("parity is only read"),
                None => lend(AlignedBuf::zeroed(at.len())),
            });
        }
        row.parity = Some((pg.member_sector(o.stripe, *start), pages));
    }
    rows.into_values().collect()
}

/// Byte range of `r` within a batch's rows starting at `rows.start`.
fn byte_range(rows: &Range<u64>, r: &Range<u64>) -> Range<usize> {
    ((r.start - rows.start) * SECTOR_SIZE) as usize..((r.end - rows.start) * SECTOR_SIZE) as usize
}

/// What a batch's parts write over its rows, and where: the parity of the batch is
/// computed from these and from `OpenBatch::old`.
struct NewRows<'a> {
    pg: &'a ParityGeometry,
    stripe: u64,
    rows: Range<u64>,
    parts: &'a [Part],
    counters: &'a Counters,
}

impl NewRows<'_> {
    /// Bytes of the batch's rows per member.
    fn len(&self) -> usize {
        ((self.rows.end - self.rows.start) * SECTOR_SIZE) as usize
    }

    /// Byte range of `r` within the batch's rows.
    fn at(&self, r: &Range<u64>) -> Range<usize> {
        byte_range(&self.rows, r)
    }

    /// Counts bytes copied between buffers.
    fn copied(&self, n: usize) {
        self.counters.add(|s| &s.copied_bytes, n as u64);
    }

    /// Byte range in part `part`'s request of data chunk `dd`'s rows `r`.
    fn in_request(&self, dd: usize, r: &Range<u64>, part: usize) -> Range<usize> {
        let p = &self.parts[part];
        let start = self.pg.array_sector(self.stripe, dd, r.start) * SECTOR_SIZE - p.offset;
        let n = (r.end - r.start) * SECTOR_SIZE;
        start as usize..(start + n) as usize
    }

    /// Part `part`'s bytes for data chunk `dd` over rows `r` (copied only where they
    /// straddle the client's windows).
    fn bytes(&self, dd: usize, r: &Range<u64>, part: usize) -> Bytes {
        let b = self.parts[part].req.bytes(self.in_request(dd, r, part));
        if let Bytes::Copy(c) = &b {
            self.copied(c.len());
        }
        b
    }

    /// Part `part`'s windows for data chunk `dd` over rows `r`, for the member write.
    fn take(&self, dd: usize, r: &Range<u64>, part: usize) -> IoVec {
        self.parts[part].req.take(self.in_request(dd, r, part))
    }

    /// The new contents of every 4 KiB row of a data chunk the batch writes, for the
    /// journal: (chunk row, data chunk, page). A page the batch writes part of is the old
    /// contents with the new written over; one whose old contents are not known (its member
    /// lost, and nothing rebuilt it) is left out.
    fn journal_data(&self, o: &OpenBatch) -> Vec<(u64, usize, BufSlice)> {
        let mut out = Vec::new();
        for (dd, s) in o.segs.iter().enumerate() {
            let mut starts: SmallVec<[u64; 16]> = SmallVec::new();
            for (r, _) in &s.0 {
                let p = page_rows(r);
                starts.extend((p.start..p.end).step_by(PAGE_ROWS as usize));
            }
            starts.sort_unstable();
            starts.dedup();
            for start in starts {
                let page_rows = start..start + PAGE_ROWS;
                // A page one part writes whole is lent from its window, not copied.
                let whole =
                    s.0.iter()
                        .find(|(r, _)| r.start <= start && start + PAGE_ROWS <= r.end);
                if let Some((_, part)) = whole {
                    if self.parts[*part].logged {
                        // The write-back cache logged this page when it took it: the row
                        // logs its parity alone (md's flush of a cached stripe).
                        continue;
                    }
                    let page = match self.bytes(dd, &page_rows, *part) {
                        Bytes::Window(w) => w,
                        Bytes::Copy(c) => lend(c),
                    };
                    out.push((start, dd, page));
                    continue;
                }
                let mut page = AlignedBuf::zeroed(PAGE_ROWS as usize * SECTOR_SIZE as usize);
                if !s.covers(&page_rows) {
                    let Some(old) = &o.old[o.map.data[dd]] else {
                        continue;
                    };
                    page.copy_from_slice(&old[self.at(&page_rows)]);
                }
                pieces_within(
                    s,
                    &page_rows,
                    |r, p| self.bytes(dd, r, p),
                    &mut |row, bytes| {
                        let at = ((row - start) * SECTOR_SIZE) as usize;
                        page[at..at + bytes.len()].copy_from_slice(bytes);
                    },
                );
                out.push((start, dd, lend(page)));
            }
        }
        out
    }

    /// Read-modify-write: the old parity updated by the difference of old and new data.
    /// With `o.keep`, the old data is brought up to date as well.
    fn update_parity(&self, o: &mut OpenBatch) -> Parity {
        let (map, old, len) = (&o.map, &mut o.old, self.len());
        let valid = [
            old[map.p].is_some(),
            map.q.is_some_and(|q| old[q].is_some()),
        ];
        let mut p = old[map.p].take().unwrap_or_else(|| AlignedBuf::zeroed(len));
        let mut q = map
            .q
            .map(|q| old[q].take().unwrap_or_else(|| AlignedBuf::zeroed(len)));
        for (dd, s) in o.segs.iter().enumerate() {
            let m = map.data[dd];
            let qi = q_index(map, dd);
            for (r, part) in &s.0 {
                let new = self.bytes(dd, r, *part);
                let d = old[m].as_mut().expect("RMW read the old data");
                let w = self.at(r);
                raidd_parity::rmw_update(
                    qi,
                    &d[w.clone()],
                    &new,
                    &mut p[w.clone()],
                    q.as_mut().map(|q| &mut q[w.clone()]),
                );
                if o.keep {
                    d[w].copy_from_slice(&new);
                    self.copied(new.len());
                }
            }
        }
        Parity {
            bufs: [Some(p), q],
            valid,
        }
    }

    /// Every data chunk's new contents over the rows, in parity order: borrowed from a
    /// request where one part writes the whole chunk, from several where parts together
    /// write it (a full stripe gathered from small requests), else old + new.
    fn chunks(&self, o: &mut OpenBatch) -> Chunks {
        let map = &o.map;
        let mut chunks: Chunks = (0..o.segs.len()).map(|_| None).collect();
        for (dd, s) in o.segs.iter().enumerate() {
            let m = map.data[dd];
            let b = match s.0.as_slice() {
                [(r, part)] if *r == self.rows => NewChunk::Whole(self.bytes(dd, r, *part)),
                list => match o.old[m].take() {
                    Some(mut d) => {
                        for (r, part) in list {
                            let new = self.bytes(dd, r, *part);
                            d[self.at(r)].copy_from_slice(&new);
                            self.copied(new.len());
                        }
                        NewChunk::Whole(Bytes::Copy(d))
                    }
                    None => {
                        // Nothing old was read: the parts write every row, and parity is
                        // generated piece by piece from their windows (segments are sorted
                        // and disjoint, so the pieces are too).
                        assert!(s.covers(&self.rows), "old data was read or rebuilt");
                        let mut pieces = piece_list();
                        pieces.extend(
                            list.iter()
                                .map(|(r, part)| (self.at(r), self.bytes(dd, r, *part))),
                        );
                        NewChunk::Pieces(pieces)
                    }
                },
            };
            chunks[q_index(map, dd)] = Some(b);
        }
        chunks
    }

    /// P (and Q) generated from every data chunk. Over kept rows wider than the batch,
    /// parity changes only where the batch writes: it starts from the kept parity and
    /// generates the hull's rows alone, not all the kept rows.
    fn generate_parity(&self, o: &mut OpenBatch, chunks: &Chunks) -> Parity {
        let (map, old, len) = (&o.map, &mut o.old, self.len());
        let parity_known = old[map.p].is_some() && map.q.is_none_or(|q| old[q].is_some());
        let span = if parity_known {
            self.at(&o.hull)
        } else {
            0..len
        };
        // Generation writes every byte of P and Q over the span; outside it they are the
        // kept contents, still right.
        let mut parity_buf = |m: usize| match old[m].take() {
            Some(b) if parity_known => b,
            _ => AlignedBuf::for_overwrite(len),
        };
        let mut p = parity_buf(map.p);
        let mut q = map.q.map(&mut parity_buf);
        for part in stretches(chunks, span).windows(2).map(|w| w[0]..w[1]) {
            let data: SmallVec<[&[u8]; 8]> = chunks
                .iter()
                .map(|c| c.as_ref().expect("every chunk").slice(part.clone()))
                .collect();
            match q.as_mut() {
                Some(q) => raidd_parity::gen_pq(&data, &mut p[part.clone()], &mut q[part.clone()]),
                None => raidd_parity::xor_gen(&mut p[part.clone()], &data),
            }
        }
        Parity {
            bufs: [Some(p), q],
            valid: [true, true],
        }
    }

    /// Keeps in `o.old` what is now known of each data chunk (copying borrowed chunks only
    /// when the batch keeps its rows); a window lent whole stays in `chunks` for the member
    /// write.
    fn keep_chunks(&self, o: &mut OpenBatch, chunks: &mut Chunks) {
        let (map, len, keep) = (&o.map, self.len(), o.keep);
        for (dd, c) in o.segs.iter().enumerate() {
            let m = map.data[dd];
            let slot = &mut chunks[q_index(map, dd)];
            let known = |chunk: &NewChunk| {
                keep.then(|| {
                    let mut b = AlignedBuf::for_overwrite(len);
                    for (w, bytes) in chunk.pieces() {
                        self.copied(w.len());
                        b[w].copy_from_slice(bytes);
                    }
                    b
                })
            };
            o.old[m] = match slot.take() {
                Some(NewChunk::Whole(Bytes::Copy(b))) => Some(b),
                Some(chunk @ NewChunk::Whole(Bytes::Window(_))) => {
                    let b = known(&chunk);
                    *slot = Some(chunk); // the member write
                    b
                }
                Some(chunk) => {
                    let b = known(&chunk);
                    chunk.recycle();
                    b
                }
                None => None,
            };
            debug_assert!(!c.is_empty() || o.old[m].is_some());
        }
    }
}

/// The cuts of `span` into stretches that every chunk holds in one piece: one generation
/// each (the whole span unless some chunk came in pieces).
fn stretches(chunks: &Chunks, span: Range<usize>) -> SmallVec<[usize; 32]> {
    let mut cuts: SmallVec<[usize; 32]> = smallvec::smallvec![span.start, span.end];
    for c in chunks {
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
    cuts
}

/// A data chunk's new contents over a batch's rows, for parity generation.
enum NewChunk {
    /// One run of bytes over all the rows (borrowed from a request, or old + new copied).
    Whole(Bytes),
    /// Several parts' windows that together cover the rows, in row order, each with the
    /// byte range of the rows it covers (a list from the thread's, so that the chunk table
    /// stays small: inline, four pieces made each entry 200 bytes).
    Pieces(Vec<ChunkPiece>),
}

/// A piece of a chunk's new contents: the byte range of the rows it covers, and its bytes.
pub(crate) type ChunkPiece = (Range<usize>, Bytes);

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
            Some(NewChunk::Whole(Bytes::Window(w))) => Some(w),
            other => {
                *slot = other;
                None
            }
        }
    }

    /// Gives a list of pieces back to the thread's (its windows are released now).
    fn recycle(self) {
        if let NewChunk::Pieces(list) = self {
            give_piece_list(list);
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
