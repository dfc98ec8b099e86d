//! `raidd serve`'s HTTP listener: `/metrics` checked by promtool and scraped by a real
//! Prometheus server (started here on loopback, stopped by PID), node_exporter's `node_md_*`
//! names under `node_md_compat`, the JSON API against `raidd status` and `raidd detail`,
//! and the listener's bounds against clients that send nothing or too much.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::daemon::{array_config, create_array, tool, Daemon};
use common::{raidd, scratch, MIB};

/// A GET: (status, headers, body).
fn get(addr: SocketAddr, path: &str, accept: Option<&str>) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let accept = accept.map_or(String::new(), |a| format!("Accept: {a}\r\n"));
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n{accept}\r\n"
    )
    .unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, head.to_string(), body.to_string())
}

fn http(d: &Daemon) -> SocketAddr {
    d.http.expect("the daemon announced its HTTP listener")
}

/// A RAID5 over four 24 MiB images behind a 4 MiB DMA-aligned buffer, with a pool spare,
/// `[http]` on an ephemeral loopback port, rebuilds slowed to 2 MiB/s so a scrape sees one
/// move.
fn served(dir: &Path, http_extra: &str) -> Daemon {
    let members = create_array(dir, "raid5", 4, &[]);
    let spare = dir.join("spare.img");
    std::fs::File::create(&spare)
        .unwrap()
        .set_len(24 * MIB)
        .unwrap();
    let cfg = format!(
        "{}dab = \"4M\"\n[[spare]]\npath = {:?}\n[sync]\nspeed_min = 1000\nspeed_max = 2000\n\
         [http]\nlisten = \"127.0.0.1:0\"\n{http_extra}\n",
        array_config("raid5", &members),
        spare.display().to_string()
    );
    Daemon::start(dir, &cfg)
}

fn promtool_check(metrics: &str) -> (bool, String) {
    let mut c = tool("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin
        .take()
        .unwrap()
        .write_all(metrics.as_bytes())
        .unwrap();
    let out = c.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success() && said.trim().is_empty(), said)
}

/// A Prometheus server scraping `target` every second, on a loopback port of its own.
struct Prometheus {
    child: Child,
    addr: SocketAddr,
}

