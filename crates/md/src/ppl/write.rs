//! What a write logs, and where: the entries of a stripe write ([`segments`]), a unit
//! gathering entries and their partial parity up to what a header and the area hold
//! ([`UnitBuilder`]), and where the next unit goes in the area ([`Cursor`]).
//!
//! md logs per 4 KiB row of a stripe and merges rows written to the same data chunks into
//! one entry; raidd logs a write's rows the same way but in one step: the rows of a stripe
//! write fall into at most three runs with one set of chunks each (the first chunk's tail,
//! the chunks in between, the last chunk's head), and each run is an entry. Its chunks are
//! consecutive, as md's recovery (`recover.rs`) reads them, because a write is one range
//! of the array. A run that writes every data chunk logs no partial parity (md's full
//! stripe write): recovery recomputes its parity from the data alone.

use std::ops::Range;

use super::area::Area;
use super::header::{pp_checksum, Entry, Header, HEADER_SECTORS, HEADER_SIZE, MAX_ENTRIES};

/// Rows (sectors within the chunk) written to the same consecutive data chunks of one
/// stripe: one entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    pub rows: Range<u64>,
    /// Data chunk indexes in the stripe (0 = the stripe's first data chunk).
    pub disks: Range<u64>,
    /// Every data chunk is in it: no partial parity (recovery recomputes the rows' parity
    /// from all the data).
    pub full: bool,
}

impl Segment {
    /// Bytes of partial parity the segment logs.
    pub fn pp_len(&self) -> usize {
        if self.full {
            0
        } else {
            (self.rows.end - self.rows.start) as usize * 512
        }
    }

    /// The entry logging it (checksum to be filled in with its partial parity's):
    /// `stripe_sector` is the array sector of the stripe's first data chunk.
    pub fn entry(&self, stripe_sector: u64, chunk_sectors: u64, parity_disk: u32) -> Entry {
        let rows = self.rows.end - self.rows.start;
        let disks = self.disks.end - self.disks.start;
        Entry {
            data_sector: stripe_sector + self.disks.start * chunk_sectors + self.rows.start,
            pp_size: self.pp_len() as u32,
            data_size: (disks * rows * 512) as u32,
            parity_disk,
            checksum: 0,
        }
    }
}

/// The segments of one stripe's writes: `written[d]` is the rows written of data chunk
/// `d`, as sorted disjoint ranges (none where it is not written). Runs longer than
/// `max_pp_rows` that log partial parity are cut, so each fits a unit.
///
/// One write covers consecutive chunks at every row. Writes gathered into one batch may
/// not (rows of chunks 0 and 2, not 1): md keeps such writes apart, and raidd logs those
/// rows as written to every chunk, with no partial parity, so that recovery recomputes
/// their parity from all the data; it protects them unless the member missing is one the
/// rows did not write.
pub fn segments<R: AsRef<[Range<u64>]>>(written: &[R], max_pp_rows: u64) -> Vec<Segment> {
    assert!(max_pp_rows > 0, "a unit holds at least one row");
    let all = written.len() as u64;
    let mut out = Vec::new();
    for (rows, covering) in row_sets(written) {
        let (lo, hi) = (rows.start, rows.end);
        let (Some(&first), Some(&last)) = (covering.first(), covering.last()) else {
            continue;
        };
        let gap = last - first + 1 != covering.len() as u64;
        let disks = if gap { 0..all } else { first..last + 1 };
        let full = disks.end - disks.start == all;
        let step = if full { hi - lo } else { max_pp_rows };
        let mut at = lo;
        while at < hi {
            let end = hi.min(at + step);
            out.push(Segment {
                rows: at..end,
                disks: disks.clone(),
                full,
            });
            at = end;
        }
    }
    out
}

/// Whether some row is written to data chunks that are not consecutive (writes gathered
/// from both sides of an unwritten chunk): such writes must be logged one after the
/// other, as md keeps them apart, for the log to protect the chunk between them.
pub fn has_gap<R: AsRef<[Range<u64>]>>(written: &[R]) -> bool {
    row_sets(written)
        .into_iter()
        .any(|(_, c)| match (c.first(), c.last()) {
            (Some(&first), Some(&last)) => last - first + 1 != c.len() as u64,
            _ => false,
        })
}

