//! Gathering of contiguous positioned file I/O into one vectored operation per enter.
#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod direct;

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll};

use direct::{dir, open};
use raidd_rt::fs::File;
use raidd_rt::{block_on, io_stats, spawn_local, AlignedBuf, IoStats, IoVecMut, SharedBuf};

/// A file of `blocks` zeroed 4 KiB blocks in a fresh directory (gone with the guard).
fn file_of_blocks(blocks: usize) -> (tempfile::TempDir, std::path::PathBuf) {
    let d = dir();
    let path = d.path().join("f");
    std::fs::write(&path, vec![0u8; blocks * 4096]).unwrap();
    (d, path)
}

/// Asserts that exactly one gathered operation went out and was split again.
fn assert_split_once(s0: IoStats) {
    let s = delta(s0, io_stats());
    assert_eq!((s.gathered, s.split_again), (1, 1), "{s:?}");
}

/// A 4 KiB block that names its own position: each 8 bytes hold `tag * 2^32 + block`.
fn block(tag: u64, n: u64) -> AlignedBuf {
    let mut b = AlignedBuf::zeroed(4096);
    for w in b.chunks_exact_mut(8) {
        w.copy_from_slice(&((tag << 32) + n).to_le_bytes());
    }
    b
}

fn delta(a: IoStats, b: IoStats) -> IoStats {
    IoStats {
        file_ops: b.file_ops - a.file_ops,
        gathered: b.gathered - a.gathered,
        gathered_parts: b.gathered_parts - a.gathered_parts,
        split_again: b.split_again - a.split_again,
        fixed: b.fixed - a.fixed,
    }
}

/// Starts one write task per block of `blocks` (all queued in the same executor round) and
/// waits for them; returns each task's result.
async fn write_blocks(f: &File, tag: u64, blocks: &[u64]) -> Vec<std::io::Result<usize>> {
    let tasks: Vec<_> = blocks
        .iter()
        .map(|&n| {
            let f = f.clone();
            spawn_local(async move { f.write_at(block(tag, n), n * 4096).await.0 })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await);
    }
    out
}

async fn read_blocks(f: &File, blocks: &[u64]) -> Vec<(std::io::Result<usize>, AlignedBuf)> {
    let tasks: Vec<_> = blocks
        .iter()
        .map(|&n| {
            let f = f.clone();
            spawn_local(async move { f.read_at(AlignedBuf::zeroed(4096), n * 4096).await })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await);
    }
    out
}

#[test]
fn requests_that_meet_end_to_end_go_out_as_one_operation() {
    let d = dir();
    let path = d.path().join("f");
    block_on(async move {
        let f = open(&path, true);
        // Queued out of order, with a gap after block 11: two runs, 0..=11 and 13..=15.
        let order: Vec<u64> = vec![5, 4, 6, 0, 1, 2, 3, 7, 8, 9, 10, 11, 13, 14, 15];
        let s0 = io_stats();
        for r in write_blocks(&f, 1, &order).await {
            assert_eq!(r.unwrap(), 4096);
        }
        let w = delta(s0, io_stats());
        assert_eq!(w.file_ops, 15);
        assert_eq!(w.split_again, 0);
        assert_eq!(w.kernel_ops(), 2, "{w:?}");

        // Reads gather the same way, each part getting its own bytes.
        let s1 = io_stats();
        let back = read_blocks(&f, &order).await;
        let r = delta(s1, io_stats());
        assert_eq!(r.kernel_ops(), 2, "{r:?}");
        for (&n, (res, buf)) in order.iter().zip(&back) {
            assert_eq!(*res.as_ref().unwrap(), 4096);
            assert_eq!(&buf[..], &block(1, n)[..], "block {n}");
        }

        // A vectored read scattered over one buffer gathers with plain reads beside it.
        let dst = SharedBuf::new(AlignedBuf::zeroed(8192));
        let iov: IoVecMut = [
            dst.slice_mut(4096..8192).unwrap(),
            dst.slice_mut(0..4096).unwrap(),
        ]
        .into_iter()
        .collect();
        let s2 = io_stats();
        let (v, plain) = {
            let f2 = f.clone();
            let v = spawn_local(async move { f2.readv_exact_at(iov, 2 * 4096).await });
            let plain = read_blocks(&f, &[4, 1]).await;
            (v.await, plain)
        };
        assert_eq!(delta(s2, io_stats()).kernel_ops(), 1);
        v.0.unwrap();
        drop(v.1);
        let dst = dst.try_into_inner().unwrap();
        assert_eq!(&dst[4096..], &block(1, 2)[..]);
        assert_eq!(&dst[..4096], &block(1, 3)[..]);
        assert_eq!(&plain[0].1[..], &block(1, 4)[..]);
        assert_eq!(&plain[1].1[..], &block(1, 1)[..]);
    });
}

