//! Simulated disks and buses for raidd's benchmarks: the drive mechanics of seeds 000 and
//! 001 (zones, seeks, rotation, skew, a read-ahead cache that stops when its segment is
//! full) and the paths their data takes (PATA channels that serialise master and slave,
//! controllers, one shared bus, the host), timed in simulated nanoseconds.
//!
//! Everything here is numbers: a [`World`] answers "when does this request complete?" from
//! the state earlier requests left. Keeping data and waiting in simulated time belong to
//! the engine's simulated member; this crate does no I/O.

pub mod disk;
pub mod drive;
pub mod topology;
pub mod world;

pub use drive::{Drive, DriveSpec, SECTOR};
pub use topology::{load_model, Topology, BUILTIN, PCI_MB_S};
pub use world::{Calendar, DriveStats, Op, World};

#[cfg(test)]
mod tests;
