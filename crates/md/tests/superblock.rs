//! Superblock encoding, validation and round-trip properties.

mod common;

use common::{fix_checksum, sample_superblock};
use proptest::prelude::*;
use raidd_md::{feature, DevRole, SbError, Superblock, MAX_DEV_LIMIT};

const SB_SECTOR: u64 = 8;
const A7_M0: &[u8] = include_bytes!("data/a7/m0.sb");

fn le_u64(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().expect("8 bytes"))
}
fn le_u32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().expect("4 bytes"))
}
fn le_u16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes(b[off..off + 2].try_into().expect("2 bytes"))
}

/// Each field gets a distinct value; the offsets below are md_p.h's, written out
/// independently of the crate's own table.
#[test]
fn encode_places_every_field_at_md_offsets() {
    let mut sb = sample_superblock();
    sb.feature_map = 0x1001;
    sb.level = 0;
    sb.layout = 0x0102_0304;
    sb.size = 0x1112_1314_1516_1718;
    sb.chunksize = 0x2122_2324;
    sb.raid_disks = 0x3132_3334;
    sb.bitmap_offset = -0x0102_0304;
    sb.new_level = 0x4142_4344;
    sb.reshape_position = 0x5152_5354_5556_5758;
    sb.delta_disks = 0x6162_6364;
    sb.new_layout = 0x7172_7374;
    sb.new_chunk = 0x8182_8384;
    sb.new_offset = 0x9192_9394;
    sb.data_offset = 0xa1a2_a3a4_a5a6_a7a8;
    sb.data_size = 0xb1b2_b3b4_b5b6_b7b8;
    sb.super_offset = 0xc1c2_c3c4_c5c6_c7c8;
    sb.recovery_offset = 0xd1d2_d3d4_d5d6_d7d8;
    sb.dev_number = 0xe1e2_e3e4;
    sb.cnt_corrected_read = 0xf1f2_f3f4;
    sb.devflags = 0x5a;
    sb.bblog_shift = 0xa5;
    sb.bblog_size = 0x0b0c;
    sb.bblog_offset = -16;
    sb.ctime = 0x0607_0809_0a0b_0c0d;
    sb.utime = 0x1617_1819_1a1b_1c1d;
    sb.events = 0x2627_2829_2a2b_2c2d;
    sb.resync_offset = 0x3637_3839_3a3b_3c3d;
    sb.dev_roles = vec![0xfffe, 7, 0xfffd];
    let b = sb.encode();
    assert_eq!(b.len(), 512, "256 + 2*3 rounded up to a sector");
    assert_eq!(le_u32(&b, 0), 0xa92b_4efc);
    assert_eq!(le_u32(&b, 4), 1);
    assert_eq!(le_u32(&b, 8), 0x1001);
    assert_eq!(le_u32(&b, 12), 0, "pad0");
    assert_eq!(b[16..32], sb.set_uuid);
    assert_eq!(b[32..64], sb.set_name);
    assert_eq!(le_u64(&b, 64), sb.ctime);
    assert_eq!(le_u32(&b, 72), 0);
    assert_eq!(le_u32(&b, 76), sb.layout);
    assert_eq!(le_u64(&b, 80), sb.size);
    assert_eq!(le_u32(&b, 88), sb.chunksize);
    assert_eq!(le_u32(&b, 92), sb.raid_disks);
    assert_eq!(le_u32(&b, 96) as i32, sb.bitmap_offset);
    assert_eq!(le_u32(&b, 100), sb.new_level);
    assert_eq!(le_u64(&b, 104), sb.reshape_position);
    assert_eq!(le_u32(&b, 112), sb.delta_disks);
    assert_eq!(le_u32(&b, 116), sb.new_layout);
    assert_eq!(le_u32(&b, 120), sb.new_chunk);
    assert_eq!(le_u32(&b, 124), sb.new_offset);
    assert_eq!(le_u64(&b, 128), sb.data_offset);
    assert_eq!(le_u64(&b, 136), sb.data_size);
    assert_eq!(le_u64(&b, 144), sb.super_offset);
    assert_eq!(le_u64(&b, 152), sb.recovery_offset);
    assert_eq!(le_u32(&b, 160), sb.dev_number);
    assert_eq!(le_u32(&b, 164), sb.cnt_corrected_read);
    assert_eq!(b[168..184], sb.device_uuid);
    assert_eq!(b[184], 0x5a);
    assert_eq!(b[185], 0xa5);
    assert_eq!(le_u16(&b, 186), 0x0b0c);
    assert_eq!(le_u32(&b, 188) as i32, -16);
    assert_eq!(le_u64(&b, 192), sb.utime);
    assert_eq!(le_u64(&b, 200), sb.events);
    assert_eq!(le_u64(&b, 208), sb.resync_offset);
    assert_eq!(le_u32(&b, 216), Superblock::checksum(&b));
    assert_eq!(le_u32(&b, 220), 3, "max_dev");
    assert!(b[224..256].iter().all(|&x| x == 0), "pad3");
    assert_eq!(
        [le_u16(&b, 256), le_u16(&b, 258), le_u16(&b, 260)],
        [0xfffe, 7, 0xfffd]
    );
    assert!(b[262..].iter().all(|&x| x == 0), "sector padding");
}

