//! A sweep's results as rows: for JSON, for a CSV with Iometer's column names, and for the
//! terminal. Pure formatting; `sweep.rs` makes the rows.

use std::fmt::Write;

use hdrhistogram::Histogram;
use serde::Serialize;

use super::load::Outcome;
use super::spec::Mix;

/// What the rows of one series share.
#[derive(Clone, Debug)]
pub struct Series {
    /// What was driven: `raid0 over 2 sim:djna-371350`, an URL, ...
    pub target: String,
    /// Iometer's target type: SIMULATED, MEMORY, FILE or NETWORK.
    pub kind: &'static str,
    pub mix: Mix,
    pub qd: u32,
    pub workers: u32,
    /// Times are simulated (and the CPU figures are the host's, not the model's).
    pub simulated: bool,
}

/// One point: the JSON contract is `bs`, `iops`, `mb_per_s`, `lat_mean_us`, `lat_p99_us`
/// and `cpu_per_io_us`; the rest is welcome extra.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub target: String,
    pub rw: String,
    pub read_pct: u8,
    pub random_pct: u8,
    pub bs: u64,
    pub qd: u32,
    pub workers: u32,
    pub simulated: bool,
    pub seconds: f64,
    pub ios: u64,
    pub read_ios: u64,
    pub write_ios: u64,
    pub iops: f64,
    pub read_iops: f64,
    pub write_iops: f64,
    /// Decimal megabytes (10^6 bytes) per second, as drive makers and the papers count.
    pub mb_per_s: f64,
    pub mib_per_s: f64,
    pub lat_mean_us: f64,
    pub lat_p50_us: f64,
    pub lat_p99_us: f64,
    pub lat_p999_us: f64,
    pub lat_max_us: f64,
    pub read_lat_mean_us: Option<f64>,
    pub write_lat_mean_us: Option<f64>,
    /// Host CPU (user + system) of this process per completed request, microseconds.
    pub cpu_per_io_us: Option<f64>,
    /// The server's CPU per completed request (`--server-pid`), microseconds.
    pub server_cpu_per_io_us: Option<f64>,
    /// With `--dab`: what the buffer did during the point, all members together.
    pub dab: Option<raidd_engine::member::DabCounts>,
    /// Host CPU as a percentage of one core over the measured window (a simulated window
    /// for simulated members, so only a rough figure there).
    pub cpu_pct: Option<f64>,
}

fn us(ns: f64) -> f64 {
    ns / 1e3
}

impl Row {
    pub fn new(s: &Series, bs: u64, o: &Outcome) -> Row {
        let mut all: Histogram<u64> = o.reads.clone();
        all.add(&o.writes).expect("same bounds");
        let secs = o.seconds.max(1e-12);
        let ios = o.ios();
        let iops = ios as f64 / secs;
        let mean = |h: &Histogram<u64>| (!h.is_empty()).then(|| us(h.mean()));
        Row {
            target: s.target.clone(),
            rw: s.mix.name(),
            read_pct: s.mix.read_pct,
            random_pct: s.mix.random_pct,
            bs,
            qd: s.qd,
            workers: s.workers,
            simulated: s.simulated,
            seconds: o.seconds,
            ios,
            read_ios: o.reads.len(),
            write_ios: o.writes.len(),
            iops,
            read_iops: o.reads.len() as f64 / secs,
            write_iops: o.writes.len() as f64 / secs,
            mb_per_s: iops * bs as f64 / 1e6,
            mib_per_s: iops * bs as f64 / f64::from(1 << 20),
            lat_mean_us: mean(&all).unwrap_or(0.0),
            lat_p50_us: us(all.value_at_quantile(0.5) as f64),
            lat_p99_us: us(all.value_at_quantile(0.99) as f64),
            lat_p999_us: us(all.value_at_quantile(0.999) as f64),
            lat_max_us: us(all.max() as f64),
            read_lat_mean_us: mean(&o.reads),
            write_lat_mean_us: mean(&o.writes),
            cpu_per_io_us: o
                .cpu_s
                .filter(|_| o.all > 0)
                .map(|c| c * 1e6 / o.all as f64),
            cpu_pct: o.cpu_s.map(|c| c / secs * 100.0),
            server_cpu_per_io_us: o
                .server_cpu_s
                .filter(|_| o.all > 0)
                .map(|c| c * 1e6 / o.all as f64),
            dab: None,
        }
    }
}

