//! The journal's block and its checksums.

/// `R5LOG_MAGIC`.
pub const MAGIC: u32 = 0x6433_c509;
/// `R5LOG_VERSION`.
pub const VERSION: u8 = 1;
/// The journal's unit of space: a meta block, a page of data or parity.
pub const BLOCK: usize = 4096;
pub const BLOCK_SECTORS: u64 = (BLOCK / 512) as u64;

/// The seed every journal checksum starts from: the array UUID's CRC32C, as md keeps it
/// (`log->uuid_checksum`, the raw CRC without its final inversion).
pub fn uuid_checksum(set_uuid: &[u8; 16]) -> u32 {
    raw_crc(!0, set_uuid)
}

/// md's checksum of a page of data or parity in the journal.
pub fn page_checksum(uuid_sum: u32, page: &[u8]) -> u32 {
    raw_crc(uuid_sum, page)
}

/// The kernel's `crc32c_le(seed, bytes)`: CRC32C continued from `seed` with no inversion
/// before or after. The crate's `crc32c_append` inverts on the way in and out.
pub(super) fn raw_crc(seed: u32, bytes: &[u8]) -> u32 {
    !crc32c::crc32c_append(!seed, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_raw_crc_continues_the_standard_one() {
        // The standard CRC32C of a message is the raw one from !0, inverted.
        let msg = b"123456789";
        assert_eq!(!raw_crc(!0, msg), 0xe306_9283);
        // Continuing over two halves is one pass over the whole.
        assert_eq!(raw_crc(raw_crc(7, &msg[..4]), &msg[4..]), raw_crc(7, msg));
        assert_ne!(uuid_checksum(&[0; 16]), uuid_checksum(&[1; 16]));
    }
}