#[test]
fn checksum_matches_a_kernel_written_superblock() {
    assert_eq!(Superblock::checksum(A7_M0), le_u32(A7_M0, 216));
    assert_eq!(
        format!("{:x}", le_u32(A7_M0, 216)),
        "76295ecd",
        "examine.txt of a7 vdb"
    );
}

#[test]
fn encoded_len_rounds_to_sectors() {
    let mut sb = sample_superblock();
    for (max_dev, len) in [(0, 512), (128, 512), (129, 1024), (384, 1024), (1920, 4096)] {
        sb.dev_roles = vec![0xffff; max_dev];
        assert_eq!(sb.encoded_len(), len, "max_dev {max_dev}");
        assert_eq!(sb.encode().len(), len);
    }
}

/// Flipping any byte the checksum covers is caught (as a checksum error unless the byte
/// belongs to a field checked before it); bytes past the roles are not md's and are ignored.
#[test]
fn every_flipped_byte_is_caught_or_ignored() {
    let mut odd = sample_superblock();
    odd.dev_roles.truncate(5); // odd max_dev: exercises the trailing u16
    let mut odd_bytes = odd.encode();
    odd_bytes.resize(4096, 0);
    for original in [A7_M0.to_vec(), odd_bytes] {
        let good = Superblock::parse(&original, SB_SECTOR).expect("valid");
        let used = 256 + 2 * good.max_dev();
        for i in 0..original.len() {
            for mask in [0xffu8, 0x01, 0x80] {
                let mut b = original.clone();
                b[i] ^= mask;
                let got = Superblock::parse(&b, SB_SECTOR);
                if i >= used {
                    assert_eq!(
                        got.as_ref(),
                        Ok(&good),
                        "byte {i} is outside the superblock"
                    );
                    continue;
                }
                let ok = matches!(
                    (i, &got),
                    (0..=3, Err(SbError::BadMagic { .. }))
                        | (4..=7, Err(SbError::BadVersion(_)))
                        | (220..=223, Err(SbError::TooManyDevs(_)))
                        | (_, Err(SbError::BadChecksum { .. }))
                );
                assert!(ok, "byte {i} ^ {mask:#x}: {got:?}");
            }
        }
    }
}

fn parse_edited(edit: impl FnOnce(&mut Vec<u8>)) -> Result<Superblock, SbError> {
    let mut b = sample_superblock().encode();
    edit(&mut b);
    fix_checksum(&mut b);
    Superblock::parse(&b, SB_SECTOR)
}

fn parse_modified(edit: impl FnOnce(&mut Superblock)) -> Result<Superblock, SbError> {
    let mut sb = sample_superblock();
    edit(&mut sb);
    Superblock::parse(&sb.encode(), SB_SECTOR)
}

#[test]
fn sample_is_valid() {
    let sb = sample_superblock();
    assert_eq!(Superblock::parse(&sb.encode(), SB_SECTOR), Ok(sb));
}

#[test]
fn wrong_magic_version_and_checksum() {
    let got = parse_edited(|b| b[0] = 0xfd);
    assert_eq!(got, Err(SbError::BadMagic { found: 0xa92b_4efd }));
    assert_eq!(parse_edited(|b| b[4] = 0), Err(SbError::BadVersion(0)));
    assert_eq!(parse_edited(|b| b[4] = 2), Err(SbError::BadVersion(2)));
    let mut b = sample_superblock().encode();
    let stored = le_u32(&b, 216);
    b[40] ^= 1; // inside set_name
    let computed = Superblock::checksum(&b);
    assert_ne!(stored, computed);
    assert_eq!(
        Superblock::parse(&b, SB_SECTOR),
        Err(SbError::BadChecksum { stored, computed })
    );
}