/// Iometer's result columns that raidd fills, then raidd's own.
pub const CSV_COLUMNS: &[&str] = &[
    "Target Type",
    "Target Name",
    "Access Specification Name",
    "# Workers",
    "# of Outstanding I/Os",
    "Transfer Request Size",
    "% Read",
    "% Random",
    "IOps",
    "Read IOps",
    "Write IOps",
    "MBps (Binary)",
    "MBps (Decimal)",
    "Average Response Time",
    "Average Read Response Time",
    "Average Write Response Time",
    "Maximum Response Time",
    "Read I/Os",
    "Write I/Os",
    "Bytes Read",
    "Bytes Written",
    "% CPU Utilization",
    "CPU Effectiveness",
    "50th Percentile Response Time",
    "99th Percentile Response Time",
    "99.9th Percentile Response Time",
    "CPU us per I/O",
    "Server CPU us per I/O",
];

/// A field for a CSV line, quoted when it holds a comma, a quote or a line break.
fn field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// The CSV: Iometer's names, response times in milliseconds as Iometer gives them. Host
/// CPU figures are left empty for simulated members (they are not the model's, and would
/// make two identical simulations differ).
pub fn csv(rows: &[(Series, Row)]) -> String {
    let mut out = CSV_COLUMNS
        .iter()
        .map(|c| field(c))
        .collect::<Vec<_>>()
        .join(",");
    out.push_str("\r\n");
    let ms = |us: f64| format!("{:.4}", us / 1e3);
    let opt_ms = |us: Option<f64>| us.map(ms).unwrap_or_default();
    for (s, r) in rows {
        let cpu = |x: Option<f64>, digits: usize| {
            x.filter(|_| !s.simulated)
                .map(|v| format!("{v:.digits$}"))
                .unwrap_or_default()
        };
        let effectiveness = r.cpu_pct.filter(|&c| c > 0.0).map(|c| r.iops / c);
        let cells = [
            s.kind.to_string(),
            r.target.clone(),
            format!("{} {}", r.rw, r.bs),
            r.workers.to_string(),
            r.qd.to_string(),
            r.bs.to_string(),
            r.read_pct.to_string(),
            r.random_pct.to_string(),
            format!("{:.3}", r.iops),
            format!("{:.3}", r.read_iops),
            format!("{:.3}", r.write_iops),
            format!("{:.3}", r.mib_per_s),
            format!("{:.3}", r.mb_per_s),
            ms(r.lat_mean_us),
            opt_ms(r.read_lat_mean_us),
            opt_ms(r.write_lat_mean_us),
            ms(r.lat_max_us),
            r.read_ios.to_string(),
            r.write_ios.to_string(),
            (r.read_ios * r.bs).to_string(),
            (r.write_ios * r.bs).to_string(),
            cpu(r.cpu_pct, 2),
            cpu(effectiveness, 3),
            ms(r.lat_p50_us),
            ms(r.lat_p99_us),
            ms(r.lat_p999_us),
            cpu(r.cpu_per_io_us, 3),
            cpu(r.server_cpu_per_io_us, 3),
        ];
        debug_assert_eq!(cells.len(), CSV_COLUMNS.len());
        let line: Vec<String> = cells.iter().map(|c| field(c)).collect();
        out.push_str(&line.join(","));
        out.push_str("\r\n");
    }
    out
}

/// Request sizes as the table and the plot label them: 512, 4K, 1M.
pub fn size_label(bs: u64) -> String {
    match bs {
        b if b >= 1 << 20 && b.is_multiple_of(1 << 20) => format!("{}M", b >> 20),
        b if b >= 1 << 10 && b.is_multiple_of(1 << 10) => format!("{}K", b >> 10),
        b => b.to_string(),
    }
}

