//! Read-modify-write updates equal recomputing parity from scratch, for every index.

mod common;

use common::*;

#[test]
fn rmw_update_equals_recompute_for_every_index() {
    for parity in all_impls() {
        for k in [1, 2, 3, 6, 8] {
            for len in [0, 1, 63, 4096, 4097, 9000] {
                for index in 0..k {
                    let mut r = rng((k * 100_000 + len * 10 + index) as u64);
                    let mut data = random_blocks(&mut r, k, len);
                    let mut p = ref_p(&slices(&data));
                    let mut q = ref_q(&slices(&data));
                    let mut p5 = p.clone();

                    let new = random_block(&mut r, len);
                    parity.rmw_update(index, &data[index], &new, &mut p, Some(&mut q));
                    parity.rmw_update(index, &data[index], &new, &mut p5, None);
                    data[index] = new;

                    let what = format!("{:?} k {k} len {len} index {index}", parity.imp());
                    assert_eq!(p, ref_p(&slices(&data)), "P {what}");
                    assert_eq!(q, ref_q(&slices(&data)), "Q {what}");
                    assert_eq!(p5, p, "RAID5 P {what}");
                }
            }
        }
    }
}

#[test]
fn rmw_update_with_unchanged_data_is_a_no_op() {
    let mut r = rng(3);
    let data = random_blocks(&mut r, 4, 5000);
    let (p, q) = (ref_p(&slices(&data)), ref_q(&slices(&data)));
    let (mut p2, mut q2) = (p.clone(), q.clone());
    raidd_parity::rmw_update(2, &data[2], &data[2], &mut p2, Some(&mut q2));
    assert_eq!((p2, q2), (p, q));
}
