//! What one write covers of each stripe: pure geometry on sector numbers, and the parts
//! that carry it to the stripe's head.

use std::ops::Range;
use std::sync::Arc;

use raidd_layout::ParityGeometry;
use smallvec::SmallVec;

use super::mailbox::Signal;
use crate::iov::Req;

/// Which rows of one data chunk each part supplies: sorted, disjoint ranges of chunk rows
/// (sectors), each with the index of the part whose data it is. Where parts overlap the
/// later one wins, so a batch writes what writing its parts one after the other would.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Segs(pub(crate) SmallVec<[(Range<u64>, usize); 2]>);

impl Segs {
    pub(crate) fn insert(&mut self, r: Range<u64>, part: usize) {
        assert!(r.start < r.end, "empty segment {r:?}");
        // The usual part: a chunk's first, or one after all before it (segments are sorted
        // and disjoint, so the last ends furthest). Nothing to cut or sort.
        if self.0.last().is_none_or(|(s, _)| s.end <= r.start) {
            self.0.push((r, part));
            return;
        }
        let mut out: SmallVec<[(Range<u64>, usize); 2]> = SmallVec::new();
        for (s, p) in self.0.drain(..) {
            if s.end <= r.start || s.start >= r.end {
                out.push((s, p));
                continue;
            }
            if s.start < r.start {
                out.push((s.start..r.start, p));
            }
            if s.end > r.end {
                out.push((r.end..s.end, p));
            }
        }
        out.push((r, part));
        out.sort_by_key(|(s, _)| s.start);
        self.0 = out;
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether the segments cover every row of `rows` (no hole).
    pub(crate) fn covers(&self, rows: &Range<u64>) -> bool {
        let mut at = rows.start;
        for (s, _) in &self.0 {
            if s.start > at {
                return false;
            }
            at = at.max(s.end);
        }
        at >= rows.end
    }

    /// The smallest range holding every segment.
    pub(crate) fn hull(&self) -> Option<Range<u64>> {
        Some(self.0.first()?.0.start..self.0.last()?.0.end)
    }
}

/// The rows of a stripe's data chunks that one write covers. A write is a contiguous stretch
/// of the array, so its share of a stripe is too: chunk `first` from row `start`, every
/// chunk after it over all rows, and chunk `last` up to row `end` (one chunk when `first ==
/// last`). Constant size, whatever the number of chunks: a list of (chunk, rows) spilled to
/// the heap for every whole stripe of more than two data chunks, and parts move between
/// queues.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ChunkCover {
    first: usize,
    start: u64,
    last: usize,
    end: u64,
    chunk_rows: u64,
}

impl ChunkCover {
    /// The cover of `rows`, a stretch of a stripe's data rows (`0..data_chunks *
    /// chunk_rows`, chunk by chunk in order), in chunks of `chunk_rows` rows.
    pub(crate) fn stretch(rows: Range<u64>, chunk_rows: u64) -> ChunkCover {
        assert!(
            rows.start < rows.end && chunk_rows > 0,
            "an empty stretch {rows:?} (chunks of {chunk_rows})"
        );
        let last = rows.end - 1;
        ChunkCover {
            first: (rows.start / chunk_rows) as usize,
            start: rows.start % chunk_rows,
            last: (last / chunk_rows) as usize,
            end: last % chunk_rows + 1,
            chunk_rows,
        }
    }

    /// Each covered chunk with its rows, in chunk order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (usize, Range<u64>)> + '_ {
        (self.first..=self.last).map(move |dd| {
            let from = if dd == self.first { self.start } else { 0 };
            let to = if dd == self.last {
                self.end
            } else {
                self.chunk_rows
            };
            (dd, from..to)
        })
    }

    /// The one chunk it covers and its rows, when it covers one.
    pub(crate) fn single(&self) -> Option<(usize, Range<u64>)> {
        (self.first == self.last).then_some((self.first, self.start..self.end))
    }

    /// Whether it writes every one of `data_chunks` chunks over all their rows.
    pub(crate) fn covers_stripe(&self, data_chunks: usize) -> bool {
        self.first == 0
            && self.start == 0
            && self.last + 1 == data_chunks
            && self.end == self.chunk_rows
    }
}

