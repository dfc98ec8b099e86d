//! Request latency per operation, as histograms kept per thread ([`raidd_rt::shard`]): a
//! worker records into its own shard with plain stores, so the data path takes no shared
//! lock and writes no shared cache line; a scrape sums the shards.

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use raidd_admin::status::OpLatency;
use raidd_rt::shard::{bump, sum, PerThread};

/// Upper bounds of the buckets, in microseconds (Prometheus' `le`); one more bucket takes
/// the rest. From a cached read's tens of microseconds to a hung member's seconds.
pub const BOUNDS_US: [u64; 17] = [
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000, 10_000_000,
];
const BUCKETS: usize = BOUNDS_US.len() + 1;

/// The operations timed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Read = 0,
    Write = 1,
    Flush = 2,
}

pub const OPS: [Op; 3] = [Op::Read, Op::Write, Op::Flush];

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::Flush => "flush",
        }
    }
}

#[derive(Debug, Default)]
struct Hist {
    buckets: [AtomicU64; BUCKETS],
    sum_ns: AtomicU64,
    bytes: AtomicU64,
}

/// One thread's histograms, alone on its cache lines.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Shard([Hist; 3]);

/// Latency histograms of one export (or LUN), per operation.
#[derive(Debug, Default)]
pub struct Latency {
    shards: PerThread<Shard>,
}

/// The bucket a time falls in (pure).
pub fn bucket(us: u64) -> usize {
    let b = BOUNDS_US.partition_point(|&b| b < us);
    debug_assert!(
        b < BUCKETS && (b == BUCKETS - 1 || us <= BOUNDS_US[b]),
        "its bound's bucket"
    );
    b
}

impl Latency {
    /// One request of `op` for `bytes` that took `took`.
    pub fn record(&self, op: Op, took: Duration, bytes: u64) {
        let (shard, owned) = self.shards.mine();
        let h = &shard.0[op as usize];
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        bump(&h.buckets[bucket(ns / 1000)], 1, owned);
        bump(&h.sum_ns, ns, owned);
        bump(&h.bytes, bytes, owned);
    }

    /// Every operation's histogram, summed over the threads.
    pub fn snapshot(&self) -> Vec<OpLatency> {
        OPS.iter()
            .map(|&op| {
                let i = op as usize;
                let buckets: Vec<u64> = (0..BUCKETS)
                    .map(|b| sum(&self.shards, |s| &s.0[i].buckets[b]))
                    .collect();
                debug_assert_eq!(
                    buckets.len(),
                    BOUNDS_US.len() + 1,
                    "one past the last bound"
                );
                OpLatency {
                    op: op.name(),
                    count: buckets.iter().sum(),
                    bytes: sum(&self.shards, |s| &s.0[i].bytes),
                    sum_seconds: sum(&self.shards, |s| &s.0[i].sum_ns) as f64 / 1e9,
                    bounds_us: BOUNDS_US.to_vec(),
                    buckets,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_fall_in_the_bucket_of_their_bound() {
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(50), 0);
        assert_eq!(bucket(51), 1);
        assert_eq!(bucket(1_000), 4);
        assert_eq!(bucket(10_000_000), 16);
        assert_eq!(bucket(10_000_001), 17);
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn a_snapshot_counts_what_threads_recorded() {
        let l = std::sync::Arc::new(Latency::default());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let l = l.clone();
                std::thread::spawn(move || {
                    for _ in 0..100 {
                        l.record(Op::Read, Duration::from_micros(70), 4096);
                        l.record(Op::Flush, Duration::from_millis(3), 0);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let s = l.snapshot();
        assert_eq!((s[0].op, s[0].count, s[0].buckets[1]), ("read", 400, 400));
        assert_eq!(s[0].bytes, 400 * 4096);
        assert_eq!((s[1].op, s[1].count), ("write", 0));
        assert_eq!((s[2].count, s[2].buckets[6]), (400, 400));
        assert!(
            (s[2].sum_seconds - 1.2).abs() < 1e-9,
            "{}",
            s[2].sum_seconds
        );
    }
}
