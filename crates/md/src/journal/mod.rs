//! md's write journal (drivers/md/raid5-cache.c; `mdadm --write-journal`) as bytes: the log
//! a RAID4/5/6 writes each stripe's new data and parity to before they reach the members.
//!
//! The journal device's data area is a ring of 4 KiB blocks. The log is a run of units,
//! each a meta block ([`MetaBlock`]: magic, checksum, sequence number, its own position)
//! followed by the pages its payloads name, in order: a data payload per data block written
//! (its array sector), a parity payload per stripe (its stripe sector; P, and Q on RAID6).
//! Every checksum is CRC32C seeded with the CRC32C of the array's UUID, without md's
//! usual final inversion (the kernel's raw `crc32c_le`). The journal member's superblock
//! keeps where the log's tail is (`journal_tail`, in the union with `recovery_offset`);
//! recovery reads units from there while each is whole and the next in sequence
//! ([`scan`]).

mod block;
mod meta;
pub mod scan;

pub use meta::{JournalError, MetaBlock, Payload};

pub use block::{page_checksum, uuid_checksum, BLOCK, BLOCK_SECTORS, MAGIC, VERSION};
