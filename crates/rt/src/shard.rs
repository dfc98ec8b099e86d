//! One value per thread: counters that every request bumps would be a cache line every
//! core writes on every I/O if all threads shared it. The first [`OWNED`] threads of the
//! process each own a shard and are its only writer, so they add with a plain load and
//! store (no locked instruction); later threads share the last shard and add atomically.
//! Readers sum the shards.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Threads that own a shard; the others share one more.
pub const OWNED: usize = 64;

/// A value alone on its cache lines (two: the adjacent-line prefetcher pairs them), so
/// that writes to it do not slow down readers of its neighbours.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct Padded<T>(pub T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// One `T` per thread (the first [`OWNED`] threads each own one; later threads share the
/// last), each alone on its cache lines.
#[derive(Debug)]
pub struct PerThread<T> {
    shards: Box<[T]>,
}

impl<T: Default> Default for PerThread<T> {
    fn default() -> PerThread<T> {
        PerThread::from_fn(T::default)
    }
}

impl<T> PerThread<T> {
    /// Every shard made by `f`.
    pub fn from_fn(f: impl FnMut() -> T) -> PerThread<T> {
        let shards: Box<[T]> = std::iter::repeat_with(f).take(OWNED + 1).collect();
        debug_assert_eq!(
            shards.len(),
            OWNED + 1,
            "a shard per owning thread and one shared"
        );
        PerThread { shards }
    }

    /// This thread's shard, and whether the thread owns it (is its only writer).
    pub fn mine(&self) -> (&T, bool) {
        let i = thread_index();
        debug_assert_eq!(self.shards.len(), OWNED + 1);
        if i < OWNED {
            (&self.shards[i], true)
        } else {
            (&self.shards[OWNED], false)
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.shards.iter()
    }
}

/// Adds `n` to a counter of a shard: a plain load and store by its owner (no update can be
/// lost in between), an atomic add on the shared shard.
pub fn bump(c: &AtomicU64, n: u64, owned: bool) {
    if owned {
        c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    } else {
        c.fetch_add(n, Ordering::Relaxed);
    }
}

/// A counter summed over every shard.
pub fn sum<T>(shards: &PerThread<T>, field: impl Fn(&T) -> &AtomicU64) -> u64 {
    shards
        .iter()
        .map(|s| field(s).load(Ordering::Relaxed))
        .sum()
}

/// This thread's shard index: threads are numbered in the order they first count.
fn thread_index() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local!(static INDEX: usize = NEXT.fetch_add(1, Ordering::Relaxed));
    INDEX.with(|i| *i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_do_not_share_cache_lines() {
        let p: PerThread<Padded<AtomicU64>> = PerThread::default();
        let addrs: Vec<usize> = p.iter().map(|s| s as *const _ as usize).collect();
        assert!(addrs.windows(2).all(|w| w[1] - w[0] >= 128));
        assert_eq!(addrs.len(), OWNED + 1);
    }

    #[test]
    fn counts_from_more_threads_than_own_a_shard_add_up() {
        let p = std::sync::Arc::new(PerThread::<Padded<AtomicU64>>::default());
        let threads: Vec<_> = (0..OWNED + 20)
            .map(|_| {
                let p = p.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        let (s, owned) = p.mine();
                        bump(s, 1, owned);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(sum(&p, |s| &**s), (OWNED as u64 + 20) * 1000);
    }
}