impl Prometheus {
    fn start(dir: &Path, target: SocketAddr) -> Prometheus {
        let cfg = dir.join("prometheus.yml");
        std::fs::write(
            &cfg,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  \
                 - job_name: raidd\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let addr = free_port();
        let child = tool("prometheus")
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("tsdb").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("prometheus.log")).unwrap())
            .spawn()
            .unwrap();
        let p = Prometheus { child, addr };
        wait("Prometheus ready", Duration::from_secs(60), || {
            TcpStream::connect(p.addr).is_ok() && get(p.addr, "/-/ready", None).0 == 200
        });
        p
    }

    /// The values of an instant query, one per series, with their labels.
    fn query(&self, q: &str) -> Vec<(serde_json::Value, f64)> {
        let (status, _, body) = get(
            self.addr,
            &format!("/api/v1/query?query={}", encode(q)),
            None,
        );
        assert_eq!(status, 200, "{body}");
        let j: serde_json::Value = serde_json::from_str(&body).unwrap();
        j["data"]["result"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let v = r["value"][1].as_str().unwrap().parse().unwrap();
                (r["metric"].clone(), v)
            })
            .collect()
    }

    /// The one value `q` gives, once it gives exactly one.
    fn value(&self, q: &str) -> Option<f64> {
        match self.query(q).as_slice() {
            [(_, v)] => Some(*v),
            _ => None,
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

/// Percent-encodes a query string value.
fn encode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'-' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Polls `cond` every 100 ms until it holds; fails after `limit`.
fn wait(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// promtool finds nothing to say about `/metrics`; a Prometheus server scrapes it (the
/// target is up); `raidd fail` shows in the failed-disk metric within a scrape or two, and
/// the rebuild onto the pool spare moves the progress metric from one scrape to the next.
#[test]
fn prometheus_scrapes_the_metrics_and_sees_a_failure_and_a_rebuild() {
    let dir = scratch();
    let d = served(dir.path(), "");
    let (status, head, body) = get(http(&d), "/metrics", None);
    assert_eq!(status, 200, "{head}");
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    let (ok, said) = promtool_check(&body);
    assert!(ok, "promtool check metrics: {said}\n{body}");
    let (_, head, om) = get(http(&d), "/metrics", Some("application/openmetrics-text"));
    assert!(head.contains("application/openmetrics-text"), "{head}");
    assert!(om.ends_with("# EOF\n"), "{om}");

    let p = Prometheus::start(dir.path(), http(&d));
    wait("the target is up", Duration::from_secs(30), || {
        p.value("up{job=\"raidd\"}") == Some(1.0)
    });
    let failed = "raidd_array_disks{array=\"raid5\",state=\"failed\"}";
    assert_eq!(p.value(failed), Some(0.0));
    let member = dir.path().join("raid51.img");
    let c = d.control.to_str().unwrap().to_string();
    raidd(&["fail", "raid5", member.to_str().unwrap(), "--control", &c]).ok();
    // Within a scrape (1 s) or two, counting the query's own staleness.
    let t = Instant::now();
    wait("the failure in Prometheus", Duration::from_secs(5), || {
        p.value(failed) == Some(1.0)
    });
    eprintln!("failure seen after {:?}", t.elapsed());
    let recover = "raidd_array_sync_action{array=\"raid5\",action=\"recover\"}";
    wait("the rebuild in Prometheus", Duration::from_secs(10), || {
        p.value(recover) == Some(1.0)
    });
    let done = "raidd_array_sync_done_bytes{array=\"raid5\"}";
    let first = p.value(done).unwrap();
    wait(
        "the rebuild's progress moves",
        Duration::from_secs(10),
        || p.value(done).is_some_and(|v| v > first),
    );
    assert!(p
        .value("raidd_array_sync_eta_seconds{array=\"raid5\"}")
        .is_some());
    grafana_queries_run(&p);
    drop(p);
    d.stop();
}

/// Every query of the sample Grafana dashboard (docs/grafana-dashboard.json) runs on the
/// Prometheus server scraping raidd, with the dashboard's variables filled in, and every
/// raidd metric it names exists there.
fn grafana_queries_run(p: &Prometheus) {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/grafana-dashboard.json"
    ))
    .unwrap();
    let dash: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut n = 0;
    for panel in dash["panels"].as_array().unwrap() {
        for t in panel["targets"].as_array().unwrap() {
            let expr = t["expr"]
                .as_str()
                .unwrap()
                .replace("$array", ".*")
                .replace("$__rate_interval", "1m");
            let (status, _, body) = get(
                p.addr,
                &format!("/api/v1/query?query={}", encode(&expr)),
                None,
            );
            assert_eq!(status, 200, "{expr}: {body}");
            assert!(body.contains("\"status\":\"success\""), "{expr}: {body}");
            n += 1;
        }
    }
    assert!(n >= 10, "{n} queries");
    for name in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
        if name.starts_with("raidd_") {
            let have = p.query(&format!("count({{__name__=\"{name}\"}})"));
            assert!(
                !have.is_empty(),
                "the dashboard names {name}, which Prometheus has not seen from raidd"
            );
        }
    }
}

