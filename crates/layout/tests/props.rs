//! Property tests over random, larger geometries (chunks up to 1 MiB, members up to 16,
//! sizes up to terabytes) and random ranges.

mod common;

use common::*;
use proptest::prelude::*;
use raidd_layout::{Geometry, Level, ParityLayout, Raid0Layout, Raid10Layout, Reverse};

/// Everything needed to build a geometry and to recompute its mapping independently.
#[derive(Clone, Debug)]
enum Params {
    Linear {
        sizes: Vec<u64>,
        rounding: u32,
    },
    Raid0 {
        sizes: Vec<u64>,
        chunk: u32,
        original: bool,
    },
    Raid1 {
        members: usize,
        dev: u64,
    },
    Raid10 {
        members: usize,
        layout: Raid10Layout,
        chunk: u32,
        dev: u64,
    },
    Parity {
        level: Level,
        members: usize,
        layout: ParityLayout,
        chunk: u32,
        dev: u64,
    },
}

impl Params {
    fn build(&self) -> Option<Geometry> {
        let result = match self {
            Params::Linear { sizes, rounding } => Geometry::linear(sizes, *rounding),
            Params::Raid0 {
                sizes,
                chunk,
                original,
            } => {
                let layout = if *original {
                    Raid0Layout::Original
                } else {
                    Raid0Layout::Alternate
                };
                Geometry::raid0(sizes, *chunk, layout)
            }
            Params::Raid1 { members, dev } => Geometry::raid1(*members, *dev),
            Params::Raid10 {
                members,
                layout,
                chunk,
                dev,
            } => Geometry::raid10(*members, *layout, *chunk, *dev),
            Params::Parity {
                level,
                members,
                layout,
                chunk,
                dev,
            } => Geometry::parity(*level, *members, *layout, *chunk, *dev),
        };
        result.ok()
    }

    /// The reference model's copies of array sector `x`, where one exists.
    fn reference(&self, x: u64) -> Option<Vec<(usize, u64)>> {
        match self {
            Params::Raid0 {
                sizes,
                chunk,
                original,
            } => Some(vec![ref_raid0(sizes, u64::from(*chunk), *original, x)]),
            Params::Raid10 {
                members,
                layout,
                chunk,
                dev,
            } => {
                let r = Raid10Ref::new(
                    *members,
                    usize::from(layout.near),
                    usize::from(layout.far),
                    layout.offset,
                    layout.far_set_mode,
                    u64::from(*chunk),
                    *dev,
                );
                Some(r.phys(x))
            }
            Params::Parity {
                level,
                members,
                layout,
                chunk,
                ..
            } => {
                let c = u64::from(*chunk);
                let k = if *level == Level::Raid6 {
                    members - 2
                } else {
                    members - 1
                } as u64;
                let (stripe, dd) = (x / c / k, (x / c % k) as usize);
                let (_, _, disk) = ref_parity(*level, layout.md_number(), *members, stripe, dd);
                Some(vec![(disk, stripe * c + x % c)])
            }
            _ => None,
        }
    }
}

fn chunk() -> impl Strategy<Value = u32> {
    (3u32..=11).prop_map(|shift| 1 << shift)
}

fn params() -> impl Strategy<Value = Params> {
    let sizes = prop::collection::vec(1u64 << 11..1u64 << 34, 1..=16);
    prop_oneof![
        (sizes.clone(), prop_oneof![Just(0u32), chunk()])
            .prop_map(|(sizes, rounding)| Params::Linear { sizes, rounding }),
        (sizes, chunk(), any::<bool>()).prop_map(|(sizes, chunk, original)| Params::Raid0 {
            sizes,
            chunk,
            original
        }),
        (1usize..=16, 1u64..1 << 40).prop_map(|(members, dev)| Params::Raid1 { members, dev }),
        (
            2usize..=16,
            1u8..=4,
            1u8..=4,
            any::<bool>(),
            prop_oneof![Just(0u8), Just(2u8)],
            chunk(),
            1u64 << 12..1u64 << 40
        )
            .prop_map(|(members, near, far, offset, far_set_mode, chunk, dev)| {
                Params::Raid10 {
                    members,
                    layout: Raid10Layout {
                        near,
                        far,
                        offset,
                        far_set_mode,
                    },
                    chunk,
                    dev,
                }
            }),
        (
            prop::sample::select(vec![Level::Raid4, Level::Raid5, Level::Raid6]),
            4usize..=16,
            prop::sample::select(ParityLayout::ALL.to_vec()),
            chunk(),
            1u64 << 11..1u64 << 40
        )
            .prop_map(|(level, members, layout, chunk, dev)| {
                let layout = if layout.valid_for(level) {
                    layout
                } else {
                    ParityLayout::ParityLast
                };
                Params::Parity {
                    level,
                    members,
                    layout,
                    chunk,
                    dev,
                }
            }),
    ]
}

