//! raidd's checksum tags: a CRC32C of every 4 KiB block of a member's data area, kept in a
//! tag area of raidd's own just past md's `data_size`, where neither the kernel nor mdadm
//! reads or writes (for v1.2 metadata everything of md's lies before `data_offset`). The
//! kernel still assembles the array and reads its data; raidd verifies each block it reads
//! against its tag and treats a mismatch as that member's read error, so the block is
//! rebuilt from redundancy (and the tags of two mirror copies say which one is right).
//!
//! ```text
//!  member: | superblock, bitmap, PPL ... | data (md's data_offset .. + data_size) | H | T T T ... |
//!                                                                                 ^ header (4 KiB)
//!  T: a tag page, 1024 tags of 4 bytes for 1024 consecutive data blocks (4 MiB of data)
//! ```
//!
//! The header sits at the first 4 KiB boundary after the data, so it is found from the
//! superblock alone; an md that later grows `data_size` moves that place, and raidd then
//! finds no header there instead of trusting tags the kernel's data overwrote. Tags cost
//! 4 bytes per 4 KiB block (0.098 %) and the header's 4 KiB. A trailing part of the data
//! shorter than a block has no tag.
//!
//! The header says which array and member the tags belong to, the data area they cover, the
//! array's event count when they were last known to match the data (`events`, with
//! `clean`), and how far a background build has come (`built`: blocks below it have tags).
//! Pure functions on bytes and numbers; the engine does the I/O.

use crate::le::{bytes_at, put, put_u32, put_u64, u32_at, u64_at};

/// Bytes of data one tag covers.
pub const BLOCK: usize = 4096;
/// Sectors of data one tag covers.
pub const BLOCK_SECTORS: u64 = (BLOCK / 512) as u64;
/// Bytes of a tag.
pub const TAG_BYTES: usize = 4;
/// Bytes of a tag page (and of the header).
pub const PAGE: usize = 4096;
/// Tags in a page.
pub const TAGS_PER_PAGE: u64 = (PAGE / TAG_BYTES) as u64;
/// Sectors of a page.
pub const PAGE_SECTORS: u64 = (PAGE / 512) as u64;
/// A tag that says nothing: its block is not verified (a discarded block, whose reads may
/// return zeros or the old bytes). A block whose bytes compute to it is not verified either,
/// one chance in 2^32.
pub const NO_TAG: u32 = 0;
/// The header's first bytes.
pub const MAGIC: [u8; 8] = *b"raiddTAG";
/// The header layout this code writes and reads.
pub const VERSION: u32 = 1;

/// How a block's tag is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// CRC32C (Castagnoli), as md's PPL and journal checksum their pages.
    Crc32c,
}

impl Algorithm {
    /// The algorithm's number in the header (and the kind of digest a buffer remembers).
    pub fn code(self) -> u32 {
        match self {
            Algorithm::Crc32c => 1,
        }
    }

    fn from_code(c: u32) -> Option<Algorithm> {
        match c {
            1 => Some(Algorithm::Crc32c),
            _ => None,
        }
    }

    /// The tag of one block's bytes. Every read and write of a checksummed array computes
    /// these: `crc-fast` folds with (V)PCLMULQDQ, about 3.7 times the `crc32c` crate's
    /// speed on 4 KiB blocks here (77 against 21 GB/s), the same value.
    pub fn tag(self, block: &[u8]) -> u32 {
        debug_assert_eq!(block.len(), BLOCK, "a tag covers one whole block");
        match self {
            Algorithm::Crc32c => {
                crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, block) as u32
            }
        }
    }

    /// A tag computed piece by piece (a block split across buffers): `start`, then
    /// `append` each piece in order; the result is [`Algorithm::tag`] of the whole.
    pub fn start(self) -> u32 {
        match self {
            Algorithm::Crc32c => 0,
        }
    }

    /// See [`Algorithm::start`].
    pub fn append(self, sum: u32, piece: &[u8]) -> u32 {
        match self {
            Algorithm::Crc32c => crc32c::crc32c_append(sum, piece),
        }
    }

    /// Its name in the config and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Crc32c => "crc32c",
        }
    }

    pub fn parse(s: &str) -> Option<Algorithm> {
        match s {
            "crc32c" => Some(Algorithm::Crc32c),
            _ => None,
        }
    }
}

/// Where a member's tags lie, in sectors from the member's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// md's data area: its start and length.
    pub data_offset: u64,
    pub data_size: u64,
    /// The header's sector: the first block boundary at or after the data's end.
    pub header_at: u64,
    /// Tag pages, right after the header.
    pub pages: u64,
}

