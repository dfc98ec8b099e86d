//! The table of supported commands and their CDB usage maps, shared by `decode` (bits outside
//! the map are rejected as invalid fields) and REPORT SUPPORTED OPERATION CODES (which
//! publishes the same map), so the two can never disagree.

use crate::bytes::put;
use crate::{LunInfo, Sense};

/// Operation codes.
pub mod code {
    #![allow(missing_docs)]
    pub const TEST_UNIT_READY: u8 = 0x00;
    pub const REQUEST_SENSE: u8 = 0x03;
    pub const READ_6: u8 = 0x08;
    pub const WRITE_6: u8 = 0x0a;
    pub const INQUIRY: u8 = 0x12;
    pub const MODE_SELECT_6: u8 = 0x15;
    pub const RESERVE_6: u8 = 0x16;
    pub const RELEASE_6: u8 = 0x17;
    pub const MODE_SENSE_6: u8 = 0x1a;
    pub const START_STOP_UNIT: u8 = 0x1b;
    pub const READ_CAPACITY_10: u8 = 0x25;
    pub const READ_10: u8 = 0x28;
    pub const WRITE_10: u8 = 0x2a;
    pub const WRITE_AND_VERIFY_10: u8 = 0x2e;
    pub const VERIFY_10: u8 = 0x2f;
    pub const PRE_FETCH_10: u8 = 0x34;
    pub const SYNCHRONIZE_CACHE_10: u8 = 0x35;
    pub const WRITE_SAME_10: u8 = 0x41;
    pub const UNMAP: u8 = 0x42;
    pub const MODE_SELECT_10: u8 = 0x55;
    pub const MODE_SENSE_10: u8 = 0x5a;
    pub const PERSISTENT_RESERVE_IN: u8 = 0x5e;
    pub const PERSISTENT_RESERVE_OUT: u8 = 0x5f;
    pub const READ_16: u8 = 0x88;
    pub const COMPARE_AND_WRITE: u8 = 0x89;
    pub const WRITE_16: u8 = 0x8a;
    pub const ORWRITE_16: u8 = 0x8b;
    pub const WRITE_AND_VERIFY_16: u8 = 0x8e;
    pub const VERIFY_16: u8 = 0x8f;
    pub const PRE_FETCH_16: u8 = 0x90;
    pub const SYNCHRONIZE_CACHE_16: u8 = 0x91;
    pub const WRITE_SAME_16: u8 = 0x93;
    pub const SERVICE_ACTION_IN_16: u8 = 0x9e;
    pub const REPORT_LUNS: u8 = 0xa0;
    pub const MAINTENANCE_IN: u8 = 0xa3;
    pub const READ_12: u8 = 0xa8;
    pub const WRITE_12: u8 = 0xaa;
    pub const WRITE_AND_VERIFY_12: u8 = 0xae;
    pub const VERIFY_12: u8 = 0xaf;

    /// SERVICE ACTION IN(16) service actions.
    pub const SA_READ_CAPACITY_16: u8 = 0x10;
    pub const SA_GET_LBA_STATUS: u8 = 0x12;
    /// MAINTENANCE IN service action.
    pub const SA_REPORT_SUPPORTED_OPCODES: u8 = 0x0c;
}

/// Opcodes whose byte 1 bits 4..0 are a service action.
pub(crate) fn has_service_action(opcode: u8) -> bool {
    matches!(
        opcode,
        code::SERVICE_ACTION_IN_16
            | code::MAINTENANCE_IN
            | code::PERSISTENT_RESERVE_IN
            | code::PERSISTENT_RESERVE_OUT
    )
}

/// The UNMAP bit of byte 1 of WRITE SAME, published and accepted only on thin LUNs.
const WRITE_SAME_UNMAP: u8 = 0x08;

/// One supported command: the usage map has one byte per CDB byte; byte 0 is the opcode,
/// for service-action commands byte 1 carries the service action, every other bit is 1
/// when the device server accepts it. The control byte is listed as 0: NACA and LINK are
/// refused and the other control bits are ignored.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Command {
    pub opcode: u8,
    pub sa: Option<u8>,
    pub usage: &'static [u8],
    pub thin_only: bool,
}

