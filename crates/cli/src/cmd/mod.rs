//! One module per subcommand.

pub mod bench;
pub mod create;
pub mod detail;
pub mod examine;
pub mod manage;
pub mod pattern;
pub mod read;
pub mod scan;
pub mod serve;
pub mod status;
pub mod volume;
pub mod write;

/// How the commands that work on an array's data offline start it (`read`, `write`,
/// `pattern`).
#[derive(clap::Args, Clone, Copy, Debug, Default)]
pub struct StartArgs {
    /// Start the array even if it was not shut down cleanly and is degraded (RAID4/5/6).
    /// Where writes were in flight, data of the missing member may then read back wrong.
    #[arg(long)]
    pub start_dirty_degraded: bool,
}

impl StartArgs {
    pub fn start(self) -> raidd_admin::session::Start {
        raidd_admin::session::Start {
            dirty_degraded: self.start_dirty_degraded,
            member_timeout: None,
            dab: None,
        }
    }
}
