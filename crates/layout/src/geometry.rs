//! Geometries: one per level family, built from md's parameters, with md's size rules.
//!
//! This module holds the public types and the dispatch; the arithmetic of each family lives
//! in its own module (`linear`, `raid0`, `raid10`, `stripe`).

use crate::level::{Level, ParityLayout, Raid0Layout, Raid10Layout};
use crate::limits::{check_member_size, check_members, chunk_span};
pub use crate::limits::{LayoutError, MAX_MEMBERS, MAX_MEMBER_SECTORS, MIN_CHUNK_SECTORS};
pub use crate::linear::LinearGeometry;
use crate::map::{Piece, Pieces, Reverse};
pub use crate::raid0::Raid0Geometry;
pub use crate::raid10::Raid10Geometry;
pub use crate::stripe::ParityGeometry;

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

/// n-way mirror: every member holds the whole array at the same member sectors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Raid1Geometry {
    pub members: usize,
    /// md's component size (`size` in the superblock): sectors used on each member.
    pub dev_sectors: u64,
}

impl Geometry {
    /// Linear over members of the given usable sizes (chunk 0 = no rounding, as mdadm 4.2
    /// writes; a non-zero `rounding_sectors` rounds each member down like md-linear does).
    pub fn linear(member_sectors: &[u64], rounding_sectors: u32) -> Result<Geometry, LayoutError> {
        LinearGeometry::new(member_sectors, rounding_sectors).map(Geometry::Linear)
    }

    /// RAID0: each member's usable size is rounded down to a chunk; members of unequal size
    /// form md strip zones, mapped with `layout` (ignored when there is one zone).
    pub fn raid0(
        member_sectors: &[u64],
        chunk_sectors: u32,
        layout: Raid0Layout,
    ) -> Result<Geometry, LayoutError> {
        Raid0Geometry::new(member_sectors, chunk_sectors, layout).map(Geometry::Raid0)
    }

    pub fn raid1(members: usize, dev_sectors: u64) -> Result<Geometry, LayoutError> {
        check_members(Level::Raid1, members)?;
        check_member_size(0, dev_sectors)?;
        if dev_sectors == 0 {
            return Err(LayoutError::Empty);
        }
        Ok(Geometry::Raid1(Raid1Geometry {
            members,
            dev_sectors,
        }))
    }

    pub fn raid10(
        members: usize,
        layout: Raid10Layout,
        chunk_sectors: u32,
        dev_sectors: u64,
    ) -> Result<Geometry, LayoutError> {
        Raid10Geometry::new(members, layout, chunk_sectors, dev_sectors).map(Geometry::Raid10)
    }

    /// RAID4/5/6 (`level` must be one of them; RAID4 requires ParityLast).
    pub fn parity(
        level: Level,
        members: usize,
        layout: ParityLayout,
        chunk_sectors: u32,
        dev_sectors: u64,
    ) -> Result<Geometry, LayoutError> {
        ParityGeometry::new(level, members, layout, chunk_sectors, dev_sectors)
            .map(Geometry::Parity)
    }

    pub fn level(&self) -> Level {
        match self {
            Geometry::Linear(_) => Level::Linear,
            Geometry::Raid0(_) => Level::Raid0,
            Geometry::Raid1(_) => Level::Raid1,
            Geometry::Raid10(_) => Level::Raid10,
            Geometry::Parity(g) => g.level,
        }
    }

    /// Number of member slots (md's raid_disks).
    pub fn members(&self) -> usize {
        match self {
            Geometry::Linear(g) => g.member_sectors.len(),
            Geometry::Raid0(g) => g.member_sectors.len(),
            Geometry::Raid1(g) => g.members,
            Geometry::Raid10(g) => g.members,
            Geometry::Parity(g) => g.members,
        }
    }

    /// Size of the array in sectors, as md computes it.
    pub fn array_sectors(&self) -> u64 {
        match self {
            Geometry::Linear(g) => g.array_sectors(),
            Geometry::Raid0(g) => g.array_sectors(),
            Geometry::Raid1(g) => g.dev_sectors,
            Geometry::Raid10(g) => g.array_sectors(),
            Geometry::Parity(g) => g.array_sectors(),
        }
    }

    /// Chunk size in sectors (0 for linear and RAID1).
    pub fn chunk_sectors(&self) -> u32 {
        match self {
            Geometry::Linear(_) | Geometry::Raid1(_) => 0,
            Geometry::Raid0(g) => g.chunk_sectors,
            Geometry::Raid10(g) => g.chunk_sectors,
            Geometry::Parity(g) => g.chunk_sectors,
        }
    }

    /// How many members may be missing without losing data in the worst case
    /// (RAID1: n-1, RAID4/5: 1, RAID6: 2, RAID10: copies-1, others 0).
    pub fn redundancy(&self) -> usize {
        match self {
            Geometry::Linear(_) | Geometry::Raid0(_) => 0,
            Geometry::Raid1(g) => g.members - 1,
            Geometry::Raid10(g) => g.layout.copies() - 1,
            Geometry::Parity(g) => g.members - g.data_members(),
        }
    }

    /// Whether the array can serve every sector with exactly this set of members missing
    /// (RAID10 depends on which members are missing, not only how many).
    /// `missing[i]` says whether member i is missing; entries past `missing.len()` count as
    /// present and entries past [`Geometry::members`] are ignored.
    pub fn survives(&self, missing: &[bool]) -> bool {
        let members = self.members();
        let is_missing = |member: usize| missing.get(member).copied().unwrap_or(false);
        let lost = (0..members).filter(|&m| is_missing(m)).count();
        match self {
            Geometry::Raid10(g) => g.survives(is_missing),
            _ => lost <= self.redundancy(),
        }
    }

