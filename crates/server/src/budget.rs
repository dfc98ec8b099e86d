//! Buffer memory the clients can make the server hold: one budget for the whole server
//! ([`Budget`], shared by every worker thread) and one per connection ([`Account`]). A
//! request reserves its bytes in both before its buffer is allocated (a WRITE's payload
//! before the first byte of it is received, a READ's before it runs); the reservation is a
//! [`Credit`], which travels with the request's buffer and gives the bytes back when it is
//! dropped: after a write is done, after a read's reply has been *sent* (the send queue
//! holds it until then). A connection whose client stops reading its replies therefore
//! stops being read from once its account is full, and the server as a whole stops taking
//! new requests once the budget is spent: back-pressure, never growth.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

/// The server's budget of request and reply buffer memory.
#[derive(Debug)]
pub struct Budget {
    limit: u64,
    used: AtomicU64,
    /// Readers waiting for room; woken (all) when bytes are given back.
    waiters: Mutex<Vec<Waker>>,
    /// Whether `waiters` may hold anyone: givers skip the lock while nobody waits.
    waiting: AtomicBool,
}

impl Budget {
    pub fn new(limit: u64) -> Budget {
        Budget {
            limit,
            used: AtomicU64::new(0),
            waiters: Mutex::new(Vec::new()),
            waiting: AtomicBool::new(false),
        }
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Bytes reserved now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// Reserves `bytes` if they fit.
    fn try_take(&self, bytes: u64) -> bool {
        let taken = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&u| u <= self.limit)
            })
            .is_ok();
        debug_assert!(self.used() <= self.limit, "the budget is never overdrawn");
        taken
    }

    /// Reserves `bytes`, or registers the task to be woken when bytes come back. The check
    /// is repeated after registering, so a give between the first check and the
    /// registration is not missed.
    fn poll_take(&self, bytes: u64, cx: &Context<'_>) -> Poll<()> {
        if self.try_take(bytes) {
            return Poll::Ready(());
        }
        {
            let mut w = lock(&self.waiters);
            if !w.iter().any(|x| x.will_wake(cx.waker())) {
                w.push(cx.waker().clone());
            }
            self.waiting.store(true, Ordering::SeqCst);
        }
        if self.try_take(bytes) {
            return Poll::Ready(());
        }
        Poll::Pending
    }

    fn give(&self, bytes: u64) {
        let before = self.used.fetch_sub(bytes, Ordering::AcqRel);
        assert!(
            before >= bytes,
            "budget: gave back {bytes} bytes, {before} were taken"
        );
        if self.waiting.load(Ordering::SeqCst) {
            let ws = {
                let mut w = lock(&self.waiters);
                self.waiting.store(false, Ordering::SeqCst);
                std::mem::take(&mut *w)
            };
            for w in ws {
                w.wake();
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().expect(crate::POISONED)
}

/// One connection's share: at most `limit` bytes (and the server's budget) at once. Lives
/// on the connection's thread.
#[derive(Debug)]
pub struct Account {
    server: Arc<Budget>,
    limit: u64,
    used: Cell<u64>,
    /// The connection's reader, waiting for room.
    waiter: RefCell<Option<Waker>>,
}

impl Account {
    pub fn new(server: Arc<Budget>, limit: u64) -> Rc<Account> {
        Rc::new(Account {
            server,
            limit,
            used: Cell::new(0),
            waiter: RefCell::new(None),
        })
    }

    /// Bytes this connection holds now.
    #[cfg(test)]
    fn used(&self) -> u64 {
        self.used.get()
    }

    /// Reserves `bytes` in the connection's account and in the server's budget, or
    /// registers the task to be woken when either has room. A connection holding nothing
    /// may always take one request up to its whole limit (`bytes` is never more than that:
    /// requests are bounded by the protocol limits, which are below every account's).
    pub fn poll_reserve(self: &Rc<Self>, bytes: u64, cx: &Context<'_>) -> Poll<Credit> {
        debug_assert!(bytes <= self.limit, "a request larger than its account");
        let used = self.used.get();
        if used > 0 && used + bytes > self.limit {
            *self.waiter.borrow_mut() = Some(cx.waker().clone());
            return Poll::Pending;
        }
        if bytes > 0 && self.server.poll_take(bytes, cx).is_pending() {
            return Poll::Pending;
        }
        debug_assert!(
            used == 0 || used + bytes <= self.limit,
            "past its limit only when empty"
        );
        self.used.set(used + bytes);
        Poll::Ready(Credit {
            account: self.clone(),
            bytes,
        })
    }

    /// Reserves `bytes` if both the account and the server's budget have room now.
    pub fn try_reserve(self: &Rc<Self>, bytes: u64) -> Option<Credit> {
        let used = self.used.get();
        if used > 0 && used + bytes > self.limit {
            return None;
        }
        if bytes > 0 && !self.server.try_take(bytes) {
            return None;
        }
        debug_assert!(
            used == 0 || used + bytes <= self.limit,
            "past its limit only when empty"
        );
        self.used.set(used + bytes);
        Some(Credit {
            account: self.clone(),
            bytes,
        })
    }

    /// Wakes the reader if it waits for room (the connection is ending, say).
    pub fn wake(&self) {
        if let Some(w) = self.waiter.borrow_mut().take() {
            w.wake();
        }
    }
}

/// Bytes reserved for one request's buffers; given back when dropped.
#[derive(Debug)]
pub struct Credit {
    account: Rc<Account>,
    bytes: u64,
}

impl Credit {
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Takes `other`'s bytes into this credit (both of one account): one request's
    /// reservations, made at different times, given back together.
    pub fn join(&mut self, other: Credit) {
        assert!(
            Rc::ptr_eq(&self.account, &other.account),
            "credits of different accounts joined"
        );
        self.bytes += other.bytes;
        std::mem::forget(other);
    }
}

impl Drop for Credit {
    fn drop(&mut self) {
        let a = &self.account;
        let used = a.used.get();
        assert!(used >= self.bytes, "account: gave back more than was taken");
        a.used.set(used - self.bytes);
        if self.bytes > 0 {
            a.server.give(self.bytes);
        }
        a.wake();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Wake;

    struct Flag(AtomicBool);
    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    fn waker() -> (Arc<Flag>, Waker) {
        let f = Arc::new(Flag(AtomicBool::new(false)));
        (f.clone(), Waker::from(f))
    }

    #[test]
    fn credits_come_back_when_dropped_and_wake_the_waiting() {
        let server = Arc::new(Budget::new(100));
        let a = Account::new(server.clone(), 60);
        let b = Account::new(server.clone(), 60);
        let (fa, wa) = waker();
        let (fb, wb) = waker();
        let ca = Context::from_waker(&wa);
        let cb = Context::from_waker(&wb);
        let Poll::Ready(c1) = a.poll_reserve(50, &ca) else {
            panic!("room")
        };
        // The connection's own limit: 50 + 20 > 60.
        assert!(a.poll_reserve(20, &ca).is_pending());
        let Poll::Ready(c2) = b.poll_reserve(50, &cb) else {
            panic!("room")
        };
        assert_eq!(server.used(), 100);
        // The server's budget: b's account has room, the server has none.
        assert!(b.poll_reserve(10, &cb).is_pending());
        drop(c1);
        assert!(
            fa.0.load(Ordering::SeqCst),
            "a's reader woken by its own credit"
        );
        assert!(
            fb.0.load(Ordering::SeqCst),
            "b's reader woken by the server's budget"
        );
        assert_eq!((server.used(), a.used()), (50, 0));
        let Poll::Ready(c3) = b.poll_reserve(10, &cb) else {
            panic!("room now")
        };
        assert_eq!((server.used(), b.used()), (60, 60));
        drop((c2, c3));
        assert_eq!(server.used(), 0);
    }

    #[test]
    fn an_idle_connection_may_take_up_to_its_limit() {
        let server = Arc::new(Budget::new(1000));
        let a = Account::new(server.clone(), 64);
        let (_, w) = waker();
        let cx = Context::from_waker(&w);
        let Poll::Ready(c) = a.poll_reserve(64, &cx) else {
            panic!("an empty account takes its limit")
        };
        assert!(a.poll_reserve(1, &cx).is_pending());
        drop(c);
        assert!(a.poll_reserve(1, &cx).is_ready());
    }
}
