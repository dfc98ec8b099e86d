//! What recovering one entry reads and writes: md's `ppl_recover_entry`, as arithmetic.
//!
//! An entry names the first array sector written (`data_sector`), how much data was
//! written and how much partial parity was logged. md's reading of it: with less partial
//! parity than a chunk, the write covered `data_size / pp_size` consecutive data chunks
//! over `pp_size` of rows (a write of every data chunk logs none: then all of them, over
//! `data_size / data disks`); with a chunk or more, whole chunks from `data_sector` up to
//! `data_size` further. For each block of those rows, the new parity is the XOR of the
//! written chunks' blocks as they are on the members now and of the partial parity; a
//! block whose chunks are not all readable (a member missing, or not rebuilt that far) is
//! left alone. Blocks are 4 KiB when the range starts and ends on 4 KiB, else a sector.
//!
//! Entries md never writes (sizes not whole sectors, chunks that do not divide, ranges
//! leaving their stripe or the array) are [`Skip`]ped with the reason, never applied.

use super::header::Entry;

/// What recovery needs of the array: RAID5's shape, in sectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParityGeometry {
    pub raid_disks: u32,
    /// Members holding parity per stripe (1 for RAID5).
    pub parity_disks: u32,
    pub chunk_sectors: u64,
    pub array_sectors: u64,
}

impl ParityGeometry {
    fn data_disks(&self) -> u64 {
        u64::from(self.raid_disks - self.parity_disks)
    }
}

/// Why an entry is not recovered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Skip {
    #[error("it logs no data")]
    Empty,
    #[error("its sizes (data {data_size}, partial parity {pp_size} bytes) are not whole sectors that divide")]
    Sizes { data_size: u32, pp_size: u32 },
    #[error("it spans {0} data chunks, more than a stripe has")]
    TooWide(u64),
    #[error("its range leaves its stripe")]
    LeavesStripe,
    #[error("its range ends at sector {end}, past the array's {array}")]
    PastArray { end: u64, array: u64 },
    #[error("its partial parity lies past the log area")]
    PastArea,
    #[error("its partial parity's checksum {computed:#010x} is not the logged {stored:#010x}")]
    Checksum { stored: u32, computed: u32 },
    #[error("its stripe's parity is on member {mapped}, not member {logged} as logged")]
    ParityDisk { mapped: u32, logged: u32 },
    #[error("it is logged on member {log}, not on its stripe's parity member {parity}")]
    WrongLog { log: u32, parity: u32 },
}

/// One entry's recovery, in array sectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryPlan {
    pub first: u64,
    /// Sources at or past this sector were not written.
    pub last: u64,
    pub data_disks: u64,
    /// Rows (sectors of each chunk) the entry covers.
    pub strip_sectors: u64,
    pub block_sectors: u64,
    pub chunk_sectors: u64,
    /// Whether partial parity was logged (row `i`'s is at sector `i` of the entry's).
    pub has_pp: bool,
}

/// One block of rows: its parity is rewritten as the XOR of these blocks (array sectors,
/// `block_sectors` each) and, where logged, the partial parity at `offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// Sectors into the entry's rows (and its partial parity).
    pub offset: u64,
    /// Array sector of the parity's stripe row: `first + offset`.
    pub row_sector: u64,
    pub sources: Vec<u64>,
}

impl EntryPlan {
    pub fn new(e: &Entry, g: &ParityGeometry) -> Result<EntryPlan, Skip> {
        let sizes = Skip::Sizes {
            data_size: e.data_size,
            pp_size: e.pp_size,
        };
        if e.data_size == 0 {
            return Err(Skip::Empty);
        }
        if !e.data_size.is_multiple_of(512) || !e.pp_size.is_multiple_of(512) {
            return Err(sizes);
        }
        let (chunk, all) = (g.chunk_sectors, g.data_disks());
        let (data, pp) = (u64::from(e.data_size >> 9), u64::from(e.pp_size >> 9));
        let first = e.data_sector;
        let (data_disks, strip, last) = if pp < chunk {
            let (dd, strip) = if pp > 0 {
                if data % pp != 0 {
                    return Err(sizes);
                }
                (data / pp, pp)
            } else {
                if data % all != 0 {
                    return Err(sizes);
                }
                (all, data / all)
            };
            let last = (dd - 1)
                .checked_mul(chunk)
                .and_then(|x| x.checked_add(strip))
                .and_then(|x| x.checked_add(first));
            (dd, strip, last)
        } else {
            (all, chunk, first.checked_add(data))
        };
        if data_disks > all {
            return Err(Skip::TooWide(data_disks));
        }
        let last = last.ok_or(Skip::PastArray {
            end: u64::MAX,
            array: g.array_sectors,
        })?;
        if last > g.array_sectors {
            return Err(Skip::PastArray {
                end: last,
                array: g.array_sectors,
            });
        }
        // The rows stay in their chunk, the chunks in their stripe. (With a chunk or more
        // of partial parity, the sources are the whole chunks below `last`.)
        let (row, disk) = (first % chunk, (first / chunk) % all);
        let spans = if pp < chunk {
            data_disks
        } else {
            (last - first).div_ceil(chunk)
        };
        if row + strip > chunk || disk + spans > all {
            return Err(Skip::LeavesStripe);
        }
        let block_sectors = if first.is_multiple_of(8) && last.is_multiple_of(8) {
            8
        } else {
            1
        };
        Ok(EntryPlan {
            first,
            last,
            data_disks,
            strip_sectors: strip,
            block_sectors,
            chunk_sectors: chunk,
            has_pp: pp > 0,
        })
    }