    /// Sectors of member `member`'s data area that the array uses (beyond this the member is
    /// unused). Needed to size members and to rebuild them. 0 for a member slot that does not
    /// exist.
    pub fn member_used_sectors(&self, member: usize) -> u64 {
        if member >= self.members() {
            return 0;
        }
        match self {
            Geometry::Linear(g) => g.member_sectors[member],
            Geometry::Raid0(g) => g.member_sectors[member],
            Geometry::Raid1(g) => g.dev_sectors,
            Geometry::Raid10(g) => g.used_sectors(),
            Geometry::Parity(g) => g.dev_sectors,
        }
    }

    /// Splits the array range `[sector, sector + count)` into pieces, in array order, each
    /// contiguous in the array and in every copy. For parity levels the pieces describe data
    /// only (the one data location); parity is the engine's business via [`ParityGeometry`].
    /// For parity levels every piece lies within one chunk (one stripe, one data member).
    /// Panics if the range is outside the array (callers validate first).
    pub fn pieces(&self, sector: u64, count: u64) -> Pieces {
        let mut pieces = Pieces::new();
        self.pieces_into(sector, count, &mut pieces);
        pieces
    }

    /// [`Geometry::pieces`] into `out` (emptied first), which needs room for
    /// [`Geometry::piece_room`] pieces not to grow: a caller with a kept table of that room
    /// maps a large request without allocating.
    pub fn pieces_into(&self, sector: u64, count: u64, out: &mut Pieces) {
        let end = sector.checked_add(count);
        assert!(
            end.is_some_and(|end| end <= self.array_sectors()),
            "range {sector}+{count} is outside the array of {} sectors",
            self.array_sectors()
        );
        out.clear();
        if count == 0 {
            return;
        }
        match self {
            Geometry::Linear(g) => g.pieces(sector, count, out),
            Geometry::Raid0(g) => g.pieces(sector, count, out),
            Geometry::Raid1(g) => out.push(g.piece(sector, count)),
            Geometry::Raid10(g) => g.pieces(sector, count, out),
            Geometry::Parity(g) => g.pieces(sector, count, out),
        }
        debug_assert_eq!(out.iter().map(|p| p.sectors).sum::<u64>(), count);
        debug_assert!(out.len() <= self.piece_room(sector, count));
    }

    /// Which members a write of `[sector, sector + count)` writes: every copy of its data,
    /// and for parity levels the parity of every stripe it touches (`true` at the member's
    /// index). What a write that must be durable on its own (FUA) has to flush. Panics if
    /// the range is outside the array, as [`Geometry::pieces`].
    pub fn members_written(&self, sector: u64, count: u64) -> Vec<bool> {
        let n = self.members();
        let mut written = vec![false; n];
        for p in self.pieces(sector, count) {
            for c in &p.copies {
                written[c.member] = true;
            }
        }
        if let Geometry::Parity(g) = self {
            if count > 0 {
                let first = g.locate(sector).0;
                let last = g.locate(sector + count - 1).0;
                // Parity rotates: as many stripes as members put it on every member.
                for stripe in first..=last.min(first + n as u64) {
                    let map = g.stripe_map(stripe);
                    written[map.p] = true;
                    if let Some(q) = map.q {
                        written[q] = true;
                    }
                }
            }
        }
        written
    }

    /// The most pieces `[sector, sector + count)` splits into (one per chunk it touches; one
    /// per member it touches on linear; one on RAID1), for [`Geometry::pieces_into`].
    #[inline]
    pub fn piece_room(&self, sector: u64, count: u64) -> usize {
        if count == 0 {
            return 0;
        }
        match self {
            Geometry::Linear(g) => g.members_touched(sector, count),
            Geometry::Raid1(_) => 1,
            Geometry::Raid0(g) => chunk_span(sector, count, u64::from(g.chunk_sectors)),
            Geometry::Raid10(g) => chunk_span(sector, count, u64::from(g.chunk_sectors)),
            Geometry::Parity(g) => chunk_span(sector, count, u64::from(g.chunk_sectors)),
        }
    }

    /// Where a member sector belongs: data of some array sector (and which copy), parity, or
    /// nothing (beyond the used area, or a RAID0 zone gap). A member slot that does not exist
    /// holds nothing.
    pub fn reverse(&self, member: usize, member_sector: u64) -> Reverse {
        if member >= self.members() {
            return Reverse::Unused;
        }
        match self {
            Geometry::Linear(g) => g.reverse(member, member_sector),
            Geometry::Raid0(g) => g.reverse(member, member_sector),
            Geometry::Raid1(g) => g.reverse(member, member_sector),
            Geometry::Raid10(g) => g.reverse(member, member_sector),
            Geometry::Parity(g) => g.reverse(member, member_sector),
        }
    }

    pub fn as_parity(&self) -> Option<&ParityGeometry> {
        match self {
            Geometry::Parity(p) => Some(p),
            _ => None,
        }
    }
}

impl Raid1Geometry {
    /// The whole range is one piece: every member holds it at the same sectors.
    fn piece(&self, sector: u64, count: u64) -> Piece {
        let copies = (0..self.members)
            .map(|member| crate::map::Loc { member, sector })
            .collect();
        Piece {
            array_sector: sector,
            sectors: count,
            copies,
        }
    }

    fn reverse(&self, member: usize, member_sector: u64) -> Reverse {
        if member_sector >= self.dev_sectors {
            return Reverse::Unused;
        }
        Reverse::Data {
            array_sector: member_sector,
            copy: member,
        }
    }
}
