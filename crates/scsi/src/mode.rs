//! Mode pages (SPC-4 7.5, SBC-3 6.4): MODE SENSE (6/10) and MODE SELECT (6/10).
//!
//! Three pages exist: caching (08h), control (0Ah) and informational exceptions control
//! (1Ch). Only the control page's D_SENSE is changeable: everything else describes how the
//! array behaves and is not the initiator's to change. In particular WCE reflects whether
//! the shell acknowledges writes before they are durable, so letting an initiator clear it
//! would make it believe in a durability the shell does not provide.

use crate::bytes::{be, be16, be32, be64, byte, put};
use crate::{LunInfo, Sense};

/// Current values of the changeable mode page fields, one per LUN (SPC-4 allows per-I_T
/// nexus pages; this target shares them, so a change raises MODE PARAMETERS CHANGED for the
/// other nexuses — compare the state before and after [`mode_select`] to decide).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModeState {
    /// Control page D_SENSE: sense data is returned in descriptor format.
    pub d_sense: bool,
}

impl ModeState {
    /// The power-on values.
    pub fn new(_lun: &LunInfo) -> ModeState {
        ModeState { d_sense: false }
    }

    /// Encodes sense data in the format the control page currently asks for.
    pub fn sense_bytes(&self, sense: &Sense) -> Vec<u8> {
        sense.encode(self.d_sense)
    }
}

const CACHING: u8 = 0x08;
const CONTROL: u8 = 0x0a;
const INFORMATIONAL_EXCEPTIONS: u8 = 0x1c;
const ALL_PAGES: u8 = 0x3f;

/// Pages in the order "all pages" reports them.
const PAGES: [u8; 3] = [CACHING, CONTROL, INFORMATIONAL_EXCEPTIONS];

/// DPOFUA in the device-specific parameter: DPO and FUA are honoured in READ/WRITE.
const DPOFUA: u8 = 0x10;
const WP: u8 = 0x80;
const D_SENSE: u8 = 0x04;

/// Page control values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pc {
    Current,
    Changeable,
    Default,
}

pub(crate) fn page_supported(page: u8) -> bool {
    page == ALL_PAGES || PAGES.contains(&page)
}

fn page_bytes(page: u8, pc: Pc, state: &ModeState, lun: &LunInfo) -> Option<Vec<u8>> {
    let d_sense = match pc {
        Pc::Current => state.d_sense,
        Pc::Default => ModeState::new(lun).d_sense,
        Pc::Changeable => true,
    };
    let fixed = pc != Pc::Changeable;
    let mut p = match page {
        CACHING => {
            let mut p = vec![0u8; 20];
            // WCE reflects the shell's write-back behaviour; RCD stays 0 (reads may be cached).
            if fixed && lun.write_cache {
                p[2] = 0x04;
            }
            p
        }
        CONTROL => {
            let mut p = vec![0u8; 12];
            // TST 000b (one task set), GLTSD 1 (no log pages to save).
            if fixed {
                p[2] = 0x02;
                // QUEUE ALGORITHM MODIFIER 1: commands may be reordered; the array serves them
                // concurrently. QErr 00b: a CHECK CONDITION does not abort other commands.
                p[3] = 0x10;
                // BUSY TIMEOUT PERIOD: unlimited.
                p[8] = 0xff;
                p[9] = 0xff;
            }
            if d_sense {
                p[2] |= D_SENSE;
            }
            p
        }
        INFORMATIONAL_EXCEPTIONS => {
            let mut p = vec![0u8; 12];
            // DEXCPT: informational exception reporting is disabled (we have none to report).
            if fixed {
                p[2] = 0x08;
            }
            p
        }
        _ => return None,
    };
    p[0] = page;
    p[1] = (p.len() - 2) as u8;
    Some(p)
}

