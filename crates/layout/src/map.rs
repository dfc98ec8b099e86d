//! Array sector <-> member sector mapping results.

use smallvec::SmallVec;

/// A place on a member: member slot (md role) and sector within its data area.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Loc {
    pub member: usize,
    pub sector: u64,
}

/// A run of array sectors that is contiguous on every member that holds a copy of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece {
    pub array_sector: u64,
    pub sectors: u64,
    /// One entry per copy (linear/RAID0/parity data: 1; RAID1: n; RAID10: near*far), in md's
    /// copy order (RAID10: the order md's `__raid10_find_phys` produces).
    pub copies: SmallVec<[Loc; 4]>,
}

/// What a member sector holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reverse {
    /// Data for `array_sector`; `copy` indexes [`Piece::copies`].
    Data { array_sector: u64, copy: usize },
    /// Parity of stripe `stripe` (P for RAID4/5/6, Q for RAID6) at `offset` within the chunk.
    P { stripe: u64, offset: u64 },
    Q { stripe: u64, offset: u64 },
    /// Not used by the array.
    Unused,
}
