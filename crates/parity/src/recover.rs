//! Reconstruction of lost blocks of a RAID5/6 stripe.
//!
//! Losses that P alone can repair are one XOR pass. The others recompute P and/or Q over the
//! surviving data with the lost blocks counted as zero (P' and Q'), so that `P ^ P'` and
//! `Q ^ Q'` isolate the lost blocks' contributions, and then solve for them:
//! - one data block `x` with P lost: `Q ^ Q' = g^x Dx`, so `Dx = g^-x (Q ^ Q')`;
//! - two data blocks `x != y`: with `Pxy = P ^ P' = Dx ^ Dy` and `Qxy = Q ^ Q' = g^x Dx ^ g^y Dy`,
//!   substituting `Dy = Pxy ^ Dx` gives `(g^x ^ g^y) Dx = g^y Pxy ^ Qxy`, so
//!   `Dx = A Pxy ^ B Qxy` with `B = 1 / (g^x ^ g^y)`, `A = g^y B`, and `Dy = Pxy ^ Dx`.
//!
//! Those paths work segment by segment with stack scratch and a static zero segment standing in
//! for the lost blocks, so reconstruction never allocates more than one small vector of slices.

use std::ops::Range;

use crate::gf::{self, NibbleTables};
use crate::ops::{assert_same_len, segments, SEGMENT_BYTES};
use crate::{Lost, Parity};

/// Stands in for a lost data block when P' and Q' are computed.
static ZEROS: [u8; SEGMENT_BYTES] = [0; SEGMENT_BYTES];

/// Distinct Q coefficients g^i exist only for i < 255, so larger stripes cannot tell two lost
/// blocks apart.
pub const MAX_RAID6_DATA_BLOCKS: usize = gf::ORDER;

impl Parity {
    /// Rebuilds the lost blocks of a RAID5/6 stripe in place. `data` holds the k data blocks
    /// in Q order, `p` and `q` the parity blocks (`q` is `None` for RAID5). The contents of the
    /// lost blocks on input are ignored; on output they hold the reconstructed data. RAID5
    /// accepts only `Lost::Data` and `Lost::P`.
    pub fn reconstruct(
        &self,
        data: &mut [&mut [u8]],
        p: &mut [u8],
        q: Option<&mut [u8]>,
        lost: Lost,
    ) {
        assert!(
            !data.is_empty(),
            "reconstruct: needs at least one data block"
        );
        for block in data.iter() {
            assert_same_len(p.len(), block.len(), "reconstruct: data block");
        }
        if let Some(q) = &q {
            assert_same_len(p.len(), q.len(), "reconstruct: q");
            assert!(
                data.len() <= MAX_RAID6_DATA_BLOCKS,
                "reconstruct: RAID6 with {} data blocks exceeds {MAX_RAID6_DATA_BLOCKS}",
                data.len()
            );
        }
        check_indices(lost, data.len());

        match (lost, q) {
            (Lost::Data(x), _) => self.rebuild_data_from_p(data, p, x),
            (Lost::P, _) => self.xor_gen(p, &shared(data)),
            (Lost::Q, Some(q)) => self.rebuild_q(data, q),
            (Lost::PQ, Some(q)) => self.gen_pq(&shared(data), p, q),
            (Lost::DataQ(x), Some(q)) => {
                self.rebuild_data_from_p(data, p, x);
                self.rebuild_q(data, q);
            }
            (Lost::DataP(x), Some(q)) => self.rebuild_data_and_p(data, p, q, x),
            (Lost::DataData(x, y), Some(q)) => self.rebuild_two_data(data, p, q, x, y),
            (lost, None) => {
                panic!("reconstruct: RAID5 (no Q) can only rebuild Data or P, not {lost:?}")
            }
        }
    }

    /// `Dx = P ^ (XOR of the other data)`.
    fn rebuild_data_from_p(&self, data: &mut [&mut [u8]], p: &[u8], x: usize) {
        let Holes { present, x: dx, .. } = take_lost(data, x, None);
        let mut srcs: Vec<&[u8]> = present.into_iter().flatten().collect();
        srcs.push(p);
        self.xor_gen(dx, &srcs);
    }

    /// Q from the data; P is intact and not written (its segment goes to scratch).
    fn rebuild_q(&self, data: &[&mut [u8]], q: &mut [u8]) {
        let all: Vec<Option<&[u8]>> = data.iter().map(|b| Some(&**b)).collect();
        let mut segs = Vec::with_capacity(all.len());
        let mut p_scratch = [0u8; SEGMENT_BYTES];
        for range in segments(q.len()) {
            fill_segments(&mut segs, &all, range.clone());
            self.gen_pq(&segs, &mut p_scratch[..range.len()], &mut q[range]);
        }
    }

