//! Constructor validation, redundancy and survival rules.

use raidd_layout::{
    Geometry, LayoutError, Level, ParityLayout, Raid0Layout, Raid10Layout, MAX_MEMBERS,
    MAX_MEMBER_SECTORS,
};

fn r10(name: &str) -> Raid10Layout {
    Raid10Layout::parse(name).expect("layout name")
}

fn missing(members: usize, lost: &[usize]) -> Vec<bool> {
    (0..members).map(|m| lost.contains(&m)).collect()
}

#[test]
fn member_counts_are_checked() {
    assert!(matches!(
        Geometry::linear(&[], 0),
        Err(LayoutError::TooFewMembers {
            level: Level::Linear,
            min: 1,
            got: 0
        })
    ));
    assert!(matches!(
        Geometry::raid0(&[], 8, Raid0Layout::Original),
        Err(LayoutError::TooFewMembers { .. })
    ));
    assert!(matches!(
        Geometry::raid1(0, 10),
        Err(LayoutError::TooFewMembers { .. })
    ));
    assert!(matches!(
        Geometry::raid10(1, r10("n2"), 8, 80),
        Err(LayoutError::TooFewMembers { .. })
    ));
    assert!(matches!(
        Geometry::parity(Level::Raid5, 1, ParityLayout::LeftSymmetric, 8, 80),
        Err(LayoutError::TooFewMembers { min: 2, got: 1, .. })
    ));
    assert!(matches!(
        Geometry::parity(Level::Raid6, 3, ParityLayout::LeftSymmetric, 8, 80),
        Err(LayoutError::TooFewMembers { min: 4, got: 3, .. })
    ));
    let many = vec![80u64; MAX_MEMBERS + 1];
    assert!(matches!(
        Geometry::linear(&many, 0),
        Err(LayoutError::TooManyMembers { .. })
    ));
    assert!(matches!(
        Geometry::raid0(&many, 8, Raid0Layout::Original),
        Err(LayoutError::TooManyMembers { .. })
    ));
    assert!(matches!(
        Geometry::raid1(MAX_MEMBERS + 1, 10),
        Err(LayoutError::TooManyMembers { .. })
    ));
    assert!(Geometry::raid1(MAX_MEMBERS, 10).is_ok());
    assert!(Geometry::parity(
        Level::Raid6,
        MAX_MEMBERS,
        ParityLayout::LeftSymmetric,
        8,
        80
    )
    .is_ok());
}

#[test]
fn chunks_must_be_powers_of_two_of_a_page_or_more() {
    for chunk in [0u32, 1, 4, 7, 12, 24, 100, u32::MAX] {
        assert_eq!(
            Geometry::raid0(&[800], chunk, Raid0Layout::Original),
            Err(LayoutError::BadChunk(chunk))
        );
        assert_eq!(
            Geometry::raid10(2, r10("n2"), chunk, 800),
            Err(LayoutError::BadChunk(chunk))
        );
        for level in [Level::Raid4, Level::Raid5, Level::Raid6] {
            assert_eq!(
                Geometry::parity(level, 4, ParityLayout::ParityLast, chunk, 800),
                Err(LayoutError::BadChunk(chunk))
            );
        }
    }
    for chunk in [8u32, 16, 128, 2048, 1 << 20] {
        assert!(Geometry::raid0(&[1 << 21], chunk, Raid0Layout::Alternate).is_ok());
    }
}

#[test]
fn layouts_must_suit_the_level() {
    for layout in ParityLayout::ALL {
        for level in [Level::Raid4, Level::Raid5, Level::Raid6] {
            let result = Geometry::parity(level, 5, layout, 8, 80);
            if layout.valid_for(level) {
                assert!(result.is_ok(), "{level} {layout}");
            } else {
                assert!(
                    matches!(result, Err(LayoutError::BadLayout { .. })),
                    "{level} {layout}"
                );
            }
        }
        for level in [Level::Linear, Level::Raid0, Level::Raid1, Level::Raid10] {
            assert!(matches!(
                Geometry::parity(level, 5, layout, 8, 80),
                Err(LayoutError::BadLayout { .. })
            ));
        }
    }
    // RAID10: a single copy, field values md refuses, the buggy far-set mode 1.
    for layout in [
        Raid10Layout {
            near: 1,
            far: 1,
            offset: false,
            far_set_mode: 0,
        },
        Raid10Layout {
            near: 0,
            far: 2,
            offset: false,
            far_set_mode: 0,
        },
        Raid10Layout {
            near: 2,
            far: 0,
            offset: false,
            far_set_mode: 0,
        },
        Raid10Layout {
            near: 2,
            far: 1,
            offset: false,
            far_set_mode: 1,
        },
        Raid10Layout {
            near: 2,
            far: 1,
            offset: false,
            far_set_mode: 3,
        },
    ] {
        assert!(
            matches!(
                Geometry::raid10(4, layout, 8, 800),
                Err(LayoutError::BadLayout { .. })
            ),
            "{layout:?}"
        );
    }
    assert_eq!(
        Geometry::raid10(2, r10("n3"), 8, 800),
        Err(LayoutError::Raid10TooFewMembers {
            copies: 3,
            members: 2
        })
    );
}

