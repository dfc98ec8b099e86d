//! `raidd bench reproduce NAME`: the papers' experiments, each one command that writes its
//! CSV and plot and checks the shape the paper reports. The mechanical experiments run on
//! simulated drives (deterministic: the same files every time); docs/REPRODUCTION.md says
//! what each paper reports and where raidd agrees and differs.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use raidd_engine::{Alone, Array, Gather, Member};
use raidd_lab::SimWorld;
use raidd_layout::Level;
use raidd_sim::Topology;
use serde::Serialize;

use super::load::{run_point, Measure, Plan, Target};
use super::plot::{self, Line, XAxis};
use super::report::{self, Row, Series};
use super::scan::{scan, ScanPlan};
use super::spec::{Access, Mix};
use super::target::{close_array, make_array, ArraySetup, Device, Policy};
use raidd_admin::exit::{AdminError, AdminResult, Exit};
use raidd_admin::output;

/// The experiments, by name.
pub const EXPERIMENTS: &[(&str, &str)] = &[
    (
        "seed000",
        "sequential reads of 1 to 16 KiB at QD1 on two DJNA-371350 drives in RAID0, with and \
         without the DMA-aligned buffer (Fig. 3), and 64 and 128 KiB",
    ),
    (
        "seed001",
        "transfer rate against position: one drive, two striped on one PATA channel, on two \
         channels, on two controllers, four on two controllers (bus-bound), spanning",
    ),
    (
        "seed004-chunk",
        "RAID0 sequential read throughput against chunk size, 2 to 7 drives (Fig. 1)",
    ),
    (
        "seed004-raid5",
        "RAID5 against RAID0 sequential read throughput, 3 to 7 drives, with and without the \
         read bypass (Fig. 6)",
    ),
    (
        "seed004-gather",
        "RAID5 sequential write throughput with and without gathering, 4K and 8K chunks \
         (Figs. 4 and 5)",
    ),
];

#[derive(Args, Debug)]
pub struct ReproduceArgs {
    /// The experiment: seed000, seed001, seed004-chunk, seed004-raid5 or seed004-gather.
    #[arg(value_parser = parse_name)]
    pub name: String,
    /// Directory for NAME.csv and NAME.svg.
    #[arg(long, default_value = "docs/reproduction", value_name = "DIR")]
    pub out: PathBuf,
}

fn parse_name(s: &str) -> Result<String, String> {
    if EXPERIMENTS.iter().any(|(n, _)| *n == s) {
        return Ok(s.to_string());
    }
    let names: Vec<&str> = EXPERIMENTS.iter().map(|(n, _)| *n).collect();
    Err(format!(
        "no experiment {s:?}: there are {}",
        names.join(", ")
    ))
}

/// A shape the paper reports, as a ratio against a bar.
#[derive(Debug, Serialize)]
pub struct Check {
    pub what: String,
    pub value: f64,
    /// The check passes when `value` is at most (`at_most`) or at least the bar.
    pub bar: f64,
    pub at_most: bool,
    pub ok: bool,
}

impl Check {
    fn at_most(what: impl Into<String>, value: f64, bar: f64) -> Check {
        Check {
            what: what.into(),
            value,
            bar,
            at_most: true,
            ok: value <= bar,
        }
    }

    fn at_least(what: impl Into<String>, value: f64, bar: f64) -> Check {
        Check {
            what: what.into(),
            value,
            bar,
            at_most: false,
            ok: value >= bar,
        }
    }
}

/// What an experiment produced.
#[derive(Debug, Serialize)]
pub struct Reproduced {
    pub name: String,
    pub csv: String,
    pub svg: String,
    pub checks: Vec<Check>,
}

