//! One module per subcommand.

pub mod bench;
pub mod create;
pub mod detail;
pub mod examine;
pub mod manage;
pub mod pattern;
pub mod read;
pub mod status;
pub mod write;
