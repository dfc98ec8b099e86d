//! READ CAPACITY (10/16) and GET LBA STATUS (SBC-3 5.16, 5.17, 5.8).

use crate::bytes::put;
use crate::{LunInfo, Sense};

/// Highest LBA; an empty LUN reports 0 like the kernel does rather than underflowing.
fn last_lba(lun: &LunInfo) -> u64 {
    lun.blocks.saturating_sub(1)
}

pub(crate) fn read_capacity_10(lun: &LunInfo) -> Vec<u8> {
    // 0xFFFFFFFF tells the initiator to use READ CAPACITY (16).
    let last = u32::try_from(last_lba(lun)).unwrap_or(u32::MAX);
    let mut b = vec![0u8; 8];
    put(&mut b, 0, last.to_be_bytes());
    put(&mut b, 4, lun.block_size.to_be_bytes());
    b
}

pub(crate) fn read_capacity_16(lun: &LunInfo) -> Vec<u8> {
    let mut b = vec![0u8; 32];
    put(&mut b, 0, last_lba(lun).to_be_bytes());
    put(&mut b, 8, lun.block_size.to_be_bytes());
    // No protection information; P_I_EXPONENT 0.
    b[13] = lun.physical_block_exp & 0x0f;
    // LBPME when thin; LBPRZ stays 0 and LOWEST ALIGNED LBA is 0.
    if lun.thin {
        b[14] = 0x80;
    }
    b
}

/// One LBA status descriptor covering everything from `lba` to the end (at most 2^32-1
/// blocks, the descriptor's limit), status 0 "mapped or unknown": allocation is not tracked.
pub(crate) fn get_lba_status(lba: u64, lun: &LunInfo) -> Result<Vec<u8>, Sense> {
    if lba >= lun.blocks {
        return Err(Sense::lba_out_of_range());
    }
    let count = u32::try_from(lun.blocks - lba).unwrap_or(u32::MAX);
    let mut b = vec![0u8; 24];
    put(&mut b, 0, 20u32.to_be_bytes());
    put(&mut b, 8, lba.to_be_bytes());
    put(&mut b, 16, count.to_be_bytes());
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bytes::{be32, be64};
    use crate::lun::test_lun;

    #[test]
    fn rc10() {
        let mut lun = test_lun();
        assert_eq!(
            read_capacity_10(&lun),
            vec![0x00, 0x0f, 0xff, 0xff, 0, 0, 0x02, 0x00]
        );
        lun.blocks = 1 << 33;
        lun.block_size = 4096;
        assert_eq!(
            read_capacity_10(&lun),
            vec![0xff, 0xff, 0xff, 0xff, 0, 0, 0x10, 0x00]
        );
        lun.blocks = 0;
        assert_eq!(&read_capacity_10(&lun)[..4], &[0, 0, 0, 0]);
    }

    #[test]
    fn rc16() {
        let mut lun = test_lun();
        lun.blocks = 1 << 33;
        let d = read_capacity_16(&lun);
        assert_eq!(d.len(), 32);
        assert_eq!(be64(&d, 0), (1 << 33) - 1);
        assert_eq!(be32(&d, 8), 512);
        assert_eq!(d[12], 0);
        assert_eq!(d[13], 3);
        assert_eq!(d[14], 0x80);
        assert_eq!(d[15], 0);
        lun.thin = false;
        assert_eq!(read_capacity_16(&lun)[14], 0);
    }

    #[test]
    fn lba_status() {
        let lun = test_lun();
        let d = get_lba_status(10, &lun).expect("status");
        assert_eq!(be32(&d, 0), 20);
        assert_eq!(be64(&d, 8), 10);
        assert_eq!(be32(&d, 16) as u64, lun.blocks - 10);
        assert_eq!(d[20], 0);
        let d = get_lba_status(lun.blocks - 1, &lun).expect("last");
        assert_eq!(be32(&d, 16), 1);
        let e = get_lba_status(lun.blocks, &lun).expect_err("oob");
        assert_eq!((e.key, e.asc), (5, 0x21));
        let mut big = lun.clone();
        big.blocks = u64::MAX;
        let d = get_lba_status(0, &big).expect("big");
        assert_eq!(be32(&d, 16), u32::MAX);
    }
}
