//! A sweep as an SVG: throughput and mean response time against request size, one line per
//! series. Written by hand rather than with a plotting crate: two panels of lines and
//! labels are a page of code, the output needs no fonts or system libraries (the viewer
//! draws the text), and the same rows give byte-identical files.

use std::fmt::Write;

use super::report::{size_label, Row};

const W: f64 = 960.0;
const H: f64 = 490.0;
const PANEL_W: f64 = 400.0;
const PANEL_H: f64 = 300.0;
const TOP: f64 = 60.0;
const LEFTS: [f64; 2] = [70.0, 550.0];
const COLOURS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

/// A line: its name and points (x, y): a request size, or a position.
pub struct Line {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// How a panel's x axis runs.
pub enum XAxis {
    /// Request sizes, a power of two apart: labelled 1K, 4K, ...
    Sizes(Vec<u64>),
    /// Linear from `min` to `max`, ticks every `step`.
    Linear {
        min: f64,
        max: f64,
        step: f64,
        label: String,
    },
}

/// Groups rows into lines by target and pattern, in the order they first appear.
pub fn lines(rows: &[Row], value: impl Fn(&Row) -> f64) -> Vec<Line> {
    let mut out: Vec<Line> = Vec::new();
    for r in rows {
        let name = format!("{} {}", r.target, r.rw);
        let at = match out.iter().position(|l| l.name == name) {
            Some(i) => i,
            None => {
                out.push(Line {
                    name,
                    points: Vec::new(),
                });
                out.len() - 1
            }
        };
        out[at].points.push((r.bs as f64, value(r)));
    }
    out
}

/// A round step for about five ticks up to `max`.
fn tick_step(max: f64) -> f64 {
    let raw = (max / 5.0).max(1e-9);
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|&s| s >= raw)
        .unwrap_or(10.0 * mag)
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// One panel: axes, ticks and the lines.
fn panel(out: &mut String, left: f64, width: f64, title: &str, lines: &[Line], x_axis: &XAxis) {
    let max = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .fold(0.0f64, f64::max);
    let step = tick_step(if max > 0.0 { max } else { 1.0 });
    let top_value = (max / step).ceil().max(1.0) * step;
    let x = |v: f64| match x_axis {
        XAxis::Sizes(sizes) => {
            let lo = sizes.iter().copied().min().unwrap_or(1).max(1) as f64;
            let hi = sizes.iter().copied().max().unwrap_or(1).max(1) as f64;
            if hi > lo {
                left + (v.max(1.0).log2() - lo.log2()) / (hi.log2() - lo.log2()) * width
            } else {
                left + width / 2.0
            }
        }
        XAxis::Linear { min, max, .. } => {
            left + (v - min) / (max - min).max(f64::MIN_POSITIVE) * width
        }
    };
    let y = |v: f64| TOP + PANEL_H - v / top_value * PANEL_H;
    let _ = writeln!(
        out,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="15">{}</text>"##,
        left + width / 2.0,
        TOP - 14.0,
        escape(title)
    );
    let _ = writeln!(
        out,
        r##"<rect x="{left:.1}" y="{TOP:.1}" width="{width:.1}" height="{PANEL_H:.1}" fill="none" stroke="#444"/>"##
    );
    let mut v = 0.0;
    while v <= top_value + step / 2.0 {
        let _ = writeln!(
            out,
            r##"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end" font-size="11">{}</text>"##,
            left,
            y(v),
            left + width,
            y(v),
            left - 6.0,
            y(v) + 4.0,
            format_value(v)
        );
        v += step;
    }
    let (ticks, label): (Vec<(f64, String)>, String) = match x_axis {
        XAxis::Sizes(sizes) => (
            sizes.iter().map(|&b| (b as f64, size_label(b))).collect(),
            "request size (bytes)".into(),
        ),
        XAxis::Linear {
            min,
            max,
            step,
            label,
        } => {
            let n = ((max - min) / step).round().max(0.0) as usize;
            (
                (0..=n)
                    .map(|i| {
                        let t = min + i as f64 * step;
                        (t, format_value(t))
                    })
                    .collect(),
                label.clone(),
            )
        }
    };
    for (t, text) in ticks {
        let _ = writeln!(
            out,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="11">{text}</text>"##,
            x(t),
            TOP + PANEL_H + 16.0,
        );
    }
    let _ = writeln!(
        out,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="12">{}</text>"##,
        left + width / 2.0,
        TOP + PANEL_H + 36.0,
        escape(&label)
    );
    draw_lines(out, lines, &x, &y);
}

/// The lines of a panel, through `x` and `y`, with a dot per point where there are few.
fn draw_lines(out: &mut String, lines: &[Line], x: &dyn Fn(f64) -> f64, y: &dyn Fn(f64) -> f64) {
    for (i, l) in lines.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let pts: Vec<String> = l
            .points
            .iter()
            .map(|&(px, py)| format!("{:.1},{:.1}", x(px), y(py)))
            .collect();
        let _ = writeln!(
            out,
            r##"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2"/>"##,
            pts.join(" ")
        );
        if l.points.len() <= 64 {
            for p in &l.points {
                let _ = writeln!(
                    out,
                    r##"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{colour}"/>"##,
                    x(p.0),
                    y(p.1)
                );
            }
        }
    }
}

