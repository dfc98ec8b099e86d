//! md RAID10 (`raid10.c`): near, far and offset copies.
//!
//! Array chunk `ch` takes the `near` consecutive "slots" `ch*near ..`, slot `i` being member
//! `i % members` of row `i / members` (RAID0 style with each chunk repeated). Each of those
//! first copies has `far - 1` further copies, each one `stride` further down and moved
//! `near` members along within its far set. For "far" layouts the stride is a fraction of
//! the member (the array repeats further down); for "offset" layouts it is one chunk and
//! each row is followed by its shifted copies.

use smallvec::SmallVec;

use crate::level::{Level, Raid10Layout};
use crate::limits::{check_chunk, check_member_size, check_members, chunk_span, LayoutError};
use crate::map::{push_merged, Loc, Piece, Pieces, Reverse};

/// md RAID10 (near/far/offset copies).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Raid10Geometry {
    pub members: usize,
    pub layout: Raid10Layout,
    pub chunk_sectors: u32,
    /// md's component size as given; the geometry derives md's `dev_sectors` and `stride`.
    pub dev_sectors: u64,
    /// Derived sizes: array chunks, used chunks per member, stride, far sets.
    pub(crate) shape: Raid10Shape,
}

/// Sizes md derives from the component size (`calc_sectors`), and the far-set shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Raid10Shape {
    chunk_shift: u32,
    /// Array size in chunks.
    array_chunks: u64,
    /// md's `dev_sectors` in chunks: how much of each member the layout uses.
    used_chunks: u64,
    /// Distance between successive far copies, in chunks (md's `stride`).
    stride_chunks: u64,
    far_set_size: usize,
    /// Whether the members do not split evenly into far sets, in which case md's last far
    /// set absorbs the `members % far_set_size` extra members.
    uneven_sets: bool,
    last_set_start: usize,
    last_set_size: usize,
}

