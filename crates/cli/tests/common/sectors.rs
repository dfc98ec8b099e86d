//! Self-verifying sectors (raidd_engine::pattern) as files and on members: written by one
//! path, checked by another, so a misplaced, stale or torn block is caught whichever side
//! put it there.
#![allow(clippy::unwrap_used, dead_code)]

use std::path::{Path, PathBuf};

use raidd_engine::pattern;

/// A file of `len` bytes of pattern sectors for `generation` (address 0 onwards).
pub fn pattern_file(dir: &Path, len: u64, generation: u64, seed: u64) -> PathBuf {
    let p = dir.join(format!("pattern-{generation}.bin"));
    let mut buf = vec![0u8; len as usize];
    pattern::fill(&mut buf, 0, generation, seed);
    std::fs::write(&p, &buf).unwrap();
    p
}

/// Asserts every sector of the file carries its address, `generation` and a good checksum.
pub fn verify_file(p: &Path, generation: u64, seed: u64, what: &str) {
    let buf = std::fs::read(p).unwrap();
    let bad = pattern::verify(&buf, 0, seed, |_| generation);
    assert!(
        bad.is_empty(),
        "{what}: {} bad sectors, first {}",
        bad.len(),
        bad[0]
    );
}

/// `raidd pattern write|verify` over the first `len` bytes of an array, offline on its
/// members.
pub fn offline(verb: &str, members: &[PathBuf], len: u64, generation: u64, seed: u64) {
    let (len, seed, g) = (len.to_string(), seed.to_string(), generation.to_string());
    super::raidd(&super::args_with(
        &[
            "pattern",
            verb,
            "--length",
            &len,
            "--seed",
            &seed,
            "--generation",
            &g,
        ],
        members,
    ))
    .ok();
}
