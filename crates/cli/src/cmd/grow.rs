//! `raidd grow`: change an array while it serves (through the daemon, `--array NAME`) or
//! offline on its members, as `mdadm --grow` does. Today: its consistency policy
//! (`--consistency-policy resync|bitmap|ppl`), and, served only, its write journal's mode
//! (`--journal-mode write-through|write-back`, md's `journal_mode` in sysfs: not kept on
//! the members, so there is nothing to change offline), and, offline only, checksums on an
//! array made without them (`--checksums crc32c`). The switch itself is the engine's
//! (`Array::consistency`, `array::add_checksums`); offline, this assembles the array,
//! switches, and shuts it down cleanly.

use clap::{Args, ValueEnum};

use super::On;
use crate::output;
use raidd_admin::control::{self, Request};
use raidd_admin::exit::{AdminError, AdminResult};
use raidd_admin::members::Access;
use raidd_admin::session;
use raidd_admin::size;
use raidd_engine::ConsistencyPolicy;

#[derive(Args, Debug)]
pub struct GrowArgs {
    /// What keeps the array consistent across an unclean stop: `ppl` (RAID5: the partial
    /// parity log in each member's metadata area), `bitmap` (md's internal write-intent
    /// bitmap: only what it marks is resynced) or `resync` (the whole array). From `resync`
    /// to either and back, as md allows.
    #[arg(long, value_enum, value_name = "POLICY")]
    pub consistency_policy: Option<Policy>,
    /// With `--consistency-policy bitmap`: bytes of the array per bitmap bit (suffixes
    /// K/M/G; a power of two; default 64M, as mdadm's).
    #[arg(long, value_parser = size::parse_size, value_name = "SIZE", requires = "consistency_policy")]
    pub bitmap_chunk: Option<u64>,
    /// Checksum every 4 KiB block of an array made without checksums (`crc32c`), offline:
    /// each member's data area leaves room past it for the tags (0.1 %; the array's size
    /// stays), and every tag is then derived from the data. Clients see 4 KiB logical
    /// blocks from then on.
    #[arg(long, value_parser = ["crc32c"], value_name = "ALGORITHM", conflicts_with_all = ["consistency_policy", "journal_mode"])]
    pub checksums: Option<String>,
    #[command(flatten)]
    pub on: On,
}

/// The policies a running array may switch between.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Policy {
    Resync,
    Bitmap,
    Ppl,
}

impl From<Policy> for ConsistencyPolicy {
    fn from(p: Policy) -> Self {
        match p {
            Policy::Resync => ConsistencyPolicy::Resync,
            Policy::Bitmap => ConsistencyPolicy::Bitmap,
            Policy::Ppl => ConsistencyPolicy::Ppl,
        }
    }
}

pub fn run(args: GrowArgs, json: bool) -> AdminResult {
    if let Some(a) = &args.checksums {
        let algorithm = raidd_md::tags::Algorithm::parse(a)
            .ok_or_else(|| AdminError::usage(format!("--checksums {a:?}: crc32c")))?;
        return add_checksums(args.on, algorithm, json);
    }
    if let Some(mode) = args.on.start.journal_mode {
        if args.consistency_policy.is_some() {
            return Err(AdminError::usage(
                "--journal-mode and --consistency-policy are separate changes: give one",
            ));
        }
        let Some(array) = args.on.array else {
            return Err(AdminError::usage(
                "--journal-mode changes a served array (--array NAME): md keeps no journal \
                 mode on the members, and every start is write-through",
            ));
        };
        let socket = control::socket_path(args.on.control);
        let req = Request::Grow {
            array,
            consistency_policy: None,
            bitmap_chunk: None,
            journal_mode: Some(mode),
        };
        return super::status::ask_and_print(&socket, &req, json);
    }
    let to = args
        .consistency_policy
        .map(ConsistencyPolicy::from)
        .ok_or_else(|| {
            AdminError::usage("nothing to change: give --consistency-policy or --journal-mode")
        })?;
    let bitmap_chunk = match (to, args.bitmap_chunk) {
        (_, None) => None,
        (ConsistencyPolicy::Bitmap, Some(c)) => Some(
            u32::try_from(c)
                .map_err(|_| AdminError::usage(format!("--bitmap-chunk {c}: at most 2 GiB")))?,
        ),
        (_, Some(_)) => {
            return Err(AdminError::usage(
                "--bitmap-chunk goes with --consistency-policy bitmap",
            ))
        }
    };
    let on = args.on;
    if let Some(array) = on.array.clone() {
        let socket = control::socket_path(on.control);
        let req = Request::Grow {
            array,
            consistency_policy: Some(to),
            bitmap_chunk,
            journal_mode: None,
        };
        return super::status::ask_and_print(&socket, &req, json);
    }
    raidd_rt::block_on(async move {
        let s = session::assemble(&on.members, Access::ReadWrite, false, on.start.start()).await?;
        let a = s.root();
        let from = a.consistency().policy();
        let switched = a.consistency().set(to, bitmap_chunk).await;
        let closed = s.close().await;
        switched?;
        closed?;
        let name = a.name().to_string();
        if json {
            return output::emit_json(&serde_json::json!({
                "array": name,
                "consistency_policy": { "from": from, "to": to },
            }));
        }
        output::emit(&format!("{name}: consistency policy {from} -> {to}\n"))
    })
}

/// `--checksums`: offline only (a served array's clients would see its block size change
/// under them). The tags are derived from the data by a second assembly, as any start
/// that writes offline does, before this returns.
fn add_checksums(on: On, algorithm: raidd_md::tags::Algorithm, json: bool) -> AdminResult {
    if let Some(array) = on.array {
        return Err(AdminError::usage(format!(
            "--checksums changes an array offline: stop {array} first (its clients would see \
             its logical block grow to 4 KiB), then name its members"
        )));
    }
    raidd_rt::block_on(async move {
        let s = session::assemble(&on.members, Access::ReadWrite, false, on.start.start()).await?;
        let a = s.root().clone();
        let block_before = a.block_size();
        let added = raidd_engine::array::add_checksums::add_checksums(&a, algorithm).await;
        let closed = s.close().await;
        let tag_bytes = added?;
        closed?;
        // The members are let go before they are assembled again.
        drop((a, s));
        let s = session::assemble(&on.members, Access::ReadWrite, false, on.start.start()).await?;
        let name = s.root().name().to_string();
        let block_after = s.root().block_size();
        s.close().await?;
        if json {
            return output::emit_json(&serde_json::json!({
                "array": name,
                "checksums": algorithm.name(),
                "tag_bytes": tag_bytes,
                "logical_block_bytes": { "from": block_before, "to": block_after },
            }));
        }
        let mut text = format!(
            "{name}: checksums {} added ({} of tags), derived from the data of every member\n",
            algorithm.name(),
            size::short(tag_bytes)
        );
        if block_after != block_before {
            // What a client sees change: a file system that addresses 512-byte sectors
            // (XFS made with -s size=512, for one) does not mount on a 4 KiB-sector device.
            text.push_str(&format!(
                "{name}: its logical block is now {block_after} bytes (it was {block_before}): \
                 a file system made with smaller sectors on it may not mount\n"
            ));
        }
        output::emit(&text)
    })
}
