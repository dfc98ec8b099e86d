//! The description of a logical unit that every decode and response is computed from.

/// What the target knows about one LUN (an array). Everything the initiator sees in INQUIRY,
/// READ CAPACITY and MODE SENSE comes from here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LunInfo {
    /// Logical block size in bytes: 512 or 4096.
    pub block_size: u32,
    /// Capacity in logical blocks.
    pub blocks: u64,
    /// log2(physical block / logical block), reported by READ CAPACITY 16.
    pub physical_block_exp: u8,
    /// VPD B0 OPTIMAL TRANSFER LENGTH (array stripe width in blocks).
    pub optimal_transfer_blocks: u32,
    /// VPD B0 OPTIMAL TRANSFER LENGTH GRANULARITY (array chunk in blocks; saturates at 65535).
    pub optimal_granularity_blocks: u32,
    /// VPD B0 MAXIMUM TRANSFER LENGTH; larger requests get INVALID FIELD IN CDB. 0 = no limit.
    pub max_transfer_blocks: u32,
    /// Writes fail with DATA PROTECT / WRITE PROTECTED; MODE SENSE reports WP.
    pub read_only: bool,
    /// Logical block provisioning: UNMAP and WRITE SAME with UNMAP are supported.
    pub thin: bool,
    /// Whether the medium rotates (VPD B1 MEDIUM ROTATION RATE 0 when true, 1 when false).
    pub rotational: bool,
    /// Caching mode page WCE: the initiator must SYNCHRONIZE CACHE for durability.
    pub write_cache: bool,
    /// INQUIRY T10 vendor identification (8 ASCII bytes after padding).
    pub vendor: String,
    /// INQUIRY product identification (16 ASCII bytes after padding).
    pub product: String,
    /// INQUIRY product revision level (4 ASCII bytes after padding).
    pub revision: String,
    /// VPD 80 unit serial number.
    pub serial: String,
    /// VPD 83 NAA IEEE Registered Extended designator (top nibble forced to 6).
    pub naa_id: [u8; 16],
    /// VPD 83 relative target port identifier.
    pub target_port_id: u16,
    /// VPD B0 MAXIMUM UNMAP LBA COUNT (reported as 0 when not thin).
    pub max_unmap_blocks: u32,
    /// VPD B0 MAXIMUM UNMAP BLOCK DESCRIPTOR COUNT (reported as 0 when not thin).
    pub max_unmap_descriptors: u32,
    /// VPD B0 MAXIMUM WRITE SAME LENGTH. 0 = no limit.
    pub max_write_same_blocks: u64,
    /// VPD B0 MAXIMUM COMPARE AND WRITE LENGTH.
    pub max_compare_write_blocks: u8,
}

impl LunInfo {
    /// Capacity in bytes (saturating: absurd capacities must not overflow).
    pub fn capacity_bytes(&self) -> u64 {
        self.blocks.saturating_mul(u64::from(self.block_size))
    }

    /// Whether `blocks` blocks starting at `lba` lie inside the LUN. An empty range at
    /// exactly the capacity is inside, as SBC's "LBA + length exceeds capacity" rule says.
    pub fn range_ok(&self, lba: u64, blocks: u64) -> bool {
        lba.checked_add(blocks)
            .is_some_and(|end| end <= self.blocks)
    }
}

/// `s` as exactly `n` bytes of printable ASCII: anything else becomes a space (SPC-4 4.3.1
/// allows only 20h..7Eh in these fields), short strings are padded with spaces.
pub(crate) fn ascii_field(s: &str, n: usize) -> Vec<u8> {
    let mut v: Vec<u8> = s
        .bytes()
        .take(n)
        .map(|b| if (0x20..=0x7e).contains(&b) { b } else { b' ' })
        .collect();
    v.resize(n, b' ');
    v
}

#[cfg(test)]
pub(crate) fn test_lun() -> LunInfo {
    LunInfo {
        block_size: 512,
        blocks: 1 << 20,
        physical_block_exp: 3,
        optimal_transfer_blocks: 1024,
        optimal_granularity_blocks: 128,
        max_transfer_blocks: 8192,
        read_only: false,
        thin: true,
        rotational: false,
        write_cache: true,
        vendor: "RAIDD".into(),
        product: "array0".into(),
        revision: "0.1".into(),
        serial: "0123456789abcdef".into(),
        naa_id: [
            0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54,
            0x32, 0x10,
        ],
        target_port_id: 1,
        max_unmap_blocks: 1 << 20,
        max_unmap_descriptors: 256,
        max_write_same_blocks: 65536,
        max_compare_write_blocks: 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ascii_field_pads_truncates_and_sanitises() {
        assert_eq!(ascii_field("RAIDD", 8), b"RAIDD   ".to_vec());
        assert_eq!(ascii_field("abcdefghij", 4), b"abcd".to_vec());
        assert_eq!(ascii_field("a\u{e9}b", 4), b"a  b".to_vec());
    }

    #[test]
    fn range_checks() {
        let lun = test_lun();
        assert!(lun.range_ok(0, lun.blocks));
        assert!(lun.range_ok(lun.blocks, 0));
        assert!(!lun.range_ok(lun.blocks, 1));
        assert!(!lun.range_ok(lun.blocks + 1, 0));
        assert!(!lun.range_ok(u64::MAX, 2));
    }
}
