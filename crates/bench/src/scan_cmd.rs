//! `raidd scan`: transfer rate against offset, on a member, an array, or simulated drives
//! (seed 001's background tool). Real members are only read.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use raidd_engine::member::{FileMember, OpenOptions};
use raidd_engine::Member;
use raidd_lab::SimWorld;
use raidd_layout::Level;
use raidd_sim::Topology;
use serde::Serialize;

use crate::load::Target;
use crate::plot::{self, Line, XAxis};
use crate::scan::{scan, ScanPlan, ScanPoint};
use crate::target::{make_array, ArraySetup, Device, Policy};
use raidd_admin::exit::{AdminError, AdminResult, Exit};
use raidd_admin::md_names::parse_level;
use raidd_admin::members::Access;
use raidd_admin::output;
use raidd_admin::session;
use raidd_admin::size;

#[derive(Args, Debug)]
pub struct ScanArgs {
    /// What to scan: one member (a file or device, read as it is), the array several
    /// members assemble (read-only), or `sim:MODEL`: simulated drives.
    #[arg(required = true, value_name = "MEMBER")]
    pub members: Vec<String>,
    /// Scan each member given on its own instead of the array they make.
    #[arg(long)]
    pub each: bool,
    /// Simulated drives: how many (each alone on its channel and controller).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub drives: Option<u16>,
    /// Simulated drives placed on channels, controllers and a bus by this TOML file.
    #[arg(long, value_name = "FILE")]
    pub topology: Option<PathBuf>,
    /// Simulated drives: the array made over them (default: the first drive alone).
    #[arg(long, value_parser = parse_level)]
    pub level: Option<Level>,
    /// Chunk of the simulated array.
    #[arg(long, default_value = "64K", value_parser = size::parse_chunk, value_name = "SIZE")]
    pub chunk: u64,
    /// Points across the device.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub points: u32,
    /// Bytes read at each point.
    #[arg(long, default_value = "16M", value_parser = size::parse_sector_multiple, value_name = "SIZE")]
    pub span: u64,
    /// Bytes per request.
    #[arg(long, default_value = "1M", value_parser = size::parse_sector_multiple, value_name = "SIZE")]
    pub bs: u64,
    /// Requests in flight.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub qd: u32,
    /// Also plot rate against position, as SVG.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
}

/// One scanned device.
#[derive(Debug, Serialize)]
pub struct Scanned {
    pub name: String,
    pub size: u64,
    pub simulated: bool,
    pub points: Vec<ScanPoint>,
}

#[derive(Debug, Serialize)]
struct ScanReport<'a> {
    scans: &'a [Scanned],
}

fn usage(e: String) -> AdminError {
    AdminError::usage(e)
}

/// Simulated drives from `sim:MODEL` and the options: the machine, and what to scan.
fn simulated(model: &str, args: &ScanArgs) -> AdminResult<(Arc<SimWorld>, Target, String)> {
    let topology = match &args.topology {
        Some(f) => Topology::load(f).map_err(usage)?,
        None => {
            let d = raidd_sim::load_model(model, Path::new(".")).map_err(usage)?;
            Topology::separate(d, usize::from(args.drives.unwrap_or(1)))
        }
    };
    let world = SimWorld::new(&topology);
    let members: Vec<Arc<dyn Member>> = world
        .members()
        .into_iter()
        .map(|m| Arc::new(m) as Arc<dyn Member>)
        .collect();
    let n = members.len();
    let (dev, name) = match args.level {
        None => (
            Device::Raw {
                members: members[..1].to_vec(),
                bs: args.bs,
            },
            format!("sim:{model}"),
        ),
        Some(level) => {
            let setup = ArraySetup {
                level,
                chunk: args.chunk,
                stripe_cache: 16 << 20,
                gather: raidd_engine::Gather::Plug,
                alone: raidd_engine::Alone::Auto,
                read_bypass: true,
                policy: Policy::Resync,
                checksums: false,
            };
            let a = make_array(members, setup, Some(&world))?;
            (Device::Array(a), format!("{level} over {n} sim:{model}"))
        }
    };
    Ok((world, Target::Local(Arc::new(dev)), name))
}