/// The stripe's rows cut where any chunk's writes start or end, each with the data chunks
/// written over it.
fn row_sets<R: AsRef<[Range<u64>]>>(written: &[R]) -> Vec<(Range<u64>, Vec<u64>)> {
    let mut cuts: Vec<u64> = written
        .iter()
        .flat_map(|r| r.as_ref().iter().filter(|r| !r.is_empty()))
        .flat_map(|r| [r.start, r.end])
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    cuts.windows(2)
        .map(|w| {
            let (lo, hi) = (w[0], w[1]);
            let covering = (0..written.len() as u64)
                .filter(|&d| {
                    written[d as usize]
                        .as_ref()
                        .iter()
                        .any(|r| r.start <= lo && hi <= r.end)
                })
                .collect();
            (lo..hi, covering)
        })
        .collect()
}

/// One unit being gathered: a header's entries and their partial parity (kept as given,
/// copied once, when the unit is written out).
#[derive(Debug)]
pub struct UnitBuilder {
    header: Header,
    pp: Vec<Vec<u8>>,
    pp_len: usize,
    space: usize,
}

impl UnitBuilder {
    /// An empty unit of `generation`, holding up to `space` bytes of partial parity (md
    /// fills a unit to `area.entry_space()`; a unit may hold up to [`Area::unit_space`]).
    pub fn new(signature: u32, generation: u64, space: usize) -> UnitBuilder {
        UnitBuilder {
            header: Header {
                signature,
                generation,
                entries: Vec::new(),
            },
            pp: Vec::new(),
            pp_len: 0,
            space,
        }
    }

    /// Whether an entry with `pp_len` bytes of partial parity still fits.
    pub fn fits(&self, pp_len: usize) -> bool {
        self.takes(1, pp_len)
    }

    /// Whether `count` more entries with `pp_len` bytes of partial parity in all fit.
    pub fn takes(&self, count: usize, pp_len: usize) -> bool {
        self.header.entries.len() + count <= MAX_ENTRIES && self.pp_len + pp_len <= self.space
    }

    /// Adds `entry` with its partial parity (`pp.len()` must be its `pp_size`); the
    /// entry's checksum is computed here.
    pub fn push(&mut self, mut entry: Entry, pp: Vec<u8>) {
        assert!(self.fits(pp.len()), "a PPL unit overfilled");
        assert_eq!(
            pp.len(),
            entry.pp_size as usize,
            "partial parity of the entry's size"
        );
        entry.checksum = pp_checksum(&pp);
        self.header.entries.push(entry);
        self.pp_len += pp.len();
        if !pp.is_empty() {
            self.pp.push(pp);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.header.entries.is_empty()
    }

    /// Sectors the unit takes in the area.
    pub fn sectors(&self) -> u64 {
        HEADER_SECTORS + (self.pp_len / 512) as u64
    }

    /// Bytes of the unit: its header page and its partial parity.
    pub fn len(&self) -> usize {
        HEADER_SIZE + self.pp_len
    }

    /// Writes the unit's bytes (the header page, then the partial parity) into `out`,
    /// which is [`UnitBuilder::len`] bytes long.
    pub fn finish_into(self, out: &mut [u8]) {
        assert_eq!(out.len(), self.len(), "a unit's buffer is the unit's size");
        self.header.encode_into(out);
        let mut at = HEADER_SIZE;
        for p in &self.pp {
            out[at..at + p.len()].copy_from_slice(p);
            at += p.len();
        }
    }

    /// The unit's bytes.
    #[cfg(test)]
    fn finish(self) -> Vec<u8> {
        let mut out = vec![0; self.len()];
        self.finish_into(&mut out);
        out
    }
}

/// Where the next unit goes in an area: always its start with one unit, else after the
/// previous one, back to the start when it would not fit (md's `next_io_sector`).
#[derive(Debug, Clone)]
pub struct Cursor {
    sectors: u64,
    multiple: bool,
    next: u64,
}

impl Cursor {
    pub fn new(area: Area) -> Cursor {
        Cursor {
            sectors: u64::from(area.size),
            multiple: area.multiple(),
            next: 0,
        }
    }