/// Where one block's tag is: its page (index, and sector on the member) and its byte in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    pub page: u64,
    pub sector: u64,
    pub offset: usize,
}

impl Geometry {
    /// The tag area of a member whose data is `data_offset .. data_offset + data_size`
    /// (sectors).
    pub fn of(data_offset: u64, data_size: u64) -> Geometry {
        let end = data_offset.saturating_add(data_size);
        let blocks = data_size / BLOCK_SECTORS;
        Geometry {
            data_offset,
            data_size,
            header_at: end.div_ceil(BLOCK_SECTORS).saturating_mul(BLOCK_SECTORS),
            pages: blocks.div_ceil(TAGS_PER_PAGE),
        }
    }

    /// The largest data area, a multiple of `unit` sectors (the chunk, or a block), whose
    /// tag area still fits a member of `member_sectors` with its data at `data_offset`;
    /// `None` when not even one unit fits.
    pub fn fit(member_sectors: u64, data_offset: u64, unit: u64) -> Option<Geometry> {
        let unit = unit.max(1);
        let fits = |units: u64| Geometry::of(data_offset, units * unit).end() <= member_sectors;
        // The end grows with the data: the largest count of units that fits, by bisection.
        let (mut lo, mut hi) = (0u64, member_sectors.checked_sub(data_offset)? / unit);
        if hi == 0 || !fits(1) {
            return None;
        }
        lo = lo.max(1);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if fits(mid) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        let g = Geometry::of(data_offset, lo * unit);
        debug_assert!(g.end() <= member_sectors && g.data_size > 0, "{g:?} fits");
        Some(g)
    }

    /// The first sector past the tag area.
    pub fn end(&self) -> u64 {
        self.header_at + PAGE_SECTORS + self.pages * PAGE_SECTORS
    }

    /// Blocks with a tag.
    pub fn blocks(&self) -> u64 {
        self.data_size / BLOCK_SECTORS
    }

    /// Sectors the tag area takes (its header included): what checksums cost the member.
    pub fn cost_sectors(&self) -> u64 {
        self.end() - (self.data_offset + self.data_size)
    }

    /// Where block `block`'s tag lives (`block` < [`Geometry::blocks`]).
    #[inline]
    pub fn place(&self, block: u64) -> Place {
        debug_assert!(block < self.blocks(), "block {block} has a tag");
        let page = block / TAGS_PER_PAGE;
        Place {
            page,
            sector: self.header_at + PAGE_SECTORS + page * PAGE_SECTORS,
            offset: (block % TAGS_PER_PAGE) as usize * TAG_BYTES,
        }
    }

    /// The blocks whose tags page `page` holds.
    pub fn page_blocks(&self, page: u64) -> std::ops::Range<u64> {
        let start = page * TAGS_PER_PAGE;
        start.min(self.blocks())..(start + TAGS_PER_PAGE).min(self.blocks())
    }

    /// The blocks a member range of `sectors` at `sector` (data-area relative) touches
    /// whole or in part.
    pub fn blocks_of(sector: u64, sectors: u64) -> std::ops::Range<u64> {
        sector / BLOCK_SECTORS..(sector + sectors).div_ceil(BLOCK_SECTORS)
    }
}

/// Tag `slot` of a page.
#[inline]
pub fn get(page: &[u8], slot: usize) -> u32 {
    u32_at(page, slot * TAG_BYTES)
}

/// Sets tag `slot` of a page.
#[inline]
pub fn set(page: &mut [u8], slot: usize, tag: u32) {
    put_u32(page, slot * TAG_BYTES, tag);
}

/// The tag area's header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub algorithm: Algorithm,
    /// The array's UUID (md's `set_uuid`) and this member's (`device_uuid`).
    pub array_uuid: [u8; 16],
    pub device_uuid: [u8; 16],
    /// The data area the tags cover (sectors), as the superblock said when they were made.
    pub data_offset: u64,
    pub data_size: u64,
    /// The array's event count when the tags were last known to match the data.
    pub events: u64,
    /// Written at a clean stop: every tag matched its block at `events`.
    pub clean: bool,
    /// Blocks below this one have tags; a background build moves it up.
    pub built: u64,
}