/// With `node_md_compat`, the `node_md_*` families carry node_exporter's exact HELP and TYPE
/// lines and label names (its mdadm collector, as of 2026), one series per array.
#[test]
fn node_md_compat_speaks_node_exporters_names() {
    let dir = scratch();
    let d = served(dir.path(), "node_md_compat = true");
    let (_, _, body) = get(http(&d), "/metrics", None);
    for line in [
        "# HELP node_md_disks_required Total number of disks of device.",
        "# TYPE node_md_disks_required gauge",
        "# HELP node_md_disks Number of active/failed/spare disks of device.",
        "# TYPE node_md_disks gauge",
        "# HELP node_md_state Indicates the state of md-device.",
        "# TYPE node_md_state gauge",
        "# HELP node_md_blocks Total number of blocks on device.",
        "# TYPE node_md_blocks gauge",
        "# HELP node_md_blocks_synced Number of blocks synced on device.",
        "# TYPE node_md_blocks_synced gauge",
        "# HELP node_md_raid_disks Number of raid disks on device.",
        "# TYPE node_md_raid_disks gauge",
        "# HELP node_md_degraded Number of degraded disks on device.",
        "# TYPE node_md_degraded gauge",
    ] {
        assert!(
            body.lines().any(|l| l == line),
            "missing {line:?} in\n{body}"
        );
    }
    // Labels: device (and state where node_exporter has it), nothing else.
    let samples: Vec<&str> = body.lines().filter(|l| l.starts_with("node_md_")).collect();
    for s in &samples {
        let labels = &s[s.find('{').unwrap() + 1..s.find('}').unwrap()];
        let names: Vec<&str> = labels
            .split(',')
            .map(|kv| kv.split('=').next().unwrap())
            .collect();
        let with_state = s.starts_with("node_md_disks{") || s.starts_with("node_md_state{");
        let want: &[&str] = if with_state {
            &["device", "state"]
        } else {
            &["device"]
        };
        let mut sorted = names.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, want, "{s}");
    }
    for want in [
        "node_md_state{device=\"raid5\",state=\"active\"} 1.0",
        "node_md_disks_required{device=\"raid5\"} 4.0",
        "node_md_disks{device=\"raid5\",state=\"spare\"} 0.0",
        "node_md_degraded{device=\"raid5\"} 0.0",
    ] {
        assert!(samples.contains(&want), "no {want:?} in {samples:?}");
    }
    let (ok, said) = promtool_check(&body);
    assert!(ok, "promtool: {said}");
    // Without the option: none of them.
    d.stop();
    let again = dir.path().join("again");
    std::fs::create_dir_all(&again).unwrap();
    let d = served(&again, "");
    let (_, _, body) = get(http(&d), "/metrics", None);
    assert!(!body.contains("node_md_"), "{body}");
    d.stop();
}

