//! `raidd volume list|create|resize|delete`: the volumes (GPT partitions) of an array,
//! offline on its members as `read` and `write` are, or through the daemon on an array it
//! serves (`--array NAME`). The table logic is raidd-admin's `volume` module; offline, this
//! assembles the array, reads its two ends, writes them back when they changed, and shuts
//! the array down cleanly.

use clap::{Args, Subcommand};

use super::On;

use crate::output;
use raidd_admin::control::{self, Request};
use raidd_admin::exit::AdminResult;
use raidd_admin::members::Access;
use raidd_admin::session;
use raidd_admin::size;
use raidd_admin::status::{volume_line, VolumeTable};
use raidd_admin::volume::Change;
use raidd_admin::volume_io;

#[derive(Args, Debug)]
pub struct VolumeArgs {
    #[command(subcommand)]
    pub action: Action,
}

#[derive(Subcommand, Debug)]
pub enum Action {
    /// The array's volumes: number, name, offset and size (and, through the daemon, what
    /// serves each).
    List {
        #[command(flatten)]
        on: On,
    },
    /// Adds a volume (a GPT is made first if the array has none), aligned to 1 MiB in the
    /// first free space that holds it.
    Create {
        /// The volume's name (1 to 36 characters).
        #[arg(long)]
        name: String,
        /// Bytes (suffixes K/M/G/T; a multiple of 512).
        #[arg(long, value_parser = size::parse_size, value_name = "SIZE")]
        size: u64,
        #[command(flatten)]
        on: On,
    },
    /// Gives a volume a new size. It keeps its start and grows into the free space after
    /// it; a smaller size drops the data past the new end and needs --shrink. The daemon
    /// refuses for a volume it serves.
    Resize {
        /// The volume's name (1 to 36 characters).
        #[arg(long)]
        name: String,
        /// The new size in bytes (suffixes K/M/G/T; a multiple of 512).
        #[arg(long, value_parser = size::parse_size, value_name = "SIZE")]
        size: u64,
        /// Allow a size below the volume's present one.
        #[arg(long)]
        shrink: bool,
        #[command(flatten)]
        on: On,
    },
    /// Removes a volume from the table (its data is left where it was). The volumes after it
    /// move up one number. The daemon refuses for a volume it serves.
    Delete {
        /// The volume's name (1 to 36 characters).
        #[arg(long)]
        name: String,
        #[command(flatten)]
        on: On,
    },
}

/// The control request for `change` (`None`: list) on the daemon's array `array`.
fn request(array: String, change: Option<&Change>) -> Request {
    match change.cloned() {
        None => Request::VolumeList { array },
        Some(Change::Create { name, size }) => Request::VolumeCreate { array, name, size },
        Some(Change::Resize { name, size, shrink }) => Request::VolumeResize {
            array,
            name,
            size,
            shrink,
        },
        Some(Change::Delete { name }) => Request::VolumeDelete { array, name },
    }
}

pub fn run(args: VolumeArgs, json: bool) -> AdminResult {
    let (on, change) = match args.action {
        Action::List { on } => (on, None),
        Action::Create { name, size, on } => (on, Some(Change::Create { name, size })),
        Action::Resize {
            name,
            size,
            shrink,
            on,
        } => (on, Some(Change::Resize { name, size, shrink })),
        Action::Delete { name, on } => (on, Some(Change::Delete { name })),
    };
    if let Some(array) = on.array.clone() {
        let socket = control::socket_path(on.control);
        return super::status::ask_and_print(&socket, &request(array, change.as_ref()), json);
    }
    match change {
        None => list(on, json),
        Some(c) => apply(on, json, c),
    }
}

fn list(on: On, json: bool) -> AdminResult {
    raidd_rt::block_on(async move {
        let s = session::assemble(&on.members, Access::ReadOnly, false, on.start.start()).await?;
        let found = volume_io::table(s.root()).await;
        let closed = s.close().await;
        let table = VolumeTable::from_read(Ok(found?));
        closed?;
        let name = s.root().name().to_string();
        if json {
            let mut j = serde_json::to_value(&table).unwrap_or_default();
            j["array"] = serde_json::Value::String(name);
            return output::emit_json(&j);
        }
        output::emit(&table.listing(&name))
    })
}

/// Assembles the array, applies `change` to its table, writes it back if it succeeded.
fn apply(on: On, json: bool, change: Change) -> AdminResult {
    let done = change.done();
    raidd_rt::block_on(async move {
        let s = session::assemble(&on.members, Access::ReadWrite, false, on.start.start()).await?;
        let made = volume_io::change(s.root(), |e| change.apply(e)).await;
        let closed = s.close().await;
        let v = made?;
        closed?;
        if json {
            output::emit_json(&v)
        } else {
            output::emit(&format!("{done}: {}", volume_line(&v).trim_start()))
        }
    })
}
