//! `raidd write`: copy bytes from a file or stdin into an array (assembled read-write), then
//! flush and shut down cleanly.

use std::fs::File;
use std::io::Read;
use std::path::PathBuf;

use clap::Args;
use raidd_rt::AlignedBuf;
use serde::Serialize;

use crate::output;
use raidd_admin::exit::{AdminError, AdminResult};
use raidd_admin::members::Access;
use raidd_admin::session::{self, IO_CHUNK};
use raidd_admin::size;

#[derive(Args, Debug)]
pub struct WriteArgs {
    /// Byte offset in the array (a multiple of its block size; suffixes K/M/G/T).
    #[arg(long, default_value = "0", value_parser = size::parse_size, value_name = "N")]
    pub offset: u64,
    /// Read the bytes from FILE instead of stdin. The length must be a multiple of the
    /// array's block size.
    #[arg(short, long, value_name = "FILE")]
    pub input: Option<PathBuf>,
    #[command(flatten)]
    pub volume: super::VolumeArg,
    #[command(flatten)]
    pub start: super::StartArgs,
    /// Members of the array (nested arrays: all of them; the outermost is written).
    #[arg(required = true, value_name = "MEMBER")]
    pub members: Vec<PathBuf>,
}

/// `write --json`.
#[derive(Debug, Serialize)]
pub struct WriteJson {
    pub array: String,
    /// The volume written, when `--volume` named one (the offset is then the volume's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volume: Option<String>,
    pub uuid: String,
    pub offset: u64,
    pub bytes: u64,
}

/// Reads until `buf` is full or the input ends; returns the bytes read.
fn fill(input: &mut dyn Read, buf: &mut [u8], name: &str) -> AdminResult<usize> {
    let mut got = 0;
    while got < buf.len() {
        match input.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(AdminError::io(format!("reading {name}"), &e)),
        }
    }
    Ok(got)
}

pub fn run(args: WriteArgs, json: bool) -> AdminResult {
    // Open the input first: a missing input file must not touch the array.
    let (mut input, name, known_len): (Box<dyn Read>, String, Option<u64>) = match &args.input {
        Some(p) => {
            let f = File::open(p)
                .map_err(|e| AdminError::io(format!("opening {}", p.display()), &e))?;
            let meta = f
                .metadata()
                .map_err(|e| AdminError::io(format!("opening {}", p.display()), &e))?;
            if meta.is_dir() {
                return Err(AdminError::usage(format!("{} is a directory", p.display())));
            }
            let len = meta.is_file().then_some(meta.len());
            (Box::new(f), p.display().to_string(), len)
        }
        None => (Box::new(std::io::stdin()), "stdin".to_string(), None),
    };
    raidd_rt::block_on(async move {
        let session =
            session::assemble(&args.members, Access::ReadWrite, false, args.start.start()).await?;
        let array = session.root().clone();
        let copied = async {
            let target = args.volume.extent(&session).await?;
            let bs = u64::from(array.block_size());
            // What we can check before writing anything.
            session::check_range(&target, args.offset, Some(0))?;
            if let Some(len) = known_len {
                if !len.is_multiple_of(bs) {
                    return Err(AdminError::usage(format!(
                        "{name} has {len} bytes, not a multiple of the array's block size ({bs} bytes); nothing was written"
                    )));
                }
                session::check_range(&target, args.offset, Some(len)).map_err(|e| {
                    AdminError::new(e.exit, format!("{}; nothing was written", e.message))
                })?;
            }
            let mut buf = AlignedBuf::zeroed(IO_CHUNK);
            let mut done = 0u64;
            loop {
                let pos = args.offset + done;
                buf.set_len(session::step(pos, IO_CHUNK as u64));
                let n = fill(&mut *input, &mut buf, &name)?;
                if n == 0 {
                    break;
                }
                if !(n as u64).is_multiple_of(bs) {
                    return Err(AdminError::usage(format!(
                        "the input's length ({} bytes) is not a multiple of the array's block size ({bs} bytes); the first {done} bytes were written",
                        done + n as u64
                    )));
                }
                if pos + n as u64 > target.size_bytes() {
                    return Err(AdminError::usage(format!(
                        "the input runs past the end of {} ({} bytes); the first {done} bytes were written at offset {}",
                        if target.is_whole() { "the array".to_string() } else { format!("volume {}", target.name()) },
                        target.size_bytes(),
                        args.offset
                    )));
                }
                buf.set_len(n);
                buf = session::write_at(&target, pos, buf).await?;
                done += n as u64;
            }
            Ok(done)
        }
        .await;
        // Always shut down cleanly, also after an error (superblocks marked clean).
        let closed = session.close().await;
        let done = copied?;
        closed?;
        if json {
            output::emit_json(&WriteJson {
                array: array.name().to_string(),
                volume: args.volume.volume.clone(),
                uuid: raidd_engine::array::uuid_string(&array.uuid()),
                offset: args.offset,
                bytes: done,
            })
        } else {
            output::emit(&format!(
                "wrote {done} bytes ({}) to {} at offset {}\n",
                size::short(done),
                args.volume
                    .volume
                    .as_ref()
                    .map_or(array.name().to_string(), |v| format!(
                        "{}/{v}",
                        array.name()
                    )),
                args.offset
            ))
        }
    })
}
