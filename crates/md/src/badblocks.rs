//! md's bad-block log (v1.x: `bblog_offset`, `bblog_size`, `bblog_shift` in the superblock).
//!
//! When a write to a member fails and the array can do without that copy, the kernel records
//! the sectors in the member's log instead of failing the member, and from then on reads
//! around them: what the member holds there is not the array's data. The log is a table of
//! little-endian u64 entries, each `sector << 10 | length` in units of `1 << bblog_shift`
//! sectors, sector counted from the start of the device (not of its data area); an entry of
//! all ones ends it, and an empty log is all ones. Entries of length 0 (what a log that was
//! never written, all zeros, holds) record nothing, as in the kernel.

/// Sectors of a member the kernel recorded as bad: `sectors` from device sector `start`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadRange {
    pub start: u64,
    pub sectors: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadBlocksError {
    #[error("bad-block log entry {index} ({raw:#018x}) does not fit in 64-bit sectors with bblog_shift {shift}")]
    Overflow { index: usize, raw: u64, shift: u8 },
}

/// Bits of an entry that hold its length.
const LEN_BITS: u32 = 10;
/// An entry of all ones ends the log.
const END: u64 = u64::MAX;

/// The ranges recorded in a log's bytes (`bblog_size` sectors of them), in the log's order.
pub fn parse(log: &[u8], shift: u8) -> Result<Vec<BadRange>, BadBlocksError> {
    let mut out = Vec::new();
    for (index, entry) in log.chunks_exact(8).enumerate() {
        let raw = u64::from_le_bytes(entry.try_into().expect("8 bytes"));
        if raw == END {
            break;
        }
        let len = raw & ((1 << LEN_BITS) - 1);
        if len == 0 {
            continue;
        }
        let scale = |v: u64| v.checked_mul(1u64.checked_shl(u32::from(shift))?);
        let (Some(start), Some(sectors)) = (scale(raw >> LEN_BITS), scale(len)) else {
            return Err(BadBlocksError::Overflow { index, raw, shift });
        };
        if start.checked_add(sectors).is_none() {
            return Err(BadBlocksError::Overflow { index, raw, shift });
        }
        out.push(BadRange { start, sectors });
    }
    Ok(out)
}

/// The bytes of an empty log of `sectors` sectors (all ones, as the kernel and mdadm write it).
pub fn empty(sectors: u16) -> Vec<u8> {
    vec![0xff; usize::from(sectors) * 512]
}

/// One entry as the kernel writes it (for tests and tools): `sectors` from `start`, both in
/// units of `1 << shift`; `None` if they do not fit an entry.
pub fn entry(start: u64, sectors: u64, shift: u8) -> Option<[u8; 8]> {
    let unit = 1u64.checked_shl(u32::from(shift))?;
    if !start.is_multiple_of(unit) || !sectors.is_multiple_of(unit) {
        return None;
    }
    let (s, n) = (start / unit, sectors / unit);
    if n == 0 || n >= 1 << LEN_BITS || s >= 1 << (64 - LEN_BITS) {
        return None;
    }
    Some((s << LEN_BITS | n).to_le_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn log(entries: &[[u8; 8]], sectors: u16) -> Vec<u8> {
        let mut b = empty(sectors);
        for (i, e) in entries.iter().enumerate() {
            b[i * 8..i * 8 + 8].copy_from_slice(e);
        }
        b
    }

    #[test]
    fn empty_and_zeroed_logs_record_nothing() {
        assert_eq!(parse(&empty(8), 0).unwrap(), vec![]);
        assert_eq!(parse(&vec![0u8; 4096], 0).unwrap(), vec![]);
    }

    #[test]
    fn entries_up_to_the_end_marker() {
        let b = log(
            &[
                entry(4096, 8, 0).unwrap(),
                entry(10_000, 1, 0).unwrap(),
                [0xff; 8],
                entry(1, 1, 0).unwrap(), // past the end: not read
            ],
            1,
        );
        assert_eq!(
            parse(&b, 0).unwrap(),
            vec![
                BadRange {
                    start: 4096,
                    sectors: 8
                },
                BadRange {
                    start: 10_000,
                    sectors: 1
                }
            ]
        );
    }

    #[test]
    fn the_shift_scales_start_and_length() {
        // Units of 8 sectors (4 KiB).
        let b = log(&[entry(8 * 100, 8 * 3, 3).unwrap()], 1);
        assert_eq!(
            parse(&b, 3).unwrap(),
            vec![BadRange {
                start: 800,
                sectors: 24
            }]
        );
        assert_eq!(entry(801, 8, 3), None, "not a whole unit");
    }

    #[test]
    fn entries_beyond_64_bit_sectors_are_refused() {
        let raw = (u64::MAX >> 1) & !0x3ff | 1;
        let b = log(&[raw.to_le_bytes()], 1);
        assert!(parse(&b, 0).is_ok());
        assert_eq!(
            parse(&b, 20),
            Err(BadBlocksError::Overflow {
                index: 0,
                raw,
                shift: 20
            })
        );
        assert!(matches!(
            parse(&b, 200),
            Err(BadBlocksError::Overflow { .. })
        ));
    }

    proptest! {
        #[test]
        fn entries_round_trip(
            list in proptest::collection::vec((0u64..1 << 40, 1u64..1024), 0..64),
            shift in 0u8..4,
        ) {
            let unit = 1u64 << shift;
            let ranges: Vec<BadRange> = list
                .iter()
                .map(|&(s, n)| BadRange { start: s * unit, sectors: n * unit })
                .collect();
            let entries: Vec<[u8; 8]> = ranges
                .iter()
                .map(|r| entry(r.start, r.sectors, shift).unwrap())
                .collect();
            prop_assert_eq!(parse(&log(&entries, 1), shift).unwrap(), ranges);
        }

        #[test]
        fn any_bytes_parse_without_panicking(
            bytes in proptest::collection::vec(any::<u8>(), 0..600),
            shift in any::<u8>(),
        ) {
            let _ = parse(&bytes, shift);
        }
    }
}
