//! The partial parity log's place in the superblock: `ppl.offset` and `ppl.size` share the
//! bytes of `bitmap_offset`, and the feature bit says one unit or several.

mod common;

use raidd_md::feature;
use raidd_md::ppl::Area;

#[test]
fn the_superblock_union_round_trips() {
    let mut sb = common::sample_superblock();
    assert_eq!(Area::of(&sb), None);
    Area::MDADM.store(&mut sb);
    assert_eq!(
        sb.feature_map & feature::MULTIPLE_PPLS,
        feature::MULTIPLE_PPLS
    );
    assert_eq!(sb.feature_map & feature::PPL, 0);
    assert_eq!(Area::of(&sb), Some(Area::MDADM));
    // ppl.offset is the low le16 at byte 96, ppl.size the next.
    let bytes = sb.encode();
    assert_eq!(&bytes[96..100], &[8, 0, 0, 8]);
    let small = Area {
        offset: -264,
        size: 264,
    };
    small.store(&mut sb);
    assert_eq!(sb.feature_map & feature::PPL, feature::PPL);
    assert_eq!(sb.feature_map & feature::MULTIPLE_PPLS, 0);
    assert_eq!(Area::of(&sb), Some(small));
}
