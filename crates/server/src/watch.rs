//! Time limits on what a client makes the server wait for. Each connection has a [`Watch`]
//! that its reader and its send queue stamp as they wait (for the rest of a request, for
//! the next request, for the client to take replies); one watchdog per worker thread looks
//! at its connections every [`TICK`] and closes those that waited too long, so a client
//! that stalls in the middle of a request, or stops reading its replies, gives back its
//! connection and the memory its requests hold.
//!
//! The stamps are plain cells on the connection's thread; the watchdog runs there too, so
//! the check costs the data path one clock read per wait, never per byte.

use std::cell::{Cell, RefCell};
use std::rc::{Rc, Weak};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use raidd_rt::net::Stream;
use raidd_rt::JoinHandle;

/// How often a worker's watchdog looks at its connections: limits are kept to within this.
pub const TICK: Duration = Duration::from_secs(1);

/// The limits, from the config.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// A request whose bytes stop arriving for this long closes its connection.
    pub request: Duration,
    /// Replies the client does not take for this long close the connection.
    pub send: Duration,
    /// A connection with nothing in flight and no request for this long is closed (`None`:
    /// never; NBD's default, as kernel clients keep idle connections).
    pub idle: Option<Duration>,
}

/// What a connection's reader waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Nothing from the client: the server is busy, or waits for room (its own
    /// back-pressure), or requests are in flight.
    Nothing,
    /// The next request, with none in flight.
    Idle,
    /// The rest of a request (its header, payload or data segment) that has begun.
    Request,
}

/// One connection's stamps.
#[derive(Debug)]
pub struct Watch {
    sock: Stream,
    /// Its frontend's limits.
    limits: Limits,
    wait: Cell<Wait>,
    /// When `wait` began, or when the last bytes of the awaited request arrived.
    since: Cell<Instant>,
    /// Since when the send queue has been sending a batch the socket did not take at once.
    sending_since: Cell<Option<Instant>>,
    /// Why the watchdog closed the connection.
    closed_for: Cell<Option<&'static str>>,
    /// Set when what the connection serves is taken away (an export removed): the watchdog
    /// then shuts its read side, so it takes no more requests.
    serves: RefCell<Option<Arc<AtomicBool>>>,
    /// Its read side was shut for that.
    read_stopped: Cell<bool>,
}

impl Watch {
    pub fn new(sock: Stream, limits: Limits) -> Rc<Watch> {
        Rc::new(Watch {
            sock,
            limits,
            wait: Cell::new(Wait::Nothing),
            since: Cell::new(Instant::now()),
            sending_since: Cell::new(None),
            closed_for: Cell::new(None),
            serves: RefCell::new(None),
            read_stopped: Cell::new(false),
        })
    }

    /// The connection serves what `gone` says is taken away once set.
    pub fn serves(&self, gone: Arc<AtomicBool>) {
        *self.serves.borrow_mut() = Some(gone);
    }

    /// Whether what it serves was taken away and its read side not yet shut.
    fn taken_away(&self) -> bool {
        !self.read_stopped.get()
            && self
                .serves
                .borrow()
                .as_ref()
                .is_some_and(|g| g.load(Ordering::SeqCst))
    }

    /// The reader now waits for `w` (or, waiting for the same, got some of it: the clock
    /// starts again).
    pub fn waiting(&self, w: Wait) {
        self.wait.set(w);
        if w != Wait::Nothing {
            self.since.set(Instant::now());
        }
    }

    /// The send queue started (`true`) or finished (`false`) sending a batch.
    pub fn sending(&self, on: bool) {
        debug_assert_ne!(self.sending_since.get().is_some(), on, "sends do not nest");
        self.sending_since.set(on.then(Instant::now));
    }

