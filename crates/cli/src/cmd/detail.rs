//! `raidd detail`: assemble read-only and report each array, its slots, the members not
//! used and why, spares, and for nested arrays the tree; or ask the daemon about an array
//! it serves.

use std::path::PathBuf;

use clap::Args;
use raidd_admin::control::{self, Request};
use raidd_admin::detail::Gathered;
use raidd_admin::exit::AdminResult;
use raidd_admin::members::Access;
use raidd_admin::session::{self, Session, Unavailable};
use raidd_admin::status::VolumeTable;
use raidd_engine::assemble::Assembled;

use crate::output;

#[derive(Args, Debug)]
pub struct DetailArgs {
    /// Members of the array (of every array, for nested arrays); or the name of an array
    /// the running daemon serves.
    #[arg(required = true, value_name = "MEMBER|NAME")]
    pub members: Vec<PathBuf>,
    /// The daemon's control socket, for an array name (default: $RAIDD_CONTROL or
    /// /run/raidd/raidd.sock).
    #[arg(long, value_name = "PATH")]
    pub control: Option<PathBuf>,
}

/// One argument that is not a path to anything and has no slash is the name of an array
/// the daemon serves.
fn daemon_array_name(args: &DetailArgs) -> Option<String> {
    match args.members.as_slice() {
        [one] if !one.exists() && one.components().count() == 1 => one.to_str().map(str::to_string),
        _ => None,
    }
}

/// Prints the report for assembled arrays (shared with `create`), with the outermost
/// array's volumes when they were read.
pub async fn print(
    arrays: &[Assembled],
    root: usize,
    unavailable: &[Unavailable],
    volumes: Option<VolumeTable>,
    json: bool,
) -> AdminResult {
    let g = Gathered::new(arrays, root).await;
    if json {
        let mut j = g.json(unavailable);
        j.volumes = volumes;
        output::emit_json(&j)
    } else {
        let mut text = g.text(unavailable);
        if let Some(v) = &volumes {
            v.write_detail(&mut text);
        }
        output::emit(&text)
    }
}

/// The outermost array's volumes; none for an array too small to hold a table.
async fn volumes(session: &Session) -> Option<VolumeTable> {
    let root = session.root();
    if root.size_bytes() < 4 * raidd_admin::volume::EDGE {
        return None;
    }
    let read = raidd_admin::volume_io::table(root)
        .await
        .map_err(|e| e.message);
    Some(VolumeTable::from_read(read))
}

pub fn run(args: DetailArgs, json: bool) -> AdminResult {
    let socket = control::socket_path(args.control.clone());
    // Without a daemon socket, a lone name is a member that does not exist: the offline
    // path reports that.
    if let Some(array) = daemon_array_name(&args).filter(|_| socket.exists()) {
        return crate::cmd::status::ask_and_print(&socket, &Request::Detail { array }, json);
    }
    raidd_rt::block_on(async move {
        // Inspection only: a dirty degraded array is shown (state, Needs Resync), not refused.
        let start = session::Start {
            dirty_degraded: true,
            member_timeout: None,
            dab: None,
            journal_mode: raidd_engine::JournalMode::WriteThrough,
            tag_cache: 0,
            rederive_in_background: false,
        };
        let session: Session =
            session::assemble(&args.members, Access::ReadOnly, true, start).await?;
        let vols = volumes(&session).await;
        print(
            &session.arrays,
            session.root,
            &session.unavailable,
            vols,
            json,
        )
        .await?;
        session.close().await?;
        // Members that could not be used make the exit code, after the report.
        match session.unavailable.into_iter().next() {
            Some(u) => Err(u.error),
            None => Ok(()),
        }
    })
}
