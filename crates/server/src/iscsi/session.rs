//! One logged-in connection's shared state ([`Conn`]): what its reader, writer and tasks
//! share on their thread, the sequence numbers, the send queue, the live tasks and the
//! command window.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::future::poll_fn;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Poll, Waker};
use std::time::Instant;

use raidd_iscsi::login::Negotiated;
use raidd_iscsi::pdu::{self, Bhs, Digests, Request, Seq, RESERVED_TAG};
use raidd_iscsi::Params;
use raidd_rt::net::Part;
use raidd_rt::BufSlice;

use super::ctl::{Immediate, TaskCtl};
use super::target::{IscsiState, CMD_WINDOW};
use crate::budget::{Account, Credit};
use crate::link::{Input, Link};
use crate::outq::OutQueue;
use crate::shared::Stop;
use crate::watch::Watch;

/// RFC 1982 serial number comparison on 32 bits: a before b.
pub fn sn_lt(a: u32, b: u32) -> bool {
    a != b && (b.wrapping_sub(a) as i32) > 0
}

/// The LUN number in an 8-byte SAM LUN field (peripheral or flat addressing); None for a
/// form raidd does not use.
pub fn lun_number(field: u64) -> Option<u64> {
    let b = field.to_be_bytes();
    if b[2..].iter().any(|&x| x != 0) {
        return None;
    }
    match b[0] >> 6 {
        0 if b[0] & 0x3f == 0 => Some(u64::from(b[1])),
        1 => Some((u64::from(b[0] & 0x3f) << 8) | u64::from(b[1])),
        _ => None,
    }
}

/// What waits for its CmdSN turn.
pub(super) struct Held {
    pub(super) bhs: Bhs,
    pub(super) request: Request,
    pub(super) data: Vec<u8>,
    pub(super) imm: Immediate,
}

/// State shared by a connection's reader, writer and tasks (one thread).
pub struct Conn {
    pub link: Link,
    pub state: Arc<IscsiState>,
    pub target: Option<usize>,
    pub nexus: String,
    pub params: RefCell<Params>,
    pub digests: Digests,
    pub(super) seq: Cell<Seq>,
    pub(super) out: OutQueue,
    /// Live tasks by initiator task tag.
    pub tasks: RefCell<HashMap<u32, Rc<TaskCtl>>>,
    pub(super) held: RefCell<BTreeMap<u32, Held>>,
    /// Wakes whoever waits for tasks to end (drain, logout, task management).
    pub(super) idle: RefCell<Vec<Waker>>,
    pub(super) next_ttt: Cell<u32>,
    /// The connection's share of the buffer budget.
    pub account: Rc<Account>,
    /// Resolves when the daemon is stopping.
    pub stop: Stop,
    /// A text exchange in progress: its ITT, accumulated request, or response still to send.
    pub(super) text: RefCell<Option<TextState>>,
    pub last_heard: Cell<Instant>,
}

pub(super) struct TextState {
    pub(super) itt: u32,
    pub(super) request: Vec<u8>,
    /// Response bytes not yet sent, and the tag the initiator continues with.
    pub(super) pending: Option<(Vec<u8>, u32)>,
}

/// What to send as a PDU's data segment.
pub enum Data {
    None,
    Bytes(Vec<u8>),
    Slice(BufSlice),
}

/// What the full feature phase starts from: the logged-in connection.
pub struct Setup {
    pub link: Link,
    pub input: Input,
    pub watch: Rc<Watch>,
    pub state: Arc<IscsiState>,
    pub account: Rc<Account>,
    pub negotiated: Negotiated,
    pub seq: Seq,
    pub nexus: String,
    pub stop: Stop,
}

impl Conn {
    pub(super) fn new(s: Setup) -> (Conn, Input) {
        let n = &s.negotiated;
        let digests = Digests {
            header: n.params.header_digest,
            data: n.params.data_digest,
        };
        let conn = Conn {
            link: s.link,
            state: s.state,
            target: n.target,
            nexus: s.nexus,
            params: RefCell::new(n.params.clone()),
            digests,
            seq: Cell::new(s.seq),
            out: OutQueue::new(s.watch),
            tasks: RefCell::new(HashMap::new()),
            held: RefCell::new(BTreeMap::new()),
            idle: RefCell::new(Vec::new()),
            next_ttt: Cell::new(1),
            account: s.account,
            stop: s.stop,
            text: RefCell::new(None),
            last_heard: Cell::new(Instant::now()),
        };
        (conn, s.input)
    }

    /// A fresh target transfer tag (never the reserved value).
    pub fn ttt(&self) -> u32 {
        let t = self.next_ttt.get();
        self.next_ttt
            .set(if t == RESERVED_TAG - 1 { 1 } else { t + 1 });
        debug_assert_ne!(t, RESERVED_TAG, "a transfer tag is never the reserved one");
        t
    }

    /// The sequence numbers for the next PDU; `status` advances StatSN.
    pub(super) fn take_seq(&self, status: bool) -> Seq {
        let s = self.seq.get();
        if status {
            let mut n = s;
            n.statsn = n.statsn.wrapping_add(1);
            self.seq.set(n);
        }
        s
    }

    /// Queues a PDU; `header` gets the sequence numbers current at queueing time, so StatSN
    /// follows the order PDUs go out.
    pub fn send(&self, status: bool, header: impl FnOnce(Seq) -> [u8; pdu::BHS_LEN], data: Data) {
        self.send_with(status, header, data, None);
    }

