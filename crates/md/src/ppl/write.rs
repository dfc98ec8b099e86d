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
use super::header::{pp_checksum, Entry, Header, HEADER_SECTORS, MAX_ENTRIES};

/// Rows (sectors within the chunk) written to the same consecutive data chunks of one
/// stripe: one entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    pub rows: Range<u64>,
    /// Data chunk indexes in the stripe (0 = the stripe's first data chunk).
    pub disks: Range<u64>,
    /// Every data chunk is written: no partial parity.
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

/// The segments of one stripe write: `written[d]` is the rows written of data chunk `d`
/// (empty where it is not written). Runs longer than `max_pp_rows` that log partial parity
/// are cut, so each fits a unit. The chunks written at any row must be consecutive: a
/// write is one range of the array.
pub fn segments(written: &[Range<u64>], max_pp_rows: u64) -> Vec<Segment> {
    assert!(max_pp_rows > 0, "a unit holds at least one row");
    let mut cuts: Vec<u64> = written
        .iter()
        .filter(|r| !r.is_empty())
        .flat_map(|r| [r.start, r.end])
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut out = Vec::new();
    for w in cuts.windows(2) {
        let (lo, hi) = (w[0], w[1]);
        let covering: Vec<u64> = (0..written.len() as u64)
            .filter(|&d| {
                let r = &written[d as usize];
                r.start <= lo && hi <= r.end
            })
            .collect();
        let (Some(&first), Some(&last)) = (covering.first(), covering.last()) else {
            continue;
        };
        assert_eq!(
            last - first + 1,
            covering.len() as u64,
            "a stripe write covers consecutive data chunks"
        );
        let full = covering.len() == written.len();
        let step = if full { hi - lo } else { max_pp_rows };
        let mut at = lo;
        while at < hi {
            let end = hi.min(at + step);
            out.push(Segment {
                rows: at..end,
                disks: first..last + 1,
                full,
            });
            at = end;
        }
    }
    out
}

/// One unit being gathered: a header's entries and their partial parity.
#[derive(Debug)]
pub struct UnitBuilder {
    header: Header,
    pp: Vec<u8>,
    space: usize,
}

impl UnitBuilder {
    /// An empty unit of `generation`, holding up to `area.entry_space()` of partial parity.
    pub fn new(signature: u32, generation: u64, area: Area) -> UnitBuilder {
        UnitBuilder {
            header: Header {
                signature,
                generation,
                entries: Vec::new(),
            },
            pp: Vec::new(),
            space: area.entry_space() as usize,
        }
    }

    /// Whether an entry with `pp_len` bytes of partial parity still fits.
    pub fn fits(&self, pp_len: usize) -> bool {
        self.header.entries.len() < MAX_ENTRIES && self.pp.len() + pp_len <= self.space
    }

    /// Adds `entry` with its partial parity (`pp.len()` must be its `pp_size`); the
    /// entry's checksum is computed here.
    pub fn push(&mut self, mut entry: Entry, pp: &[u8]) {
        assert!(self.fits(pp.len()), "a PPL unit overfilled");
        assert_eq!(
            pp.len(),
            entry.pp_size as usize,
            "partial parity of the entry's size"
        );
        entry.checksum = pp_checksum(pp);
        self.header.entries.push(entry);
        self.pp.extend_from_slice(pp);
    }

    pub fn is_empty(&self) -> bool {
        self.header.entries.is_empty()
    }

    pub fn generation(&self) -> u64 {
        self.header.generation
    }

    /// Sectors the unit takes in the area.
    pub fn sectors(&self) -> u64 {
        HEADER_SECTORS + (self.pp.len() / 512) as u64
    }

    /// The unit's bytes: the header page, then the partial parity.
    pub fn finish(self) -> Vec<u8> {
        let mut out = self.header.encode();
        out.extend_from_slice(&self.pp);
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

    #[test]
    fn a_write_across_three_chunks_logs_three_runs() {
        // Rows 10.. of chunk 0, all of chunk 1, ..6 of chunk 2, in a four-chunk stripe.
        let s = segments(&[10..16, 0..16, 0..6, 0..0], 64);
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
        let s = segments(&[4..16, 0..16, 0..16], 5);
        assert_eq!(s[0].rows, 0..4);
        assert_eq!(s[0].disks, 1..3);
        assert_eq!(s.iter().filter(|x| !x.full).count(), 1);
        let full = s.iter().find(|x| x.full).expect("rows 4..16 are full");
        assert_eq!((full.rows.clone(), full.pp_len()), (4..16, 0));
        let cut = segments(&[0..16, 0..0], 5);
        let rows: Vec<_> = cut.iter().map(|x| x.rows.clone()).collect();
        assert_eq!(rows, vec![0..5, 5..10, 10..15, 15..16]);
    }

    #[test]
    #[should_panic(expected = "consecutive data chunks")]
    fn chunks_with_a_gap_are_not_one_write() {
        segments(&[0..8, 0..0, 0..8], 64);
    }

    #[test]
    fn units_fill_up_and_wrap_in_the_area() {
        let area = Area {
            offset: 8,
            size: 600,
        };
        let mut u = UnitBuilder::new(5, 1, area);
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
                &[],
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
            let written: Vec<Range<u64>> = (0..dd).map(|d| {
                let (lo, hi) = (d * chunk, (d + 1) * chunk);
                let (a, b) = (start.max(lo), (start + len).min(hi));
                if a < b { a - lo..b - lo } else { 0..0 }
            }).collect();
            let segs = segments(&written, max_rows);
            let area = Area { offset: 8, size: 2048 };
            let mut unit = UnitBuilder::new(77, 1, area);
            for s in &segs {
                let pp: Vec<u8> = if s.full { vec![] } else {
                    s.rows.clone().flat_map(|r| {
                        let x = before.xor_row(r as usize, |d| s.disks.contains(&(d as u64)));
                        std::iter::repeat_n(x, 512)
                    }).collect()
                };
                unit.push(s.entry(0, chunk, dd as u32), &pp);
            }
            // The new data, torn.
            let mut after = before.clone();
            let mut new = before.clone();
            for (d, r) in written.iter().enumerate() {
                for row in r.clone() { new.data[d][row as usize] = next(); }
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
                let was_written = written.iter().any(|w| w.contains(&(r as u64)));
                prop_assert_eq!(t, was_written, "row {} recovered iff written", r);
                prop_assert_eq!(after.parity[r], after.xor_row(r, |_| false), "row {}", r);
            }
        }
    }
}
