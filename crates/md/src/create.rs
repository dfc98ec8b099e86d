//! mdadm's choices when creating v1.2 metadata: data offset, bad-block-log placement, bitmap
//! space, so raidd-created members look like mdadm-created ones.

/// Sectors mdadm reserves for a bitmap on a device of `dev_sectors` (`choose_bm_space`).
pub fn bitmap_space_sectors(dev_sectors: u64) -> u64 {
    todo!()
}

/// mdadm's default v1.2 data offset for a member of `dev_sectors` sectors with a chunk of
/// `chunk_sectors` (0 for levels without chunks): 12*2 + bitmap space + headroom (128 MiB,
/// halved while headroom << 10 exceeds the device, but not below 2 chunks) rounded up to
/// 1 MiB.
pub fn default_data_offset(dev_sectors: u64, chunk_sectors: u32) -> u64 {
    todo!()
}

/// (bblog_offset, bblog_size) relative to the superblock, as mdadm writes them for v1.2 with
/// the given data offset and bitmap placement (bitmap at +8 with `bm_space` sectors).
pub fn bblog_placement(data_offset: u64, bm_space: u64) -> (i32, u16) {
    todo!()
}