fn format_value(v: f64) -> String {
    if v == 0.0 || v >= 10.0 || (v - v.round()).abs() < 1e-9 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// The SVG for `rows`: MB/s and mean response time (µs) against request size.
pub fn svg(title: &str, rows: &[Row]) -> String {
    let mut sizes: Vec<u64> = rows.iter().map(|r| r.bs).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let throughput = lines(rows, |r| r.mb_per_s);
    let latency = lines(rows, |r| r.lat_mean_us);
    let axis = XAxis::Sizes(sizes);
    figure(
        title,
        &[
            ("throughput (MB/s)", &throughput, &axis),
            ("mean response time (us)", &latency, &axis),
        ],
    )
}

/// A figure of one or two panels side by side, with one legend for the first panel's
/// lines (the panels show the same series).
pub fn figure(title: &str, panels: &[(&str, &[Line], &XAxis)]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif">"##
    );
    let _ = writeln!(out, r##"<rect width="{W}" height="{H}" fill="white"/>"##);
    let _ = writeln!(
        out,
        r##"<text x="{:.1}" y="22" text-anchor="middle" font-size="16" font-weight="bold">{}</text>"##,
        W / 2.0,
        escape(title)
    );
    // One panel takes the whole width; two sit side by side.
    let width = if panels.len() == 1 {
        W - LEFTS[0] - 30.0
    } else {
        PANEL_W
    };
    for (i, (name, lines, axis)) in panels.iter().take(2).enumerate() {
        panel(&mut out, LEFTS[i], width, name, lines, axis);
    }
    let legend: &[Line] = panels.first().map(|p| p.1).unwrap_or(&[]);
    for (i, l) in legend.iter().enumerate() {
        let (col, row) = (i % 2, i / 2);
        let lx = LEFTS[0] + col as f64 * 480.0;
        let ly = TOP + PANEL_H + 58.0 + row as f64 * 16.0;
        let colour = COLOURS[i % COLOURS.len()];
        let _ = writeln!(
            out,
            r##"<line x1="{lx:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{colour}" stroke-width="3"/><text x="{:.1}" y="{:.1}" font-size="12">{}</text>"##,
            ly - 4.0,
            lx + 24.0,
            ly - 4.0,
            lx + 30.0,
            ly,
            escape(&l.name)
        );
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(target: &str, rw: &str, bs: u64, mb: f64, lat: f64) -> Row {
        Row {
            target: target.into(),
            rw: rw.into(),
            read_pct: 100,
            random_pct: 0,
            bs,
            qd: 1,
            workers: 1,
            simulated: true,
            seconds: 1.0,
            ios: 1,
            read_ios: 1,
            write_ios: 0,
            iops: 1.0,
            read_iops: 1.0,
            write_iops: 0.0,
            mb_per_s: mb,
            mib_per_s: mb,
            lat_mean_us: lat,
            lat_p50_us: lat,
            lat_p99_us: lat,
            lat_p999_us: lat,
            lat_max_us: lat,
            read_lat_mean_us: Some(lat),
            write_lat_mean_us: None,
            cpu_per_io_us: None,
            server_cpu_per_io_us: None,
            dab: None,
            cpu_pct: None,
        }
    }

    #[test]
    fn rows_group_into_lines_in_order() {
        let rows = [
            row("a", "read", 1024, 1.0, 5.0),
            row("a", "write", 1024, 2.0, 6.0),
            row("a", "read", 2048, 3.0, 7.0),
        ];
        let l = lines(&rows, |r| r.mb_per_s);
        assert_eq!(l.len(), 2);
        assert_eq!(l[0].name, "a read");
        assert_eq!(l[0].points, [(1024.0, 1.0), (2048.0, 3.0)]);
        assert_eq!(l[1].points, [(1024.0, 2.0)]);
    }

    #[test]
    fn the_svg_has_a_line_per_series_and_is_the_same_each_time() {
        let rows = [
            row("raid0 <x>", "read", 1024, 1.0, 500.0),
            row("raid0 <x>", "read", 4096, 4.0, 520.0),
            row("raid0 <x>", "write", 1024, 0.5, 900.0),
            row("raid0 <x>", "write", 4096, 2.0, 950.0),
        ];
        let a = svg("t & t", &rows);
        assert_eq!(a, svg("t & t", &rows));
        assert!(a.starts_with("<svg "));
        assert!(a.trim_end().ends_with("</svg>"));
        // Two panels of two lines each, escaped names, labelled sizes.
        assert_eq!(a.matches("<polyline").count(), 4);
        assert!(a.contains("raid0 &lt;x&gt; read"));
        assert!(a.contains("t &amp; t"));
        assert!(a.contains(">1K<") && a.contains(">4K<"));
    }

    #[test]
    fn ticks_are_round() {
        assert_eq!(tick_step(17.0), 5.0);
        assert_eq!(tick_step(100.0), 20.0);
        assert_eq!(tick_step(0.3), 0.1);
    }
}
