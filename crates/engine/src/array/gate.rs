//! Exclusion between foreground writes and background sync work (recovery, resync, repair)
//! on the same region, so a rebuild never writes older data over newer.
//!
//! md's RAID1 "barrier buckets" are the model: the array is cut into regions that hash onto
//! a fixed table of buckets. A write counts itself pending in every bucket it touches; sync
//! work raises a barrier on the buckets of its window and waits until nothing is pending
//! there, and writes that meet a raised barrier step back and wait for it to drop. The
//! common case (no sync running) costs a write two atomic operations per bucket and takes no
//! lock; memory stays bounded whatever the array size.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::task::{Context, Poll, Waker};

use smallvec::SmallVec;

/// Sectors per region: 1 MiB.
pub(crate) const REGION_SHIFT: u32 = 11;
const BUCKETS: usize = 1024;

/// One per cache line: every write updates its bucket's `pending`, and buckets of
/// neighbouring regions sharing a line made writes on different threads contend.
#[derive(Debug, Default)]
#[repr(align(64))]
struct Bucket {
    /// Writes in flight in this bucket.
    pending: AtomicU32,
    /// Raised barriers (one per sync window covering the bucket).
    barrier: AtomicU32,
    /// Tasks waiting for `pending` to reach 0 or for `barrier` to drop.
    waiters: Mutex<Vec<Waker>>,
}

impl Bucket {
    fn wake_all(&self) {
        let ws = std::mem::take(&mut *self.waiters.lock().expect(crate::POISONED));
        for w in ws {
            w.wake();
        }
    }

    fn register(&self, w: &Waker) {
        let mut ws = self.waiters.lock().expect(crate::POISONED);
        if !ws.iter().any(|x| x.will_wake(w)) {
            ws.push(w.clone());
        }
    }
}

#[derive(Debug)]
pub(crate) struct Gate {
    buckets: Box<[Bucket]>,
}

impl Default for Gate {
    fn default() -> Self {
        Gate {
            buckets: (0..BUCKETS).map(|_| Bucket::default()).collect(),
        }
    }
}

/// The buckets of a set of array sector ranges, sorted and without repeats.
type BucketSet = SmallVec<[u16; 8]>;

fn buckets_of(ranges: impl IntoIterator<Item = (u64, u64)>) -> BucketSet {
    let mut set = BucketSet::new();
    for (start, sectors) in ranges {
        if sectors == 0 {
            continue;
        }
        let first = start >> REGION_SHIFT;
        let last = (start + sectors - 1) >> REGION_SHIFT;
        if last - first + 1 >= BUCKETS as u64 {
            return (0..BUCKETS as u16).collect();
        }
        set.extend((first..=last).map(|r| (r % BUCKETS as u64) as u16));
    }
    set.sort_unstable();
    set.dedup();
    debug_assert!(
        set.iter().all(|&b| usize::from(b) < BUCKETS),
        "buckets of the table"
    );
    set
}

/// A write's pass through the gate; the write counts as pending until this drops.
pub(crate) struct WritePass<'a> {
    gate: &'a Gate,
    set: BucketSet,
}

impl Drop for WritePass<'_> {
    fn drop(&mut self) {
        for &b in &self.set {
            let b = &self.gate.buckets[usize::from(b)];
            // A sync waiting for this bucket to drain needs to hear about the last write.
            let was = b.pending.fetch_sub(1, Ordering::SeqCst);
            debug_assert!(was > 0, "a write pass leaves a bucket it entered");
            if was == 1 && b.barrier.load(Ordering::SeqCst) > 0 {
                b.wake_all();
            }
        }
    }
}

/// A raised barrier; writes to its buckets wait until this drops.
pub(crate) struct Barrier<'a> {
    gate: &'a Gate,
    set: BucketSet,
}

impl Drop for Barrier<'_> {
    fn drop(&mut self) {
        for &b in &self.set {
            let b = &self.gate.buckets[usize::from(b)];
            let was = b.barrier.fetch_sub(1, Ordering::SeqCst);
            debug_assert!(was > 0, "a barrier is dropped from a bucket it raised");
            b.wake_all();
        }
    }
}

/// Polls `ready` until it holds, registering the task with `buckets` before each re-check so
/// that no wake-up is lost between the check and the sleep.
struct WaitFor<'a, F: Fn() -> bool> {
    gate: &'a Gate,
    set: &'a BucketSet,
    ready: F,
}

impl<F: Fn() -> bool> Future for WaitFor<'_, F> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if (self.ready)() {
            return Poll::Ready(());
        }
        for &b in self.set.iter() {
            self.gate.buckets[usize::from(b)].register(cx.waker());
        }
        if (self.ready)() {
            return Poll::Ready(());
        }
        Poll::Pending
    }
}