/// A geometry, a range inside it, and choices for coalescing.
fn case() -> impl Strategy<Value = (Params, Geometry, u64, u64, usize, u64)> {
    params()
        .prop_filter_map("invalid geometry", |p| p.build().map(|g| (p, g)))
        .prop_flat_map(|(p, g)| {
            let array = g.array_sectors();
            let chunk = u64::from(g.chunk_sectors().max(8));
            let max_count = (64 * chunk).min(array);
            (
                Just(p),
                Just(g),
                0..array,
                1..=max_count,
                prop_oneof![1usize..=8, Just(1024usize)],
                any::<u64>(),
            )
        })
        .prop_map(|(p, g, start, count, max_segs, seed)| {
            let start = start.min(g.array_sectors() - count);
            (p, g, start, count, max_segs, seed)
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn pieces_cover_ranges_and_reverse_back((params, g, start, count, max_segs, seed) in case()) {
        let chunk = u64::from(g.chunk_sectors().max(8));
        let pieces = check_pieces(&g, start, count, (chunk / 3).max(1));
        for piece in &pieces {
            for (copy, loc) in piece.copies.iter().enumerate() {
                prop_assert!(loc.sector + piece.sectors <= g.member_used_sectors(loc.member));
                for offset in [0, piece.sectors - 1] {
                    let back = g.reverse(loc.member, loc.sector + offset);
                    prop_assert_eq!(back, Reverse::Data { array_sector: piece.array_sector + offset, copy });
                }
            }
            if let Some(expect) = params.reference(piece.array_sector) {
                let got: Vec<(usize, u64)> = piece.copies.iter().map(|l| (l.member, l.sector)).collect();
                prop_assert_eq!(got, expect);
            }
        }
        let copies = copies_per_sector(&g);
        check_coalesce(&pieces, max_segs, |p| ((p.array_sector ^ seed) % copies as u64) as usize);
    }

    #[test]
    fn member_sectors_map_back_to_their_place((_params, g, start, _count, _max_segs, seed) in case()) {
        let member = (seed % g.members() as u64) as usize;
        let used = g.member_used_sectors(member);
        let sector = start % used;
        match g.reverse(member, sector) {
            Reverse::Data { array_sector, copy } => {
                let locs = locs_of(&g, array_sector);
                prop_assert_eq!((locs[copy].member, locs[copy].sector), (member, sector));
            }
            Reverse::P { stripe, offset } | Reverse::Q { stripe, offset } => {
                let p = g.as_parity().expect("parity level");
                prop_assert_eq!(p.member_sector(stripe, offset), sector);
                let map = p.stripe_map(stripe);
                prop_assert!(map.p == member || map.q == Some(member));
            }
            Reverse::Unused => prop_assert_eq!(g.level(), Level::Raid10),
        }
        prop_assert_eq!(g.reverse(member, used), Reverse::Unused);
    }

    #[test]
    fn stripe_maps_are_consistent((_params, g, start, _count, _max_segs, _seed) in case()) {
        if let Some(p) = g.as_parity() {
            let (stripe, dd, offset) = p.locate(start);
            prop_assert_eq!(p.array_sector(stripe, dd, offset), start);
            let map = p.stripe_map(stripe);
            let mut members: Vec<usize> = map.data.to_vec();
            members.push(map.p);
            members.extend(map.q);
            members.sort_unstable();
            members.dedup();
            prop_assert_eq!(members.len(), p.members);
            let mut coef: Vec<u8> = map.q_coef.to_vec();
            coef.sort_unstable();
            let expect: Vec<u8> = if p.level == Level::Raid6 { (0..p.data_members() as u8).collect() } else { Vec::new() };
            prop_assert_eq!(coef, expect);
            let loc = locs_of(&g, start)[0];
            prop_assert_eq!((loc.member, loc.sector), (map.data[dd], p.member_sector(stripe, offset)));
        }
    }
}
