//! Per-stripe exclusion for RAID4/5/6: a write's read-compute-write of a stripe's parity, a
//! degraded read's reconstruction and (later) rebuild of a stripe must not interleave.
//! Stripes hash onto a fixed table of async locks: no lock is shared by all requests, and
//! memory stays bounded whatever the array size.

use futures::lock::{Mutex, MutexGuard};
use raidd_rt::recycle::Table;

const SLOTS: usize = 4096;

#[derive(Debug)]
pub(crate) struct StripeLocks {
    slots: Box<[Mutex<()>]>,
}

/// Held locks; released on drop. Inline for up to four stripes (a run of whole stripes of
/// a 1 MiB-class write; a longer run's are on a block kept per thread); each inline guard
/// adds 8 bytes to a small write's state.
pub(crate) struct StripeGuard<'a> {
    _guards: Table<[MutexGuard<'a, ()>; 4]>,
}

impl Default for StripeLocks {
    fn default() -> Self {
        StripeLocks {
            slots: (0..SLOTS).map(|_| Mutex::new(())).collect(),
        }
    }
}

impl StripeLocks {
    /// Locks every stripe in `first..=last`. Slots are taken in ascending slot order, so two
    /// requests can never wait for each other in a cycle.
    pub(crate) async fn lock(&self, first: u64, last: u64) -> StripeGuard<'_> {
        assert!(first <= last, "inverted stripe range {first}..={last}");
        // Inline for up to four stripes, else on a kept block: nothing allocated.
        let mut idx: Table<[usize; 4]> = if last - first + 1 >= SLOTS as u64 {
            (0..SLOTS).collect()
        } else {
            (first..=last)
                .map(|s| (s % SLOTS as u64) as usize)
                .collect()
        };
        idx.sort_unstable();
        idx.dedup();
        let mut guards = Table::with_room(idx.len());
        for &i in idx.iter() {
            guards.push(self.slots[i].lock().await);
        }
        StripeGuard { _guards: guards }
    }
}