pub fn run(args: ReproduceArgs, json: bool) -> AdminResult {
    std::fs::create_dir_all(&args.out)
        .map_err(|e| AdminError::io(format_args!("cannot create {}", args.out.display()), &e))?;
    let (csv, svg, checks) = match args.name.as_str() {
        "seed000" => seed000()?,
        "seed001" => seed001()?,
        "seed004-chunk" => seed004_chunk()?,
        "seed004-raid5" => seed004_raid5()?,
        _ => seed004_gather()?,
    };
    let write = |ext: &str, text: &str| -> AdminResult<String> {
        let p = args.out.join(format!("{}.{ext}", args.name));
        std::fs::write(&p, text)
            .map_err(|e| AdminError::io(format_args!("cannot write {}", p.display()), &e))?;
        Ok(p.display().to_string())
    };
    let r = Reproduced {
        name: args.name.clone(),
        csv: write("csv", &csv)?,
        svg: write("svg", &svg)?,
        checks,
    };
    let failed = r.checks.iter().filter(|c| !c.ok).count();
    if json {
        output::emit_json(&r)?;
    } else {
        output::emit(&text(&r))?;
    }
    if failed > 0 {
        return Err(AdminError::new(
            Exit::Failure,
            format!("{}: {failed} shape check(s) failed", r.name),
        ));
    }
    Ok(())
}

fn text(r: &Reproduced) -> String {
    let mut s = format!("{}: wrote {} and {}\n", r.name, r.csv, r.svg);
    for c in &r.checks {
        let _ = writeln!(
            s,
            "  {:<4} {:<70} {:.3} ({} {})",
            if c.ok { "ok" } else { "FAIL" },
            c.what,
            c.value,
            if c.at_most { "<=" } else { ">=" },
            c.bar
        );
    }
    s
}

fn sim_failed(e: String) -> AdminError {
    AdminError::new(Exit::Failure, e)
}

fn topology(text: &str) -> AdminResult<Topology> {
    Topology::parse(text, Path::new(".")).map_err(sim_failed)
}

/// The members of a fresh simulated machine.
fn sim_members(t: &Topology) -> (Arc<SimWorld>, Vec<Arc<dyn Member>>) {
    let w = SimWorld::new(t);
    let m = w
        .members()
        .into_iter()
        .map(|m| Arc::new(m) as Arc<dyn Member>)
        .collect();
    (w, m)
}

fn sim_array(
    t: &Topology,
    level: Level,
    chunk: u64,
    gather: Gather,
) -> AdminResult<(Arc<SimWorld>, Arc<Array>)> {
    let (w, members) = sim_members(t);
    let setup = ArraySetup {
        level,
        chunk,
        stripe_cache: 16 << 20,
        gather,
        alone: Alone::Auto,
        read_bypass: true,
        policy: Policy::Resync,
        checksums: false,
    };
    let a = make_array(members, setup, Some(&w))?;
    Ok((w, a))
}

/// Controllers, each a list of channels, each a list of drive models.
type Machine<'a> = Vec<&'a [&'a [&'a str]]>;

/// Seed 001's machine: 35 MB/s drives (ata100-7200), PATA channels that carry 50 MB/s,
/// controllers whose PCI side carries 55 MB/s, on a bus that carries 100 MB/s (PCI's
/// 133 MB/s nominal, less its overheads). Which drives sit where is the experiment.
fn seed001_machine(controllers: &[&[&[&str]]]) -> String {
    let mut t = String::from("bus_mb_s = 100\n");
    for c in controllers {
        t.push_str("[[controller]]\nmb_s = 55\n");
        for ch in *c {
            let drives: Vec<String> = ch.iter().map(|d| format!("{d:?}")).collect();
            let _ = write!(
                t,
                "[[controller.channel]]\nmb_s = 50\noverlap = false\ndrives = [{}]\n",
                drives.join(", ")
            );
        }
    }
    t
}

