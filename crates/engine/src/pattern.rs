//! Self-verifying data: every 512-byte sector carries its own address, a generation and a
//! checksum, so a reader can tell a correct sector from a misplaced one (wrong address), a
//! stale one (older generation), a corrupt one (bad checksum) or one never written (zeros).
//! Tests, the demo and `raidd verify` use it.

use std::fmt;

pub const SECTOR: usize = 512;
const MAGIC: &[u8; 8] = b"raiddPAT";

/// What is wrong with one sector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Problem {
    /// All zeros: never written (or discarded).
    Zero,
    /// Not a pattern sector, or its checksum does not match: damaged.
    Corrupt,
    /// A valid pattern sector, written for another address.
    Misplaced { found_sector: u64 },
    /// A valid sector for this address, from another generation (lost or stale write).
    Stale { found_generation: u64 },
    /// A valid sector from another pattern stream (seed).
    ForeignSeed { found_seed: u64 },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mismatch {
    pub sector: u64,
    pub problem: Problem,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.sector;
        match self.problem {
            Problem::Zero => write!(f, "sector {s}: all zeros"),
            Problem::Corrupt => write!(f, "sector {s}: corrupt (bad checksum)"),
            Problem::Misplaced { found_sector } => {
                write!(f, "sector {s}: holds the data of sector {found_sector}")
            }
            Problem::Stale { found_generation } => {
                write!(f, "sector {s}: stale, generation {found_generation}")
            }
            Problem::ForeignSeed { found_seed } => {
                write!(f, "sector {s}: from another pattern (seed {found_seed:#x})")
            }
        }
    }
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// FNV-1a over the sector's first 504 bytes.
fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// Writes one sector for `sector` (array sector number), `generation` and `seed`.
pub fn fill_sector(out: &mut [u8], sector: u64, generation: u64, seed: u64) {
    assert_eq!(out.len(), SECTOR);
    out[0..8].copy_from_slice(MAGIC);
    out[8..16].copy_from_slice(&sector.to_le_bytes());
    out[16..24].copy_from_slice(&generation.to_le_bytes());
    out[24..32].copy_from_slice(&seed.to_le_bytes());
    let mut x = mix(sector ^ mix(generation ^ mix(seed)));
    for word in out[32..504].chunks_exact_mut(8) {
        x = mix(x.wrapping_add(0x9e37_79b9_7f4a_7c15));
        word.copy_from_slice(&x.to_le_bytes());
    }
    let c = checksum(&out[..504]);
    out[504..512].copy_from_slice(&c.to_le_bytes());
}

/// Fills `buf` (a multiple of 512 bytes) with sectors starting at `first_sector`.
pub fn fill(buf: &mut [u8], first_sector: u64, generation: u64, seed: u64) {
    assert!(
        buf.len().is_multiple_of(SECTOR),
        "pattern buffers hold whole sectors"
    );
    for (i, s) in buf.chunks_exact_mut(SECTOR).enumerate() {
        fill_sector(s, first_sector + i as u64, generation, seed);
    }
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(v)
}

/// Checks one sector.
pub fn check_sector(s: &[u8], sector: u64, generation: u64, seed: u64) -> Option<Problem> {
    if s.iter().all(|&b| b == 0) {
        return Some(Problem::Zero);
    }
    if &s[0..8] != MAGIC || checksum(&s[..504]) != u64_at(s, 504) {
        return Some(Problem::Corrupt);
    }
    let (found_sector, found_gen, found_seed) = (u64_at(s, 8), u64_at(s, 16), u64_at(s, 24));
    if found_seed != seed {
        Some(Problem::ForeignSeed { found_seed })
    } else if found_sector != sector {
        Some(Problem::Misplaced { found_sector })
    } else if found_gen != generation {
        Some(Problem::Stale {
            found_generation: found_gen,
        })
    } else {
        None
    }
}

impl Problem {
    /// Whether the sector is whole and its own, only of a generation in `gens`.
    pub fn is_generation_in(&self, gens: std::ops::RangeInclusive<u64>) -> bool {
        matches!(self, Problem::Stale { found_generation } if gens.contains(found_generation))
    }
}

/// Checks `buf` against the pattern; `generation(sector)` says which generation each sector
/// should hold. Returns every mismatch (callers print the first few).
pub fn verify(
    buf: &[u8],
    first_sector: u64,
    seed: u64,
    generation: impl Fn(u64) -> u64,
) -> Vec<Mismatch> {
    assert!(
        buf.len().is_multiple_of(SECTOR),
        "pattern buffers hold whole sectors"
    );
    buf.chunks_exact(SECTOR)
        .enumerate()
        .filter_map(|(i, s)| {
            let sector = first_sector + i as u64;
            check_sector(s, sector, generation(sector), seed)
                .map(|problem| Mismatch { sector, problem })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_every_kind_of_wrong_sector() {
        let mut buf = vec![0u8; 4 * SECTOR];
        fill(&mut buf, 100, 7, 42);
        assert!(verify(&buf, 100, 42, |_| 7).is_empty());
        assert_eq!(
            verify(&buf, 101, 42, |_| 7)[0].problem,
            Problem::Misplaced { found_sector: 100 }
        );
        assert_eq!(
            verify(&buf, 100, 42, |_| 8)[0].problem,
            Problem::Stale {
                found_generation: 7
            }
        );
        assert_eq!(
            verify(&buf, 100, 43, |_| 7)[0].problem,
            Problem::ForeignSeed { found_seed: 42 }
        );
        let stale = &verify(&buf, 100, 42, |_| 8)[0].problem;
        assert!(stale.is_generation_in(6..=8) && !stale.is_generation_in(8..=9));
        buf[SECTOR + 200] ^= 1;
        let m = verify(&buf, 100, 42, |_| 7);
        assert!(!m[0].problem.is_generation_in(0..=u64::MAX));
        assert_eq!(
            m,
            vec![Mismatch {
                sector: 101,
                problem: Problem::Corrupt
            }]
        );
        buf[2 * SECTOR..3 * SECTOR].fill(0);
        assert_eq!(verify(&buf, 100, 42, |_| 7)[1].problem, Problem::Zero);
    }

    #[test]
    fn sectors_differ_across_addresses_and_generations() {
        let mut a = vec![0u8; SECTOR];
        let mut b = vec![0u8; SECTOR];
        fill_sector(&mut a, 1, 1, 1);
        fill_sector(&mut b, 1, 2, 1);
        assert_ne!(a[32..504], b[32..504]);
        fill_sector(&mut b, 2, 1, 1);
        assert_ne!(a[32..504], b[32..504]);
    }
}
