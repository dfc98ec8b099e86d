//! Reading the log from its tail as md's recovery does (`r5l_recovery_log`): a unit counts
//! when its meta block is whole, says the position it was read from and the next sequence
//! number, and every page it names matches its checksum. The first unit that fails ends the
//! log; what lies past it was never acknowledged.

use super::block::{page_checksum, BLOCK_SECTORS};
use super::meta::{JournalError, MetaBlock, Payload};

/// Why the log ends where it does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// No valid meta block at the head (never written, or torn).
    NotMeta(JournalError),
    /// A valid block of an older pass round the ring (or of another log).
    OutOfSequence { found: u64, expected: u64 },
    /// A valid block that says it lies elsewhere.
    Misplaced { found: u64, expected: u64 },
    /// A page of the unit does not match its checksum (the unit was torn).
    PageChecksum { payload: usize },
    /// The units read fill the whole ring (a log md could not have written).
    Wrapped,
}

/// Where the next unit should be, in sectors into the journal's data area (a ring of
/// `ring` sectors, whole 4 KiB blocks), and its sequence number once the first unit has
/// set it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    ring: u64,
    pub position: u64,
    pub seq: Option<u64>,
    /// Sectors read so far.
    read: u64,
}

impl Cursor {
    /// A scan from the superblock's `journal_tail`.
    pub fn new(ring: u64, tail: u64) -> Cursor {
        debug_assert!(
            ring.is_multiple_of(BLOCK_SECTORS) && tail < ring,
            "a ring of whole blocks"
        );
        Cursor {
            ring,
            position: tail,
            seq: None,
            read: 0,
        }
    }

    /// `block` (read at [`Cursor::position`]) as the next unit's meta block.
    pub fn meta(&self, block: &[u8], uuid_sum: u32) -> Result<MetaBlock, End> {
        let m = MetaBlock::decode(block, uuid_sum).map_err(End::NotMeta)?;
        if let Some(expected) = self.seq.filter(|&s| s != m.seq) {
            return Err(End::OutOfSequence {
                found: m.seq,
                expected,
            });
        }
        if m.position != self.position {
            return Err(End::Misplaced {
                found: m.position,
                expected: self.position,
            });
        }
        if self.read + m.sectors() > self.ring {
            return Err(End::Wrapped);
        }
        Ok(m)
    }

    /// Where `meta`'s pages lie, in payload order.
    pub fn page_positions(&self, meta: &MetaBlock) -> Vec<u64> {
        (1..=meta.pages())
            .map(|k| self.add(self.position, k * BLOCK_SECTORS))
            .collect()
    }

    /// Moves past `meta`'s unit.
    pub fn advance(&mut self, meta: &MetaBlock) {
        self.position = self.add(self.position, meta.sectors());
        self.seq = Some(meta.seq.wrapping_add(1));
        self.read += meta.sectors();
        debug_assert!(self.read <= self.ring, "never more than the ring");
    }

    fn add(&self, at: u64, sectors: u64) -> u64 {
        (at + sectors) % self.ring
    }
}

/// Checks `pages` (the unit's, in payload order) against the checksums `meta` lists.
pub fn check_pages(meta: &MetaBlock, pages: &[&[u8]], uuid_sum: u32) -> Result<(), End> {
    debug_assert_eq!(pages.len() as u64, meta.pages());
    let mut next = pages.iter();
    for (i, p) in meta.payloads.iter().enumerate() {
        let sums: &[u32] = match p {
            Payload::Data { checksum, .. } => std::slice::from_ref(checksum),
            Payload::Parity { checksums, .. } => checksums,
            Payload::Flush { .. } => &[],
        };
        for &sum in sums {
            let page = next.next().ok_or(End::PageChecksum { payload: i })?;
            if page_checksum(uuid_sum, page) != sum {
                return Err(End::PageChecksum { payload: i });
            }
        }
    }
    Ok(())
}

/// A unit recovery found whole: its meta block and its pages in payload order.
pub type Unit = (MetaBlock, Vec<Vec<u8>>);

/// Every whole unit from the tail, with its pages, and why the log ends: for logs held in
/// memory (offline tools, tests). `read(position)` gives the 4 KiB block there.
pub fn scan(
    ring: u64,
    tail: u64,
    uuid_sum: u32,
    mut read: impl FnMut(u64) -> Vec<u8>,
) -> (Vec<Unit>, End) {
    let mut cur = Cursor::new(ring, tail);
    let mut units = Vec::new();
    loop {
        let meta = match cur.meta(&read(cur.position), uuid_sum) {
            Ok(m) => m,
            Err(end) => return (units, end),
        };
        let pages: Vec<Vec<u8>> = cur
            .page_positions(&meta)
            .into_iter()
            .map(&mut read)
            .collect();
        let refs: Vec<&[u8]> = pages.iter().map(Vec::as_slice).collect();
        if let Err(end) = check_pages(&meta, &refs, uuid_sum) {
            return (units, end);
        }
        cur.advance(&meta);
        units.push((meta, pages));
    }
}