/// Each configuration of seed 001 scanned: a line per configuration.
fn seed001_scans() -> AdminResult<Vec<Line>> {
    const D: &str = "ata100-7200";
    let plan = ScanPlan {
        points: 40,
        span: 16 << 20,
        bs: 1 << 20,
        qd: 2,
    };
    let configs: [(&str, Option<Level>, Machine); 6] = [
        ("one drive", None, vec![&[&[D]]]),
        (
            "RAID0 x2, master/slave on one channel",
            Some(Level::Raid0),
            vec![&[&[D, D]]],
        ),
        (
            "RAID0 x2, two channels of one controller",
            Some(Level::Raid0),
            vec![&[&[D], &[D]]],
        ),
        (
            "RAID0 x2, two controllers",
            Some(Level::Raid0),
            vec![&[&[D]], &[&[D]]],
        ),
        (
            "RAID0 x4, two controllers (bus-bound)",
            Some(Level::Raid0),
            vec![&[&[D], &[D]], &[&[D], &[D]]],
        ),
        (
            "linear x2, master/slave on one channel",
            Some(Level::Linear),
            vec![&[&[D, D]]],
        ),
    ];
    let mut lines = Vec::new();
    for (name, level, machine) in &configs {
        let t = topology(&seed001_machine(machine))?;
        let (w, target, array) = match level {
            None => {
                let (w, m) = sim_members(&t);
                let dev = Device::Raw {
                    members: m[..1].to_vec(),
                    bs: plan.bs,
                };
                (w, Target::Local(Arc::new(dev)), None)
            }
            Some(l) => {
                let (w, a) = sim_array(&t, *l, 64 << 10, Gather::Plug)?;
                (
                    w,
                    Target::Local(Arc::new(Device::Array(a.clone()))),
                    Some(a),
                )
            }
        };
        let points = scan(&target, Some(&w), plan).map_err(sim_failed)?;
        if let Some(a) = array {
            close_array(&a, Some(&w))?;
        }
        lines.push(Line {
            name: name.to_string(),
            points: points
                .iter()
                .map(|p| (p.position_pct, p.mb_per_s))
                .collect(),
        });
    }
    Ok(lines)
}

/// The shapes seed 001 reports, from its scans (in `seed001_scans`' order).
fn seed001_checks(lines: &[Line]) -> Vec<Check> {
    let mean = |i: usize| {
        let p = &lines[i].points;
        p.iter().map(|x| x.1).sum::<f64>() / p.len() as f64
    };
    // Where four drives want well over the bus: the outer zone (its first 16 % of the
    // drive), where each gives 31 MB/s, 124 in all. Further in they want less and lose
    // revolutions waiting for the bus, and run a few percent below it (REPRODUCTION.md).
    let outer = |i: usize| {
        let p: Vec<f64> = lines[i]
            .points
            .iter()
            .filter(|x| x.0 < 15.0)
            .map(|x| x.1)
            .collect();
        p.iter().sum::<f64>() / p.len().max(1) as f64
    };
    vec![
        Check::at_most(
            "master/slave striping / the same drives on two channels",
            mean(1) / mean(2),
            0.5,
        ),
        Check::at_least(
            "four drives on two controllers, outer zone / the 100 MB/s bus",
            outer(4) / 100.0,
            0.95,
        ),
        Check::at_most(
            "four drives on two controllers, outer zone / the 100 MB/s bus (ceiling)",
            outer(4) / 100.0,
            1.0,
        ),
        Check::at_least("spanning / one drive", mean(5) / mean(0), 0.95),
        Check::at_most("spanning / one drive (ceiling)", mean(5) / mean(0), 1.05),
    ]
}

/// A CSV of scans: the position, then one column of MB/s per line.
fn scans_csv(lines: &[Line]) -> String {
    let mut csv = String::from("position_pct");
    for l in lines {
        let _ = write!(csv, ",{:?}", l.name);
    }
    csv.push_str("\r\n");
    for i in 0..lines[0].points.len() {
        let _ = write!(csv, "{:.2}", lines[0].points[i].0);
        for l in lines {
            let _ = write!(csv, ",{:.3}", l.points[i].1);
        }
        csv.push_str("\r\n");
    }
    csv
}