/// `/api/v1/status` and `/api/v1/arrays/NAME` answer what `raidd status --json` and `raidd
/// detail NAME --json` do; an unknown array is a 404 with the reason; other methods 405.
#[test]
fn the_api_answers_as_status_and_detail_do() {
    let dir = scratch();
    let d = served(dir.path(), "");
    let c = d.control.to_str().unwrap().to_string();
    let (status, head, body) = get(http(&d), "/api/v1/status", None);
    assert_eq!(status, 200, "{head}");
    assert!(head.contains("application/json"), "{head}");
    let api: serde_json::Value = serde_json::from_str(&body).unwrap();
    let cli = raidd(&["status", "--json", "--control", &c]).ok().json();
    for key in [
        "version",
        "threads",
        "max_connections",
        "buffer_memory_bytes",
    ] {
        assert_eq!(api[key], cli[key], "{key}");
    }
    assert_eq!(api["arrays"][0]["name"], cli["arrays"][0]["name"]);
    assert_eq!(
        api["arrays"][0]["status"]["uuid"],
        cli["arrays"][0]["status"]["uuid"]
    );
    let (status, _, body) = get(http(&d), "/api/v1/arrays/raid5", None);
    assert_eq!(status, 200);
    let api: serde_json::Value = serde_json::from_str(&body).unwrap();
    let cli = raidd(&["detail", "raid5", "--json", "--control", &c])
        .ok()
        .json();
    assert_eq!(api["array"]["uuid"], cli["array"]["uuid"]);
    assert_eq!(api["array"]["slots"], cli["array"]["slots"]);
    let (status, _, body) = get(http(&d), "/api/v1/arrays/nosuch", None);
    assert_eq!(status, 404);
    assert!(body.contains("no array named"), "{body}");
    let mut s = TcpStream::connect(http(&d)).unwrap();
    s.write_all(b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 405"), "{out}");
    d.stop();
}

/// Clients that open connections and send nothing hold at most MAX_CONNECTIONS (64): the
/// next is answered 503 at once, and a scrape goes through again once their head timeout
/// (10 s) has closed them; a head of more than 8 KiB is refused with 431.
#[test]
fn idle_and_oversized_clients_are_bounded() {
    let dir = scratch();
    let d = served(dir.path(), "");
    let silent: Vec<TcpStream> = (0..64)
        .map(|_| TcpStream::connect(http(&d)).unwrap())
        .collect();
    // The listener has taken all 64 once a further client is told it is busy.
    wait("a 503 for the 65th", Duration::from_secs(10), || {
        get(http(&d), "/metrics", None).0 == 503
    });
    // The log line comes through the daemon's stderr, which a reader thread collects: it
    // may land a moment after the 503 the client already has.
    wait("the refusal logged", Duration::from_secs(10), || {
        d.log().contains("connections open; refusing one more")
    });
    wait("the silent ones timed out", Duration::from_secs(30), || {
        get(http(&d), "/metrics", None).0 == 200
    });
    drop(silent);
    let mut s = TcpStream::connect(http(&d)).unwrap();
    let big = format!(
        "GET /metrics HTTP/1.1\r\nX-Big: {}\r\n\r\n",
        "a".repeat(9000)
    );
    let _ = s.write_all(big.as_bytes());
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    assert!(out.starts_with("HTTP/1.1 431"), "{out}");
    d.stop();
}

/// Every metric family `/metrics` gives (DAB and node_md_compat on, so all kinds appear) is
/// documented in docs/METRICS.md.
#[test]
fn every_metric_is_documented() {
    let dir = scratch();
    let members = create_array(dir.path(), "raid5", 4, &[]);
    let cfg = format!(
        "{}dab = \"4M\"\n[http]\nlisten = \"127.0.0.1:0\"\nnode_md_compat = true\n",
        array_config("raid5", &members)
    );
    let d = Daemon::start(dir.path(), &cfg);
    // Some traffic, so the latency histogram counts.
    let input = common::sectors::pattern_file(dir.path(), MIB, 1, 7);
    common::daemon::must(tool("nbdcopy").args([input.to_str().unwrap(), &d.uri("raid5")]));
    let (_, _, body) = get(http(&d), "/metrics", None);
    d.stop();
    let writes = body
        .lines()
        .find(|l| {
            l.starts_with("raidd_request_duration_seconds_count{") && l.contains("op=\"write\"")
        })
        .unwrap();
    let n: u64 = writes.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(n > 0, "{writes}");
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/METRICS.md"
    ))
    .unwrap();
    let families: Vec<&str> = body
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    assert!(
        families.iter().any(|f| f.starts_with("raidd_dab_")),
        "{body}"
    );
    for f in families {
        assert!(
            doc.contains(&format!("`{f}`")),
            "{f} is not in docs/METRICS.md"
        );
    }
}

