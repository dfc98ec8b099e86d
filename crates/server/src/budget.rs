//! Buffer memory the clients can make the server hold: one budget for the whole server
//! ([`Budget`], shared by every worker thread) and one per connection ([`Account`]). A
//! request reserves its bytes in both before its buffer is allocated (a WRITE's payload
//! before the first byte of it is received, a READ's before it runs); the reservation is a
//! [`Credit`], which travels with the request's buffer and gives the bytes back when it is
//! dropped: after a write is done, after a read's reply has been *sent* (the send queue
//! holds it until then). A connection whose client stops reading its replies therefore
//! stops being read from once its account is full, and the server as a whole stops taking
//! new requests once the budget is spent: back-pressure, never growth.
//!
//! A large WRITE's payload is the exception to reserving before the header's request runs:
//! its connection's account takes its whole length at the header, but the server's budget
//! only grows with the payload ([`Credit::poll_grow`], a piece before each is received, and
//! only once its bytes begin to arrive), so clients that send a header and stall hold none of
//! the budget that clients sending data need. Payloads that grow could deadlock, each
//! holding part and waiting for more; the budget therefore keeps a reserve as large as the
//! largest payload for one of them at a time, which takes the whole rest of its payload from
//! it and so always completes. Budgets too small for that reserve take payloads whole.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

/// A budget at least this many times the largest payload keeps a reserve of one payload
/// for those that grow; smaller ones take payloads whole at their header.
const RESERVE_FROM: u64 = 2;

/// The server's budget of request and reply buffer memory.
#[derive(Debug)]
pub struct Budget {
    limit: u64,
    /// Set aside for one growing payload at a time (0: payloads do not grow).
    reserve: u64,
    /// Taken from `limit - reserve`.
    used: AtomicU64,
    /// Taken from the reserve, by the one payload that holds it (0: it is free).
    reserve_used: AtomicU64,
    /// Readers waiting for room; woken (all) when bytes are given back.
    waiters: Mutex<Vec<Waker>>,
    /// Whether `waiters` may hold anyone: givers skip the lock while nobody waits.
    waiting: AtomicBool,
}

impl Budget {
    /// A budget of `limit` bytes for requests whose payloads are at most `max_payload`.
    pub fn new(limit: u64, max_payload: u64) -> Budget {
        let reserve = if max_payload > 0 && limit >= RESERVE_FROM * max_payload {
            max_payload
        } else {
            0
        };
        Budget {
            limit,
            reserve,
            used: AtomicU64::new(0),
            reserve_used: AtomicU64::new(0),
            waiters: Mutex::new(Vec::new()),
            waiting: AtomicBool::new(false),
        }
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Bytes reserved now (the reserve's included).
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed) + self.reserve_used.load(Ordering::Relaxed)
    }

    /// Whether large payloads take the budget as they arrive (it keeps a reserve for them).
    pub fn grows(&self) -> bool {
        self.reserve > 0
    }

