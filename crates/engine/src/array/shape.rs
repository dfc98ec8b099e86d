//! The array's shape: how array sectors map to member data sectors. A [`Shape`] is a value
//! (level, layout, chunk, raid disks and each member's component size, as md's superblock
//! records them); an array maps every I/O through [`Shapes`], the shape that covers the
//! sector in hand. Today an array has one shape. A reshape (md's `mdadm --grow` of
//! raid-devices, level, chunk or layout) has two at once: the one it is going to below a
//! boundary (md's reshape_position) and the one it comes from above it, and moves the
//! boundary as it copies. Everything that maps sectors (the read and write paths, the
//! parity pipeline and its stripe cache, recovery and scrub) asks this seam for its shape;
//! none keeps a copy.
//!
//! Where a member's data area starts is not part of a shape: md records it per member (its
//! superblock's data_offset, and new_offset while a reshape moves data), so it belongs to
//! the member in the slot (`Slots::data_offset`).

use raidd_layout::{Geometry, Level, ParityGeometry, Piece, SECTOR_SIZE};
use raidd_rt::recycle::Table;

/// One layout of an array's data over its members.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shape {
    geometry: Geometry,
}

impl Shape {
    pub fn new(geometry: Geometry) -> Shape {
        Shape { geometry }
    }

    /// Level, layout, chunk, members and their sizes, and the mapping itself.
    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    pub fn level(&self) -> Level {
        self.geometry.level()
    }

    /// The RAID4/5/6 layout, on those levels.
    pub fn parity(&self) -> Option<&ParityGeometry> {
        self.geometry.as_parity()
    }

    /// Array sectors this shape holds.
    pub fn sectors(&self) -> u64 {
        self.geometry.array_sectors()
    }

    /// The pieces of a request's bytes at byte `offset`, on a table kept per thread when
    /// they are more than a small request's two.
    #[inline(always)]
    pub(crate) fn pieces_of(&self, offset: u64, len: u64) -> Table<[Piece; 2]> {
        let (sector, count) = (offset / SECTOR_SIZE, len / SECTOR_SIZE);
        debug_assert!(
            sector + count <= self.sectors(),
            "a request past the end of the shape"
        );
        let mut pieces = if count <= u64::from(self.geometry.chunk_sectors()) {
            // Within a chunk's length: at most two chunks, inline.
            Table::default()
        } else {
            Table::with_room(self.geometry.piece_room(sector, count))
        };
        self.geometry.pieces_into(sector, count, &mut pieces);
        pieces
    }

    /// Member sectors per sync window: whole chunks, about `bytes`.
    pub(crate) fn sync_window(&self, bytes: u64) -> u64 {
        let chunk = u64::from(self.geometry.chunk_sectors()).max(1);
        (bytes / SECTOR_SIZE).max(1).div_ceil(chunk) * chunk
    }
}

/// The shapes an array maps through: one, or during a reshape two with a boundary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shapes {
    /// The shape the array has, or is going to below the boundary.
    current: Shape,
    /// During a reshape: the shape it comes from, and the array sector from which on that
    /// one still holds the data (md's reshape_position, growing forwards).
    previous: Option<(Shape, u64)>,
}

impl Shapes {
    /// An array with one shape (no reshape in progress).
    pub fn one(shape: Shape) -> Shapes {
        Shapes {
            current: shape,
            previous: None,
        }
    }

    /// An array part way through a reshape from `previous` to `next`: array sectors below
    /// `boundary` are laid out as `next`, the rest as `previous`.
    pub fn reshaping(previous: Shape, next: Shape, boundary: u64) -> Shapes {
        assert!(
            boundary <= previous.sectors().min(next.sectors()),
            "a reshape boundary lies inside both shapes"
        );
        Shapes {
            current: next,
            previous: Some((previous, boundary)),
        }
    }

    /// The shape the array has (or is going to, during a reshape).
    pub fn current(&self) -> &Shape {
        &self.current
    }

    /// md's reshape_position, during a reshape.
    pub fn boundary(&self) -> Option<u64> {
        self.previous.as_ref().map(|(_, b)| *b)
    }

    /// The shape that holds array sectors `[sector, sector + count)`. A range never
    /// crosses the boundary: the array cuts requests there before mapping them.
    pub fn covering(&self, sector: u64, count: u64) -> &Shape {
        match &self.previous {
            Some((previous, boundary)) if sector >= *boundary => previous,
            Some((_, boundary)) => {
                assert!(
                    sector + count <= *boundary,
                    "sectors {sector}+{count} cross the reshape boundary {boundary}"
                );
                &self.current
            }
            None => &self.current,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use raidd_layout::ParityLayout;

    fn raid5(members: usize) -> Shape {
        Shape::new(
            Geometry::parity(Level::Raid5, members, ParityLayout::LeftSymmetric, 16, 1024)
                .expect("valid"),
        )
    }

    #[test]
    fn one_shape_covers_everything() {
        let s = Shapes::one(raid5(4));
        assert_eq!(s.boundary(), None);
        for sector in [0, 1, 47, 3071] {
            assert_eq!(s.covering(sector, 1), &raid5(4));
        }
    }

    #[test]
    fn a_reshape_maps_below_the_boundary_through_the_new_shape() {
        let s = Shapes::reshaping(raid5(4), raid5(5), 960);
        assert_eq!(s.boundary(), Some(960));
        assert_eq!(s.covering(0, 960), &raid5(5));
        assert_eq!(s.covering(959, 1), &raid5(5));
        assert_eq!(s.covering(960, 16), &raid5(4));
        assert_eq!(s.current(), &raid5(5));
    }

    #[test]
    #[should_panic(expected = "cross the reshape boundary")]
    fn a_range_across_the_boundary_stops_loudly() {
        Shapes::reshaping(raid5(4), raid5(5), 960).covering(950, 16);
    }

    #[test]
    fn windows_are_whole_chunks() {
        let s = raid5(4);
        assert_eq!(s.sync_window(1), 16);
        assert_eq!(s.sync_window(16 * 512), 16);
        assert_eq!(s.sync_window(17 * 512), 32);
    }
}