const fn cmd(usage: &'static [u8]) -> Command {
    Command {
        opcode: usage[0],
        sa: None,
        usage,
        thin_only: false,
    }
}

const fn sa_cmd(usage: &'static [u8]) -> Command {
    Command {
        opcode: usage[0],
        sa: Some(usage[1] & 0x1f),
        usage,
        thin_only: false,
    }
}

const FF: u8 = 0xff;

/// Every command we implement, in opcode order (REPORT SUPPORTED OPERATION CODES lists them
/// in this order).
const COMMANDS: &[Command] = &[
    cmd(&[0x00, 0, 0, 0, 0, 0]),
    cmd(&[0x03, 0x01, 0, 0, FF, 0]),
    // READ(6)/WRITE(6): 21-bit LBA
    cmd(&[0x08, 0x1f, FF, FF, FF, 0]),
    cmd(&[0x0a, 0x1f, FF, FF, FF, 0]),
    // INQUIRY: EVPD only (CMDDT is obsolete and refused)
    cmd(&[0x12, 0x01, FF, FF, FF, 0]),
    // MODE SELECT(6): PF, SP
    cmd(&[0x15, 0x11, 0, 0, FF, 0]),
    // RESERVE(6) / RELEASE(6): the obsolete third-party and extent fields are refused
    cmd(&[0x16, 0, 0, 0, 0, 0]),
    cmd(&[0x17, 0, 0, 0, 0, 0]),
    // MODE SENSE(6): DBD
    cmd(&[0x1a, 0x08, FF, FF, FF, 0]),
    // START STOP UNIT: IMMED; power condition modifier; power condition, NO_FLUSH, LOEJ, START
    cmd(&[0x1b, 0x01, 0, 0x0f, 0xf7, 0]),
    // READ CAPACITY(10): LBA and PMI (obsolete in SBC-4 but still sent)
    cmd(&[0x25, 0, FF, FF, FF, FF, 0, 0, 0x01, 0]),
    // READ(10): DPO FUA RARC FUA_NV; group number
    cmd(&[0x28, 0x1e, FF, FF, FF, FF, 0x1f, FF, FF, 0]),
    // WRITE(10): DPO FUA FUA_NV
    cmd(&[0x2a, 0x1a, FF, FF, FF, FF, 0x1f, FF, FF, 0]),
    // WRITE AND VERIFY(10) / VERIFY(10): DPO, BYTCHK
    cmd(&[0x2e, 0x16, FF, FF, FF, FF, 0x1f, FF, FF, 0]),
    cmd(&[0x2f, 0x16, FF, FF, FF, FF, 0x1f, FF, FF, 0]),
    // PRE-FETCH(10): IMMED
    cmd(&[0x34, 0x02, FF, FF, FF, FF, 0x1f, FF, FF, 0]),
    // SYNCHRONIZE CACHE(10): SYNC_NV (obsolete, ignored), IMMED
    cmd(&[0x35, 0x06, FF, FF, FF, FF, 0x1f, FF, FF, 0]),
    // WRITE SAME(10): UNMAP (thin only); ANCHOR, PBDATA and LBDATA are refused
    cmd(&[0x41, WRITE_SAME_UNMAP, FF, FF, FF, FF, 0x1f, FF, FF, 0]),
    Command {
        thin_only: true,
        ..cmd(&[0x42, 0, 0, 0, 0, 0, 0x1f, FF, FF, 0])
    },
    cmd(&[0x55, 0x11, 0, 0, 0, 0, 0, FF, FF, 0]),
    // MODE SENSE(10): LLBAA, DBD
    cmd(&[0x5a, 0x18, FF, FF, 0, 0, 0, FF, FF, 0]),
    sa_cmd(&[0x5e, 0x00, 0, 0, 0, 0, 0, FF, FF, 0]),
    sa_cmd(&[0x5e, 0x01, 0, 0, 0, 0, 0, FF, FF, 0]),
    sa_cmd(&[0x5e, 0x02, 0, 0, 0, 0, 0, FF, FF, 0]),
    sa_cmd(&[0x5e, 0x03, 0, 0, 0, 0, 0, FF, FF, 0]),
    sa_cmd(&[0x5f, 0x00, FF, 0, 0, FF, FF, FF, FF, 0]),
    sa_cmd(&[0x5f, 0x01, FF, 0, 0, FF, FF, FF, FF, 0]),
    sa_cmd(&[0x5f, 0x02, FF, 0, 0, FF, FF, FF, FF, 0]),
    sa_cmd(&[0x5f, 0x03, FF, 0, 0, FF, FF, FF, FF, 0]),
    sa_cmd(&[0x5f, 0x04, FF, 0, 0, FF, FF, FF, FF, 0]),
    sa_cmd(&[0x5f, 0x05, FF, 0, 0, FF, FF, FF, FF, 0]),
    sa_cmd(&[0x5f, 0x06, FF, 0, 0, FF, FF, FF, FF, 0]),
    // READ(16) / COMPARE AND WRITE / WRITE(16)
    cmd(&[
        0x88, 0x1e, FF, FF, FF, FF, FF, FF, FF, FF, FF, FF, FF, FF, 0x1f, 0,
    ]),
    cmd(&[
        0x89, 0x1a, FF, FF, FF, FF, FF, FF, FF, FF, 0, 0, 0, FF, 0x1f, 0,
    ]),
    cmd(&[
        0x8a, 0x1a, FF, FF, FF, FF, FF, FF, FF, FF, FF, FF, FF, FF, 0x1f, 0,
    ]),
    // ORWRITE(16): DPO FUA (ORPROTECT refused); group number
    cmd(&[
        0x8b, 0x18, FF, FF, FF, FF, FF, FF, FF, FF, FF, FF, FF, FF, 0x1f, 0,
    ]),
    cmd(&[
        0x8e, 0x16, FF, FF, FF, FF, FF, FF, FF, FF, FF, FF, FF, FF, 0x1f, 0,
    ]),
    cmd(&[
        0x8f, 0x16, FF, FF, FF, FF, FF, FF, FF, FF, FF, FF, FF, FF, 0x1f, 0,
    ]),
    cmd(&[
        0x90, 0x02, FF, FF, FF, FF, FF, FF, FF, FF, FF, FF, FF, FF, 0x1f, 0,
    ]),
    cmd(&[
        0x91, 0x06, FF, FF, FF, FF, FF, FF, FF, FF, FF, FF, FF, FF, 0x1f, 0,
    ]),
    // WRITE SAME(16): UNMAP (thin only), NDOB
    cmd(&[
        0x93,
        WRITE_SAME_UNMAP | 0x01,
        FF,
        FF,
        FF,
        FF,
        FF,
        FF,
        FF,
        FF,
        FF,
        FF,
        FF,
        FF,
        0x1f,
        0,
    ]),
    // READ CAPACITY(16): the obsolete LBA/PMI fields are ignored
    sa_cmd(&[0x9e, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, FF, FF, FF, FF, 0, 0]),
    sa_cmd(&[
        0x9e, 0x12, FF, FF, FF, FF, FF, FF, FF, FF, FF, FF, FF, FF, 0, 0,
    ]),
    cmd(&[0xa0, 0, FF, 0, 0, 0, FF, FF, FF, FF, 0, 0]),
    // REPORT SUPPORTED OPERATION CODES: RCTD, REPORTING OPTIONS
    sa_cmd(&[0xa3, 0x0c, 0x87, FF, FF, FF, FF, FF, FF, FF, 0, 0]),
    cmd(&[0xa8, 0x1e, FF, FF, FF, FF, FF, FF, FF, FF, 0x1f, 0]),
    cmd(&[0xaa, 0x1a, FF, FF, FF, FF, FF, FF, FF, FF, 0x1f, 0]),
    cmd(&[0xae, 0x16, FF, FF, FF, FF, FF, FF, FF, FF, 0x1f, 0]),
    cmd(&[0xaf, 0x16, FF, FF, FF, FF, FF, FF, FF, FF, 0x1f, 0]),
];

