//! Heap allocations per request on the hot paths, counted by a global allocator that counts
//! per thread. Once warm, a request takes everything from per-thread pools: member futures
//! (`raidd_rt::PooledFuture`), buffers and shared-buffer headers (`raidd_rt::buf`), and a
//! parity write's shared request and stripe mailboxes (`array/recycle.rs`). "Warm" means
//! more than the buffers: the stripe cache's 64 shards each allocate their table of heads
//! on their first stripe (and keep it), so the warm-up writes to enough distinct stripes
//! to have touched every shard; counting from one warm-up request showed 0.06 allocations
//! per parity write, every one of them a shard's first table.

#![allow(clippy::unwrap_used)] // test code

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;

use raidd_engine::create::{create, CreateSpec};
use raidd_engine::member::MemMember;
use raidd_engine::{Array, Gather, Member};
use raidd_layout::Level;
use raidd_rt::{AlignedBuf, IoVec, IoVecMut, SharedBuf};

struct Counting;

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

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(Cell::get)
}

async fn array(level: Level, n: usize) -> Arc<Array> {
    let spec = CreateSpec {
        name: "allocs".into(),
        homehost: "test".into(),
        level,
        layout: None,
        chunk_sectors: Some(128),
        members: (0..n)
            .map(|i| Some(Arc::new(MemMember::new(format!("m{i}"), 8 << 20)) as Arc<dyn Member>))
            .collect(),
        size_sectors: None,
        assume_clean: true,
        force: false,
        bitmap_chunk: None,
    };
    let a = create(spec).await.unwrap().array;
    a.set_stripe_cache(0, Gather::None);
    a
}

const N: u64 = 1000;
/// Warm-up requests of each kind: far more distinct stripes than the cache has shards.
const WARM: u64 = 512;

/// Allocations per 4 KiB read and write, averaged over N requests at distinct offsets
/// (after WARM requests of each, which fill the pools and the cache's shard tables).
async fn per_request(a: &Array) -> (f64, f64) {
    let buf = SharedBuf::new(AlignedBuf::zeroed(4096));
    let offset = |i: u64| (i * 7919 % (a.size_bytes() / 4096)) * 4096;
    let read = |i| {
        let mut iov = IoVecMut::new();
        iov.push(buf.slice_mut(0..4096).unwrap());
        a.read(offset(i), iov)
    };
    for i in 0..WARM {
        read(i).await.0.unwrap();
    }
    let before = allocs();
    for i in WARM..WARM + N {
        read(i).await.0.unwrap();
    }
    let reads = (allocs() - before) as f64 / N as f64;
    let write = |i| {
        let mut iov = IoVec::new();
        iov.push(buf.slice(0..4096).unwrap());
        a.write(offset(i), iov)
    };
    for i in 0..WARM {
        write(i).await.unwrap();
    }
    let before = allocs();
    for i in WARM..WARM + N {
        write(i).await.unwrap();
    }
    let writes = (allocs() - before) as f64 / N as f64;
    (reads, writes)
}

#[test]
fn allocations_per_request_on_the_hot_paths() {
    raidd_rt::block_on(async {
        for (level, n) in [
            (Level::Raid0, 4),
            (Level::Raid1, 2),
            (Level::Raid5, 4),
            (Level::Raid6, 5),
        ] {
            let a = array(level, n).await;
            let (r, w) = per_request(&a).await;
            eprintln!("{level}: {r:.2} allocations per 4K read, {w:.2} per 4K write");
            // Nothing at all, on any level.
            assert!(r == 0.0, "{level}: {r} allocations per read");
            assert!(w == 0.0, "{level}: {w} allocations per write");
        }
    });
}
