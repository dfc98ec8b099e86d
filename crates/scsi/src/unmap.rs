//! UNMAP parameter lists (SBC-3 5.28) and the byte comparison behind COMPARE AND WRITE and
//! VERIFY with BYTCHK.

use crate::bytes::{be16, be32, be64};
use crate::{LunInfo, Sense};

const HEADER: usize = 8;
const DESCRIPTOR: usize = 16;

/// Parses an UNMAP parameter list into `(lba, blocks)` ranges, checking lengths, the LUN's
/// descriptor and block count limits and the LBA range. Descriptors of zero blocks are valid
/// and dropped (nothing to unmap); an empty list (parameter list length 0) is a no-op.
pub fn parse_unmap(params: &[u8], anchor: bool, lun: &LunInfo) -> Result<Vec<(u64, u32)>, Sense> {
    if !lun.thin {
        return Err(Sense::invalid_opcode());
    }
    if anchor {
        return Err(Sense::invalid_field_in_cdb(1, Some(0)));
    }
    if params.is_empty() {
        return Ok(Vec::new());
    }
    if params.len() < HEADER {
        return Err(Sense::parameter_list_length_error());
    }
    let data_len = usize::from(be16(params, 0));
    let bd_len = usize::from(be16(params, 2));
    // The data length counts the bytes after itself; it may not promise more than was sent,
    // and must cover the descriptors it announces.
    if data_len + 2 > params.len() || bd_len + HEADER > params.len() || bd_len + 6 > data_len {
        return Err(Sense::parameter_list_length_error());
    }
    // A trailing partial descriptor is ignored, as SBC-3 permits.
    let count = bd_len / DESCRIPTOR;
    if count > lun.max_unmap_descriptors as usize {
        return Err(Sense::invalid_field_in_parameter_list(2, None));
    }
    let mut total = 0u64;
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let at = HEADER + i * DESCRIPTOR;
        let lba = be64(params, at);
        let blocks = be32(params, at + 8);
        if !lun.range_ok(lba, u64::from(blocks)) {
            return Err(Sense::lba_out_of_range());
        }
        total += u64::from(blocks);
        if total > u64::from(lun.max_unmap_blocks) {
            return Err(Sense::invalid_field_in_parameter_list(
                (at + 8) as u16,
                None,
            ));
        }
        if blocks != 0 {
            out.push((lba, blocks));
        }
    }
    Ok(out)
}

/// Offset of the first byte where `expected` and `actual` differ; a length difference counts
/// as a mismatch at the end of the shorter one. `None` when they are equal.
pub fn miscompare_offset(expected: &[u8], actual: &[u8]) -> Option<usize> {
    match expected.iter().zip(actual).position(|(a, b)| a != b) {
        Some(i) => Some(i),
        None if expected.len() != actual.len() => Some(expected.len().min(actual.len())),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lun::test_lun;

    fn list(descs: &[(u64, u32)]) -> Vec<u8> {
        let bd = descs.len() * 16;
        let mut v = Vec::new();
        v.extend_from_slice(&((bd + 6) as u16).to_be_bytes());
        v.extend_from_slice(&(bd as u16).to_be_bytes());
        v.extend_from_slice(&[0; 4]);
        for &(lba, n) in descs {
            v.extend_from_slice(&lba.to_be_bytes());
            v.extend_from_slice(&n.to_be_bytes());
            v.extend_from_slice(&[0; 4]);
        }
        v
    }

    #[test]
    fn parses_ranges() {
        let lun = test_lun();
        let p = list(&[(0, 8), (100, 0), (lun.blocks - 1, 1)]);
        assert_eq!(
            parse_unmap(&p, false, &lun),
            Ok(vec![(0, 8), (lun.blocks - 1, 1)])
        );
        assert_eq!(parse_unmap(&[], false, &lun), Ok(vec![]));
        assert_eq!(parse_unmap(&list(&[]), false, &lun), Ok(vec![]));
        assert_eq!(
            parse_unmap(&list(&[(lun.blocks, 0)]), false, &lun),
            Ok(vec![])
        );
        // padding beyond the announced data is fine
        let mut p = list(&[(1, 1)]);
        p.extend_from_slice(&[0; 16]);
        assert_eq!(parse_unmap(&p, false, &lun), Ok(vec![(1, 1)]));
    }

    #[test]
    fn rejects() {
        let lun = test_lun();
        let code = |r: Result<Vec<(u64, u32)>, Sense>| r.map_err(|e| (e.key, e.asc));
        assert_eq!(
            code(parse_unmap(&list(&[(lun.blocks, 1)]), false, &lun)),
            Err((5, 0x21))
        );
        assert_eq!(
            code(parse_unmap(&list(&[(u64::MAX, 2)]), false, &lun)),
            Err((5, 0x21))
        );
        assert_eq!(code(parse_unmap(&[0, 6, 0], false, &lun)), Err((5, 0x1a)));
        let p = list(&[(0, 1)]);
        assert_eq!(code(parse_unmap(&p[..20], false, &lun)), Err((5, 0x1a)));
        let too_many: Vec<(u64, u32)> = (0..257).map(|i| (i, 1)).collect();
        assert_eq!(
            code(parse_unmap(&list(&too_many), false, &lun)),
            Err((5, 0x26))
        );
        let big = list(&[(0, lun.max_unmap_blocks), (lun.blocks - 1, 1)]);
        assert_eq!(code(parse_unmap(&big, false, &lun)), Err((5, 0x26)));
        assert_eq!(code(parse_unmap(&p, true, &lun)), Err((5, 0x24)));
        let mut thick = lun.clone();
        thick.thin = false;
        assert_eq!(code(parse_unmap(&p, false, &thick)), Err((5, 0x20)));
    }

    #[test]
    fn miscompare() {
        assert_eq!(miscompare_offset(b"abcd", b"abcd"), None);
        assert_eq!(miscompare_offset(b"abcd", b"abXd"), Some(2));
        assert_eq!(miscompare_offset(b"abcd", b"abc"), Some(3));
        assert_eq!(miscompare_offset(b"", b""), None);
    }
}