impl Command {
    /// The usage map for this LUN (at most 16 bytes, `len` of them valid).
    pub fn usage_for(&self, lun: &LunInfo) -> ([u8; 16], usize) {
        let mut u = [0u8; 16];
        let len = self.usage.len().min(16);
        for (d, s) in u.iter_mut().zip(self.usage) {
            *d = *s;
        }
        if !lun.thin && matches!(self.opcode, code::WRITE_SAME_10 | code::WRITE_SAME_16) {
            u[1] &= !WRITE_SAME_UNMAP;
        }
        (u, len)
    }
}

fn supported(lun: &LunInfo) -> impl Iterator<Item = &'static Command> + '_ {
    COMMANDS.iter().filter(move |c| lun.thin || !c.thin_only)
}

/// What a lookup found.
#[derive(Debug)]
pub(crate) enum Lookup {
    Found(&'static Command),
    /// The opcode exists but not with this service action.
    NoServiceAction,
    NoOpcode,
}

pub(crate) fn lookup(opcode: u8, sa: u8, lun: &LunInfo) -> Lookup {
    let mut opcode_known = false;
    for c in supported(lun).filter(|c| c.opcode == opcode) {
        opcode_known = true;
        match c.sa {
            None => return Lookup::Found(c),
            Some(s) if s == sa => return Lookup::Found(c),
            Some(_) => {}
        }
    }
    if opcode_known {
        Lookup::NoServiceAction
    } else {
        Lookup::NoOpcode
    }
}

/// Command timeouts descriptor (SPC-4 6.35.4): 0 = no timeout is specified. An array's
/// latency depends on its members, so there is no honest fixed number to promise.
const TIMEOUTS_DESCRIPTOR: [u8; 12] = [0x00, 0x0a, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];

/// REPORT SUPPORTED OPERATION CODES parameter data, not yet truncated.
pub(crate) fn report_supported_opcodes(
    rctd: bool,
    options: u8,
    opcode: u8,
    service_action: u16,
    lun: &LunInfo,
) -> Result<Vec<u8>, Sense> {
    match options {
        0 => {
            let mut out = vec![0u8; 4];
            for c in supported(lun) {
                let (_, len) = c.usage_for(lun);
                let mut d = [0u8; 8];
                d[0] = c.opcode;
                put(&mut d, 2, u16::from(c.sa.unwrap_or(0)).to_be_bytes());
                d[5] = if c.sa.is_some() { 0x01 } else { 0 } | if rctd { 0x02 } else { 0 };
                put(&mut d, 6, (len as u16).to_be_bytes());
                out.extend_from_slice(&d);
                if rctd {
                    out.extend_from_slice(&TIMEOUTS_DESCRIPTOR);
                }
            }
            let n = (out.len() - 4) as u32;
            put(&mut out, 0, n.to_be_bytes());
            Ok(out)
        }
        1..=3 => {
            let sa = u8::try_from(service_action).ok();
            let needs_sa = has_service_action(opcode);
            // Options 1 asks about an opcode without service actions, 2 about one with them;
            // asking the wrong kind is an invalid field (SPC-4 6.35.2).
            if options == 1 && needs_sa {
                return Err(Sense::invalid_field_in_cdb(2, Some(2)));
            }
            if options == 2 && !needs_sa {
                return Err(Sense::invalid_field_in_cdb(2, Some(2)));
            }
            let found = supported(lun).find(|c| {
                c.opcode == opcode
                    && match c.sa {
                        None => true,
                        Some(s) => sa == Some(s),
                    }
            });
            let mut out = vec![0u8; 4];
            if let Some(c) = found {
                let (usage, len) = c.usage_for(lun);
                out[1] = 0x03 | if rctd { 0x80 } else { 0 };
                put(&mut out, 2, (len as u16).to_be_bytes());
                out.extend_from_slice(usage.get(..len).unwrap_or(&[]));
                if rctd {
                    out.extend_from_slice(&TIMEOUTS_DESCRIPTOR);
                }
            } else {
                // SUPPORT 001b: not supported; no usage data.
                out[1] = 0x01;
            }
            Ok(out)
        }
        _ => Err(Sense::invalid_field_in_cdb(2, Some(2))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bytes::{be16, be32};
    use crate::lun::test_lun;

    #[test]
    fn table_is_sane() {
        for c in COMMANDS {
            assert_eq!(c.usage[0], c.opcode);
            let expect = match c.opcode {
                0x00..=0x1f => 6,
                0x20..=0x5f => 10,
                0x80..=0x9f => 16,
                _ => 12,
            };
            assert_eq!(c.usage.len(), expect, "opcode {:#x}", c.opcode);
            assert_eq!(c.sa.is_some(), has_service_action(c.opcode));
        }
    }

    #[test]
    fn all_commands_format() {
        let lun = test_lun();
        let d = report_supported_opcodes(false, 0, 0, 0, &lun).expect("all");
        let n = be32(&d, 0) as usize;
        assert_eq!(n + 4, d.len());
        assert_eq!(n % 8, 0);
        // READ(10) is listed with a 10-byte CDB and no service action.
        let read10 = d[4..]
            .chunks(8)
            .find(|c| c[0] == 0x28)
            .expect("read10 listed");
        assert_eq!(read10[5], 0);
        assert_eq!(be16(read10, 6), 10);
        let rc16 = d[4..]
            .chunks(8)
            .find(|c| c[0] == 0x9e && be16(c, 2) == 0x10)
            .expect("rc16 listed");
        assert_eq!(rc16[5], 0x01);
        assert_eq!(be16(rc16, 6), 16);
    }

    #[test]
    fn all_commands_with_timeouts() {
        let lun = test_lun();
        let d = report_supported_opcodes(true, 0, 0, 0, &lun).expect("all");
        assert_eq!((d.len() - 4) % 20, 0);
        for c in d[4..].chunks(20) {
            assert_eq!(c[5] & 0x02, 0x02);
            assert_eq!(be16(c, 8), 0x0a);
        }
    }

    #[test]
    fn unmap_listed_only_when_thin() {
        let mut lun = test_lun();
        let has_unmap = |lun: &LunInfo| {
            let d = report_supported_opcodes(false, 0, 0, 0, lun).expect("all");
            d[4..].chunks(8).any(|c| c[0] == 0x42)
        };
        assert!(has_unmap(&lun));
        lun.thin = false;
        assert!(!has_unmap(&lun));
        let one = report_supported_opcodes(false, 1, 0x41, 0, &lun).expect("ws10");
        assert_eq!(one[5] & WRITE_SAME_UNMAP, 0);
    }

    #[test]
    fn one_command() {
        let lun = test_lun();
        let d = report_supported_opcodes(false, 1, 0x28, 0, &lun).expect("read10");
        assert_eq!(d[1] & 0x07, 0x03);
        assert_eq!(be16(&d, 2), 10);
        assert_eq!(d[4], 0x28);
        // DPO and FUA supported, as MODE SENSE's DPOFUA says
        assert_eq!(d[5] & 0x18, 0x18);
        assert_eq!(d.len(), 14);

        let d = report_supported_opcodes(true, 2, 0x9e, 0x10, &lun).expect("rc16");
        assert_eq!(d[1], 0x83);
        assert_eq!(&d[4..6], &[0x9e, 0x10]);
        assert_eq!(d.len(), 4 + 16 + 12);

        let d = report_supported_opcodes(false, 1, 0xc0, 0, &lun).expect("unknown");
        assert_eq!(d, vec![0, 1, 0, 0]);
        let d = report_supported_opcodes(false, 2, 0x5f, 7, &lun).expect("register and move");
        assert_eq!(d[1] & 7, 1);
        let d = report_supported_opcodes(false, 3, 0x28, 0x55, &lun).expect("sa ignored");
        assert_eq!(d[1] & 7, 3);
    }

    #[test]
    fn wrong_option_kind_is_invalid_field() {
        let lun = test_lun();
        let e = report_supported_opcodes(false, 1, 0x9e, 0x10, &lun).expect_err("sa cmd");
        assert_eq!((e.key, e.asc), (5, 0x24));
        let e = report_supported_opcodes(false, 2, 0x28, 0, &lun).expect_err("plain cmd");
        assert_eq!((e.key, e.asc), (5, 0x24));
        let e = report_supported_opcodes(false, 4, 0x28, 0, &lun).expect_err("options");
        assert_eq!((e.key, e.asc), (5, 0x24));
    }
}
