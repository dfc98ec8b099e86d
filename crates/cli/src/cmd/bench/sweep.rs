//! `raidd bench sweep`: Iometer's job in raidd's hands. A sweep runs every request size of
//! `--sizes` for every pattern of `--rw` against every `--target`, one point at a time, and
//! reports each point's IOPS, MB/s, response times (mean and percentiles, from a histogram)
//! and CPU per request: as a table, JSON, a CSV with Iometer's column names, and an SVG.
//!
//! Members are memory, files, or simulated drives (`sim:MODEL`, or a `--topology` file),
//! whose points run in simulated time: deterministic, and much faster than the disks.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use raidd_engine::member::SimWorld;
use raidd_engine::{Alone, Gather};
use raidd_layout::Level;
use raidd_sim::Topology;
use serde::Serialize;

use super::load::{run_point, Measure, Plan};
use super::plot;
use super::report::{self, Row, Series};
use super::spec::{parse_sizes, Access, Mix};
use super::target::{
    close_array, make_array, mem_available, open_members, ArraySetup, Device, MemberKind,
};
use crate::cmd::create::parse_level;
use crate::output;
use raidd_admin::exit::{AdminError, AdminResult, Exit};
use raidd_admin::size;

#[derive(Args, Debug)]
pub struct SweepArgs {
    /// What to drive: a RAID level (linear, raid0, raid1, raid4, raid5, raid6, raid10) over
    /// the members, or `raw` for the members themselves. Repeat for one series each.
    #[arg(long = "target", default_value = "raid0", value_parser = parse_target)]
    pub targets: Vec<SweepTarget>,
    /// Number of members (with --topology: its drives).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub members: Option<u16>,
    /// memory, file (in --dir) or sim:MODEL (a built-in drive model or a .toml file).
    #[arg(long, default_value = "memory", value_parser = parse_member)]
    pub member: MemberArg,
    /// Directory of the file members (raidd-bench-N.img, filled once and reused).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Simulated members on channels, controllers and a bus as this TOML file places them
    /// (see raidd-sim's topology); without it each drive has its own channel and
    /// controller, all on one 133 MB/s PCI bus.
    #[arg(long, value_name = "FILE")]
    pub topology: Option<PathBuf>,
    /// Size of each memory or file member (simulated drives have their model's).
    #[arg(long, default_value = "256M", value_parser = size::parse_sector_multiple, value_name = "SIZE")]
    pub member_size: u64,
    /// Chunk size of striped levels.
    #[arg(long, default_value = "64K", value_parser = size::parse_chunk, value_name = "SIZE")]
    pub chunk: u64,
    /// Request sizes: a list (1K,4K,64K) or a power-of-two range (1K..1M).
    #[arg(long, default_value = "4K", value_parser = parse_sizes, value_name = "SIZES")]
    pub sizes: std::vec::Vec<u64>,
    /// Patterns, comma-separated: read, write, randread, randwrite. One series each.
    #[arg(long, default_value = "randread", value_parser = parse_mixes, value_name = "LIST")]
    pub rw: std::vec::Vec<Mix>,
    /// A mix instead of --rw: this percentage of requests read (the rest write).
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=100), value_name = "PCT")]
    pub read_pct: Option<u8>,
    /// With --read-pct: this percentage of requests go to a random place (the rest follow
    /// the last one).
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=100), value_name = "PCT")]
    pub random_pct: Option<u8>,
    /// Random requests start on multiples of this (default: the request size).
    #[arg(long, value_parser = size::parse_sector_multiple, value_name = "SIZE")]
    pub align: Option<u64>,
    /// Requests each slot issues back to back before pausing --delay.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub burst: u32,
    /// Pause after each burst, milliseconds (0: none).
    #[arg(long, default_value = "0", value_parser = parse_ms, value_name = "MS")]
    pub delay: u64,
    /// Workers, each with its own request stream (and, on real members, its own thread).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub workers: u32,
    /// Requests in flight per worker.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub qd: u32,
    /// Seconds measured per point (simulated seconds on simulated members).
    #[arg(long, default_value = "3", value_parser = size::parse_seconds, value_name = "S")]
    pub seconds: f64,
    /// Measure this many requests per point instead of --seconds.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..), value_name = "N")]
    pub count: Option<u64>,
    /// Seconds before each point's measurement starts (default: a fifth of --seconds, at
    /// most 0.5).
    #[arg(long, value_parser = parse_ramp, value_name = "S")]
    pub ramp: Option<f64>,
    /// Seed of the random requests.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// RAID4/5/6 stripe cache size (0: keep no rows).
    #[arg(long, default_value = "16M", value_parser = size::parse_size, value_name = "SIZE")]
    pub stripe_cache: u64,
    /// RAID4/5/6 gathering: none, plug, limit or limit:N.
    #[arg(long, default_value = "plug", value_parser = parse_gather)]
    pub gather: Gather,
    /// RAID4/5/6 small writes that find their stripe idle skip the cache: auto, always or
    /// never.
    #[arg(long, default_value = "auto", value_parser = parse_alone)]
    pub alone: Alone,
    /// Also write the results as CSV, with Iometer's column names.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Also plot throughput and response time against request size, as SVG.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SweepTarget {
    Raw,
    Array(Level),
}