/// MODE SENSE parameter data, not yet truncated.
#[allow(clippy::too_many_arguments)]
pub(crate) fn mode_sense(
    ten: bool,
    dbd: bool,
    llbaa: bool,
    pc: u8,
    page: u8,
    subpage: u8,
    state: &ModeState,
    lun: &LunInfo,
) -> Result<Vec<u8>, Sense> {
    let pc = match pc {
        0 => Pc::Current,
        1 => Pc::Changeable,
        2 => Pc::Default,
        _ => return Err(Sense::saving_parameters_not_supported()),
    };
    if !page_supported(page) {
        return Err(Sense::invalid_field_in_cdb(2, Some(5)));
    }
    if subpage != 0 && subpage != 0xff {
        return Err(Sense::invalid_field_in_cdb(3, None));
    }
    let header_len = if ten { 8 } else { 4 };
    let mut out = vec![0u8; header_len];
    let dsp = if lun.read_only { WP } else { 0 } | DPOFUA;
    let long = ten && llbaa;
    if !dbd {
        // Nothing in the block descriptor is changeable: all-zero mask.
        let show = pc != Pc::Changeable;
        if long {
            let mut d = [0u8; 16];
            if show {
                put(&mut d, 0, lun.blocks.to_be_bytes());
                put(&mut d, 12, lun.block_size.to_be_bytes());
            }
            out.extend_from_slice(&d);
        } else {
            let mut d = [0u8; 8];
            if show {
                let n = u32::try_from(lun.blocks).unwrap_or(u32::MAX);
                put(&mut d, 0, n.to_be_bytes());
                let bs = lun.block_size.to_be_bytes();
                put(&mut d, 5, [bs[1], bs[2], bs[3]]);
            }
            out.extend_from_slice(&d);
        }
    }
    let bd_len = out.len() - header_len;
    let wanted: &[u8] = if page == ALL_PAGES {
        &PAGES
    } else {
        std::slice::from_ref(&page)
    };
    for &p in wanted {
        if let Some(bytes) = page_bytes(p, pc, state, lun) {
            out.extend_from_slice(&bytes);
        }
    }
    if ten {
        let len = (out.len() - 2) as u16;
        put(&mut out, 0, len.to_be_bytes());
        out[3] = dsp;
        out[4] = u8::from(long);
        put(&mut out, 6, (bd_len as u16).to_be_bytes());
    } else {
        out[0] = (out.len() - 1).min(255) as u8;
        out[2] = dsp;
        out[3] = bd_len as u8;
    }
    Ok(out)
}

/// MODE SELECT (6/10): validates the whole parameter list first and applies it only if every
/// page is acceptable, so a rejected list leaves `state` untouched.
pub fn mode_select(
    params: &[u8],
    ten: bool,
    pf: bool,
    sp: bool,
    state: &mut ModeState,
    lun: &LunInfo,
) -> Result<(), Sense> {
    if sp {
        return Err(Sense::invalid_field_in_cdb(1, Some(0)));
    }
    if params.is_empty() {
        return Ok(());
    }
    // PF=0 would mean vendor-specific page formats; we only know the SPC ones.
    if !pf {
        return Err(Sense::invalid_field_in_cdb(1, Some(4)));
    }
    let header_len = if ten { 8 } else { 4 };
    if params.len() < header_len {
        return Err(Sense::parameter_list_length_error());
    }
    let medium_type_at = if ten { 2 } else { 1 };
    if byte(params, medium_type_at) != 0 {
        return Err(Sense::invalid_field_in_parameter_list(
            medium_type_at as u16,
            None,
        ));
    }
    let (bd_len, long, bd_len_at) = if ten {
        (usize::from(be16(params, 6)), byte(params, 4) & 1 != 0, 6u16)
    } else {
        (usize::from(byte(params, 3)), false, 3)
    };
    let expected_bd = if long { 16 } else { 8 };
    if bd_len != 0 && bd_len != expected_bd {
        return Err(Sense::invalid_field_in_parameter_list(bd_len_at, None));
    }
    let Some(bd) = params.get(header_len..header_len + bd_len) else {
        return Err(Sense::parameter_list_length_error());
    };
    if !bd.is_empty() {
        check_block_descriptor(bd, long, header_len, lun)?;
    }

    let mut new = state.clone();
    let mut off = header_len + bd_len;
    while off < params.len() {
        let Some(&[b0, plen]) = params.get(off..off + 2) else {
            return Err(Sense::parameter_list_length_error());
        };
        let end = off + 2 + usize::from(plen);
        let Some(page) = params.get(off..end) else {
            return Err(Sense::parameter_list_length_error());
        };
        let field = |i: usize| (off + i) as u16;
        if b0 & 0x40 != 0 {
            return Err(Sense::invalid_field_in_parameter_list(field(0), Some(6)));
        }
        let code = b0 & 0x3f;
        let (Some(current), Some(mask)) = (
            page_bytes(code, Pc::Current, &new, lun),
            page_bytes(code, Pc::Changeable, &new, lun),
        ) else {
            return Err(Sense::invalid_field_in_parameter_list(field(0), Some(5)));
        };
        if page.len() != current.len() {
            return Err(Sense::invalid_field_in_parameter_list(field(1), None));
        }
        for i in 2..page.len() {
            let (Some(&n), Some(&c), Some(&m)) = (page.get(i), current.get(i), mask.get(i)) else {
                break;
            };
            let bad = (n ^ c) & !m;
            if bad != 0 {
                return Err(Sense::invalid_field_in_parameter_list(
                    field(i),
                    Some(7 - bad.leading_zeros() as u8),
                ));
            }
        }
        if code == CONTROL {
            new.d_sense = byte(page, 2) & D_SENSE != 0;
        }
        off = end;
    }
    *state = new;
    Ok(())
}

