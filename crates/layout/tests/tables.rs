//! Hand-derived layout tables (from md(4) and the md sources' descriptions), one per layout
//! family. Rows are member rows (stripes for parity levels), columns are members; `Dn` is
//! array chunk n, `P`/`Q` parity, `n` (RAID10) the chunk whose copy sits there.

use raidd_layout::{Geometry, Level, ParityLayout, Raid0Layout, Raid10Layout, Reverse};

const CHUNK: u32 = 8;
const C: u64 = CHUNK as u64;

/// Renders `rows` member rows of `g` as text, one cell per member, from `reverse`.
fn table(g: &Geometry, rows: u64, data_prefix: &str) -> Vec<String> {
    (0..rows)
        .map(|row| {
            let cells: Vec<String> = (0..g.members())
                .map(|member| match g.reverse(member, row * C) {
                    Reverse::Data { array_sector, .. } => {
                        format!("{data_prefix}{}", array_sector / C)
                    }
                    Reverse::P { .. } => "P".to_string(),
                    Reverse::Q { .. } => "Q".to_string(),
                    Reverse::Unused => "-".to_string(),
                })
                .collect();
            cells.join(" ")
        })
        .collect()
}

fn parity(level: Level, members: usize, layout: ParityLayout, stripes: u64) -> Geometry {
    Geometry::parity(level, members, layout, CHUNK, stripes * C).expect("valid parity geometry")
}

#[test]
fn raid5_left_symmetric_n4() {
    let g = parity(Level::Raid5, 4, ParityLayout::LeftSymmetric, 4);
    assert_eq!(
        table(&g, 4, "D"),
        ["D0 D1 D2 P", "D4 D5 P D3", "D8 P D6 D7", "P D9 D10 D11"]
    );
}

#[test]
fn raid5_left_asymmetric_n4() {
    let g = parity(Level::Raid5, 4, ParityLayout::LeftAsymmetric, 4);
    assert_eq!(
        table(&g, 4, "D"),
        ["D0 D1 D2 P", "D3 D4 P D5", "D6 P D7 D8", "P D9 D10 D11"]
    );
}

#[test]
fn raid5_right_asymmetric_n4() {
    let g = parity(Level::Raid5, 4, ParityLayout::RightAsymmetric, 4);
    assert_eq!(
        table(&g, 4, "D"),
        ["P D0 D1 D2", "D3 P D4 D5", "D6 D7 P D8", "D9 D10 D11 P"]
    );
}

#[test]
fn raid5_right_symmetric_n4() {
    let g = parity(Level::Raid5, 4, ParityLayout::RightSymmetric, 4);
    assert_eq!(
        table(&g, 4, "D"),
        ["P D0 D1 D2", "D5 P D3 D4", "D7 D8 P D6", "D9 D10 D11 P"]
    );
}

#[test]
fn raid5_parity_first_and_last_n4() {
    let first = parity(Level::Raid5, 4, ParityLayout::ParityFirst, 2);
    assert_eq!(table(&first, 2, "D"), ["P D0 D1 D2", "P D3 D4 D5"]);
    let last = parity(Level::Raid5, 4, ParityLayout::ParityLast, 2);
    assert_eq!(table(&last, 2, "D"), ["D0 D1 D2 P", "D3 D4 D5 P"]);
}

#[test]
fn raid5_left_symmetric_n3_wraps_every_three_stripes() {
    let g = parity(Level::Raid5, 3, ParityLayout::LeftSymmetric, 4);
    assert_eq!(
        table(&g, 4, "D"),
        ["D0 D1 P", "D3 P D2", "P D4 D5", "D6 D7 P"]
    );
}

#[test]
fn raid4_n3() {
    let g = parity(Level::Raid4, 3, ParityLayout::ParityLast, 3);
    assert_eq!(table(&g, 3, "D"), ["D0 D1 P", "D2 D3 P", "D4 D5 P"]);
}

#[test]
fn raid6_left_symmetric_n5() {
    let g = parity(Level::Raid6, 5, ParityLayout::LeftSymmetric, 5);
    assert_eq!(
        table(&g, 5, "D"),
        [
            "Q D0 D1 D2 P",
            "D3 D4 D5 P Q",
            "D7 D8 P Q D6",
            "D11 P Q D9 D10",
            "P Q D12 D13 D14"
        ]
    );
}

