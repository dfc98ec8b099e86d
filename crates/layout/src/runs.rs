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

impl Seg {
    fn end(&self) -> u64 {
        self.array_sector + self.sectors
    }
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

impl Run {
    fn new(member: usize, sector: u64, seg: Seg) -> Run {
        let mut segs = SmallVec::new();
        segs.push(seg);
        Run {
            member,
            sector,
            sectors: seg.sectors,
            segs,
        }
    }

    /// The member sector just past this run.
    pub fn end(&self) -> u64 {
        self.sector + self.sectors
    }

    /// Segs needed to hold this run's segs followed by `first`, ..: one fewer when the
    /// boundary segs are adjacent in the array.
    fn segs_with(&self, first: &Seg, count: usize) -> usize {
        let joins = self
            .segs
            .last()
            .is_some_and(|last| last.end() == first.array_sector);
        self.segs.len() + count - usize::from(joins)
    }

    /// Appends `segs` (which continue this run on the member) if the seg limit allows.
    fn try_extend(&mut self, sector: u64, segs: &[Seg], max_segs: usize) -> bool {
        let Some(first) = segs.first() else {
            return true;
        };
        if self.end() != sector || self.segs_with(first, segs.len()) > max_segs {
            return false;
        }
        for seg in segs {
            match self.segs.last_mut() {
                Some(last) if last.end() == seg.array_sector => last.sectors += seg.sectors,
                _ => self.segs.push(*seg),
            }
            self.sectors += seg.sectors;
        }
        debug_assert!(self.segs.len() <= max_segs);
        true
    }
}

/// Marks a member with no open run in the per-member index.
const NO_RUN: usize = usize::MAX;

/// Groups pieces into runs. `pick(piece)` chooses which copy to use (index into
/// `piece.copies`); pieces whose chosen copies are contiguous on the same member join one run,
/// even when other members' pieces come between them in array order (RAID0 over several
/// members gives one run per member). A run never has more than `max_segs` segs (the kernel's
/// IOV_MAX is 1024); adjacent segs in the array are merged into one. A `max_segs` of 0 is
/// taken as 1. Panics if `pick` returns an index outside `piece.copies` (a caller bug).
/// Runs come out ordered by (member, sector).
pub fn coalesce(
    pieces: &[Piece],
    max_segs: usize,
    mut pick: impl FnMut(&Piece) -> usize,
) -> Vec<Run> {
    let max_segs = max_segs.max(1);
    let mut runs: Vec<Run> = Vec::with_capacity(pieces.len().min(64));
    // The newest run of each member: in array order a member's pieces usually follow each
    // other on the member, so the newest run is the one a piece extends.
    let mut newest: SmallVec<[usize; 32]> = SmallVec::new();
    for piece in pieces {
        let copy = pick(piece);
        assert!(
            copy < piece.copies.len(),
            "pick chose copy {copy} of a piece with {} copies",
            piece.copies.len()
        );
        let loc = piece.copies[copy];
        let seg = Seg {
            array_sector: piece.array_sector,
            sectors: piece.sectors,
        };
        if newest.len() <= loc.member {
            newest.resize(loc.member + 1, NO_RUN);
        }
        let index = newest[loc.member];
        if index != NO_RUN && runs[index].try_extend(loc.sector, &[seg], max_segs) {
            continue;
        }
        newest[loc.member] = runs.len();
        runs.push(Run::new(loc.member, loc.sector, seg));
    }
    runs.sort_unstable_by_key(|run| (run.member, run.sector));
    join_adjacent(&mut runs, max_segs);
    runs
}

/// Joins runs that ended up adjacent on a member (pieces that came out of member order, as
/// with far copies), within the seg limit.
fn join_adjacent(runs: &mut Vec<Run>, max_segs: usize) {
    runs.dedup_by(|later, earlier| {
        later.member == earlier.member && earlier.try_extend(later.sector, &later.segs, max_segs)
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::map::Loc;

    fn piece(array_sector: u64, sectors: u64, locs: &[(usize, u64)]) -> Piece {
        Piece {
            array_sector,
            sectors,
            copies: locs
                .iter()
                .map(|&(member, sector)| Loc { member, sector })
                .collect(),
        }
    }

    #[test]
    fn interleaved_members_give_one_run_each() {
        // RAID0 over two members, chunk 8: 0->m0@0, 8->m1@0, 16->m0@8, 24->m1@8.
        let pieces = [
            piece(0, 8, &[(0, 0)]),
            piece(8, 8, &[(1, 0)]),
            piece(16, 8, &[(0, 8)]),
            piece(24, 8, &[(1, 8)]),
        ];
        let runs = coalesce(&pieces, 1024, |_| 0);
        assert_eq!(runs.len(), 2);
        assert_eq!(
            (runs[0].member, runs[0].sector, runs[0].sectors),
            (0, 0, 16)
        );
        assert_eq!(
            (runs[1].member, runs[1].sector, runs[1].sectors),
            (1, 0, 16)
        );
        let segs: Vec<(u64, u64)> = runs[0]
            .segs
            .iter()
            .map(|s| (s.array_sector, s.sectors))
            .collect();
        assert_eq!(segs, [(0, 8), (16, 8)]);
    }

    #[test]
    fn seg_limit_splits_runs() {
        let pieces = [
            piece(0, 8, &[(0, 0)]),
            piece(8, 8, &[(1, 0)]),
            piece(16, 8, &[(0, 8)]),
            piece(24, 8, &[(1, 8)]),
            piece(32, 8, &[(0, 16)]),
        ];
        let runs = coalesce(&pieces, 2, |_| 0);
        let m0: Vec<(u64, u64, usize)> = runs
            .iter()
            .filter(|r| r.member == 0)
            .map(|r| (r.sector, r.sectors, r.segs.len()))
            .collect();
        assert_eq!(m0, [(0, 16, 2), (16, 8, 1)]);
        // 0 behaves as 1.
        assert!(coalesce(&pieces, 0, |_| 0)
            .iter()
            .all(|r| r.segs.len() == 1));
    }

    #[test]
    fn array_adjacent_pieces_share_a_seg() {
        let pieces = [piece(0, 8, &[(3, 100)]), piece(8, 4, &[(3, 108)])];
        let runs = coalesce(&pieces, 1, |_| 0);
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].segs.len(), 1);
        assert_eq!(
            runs[0].segs[0],
            Seg {
                array_sector: 0,
                sectors: 12
            }
        );
    }

    #[test]
    fn out_of_order_pieces_are_joined_in_member_order() {
        // The second piece sits before the first on the member.
        let pieces = [piece(0, 8, &[(0, 8)]), piece(8, 8, &[(0, 0)])];
        let runs = coalesce(&pieces, 8, |_| 0);
        assert_eq!(runs.len(), 1);
        assert_eq!((runs[0].sector, runs[0].sectors), (0, 16));
        let order: Vec<u64> = runs[0].segs.iter().map(|s| s.array_sector).collect();
        assert_eq!(order, [8, 0]);
    }

    #[test]
    fn pick_chooses_the_copy() {
        let pieces = [
            piece(0, 8, &[(0, 0), (1, 64)]),
            piece(8, 8, &[(2, 0), (3, 64)]),
        ];
        let runs = coalesce(&pieces, 8, |_| 1);
        let members: Vec<(usize, u64)> = runs.iter().map(|r| (r.member, r.sector)).collect();
        assert_eq!(members, [(1, 64), (3, 64)]);
    }

    #[test]
    #[should_panic(expected = "pick chose copy")]
    fn pick_out_of_range_is_a_caller_bug() {
        let pieces = [piece(0, 8, &[(0, 0)])];
        let _ = coalesce(&pieces, 8, |_| 1);
    }
}
