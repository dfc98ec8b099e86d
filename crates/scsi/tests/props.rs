//! Property tests: no input makes any entry point panic, responses respect allocation
//! lengths, and the range checks of the data commands are exactly SBC's.

use proptest::prelude::*;
use raidd_scsi::{
    decode, miscompare_offset, mode_select, parse_unmap, respond, LunInfo, ModeState, Nexus, Op,
    Reservations, RespondCtx, Sense,
};

fn lun_strategy() -> impl Strategy<Value = LunInfo> {
    (
        prop_oneof![Just(512u32), Just(4096u32)],
        prop_oneof![
            0u64..4096,
            0u64..=u64::MAX,
            Just(1u64 << 32),
            Just(u64::MAX)
        ],
        0u32..100_000,
        any::<bool>(),
        any::<bool>(),
        0u64..100_000,
        any::<u8>(),
        any::<u32>(),
        any::<u32>(),
    )
        .prop_map(
            |(block_size, blocks, max_transfer, read_only, thin, ws, caw, mu, md)| LunInfo {
                block_size,
                blocks,
                physical_block_exp: 3,
                optimal_transfer_blocks: 256,
                optimal_granularity_blocks: 128,
                max_transfer_blocks: max_transfer,
                read_only,
                thin,
                rotational: false,
                write_cache: true,
                vendor: "RAIDD".into(),
                product: "p".into(),
                revision: "1".into(),
                serial: "s".into(),
                naa_id: [0x12; 16],
                target_port_id: 1,
                max_unmap_blocks: mu,
                max_unmap_descriptors: md % 1024,
                max_write_same_blocks: ws,
                max_compare_write_blocks: caw,
            },
        )
}

/// CDBs that start with a supported opcode most of the time, so the field parsers get
/// exercised rather than just the opcode check.
fn cdb_strategy() -> impl Strategy<Value = Vec<u8>> {
    let opcodes = vec![
        0x00u8, 0x03, 0x08, 0x0a, 0x12, 0x15, 0x1a, 0x1b, 0x25, 0x28, 0x2a, 0x2e, 0x2f, 0x34, 0x35,
        0x41, 0x42, 0x55, 0x5a, 0x5e, 0x5f, 0x88, 0x89, 0x8a, 0x8e, 0x8f, 0x90, 0x91, 0x93, 0x9e,
        0xa0, 0xa3, 0xa8, 0xaa, 0xae, 0xaf,
    ];
    (
        prop::sample::select(opcodes),
        prop::collection::vec(any::<u8>(), 0..20),
        any::<bool>(),
    )
        .prop_map(|(op, mut rest, keep_op)| {
            if keep_op || rest.is_empty() {
                rest.insert(0, op);
            }
            rest
        })
}