#[test]
fn raid6_left_asymmetric_n5_with_q_coefficients() {
    let g = parity(Level::Raid6, 5, ParityLayout::LeftAsymmetric, 5);
    assert_eq!(
        table(&g, 5, "D"),
        [
            "Q D0 D1 D2 P",
            "D3 D4 D5 P Q",
            "D6 D7 P Q D8",
            "D9 P Q D10 D11",
            "P Q D12 D13 D14"
        ]
    );
    // md numbers Q's data slots walking the members from just after Q: stripe 2 walks
    // members 4, 0, 1 (holding D8, D6, D7); stripe 3 walks 3, 4, 0 (D10, D11, D9).
    let p = g.as_parity().expect("parity");
    let coef = |stripe: u64| p.stripe_map(stripe).q_coef.to_vec();
    assert_eq!(coef(0), [0, 1, 2]);
    assert_eq!(coef(1), [0, 1, 2]);
    assert_eq!(coef(2), [1, 2, 0]);
    assert_eq!(coef(3), [2, 0, 1]);
    assert_eq!(coef(4), [0, 1, 2]);
}

#[test]
fn raid6_left_symmetric_6_n5() {
    let g = parity(Level::Raid6, 5, ParityLayout::LeftSymmetric6, 4);
    assert_eq!(
        table(&g, 4, "D"),
        [
            "D0 D1 D2 P Q",
            "D4 D5 P D3 Q",
            "D8 P D6 D7 Q",
            "P D9 D10 D11 Q"
        ]
    );
    // Q is last, so md's walk starts at member 0: slots follow member order.
    let p = g.as_parity().expect("parity");
    assert_eq!(p.stripe_map(1).q_coef.to_vec(), [2, 0, 1]);
}

#[test]
fn raid6_other_layouts_n5() {
    let first = parity(Level::Raid6, 5, ParityLayout::ParityFirst, 1);
    assert_eq!(table(&first, 1, "D"), ["P Q D0 D1 D2"]);
    let last = parity(Level::Raid6, 5, ParityLayout::ParityLast, 1);
    assert_eq!(table(&last, 1, "D"), ["D0 D1 D2 P Q"]);
    let first6 = parity(Level::Raid6, 5, ParityLayout::ParityFirst6, 1);
    assert_eq!(table(&first6, 1, "D"), ["P D0 D1 D2 Q"]);
    let ra6 = parity(Level::Raid6, 5, ParityLayout::RightAsymmetric6, 2);
    assert_eq!(table(&ra6, 2, "D"), ["P D0 D1 D2 Q", "D3 P D4 D5 Q"]);
    let rs = parity(Level::Raid6, 5, ParityLayout::RightSymmetric, 2);
    assert_eq!(table(&rs, 2, "D"), ["P Q D0 D1 D2", "D5 P Q D3 D4"]);
}

fn raid10(members: usize, name: &str, dev_chunks: u64) -> Geometry {
    let layout = Raid10Layout::parse(name).expect("layout name");
    Geometry::raid10(members, layout, CHUNK, dev_chunks * C).expect("valid raid10")
}

#[test]
fn raid10_near2_four_members() {
    let g = raid10(4, "n2", 2);
    assert_eq!(table(&g, 2, ""), ["0 0 1 1", "2 2 3 3"]);
}

#[test]
fn raid10_near2_three_members() {
    // md(4): with an odd number of devices the copies of a chunk wrap to the next row.
    let g = raid10(3, "n2", 4);
    assert_eq!(table(&g, 4, ""), ["0 0 1", "1 2 2", "3 3 4", "4 5 5"]);
}

#[test]
fn raid10_far2_four_members() {
    // The second copies form a second RAID0 further down, moved one member along.
    let g = raid10(4, "f2", 4);
    assert_eq!(
        table(&g, 4, ""),
        ["0 1 2 3", "4 5 6 7", "3 0 1 2", "7 4 5 6"]
    );
}

#[test]
fn raid10_offset2_three_members() {
    // Every row is followed by itself moved one member along.
    let g = raid10(3, "o2", 4);
    assert_eq!(table(&g, 4, ""), ["0 1 2", "2 0 1", "3 4 5", "5 3 4"]);
}

#[test]
fn raid10_copy_order_is_mds() {
    // n2 over 3: chunk 1 is first on member 2 (row 0), then on member 0 (row 1).
    let g = raid10(3, "n2", 4);
    let pieces = g.pieces(C, 1);
    let locs: Vec<(usize, u64)> = pieces[0]
        .copies
        .iter()
        .map(|l| (l.member, l.sector))
        .collect();
    assert_eq!(locs, [(2, 0), (0, C)]);
    assert_eq!(
        g.reverse(0, C),
        Reverse::Data {
            array_sector: C,
            copy: 1
        }
    );
    // f2 over 4: chunk 0 on member 0 row 0, then member 1 row 2.
    let g = raid10(4, "f2", 4);
    let locs: Vec<(usize, u64)> = g.pieces(0, 1)[0]
        .copies
        .iter()
        .map(|l| (l.member, l.sector))
        .collect();
    assert_eq!(locs, [(0, 0), (1, 2 * C)]);
}