    /// The blocks whose parity is rewritten, in order.
    pub fn blocks(&self) -> impl Iterator<Item = Block> + '_ {
        (0..self.strip_sectors)
            .step_by(self.block_sectors as usize)
            .filter_map(|i| {
                let sources: Vec<u64> = (0..self.data_disks)
                    .map(|d| self.first + i + d * self.chunk_sectors)
                    .filter(|&r| r < self.last)
                    .collect();
                (!sources.is_empty()).then_some(Block {
                    offset: i,
                    row_sector: self.first + i,
                    sources,
                })
            })
    }

    /// Sectors of partial parity the entry has in the log.
    pub fn pp_sectors(&self) -> u64 {
        if self.has_pp {
            self.strip_sectors
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Four members (three data chunks per stripe), 16-sector chunks.
    const G: ParityGeometry = ParityGeometry {
        raid_disks: 4,
        parity_disks: 1,
        chunk_sectors: 16,
        array_sectors: 48 * 100,
    };

    fn entry(data_sector: u64, data_size: u32, pp_size: u32) -> Entry {
        Entry {
            data_sector,
            pp_size,
            data_size,
            parity_disk: 0,
            checksum: 0,
        }
    }

    #[test]
    fn one_chunk_s_rows() {
        // md's case 0: rows 8..16 of the second data chunk of stripe 1.
        let p = EntryPlan::new(&entry(48 + 16 + 8, 4096, 4096), &G).expect("valid");
        assert_eq!((p.data_disks, p.strip_sectors, p.block_sectors), (1, 8, 8));
        let blocks: Vec<Block> = p.blocks().collect();
        assert_eq!(
            blocks,
            vec![Block {
                offset: 0,
                row_sector: 72,
                sources: vec![72]
            }]
        );
        assert_eq!(p.pp_sectors(), 8);
    }

    #[test]
    fn two_chunks_rows_in_sectors_when_not_4k_aligned() {
        // md's case 1 with sector granularity: rows 3..5 of data chunks 0 and 1.
        let p = EntryPlan::new(&entry(3, 2 * 2 * 512, 2 * 512), &G).expect("valid");
        assert_eq!((p.data_disks, p.strip_sectors, p.block_sectors), (2, 2, 1));
        let sources: Vec<Vec<u64>> = p.blocks().map(|b| b.sources).collect();
        assert_eq!(sources, vec![vec![3, 19], vec![4, 20]]);
    }

    #[test]
    fn a_full_stripe_write_has_no_partial_parity() {
        // md's case 2: all three data chunks, rows 0..8.
        let p = EntryPlan::new(&entry(0, 3 * 4096, 0), &G).expect("valid");
        assert!(!p.has_pp);
        let sources: Vec<Vec<u64>> = p.blocks().map(|b| b.sources).collect();
        assert_eq!(sources, vec![vec![0, 16, 32]]);
    }

    #[test]
    fn whole_chunk_partial_parity_covers_up_to_the_data_logged() {
        // md's cases 3 and 4 (other writers): pp of a whole chunk; sources below `last`.
        let p = EntryPlan::new(&entry(0, 40 * 512, 16 * 512), &G).expect("valid");
        assert_eq!((p.data_disks, p.strip_sectors, p.last), (3, 16, 40));
        let blocks: Vec<Block> = p.blocks().collect();
        assert_eq!(blocks[0].sources, vec![0, 16, 32]);
        assert_eq!(
            blocks[1].sources,
            vec![8, 24],
            "row 8 of chunk 2 is past `last`"
        );
    }

    #[test]
    fn entries_md_never_writes_are_skipped() {
        assert_eq!(EntryPlan::new(&entry(0, 0, 0), &G), Err(Skip::Empty));
        assert!(matches!(
            EntryPlan::new(&entry(0, 4097, 4096), &G),
            Err(Skip::Sizes { .. })
        ));
        assert!(matches!(
            EntryPlan::new(&entry(0, 5 * 512, 2 * 512), &G),
            Err(Skip::Sizes { .. })
        ));
        assert_eq!(
            EntryPlan::new(&entry(0, 4 * 512, 512), &G),
            Err(Skip::TooWide(4))
        );
        // Rows 12..20 would cross into the next chunk's rows.
        assert_eq!(
            EntryPlan::new(&entry(12, 4096, 4096), &G),
            Err(Skip::LeavesStripe)
        );
        // Data chunks 2 and 3 of a three-chunk stripe.
        assert_eq!(
            EntryPlan::new(&entry(32, 2 * 512, 512), &G),
            Err(Skip::LeavesStripe)
        );
        assert!(matches!(
            EntryPlan::new(&entry(G.array_sectors - 1, 4096, 4096), &G),
            Err(Skip::PastArray { .. })
        ));
        assert!(matches!(
            EntryPlan::new(&entry(u64::MAX - 4, 3 * 4096, 0), &G),
            Err(Skip::PastArray { .. })
        ));
    }
}