    /// Sectors from the area's start at which a unit of `unit_sectors` is written.
    pub fn place(&mut self, unit_sectors: u64) -> u64 {
        assert!(
            unit_sectors <= self.sectors,
            "a PPL unit larger than its area"
        );
        if !self.multiple {
            return 0;
        }
        if self.sectors - self.next < unit_sectors {
            self.next = 0;
        }
        let at = self.next;
        self.next += unit_sectors;
        at
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::recover::{EntryPlan, ParityGeometry};
    use super::super::scan;
    use super::*;

    /// One range of rows per data chunk.
    fn rows(r: &[(u64, u64)]) -> Vec<Vec<Range<u64>>> {
        r.iter()
            .map(|&(a, b)| std::iter::once(a..b).collect())
            .collect()
    }

    #[test]
    fn a_write_across_three_chunks_logs_three_runs() {
        // Rows 10.. of chunk 0, all of chunk 1, ..6 of chunk 2, in a four-chunk stripe.
        let s = segments(&rows(&[(10, 16), (0, 16), (0, 6), (0, 0)]), 64);
        assert_eq!(
            s,
            vec![
                Segment {
                    rows: 0..6,
                    disks: 1..3,
                    full: false
                },
                Segment {
                    rows: 6..10,
                    disks: 1..2,
                    full: false
                },
                Segment {
                    rows: 10..16,
                    disks: 0..2,
                    full: false
                },
            ]
        );
        let e = s[0].entry(1000, 16, 3);
        assert_eq!(
            (e.data_sector, e.data_size, e.pp_size),
            (1016, 6 * 1024, 6 * 512)
        );
    }

    #[test]
    fn whole_rows_log_no_partial_parity_and_long_runs_are_cut() {
        let s = segments(&rows(&[(4, 16), (0, 16), (0, 16)]), 5);
        assert_eq!(s[0].rows, 0..4);
        assert_eq!(s[0].disks, 1..3);
        assert_eq!(s.iter().filter(|x| !x.full).count(), 1);
        let full = s.iter().find(|x| x.full).expect("rows 4..16 are full");
        assert_eq!((full.rows.clone(), full.pp_len()), (4..16, 0));
        let cut = segments(&rows(&[(0, 16), (0, 0)]), 5);
        let rows: Vec<_> = cut.iter().map(|x| x.rows.clone()).collect();
        assert_eq!(rows, vec![0..5, 5..10, 10..15, 15..16]);
    }

    #[test]
    fn gathered_chunks_with_a_gap_are_logged_as_every_chunk() {
        assert!(has_gap(&rows(&[(0, 8), (0, 0), (4, 8)])));
        assert!(!has_gap(&rows(&[(0, 8), (4, 8), (0, 0)])));
        assert!(!has_gap(&rows(&[(0, 4), (0, 0), (4, 8)])), "rows apart");
        let s = segments(&rows(&[(0, 8), (0, 0), (4, 8)]), 64);
        assert_eq!(
            s,
            vec![
                Segment {
                    rows: 0..4,
                    disks: 0..1,
                    full: false
                },
                Segment {
                    rows: 4..8,
                    disks: 0..3,
                    full: true
                },
            ]
        );
    }

    #[test]
    fn units_fill_up_and_wrap_in_the_area() {
        let area = Area {
            offset: 8,
            size: 600,
        };
        let mut u = UnitBuilder::new(5, 1, area.entry_space() as usize);
        assert!(u.fits(128 * 1024) && !u.fits(128 * 1024 + 512));
        for i in 0..MAX_ENTRIES as u64 {
            assert!(u.fits(0));
            u.push(
                Segment {
                    rows: 0..8,
                    disks: 0..3,
                    full: true,
                }
                .entry(i * 48, 16, 0),
                Vec::new(),
            );
        }
        assert!(!u.fits(0), "a header holds {MAX_ENTRIES} entries");
        let mut c = Cursor::new(area);
        assert_eq!(c.place(264), 0);
        assert_eq!(c.place(264), 264);
        assert_eq!(c.place(264), 0, "72 sectors left: wraps");
        let mut one = Cursor::new(Area {
            offset: 8,
            size: 264,
        });
        assert_eq!((one.place(8), one.place(264)), (0, 0));
    }

    /// A model stripe: data chunks and parity, a byte per sector
    /// standing for its contents.
    #[derive(Debug, Clone)]
    struct Stripe {
        data: Vec<Vec<u8>>,
        parity: Vec<u8>,
    }

    impl Stripe {
        fn xor_row(&self, row: usize, skip: impl Fn(usize) -> bool) -> u8 {
            (0..self.data.len())
                .filter(|&d| !skip(d))
                .fold(0, |x, d| x ^ self.data[d][row])
        }
    }

    proptest! {
        /// Logging as raidd does, then a crash with any subset of the chunk writes done
        /// and parity old or new, then md's recovery of every entry from the unit's
        /// bytes: every row's parity matches the data on the members, and rows the
        /// write did not touch keep theirs.
        #[test]
        fn logged_writes_recover_to_consistent_parity(
            dd in 2u64..6,
            chunk_pow in 3u32..7, // md's chunks are 4 KiB or more
            seed in any::<u64>(),
            start_frac in 0.0f64..1.0,
            len_frac in 0.0f64..1.0,
            done_mask in any::<u8>(),
            parity_done in any::<bool>(),
            max_rows in 1u64..40,
            gathered in any::<bool>(),
            start2_frac in 0.0f64..1.0,
            len2_frac in 0.0f64..1.0,
        ) {
            let chunk = 1u64 << chunk_pow;
            let stripe_sectors = dd * chunk;
            let start = ((stripe_sectors as f64) * start_frac) as u64 % stripe_sectors;
            let len = 1 + (((stripe_sectors - start - 1) as f64) * len_frac) as u64;
            let mut rng = seed;
            let mut next = || { rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407); (rng >> 33) as u8 };
            let mut before = Stripe { data: (0..dd).map(|_| (0..chunk).map(|_| next()).collect()).collect(), parity: vec![0; chunk as usize] };
            for r in 0..chunk as usize { before.parity[r] = before.xor_row(r, |_| false); }
            // The write: array sectors start..start+len of stripe 0.
            // One write, or two gathered into the stripe's batch.
            let mut mask = vec![vec![false; chunk as usize]; dd as usize];
            let writes = [(start, len), (0, 0)];
            for (i, &(a, n)) in writes.iter().enumerate() {
                let (a, n) = if i == 0 { (a, n) } else {
                    if !gathered { continue; }
                    let a = ((stripe_sectors as f64) * start2_frac) as u64 % stripe_sectors;
                    (a, 1 + (((stripe_sectors - a - 1) as f64) * len2_frac) as u64)
                };
                for s in a..a + n { mask[(s / chunk) as usize][(s % chunk) as usize] = true; }
            }
            let written: Vec<Vec<Range<u64>>> = mask.iter().map(|m| {
                let mut v: Vec<Range<u64>> = Vec::new();
                for (r, &w) in m.iter().enumerate() {
                    let r = r as u64;
                    if !w { continue; }
                    match v.last_mut() {
                        Some(last) if last.end == r => last.end = r + 1,
                        _ => v.push(r..r + 1),
                    }
                }
                v
            }).collect();
            let segs = segments(&written, max_rows);
            let area = Area { offset: 8, size: 2048 };
            let mut unit = UnitBuilder::new(77, 1, area.unit_space());
            for s in &segs {
                let pp: Vec<u8> = if s.full { vec![] } else {
                    s.rows.clone().flat_map(|r| {
                        let x = before.xor_row(r as usize, |d| s.disks.contains(&(d as u64)));
                        std::iter::repeat_n(x, 512)
                    }).collect()
                };
                unit.push(s.entry(0, chunk, dd as u32), pp);
            }
            // The new data, torn.
            let mut after = before.clone();
            let mut new = before.clone();
            for (d, rs) in written.iter().enumerate() {
                for row in rs.iter().flat_map(|r| r.clone()) { new.data[d][row as usize] = next(); }
            }
            for r in 0..chunk as usize { new.parity[r] = new.xor_row(r, |_| false); }
            for (d, _) in written.iter().enumerate() {
                if done_mask & (1 << d) != 0 { after.data[d] = new.data[d].clone(); }
            }
            if parity_done { after.parity = new.parity.clone(); }
            // Recovery, as md reads the unit back.
            let mut bytes = unit.finish();
            bytes.resize(2048 * 512, 0);
            let found = scan::newest(&bytes, 77).newest.expect("the unit");
            let g = ParityGeometry { raid_disks: dd as u32 + 1, parity_disks: 1, chunk_sectors: chunk, array_sectors: stripe_sectors };
            let mut touched = vec![false; chunk as usize];
            for (i, e) in found.header.entries.iter().enumerate() {
                let plan = EntryPlan::new(e, &g).expect("raidd's entries are valid");
                let pp_at = (found.pp_offset(i) * 512) as usize;
                prop_assert_eq!(crate::ppl::pp_checksum(&bytes[pp_at..pp_at + e.pp_size as usize]), e.checksum);
                for b in plan.blocks() {
                    for k in 0..plan.block_sectors {
                        let row = ((b.row_sector + k) % chunk) as usize;
                        let mut p = 0u8;
                        for s in &b.sources {
                            let s = s + k;
                            p ^= after.data[(s / chunk) as usize][(s % chunk) as usize];
                        }
                        if plan.has_pp { p ^= bytes[pp_at + ((b.offset + k) * 512) as usize]; }
                        after.parity[row] = p;
                        touched[row] = true;
                    }
                }
            }
            for (r, &t) in touched.iter().enumerate() {
                let was_written = mask.iter().any(|m| m[r]);
                prop_assert_eq!(t, was_written, "row {} recovered iff written", r);
                prop_assert_eq!(after.parity[r], after.xor_row(r, |_| false), "row {}", r);
            }
        }
    }
}
