//! A one-shot event many tasks may wait for: set once, then every wait returns at once.

use std::future::poll_fn;
use std::sync::Mutex;
use std::task::{Poll, Waker};

#[derive(Debug, Default)]
pub(crate) struct Latch(Mutex<LatchState>);

#[derive(Debug, Default)]
struct LatchState {
    set: bool,
    waiters: Vec<Waker>,
}

impl Latch {
    /// Sets the latch and wakes every waiter; setting it again does nothing.
    pub(crate) fn set(&self) {
        let waiters = {
            let mut st = self.0.lock().expect(crate::POISONED);
            st.set = true;
            std::mem::take(&mut st.waiters)
        };
        waiters.into_iter().for_each(Waker::wake);
    }

    pub(crate) fn is_set(&self) -> bool {
        self.0.lock().expect(crate::POISONED).set
    }

    /// Returns once the latch is set.
    pub(crate) async fn wait(&self) {
        poll_fn(|cx| {
            let mut st = self.0.lock().expect(crate::POISONED);
            if st.set {
                return Poll::Ready(());
            }
            if !st.waiters.iter().any(|w| w.will_wake(cx.waker())) {
                st.waiters.push(cx.waker().clone());
            }
            Poll::Pending
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn every_waiter_returns_once_it_is_set() {
        let latch = Arc::new(Latch::default());
        let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        raidd_rt::block_on({
            let (latch, done) = (latch.clone(), done.clone());
            async move {
                let waiters: Vec<_> = (0..3)
                    .map(|_| {
                        let (l, d) = (latch.clone(), done.clone());
                        raidd_rt::spawn_local(async move {
                            l.wait().await;
                            d.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        })
                    })
                    .collect();
                raidd_rt::yield_now().await;
                assert_eq!(done.load(std::sync::atomic::Ordering::SeqCst), 0);
                latch.set();
                latch.set();
                for w in waiters {
                    w.await;
                }
            }
        });
        assert!(latch.is_set());
        assert_eq!(done.load(std::sync::atomic::Ordering::SeqCst), 3);
    }
}