/// Each stripe a write of `count` sectors from array sector `sector` touches, in order,
/// with its cover: computed, not collected, so a write over many stripes allocates no list.
pub(crate) fn stripe_shares(pg: &ParityGeometry, sector: u64, count: u64) -> StripeShares {
    let end = sector.checked_add(count);
    assert!(
        count > 0 && end.is_some_and(|end| end <= pg.array_sectors()),
        "write {sector}+{count} outside the array of {} sectors",
        pg.array_sectors()
    );
    StripeShares {
        at: sector,
        end: sector + count,
        chunk_rows: u64::from(pg.chunk_sectors),
        stripe_rows: pg.stripe_data_sectors(),
    }
}

/// See [`stripe_shares`].
#[derive(Clone, Debug)]
pub(crate) struct StripeShares {
    at: u64,
    end: u64,
    chunk_rows: u64,
    stripe_rows: u64,
}

impl StripeShares {
    /// How many stripes are left.
    pub(crate) fn stripes(&self) -> u64 {
        if self.at >= self.end {
            return 0;
        }
        (self.end - 1) / self.stripe_rows - self.at / self.stripe_rows + 1
    }
}

impl Iterator for StripeShares {
    type Item = (u64, ChunkCover);

    fn next(&mut self) -> Option<(u64, ChunkCover)> {
        if self.at >= self.end {
            return None;
        }
        let stripe = self.at / self.stripe_rows;
        let base = stripe * self.stripe_rows;
        let stop = (base + self.stripe_rows).min(self.end);
        let cover = ChunkCover::stretch(self.at - base..stop - base, self.chunk_rows);
        self.at = stop;
        Some((stripe, cover))
    }

    /// Exact: a table collected from the shares takes up the room it needs at once.
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = usize::try_from(self.stripes()).unwrap_or(usize::MAX);
        (n, Some(n))
    }
}

impl ExactSizeIterator for StripeShares {}

/// The parts of a batch (inline for two: most batches are one small write).
pub(crate) type Parts = SmallVec<[Part; 2]>;

/// One request's share of one stripe.
pub(crate) struct Part {
    /// The request's data, shared by its parts (on any thread).
    pub(crate) req: Arc<Req>,
    /// The request's byte offset in the array.
    pub(crate) offset: u64,
    /// Per data chunk, the rows this part writes.
    pub(crate) cover: ChunkCover,
    /// Its data is in the write journal already (the write-back cache's pages on their way
    /// to the members): its batch logs their rows' parity alone.
    pub(crate) logged: bool,
    pub(super) signal: Arc<Signal>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use raidd_layout::{Geometry, Level, ParityLayout};

    /// Stripes, each with its chunks and their rows.
    type Shares = Vec<(u64, Vec<(usize, Range<u64>)>)>;