    /// Reserves `bytes` if they fit beside the reserve.
    fn try_take(&self, bytes: u64) -> bool {
        let room = self.limit - self.reserve;
        let taken = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&u| u <= room)
            })
            .is_ok();
        debug_assert!(self.used() <= self.limit, "the budget is never overdrawn");
        taken
    }

    /// Takes the reserve for `bytes` (the whole rest of one payload) if no payload holds it.
    fn try_take_reserve(&self, bytes: u64) -> bool {
        debug_assert!(
            bytes > 0 && bytes <= self.reserve,
            "a payload fits the reserve"
        );
        self.reserve_used
            .compare_exchange(0, bytes, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Registers the task to be woken when bytes come back.
    fn wait(&self, cx: &Context<'_>) {
        let mut w = lock(&self.waiters);
        if !w.iter().any(|x| x.will_wake(cx.waker())) {
            w.push(cx.waker().clone());
        }
        self.waiting.store(true, Ordering::SeqCst);
    }

    /// Grows a payload's share by `bytes`, from beside the reserve or else (`rest`: all it
    /// still lacks) from the reserve; which one it took, or the task is registered to be
    /// woken.
    fn poll_grow(&self, bytes: u64, rest: u64, cx: &Context<'_>) -> Poll<Grown> {
        for _ in 0..2 {
            if self.try_take(bytes) {
                return Poll::Ready(Grown::Beside);
            }
            if self.grows() && self.try_take_reserve(rest) {
                return Poll::Ready(Grown::Reserve);
            }
            // The check is repeated once registered, as in `poll_take`.
            self.wait(cx);
        }
        Poll::Pending
    }

    /// Reserves `bytes`, or registers the task to be woken when bytes come back. The check
    /// is repeated after registering, so a give between the first check and the
    /// registration is not missed.
    fn poll_take(&self, bytes: u64, cx: &Context<'_>) -> Poll<()> {
        if self.try_take(bytes) {
            return Poll::Ready(());
        }
        self.wait(cx);
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
        self.wake_waiters();
    }

    /// The payload that held the reserve gives it back (`bytes`: what it took).
    fn give_reserve(&self, bytes: u64) {
        let before = self.reserve_used.swap(0, Ordering::AcqRel);
        assert_eq!(
            before, bytes,
            "budget: the reserve given back by its holder"
        );
        self.wake_waiters();
    }

    fn wake_waiters(&self) {
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

/// Bytes of the budget held outside any connection's account for as long as this lives (a
/// ublk device added while serving: its tags' buffers); given back when dropped.
#[derive(Debug)]
pub struct Held {
    budget: Arc<Budget>,
    bytes: u64,
}

impl Held {
    /// Holds `bytes` of `budget` if they fit now beside what is taken and the reserve.
    pub fn take(budget: &Arc<Budget>, bytes: u64) -> Option<Held> {
        budget.try_take(bytes).then(|| Held {
            budget: budget.clone(),
            bytes,
        })
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.budget.give(self.bytes);
    }
}

/// Where a payload's growth came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Grown {
    Beside,
    Reserve,
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
            beside: bytes,
            reserve: 0,
        })
    }

    /// Reserves a WRITE payload of `bytes`: all of them in the connection's account, as
    /// `poll_reserve` does; in the server's budget, where it grows, only what `first` says
    /// (the rest with [`Credit::poll_grow`] as the payload arrives).
    pub fn poll_reserve_payload(
        self: &Rc<Self>,
        bytes: u64,
        first: u64,
        cx: &Context<'_>,
    ) -> Poll<Credit> {
        if !self.server.grows() || first >= bytes {
            return self.poll_reserve(bytes, cx);
        }
        debug_assert!(bytes <= self.server.reserve, "a payload fits the reserve");
        let used = self.used.get();
        if used > 0 && used + bytes > self.limit {
            *self.waiter.borrow_mut() = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let Poll::Ready(mut c) = self.poll_reserve(first, cx) else {
            return Poll::Pending;
        };
        self.used.set(self.used.get() + bytes - first);
        c.bytes = bytes;
        Poll::Ready(c)
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
            beside: bytes,
            reserve: 0,
        })
    }

    /// Wakes the reader if it waits for room (the connection is ending, say).
    pub fn wake(&self) {
        if let Some(w) = self.waiter.borrow_mut().take() {
            w.wake();
        }
    }
}

/// Bytes reserved for one request's buffers; given back when dropped. The connection's
/// account holds `bytes`; the server's budget `beside + reserve` of them (all, but for a
/// payload still growing).
#[derive(Debug)]
pub struct Credit {
    account: Rc<Account>,
    bytes: u64,
    /// Taken from the budget beside its reserve.
    beside: u64,
    /// Taken from the budget's reserve (the whole rest of a payload that grew into it).
    reserve: u64,
}

impl Credit {
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Bytes the server's budget has granted so far.
    pub fn covered(&self) -> u64 {
        debug_assert!(
            self.beside + self.reserve <= self.bytes,
            "covers what it holds"
        );
        self.beside + self.reserve
    }

    /// Grows what the server's budget grants this credit to at least `to` bytes (at most
    /// its `bytes`), or registers the task to be woken when there may be room.
    pub fn poll_grow(&mut self, to: u64, cx: &Context<'_>) -> Poll<()> {
        let to = to.min(self.bytes);
        let covered = self.covered();
        if covered >= to {
            return Poll::Ready(());
        }
        let server = &self.account.server;
        match server.poll_grow(to - covered, self.bytes - covered, cx) {
            Poll::Ready(Grown::Beside) => self.beside += to - covered,
            Poll::Ready(Grown::Reserve) => self.reserve = self.bytes - covered,
            Poll::Pending => return Poll::Pending,
        }
        debug_assert!(self.covered() >= to, "grown as asked");
        Poll::Ready(())
    }

    /// Takes `other`'s bytes into this credit (both of one account): one request's
    /// reservations, made at different times, given back together.
    pub fn join(&mut self, other: Credit) {
        assert!(
            Rc::ptr_eq(&self.account, &other.account),
            "credits of different accounts joined"
        );
        assert!(
            self.reserve == 0 && other.reserve == 0,
            "only whole credits are joined"
        );
        self.bytes += other.bytes;
        self.beside += other.beside;
        std::mem::forget(other);
    }
}

