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
use raidd_engine::member::{
    block_for, DabMode, DabPool, DAB_DEFAULT_BLOCK as DEFAULT_BLOCK, DAB_MAX_BLOCK as MAX_BLOCK,
    DAB_MIN_BLOCK as MIN_BLOCK,
};
use raidd_engine::Member;
use raidd_engine::{Alone, Gather};
use raidd_lab::SimWorld;
use raidd_layout::Level;
use raidd_sim::Topology;
use serde::Serialize;

use super::iscsi::IscsiUrl;
use super::load::{run_point, Measure, Plan, Target};
use super::nbd::NbdUrl;
use super::plot;
use super::report::{self, Row, Series};
use super::spec::{parse_sizes, Access, Mix};
use super::target::{
    close_array, make_array, mem_available, open_members, with_latency, ArraySetup, Device,
    MemberKind,
};
use raidd_admin::exit::{AdminError, AdminResult, Exit};
use raidd_admin::md_names::parse_level;
use raidd_admin::output;
use raidd_admin::size;

#[derive(Args, Debug)]
pub struct SweepArgs {
    /// What to drive: a RAID level (linear, raid0, raid1, raid4, raid5, raid6, raid10) over
    /// the members, `raw` for the members themselves, an NBD export
    /// (nbd://HOST[:PORT]/EXPORT) or an iSCSI LUN (iscsi://HOST[:PORT]/TARGET/LUN). Repeat
    /// for one series each.
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
    /// Each request's buffer in this many equal windows (a vectored request, seed 002's
    /// readv): in-process targets see the vector; network ones carry one buffer anyway.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub iovecs: u32,
    /// Also measure this process's CPU per request (the server's, for network targets):
    /// `server_cpu_per_io_us`.
    #[arg(long, value_name = "PID")]
    pub server_pid: Option<u32>,
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
    /// RAID4/5/6 reads straight into the request's buffers (on), or through a buffer per
    /// chunk under its stripe's lock (off: seed 004's comparison).
    #[arg(long, default_value = "on", value_parser = parse_on_off)]
    pub read_bypass: OnOff,
    /// Time added to every member I/O (e.g. 1ms, 250us): a latency-bound member on real
    /// files. Not for simulated members, whose time is the model's.
    #[arg(long, default_value = "0", value_parser = parse_latency, value_name = "TIME")]
    pub member_latency: std::time::Duration,
    #[command(flatten)]
    pub buffer: DabArgs,
    /// Also write the results as CSV, with Iometer's column names.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Also plot throughput and response time against request size, as SVG.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// The plot's title (default: the queue depth and workers).
    #[arg(long, value_name = "TEXT")]
    pub title: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SweepTarget {
    Raw,
    Array(Level),
    Nbd(NbdUrl),
    Iscsi(IscsiUrl),
}

impl std::fmt::Display for SweepTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SweepTarget::Raw => f.write_str("raw"),
            SweepTarget::Array(l) => write!(f, "{l}"),
            SweepTarget::Nbd(u) => write!(f, "{u}"),
            SweepTarget::Iscsi(u) => write!(f, "{u}"),
        }
    }
}