    /// [`Conn::send`] of a command's last PDU, with the credit that holds its buffers: given
    /// back once the PDU (and so every one queued before it) has been sent.
    pub fn send_with(
        &self,
        status: bool,
        header: impl FnOnce(Seq) -> [u8; pdu::BHS_LEN],
        data: Data,
        credit: Option<Credit>,
    ) {
        let h = header(self.take_seq(status));
        debug_assert_eq!(h.len(), pdu::BHS_LEN);
        // A PDU's header (and a data segment's padding and digest) go out as inline parts:
        // queueing a Data-In or a response allocates nothing.
        match data {
            Data::None => {
                let f = pdu::frame(&h, &[], self.digests);
                self.out.push([Part::header(f.head())], credit);
            }
            Data::Bytes(b) => {
                let f = pdu::frame(&h, &b, self.digests);
                self.out
                    .push([Part::Bytes([f.head(), &b, f.tail()].concat())], credit);
            }
            Data::Slice(s) => {
                let f = pdu::frame(&h, s.as_slice(), self.digests);
                let head = Part::header(f.head());
                if f.tail().is_empty() {
                    self.out.push([head, Part::Slice(s)], credit);
                } else {
                    self.out
                        .push([head, Part::Slice(s), Part::header(f.tail())], credit);
                }
            }
        }
    }

    /// Rejects a PDU (its header is the Reject's data).
    pub fn reject(&self, reason: u8, bhs: &Bhs) {
        self.send(
            true,
            |s| pdu::reject(reason, s),
            Data::Bytes(bhs.0.to_vec()),
        );
    }

    /// A command that took a place in the window ended (or never became a task): the
    /// initiator may send one more (MaxCmdSN moves on).
    pub(super) fn free_place(&self) {
        let mut s = self.seq.get();
        s.maxcmdsn = s.maxcmdsn.wrapping_add(1);
        self.seq.set(s);
        debug_assert!(
            s.maxcmdsn.wrapping_sub(s.expcmdsn).wrapping_add(1) <= CMD_WINDOW,
            "a place is freed only after one was taken"
        );
    }

    /// A task has ended: its tag is free, and its place in the window if it took one.
    pub fn finished(&self, itt: u32, placed: bool) {
        if placed {
            self.free_place();
        }
        let gone = self.tasks.borrow_mut().remove(&itt);
        debug_assert!(gone.is_some(), "a task ends once");
        for w in self.idle.borrow_mut().drain(..) {
            w.wake();
        }
    }

    /// Aborts the tasks still waiting for Data-Out: once the reader stops, none will come.
    pub(super) fn abort_collecting(&self) {
        for t in self.tasks.borrow().values() {
            if t.collector.borrow().is_some() {
                t.abort();
            }
        }
    }

    /// Waits until no task in `itts` (or, for None, no task at all) is live.
    pub async fn wait_tasks(&self, itts: Option<&[u32]>) {
        poll_fn(|cx| {
            let tasks = self.tasks.borrow();
            let busy = match itts {
                None => !tasks.is_empty(),
                Some(list) => list.iter().any(|i| tasks.contains_key(i)),
            };
            if !busy {
                return Poll::Ready(());
            }
            self.idle.borrow_mut().push(cx.waker().clone());
            Poll::Pending
        })
        .await
    }

    /// Admits a CmdSN-ordered request: Some(true) run now, Some(false) hold for the gap,
    /// None outside the window (ignored, as RFC 7143 3.2.2.1 says). An admitted request
    /// takes a place in the window; MaxCmdSN stays until a place is freed.
    pub(super) fn admit(&self, cmdsn: u32) -> Option<bool> {
        let mut s = self.seq.get();
        if sn_lt(cmdsn, s.expcmdsn) || sn_lt(s.maxcmdsn, cmdsn) {
            return None;
        }
        if cmdsn != s.expcmdsn {
            return Some(false);
        }
        s.expcmdsn = s.expcmdsn.wrapping_add(1);
        self.seq.set(s);
        debug_assert!(
            s.maxcmdsn.wrapping_sub(s.expcmdsn).wrapping_add(1) <= CMD_WINDOW,
            "the window never grows past CMD_WINDOW"
        );
        Some(true)
    }

    pub(super) fn params(&self) -> std::cell::Ref<'_, Params> {
        self.params.borrow()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    pub(super) fn serial_numbers_wrap() {
        assert!(sn_lt(1, 2));
        assert!(!sn_lt(2, 1));
        assert!(!sn_lt(5, 5));
        assert!(sn_lt(u32::MAX, 0));
        assert!(sn_lt(u32::MAX - 10, 5));
        assert!(!sn_lt(5, u32::MAX - 10));
    }

    #[test]
    pub(super) fn lun_fields() {
        assert_eq!(lun_number(0), Some(0));
        assert_eq!(lun_number(0x0003_0000_0000_0000), Some(3));
        assert_eq!(lun_number(0x4101_0000_0000_0000), Some(0x101));
        assert_eq!(lun_number(0x0100_0000_0000_0000), None, "bus id set");
        assert_eq!(lun_number(0x0000_0000_0000_0001), None);
        assert_eq!(lun_number(0xc000_0000_0000_0000), None);
    }
}
