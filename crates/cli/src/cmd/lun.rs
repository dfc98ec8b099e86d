//! `raidd lun add|remove`: LUNs of a served iSCSI target offered or withdrawn while the
//! daemon runs, over its control socket (the config file is not changed: a SIGHUP after
//! editing it does the same and keeps it across restarts). Logged-in initiators get a
//! REPORTED LUNS DATA HAS CHANGED unit attention and find the change when they scan.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use raidd_admin::control::{socket_path as control_socket, Request};
use raidd_admin::exit::AdminResult;
use raidd_admin::volume::VolumeRef;

use super::status::ask_and_print;

#[derive(Args, Debug)]
pub struct LunArgs {
    #[command(subcommand)]
    action: LunAction,
}

#[derive(Subcommand, Debug)]
enum LunAction {
    /// Offer a LUN of a served target: a served array, or one of its volumes.
    Add {
        /// The target's iSCSI name (iqn....), as `raidd status` lists it.
        target: String,
        /// The served array, by its name in the config.
        #[arg(long)]
        array: String,
        /// The LUN's number (default: the lowest free one).
        #[arg(long)]
        lun: Option<u64>,
        /// A volume of the array (its name or number), instead of all of it.
        #[arg(long)]
        volume: Option<String>,
        #[arg(long)]
        read_only: bool,
        /// The daemon's control socket (default: $RAIDD_CONTROL or /run/raidd/raidd.sock).
        #[arg(long, value_name = "PATH")]
        control: Option<PathBuf>,
    },
    /// Stop offering a LUN (not a target's only one): commands sent to it from then on find
    /// no unit there.
    Remove {
        target: String,
        lun: u64,
        #[arg(long, value_name = "PATH")]
        control: Option<PathBuf>,
    },
}

pub fn run(args: LunArgs, json: bool) -> AdminResult {
    match args.action {
        LunAction::Add {
            target,
            array,
            lun,
            volume,
            read_only,
            control,
        } => {
            let req = Request::LunAdd {
                target,
                lun,
                array,
                volume: volume.as_deref().map(VolumeRef::parse),
                read_only,
            };
            ask_and_print(&control_socket(control), &req, json)
        }
        LunAction::Remove {
            target,
            lun,
            control,
        } => ask_and_print(
            &control_socket(control),
            &Request::LunRemove { target, lun },
            json,
        ),
    }
}