    /// Why the watchdog closed the connection, if it did.
    pub fn closed_for(&self) -> Option<&'static str> {
        self.closed_for.get()
    }

    /// What limit the connection has gone past at `now`, if any.
    fn overdue(&self, now: Instant, limits: &Limits) -> Option<&'static str> {
        let waited = now.saturating_duration_since(self.since.get());
        match self.wait.get() {
            Wait::Request if waited >= limits.request => {
                return Some("a request stalled: no byte of it arrived within request_timeout")
            }
            Wait::Idle if limits.idle.is_some_and(|l| waited >= l) => {
                return Some("idle for longer than idle_timeout")
            }
            _ => {}
        }
        let sending = self
            .sending_since
            .get()
            .map(|s| now.saturating_duration_since(s));
        if sending.is_some_and(|s| s >= limits.send) {
            return Some("the client took no reply within send_timeout");
        }
        None
    }

    /// Closes the connection for `why`: both directions shut, so the reader's and the
    /// writer's waits end with errors and the connection's tasks wind down.
    fn close(&self, why: &'static str) {
        if self.closed_for.get().is_none() {
            self.closed_for.set(Some(why));
            let _ = self.sock.shutdown(std::net::Shutdown::Both);
        }
        debug_assert!(
            self.closed_for.get().is_some(),
            "a closed connection says why"
        );
    }
}

/// A worker thread's live connections: watched, stopped together, and waited for at the
/// end. Holds no descriptor: a connection's socket closes when its task ends.
#[derive(Debug, Default)]
pub struct Registry {
    conns: RefCell<Vec<(Weak<Watch>, JoinHandle<()>)>>,
}

impl Registry {
    pub fn add(&self, watch: &Rc<Watch>, task: JoinHandle<()>) {
        let mut c = self.conns.borrow_mut();
        c.retain(|(_, t)| !t.is_finished());
        c.push((Rc::downgrade(watch), task));
        debug_assert!(
            watch.closed_for().is_none(),
            "a connection is watched from its start"
        );
    }

    /// Closes the connections that went past a limit.
    pub fn check(&self) {
        let now = Instant::now();
        let mut c = self.conns.borrow_mut();
        c.retain(|(_, t)| !t.is_finished());
        for w in c.iter().filter_map(|(w, _)| w.upgrade()) {
            if w.taken_away() {
                tracing::info!(peer = ?w.sock.peer_addr().ok(), "what the connection serves was removed: it takes no more requests");
                w.read_stopped.set(true);
                let _ = w.sock.shutdown(std::net::Shutdown::Read);
            }
            if let Some(why) = w.overdue(now, &w.limits) {
                tracing::info!(peer = ?w.sock.peer_addr().ok(), "closing a connection: {why}");
                w.close(why);
            }
        }
    }

    /// The daemon stops: no connection reads another request. Shutting the read side
    /// ends each reader's wait for its next request; requests already taken finish and
    /// their replies still go out.
    pub fn stop_reading(&self) {
        for (w, t) in self.conns.borrow().iter() {
            if let (false, Some(w)) = (t.is_finished(), w.upgrade()) {
                let _ = w.sock.shutdown(std::net::Shutdown::Read);
            }
        }
    }

    /// Waits for every connection's task to end.
    pub async fn drained(&self) {
        let tasks: Vec<_> = self.conns.borrow_mut().drain(..).map(|(_, t)| t).collect();
        for t in tasks {
            t.await;
        }
        debug_assert!(
            self.conns.borrow().is_empty(),
            "no connection starts while draining"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(idle: Option<u64>) -> Limits {
        Limits {
            request: Duration::from_secs(30),
            send: Duration::from_secs(20),
            idle: idle.map(Duration::from_secs),
        }
    }

    #[test]
    fn each_wait_has_its_limit() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().expect("pair");
        let w = Watch::new(Stream::from(a), limits(None));
        let t0 = w.since.get();
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert_eq!(w.overdue(at(1000), &limits(None)), None, "nothing awaited");
        w.waiting(Wait::Request);
        let t0 = w.since.get();
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert_eq!(w.overdue(at(29), &limits(None)), None);
        assert!(w
            .overdue(at(30), &limits(None))
            .is_some_and(|s| s.contains("request")));
        w.waiting(Wait::Idle);
        let t0 = w.since.get();
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert_eq!(w.overdue(at(100_000), &limits(None)), None, "idle allowed");
        assert!(w
            .overdue(at(60), &limits(Some(60)))
            .is_some_and(|s| s.contains("idle")));
        w.waiting(Wait::Nothing);
        w.sending(true);
        let t0 = w.sending_since.get().expect("sending");
        assert_eq!(w.overdue(t0 + Duration::from_secs(19), &limits(None)), None);
        assert!(w
            .overdue(t0 + Duration::from_secs(20), &limits(None))
            .is_some_and(|s| s.contains("reply")));
        w.sending(false);
        assert_eq!(
            w.overdue(t0 + Duration::from_secs(1000), &limits(None)),
            None
        );
    }
}
