//! `raidd ublk list|delete`: the ublk devices on this host, through the control device. A
//! `raidd serve` stopped cleanly leaves none; one killed leaves its devices for the next
//! `raidd serve` to take over, and `delete` removes one nobody will.

use clap::{Args, Subcommand};
use serde::Serialize;

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
    let mut ctl = Control::open().map_err(|e| AdminError::new(Exit::NotFound, e))?;
    match args.action {
        Action::List => {
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
        Action::Delete { id, force } => {
            let info = ctl.info(id).map_err(|e| {
                AdminError::new(Exit::NotFound, format!("{}: {e}", abi::block_path(id)))
            })?;
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
    }
}
