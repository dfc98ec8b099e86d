//! CDB decoding with every check SBC-3/SPC-4 assigns to the device server before it touches
//! the medium: opcode/service action support, reserved bits, transfer limits, LBA range and
//! write protection, in that order.

use crate::bytes::{be16, be32, be64};
use crate::mode::page_supported;
use crate::opcodes::{code, has_service_action, lookup, Lookup};
use crate::{LunInfo, Op, Sense};

/// CDB length implied by the opcode's group code (SPC-4 4.2.5.1); groups 3, 6 and 7 hold
/// nothing we implement.
fn cdb_len(opcode: u8) -> Option<usize> {
    match opcode >> 5 {
        0 => Some(6),
        1 | 2 => Some(10),
        4 => Some(16),
        5 => Some(12),
        _ => None,
    }
}

/// Decodes and validates a CDB for `lun`. Errors are the sense data to return with CHECK
/// CONDITION. Trailing bytes past the opcode's CDB length are ignored (iSCSI pads every CDB
/// to 16 bytes).
pub fn decode(cdb: &[u8], lun: &LunInfo) -> Result<Op, Sense> {
    let Some(&opcode) = cdb.first() else {
        return Err(Sense::invalid_opcode());
    };
    let Some(len) = cdb_len(opcode) else {
        return Err(Sense::invalid_opcode());
    };
    if cdb.len() < len {
        return Err(Sense::invalid_field_in_cdb(cdb.len() as u16, None));
    }
    let mut c = [0u8; 16];
    for (d, s) in c.iter_mut().zip(cdb.iter().take(len)) {
        *d = *s;
    }
    let sa = c[1] & 0x1f;
    let command = match lookup(opcode, sa, lun) {
        Lookup::Found(cmd) => cmd,
        Lookup::NoServiceAction => return Err(Sense::invalid_field_in_cdb(1, Some(4))),
        Lookup::NoOpcode => return Err(Sense::invalid_opcode()),
    };
    let (usage, _) = command.usage_for(lun);
    check_reserved(&c, &usage, len, has_service_action(opcode))?;

    let op = parse(opcode, sa, &c, lun)?;
    check_medium_access(&op, lun)?;
    Ok(op)
}

/// Bits outside the usage map are reserved, obsolete or unsupported features (protection
/// information, anchoring, ...): SPC-4 requires INVALID FIELD IN CDB for a set reserved bit,
/// pointing at the most significant offending bit.
fn check_reserved(c: &[u8; 16], usage: &[u8; 16], len: usize, sa: bool) -> Result<(), Sense> {
    let control = len - 1;
    for i in 1..control {
        let mut allowed = usage[i];
        if i == 1 && sa {
            allowed |= 0x1f;
        }
        let bad = c[i] & !allowed;
        if bad != 0 {
            return Err(Sense::invalid_field_in_cdb(
                i as u16,
                Some(7 - bad.leading_zeros() as u8),
            ));
        }
    }
    // NACA needs NormACA support, LINK linked commands: we offer neither. Vendor-specific
    // and obsolete control bits are ignored.
    for bit in [2u8, 0] {
        if c[control] & (1 << bit) != 0 {
            return Err(Sense::invalid_field_in_cdb(control as u16, Some(bit)));
        }
    }
    Ok(())
}

