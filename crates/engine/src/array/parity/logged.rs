//! A batch's member writes behind the array's log, where it keeps one:
//! - md's partial parity log (`array/ppl.rs`): the entries of each stripe the batch writes,
//!   with their partial parity, go to the stripe's parity member's log;
//! - md's write journal (`array/journal.rs`): the new data pages and parity of every 4 KiB
//!   row the batch writes go to the journal member.
//!
//! Either is durable before any member write is issued; once the writes are done the batch
//! releases its place in the log.
//!
//! The partial parity of rows written to data chunks `D` is the XOR of the other data
//! chunks there; it is computed as the new parity XOR the new data of `D`, which every
//! strategy has in hand (read-modify-write never reads the chunks outside `D`).

use std::ops::Range;

use raidd_layout::{ParityGeometry, StripeMap, SECTOR_SIZE};
use raidd_rt::{AlignedBuf, BufSlice, SharedBuf};
use smallvec::SmallVec;

use super::super::journal::JournalRow;
use super::super::ppl::LogItem;
use super::shares::Segs;
use super::{Host, ParityIo};
use crate::error::Result;
use crate::iov::{Batch, Bytes};

/// A batch's partial parity log entries, until appended.
pub(crate) type LogItems = SmallVec<[LogItem; 2]>;

/// What a batch logs before its member writes: partial parity log entries, or journal rows
/// (an array keeps one log or the other, as md does).
#[derive(Debug, Default)]
pub(crate) struct Logs {
    pub(crate) ppl: LogItems,
    pub(crate) journal: Vec<JournalRow>,
    /// Every part is the write-back cache's (logged already): the rows are a destage's.
    pub(crate) destage: bool,
}

impl Logs {
    pub(crate) fn is_empty(&self) -> bool {
        self.ppl.is_empty() && self.journal.is_empty()
    }
}

/// What [`log_stripe`] needs of one stripe's batch.
pub(crate) struct StripeWrite<'a> {
    pub(crate) stripe: u64,
    pub(crate) map: &'a StripeMap,
    /// Per data chunk, the rows written (sorted, disjoint).
    pub(crate) written: SmallVec<[SmallVec<[Range<u64>; 4]>; 8]>,
    /// The stripe's new parity over `rows`, when it is right.
    pub(crate) parity: Option<&'a [u8]>,
    pub(crate) rows: Range<u64>,
}

impl StripeWrite<'_> {
    /// The rows each data chunk of a batch's segments writes.
    pub(crate) fn written_of(segs: &[Segs]) -> SmallVec<[SmallVec<[Range<u64>; 4]>; 8]> {
        segs.iter()
            .map(|s| s.0.iter().map(|(r, _)| r.clone()).collect())
            .collect()
    }
}

/// The entries a stripe write logs (none without a log, or where the stripe's parity is
/// not written: then there is no parity to protect, as md skips its log). `new(dd, rows)`
/// gives data chunk `dd`'s new bytes over rows the batch writes there, in pieces.
pub(crate) fn log_stripe(
    host: &impl Host,
    w: &StripeWrite<'_>,
    end: u64,
    mut new: impl FnMut(usize, &Range<u64>, &mut dyn FnMut(u64, &[u8])),
    out: &mut LogItems,
) {
    let (Some(ppl), Some(parity)) = (host.ppl(), w.parity) else {
        return;
    };
    let p = w.map.p;
    if !host.in_sync_at(p, end) {
        return;
    }
    let pg: &ParityGeometry = host.parity_shape();
    let chunk = u64::from(pg.chunk_sectors);
    let max_rows = (ppl.max_pp() as u64 / SECTOR_SIZE).min(chunk);
    let stripe_sector = pg.array_sector(w.stripe, 0, 0);
    for seg in raidd_md::ppl::segments(&w.written, max_rows) {
        let entry = seg.entry(stripe_sector, chunk, p as u32);
        let mut pp = Vec::new();
        if !seg.full {
            let at = |r: u64| ((r - w.rows.start) * SECTOR_SIZE) as usize;
            pp.extend_from_slice(&parity[at(seg.rows.start)..at(seg.rows.end)]);
            for dd in seg.disks.clone() {
                new(dd as usize, &seg.rows, &mut |row, bytes| {
                    let o = ((row - seg.rows.start) * SECTOR_SIZE) as usize;
                    raidd_parity::xor_into(&mut pp[o..o + bytes.len()], bytes);
                });
            }
        }
        debug_assert_eq!(pp.len(), entry.pp_size as usize);
        out.push(LogItem { role: p, entry, pp });
    }
}

