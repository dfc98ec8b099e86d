//! md-compatible RAID geometry for raidd.
//!
//! Everything here is pure arithmetic on sector numbers: no I/O, no allocation on the hot
//! mapping paths beyond small vectors. Addresses are in 512-byte sectors. Member sectors are
//! relative to the start of the member's *data area* (md's `data_offset` is added by the
//! engine, never here).
//!
//! Layout rules follow Linux md (`drivers/md/raid0.c`, `raid10.c`, `raid5.c`) so that arrays
//! move between kernel md and raidd with their data intact.

pub mod geometry;
pub mod level;
mod limits;
mod linear;
pub mod map;
mod raid0;
mod raid10;
pub mod runs;
pub mod stripe;

pub use geometry::{
    Geometry, LayoutError, LinearGeometry, ParityGeometry, Raid0Geometry, Raid10Geometry,
    Raid1Geometry, MAX_MEMBERS, MAX_MEMBER_SECTORS, MIN_CHUNK_SECTORS,
};
pub use level::{Level, ParityLayout, Raid0Layout, Raid10Layout};
pub use map::{Loc, Piece, Pieces, Reverse};
pub use runs::{coalesce, Run, Seg};
pub use stripe::{StripeMap, StripeRole};

/// Bytes per sector: every address in this crate counts these.
pub const SECTOR_SIZE: u64 = 512;