/// Why a header is not used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TagError {
    #[error("no tag header (its magic is not there)")]
    NoHeader,
    #[error("the tag header is damaged (checksum {stored:#010x}, computed {computed:#010x})")]
    Checksum { stored: u32, computed: u32 },
    #[error("tag header version {0} (this raidd reads version {VERSION})")]
    Version(u32),
    #[error("tag algorithm {0} is unknown")]
    Algorithm(u32),
    #[error("the tag header is {0} bytes, not {PAGE}")]
    Short(usize),
    #[error("the tags are another {0}'s")]
    Foreign(&'static str),
    #[error("the tags cover data at {had_offset}+{had_size} sectors, the member's is at {offset}+{size}")]
    Moved {
        had_offset: u64,
        had_size: u64,
        offset: u64,
        size: u64,
    },
    #[error("the tag header says {built} blocks are built, of {blocks}")]
    Built { built: u64, blocks: u64 },
}

mod off {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 8;
    pub const ALGORITHM: usize = 12;
    pub const ARRAY_UUID: usize = 16;
    pub const DEVICE_UUID: usize = 32;
    pub const DATA_OFFSET: usize = 48;
    pub const DATA_SIZE: usize = 56;
    pub const EVENTS: usize = 64;
    pub const CLEAN: usize = 72;
    pub const BUILT: usize = 80;
    /// CRC32C of the page with this field zeroed.
    pub const CHECKSUM: usize = 88;
}

fn checksum(page: &[u8]) -> u32 {
    let sum = crc32c::crc32c(&page[..off::CHECKSUM]);
    let sum = crc32c::crc32c_append(sum, &[0; 4]);
    crc32c::crc32c_append(sum, &page[off::CHECKSUM + 4..PAGE])
}

