//! Header and data digests: CRC32C (RFC 7143 13.1), sent least significant byte first.

/// The CRC32C of the concatenation of `parts` (a header with its AHS, or data with its
/// padding).
pub fn crc32c(parts: &[&[u8]]) -> u32 {
    parts.iter().fold(0, |crc, p| crc32c::crc32c_append(crc, p))
}

/// The four digest bytes as they go on the wire.
pub fn wire(crc: u32) -> [u8; 4] {
    crc.to_le_bytes()
}

/// Whether `got` (as received) is the digest of `parts`.
pub fn matches(parts: &[&[u8]], got: [u8; 4]) -> bool {
    wire(crc32c(parts)) == got
}

#[cfg(test)]
mod tests {
    use super::*;

    // RFC 3720 appendix B.4's examples: the CRC's bytes in wire order.
    #[test]
    fn rfc_vectors() {
        assert_eq!(wire(crc32c(&[&[0u8; 32]])), [0xaa, 0x36, 0x91, 0x8a]);
        assert_eq!(wire(crc32c(&[&[0xffu8; 32]])), [0x43, 0xab, 0xa8, 0x62]);
        let inc: Vec<u8> = (0..32).collect();
        assert_eq!(wire(crc32c(&[&inc])), [0x4e, 0x79, 0xdd, 0x46]);
    }

    #[test]
    fn parts_concatenate() {
        let a = b"hello, ";
        let b = b"iscsi world";
        let whole: Vec<u8> = a.iter().chain(b.iter()).copied().collect();
        assert_eq!(crc32c(&[a, b]), crc32c(&[&whole]));
        assert!(matches(&[&whole], wire(crc32c(&[a, b]))));
        assert!(!matches(&[&whole[1..]], wire(crc32c(&[a, b]))));
    }
}