#[test]
fn a_short_gathered_read_gives_each_part_its_own_result() {
    let (_d, path) = file_of_blocks(4);
    block_on(async move {
        let f = open(&path, true);
        for r in write_blocks(&f, 2, &[0, 1, 2, 3]).await {
            r.unwrap();
        }
        // Blocks 2 and 3 exist, 4 and 5 are past the end: the gathered read comes back
        // short, and its parts are asked again one by one.
        let s0 = io_stats();
        let back = read_blocks(&f, &[2, 3, 4, 5]).await;
        assert_split_once(s0);
        let lens: Vec<usize> = back.iter().map(|(r, _)| *r.as_ref().unwrap()).collect();
        assert_eq!(lens, vec![4096, 4096, 0, 0]);
        assert_eq!(&back[0].1[..], &block(2, 2)[..]);
        assert_eq!(&back[1].1[..], &block(2, 3)[..]);
    });
}

#[test]
fn a_failed_gathered_write_fails_every_part_with_its_own_error() {
    let (_d, path) = file_of_blocks(4);
    block_on(async move {
        let f = open(&path, false); // read-only: every write fails
        let s0 = io_stats();
        let results = write_blocks(&f, 3, &[0, 1, 2]).await;
        assert_split_once(s0);
        for r in results {
            assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EBADF));
        }
    });
}

#[test]
fn an_operation_dropped_while_queued_is_harmless() {
    let d = dir();
    let path = d.path().join("f");
    block_on(async move {
        let f = open(&path, true);
        for r in write_blocks(&f, 4, &[0, 1, 2, 3]).await {
            r.unwrap();
        }
        // Start a write of block 1 (it waits in the plug), then drop it; a gathered write of
        // blocks 0..=2 carries it. Its buffer lives on as an orphan until the kernel is done.
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        {
            let mut dropped = pin!(f.write_at(block(5, 1), 4096));
            assert!(matches!(dropped.as_mut().poll(&mut cx), Poll::Pending));
            let others = write_blocks(&f, 5, &[0, 2]).await;
            for r in others {
                r.unwrap();
            }
        }
        let back = read_blocks(&f, &[0, 1, 2, 3]).await;
        assert_eq!(&back[0].1[..], &block(5, 0)[..]);
        // Block 1 holds the old or the new data, never anything else.
        assert!(back[1].1[..] == block(4, 1)[..] || back[1].1[..] == block(5, 1)[..]);
        assert_eq!(&back[2].1[..], &block(5, 2)[..]);
        assert_eq!(&back[3].1[..], &block(4, 3)[..]);
    });
}

#[test]
fn gathering_can_be_turned_off() {
    let d = dir();
    let path = d.path().join("f");
    std::thread::spawn(move || {
        raidd_rt::set_gather(false);
        block_on(async move {
            let f = open(&path, true);
            let s0 = io_stats();
            for r in write_blocks(&f, 6, &[0, 1, 2, 3]).await {
                r.unwrap();
            }
            let s = delta(s0, io_stats());
            assert_eq!((s.file_ops, s.kernel_ops()), (4, 4), "{s:?}");
        });
    })
    .join()
    .unwrap();
}