/// Headless Chromium (started here, fresh profile, killed by PID) against the dashboard of
/// a degraded RAID5 in mid-rebuild: the rendered page has the banner, the rebuild's progress
/// bar with its ETA, and graphs that have drawn points; the page and its files weigh under
/// 300 KB; the browser asked nothing of any host but raidd's. With RAIDD_SCREENSHOT=PATH the
/// screenshot is kept there (docs/dashboard.png was made so).
#[test]
fn chromium_renders_the_dashboard_of_a_degraded_rebuilding_array() {
    let dir = scratch();
    let members = create_array(dir.path(), "raid5", 4, &[]);
    let spare = dir.path().join("spare.img");
    std::fs::File::create(&spare)
        .unwrap()
        .set_len(24 * MIB)
        .unwrap();
    let cfg = format!(
        "{}[[spare]]\npath = {:?}\n[sync]\nspeed_min = 500\nspeed_max = 1000\n\
         [http]\nlisten = \"127.0.0.1:0\"\n",
        array_config("raid5", &members),
        spare.display().to_string()
    );
    let d = Daemon::start(dir.path(), &cfg);
    let c = d.control.to_str().unwrap().to_string();
    raidd(&[
        "fail",
        "raid5",
        members[1].to_str().unwrap(),
        "--control",
        &c,
    ])
    .ok();
    wait("the rebuild runs", Duration::from_secs(10), || {
        let (_, _, b) = get(http(&d), "/api/v1/status", None);
        b.contains("\"kind\": \"recovery\"")
    });
    // Load for the graphs while the browser looks: fio's verified-free random I/O,
    // stopped by PID at the end.
    let mut fio = tool("fio")
        .args([
            "--name=load",
            "--ioengine=nbd",
            &format!("--uri={}", d.uri("raid5")),
            "--rw=randrw",
            "--bs=4k",
            "--iodepth=2",
            "--time_based",
            "--runtime=60",
            "--size=8M",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait("fio's load arrives", Duration::from_secs(20), || {
        let (_, _, m) = get(http(&d), "/metrics", None);
        m.lines().any(|l| {
            l.starts_with("raidd_export_operations_total{")
                && l.contains("op=\"read\"")
                && !l.ends_with(" 0")
        })
    });

    let url = format!("http://{}/", http(&d));
    let netlog = dir.path().join("netlog.json");
    let dom = chromium(
        dir.path(),
        &[
            "--dump-dom".into(),
            format!("--log-net-log={}", netlog.display()),
            url.clone(),
        ],
    );
    // The banner, server-rendered and then kept by the script.
    let banner = &dom[dom.find("id=\"banner\"").expect("a banner")..];
    let banner = &banner[..banner.find("</div>").unwrap()];
    assert!(
        banner.contains("banner bad") && banner.contains("raid5 is degraded"),
        "{banner}"
    );
    // The progress bar of the rebuild, with its ETA.
    assert!(dom.contains("<progress"), "{dom}");
    let eta = &dom[dom.find("class=\"eta\">").expect("an ETA") + 12..];
    let eta = &eta[..eta.find('<').unwrap()];
    assert!(eta.ends_with(" s") || eta.contains("min"), "ETA {eta:?}");
    // Graphs with points drawn: the script marks how many it gave uPlot, and uPlot's
    // canvas is there.
    let points: usize = dom
        .split("data-points=\"")
        .skip(1)
        .map(|s| s[..s.find('"').unwrap()].parse::<usize>().unwrap())
        .max()
        .expect("graphs that drew points");
    assert!(points >= 2, "{points} points");
    assert!(dom.contains("<canvas"), "no canvas drawn");
    let iops = &dom[dom.find("id=\"g-iops\"").unwrap()..];
    let last = &iops[iops.find("data-last=\"").expect("a last IOPS value") + 11..];
    let last: f64 = last[..last.find('"').unwrap()].parse().unwrap();
    assert!(last > 0.0, "the IOPS graph ends at {last} under fio's load");

    // Only raidd was asked for anything by the page.
    let asked = page_requests(&netlog, &format!("http://{}", http(&d)));
    assert!(asked.len() >= 4, "the net log saw {asked:?}");
    let host = format!("http://{}/", http(&d));
    for u in &asked {
        assert!(u.starts_with(&host), "the page made the browser ask {u}");
    }

    // The page and every file it loads.
    let (_, _, page) = get(http(&d), "/", None);
    let mut weight = page.len();
    for name in page.split("/assets/").skip(1) {
        let name = &name[..name.find('"').unwrap()];
        let (status, _, body) = get(http(&d), &format!("/assets/{name}"), None);
        assert_eq!(status, 200, "{name}");
        weight += body.len();
    }
    eprintln!("the page and its files: {weight} bytes");
    assert!(weight < 300_000, "the page weighs {weight} bytes");

    let shot = std::env::var_os("RAIDD_SCREENSHOT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| dir.path().join("dashboard.png"));
    chromium(
        dir.path(),
        &[
            format!("--screenshot={}", shot.display()),
            "--window-size=1200,1000".into(),
            url,
        ],
    );
    let png = std::fs::read(&shot).unwrap();
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "{} bytes",
        png.len()
    );
    let _ = fio.kill();
    let _ = fio.wait();
    d.stop();
}

/// The URLs the page at `origin` made the browser request, from Chromium's net log: the
/// navigation and everything the page started (initiator `origin`, or the page's site as
/// the top frame of the request's network isolation key). Chromium's own fetches (its
/// clock check, a spelling dictionary, component updates: headless or not, it tries them
/// whatever the flags) carry neither, and are not the page's doing.
fn page_requests(netlog: &Path, origin: &str) -> Vec<String> {
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(netlog).unwrap()).unwrap();
    let start = j["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
        .as_u64()
        .unwrap();
    let site = origin.rsplit_once(':').map_or(origin, |(s, _)| s);
    j["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"].as_u64() == Some(start))
        .filter_map(|e| {
            let p = &e["params"];
            let url = p["url"].as_str()?;
            let by_page = p["initiator"].as_str() == Some(origin)
                || p["network_isolation_key"]
                    .as_str()
                    .is_some_and(|k| k.split(' ').next() == Some(site));
            by_page.then(|| url.to_string())
        })
        .collect()
}

/// Runs headless Chromium once with a fresh profile and five seconds of (virtual) time for
/// the page's script; returns its stdout.
fn chromium(dir: &Path, args: &[String]) -> String {
    let profile = tempfile::tempdir_in(dir).unwrap();
    let child = tool("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--virtual-time-budget=5000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    // Killed by PID if it hangs.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(out) => {
            let out = out.unwrap();
            assert!(out.status.success(), "chromium failed: {:?}", out.status);
            String::from_utf8_lossy(&out.stdout).into_owned()
        }
        Err(_) => {
            // SAFETY: kill only sends a signal to the process this test started.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            panic!("chromium did not finish within 60 s");
        }
    }
}

