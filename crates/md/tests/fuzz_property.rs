//! The cargo-fuzz property (`fuzz/body.rs`) over ~100k deterministic inputs, so CI checks
//! it without a nightly compiler: random bytes, and valid superblocks/bitmaps mutated in
//! ways that reach past the checksum.

mod common;

#[path = "../fuzz/body.rs"]
mod body;

use common::{fix_checksum, sample_superblock, Rng};
use raidd_md::{BitmapSuper, SbError, Superblock};
use std::collections::BTreeSet;

const RANDOM_INPUTS: usize = 20_000;
const MUTATED_INPUTS: usize = 80_000;

/// Starting points: kernel-written superblocks and bitmaps plus a few built here.
fn seeds() -> Vec<Vec<u8>> {
    let mut seeds = vec![
        include_bytes!("data/a1/m1.sb").to_vec(),
        include_bytes!("data/a2/m0.sb").to_vec(),
        include_bytes!("data/a6/m3.sb").to_vec(),
        include_bytes!("data/a7/m0.sb").to_vec(),
        include_bytes!("data/a7/m2-faulty.sb").to_vec(),
        include_bytes!("data/a7/m0.bitmap").to_vec(),
        include_bytes!("data/a7/m2-faulty.bitmap").to_vec(),
    ];
    let mut sb = sample_superblock();
    for roles in [0, 1, 5, 1920] {
        sb.dev_roles.resize(roles, 0xffff);
        seeds.push(sb.encode());
    }
    seeds
}

/// One random edit: bit flips, byte stores, interesting words, truncation or extension.
fn mutate(rng: &mut Rng, input: &mut Vec<u8>) {
    const INTERESTING: [u64; 9] = [0, 1, 8, 9, 10, 0x7f, 0xffff, 1920, u64::MAX];
    // Mostly within the first sector, where md's fields are; sometimes anywhere.
    let span = if rng.below(4) == 0 {
        input.len()
    } else {
        input.len().min(512)
    };
    let at = rng.below(span.max(1) as u64) as usize;
    match rng.below(6) {
        0 => {
            if let Some(b) = input.get_mut(at) {
                *b ^= 1 << rng.below(8);
            }
        }
        1 => {
            if let Some(b) = input.get_mut(at) {
                *b = rng.next_u64() as u8;
            }
        }
        2 => {
            let value = INTERESTING[rng.below(INTERESTING.len() as u64) as usize];
            let width = [1usize, 2, 4, 8][rng.below(4) as usize];
            let aligned = at / width * width;
            if let Some(dst) = input.get_mut(aligned..aligned + width) {
                dst.copy_from_slice(&value.to_le_bytes()[..width]);
            }
        }
        3 => input.truncate(at),
        4 => {
            let extra = rng.below(64) as usize;
            input.extend(rng.bytes(extra));
        }
        _ => {
            // Interesting fields of the superblock header specifically.
            let field = [8usize, 72, 128, 136, 144, 186, 188, 220][rng.below(8) as usize];
            if let Some(dst) = input.get_mut(field..field + 4) {
                dst.copy_from_slice(&(rng.next_u64() as u32 >> rng.below(32)).to_le_bytes());
            }
        }
    }
}

#[test]
fn fuzz_body_holds_on_random_and_mutated_inputs() {
    let mut rng = Rng::new(0x5241_4944_444d_4421);
    for _ in 0..RANDOM_INPUTS {
        let len = rng.below(1100) as usize;
        body::check(&rng.bytes(len));
    }
    let seeds = seeds();
    let mut outcomes = BTreeSet::new();
    let mut accepted = 0usize;
    for _ in 0..MUTATED_INPUTS {
        let mut input = seeds[rng.below(seeds.len() as u64) as usize].clone();
        for _ in 0..1 + rng.below(4) {
            mutate(&mut rng, &mut input);
        }
        // Mostly re-stamp the checksum, so the semantic checks behind it are exercised.
        let is_superblock = BitmapSuper::parse(&input).is_err();
        if is_superblock && input.len() >= 224 && rng.below(4) != 0 {
            fix_checksum(&mut input);
        }
        if body::check(&input) > 0 {
            accepted += 1;
        }
        outcomes.insert(outcome(&input));
    }
    eprintln!("{accepted} of {MUTATED_INPUTS} mutated inputs parsed; outcomes {outcomes:?}");
    // Both acceptance and rejection must be common, or the inputs are not testing much.
    assert!(accepted > MUTATED_INPUTS / 10, "only {accepted} parsed");
    assert!(
        accepted < MUTATED_INPUTS * 9 / 10,
        "{accepted} parsed: mutations too weak"
    );
    let every_outcome = [
        "ok",
        "BadMagic",
        "BadVersion",
        "BadChecksum",
        "UnknownFeatures",
        "TooManyDevs",
        "WrongSuperOffset",
        "DataTooSmall",
        "NonZeroPad",
        "PplConflict",
        "Truncated",
        "Invalid",
    ];
    for name in every_outcome {
        assert!(
            outcomes.contains(name),
            "no mutated input ended in {name}: {outcomes:?}"
        );
    }
}

/// Which way a v1.2 parse of `input` went, by error variant.
fn outcome(input: &[u8]) -> &'static str {
    match Superblock::parse(input, 8) {
        Ok(_) => "ok",
        Err(SbError::BadMagic { .. }) => "BadMagic",
        Err(SbError::BadVersion(_)) => "BadVersion",
        Err(SbError::BadChecksum { .. }) => "BadChecksum",
        Err(SbError::UnknownFeatures(_)) => "UnknownFeatures",
        Err(SbError::TooManyDevs(_)) => "TooManyDevs",
        Err(SbError::WrongSuperOffset { .. }) => "WrongSuperOffset",
        Err(SbError::DataTooSmall(_)) => "DataTooSmall",
        Err(SbError::NonZeroPad) => "NonZeroPad",
        Err(SbError::PplConflict) => "PplConflict",
        Err(SbError::Truncated { .. }) => "Truncated",
        Err(SbError::Invalid { .. }) => "Invalid",
    }
}