/// RAID0 member contents: for each member, the array chunks it holds in member order.
fn raid0_columns(sizes_chunks: &[u64], layout: Raid0Layout) -> Vec<Vec<u64>> {
    let sizes: Vec<u64> = sizes_chunks.iter().map(|s| s * C).collect();
    let g = Geometry::raid0(&sizes, CHUNK, layout).expect("valid raid0");
    (0..sizes.len())
        .map(|member| {
            (0..sizes_chunks[member])
                .map(|row| match g.reverse(member, row * C) {
                    Reverse::Data {
                        array_sector,
                        copy: 0,
                    } => array_sector / C,
                    other => panic!("{other:?}"),
                })
                .collect()
        })
        .collect()
}

#[test]
fn raid0_two_zones_both_layouts() {
    // Zone 0: chunks 0-2 over all three members. Zone 1 (members 1 and 2): chunks 3-6; the
    // original layout picks the member from the array chunk number (3 is odd: member 2),
    // the alternate layout from the zone chunk number (0: member 1).
    assert_eq!(
        raid0_columns(&[1, 3, 3], Raid0Layout::Original),
        [vec![0], vec![1, 4, 6], vec![2, 3, 5]]
    );
    assert_eq!(
        raid0_columns(&[1, 3, 3], Raid0Layout::Alternate),
        [vec![0], vec![1, 3, 5], vec![2, 4, 6]]
    );
}

#[test]
fn raid0_three_zones_both_layouts() {
    // Zone 2 has member 2 alone: chunks 7 and 8 in both layouts.
    assert_eq!(
        raid0_columns(&[1, 3, 5], Raid0Layout::Original),
        [vec![0], vec![1, 4, 6], vec![2, 3, 5, 7, 8]]
    );
    assert_eq!(
        raid0_columns(&[1, 3, 5], Raid0Layout::Alternate),
        [vec![0], vec![1, 3, 5], vec![2, 4, 6, 7, 8]]
    );
}

#[test]
fn raid0_equal_members_layouts_agree() {
    assert_eq!(
        raid0_columns(&[2, 2, 2], Raid0Layout::Original),
        [vec![0, 3], vec![1, 4], vec![2, 5]]
    );
    assert_eq!(
        raid0_columns(&[2, 2, 2], Raid0Layout::Alternate),
        [vec![0, 3], vec![1, 4], vec![2, 5]]
    );
}

#[test]
fn linear_concatenates_in_role_order() {
    let g = Geometry::linear(&[10, 5, 7], 0).expect("linear");
    assert_eq!(g.array_sectors(), 22);
    assert_eq!(
        g.reverse(1, 0),
        Reverse::Data {
            array_sector: 10,
            copy: 0
        }
    );
    assert_eq!(
        g.reverse(2, 6),
        Reverse::Data {
            array_sector: 21,
            copy: 0
        }
    );
    let pieces = g.pieces(8, 10);
    let spans: Vec<(u64, u64, usize, u64)> = pieces
        .iter()
        .map(|p| {
            (
                p.array_sector,
                p.sectors,
                p.copies[0].member,
                p.copies[0].sector,
            )
        })
        .collect();
    assert_eq!(spans, [(8, 2, 0, 8), (10, 5, 1, 0), (15, 3, 2, 0)]);
    // Rounding 4 trims each member down to a multiple of 4.
    let rounded = Geometry::linear(&[10, 5, 7], 4).expect("linear");
    assert_eq!(rounded.array_sectors(), 8 + 4 + 4);
    assert_eq!(rounded.reverse(0, 8), Reverse::Unused);
}

#[test]
fn raid1_every_member_is_a_copy() {
    let g = Geometry::raid1(3, 100).expect("raid1");
    let pieces = g.pieces(10, 90);
    assert_eq!(pieces.len(), 1);
    let members: Vec<usize> = pieces[0].copies.iter().map(|l| l.member).collect();
    assert_eq!(members, [0, 1, 2]);
    assert!(pieces[0].copies.iter().all(|l| l.sector == 10));
    assert_eq!(
        g.reverse(2, 99),
        Reverse::Data {
            array_sector: 99,
            copy: 2
        }
    );
    assert_eq!(g.reverse(2, 100), Reverse::Unused);
}
