//! A log unit's header (`struct ppl_header`, 4 KiB) and its entries, as bytes: 512 bytes
//! of 0xff, the signature, zero padding, the generation, the entry count and the
//! checksum (CRC32C of the page with the checksum field zero), then the entries.

use crate::le;

/// Bytes of a header (`PPL_HEADER_SIZE`), and of its checksummed page.
pub const HEADER_SIZE: usize = 4096;
/// Sectors of a header.
pub const HEADER_SECTORS: u64 = (HEADER_SIZE / 512) as u64;
/// Leading bytes of a header md fills with 0xff (`PPL_HDR_RESERVED`).
pub const RESERVED: usize = 512;
/// Bytes of one entry (`struct ppl_header_entry`).
pub const ENTRY_SIZE: usize = 24;
/// Entries one header holds (`PPL_HDR_MAX_ENTRIES`).
pub const MAX_ENTRIES: usize = (HEADER_SIZE - RESERVED - 4 * 4 - 8) / ENTRY_SIZE;
/// Partial parity one unit holds when the area holds several units (`PPL_SPACE_SIZE`).
pub const SPACE_SIZE: u32 = 128 * 1024;

mod off {
    pub(super) const SIGNATURE: usize = 512;
    pub(super) const GENERATION: usize = 520;
    pub(super) const ENTRIES_COUNT: usize = 528;
    pub(super) const CHECKSUM: usize = 532;
    pub(super) const ENTRIES: usize = 536;
    /// Within an entry.
    pub(super) const DATA_SECTOR: usize = 0;
    pub(super) const PP_SIZE: usize = 8;
    pub(super) const DATA_SIZE: usize = 12;
    pub(super) const PARITY_DISK: usize = 16;
    pub(super) const ENTRY_CHECKSUM: usize = 20;
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PplError {
    #[error("PPL header is truncated ({0} bytes, {HEADER_SIZE} needed)")]
    Truncated(usize),
    #[error("PPL header checksum {stored:#010x} does not match its bytes ({computed:#010x})")]
    BadChecksum { stored: u32, computed: u32 },
    #[error("PPL header lists {0} entries; a header holds at most {MAX_ENTRIES}")]
    TooManyEntries(u32),
    #[error("PPL area of {0} sectors cannot hold a header and one stripe's partial parity")]
    AreaTooSmall(u16),
    #[error("PPL area (sectors {start}..{end}) overlaps the data area")]
    AreaOverlapsData { start: u64, end: u64 },
    #[error("PPL area (offset {offset}, {size} sectors) overlaps the superblock")]
    AreaOverlapsSuperblock { offset: i16, size: u16 },
}

/// The signature every header of an array carries: CRC32C of its UUID.
pub fn signature(set_uuid: &[u8; 16]) -> u32 {
    crc32c::crc32c(set_uuid)
}

/// An entry's checksum: CRC32C of its partial parity (md chains it over the entry's pages).
pub fn pp_checksum(pp: &[u8]) -> u32 {
    crc32c::crc32c(pp)
}

/// One logged range of a stripe (`struct ppl_header_entry`): the array sector of its first
/// written data block (in 512-byte units for md's own metadata), the bytes of partial
/// parity that follow the header for it (0 for a write of every data chunk), the bytes of
/// data written, the member holding the stripe's parity, and the partial parity's CRC32C.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub data_sector: u64,
    pub pp_size: u32,
    pub data_size: u32,
    pub parity_disk: u32,
    pub checksum: u32,
}

/// A log unit's header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub signature: u32,
    /// Counts the units written since the array started (md starts again from 1 at each
    /// start, after zeroing the area and writing an empty header of generation 0).
    pub generation: u64,
    pub entries: Vec<Entry>,
}

impl Header {
    /// The header md writes at the start of an area when the array starts: no entries.
    pub fn empty(signature: u32) -> Header {
        Header {
            signature,
            generation: 0,
            entries: Vec::new(),
        }
    }