impl Header {
    /// The header page.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; PAGE];
        put(&mut b, off::MAGIC, &MAGIC);
        put_u32(&mut b, off::VERSION, VERSION);
        put_u32(&mut b, off::ALGORITHM, self.algorithm.code());
        put(&mut b, off::ARRAY_UUID, &self.array_uuid);
        put(&mut b, off::DEVICE_UUID, &self.device_uuid);
        put_u64(&mut b, off::DATA_OFFSET, self.data_offset);
        put_u64(&mut b, off::DATA_SIZE, self.data_size);
        put_u64(&mut b, off::EVENTS, self.events);
        put_u32(&mut b, off::CLEAN, u32::from(self.clean));
        put_u64(&mut b, off::BUILT, self.built);
        let sum = checksum(&b);
        put_u32(&mut b, off::CHECKSUM, sum);
        b
    }

    /// A header page as read; every field checked that can be checked alone.
    pub fn decode(b: &[u8]) -> Result<Header, TagError> {
        if b.len() < PAGE {
            return Err(TagError::Short(b.len()));
        }
        if bytes_at::<8>(b, off::MAGIC) != MAGIC {
            return Err(TagError::NoHeader);
        }
        let (stored, computed) = (u32_at(b, off::CHECKSUM), checksum(b));
        if stored != computed {
            return Err(TagError::Checksum { stored, computed });
        }
        let version = u32_at(b, off::VERSION);
        if version != VERSION {
            return Err(TagError::Version(version));
        }
        let code = u32_at(b, off::ALGORITHM);
        let algorithm = Algorithm::from_code(code).ok_or(TagError::Algorithm(code))?;
        let h = Header {
            algorithm,
            array_uuid: bytes_at(b, off::ARRAY_UUID),
            device_uuid: bytes_at(b, off::DEVICE_UUID),
            data_offset: u64_at(b, off::DATA_OFFSET),
            data_size: u64_at(b, off::DATA_SIZE),
            events: u64_at(b, off::EVENTS),
            clean: u32_at(b, off::CLEAN) == 1,
            built: u64_at(b, off::BUILT),
        };
        let blocks = h.data_size / BLOCK_SECTORS;
        if h.built > blocks {
            return Err(TagError::Built {
                built: h.built,
                blocks,
            });
        }
        Ok(h)
    }

    /// Checks the header against the member's superblock (its `set_uuid`, `device_uuid`,
    /// `data_offset` and `data_size`): the same array and member, and the data area where
    /// it was when the tags were made.
    pub fn belongs_to(
        &self,
        array_uuid: &[u8; 16],
        device_uuid: &[u8; 16],
        data_offset: u64,
        data_size: u64,
    ) -> Result<(), TagError> {
        if self.array_uuid != *array_uuid {
            return Err(TagError::Foreign("array"));
        }
        if self.device_uuid != *device_uuid {
            return Err(TagError::Foreign("member"));
        }
        if (self.data_offset, self.data_size) != (data_offset, data_size) {
            return Err(TagError::Moved {
                had_offset: self.data_offset,
                had_size: self.data_size,
                offset: data_offset,
                size: data_size,
            });
        }
        Ok(())
    }

    /// Whether every tag can be trusted as it stands: written at a clean stop at the event
    /// count the array has now, and built whole. Otherwise the caller rebuilds what it
    /// cannot trust (after a crash, the regions being written; after the kernel wrote to
    /// the array, all of it) rather than report those blocks as corrupt.
    pub fn trusted_at(&self, events: u64) -> bool {
        self.clean && self.events == events && self.built == self.data_size / BLOCK_SECTORS
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn header() -> Header {
        Header {
            algorithm: Algorithm::Crc32c,
            array_uuid: [7; 16],
            device_uuid: [9; 16],
            data_offset: 2048,
            data_size: 1 << 21,
            events: 42,
            clean: true,
            built: (1 << 21) / 8,
        }
    }

    #[test]
    fn a_header_round_trips_and_any_flipped_byte_is_caught() {
        let h = header();
        let b = h.encode();
        assert_eq!(b.len(), PAGE);
        assert_eq!(&b[..8], b"raiddTAG");
        assert_eq!(Header::decode(&b), Ok(h.clone()));
        for i in 0..PAGE {
            let mut bad = b.clone();
            bad[i] ^= 0x40;
            let r = Header::decode(&bad);
            assert!(r.is_err(), "byte {i} flipped went unnoticed");
            if i >= 8 {
                assert!(
                    matches!(r, Err(TagError::Checksum { .. })),
                    "byte {i}: {r:?}"
                );
            }
        }
        assert_eq!(Header::decode(&b[..100]), Err(TagError::Short(100)));
        assert_eq!(Header::decode(&[0u8; PAGE]), Err(TagError::NoHeader));
    }

    #[test]
    fn fields_that_cannot_be_are_refused_even_with_a_good_checksum() {
        let reseal = |mut b: Vec<u8>| {
            let sum = checksum(&b);
            put_u32(&mut b, off::CHECKSUM, sum);
            b
        };
        let mut b = header().encode();
        put_u32(&mut b, off::VERSION, 2);
        assert_eq!(Header::decode(&reseal(b)), Err(TagError::Version(2)));
        let mut b = header().encode();
        put_u32(&mut b, off::ALGORITHM, 9);
        assert_eq!(Header::decode(&reseal(b)), Err(TagError::Algorithm(9)));
        let mut b = header().encode();
        put_u64(&mut b, off::BUILT, (1 << 21) / 8 + 1);
        assert!(matches!(
            Header::decode(&reseal(b)),
            Err(TagError::Built { .. })
        ));
    }

    #[test]
    fn a_header_belongs_to_its_own_member_and_data_area_only() {
        let h = header();
        let (a, d) = ([7u8; 16], [9u8; 16]);
        assert_eq!(h.belongs_to(&a, &d, 2048, 1 << 21), Ok(()));
        assert_eq!(
            h.belongs_to(&a, &[1; 16], 2048, 1 << 21),
            Err(TagError::Foreign("member"))
        );
        assert_eq!(
            h.belongs_to(&[1; 16], &d, 2048, 1 << 21),
            Err(TagError::Foreign("array"))
        );
        assert!(matches!(
            h.belongs_to(&a, &d, 2048, (1 << 21) + 8),
            Err(TagError::Moved { .. })
        ));
    }

    #[test]
    fn tags_are_trusted_only_after_a_clean_stop_at_the_same_events_and_built_whole() {
        let h = header();
        assert!(h.trusted_at(42));
        assert!(
            !h.trusted_at(43),
            "the kernel (or a crash) moved the events on"
        );
        assert!(!Header {
            clean: false,
            ..h.clone()
        }
        .trusted_at(42));
        assert!(!Header { built: 5, ..h }.trusted_at(42));
    }

    #[test]
    fn crc32c_is_the_tag() {
        let block = vec![0xa5u8; BLOCK];
        assert_eq!(Algorithm::Crc32c.tag(&block), crc32c::crc32c(&block));
        assert_eq!(Algorithm::parse("crc32c"), Some(Algorithm::Crc32c));
        assert_eq!(Algorithm::parse("md5"), None);
        assert_eq!(Algorithm::Crc32c.name(), "crc32c");
        let mut page = vec![0u8; PAGE];
        set(&mut page, 1023, 0xdead_beef);
        assert_eq!(get(&page, 1023), 0xdead_beef);
        assert_eq!(&page[4092..], &0xdead_beef_u32.to_le_bytes());
    }

    #[test]
    fn the_cost_is_a_tenth_of_a_percent_and_a_header() {
        // A 4 TB member with data 1 MiB in.
        let g = Geometry::fit(4_000_000_000_000 / 512, 2048, 128).unwrap();
        let cost = g.cost_sectors() as f64 / g.data_size as f64;
        assert!((0.00097..0.00099).contains(&cost), "{cost}");
    }

    /// Every block's tag has a place of its own inside the tag area, pages cover the blocks
    /// in order, and the area starts past the data.
    fn check_layout(g: &Geometry) {
        assert!(g.header_at >= g.data_offset + g.data_size);
        assert!(g.header_at < g.data_offset + g.data_size + BLOCK_SECTORS);
        assert_eq!(g.header_at % BLOCK_SECTORS, 0);
        let blocks = g.blocks();
        assert_eq!(g.pages, blocks.div_ceil(TAGS_PER_PAGE));
        let mut last: Option<(u64, usize)> = None;
        let step = (blocks / 200).max(1) as usize;
        let mut sample: Vec<u64> = (0..blocks)
            .step_by(step)
            .chain(blocks.checked_sub(1))
            .collect();
        sample.dedup();
        for b in sample {
            let p = g.place(b);
            assert!(p.sector > g.header_at && p.sector + PAGE_SECTORS <= g.end());
            assert!(p.offset + TAG_BYTES <= PAGE);
            assert!(g.page_blocks(p.page).contains(&b));
            if let Some(prev) = last {
                assert!((p.sector, p.offset) > prev, "tags in block order");
            }
            last = Some((p.sector, p.offset));
        }
    }

    proptest! {
        #[test]
        fn a_fitted_area_is_the_largest_that_fits(
            member in 4096u64..(1u64 << 34),
            offset in 8u64..100_000,
            unit_pow in 0u32..12,
        ) {
            let unit = 1u64 << unit_pow;
            match Geometry::fit(member, offset, unit) {
                Some(g) => {
                    prop_assert!(g.end() <= member, "{g:?} past {member}");
                    prop_assert_eq!(g.data_size % unit, 0);
                    prop_assert!(g.data_size > 0);
                    let bigger = Geometry::of(offset, g.data_size + unit);
                    prop_assert!(bigger.end() > member, "{:?} would fit too", bigger);
                    check_layout(&g);
                }
                None => {
                    let one = Geometry::of(offset, unit);
                    prop_assert!(offset >= member || one.end() > member);
                }
            }
        }

        #[test]
        fn a_tag_computed_in_pieces_is_the_tag_of_the_whole(
            seed in any::<u64>(),
            cuts in proptest::collection::vec(0usize..BLOCK, 0..6),
        ) {
            let block: Vec<u8> = (0..BLOCK)
                .map(|i| (seed.wrapping_mul(i as u64 + 1) >> 13) as u8)
                .collect();
            let mut cuts = cuts;
            cuts.push(0);
            cuts.push(BLOCK);
            cuts.sort_unstable();
            let a = Algorithm::Crc32c;
            let sum = cuts.windows(2).fold(a.start(), |s, w| a.append(s, &block[w[0]..w[1]]));
            prop_assert_eq!(sum, a.tag(&block));
            prop_assert_eq!(sum, crc32c::crc32c(&block));
        }

        #[test]
        fn blocks_of_a_range_cover_it_exactly(sector in 0u64..1 << 30, sectors in 1u64..4096) {
            let r = Geometry::blocks_of(sector, sectors);
            prop_assert!(r.start * BLOCK_SECTORS <= sector);
            prop_assert!(r.end * BLOCK_SECTORS >= sector + sectors);
            prop_assert!((r.start + 1) * BLOCK_SECTORS > sector);
            prop_assert!((r.end - 1) * BLOCK_SECTORS < sector + sectors);
        }
    }

    #[test]
    fn small_and_odd_members_fit_exhaustively() {
        for member in 16u64..3000 {
            for unit in [1u64, 8, 16, 128] {
                if let Some(g) = Geometry::fit(member, 8, unit) {
                    assert!(g.end() <= member);
                    assert!(Geometry::of(8, g.data_size + unit).end() > member);
                    check_layout(&g);
                }
            }
        }
    }
}
