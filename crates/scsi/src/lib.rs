//! SCSI block commands (SPC-4 / SBC-3) as pure functions on bytes, for raidd's iSCSI target.
//!
//! # The sans-io contract
//!
//! Nothing here does I/O, spawns threads, reads clocks or keeps global state. The target
//! shell owns the sessions, the array and all timing; this crate only turns bytes into
//! decisions and decisions into bytes:
//!
//! 1. [`decode`] every CDB against the LUN's [`LunInfo`]. An `Err` is the sense data for a
//!    CHECK CONDITION (encode it with [`ModeState::sense_bytes`], which honours the control
//!    page's D_SENSE). An `Ok(Op)` has passed every range, field, length-limit and
//!    write-protection check.
//! 2. Check [`Reservations::allows`] (RESERVATION CONFLICT when false).
//! 3. For data commands (READ, WRITE, VERIFY, WRITE AND VERIFY, COMPARE AND WRITE, WRITE SAME,
//!    UNMAP, SYNCHRONIZE CACHE, PRE-FETCH) the shell does the array I/O itself, using
//!    [`Op::data_out_len`] to size Data-Out, [`parse_unmap`] for UNMAP lists and
//!    [`miscompare_offset`] + [`Sense::miscompare`] for comparisons. MODE SELECT goes to
//!    [`mode_select`], PERSISTENT RESERVE IN/OUT to [`Reservations::pr_in`] /
//!    [`Reservations::pr_out`]. Everything else is answered by [`respond`].
//!
//! Every function accepts arbitrary input (CDBs and parameter lists of any length, corrupt
//! persistence records) and reports problems as values; none panics, and none allocates by a
//! length taken from the input beyond a small fixed bound (responses are built at their
//! natural size and cut to the allocation length).
//!
//! # Choices the shell must know
//!
//! - WRITE SAME with 0 blocks means "to the end of the LUN" (VPD B0 WSNZ=0): `decode` turns it
//!   into the block count, so `Op::WriteSame::blocks` is 0 only for an empty range at the end.
//! - SYNCHRONIZE CACHE and PRE-FETCH keep SBC's "0 blocks = to the end of the LUN".
//! - Mode pages are shared by all I_T nexuses; only D_SENSE is changeable.
//! - Saved mode pages are not implemented (SP=1 and PC=3 are refused).
//! - Unmapped blocks read back unspecified data (LBPRZ=0) and GET LBA STATUS reports every
//!   block as mapped: allocation is not tracked.

mod bytes;
mod capacity;
mod decode;
mod inquiry;
mod lun;
mod luns;
mod mode;
mod op;
pub mod opcodes;
mod pr;
mod respond;
mod sense;
mod unmap;

pub use decode::decode;
pub use lun::LunInfo;
pub use luns::encode_lun;
pub use mode::{mode_select, ModeState};
pub use op::Op;
pub use pr::MAX_REGISTRATIONS;
pub use pr::{action as pr_action, kind as pr_kind, Nexus, PrError, PrOutcome, Reservations};
pub use respond::{respond, RespondCtx};
pub use sense::{key as sense_key, FieldPointer, Sense, Status, FIXED_SENSE_LEN};
pub use unmap::{miscompare_offset, parse_unmap};