#[test]
fn raid10_layouts_where_md_collides_are_refused() {
    // Offset copies with near copies that do not divide the members: md puts a wrapped
    // near copy where an offset copy already is.
    let offset_near = Raid10Layout {
        near: 2,
        far: 2,
        offset: true,
        far_set_mode: 0,
    };
    assert!(matches!(
        Geometry::raid10(5, offset_near, 8, 8000),
        Err(LayoutError::BadLayout { .. })
    ));
    assert!(Geometry::raid10(4, offset_near, 8, 8000).is_ok());
    // Far sets that spill into md's enlarged last set.
    let far_sets = Raid10Layout {
        near: 2,
        far: 2,
        offset: false,
        far_set_mode: 2,
    };
    assert!(matches!(
        Geometry::raid10(9, far_sets, 8, 8000),
        Err(LayoutError::BadLayout { .. })
    ));
    assert!(Geometry::raid10(8, far_sets, 8, 8000).is_ok());
    // ... while a far-set layout with one near copy and an odd member count is fine.
    let f2_sets = Raid10Layout {
        near: 1,
        far: 2,
        offset: false,
        far_set_mode: 2,
    };
    assert!(Geometry::raid10(5, f2_sets, 8, 8000).is_ok());
}

#[test]
fn empty_arrays_and_tiny_members_are_refused() {
    assert_eq!(
        Geometry::linear(&[10, 0], 0),
        Err(LayoutError::MemberTooSmall {
            member: 1,
            sectors: 0
        })
    );
    assert_eq!(
        Geometry::linear(&[10, 7], 8),
        Err(LayoutError::MemberTooSmall {
            member: 1,
            sectors: 7
        })
    );
    assert_eq!(
        Geometry::raid0(&[64, 15, 64], 16, Raid0Layout::Original),
        Err(LayoutError::MemberTooSmall {
            member: 1,
            sectors: 15
        })
    );
    assert_eq!(Geometry::raid1(2, 0), Err(LayoutError::Empty));
    assert_eq!(
        Geometry::parity(Level::Raid5, 3, ParityLayout::LeftSymmetric, 16, 15),
        Err(LayoutError::Empty)
    );
    // far 2 needs two chunks per member before the array has one.
    assert_eq!(
        Geometry::raid10(2, r10("f2"), 8, 15),
        Err(LayoutError::Empty)
    );
    assert!(Geometry::raid10(2, r10("f2"), 8, 16).is_ok());
}

#[test]
fn absurd_sizes_are_refused_not_overflowed() {
    let huge = MAX_MEMBER_SECTORS + 1;
    assert!(matches!(
        Geometry::linear(&[8, huge], 0),
        Err(LayoutError::MemberTooLarge { member: 1, .. })
    ));
    assert!(matches!(
        Geometry::raid0(&[u64::MAX], 8, Raid0Layout::Original),
        Err(LayoutError::MemberTooLarge { .. })
    ));
    assert!(matches!(
        Geometry::raid1(2, u64::MAX),
        Err(LayoutError::MemberTooLarge { .. })
    ));
    assert!(matches!(
        Geometry::raid10(4, r10("n2"), 8, u64::MAX),
        Err(LayoutError::MemberTooLarge { .. })
    ));
    assert!(matches!(
        Geometry::parity(Level::Raid6, 8, ParityLayout::LeftSymmetric, 8, u64::MAX),
        Err(LayoutError::MemberTooLarge { .. })
    ));
    // The largest accepted sizes map their last sector without overflow.
    let sizes = vec![MAX_MEMBER_SECTORS; MAX_MEMBERS];
    let biggest = [
        Geometry::linear(&sizes, 0),
        Geometry::raid0(&sizes, 8, Raid0Layout::Original),
        Geometry::raid10(
            MAX_MEMBERS,
            Raid10Layout {
                near: 255,
                far: 1,
                offset: false,
                far_set_mode: 0,
            },
            8,
            MAX_MEMBER_SECTORS,
        ),
        Geometry::parity(
            Level::Raid6,
            MAX_MEMBERS,
            ParityLayout::RightAsymmetric,
            8,
            MAX_MEMBER_SECTORS,
        ),
    ];
    for g in biggest {
        let g = g.expect("largest geometry");
        let last = g.array_sectors() - 1;
        let piece = &g.pieces(last, 1)[0];
        for (copy, loc) in piece.copies.iter().enumerate() {
            assert_eq!(
                g.reverse(loc.member, loc.sector),
                raidd_layout::Reverse::Data {
                    array_sector: last,
                    copy
                }
            );
        }
    }
}

