//! What keeps the write-back cache's users apart (`write_back.rs`):
//! - [`StripeHolds`]: exclusive holds on runs of stripes, exact per stripe and taken all
//!   at once: a holder never waits for one stripe while it holds another, so no two can
//!   wait for each other, and two stripes never share a hold (unlike the parity path's
//!   hashed locks): writes into the cache and the destage of a stripe keep apart by them.
//! - [`ModeGate`]: writes against a switch of the journal's mode.

use std::collections::BTreeSet;
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::task::{Poll, Waker};

#[derive(Debug, Default)]
pub(crate) struct StripeHolds {
    st: Mutex<Holds>,
}

#[derive(Debug, Default)]
struct Holds {
    held: BTreeSet<u64>,
    /// Tasks waiting for some stripe to be let go (each wakes and looks again).
    waiting: Vec<Waker>,
}

/// Stripes held until dropped.
#[derive(Debug)]
pub(crate) struct Hold<'a> {
    holds: &'a StripeHolds,
    stripes: RangeInclusive<u64>,
}

impl StripeHolds {
    /// Holds every stripe of `stripes` once none of them is held.
    pub(crate) async fn hold(&self, stripes: RangeInclusive<u64>) -> Hold<'_> {
        assert!(
            stripes.start() <= stripes.end(),
            "inverted stripe range {stripes:?}"
        );
        std::future::poll_fn(|cx| {
            let mut st = self.st.lock().expect(crate::POISONED);
            if st.held.range(stripes.clone()).next().is_some() {
                st.waiting.push(cx.waker().clone());
                return Poll::Pending;
            }
            st.held.extend(stripes.clone());
            Poll::Ready(())
        })
        .await;
        Hold {
            holds: self,
            stripes,
        }
    }

    #[cfg(test)]
    fn held(&self) -> usize {
        self.st.lock().expect(crate::POISONED).held.len()
    }
}

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        let waiting = {
            let mut st = self.holds.st.lock().expect(crate::POISONED);
            for s in self.stripes.clone() {
                let was = st.held.remove(&s);
                debug_assert!(was, "stripe {s} was held");
            }
            std::mem::take(&mut st.waiting)
        };
        waiting.into_iter().for_each(Waker::wake);
    }
}

/// Writes against a change of mode: a write takes a pass for as long as it runs; a switch
/// holds new passes back, waits for those out, and has the array to itself until it is
/// dropped (md suspends the array to change its journal's mode the same way).
///
/// Every write of a journal array takes a pass, so a pass is two atomic operations while
/// no switch runs; the lock is taken only around a switch.
#[derive(Debug, Default)]
pub(crate) struct ModeGate {
    passes: AtomicUsize,
    switching: AtomicBool,
    st: Mutex<GateState>,
}

#[derive(Debug, Default)]
struct GateState {
    /// A switch holds the gate (one at a time).
    held: bool,
    waiting: Vec<Waker>,
}

/// A write's pass (see [`ModeGate`]).
#[derive(Debug)]
pub(crate) struct Pass<'a>(&'a ModeGate);

/// A switch's hold on the whole gate.
#[derive(Debug)]
pub(crate) struct Switch<'a>(&'a ModeGate);

impl ModeGate {
    pub(crate) async fn pass(&self) -> Pass<'_> {
        loop {
            // Counted first, then the flag read: a switch that sets its flag and then reads
            // the count sees this pass, or this pass sees the flag (both SeqCst).
            self.passes.fetch_add(1, Ordering::SeqCst);
            if !self.switching.load(Ordering::SeqCst) {
                return Pass(self);
            }
            self.let_go();
            self.wait_for(|st, gate| !st.held && !gate.switching.load(Ordering::SeqCst))
                .await;
        }
    }

    pub(crate) async fn switch(&self) -> Switch<'_> {
        // First the gate (one switch at a time), then the passes out drain away.
        self.wait_for(|st, _| !std::mem::replace(&mut st.held, true))
            .await;
        self.switching.store(true, Ordering::SeqCst);
        let switch = Switch(self);
        self.wait_for(|_, gate| gate.passes.load(Ordering::SeqCst) == 0)
            .await;
        switch
    }

    /// Waits until `ready` (looked at under the lock) says so.
    async fn wait_for(&self, mut ready: impl FnMut(&mut GateState, &ModeGate) -> bool) {
        std::future::poll_fn(|cx| {
            let mut st = self.st.lock().expect(crate::POISONED);
            if ready(&mut st, self) {
                return Poll::Ready(());
            }
            st.waiting.push(cx.waker().clone());
            Poll::Pending
        })
        .await;
    }

    /// A pass let go: the last one out wakes a switch waiting for it.
    fn let_go(&self) {
        let was = self.passes.fetch_sub(1, Ordering::SeqCst);
        debug_assert!(was > 0, "a pass was counted");
        if was == 1 && self.switching.load(Ordering::SeqCst) {
            self.wake();
        }
    }

    fn wake(&self) {
        let waiting = std::mem::take(&mut self.st.lock().expect(crate::POISONED).waiting);
        waiting.into_iter().for_each(Waker::wake);
    }
}

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        self.0.let_go();
    }
}