/// A block descriptor may restate the current geometry but not change it.
fn check_block_descriptor(bd: &[u8], long: bool, at: usize, lun: &LunInfo) -> Result<(), Sense> {
    let (blocks, bs, blocks_at, bs_at) = if long {
        (be64(bd, 0), be32(bd, 12), 0, 12)
    } else {
        (be(bd, 0, 4), be(bd, 5, 3) as u32, 0, 5)
    };
    let current_blocks = if long {
        lun.blocks
    } else {
        lun.blocks.min(u64::from(u32::MAX))
    };
    if blocks != 0 && blocks != current_blocks {
        return Err(Sense::invalid_field_in_parameter_list(
            (at + blocks_at) as u16,
            None,
        ));
    }
    if bs != lun.block_size {
        return Err(Sense::invalid_field_in_parameter_list(
            (at + bs_at) as u16,
            None,
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lun::test_lun;

    fn sense6(page: u8, pc: u8, dbd: bool, state: &ModeState, lun: &LunInfo) -> Vec<u8> {
        mode_sense(false, dbd, false, pc, page, 0, state, lun).expect("mode sense")
    }

    #[test]
    fn all_pages_6_with_block_descriptor() {
        let lun = test_lun();
        let st = ModeState::new(&lun);
        let d = sense6(0x3f, 0, false, &st, &lun);
        assert_eq!(d[0] as usize, d.len() - 1);
        assert_eq!(d[1], 0);
        assert_eq!(d[2], 0x10); // DPOFUA, no WP
        assert_eq!(d[3], 8);
        assert_eq!(&d[4..8], &(lun.blocks as u32).to_be_bytes());
        assert_eq!(&d[9..12], &[0, 0x02, 0x00]);
        // caching page first, WCE set
        assert_eq!(&d[12..14], &[0x08, 0x12]);
        assert_eq!(d[14] & 0x05, 0x04);
        // control page
        assert_eq!(&d[32..34], &[0x0a, 0x0a]);
        assert_eq!(d[34] & 0xe4, 0); // TST 0, D_SENSE 0
                                     // IE page
        assert_eq!(&d[44..46], &[0x1c, 0x0a]);
        assert_eq!(d.len(), 56);
    }

    #[test]
    fn wp_and_dbd_and_no_wce() {
        let mut lun = test_lun();
        lun.read_only = true;
        lun.write_cache = false;
        let st = ModeState::new(&lun);
        let d = sense6(0x08, 0, true, &st, &lun);
        assert_eq!(d[2], 0x90);
        assert_eq!(d[3], 0);
        assert_eq!(d[4], 0x08);
        assert_eq!(d[6] & 0x04, 0);
        assert_eq!(d.len(), 24);
    }

    #[test]
    fn mode_sense_10_long_lba() {
        let mut lun = test_lun();
        lun.blocks = 1 << 40;
        let st = ModeState::new(&lun);
        let d = mode_sense(true, false, true, 0, 0x0a, 0, &st, &lun).expect("ms10");
        assert_eq!(be16(&d, 0) as usize, d.len() - 2);
        assert_eq!(d[4], 1);
        assert_eq!(be16(&d, 6), 16);
        assert_eq!(&d[8..16], &(1u64 << 40).to_be_bytes());
        assert_eq!(&d[20..24], &512u32.to_be_bytes());
        assert_eq!(d[24], 0x0a);
        // short descriptor saturates
        let d = mode_sense(true, false, false, 0, 0x0a, 0, &st, &lun).expect("ms10");
        assert_eq!(be16(&d, 6), 8);
        assert_eq!(&d[8..12], &[0xff; 4]);
    }

    #[test]
    fn changeable_and_saved() {
        let lun = test_lun();
        let st = ModeState::new(&lun);
        let d = sense6(0x0a, 1, true, &st, &lun);
        assert_eq!(d[4..], [0x0a, 0x0a, 0x04, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        let d = sense6(0x08, 1, true, &st, &lun);
        assert!(d[6..].iter().all(|&b| b == 0), "WCE must not be changeable");
        let e = mode_sense(false, true, false, 3, 0x08, 0, &st, &lun).expect_err("saved");
        assert_eq!((e.key, e.asc), (5, 0x39));
        let e = mode_sense(false, true, false, 0, 0x01, 0, &st, &lun).expect_err("page");
        assert_eq!((e.key, e.asc), (5, 0x24));
    }

    fn select_control(d_sense: bool, lun: &LunInfo, st: &ModeState) -> Vec<u8> {
        let mut d = sense6(0x0a, 0, true, st, lun);
        d[0] = 0;
        d[2] = 0;
        if d_sense {
            d[6] |= 0x04;
        } else {
            d[6] &= !0x04;
        }
        d
    }

    #[test]
    fn select_d_sense_roundtrip() {
        let lun = test_lun();
        let mut st = ModeState::new(&lun);
        let p = select_control(true, &lun, &st);
        mode_select(&p, false, true, false, &mut st, &lun).expect("select");
        assert!(st.d_sense);
        assert_eq!(st.sense_bytes(&Sense::lba_out_of_range())[0], 0x72);
        let d = sense6(0x0a, 0, true, &st, &lun);
        assert_eq!(d[6] & 0x04, 0x04);
        let p = select_control(false, &lun, &st);
        mode_select(&p, false, true, false, &mut st, &lun).expect("select");
        assert!(!st.d_sense);
    }

    #[test]
    fn select_rejects_unchangeable() {
        let lun = test_lun();
        let mut st = ModeState::new(&lun);
        // clearing WCE
        let mut d = sense6(0x08, 0, true, &st, &lun);
        d[0] = 0;
        d[6] &= !0x04;
        let e = mode_select(&d, false, true, false, &mut st, &lun).expect_err("wce");
        assert_eq!((e.key, e.asc), (5, 0x26));
        let fp = e.field_pointer.expect("pointer");
        assert_eq!((fp.cdb, fp.field, fp.bit), (false, 6, Some(2)));
        // SWP in the control page
        let mut p = select_control(true, &lun, &st);
        p[8] |= 0x08;
        let e = mode_select(&p, false, true, false, &mut st, &lun).expect_err("swp");
        assert_eq!(
            e.field_pointer.map(|f| (f.field, f.bit)),
            Some((8, Some(3)))
        );
        assert!(!st.d_sense, "a rejected list must change nothing");
        // wrong page length
        let mut p = select_control(true, &lun, &st);
        p[5] = 0x0b;
        p.push(0);
        assert!(mode_select(&p, false, true, false, &mut st, &lun).is_err());
        // truncated page
        let p = select_control(true, &lun, &st);
        let e = mode_select(&p[..10], false, true, false, &mut st, &lun).expect_err("short");
        assert_eq!((e.key, e.asc), (5, 0x1a));
        // unknown page
        let p = [0, 0, 0, 0, 0x19, 0x02, 0, 0];
        assert!(mode_select(&p, false, true, false, &mut st, &lun).is_err());
        // SP and PF
        let p = select_control(true, &lun, &st);
        let e = mode_select(&p, false, true, true, &mut st, &lun).expect_err("sp");
        assert_eq!(e.asc, 0x24);
        let e = mode_select(&p, false, false, false, &mut st, &lun).expect_err("pf");
        assert_eq!(e.asc, 0x24);
        assert!(mode_select(&[], false, false, false, &mut st, &lun).is_ok());
    }

    #[test]
    fn select_with_block_descriptor() {
        let lun = test_lun();
        let mut st = ModeState::new(&lun);
        let mut d = sense6(0x0a, 0, false, &st, &lun);
        d[0] = 0;
        d[2] = 0;
        d[14] |= 0x04;
        mode_select(&d, false, true, false, &mut st, &lun).expect("same geometry");
        assert!(st.d_sense);
        d[10] = 0x10; // block length 512 -> 4096
        let e = mode_select(&d, false, true, false, &mut st, &lun).expect_err("geometry");
        assert_eq!(e.field_pointer.map(|f| f.field), Some(9));
        // MODE SELECT(10) with the 10-byte header
        let mut st = ModeState::new(&lun);
        let mut d = mode_sense(true, true, false, 0, 0x0a, 0, &st, &lun).expect("ms10");
        d[0] = 0;
        d[1] = 0;
        d[3] = 0;
        d[10] |= 0x04;
        mode_select(&d, true, true, false, &mut st, &lun).expect("select10");
        assert!(st.d_sense);
    }
}
