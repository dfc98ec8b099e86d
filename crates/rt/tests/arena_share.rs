//! A thread that used most of the registered arena keeps at most half of it in its pool;
//! the rest goes back to the arena, where another thread's buffers find it. (A process of
//! its own: the test uses the whole arena.)
#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod direct;

use raidd_rt::{block_on, io_stats, AlignedBuf};

#[test]
fn a_thread_that_freed_the_whole_arena_leaves_half_for_others() {
    raidd_rt::register_arena(4 << 20).unwrap();
    // Thread A takes the whole arena in 1 MiB buffers and frees them, and stays alive (a
    // thread's pool is emptied when it ends) until B is done.
    let (freed_tx, freed_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let a = std::thread::spawn(move || {
        let bufs: Vec<AlignedBuf> = (0..4).map(|_| AlignedBuf::zeroed(1 << 20)).collect();
        drop(bufs);
        freed_tx.send(()).unwrap();
        done_rx.recv().unwrap();
    });
    freed_rx.recv().unwrap();
    // Thread B's 1 MiB buffer still comes from the arena: its write goes out fixed.
    let (_d, f) = direct::file();
    std::thread::spawn(move || {
        block_on(async move {
            let s0 = io_stats();
            let (r, _) = f.write_all_at(AlignedBuf::zeroed(1 << 20), 0).await;
            r.unwrap();
            let s = io_stats();
            assert_eq!(s.fixed - s0.fixed, 1, "the buffer came from the arena");
        });
    })
    .join()
    .unwrap();
    done_tx.send(()).unwrap();
    a.join().unwrap();
}
