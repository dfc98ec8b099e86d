//! What an operator says to raidd and what raidd answers, shared by the CLI (offline
//! commands, and the client side of the control socket) and the daemon (`raidd-server`),
//! so that neither imports the other's internals:
//!
//! - [`exit`]: the exit codes scripts rely on, and the error that carries one;
//! - [`control`]: the control socket's protocol, one JSON line each way, and its client;
//! - [`members`] and [`session`]: opening member files and assembling the arrays they make;
//!   [`scan`]: finding an array's members by its UUID;
//! - [`detail`] and [`status`]: the reports, as text and as JSON, built from the engine's
//!   status of each array (the daemon's status report also from its exports);
//! - [`ublk`]: ublk's control device (the daemon's devices, and `raidd ublk list|delete`);
//! - [`volume`] and [`volume_io`]: volumes (GPT partitions) of an array, the table's logic
//!   on bytes and its reading and writing on a running array;
//! - [`size`], [`text`], [`progress`], [`md_names`]: how sizes, times, passes and md's
//!   levels and layouts are written (and levels read);
//! - [`output`]: writing reports to stdout (the CLI's commands and the lab's).

pub mod control;
pub mod detail;
pub mod exit;
pub mod md_names;
pub mod members;
pub mod output;
pub mod progress;
pub mod scan;
pub mod session;
pub mod size;
pub mod status;
pub mod text;
pub mod ublk;
pub mod volume;
pub mod volume_io;
