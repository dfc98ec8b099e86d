//! `raidd serve`: runs the storage daemon (`raidd-server`) until SIGTERM or SIGINT.

use std::path::PathBuf;

use clap::Args;
use raidd_admin::exit::AdminResult;

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// The configuration file (TOML): arrays, exports, listening address.
    #[arg(short, long, value_name = "FILE")]
    pub config: PathBuf,
    /// The control socket (overrides the config's `control_socket`).
    #[arg(long, value_name = "PATH")]
    pub control: Option<PathBuf>,
}

pub fn run(args: ServeArgs) -> AdminResult {
    raidd_server::run(raidd_server::Options {
        config: args.config,
        control: args.control,
    })
}