/// The opcode-specific fields; reserved bits were already checked.
fn parse(opcode: u8, sa: u8, c: &[u8; 16], lun: &LunInfo) -> Result<Op, Sense> {
    let flag = |byte: usize, bit: u8| c[byte] & (1 << bit) != 0;
    let op = match opcode {
        code::TEST_UNIT_READY => Op::TestUnitReady,
        code::REQUEST_SENSE => Op::RequestSense {
            descriptor: flag(1, 0),
            alloc: c[4],
        },
        code::INQUIRY => {
            let evpd = flag(1, 0);
            let page = c[2];
            if !evpd && page != 0 {
                return Err(Sense::invalid_field_in_cdb(2, None));
            }
            Op::Inquiry {
                evpd,
                page,
                alloc: be16(c, 3),
            }
        }
        code::MODE_SENSE_6 | code::MODE_SENSE_10 => {
            let ten = opcode == code::MODE_SENSE_10;
            let pc = c[2] >> 6;
            let page = c[2] & 0x3f;
            let subpage = c[3];
            if pc == 3 {
                return Err(Sense::saving_parameters_not_supported());
            }
            if !page_supported(page) {
                return Err(Sense::invalid_field_in_cdb(2, Some(5)));
            }
            // No subpages exist here; 0xFF asks for "all subpages", which is just page 0.
            if subpage != 0 && subpage != 0xff {
                return Err(Sense::invalid_field_in_cdb(3, None));
            }
            Op::ModeSense {
                ten,
                dbd: flag(1, 3),
                llbaa: ten && flag(1, 4),
                pc,
                page,
                subpage,
                alloc: if ten { be16(c, 7) } else { u16::from(c[4]) },
            }
        }
        code::MODE_SELECT_6 | code::MODE_SELECT_10 => {
            let ten = opcode == code::MODE_SELECT_10;
            if flag(1, 0) {
                // Saved pages are not implemented: SP=1 cannot be honoured.
                return Err(Sense::invalid_field_in_cdb(1, Some(0)));
            }
            Op::ModeSelect {
                ten,
                pf: flag(1, 4),
                sp: false,
                param_len: if ten { be16(c, 7) } else { u16::from(c[4]) },
            }
        }
        code::START_STOP_UNIT => Op::StartStopUnit {
            immed: flag(1, 0),
            start: flag(4, 0),
            loej: flag(4, 1),
            power_condition: c[4] >> 4,
        },
        code::READ_CAPACITY_10 => {
            // SBC-3: with PMI zero the LBA field must be zero.
            if !flag(8, 0) && be32(c, 2) != 0 {
                return Err(Sense::invalid_field_in_cdb(2, None));
            }
            Op::ReadCapacity10
        }
        code::SERVICE_ACTION_IN_16 => match sa {
            code::SA_READ_CAPACITY_16 => Op::ReadCapacity16 { alloc: be32(c, 10) },
            _ => {
                let lba = be64(c, 2);
                if lba >= lun.blocks {
                    return Err(Sense::lba_out_of_range());
                }
                Op::GetLbaStatus {
                    lba,
                    alloc: be32(c, 10),
                }
            }
        },
        code::READ_6 | code::WRITE_6 => {
            let lba = u64::from(be32(c, 0) & 0x001f_ffff);
            // READ(6)/WRITE(6): a transfer length of 0 means 256 blocks.
            let blocks = if c[4] == 0 { 256 } else { u32::from(c[4]) };
            transfer(opcode == code::WRITE_6, lba, blocks, false, 4, lun)?
        }
        code::READ_10 | code::WRITE_10 => transfer(
            opcode == code::WRITE_10,
            u64::from(be32(c, 2)),
            u32::from(be16(c, 7)),
            flag(1, 3),
            7,
            lun,
        )?,
        code::READ_12 | code::WRITE_12 => transfer(
            opcode == code::WRITE_12,
            u64::from(be32(c, 2)),
            be32(c, 6),
            flag(1, 3),
            6,
            lun,
        )?,
        code::READ_16 | code::WRITE_16 => transfer(
            opcode == code::WRITE_16,
            be64(c, 2),
            be32(c, 10),
            flag(1, 3),
            10,
            lun,
        )?,
        code::VERIFY_10 | code::WRITE_AND_VERIFY_10 => verify(
            opcode == code::WRITE_AND_VERIFY_10,
            c,
            u64::from(be32(c, 2)),
            u32::from(be16(c, 7)),
            7,
            lun,
        )?,
        code::VERIFY_12 | code::WRITE_AND_VERIFY_12 => verify(
            opcode == code::WRITE_AND_VERIFY_12,
            c,
            u64::from(be32(c, 2)),
            be32(c, 6),
            6,
            lun,
        )?,
        code::VERIFY_16 | code::WRITE_AND_VERIFY_16 => verify(
            opcode == code::WRITE_AND_VERIFY_16,
            c,
            be64(c, 2),
            be32(c, 10),
            10,
            lun,
        )?,
        code::SYNCHRONIZE_CACHE_10 | code::PRE_FETCH_10 => cache_op(
            opcode == code::PRE_FETCH_10,
            u64::from(be32(c, 2)),
            u32::from(be16(c, 7)),
            flag(1, 1),
            lun,
        )?,
        code::SYNCHRONIZE_CACHE_16 | code::PRE_FETCH_16 => cache_op(
            opcode == code::PRE_FETCH_16,
            be64(c, 2),
            be32(c, 10),
            flag(1, 1),
            lun,
        )?,
        code::WRITE_SAME_10 => write_same(u64::from(be32(c, 2)), u32::from(be16(c, 7)), 7, c, lun)?,
        code::WRITE_SAME_16 => write_same(be64(c, 2), be32(c, 10), 10, c, lun)?,
        code::UNMAP => Op::Unmap {
            anchor: false,
            param_len: be16(c, 7),
        },
        code::ORWRITE_16 => {
            let (lba, blocks) = (be64(c, 2), be32(c, 10));
            transfer_limit(blocks, 10, lun)?;
            range(lba, blocks, lun)?;
            Op::OrWrite {
                lba,
                blocks,
                fua: flag(1, 3),
            }
        }
        code::RESERVE_6 => Op::Reserve6,
        code::RELEASE_6 => Op::Release6,
        code::COMPARE_AND_WRITE => {
            let blocks = c[13];
            if blocks > lun.max_compare_write_blocks {
                return Err(Sense::invalid_field_in_cdb(13, None));
            }
            let lba = be64(c, 2);
            if !lun.range_ok(lba, u64::from(blocks)) {
                return Err(Sense::lba_out_of_range());
            }
            Op::CompareAndWrite {
                lba,
                blocks,
                fua: flag(1, 3),
            }
        }
        code::REPORT_LUNS => {
            let select = c[2];
            if !matches!(select, 0x00 | 0x01 | 0x02 | 0x10 | 0x11 | 0x12) {
                return Err(Sense::invalid_field_in_cdb(2, None));
            }
            Op::ReportLuns {
                select,
                alloc: be32(c, 6),
            }
        }
        code::MAINTENANCE_IN => {
            let options = c[2] & 0x07;
            if options > 3 {
                return Err(Sense::invalid_field_in_cdb(2, Some(2)));
            }
            Op::ReportSupportedOpcodes {
                rctd: flag(2, 7),
                options,
                opcode: c[3],
                service_action: be16(c, 4),
                alloc: be32(c, 6),
            }
        }
        code::PERSISTENT_RESERVE_IN => Op::PersistentReserveIn {
            action: sa,
            alloc: be16(c, 7),
        },
        code::PERSISTENT_RESERVE_OUT => {
            let param_len = be32(c, 5);
            // Without SPEC_I_PT and REGISTER AND MOVE every parameter list is 24 bytes.
            if param_len != 24 {
                return Err(Sense::parameter_list_length_error());
            }
            Op::PersistentReserveOut {
                action: sa,
                scope: c[2] >> 4,
                kind: c[2] & 0x0f,
                param_len,
            }
        }
        _ => return Err(Sense::invalid_opcode()),
    };
    Ok(op)
}

