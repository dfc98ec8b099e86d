//! `raidd pattern write|verify`: the engine's self-verifying pattern through an array. Every
//! 512-byte sector carries its address, a generation and a seed, so verify tells a correct
//! sector from a missing, misplaced, stale or corrupt one.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use raidd_engine::pattern::{self, Mismatch};
use raidd_rt::AlignedBuf;
use serde::Serialize;

use crate::output;
use raidd_admin::exit::{AdminError, AdminResult, Exit};
use raidd_admin::members::Access;
use raidd_admin::session::{self, IO_CHUNK};
use raidd_admin::size;

/// Mismatches listed in the report (the count covers all).
const SHOW: usize = 10;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PatternOp {
    /// Write the pattern.
    Write,
    /// Check the pattern; exit code 8 if any sector is wrong.
    Verify,
}

#[derive(Args, Debug)]
pub struct PatternArgs {
    pub op: PatternOp,
    /// Byte offset in the array (a multiple of its block size; suffixes K/M/G/T).
    #[arg(long, default_value = "0", value_parser = size::parse_size, value_name = "N")]
    pub offset: u64,
    /// Bytes to cover (default: to the end of the array).
    #[arg(long, value_parser = size::parse_size, value_name = "N")]
    pub length: Option<u64>,
    /// Pattern stream (decimal or 0x hex).
    #[arg(long, default_value = "1", value_parser = parse_u64, value_name = "S")]
    pub seed: u64,
    /// Generation written into every sector (decimal or 0x hex).
    #[arg(long, default_value = "1", value_parser = parse_u64, value_name = "G")]
    pub generation: u64,
    /// With verify: any generation from this one to --generation is right (a write of the
    /// newer one was cut off part way: each sector must still be whole, and its own).
    #[arg(long, value_parser = parse_u64, value_name = "G")]
    pub since: Option<u64>,
    /// The one MEMBER is a plain device or file holding the data itself (a kernel md
    /// device such as /dev/md0, a disk image), not md members to assemble.
    #[arg(long)]
    pub raw: bool,
    #[command(flatten)]
    pub volume: super::VolumeArg,
    #[command(flatten)]
    pub start: super::StartArgs,
    /// Members of the array (nested arrays: all of them; the outermost is used).
    #[arg(required = true, value_name = "MEMBER")]
    pub members: Vec<PathBuf>,
}

/// Where the pattern goes: an array raidd assembles (all of it, or a volume), or a device
/// taken as it is.
enum Target {
    Array(session::Session, raidd_engine::Extent),
    Raw(std::sync::Arc<dyn raidd_engine::Member>, String),
}

impl Target {
    fn name(&self) -> String {
        match self {
            Target::Array(_, e) => e.name().to_string(),
            Target::Raw(_, name) => name.clone(),
        }
    }

    fn check_range(&self, offset: u64, length: Option<u64>) -> AdminResult<u64> {
        match self {
            Target::Array(_, e) => session::check_range(e, offset, length),
            Target::Raw(m, name) => {
                let info = m.info();
                let bs = u64::from(info.block_size);
                let size = info.size_bytes / bs * bs;
                let len = length.unwrap_or(size.saturating_sub(offset));
                if !offset.is_multiple_of(bs) || !len.is_multiple_of(bs) {
                    return Err(AdminError::usage(format!(
                        "offset and length must be multiples of {name}'s block size ({bs} bytes)"
                    )));
                }
                if offset.checked_add(len).is_none_or(|end| end > size) {
                    return Err(AdminError::usage(format!(
                        "{offset}+{len} is beyond the end of {name} ({size} bytes)"
                    )));
                }
                Ok(len)
            }
        }
    }

    /// Writes `buf` at `pos`; returns a buffer of the same length to reuse.
    async fn write(&self, pos: u64, buf: AlignedBuf) -> AdminResult<AlignedBuf> {
        match self {
            Target::Array(_, e) => session::write_at(e, pos, buf).await,
            Target::Raw(m, name) => {
                let len = buf.len();
                raidd_engine::member::write_bytes(&**m, pos, buf)
                    .await
                    .map_err(|e| AdminError::io(format!("writing {name} at {pos}"), &e))?;
                Ok(AlignedBuf::for_overwrite(len))
            }
        }
    }

    /// Reads `buf.len()` bytes at `pos`.
    async fn read(&self, pos: u64, buf: AlignedBuf) -> AdminResult<AlignedBuf> {
        match self {
            Target::Array(_, e) => session::read_at(e, pos, buf).await,
            Target::Raw(m, name) => raidd_engine::member::read_bytes(&**m, pos, buf.len())
                .await
                .map_err(|e| AdminError::io(format!("reading {name} at {pos}"), &e)),
        }
    }

    async fn close(&self) -> AdminResult {
        match self {
            Target::Array(s, _) => s.close().await.map(|_| ()),
            Target::Raw(m, name) => m
                .flush()
                .await
                .map_err(|e| AdminError::io(format!("flushing {name}"), &e)),
        }
    }
}

/// A decimal or `0x` hexadecimal u64.
pub fn parse_u64(s: &str) -> Result<u64, String> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse::<u64>(),
    };
    r.map_err(|_| format!("invalid number {s:?}: expected decimal or 0x hex"))
}