#[test]
fn unknown_features_are_refused() {
    for bit in 13..32 {
        let got = parse_modified(|sb| sb.feature_map |= 1 << bit);
        assert_eq!(got, Err(SbError::UnknownFeatures(1 << bit)), "bit {bit}");
    }
    assert!(parse_modified(|sb| sb.feature_map = feature::BITMAP_OFFSET).is_ok());
}

#[test]
fn super_offset_must_match_where_it_was_read() {
    let sb = sample_superblock();
    let got = Superblock::parse(&sb.encode(), 0);
    assert_eq!(
        got,
        Err(SbError::WrongSuperOffset {
            stored: 8,
            read_at: 0
        })
    );
}

#[test]
fn non_zero_pads_are_refused() {
    assert_eq!(
        parse_edited(|b| b[12] = 1),
        Err(SbError::NonZeroPad),
        "pad0"
    );
    for i in 224..256 {
        assert_eq!(
            parse_edited(|b| b[i] = 0x40),
            Err(SbError::NonZeroPad),
            "pad3[{i}]"
        );
    }
}

#[test]
fn small_data_is_refused() {
    assert_eq!(
        parse_modified(|sb| sb.data_size = 9),
        Err(SbError::DataTooSmall(9))
    );
    assert!(parse_modified(|sb| sb.data_size = 10).is_ok());
}

#[test]
fn too_many_devices_are_refused() {
    let mut sb = sample_superblock();
    sb.dev_roles = vec![0xffff; MAX_DEV_LIMIT as usize];
    assert!(
        Superblock::parse(&sb.encode(), SB_SECTOR).is_ok(),
        "1920 is the limit"
    );
    sb.dev_roles.push(0xffff);
    assert_eq!(
        Superblock::parse(&sb.encode(), SB_SECTOR),
        Err(SbError::TooManyDevs(1921))
    );
    assert_eq!(sb.validate(SB_SECTOR), Err(SbError::TooManyDevs(1921)));
}

#[test]
fn truncated_input_is_an_error() {
    let bytes = sample_superblock().encode(); // max_dev 128: 512 bytes used
    for len in [0, 1, 100, 255] {
        assert_eq!(
            Superblock::parse(&bytes[..len], SB_SECTOR),
            Err(SbError::Truncated {
                got: len,
                need: 256
            })
        );
    }
    assert_eq!(
        Superblock::parse(&bytes[..511], SB_SECTOR),
        Err(SbError::Truncated {
            got: 511,
            need: 512
        })
    );
    assert!(Superblock::parse(&bytes[..512], SB_SECTOR).is_ok());
    // max_dev claims more roles than the bytes hold.
    let got = parse_edited(|b| b[220..224].copy_from_slice(&1000u32.to_le_bytes()));
    assert_eq!(
        got,
        Err(SbError::Truncated {
            got: 512,
            need: 2256
        })
    );
}

#[test]
fn ppl_conflicts_are_refused() {
    for other in [feature::BITMAP_OFFSET, feature::JOURNAL] {
        for ppl in [feature::PPL, feature::MULTIPLE_PPLS] {
            let got = parse_modified(|sb| sb.feature_map = ppl | other);
            assert_eq!(got, Err(SbError::PplConflict), "{ppl:#x} with {other:#x}");
        }
    }
    assert!(parse_modified(|sb| sb.feature_map = feature::PPL).is_ok());
    let both = parse_modified(|sb| sb.feature_map = feature::PPL | feature::MULTIPLE_PPLS);
    assert!(
        matches!(
            both,
            Err(SbError::Invalid {
                field: "feature_map",
                ..
            })
        ),
        "{both:?}"
    );
}

