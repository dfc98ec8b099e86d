//! Coalescing pieces into member I/O runs: one vectored member request per contiguous member
//! range, never split below what the layout forces (seed 002's lesson).

use smallvec::SmallVec;

use crate::map::Piece;

/// A part of a request: `sectors` sectors starting at array sector `array_sector`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seg {
    pub array_sector: u64,
    pub sectors: u64,
}

/// One member I/O: a contiguous member range whose data comes from (or goes to) `segs`, in
/// member order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Run {
    pub member: usize,
    pub sector: u64,
    pub sectors: u64,
    pub segs: SmallVec<[Seg; 4]>,
}

/// Groups pieces into runs. `pick(piece)` chooses which copy to use (index into
/// `piece.copies`); pieces whose chosen copies are contiguous on the same member join one run,
/// even when other members' pieces come between them in array order (RAID0 over several
/// members gives one run per member). A run never has more than `max_segs` segs (the kernel's
/// IOV_MAX is 1024); adjacent segs in the array are merged into one.
/// Runs come out ordered by (member, sector).
pub fn coalesce(pieces: &[Piece], max_segs: usize, pick: impl FnMut(&Piece) -> usize) -> Vec<Run> {
    todo!()
}
