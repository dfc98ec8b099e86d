//! Heap allocations per request on the hot paths, counted by a global allocator that counts
//! per thread. Once warm, a request takes everything from per-thread pools: member futures
//! (`raidd_rt::PooledFuture`), buffers and shared-buffer headers (`raidd_rt::buf`), and a
//! parity write's shared request and stripe mailboxes (`Req::shared`,
//! `parity/mailbox.rs`). "Warm" means more than the buffers: the stripe cache's 64 shards each allocate their table of heads
//! on their first stripe (and keep it), so the warm-up writes to enough distinct stripes
//! to have touched every shard; counting from one warm-up request showed 0.06 allocations
//! per parity write, every one of them a shard's first table.

#![allow(clippy::unwrap_used)] // test code

use std::sync::Arc;

use raidd_engine::create::{create, CreateSpec};
use raidd_engine::member::{FileMember, MemMember, OpenOptions};
use raidd_engine::{Alone, Array, Gather, Member};
use raidd_layout::Level;
use raidd_rt::{AlignedBuf, IoVec, IoVecMut, SharedBuf};

#[global_allocator]
static GLOBAL: raidd_rt::alloc_count::Counting = raidd_rt::alloc_count::Counting;

fn allocs() -> u64 {
    raidd_rt::alloc_count::allocations()
}

/// Members in memory, or O_DIRECT files in `dir` (whose reads and writes go through the
/// ring, each with an iovec array of its own).
async fn array(level: Level, n: usize, dir: Option<&std::path::Path>) -> Arc<Array> {
    let member = |i: usize| -> Arc<dyn Member> {
        let Some(dir) = dir else {
            return Arc::new(MemMember::new(format!("m{i}"), 8 << 20));
        };
        let path = dir.join(format!("{level}-m{i}.img"));
        std::fs::write(&path, vec![0u8; 8 << 20]).unwrap();
        let opts = OpenOptions {
            direct: Some(true),
            ..OpenOptions::default()
        };
        Arc::new(FileMember::open(&path, opts).unwrap())
    };
    let spec = CreateSpec {
        name: "allocs".into(),
        homehost: "test".into(),
        level,
        layout: None,
        chunk_sectors: Some(128),
        members: (0..n).map(|i| Some(member(i))).collect(),
        size_sectors: None,
        assume_clean: true,
        force: false,
        bitmap_chunk: None,
        ppl: false,
        journal: None,
        checksums: None,
    };
    let a = create(spec).await.unwrap().array;
    a.set_stripe_cache(0, Gather::None);
    a
}

/// With the stripe cache on, as `raidd serve` runs it (plug gathering), and small enough to
/// be full after the warm-up: a cache still filling takes new buffers for what it keeps
/// (bounded by its size). Once full, a newly kept stripe takes an evicted one's buffers and
/// list (`parity/cache.rs`); waiting for the thread to unplug allocates nothing either.
#[test]
fn allocations_with_the_stripe_cache_on() {
    raidd_rt::block_on(async {
        // Writes through the cache, and writes alone on their stripes (past it; `Auto` sends
        // these one-at-a-time writes alone after its first window).
        for alone in [Alone::Never, Alone::Always] {
            for (level, n) in [(Level::Raid5, 4), (Level::Raid6, 5)] {
                let a = array(level, n, None).await;
                a.set_stripe_cache(1 << 20, Gather::Plug);
                a.set_write_alone(alone);
                let (r, w) = per_request(&a).await;
                eprintln!(
                    "{level} (stripe cache, alone {alone}): {r:.2} allocations per 4K read, \
                     {w:.2} per 4K write"
                );
                assert!(
                    r == 0.0,
                    "{level} (alone {alone}): {r} allocations per read"
                );
                assert!(
                    w == 0.0,
                    "{level} (alone {alone}): {w} allocations per write"
                );
            }
        }
    });
}

const N: u64 = 1000;
/// Warm-up requests of each kind: far more distinct stripes than the cache has shards.
const WARM: u64 = 512;

/// Allocations per call of `run(i)`, averaged over `n` calls after `warm` calls (which
/// fill the pools and the stripe cache's shard tables); `i` counts on across both.
async fn allocations_per<F, Fut>(warm: u64, n: u64, mut run: F) -> f64
where
    F: FnMut(u64) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    for i in 0..warm {
        run(i).await;
    }
    let before = allocs();
    for i in warm..warm + n {
        run(i).await;
    }
    (allocs() - before) as f64 / n as f64
}

/// Allocations per 4 KiB read and write, averaged over N requests at distinct offsets
/// (after WARM requests of each).
async fn per_request(a: &Array) -> (f64, f64) {
    let buf = SharedBuf::new(AlignedBuf::zeroed(4096));
    let offset = |i: u64| (i * 7919 % (a.size_bytes() / 4096)) * 4096;
    let reads = allocations_per(WARM, N, |i| {
        let mut iov = IoVecMut::new();
        iov.push(buf.slice_mut(0..4096).unwrap());
        let read = a.read(offset(i), iov);
        async move {
            read.await.0.unwrap();
        }
    })
    .await;
    let writes = allocations_per(WARM, N, |i| {
        let mut iov = IoVec::new();
        iov.push(buf.slice(0..4096).unwrap());
        let write = a.write(offset(i), iov);
        async move {
            write.await.unwrap();
        }
    })
    .await;
    (reads, writes)
}

