//! A connection's send queue: request tasks queue the PDUs or replies they finish with, in
//! any order, and one writer sends what is queued with a gathered `sendmsg` per batch (at
//! most [`BATCH_MAX`] bytes, so the watchdog sees a stalled client within its limit). Shared
//! by the NBD and iSCSI connections.
//!
//! A reply may come with the [`Credit`] that holds its buffers' bytes against the
//! connection's and the server's budgets: the queue keeps it until the batch carrying the
//! reply's last part has been sent, so memory is given back when the client has taken the
//! bytes, not when they were queued. Replies without one (headers, statuses, small
//! answers) are counted here instead, and the connection's reader takes no new request
//! while they hold more than [`LOOSE_MAX`] ([`OutQueue::poll_room`]). A queue that can no
//! longer send (the peer is gone) drops what it holds at once.
//!
//! A large reply that finds the queue idle is sent by its own task instead
//! ([`OutQueue::push_direct`]): its data leaves while still in the CPU's cache, and the client
//! takes it while this thread reads the next request's data, instead of a whole batch after
//! the last of its reads. So is the reply of a connection's only request in flight, which
//! nothing could gather with.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::poll_fn;
use std::rc::Rc;
use std::task::{Poll, Waker};

use raidd_rt::net::Part;

use crate::budget::Credit;
use crate::link::Link;
use crate::watch::Watch;

/// The largest batch Vec kept for reuse (in parts).
const SPARE_MAX: usize = 1024;
/// Bytes the writer takes into one batch (more when a single part is larger).
pub const BATCH_MAX: usize = 4 << 20;
/// Bytes of replies without a credit the queue may hold before the reader waits.
pub const LOOSE_MAX: usize = 1 << 20;
/// What a queued part costs besides its bytes.
const PART_COST: usize = std::mem::size_of::<Part>();

/// One push: the parts queued when its last part was, its credit, and the bytes it counts
/// as loose.
type Pushed = (u64, Option<Credit>, usize);

#[derive(Debug)]
pub struct OutQueue {
    watch: Rc<Watch>,
    parts: RefCell<VecDeque<Part>>,
    /// Every push not yet sent, in order (see [`Pushed`]).
    pushes: RefCell<VecDeque<Pushed>>,
    /// Parts queued so far, and parts sent so far (sequence numbers for `pushes`).
    pushed: Cell<u64>,
    sent: Cell<u64>,
    /// Bytes of queued replies without a credit, and the reader waiting for them to go.
    loose: Cell<usize>,
    room: RefCell<Option<Waker>>,
    /// The Vec of the last batch sent, emptied: the next batch's, so queueing allocates
    /// nothing once warm.
    spare: RefCell<Vec<Part>>,
    /// Bytes at the front of `parts` a direct send already sent.
    head_sent: Cell<usize>,
    /// The writer holds parts it has not finished sending, so nothing may go out directly.
    sending: Cell<bool>,
    writer: RefCell<Option<Waker>>,
    /// Nothing more will be queued; the writer ends once the queue is empty.
    closing: Cell<bool>,
    /// Sending failed: the peer is gone.
    broken: Cell<bool>,
}

impl OutQueue {
    pub fn new(watch: Rc<Watch>) -> OutQueue {
        OutQueue {
            watch,
            parts: RefCell::new(VecDeque::new()),
            pushes: RefCell::new(VecDeque::new()),
            pushed: Cell::new(0),
            sent: Cell::new(0),
            loose: Cell::new(0),
            room: RefCell::new(None),
            spare: RefCell::new(Vec::new()),
            head_sent: Cell::new(0),
            sending: Cell::new(false),
            writer: RefCell::new(None),
            closing: Cell::new(false),
            broken: Cell::new(false),
        }
    }

    /// Queues parts to go out after everything queued before them; `credit` is given back
    /// once they have been sent.
    pub fn push(&self, parts: impl IntoIterator<Item = Part>, credit: Option<Credit>) {
        if self.broken.get() {
            return; // nobody will send them: the parts and the credit go at once
        }
        let mut q = self.parts.borrow_mut();
        let before = q.len();
        let mut bytes = 0;
        for p in parts {
            bytes += p.bytes().len() + PART_COST;
            q.push_back(p);
        }
        self.pushed
            .set(self.pushed.get() + (q.len() - before) as u64);
        drop(q);
        let loose = if credit.is_none() { bytes } else { 0 };
        self.loose.set(self.loose.get() + loose);
        self.pushes
            .borrow_mut()
            .push_back((self.pushed.get(), credit, loose));
        debug_assert!(
            self.sent.get() <= self.pushed.get(),
            "never more sent than pushed"
        );
        self.wake();
    }

    /// Ready while the replies queued without a credit leave room for more (or the queue
    /// is broken: nothing will be sent, and the reader finds out); otherwise registers the
    /// reader to be woken as they go out.
    pub fn poll_room(&self, cx: &std::task::Context<'_>) -> Poll<()> {
        if self.loose.get() < LOOSE_MAX || self.broken.get() {
            return Poll::Ready(());
        }
        *self.room.borrow_mut() = Some(cx.waker().clone());
        Poll::Pending
    }

