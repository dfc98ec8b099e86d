//! REPORT LUNS (SPC-4 6.33) and the LUN encoding it uses (SAM-5 4.7).

use crate::bytes::put;

/// Encodes a LUN number as an 8-byte LUN: peripheral device addressing below 256 (what every
/// initiator expects for small numbers), flat space addressing below 16384; anything larger
/// is assumed to be already in SAM's 8-byte form and passed through.
pub fn encode_lun(lun: u64) -> [u8; 8] {
    if lun < 256 {
        [0, lun as u8, 0, 0, 0, 0, 0, 0]
    } else if lun < 0x4000 {
        [0x40 | (lun >> 8) as u8, lun as u8, 0, 0, 0, 0, 0, 0]
    } else {
        lun.to_be_bytes()
    }
}

/// REPORT LUNS parameter data, built no longer than `alloc` needs (the LIST LENGTH still
/// counts every LUN, as SPC requires).
pub(crate) fn report_luns(select: u8, luns: &[u64], alloc: u32) -> Vec<u8> {
    // We have no well-known or administrative logical units: those selections are empty.
    let listed: &[u64] = match select {
        0x00 | 0x02 | 0x11 => luns,
        _ => &[],
    };
    let list_len = (listed.len() as u64).saturating_mul(8);
    let mut out = vec![0u8; 8];
    put(
        &mut out,
        0,
        u32::try_from(list_len).unwrap_or(u32::MAX).to_be_bytes(),
    );
    let room = (alloc as usize).saturating_sub(8).div_ceil(8);
    for &l in listed.iter().take(room) {
        out.extend_from_slice(&encode_lun(l));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings() {
        assert_eq!(encode_lun(0), [0; 8]);
        assert_eq!(encode_lun(5), [0, 5, 0, 0, 0, 0, 0, 0]);
        assert_eq!(encode_lun(300), [0x41, 0x2c, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn report() {
        let d = report_luns(0, &[0, 1, 2], 4096);
        assert_eq!(d.len(), 32);
        assert_eq!(&d[0..4], &[0, 0, 0, 24]);
        assert_eq!(&d[16..24], &[0, 1, 0, 0, 0, 0, 0, 0]);
        let d = report_luns(1, &[0, 1, 2], 4096);
        assert_eq!(d, vec![0; 8]);
        // truncated build still reports the full length
        let d = report_luns(0, &[0, 1, 2], 16);
        assert_eq!(&d[0..4], &[0, 0, 0, 24]);
        assert_eq!(d.len(), 16);
    }
}
