//! `raidd ublk list|delete`: the ublk devices on this host, through the control device. A
//! `raidd serve` stopped cleanly leaves none; one killed leaves its devices for the next
//! `raidd serve` to take over, and `delete` removes one nobody will. `raidd ublk
//! add|remove` ask the running daemon, over its control socket, to serve a device or stop
//! serving one (the config file is not changed: a SIGHUP after editing it does the same).

use std::path::PathBuf;

use clap::{Args, Subcommand};
use serde::Serialize;

use super::status::ask_and_print;
use raidd_admin::control::{socket_path as control_socket, Request};
use raidd_admin::volume::VolumeRef;

use crate::output;
use raidd_admin::exit::{AdminError, AdminResult, Exit};
use raidd_admin::ublk::{made_by_raidd, pid_alive, Control};
use raidd_ublk::abi::{self, DevState};

#[derive(Args, Debug)]
pub struct UblkArgs {
    #[command(subcommand)]
    pub action: Action,
}

#[derive(Subcommand, Debug)]
pub enum Action {
    /// Every ublk device: number, state, its server and whether it is alive.
    List,
    /// Ask the running daemon to serve a served array (or a volume of it) as /dev/ublkbN.
    Add {
        /// The served array, by its name in the config.
        #[arg(long)]
        array: String,
        /// The device's number (default: the lowest one the daemon's entries do not use).
        #[arg(long)]
        id: Option<u32>,
        /// A volume of the array (its name or number), instead of all of it.
        #[arg(long)]
        volume: Option<String>,
        #[arg(long)]
        read_only: bool,
        /// Requests in flight per queue (one queue per worker thread; default 64).
        #[arg(long)]
        queue_depth: Option<u16>,
        /// The largest request (default 512K).
        #[arg(long)]
        max_io: Option<String>,
        /// The daemon's control socket (default: $RAIDD_CONTROL or /run/raidd/raidd.sock).
        #[arg(long, value_name = "PATH")]
        control: Option<PathBuf>,
    },
    /// Ask the running daemon to stop serving /dev/ublkbN: its requests in flight finish,
    /// then the device goes.
    Remove {
        id: u32,
        #[arg(long, value_name = "PATH")]
        control: Option<PathBuf>,
    },
    /// Stops and removes a device (its block device goes away; I/O waiting on it fails).
    Delete {
        /// The device's number (N of /dev/ublkbN).
        id: u32,
        /// Also when a living process serves it.
        #[arg(long)]
        force: bool,
    },
}

#[derive(Debug, Serialize)]
struct DeviceJson {
    id: u32,
    device: String,
    /// "live", "quiesced" (its server died; requests wait for a new one), "dead"
    /// (not started), "fail_io".
    state: String,
    server_pid: i32,
    server_alive: bool,
    made_by_raidd: bool,
    queues: u16,
    queue_depth: u16,
    max_io_bytes: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

fn state_word(s: DevState) -> String {
    match s {
        DevState::Dead => "dead".into(),
        DevState::Live => "live".into(),
        DevState::Quiesced => "quiesced".into(),
        DevState::FailIo => "fail_io".into(),
        DevState::Other(v) => format!("state {v}"),
    }
}

pub fn run(args: UblkArgs, json: bool) -> AdminResult {
    match args.action {
        Action::Add {
            array,
            id,
            volume,
            read_only,
            queue_depth,
            max_io,
            control,
        } => {
            let req = Request::UblkAdd {
                array,
                id,
                volume: volume.as_deref().map(VolumeRef::parse),
                read_only,
                queue_depth,
                max_io,
            };
            ask_and_print(&control_socket(control), &req, json)
        }
        Action::Remove { id, control } => {
            ask_and_print(&control_socket(control), &Request::UblkRemove { id }, json)
        }
        Action::List => list(&mut control()?, json),
        Action::Delete { id, force } => delete(&mut control()?, id, force),
    }
}

fn control() -> AdminResult<Control> {
    Control::open().map_err(|e| AdminError::new(Exit::NotFound, e))
}

/// Every ublk device on this host, from the kernel's control device.
fn list(ctl: &mut Control, json: bool) -> AdminResult {
    let devices: Vec<DeviceJson> = ctl
        .list()
        .into_iter()
        .map(|(id, info)| match info {
            Ok(i) => DeviceJson {
                id,
                device: abi::block_path(id),
                state: state_word(i.state()),
                server_pid: i.ublksrv_pid,
                server_alive: pid_alive(i.ublksrv_pid),
                made_by_raidd: made_by_raidd(&i),
                queues: i.nr_hw_queues,
                queue_depth: i.queue_depth,
                max_io_bytes: i.max_io_buf_bytes,
                error: None,
            },
            Err(e) => DeviceJson {
                id,
                device: abi::block_path(id),
                state: "unknown".into(),
                server_pid: 0,
                server_alive: false,
                made_by_raidd: false,
                queues: 0,
                queue_depth: 0,
                max_io_bytes: 0,
                error: Some(e.to_string()),
            },
        })
        .collect();
    if json {
        return output::emit_json(&devices);
    }
    let mut text = String::new();
    for d in &devices {
        let who = if d.made_by_raidd {
            "raidd"
        } else {
            "another server"
        };
        let alive = if d.server_alive { "alive" } else { "gone" };
        text.push_str(&format!(
            "{}: {}, {who} pid {} ({alive}), {} queues of {}\n",
            d.device, d.state, d.server_pid, d.queues, d.queue_depth
        ));
    }
    if devices.is_empty() {
        text.push_str("no ublk devices\n");
    }
    output::emit(&text)
}

/// Stops and deletes device `id` (refused while a living server serves it, unless
/// `force`).
fn delete(ctl: &mut Control, id: u32, force: bool) -> AdminResult {
    let info = ctl
        .info(id)
        .map_err(|e| AdminError::new(Exit::NotFound, format!("{}: {e}", abi::block_path(id))))?;
    if pid_alive(info.ublksrv_pid) && info.state() == DevState::Live && !force {
        return Err(AdminError::new(
            Exit::Conflict,
            format!(
                "{} is served by process {}, which is alive: stop it instead (or --force)",
                abi::block_path(id),
                info.ublksrv_pid
            ),
        ));
    }
    // A device not started has nothing to stop.
    let _ = ctl.stop(id);
    ctl.delete(id).map_err(|e| {
        AdminError::new(
            Exit::Failure,
            format!("deleting {}: {e}", abi::block_path(id)),
        )
    })?;
    output::emit(&format!("{} deleted\n", abi::block_path(id)))
}