fn transfer_limit(blocks: u32, len_byte: u16, lun: &LunInfo) -> Result<(), Sense> {
    if lun.max_transfer_blocks != 0 && blocks > lun.max_transfer_blocks {
        return Err(Sense::invalid_field_in_cdb(len_byte, None));
    }
    Ok(())
}

fn range(lba: u64, blocks: u32, lun: &LunInfo) -> Result<(), Sense> {
    if lun.range_ok(lba, u64::from(blocks)) {
        Ok(())
    } else {
        Err(Sense::lba_out_of_range())
    }
}

fn transfer(
    write: bool,
    lba: u64,
    blocks: u32,
    fua: bool,
    len_byte: u16,
    lun: &LunInfo,
) -> Result<Op, Sense> {
    transfer_limit(blocks, len_byte, lun)?;
    range(lba, blocks, lun)?;
    Ok(if write {
        Op::Write { lba, blocks, fua }
    } else {
        Op::Read { lba, blocks, fua }
    })
}

fn verify(
    write: bool,
    c: &[u8; 16],
    lba: u64,
    blocks: u32,
    len_byte: u16,
    lun: &LunInfo,
) -> Result<Op, Sense> {
    // BYTCHK 10b is reserved; 11b (one block compared against every block) is not offered.
    let bytchk = match (c[1] >> 1) & 0x03 {
        0 => false,
        1 => true,
        _ => return Err(Sense::invalid_field_in_cdb(1, Some(2))),
    };
    transfer_limit(blocks, len_byte, lun)?;
    range(lba, blocks, lun)?;
    Ok(if write {
        Op::WriteAndVerify {
            lba,
            blocks,
            bytchk,
        }
    } else {
        Op::Verify {
            lba,
            blocks,
            bytchk,
        }
    })
}