#[test]
fn kernel_refusals_beyond_the_listed_ones() {
    let field_of = |r: Result<Superblock, SbError>| match r {
        Err(SbError::Invalid { field, .. }) => field,
        other => panic!("expected Invalid, got {other:?}"),
    };
    // v1.2 data must start after the superblock sector.
    assert_eq!(
        field_of(parse_modified(|sb| sb.data_offset = 8)),
        "data_offset"
    );
    assert!(parse_modified(|sb| sb.data_offset = 9).is_ok());
    let reshape = |sb: &mut Superblock| {
        sb.feature_map = feature::RESHAPE_ACTIVE | feature::NEW_OFFSET;
        sb.new_offset = (-2040i32) as u32;
    };
    assert_eq!(field_of(parse_modified(reshape)), "new_offset");
    let bad_blocks = |size, offset| {
        parse_modified(move |sb| {
            sb.feature_map = feature::BAD_BLOCKS;
            sb.bblog_size = size;
            sb.bblog_offset = offset;
        })
    };
    assert!(bad_blocks(8, 16).is_ok());
    assert_eq!(field_of(bad_blocks(9, 16)), "bblog_size");
    assert_eq!(field_of(bad_blocks(8, 0)), "bblog_offset");
    assert_eq!(
        field_of(parse_modified(|sb| sb.feature_map = feature::RAID0_LAYOUT)),
        "feature_map"
    );
    assert!(parse_modified(|sb| {
        sb.level = 0;
        sb.feature_map = feature::RAID0_LAYOUT;
    })
    .is_ok());
    let journal = |sb: &mut Superblock| sb.dev_roles[1] = DevRole::Journal.to_raw();
    assert_eq!(field_of(parse_modified(journal)), "dev_roles");
    assert!(parse_modified(|sb| {
        journal(sb);
        sb.feature_map = feature::JOURNAL;
    })
    .is_ok());
}

#[test]
fn v1_0_and_v1_1_placements_parse() {
    // v1.1: superblock at sector 0, data after it.
    let mut sb = sample_superblock();
    sb.super_offset = 0;
    assert!(Superblock::parse(&sb.encode(), 0).is_ok());
    // v1.0: superblock near the end, data from sector 0 up to it.
    sb.super_offset = 40_000;
    sb.data_offset = 0;
    sb.data_size = 40_000;
    assert!(Superblock::parse(&sb.encode(), 40_000).is_ok());
    sb.data_size = 40_001;
    assert!(
        Superblock::parse(&sb.encode(), 40_000).is_err(),
        "data runs into the superblock"
    );
}

#[test]
fn names() {
    let mut sb = sample_superblock();
    sb.set_array_name("oracle:a7");
    assert_eq!(&sb.set_name[..10], b"oracle:a7\0");
    assert_eq!(sb.array_name(), "a7");
    assert_eq!(sb.full_name(), "oracle:a7");
    sb.set_array_name("plain");
    assert_eq!(sb.array_name(), "plain");
    assert!(
        sb.set_name[5..].iter().all(|&b| b == 0),
        "old name fully cleared"
    );
    let long = "h:".to_string() + &"x".repeat(40);
    sb.set_array_name(&long);
    assert_eq!(sb.full_name(), &long[..32], "truncated to 32 bytes");
    assert_eq!(sb.array_name().len(), 30);
    // 31 ASCII bytes then a 2-byte character: it does not fit and is dropped whole.
    sb.set_array_name(&("y".repeat(31) + "é"));
    assert_eq!(sb.full_name(), "y".repeat(31));
    sb.set_name = *b"host:with:colons\0garbage-after-n";
    assert_eq!(
        sb.array_name(),
        "with:colons",
        "only the first colon splits off the host"
    );
}

#[test]
fn own_role_and_clean() {
    let mut sb = sample_superblock();
    assert_eq!(sb.own_role(), DevRole::Active(1));
    sb.dev_roles[1] = 0xfffe;
    assert_eq!(sb.own_role(), DevRole::Faulty);
    sb.dev_number = 500; // beyond max_dev: the kernel treats it as a spare
    assert_eq!(sb.own_role(), DevRole::Spare);
    assert!(sb.is_clean());
    sb.resync_offset = 0;
    assert!(!sb.is_clean());
}