fn seed001() -> AdminResult<(String, String, Vec<Check>)> {
    let lines = seed001_scans()?;
    let checks = seed001_checks(&lines);
    let csv = scans_csv(&lines);
    let axis = XAxis::Linear {
        min: 0.0,
        max: 100.0,
        step: 20.0,
        label: "position (% of the device)".into(),
    };
    let svg = plot::figure(
        "Seed 001: 35 MB/s drives on 50 MB/s PATA channels, 55 MB/s controllers, a 100 MB/s bus",
        &[("transfer rate (MB/s)", &lines, &axis)],
    );
    Ok((csv, svg, checks))
}

/// Seed 000 Fig. 3: RAID0 over two DJNA-371350 drives, each on its own channel, 100 %
/// sequential reads at QD1, without the buffer and with 64 MiB of 128 KiB blocks.
fn seed000() -> AdminResult<(String, String, Vec<Check>)> {
    let sizes: [u64; 7] = [
        1 << 10,
        2 << 10,
        4 << 10,
        8 << 10,
        16 << 10,
        64 << 10,
        128 << 10,
    ];
    let read = Mix::parse("read").map_err(sim_failed)?;
    let mut rows = Vec::new();
    let mut iops: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for (k, dab) in [0u64, 64 << 20].into_iter().enumerate() {
        let name = if dab == 0 { "no DAB" } else { "DAB 64 MiB" };
        let series = Series {
            target: format!("RAID0 x2 djna-371350, {name}"),
            kind: "SIMULATED",
            mix: read,
            qd: 1,
            workers: 1,
            simulated: true,
        };
        for &bs in &sizes {
            let t = djna_machine(2)?;
            let (w, members) = sim_members(&t);
            let members = if dab == 0 {
                members
            } else {
                let pool = raidd_engine::member::DabPool::new(
                    dab,
                    128 << 10,
                    raidd_engine::member::DabMode::WriteThrough,
                );
                members
                    .into_iter()
                    .map(|m| Arc::new(pool.wrap(m)) as Arc<dyn Member>)
                    .collect()
            };
            let setup = ArraySetup {
                level: Level::Raid0,
                chunk: 64 << 10,
                stripe_cache: 0,
                gather: Gather::Plug,
                alone: Alone::Auto,
                read_bypass: true,
                policy: Policy::Resync,
                checksums: false,
            };
            let a = make_array(members, setup, Some(&w))?;
            let o = run_point(
                &Target::Local(Arc::new(Device::Array(a.clone()))),
                &point_plan(read, bs, 1, 10.0),
                Some(&w),
            )
            .map_err(sim_failed)?;
            close_array(&a, Some(&w))?;
            let row = Row::new(&series, bs, &o);
            iops[k].push(row.iops);
            rows.push((series.clone(), row));
        }
    }
    let gain = |i: usize| iops[1][i] / iops[0][i];
    let mut checks = vec![Check::at_least("1 KiB: DAB / no DAB (IOPS)", gain(0), 4.0)];
    for (i, bs) in sizes.iter().enumerate().take(5).skip(1) {
        checks.push(Check::at_most(
            format!(
                "{} KiB: the gain falls as the size grows (gain / the smaller size's)",
                bs >> 10
            ),
            gain(i) / gain(i - 1),
            1.0,
        ));
    }
    for (i, bs) in sizes.iter().enumerate().skip(5) {
        checks.push(Check::at_least(
            format!("{} KiB: DAB / no DAB within 5 %", bs >> 10),
            gain(i),
            0.95,
        ));
        checks.push(Check::at_most(
            format!("{} KiB: DAB / no DAB within 5 % (ceiling)", bs >> 10),
            gain(i),
            1.05,
        ));
    }
    let only: Vec<Row> = rows.iter().map(|(_, r)| r.clone()).collect();
    let svg = plot::svg(
        "Seed 000 Fig. 3: RAID0 over two DJNA-371350 drives, sequential reads at QD1",
        &only,
    );
    Ok((report::csv(&rows), svg, checks))
}

