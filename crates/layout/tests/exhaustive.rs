//! Exhaustive checks over small geometries of every level: every array sector round-trips
//! through `pieces` and `reverse`, member sectors are used exactly once, and the mapping
//! matches independent restatements of md's code.

mod common;

use common::*;
use raidd_layout::{
    Geometry, LayoutError, Level, ParityLayout, Raid0Layout, Raid10Layout, Reverse,
};

const CHUNKS: [u32; 2] = [8, 16];

/// Ranges worth checking in an array of `array` sectors with chunk `chunk`.
fn ranges(array: u64, chunk: u64) -> Vec<(u64, u64)> {
    let mut ranges = vec![(0, array), (array - 1, 1)];
    if array > 2 {
        ranges.push((1, array - 2));
    }
    if array > 3 * chunk {
        ranges.push((chunk / 2, 2 * chunk));
        ranges.push((chunk, chunk));
    }
    ranges
}

/// Everything that holds for any geometry, given a way to check each sector against a
/// reference model.
fn check_all(g: &Geometry, reference: impl Fn(u64) -> Vec<(usize, u64)>) {
    check_bijection(g);
    check_stripe_maps(g);
    let chunk = u64::from(g.chunk_sectors().max(8));
    for sector in 0..g.array_sectors() {
        let locs: Vec<(usize, u64)> = locs_of(g, sector)
            .iter()
            .map(|l| (l.member, l.sector))
            .collect();
        assert_eq!(locs, reference(sector), "{g:?} sector {sector}");
    }
    for (sector, count) in ranges(g.array_sectors(), chunk) {
        let pieces = check_pieces(g, sector, count, 1);
        let copies = copies_per_sector(g);
        for max_segs in [1, 2, 1024] {
            check_coalesce(&pieces, max_segs, |_| 0);
            check_coalesce(&pieces, max_segs, |_| copies - 1);
            check_coalesce(&pieces, max_segs, |p| {
                (p.array_sector / chunk) as usize % copies
            });
        }
    }
}

/// Member sizes with some unequal and odd ones.
fn unequal_sizes(members: usize, chunk: u64) -> Vec<u64> {
    let pattern = [
        2 * chunk + 3,
        5 * chunk,
        chunk,
        4 * chunk + 1,
        3 * chunk,
        6 * chunk,
        2 * chunk,
        chunk + 7,
    ];
    pattern[..members].to_vec()
}

#[test]
fn linear_every_small_geometry() {
    for members in 1..=8 {
        for rounding in [0u32, 8] {
            let sizes_sets = [
                vec![37u64; members],
                unequal_sizes(members, 8),
                (1..=members as u64).map(|m| m * 9).collect(),
            ];
            for sizes in sizes_sets {
                let g = Geometry::linear(&sizes, rounding).expect("valid linear");
                let usable: Vec<u64> = sizes
                    .iter()
                    .map(|&s| {
                        if rounding == 0 {
                            s
                        } else {
                            s / u64::from(rounding) * u64::from(rounding)
                        }
                    })
                    .collect();
                assert_eq!(g.array_sectors(), usable.iter().sum::<u64>());
                check_all(&g, |x| {
                    let mut start = 0;
                    for (member, &size) in usable.iter().enumerate() {
                        if x < start + size {
                            return vec![(member, x - start)];
                        }
                        start += size;
                    }
                    unreachable!()
                });
            }
        }
    }
}

#[test]
fn raid0_every_small_geometry() {
    for members in 1..=8 {
        for chunk in CHUNKS {
            let c = u64::from(chunk);
            for sizes in [vec![3 * c + 2; members], unequal_sizes(members, c)] {
                for layout in [Raid0Layout::Original, Raid0Layout::Alternate] {
                    let g = Geometry::raid0(&sizes, chunk, layout).expect("valid raid0");
                    let rounded: u64 = sizes.iter().map(|s| s / c * c).sum();
                    assert_eq!(g.array_sectors(), rounded);
                    for (m, &size) in sizes.iter().enumerate() {
                        assert_eq!(g.member_used_sectors(m), size / c * c);
                    }
                    let original = layout == Raid0Layout::Original;
                    check_all(&g, |x| vec![ref_raid0(&sizes, c, original, x)]);
                }
            }
        }
    }
}

#[test]
fn raid1_every_small_geometry() {
    for members in 1..=8 {
        for dev in [1u64, 37] {
            let g = Geometry::raid1(members, dev).expect("valid raid1");
            assert_eq!(g.array_sectors(), dev);
            check_all(&g, |x| (0..members).map(|m| (m, x)).collect());
        }
    }
}

