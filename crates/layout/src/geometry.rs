//! Geometries: one per level family, built from md's parameters, with md's size rules.

use crate::level::{Level, ParityLayout, Raid0Layout, Raid10Layout};
use crate::map::{Piece, Reverse};

/// Why a geometry cannot be built. Messages are shown to users as they are.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// {level} needs at least {min} members, got {got}
    #[error("{level} needs at least {min} members, got {got}")]
    TooFewMembers { level: Level, min: usize, got: usize },
    /// too many members
    #[error("{got} members is more than the {max} that md allows")]
    TooManyMembers { got: usize, max: usize },
    #[error("chunk size {0} sectors is not a power of two of at least 8 sectors (4 KiB)")]
    BadChunk(u32),
    #[error("layout {layout} is not valid for {level}")]
    BadLayout { level: Level, layout: String },
    #[error("member {member} has {sectors} usable sectors, less than one chunk")]
    MemberTooSmall { member: usize, sectors: u64 },
    #[error("raid10 with {copies} copies needs at least {copies} members, got {members}")]
    Raid10TooFewMembers { copies: usize, members: usize },
    #[error("array would be empty")]
    Empty,
}

/// The largest number of members raidd accepts in one array (md: 1920 roles in v1.2; the
/// RAID levels themselves stop earlier).
pub const MAX_MEMBERS: usize = 256;

/// An array's shape: enough to map every array sector to member sectors and back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Geometry {
    Linear(LinearGeometry),
    Raid0(Raid0Geometry),
    Raid1(Raid1Geometry),
    Raid10(Raid10Geometry),
    /// RAID4, RAID5 and RAID6.
    Parity(ParityGeometry),
}

/// Concatenation of the members' data areas, in role order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinearGeometry {
    /// Usable sectors per member (already rounded as md does).
    pub member_sectors: Vec<u64>,
    // private: cumulative starts for binary search
}

/// md RAID0 with strip zones for unequal members.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Raid0Geometry {
    pub chunk_sectors: u32,
    /// Usable sectors per member, rounded down to a chunk multiple (md's `rdev->sectors`).
    pub member_sectors: Vec<u64>,
    pub layout: Raid0Layout,
    // private: zones
}

/// n-way mirror: every member holds the whole array at the same member sectors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Raid1Geometry {
    pub members: usize,
    /// md's component size (`size` in the superblock): sectors used on each member.
    pub dev_sectors: u64,
}

/// md RAID10 (near/far/offset copies).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Raid10Geometry {
    pub members: usize,
    pub layout: Raid10Layout,
    pub chunk_sectors: u32,
    /// md's component size as given; the geometry derives md's `dev_sectors` and `stride`.
    pub dev_sectors: u64,
    // private: stride, far set sizes
}

/// RAID4/5/6.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParityGeometry {
    pub level: Level,
    pub members: usize,
    pub layout: ParityLayout,
    pub chunk_sectors: u32,
    /// Sectors used on each member: md's component size rounded down to a chunk multiple.
    pub dev_sectors: u64,
}

impl Geometry {
    /// Linear over members of the given usable sizes (chunk 0 = no rounding, as mdadm 4.2
    /// writes; a non-zero `rounding_sectors` rounds each member down like md-linear does).
    pub fn linear(member_sectors: &[u64], rounding_sectors: u32) -> Result<Geometry, LayoutError> {
        todo!()
    }

    /// RAID0: each member's usable size is rounded down to a chunk; members of unequal size
    /// form md strip zones, mapped with `layout` (ignored when there is one zone).
    pub fn raid0(
        member_sectors: &[u64],
        chunk_sectors: u32,
        layout: Raid0Layout,
    ) -> Result<Geometry, LayoutError> {
        todo!()
    }

    pub fn raid1(members: usize, dev_sectors: u64) -> Result<Geometry, LayoutError> {
        todo!()
    }

    pub fn raid10(
        members: usize,
        layout: Raid10Layout,
        chunk_sectors: u32,
        dev_sectors: u64,
    ) -> Result<Geometry, LayoutError> {
        todo!()
    }

    /// RAID4/5/6 (`level` must be one of them; RAID4 requires ParityLast).
    pub fn parity(
        level: Level,
        members: usize,
        layout: ParityLayout,
        chunk_sectors: u32,
        dev_sectors: u64,
    ) -> Result<Geometry, LayoutError> {
        todo!()
    }

    pub fn level(&self) -> Level {
        todo!()
    }

    /// Number of member slots (md's raid_disks).
    pub fn members(&self) -> usize {
        todo!()
    }

    /// Size of the array in sectors, as md computes it.
    pub fn array_sectors(&self) -> u64 {
        todo!()
    }

    /// Chunk size in sectors (0 for linear and RAID1).
    pub fn chunk_sectors(&self) -> u32 {
        todo!()
    }

    /// How many members may be missing without losing data in the worst case
    /// (RAID1: n-1, RAID4/5: 1, RAID6: 2, RAID10: copies-1, others 0).
    pub fn redundancy(&self) -> usize {
        todo!()
    }

    /// Whether the array can serve every sector with exactly this set of members missing
    /// (RAID10 depends on which members are missing, not only how many).
    pub fn survives(&self, missing: &[bool]) -> bool {
        todo!()
    }

    /// Sectors of member `member`'s data area that the array uses (beyond this the member is
    /// unused). Needed to size members and to rebuild them.
    pub fn member_used_sectors(&self, member: usize) -> u64 {
        todo!()
    }

    /// Splits the array range `[sector, sector + count)` into pieces, in array order, each
    /// contiguous in the array and in every copy. For parity levels the pieces describe data
    /// only (the one data location); parity is the engine's business via [`ParityGeometry`].
    /// Panics if the range is outside the array (callers validate first).
    pub fn pieces(&self, sector: u64, count: u64) -> Vec<Piece> {
        todo!()
    }

    /// Where a member sector belongs: data of some array sector (and which copy), parity, or
    /// nothing (beyond the used area, or a RAID0 zone gap).
    pub fn reverse(&self, member: usize, member_sector: u64) -> Reverse {
        todo!()
    }

    pub fn as_parity(&self) -> Option<&ParityGeometry> {
        match self {
            Geometry::Parity(p) => Some(p),
            _ => None,
        }
    }
}