impl std::fmt::Display for SweepTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SweepTarget::Raw => f.write_str("raw"),
            SweepTarget::Array(l) => write!(f, "{l}"),
        }
    }
}

fn parse_target(s: &str) -> Result<SweepTarget, String> {
    if s == "raw" {
        return Ok(SweepTarget::Raw);
    }
    if s.starts_with("nbd://") || s.starts_with("iscsi://") {
        return Err(format!(
            "{s}: network targets are not measured by this build of bench sweep; use a level \
             or raw"
        ));
    }
    parse_level(s).map(SweepTarget::Array)
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemberArg {
    Memory,
    File,
    Sim(String),
}

fn parse_member(s: &str) -> Result<MemberArg, String> {
    match s {
        "memory" => Ok(MemberArg::Memory),
        "file" => Ok(MemberArg::File),
        _ => match s.strip_prefix("sim:") {
            Some(m) if !m.is_empty() => Ok(MemberArg::Sim(m.to_string())),
            _ => Err(format!(
                "unknown member kind {s:?}: use memory, file or sim:MODEL"
            )),
        },
    }
}

fn parse_mixes(s: &str) -> Result<Vec<Mix>, String> {
    let mixes = s
        .split(',')
        .map(Mix::parse)
        .collect::<Result<Vec<_>, _>>()?;
    if mixes
        .iter()
        .enumerate()
        .any(|(i, m)| mixes[..i].contains(m))
    {
        return Err(format!("{s:?} names a pattern twice"));
    }
    Ok(mixes)
}

fn parse_ms(s: &str) -> Result<u64, String> {
    match s.parse::<f64>() {
        Ok(ms) if ms.is_finite() && (0.0..=60_000.0).contains(&ms) => Ok((ms * 1e6) as u64),
        _ => Err(format!("invalid delay {s:?}: milliseconds, 0 to 60000")),
    }
}

fn parse_ramp(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r.is_finite() && (0.0..=3600.0).contains(&r) => Ok(r),
        _ => Err(format!("invalid ramp {s:?}: seconds, 0 to 3600")),
    }
}

fn parse_gather(s: &str) -> Result<Gather, String> {
    s.parse()
}

fn parse_alone(s: &str) -> Result<Alone, String> {
    s.parse()
}

/// `raidd bench sweep --json`.
#[derive(Debug, Serialize)]
struct SweepReport<'a> {
    rows: Vec<&'a Row>,
}

/// The members a sweep's targets are made over, and what to call them.
struct Members {
    kind: MemberKind,
    n: usize,
    label: String,
    /// Iometer's target type for the CSV.
    csv_kind: &'static str,
}

