//! Every implementation against the byte-at-a-time reference and the scalar implementation, at
//! lengths around every vector and unroll boundary, and at unaligned start addresses.

mod common;

use common::*;
use raidd_parity::{gf, Parity};

/// Start offsets inside a larger buffer: aligned, and two misalignments for unaligned loads.
const OFFSETS: [usize; 3] = [0, 1, 7];

/// `count` random blocks of `len` bytes, each starting `offset` bytes into its allocation.
struct Blocks {
    buffers: Vec<Vec<u8>>,
    offset: usize,
    len: usize,
}

impl Blocks {
    fn random(seed: u64, count: usize, len: usize, offset: usize) -> Blocks {
        let buffers = random_blocks(&mut rng(seed), count, len + offset);
        Blocks {
            buffers,
            offset,
            len,
        }
    }
    fn get(&self) -> Vec<&[u8]> {
        self.buffers
            .iter()
            .map(|b| &b[self.offset..self.offset + self.len])
            .collect()
    }
}

/// An output block at `offset`, pre-filled with garbage so that unwritten bytes show.
fn garbage_out(seed: u64, len: usize, offset: usize) -> Vec<u8> {
    random_block(&mut rng(seed ^ 0xdead), len + offset)
}

#[test]
fn xor_gen_matches_reference() {
    for parity in all_impls() {
        for len in LENGTHS {
            for offset in OFFSETS {
                for count in [1, 2, 3, 5, 8] {
                    let seed = (len * 31 + offset * 7 + count) as u64;
                    let blocks = Blocks::random(seed, count, len, offset);
                    let srcs = blocks.get();
                    let mut dst = garbage_out(seed, len, offset);
                    parity.xor_gen(&mut dst[offset..], &srcs);
                    let mut scalar = garbage_out(seed, len, offset);
                    Parity::scalar().xor_gen(&mut scalar[offset..], &srcs);
                    assert_eq!(
                        dst[offset..],
                        ref_p(&srcs)[..],
                        "{parity:?} len {len} off {offset} n {count}"
                    );
                    assert_eq!(dst, scalar, "{parity:?} vs scalar, len {len}");
                }
            }
        }
    }
}

#[test]
fn xor_into_matches_reference() {
    for parity in all_impls() {
        for len in LENGTHS {
            for offset in OFFSETS {
                let seed = (len * 13 + offset) as u64;
                let blocks = Blocks::random(seed, 2, len, offset);
                let srcs = blocks.get();
                let mut dst = blocks.buffers[0].clone();
                parity.xor_into(&mut dst[offset..], srcs[1]);
                assert_eq!(
                    dst[offset..],
                    ref_p(&srcs)[..],
                    "{parity:?} len {len} off {offset}"
                );
                assert_eq!(
                    dst[..offset],
                    blocks.buffers[0][..offset],
                    "bytes before dst untouched"
                );
            }
        }
    }
}

#[test]
fn gen_pq_matches_reference() {
    for parity in all_impls() {
        for len in LENGTHS {
            for offset in OFFSETS {
                for count in [1, 2, 3, 4, 8, 13] {
                    let seed = (len * 17 + offset * 5 + count) as u64;
                    let blocks = Blocks::random(seed, count, len, offset);
                    let data = blocks.get();
                    let mut p = garbage_out(seed, len, offset);
                    let mut q = garbage_out(seed + 1, len, offset);
                    parity.gen_pq(&data, &mut p[offset..], &mut q[offset..]);
                    let what = format!("{parity:?} len {len} off {offset} n {count}");
                    assert_eq!(p[offset..], ref_p(&data)[..], "P {what}");
                    assert_eq!(q[offset..], ref_q(&data)[..], "Q {what}");

                    let (mut sp, mut sq) = (vec![0; len], vec![0; len]);
                    Parity::scalar().gen_pq(&data, &mut sp, &mut sq);
                    assert_eq!(
                        (&p[offset..], &q[offset..]),
                        (&sp[..], &sq[..]),
                        "vs scalar {what}"
                    );
                }
            }
        }
    }
}

#[test]
fn mul_acc_matches_reference() {
    for parity in all_impls() {
        for len in LENGTHS {
            for offset in OFFSETS {
                for c in [0u8, 1, 2, 3, 0x1d, 0x8e, 0xa5, 0xff] {
                    let seed = (len * 19 + offset * 3) as u64 + u64::from(c);
                    let blocks = Blocks::random(seed, 2, len, offset);
                    let (src, dst0) = (blocks.get()[0], blocks.get()[1]);
                    let mut dst = dst0.to_vec();
                    parity.mul_acc(c, src, &mut dst);
                    let expected: Vec<u8> = dst0
                        .iter()
                        .zip(src)
                        .map(|(d, s)| d ^ gf::mul(c, *s))
                        .collect();
                    assert_eq!(dst, expected, "{parity:?} c {c:#x} len {len} off {offset}");

                    let mut scalar = dst0.to_vec();
                    Parity::scalar().mul_acc(c, src, &mut scalar);
                    assert_eq!(dst, scalar, "{parity:?} vs scalar, c {c:#x} len {len}");
                }
            }
        }
    }
}

#[test]
fn free_functions_use_an_available_implementation() {
    let best = Parity::best();
    assert!(raidd_parity::Impl::available().contains(&best.imp()));
    let data = random_blocks(&mut rng(5), 3, 1000);
    let srcs = slices(&data);
    let (mut p, mut q) = (vec![0; 1000], vec![0; 1000]);
    raidd_parity::gen_pq(&srcs, &mut p, &mut q);
    assert_eq!((p.clone(), q), (ref_p(&srcs), ref_q(&srcs)));
    let mut x = vec![0; 1000];
    raidd_parity::xor_gen(&mut x, &srcs);
    assert_eq!(x, p);
    raidd_parity::xor_into(&mut x, &p);
    assert!(x.iter().all(|&b| b == 0));
    raidd_parity::mul_acc(2, srcs[0], &mut x);
    assert_eq!(
        x,
        srcs[0].iter().map(|&b| gf::mul(2, b)).collect::<Vec<_>>()
    );
}