impl Drop for Switch<'_> {
    fn drop(&mut self) {
        self.0.switching.store(false, Ordering::SeqCst);
        {
            let mut st = self.0.st.lock().expect(crate::POISONED);
            debug_assert!(st.held, "a switch holds the gate");
            st.held = false;
        }
        self.0.wake();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;

    #[test]
    fn a_switch_waits_for_the_passes_out_and_holds_new_ones() {
        raidd_rt::block_on(async {
            let gate = Rc::new(ModeGate::default());
            let log = Rc::new(RefCell::new(Vec::new()));
            let out = gate.pass().await;
            let (g, l) = (gate.clone(), log.clone());
            let switch = raidd_rt::spawn_local(async move {
                let s = g.switch().await;
                l.borrow_mut().push("switched");
                raidd_rt::yield_now().await;
                l.borrow_mut().push("switch done");
                drop(s);
            });
            let (g, l) = (gate.clone(), log.clone());
            for _ in 0..3 {
                raidd_rt::yield_now().await;
            }
            let late = raidd_rt::spawn_local(async move {
                let _p = g.pass().await;
                l.borrow_mut().push("late write");
            });
            for _ in 0..3 {
                raidd_rt::yield_now().await;
            }
            assert!(log.borrow().is_empty(), "a pass is out");
            log.borrow_mut().push("write done");
            drop(out);
            switch.await;
            late.await;
            assert_eq!(
                *log.borrow(),
                ["write done", "switched", "switch done", "late write"]
            );
        });
    }

    #[test]
    fn passes_on_many_threads_never_overlap_a_switch() {
        use std::sync::atomic::{AtomicBool, AtomicU64};
        use std::sync::Arc;
        let gate = Arc::new(ModeGate::default());
        let in_switch = Arc::new(AtomicBool::new(false));
        let passes = Arc::new(AtomicU64::new(0));
        let writers: Vec<_> = (0..3)
            .map(|_| {
                let (gate, in_switch, passes) = (gate.clone(), in_switch.clone(), passes.clone());
                std::thread::spawn(move || {
                    raidd_rt::block_on(async move {
                        for _ in 0..20_000 {
                            let _p = gate.pass().await;
                            assert!(!in_switch.load(Ordering::SeqCst), "a pass inside a switch");
                            passes.fetch_add(1, Ordering::Relaxed);
                        }
                    })
                })
            })
            .collect();
        let (g, sw) = (gate.clone(), in_switch.clone());
        raidd_rt::block_on(async move {
            let (gate, in_switch) = (g, sw);
            for _ in 0..200 {
                let s = gate.switch().await;
                in_switch.store(true, Ordering::SeqCst);
                std::thread::yield_now();
                in_switch.store(false, Ordering::SeqCst);
                drop(s);
            }
        });
        for w in writers {
            w.join().expect("a writer thread");
        }
        assert_eq!(passes.load(Ordering::Relaxed), 60_000);
    }

    #[test]
    fn overlapping_runs_wait_and_disjoint_ones_do_not() {
        raidd_rt::block_on(async {
            let holds = Rc::new(StripeHolds::default());
            let log = Rc::new(RefCell::new(Vec::new()));
            let a = holds.hold(3..=5).await;
            // Disjoint, right next to it: at once.
            drop(holds.hold(6..=9).await);
            let (h, l) = (holds.clone(), log.clone());
            let waiter = raidd_rt::spawn_local(async move {
                let _b = h.hold(5..=6).await;
                l.borrow_mut().push("b");
            });
            for _ in 0..3 {
                raidd_rt::yield_now().await;
            }
            assert!(log.borrow().is_empty(), "5 is held");
            assert_eq!(holds.held(), 3);
            log.borrow_mut().push("a let go");
            drop(a);
            waiter.await;
            assert_eq!(*log.borrow(), ["a let go", "b"]);
            assert_eq!(holds.held(), 0);
        });
    }
}