/// `[http.tls]`: the listener speaks HTTPS only, with the same certificate options as NBD:
/// curl checking the certificate reads `/metrics` and the dashboard; a plain-text request
/// gets no page; a bad certificate path stops the start with a clear error.
#[test]
fn https_with_the_certificate_nbd_uses() {
    let dir = scratch();
    let (cert, key) = common::daemon::make_certificate(dir.path());
    let members = create_array(dir.path(), "raid5", 4, &[]);
    let cfg = |cert: &Path| {
        format!(
            "{}[http]\nlisten = \"127.0.0.1:0\"\n[http.tls]\ncertificate = {:?}\nkey = {:?}\n",
            array_config("raid5", &members),
            cert.display().to_string(),
            key.display().to_string()
        )
    };
    let d = Daemon::start(dir.path(), &cfg(&cert));
    assert!(d.log().contains("on https://"), "{}", d.log());
    let url = format!("https://{}", http(&d));
    let curl = |path: &str| {
        common::daemon::run_tool(tool("curl").args([
            "-sS",
            "--cacert",
            cert.to_str().unwrap(),
            &format!("{url}{path}"),
        ]))
    };
    let (ok, metrics, err) = curl("/metrics");
    assert!(ok, "{err}");
    assert!(metrics.contains("raidd_array_state{"), "{metrics}");
    let (ok, page, err) = curl("/");
    assert!(ok && page.contains("<!DOCTYPE html>"), "{err}");
    // Plain HTTP on the HTTPS port: no page comes back.
    let mut s = TcpStream::connect(http(&d)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    assert!(
        !String::from_utf8_lossy(&out).contains("raidd_"),
        "plain text answered"
    );
    d.stop();
    let e = Daemon::try_start(dir.path(), &cfg(&dir.path().join("nope.pem")))
        .err()
        .expect("a missing certificate stops the start");
    assert!(
        e.contains("TLS certificate") && e.contains("nope.pem"),
        "{e}"
    );
}

/// curl over HTTPS with the test's certificate: (HTTP status, headers and body).
fn curl(cert: &Path, url: &str, args: &[&str]) -> (u16, String) {
    let mut c = tool("curl");
    c.args(["-sS", "-i", "--cacert", cert.to_str().unwrap()])
        .args(args)
        .arg(url);
    let (ok, out, err) = common::daemon::run_tool(&mut c);
    assert!(ok, "curl {args:?} {url}: {err}\n{out}");
    let status = out
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {out}"));
    (status, out)
}

/// A listener other hosts can reach needs TLS and a token, and the start says how; a token
/// in a file others may read is refused; the daemon starts on none of these.
#[test]
fn a_listener_off_loopback_needs_tls_and_a_token() {
    let dir = scratch();
    let (cert, key) = common::daemon::make_certificate(dir.path());
    let members = create_array(dir.path(), "raid5", 3, &[]);
    let token = dir.path().join("token");
    std::fs::write(&token, "0123456789abcdef0123456789abcdef\n").unwrap();
    let tls = format!(
        "[http.tls]\ncertificate = {:?}\nkey = {:?}\n",
        cert.display().to_string(),
        key.display().to_string()
    );
    let with_token = format!("token_file = {:?}\n", token.display().to_string());
    for (http, want) in [
        (String::new(), "reachable from other hosts"),
        (tls.clone(), "needs [http.tls]"),
        (with_token.clone(), "http.token_file"),
    ] {
        let cfg = format!(
            "{}[http]\nlisten = \"0.0.0.0:9810\"\n{http}",
            array_config("raid5", &members)
        );
        // [http.tls] is a table of its own: the token line goes before it.
        let cfg = cfg.replace(&format!("{tls}{with_token}"), &format!("{with_token}{tls}"));
        let e = Daemon::try_start(dir.path(), &cfg).err().expect("refused");
        assert!(e.contains(want) && e.contains("127.0.0.1:9810"), "{e}");
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
    let cfg = format!(
        "{}[http]\nlisten = \"127.0.0.1:0\"\n{with_token}",
        array_config("raid5", &members)
    );
    let e = Daemon::try_start(dir.path(), &cfg).err().expect("refused");
    assert!(e.contains("chmod 600"), "{e}");
}

/// Actions over HTTP (check, repair, fail, add: what the dashboard's forms post) need the
/// token: refused without it (and with reads closed, so is everything but the login form);
/// a bearer token acts; a browser session from the login form acts only with the page's
/// CSRF value and from the listener's own origin.
#[test]
fn actions_need_the_token_and_a_browser_session_its_csrf_value() {
    let dir = scratch();
    let d0 = dir.path();
    let (cert, key) = common::daemon::make_certificate(d0);
    let members = create_array(d0, "raid5", 4, &[]);
    let token = d0.join("token");
    let secret = "0123456789abcdef0123456789abcdef";
    std::fs::write(&token, format!("{secret}\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let cfg = format!(
        "{}[http]\nlisten = \"127.0.0.1:0\"\nopen_reads = false\ntoken_file = {:?}\n\
         [http.tls]\ncertificate = {:?}\nkey = {:?}\n",
        array_config("raid5", &members),
        token.display().to_string(),
        cert.display().to_string(),
        key.display().to_string()
    );
    let d = Daemon::start(d0, &cfg);
    let base = format!("https://{}", http(&d));
    let bearer = format!("Authorization: Bearer {secret}");
    let actions = format!("{base}/api/v1/arrays/raid5/actions");
    let json = ["-H", "Content-Type: application/json"];

    // Reads are closed: the metrics need the token, the dashboard asks for it.
    assert_eq!(curl(&cert, &format!("{base}/metrics"), &[]).0, 401);
    let (s, body) = curl(&cert, &format!("{base}/metrics"), &["-H", &bearer]);
    assert!(s == 200 && body.contains("raidd_array_state{"), "{body}");
    let (s, page) = curl(&cert, &format!("{base}/"), &[]);
    assert!(
        s == 200 && page.contains("Log in") && !page.contains("members"),
        "{page}"
    );
    // With the token but no session: the dashboard, without forms, links to the login.
    let (s, page) = curl(&cert, &format!("{base}/"), &["-H", &bearer]);
    assert!(
        s == 200 && page.contains("Log in for actions") && !page.contains("Actions on"),
        "{page}"
    );

    // An action without the token, with a wrong one, then with it.
    let check = ["--data", r#"{"action":"check"}"#];
    let (s, _) = curl(&cert, &actions, &[&json[..], &check[..]].concat());
    assert_eq!(s, 401);
    let wrong = "Authorization: Bearer 0123456789abcdef0123456789abcdee";
    let (s, _) = curl(
        &cert,
        &actions,
        &[&json[..], &check[..], &["-H", wrong]].concat(),
    );
    assert_eq!(s, 401);
    let (s, body) = curl(
        &cert,
        &actions,
        &[&json[..], &check[..], &["-H", &bearer]].concat(),
    );
    assert!(s == 200 && body.contains("check"), "{body}");
    let ctl = d.control.display().to_string();
    let detail = || {
        raidd(&["detail", "raid5", "--json", "--control", &ctl])
            .ok()
            .json()["array"]
            .clone()
    };
    let start = Instant::now();
    loop {
        let st = detail();
        if st["last_sync"]["kind"] == "check" || st["sync"]["kind"] == "check" {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "no check: {st}");
        std::thread::sleep(Duration::from_millis(100));
    }

    // A browser: the login form gives a session cookie.
    let jar = d0.join("cookies");
    let jar = jar.to_str().unwrap();
    let login = format!("{base}/login");
    let (s, _) = curl(
        &cert,
        &login,
        &[
            "-c",
            jar,
            "--data-urlencode",
            "token=wrong-token-0123456789",
        ],
    );
    assert_eq!(s, 401);
    let token_field = format!("token={secret}");
    let (s, head) = curl(
        &cert,
        &login,
        &["-c", jar, "--data-urlencode", &token_field],
    );
    assert!(
        s == 303 && head.contains("HttpOnly; SameSite=Strict; Secure"),
        "{head}"
    );
    let (s, page) = curl(&cert, &format!("{base}/"), &["-b", jar]);
    assert!(s == 200 && page.contains("Actions on raid5"), "{page}");
    let csrf = page
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap()
        .to_string();
    assert_eq!(csrf.len(), 64, "{csrf}");
    let fail = members[0].display().to_string();
    let form = |csrf: Option<&str>, origin: Option<&str>, action: &str| {
        let mut a: Vec<String> = vec![
            "-b".into(),
            jar.into(),
            "--data-urlencode".into(),
            format!("action={action}"),
            "--data-urlencode".into(),
            format!("member={fail}"),
        ];
        if let Some(c) = csrf {
            a.extend(["--data-urlencode".into(), format!("csrf={c}")]);
        }
        if let Some(o) = origin {
            a.extend(["-H".into(), format!("Origin: {o}")]);
        }
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        curl(&cert, &actions, &a)
    };
    // The cookie alone is not enough, nor the CSRF value from another site's page.
    let (s, body) = form(None, None, "fail");
    assert!(s == 403 && body.contains("CSRF"), "{body}");
    let (s, body) = form(Some(&csrf), Some("https://evil.example"), "fail");
    assert!(s == 403 && body.contains("another site"), "{body}");
    let st = detail();
    assert!(
        st["slots"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["state"] == "insync"),
        "{st}"
    );
    // The dashboard's own form acts, and sends the browser back to the page.
    let (s, head) = form(Some(&csrf), Some(&base), "fail");
    assert!(s == 303 && head.contains("Location: /"), "{head}");
    let st = detail();
    assert_eq!(st["slots"][0]["state"], "faulty", "{st}");
    raidd(&["remove", "raid5", &fail, "--control", &ctl]).ok();
    let (s, head) = form(Some(&csrf), Some(&base), "add");
    assert!(s == 303, "{head}");
    let start = Instant::now();
    loop {
        let st = detail();
        if st["slots"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["state"] == "insync")
        {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "not rebuilt: {st}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    d.stop();
}
