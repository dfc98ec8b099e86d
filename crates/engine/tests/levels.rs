//! Data integrity for every level on memory members: random writes, then the whole array
//! read back and checked sector by sector, healthy and with every survivable member loss
//! (which also proves parity and mirrors were written right), plus writes while degraded.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::sync::Arc;

use common::*;
use raidd_engine::Member;

#[test]
fn every_level_healthy_and_with_every_survivable_loss() {
    for spec in specs() {
        raidd_rt::block_on(async move {
            let mems = mem_members(&spec);
            let members: Vec<Arc<dyn Member>> =
                mems.iter().map(|m| m.clone() as Arc<dyn Member>).collect();
            let a = array_over(&spec, &members, &[]);
            let mut model = Model::new(a.size_bytes() / 512, 0xfeed);
            let mut rng = Rng(spec.name.len() as u64);
            random_writes(&a, &mut model, &mut rng, 60).await;
            verify_all(&a, &model, &spec.name).await;
            for lost in survivable_losses(&spec.geometry) {
                let d = array_over(&spec, &members, &lost);
                verify_all(&d, &model, &format!("{} without {lost:?}", spec.name)).await;
            }
        });
    }
}

#[test]
fn writes_while_degraded_read_back_degraded() {
    for spec in specs() {
        raidd_rt::block_on(async move {
            let mems = mem_members(&spec);
            let members: Vec<Arc<dyn Member>> =
                mems.iter().map(|m| m.clone() as Arc<dyn Member>).collect();
            for lost in survivable_losses(&spec.geometry)
                .into_iter()
                .filter(|l| !l.is_empty())
            {
                // Fresh members for each case: start from a consistent written array.
                let fresh = mem_members(&spec);
                let fresh: Vec<Arc<dyn Member>> =
                    fresh.iter().map(|m| m.clone() as Arc<dyn Member>).collect();
                let healthy = array_over(&spec, &fresh, &[]);
                let mut model = Model::new(healthy.size_bytes() / 512, 0xbeef);
                let mut rng = Rng(lost.len() as u64 * 31 + 7);
                random_writes(&healthy, &mut model, &mut rng, 20).await;
                drop(healthy);
                let d = array_over(&spec, &fresh, &lost);
                random_writes(&d, &mut model, &mut rng, 40).await;
                let what = format!("{} degraded without {lost:?}", spec.name);
                verify_all(&d, &model, &what).await;
                assert!(d.is_degraded());
            }
            drop(members);
        });
    }
}