fn raid10_layouts() -> Vec<Raid10Layout> {
    let mut layouts = Vec::new();
    for near in 1..=3u8 {
        for far in 1..=3u8 {
            for offset in [false, true] {
                for far_set_mode in [0u8, 2] {
                    layouts.push(Raid10Layout {
                        near,
                        far,
                        offset,
                        far_set_mode,
                    });
                }
            }
        }
    }
    layouts
}

#[test]
fn raid10_every_small_geometry() {
    let mut checked = 0;
    for members in 2..=8usize {
        for layout in raid10_layouts() {
            let (near, far) = (usize::from(layout.near), usize::from(layout.far));
            let copies = near * far;
            // Whether md's mapping is usable, judged on a large array by brute force.
            let big = Raid10Ref::new(
                members,
                near,
                far,
                layout.offset,
                layout.far_set_mode,
                8,
                8 * (4 * far * members * near) as u64,
            );
            let usable = copies >= 2 && copies <= members && big.collision_free();
            for chunk in CHUNKS {
                let c = u64::from(chunk);
                for dev in [6 * c, 7 * c + 3, 12 * c] {
                    let result = Geometry::raid10(members, layout, chunk, dev);
                    let reference = Raid10Ref::new(
                        members,
                        near,
                        far,
                        layout.offset,
                        layout.far_set_mode,
                        c,
                        dev,
                    );
                    let g = match result {
                        Ok(g) => g,
                        Err(LayoutError::Empty) => {
                            assert!(
                                usable && reference.array_sectors == 0,
                                "{members} {layout:?} {dev}"
                            );
                            continue;
                        }
                        Err(LayoutError::Raid10TooFewMembers { .. }) => {
                            assert!(copies > members);
                            continue;
                        }
                        Err(LayoutError::BadLayout { .. }) => {
                            assert!(!usable, "refused a usable layout: {members} {layout:?}");
                            continue;
                        }
                        Err(e) => panic!("unexpected {e}"),
                    };
                    assert!(usable, "accepted a colliding layout: {members} {layout:?}");
                    assert_eq!(g.array_sectors(), reference.array_sectors);
                    for m in 0..members {
                        assert_eq!(g.member_used_sectors(m), reference.dev_sectors);
                    }
                    assert_eq!(g.redundancy(), copies - 1);
                    check_all(&g, |x| reference.phys(x));
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 500, "only {checked} raid10 geometries checked");
}

fn parity_cases() -> Vec<(Level, usize, ParityLayout)> {
    let mut cases = Vec::new();
    for level in [Level::Raid4, Level::Raid5, Level::Raid6] {
        for members in level.min_members()..=8 {
            for layout in ParityLayout::ALL {
                if layout.valid_for(level) {
                    cases.push((level, members, layout));
                }
            }
        }
    }
    cases
}

#[test]
fn parity_every_small_geometry() {
    let cases = parity_cases();
    assert_eq!(cases.len(), 7 + 7 * 6 + 5 * 11);
    for (level, members, layout) in cases {
        for chunk in CHUNKS {
            let c = u64::from(chunk);
            for dev in [5 * c + 3, 8 * c, 9 * c] {
                let g = Geometry::parity(level, members, layout, chunk, dev).expect("valid parity");
                let p = g.as_parity().expect("parity geometry").clone();
                assert_eq!(p.dev_sectors, dev / c * c);
                assert_eq!(g.array_sectors(), dev / c * c * p.data_members() as u64);
                let algorithm = layout.md_number();
                // The stripe maps match raid5_compute_sector and md's Q slot walk.
                for stripe in 0..p.stripes() {
                    let map = p.stripe_map(stripe);
                    for dd in 0..p.data_members() {
                        let (pd, qd, disk) = ref_parity(level, algorithm, members, stripe, dd);
                        assert_eq!(
                            (map.p, map.q, map.data[dd]),
                            (pd, qd, disk),
                            "{level} {layout} n={members} stripe {stripe}"
                        );
                        if let Some(qd) = qd {
                            let slots = ref_q_slots(members, pd, qd);
                            assert_eq!(usize::from(map.q_coef[dd]), slots[&disk]);
                        }
                    }
                }
                check_all(&g, |x| {
                    let (stripe, dd) = (
                        (x / c) / p.data_members() as u64,
                        ((x / c) % p.data_members() as u64) as usize,
                    );
                    let (_, _, disk) = ref_parity(level, algorithm, members, stripe, dd);
                    vec![(disk, stripe * c + x % c)]
                });
            }
        }
    }
}

#[test]
fn left_symmetric_q_coefficients_are_the_data_index() {
    for members in 4..=8 {
        let g = Geometry::parity(
            Level::Raid6,
            members,
            ParityLayout::LeftSymmetric,
            8,
            8 * 20,
        )
        .expect("raid6");
        let p = g.as_parity().expect("parity");
        for stripe in 0..p.stripes() {
            let coef: Vec<u8> = p.stripe_map(stripe).q_coef.to_vec();
            assert_eq!(coef, (0..p.data_members() as u8).collect::<Vec<_>>());
        }
    }
}

#[test]
fn parity_reverse_marks_parity_chunks() {
    // Every stripe of RAID6 has exactly one P chunk and one Q chunk, on different members.
    let g =
        Geometry::parity(Level::Raid6, 6, ParityLayout::RightAsymmetric, 8, 8 * 12).expect("raid6");
    let p = g.as_parity().expect("parity");
    for stripe in 0..p.stripes() {
        let at = p.member_sector(stripe, 3);
        let roles: Vec<Reverse> = (0..6).map(|m| g.reverse(m, at)).collect();
        let ps = roles
            .iter()
            .filter(|r| matches!(r, Reverse::P { stripe: s, offset: 3 } if *s == stripe))
            .count();
        let qs = roles
            .iter()
            .filter(|r| matches!(r, Reverse::Q { stripe: s, offset: 3 } if *s == stripe))
            .count();
        assert_eq!((ps, qs), (1, 1));
    }
}

#[test]
fn raid0_range_over_all_members_is_one_run_per_member() {
    for members in 1..=8usize {
        let c = 16u64;
        let sizes = vec![10 * c; members];
        let g = Geometry::raid0(&sizes, 16, Raid0Layout::Original).expect("raid0");
        // Four full rows, starting mid-chunk so the first and last pieces are partial.
        let pieces = g.pieces(c / 2, 4 * members as u64 * c);
        let runs = raidd_layout::coalesce(&pieces, 1024, |_| 0);
        assert_eq!(runs.len(), members, "{members} members");
        for run in &runs {
            // Member 0 gets the partial first and last chunks and three full ones between;
            // a single member's chunks are adjacent in the array too, so they make one seg.
            let expected_segs = match (members, run.member) {
                (1, _) => 1,
                (_, 0) => 5,
                _ => 4,
            };
            assert_eq!(run.segs.len(), expected_segs, "{members} members, {run:?}");
        }
        // With a seg limit of 2 the same range needs more runs, but never more segs.
        let limited = raidd_layout::coalesce(&pieces, 2, |_| 0);
        assert!(limited.iter().all(|r| r.segs.len() <= 2));
        check_coalesce(&pieces, 2, |_| 0);
    }
}

/// `members_written` against sector-by-sector reasoning: every copy of every sector in the
/// range, and for parity levels the parity members of each sector's stripe.
fn members_written_by_sectors(g: &Geometry, sector: u64, count: u64) -> Vec<bool> {
    let mut w = vec![false; g.members()];
    for s in sector..sector + count {
        for l in locs_of(g, s) {
            w[l.member] = true;
        }
        if let Some(p) = g.as_parity() {
            let map = p.stripe_map(p.locate(s).0);
            w[map.p] = true;
            if let Some(q) = map.q {
                w[q] = true;
            }
        }
    }
    w
}

#[test]
fn members_written_are_every_copy_and_parity_touched() {
    let mut geometries = Vec::new();
    for (level, members, layout) in parity_cases() {
        geometries.push(Geometry::parity(level, members, layout, 8, 9 * 8).expect("valid"));
    }
    for layout in raid10_layouts() {
        if let Ok(g) = Geometry::raid10(5, layout, 8, 64) {
            geometries.push(g);
        }
    }
    geometries.push(Geometry::raid0(&unequal_sizes(4, 8), 8, Raid0Layout::Alternate).expect("r0"));
    geometries.push(Geometry::linear(&unequal_sizes(3, 8), 0).expect("linear"));
    geometries.push(Geometry::raid1(3, 64).expect("raid1"));
    for g in &geometries {
        let total = g.array_sectors();
        for (sector, count) in ranges(total, 8)
            .into_iter()
            .chain((0..total).step_by(5).map(|s| (s, (total - s).min(13))))
        {
            assert_eq!(
                g.members_written(sector, count),
                members_written_by_sectors(g, sector, count),
                "{g:?} {sector}+{count}"
            );
        }
    }
}
