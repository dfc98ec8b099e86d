//! A part's mailbox: how the leader of a stripe tells a waiting part its outcome or hands
//! it the lead.

use std::cell::RefCell;
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};

use raidd_rt::recycle::{give, take, FreeList};

use crate::error::Result;

thread_local! {
    static SIGNALS: FreeList<Signal> = const { RefCell::new(Vec::new()) };
}

/// A fresh mailbox, in a reused `Arc` header (one per stripe share of every parity write).
pub(crate) fn signal() -> Arc<Signal> {
    take(&SIGNALS, Signal::default())
}

/// Gives a mailbox handle back; its header is kept if this was the last handle.
pub(crate) fn give_signal(signal: Arc<Signal>) {
    give(&SIGNALS, signal, Signal::default);
}

/// What a waiting part is told.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The part is on the members (or failed with this error).
    Done(Result<()>),
    /// The stripe is yours: lead the next batch (which holds this part).
    Lead,
}

#[derive(Default)]
struct SignalState {
    outcome: Option<Outcome>,
    waker: Option<Waker>,
    /// The waiting future was dropped: never hand it the lead.
    abandoned: bool,
}

/// A part's mailbox: the leader of the batch that holds it posts the outcome.
#[derive(Default)]
pub(crate) struct Signal(Mutex<SignalState>);

impl Signal {
    pub(super) fn post(&self, o: Outcome) {
        let waker = {
            let mut st = self.0.lock().expect(crate::POISONED);
            // A part learns its batch's outcome once, and no lead follows it.
            debug_assert!(
                !matches!(st.outcome, Some(Outcome::Done(_))),
                "a part's outcome is posted once"
            );
            st.outcome = Some(o);
            st.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Posts the lead to a mailbox nobody else holds yet.
    pub(super) fn lead_now(&mut self) {
        let st = self.0.get_mut().expect(crate::POISONED);
        debug_assert!(st.outcome.is_none() && !st.abandoned, "a fresh mailbox");
        st.outcome = Some(Outcome::Lead);
    }

    /// The waiting future was dropped: marks the mailbox so that it is never handed the
    /// lead; whether the lead had been posted here already.
    pub(super) fn abandon(&self) -> bool {
        let mut st = self.0.lock().expect(crate::POISONED);
        st.abandoned = true;
        matches!(st.outcome, Some(Outcome::Lead))
    }

    /// Whether the lead was posted here and not yet taken.
    pub(crate) fn holds_lead(&self) -> bool {
        let st = self.0.lock().expect(crate::POISONED);
        matches!(st.outcome, Some(Outcome::Lead))
    }

    /// Takes the lead posted here without waiting; false if there is none.
    pub(crate) fn take_lead(&self) -> bool {
        let mut st = self.0.lock().expect(crate::POISONED);
        if matches!(st.outcome, Some(Outcome::Lead)) {
            st.outcome = None;
            true
        } else {
            false
        }
    }

    pub(super) fn abandoned(&self) -> bool {
        self.0.lock().expect(crate::POISONED).abandoned
    }

    pub(crate) async fn wait(&self) -> Outcome {
        std::future::poll_fn(|cx| {
            let mut st = self.0.lock().expect(crate::POISONED);
            match st.outcome.take() {
                Some(o) => Poll::Ready(o),
                None => {
                    st.waker = Some(cx.waker().clone());
                    Poll::Pending
                }
            }
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mailbox_header_is_reused_once_given_back() {
        let s = signal();
        let at = Arc::as_ptr(&s);
        give_signal(s);
        assert_eq!(Arc::as_ptr(&signal()), at);
    }
}
