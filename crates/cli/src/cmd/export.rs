//! `raidd export add|remove`: NBD exports offered or withdrawn while the daemon runs, over
//! its control socket (the config file is not changed: a SIGHUP after editing it does the
//! same and keeps it across restarts).

use std::path::PathBuf;

use clap::{Args, Subcommand};
use raidd_admin::control::{socket_path as control_socket, Request};
use raidd_admin::exit::AdminResult;
use raidd_admin::volume::VolumeRef;

use super::status::ask_and_print;

#[derive(Args, Debug)]
pub struct ExportArgs {
    #[command(subcommand)]
    action: ExportAction,
}

#[derive(Subcommand, Debug)]
enum ExportAction {
    /// Offer an export of a served array (or of one of its volumes) from now on.
    Add {
        /// The export's name, as clients ask for it.
        name: String,
        /// The served array, by its name in the config.
        #[arg(long)]
        array: String,
        /// A volume of the array (its name or number), instead of all of it.
        #[arg(long)]
        volume: Option<String>,
        #[arg(long)]
        read_only: bool,
        /// What NBD_OPT_INFO tells clients about it.
        #[arg(long)]
        description: Option<String>,
        /// The daemon's control socket (default: $RAIDD_CONTROL or /run/raidd/raidd.sock).
        #[arg(long, value_name = "PATH")]
        control: Option<PathBuf>,
    },
    /// Stop offering an export; its connections take no more requests and are closed.
    Remove {
        name: String,
        #[arg(long, value_name = "PATH")]
        control: Option<PathBuf>,
    },
}

pub fn run(args: ExportArgs, json: bool) -> AdminResult {
    match args.action {
        ExportAction::Add {
            name,
            array,
            volume,
            read_only,
            description,
            control,
        } => {
            let req = Request::ExportAdd {
                name,
                array,
                volume: volume.as_deref().map(VolumeRef::parse),
                read_only,
                description,
            };
            ask_and_print(&control_socket(control), &req, json)
        }
        ExportAction::Remove { name, control } => ask_and_print(
            &control_socket(control),
            &Request::ExportRemove { name },
            json,
        ),
    }
}