fn parse_target(s: &str) -> Result<SweepTarget, String> {
    if s == "raw" {
        return Ok(SweepTarget::Raw);
    }
    if s.starts_with("nbd://") {
        return NbdUrl::parse(s).map(SweepTarget::Nbd);
    }
    if s.starts_with("iscsi://") {
        return IscsiUrl::parse(s).map(SweepTarget::Iscsi);
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

/// A time as `1ms`, `250us` or `0`: at most a second.
pub fn parse_latency(s: &str) -> Result<std::time::Duration, String> {
    let bad = || format!("invalid time {s:?}: a number with us or ms (250us, 1ms), at most 1s");
    let (num, unit) = if let Some(n) = s.strip_suffix("us") {
        (n, 1e-6)
    } else if let Some(n) = s.strip_suffix("ms") {
        (n, 1e-3)
    } else if s == "0" {
        ("0", 1.0)
    } else {
        return Err(bad());
    };
    match num.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 && v * unit <= 1.0 => {
            Ok(std::time::Duration::from_secs_f64(v * unit))
        }
        _ => Err(bad()),
    }
}

fn parse_ramp(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r.is_finite() && (0.0..=3600.0).contains(&r) => Ok(r),
        _ => Err(format!("invalid ramp {s:?}: seconds, 0 to 3600")),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnOff {
    On,
    Off,
}

fn parse_on_off(s: &str) -> Result<OnOff, String> {
    match s {
        "on" => Ok(OnOff::On),
        "off" => Ok(OnOff::Off),
        _ => Err(format!("{s:?}: on or off")),
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

fn check_args(args: &SweepArgs) -> AdminResult {
    if !args.member_latency.is_zero() && matches!(args.member, MemberArg::Sim(_)) {
        return Err(AdminError::usage(
            "--member-latency is for memory and file members: simulated ones have the model's",
        ));
    }
    args.buffer.check()?;
    if let Some(pid) = args.server_pid {
        if super::target::process_cpu_seconds(&pid.to_string()).is_none() {
            return Err(AdminError::usage(format!(
                "--server-pid {pid}: no such process"
            )));
        }
    }
    if let Some(bs) = args
        .sizes
        .iter()
        .find(|&&bs| !bs.is_multiple_of(512 * u64::from(args.iovecs)))
    {
        return Err(AdminError::usage(format!(
            "--iovecs {}: request size {bs} does not divide into that many whole sectors",
            args.iovecs
        )));
    }
    if args.random_pct.is_some() && args.read_pct.is_none() {
        return Err(AdminError::usage("--random-pct needs --read-pct"));
    }
    let largest = args.sizes.iter().copied().max().unwrap_or(0);
    let local = args
        .targets
        .iter()
        .any(|t| !matches!(t, SweepTarget::Nbd(_)));
    if local && !matches!(args.member, MemberArg::Sim(_)) && args.member_size < largest * 4 {
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
    let mixes = mixes(&args);
    let total = args.targets.len() * mixes.len() * args.sizes.len();
    let mut progress = Progress {
        on: std::io::stderr().is_terminal() && !json,
        done: 0,
        total,
    };
    let mut rows: Vec<(Series, Row)> = Vec::new();
    for target in &args.targets {
        let got = match target {
            SweepTarget::Nbd(url) => nbd_series(&args, url, &mixes, &mut progress)?,
            SweepTarget::Iscsi(url) => iscsi_series(&args, url, &mixes, &mut progress)?,
            _ => local_series(&args, target, &mixes, &mut progress)?,
        };
        rows.extend(got);
    }
    progress.clear();
    write_outputs(&args, &rows)?;
    if json {
        let report = SweepReport {
            rows: rows.iter().map(|(_, r)| r).collect(),
        };
        return output::emit_json(&report);
    }
    output::emit(&report::table(&rows))
}

/// The line on the terminal that says which point runs.
struct Progress {
    on: bool,
    done: usize,
    total: usize,
}

impl Progress {
    fn point(&mut self, name: &str, mix: Mix, bs: u64) {
        self.done += 1;
        if self.on {
            eprint!(
                "\r\x1b[K[{}/{}] {name} {} {} ...",
                self.done,
                self.total,
                mix.name(),
                report::size_label(bs)
            );
        }
    }

    fn clear(&self) {
        if self.on {
            eprint!("\r\x1b[K");
        }
    }
}

/// Every point of one target: each pattern, each size, against what `target_for(bs)` gives.
fn points(
    args: &SweepArgs,
    series: Series,
    mixes: &[Mix],
    progress: &mut Progress,
    sim: Option<&Arc<SimWorld>>,
    dab: Option<&Arc<DabPool>>,
    target_for: impl Fn(u64) -> Target,
) -> AdminResult<Vec<(Series, Row)>> {
    let mut rows = Vec::new();
    for mix in mixes {
        let series = Series {
            mix: *mix,
            ..series.clone()
        };
        for &bs in &args.sizes {
            progress.point(&series.target, *mix, bs);
            let before = dab.map(|p| p.counts());
            let outcome = run_point(&target_for(bs), &plan(args, *mix, bs), sim).map_err(|e| {
                AdminError::new(
                    Exit::Failure,
                    format!("bench sweep: {}: {e}", series.target),
                )
            })?;
            let mut row = Row::new(&series, bs, &outcome);
            row.dab = dab.zip(before).map(|(p, b)| p.counts().since(&b));
            rows.push((series.clone(), row));
        }
    }
    Ok(rows)
}

/// An NBD export: probed once for its size, then a connection per worker and point.
fn nbd_series(
    args: &SweepArgs,
    url: &NbdUrl,
    mixes: &[Mix],
    progress: &mut Progress,
) -> AdminResult<Vec<(Series, Row)>> {
    let (probe, size) = super::nbd::handshake(url)
        .map_err(|e| AdminError::new(Exit::Failure, format!("bench sweep: {e}")))?;
    drop(probe);
    network_points(args, &url.to_string(), size, mixes, progress, || {
        Target::Nbd {
            url: url.clone(),
            size,
        }
    })
}

/// The points of a network target of `size` bytes, a connection per worker and point.
fn network_points(
    args: &SweepArgs,
    name: &str,
    size: u64,
    mixes: &[Mix],
    progress: &mut Progress,
    target: impl Fn() -> Target,
) -> AdminResult<Vec<(Series, Row)>> {
    let largest = args.sizes.iter().copied().max().unwrap_or(0);
    if size < largest * u64::from(args.workers) {
        return Err(AdminError::usage(format!(
            "{name}: {} is smaller than one request of the largest size per worker",
            size::short(size)
        )));
    }
    let series = Series {
        target: name.to_string(),
        kind: "NETWORK",
        mix: mixes[0],
        qd: args.qd,
        workers: args.workers,
        simulated: false,
    };
    points(args, series, mixes, progress, None, None, |_| target())
}

/// The DMA-aligned buffer (seed 000) of `bench io` and `bench sweep`.
#[derive(clap::Args, Clone, Debug)]
pub struct DabArgs {
    /// A DMA-aligned buffer of this many bytes in front of the members, shared by them
    /// (0: none).
    #[arg(long, default_value = "0", value_parser = size::parse_size, value_name = "SIZE")]
    pub dab: u64,
    /// The buffer's block: auto (the members' largest transfer: 128K for a simulated ATA
    /// drive, a block device's max_sectors_kb; 128K when no member says), or a size.
    #[arg(long, default_value = "auto", value_parser = parse_dab_block, value_name = "SIZE|auto")]
    pub dab_block: DabBlock,
    /// How writes meet the buffer: write-through, or write-back (small writes held in
    /// memory until a flush).
    #[arg(long, default_value = "write-through", value_parser = parse_dab_mode, value_name = "MODE")]
    pub dab_mode: DabMode,
}

/// `--dab-block`: from the members, or a size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DabBlock {
    Auto,
    Bytes(u64),
}

fn parse_dab_block(s: &str) -> Result<DabBlock, String> {
    if s == "auto" {
        return Ok(DabBlock::Auto);
    }
    let b = size::parse_size(s)?;
    if !b.is_power_of_two() || !(MIN_BLOCK..=MAX_BLOCK).contains(&b) {
        return Err(format!("{s}: a power of two from 4K to 64M, or auto"));
    }
    Ok(DabBlock::Bytes(b))
}

fn parse_dab_mode(s: &str) -> Result<DabMode, String> {
    match s {
        "write-through" => Ok(DabMode::WriteThrough),
        "write-back" => Ok(DabMode::WriteBack),
        _ => Err(format!("{s}: write-through or write-back")),
    }
}

impl DabArgs {
    /// Refuses a budget under one (explicit) block.
    pub fn check(&self) -> AdminResult {
        if let DabBlock::Bytes(b) = self.dab_block {
            if self.dab > 0 && self.dab < b {
                return Err(AdminError::usage(
                    "--dab must hold at least one --dab-block",
                ));
            }
        }
        if self.dab > 0 && self.dab < MIN_BLOCK {
            return Err(AdminError::usage("--dab is 0 (none) or at least 4K"));
        }
        Ok(())
    }

    /// The members behind one buffer they share (none for `--dab 0`).
    pub fn wrap(
        &self,
        members: Vec<Arc<dyn Member>>,
    ) -> (Vec<Arc<dyn Member>>, Option<Arc<DabPool>>) {
        if self.dab == 0 {
            return (members, None);
        }
        let block = match self.dab_block {
            DabBlock::Bytes(b) => b,
            DabBlock::Auto => {
                let b = block_for(members.iter().map(|m| m.info().max_transfer), DEFAULT_BLOCK);
                // A budget under the members' transfer: the largest block it holds.
                b.min(1 << (63 - self.dab.leading_zeros()))
            }
        };
        let pool = DabPool::new(self.dab, block, self.dab_mode);
        let wrapped = members
            .into_iter()
            .map(|m| Arc::new(pool.wrap(m)) as Arc<dyn Member>)
            .collect();
        (wrapped, Some(pool))
    }
}

/// An iSCSI LUN: its capacity read once, then a session per worker and point.
fn iscsi_series(
    args: &SweepArgs,
    url: &IscsiUrl,
    mixes: &[Mix],
    progress: &mut Progress,
) -> AdminResult<Vec<(Series, Row)>> {
    let (size, block) = super::iscsi::capacity(url)
        .map_err(|e| AdminError::new(Exit::Failure, format!("bench sweep: {e}")))?;
    for &bs in &args.sizes {
        if !bs.is_multiple_of(u64::from(block)) {
            return Err(AdminError::usage(format!(
                "{url}: request size {bs} is not whole {block}-byte blocks"
            )));
        }
    }
    network_points(args, &url.to_string(), size, mixes, progress, || {
        Target::Iscsi {
            url: url.clone(),
            size,
            block,
        }
    })
}

/// A level or raw over fresh members (simulated ones on a fresh machine, so each target's
/// points start from the same state).
fn local_series(
    args: &SweepArgs,
    target: &SweepTarget,
    mixes: &[Mix],
    progress: &mut Progress,
) -> AdminResult<Vec<(Series, Row)>> {
    let m = members(args)?;
    let sim = match &m.kind {
        MemberKind::Sim(w) => Some(w.clone()),
        _ => None,
    };
    let (members, _direct) = open_members(&m.kind, m.n)?;
    let members = with_latency(members, args.member_latency);
    let (members, dab) = args.buffer.wrap(members);
    let array = match target {
        SweepTarget::Array(level) => {
            let setup = ArraySetup {
                level: *level,
                chunk: args.chunk,
                stripe_cache: args.stripe_cache,
                gather: args.gather,
                alone: args.alone,
                read_bypass: args.read_bypass == OnOff::On,
                policy: super::target::Policy::Resync,
                checksums: false,
            };
            Some(make_array(members.clone(), setup, sim.as_ref())?)
        }
        _ => None,
    };
    let series = Series {
        target: format!("{target} over {}", m.label),
        kind: m.csv_kind,
        mix: mixes[0],
        qd: args.qd,
        workers: args.workers,
        simulated: sim.is_some(),
    };
    let rows = points(
        args,
        series,
        mixes,
        progress,
        sim.as_ref(),
        dab.as_ref(),
        |bs| {
            Target::Local(Arc::new(match &array {
                Some(a) => Device::Array(a.clone()),
                None => Device::Raw {
                    members: members.clone(),
                    bs,
                },
            }))
        },
    )?;
    if let Some(a) = &array {
        close_array(a, sim.as_ref())?;
    }
    Ok(rows)
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
        iovecs: args.iovecs,
        server_pid: args.server_pid,
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
        let title = args.title.clone().unwrap_or_else(|| {
            format!(
                "raidd bench sweep: QD{} x {} worker{}",
                args.qd,
                args.workers,
                if args.workers == 1 { "" } else { "s" }
            )
        });
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
        assert_eq!(
            parse_latency("1ms"),
            Ok(std::time::Duration::from_millis(1))
        );
        assert_eq!(
            parse_latency("250us"),
            Ok(std::time::Duration::from_micros(250))
        );
        assert_eq!(parse_latency("0"), Ok(std::time::Duration::ZERO));
        for bad in ["1", "2s", "-1ms", "5000ms", "xms"] {
            assert!(parse_latency(bad).is_err(), "{bad}");
        }
        assert!(parse_ms("-1").is_err());
    }
}
