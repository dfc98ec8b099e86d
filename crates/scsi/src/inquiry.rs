//! INQUIRY: standard data (SPC-4 6.6.2) and the vital product data pages SBC-3 requires of a
//! block device (00h, 80h, 83h, B0h, B1h, B2h).

use crate::bytes::put;
use crate::lun::ascii_field;
use crate::{LunInfo, Sense};

/// Standard INQUIRY data length; the version descriptors end at byte 73, the rest is reserved.
const STANDARD_LEN: usize = 96;

/// VPD pages in ascending order, as page 00h must list them.
const VPD_PAGES: [u8; 6] = [0x00, 0x80, 0x83, 0xb0, 0xb1, 0xb2];

/// Version descriptors: SAM-5, iSCSI (no version claimed), SPC-4, SBC-3.
const VERSION_DESCRIPTORS: [u16; 4] = [0x00a0, 0x0960, 0x0460, 0x04c0];

/// iSCSI protocol identifier (SPC-4 table 362).
const PROTOCOL_ISCSI: u8 = 0x5;

/// INQUIRY data, not yet truncated.
pub(crate) fn inquiry(evpd: bool, page: u8, lun: &LunInfo) -> Result<Vec<u8>, Sense> {
    if !evpd {
        if page != 0 {
            return Err(Sense::invalid_field_in_cdb(2, None));
        }
        return Ok(standard(lun));
    }
    match page {
        0x00 => Ok(vpd(0x00, VPD_PAGES.to_vec())),
        0x80 => Ok(vpd(0x80, serial(lun))),
        0x83 => Ok(vpd(0x83, device_identification(lun))),
        0xb0 => Ok(vpd(0xb0, block_limits(lun))),
        0xb1 => Ok(vpd(0xb1, block_characteristics(lun))),
        0xb2 => Ok(vpd(0xb2, provisioning(lun))),
        _ => Err(Sense::invalid_field_in_cdb(2, None)),
    }
}

fn standard(lun: &LunInfo) -> Vec<u8> {
    let mut b = vec![0u8; STANDARD_LEN];
    // Peripheral qualifier 0, device type 0 (direct access block device); not removable.
    b[2] = 0x06; // SPC-4
    b[3] = 0x12; // HiSup, response data format 2
    b[4] = (STANDARD_LEN - 5) as u8;
    b[7] = 0x02; // CmdQue
    b[8..16].copy_from_slice(&ascii_field(&lun.vendor, 8));
    b[16..32].copy_from_slice(&ascii_field(&lun.product, 16));
    b[32..36].copy_from_slice(&ascii_field(&lun.revision, 4));
    for (i, d) in VERSION_DESCRIPTORS.iter().enumerate() {
        put(&mut b, 58 + 2 * i, d.to_be_bytes());
    }
    b
}

/// Wraps a VPD page body: qualifier/type 0, page code, 2-byte page length.
fn vpd(page: u8, body: Vec<u8>) -> Vec<u8> {
    let mut b = Vec::with_capacity(body.len() + 4);
    b.extend_from_slice(&[0, page]);
    b.extend_from_slice(&(body.len() as u16).to_be_bytes());
    b.extend_from_slice(&body);
    b
}

/// Serial number as printable ASCII; long serials are cut so the page stays small.
fn serial(lun: &LunInfo) -> Vec<u8> {
    let n = lun.serial.len().min(252);
    ascii_field(&lun.serial, n)
}

fn device_identification(lun: &LunInfo) -> Vec<u8> {
    let mut b = Vec::new();
    // NAA IEEE Registered Extended: binary code set, LU association, designator type 3.
    let mut naa = lun.naa_id;
    naa[0] = (naa[0] & 0x0f) | 0x60;
    b.extend_from_slice(&[0x01, 0x03, 0x00, 16]);
    b.extend_from_slice(&naa);
    // T10 vendor ID based: ASCII, LU association, type 1: vendor + serial. Windows and
    // VMware like to have one alongside the NAA name.
    let mut t10 = ascii_field(&lun.vendor, 8);
    t10.extend_from_slice(&serial(lun));
    t10.truncate(255 - 4);
    b.extend_from_slice(&[0x02, 0x01, 0x00, t10.len() as u8]);
    b.extend_from_slice(&t10);
    // Relative target port: PIV=1 with the iSCSI protocol id, target port association, type 4.
    b.extend_from_slice(&[
        (PROTOCOL_ISCSI << 4) | 0x01,
        0x80 | 0x10 | 0x04,
        0x00,
        4,
        0,
        0,
    ]);
    b.extend_from_slice(&lun.target_port_id.to_be_bytes());
    b
}

fn block_limits(lun: &LunInfo) -> Vec<u8> {
    let mut b = vec![0u8; 0x3c];
    // Offsets below are page offsets minus the 4-byte header.
    b[0] = 0x00; // WSNZ 0: WRITE SAME with 0 blocks writes to the end of the medium
    b[1] = lun.max_compare_write_blocks;
    let granularity = u16::try_from(lun.optimal_granularity_blocks).unwrap_or(u16::MAX);
    put(&mut b, 2, granularity.to_be_bytes());
    put(&mut b, 4, lun.max_transfer_blocks.to_be_bytes());
    put(&mut b, 8, lun.optimal_transfer_blocks.to_be_bytes());
    if lun.thin {
        put(&mut b, 16, lun.max_unmap_blocks.to_be_bytes());
        put(&mut b, 20, lun.max_unmap_descriptors.to_be_bytes());
        // Unmapping less than a chunk frees nothing useful in a RAID.
        put(&mut b, 24, lun.optimal_granularity_blocks.to_be_bytes());
    }
    put(&mut b, 32, lun.max_write_same_blocks.to_be_bytes());
    b
}

