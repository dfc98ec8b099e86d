//! md-linear: the members' data areas one after another, in role order.

use crate::level::Level;
use crate::limits::{check_member_size, check_members, LayoutError};
use crate::map::{Loc, Piece, Pieces, Reverse};

/// Concatenation of the members' data areas, in role order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinearGeometry {
    /// Usable sectors per member (already rounded as md does).
    pub member_sectors: Vec<u64>,
    /// `starts[i]` = first array sector of member i; `starts[n]` = array size.
    pub(crate) starts: Vec<u64>,
}

impl LinearGeometry {
    pub(crate) fn new(
        member_sectors: &[u64],
        rounding_sectors: u32,
    ) -> Result<LinearGeometry, LayoutError> {
        check_members(Level::Linear, member_sectors.len())?;
        let mut rounded = Vec::with_capacity(member_sectors.len());
        let mut starts = Vec::with_capacity(member_sectors.len() + 1);
        let mut total = 0u64;
        for (member, &sectors) in member_sectors.iter().enumerate() {
            check_member_size(member, sectors)?;
            // md-linear rounds each member down to the "chunk" (rounding) when one is set.
            let usable = match u64::from(rounding_sectors) {
                0 => sectors,
                rounding => sectors - sectors % rounding,
            };
            if usable == 0 {
                return Err(LayoutError::MemberTooSmall { member, sectors });
            }
            starts.push(total);
            rounded.push(usable);
            total += usable;
        }
        starts.push(total);
        Ok(LinearGeometry {
            member_sectors: rounded,
            starts,
        })
    }

    pub(crate) fn array_sectors(&self) -> u64 {
        self.starts[self.member_sectors.len()]
    }

    /// The member holding array sector `sector` (which must be inside the array).
    fn member_of(&self, sector: u64) -> usize {
        debug_assert!(sector < self.array_sectors());
        // starts is strictly increasing (no member is empty), so this finds exactly one.
        self.starts.partition_point(|&start| start <= sector) - 1
    }

    /// Members the non-empty range `[sector, sector + count)` touches.
    pub(crate) fn members_touched(&self, sector: u64, count: u64) -> usize {
        self.member_of(sector + count - 1) - self.member_of(sector) + 1
    }

    pub(crate) fn pieces(&self, sector: u64, count: u64, pieces: &mut Pieces) {
        let end = sector + count;
        let first = self.member_of(sector);
        let last = self.member_of(end - 1);
        pieces.reserve(last - first + 1);
        let mut at = sector;
        for member in first..=last {
            let piece_end = end.min(self.starts[member + 1]);
            let loc = Loc {
                member,
                sector: at - self.starts[member],
            };
            pieces.push(Piece::single(at, piece_end - at, loc));
            at = piece_end;
        }
        debug_assert_eq!(at, end);
    }

    pub(crate) fn reverse(&self, member: usize, member_sector: u64) -> Reverse {
        if member_sector >= self.member_sectors[member] {
            return Reverse::Unused;
        }
        Reverse::Data {
            array_sector: self.starts[member] + member_sector,
            copy: 0,
        }
    }
}