/// Whether chunk rows `r` are whole journal pages (md's 4 KiB stripe units).
pub(crate) fn on_pages(r: &Range<u64>) -> bool {
    let page = raidd_md::journal::BLOCK_SECTORS;
    r.start.is_multiple_of(page) && r.end.is_multiple_of(page)
}

/// The journal rows of a write alone on its stripe (`at`: stripe, data chunk, its rows,
/// whole pages): each page of `new` with the new P (and Q) of its row, lent from the
/// buffers the member writes take.
pub(crate) fn alone_rows<'a>(
    pg: &ParityGeometry,
    (stripe, dd, rows): (u64, usize, &Range<u64>),
    new: &Bytes,
    parity: impl Iterator<Item = &'a SharedBuf> + Clone,
) -> Vec<JournalRow> {
    debug_assert!(
        on_pages(rows),
        "a write alone with a journal is whole pages"
    );
    let page = raidd_md::journal::BLOCK_SECTORS;
    let lent = match new {
        Bytes::Window(w) => w.clone(),
        Bytes::Copy(c) => lend(AlignedBuf::from_slice(c)),
    };
    (rows.start..rows.end)
        .step_by(page as usize)
        .map(|start| {
            let at = ((start - rows.start) * SECTOR_SIZE) as usize;
            let span = at..at + (page * SECTOR_SIZE) as usize;
            let parity = parity
                .clone()
                .map(|b| b.slice(span.clone()).expect("parity is only read"))
                .collect();
            JournalRow {
                data: smallvec::smallvec![(pg.array_sector(stripe, dd, start), lent.sub(span))],
                parity: Some((pg.member_sector(stripe, start), parity)),
            }
        })
        .collect()
}

/// A buffer as a window of its own, for the journal.
pub(crate) fn lend(b: AlignedBuf) -> BufSlice {
    let n = b.len();
    SharedBuf::new(b).slice(0..n).expect("fresh")
}

/// Calls `each(row, bytes)` for the pieces of new data a batch writes to a data chunk
/// within `rows`: `segs` are the chunk's (rows, part) and `bytes(r, part)` its bytes.
pub(crate) fn pieces_within(
    segs: &Segs,
    rows: &Range<u64>,
    bytes: impl Fn(&Range<u64>, usize) -> Bytes,
    each: &mut dyn FnMut(u64, &[u8]),
) {
    for (r, part) in &segs.0 {
        let (lo, hi) = (r.start.max(rows.start), r.end.min(rows.end));
        if lo < hi {
            each(lo, &bytes(&(lo..hi), *part));
        }
    }
}

impl ParityIo {
    /// Issues a batch's member writes, behind its log entries when it has any: they are
    /// durable first, and the batch's place in the logs is released once the writes are
    /// done, whatever their outcome.
    pub(crate) async fn issue_logged(
        &self,
        host: &impl Host,
        writes: Batch<BufSlice>,
        log: Logs,
    ) -> Result<()> {
        let ios = writes.into_ios();
        if let (Some(journal), false) = (host.journal(), log.journal.is_empty()) {
            // A journal that fails on the way fails the batch before any member write.
            let ticket = journal.append(host, log.journal, log.destage).await?;
            ticket.durable(&journal, host).await?;
            let r = self.written(host, &host.issue_writes(ios).await);
            ticket.release();
            return r;
        }
        let log = log.ppl;
        let Some(ppl) = host.ppl().filter(|_| !log.is_empty()) else {
            return self.written(host, &host.issue_writes(ios).await);
        };
        let ticket = ppl.append(log);
        ticket.durable(host).await;
        let wrote: SmallVec<[usize; 8]> = ios.iter().map(|io| io.member).collect();
        let r = self.written(host, &host.issue_writes(ios).await);
        ticket.release(host, &wrote).await;
        r
    }
}