    /// Queues parts like [`OutQueue::push`], but when nothing is queued or being sent,
    /// what the socket takes at once goes right away. One system call per call: for large
    /// replies, and for replies that nothing could gather with (a connection's only request
    /// in flight); other small ones still gather into batches.
    pub fn push_direct<const N: usize>(
        &self,
        link: &Link,
        parts: [Part; N],
        credit: Option<Credit>,
    ) {
        if self.sending.get()
            || self.closing.get()
            || self.broken.get()
            || !self.parts.borrow().is_empty()
        {
            return self.push(parts, credit);
        }
        let total: usize = parts.iter().map(|p| p.bytes().len()).sum();
        // A failed send is left to the writer: it meets the same error and ends the
        // connection the usual way.
        let sent = link.try_send(&parts).unwrap_or(0);
        debug_assert!(sent <= total, "a send sends at most what it was given");
        if sent < total {
            self.head_sent.set(sent);
            self.push(parts, credit);
        }
    }

    fn wake(&self) {
        if let Some(w) = self.writer.borrow_mut().take() {
            w.wake();
        }
    }

    /// No more parts will come: the writer sends what is queued and ends.
    pub fn close(&self) {
        self.closing.set(true);
        self.wake();
    }

    pub fn is_closing(&self) -> bool {
        self.closing.get()
    }

    /// Whether a send has failed.
    pub fn is_broken(&self) -> bool {
        self.broken.get()
    }

    /// The next batch: the parts at the front, up to [`BATCH_MAX`] bytes (at least one
    /// part, and every part a direct send began), or `None` once closed and empty.
    fn next_batch(&self) -> Poll<Option<Vec<Part>>> {
        let mut q = self.parts.borrow_mut();
        if q.is_empty() {
            return if self.closing.get() {
                Poll::Ready(None)
            } else {
                Poll::Pending
            };
        }
        let mut batch = std::mem::take(&mut *self.spare.borrow_mut());
        let started = self.head_sent.get();
        let mut bytes = 0usize;
        while let Some(p) = q.front() {
            if !batch.is_empty() && bytes >= BATCH_MAX && bytes > started {
                break;
            }
            bytes += p.bytes().len();
            batch.extend(q.pop_front());
        }
        debug_assert!(!batch.is_empty(), "a batch sends something");
        debug_assert!(
            started <= bytes,
            "what a direct send sent is part of the batch"
        );
        Poll::Ready(Some(batch))
    }

    /// Gives back the credits (and the loose bytes) of replies whose parts have all been
    /// sent.
    fn release_sent(&self, parts: usize) {
        let sent = self.sent.get() + parts as u64;
        self.sent.set(sent);
        let mut pushes = self.pushes.borrow_mut();
        let mut freed = 0;
        while pushes.front().is_some_and(|(seq, _, _)| *seq <= sent) {
            if let Some((_, _, loose)) = pushes.pop_front() {
                freed += loose;
            }
        }
        drop(pushes);
        if freed > 0 {
            debug_assert!(
                self.loose.get() >= freed,
                "loose bytes are counted as pushed"
            );
            self.loose.set(self.loose.get() - freed);
            self.wake_room();
        }
        debug_assert!(sent <= self.pushed.get(), "never more sent than pushed");
    }

    fn wake_room(&self) {
        if let Some(w) = self.room.borrow_mut().take() {
            w.wake();
        }
    }

    /// The writer: sends batches until closed and drained. When a send fails the queue is
    /// marked broken and emptied (the buffers and credits go), the socket shut (so a
    /// reader waiting for the next request wakes) and `on_failure` runs.
    pub async fn run(&self, link: &Link, on_failure: impl FnOnce()) {
        loop {
            let batch = poll_fn(|cx| match self.next_batch() {
                Poll::Ready(b) => Poll::Ready(b),
                Poll::Pending => {
                    *self.writer.borrow_mut() = Some(cx.waker().clone());
                    Poll::Pending
                }
            })
            .await;
            let Some(parts) = batch else { return };
            let n = parts.len();
            self.sending.set(true);
            self.watch.sending(true);
            let sent = self.head_sent.replace(0);
            let (r, mut sent_parts) = link.send_from(parts, sent).await;
            self.watch.sending(false);
            self.sending.set(false);
            sent_parts.clear();
            if sent_parts.capacity() <= SPARE_MAX {
                *self.spare.borrow_mut() = sent_parts;
            }
            if let Err(e) = r {
                tracing::debug!("sending failed: {e}");
                self.broken.set(true);
                self.parts.borrow_mut().clear();
                self.pushes.borrow_mut().clear();
                self.loose.set(0);
                self.wake_room();
                let _ = link.sock.shutdown(std::net::Shutdown::Both);
                on_failure();
                return;
            }
            self.release_sent(n);
        }
    }
}
