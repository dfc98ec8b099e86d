//! Operation counters, sharded by thread ([`raidd_rt::shard`]): every request bumps a few
//! of them, and one set shared by all threads would be a cache line that every core writes
//! on every I/O. Status sums the shards.

use std::sync::atomic::AtomicU64;

pub(super) use raidd_rt::shard::{bump, sum, Padded, PerThread};

/// One thread's counters, alone on its cache lines.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(super) struct Shard {
    pub(super) reads: AtomicU64,
    pub(super) writes: AtomicU64,
    pub(super) read_bytes: AtomicU64,
    pub(super) written_bytes: AtomicU64,
    pub(super) degraded_reads: AtomicU64,
    pub(super) full_stripe_writes: AtomicU64,
    pub(super) rmw_writes: AtomicU64,
    pub(super) rcw_writes: AtomicU64,
    pub(super) reconstruct_writes: AtomicU64,
    /// Bytes the engine copied between buffers (data it could not hand to a member or a
    /// client in place): reconstructed reads, partial chunks merged with old data, rows
    /// kept by the stripe cache.
    pub(super) copied_bytes: AtomicU64,
}

#[derive(Debug, Default)]
pub(super) struct Counters {
    shards: PerThread<Shard>,
}

impl Counters {
    /// Adds `n` to a counter of this thread's shard.
    pub(super) fn add(&self, field: impl Fn(&Shard) -> &AtomicU64, n: u64) {
        let (shard, owned) = self.shards.mine();
        bump(field(shard), n, owned);
    }

    /// The array's reads and writes from clients so far: what pacing a pass watches.
    pub(super) fn foreground(&self) -> u64 {
        self.sum(|s| &s.reads) + self.sum(|s| &s.writes)
    }

    /// A counter summed over every shard.
    pub(super) fn sum(&self, field: impl Fn(&Shard) -> &AtomicU64) -> u64 {
        sum(&self.shards, field)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use raidd_rt::shard::OWNED;

    #[test]
    fn counts_from_many_threads_add_up() {
        let c = std::sync::Arc::new(Counters::default());
        // More threads than own a shard, so the shared shard is exercised too.
        let threads: Vec<_> = (0..OWNED + 20)
            .map(|_| {
                let c = c.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        c.add(|s| &s.reads, 1);
                        c.add(|s| &s.read_bytes, 512);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let n = (OWNED as u64 + 20) * 1000;
        assert_eq!(c.sum(|s| &s.reads), n);
        assert_eq!(c.sum(|s| &s.read_bytes), n * 512);
        assert_eq!(c.sum(|s| &s.writes), 0);
    }

    #[test]
    fn shards_do_not_share_cache_lines() {
        assert!(std::mem::align_of::<Shard>() >= 128);
        assert!(std::mem::size_of::<Shard>().is_multiple_of(128));
    }
}