    /// Data block `x` and P lost: `Dx = g^-x (Q ^ Q')`, then `P = P' ^ Dx`.
    fn rebuild_data_and_p(&self, data: &mut [&mut [u8]], p: &mut [u8], q: &[u8], x: usize) {
        let Holes { present, x: dx, .. } = take_lost(data, x, None);
        let undo_coef = NibbleTables::new(gf::inv(gf::exp2(x)));
        let mut segs = Vec::with_capacity(present.len());
        let mut scaled = [0u8; SEGMENT_BYTES];
        for range in segments(p.len()) {
            let (p, q, dx) = (
                &mut p[range.clone()],
                &q[range.clone()],
                &mut dx[range.clone()],
            );
            let scaled = &mut scaled[..range.len()];
            fill_segments(&mut segs, &present, range);
            self.gen_pq(&segs, p, scaled); // p = P', scaled = Q'
            self.xor_acc(scaled, &[q]); // g^x Dx
            dx.fill(0);
            self.mul_acc_tables(&undo_coef, scaled, dx);
            self.xor_acc(p, &[dx]);
        }
    }

    /// Two data blocks lost: see the module documentation for the algebra.
    fn rebuild_two_data(&self, data: &mut [&mut [u8]], p: &[u8], q: &[u8], x: usize, y: usize) {
        let Holes {
            present,
            x: dx,
            y: dy,
        } = take_lost(data, x, Some(y));
        let Some(dy) = dy else {
            unreachable!("take_lost returns y when asked for it")
        };
        let b = gf::inv(gf::exp2(x) ^ gf::exp2(y));
        let a = gf::mul(gf::exp2(y), b);
        let (a, b) = (NibbleTables::new(a), NibbleTables::new(b));

        let mut segs = Vec::with_capacity(present.len());
        let mut solved = [0u8; SEGMENT_BYTES];
        for range in segments(p.len()) {
            let (dx, dy) = (&mut dx[range.clone()], &mut dy[range.clone()]);
            let solved = &mut solved[..range.len()];
            fill_segments(&mut segs, &present, range.clone());
            self.gen_pq(&segs, dx, dy); // dx = P', dy = Q'
            self.xor_acc(dx, &[&p[range.clone()]]); // Pxy
            self.xor_acc(dy, &[&q[range]]); // Qxy
            solved.fill(0);
            self.mul_acc_tables(&a, dx, solved);
            self.mul_acc_tables(&b, dy, solved); // Dx
            self.xor_gen(dy, &[dx, solved]); // Dy = Pxy ^ Dx
            dx.copy_from_slice(solved);
        }
    }
}

/// Asserts that the lost data indices name distinct blocks of the stripe.
fn check_indices(lost: Lost, k: usize) {
    let indices: &[usize] = match &lost {
        Lost::Data(x) | Lost::DataP(x) | Lost::DataQ(x) => std::slice::from_ref(x),
        Lost::DataData(x, y) => {
            assert_ne!(
                x, y,
                "reconstruct: {lost:?} names the same data block twice"
            );
            &[*x, *y]
        }
        Lost::P | Lost::Q | Lost::PQ => &[],
    };
    for &i in indices {
        assert!(
            i < k,
            "reconstruct: {lost:?} names data block {i} of a {k}-block stripe"
        );
    }
}

/// A stripe's data with the lost blocks taken out for writing.
struct Holes<'a> {
    /// Every data block in Q order, `None` where lost.
    present: Vec<Option<&'a [u8]>>,
    x: &'a mut [u8],
    y: Option<&'a mut [u8]>,
}

fn take_lost<'a>(data: &'a mut [&mut [u8]], x: usize, y: Option<usize>) -> Holes<'a> {
    let mut present = Vec::with_capacity(data.len());
    let (mut lost_x, mut lost_y) = (None, None);
    for (i, block) in data.iter_mut().enumerate() {
        if i == x {
            lost_x = Some(&mut **block);
            present.push(None);
        } else if Some(i) == y {
            lost_y = Some(&mut **block);
            present.push(None);
        } else {
            present.push(Some(&**block));
        }
    }
    let Some(x) = lost_x else {
        panic!("take_lost: index {x} out of range")
    };
    assert_eq!(
        lost_y.is_some(),
        y.is_some(),
        "take_lost: index {y:?} out of range"
    );
    Holes {
        present,
        x,
        y: lost_y,
    }
}

fn shared<'a>(data: &'a [&mut [u8]]) -> Vec<&'a [u8]> {
    data.iter().map(|b| &**b).collect()
}

/// `segs[i]` = `blocks[i][range]`, or zeros where block `i` is lost.
fn fill_segments<'a>(segs: &mut Vec<&'a [u8]>, blocks: &[Option<&'a [u8]>], range: Range<usize>) {
    debug_assert!(range.len() <= SEGMENT_BYTES);
    segs.clear();
    segs.extend(blocks.iter().map(|block| match block {
        Some(block) => &block[range.clone()],
        None => &ZEROS[..range.len()],
    }));
}
