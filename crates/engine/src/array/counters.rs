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

/// A value alone on its cache lines (two: the adjacent-line prefetcher pairs them), so
/// that writes to it do not slow down readers of its neighbours.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(super) struct Padded<T>(pub(super) T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// One `T` per thread (the first [`OWNED`] threads each own one; later threads share the
/// last), each alone on its cache lines.
#[derive(Debug)]
pub(super) struct PerThread<T> {
    shards: Box<[T]>,
}

impl<T: Default> Default for PerThread<T> {
    fn default() -> PerThread<T> {
        PerThread::from_fn(T::default)
    }
}

impl<T> PerThread<T> {
    /// Every shard made by `f`.
    pub(super) fn from_fn(f: impl FnMut() -> T) -> PerThread<T> {
        PerThread {
            shards: std::iter::repeat_with(f).take(OWNED + 1).collect(),
        }
    }

    /// This thread's shard, and whether the thread owns it (is its only writer).
    pub(super) fn mine(&self) -> (&T, bool) {
        let i = thread_index();
        if i < OWNED {
            (&self.shards[i], true)
        } else {
            (&self.shards[OWNED], false)
        }
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &T> {
        self.shards.iter()
    }
}

/// Adds `n` to a counter of a shard: a plain load and store by its owner (no update can be
/// lost in between), an atomic add on the shared shard.
pub(super) fn bump(c: &AtomicU64, n: u64, owned: bool) {
    if owned {
        c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    } else {
        c.fetch_add(n, Ordering::Relaxed);
    }
}

/// A counter summed over every shard.
pub(super) fn sum<T>(shards: &PerThread<T>, field: impl Fn(&T) -> &AtomicU64) -> u64 {
    shards
        .iter()
        .map(|s| field(s).load(Ordering::Relaxed))
        .sum()
}

#[derive(Debug, Default)]
pub(super) struct Counters {
    shards: PerThread<Shard>,
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
        let (shard, owned) = self.shards.mine();
        bump(field(shard), n, owned);
    }

    /// A counter summed over every shard.
    pub(super) fn sum(&self, field: impl Fn(&Shard) -> &AtomicU64) -> u64 {
        sum(&self.shards, field)
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
        let p: PerThread<Padded<AtomicU64>> = PerThread::default();
        let addrs: Vec<usize> = p.iter().map(|s| s as *const _ as usize).collect();
        assert!(addrs.windows(2).all(|w| w[1] - w[0] >= 128));
        assert_eq!(addrs.len(), OWNED + 1);
    }
}
