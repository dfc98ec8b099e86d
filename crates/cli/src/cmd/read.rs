//! `raidd read`: copy bytes out of an array (assembled read-only) to a file or stdout.

use std::fs::File;
use std::io::Write;
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
pub struct ReadArgs {
    /// Byte offset in the array (a multiple of its block size; suffixes K/M/G/T).
    #[arg(long, default_value = "0", value_parser = size::parse_size, value_name = "N")]
    pub offset: u64,
    /// Bytes to read (default: to the end of the array).
    #[arg(long, value_parser = size::parse_size, value_name = "N")]
    pub length: Option<u64>,
    /// Write the bytes to FILE instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub volume: super::VolumeArg,
    #[command(flatten)]
    pub start: super::StartArgs,
    /// Members of the array (nested arrays: all of them; the outermost is read).
    #[arg(required = true, value_name = "MEMBER")]
    pub members: Vec<PathBuf>,
}

/// `read --json` (printed on stdout; the data then goes to --output).
#[derive(Debug, Serialize)]
pub struct ReadJson {
    pub array: String,
    /// The volume read, when `--volume` named one (the offset is then the volume's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volume: Option<String>,
    pub uuid: String,
    pub offset: u64,
    pub bytes: u64,
    pub output: String,
}

enum Sink {
    File(File),
    Stdout,
}

impl Sink {
    /// Writes all of `data`; `Ok(false)` when stdout's reader went away (stop quietly).
    fn put(&mut self, data: &[u8], name: &str) -> AdminResult<bool> {
        let r = match self {
            Sink::File(f) => f.write_all(data),
            Sink::Stdout => std::io::stdout().lock().write_all(data),
        };
        match r {
            Ok(()) => Ok(true),
            Err(e)
                if matches!(self, Sink::Stdout) && e.kind() == std::io::ErrorKind::BrokenPipe =>
            {
                Ok(false)
            }
            Err(e) => Err(AdminError::io(format!("writing {name}"), &e)),
        }
    }

    fn finish(&mut self, name: &str) -> AdminResult {
        let r = match self {
            Sink::File(f) => f.flush().and_then(|()| f.sync_all()),
            Sink::Stdout => std::io::stdout().lock().flush(),
        };
        match r {
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                Err(AdminError::io(format!("writing {name}"), &e))
            }
            _ => Ok(()),
        }
    }
}

pub fn run(args: ReadArgs, json: bool) -> AdminResult {
    if json && args.output.is_none() {
        return Err(AdminError::usage(
            "read --json needs --output FILE: stdout carries the JSON summary",
        ));
    }
    raidd_rt::block_on(async move {
        let session =
            session::assemble(&args.members, Access::ReadOnly, false, args.start.start()).await?;
        let array = session.root().clone();
        let target = args.volume.extent(&session).await?;
        let len = session::check_range(&target, args.offset, args.length)?;
        let (mut sink, name) = match &args.output {
            Some(p) => (
                Sink::File(
                    File::create(p)
                        .map_err(|e| AdminError::io(format!("creating {}", p.display()), &e))?,
                ),
                p.display().to_string(),
            ),
            None => (Sink::Stdout, "stdout".to_string()),
        };
        let mut buf = AlignedBuf::zeroed(IO_CHUNK.min(usize::try_from(len).unwrap_or(IO_CHUNK)));
        let mut done = 0u64;
        while done < len {
            let pos = args.offset + done;
            let n = session::step(pos, len - done);
            buf.set_len(n);
            buf = session::read_at(&target, pos, buf).await?;
            if !sink.put(&buf[..n], &name)? {
                break;
            }
            done += n as u64;
        }
        sink.finish(&name)?;
        session.close().await?;
        if json {
            output::emit_json(&ReadJson {
                array: array.name().to_string(),
                volume: args.volume.volume.clone(),
                uuid: raidd_engine::array::uuid_string(&array.uuid()),
                offset: args.offset,
                bytes: done,
                output: name,
            })?;
        }
        Ok(())
    })
}