    /// The 4 KiB md writes: 0xff in the reserved bytes, zero padding, the entries, then
    /// the CRC32C of the page taken with the checksum field zero.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; HEADER_SIZE];
        self.encode_into(&mut b);
        b
    }

    /// [`Header::encode`] into the first [`HEADER_SIZE`] bytes of `b`.
    pub fn encode_into(&self, b: &mut [u8]) {
        assert!(
            self.entries.len() <= MAX_ENTRIES,
            "a PPL header holds at most {MAX_ENTRIES} entries"
        );
        let b = &mut b[..HEADER_SIZE];
        b[..RESERVED].fill(0xff);
        b[RESERVED..].fill(0);
        le::put_u32(b, off::SIGNATURE, self.signature);
        le::put_u64(b, off::GENERATION, self.generation);
        le::put_u32(b, off::ENTRIES_COUNT, self.entries.len() as u32);
        for (i, e) in self.entries.iter().enumerate() {
            let at = off::ENTRIES + i * ENTRY_SIZE;
            le::put_u64(b, at + off::DATA_SECTOR, e.data_sector);
            le::put_u32(b, at + off::PP_SIZE, e.pp_size);
            le::put_u32(b, at + off::DATA_SIZE, e.data_size);
            le::put_u32(b, at + off::PARITY_DISK, e.parity_disk);
            le::put_u32(b, at + off::ENTRY_CHECKSUM, e.checksum);
        }
        let sum = crc32c::crc32c(b);
        le::put_u32(b, off::CHECKSUM, sum);
    }

    /// Decodes a header whose checksum holds. The signature is the caller's to compare
    /// (md stops its scan there, [`scan::newest`]). The padding is not checked (md does
    /// not); an entry count past what a header holds is refused (md would read past its
    /// page).
    pub fn decode(bytes: &[u8]) -> Result<Header, PplError> {
        let Some(page) = bytes.get(..HEADER_SIZE) else {
            return Err(PplError::Truncated(bytes.len()));
        };
        let stored = le::u32_at(page, off::CHECKSUM);
        let computed = checksum(page);
        if stored != computed {
            return Err(PplError::BadChecksum { stored, computed });
        }
        let count = le::u32_at(page, off::ENTRIES_COUNT);
        if count as usize > MAX_ENTRIES {
            return Err(PplError::TooManyEntries(count));
        }
        let entries = (0..count as usize)
            .map(|i| {
                let at = off::ENTRIES + i * ENTRY_SIZE;
                Entry {
                    data_sector: le::u64_at(page, at + off::DATA_SECTOR),
                    pp_size: le::u32_at(page, at + off::PP_SIZE),
                    data_size: le::u32_at(page, at + off::DATA_SIZE),
                    parity_disk: le::u32_at(page, at + off::PARITY_DISK),
                    checksum: le::u32_at(page, at + off::ENTRY_CHECKSUM),
                }
            })
            .collect();
        Ok(Header {
            signature: le::u32_at(page, off::SIGNATURE),
            generation: le::u64_at(page, off::GENERATION),
            entries,
        })
    }

    /// Bytes of partial parity after the header.
    pub fn pp_bytes(&self) -> u64 {
        self.entries.iter().map(|e| u64::from(e.pp_size)).sum()
    }

    /// Sectors the unit takes in the area, as md steps from one unit to the next: the
    /// header and each entry's partial parity in whole sectors.
    pub fn unit_sectors(&self) -> u64 {
        HEADER_SECTORS
            + self
                .entries
                .iter()
                .map(|e| u64::from(e.pp_size >> 9))
                .sum::<u64>()
    }
}

