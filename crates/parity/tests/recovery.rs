//! Every loss combination: RAID5 with 2..=8 members and RAID6 with 4..=8 members, for every
//! implementation and several lengths. The lost blocks are overwritten with garbage first.

mod common;

use common::*;
use raidd_parity::{Lost, Parity};

const RECOVERY_LENGTHS: [usize; 6] = [1, 33, 511, 4096, 4097, 65536];

fn raid5_losses(k: usize) -> Vec<Lost> {
    (0..k).map(Lost::Data).chain([Lost::P]).collect()
}

/// Every way to lose one or two of the k + 2 blocks.
fn raid6_losses(k: usize) -> Vec<Lost> {
    let mut losses = vec![Lost::P, Lost::Q, Lost::PQ];
    for x in 0..k {
        losses.extend([Lost::Data(x), Lost::DataP(x), Lost::DataQ(x)]);
        for y in 0..k {
            if x != y {
                // Both orders: callers may name the pair either way round.
                losses.push(Lost::DataData(x, y));
            }
        }
    }
    losses
}

/// A consistent stripe: data, P and Q.
struct Stripe {
    data: Vec<Vec<u8>>,
    p: Vec<u8>,
    q: Vec<u8>,
}

impl Stripe {
    fn random(k: usize, len: usize, seed: u64) -> Stripe {
        let data = random_blocks(&mut rng(seed), k, len);
        let (p, q) = (ref_p(&slices(&data)), ref_q(&slices(&data)));
        Stripe { data, p, q }
    }

    /// Applies `lost` to a copy (lost blocks become garbage), reconstructs it and compares.
    fn check(&self, parity: Parity, lost: Lost, raid6: bool) {
        let mut r = rng(self.data.len() as u64);
        let (mut d2, mut p2, mut q2) = (self.data.clone(), self.p.clone(), self.q.clone());
        let lost_data: Vec<usize> = match lost {
            Lost::Data(x) | Lost::DataP(x) | Lost::DataQ(x) => vec![x],
            Lost::DataData(x, y) => vec![x, y],
            Lost::P | Lost::Q | Lost::PQ => vec![],
        };
        for x in lost_data {
            wipe(&mut d2[x], &mut r);
        }
        if matches!(lost, Lost::P | Lost::PQ | Lost::DataP(_)) {
            wipe(&mut p2, &mut r);
        }
        if matches!(lost, Lost::Q | Lost::PQ | Lost::DataQ(_)) {
            wipe(&mut q2, &mut r);
        }

        let q_arg = if raid6 { Some(&mut q2[..]) } else { None };
        parity.reconstruct(&mut slices_mut(&mut d2), &mut p2, q_arg, lost);
        let what = format!(
            "{:?} k {} len {} {lost:?} raid6 {raid6}",
            parity.imp(),
            self.data.len(),
            self.p.len()
        );
        assert_eq!(d2, self.data, "data {what}");
        assert_eq!(p2, self.p, "P {what}");
        if raid6 {
            assert_eq!(q2, self.q, "Q {what}");
        }
    }
}

#[test]
fn raid5_every_single_loss() {
    let impls = all_impls();
    for members in 2..=8 {
        let k = members - 1;
        for len in RECOVERY_LENGTHS {
            let stripe = Stripe::random(k, len, (members * 1000 + len) as u64);
            for parity in &impls {
                for lost in raid5_losses(k) {
                    stripe.check(*parity, lost, false);
                }
            }
        }
    }
}

#[test]
fn raid6_every_single_and_double_loss() {
    let impls = all_impls();
    for members in 4..=8 {
        let k = members - 2;
        for len in RECOVERY_LENGTHS {
            let stripe = Stripe::random(k, len, (members * 1000 + len) as u64);
            for parity in &impls {
                for lost in raid6_losses(k) {
                    stripe.check(*parity, lost, true);
                }
            }
        }
    }
}

#[test]
fn raid6_large_stripe_far_indices() {
    // High Q indices exercise large powers of g (k up to md's practical limits).
    let stripe = Stripe::random(40, 4100, 77);
    for parity in all_impls() {
        for lost in [
            Lost::DataData(0, 39),
            Lost::DataData(38, 17),
            Lost::DataP(39),
            Lost::DataQ(21),
        ] {
            stripe.check(parity, lost, true);
        }
    }
}