/// The table on the terminal.
pub fn table(rows: &[(Series, Row)]) -> String {
    let mut out = String::new();
    let w = rows
        .iter()
        .map(|(_, r)| r.target.len())
        .max()
        .unwrap_or(0)
        .max(6);
    let _ = writeln!(
        out,
        "{:<w$} {:<9} {:>5} {:>10} {:>9} {:>10} {:>10} {:>10}",
        "target", "rw", "bs", "IOPS", "MB/s", "mean us", "p99 us", "CPU us/IO"
    );
    for (_, r) in rows {
        let cpu = r
            .cpu_per_io_us
            .map(|c| format!("{c:.2}"))
            .unwrap_or_else(|| "-".into());
        let _ = writeln!(
            out,
            "{:<w$} {:<9} {:>5} {:>10.0} {:>9.2} {:>10.1} {:>10.1} {:>10}",
            r.target,
            r.rw,
            size_label(r.bs),
            r.iops,
            r.mb_per_s,
            r.lat_mean_us,
            r.lat_p99_us,
            cpu
        );
    }
    if rows.iter().any(|(s, _)| s.simulated) {
        out.push_str("(simulated members: times are simulated; CPU is the host's)\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(read_ns: &[u64], write_ns: &[u64], seconds: f64) -> Outcome {
        let mut reads = Histogram::new_with_bounds(1, 3_600_000_000_000, 3).unwrap();
        let mut writes = reads.clone();
        for &n in read_ns {
            reads.record(n).unwrap();
        }
        for &n in write_ns {
            writes.record(n).unwrap();
        }
        Outcome {
            reads,
            writes,
            seconds,
            all: (read_ns.len() + write_ns.len()) as u64 * 2,
            cpu_s: Some(0.5),
            server_cpu_s: None,
        }
    }

    fn series(simulated: bool) -> Series {
        Series {
            target: "raid0 over 2 sim:x, quoted".into(),
            kind: if simulated { "SIMULATED" } else { "MEMORY" },
            mix: Mix::parse("read").unwrap(),
            qd: 1,
            workers: 1,
            simulated,
        }
    }

    #[test]
    fn rows_count_rates_and_latencies() {
        // 3 reads of 1, 2 and 3 ms and one write of 4 ms in 2 s, 4 KiB each.
        let o = outcome(&[1_000_000, 2_000_000, 3_000_000], &[4_000_000], 2.0);
        let r = Row::new(&series(false), 4096, &o);
        assert_eq!(r.ios, 4);
        assert!((r.iops - 2.0).abs() < 1e-9);
        assert!((r.read_iops - 1.5).abs() < 1e-9);
        assert!((r.mb_per_s - 2.0 * 4096.0 / 1e6).abs() < 1e-12);
        assert!((r.lat_mean_us - 2500.0).abs() < 5.0, "{}", r.lat_mean_us);
        assert!((r.read_lat_mean_us.unwrap() - 2000.0).abs() < 5.0);
        assert!((r.lat_max_us - 4000.0).abs() < 5.0);
        // 0.5 CPU seconds over 8 requests.
        assert!((r.cpu_per_io_us.unwrap() - 62_500.0).abs() < 1e-6);
    }

    #[test]
    fn csv_has_iometers_names_quotes_and_no_host_cpu_for_simulations() {
        let o = outcome(&[1_000_000], &[], 1.0);
        let rows = vec![
            (series(true), Row::new(&series(true), 1024, &o)),
            (series(false), Row::new(&series(false), 1024, &o)),
        ];
        let text = csv(&rows);
        let lines: Vec<&str> = text.split("\r\n").filter(|l| !l.is_empty()).collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("Target Type,Target Name,Access Specification Name,"));
        assert!(lines[0].contains(",IOps,Read IOps,Write IOps,MBps (Binary),MBps (Decimal),"));
        assert!(lines[1].starts_with("SIMULATED,\"raid0 over 2 sim:x, quoted\",read 1024,"));
        // The simulated row has empty CPU cells; the other has them.
        let col = |name: &str| CSV_COLUMNS.iter().position(|c| *c == name).unwrap();
        let cells = |line: &str| -> Vec<String> {
            // The target name is the one quoted field: put it back together.
            let mut v: Vec<String> = line.split(',').map(str::to_string).collect();
            let joined = format!("{},{}", v[1], v[2]);
            v.splice(1..3, [joined]);
            v
        };
        let (sim, real) = (cells(lines[1]), cells(lines[2]));
        assert_eq!(sim.len(), CSV_COLUMNS.len());
        for c in ["% CPU Utilization", "CPU Effectiveness", "CPU us per I/O"] {
            assert_eq!(sim[col(c)], "", "{c}");
            assert!(!real[col(c)].is_empty(), "{c}");
        }
        // Response times in milliseconds: 1 ms recorded at 3 significant digits.
        let avg: f64 = sim[col("Average Response Time")].parse().unwrap();
        assert!((avg - 1.0).abs() < 0.002, "{avg}");
    }

    #[test]
    fn sizes_label_compactly() {
        assert_eq!(size_label(512), "512");
        assert_eq!(size_label(4096), "4K");
        assert_eq!(size_label(1 << 20), "1M");
        assert_eq!(size_label(1536), "1536");
    }
}
