//! mdadm's choices when creating v1.2 metadata: data offset, bad-block-log placement, bitmap
//! space, so raidd-created members look like mdadm-created ones.
//!
//! mdadm 4.2 (super1.c) decides in two places, with two different notions of "bitmap
//! space":
//! - `validate_geometry1` picks the data offset from the *device* size
//!   ([`bitmap_space_sectors`] of the whole member, [`default_data_offset`]);
//! - `write_init_super1` later places the bad-block log after the bitmap area, but
//!   recomputes that area from the superblock's `size` field — the per-member *component*
//!   size — or, with an internal bitmap, from the bitmap's real size
//!   ([`bblog_bm_space_sectors`], [`bblog_placement`]).
//!
//! Linear and RAID0 store `size = 0`, so their bitmap area is empty and the log sits at
//! superblock + 8 sectors; levels with a component size reserve 4 KiB (more on devices over
//! 8 GiB) and put the log at + 16. That is why the kernel fixtures show "offset 8 sectors"
//! for linear/raid0 but "offset 16 sectors" for raid1/4/5/6/10.

use crate::bitmap::BitmapSuper;

/// v1.2 superblock position (sectors from the start of the member).
const SB_SECTOR: u64 = crate::SB_OFFSET_V12_SECTORS;
/// Where mdadm puts an internal bitmap: right after the superblock's 4 KiB.
pub const BITMAP_OFFSET_SECTORS: u64 = 8;
/// The bad-block log mdadm reserves: 8 sectors = 512 entries of 8 bytes.
pub const BBLOG_SECTORS: u16 = 8;
/// mdadm rounds the default data offset to 1 MiB.
const DATA_OFFSET_ALIGN_SECTORS: u64 = 2 * 1024;
/// Superblock plus the space mdadm always reserves before the bitmap (12 KiB).
const BASE_METADATA_SECTORS: u64 = 12 * 2;
/// Reshape headroom mdadm aims for: 128 MiB, shrunk on small devices.
const MAX_HEADROOM_SECTORS: u64 = 128 * 1024 * 2;
/// mdadm sizes the bitmap area in whole 4 KiB blocks (4K-sector devices).
const BITMAP_ALIGN_BYTES: u64 = 4096;
/// mdadm rounds a RAID1 component to 64 KiB so a later reshape to RAID5 has whole chunks.
const RAID1_ROUND_SECTORS: u64 = 64 * 2;

const _: () = assert!(
    BITMAP_OFFSET_SECTORS == SB_SECTOR,
    "bitmap follows the 4 KiB sb slot"
);

/// Sectors mdadm reserves for a bitmap on a device of `dev_sectors` (`choose_bm_space`).
pub fn bitmap_space_sectors(dev_sectors: u64) -> u64 {
    const KIB: u64 = 2; // sectors per KiB
    if dev_sectors < 64 * KIB {
        0
    } else if dev_sectors - 64 * KIB >= 200 * 1024 * 1024 * KIB {
        128 * KIB
    } else if dev_sectors - 4 * KIB > 8 * 1024 * 1024 * KIB {
        64 * KIB
    } else {
        4 * KIB
    }
}

/// mdadm's default v1.2 data offset for a member of `dev_sectors` sectors with a chunk of
/// `chunk_sectors` (0 for levels without chunks): 12*2 + bitmap space + headroom (128 MiB,
/// halved while headroom << 10 exceeds the device, but not below 2 chunks) rounded up to
/// 1 MiB.
///
/// mdadm passes the chunk the array will use (its 512 KiB default for chunked levels when
/// none is given; 0 for linear and raid1). The result may exceed a tiny device; the caller
/// must check that data fits, as mdadm does.
pub fn default_data_offset(dev_sectors: u64, chunk_sectors: u32) -> u64 {
    data_offset_with(
        dev_sectors,
        chunk_sectors,
        bitmap_space_sectors(dev_sectors),
    )
}

/// Sectors mdadm reserves after the superblock for a partial parity log (its
/// `MULTIPLE_PPL_AREA_SIZE_SUPER1`, 1 MiB): where a bitmap would be.
pub const PPL_SPACE_SECTORS: u64 = 2048;

/// [`default_data_offset`] with `space` sectors for the bitmap or partial parity log
/// (mdadm's `bmspace`: [`PPL_SPACE_SECTORS`] for `--consistency-policy=ppl`).
pub fn data_offset_with(dev_sectors: u64, chunk_sectors: u32, space: u64) -> u64 {
    let two_chunks = 2 * u64::from(chunk_sectors);
    let mut headroom = MAX_HEADROOM_SECTORS;
    // Aim for about 0.1% of the device, but keep room to move at least two chunks.
    while (headroom << 10) > dev_sectors && (chunk_sectors == 0 || headroom / 2 >= two_chunks) {
        headroom >>= 1;
    }
    let raw = BASE_METADATA_SECTORS + space + headroom;
    let offset = raw.div_ceil(DATA_OFFSET_ALIGN_SECTORS) * DATA_OFFSET_ALIGN_SECTORS;
    debug_assert!(offset >= raw && offset.is_multiple_of(DATA_OFFSET_ALIGN_SECTORS));
    offset
}

