//! raidd's lab: what `raidd bench` and `raidd scan` run. Measurements that need no server
//! (parity kernels, the engine's I/O path driven in-process against its own members),
//! sweeps over request sizes and patterns on memory, file or simulated members and on
//! servers (through the NBD and iSCSI initiators here), the papers' experiments
//! reproduced on simulated drives, and transfer-rate scans. The admin CLI only parses the
//! two commands' arguments (defined here) and calls [`run`] or [`scan`]; nothing of the
//! daemon or the engine depends on this crate.

use clap::{Args, Subcommand};

use raidd_admin::exit::AdminResult;
use raidd_admin::size;

pub mod io;
mod iscsi;
pub(crate) mod load;
mod nbd;
pub mod parity;
pub(crate) mod plot;
mod report;
pub mod reproduce;
pub(crate) mod scan;
mod scan_cmd;
mod spec;
pub mod sweep;
pub(crate) mod target;

pub use scan_cmd::{run as scan, ScanArgs};

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub what: BenchWhat,
}

#[derive(Subcommand, Debug)]
pub enum BenchWhat {
    /// Parity throughput next to single-core memcpy: 4 and 8 data blocks of 64 KiB (a
    /// stripe in L2) and 4 MiB of data per stripe (L3 or memory).
    Parity {
        /// Seconds per row (spread over several alternating rounds; the median is shown).
        #[arg(long, default_value = "0.5", value_parser = size::parse_seconds, value_name = "S")]
        seconds: f64,
    },
    /// Drives an array, or its members directly, with an in-process load (no network, no
    /// client): the RAID layer's cost and scaling, as IOPS, bandwidth and CPU per I/O.
    Io(io::IoArgs),
    /// Sweeps request sizes and patterns over one or more targets, Iometer style: IOPS,
    /// MB/s, response-time percentiles and CPU per request for each point, as a table,
    /// JSON, CSV (Iometer's column names) and an SVG plot. Members may be simulated drives
    /// (sim:MODEL), which run in simulated time.
    Sweep(Box<sweep::SweepArgs>),
    /// Reproduces one of the papers' experiments on simulated drives: writes its CSV and
    /// SVG and checks the shape the paper reports (exit 1 when a check fails).
    Reproduce(reproduce::ReproduceArgs),
}

pub fn run(args: BenchArgs, json: bool) -> AdminResult {
    match args.what {
        BenchWhat::Parity { seconds } => parity::run(seconds, json),
        BenchWhat::Io(a) => io::run(a, json),
        BenchWhat::Sweep(a) => sweep::run(*a, json),
        BenchWhat::Reproduce(a) => reproduce::run(a, json),
    }
}