/// A plan of one worker's `qd` sequential or random requests of `bs` for `seconds`.
fn point_plan(mix: Mix, bs: u64, qd: u32, seconds: f64) -> Plan {
    Plan {
        access: Access {
            bs,
            mix,
            align: bs,
            burst: 1,
            delay_ns: 0,
        },
        workers: 1,
        qd,
        ramp_s: 0.5,
        measure: Measure::Seconds(seconds),
        seed: 1,
        iovecs: 1,
        server_pid: None,
    }
}

/// One point over an array: MB/s.
fn point(
    w: &Arc<SimWorld>,
    a: &Arc<Array>,
    mix: Mix,
    bs: u64,
    qd: u32,
    seconds: f64,
) -> AdminResult<f64> {
    let plan = point_plan(mix, bs, qd, seconds);
    let o = run_point(
        &Target::Local(Arc::new(Device::Array(a.clone()))),
        &plan,
        Some(w),
    )
    .map_err(sim_failed)?;
    Ok(o.ios() as f64 * bs as f64 / o.seconds / 1e6)
}

/// `n` djna-371350 drives, each on its own channel and controller, on a PCI bus.
fn djna_machine(n: usize) -> AdminResult<Topology> {
    let d = raidd_sim::load_model("djna-371350", Path::new(".")).map_err(sim_failed)?;
    Ok(Topology::separate(d, n))
}

fn seed004_chunk() -> AdminResult<(String, String, Vec<Check>)> {
    let chunks: Vec<u64> = (12..=18).map(|s| 1u64 << s).collect();
    let read = Mix::parse("read").map_err(sim_failed)?;
    let mut lines = Vec::new();
    let mut csv = String::from("drives,chunk,mb_per_s\r\n");
    for n in 2..=7 {
        let mut points = Vec::new();
        for &chunk in &chunks {
            let (w, a) = sim_array(&djna_machine(n)?, Level::Raid0, chunk, Gather::Plug)?;
            let mb = point(&w, &a, read, 64 << 10, 8, 3.0)?;
            close_array(&a, Some(&w))?;
            let _ = write!(csv, "{n},{chunk},{mb:.3}\r\n");
            points.push((chunk as f64, mb));
        }
        lines.push(Line {
            name: format!("{n} drives"),
            points,
        });
    }
    // Each drive streams on its own: throughput grows with the drives, at every chunk.
    let at = |n: usize, chunk: u64| {
        lines[n - 2]
            .points
            .iter()
            .find(|p| p.0 == chunk as f64)
            .map_or(0.0, |p| p.1)
    };
    let checks = chunks
        .iter()
        .map(|&c| {
            Check::at_least(
                format!("{}K chunks: 7 drives / 2 drives / 3.5", c >> 10),
                at(7, c) / at(2, c) / 3.5,
                0.95,
            )
        })
        .collect();
    let svg = plot::figure(
        "Seed 004 Fig. 1: RAID0 sequential read (64 KiB requests, 8 in flight), djna-371350 drives",
        &[("throughput (MB/s)", &lines, &XAxis::Sizes(chunks))],
    );
    Ok((csv, svg, checks))
}