/// CRC32C of a header page with its checksum field taken as zero.
fn checksum(page: &[u8]) -> u32 {
    let sum = crc32c::crc32c(&page[..off::CHECKSUM]);
    let sum = crc32c::crc32c_append(sum, &[0; 4]);
    crc32c::crc32c_append(sum, &page[off::CHECKSUM + 4..])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Header {
        Header {
            signature: 0xdead_beef,
            generation: 7,
            entries: vec![
                Entry {
                    data_sector: 1024,
                    pp_size: 4096,
                    data_size: 8192,
                    parity_disk: 2,
                    checksum: 0x1234_5678,
                },
                Entry {
                    data_sector: u64::MAX - 1,
                    pp_size: 0,
                    data_size: 196_608,
                    parity_disk: 0,
                    checksum: 0,
                },
            ],
        }
    }

    #[test]
    fn the_layout_is_md_p_h_s() {
        assert_eq!(MAX_ENTRIES, 148);
        let b = sample().encode();
        assert_eq!(b.len(), HEADER_SIZE);
        assert!(b[..512].iter().all(|&x| x == 0xff));
        assert_eq!(&b[512..516], &0xdead_beef_u32.to_le_bytes());
        assert_eq!(&b[516..520], &[0; 4], "padding");
        assert_eq!(&b[520..528], &7u64.to_le_bytes());
        assert_eq!(&b[528..532], &2u32.to_le_bytes());
        assert_eq!(&b[536..544], &1024u64.to_le_bytes());
        assert_eq!(&b[544..548], &4096u32.to_le_bytes());
        assert_eq!(&b[548..552], &8192u32.to_le_bytes());
        assert_eq!(&b[552..556], &2u32.to_le_bytes());
        assert_eq!(&b[556..560], &0x1234_5678u32.to_le_bytes());
        assert!(
            b[536 + 48..].iter().all(|&x| x == 0),
            "unused entries are zero"
        );
        // md: ~crc32c_le(~0, page with checksum 0, 4096).
        let mut zeroed = b.clone();
        zeroed[532..536].fill(0);
        assert_eq!(&b[532..536], &crc32c::crc32c(&zeroed).to_le_bytes());
    }

    #[test]
    fn a_header_round_trips() {
        let h = sample();
        assert_eq!(Header::decode(&h.encode()), Ok(h.clone()));
        let e = Header::empty(9);
        assert_eq!(Header::decode(&e.encode()), Ok(e));
        assert_eq!(h.pp_bytes(), 4096);
        assert_eq!(h.unit_sectors(), 8 + 8);
    }

    #[test]
    fn any_flipped_bit_is_refused() {
        let b = sample().encode();
        for byte in [0, 511, 512, 516, 520, 528, 532, 536, 559, 4095] {
            let mut bad = b.clone();
            bad[byte] ^= 0x10;
            assert!(
                matches!(Header::decode(&bad), Err(PplError::BadChecksum { .. })),
                "byte {byte}"
            );
        }
        assert_eq!(Header::decode(&b[..4095]), Err(PplError::Truncated(4095)));
        assert!(matches!(
            Header::decode(&[0u8; 4096]),
            Err(PplError::BadChecksum { .. })
        ));
    }

    #[test]
    fn an_entry_count_past_the_page_is_refused_even_with_a_good_checksum() {
        let mut b = Header::empty(1).encode();
        b[528..532].copy_from_slice(&149u32.to_le_bytes());
        b[532..536].fill(0);
        let sum = crc32c::crc32c(&b);
        b[532..536].copy_from_slice(&sum.to_le_bytes());
        assert_eq!(Header::decode(&b), Err(PplError::TooManyEntries(149)));
    }

    /// md: `~crc32c_le(~0, uuid, 16)`, the standard CRC32C (check value of "123456789").
    #[test]
    fn signature_and_checksums_are_standard_crc32c() {
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
        let uuid = *b"0123456789abcdef";
        assert_eq!(signature(&uuid), crc32c::crc32c(&uuid));
        // Chained over pages as md does, the same as over the whole.
        let pp: Vec<u8> = (0..8192u32).map(|i| (i * 7) as u8).collect();
        let chained = crc32c::crc32c_append(crc32c::crc32c(&pp[..4096]), &pp[4096..]);
        assert_eq!(pp_checksum(&pp), chained);
    }
}
