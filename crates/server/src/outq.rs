//! A connection's send queue: request tasks queue the PDUs or replies they finish with, in
//! any order, and one writer sends everything queued with a single gathered `sendmsg` per
//! batch. Shared by the NBD and iSCSI connections.
//!
//! A large reply that finds the queue idle is sent by its own task instead
//! ([`OutQueue::push_direct`]): its data leaves while still in the CPU's cache, and the client
//! takes it while this thread reads the next request's data, instead of a whole batch after
//! the last of its reads. So is the reply of a connection's only request in flight, which
//! nothing could gather with.

use std::cell::{Cell, RefCell};
use std::future::poll_fn;
use std::task::{Poll, Waker};

use raidd_rt::net::Part;

use crate::link::Link;

/// The largest batch Vec kept for reuse (in parts).
const SPARE_MAX: usize = 1024;

#[derive(Debug, Default)]
pub struct OutQueue {
    parts: RefCell<Vec<Part>>,
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
    /// Queues parts to go out after everything queued before them.
    pub fn push(&self, parts: impl IntoIterator<Item = Part>) {
        self.parts.borrow_mut().extend(parts);
        self.wake();
    }

    /// Queues parts like [`OutQueue::push`], but when nothing is queued or being sent,
    /// what the socket takes at once goes right away. One system call per call: for large
    /// replies, and for replies that nothing could gather with (a connection's only request
    /// in flight); other small ones still gather into batches.
    pub fn push_direct<const N: usize>(&self, link: &Link, parts: [Part; N]) {
        if self.sending.get()
            || self.closing.get()
            || self.broken.get()
            || !self.parts.borrow().is_empty()
        {
            return self.push(parts);
        }
        let total: usize = parts.iter().map(|p| p.bytes().len()).sum();
        // A failed send is left to the writer: it meets the same error and ends the
        // connection the usual way.
        let sent = link.try_send(&parts).unwrap_or(0);
        if sent < total {
            self.head_sent.set(sent);
            self.push(parts);
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

    /// The writer: sends batches until closed and drained. When a send fails the queue is
    /// marked broken, the socket shut (so a reader waiting for the next request wakes) and
    /// `on_failure` runs.
    pub async fn run(&self, link: &Link, on_failure: impl FnOnce()) {
        loop {
            let parts = poll_fn(|cx| {
                let mut out = self.parts.borrow_mut();
                if !out.is_empty() {
                    let spare = std::mem::take(&mut *self.spare.borrow_mut());
                    return Poll::Ready(Some(std::mem::replace(&mut *out, spare)));
                }
                if self.closing.get() {
                    return Poll::Ready(None);
                }
                *self.writer.borrow_mut() = Some(cx.waker().clone());
                Poll::Pending
            })
            .await;
            let Some(parts) = parts else { return };
            self.sending.set(true);
            let sent = self.head_sent.replace(0);
            let (r, mut sent_parts) = link.send_from(parts, sent).await;
            self.sending.set(false);
            sent_parts.clear();
            if sent_parts.capacity() <= SPARE_MAX {
                *self.spare.borrow_mut() = sent_parts;
            }
            if let Err(e) = r {
                tracing::debug!("sending failed: {e}");
                self.broken.set(true);
                let _ = link.sock.shutdown(std::net::Shutdown::Both);
                on_failure();
                return;
            }
        }
    }
}
