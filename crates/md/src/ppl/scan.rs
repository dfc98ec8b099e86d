//! Finding the unit that may describe writes in flight: md's `ppl_load_distributed`. From
//! the start of the area it reads unit after unit (each header followed by its partial
//! parity) while the headers are valid, carry the array's signature and their generation
//! does not go down; the last one read is the newest. Only its entries are recovered: md
//! writes a unit only once the previous one's stripes are on the members, and zeroes the
//! area at each start, so nothing older can be in flight.

use super::header::{Header, PplError, HEADER_SECTORS, HEADER_SIZE};

/// Why the scan stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// The next header's checksum failed (or it was not a header at all).
    Invalid(PplError),
    /// The next header belongs to another array.
    Signature { found: u32 },
    /// The next header is older than the one before it: the log wrapped there.
    Older { generation: u64 },
    /// No room for another header.
    AreaEnd,
}

/// The newest unit, and where it lies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// Sectors from the start of the area to its header.
    pub offset: u64,
    pub header: Header,
}

impl Found {
    /// Sectors from the start of the area to the partial parity of `entry`.
    pub fn pp_offset(&self, entry: usize) -> u64 {
        self.offset
            + HEADER_SECTORS
            + self.header.entries[..entry]
                .iter()
                .map(|e| u64::from(e.pp_size >> 9))
                .sum::<u64>()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scan {
    /// `None`: not even the first header is valid (md counts a mismatch: a dirty start
    /// then resyncs instead of trusting the log).
    pub newest: Option<Found>,
    pub end: End,
}

/// Scans a whole PPL area (`area`: its bytes) of an array whose headers carry `signature`.
pub fn newest(area: &[u8], signature: u32) -> Scan {
    let sectors = (area.len() / 512) as u64;
    let mut offset = 0u64;
    let mut newest: Option<Found> = None;
    let end = loop {
        if offset + HEADER_SECTORS >= sectors {
            break End::AreaEnd;
        }
        let at = (offset * 512) as usize;
        let header = match Header::decode(&area[at..at + HEADER_SIZE]) {
            Ok(h) => h,
            Err(e) => break End::Invalid(e),
        };
        if header.signature != signature {
            break End::Signature {
                found: header.signature,
            };
        }
        if let Some(prev) = &newest {
            if prev.header.generation > header.generation {
                break End::Older {
                    generation: header.generation,
                };
            }
        }
        let next = offset + header.unit_sectors();
        newest = Some(Found { offset, header });
        offset = next;
    };
    Scan { newest, end }
}

#[cfg(test)]
mod tests {
    use super::super::header::Entry;
    use super::*;

    const SIG: u32 = 0x5151_0000;

    fn unit(generation: u64, pp: &[u32]) -> Header {
        Header {
            signature: SIG,
            generation,
            entries: pp
                .iter()
                .map(|&pp_size| Entry {
                    data_sector: 0,
                    pp_size,
                    data_size: pp_size.max(4096),
                    parity_disk: 0,
                    checksum: 0,
                })
                .collect(),
        }
    }

    fn put(area: &mut [u8], sector: u64, h: &Header) {
        let at = (sector * 512) as usize;
        area[at..at + HEADER_SIZE].copy_from_slice(&h.encode());
    }

    #[test]
    fn units_are_followed_to_the_newest() {
        let mut area = vec![0u8; 2048 * 512];
        put(&mut area, 0, &unit(1, &[4096, 8192]));
        put(&mut area, 8 + 24, &unit(2, &[0]));
        put(&mut area, 8 + 24 + 8, &unit(3, &[4096]));
        let s = newest(&area, SIG);
        let found = s.newest.expect("found");
        assert_eq!((found.offset, found.header.generation), (40, 3));
        assert_eq!(found.pp_offset(0), 48);
        assert!(
            matches!(s.end, End::Invalid(_)),
            "zeroes follow: {:?}",
            s.end
        );
    }

    #[test]
    fn a_wrapped_log_ends_where_the_generation_drops() {
        let mut area = vec![0u8; 64 * 512];
        // Units 1..=3 went to 0, 16, 32; unit 4 wrapped to 0 (it did not fit after 48).
        put(&mut area, 16, &unit(2, &[4096]));
        put(&mut area, 32, &unit(3, &[4096]));
        put(&mut area, 0, &unit(4, &[4096]));
        let s = newest(&area, SIG);
        assert_eq!(
            s.newest.map(|f| (f.offset, f.header.generation)),
            Some((0, 4))
        );
        assert_eq!(s.end, End::Older { generation: 2 });
    }

    #[test]
    fn another_array_s_header_ends_the_scan() {
        let mut area = vec![0u8; 64 * 512];
        put(&mut area, 0, &unit(1, &[]));
        let mut other = unit(9, &[]);
        other.signature = 1;
        put(&mut area, 8, &other);
        let s = newest(&area, SIG);
        assert_eq!(s.newest.map(|f| f.header.generation), Some(1));
        assert_eq!(s.end, End::Signature { found: 1 });
        // First header of another array: nothing to trust.
        let s = newest(&area[8 * 512..], SIG);
        assert_eq!(s.newest, None);
    }

    #[test]
    fn a_torn_first_header_leaves_nothing_to_recover() {
        let mut area = vec![0u8; 64 * 512];
        put(&mut area, 0, &unit(1, &[4096]));
        area[600] ^= 1;
        let s = newest(&area, SIG);
        assert_eq!(s.newest, None);
        assert!(matches!(s.end, End::Invalid(PplError::BadChecksum { .. })));
    }

    #[test]
    fn the_scan_stops_at_the_end_of_the_area_and_never_reads_past_it() {
        // A unit claiming more partial parity than the area holds.
        let mut area = vec![0u8; 32 * 512];
        put(&mut area, 0, &unit(1, &[!511]));
        let s = newest(&area, SIG);
        assert_eq!(s.newest.map(|f| f.header.generation), Some(1));
        assert_eq!(s.end, End::AreaEnd);
        // An area too small for one header.
        assert_eq!(newest(&[0u8; 4096], SIG).end, End::AreaEnd);
        assert_eq!(newest(&[], SIG).newest, None);
    }
}
