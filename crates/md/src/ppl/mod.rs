//! md's partial parity log (PPL, `--consistency-policy=ppl`, RAID5 only): what closes the
//! write hole without a journal device. Before a stripe's new data and parity go to the
//! members, the XOR of the stripe's data chunks the write leaves alone (its *partial
//! parity*) is written to a log in the metadata area of that stripe's parity member. After
//! an unclean stop, XOR of the partial parity and the written chunks, whatever state each
//! write reached, is a parity consistent with the data: recovery writes it, so a missing
//! member that was not written reads back right.
//!
//! On disk (drivers/md/raid5-ppl.c, include/uapi/linux/raid/md_p.h; all little-endian):
//! each member's PPL area (`ppl.offset`/`ppl.size` in the superblock, sectors from the
//! superblock) holds one log unit, or with MULTIPLE_PPLS a sequence of them that wraps: a
//! 4 KiB header ([`Header`]: 512 bytes of 0xff, signature, generation, entries, checksum)
//! and then the partial parity of its entries, in entry order. Only the newest unit (the
//! highest generation in the scan, [`scan::newest`]) describes writes that may be in
//! flight: md writes a unit only after the previous one's stripes reached the members.
//! The checksums are CRC32C as md computes them (`~crc32c_le(~0, ..)`, the standard CRC32C
//! the `crc32c` crate gives); the signature is that of the array's UUID.
//!
//! This module is bytes and numbers only: the header codec here, the area's placement and
//! checks (`area.rs`), finding the newest unit (`scan.rs`), what recovery reads and writes
//! for an entry (`recover.rs`), and the entries a stripe write logs (`write.rs`).

mod area;
mod header;
mod recover;
pub mod scan;
mod write;

pub use area::Area;
pub use header::{
    pp_checksum, signature, Entry, Header, PplError, ENTRY_SIZE, HEADER_SECTORS, HEADER_SIZE,
    MAX_ENTRIES, RESERVED, SPACE_SIZE,
};
pub use recover::{Block, EntryPlan, ParityGeometry, Skip};
pub use write::{has_gap, segments, Cursor, Segment, UnitBuilder};