#[test]
fn error_messages_name_the_problem() {
    let err = Geometry::parity(Level::Raid5, 4, ParityLayout::LeftSymmetric6, 8, 80)
        .expect_err("bad layout");
    assert_eq!(
        err.to_string(),
        "layout left-symmetric-6 is not valid for raid5"
    );
    let err = Geometry::raid10(2, r10("n3"), 8, 80).expect_err("too few");
    assert_eq!(
        err.to_string(),
        "raid10 with 3 copies needs at least 3 members, got 2"
    );
    assert_eq!(
        LayoutError::BadChunk(12).to_string(),
        "chunk size 12 sectors is not a power of two of at least 8 sectors (4 KiB)"
    );
}

#[test]
fn redundancy_per_level() {
    let cases: [(Geometry, usize); 8] = [
        (Geometry::linear(&[8, 8], 0).expect("linear"), 0),
        (
            Geometry::raid0(&[8, 8], 8, Raid0Layout::Original).expect("raid0"),
            0,
        ),
        (Geometry::raid1(3, 8).expect("raid1"), 2),
        (Geometry::raid10(4, r10("n2"), 8, 80).expect("raid10"), 1),
        (Geometry::raid10(6, r10("f3"), 8, 80).expect("raid10"), 2),
        (
            Geometry::parity(Level::Raid4, 3, ParityLayout::ParityLast, 8, 80).expect("raid4"),
            1,
        ),
        (
            Geometry::parity(Level::Raid5, 3, ParityLayout::LeftSymmetric, 8, 80).expect("raid5"),
            1,
        ),
        (
            Geometry::parity(Level::Raid6, 5, ParityLayout::LeftSymmetric, 8, 80).expect("raid6"),
            2,
        ),
    ];
    for (g, redundancy) in cases {
        assert_eq!(g.redundancy(), redundancy, "{:?}", g.level());
        assert_eq!(
            g.chunk_sectors() == 0,
            matches!(g.level(), Level::Linear | Level::Raid1)
        );
    }
}

#[test]
fn raid10_survival_depends_on_which_members() {
    let g = Geometry::raid10(4, r10("n2"), 8, 800).expect("n2");
    assert!(g.survives(&missing(4, &[])));
    assert!(g.survives(&missing(4, &[0, 2])));
    assert!(g.survives(&missing(4, &[1, 3])));
    assert!(g.survives(&missing(4, &[0, 3])));
    assert!(!g.survives(&missing(4, &[0, 1])));
    assert!(!g.survives(&missing(4, &[2, 3])));
    // n2 over 3 members: every pair of members shares some chunk.
    let g = Geometry::raid10(3, r10("n2"), 8, 800).expect("n2");
    for lost in [[0, 1], [1, 2], [0, 2]] {
        assert!(!g.survives(&missing(3, &lost)));
    }
    assert!(g.survives(&missing(3, &[1])));
    // f2 over 4: a chunk lives on d and d+1, so only members two apart may go together.
    let g = Geometry::raid10(4, r10("f2"), 8, 800).expect("f2");
    assert!(g.survives(&missing(4, &[0, 2])));
    assert!(!g.survives(&missing(4, &[0, 1])));
    assert!(!g.survives(&missing(4, &[3, 0])));
    // Three copies over six members survive any two losses.
    let g = Geometry::raid10(6, r10("n3"), 8, 800).expect("n3");
    for a in 0..6 {
        for b in 0..6 {
            assert!(g.survives(&missing(6, &[a, b])));
        }
    }
    assert!(!g.survives(&missing(6, &[0, 1, 2])));
}

#[test]
fn survival_by_count_for_other_levels() {
    let raid1 = Geometry::raid1(3, 8).expect("raid1");
    assert!(raid1.survives(&missing(3, &[0, 2])));
    assert!(!raid1.survives(&missing(3, &[0, 1, 2])));
    let raid6 =
        Geometry::parity(Level::Raid6, 5, ParityLayout::LeftSymmetric, 8, 80).expect("raid6");
    assert!(raid6.survives(&missing(5, &[1, 4])));
    assert!(!raid6.survives(&missing(5, &[0, 1, 4])));
    let raid5 =
        Geometry::parity(Level::Raid5, 4, ParityLayout::LeftSymmetric, 8, 80).expect("raid5");
    assert!(raid5.survives(&missing(4, &[3])));
    assert!(!raid5.survives(&missing(4, &[0, 3])));
    let raid0 = Geometry::raid0(&[8, 8], 8, Raid0Layout::Original).expect("raid0");
    assert!(raid0.survives(&[false, false]));
    assert!(!raid0.survives(&[false, true]));
    // A short slice means the rest are present; entries past the members are ignored.
    assert!(raid5.survives(&[true]));
    assert!(raid5.survives(&[false, false, false, false, true, true]));
}

#[test]
fn empty_ranges_and_range_checks() {
    let g = Geometry::raid1(2, 100).expect("raid1");
    assert!(g.pieces(100, 0).is_empty());
    assert!(g.pieces(0, 0).is_empty());
    let outside = std::panic::catch_unwind(|| g.pieces(99, 2));
    assert!(outside.is_err(), "a range past the end is a caller bug");
    let overflow = std::panic::catch_unwind(|| g.pieces(u64::MAX, 2));
    assert!(overflow.is_err());
}
