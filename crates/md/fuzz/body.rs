//! The fuzz property, shared by the cargo-fuzz target (`fuzz_targets/superblock.rs`) and
//! the plain test that runs it in CI (`tests/fuzz_property.rs`).
//!
//! For any bytes: parsing never panics, and whatever parses re-encodes to the same bytes
//! (every byte md defines) and parses back to the same value.

use raidd_md::{BitmapSuper, Superblock};

/// Where a v1.2 superblock is read from.
const V12_SECTOR: u64 = 8;
/// Byte offset of `super_offset` in the superblock.
const SUPER_OFFSET_AT: usize = 144;

/// Runs the property on one input. Returns how many of the parsers accepted it, so callers
/// can tell whether their inputs reach past the first checks.
pub fn check(data: &[u8]) -> usize {
    let mut accepted = 0;
    // Where a v1.2 superblock is read, and where this one claims to be (so inputs with any
    // super_offset get past that check too).
    let claimed = data
        .get(SUPER_OFFSET_AT..SUPER_OFFSET_AT + 8)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_le_bytes);
    let elsewhere = claimed.filter(|&sector| sector != V12_SECTOR);
    for read_at in [Some(V12_SECTOR), elsewhere].into_iter().flatten() {
        if let Ok(sb) = Superblock::parse(data, read_at) {
            check_superblock(data, read_at, &sb);
            accepted += 1;
        }
    }
    if let Ok(bitmap) = BitmapSuper::parse(data) {
        check_bitmap(data, &bitmap);
        accepted += 1;
    }
    accepted
}

fn check_superblock(data: &[u8], read_at: u64, sb: &Superblock) {
    let encoded = sb.encode();
    assert_eq!(encoded.len(), sb.encoded_len());
    let used = 256 + 2 * sb.max_dev();
    assert_eq!(
        encoded[..used],
        data[..used],
        "encode changed a defined byte"
    );
    assert_eq!(Superblock::parse(&encoded, read_at).as_ref(), Ok(sb));
    let _ = (sb.own_role(), sb.array_name(), sb.is_clean());
}

fn check_bitmap(data: &[u8], bitmap: &BitmapSuper) {
    let encoded = bitmap.encode();
    assert_eq!(encoded.len(), 256);
    // Everything up to the end of cluster_name is defined; the pad is not compared.
    assert_eq!(encoded[..136], data[..136], "encode changed a defined byte");
    assert_eq!(BitmapSuper::parse(&encoded).as_ref(), Ok(bitmap));
    let _ = (
        bitmap.bits(),
        bitmap.stored_len(4096),
        bitmap.count_dirty(&data[256..]),
    );
}
