//! The parity benchmark: XOR and P+Q throughput next to single-core memcpy, in one run.
//!
//! Memory bandwidth is shared and noisy, so rows are not measured one after the other: every
//! round runs each row for a short slice (alternating direction between rounds so no row always
//! follows the same neighbour), and each row reports the median over the rounds.

use std::hint::black_box;
use std::time::{Duration, Instant};

use crate::{Impl, Lost, Parity};

/// One measured row.
#[derive(Clone, Debug)]
pub struct BenchRow {
    pub name: String,
    /// Bytes of *source data* processed per second (memcpy: bytes copied per second).
    pub bytes_per_sec: f64,
    /// bytes_per_sec / memcpy bytes_per_sec.
    pub ratio_to_memcpy: f64,
}

/// Rounds per row; odd, so the median is one measurement.
const ROUNDS: usize = 7;

/// What one row does per call.
#[derive(Clone, Copy, Debug)]
enum Op {
    /// Copy every data block into a second buffer (the same bytes XOR and P+Q read).
    Memcpy,
    /// RAID5 P over all data blocks.
    Xor(Parity),
    /// RAID6 P and Q over all data blocks.
    Pq(Parity),
    /// `mul_acc` of one block (the inner step of RAID6 RMW and recovery).
    MulAcc(Parity),
    /// RAID6 recovery of two lost data blocks (counted as all k data blocks of work).
    Recover2(Parity),
}

impl Op {
    fn name(self) -> String {
        match self {
            Op::Memcpy => "memcpy".to_string(),
            Op::Xor(p) => format!("{} xor", p.imp()),
            Op::Pq(p) => format!("{} pq", p.imp()),
            Op::MulAcc(p) => format!("{} mul_acc", p.imp()),
            Op::Recover2(p) => format!("{} recov2", p.imp()),
        }
    }
}

/// The blocks the rows work on, allocated once.
struct Stripe {
    data: Vec<Vec<u8>>,
    copy: Vec<Vec<u8>>,
    p: Vec<u8>,
    q: Vec<u8>,
}

impl Stripe {
    fn new(data_blocks: usize, block_bytes: usize) -> Stripe {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut block = || {
            (0..block_bytes)
                .map(|_| {
                    // xorshift64: cheap non-constant data, so no path sees only zeros.
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed as u8
                })
                .collect::<Vec<u8>>()
        };
        let data: Vec<Vec<u8>> = (0..data_blocks).map(|_| block()).collect();
        let copy = data.clone();
        Stripe {
            data,
            copy,
            p: vec![0; block_bytes],
            q: vec![0; block_bytes],
        }
    }

    /// Runs `op` once; returns the bytes of source data it processed.
    fn run(&mut self, op: Op) -> usize {
        let block_bytes = self.p.len();
        let srcs: Vec<&[u8]> = self.data.iter().map(Vec::as_slice).collect();
        match op {
            Op::Memcpy => {
                for (dst, src) in self.copy.iter_mut().zip(&srcs) {
                    dst.copy_from_slice(black_box(src));
                }
            }
            Op::Xor(parity) => parity.xor_gen(&mut self.p, black_box(&srcs)),
            Op::Pq(parity) => parity.gen_pq(black_box(&srcs), &mut self.p, &mut self.q),
            Op::MulAcc(parity) => {
                parity.mul_acc(0x8e, black_box(srcs[0]), &mut self.p);
                return block_bytes;
            }
            Op::Recover2(parity) => {
                let mut data: Vec<&mut [u8]> =
                    self.copy.iter_mut().map(Vec::as_mut_slice).collect();
                let lost = Lost::DataData(0, data.len() - 1);
                let lost = if data.len() == 1 { Lost::Data(0) } else { lost };
                parity.reconstruct(&mut data, &mut self.p, Some(&mut self.q), lost);
            }
        }
        black_box(&mut self.p);
        srcs.len() * block_bytes
    }

    /// Runs `op` for about `slice`; returns bytes per second.
    fn measure(&mut self, op: Op, slice: Duration) -> f64 {
        self.run(op); // warm caches and page tables
        let start = Instant::now();
        let mut bytes = 0usize;
        loop {
            bytes += self.run(op);
            let elapsed = start.elapsed();
            if elapsed >= slice {
                return bytes as f64 / elapsed.as_secs_f64();
            }
        }
    }
}

/// Runs memcpy, XOR (RAID5 P over `data_blocks` blocks) and P+Q (RAID6 over `data_blocks`)
/// for every available implementation, each for about `seconds`, alternating and taking the
/// median of several rounds. `block_bytes` is the chunk size (e.g. 64 KiB).
///
/// Besides those rows it reports `mul_acc` (one block) and two-data-block recovery (`recov2`)
/// for information. The first row is memcpy.
pub fn run(data_blocks: usize, block_bytes: usize, seconds: f64) -> Vec<BenchRow> {
    assert!(data_blocks >= 1, "bench: needs at least one data block");
    assert!(block_bytes >= 1, "bench: needs a non-empty block");
    assert!(
        seconds > 0.0 && seconds.is_finite(),
        "bench: seconds must be positive"
    );

    let mut ops = vec![Op::Memcpy];
    for parity in Impl::available().into_iter().filter_map(Parity::new) {
        ops.extend([Op::Xor(parity), Op::Pq(parity), Op::MulAcc(parity)]);
        if data_blocks >= 2 {
            ops.push(Op::Recover2(parity));
        }
    }
    let mut stripe = Stripe::new(data_blocks, block_bytes);
    let slice = Duration::from_secs_f64(seconds / ROUNDS as f64);
    let mut samples = vec![Vec::with_capacity(ROUNDS); ops.len()];
    for round in 0..ROUNDS {
        let order: Vec<usize> = if round % 2 == 0 {
            (0..ops.len()).collect()
        } else {
            (0..ops.len()).rev().collect()
        };
        for i in order {
            samples[i].push(stripe.measure(ops[i], slice));
        }
    }

    let medians: Vec<f64> = samples.iter_mut().map(|s| median(s)).collect();
    let memcpy = medians[0];
    ops.iter()
        .zip(medians)
        .map(|(op, bytes_per_sec)| BenchRow {
            name: op.name(),
            bytes_per_sec,
            ratio_to_memcpy: bytes_per_sec / memcpy,
        })
        .collect()
}

fn median(samples: &mut [f64]) -> f64 {
    assert!(!samples.is_empty(), "median of no samples");
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}