fn ctx_check(op: &Op, lun: &LunInfo) {
    let mode = ModeState::new(lun);
    let pending = Sense::power_on_reset();
    let ctx = RespondCtx {
        lun,
        mode: &mode,
        luns: &[0, 1, 2, 300],
        pending_sense: Some(&pending),
    };
    if let Ok(data) = respond(op, &ctx) {
        let alloc: Option<u64> = match *op {
            Op::Inquiry { alloc, .. } => Some(alloc.into()),
            Op::RequestSense { alloc, .. } => Some(alloc.into()),
            Op::ReadCapacity16 { alloc } => Some(alloc.into()),
            Op::GetLbaStatus { alloc, .. } => Some(alloc.into()),
            Op::ModeSense { alloc, .. } => Some(alloc.into()),
            Op::ReportLuns { alloc, .. } => Some(alloc.into()),
            Op::ReportSupportedOpcodes { alloc, .. } => Some(alloc.into()),
            Op::ReadCapacity10 => Some(8),
            _ => None,
        };
        if let Some(a) = alloc {
            assert!(
                data.len() as u64 <= a,
                "{op:?} returned {} bytes",
                data.len()
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn decode_and_respond_never_panic(cdb in cdb_strategy(), lun in lun_strategy()) {
        if let Ok(op) = decode(&cdb, &lun) {
            // whatever decode accepts is within the LUN and honours write protection
            prop_assert!(!(lun.read_only && op.is_write()));
            let _ = op.data_out_len(&lun);
            ctx_check(&op, &lun);
        }
    }

    #[test]
    fn decode_random_bytes(cdb in prop::collection::vec(any::<u8>(), 0..40), lun in lun_strategy()) {
        if let Ok(op) = decode(&cdb, &lun) {
            ctx_check(&op, &lun);
        }
    }

    #[test]
    fn rw10_range_rule(lba in any::<u32>(), len in any::<u16>(), write in any::<bool>(), lun in lun_strategy()) {
        let mut cdb = vec![if write { 0x2a } else { 0x28 }, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        cdb[2..6].copy_from_slice(&lba.to_be_bytes());
        cdb[7..9].copy_from_slice(&len.to_be_bytes());
        let fits = u64::from(lba) + u64::from(len) <= lun.blocks;
        let short = lun.max_transfer_blocks == 0 || u32::from(len) <= lun.max_transfer_blocks;
        let allowed = !(write && lun.read_only);
        let r = decode(&cdb, &lun);
        prop_assert_eq!(r.is_ok(), fits && short && allowed, "{:?}", r);
        if let Ok(op) = r {
            let expect = if write {
                Op::Write { lba: lba.into(), blocks: len.into(), fua: false }
            } else {
                Op::Read { lba: lba.into(), blocks: len.into(), fua: false }
            };
            prop_assert_eq!(op, expect);
        } else if !short {
            prop_assert_eq!(r.map_err(|e| e.asc), Err(0x24));
        } else if !fits {
            prop_assert_eq!(r.map_err(|e| e.asc), Err(0x21));
        }
    }

    #[test]
    fn rw16_range_rule(lba in prop_oneof![any::<u64>(), 0u64..5000], len in prop_oneof![any::<u32>(), 0u32..5000], write in any::<bool>(), lun in lun_strategy()) {
        let mut cdb = vec![0u8; 16];
        cdb[0] = if write { 0x8a } else { 0x88 };
        cdb[2..10].copy_from_slice(&lba.to_be_bytes());
        cdb[10..14].copy_from_slice(&len.to_be_bytes());
        let fits = lba.checked_add(len.into()).is_some_and(|e| e <= lun.blocks);
        let short = lun.max_transfer_blocks == 0 || len <= lun.max_transfer_blocks;
        let allowed = !(write && lun.read_only);
        let r = decode(&cdb, &lun);
        prop_assert_eq!(r.is_ok(), fits && short && allowed, "{:?}", r);
    }

    #[test]
    fn parse_unmap_never_panics(params in prop::collection::vec(any::<u8>(), 0..600), anchor in any::<bool>(), lun in lun_strategy()) {
        if let Ok(ranges) = parse_unmap(&params, anchor, &lun) {
            prop_assert!(ranges.len() <= lun.max_unmap_descriptors as usize);
            let total: u64 = ranges.iter().map(|&(_, n)| u64::from(n)).sum();
            prop_assert!(total <= u64::from(lun.max_unmap_blocks));
            for (lba, n) in ranges {
                prop_assert!(n > 0);
                prop_assert!(lba + u64::from(n) <= lun.blocks);
            }
        }
    }

    #[test]
    fn mode_select_never_panics(params in prop::collection::vec(any::<u8>(), 0..300), ten in any::<bool>(), pf in any::<bool>(), sp in any::<bool>(), lun in lun_strategy()) {
        let mut state = ModeState::new(&lun);
        let before = state.clone();
        if mode_select(&params, ten, pf, sp, &mut state, &lun).is_err() {
            prop_assert_eq!(state, before);
        }
    }

    #[test]
    fn mode_select_accepts_what_mode_sense_reports(ten in any::<bool>(), dbd in any::<bool>(), lun in lun_strategy()) {
        let mode = ModeState::new(&lun);
        let ctx = RespondCtx { lun: &lun, mode: &mode, luns: &[], pending_sense: None };
        let op = Op::ModeSense { ten, dbd, llbaa: false, pc: 0, page: 0x3f, subpage: 0, alloc: u16::MAX };
        let mut d = respond(&op, &ctx).expect("mode sense");
        // the mode data length and device-specific parameter are reserved in MODE SELECT
        d[0] = 0;
        if ten { d[1] = 0; d[3] = 0; } else { d[2] = 0; }
        let mut state = ModeState::new(&lun);
        prop_assert_eq!(mode_select(&d, ten, true, false, &mut state, &lun), Ok(()));
        prop_assert_eq!(state, mode);
    }

    #[test]
    fn reservations_never_panic(
        steps in prop::collection::vec((0u8..10, any::<u8>(), 0u8..4, prop::collection::vec(any::<u8>(), 20..28), 0u64..4, 0u64..4, 0u8..16), 0..40)
    ) {
        let mut r = Reservations::new();
        for (action, type_scope, who, mut params, key, sa_key, flags) in steps {
            let nexus = Nexus { initiator: format!("iqn.x:{who},i,0x000000000001"), target_port: u16::from(who % 2) };
            if params.len() >= 24 {
                params[0..8].copy_from_slice(&key.to_be_bytes());
                params[8..16].copy_from_slice(&sa_key.to_be_bytes());
                params[20] = flags;
            }
            let before_gen = r.generation();
            match r.pr_out(action, type_scope >> 4, type_scope & 0xf, &params, &nexus) {
                Ok(out) => {
                    if r.generation() != before_gen {
                        prop_assert!(out.changed);
                    }
                }
                Err(_) => {
                    prop_assert_eq!(r.generation(), before_gen);
                }
            }
            for a in 0..5u8 {
                if let Ok(d) = r.pr_in(a, 100, &nexus) {
                    prop_assert!(d.len() <= 100);
                }
            }
            let back = Reservations::decode(&r.encode());
            prop_assert_eq!(back.as_ref(), Ok(&r));
        }
    }

    #[test]
    fn reservation_decode_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let _ = Reservations::decode(&bytes);
        let mut prefixed = b"RAIDDPR1".to_vec();
        prefixed.extend_from_slice(&bytes);
        let _ = Reservations::decode(&prefixed);
    }

    #[test]
    fn miscompare_finds_first_difference(a in prop::collection::vec(any::<u8>(), 0..64), b in prop::collection::vec(any::<u8>(), 0..64)) {
        match miscompare_offset(&a, &b) {
            None => prop_assert_eq!(&a, &b),
            Some(i) => {
                prop_assert_eq!(&a[..i], &b[..i]);
                prop_assert!(i == a.len().min(b.len()) || a[i] != b[i]);
            }
        }
    }

    #[test]
    fn sense_encodings_are_consistent(key in 0u8..16, asc in any::<u8>(), ascq in any::<u8>(), info in proptest::option::of(any::<u64>()), byte in any::<u16>()) {
        let mut s = Sense::invalid_field_in_cdb(byte, None);
        s.key = key; s.asc = asc; s.ascq = ascq; s.information = info;
        let f = s.fixed();
        prop_assert_eq!(f.len(), 18);
        prop_assert_eq!((f[2], f[12], f[13]), (key, asc, ascq));
        let d = s.descriptor();
        prop_assert_eq!(d[7] as usize, d.len() - 8);
        prop_assert_eq!(&d[1..4], &[key, asc, ascq]);
    }
}