fn cache_op(
    prefetch: bool,
    lba: u64,
    blocks: u32,
    immed: bool,
    lun: &LunInfo,
) -> Result<Op, Sense> {
    range(lba, blocks, lun)?;
    Ok(if prefetch {
        Op::PreFetch { lba, blocks, immed }
    } else {
        Op::SynchronizeCache { lba, blocks, immed }
    })
}

fn write_same(
    lba: u64,
    blocks: u32,
    len_byte: u16,
    c: &[u8; 16],
    lun: &LunInfo,
) -> Result<Op, Sense> {
    // VPD B0 reports WSNZ=0: a zero length means "to the end of the medium" (SBC-3
    // 5.42), which must still fit the field this crate carries it in.
    let blocks = if blocks == 0 {
        if lba > lun.blocks {
            return Err(Sense::lba_out_of_range());
        }
        u32::try_from(lun.blocks - lba).map_err(|_| Sense::invalid_field_in_cdb(len_byte, None))?
    } else {
        blocks
    };
    if blocks == 0 {
        // Zero blocks to write at exactly the end: nothing to do, and nothing wrong.
        return Ok(Op::WriteSame {
            lba,
            blocks,
            unmap: c[1] & 0x08 != 0,
            anchor: false,
            ndob: c[0] == code::WRITE_SAME_16 && c[1] & 0x01 != 0,
        });
    }
    if lun.max_write_same_blocks != 0 && u64::from(blocks) > lun.max_write_same_blocks {
        return Err(Sense::invalid_field_in_cdb(len_byte, None));
    }
    range(lba, blocks, lun)?;
    Ok(Op::WriteSame {
        lba,
        blocks,
        unmap: c[1] & 0x08 != 0,
        anchor: false,
        ndob: c[0] == code::WRITE_SAME_16 && c[1] & 0x01 != 0,
    })
}

