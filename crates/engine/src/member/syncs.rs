//! Coalesced flushes: callers who ask for a flush while one runs share the next one. A
//! flush makes durable what was written before it *started*, so a caller who arrives while
//! one runs needs the next; everyone who arrives before that next one starts shares it.
//! Many clients flushing at once (NBD's FLUSH on every connection, FUA writes) cost one
//! fsync per round instead of one each.
//!
//! Generations number the flushes; a caller waits for the first generation that starts
//! after it asked, and gets that flush's failure (or a later one's: an fsync error is
//! reported once, so a later success does not prove earlier writes durable).

use std::future::Future;
use std::io;
use std::sync::Mutex;
use std::task::{Poll, Waker};

#[derive(Debug, Default)]
struct State {
    /// Flushes started, and finished (one runs at a time, so `done` trails by at most one).
    started: u64,
    done: u64,
    running: bool,
    /// The newest generation that failed, and how.
    failed: Option<(u64, io::ErrorKind, String)>,
    waiters: Vec<Waker>,
}

/// One member's flushes.
#[derive(Debug, Default)]
pub(crate) struct Syncs {
    state: Mutex<State>,
}

/// What a caller does next.
enum Turn {
    /// Its flush has finished: this is the outcome.
    Done(io::Result<()>),
    /// It runs flush generation `n` itself.
    Run(u64),
}

fn lock(m: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    m.lock().expect(crate::POISONED)
}

impl State {
    fn outcome(&self, target: u64) -> io::Result<()> {
        match &self.failed {
            Some((g, kind, msg)) if *g >= target => Err(io::Error::new(*kind, msg.clone())),
            _ => Ok(()),
        }
    }
}

/// Ends generation `n` when dropped: as it went, or as failed if the flush was abandoned
/// (a caller's timeout dropped it), so the others do not wait for it for ever.
struct Running<'a> {
    syncs: &'a Syncs,
    n: u64,
    result: Option<io::Result<()>>,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        let mut s = lock(&self.syncs.state);
        debug_assert!(s.running && s.started == self.n, "one flush at a time");
        s.running = false;
        s.done = self.n;
        match self.result.take() {
            Some(Ok(())) => {}
            Some(Err(e)) => s.failed = Some((self.n, e.kind(), e.to_string())),
            None => s.failed = Some((self.n, io::ErrorKind::Interrupted, "flush abandoned".into())),
        }
        for w in s.waiters.drain(..) {
            w.wake();
        }
    }
}

impl Syncs {
    /// Runs `flush` or shares one that starts after this call; its outcome.
    pub(crate) async fn run<F>(&self, flush: impl FnOnce() -> F) -> io::Result<()>
    where
        F: Future<Output = io::Result<()>>,
    {
        let target = lock(&self.state).started + 1;
        let turn = std::future::poll_fn(|cx| {
            let mut s = lock(&self.state);
            if s.done >= target {
                return Poll::Ready(Turn::Done(s.outcome(target)));
            }
            if !s.running {
                debug_assert_eq!(s.started + 1, target, "the flush this caller needs is next");
                s.started = target;
                s.running = true;
                return Poll::Ready(Turn::Run(target));
            }
            if !s.waiters.iter().any(|w| w.will_wake(cx.waker())) {
                s.waiters.push(cx.waker().clone());
            }
            Poll::Pending
        })
        .await;
        let n = match turn {
            Turn::Done(r) => return r,
            Turn::Run(n) => n,
        };
        let mut running = Running {
            syncs: self,
            n,
            result: None,
        };
        let r = flush().await;
        running.result = Some(match &r {
            Ok(()) => Ok(()),
            Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
        });
        drop(running);
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::rc::Rc;

    #[test]
    fn callers_during_a_flush_share_the_next_one() {
        let syncs = Rc::new(Syncs::default());
        let count = Rc::new(Cell::new(0u32));
        raidd_rt::block_on({
            let (syncs, count) = (syncs.clone(), count.clone());
            async move {
                let flush = |fail: bool| {
                    let count = count.clone();
                    move || async move {
                        count.set(count.get() + 1);
                        for _ in 0..3 {
                            raidd_rt::yield_now().await;
                        }
                        if fail {
                            Err(io::Error::other("disk gone"))
                        } else {
                            Ok(())
                        }
                    }
                };
                // One runs; four arrive while it runs and share one more.
                let first = syncs.run(flush(false));
                let rest: Vec<_> = (0..4).map(|_| syncs.run(flush(false))).collect();
                let (a, b) = futures::join!(first, futures::future::join_all(rest));
                assert!(a.is_ok() && b.iter().all(|r| r.is_ok()));
                assert_eq!(count.get(), 2, "five callers, two flushes");
                // A failed flush fails everyone who shared it, and not those after.
                let (a, b) = futures::join!(syncs.run(flush(true)), syncs.run(flush(true)));
                assert!(a.is_err() && b.is_err(), "{a:?} {b:?}");
                assert!(syncs.run(flush(false)).await.is_ok());
                // An abandoned flush fails those who waited for it, and the next one runs.
                {
                    let stuck = syncs.run(std::future::pending::<io::Result<()>>);
                    let waiting = syncs.run(flush(false));
                    futures::pin_mut!(stuck, waiting);
                    assert!(futures::poll!(stuck.as_mut()).is_pending());
                    assert!(futures::poll!(waiting.as_mut()).is_pending());
                }
                assert!(syncs.run(flush(false)).await.is_ok(), "not wedged");
            }
        });
    }
}
