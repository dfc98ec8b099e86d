//! `raidd volume list|create|delete MEMBERS...`: the volumes (GPT partitions) of an array,
//! offline on its members as `read` and `write` are. The table logic is raidd-admin's
//! `volume` module, on the array's two ends; this reads them, and writes them back when
//! they changed (then shuts the array down cleanly).

use std::path::PathBuf;

use clap::{Args, Subcommand};
use raidd_rt::AlignedBuf;
use serde::Serialize;

use crate::output;
use raidd_admin::exit::{AdminError, AdminResult, Exit};
use raidd_admin::members::Access;
use raidd_admin::session::{self, Session};
use raidd_admin::size;
use raidd_admin::volume::{self, Edges, Volume, EDGE};

#[derive(Args, Debug)]
pub struct VolumeArgs {
    #[command(subcommand)]
    pub action: Action,
}

#[derive(Subcommand, Debug)]
pub enum Action {
    /// The array's volumes: number, name, offset and size.
    List {
        #[command(flatten)]
        start: super::StartArgs,
        /// Members of the array (nested arrays: all of them).
        #[arg(required = true, value_name = "MEMBER")]
        members: Vec<PathBuf>,
    },
    /// Adds a volume (a GPT is made first if the array has none), aligned to 1 MiB in the
    /// first free space that holds it.
    Create {
        #[arg(long)]
        name: String,
        /// Bytes (suffixes K/M/G/T; a multiple of 512).
        #[arg(long, value_parser = size::parse_size, value_name = "SIZE")]
        size: u64,
        #[command(flatten)]
        start: super::StartArgs,
        #[arg(required = true, value_name = "MEMBER")]
        members: Vec<PathBuf>,
    },
    /// Removes a volume from the table (its data is left where it was). The volumes after it
    /// move up one number.
    Delete {
        #[arg(long)]
        name: String,
        #[command(flatten)]
        start: super::StartArgs,
        #[arg(required = true, value_name = "MEMBER")]
        members: Vec<PathBuf>,
    },
}

#[derive(Debug, Serialize)]
struct ListJson {
    array: String,
    /// Whether the array carries a partition table at all.
    partitioned: bool,
    volumes: Vec<Volume>,
}

/// The array's two ends.
async fn edges(session: &Session) -> AdminResult<Edges> {
    let array = session.root();
    let size = array.size_bytes();
    if size < 4 * EDGE {
        return Err(AdminError::usage(format!(
            "{} has {size} bytes: too small for volumes (4 MiB at least)",
            array.name()
        )));
    }
    let head = session::read_at(array, 0, AlignedBuf::zeroed(EDGE as usize)).await?;
    let tail = session::read_at(
        array,
        Edges::tail_offset(size),
        AlignedBuf::zeroed(EDGE as usize),
    )
    .await?;
    Edges::new(size, head.to_vec(), tail.to_vec()).map_err(AdminError::usage)
}

/// Writes the two ends back.
async fn write_edges(session: &Session, edges: Edges) -> AdminResult {
    let array = session.root();
    let size = array.size_bytes();
    let (head, tail) = edges.into_parts();
    session::write_at(array, 0, AlignedBuf::from_slice(&head)).await?;
    session::write_at(
        array,
        Edges::tail_offset(size),
        AlignedBuf::from_slice(&tail),
    )
    .await?;
    Ok(())
}

fn volume_line(v: &Volume) -> String {
    format!(
        "{:>3}  {:<24} at {:>12}  {:>12} bytes ({})\n",
        v.number,
        v.name,
        v.offset_bytes,
        v.size_bytes,
        size::short(v.size_bytes)
    )
}

pub fn run(args: VolumeArgs, json: bool) -> AdminResult {
    match args.action {
        Action::List { start, members } => raidd_rt::block_on(async move {
            let s = session::assemble(&members, Access::ReadOnly, false, start.start()).await?;
            let found = async { volume::list(edges(&s).await?).map_err(AdminError::failure) }.await;
            let closed = s.close().await;
            let found = found?;
            closed?;
            let name = s.root().name().to_string();
            if json {
                return output::emit_json(&ListJson {
                    array: name,
                    partitioned: found.is_some(),
                    volumes: found.unwrap_or_default(),
                });
            }
            let text = match found {
                None => format!("{name}: no partition table, no volumes\n"),
                Some(v) if v.is_empty() => format!("{name}: no volumes\n"),
                Some(v) => {
                    let mut t = format!("{name}:\n");
                    v.iter().for_each(|v| t.push_str(&volume_line(v)));
                    t
                }
            };
            output::emit(&text)
        }),
        Action::Create {
            name,
            size,
            start,
            members,
        } => change(members, start, json, "created", move |e| {
            volume::create(e, &name, size)
        }),
        Action::Delete {
            name,
            start,
            members,
        } => change(members, start, json, "deleted", move |e| {
            volume::delete(e, &name)
        }),
    }
}

/// Reads the array's ends, applies `f`, writes them back if it succeeded.
fn change(
    members: Vec<PathBuf>,
    start: super::StartArgs,
    json: bool,
    done: &'static str,
    f: impl FnOnce(Edges) -> Result<(Edges, Volume), String> + 'static,
) -> AdminResult {
    raidd_rt::block_on(async move {
        let s = session::assemble(&members, Access::ReadWrite, false, start.start()).await?;
        let made = async {
            let (e, v) = f(edges(&s).await?).map_err(|m| AdminError::new(Exit::Usage, m))?;
            write_edges(&s, e).await?;
            Ok::<Volume, AdminError>(v)
        }
        .await;
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
