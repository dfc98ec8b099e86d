//! Operation counters, sharded by thread: every request bumps a few of them, and one set
//! shared by all threads would be a cache line that every core writes on every I/O. The
//! first [`OWNED`] threads of the process each own a shard and are its only writer, so they
//! add with a plain load and store (no locked instruction); later threads share the last
//! shard and add atomically. Status sums the shards.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Threads that own a shard; the others share one more.
const OWNED: usize = 64;

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

#[derive(Debug)]
pub(super) struct Counters {
    shards: Box<[Shard]>,
}

impl Default for Counters {
    fn default() -> Counters {
        Counters {
            shards: (0..=OWNED).map(|_| Shard::default()).collect(),
        }
    }
}

/// This thread's shard index: threads are numbered in the order they first count.
fn thread_index() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local!(static INDEX: usize = NEXT.fetch_add(1, Ordering::Relaxed));
    INDEX.with(|i| *i)
}

impl Counters {
    /// Adds `n` to a counter of this thread's shard.
    pub(super) fn add(&self, field: impl Fn(&Shard) -> &AtomicU64, n: u64) {
        let i = thread_index();
        if i < OWNED {
            // This thread is the shard's only writer: no update can be lost in between.
            let c = field(&self.shards[i]);
            c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
        } else {
            field(&self.shards[OWNED]).fetch_add(n, Ordering::Relaxed);
        }
    }

    /// A counter summed over every shard.
    pub(super) fn sum(&self, field: impl Fn(&Shard) -> &AtomicU64) -> u64 {
        self.shards
            .iter()
            .map(|s| field(s).load(Ordering::Relaxed))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