impl Drop for Credit {
    fn drop(&mut self) {
        let a = &self.account;
        let used = a.used.get();
        assert!(used >= self.bytes, "account: gave back more than was taken");
        a.used.set(used - self.bytes);
        if self.beside > 0 {
            a.server.give(self.beside);
        }
        if self.reserve > 0 {
            a.server.give_reserve(self.reserve);
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
    fn held_bytes_leave_connections_less_room_until_dropped() {
        let server = Arc::new(Budget::new(100, 0));
        let held = Held::take(&server, 70).expect("room");
        assert!(Held::take(&server, 31).is_none(), "past the limit");
        let a = Account::new(server.clone(), 60);
        let (fa, wa) = waker();
        let ca = Context::from_waker(&wa);
        assert!(a.poll_reserve(40, &ca).is_pending());
        drop(held);
        assert_eq!(server.used(), 0);
        assert!(
            fa.0.load(Ordering::SeqCst),
            "the waiting connection is woken"
        );
        assert!(a.poll_reserve(40, &ca).is_ready());
    }

    #[test]
    fn credits_come_back_when_dropped_and_wake_the_waiting() {
        let server = Arc::new(Budget::new(100, 0));
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
        let server = Arc::new(Budget::new(1000, 0));
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

    fn ready<T>(p: Poll<T>, what: &str) -> T {
        match p {
            Poll::Ready(v) => v,
            Poll::Pending => panic!("{what}: pending"),
        }
    }

    #[test]
    fn payloads_grow_beside_the_reserve_and_one_at_a_time_into_it() {
        // 100 bytes, payloads up to 40: a reserve of 40 and 60 beside it.
        let server = Arc::new(Budget::new(100, 40));
        assert!(server.grows());
        let a = Account::new(server.clone(), 100);
        let b = Account::new(server.clone(), 100);
        let (fa, wa) = waker();
        let (fb, wb) = waker();
        let (ca, cb) = (Context::from_waker(&wa), Context::from_waker(&wb));
        let mut pa = ready(a.poll_reserve_payload(40, 0, &ca), "a's header");
        let mut pb = ready(b.poll_reserve_payload(40, 0, &cb), "b's header");
        assert_eq!((server.used(), a.used(), pa.covered()), (0, 40, 0));
        ready(pa.poll_grow(30, &ca), "a's first 30");
        ready(pb.poll_grow(30, &cb), "b's first 30");
        assert_eq!(server.used(), 60);
        // Beside the reserve is full: a takes the reserve for all it still lacks...
        ready(pa.poll_grow(35, &ca), "a into the reserve");
        assert_eq!((pa.covered(), server.used()), (40, 70));
        // ...and b, lacking 10, waits: the reserve is a's.
        assert!(pb.poll_grow(40, &cb).is_pending());
        // A whole request beside the reserve waits too.
        assert!(b.try_reserve(1).is_none());
        drop(pa);
        assert!(
            fb.0.load(Ordering::SeqCst),
            "b woken when the reserve comes back"
        );
        assert!(!fa.0.load(Ordering::SeqCst));
        assert_eq!((server.used(), a.used()), (30, 0));
        ready(pb.poll_grow(40, &cb), "b beside the reserve");
        assert_eq!(server.used(), 40);
        drop(pb);
        assert_eq!((server.used(), b.used()), (0, 0));
    }

    #[test]
    fn small_budgets_and_small_payloads_take_them_whole() {
        // Less than two payloads: no reserve, payloads reserved whole at their header.
        let server = Arc::new(Budget::new(60, 40));
        assert!(!server.grows());
        let a = Account::new(server.clone(), 60);
        let (_, w) = waker();
        let cx = Context::from_waker(&w);
        let p = ready(a.poll_reserve_payload(40, 0, &cx), "header");
        assert_eq!((p.covered(), server.used()), (40, 40));
        drop(p);
        // A payload within `first` is reserved whole in a budget that grows.
        let server = Arc::new(Budget::new(100, 40));
        let a = Account::new(server.clone(), 100);
        let p = ready(a.poll_reserve_payload(8, 8, &cx), "small");
        assert_eq!((p.covered(), server.used()), (8, 8));
    }

    #[test]
    fn a_payload_waits_for_room_in_its_connections_account() {
        let server = Arc::new(Budget::new(1000, 40));
        let a = Account::new(server.clone(), 50);
        let (fa, w) = waker();
        let cx = Context::from_waker(&w);
        let held = ready(a.poll_reserve(20, &cx), "a read");
        // 20 + 40 > 50: the account has no room for the payload, though the budget has.
        assert!(a.poll_reserve_payload(40, 0, &cx).is_pending());
        assert_eq!((server.used(), a.used()), (20, 20));
        drop(held);
        assert!(fa.0.load(Ordering::SeqCst));
        let p = ready(a.poll_reserve_payload(40, 0, &cx), "now");
        assert_eq!((a.used(), server.used(), p.covered()), (40, 0, 0));
    }
}