fn seed004_raid5() -> AdminResult<(String, String, Vec<Check>)> {
    let read = Mix::parse("read").map_err(sim_failed)?;
    let drives: Vec<usize> = (3..=7).collect();
    let mut csv =
        String::from("drives,raid0,raid5_bypass,raid5_no_bypass,raid5_bypass_over_raid0\r\n");
    let (mut r0, mut on, mut off) = (Vec::new(), Vec::new(), Vec::new());
    let mut checks = Vec::new();
    for &n in &drives {
        let t = djna_machine(n)?;
        let run = |level: Level, bypass: bool| -> AdminResult<f64> {
            let (w, a) = sim_array(&t, level, 64 << 10, Gather::Plug)?;
            a.set_read_bypass(bypass);
            let mb = point(&w, &a, read, 1 << 20, 2, 3.0)?;
            close_array(&a, Some(&w))?;
            Ok(mb)
        };
        let (a, b, c) = (
            run(Level::Raid0, true)?,
            run(Level::Raid5, true)?,
            run(Level::Raid5, false)?,
        );
        let _ = write!(csv, "{n},{a:.3},{b:.3},{c:.3},{:.4}\r\n", b / a);
        let ideal = (n - 1) as f64 / n as f64;
        checks.push(Check::at_least(
            format!("{n} drives: RAID5 with bypass / RAID0 / ((N-1)/N)"),
            b / a / ideal,
            0.95,
        ));
        r0.push((n as f64, a));
        on.push((n as f64, b));
        off.push((n as f64, c));
    }
    let mean = |p: &[(f64, f64)]| p.iter().map(|x| x.1).sum::<f64>() / p.len() as f64;
    checks.push(Check::at_most(
        "RAID5 without bypass / with, mean over 3-7 drives",
        mean(&off) / mean(&on),
        0.9,
    ));
    let lines = vec![
        Line {
            name: "RAID0".into(),
            points: r0,
        },
        Line {
            name: "RAID5, read bypass".into(),
            points: on,
        },
        Line {
            name: "RAID5, reads through a buffer under the stripe lock".into(),
            points: off,
        },
    ];
    let axis = XAxis::Linear {
        min: 3.0,
        max: 7.0,
        step: 1.0,
        label: "drives".into(),
    };
    let svg = plot::figure(
        "Seed 004 Fig. 6: sequential 1 MiB reads (2 in flight), 64 KiB chunks, djna-371350 drives",
        &[("throughput (MB/s)", &lines, &axis)],
    );
    Ok((csv, svg, checks))
}

fn seed004_gather() -> AdminResult<(String, String, Vec<Check>)> {
    let write = Mix::parse("write").map_err(sim_failed)?;
    let mut lines = Vec::new();
    let mut csv = String::from("chunk,gather,drives,mb_per_s\r\n");
    let mut checks = Vec::new();
    let drives: Vec<usize> = (3..=7).collect();
    for chunk in [4u64 << 10, 8 << 10] {
        let mut by_policy = Vec::new();
        for (policy, gather) in [("none", Gather::None), ("plug", Gather::Plug)] {
            let mut points = Vec::new();
            for &n in &drives {
                let (w, a) = sim_array(&djna_machine(n)?, Level::Raid5, chunk, gather)?;
                let mb = point(&w, &a, write, 4 << 10, 16, 3.0)?;
                close_array(&a, Some(&w))?;
                let _ = write!(csv, "{chunk},{policy},{n},{mb:.3}\r\n");
                points.push((n as f64, mb));
            }
            by_policy.push(points.clone());
            lines.push(Line {
                name: format!("{}K chunks, gather {policy}", chunk >> 10),
                points,
            });
        }
        let mean = |p: &[(f64, f64)]| p.iter().map(|x| x.1).sum::<f64>() / p.len() as f64;
        checks.push(Check::at_least(
            format!(
                "{}K chunks: gathering / none, mean over 3-7 drives",
                chunk >> 10
            ),
            mean(&by_policy[1]) / mean(&by_policy[0]),
            1.1,
        ));
    }
    let axis = XAxis::Linear {
        min: 3.0,
        max: 7.0,
        step: 1.0,
        label: "drives".into(),
    };
    let svg = plot::figure(
        "Seed 004 Figs. 4-5: RAID5 sequential 4 KiB writes (16 in flight), djna-371350 drives",
        &[("throughput (MB/s)", &lines, &axis)],
    );
    Ok((csv, svg, checks))
}