fn check_levels(dir: Option<&std::path::Path>) {
    let media = if dir.is_some() { "files" } else { "memory" };
    raidd_rt::block_on({
        let dir = dir.map(std::path::Path::to_owned);
        async move {
            for (level, n) in [
                (Level::Raid0, 4),
                (Level::Raid1, 2),
                (Level::Raid5, 4),
                (Level::Raid6, 5),
            ] {
                let a = array(level, n, dir.as_deref()).await;
                let (r, w) = per_request(&a).await;
                eprintln!("{level} ({media}): {r:.2} allocations per 4K read, {w:.2} per 4K write");
                // Nothing at all, on any level.
                assert!(r == 0.0, "{level} ({media}): {r} allocations per read");
                assert!(w == 0.0, "{level} ({media}): {w} allocations per write");
            }
        }
    });
}

#[test]
fn allocations_per_request_on_the_hot_paths() {
    check_levels(None);
}

/// The same over O_DIRECT files: a member read or write through the ring takes its iovec
/// array from the thread's list (it allocated one per member I/O before).
#[test]
fn allocations_per_request_over_files() {
    let dir = tempfile::Builder::new()
        .prefix("raidd-allocs-")
        .tempdir_in("/var/tmp")
        .unwrap();
    check_levels(Some(dir.path()));
}

/// Allocations per large request: `stripes` whole stripes from a stripe boundary (a long
/// sequential write becomes one run of whole stripes), and the same length starting 4 KiB
/// into a stripe (partial stripes at both ends, each led apart from the run between).
async fn per_large_request(a: &Array, data_chunks: u64, stripes: u64) -> [f64; 3] {
    let stripe = data_chunks * (64 << 10);
    let len = (stripes * stripe) as usize;
    let buf = SharedBuf::new(AlignedBuf::zeroed(len));
    let count = a.size_bytes() / len as u64 - 1;
    let mut out = [0.0; 3];
    for (k, shift) in [(0, 0u64), (1, 0), (2, 4096)] {
        let buf = &buf;
        let run = |i: u64| {
            let offset = (i % count) * len as u64 + shift;
            async move {
                if k == 1 {
                    let mut iov = IoVecMut::new();
                    iov.push(buf.slice_mut(0..len).unwrap());
                    a.read(offset, iov).await.0.unwrap();
                } else {
                    let mut iov = IoVec::new();
                    iov.push(buf.slice(0..len).unwrap());
                    a.write(offset, iov).await.unwrap();
                }
            }
        };
        // The fewest of three rounds: over files, completions come in any order, and a round
        // may reach a new peak of tables or buffers in flight at once, which the pools then
        // keep (growth, not a cost per request). An allocation per request shows in every
        // round.
        let mut fewest = f64::MAX;
        for _ in 0..3 {
            fewest = fewest.min(allocations_per(64, 100, &run).await);
        }
        out[k] = fewest;
    }
    out
}

/// Large requests allocate nothing either, once the thread's kept blocks have room: every
/// table that outgrows the inline size chosen for small requests (a read's pieces and
/// fragments, a batch's parts and member I/Os, a member I/O's windows, a join's members,
/// futures and results, a write's stripe shares and runs) spills onto a block kept per
/// thread by its elements' layout (`raidd_rt::recycle`), and whoever is done with it last
/// gives it back (a member, its windows: `raidd_rt::buf::give_iov`). Requests of 4 and 16
/// whole stripes, aligned and 4 KiB off, on memory and O_DIRECT files, with and without the
/// stripe cache. From the first count (four stripes, memory): RAID0 6/34/9, RAID5 24/37/27,
/// RAID6 33/37/42 (whole-stripe write, read, unaligned write).
#[test]
fn allocations_per_large_request() {
    let dir = tempfile::Builder::new()
        .prefix("raidd-allocs-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let path = dir.path().to_owned();
    raidd_rt::block_on(async move {
        for media in [None, Some(path.as_path())] {
            for (level, n, data) in [
                (Level::Raid0, 4, 4),
                (Level::Raid10, 4, 2),
                (Level::Raid5, 4, 3),
                (Level::Raid6, 5, 3),
            ] {
                let a = array(level, n, media).await;
                for (cache, stripes) in [(0, 4), (0, 16), (1 << 20, 4)] {
                    a.set_stripe_cache(cache, Gather::Plug);
                    let got = per_large_request(&a, data, stripes).await;
                    let [w, r, u] = got;
                    let what = format!(
                        "{level} ({}, {stripes} stripes, cache {cache})",
                        if media.is_some() { "files" } else { "memory" }
                    );
                    eprintln!(
                        "{what}: {w:.2} allocations per whole-stripe write, {r:.2} per read, \
                         {u:.2} per unaligned write"
                    );
                    assert!(
                        got == [0.0; 3],
                        "{what}: {got:?} allocations per large request"
                    );
                }
            }
        }
    });
}
