//! Linux md v1.x metadata as bytes: parse with the kernel's validation rules, encode exactly
//! as md and mdadm do; and raidd's own checksum tags (`tags`), kept past md's data area
//! where md never looks. No I/O here; the engine reads and writes these bytes.

pub mod badblocks;
pub mod bitmap;
pub mod create;
pub mod journal;
mod le;
pub mod policy;
pub mod ppl;
pub mod superblock;
pub mod tags;

pub use bitmap::{BitmapError, BitmapSuper};
pub use superblock::{DevRole, SbError, Superblock};

/// md's superblock magic.
pub const MD_SB_MAGIC: u32 = 0xa92b_4efc;
/// v1.2 places the superblock 4 KiB from the start of the member.
pub const SB_OFFSET_V12_SECTORS: u64 = 8;
/// "No resync needed": md's MaxSector.
pub const MAX_SECTOR: u64 = u64::MAX;
/// The kernel refuses superblocks with more roles than this.
pub const MAX_DEV_LIMIT: u32 = 1920;

/// Per-member flags in the superblock's `devflags` byte (md_p.h).
pub mod devflags {
    /// Read from this member only when no other copy can be (a slow half of a mirror).
    pub const WRITE_MOSTLY: u8 = 1;
    /// Fail it at once on an error instead of retrying.
    pub const FAIL_FAST: u8 = 2;
}

/// feature_map bits (md_p.h).
pub mod feature {
    pub const BITMAP_OFFSET: u32 = 1;
    pub const RECOVERY_OFFSET: u32 = 2;
    pub const RESHAPE_ACTIVE: u32 = 4;
    pub const BAD_BLOCKS: u32 = 8;
    pub const REPLACEMENT: u32 = 16;
    pub const RESHAPE_BACKWARDS: u32 = 32;
    pub const NEW_OFFSET: u32 = 64;
    pub const RECOVERY_BITMAP: u32 = 128;
    pub const CLUSTERED: u32 = 256;
    pub const JOURNAL: u32 = 512;
    pub const PPL: u32 = 1024;
    pub const MULTIPLE_PPLS: u32 = 2048;
    pub const RAID0_LAYOUT: u32 = 4096;
    /// Every bit the kernel knows (it refuses others).
    pub const ALL: u32 = 0x1fff;
    /// Bits raidd understands and honours. Others are refused on assembly with a clear error
    /// even when the kernel would accept them (we cannot keep their promises).
    pub const SUPPORTED: u32 =
        BITMAP_OFFSET | RECOVERY_OFFSET | RECOVERY_BITMAP | BAD_BLOCKS | REPLACEMENT | RAID0_LAYOUT;
}
