//! A global allocator that counts allocations per thread, for tests that hold a hot path to
//! "no allocation per request". A test crate installs it with
//! `#[global_allocator] static A: raidd_rt::alloc_count::Counting = raidd_rt::alloc_count::Counting;`
//! and reads [`allocations`] before and after the requests it counts.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Forwards to the system allocator, counting allocations and reallocations made by the
/// calling thread.
#[derive(Debug)]
pub struct Counting;

thread_local!(static ALLOCS: Cell<u64> = const { Cell::new(0) });

// SAFETY: forwards every call to the system allocator unchanged; counting touches only a
// thread-local cell (const-initialised, so it never allocates itself).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: the caller upholds GlobalAlloc's contract, passed on as is.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: as above.
        unsafe { System.realloc(p, l, n) }
    }
}

/// Allocations (and reallocations) this thread has made through [`Counting`] so far.
pub fn allocations() -> u64 {
    ALLOCS.with(Cell::get)
}
