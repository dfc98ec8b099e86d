//! Caller-contract violations panic with a message instead of doing anything undefined.

use raidd_parity::{Impl, Lost, Parity};

fn each_impl(f: impl Fn(Parity)) {
    for parity in Impl::available().into_iter().filter_map(Parity::new) {
        f(parity);
    }
}

fn panics(f: impl FnOnce() + std::panic::UnwindSafe) -> String {
    let err = std::panic::catch_unwind(f).expect_err("expected a panic");
    err.downcast_ref::<String>()
        .cloned()
        .or_else(|| err.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

#[test]
fn length_mismatches_panic() {
    each_impl(|parity| {
        let msg = panics(move || parity.xor_gen(&mut [0; 64], &[&[0; 64], &[0; 63]]));
        assert!(msg.contains("differ in length"), "{msg}");
        let msg = panics(move || parity.xor_into(&mut [0; 64], &[0; 65]));
        assert!(msg.contains("differ in length"), "{msg}");
        let msg = panics(move || parity.gen_pq(&[&[0; 32]], &mut [0; 32], &mut [0; 31]));
        assert!(msg.contains("differ in length"), "{msg}");
        let msg = panics(move || parity.gen_pq(&[&[0; 32], &[0; 33]], &mut [0; 32], &mut [0; 32]));
        assert!(msg.contains("differ in length"), "{msg}");
        let msg = panics(move || parity.mul_acc(3, &[0; 100], &mut [0; 99]));
        assert!(msg.contains("differ in length"), "{msg}");
        let msg = panics(move || parity.rmw_update(0, &[0; 8], &[0; 9], &mut [0; 8], None));
        assert!(msg.contains("differ in length"), "{msg}");
        let msg = panics(move || {
            let (mut a, mut b) = ([0u8; 8], [0u8; 8]);
            parity.reconstruct(
                &mut [&mut a, &mut b],
                &mut [0; 8],
                Some(&mut [0; 7]),
                Lost::Q,
            )
        });
        assert!(msg.contains("differ in length"), "{msg}");
    });
}

#[test]
fn empty_source_lists_panic() {
    let msg = panics(|| raidd_parity::xor_gen(&mut [0; 4], &[]));
    assert!(msg.contains("at least one source"), "{msg}");
    let msg = panics(|| raidd_parity::gen_pq(&[], &mut [0; 4], &mut [0; 4]));
    assert!(msg.contains("at least one data block"), "{msg}");
}

#[test]
fn impossible_losses_panic() {
    let run = |q: bool, lost: Lost| {
        panics(move || {
            let (mut a, mut b, mut c) = ([1u8; 16], [2u8; 16], [3u8; 16]);
            let mut q_block = [0u8; 16];
            let q = if q { Some(&mut q_block[..]) } else { None };
            raidd_parity::reconstruct(&mut [&mut a, &mut b, &mut c], &mut [0; 16], q, lost);
        })
    };
    for lost in [
        Lost::Q,
        Lost::PQ,
        Lost::DataP(0),
        Lost::DataQ(1),
        Lost::DataData(0, 1),
    ] {
        assert!(run(false, lost).contains("RAID5"), "{lost:?}");
    }
    assert!(run(true, Lost::DataData(1, 1)).contains("same data block twice"));
    assert!(run(true, Lost::Data(3)).contains("data block 3 of a 3-block stripe"));
    assert!(run(false, Lost::Data(7)).contains("data block 7"));
}

#[test]
fn unavailable_impls_do_not_construct() {
    let available = Impl::available();
    for imp in [
        Impl::Scalar,
        Impl::Ssse3,
        Impl::Avx2,
        Impl::Avx512,
        Impl::Gfni,
    ] {
        let built = Parity::new(imp).map(|p| p.imp());
        if available.contains(&imp) {
            assert_eq!(built, Some(imp));
        } else {
            assert!(built.is_none(), "{imp} constructed on a CPU without it");
        }
    }
    #[cfg(target_arch = "x86_64")]
    assert_eq!(
        available.contains(&Impl::Avx512),
        std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512f")
    );
}
