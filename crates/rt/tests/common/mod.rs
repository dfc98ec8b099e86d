#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test
                               // Shared by the runtime's integration tests (each test file is its own process, so the
                               // io_uring and synchronous backends are each tested in full).

use std::cell::Cell;
use std::os::unix::fs::OpenOptionsExt;
use std::rc::Rc;
use std::time::{Duration, Instant};

use raidd_rt::fs::File;
use raidd_rt::{block_on, spawn_local, AlignedBuf, IoVec, IoVecMut, SharedBuf};

fn open_rw(path: &std::path::Path, direct: bool) -> File {
    let mut o = std::fs::OpenOptions::new();
    o.read(true).write(true).create(true).truncate(false);
    if direct {
        o.custom_flags(libc::O_DIRECT);
    }
    File::from(o.open(path).expect("open test file"))
}

/// A directory on a filesystem that supports O_DIRECT (not tmpfs).
fn direct_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("raidd-rt-")
        .tempdir_in("/var/tmp")
        .expect("tempdir")
}

pub fn block_on_returns_value() {
    assert_eq!(block_on(async { 6 * 7 }), 42);
    // The runtime is reused by the next block_on on this thread.
    assert_eq!(block_on(async { 1 }), 1);
}

pub fn spawned_tasks_run_and_join() {
    let total = block_on(async {
        let counter = Rc::new(Cell::new(0u32));
        let handles: Vec<_> = (0..100)
            .map(|i| {
                let c = counter.clone();
                spawn_local(async move {
                    raidd_rt::yield_now().await;
                    c.set(c.get() + 1);
                    i
                })
            })
            .collect();
        let mut sum = 0;
        for h in handles {
            sum += h.await;
        }
        assert_eq!(counter.get(), 100);
        sum
    });
    assert_eq!(total, (0..100).sum::<u32>());
}

pub fn file_roundtrip(direct: bool) {
    let dir = direct_dir();
    let path = dir.path().join("f");
    block_on(async move {
        let f = open_rw(&path, direct);
        let mut data = AlignedBuf::zeroed(64 * 1024);
        for (i, b) in data.iter_mut().enumerate() {
            *b = (i * 7 + 3) as u8;
        }
        let (r, data) = f.write_all_at(data, 4096).await;
        r.unwrap();
        f.sync(true).await.unwrap();
        let (r, back) = f.read_exact_at(AlignedBuf::zeroed(64 * 1024), 4096).await;
        r.unwrap();
        assert_eq!(&back[..], &data[..]);
        // Reading past the end is an error, not silent zeros.
        let (r, _) = f.read_exact_at(AlignedBuf::zeroed(8192), 64 * 1024).await;
        assert_eq!(r.unwrap_err().kind(), std::io::ErrorKind::UnexpectedEof);
    });
}

pub fn vectored_scatter_gather() {
    let dir = direct_dir();
    let path = dir.path().join("v");
    block_on(async move {
        let f = open_rw(&path, true);
        // Write four 4 KiB windows of one buffer in the order 3,1,0,2 to one contiguous range.
        let mut src = AlignedBuf::zeroed(16384);
        for (i, chunk) in src.chunks_mut(4096).enumerate() {
            chunk.fill(i as u8 + 1);
        }
        let src = SharedBuf::new(src);
        let order = [3usize, 1, 0, 2];
        let iov: IoVec = order
            .iter()
            .map(|&i| src.slice(i * 4096..(i + 1) * 4096).unwrap())
            .collect();
        let (r, iov) = f.writev_all_at(iov, 0).await;
        r.unwrap();
        drop(iov);
        // Read it back scattered the same way into a fresh buffer.
        let dst = SharedBuf::new(AlignedBuf::zeroed(16384));
        let iov: IoVecMut = order
            .iter()
            .map(|&i| dst.slice_mut(i * 4096..(i + 1) * 4096).unwrap())
            .collect();
        let (r, iov) = f.readv_exact_at(iov, 0).await;
        r.unwrap();
        drop(iov);
        let dst = dst.try_into_inner().unwrap();
        for (i, chunk) in dst.chunks(4096).enumerate() {
            assert!(chunk.iter().all(|&b| b == i as u8 + 1), "window {i}");
        }
        // And on the file the windows lie in write order.
        let (r, raw) = f.read_exact_at(AlignedBuf::zeroed(16384), 0).await;
        r.unwrap();
        for (pos, &i) in order.iter().enumerate() {
            assert!(raw[pos * 4096..(pos + 1) * 4096]
                .iter()
                .all(|&b| b == i as u8 + 1));
        }
    });
}

pub fn many_concurrent_ops_exceed_ring() {
    let dir = direct_dir();
    let path = dir.path().join("m");
    block_on(async move {
        let f = open_rw(&path, true);
        let n = 1000u64;
        let writes: Vec<_> = (0..n)
            .map(|i| {
                let f = f.clone();
                spawn_local(async move {
                    let buf = AlignedBuf::from_slice(&[i as u8; 4096]);
                    f.write_all_at(buf, i * 4096).await.0
                })
            })
            .collect();
        for w in writes {
            w.await.unwrap();
        }
        let reads: Vec<_> = (0..n)
            .map(|i| {
                let f = f.clone();
                spawn_local(async move {
                    let (r, b) = f.read_exact_at(AlignedBuf::zeroed(4096), i * 4096).await;
                    r.unwrap();
                    assert!(b.iter().all(|&x| x == i as u8), "block {i}");
                })
            })
            .collect();
        for r in reads {
            r.await;
        }
    });
}

