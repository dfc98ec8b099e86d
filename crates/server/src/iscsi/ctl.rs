//! A SCSI command's control block while it runs: what was decided when it arrived, the
//! Data-Out it is still owed, its credit, and how the reader and task management reach it.

use std::cell::{Cell, RefCell};
use std::task::Waker;

use raidd_iscsi::pdu::Residual;
use raidd_rt::AlignedBuf;
use raidd_scsi::{Op, Sense, Status};

use crate::budget::Credit;

/// A command as its connection sees it while it lives.
pub struct TaskCtl {
    pub itt: u32,
    /// The LUN field as sent.
    pub lun: u64,
    pub collector: RefCell<Option<Collector>>,
    pub(super) waker: RefCell<Option<Waker>>,
    pub(super) aborted: Cell<bool>,
    pub(super) plan: RefCell<Option<Plan>>,
    /// Its buffers' bytes against the budgets, given back with its last PDU.
    pub(super) credit: RefCell<Option<Credit>>,
}

impl TaskCtl {
    pub fn wake(&self) {
        if let Some(w) = self.waker.borrow_mut().take() {
            w.wake();
        }
    }

    /// Marks the task aborted: no status will be sent for it.
    pub fn abort(&self) {
        self.aborted.set(true);
        self.wake();
    }
}

/// What the command will do, decided when it arrives.
pub(super) enum Plan {
    /// `residual`: what the initiator's expected length leaves over or short of the
    /// command's Data-Out, when it differs.
    Run {
        /// Held from the command's arrival: a LUN removed meanwhile still finishes it.
        lun: std::sync::Arc<super::target::Lun>,
        op: Op,
        residual: Option<Residual>,
    },
    /// Answer with this status and sense at once (after absorbing any data).
    Fail(Status, Option<Sense>),
    /// INQUIRY to a LUN that does not exist.
    NoLunInquiry { alloc: u16 },
    /// The initiator offered less Data-Out than the command needs and it cannot be cut
    /// to what was offered: refused without touching the medium.
    Refuse(Residual),
}

/// Data-Out still owed to a command.
pub struct Collector {
    pub buf: Option<AlignedBuf>,
    /// Bytes the command needs (R2Ts ask up to here).
    pub len: usize,
    /// Bytes the buffer holds: `len`, or more when the initiator sent immediate data the
    /// command will not use.
    pub size: usize,
    /// Bytes received, in order from 0.
    pub received: usize,
    /// The outstanding R2T: its tag and where its burst ends.
    pub burst: Option<(u32, usize)>,
    pub next_datasn: u32,
    pub next_r2tsn: u32,
}

/// A command's immediate data, as the reader took it.
#[derive(Default)]
pub struct Immediate {
    pub buf: Option<AlignedBuf>,
    /// Its bytes against the budgets.
    pub credit: Option<Credit>,
    /// There was no room for it: it was dropped unread, and the command ends with TASK SET
    /// FULL.
    pub refused: bool,
}
