//! Spawning a task per request allocates nothing once the thread is warm: the task's future
//! lives in a block from the thread's pool and its waker is a finished task's, reused.
//! Counted by a global allocator that counts per thread.

#![allow(clippy::unwrap_used)] // test code

use std::cell::Cell;
use std::rc::Rc;
use std::task::Waker;

#[global_allocator]
static GLOBAL: raidd_rt::alloc_count::Counting = raidd_rt::alloc_count::Counting;

fn allocs() -> u64 {
    raidd_rt::alloc_count::allocations()
}

/// A task of about the size of a request's state, which waits for one turn of the
/// executor before it finishes.
async fn request(done: Rc<Cell<u32>>, pad: [u8; 3000]) {
    raidd_rt::yield_now().await;
    done.set(done.get() + u32::from(pad[0]) + 1);
}

/// Spawns `n` detached tasks in waves of 32 (like a connection's in-flight requests) and
/// waits for them all.
async fn waves(n: u32, done: &Rc<Cell<u32>>) {
    for _ in 0..n / 32 {
        let before = done.get();
        for _ in 0..32 {
            raidd_rt::spawn_detached(request(done.clone(), [0; 3000]));
        }
        while done.get() < before + 32 {
            raidd_rt::yield_now().await;
        }
    }
}

#[test]
fn detached_tasks_allocate_nothing_once_warm() {
    raidd_rt::block_on(async {
        let done = Rc::new(Cell::new(0));
        waves(256, &done).await;
        let before = allocs();
        waves(3200, &done).await;
        let per_task = (allocs() - before) as f64 / 3200.0;
        assert_eq!(done.get(), 256 + 3200);
        assert!(per_task == 0.0, "{per_task} allocations per spawned task");
    });
}

/// A finished task's waker is reused only when nothing else holds a clone: a clone kept
/// by someone else must not wake whichever task is spawned next.
#[test]
fn a_waker_still_held_elsewhere_is_not_given_to_a_new_task() {
    raidd_rt::block_on(async {
        let kept: Rc<Cell<Option<Waker>>> = Rc::new(Cell::new(None));
        let k = kept.clone();
        raidd_rt::spawn_local(std::future::poll_fn(move |cx| {
            k.set(Some(cx.waker().clone()));
            std::task::Poll::Ready(())
        }))
        .await;
        let polls = Rc::new(Cell::new(0u32));
        let p = polls.clone();
        // Pending until woken by its own waker: counts its polls.
        let task = raidd_rt::spawn_local(std::future::poll_fn(move |_| {
            p.set(p.get() + 1);
            if p.get() < 2 {
                std::task::Poll::Pending
            } else {
                std::task::Poll::Ready(())
            }
        }));
        raidd_rt::yield_now().await;
        assert_eq!(polls.get(), 1);
        // The first task's waker: if the new task had been given it, this would poll it.
        kept.take().unwrap().wake();
        for _ in 0..4 {
            raidd_rt::yield_now().await;
        }
        assert_eq!(polls.get(), 1, "a stale waker woke a new task");
        drop(task);
    });
}
