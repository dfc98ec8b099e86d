//! Byte offsets of `struct mdp_superblock_1` (include/uapi/linux/raid/md_p.h).

pub(crate) const MAGIC: usize = 0;
pub(crate) const MAJOR_VERSION: usize = 4;
pub(crate) const FEATURE_MAP: usize = 8;
pub(crate) const PAD0: usize = 12;
pub(crate) const SET_UUID: usize = 16;
pub(crate) const SET_NAME: usize = 32;
pub(crate) const CTIME: usize = 64;
pub(crate) const LEVEL: usize = 72;
pub(crate) const LAYOUT: usize = 76;
pub(crate) const SIZE: usize = 80;
pub(crate) const CHUNKSIZE: usize = 88;
pub(crate) const RAID_DISKS: usize = 92;
/// Union: `bitmap_offset` (s32) or `ppl.offset` (s16) + `ppl.size` (u16).
pub(crate) const BITMAP_OFFSET: usize = 96;
pub(crate) const NEW_LEVEL: usize = 100;
pub(crate) const RESHAPE_POSITION: usize = 104;
pub(crate) const DELTA_DISKS: usize = 112;
pub(crate) const NEW_LAYOUT: usize = 116;
pub(crate) const NEW_CHUNK: usize = 120;
pub(crate) const NEW_OFFSET: usize = 124;
pub(crate) const DATA_OFFSET: usize = 128;
pub(crate) const DATA_SIZE: usize = 136;
pub(crate) const SUPER_OFFSET: usize = 144;
/// Union with `journal_tail`.
pub(crate) const RECOVERY_OFFSET: usize = 152;
pub(crate) const DEV_NUMBER: usize = 160;
pub(crate) const CNT_CORRECTED_READ: usize = 164;
pub(crate) const DEVICE_UUID: usize = 168;
pub(crate) const DEVFLAGS: usize = 184;
pub(crate) const BBLOG_SHIFT: usize = 185;
pub(crate) const BBLOG_SIZE: usize = 186;
pub(crate) const BBLOG_OFFSET: usize = 188;
pub(crate) const UTIME: usize = 192;
pub(crate) const EVENTS: usize = 200;
pub(crate) const RESYNC_OFFSET: usize = 208;
pub(crate) const SB_CSUM: usize = 216;
pub(crate) const MAX_DEV: usize = 220;
pub(crate) const PAD3: usize = 224;
pub(crate) const PAD3_LEN: usize = 32;
/// Fixed part; `dev_roles[]` (le16 each) follows.
pub(crate) const HEADER_LEN: usize = 256;
pub(crate) const DEV_ROLES: usize = HEADER_LEN;
/// md writes the superblock in whole 512-byte sectors.
pub(crate) const SECTOR_BYTES: usize = 512;

// The offsets the kernel itself double-checks (and mdadm's calc_sb_1_csum warns about).
const _: () = assert!(DATA_OFFSET == 128);
const _: () = assert!(UTIME == 192);
const _: () = assert!(PAD3 + PAD3_LEN == HEADER_LEN);
const _: () = assert!(MAX_DEV + 4 == PAD3);
// The checksum sums aligned u32 words; sb_csum must be one of them.
const _: () = assert!(SB_CSUM.is_multiple_of(4));
// The largest superblock the kernel accepts fits the 4 KiB it reads.
const _: () = assert!(HEADER_LEN + 2 * crate::MAX_DEV_LIMIT as usize == 4096);

/// Bytes covered by the checksum (and holding meaningful data) for `max_dev` roles.
pub(crate) fn used_len(max_dev: usize) -> usize {
    HEADER_LEN.saturating_add(max_dev.saturating_mul(2))
}

/// Bytes md writes for `max_dev` roles: [`used_len`] rounded up to whole sectors.
pub(crate) fn encoded_len(max_dev: usize) -> usize {
    used_len(max_dev)
        .div_ceil(SECTOR_BYTES)
        .saturating_mul(SECTOR_BYTES)
}
