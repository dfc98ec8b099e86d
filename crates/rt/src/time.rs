//! Timers on the driver (io_uring timeouts), and coarse time limits on futures.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use io_uring::types::Timespec;

use crate::driver::{Op, OpKind};
use crate::executor::driver;
use crate::slab::{Key, Slab};

/// Completes after `duration`.
pub async fn sleep(duration: Duration) {
    let ts = Box::new(Timespec::from(duration));
    let kind = OpKind::Timeout { ts: &*ts, duration };
    // SAFETY: the timespec is heap-allocated and owned by the op until completion.
    let op = unsafe { Op::start(&driver(), kind, ts) };
    // -ETIME is the normal expiry result; anything else (cancellation) also ends the sleep.
    let _ = op.await;
}

/// Completes at `deadline` (immediately if it has passed).
pub async fn sleep_until(deadline: Instant) {
    let now = Instant::now();
    if deadline > now {
        sleep(deadline - now).await;
    }
}

/// How finely [`timeout`] keeps its limits.
pub const TIMEOUT_TICK: Duration = Duration::from_millis(250);

/// Runs `fut` for at most `limit` (and at most one [`TIMEOUT_TICK`] more): `None` when it
/// took longer, and it is dropped then. Made for limits on every I/O: a future ready at its
/// first poll costs nothing, a waiting one a slot in this thread's table and no timer
/// operation of its own; the thread has one timer while any is waiting.
pub fn timeout<F: Future>(limit: Duration, fut: F) -> Timeout<F> {
    let ticks = limit.as_nanos().div_ceil(TIMEOUT_TICK.as_nanos());
    Timeout {
        fut,
        ticks: u64::try_from(ticks).unwrap_or(u64::MAX),
        entry: None,
    }
}

/// The future of [`timeout`].
#[derive(Debug)]
pub struct Timeout<F> {
    fut: F,
    ticks: u64,
    /// Its entry in this thread's table, once it has waited.
    entry: Option<Key>,
}

impl<F: Future> Future for Timeout<F> {
    type Output = Option<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: `fut` is structurally pinned (never moved out while pinned); the other
        // fields are plain data.
        let this = unsafe { self.get_unchecked_mut() };
        if let Some(k) = this.entry {
            if WATCH.with(|w| w.expired(k)) {
                this.entry = None;
                WATCH.with(|w| w.remove(k));
                return Poll::Ready(None);
            }
        }
        // SAFETY: see above; `fut` stays where it is.
        let fut = unsafe { Pin::new_unchecked(&mut this.fut) };
        match fut.poll(cx) {
            Poll::Ready(v) => {
                if let Some(k) = this.entry.take() {
                    WATCH.with(|w| w.remove(k));
                }
                Poll::Ready(Some(v))
            }
            Poll::Pending => {
                match this.entry {
                    Some(k) => WATCH.with(|w| w.set_waker(k, cx.waker())),
                    None => this.entry = Some(WATCH.with(|w| w.insert(this.ticks, cx.waker()))),
                }
                Poll::Pending
            }
        }
    }
}

impl<F> Drop for Timeout<F> {
    fn drop(&mut self) {
        if let Some(k) = self.entry.take() {
            // At thread exit the table may be gone already, and with it the entry.
            let _ = WATCH.try_with(|w| w.remove(k));
        }
    }
}

struct Entry {
    deadline: u64,
    waker: Waker,
    expired: bool,
}

/// This thread's waiting [`Timeout`]s. Its clock counts ticks, and runs only while some
/// wait: deadlines are in ticks of it.
#[derive(Default)]
struct Watch {
    now: Cell<u64>,
    entries: RefCell<Slab<Entry>>,
    ticking: Cell<bool>,
}

thread_local! {
    static WATCH: Watch = Watch::default();
}

impl Watch {
    fn insert(&self, ticks: u64, waker: &Waker) -> Key {
        debug_assert!(
            self.ticking.get() || self.entries.borrow().len() == 0,
            "the clock runs while entries wait"
        );
        let key = self.entries.borrow_mut().insert(Entry {
            deadline: self.now.get().saturating_add(ticks),
            waker: waker.clone(),
            expired: false,
        });
        if !self.ticking.replace(true) {
            crate::spawn_detached(tick());
        }
        debug_assert!(self.ticking.get(), "a waiting entry has a clock");
        key
    }

    fn set_waker(&self, key: Key, waker: &Waker) {
        if let Some(e) = self.entries.borrow_mut().get_mut(key) {
            if !e.waker.will_wake(waker) {
                e.waker = waker.clone();
            }
        }
    }

    fn expired(&self, key: Key) -> bool {
        self.entries.borrow().get(key).is_some_and(|e| e.expired)
    }

    fn remove(&self, key: Key) {
        let gone = self.entries.borrow_mut().remove(key);
        debug_assert!(gone.is_some(), "a timeout removes only its own entry, once");
    }

    /// One tick: wakes the entries whose deadline has come; false once none is left.
    fn advance(&self) -> bool {
        let now = self.now.get() + 1;
        self.now.set(now);
        let mut woken = Vec::new();
        {
            let mut entries = self.entries.borrow_mut();
            for k in entries.keys() {
                if let Some(e) = entries.get_mut(k) {
                    if !e.expired && e.deadline <= now {
                        e.expired = true;
                        woken.push(e.waker.clone());
                    }
                    debug_assert!(e.expired || e.deadline > now, "due entries are expired");
                }
            }
            if entries.len() == 0 {
                self.ticking.set(false);
                return false;
            }
        }
        for w in woken {
            w.wake();
        }
        true
    }
}

/// The thread's clock, while any [`Timeout`] waits.
async fn tick() {
    loop {
        sleep(TIMEOUT_TICK).await;
        if !WATCH.with(Watch::advance) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_gives_up_and_a_ready_future_passes() {
        crate::block_on(async {
            let r = timeout(Duration::from_millis(10), async { 5 }).await;
            assert_eq!(r, Some(5), "ready at once");
            let start = Instant::now();
            let r = timeout(Duration::from_millis(300), std::future::pending::<()>()).await;
            let took = start.elapsed();
            assert_eq!(r, None, "never ready: given up");
            assert!(
                took >= Duration::from_millis(300) && took < Duration::from_millis(900),
                "{took:?}"
            );
            let r = timeout(Duration::from_secs(5), sleep(Duration::from_millis(50))).await;
            assert_eq!(r, Some(()), "ready before the limit");
            WATCH.with(|w| assert_eq!(w.entries.borrow().len(), 0, "no entry left"));
        });
    }
}
