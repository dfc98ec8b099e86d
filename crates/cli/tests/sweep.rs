//! `raidd bench sweep`: the fixed contract scripts rely on, simulated members in simulated
//! time (deterministic, fast), the CSV and the plot, and bad input.
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::time::Instant;

use common::daemon::*;
use common::*;
use serde_json::Value;

fn sweep(extra: &[&str]) -> Run {
    let mut a = vec!["bench", "sweep"];
    a.extend_from_slice(extra);
    raidd(&a)
}

/// The issue's own command line, as written, gives one row per size with every field of
/// the contract, in the order asked.
#[test]
fn the_contract_command_gives_its_rows() {
    let j = sweep(&[
        "--target",
        "raid0",
        "--members",
        "2",
        "--member",
        "sim:djna-371350",
        "--sizes",
        "1K,2K,4K,8K,16K",
        "--rw",
        "read",
        "--qd",
        "1",
        "--seconds",
        "10",
        "--json",
    ])
    .ok()
    .json();
    let rows = j["rows"].as_array().unwrap();
    let sizes: Vec<u64> = rows.iter().map(|r| r["bs"].as_u64().unwrap()).collect();
    assert_eq!(sizes, [1024, 2048, 4096, 8192, 16384]);
    for r in rows {
        for f in [
            "iops",
            "mb_per_s",
            "lat_mean_us",
            "lat_p99_us",
            "cpu_per_io_us",
        ] {
            assert!(r[f].as_f64().unwrap() > 0.0, "{f} in {r}");
        }
        // MB/s is IOPS times the size, in decimal megabytes.
        let (iops, mb, bs) = (
            r["iops"].as_f64().unwrap(),
            r["mb_per_s"].as_f64().unwrap(),
            r["bs"].as_f64().unwrap(),
        );
        assert!((iops * bs / 1e6 - mb).abs() < 1e-6 * mb, "{r}");
        assert_eq!(r["seconds"], 10.0);
        assert_eq!(r["simulated"], true);
    }
    // At QD1 a request costs the model's 0.5 ms command overhead at least: no row above
    // 2000 IOPS, and at 1 KiB it is nearly all of it.
    let iops: Vec<f64> = rows.iter().map(|r| r["iops"].as_f64().unwrap()).collect();
    assert!(iops.iter().all(|&i| i < 2000.0), "{iops:?}");
    assert!(iops[0] > 1800.0, "{iops:?}");
    // Bigger requests move more bytes per second.
    let mb: Vec<f64> = rows
        .iter()
        .map(|r| r["mb_per_s"].as_f64().unwrap())
        .collect();
    assert!(mb.windows(2).all(|w| w[1] > w[0]), "{mb:?}");
}

/// The same seed and configuration give a byte-identical CSV, and a 5-size × 2-mode sweep
/// over simulated disks takes well under 5 s of wall time.
#[test]
fn simulated_sweeps_are_deterministic_and_fast() {
    let dir = scratch();
    let run = |name: &str| {
        let csv = dir.path().join(name);
        let t = Instant::now();
        sweep(&[
            "--target",
            "raid5",
            "--members",
            "4",
            "--member",
            "sim:djna-371350",
            "--sizes",
            "1K..16K",
            "--rw",
            "randread,randwrite",
            "--qd",
            "4",
            "--seconds",
            "10",
            "--seed",
            "7",
            "--csv",
            csv.to_str().unwrap(),
        ])
        .ok();
        (std::fs::read(&csv).unwrap(), t.elapsed())
    };
    let (a, took) = run("a.csv");
    let (b, _) = run("b.csv");
    assert_eq!(a, b, "two runs of the same sweep differ");
    assert!(took.as_secs_f64() < 5.0, "took {took:?}");
    let text = String::from_utf8(a).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 11, "a header and 10 points");
    // Iometer's names, so a spreadsheet that knows Iometer's results knows these.
    let header: Vec<&str> = lines[0].split(',').collect();
    for col in [
        "Target Type",
        "Target Name",
        "Access Specification Name",
        "IOps",
        "MBps (Decimal)",
        "Average Response Time",
        "Maximum Response Time",
        "% CPU Utilization",
    ] {
        assert!(header.contains(&col), "no {col:?} in {header:?}");
    }
    assert!(lines[1].starts_with("SIMULATED,raid5 over 4 sim:djna-371350,randread 1024,"));
    // A different seed draws other requests.
    let other = sweep(&[
        "--target",
        "raid5",
        "--members",
        "4",
        "--member",
        "sim:djna-371350",
        "--sizes",
        "4K",
        "--rw",
        "randread",
        "--qd",
        "4",
        "--seconds",
        "10",
        "--seed",
        "8",
        "--json",
    ])
    .ok()
    .json();
    let seven: Vec<&str> = lines[3].split(',').collect();
    let iops_seven: f64 = seven[8].parse().unwrap();
    assert_ne!(other["rows"][0]["iops"].as_f64().unwrap(), iops_seven);
}