fn check_medium_access(op: &Op, lun: &LunInfo) -> Result<(), Sense> {
    if lun.read_only && op.is_write() {
        return Err(Sense::write_protected());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lun::test_lun;

    fn asc(r: Result<Op, Sense>) -> (u8, u8, u8) {
        let s = r.expect_err("expected an error");
        (s.key, s.asc, s.ascq)
    }

    fn read10(lba: u32, len: u16) -> Vec<u8> {
        let mut c = vec![0x28, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        c[2..6].copy_from_slice(&lba.to_be_bytes());
        c[7..9].copy_from_slice(&len.to_be_bytes());
        c
    }

    fn rw16(opcode: u8, lba: u64, len: u32) -> Vec<u8> {
        let mut c = vec![0u8; 16];
        c[0] = opcode;
        c[2..10].copy_from_slice(&lba.to_be_bytes());
        c[10..14].copy_from_slice(&len.to_be_bytes());
        c
    }

    #[test]
    fn empty_and_unknown() {
        let lun = test_lun();
        assert_eq!(asc(decode(&[], &lun)), (5, 0x20, 0));
        assert_eq!(asc(decode(&[0xc0; 16], &lun)), (5, 0x20, 0));
        assert_eq!(asc(decode(&[0x04, 0, 0, 0, 0, 0], &lun)), (5, 0x20, 0));
        // short CDB
        let e = decode(&[0x28, 0, 0], &lun).expect_err("short");
        assert_eq!((e.key, e.asc), (5, 0x24));
    }

    #[test]
    fn read10_fields() {
        let lun = test_lun();
        let mut c = read10(100, 8);
        c[1] = 0x08;
        assert_eq!(
            decode(&c, &lun),
            Ok(Op::Read {
                lba: 100,
                blocks: 8,
                fua: true
            })
        );
        // Padding to 16 bytes is ignored.
        let mut padded = read10(1, 1);
        padded.resize(16, 0xee);
        assert!(decode(&padded, &lun).is_ok());
    }

    #[test]
    fn read6_zero_means_256() {
        let lun = test_lun();
        let op = decode(&[0x08, 0x01, 0x02, 0x03, 0, 0], &lun).expect("read6");
        assert_eq!(
            op,
            Op::Read {
                lba: 0x010203,
                blocks: 256,
                fua: false
            }
        );
    }

    #[test]
    fn read10_range() {
        let lun = test_lun();
        let n = lun.blocks as u32;
        assert!(decode(&read10(n - 1, 1), &lun).is_ok());
        assert!(decode(&read10(n, 0), &lun).is_ok());
        assert_eq!(asc(decode(&read10(n, 1), &lun)), (5, 0x21, 0));
        assert_eq!(asc(decode(&read10(n + 1, 0), &lun)), (5, 0x21, 0));
        assert_eq!(asc(decode(&read10(n - 1, 2), &lun)), (5, 0x21, 0));
        assert_eq!(asc(decode(&read10(u32::MAX, 1), &lun)), (5, 0x21, 0));
        assert_eq!(asc(decode(&rw16(0x88, u64::MAX, 1), &lun)), (5, 0x21, 0));
    }

    #[test]
    fn transfer_limit_points_at_length() {
        let lun = test_lun();
        let e = decode(&read10(0, (lun.max_transfer_blocks + 1) as u16), &lun).expect_err("big");
        assert_eq!((e.key, e.asc), (5, 0x24));
        let fp = e.field_pointer.expect("pointer");
        assert!(fp.cdb);
        assert_eq!(fp.field, 7);
        assert!(decode(&read10(0, lun.max_transfer_blocks as u16), &lun).is_ok());
    }

    #[test]
    fn rdprotect_and_reserved_bits() {
        let lun = test_lun();
        for p in 1..8u8 {
            let mut c = read10(0, 1);
            c[1] = p << 5;
            let e = decode(&c, &lun).expect_err("rdprotect");
            assert_eq!(e.asc, 0x24);
            let fp = e.field_pointer.expect("pointer");
            assert_eq!(fp.field, 1);
            assert_eq!(fp.bit, Some(7 - (p << 5).leading_zeros() as u8));
        }
        // DPO and FUA are accepted (MODE SENSE reports DPOFUA).
        let mut c = read10(0, 1);
        c[1] = 0x18;
        assert!(decode(&c, &lun).is_ok());
        // reserved byte 6 bits 7..5
        let mut c = read10(0, 1);
        c[6] = 0x80;
        let e = decode(&c, &lun).expect_err("reserved");
        assert_eq!(
            e.field_pointer.map(|f| (f.field, f.bit)),
            Some((6, Some(7)))
        );
    }

    #[test]
    fn control_byte_naca_link() {
        let lun = test_lun();
        let mut c = read10(0, 1);
        c[9] = 0x04;
        let e = decode(&c, &lun).expect_err("naca");
        assert_eq!(
            e.field_pointer.map(|f| (f.field, f.bit)),
            Some((9, Some(2)))
        );
        c[9] = 0x01;
        assert!(decode(&c, &lun).is_err());
        c[9] = 0xc0;
        assert!(decode(&c, &lun).is_ok());
    }

    #[test]
    fn write_protect() {
        let mut lun = test_lun();
        lun.read_only = true;
        let mut c = read10(0, 1);
        c[0] = 0x2a;
        assert_eq!(asc(decode(&c, &lun)), (7, 0x27, 0));
        assert!(decode(&read10(0, 1), &lun).is_ok());
        assert_eq!(asc(decode(&rw16(0x8a, 0, 1), &lun)), (7, 0x27, 0));
        let ws = [0x41, 0, 0, 0, 0, 0, 0, 0, 1, 0];
        assert_eq!(asc(decode(&ws, &lun)), (7, 0x27, 0));
        let unmap = [0x42, 0, 0, 0, 0, 0, 0, 0, 24, 0];
        assert_eq!(asc(decode(&unmap, &lun)), (7, 0x27, 0));
        let mut caw = vec![0u8; 16];
        caw[0] = 0x89;
        caw[13] = 1;
        assert_eq!(asc(decode(&caw, &lun)), (7, 0x27, 0));
        // SYNCHRONIZE CACHE does not modify the medium
        assert!(decode(&[0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0], &lun).is_ok());
    }

    #[test]
    fn orwrite_and_spc2_reservations() {
        let mut lun = test_lun();
        let mut c = rw16(0x8b, 8, 4);
        c[1] = 0x08;
        assert_eq!(
            decode(&c, &lun),
            Ok(Op::OrWrite {
                lba: 8,
                blocks: 4,
                fua: true
            })
        );
        assert_eq!(decode(&c, &lun).map(|o| o.data_out_len(&lun)), Ok(2048));
        c[1] = 0x20; // ORPROTECT
        assert_eq!(asc(decode(&c, &lun)), (5, 0x24, 0));
        let c = rw16(0x8b, lun.blocks - 1, 2);
        assert_eq!(asc(decode(&c, &lun)), (5, 0x21, 0));
        lun.read_only = true;
        assert_eq!(asc(decode(&rw16(0x8b, 0, 1), &lun)), (7, 0x27, 0));
        assert_eq!(decode(&[0x16, 0, 0, 0, 0, 0], &lun), Ok(Op::Reserve6));
        assert_eq!(decode(&[0x17, 0, 0, 0, 0, 0], &lun), Ok(Op::Release6));
        assert_eq!(asc(decode(&[0x16, 0x10, 0, 0, 0, 0], &lun)), (5, 0x24, 0));
    }

    #[test]
    fn write_same_rules() {
        let mut lun = test_lun();
        // Zero blocks: to the end of the LUN (WSNZ=0), within the WRITE SAME limit.
        lun.max_write_same_blocks = 0;
        let mut ws = rw16(0x93, lun.blocks - 10, 0);
        assert!(matches!(
            decode(&ws, &lun),
            Ok(Op::WriteSame { blocks: 10, .. })
        ));
        ws[2..10].copy_from_slice(&lun.blocks.to_be_bytes());
        assert!(matches!(
            decode(&ws, &lun),
            Ok(Op::WriteSame { blocks: 0, .. })
        ));
        ws[2..10].copy_from_slice(&(lun.blocks + 1).to_be_bytes());
        assert_eq!(asc(decode(&ws, &lun)), (5, 0x21, 0));
        lun.max_write_same_blocks = 8;
        ws[2..10].copy_from_slice(&0u64.to_be_bytes());
        let e = decode(&ws, &lun).expect_err("to the end is more than the limit");
        assert_eq!(e.field_pointer.map(|f| f.field), Some(10));
        lun = test_lun();
        ws[2..10].copy_from_slice(&10u64.to_be_bytes());
        ws[10..14].copy_from_slice(&(lun.max_write_same_blocks as u32 + 1).to_be_bytes());
        assert_eq!(asc(decode(&ws, &lun)), (5, 0x24, 0));
        ws[10..14].copy_from_slice(&4u32.to_be_bytes());
        ws[1] = 0x09;
        assert_eq!(
            decode(&ws, &lun),
            Ok(Op::WriteSame {
                lba: 10,
                blocks: 4,
                unmap: true,
                anchor: false,
                ndob: true
            })
        );
        // anchor is refused
        ws[1] = 0x10;
        assert_eq!(asc(decode(&ws, &lun)), (5, 0x24, 0));
        // UNMAP on a fully provisioned LUN is an invalid field at byte 1 bit 3
        lun.thin = false;
        ws[1] = 0x08;
        let e = decode(&ws, &lun).expect_err("unmap");
        assert_eq!(
            e.field_pointer.map(|f| (f.field, f.bit)),
            Some((1, Some(3)))
        );
        // ...and UNMAP the command does not exist
        assert_eq!(
            asc(decode(&[0x42, 0, 0, 0, 0, 0, 0, 0, 24, 0], &lun)),
            (5, 0x20, 0)
        );
        // range
        let ws10 = [0x41, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 1, 0];
        lun.thin = true;
        assert_eq!(asc(decode(&ws10, &lun)), (5, 0x21, 0));
    }

    #[test]
    fn verify_bytchk() {
        let lun = test_lun();
        let mut c = read10(5, 2);
        c[0] = 0x2f;
        c[1] = 0x02;
        assert_eq!(
            decode(&c, &lun),
            Ok(Op::Verify {
                lba: 5,
                blocks: 2,
                bytchk: true
            })
        );
        c[1] = 0x06;
        assert_eq!(asc(decode(&c, &lun)), (5, 0x24, 0));
        c[1] = 0x04;
        assert_eq!(asc(decode(&c, &lun)), (5, 0x24, 0));
        c[0] = 0x2e;
        c[1] = 0x00;
        assert_eq!(
            decode(&c, &lun),
            Ok(Op::WriteAndVerify {
                lba: 5,
                blocks: 2,
                bytchk: false
            })
        );
    }

    #[test]
    fn compare_and_write() {
        let lun = test_lun();
        let mut c = vec![0u8; 16];
        c[0] = 0x89;
        c[13] = 2;
        assert_eq!(asc(decode(&c, &lun)), (5, 0x24, 0));
        c[13] = 1;
        c[2..10].copy_from_slice(&(lun.blocks - 1).to_be_bytes());
        assert_eq!(
            decode(&c, &lun),
            Ok(Op::CompareAndWrite {
                lba: lun.blocks - 1,
                blocks: 1,
                fua: false
            })
        );
        c[2..10].copy_from_slice(&lun.blocks.to_be_bytes());
        assert_eq!(asc(decode(&c, &lun)), (5, 0x21, 0));
    }

    #[test]
    fn service_actions() {
        let lun = test_lun();
        let mut c = vec![0u8; 16];
        c[0] = 0x9e;
        c[1] = 0x10;
        c[13] = 32;
        assert_eq!(decode(&c, &lun), Ok(Op::ReadCapacity16 { alloc: 32 }));
        c[1] = 0x11;
        let e = decode(&c, &lun).expect_err("sa");
        assert_eq!(
            e.field_pointer.map(|f| (f.field, f.bit)),
            Some((1, Some(4)))
        );
        c[1] = 0x12;
        c[2..10].copy_from_slice(&lun.blocks.to_be_bytes());
        assert_eq!(asc(decode(&c, &lun)), (5, 0x21, 0));
        c[2..10].copy_from_slice(&(lun.blocks - 1).to_be_bytes());
        assert!(matches!(decode(&c, &lun), Ok(Op::GetLbaStatus { .. })));
        for sa in 4..0x20u8 {
            let prin = [0x5e, sa, 0, 0, 0, 0, 0, 0, 8, 0];
            assert_eq!(asc(decode(&prin, &lun)), (5, 0x24, 0), "sa {sa}");
        }
        let prin = [0x5e, 0x02, 0, 0, 0, 0, 0, 0, 8, 0];
        assert_eq!(
            decode(&prin, &lun),
            Ok(Op::PersistentReserveIn {
                action: 2,
                alloc: 8
            })
        );
        let prout = [0x5f, 0x01, 0x01, 0, 0, 0, 0, 0, 24, 0];
        assert_eq!(
            decode(&prout, &lun),
            Ok(Op::PersistentReserveOut {
                action: 1,
                scope: 0,
                kind: 1,
                param_len: 24
            })
        );
        let prout = [0x5f, 0x00, 0, 0, 0, 0, 0, 0, 25, 0];
        assert_eq!(asc(decode(&prout, &lun)), (5, 0x1a, 0));
        let prout = [0x5f, 0x07, 0, 0, 0, 0, 0, 0, 24, 0];
        assert_eq!(asc(decode(&prout, &lun)), (5, 0x24, 0));
    }

    #[test]
    fn inquiry_and_mode_sense() {
        let lun = test_lun();
        assert_eq!(
            decode(&[0x12, 0x01, 0xb0, 0x01, 0x00, 0], &lun),
            Ok(Op::Inquiry {
                evpd: true,
                page: 0xb0,
                alloc: 256
            })
        );
        assert_eq!(asc(decode(&[0x12, 0, 0x80, 0, 96, 0], &lun)), (5, 0x24, 0));
        assert_eq!(asc(decode(&[0x12, 0x02, 0, 0, 96, 0], &lun)), (5, 0x24, 0));
        assert_eq!(
            decode(&[0x1a, 0x08, 0x3f, 0, 255, 0], &lun),
            Ok(Op::ModeSense {
                ten: false,
                dbd: true,
                llbaa: false,
                pc: 0,
                page: 0x3f,
                subpage: 0,
                alloc: 255
            })
        );
        assert_eq!(asc(decode(&[0x1a, 0, 0xc8, 0, 255, 0], &lun)), (5, 0x39, 0));
        assert_eq!(asc(decode(&[0x1a, 0, 0x19, 0, 255, 0], &lun)), (5, 0x24, 0));
        assert_eq!(asc(decode(&[0x1a, 0, 0x0a, 1, 255, 0], &lun)), (5, 0x24, 0));
        assert_eq!(asc(decode(&[0x15, 0x11, 0, 0, 24, 0], &lun)), (5, 0x24, 0));
        assert_eq!(
            decode(&[0x55, 0x10, 0, 0, 0, 0, 0, 1, 0, 0], &lun),
            Ok(Op::ModeSelect {
                ten: true,
                pf: true,
                sp: false,
                param_len: 256
            })
        );
    }

    #[test]
    fn cache_ops_and_misc() {
        let lun = test_lun();
        assert_eq!(
            decode(&[0x35, 0x02, 0, 0, 0, 1, 0, 0, 0, 0], &lun),
            Ok(Op::SynchronizeCache {
                lba: 1,
                blocks: 0,
                immed: true
            })
        );
        let mut c = rw16(0x91, lun.blocks, 1);
        assert_eq!(asc(decode(&c, &lun)), (5, 0x21, 0));
        c[0] = 0x90;
        assert_eq!(asc(decode(&c, &lun)), (5, 0x21, 0));
        assert_eq!(
            decode(&[0x1b, 0x01, 0, 0, 0x11, 0], &lun),
            Ok(Op::StartStopUnit {
                immed: true,
                start: true,
                loej: false,
                power_condition: 1
            })
        );
        assert_eq!(
            asc(decode(&[0xa0, 0, 0x03, 0, 0, 0, 0, 0, 0, 16, 0, 0], &lun)),
            (5, 0x24, 0)
        );
        assert_eq!(
            decode(&[0xa3, 0x0c, 0x81, 0x28, 0, 0, 0, 0, 1, 0, 0, 0], &lun),
            Ok(Op::ReportSupportedOpcodes {
                rctd: true,
                options: 1,
                opcode: 0x28,
                service_action: 0,
                alloc: 256
            })
        );
        assert_eq!(
            asc(decode(&[0x25, 0, 0, 0, 0, 1, 0, 0, 0, 0], &lun)),
            (5, 0x24, 0)
        );
        assert_eq!(
            decode(&[0x25, 0, 0, 0, 0, 1, 0, 0, 1, 0], &lun),
            Ok(Op::ReadCapacity10)
        );
    }
}