fn bad_layout(layout: Raid10Layout) -> LayoutError {
    LayoutError::BadLayout {
        level: Level::Raid10,
        layout: format!("{layout} ({:#x})", layout.md_number()),
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// md's `calc_sectors`/`raid10_size`: (array chunks, used chunks per member, stride chunks).
fn sizes(members: u64, layout: Raid10Layout, dev_chunks: u64) -> (u64, u64, u64) {
    let near = u64::from(layout.near);
    let far = u64::from(layout.far);
    let array_chunks = dev_chunks / far * members / near;
    let used_chunks = (array_chunks * near * far).div_ceil(members);
    let stride_chunks = if layout.offset { 1 } else { used_chunks / far };
    (array_chunks, used_chunks, stride_chunks)
}

impl Raid10Geometry {
    pub(crate) fn new(
        members: usize,
        layout: Raid10Layout,
        chunk_sectors: u32,
        dev_sectors: u64,
    ) -> Result<Raid10Geometry, LayoutError> {
        check_members(Level::Raid10, members)?;
        // md refuses a single copy and the buggy far-set mode 1.
        if !layout.is_well_formed() || layout.copies() < 2 {
            return Err(bad_layout(layout));
        }
        if layout.copies() > members {
            return Err(LayoutError::Raid10TooFewMembers {
                copies: layout.copies(),
                members,
            });
        }
        check_chunk(chunk_sectors)?;
        check_member_size(0, dev_sectors)?;
        let chunk_shift = chunk_sectors.trailing_zeros();
        let (array_chunks, used_chunks, stride_chunks) =
            sizes(members as u64, layout, dev_sectors >> chunk_shift);
        if array_chunks == 0 {
            return Err(LayoutError::Empty);
        }
        let far_set_size = match layout.far_set_mode {
            0 => members,
            _ => layout.copies(),
        };
        let geometry = Raid10Geometry {
            members,
            layout,
            chunk_sectors,
            dev_sectors,
            shape: Raid10Shape {
                chunk_shift,
                array_chunks,
                used_chunks,
                stride_chunks,
                far_set_size,
                uneven_sets: !members.is_multiple_of(far_set_size),
                last_set_start: (members / far_set_size - 1) * far_set_size,
                last_set_size: far_set_size + members % far_set_size,
            },
        };
        if !geometry.copies_never_collide() {
            return Err(bad_layout(layout));
        }
        debug_assert!(stride_chunks > 0);
        debug_assert!(used_chunks * u64::from(chunk_sectors) <= dev_sectors);
        Ok(geometry)
    }

    /// md maps some exotic layouts (offset copies with `members % near != 0`, far sets that
    /// spill into md's enlarged last set) so that two copies land on the same member sector;
    /// md would corrupt data there, so raidd refuses them. mdadm cannot create them (its
    /// `n`/`f`/`o` names set one kind of copy), only raw layout numbers can.
    /// Every other layout is collision-free when one far step is a permutation of the
    /// members that [`Raid10Geometry::far_unstep`] undoes (the tests check this claim
    /// against a brute-force search).
    fn copies_never_collide(&self) -> bool {
        if self.layout.far == 1 {
            return true;
        }
        if self.layout.offset && !self.members.is_multiple_of(usize::from(self.layout.near)) {
            return false;
        }
        (0..self.members).all(|d| self.far_unstep(self.far_step(d)) == d)
    }

    pub(crate) fn array_sectors(&self) -> u64 {
        self.shape.array_chunks << self.shape.chunk_shift
    }

    /// md's `dev_sectors`: the part of every member the layout uses.
    pub(crate) fn used_sectors(&self) -> u64 {
        self.shape.used_chunks << self.shape.chunk_shift
    }

    /// The member holding the next far copy after one on member `d` (md's far-set walk).
    fn far_step(&self, d: usize) -> usize {
        let shape = &self.shape;
        let set = d / shape.far_set_size;
        let next = d + usize::from(self.layout.near);
        if shape.uneven_sets && next > shape.last_set_start {
            (next - shape.last_set_start) % shape.last_set_size + shape.last_set_start
        } else {
            next % shape.far_set_size + shape.far_set_size * set
        }
    }

    /// Inverse of [`Raid10Geometry::far_step`]: rotate back by `near` within the far set
    /// holding `d`.
    fn far_unstep(&self, d: usize) -> usize {
        let shape = &self.shape;
        let (start, size) = if shape.uneven_sets && d >= shape.last_set_start {
            (shape.last_set_start, shape.last_set_size)
        } else {
            (
                d / shape.far_set_size * shape.far_set_size,
                shape.far_set_size,
            )
        };
        start + (d - start + size - usize::from(self.layout.near) % size) % size
    }

    /// Every copy of array chunk `chunk` at in-chunk offset `offset`, in md's order
    /// (`__raid10_find_phys`): for each near copy, its first location then its far copies.
    fn copies_of(&self, chunk: u64, offset: u64) -> SmallVec<[Loc; 4]> {
        let shape = &self.shape;
        let members = self.members as u64;
        let far = u64::from(self.layout.far);
        let slot = chunk * u64::from(self.layout.near);
        let mut row = slot / members;
        let mut dev = (slot % members) as usize;
        if self.layout.offset {
            row *= far;
        }
        let mut base = (row << shape.chunk_shift) + offset;
        let stride = shape.stride_chunks << shape.chunk_shift;
        let mut copies = SmallVec::with_capacity(self.layout.copies());
        for _ in 0..self.layout.near {
            let (mut d, mut s) = (dev, base);
            copies.push(Loc {
                member: d,
                sector: s,
            });
            for _ in 1..self.layout.far {
                d = self.far_step(d);
                s += stride;
                copies.push(Loc {
                    member: d,
                    sector: s,
                });
            }
            // Near copies continue on the next member, wrapping to the next row.
            dev += 1;
            if dev == self.members {
                dev = 0;
                base += u64::from(self.chunk_sectors);
            }
        }
        copies
    }

    pub(crate) fn pieces(&self, sector: u64, count: u64, pieces: &mut Pieces) {
        let chunk = u64::from(self.chunk_sectors);
        let end = sector + count;
        pieces.reserve(chunk_span(sector, count, chunk));
        let mut at = sector;
        while at < end {
            let offset = at & (chunk - 1);
            let len = (chunk - offset).min(end - at);
            let copies = self.copies_of(at >> self.shape.chunk_shift, offset);
            let piece = Piece {
                array_sector: at,
                sectors: len,
                copies,
            };
            push_merged(pieces, piece);
            at += len;
        }
    }

    pub(crate) fn reverse(&self, member: usize, member_sector: u64) -> Reverse {
        let shape = &self.shape;
        if member_sector >= self.used_sectors() {
            return Reverse::Unused;
        }
        let far = u64::from(self.layout.far);
        let near = u64::from(self.layout.near);
        let row = member_sector >> shape.chunk_shift;
        let offset = member_sector & (u64::from(self.chunk_sectors) - 1);
        // Which far copy this row holds, and the row of the first copies it repeats.
        let (far_copy, first_row) = if self.layout.offset {
            (row % far, row / far)
        } else {
            (row / shape.stride_chunks, row % shape.stride_chunks)
        };
        if far_copy >= far {
            return Reverse::Unused; // the rounding tail past the last far copy
        }
        let first_member = (0..far_copy).fold(member, |d, _| self.far_unstep(d));
        let slot = first_row * self.members as u64 + first_member as u64;
        let chunk = slot / near;
        if chunk >= shape.array_chunks {
            return Reverse::Unused; // the partly used last row
        }
        Reverse::Data {
            array_sector: (chunk << shape.chunk_shift) + offset,
            copy: ((slot % near) * far + far_copy) as usize,
        }
    }

    /// Whether every chunk keeps a copy on a member that is not missing. The members holding
    /// a chunk's copies repeat every `members / gcd(members, near)` chunks, so checking one
    /// period (or the whole array when it is shorter) covers the array.
    pub(crate) fn survives(&self, is_missing: impl Fn(usize) -> bool) -> bool {
        let members = self.members as u64;
        let period = members / gcd(members, u64::from(self.layout.near));
        (0..period.min(self.shape.array_chunks)).all(|chunk| {
            self.copies_of(chunk, 0)
                .iter()
                .any(|loc| !is_missing(loc.member))
        })
    }
}