/// Memory members: several targets and patterns in one command line make one series
/// each, `--count` measures exactly that many requests, and the plot has a line per series.
#[test]
fn memory_sweeps_count_requests_and_plot_every_series() {
    let dir = scratch();
    let svg = dir.path().join("s.svg");
    let j = sweep(&[
        "--target",
        "raw",
        "--target",
        "raid5",
        "--members",
        "4",
        "--member-size",
        "16M",
        "--sizes",
        "4K,64K",
        "--rw",
        "read,randwrite",
        "--qd",
        "8",
        "--workers",
        "2",
        "--count",
        "500",
        "--ramp",
        "0",
        "--iovecs",
        "2",
        "--plot",
        svg.to_str().unwrap(),
        "--json",
    ])
    .ok()
    .json();
    let rows = j["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2 * 2 * 2);
    for r in rows {
        assert_eq!(r["ios"], 500, "{r}");
        assert_eq!(r["simulated"], false);
        assert_eq!(r["workers"], 2);
    }
    let writes: Vec<&Value> = rows.iter().filter(|r| r["rw"] == "randwrite").collect();
    assert!(writes
        .iter()
        .all(|r| r["write_ios"] == 500 && r["read_ios"] == 0));
    assert_eq!(rows[0]["target"], "raw over 4 memory");
    assert_eq!(rows[4]["target"], "raid5 over 4 memory");
    let text = std::fs::read_to_string(&svg).unwrap();
    // Four series, each a line in both panels.
    assert_eq!(text.matches("<polyline").count(), 8, "{text}");
    assert!(text.contains("raid5 over 4 memory randwrite"));
}

/// A mix by percentages, a topology file, and the bad input a user may type.
#[test]
fn mixes_topologies_and_bad_input() {
    let dir = scratch();
    let topo = dir.path().join("pata.toml");
    std::fs::write(
        &topo,
        "bus_mb_s = 133\n[[controller]]\n[[controller.channel]]\noverlap = false\n\
         drives = [\"djna-371350\", \"djna-371350\"]\n",
    )
    .unwrap();
    let j = sweep(&[
        "--target",
        "raid1",
        "--member",
        "sim:djna-371350",
        "--topology",
        topo.to_str().unwrap(),
        "--sizes",
        "8K",
        "--read-pct",
        "70",
        "--random-pct",
        "50",
        "--seconds",
        "2",
        "--json",
    ])
    .ok()
    .json();
    let r = &j["rows"][0];
    assert_eq!(r["rw"], "70r/30w-50rnd");
    assert_eq!(r["target"], "raid1 over 2 sim:djna-371350");
    let share = r["read_ios"].as_f64().unwrap() / r["ios"].as_f64().unwrap();
    assert!((share - 0.7).abs() < 0.1, "{r}");
    let bad_topo = dir.path().join("bad.toml");
    std::fs::write(&bad_topo, "[[controller]]\nchannel = []\n").unwrap();
    for (args, want) in [
        (vec!["--member", "sim:nope"], "no drive model"),
        (vec!["--member", "disk"], "unknown member kind"),
        (vec!["--member", "file"], "needs --dir"),
        (vec!["--sizes", "3K..8K"], "power of two"),
        (vec!["--sizes", "1000"], "invalid size"),
        (vec!["--rw", "trim"], "unknown pattern"),
        (vec!["--random-pct", "5"], "needs --read-pct"),
        (vec!["--sizes", "4K", "--iovecs", "16"], "whole sectors"),
        (vec!["--target", "raid9"], "raid9"),
        (
            vec![
                "--member",
                "sim:djna-371350",
                "--topology",
                bad_topo.to_str().unwrap(),
            ],
            "without channels",
        ),
        (
            vec![
                "--member",
                "sim:djna-371350",
                "--topology",
                topo.to_str().unwrap(),
                "--members",
                "3",
            ],
            "places 2 drives",
        ),
        (vec!["--topology", topo.to_str().unwrap()], "sim:MODEL"),
        (
            vec!["--member-size", "8K", "--sizes", "4K"],
            "four requests",
        ),
    ] {
        let mut a = args.clone();
        a.extend(["--seconds", "0.1"]);
        let r = sweep(&a);
        // Usage errors, from the argument parser or after it: exit 2, the reason said.
        assert_eq!(r.code, 2, "{args:?}: {}", r.stderr);
        assert!(r.stderr.contains(want), "{args:?}: {}", r.stderr);
        assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    }
}

/// One command line measures two NBD servers: raidd serving a RAID5 and nbdkit's memory
/// plugin. Each gets a connection per worker; the CSV reads back through Python's csv
/// module (the dialect spreadsheets read) under Iometer's column names.
#[test]
fn nbd_targets_put_two_servers_in_one_sweep() {
    let dir = scratch();
    let members = create_array(dir.path(), "raid5", 4, &[]);
    let d = Daemon::start(dir.path(), &array_config("raid5", &members));
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let pidfile = dir.path().join("nbdkit.pid");
    let mut kit = std::process::Command::new("nbdkit")
        .args(["-f", "-P", pidfile.to_str().unwrap(), "-i", "127.0.0.1"])
        .args(["-p", &port.to_string(), "memory", "64M"])
        .spawn()
        .expect("nbdkit (Debian's nbdkit package)");
    // nbdkit writes its PID file once it listens.
    let t = Instant::now();
    while !pidfile.exists() {
        assert!(t.elapsed().as_secs() < 20, "nbdkit did not start");
        assert!(kit.try_wait().unwrap().is_none(), "nbdkit exited");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let csv = dir.path().join("servers.csv");
    let kit_url = format!("nbd://127.0.0.1:{port}/");
    let pid = d.pid().to_string();
    let j = sweep(&[
        "--server-pid",
        &pid,
        "--target",
        &d.uri("raid5"),
        "--target",
        &kit_url,
        "--sizes",
        "4K,64K",
        "--rw",
        "randread,write",
        "--qd",
        "4",
        "--workers",
        "2",
        "--seconds",
        "0.5",
        "--csv",
        csv.to_str().unwrap(),
        "--json",
    ])
    .ok()
    .json();
    let _ = kit.kill();
    let _ = kit.wait();
    let rows = j["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 8);
    for r in rows {
        assert!(r["iops"].as_f64().unwrap() > 0.0, "{r}");
        assert_eq!(r["simulated"], false);
    }
    assert!(rows[0]["target"].as_str().unwrap().ends_with("/raid5"));
    // raidd's own CPU per request, measured from outside while it served.
    let server: f64 = rows[..4]
        .iter()
        .map(|r| r["server_cpu_per_io_us"].as_f64().unwrap())
        .sum();
    assert!(server > 0.0, "{rows:?}");
    assert_eq!(rows[4]["target"], format!("nbd://127.0.0.1:{port}/"));
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import csv,sys\n\
             rows = list(csv.DictReader(open(sys.argv[1], newline='')))\n\
             print(len(rows), sorted({r['Target Type'] for r in rows}), \
             all(float(r['IOps']) > 0 for r in rows), \
             sorted({r['Transfer Request Size'] for r in rows}))",
            csv.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "8 ['NETWORK'] True ['4096', '65536']"
    );
    // A server that is not there is a clear error.
    let r = sweep(&["--target", "nbd://127.0.0.1:1/x", "--seconds", "0.1"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("cannot connect"), "{}", r.stderr);
    d.stop();
}

/// Every experiment of `bench reproduce` writes its CSV and plot and holds the shape its
/// paper reports; the mechanical ones are deterministic, file for file.
#[test]
fn the_papers_experiments_reproduce_with_their_shapes() {
    let dir = scratch();
    for name in [
        "seed000",
        "seed001",
        "seed004-chunk",
        "seed004-raid5",
        "seed004-gather",
    ] {
        let out = dir.path().join(name);
        let j = raidd(&[
            "bench",
            "reproduce",
            name,
            "--out",
            out.to_str().unwrap(),
            "--json",
        ])
        .ok()
        .json();
        let checks = j["checks"].as_array().unwrap();
        assert!(!checks.is_empty(), "{name}");
        for c in checks {
            assert_eq!(c["ok"], true, "{name}: {c}");
        }
        let csv = std::fs::read_to_string(out.join(format!("{name}.csv"))).unwrap();
        assert!(csv.lines().count() > 5, "{name}: {csv}");
        let svg = std::fs::read_to_string(out.join(format!("{name}.svg"))).unwrap();
        assert!(svg.contains("<polyline"), "{name}");
        // What docs/ shows is what the command writes today.
        let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/reproduction");
        for (ext, text) in [("csv", &csv), ("svg", &svg)] {
            let committed = std::fs::read_to_string(docs.join(format!("{name}.{ext}"))).unwrap();
            assert!(
                &committed == text,
                "docs/reproduction/{name}.{ext} is stale: rerun raidd bench reproduce {name} --out docs/reproduction"
            );
        }
    }
    let again = dir.path().join("again");
    raidd(&[
        "bench",
        "reproduce",
        "seed001",
        "--out",
        again.to_str().unwrap(),
    ])
    .ok();
    for ext in ["csv", "svg"] {
        assert_eq!(
            std::fs::read(dir.path().join("seed001").join(format!("seed001.{ext}"))).unwrap(),
            std::fs::read(again.join(format!("seed001.{ext}"))).unwrap(),
            "seed001.{ext} differs between runs"
        );
    }
    let r = raidd(&["bench", "reproduce", "seed999"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("no experiment"), "{}", r.stderr);
}

/// `raidd scan` on a simulated drive shows its zones falling inwards; on a real file it
/// reads and reports every point; bad arguments are refused.
#[test]
fn scan_reports_rate_against_position() {
    let j = raidd(&[
        "scan",
        "sim:djna-371350",
        "--points",
        "8",
        "--span",
        "4M",
        "--json",
    ])
    .ok()
    .json();
    let p = j["scans"][0]["points"].as_array().unwrap();
    assert_eq!(p.len(), 8);
    let rates: Vec<f64> = p.iter().map(|x| x["mb_per_s"].as_f64().unwrap()).collect();
    // The outer zone runs at about 15 MB/s (17 MB/s less the skew), the inner near 9.
    assert!((14.0..16.0).contains(&rates[0]), "{rates:?}");
    assert!(rates[7] < 0.7 * rates[0], "{rates:?}");
    assert!(rates.windows(2).all(|w| w[1] <= w[0] * 1.01), "{rates:?}");
    let dir = scratch();
    let img = dir.path().join("m.img");
    std::fs::write(&img, vec![7u8; 8 << 20]).unwrap();
    let svg = dir.path().join("scan.svg");
    let j = raidd(&[
        "scan",
        img.to_str().unwrap(),
        "--points",
        "4",
        "--span",
        "1M",
        "--bs",
        "256K",
        "--plot",
        svg.to_str().unwrap(),
        "--json",
    ])
    .ok()
    .json();
    let p = j["scans"][0]["points"].as_array().unwrap();
    assert_eq!(p.len(), 4);
    assert!(p.iter().all(|x| x["mb_per_s"].as_f64().unwrap() > 0.0));
    assert_eq!(p[3]["offset"], (7u64 << 20));
    assert!(std::fs::read_to_string(&svg).unwrap().contains("<polyline"));
    for (args, want) in [
        (vec!["scan", "sim:nope"], "no drive model"),
        (
            vec![
                "scan",
                img.to_str().unwrap(),
                "--span",
                "256K",
                "--bs",
                "256K",
            ],
            "two requests",
        ),
        (
            vec!["scan", img.to_str().unwrap(), "--level", "raid0"],
            "simulated drives",
        ),
        (
            vec!["scan", img.to_str().unwrap(), "--span", "64M"],
            "cannot hold",
        ),
    ] {
        let r = raidd(&args);
        assert_ne!(r.code, 0, "{args:?}");
        assert!(r.stderr.contains(want), "{args:?}: {}", r.stderr);
        assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    }
}

/// An iSCSI LUN as a target: a session per worker, commands pipelined within the target's
/// window; writes larger than the first burst go out answering R2Ts. The same array over
/// NBD in the same command line.
#[test]
fn iscsi_targets_sweep_beside_nbd() {
    let dir = scratch();
    let members = create_array(dir.path(), "raid5", 4, &[]);
    let config = format!(
        "[iscsi]\nlisten = \"127.0.0.1:0\"\nstate_dir = \"state\"\nnop_interval = 0\n{}",
        array_config("raid5", &members)
    );
    let d = Daemon::start(dir.path(), &config);
    let url = d.iscsi_url("", "iqn.2026-11.org.raidd:raid5", 0);
    let j = sweep(&[
        "--target",
        &url,
        "--target",
        &d.uri("raid5"),
        "--sizes",
        "4K,256K",
        "--rw",
        "randwrite,read",
        "--qd",
        "8",
        "--workers",
        "2",
        "--seconds",
        "0.5",
        "--json",
    ])
    .ok()
    .json();
    let rows = j["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 8);
    for r in rows {
        assert!(r["iops"].as_f64().unwrap() > 0.0, "{r}");
    }
    assert!(rows[0]["target"]
        .as_str()
        .unwrap()
        .starts_with("iscsi://127.0.0.1:"));
    assert_eq!(rows[1]["bs"], 262_144);
    assert_eq!(rows[1]["rw"], "randwrite");
    // Bad LUNs and targets are clear errors.
    let bad = d.iscsi_url("", "iqn.2026-11.org.raidd:nope", 0);
    let r = sweep(&["--target", &bad, "--seconds", "0.1"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("login refused"), "{}", r.stderr);
    d.stop();
}

/// Iometer's bursts and delays: a slot issues `--burst` requests back to back, then waits
/// `--delay`; in simulated time the rate is exactly what that gives.
#[test]
fn bursts_and_delays_pace_each_slot() {
    let run = |extra: &[&str]| {
        let mut a = vec![
            "--target",
            "raid0",
            "--members",
            "2",
            "--member",
            "sim:djna-371350",
            "--sizes",
            "4K",
            "--rw",
            "randread",
            "--qd",
            "1",
            "--seconds",
            "5",
            "--json",
        ];
        a.extend_from_slice(extra);
        sweep(&a).ok().json()["rows"][0].clone()
    };
    let free = run(&[]);
    let paced = run(&["--burst", "2", "--delay", "10"]);
    let (f, p) = (
        free["iops"].as_f64().unwrap(),
        paced["iops"].as_f64().unwrap(),
    );
    // Each pair of requests takes two service times and then 10 ms more.
    let want = 2.0 / (2.0 / f + 0.010);
    assert!((p / want - 1.0).abs() < 0.05, "paced {p} IOPS, want {want}");
    // Response times count the requests, not the pauses.
    let (lf, lp) = (
        free["lat_mean_us"].as_f64().unwrap(),
        paced["lat_mean_us"].as_f64().unwrap(),
    );
    assert!((lp / lf - 1.0).abs() < 0.1, "{lf} us against {lp} us");
}

/// `--dab`: small sequential reads on simulated drives are served from the buffer, and each
/// row says what the buffer did; without it there is no such field.
#[test]
fn the_buffer_serves_small_sequential_reads_and_reports_its_counts() {
    let run = |dab: &str| {
        sweep(&[
            "--target",
            "raid0",
            "--members",
            "2",
            "--member",
            "sim:djna-371350",
            "--sizes",
            "1K",
            "--rw",
            "read",
            "--qd",
            "1",
            "--seconds",
            "2",
            "--dab",
            dab,
            "--json",
        ])
        .ok()
        .json()["rows"][0]
            .clone()
    };
    let (off, on) = (run("0"), run("64M"));
    assert!(off["dab"].is_null(), "{off}");
    assert!(
        on["iops"].as_f64().unwrap() >= 4.0 * off["iops"].as_f64().unwrap(),
        "{on} against {off}"
    );
    let d = &on["dab"];
    let (hits, misses) = (d["hits"].as_u64().unwrap(), d["misses"].as_u64().unwrap());
    // 1 KiB reads from 128 KiB blocks: 127 hits to each miss, give or take a block.
    assert!(hits > 100 * misses && misses > 0, "{d}");
    assert_eq!(
        d["prefetched_bytes"].as_u64().unwrap(),
        128 * 1024 * misses,
        "{d}"
    );
    let r = sweep(&["--dab", "64M", "--dab-block", "3K", "--seconds", "0.1"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("--dab-block"), "{}", r.stderr);
}

/// `dab = "16M"` in an array's config puts the buffer in front of its members in `raidd
/// serve`; `raidd detail` shows what each member's buffer did, in JSON and in text. Bad
/// settings are refused before anything starts.
#[test]
fn a_served_array_behind_the_buffer_reports_it_in_detail() {
    let dir = scratch();
    let members = create_array(dir.path(), "raid5", 4, &[]);
    let config = format!(
        "{}dab = \"16M\"\ndab_block = \"64K\"\n",
        array_config("raid5", &members)
    );
    let d = Daemon::start(dir.path(), &config);
    sweep(&[
        "--target",
        &d.uri("raid5"),
        "--sizes",
        "4K",
        "--rw",
        "read",
        "--qd",
        "1",
        "--count",
        "2000",
        "--ramp",
        "0",
    ])
    .ok();
    let c = d.control.to_str().unwrap().to_string();
    let j = raidd(&["detail", "raid5", "--json", "--control", &c])
        .ok()
        .json();
    let dab = j["array"]["counters"]["dab"].as_array().unwrap().clone();
    assert_eq!(dab.len(), 4, "{j}");
    let hits: u64 = dab.iter().map(|m| m["hits"].as_u64().unwrap()).sum();
    let misses: u64 = dab.iter().map(|m| m["misses"].as_u64().unwrap()).sum();
    // 4 KiB sequential reads from 64 KiB blocks: 15 hits to a miss, give or take.
    assert!(hits > 10 * misses && misses > 0, "{dab:?}");
    let text = raidd(&["detail", "raid5", "--control", &c]).ok().text();
    assert!(text.contains("DAB") && text.contains("hits"), "{text}");
    // A member that joins later goes behind the same buffer.
    let m0 = members[0].to_str().unwrap();
    raidd(&["fail", "raid5", m0, "--control", &c]).ok();
    raidd(&["remove", "raid5", m0, "--control", &c]).ok();
    let new = dir.path().join("new.img");
    std::fs::File::create(&new)
        .unwrap()
        .set_len(24 * common::MIB)
        .unwrap();
    raidd(&["add", "raid5", new.to_str().unwrap(), "--control", &c]).ok();
    let j = raidd(&["detail", "raid5", "--json", "--control", &c])
        .ok()
        .json();
    let behind: Vec<String> = j["array"]["counters"]["dab"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["member"].as_str().unwrap().to_string())
        .collect();
    assert!(
        behind.contains(&new.display().to_string()) && !behind.contains(&m0.to_string()),
        "{behind:?}"
    );
    d.stop();
    for (setting, want) in [
        ("dab = \"16M\"\ndab_block = \"3K\"\n", "dab_block"),
        (
            "dab = \"16M\"\ndab_mode = \"sometimes\"\n",
            "write-through, write-back or write-back-unsafe",
        ),
        (
            "dab = \"32K\"\ndab_block = \"64K\"\n",
            "at least one dab_block",
        ),
        ("dab = \"2K\"\n", "at least one dab_block"),
        ("dab = \"lots\"\n", "dab"),
    ] {
        let bad = format!("{}{setting}", array_config("raid5", &members));
        let e = Daemon::try_start(dir.path(), &bad).err().expect(want);
        assert!(e.contains(want), "{setting}: {e}");
    }
}