fn members(args: &SweepArgs) -> AdminResult<Members> {
    let fixed = |n: Option<u16>| usize::from(n.unwrap_or(4));
    match &args.member {
        MemberArg::Memory | MemberArg::File if args.topology.is_some() => Err(AdminError::usage(
            "--topology places simulated members: use --member sim:MODEL",
        )),
        MemberArg::Memory => {
            let n = fixed(args.members);
            let want = (n as u64).saturating_mul(args.member_size);
            if let Some(avail) = mem_available() {
                if want > avail / 10 * 9 {
                    return Err(AdminError::usage(format!(
                        "{n} memory members of {} need {}; {} is available",
                        size::short(args.member_size),
                        size::short(want),
                        size::short(avail)
                    )));
                }
            }
            Ok(Members {
                kind: MemberKind::Memory {
                    size: args.member_size,
                },
                n,
                label: format!("{n} memory"),
                csv_kind: "MEMORY",
            })
        }
        MemberArg::File => {
            let dir = args
                .dir
                .clone()
                .ok_or_else(|| AdminError::usage("--member file needs --dir DIR"))?;
            let n = fixed(args.members);
            Ok(Members {
                kind: MemberKind::File {
                    dir,
                    size: args.member_size,
                },
                n,
                label: format!("{n} file"),
                csv_kind: "FILE",
            })
        }
        MemberArg::Sim(model) => {
            let topology = sim_topology(model, args.topology.as_deref(), args.members)?;
            let n = topology.drives();
            Ok(Members {
                kind: MemberKind::Sim(SimWorld::new(&topology)),
                n,
                label: format!("{n} sim:{model}"),
                csv_kind: "SIMULATED",
            })
        }
    }
}

/// The simulated machine: a topology file, or `--members` drives of `model` apart.
fn sim_topology(model: &str, file: Option<&Path>, n: Option<u16>) -> AdminResult<Topology> {
    let bad = |e: String| AdminError::usage(e);
    let Some(file) = file else {
        let drive = raidd_sim::load_model(model, Path::new(".")).map_err(bad)?;
        return Ok(Topology::separate(drive, usize::from(n.unwrap_or(4))));
    };
    let t = Topology::load(file).map_err(bad)?;
    if let Some(n) = n {
        if usize::from(n) != t.drives() {
            return Err(AdminError::usage(format!(
                "--members {n}, but {} places {} drives",
                file.display(),
                t.drives()
            )));
        }
    }
    Ok(t)
}

/// A fresh set of members for one target (simulated ones on a fresh machine, so each
/// target's points start from the same state).
fn fresh(m: &Members, args: &SweepArgs) -> AdminResult<Members> {
    match (&m.kind, &args.member) {
        (MemberKind::Sim(_), MemberArg::Sim(model)) => {
            let topology = sim_topology(model, args.topology.as_deref(), args.members)?;
            Ok(Members {
                kind: MemberKind::Sim(SimWorld::new(&topology)),
                n: m.n,
                label: m.label.clone(),
                csv_kind: m.csv_kind,
            })
        }
        _ => Ok(Members {
            kind: m.kind.clone(),
            n: m.n,
            label: m.label.clone(),
            csv_kind: m.csv_kind,
        }),
    }
}

fn check_args(args: &SweepArgs) -> AdminResult {
    if args.random_pct.is_some() && args.read_pct.is_none() {
        return Err(AdminError::usage("--random-pct needs --read-pct"));
    }
    let largest = args.sizes.iter().copied().max().unwrap_or(0);
    if !matches!(args.member, MemberArg::Sim(_)) && args.member_size < largest * 4 {
        return Err(AdminError::usage(
            "--member-size must hold at least four requests of the largest size",
        ));
    }
    Ok(())
}

/// The patterns of the sweep: --rw's, or the one mix --read-pct and --random-pct give.
fn mixes(args: &SweepArgs) -> Vec<Mix> {
    match args.read_pct {
        Some(read_pct) => vec![Mix {
            read_pct,
            random_pct: args.random_pct.unwrap_or(0),
        }],
        None => args.rw.clone(),
    }
}