/// One real member, read as it is.
fn member(path: &str, bs: u64) -> AdminResult<Target> {
    let opts = OpenOptions {
        write: false,
        direct: None,
        exclusive: false,
        timeout: None,
    };
    let m = FileMember::open(Path::new(path), opts)?;
    Ok(Target::Local(Arc::new(Device::Raw {
        members: vec![Arc::new(m) as Arc<dyn Member>],
        bs,
    })))
}

fn plan(args: &ScanArgs) -> ScanPlan {
    ScanPlan {
        points: args.points,
        span: args.span,
        bs: args.bs,
        qd: args.qd,
    }
}

fn one(
    name: String,
    target: &Target,
    sim: Option<&Arc<SimWorld>>,
    args: &ScanArgs,
) -> AdminResult<Scanned> {
    let points = scan(target, sim, plan(args))
        .map_err(|e| AdminError::new(Exit::Failure, format!("scan {name}: {e}")))?;
    Ok(Scanned {
        size: target.size(),
        simulated: sim.is_some(),
        name,
        points,
    })
}

pub fn run(args: ScanArgs, json: bool) -> AdminResult {
    if args.span < 2 * args.bs {
        return Err(AdminError::usage(
            "--span must hold at least two requests of --bs (the first is not timed)",
        ));
    }
    let scans = match args.members[0].strip_prefix("sim:") {
        Some(model) => {
            if args.members.len() > 1 {
                return Err(AdminError::usage(
                    "give sim:MODEL alone (--drives or --topology say how many)",
                ));
            }
            let (world, target, name) = simulated(model, &args)?;
            vec![one(name, &target, Some(&world), &args)?]
        }
        None if args.drives.is_some() || args.topology.is_some() || args.level.is_some() => {
            return Err(AdminError::usage(
                "--drives, --topology and --level are for simulated drives (sim:MODEL)",
            ));
        }
        None if args.each || args.members.len() == 1 => args
            .members
            .iter()
            .map(|p| one(p.clone(), &member(p, args.bs)?, None, &args))
            .collect::<AdminResult<Vec<_>>>()?,
        None => vec![array_scan(&args)?],
    };
    if let Some(p) = &args.plot {
        std::fs::write(p, svg(&scans))
            .map_err(|e| AdminError::io(format_args!("cannot write {}", p.display()), &e))?;
    }
    if json {
        return output::emit_json(&ScanReport { scans: &scans });
    }
    output::emit(&table(&scans))
}

/// The array the members assemble, read-only.
fn array_scan(args: &ScanArgs) -> AdminResult<Scanned> {
    let paths: Vec<PathBuf> = args.members.iter().map(PathBuf::from).collect();
    let s = raidd_rt::block_on(async move {
        let start = session::Start {
            dirty_degraded: false,
            member_timeout: None,
            dab: None,
            journal_mode: raidd_engine::JournalMode::WriteThrough,
            tag_cache: 0,
            rederive_in_background: false,
        };
        session::assemble(&paths, Access::ReadOnly, false, start).await
    })?;
    let array = s.root().clone();
    let name = array.name().to_string();
    let target = Target::Local(Arc::new(Device::Array(array)));
    let scanned = one(name, &target, None, args);
    raidd_rt::block_on(async move { s.close().await })?;
    scanned
}

pub fn svg(scans: &[Scanned]) -> String {
    let lines: Vec<Line> = scans
        .iter()
        .map(|s| Line {
            name: s.name.clone(),
            points: s
                .points
                .iter()
                .map(|p| (p.position_pct, p.mb_per_s))
                .collect(),
        })
        .collect();
    let axis = XAxis::Linear {
        min: 0.0,
        max: 100.0,
        step: 20.0,
        label: "position (% of the device)".into(),
    };
    plot::figure(
        "raidd scan: transfer rate against position",
        &[("MB/s", &lines, &axis)],
    )
}

fn table(scans: &[Scanned]) -> String {
    let mut out = String::new();
    for s in scans {
        out.push_str(&format!(
            "{} ({}{})\n{:>10} {:>14} {:>10}\n",
            s.name,
            size::short(s.size),
            if s.simulated { ", simulated" } else { "" },
            "position",
            "offset",
            "MB/s"
        ));
        for p in &s.points {
            out.push_str(&format!(
                "{:>9.1}% {:>14} {:>10.2}\n",
                p.position_pct, p.offset, p.mb_per_s
            ));
        }
    }
    out
}