pub fn dropped_ops_are_safe() {
    let dir = direct_dir();
    let path = dir.path().join("d");
    block_on(async move {
        let f = open_rw(&path, true);
        f.write_all_at(AlignedBuf::zeroed(1 << 20), 0)
            .await
            .0
            .unwrap();
        // Start reads and drop them before they complete; the buffers must stay valid for
        // the kernel (orphans), and later ops must still work.
        for _ in 0..50 {
            let fut = f.read_exact_at(AlignedBuf::zeroed(1 << 20), 0);
            let mut fut = Box::pin(fut);
            let waker = futures::task::noop_waker();
            let mut cx = std::task::Context::from_waker(&waker);
            let _ = fut.as_mut().poll(&mut cx);
            drop(fut);
        }
        let sleeper = Box::pin(raidd_rt::time::sleep(Duration::from_secs(3600)));
        let mut sleeper = sleeper;
        let waker = futures::task::noop_waker();
        let _ = sleeper
            .as_mut()
            .poll(&mut std::task::Context::from_waker(&waker));
        drop(sleeper);
        let (r, b) = f.read_exact_at(AlignedBuf::zeroed(4096), 0).await;
        r.unwrap();
        assert!(b.iter().all(|&x| x == 0));
    });
    // The orphaned hour-long timeout was cancelled, so shutting down does not wait for it.
    let t = Instant::now();
    raidd_rt::shutdown();
    assert!(t.elapsed() < Duration::from_secs(10));
}

pub fn sleep_sleeps() {
    let t = Instant::now();
    block_on(raidd_rt::time::sleep(Duration::from_millis(50)));
    let e = t.elapsed();
    assert!(e >= Duration::from_millis(50), "slept only {e:?}");
    assert!(e < Duration::from_secs(5), "slept {e:?}");
}

pub fn cross_thread_wake() {
    block_on(async {
        let (tx, rx) = futures::channel::oneshot::channel::<u32>();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            tx.send(99).unwrap();
        });
        assert_eq!(rx.await.unwrap(), 99);
        t.join().unwrap();
    });
}

/// Wakes from another thread, one at a time with pauses between them, so that the runtime
/// is asleep for each one: every wake must arrive, not only the first. A lost wake leaves
/// the thread asleep for good (no timer of its own could end that sleep), so a watchdog
/// thread ends the process with a message saying so.
pub fn repeated_cross_thread_wakes() {
    let (done, watch) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if watch.recv_timeout(Duration::from_secs(20)).is_err() {
            eprintln!("repeated_cross_thread_wakes: a wake was lost (asleep for 20 s)");
            std::process::exit(101);
        }
    });
    block_on(async {
        let (tx, mut rx) = futures::channel::mpsc::unbounded::<u32>();
        let t = std::thread::spawn(move || {
            for i in 0..20 {
                std::thread::sleep(Duration::from_millis(5));
                tx.unbounded_send(i).unwrap();
            }
        });
        for i in 0..20 {
            assert_eq!(futures::StreamExt::next(&mut rx).await, Some(i));
        }
        t.join().unwrap();
    });
    done.send(()).unwrap();
    watchdog.join().unwrap();
}

pub fn threads_have_independent_runtimes() {
    let handles: Vec<_> = (0..4)
        .map(|t| {
            std::thread::spawn(move || {
                let dir = direct_dir();
                let path = dir.path().join("t");
                block_on(async move {
                    let f = open_rw(&path, true);
                    let buf = AlignedBuf::from_slice(&[t as u8; 8192]);
                    f.write_all_at(buf, 0).await.0.unwrap();
                    let (r, b) = f.read_exact_at(AlignedBuf::zeroed(8192), 0).await;
                    r.unwrap();
                    assert!(b.iter().all(|&x| x == t as u8));
                });
                raidd_rt::shutdown();
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

use std::future::Future;

/// A plugged task runs only once the thread has nothing else to do (after tasks that keep
/// yielding); a lone plug is released, not forgotten.
pub fn unplugged_waits_for_an_idle_thread() {
    block_on(async {
        let log = Rc::new(std::cell::RefCell::new(Vec::new()));
        let l = log.clone();
        let plugged = spawn_local(async move {
            raidd_rt::unplugged().await;
            l.borrow_mut().push("unplugged");
        });
        let l = log.clone();
        let busy = spawn_local(async move {
            for _ in 0..5 {
                raidd_rt::yield_now().await;
            }
            l.borrow_mut().push("busy");
        });
        busy.await;
        plugged.await;
        assert_eq!(*log.borrow(), vec!["busy", "unplugged"]);
        // Nothing else at all: released at the first idle moment.
        raidd_rt::unplugged().await;
    });
}