/// The bitmap space `write_init_super1` assumes when placing the bad-block log: with an
/// internal bitmap, the bitmap's header and bits rounded to 4 KiB; otherwise
/// [`bitmap_space_sectors`] of `component_sectors`, the superblock's `size` field (0 for
/// linear and RAID0, hence no space).
pub fn bblog_bm_space_sectors(
    component_sectors: u64,
    internal_bitmap: Option<&BitmapSuper>,
) -> u64 {
    match internal_bitmap {
        Some(bitmap) => bitmap.stored_len(BITMAP_ALIGN_BYTES) / 512,
        None => bitmap_space_sectors(component_sectors),
    }
}

/// (bblog_offset, bblog_size) relative to the superblock, as mdadm writes them for v1.2 with
/// the given data offset and bitmap placement (bitmap at +8 with `bm_space` sectors).
///
/// `bm_space` is what `write_init_super1` uses: see [`bblog_bm_space_sectors`]. The log
/// goes right after the bitmap area when the data leaves room; otherwise into the 8
/// sectors just before the data; on a data offset too close to the superblock, nowhere
/// (0, 0).
pub fn bblog_placement(data_offset: u64, bm_space: u64) -> (i32, u16) {
    let log = u64::from(BBLOG_SECTORS);
    let after_bitmap = BITMAP_OFFSET_SECTORS.saturating_add(bm_space);
    let placed = if data_offset >= SB_SECTOR.saturating_add(after_bitmap).saturating_add(log) {
        Some(after_bitmap)
    } else if data_offset >= SB_SECTOR + 2 * log {
        // The 8 sectors before the data, counted from the superblock.
        Some(data_offset - log - SB_SECTOR)
    } else {
        None
    };
    match placed.and_then(|offset| i32::try_from(offset).ok()) {
        Some(offset) => (offset, BBLOG_SECTORS),
        None => (0, 0),
    }
}

/// The component size (`size` field, sectors) mdadm records for a level when every member
/// offers at least `avail_sectors` of data area: 0 for linear (-1) and RAID0, which use
/// each member's whole data area; RAID1 rounded down to 64 KiB; chunked levels rounded down
/// to whole chunks.
pub fn component_size_sectors(level: i32, avail_sectors: u64, chunk_sectors: u32) -> u64 {
    match level {
        -1 | 0 => 0,
        1 => avail_sectors - avail_sectors % RAID1_ROUND_SECTORS,
        _ if chunk_sectors == 0 => avail_sectors,
        _ => avail_sectors - avail_sectors % u64::from(chunk_sectors),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 2 * 1024 * 1024;

    #[test]
    fn bitmap_space_steps() {
        assert_eq!(bitmap_space_sectors(0), 0);
        assert_eq!(bitmap_space_sectors(127), 0);
        assert_eq!(bitmap_space_sectors(128), 8);
        assert_eq!(
            bitmap_space_sectors(8 * GIB + 8),
            8,
            "needs strictly more than 8 GiB"
        );
        assert_eq!(bitmap_space_sectors(8 * GIB + 9), 128);
        assert_eq!(bitmap_space_sectors(200 * GIB + 127), 128);
        assert_eq!(bitmap_space_sectors(200 * GIB + 128), 256);
    }

    #[test]
    fn data_offset_for_large_and_small_devices() {
        let tb = 1_000_000_000_000 / 512;
        assert_eq!(default_data_offset(tb, 1024), 264_192);
        assert_eq!(default_data_offset(2 * 1024 * GIB, 0), 264_192);
        // 16 MiB: headroom shrinks to almost nothing, rounding gives 1 MiB.
        assert_eq!(default_data_offset(32_768, 0), 2048);
        assert_eq!(default_data_offset(32_768, 128), 2048);
        // 100 MiB with a 512 KiB chunk: headroom stops at two chunks (2048 sectors).
        assert_eq!(default_data_offset(204_800, 1024), 4096);
        assert_eq!(default_data_offset(204_800, 0), 2048);
    }

    #[test]
    fn bblog_follows_the_bitmap_area() {
        assert_eq!(bblog_placement(2048, 0), (8, 8));
        assert_eq!(bblog_placement(2048, 8), (16, 8));
        assert_eq!(bblog_placement(264_192, 256), (264, 8));
        // No room after the bitmap: the 8 sectors before the data.
        assert_eq!(bblog_placement(40, 64), (24, 8));
        assert_eq!(bblog_placement(24, 0), (8, 8));
        assert_eq!(bblog_placement(23, 0), (0, 0));
        assert_eq!(bblog_placement(u64::MAX, u64::MAX), (0, 0));
    }

    #[test]
    fn component_size_rounding() {
        assert_eq!(component_size_sectors(-1, 30_720, 0), 0);
        assert_eq!(component_size_sectors(0, 30_720, 128), 0);
        assert_eq!(component_size_sectors(1, 30_800, 0), 30_720);
        assert_eq!(component_size_sectors(5, 30_800, 128), 30_720);
        assert_eq!(component_size_sectors(10, 30_800, 1024), 30_720);
    }
}
