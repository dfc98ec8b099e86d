//! `raidd status`: what the running daemon serves, through its control socket.

use std::path::{Path, PathBuf};

use clap::Args;

use raidd_admin::control::{self, Request};
use raidd_admin::exit::{AdminError, AdminResult, Exit};

use crate::output;

#[derive(Args, Debug)]
pub struct StatusArgs {
    /// The daemon's control socket (default: $RAIDD_CONTROL or /run/raidd/raidd.sock).
    #[arg(long, value_name = "PATH")]
    pub control: Option<PathBuf>,
}

/// Asks the daemon and prints its answer (text or JSON); its exit code becomes ours.
pub fn ask_and_print(socket: &Path, req: &Request, json: bool) -> AdminResult {
    let resp = control::ask(socket, req)?;
    if resp.exit != 0 {
        let exit = Exit::from_code(resp.exit);
        return Err(AdminError::new(
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

pub fn run(args: StatusArgs, json: bool) -> AdminResult {
    ask_and_print(&control::socket_path(args.control), &Request::Status, json)
}