/// `pattern --json`.
#[derive(Debug, Serialize)]
pub struct PatternJson {
    /// `write` or `verify`.
    pub op: &'static str,
    pub array: String,
    pub offset: u64,
    pub length: u64,
    pub seed: u64,
    pub generation: u64,
    /// 512-byte sectors covered.
    pub sectors: u64,
    /// Sectors that did not verify (0 for write).
    pub bad_sectors: u64,
    /// The first few mismatches.
    pub mismatches: Vec<MismatchJson>,
}

#[derive(Debug, Serialize)]
pub struct MismatchJson {
    /// Array sector (512 bytes).
    pub sector: u64,
    pub problem: String,
}

impl From<&Mismatch> for MismatchJson {
    fn from(m: &Mismatch) -> MismatchJson {
        let text = m.to_string();
        let problem = text
            .split_once(": ")
            .map_or(text.clone(), |(_, p)| p.to_string());
        MismatchJson {
            sector: m.sector,
            problem,
        }
    }
}

/// The array (all of it, or `--volume`) or the raw device the pattern goes to or comes from.
async fn open_target(args: &PatternArgs, access: Access) -> AdminResult<Target> {
    if args.raw {
        let [path] = args.members.as_slice() else {
            return Err(AdminError::usage("--raw takes exactly one device or file"));
        };
        if args.volume.volume.is_some() {
            return Err(AdminError::usage(
                "--raw takes a device as it is: a volume of it is a partition device of its own",
            ));
        }
        let m = raidd_admin::members::open(path, access)?;
        return Ok(Target::Raw(m, path.display().to_string()));
    }
    let s = session::assemble(&args.members, access, false, args.start.start()).await?;
    match args.volume.extent(&s).await {
        Ok(e) => Ok(Target::Array(s, e)),
        Err(e) => {
            s.close().await?;
            Err(e)
        }
    }
}

pub fn run(args: PatternArgs, json: bool) -> AdminResult {
    let access = match args.op {
        PatternOp::Write => Access::ReadWrite,
        PatternOp::Verify => Access::ReadOnly,
    };
    raidd_rt::block_on(async move {
        let target = open_target(&args, access).await?;
        let result = async {
            let len = target.check_range(args.offset, args.length)?;
            let sector = pattern::SECTOR as u64;
            let mut buf = AlignedBuf::zeroed(IO_CHUNK);
            let mut done = 0u64;
            let mut bad = 0u64;
            let mut shown: Vec<Mismatch> = Vec::new();
            while done < len {
                let pos = args.offset + done;
                let n = session::step(pos, len - done);
                buf.set_len(n);
                match args.op {
                    PatternOp::Write => {
                        pattern::fill(&mut buf, pos / sector, args.generation, args.seed);
                        buf = target.write(pos, buf).await?;
                    }
                    PatternOp::Verify => {
                        buf = target.read(pos, buf).await?;
                        let gen = args.generation;
                        let mut m = pattern::verify(&buf, pos / sector, args.seed, |_| gen);
                        if let Some(since) = args.since {
                            m.retain(|x| !x.problem.is_generation_in(since..=gen));
                        }
                        bad += m.len() as u64;
                        shown.extend(m.into_iter().take(SHOW - shown.len().min(SHOW)));
                    }
                }
                done += n as u64;
            }
            Ok::<_, AdminError>((len, bad, shown))
        }
        .await;
        let closed = target.close().await;
        let (len, bad, shown) = result?;
        closed?;
        let op = match args.op {
            PatternOp::Write => "write",
            PatternOp::Verify => "verify",
        };
        if json {
            output::emit_json(&PatternJson {
                op,
                array: target.name(),
                offset: args.offset,
                length: len,
                seed: args.seed,
                generation: args.generation,
                sectors: len / pattern::SECTOR as u64,
                bad_sectors: bad,
                mismatches: shown.iter().map(MismatchJson::from).collect(),
            })?;
        } else {
            let mut text = match args.op {
                PatternOp::Write => format!(
                    "pattern written: {len} bytes ({}) at offset {}, seed {:#x}, generation {}\n",
                    size::short(len),
                    args.offset,
                    args.seed,
                    args.generation
                ),
                PatternOp::Verify => format!(
                    "pattern verified: {len} bytes ({}) at offset {}: {bad} bad sectors\n",
                    size::short(len),
                    args.offset
                ),
            };
            for m in &shown {
                text.push_str(&format!("  {m}\n"));
            }
            if bad > shown.len() as u64 {
                text.push_str(&format!("  ... and {} more\n", bad - shown.len() as u64));
            }
            output::emit(&text)?;
        }
        if bad > 0 {
            return Err(AdminError::new(
                Exit::BadData,
                format!(
                    "verification failed: {bad} of {} sectors are wrong",
                    len / pattern::SECTOR as u64
                ),
            ));
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use raidd_engine::pattern::Problem;

    #[test]
    fn numbers_in_decimal_or_hex() {
        assert_eq!(parse_u64("42"), Ok(42));
        assert_eq!(parse_u64("0x2a"), Ok(42));
        assert_eq!(parse_u64("0XFF"), Ok(255));
        for bad in ["", "-1", "0x", "x1", "1.0", "18446744073709551616"] {
            assert!(parse_u64(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn mismatch_json_drops_the_sector_prefix() {
        let m = Mismatch {
            sector: 7,
            problem: Problem::Zero,
        };
        let j = MismatchJson::from(&m);
        assert_eq!(j.sector, 7);
        assert_eq!(j.problem, "all zeros");
    }
}
