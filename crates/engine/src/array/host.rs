//! What an array lends its level paths ([`Host`]): the mapped path (`mapped.rs`) and the
//! parity path (`parity/`) see members as slots that are current or not, member I/O that
//! fails a member on error (`member_io.rs`), the shape covering the I/O in hand, and
//! nothing else of the array.

use std::future::Future;
use std::io;

use futures::future::LocalBoxFuture;

use raidd_layout::{Loc, ParityGeometry, Piece};
use raidd_rt::{BufSlice, BufSliceMut};

use super::counters::Counters;
use super::join::Results;
use super::journal::{Journal, JournalHost};
use super::member_io;
use super::misread::Misreads;
use super::ppl::Ppl;
use crate::error::{Error, Result};
use crate::iov::MemberIos;

/// What a level path needs of the array that holds it. Each member I/O goes out through
/// the array's member I/O, which fails a member whose I/O fails before the results come
/// back.
pub(crate) trait Host: JournalHost {
    /// The RAID4/5/6 layout of the stripes in hand (the shape covering them: one today,
    /// either side of a reshape's boundary later).
    fn parity_shape(&self) -> &ParityGeometry;
    /// Whether parity on the members can be trusted below member sector `end`.
    fn parity_trusted(&self, end: u64) -> bool;
    /// An error once too many members have failed to serve every sector.
    fn check_alive(&self) -> Result<()>;
    /// The error of a stripe (or piece) that lost more than its redundancy covers.
    fn lost_error(&self) -> Error;
    /// The error of a read whose windows slot `role`'s member kept (it timed out).
    fn lost_windows(&self, role: usize) -> Error;
    fn counters(&self) -> &Counters;
    /// A copy of a mirrored piece that can be read now (the array's read policy), on no
    /// slot `avoid` names.
    fn readable_copy(&self, p: &Piece, avoid: &Misreads) -> Option<Loc>;
    /// Corrects what a client's read could not get from members that stay in their slots
    /// (`correct.rs`): rebuilt from redundancy and rewritten, or the member is failed.
    /// Boxed: only a read that met an error takes it.
    fn correct(&self, misreads: Misreads) -> LocalBoxFuture<'_, ()>;
    /// The partial parity log every RAID5 stripe write goes through first, where the
    /// array keeps one (md's PPL).
    fn ppl(&self) -> Option<Ppl>;
    /// The write journal every RAID4/5/6 stripe write is logged to first, where the array
    /// has one and it works (md's raid5-cache).
    fn journal(&self) -> Option<Journal>;

    /// Whether slot `role` holds current data below member sector `end` (and takes writes).
    fn in_sync_at(&self, role: usize, end: u64) -> bool {
        self.slots().in_sync_at(role, end)
    }

    /// Byte offset on slot `role`'s member of member sector `sector`.
    fn member_offset(&self, role: usize, sector: u64) -> u64 {
        self.slots().member_offset(role, sector)
    }

    /// Reads into scratch buffers.
    fn issue_scratch_reads(
        &self,
        ios: MemberIos<BufSliceMut>,
    ) -> impl Future<Output = Results<(usize, io::Result<()>)>> {
        member_io::issue_scratch_reads(self, ios)
    }

    /// Reads into scratch buffers for a caller that corrects what fails (see
    /// [`member_io::OnReadError`]).
    fn issue_scratch_reads_keeping(
        &self,
        ios: MemberIos<BufSliceMut>,
    ) -> impl Future<Output = Results<(usize, io::Result<()>, bool)>> {
        member_io::issue_scratch_reads_keeping(self, ios)
    }

    /// Writes a batch.
    fn issue_writes(
        &self,
        ios: MemberIos<BufSlice>,
    ) -> impl Future<Output = Results<(usize, io::Result<()>)>> {
        member_io::issue_writes(self, ios)
    }
}