fn block_characteristics(lun: &LunInfo) -> Vec<u8> {
    let mut b = vec![0u8; 0x3c];
    let rate: u16 = if lun.rotational { 0 } else { 1 };
    put(&mut b, 0, rate.to_be_bytes());
    b
}

fn provisioning(lun: &LunInfo) -> Vec<u8> {
    let mut b = vec![0u8; 4];
    if lun.thin {
        // LBPU, LBPWS, LBPWS10; LBPRZ 0, ANC_SUP 0, DP 0.
        b[1] = 0x80 | 0x40 | 0x20;
        // PROVISIONING TYPE 010b: thin provisioned.
        b[2] = 0x02;
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bytes::{be16, be32, be64};
    use crate::lun::test_lun;

    #[test]
    fn standard_data() {
        let lun = test_lun();
        let d = inquiry(false, 0, &lun).expect("std");
        assert_eq!(d.len(), 96);
        assert_eq!(d[0], 0x00);
        assert_eq!(d[1], 0x00);
        assert_eq!(d[2], 0x06);
        assert_eq!(d[3], 0x12);
        assert_eq!(d[4] as usize, d.len() - 5);
        assert_eq!(d[7], 0x02);
        assert_eq!(&d[8..16], b"RAIDD   ");
        assert_eq!(&d[16..32], b"array0          ");
        assert_eq!(&d[32..36], b"0.1 ");
        assert_eq!(be16(&d, 62), 0x0460);
        assert_eq!(be16(&d, 64), 0x04c0);
        assert!(d[74..].iter().all(|&b| b == 0));
        assert_eq!(
            inquiry(false, 1, &lun).map_err(|e| e.asc),
            Err(0x24),
            "page without EVPD"
        );
    }

    #[test]
    fn supported_pages_sorted() {
        let lun = test_lun();
        let d = inquiry(true, 0, &lun).expect("00");
        assert_eq!(d, vec![0, 0, 0, 6, 0x00, 0x80, 0x83, 0xb0, 0xb1, 0xb2]);
        for &p in &d[4..] {
            let page = inquiry(true, p, &lun).expect("listed page");
            assert_eq!(page[1], p);
            assert_eq!(be16(&page, 2) as usize, page.len() - 4);
        }
        let e = inquiry(true, 0x86, &lun).expect_err("unknown page");
        assert_eq!((e.key, e.asc), (5, 0x24));
    }

    #[test]
    fn serial_page() {
        let lun = test_lun();
        let d = inquiry(true, 0x80, &lun).expect("80");
        assert_eq!(&d[4..], b"0123456789abcdef");
    }

    #[test]
    fn device_identification_page() {
        let lun = test_lun();
        let d = inquiry(true, 0x83, &lun).expect("83");
        // NAA designator first
        assert_eq!(&d[4..8], &[0x01, 0x03, 0x00, 0x10]);
        assert_eq!(d[8], 0x61);
        assert_eq!(&d[9..24], &lun.naa_id[1..]);
        // T10 vendor id
        assert_eq!(&d[24..28], &[0x02, 0x01, 0x00, 24]);
        assert_eq!(&d[28..36], b"RAIDD   ");
        // relative target port
        let rtp = &d[52..];
        assert_eq!(rtp, &[0x51, 0x94, 0x00, 0x04, 0, 0, 0x00, 0x01]);
    }

    #[test]
    fn block_limits_page() {
        let lun = test_lun();
        let d = inquiry(true, 0xb0, &lun).expect("b0");
        assert_eq!(d.len(), 64);
        assert_eq!(d[3], 0x3c);
        assert_eq!(d[4] & 1, 0, "WSNZ 0");
        assert_eq!(d[5], 1);
        assert_eq!(be16(&d, 6), 128);
        assert_eq!(be32(&d, 8), 8192);
        assert_eq!(be32(&d, 12), 1024);
        assert_eq!(be32(&d, 20), 1 << 20);
        assert_eq!(be32(&d, 24), 256);
        assert_eq!(be64(&d, 36), 65536);
        let mut thick = lun.clone();
        thick.thin = false;
        let d = inquiry(true, 0xb0, &thick).expect("b0");
        assert_eq!(be32(&d, 20), 0);
        assert_eq!(be32(&d, 24), 0);
    }

    #[test]
    fn characteristics_and_provisioning() {
        let mut lun = test_lun();
        let d = inquiry(true, 0xb1, &lun).expect("b1");
        assert_eq!(be16(&d, 4), 1);
        assert_eq!(d.len(), 64);
        lun.rotational = true;
        let d = inquiry(true, 0xb1, &lun).expect("b1");
        assert_eq!(be16(&d, 4), 0);
        let d = inquiry(true, 0xb2, &lun).expect("b2");
        assert_eq!(d, vec![0, 0xb2, 0, 4, 0, 0xe0, 0x02, 0]);
        lun.thin = false;
        let d = inquiry(true, 0xb2, &lun).expect("b2");
        assert_eq!(d, vec![0, 0xb2, 0, 4, 0, 0, 0, 0]);
    }
}
