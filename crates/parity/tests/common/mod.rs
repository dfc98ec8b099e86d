//! Helpers shared by the integration tests: seeded random blocks, every implementation, and a
//! byte-at-a-time reference written directly from the definitions (independent of the kernels).
#![allow(dead_code)] // each test binary uses a different subset

use raidd_parity::{gf, Impl, Parity};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The lengths every kernel is checked at: around vector widths (16, 32), the unrolled widths
/// (64, 128), the recovery segment size (4096) and a full 64 KiB chunk.
pub const LENGTHS: [usize; 15] = [
    0, 1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 511, 4096, 4097, 65536,
];

pub fn rng(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed)
}

pub fn random_block(rng: &mut ChaCha8Rng, len: usize) -> Vec<u8> {
    let mut block = vec![0u8; len];
    rng.fill(&mut block[..]);
    block
}

pub fn random_blocks(rng: &mut ChaCha8Rng, count: usize, len: usize) -> Vec<Vec<u8>> {
    (0..count).map(|_| random_block(rng, len)).collect()
}

/// Every implementation this CPU runs, each bound explicitly. Prints them so a test log shows
/// which paths were exercised.
pub fn all_impls() -> Vec<Parity> {
    let impls: Vec<Parity> = Impl::available()
        .into_iter()
        .filter_map(Parity::new)
        .collect();
    assert_eq!(
        impls.len(),
        Impl::available().len(),
        "every available impl constructs"
    );
    assert_eq!(
        impls[0].imp(),
        Impl::Scalar,
        "scalar is always available and first"
    );
    let names: Vec<String> = impls.iter().map(|p| p.imp().to_string()).collect();
    eprintln!("implementations under test: {}", names.join(", "));
    impls
}

pub fn slices(blocks: &[Vec<u8>]) -> Vec<&[u8]> {
    blocks.iter().map(Vec::as_slice).collect()
}

pub fn slices_mut(blocks: &mut [Vec<u8>]) -> Vec<&mut [u8]> {
    blocks.iter_mut().map(Vec::as_mut_slice).collect()
}

/// P by definition.
pub fn ref_p(data: &[&[u8]]) -> Vec<u8> {
    let mut p = vec![0u8; data[0].len()];
    for block in data {
        for (pb, db) in p.iter_mut().zip(*block) {
            *pb ^= db;
        }
    }
    p
}

/// Q by definition: sum of g^i * D_i.
pub fn ref_q(data: &[&[u8]]) -> Vec<u8> {
    let mut q = vec![0u8; data[0].len()];
    for (i, block) in data.iter().enumerate() {
        let coef = gf::exp2(i);
        for (qb, db) in q.iter_mut().zip(*block) {
            *qb ^= gf::mul(coef, *db);
        }
    }
    q
}

/// Overwrites a block with garbage, so a reconstruction that forgets to write it fails.
pub fn wipe(block: &mut [u8], rng: &mut ChaCha8Rng) {
    rng.fill(block);
}
