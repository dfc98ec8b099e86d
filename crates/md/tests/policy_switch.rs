//! Switching md's consistency policy in a superblock, as `mdadm --grow` does: the partial
//! parity log's area and the internal bitmap, where they go, when the bad-block log moves
//! for them, and what excludes them.

mod common;

use raidd_md::create::{bblog_bm_space_sectors, bblog_placement, default_data_offset};
use raidd_md::feature;
use raidd_md::policy::{drop_bitmap, drop_ppl, plan_bitmap, plan_ppl, SwitchError};
use raidd_md::ppl::Area;
use raidd_md::Superblock;

/// A RAID5 member's superblock as raidd and mdadm create it without a bitmap.
fn member(dev_sectors: u64, chunk: u32) -> Superblock {
    let mut sb = common::sample_superblock();
    sb.level = 5;
    sb.chunksize = chunk;
    sb.feature_map = 0;
    sb.bitmap_offset = 0;
    sb.super_offset = 8;
    sb.data_offset = default_data_offset(dev_sectors, chunk);
    sb.data_size = dev_sectors - sb.data_offset;
    let space = bblog_bm_space_sectors(sb.data_size, None);
    let (off, size) = bblog_placement(sb.data_offset, space);
    sb.bblog_offset = off;
    sb.bblog_size = size;
    sb
}

#[test]
fn a_large_member_gets_mdadm_s_area_where_its_bitmap_space_is() {
    // 300 GiB: mdadm reserves 128 KiB for a bitmap and puts the log after it.
    let sb = member(300 << 21, 128);
    assert_eq!(sb.bblog_offset, 8 + 256);
    let plan = plan_ppl(&sb).expect("room");
    // 256 sectors are short of 1 MiB: the empty log moves, the area takes 1 MiB.
    assert_eq!(plan.area, Area::MDADM);
    let at = plan.bblog_offset.expect("moved");
    assert_eq!(at as u64, sb.data_offset - sb.super_offset - 8);
    let mut after = sb.clone();
    plan.apply(&mut after);
    assert_eq!(Area::of(&after), Some(Area::MDADM));
    assert_ne!(after.feature_map & feature::MULTIPLE_PPLS, 0);
    let area = Area::of(&after).expect("area");
    assert_eq!(
        area.validate(after.super_offset, 4096, after.data_offset, after.data_size),
        Ok(area)
    );
    // The area ends before the moved log, which ends at the data.
    assert!(area.sector(8) + u64::from(area.size) <= 8 + at as u64);
    assert_eq!(8 + at as u64 + 8, after.data_offset);
}

#[test]
fn a_log_with_bad_blocks_stays_and_limits_the_area_as_mdadm_does() {
    let mut sb = member(300 << 21, 128);
    sb.feature_map |= feature::BAD_BLOCKS;
    let plan = plan_ppl(&sb).expect("room");
    assert_eq!(plan.bblog_offset, None);
    // mdadm: the 256 sectors up to the log (a header and 128 KiB would be more).
    assert_eq!(
        plan.area,
        Area {
            offset: 8,
            size: 256
        }
    );
    assert!(!plan.area.multiple());
    // A 512 KiB chunk does not fit there.
    sb.chunksize = 1024;
    assert_eq!(
        plan_ppl(&sb),
        Err(SwitchError::NoRoom {
            space: 256,
            need: 1032,
            chunk_kib: 512
        })
    );
}

#[test]
fn without_a_log_the_area_runs_to_the_data() {
    let mut sb = member(1 << 21, 128);
    sb.bblog_offset = 0;
    sb.bblog_size = 0;
    let plan = plan_ppl(&sb).expect("room");
    assert_eq!(plan.bblog_offset, None);
    let space = sb.data_offset - 8 - 8;
    assert_eq!(u64::from(plan.area.size), space.min(2048));
}

#[test]
fn policies_that_exclude_it_are_named() {
    let sb = member(1 << 21, 128);
    let with = |f: u32| {
        let mut s = sb.clone();
        s.feature_map |= f;
        plan_ppl(&s)
    };
    assert_eq!(with(feature::BITMAP_OFFSET), Err(SwitchError::HasBitmap));
    assert_eq!(with(feature::JOURNAL), Err(SwitchError::HasJournal));
    assert_eq!(with(feature::PPL), Err(SwitchError::AlreadyPpl));
    assert_eq!(with(feature::MULTIPLE_PPLS), Err(SwitchError::AlreadyPpl));
    let mut six = sb.clone();
    six.level = 6;
    assert_eq!(plan_ppl(&six), Err(SwitchError::NotRaid5(6)));
}

#[test]
fn on_then_off_leaves_the_superblock_as_it_was_but_the_log_s_place() {
    for dev in [1u64 << 17, 1 << 21, 20 << 21, 300 << 21] {
        for chunk in [8u32, 128, 1024] {
            let sb = member(dev, chunk);
            let Ok(plan) = plan_ppl(&sb) else {
                continue;
            };
            let mut s = sb.clone();
            plan.apply(&mut s);
            let area = Area::of(&s).expect("area");
            assert!(area.unit_space() as u64 >= u64::from(chunk) * 512);
            assert_eq!(
                area.validate(s.super_offset, 4096, s.data_offset, s.data_size),
                Ok(area),
                "{dev} {chunk}"
            );
            // The area and the log do not overlap.
            let (a0, a1) = (8 + 8, 8 + 8 + u64::from(area.size));
            let b0 = 8 + s.bblog_offset as u64;
            assert!(b0 >= a1 || b0 + 8 <= a0, "{dev} {chunk}");
            drop_ppl(&mut s);
            s.bblog_offset = sb.bblog_offset;
            assert_eq!(s, sb);
        }
    }
}

#[test]
fn a_bitmap_goes_after_the_superblock_and_the_log_moves_only_when_it_must() {
    let sb = member(300 << 21, 128);
    assert_eq!(sb.bblog_offset, 8 + 256);
    // A small bitmap fits before the log.
    let small = plan_bitmap(&sb, 16).expect("room");
    assert_eq!(small.bblog_offset, None);
    let mut on = sb.clone();
    small.apply(&mut on);
    assert_eq!(on.bitmap_offset, 8);
    assert_ne!(on.feature_map & feature::BITMAP_OFFSET, 0);
    drop_bitmap(&mut on);
    assert_eq!(on, sb);
    // A larger one moves the empty log to just before the data.
    let large = plan_bitmap(&sb, 1000).expect("room");
    assert_eq!(
        large.bblog_offset.map(|o| o as u64),
        Some(sb.data_offset - 8 - 8)
    );
    // A log with entries stays, and the bitmap does not fit.
    let mut bad = sb.clone();
    bad.feature_map |= feature::BAD_BLOCKS;
    assert_eq!(
        plan_bitmap(&bad, 1000),
        Err(SwitchError::NoBitmapRoom {
            space: 256,
            need: 1000
        })
    );
    let with = |f: u32| {
        let mut s = sb.clone();
        s.feature_map |= f;
        plan_bitmap(&s, 16)
    };
    assert_eq!(
        with(feature::BITMAP_OFFSET),
        Err(SwitchError::AlreadyBitmap)
    );
    assert_eq!(with(feature::MULTIPLE_PPLS), Err(SwitchError::HasPpl));
    assert_eq!(with(feature::JOURNAL), Err(SwitchError::HasJournal));
}
