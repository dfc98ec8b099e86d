//! Array sector <-> member sector mapping results.

use smallvec::SmallVec;

/// A place on a member: member slot (md role) and sector within its data area.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Loc {
    pub member: usize,
    pub sector: u64,
}

/// The pieces of one request: held inline up to two (a request within a chunk, or across
/// one chunk boundary), so mapping a small request allocates nothing.
pub type Pieces = SmallVec<[Piece; 2]>;

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
    Data {
        array_sector: u64,
        copy: usize,
    },
    /// Parity of stripe `stripe` (P for RAID4/5/6, Q for RAID6) at `offset` within the chunk.
    P {
        stripe: u64,
        offset: u64,
    },
    Q {
        stripe: u64,
        offset: u64,
    },
    /// Not used by the array.
    Unused,
}

impl Piece {
    /// A piece with one copy.
    pub(crate) fn single(array_sector: u64, sectors: u64, loc: Loc) -> Piece {
        let mut copies = SmallVec::new();
        copies.push(loc);
        Piece {
            array_sector,
            sectors,
            copies,
        }
    }

    /// The array sector just past this piece.
    pub fn end(&self) -> u64 {
        self.array_sector + self.sectors
    }

    /// Whether `next` continues this piece in the array and on every copy, so that the two
    /// can be one piece.
    fn continued_by(&self, next: &Piece) -> bool {
        self.end() == next.array_sector
            && self.copies.len() == next.copies.len()
            && self
                .copies
                .iter()
                .zip(&next.copies)
                .all(|(a, b)| a.member == b.member && a.sector + self.sectors == b.sector)
    }
}

/// Appends `piece` to `pieces`, merging it into the last piece when it continues that piece
/// on every copy: layouts map chunk by chunk, but adjacent chunks are often adjacent on every
/// member too (one-zone RAID0 over one member, RAID10 with near == members), and fewer pieces
/// mean fewer member requests.
pub(crate) fn push_merged(pieces: &mut Pieces, piece: Piece) {
    debug_assert!(piece.sectors > 0, "pieces are never empty");
    if let Some(last) = pieces.last_mut() {
        debug_assert_eq!(last.end(), piece.array_sector, "pieces come in array order");
        if last.continued_by(&piece) {
            last.sectors += piece.sectors;
            return;
        }
    }
    pieces.push(piece);
}