/// Random field values, adjusted just enough to satisfy the kernel's rules for a superblock
/// read at `super_offset`. The property test asserts `validate` agrees, so this generator
/// cannot silently drift into producing invalid input.
fn make_valid(mut sb: Superblock) -> Superblock {
    let f = &mut sb.feature_map;
    *f &= feature::ALL;
    if *f & (feature::PPL | feature::MULTIPLE_PPLS) != 0 {
        *f &= !(feature::BITMAP_OFFSET | feature::JOURNAL | feature::MULTIPLE_PPLS);
    }
    if sb.level != 0 {
        sb.feature_map &= !feature::RAID0_LAYOUT;
    }
    if sb.own_role() == DevRole::Journal {
        sb.feature_map |= feature::JOURNAL;
        sb.feature_map &= !(feature::PPL | feature::MULTIPLE_PPLS);
    }
    if sb.feature_map & feature::BAD_BLOCKS != 0 {
        sb.bblog_size %= 9;
        sb.bblog_offset = sb.bblog_offset.max(1);
    }
    let sb_sectors = (sb.encoded_len() / 512) as u64;
    let sb_end = sb.super_offset.saturating_add(sb_sectors);
    let fits =
        |offset: u64, size: u64| offset >= sb_end || offset.saturating_add(size) <= sb.super_offset;
    if !fits(sb.data_offset, sb.data_size) {
        sb.data_offset = sb_end;
    }
    let new = i128::from(sb.data_offset) + i128::from(sb.new_offset as i32);
    let new_ok = u64::try_from(new).is_ok_and(|n| fits(n, sb.data_size));
    if !new_ok {
        sb.feature_map &= !feature::NEW_OFFSET;
    }
    sb
}

prop_compose! {
    fn any_superblock()(
        ids in (any::<[u8; 16]>(), any::<[u8; 32]>(), any::<[u8; 16]>()),
        geometry in (any::<u32>(), any::<i32>(), any::<u32>(), any::<u64>(), any::<u32>(),
                     any::<u32>(), any::<i32>()),
        reshape in (any::<u32>(), any::<u64>(), any::<u32>(), any::<u32>(), any::<u32>(),
                    any::<u32>()),
        place in (any::<u64>(), 10..=u64::MAX, prop_oneof![Just(8u64), Just(0), any::<u64>()],
                  any::<u64>(), 0u32..8, any::<u32>()),
        misc in (any::<u64>(), any::<u8>(), any::<u8>(), any::<u16>(), any::<i32>(),
                 any::<u64>(), any::<u64>(), any::<u64>()),
        dev_roles in prop_oneof![
            prop::collection::vec(any::<u16>(), 0..=64),
            prop::collection::vec(any::<u16>(), 1900..=1920),
        ],
    ) -> Superblock {
        make_valid(Superblock {
            feature_map: geometry.0,
            set_uuid: ids.0,
            set_name: ids.1,
            ctime: misc.0,
            level: geometry.1,
            layout: geometry.2,
            size: geometry.3,
            chunksize: geometry.4,
            raid_disks: geometry.5,
            bitmap_offset: geometry.6,
            new_level: reshape.0,
            reshape_position: reshape.1,
            delta_disks: reshape.2,
            new_layout: reshape.3,
            new_chunk: reshape.4,
            new_offset: reshape.5,
            data_offset: place.0,
            data_size: place.1,
            super_offset: place.2,
            recovery_offset: place.3,
            dev_number: place.4,
            cnt_corrected_read: place.5,
            device_uuid: ids.2,
            devflags: misc.1,
            bblog_shift: misc.2,
            bblog_size: misc.3,
            bblog_offset: misc.4,
            utime: misc.5,
            events: misc.6,
            resync_offset: misc.7,
            dev_roles,
        })
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn parse_inverts_encode(sb in any_superblock()) {
        let read_at = sb.super_offset;
        prop_assert_eq!(sb.validate(read_at), Ok(()));
        let bytes = sb.encode();
        prop_assert_eq!(bytes.len(), sb.encoded_len());
        prop_assert_eq!(bytes.len() % 512, 0);
        prop_assert!(bytes[256 + 2 * sb.max_dev()..].iter().all(|&b| b == 0));
        prop_assert_eq!(le_u32(&bytes, 216), Superblock::checksum(&bytes));
        prop_assert_eq!(Superblock::parse(&bytes, read_at), Ok(sb.clone()));
        // A whole 4 KiB read parses the same.
        let mut block = bytes.clone();
        block.resize(block.len().max(4096), 0xee);
        prop_assert_eq!(Superblock::parse(&block, read_at), Ok(sb));
    }

    #[test]
    fn dev_role_round_trips(raw in any::<u16>()) {
        prop_assert_eq!(DevRole::from_raw(raw).to_raw(), raw);
    }

    #[test]
    fn time_round_trips(secs in 0u64..(1 << 40), micros in 0u32..(1 << 24)) {
        prop_assert_eq!(Superblock::split_time(Superblock::join_time(secs, micros)), (secs, micros));
    }
}
