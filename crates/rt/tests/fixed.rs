//! Registered buffer memory: buffers carved from it go to the kernel as fixed-buffer
//! operations, single and vectored, gathered or not; buffers outside it as plain ones.
#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod direct;

use std::sync::Once;

use direct::file;
use raidd_rt::{block_on, io_stats, spawn_local, AlignedBuf, IoVec, IoVecMut, SharedBuf};

/// The arena of this test process: 4 MiB, set before any runtime starts in it.
fn setup() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| raidd_rt::register_arena(4 << 20).unwrap());
}

fn kernel_at_least(major: u32, minor: u32) -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut v = release
        .split(['.', '-'])
        .map(|x| x.parse::<u32>().unwrap_or(0));
    (v.next().unwrap_or(0), v.next().unwrap_or(0)) >= (major, minor)
}

fn pattern(tag: u8, len: usize) -> AlignedBuf {
    let mut b = AlignedBuf::zeroed(len);
    for (i, x) in b.iter_mut().enumerate() {
        *x = (i / 512) as u8 ^ tag;
    }
    b
}

#[test]
fn the_arena_is_set_once_and_bounded() {
    setup();
    assert!(raidd_rt::register_arena(0).is_err());
    assert!(raidd_rt::register_arena(raidd_rt::MAX_ARENA + 1).is_err());
    raidd_rt::register_arena(4 << 20).unwrap(); // the same size again: fine
    assert!(raidd_rt::register_arena(8 << 20).is_err());
}

#[test]
fn buffers_from_the_arena_go_out_fixed() {
    setup();
    let (_d, f) = file();
    std::thread::spawn(move || {
        // No gathering here, so every operation below is its own.
        raidd_rt::set_gather(false);
        block_on(async move {
            let s0 = io_stats();
            let (r, _) = f.write_all_at(pattern(1, 65536), 0).await;
            r.unwrap();
            let (r, back) = f.read_exact_at(AlignedBuf::zeroed(65536), 0).await;
            r.unwrap();
            assert_eq!(&back[..], &pattern(1, 65536)[..]);
            let s = io_stats();
            assert_eq!((s.file_ops - s0.file_ops, s.fixed - s0.fixed), (2, 2));

            // Vectored: two windows of one buffer, swapped.
            let src = SharedBuf::new(pattern(2, 8192));
            let iov: IoVec = [src.slice(4096..8192).unwrap(), src.slice(0..4096).unwrap()]
                .into_iter()
                .collect();
            let (r, iov) = f.writev_all_at(iov, 8192).await;
            r.unwrap();
            drop(iov);
            let dst = SharedBuf::new(AlignedBuf::zeroed(8192));
            let iov: IoVecMut = [
                dst.slice_mut(0..4096).unwrap(),
                dst.slice_mut(4096..8192).unwrap(),
            ]
            .into_iter()
            .collect();
            let (r, iov) = f.readv_exact_at(iov, 8192).await;
            r.unwrap();
            drop(iov);
            let dst = dst.try_into_inner().unwrap();
            let src = src.try_into_inner().unwrap();
            assert_eq!(&dst[..4096], &src[4096..]);
            assert_eq!(&dst[4096..], &src[..4096]);
            let vectored = io_stats().fixed - s.fixed;
            if kernel_at_least(6, 15) {
                assert_eq!(vectored, 2, "vectored fixed reads and writes (6.15+)");
            }
        });
    })
    .join()
    .unwrap();
}

#[test]
fn gathered_operations_over_arena_buffers_are_fixed_and_others_are_not() {
    setup();
    let (_d, f) = file();
    std::thread::spawn(move || {
        block_on(async move {
            let tasks: Vec<_> = (0..8u64)
                .map(|i| {
                    let f = f.clone();
                    spawn_local(async move { f.write_at(pattern(i as u8, 4096), i * 4096).await.0 })
                })
                .collect();
            let s0 = io_stats();
            for t in tasks {
                assert_eq!(t.await.unwrap(), 4096);
            }
            let s = io_stats();
            assert_eq!(s.kernel_ops() - s0.kernel_ops(), 1);
            assert_eq!(s.fixed - s0.fixed, 1, "the gathered write is fixed");

            // A buffer too large for the arena comes from the heap and goes out plain.
            let s0 = io_stats();
            let big = AlignedBuf::zeroed(8 << 20);
            let (r, big) = f.read_at(big, 0).await;
            assert_eq!(r.unwrap(), 8 * 4096);
            let s = io_stats();
            assert_eq!((s.file_ops - s0.file_ops, s.fixed - s0.fixed), (1, 0));
            for i in 0..8usize {
                assert_eq!(&big[i * 4096..(i + 1) * 4096], &pattern(i as u8, 4096)[..]);
            }
        });
    })
    .join()
    .unwrap();
}
