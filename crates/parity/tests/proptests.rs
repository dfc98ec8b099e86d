//! Property tests: random stripe widths, lengths, contents and losses.

mod common;

use common::*;
use proptest::prelude::*;
use raidd_parity::{Impl, Lost, Parity};

fn impl_strategy() -> impl Strategy<Value = Parity> {
    let impls: Vec<Parity> = Impl::available()
        .into_iter()
        .filter_map(Parity::new)
        .collect();
    proptest::sample::select(impls)
}

/// A RAID6 stripe: k data blocks of one random length, with a random loss of one or two blocks.
fn raid6_case() -> impl Strategy<Value = (Vec<Vec<u8>>, Lost)> {
    (1usize..=12, 0usize..=700).prop_flat_map(|(k, len)| {
        let data = proptest::collection::vec(proptest::collection::vec(any::<u8>(), len), k);
        (data, loss_strategy(k))
    })
}

fn loss_strategy(k: usize) -> BoxedStrategy<Lost> {
    let mut options = vec![
        Just(Lost::P).boxed(),
        Just(Lost::Q).boxed(),
        Just(Lost::PQ).boxed(),
        (0..k).prop_map(Lost::Data).boxed(),
        (0..k).prop_map(Lost::DataP).boxed(),
        (0..k).prop_map(Lost::DataQ).boxed(),
    ];
    if k >= 2 {
        let pair =
            (0..k, 0..k - 1).prop_map(|(x, y)| Lost::DataData(x, if y >= x { y + 1 } else { y }));
        options.push(pair.boxed());
    }
    proptest::strategy::Union::new(options).boxed()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn raid6_reconstructs_any_loss(parity in impl_strategy(), (data, lost) in raid6_case()) {
        let (p, q) = (ref_p(&slices(&data)), ref_q(&slices(&data)));
        let (mut d2, mut p2, mut q2) = (data.clone(), p.clone(), q.clone());
        match lost {
            Lost::Data(x) => d2[x].fill(0x5a),
            Lost::P => p2.fill(0x5a),
            Lost::Q => q2.fill(0x5a),
            Lost::PQ => { p2.fill(0x5a); q2.fill(0xa5); }
            Lost::DataP(x) => { d2[x].fill(0x5a); p2.fill(0xa5); }
            Lost::DataQ(x) => { d2[x].fill(0x5a); q2.fill(0xa5); }
            Lost::DataData(x, y) => { d2[x].fill(0x5a); d2[y].fill(0xa5); }
        }
        parity.reconstruct(&mut slices_mut(&mut d2), &mut p2, Some(&mut q2), lost);
        prop_assert_eq!(d2, data);
        prop_assert_eq!(p2, p);
        prop_assert_eq!(q2, q);
    }

    #[test]
    fn every_impl_agrees_with_scalar(
        (data, c) in (1usize..=9, 0usize..=300).prop_flat_map(|(k, len)| (
            proptest::collection::vec(proptest::collection::vec(any::<u8>(), len), k),
            any::<u8>(),
        ))
    ) {
        let srcs = slices(&data);
        let len = srcs[0].len();
        let scalar = Parity::scalar();
        let (mut sp, mut sq, mut sx, mut sm) = (vec![0; len], vec![0; len], vec![0; len], srcs[0].to_vec());
        scalar.gen_pq(&srcs, &mut sp, &mut sq);
        scalar.xor_gen(&mut sx, &srcs);
        scalar.mul_acc(c, srcs[srcs.len() - 1], &mut sm);
        prop_assert_eq!(&sp, &ref_p(&srcs));
        prop_assert_eq!(&sq, &ref_q(&srcs));
        for parity in Impl::available().into_iter().filter_map(Parity::new) {
            let (mut p, mut q, mut x, mut m) = (vec![1; len], vec![2; len], vec![3; len], srcs[0].to_vec());
            parity.gen_pq(&srcs, &mut p, &mut q);
            parity.xor_gen(&mut x, &srcs);
            parity.mul_acc(c, srcs[srcs.len() - 1], &mut m);
            prop_assert_eq!(&p, &sp);
            prop_assert_eq!(&q, &sq);
            prop_assert_eq!(&x, &sx);
            prop_assert_eq!(&m, &sm);
        }
    }

    #[test]
    fn raid5_rebuilds_any_block(
        parity in impl_strategy(),
        (data, lost) in (1usize..=10, 0usize..=600).prop_flat_map(|(k, len)| (
            proptest::collection::vec(proptest::collection::vec(any::<u8>(), len), k),
            0..=k,
        ))
    ) {
        let p = ref_p(&slices(&data));
        let (mut d2, mut p2) = (data.clone(), p.clone());
        let lost = if lost == data.len() { p2.fill(0x77); Lost::P } else { d2[lost].fill(0x77); Lost::Data(lost) };
        parity.reconstruct(&mut slices_mut(&mut d2), &mut p2, None, lost);
        prop_assert_eq!(d2, data);
        prop_assert_eq!(p2, p);
    }
}