impl Gate {
    /// Admits a write to the array sector ranges `(start, sectors)`: waits while a barrier is
    /// raised on any of them.
    pub(crate) async fn enter(
        &self,
        ranges: impl IntoIterator<Item = (u64, u64)>,
    ) -> WritePass<'_> {
        let set = buckets_of(ranges);
        loop {
            for &b in &set {
                self.buckets[usize::from(b)]
                    .pending
                    .fetch_add(1, Ordering::SeqCst);
            }
            let blocked = set
                .iter()
                .any(|&b| self.buckets[usize::from(b)].barrier.load(Ordering::SeqCst) > 0);
            if !blocked {
                debug_assert!(
                    set.iter()
                        .all(|&b| self.buckets[usize::from(b)].pending.load(Ordering::SeqCst) > 0),
                    "a pass is counted in each of its buckets"
                );
                return WritePass { gate: self, set };
            }
            // Step back so the sync can drain, then wait for its barrier to drop.
            drop(WritePass {
                gate: self,
                set: set.clone(),
            });
            WaitFor {
                gate: self,
                set: &set,
                ready: || {
                    set.iter()
                        .all(|&b| self.buckets[usize::from(b)].barrier.load(Ordering::SeqCst) == 0)
                },
            }
            .await;
        }
    }

    /// Raises a barrier on the array sector ranges and waits until no write is in flight
    /// there. Writes arriving meanwhile wait until the barrier drops.
    pub(crate) async fn barrier(
        &self,
        ranges: impl IntoIterator<Item = (u64, u64)>,
    ) -> Barrier<'_> {
        let set = buckets_of(ranges);
        for &b in &set {
            self.buckets[usize::from(b)]
                .barrier
                .fetch_add(1, Ordering::SeqCst);
        }
        WaitFor {
            gate: self,
            set: &set,
            ready: || {
                set.iter()
                    .all(|&b| self.buckets[usize::from(b)].pending.load(Ordering::SeqCst) == 0)
            },
        }
        .await;
        debug_assert!(
            set.iter()
                .all(|&b| self.buckets[usize::from(b)].barrier.load(Ordering::SeqCst) > 0),
            "a barrier held is raised in each of its buckets"
        );
        Barrier { gate: self, set }
    }

    /// Raises a barrier on the whole array if no write is in flight anywhere; `None` (and
    /// nothing raised) otherwise. While it is held, every new write waits at the gate.
    pub(crate) fn try_barrier_all(&self) -> Option<Barrier<'_>> {
        let set: BucketSet = (0..BUCKETS as u16).collect();
        for b in self.buckets.iter() {
            b.barrier.fetch_add(1, Ordering::SeqCst);
        }
        let barrier = Barrier { gate: self, set };
        // A write raises `pending` before it looks at `barrier`, and this looks at `pending`
        // after raising `barrier` (both sequentially consistent): either the write sees the
        // barrier and steps back, or this sees the write and gives up.
        let idle = self
            .buckets
            .iter()
            .all(|b| b.pending.load(Ordering::SeqCst) == 0);
        idle.then_some(barrier)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::rc::Rc;

    #[test]
    fn buckets_cover_ranges_and_wrap() {
        assert_eq!(buckets_of([(0, 1)]).as_slice(), &[0]);
        assert_eq!(buckets_of([(2047, 2)]).as_slice(), &[0, 1]);
        assert_eq!(buckets_of([(0, 0)]).as_slice(), &[] as &[u16]);
        // Region 1024 hashes onto bucket 0.
        assert_eq!(buckets_of([(1024 << 11, 1), (5, 1)]).as_slice(), &[0]);
        assert_eq!(buckets_of([(0, u64::MAX / 2)]).len(), BUCKETS);
    }

    #[test]
    fn barrier_waits_for_writes_and_holds_new_ones() {
        raidd_rt::block_on(async {
            let gate = Rc::new(Gate::default());
            let log = Rc::new(std::cell::RefCell::new(Vec::new()));
            let pass = gate.enter([(0, 8)]).await;
            let synced = Rc::new(Cell::new(false));
            let (g, l, s) = (gate.clone(), log.clone(), synced.clone());
            let sync = raidd_rt::spawn_local(async move {
                let b = g.barrier([(4, 4)]).await;
                l.borrow_mut().push("sync");
                s.set(true);
                raidd_rt::yield_now().await;
                raidd_rt::yield_now().await;
                l.borrow_mut().push("sync done");
                drop(b);
            });
            raidd_rt::yield_now().await;
            assert!(
                !synced.get(),
                "the barrier must wait for the write in flight"
            );
            log.borrow_mut().push("write done");
            drop(pass);
            // A write elsewhere is not held up; one in the window waits for the barrier.
            while !synced.get() {
                raidd_rt::yield_now().await;
            }
            let other = gate.enter([(4096, 8)]).await;
            drop(other);
            let held = gate.enter([(6, 1)]).await;
            log.borrow_mut().push("second write");
            drop(held);
            sync.await;
            assert_eq!(
                *log.borrow(),
                ["write done", "sync", "sync done", "second write"]
            );
        });
    }

    #[test]
    fn a_whole_array_barrier_is_raised_only_when_nothing_is_in_flight() {
        raidd_rt::block_on(async {
            let gate = Rc::new(Gate::default());
            let pass = gate.enter([(5 << REGION_SHIFT, 8)]).await;
            assert!(gate.try_barrier_all().is_none(), "a write is in flight");
            // Giving up left nothing raised: a write anywhere passes at once.
            drop(gate.enter([(0, 1)]).await);
            drop(pass);
            let b = gate.try_barrier_all().expect("nothing in flight");
            let passed = Rc::new(Cell::new(false));
            let (g, p) = (gate.clone(), passed.clone());
            let writer = raidd_rt::spawn_local(async move {
                drop(g.enter([(900 << REGION_SHIFT, 1)]).await);
                p.set(true);
            });
            for _ in 0..3 {
                raidd_rt::yield_now().await;
            }
            assert!(!passed.get(), "a write waits while the barrier is up");
            drop(b);
            writer.await;
            assert!(passed.get());
        });
    }
}
