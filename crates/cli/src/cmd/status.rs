//! `raidd status`: what the running daemon serves, through its control socket.

use std::path::{Path, PathBuf};

use clap::Args;

use crate::exit::{CliError, CliResult, Exit};
use crate::output;
use crate::serve::config::DEFAULT_CONTROL_SOCKET;
use crate::serve::control::{self, Request};

#[derive(Args, Debug)]
pub struct StatusArgs {
    /// The daemon's control socket (default: $RAIDD_CONTROL or /run/raidd/raidd.sock).
    #[arg(long, value_name = "PATH")]
    pub control: Option<PathBuf>,
}

/// The control socket to use: the option, then `$RAIDD_CONTROL`, then the default.
pub fn control_socket(option: Option<PathBuf>) -> PathBuf {
    option
        .or_else(|| std::env::var_os("RAIDD_CONTROL").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CONTROL_SOCKET))
}

/// Asks the daemon and prints its answer (text or JSON); its exit code becomes ours.
pub fn ask_and_print(socket: &Path, req: &Request, json: bool) -> CliResult {
    let resp = control::ask(socket, req)?;
    if resp.exit != 0 {
        let exit = Exit::from_code(resp.exit);
        return Err(CliError::new(
            exit,
            resp.error
                .unwrap_or_else(|| "the daemon reported a failure".into()),
        ));
    }
    if json {
        output::emit_json(&resp.json)
    } else {
        output::emit(&resp.text)
    }
}

pub fn run(args: StatusArgs, json: bool) -> CliResult {
    ask_and_print(&control_socket(args.control), &Request::Status, json)
}