    proptest! {
        /// A write's stripe shares are the layout's pieces grouped by stripe: the same
        /// stripes, chunks and rows, for any chunk size, width and stretch of the array.
        #[test]
        fn stripe_shares_are_the_pieces_by_stripe(
            shift in 3u32..8,
            members in 3usize..9,
            raid6 in any::<bool>(),
            start in 0u64..4000,
            count in 1u64..3000,
        ) {
            let level = if raid6 && members >= 4 { Level::Raid6 } else { Level::Raid5 };
            let layout = if level == Level::Raid6 {
                ParityLayout::LeftSymmetric
            } else {
                ParityLayout::RightAsymmetric
            };
            let pg = ParityGeometry {
                level,
                members,
                layout,
                chunk_sectors: 1 << shift,
                dev_sectors: 4096,
            };
            let count = count.min(pg.array_sectors() - start.min(pg.array_sectors() - 1));
            let start = start.min(pg.array_sectors() - count);
            let mut want: Shares = Vec::new();
            for p in Geometry::Parity(pg.clone()).pieces(start, count) {
                let (stripe, dd, off) = pg.locate(p.array_sector);
                if want.last().is_none_or(|(s, _)| *s != stripe) {
                    want.push((stripe, Vec::new()));
                }
                want.last_mut().unwrap().1.push((dd, off..off + p.sectors));
            }
            let shares = stripe_shares(&pg, start, count);
            prop_assert_eq!(shares.stripes(), want.len() as u64);
            let got: Shares = shares
                .map(|(stripe, cover)| (stripe, cover.iter().collect()))
                .collect();
            prop_assert_eq!(&got, &want);
            // The size hint is exact at every step (tables are sized by it).
            let mut it = stripe_shares(&pg, start, count);
            for left in (0..=want.len()).rev() {
                prop_assert_eq!(it.size_hint(), (left, Some(left)));
                prop_assert_eq!(it.next().is_some(), left > 0);
            }
            let k = pg.data_members();
            let chunk = u64::from(pg.chunk_sectors);
            for (stripe, cover) in stripe_shares(&pg, start, count) {
                let whole = want.iter().find(|(s, _)| *s == stripe).unwrap().1.clone();
                let full = whole.len() == k && whole.iter().all(|(_, r)| *r == (0..chunk));
                prop_assert_eq!(cover.covers_stripe(k), full);
            }
        }
    }

    fn segs(list: &[(Range<u64>, usize)]) -> Segs {
        let mut s = Segs::default();
        for (r, p) in list {
            s.insert(r.clone(), *p);
        }
        s
    }

    #[test]
    fn later_parts_win_where_they_overlap() {
        let s = segs(&[(0..8, 0), (4..12, 1)]);
        assert_eq!(s.0.as_slice(), &[(0..4, 0), (4..12, 1)]);
        let s = segs(&[(0..16, 0), (4..8, 1)]);
        assert_eq!(s.0.as_slice(), &[(0..4, 0), (4..8, 1), (8..16, 0)]);
        let s = segs(&[(4..8, 0), (0..16, 1)]);
        assert_eq!(s.0.as_slice(), &[(0..16, 1)]);
    }

    #[test]
    fn coverage_and_hull() {
        let s = segs(&[(0..4, 0), (8..16, 1)]);
        assert!(!s.covers(&(0..16)));
        assert!(s.covers(&(8..16)));
        assert_eq!(s.hull(), Some(0..16));
        let s = segs(&[(0..4, 0), (4..16, 1)]);
        assert!(s.covers(&(0..16)));
        assert_eq!(Segs::default().hull(), None);
    }

    /// Exhaustive over small patterns: the segments say exactly which part wrote each row
    /// last, as writing the parts in order would.
    #[test]
    fn segments_match_writing_in_order() {
        let ranges: Vec<Range<u64>> = (0..6u64)
            .flat_map(|a| (a + 1..=6).map(move |b| a..b))
            .collect();
        for a in &ranges {
            for b in &ranges {
                for c in &ranges {
                    let s = segs(&[(a.clone(), 0), (b.clone(), 1), (c.clone(), 2)]);
                    let mut model = [None; 6];
                    for (i, r) in [a, b, c].iter().enumerate() {
                        for row in (*r).clone() {
                            model[row as usize] = Some(i);
                        }
                    }
                    let mut got = [None; 6];
                    let mut last_end = 0;
                    for (r, p) in &s.0 {
                        assert!(r.start >= last_end, "overlap or disorder in {s:?}");
                        last_end = r.end;
                        for row in r.clone() {
                            got[row as usize] = Some(*p);
                        }
                    }
                    assert_eq!(got, model, "{a:?} {b:?} {c:?}");
                }
            }
        }
    }
}