pub fn run(args: SweepArgs, json: bool) -> AdminResult {
    check_args(&args)?;
    let base = members(&args)?;
    let mixes = mixes(&args);
    let total = args.targets.len() * mixes.len() * args.sizes.len();
    let progress = std::io::stderr().is_terminal() && !json;
    let mut rows: Vec<(Series, Row)> = Vec::new();
    for target in &args.targets {
        let m = fresh(&base, &args)?;
        let sim = match &m.kind {
            MemberKind::Sim(w) => Some(w.clone()),
            _ => None,
        };
        let (members, _direct) = open_members(&m.kind, m.n)?;
        let array = match target {
            SweepTarget::Raw => None,
            SweepTarget::Array(level) => {
                let setup = ArraySetup {
                    level: *level,
                    chunk: args.chunk,
                    stripe_cache: args.stripe_cache,
                    gather: args.gather,
                    alone: args.alone,
                };
                Some(make_array(members.clone(), setup, sim.as_ref())?)
            }
        };
        let name = format!("{target} over {}", m.label);
        for mix in &mixes {
            let series = Series {
                target: name.clone(),
                kind: m.csv_kind,
                mix: *mix,
                qd: args.qd,
                workers: args.workers,
                simulated: sim.is_some(),
            };
            for &bs in &args.sizes {
                if progress {
                    eprint!(
                        "\r\x1b[K[{}/{total}] {name} {} {} ...",
                        rows.len() + 1,
                        mix.name(),
                        report::size_label(bs)
                    );
                }
                let dev = Arc::new(match &array {
                    Some(a) => Device::Array(a.clone()),
                    None => Device::Raw {
                        members: members.clone(),
                        bs,
                    },
                });
                let plan = plan(&args, *mix, bs);
                let outcome = run_point(&dev, &plan, sim.as_ref()).map_err(|e| {
                    AdminError::new(Exit::Failure, format!("bench sweep: {name}: {e}"))
                })?;
                rows.push((series.clone(), Row::new(&series, bs, &outcome)));
            }
        }
        if let Some(a) = &array {
            close_array(a, sim.as_ref())?;
        }
        drop(members);
    }
    if progress {
        eprint!("\r\x1b[K");
    }
    write_outputs(&args, &rows)?;
    if json {
        let report = SweepReport {
            rows: rows.iter().map(|(_, r)| r).collect(),
        };
        return output::emit_json(&report);
    }
    output::emit(&report::table(&rows))
}

fn plan(args: &SweepArgs, mix: Mix, bs: u64) -> Plan {
    Plan {
        access: Access {
            bs,
            mix,
            align: args.align.unwrap_or(bs),
            burst: args.burst,
            delay_ns: args.delay,
        },
        workers: args.workers,
        qd: args.qd,
        ramp_s: args.ramp.unwrap_or((args.seconds / 5.0).min(0.5)),
        measure: match args.count {
            Some(n) => Measure::Count(n),
            None => Measure::Seconds(args.seconds),
        },
        seed: args.seed,
    }
}

fn write_outputs(args: &SweepArgs, rows: &[(Series, Row)]) -> AdminResult {
    let write = |path: &Path, text: String| {
        std::fs::write(path, text)
            .map_err(|e| AdminError::io(format_args!("cannot write {}", path.display()), &e))
    };
    if let Some(p) = &args.csv {
        write(p, report::csv(rows))?;
    }
    if let Some(p) = &args.plot {
        let only: Vec<Row> = rows.iter().map(|(_, r)| r.clone()).collect();
        let title = format!(
            "raidd bench sweep: QD{} x {} worker{}",
            args.qd,
            args.workers,
            if args.workers == 1 { "" } else { "s" }
        );
        write(p, plot::svg(&title, &only))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_members_and_patterns_parse() {
        assert_eq!(parse_target("raw"), Ok(SweepTarget::Raw));
        assert_eq!(parse_target("raid5"), Ok(SweepTarget::Array(Level::Raid5)));
        assert!(parse_target("raid7").is_err());
        assert_eq!(
            parse_member("sim:djna-371350"),
            Ok(MemberArg::Sim("djna-371350".into()))
        );
        assert!(parse_member("sim:").is_err());
        assert!(parse_member("disk").is_err());
        assert_eq!(parse_mixes("read,write").unwrap().len(), 2);
        assert!(parse_mixes("read,read").is_err());
        assert_eq!(parse_ms("1.5"), Ok(1_500_000));
        assert!(parse_ms("-1").is_err());
    }
}
