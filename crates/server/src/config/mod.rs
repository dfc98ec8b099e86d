//! The daemon's configuration file (TOML): arrays by name with their members, the limits
//! every client and member is held to, the monitor, the HTTP listener and the control
//! socket; each frontend's sections (`[nbd]` and `[[export]]`, `[iscsi]` and `[[target]]`,
//! `[[ublk]]`) are its own, checked by its `config.rs` (see `crate::frontends`). Parsing
//! and checking are pure; paths are resolved against the file's directory so a config can
//! travel with its image files.

pub mod arrays;
pub mod keys;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use arrays::RawArray;
pub use arrays::{ArrayConfig, Find, DEFAULT_SAFE_MODE_DELAY};
use keys::{check_name, delay_key, size_key, RawTls, MAX_MEMORY};
pub use keys::{TlsConfig, MAX_REQUEST};

use crate::frontend::ParseCtx;
use crate::frontends::Frontends;

pub use raidd_admin::control::DEFAULT_CONTROL_SOCKET;
/// Buffer memory registered with io_uring unless the config says otherwise: enough for
/// every request in flight of a busy server; pinned from the start.
pub const DEFAULT_REGISTERED_BUFFERS: usize = 64 << 20;

/// The file as written, less the frontends' sections.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    control_socket: Option<PathBuf>,
    threads: Option<usize>,
    /// Microseconds a worker polls for I/O before it sleeps.
    poll_us: Option<u64>,
    /// Buffer memory registered with io_uring (a size; "0": none).
    registered_buffers: Option<String>,
    /// Request and reply buffer memory for the whole server (a size).
    buffer_memory: Option<String>,
    /// Client connections open at once (every frontend's together).
    max_connections: Option<usize>,
    /// A request whose bytes stop arriving for this long closes its connection.
    request_timeout: Option<String>,
    /// Replies a client does not take for this long close its connection.
    send_timeout: Option<String>,
    /// A member I/O that does not complete in this time fails the member ("off": never).
    member_timeout: Option<String>,
    /// How long a stop waits for requests in flight before it closes the arrays anyway.
    drain_timeout: Option<String>,
    /// Where arrays named by UUID are looked for: glob patterns.
    #[serde(default)]
    scan: Vec<String>,
    #[serde(default, rename = "array")]
    arrays: Vec<RawArray>,
    #[serde(default)]
    sync: RawSync,
    #[serde(default)]
    monitor: RawMonitor,
    #[serde(default, rename = "spare")]
    spares: Vec<RawSpare>,
    http: Option<RawHttp>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHttp {
    listen: Option<String>,
    /// Also emit node_exporter's `node_md_*` metrics.
    #[serde(default)]
    node_md_compat: bool,
    tls: Option<RawTls>,
    /// A file holding the bearer token that actions (and, off loopback, reads) need.
    token_file: Option<PathBuf>,
    /// Whether `/metrics`, `/api/*` and the dashboard answer without the token (default:
    /// on loopback only).
    open_reads: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSync {
    /// KiB/s per member (md's sync_speed_min / sync_speed_max).
    speed_min: Option<u64>,
    speed_max: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMonitor {
    /// Run on every event with EVENT ARRAY [MEMBER] (mdadm --monitor's PROGRAM).
    program: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSpare {
    path: PathBuf,
    group: Option<String>,
}

/// A checked configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub control_socket: PathBuf,
    /// Worker threads, each with its own executor and io_uring.
    pub threads: usize,
    /// How long an idle worker polls for I/O before it sleeps (zero: sleeps at once).
    pub poll: std::time::Duration,
    /// Bytes of buffer memory registered with every worker's io_uring (0: none).
    pub registered_buffers: usize,
    /// Glob patterns (absolute) where members of arrays named by UUID are looked for.
    pub scan: Vec<String>,
    pub arrays: Vec<ArrayConfig>,
    pub sync: raidd_engine::SyncLimits,
    /// Program run on events (failures, rebuilds, mismatches).
    pub program: Option<PathBuf>,
    /// The hot-spare pool shared by all arrays.
    pub spares: Vec<SpareConfig>,
    /// What clients and members may make the server hold, and for how long.
    pub limits: Limits,
    /// The metrics, API and dashboard listener, when the config has an `[http]` section.
    pub http: Option<HttpConfig>,
    /// Each frontend's checked sections.
    pub frontends: Frontends,
}

/// `[http]`: where the metrics endpoint, the JSON API and the dashboard listen.
#[derive(Clone, Debug, PartialEq)]
pub struct HttpConfig {
    pub listen: SocketAddr,
    /// Also emit node_exporter's mdadm collector metrics (`node_md_*`) for each array.
    pub node_md_compat: bool,
    pub tls: Option<TlsConfig>,
    /// The bearer token's file: actions need the token, and so do reads unless open.
    pub token_file: Option<PathBuf>,
    /// Reads (`/metrics`, `/api/*`, the dashboard) answer without the token.
    pub open_reads: bool,
}

/// Where `[http]` listens unless it says: loopback only.
pub const DEFAULT_HTTP_LISTEN: &str = "127.0.0.1:9810";

/// What clients and members may make the server hold, and for how long. Every one has a
/// default; the README lists them. What one connection of a frontend may hold, and how long
/// its connections may idle, are that frontend's keys.
#[derive(Clone, Debug, PartialEq)]
pub struct Limits {
    /// Bytes of request and reply buffers all connections together may hold.
    pub buffer_memory: u64,
    /// Client connections (every frontend's together) open at once; more are refused.
    pub max_connections: usize,
    /// A request whose bytes stop arriving for this long closes its connection.
    pub request_timeout: Duration,
    /// Replies a client does not take for this long close its connection.
    pub send_timeout: Duration,
    /// A member I/O that does not complete in this time fails the member; `None`: never.
    pub member_timeout: Option<Duration>,
    /// How long a stop waits for the requests in flight before it closes the arrays anyway
    /// (those with writes still in flight stay marked unclean).
    pub drain_timeout: Duration,
}

/// Client connections unless the config says otherwise.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// The time limits unless the config says otherwise (the SCSI layer's command timeout for
/// members).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
pub const DEFAULT_SEND_TIMEOUT: Duration = Duration::from_secs(30);
pub const DEFAULT_MEMBER_TIMEOUT: Duration = Duration::from_secs(30);
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// The server's buffer memory unless the config says otherwise: an eighth of the machine's
/// memory, at least 256 MiB and at most 4 GiB.
pub fn default_buffer_memory() -> u64 {
    // SAFETY: sysconf only reads system constants.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    let ram = u64::try_from(pages)
        .unwrap_or(0)
        .saturating_mul(u64::try_from(page).unwrap_or(0));
    (ram / 8).clamp(256 << 20, 4 << 30)
}

impl Limits {
    /// The limits; `buffer_memory` must hold at least one connection of the frontend
    /// whose connections may hold the most (`connection`).
    fn parse(raw: &RawConfig, connection: u64) -> Result<Limits, String> {
        let max_connections = raw.max_connections.unwrap_or(DEFAULT_MAX_CONNECTIONS);
        if !(1..=MAX_CONNECTIONS).contains(&max_connections) {
            return Err(format!(
                "max_connections = {max_connections}: must be 1..={MAX_CONNECTIONS}"
            ));
        }
        let floor = connection.max(MAX_REQUEST);
        let buffer_memory = size_key(
            "buffer_memory",
            raw.buffer_memory.as_deref(),
            default_buffer_memory().max(floor),
            floor..=MAX_MEMORY,
        )?;
        let delay = |what: &str, text: &Option<String>, default: Duration| {
            delay_key(what, text.as_deref(), Some(default), false).map(|d| d.unwrap_or(default))
        };
        Ok(Limits {
            buffer_memory,
            max_connections,
            request_timeout: delay(
                "request_timeout",
                &raw.request_timeout,
                DEFAULT_REQUEST_TIMEOUT,
            )?,
            send_timeout: delay("send_timeout", &raw.send_timeout, DEFAULT_SEND_TIMEOUT)?,
            drain_timeout: delay("drain_timeout", &raw.drain_timeout, DEFAULT_DRAIN_TIMEOUT)?,
            member_timeout: delay_key(
                "member_timeout",
                raw.member_timeout.as_deref(),
                Some(DEFAULT_MEMBER_TIMEOUT),
                true,
            )?,
        })
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct SpareConfig {
    pub path: PathBuf,
    /// Restricts the spare to arrays of this spare group; `None`: any array.
    pub group: Option<String>,
}

const MAX_THREADS: usize = 256;
const MAX_CONNECTIONS: usize = 1 << 20;
/// Polling longer than this saves nothing a sleep would cost and burns a core.
const MAX_POLL_US: u64 = 1000;

fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(4)
}

impl Config {
    /// The configuration without the arrays at indices `gone` (arrays that could not be
    /// started): what the frontends serve of them goes too (exports, iSCSI LUNs and the
    /// targets left without one, ublk devices). The other indices are renumbered. Returns
    /// what was left out, a line each.
    pub fn without_arrays(&self, gone: &[usize]) -> (Config, Vec<String>) {
        let mut notes = Vec::new();
        // New index of each array that stays.
        let kept: Vec<Option<usize>> = (0..self.arrays.len())
            .scan(0, |next, i| {
                Some((!gone.contains(&i)).then(|| {
                    *next += 1;
                    *next - 1
                }))
            })
            .collect();
        let mut c = self.clone();
        c.arrays = self
            .arrays
            .iter()
            .enumerate()
            .filter(|(i, _)| kept[*i].is_some())
            .map(|(_, a)| a.clone())
            .collect();
        c.frontends = self
            .frontends
            .without_arrays(&kept, &self.arrays, &mut notes);
        (c, notes)
    }

    /// Reads and checks the file at `path`.
    pub fn load(path: &Path) -> Result<Config, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read config {}: {e}", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        Config::parse(&text, base).map_err(|e| format!("config {}: {e}", path.display()))
    }

    /// Parses and checks config text; relative paths are taken relative to `base`.
    pub fn parse(text: &str, base: &Path) -> Result<Config, String> {
        let mut table: toml::Table = text.parse().map_err(|e: toml::de::Error| e.to_string())?;
        let sections = Frontends::take_sections(&mut table);
        let mut raw: RawConfig = toml::Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| e.message().to_string())?;
        let resolve = |p: PathBuf| if p.is_absolute() { p } else { base.join(p) };

        let threads = raw.threads.unwrap_or_else(default_threads);
        if threads == 0 || threads > MAX_THREADS {
            return Err(format!("threads = {threads}: must be 1..={MAX_THREADS}"));
        }
        let poll_us = raw.poll_us.unwrap_or(0);
        if poll_us > MAX_POLL_US {
            return Err(format!("poll_us = {poll_us}: at most {MAX_POLL_US}"));
        }
        let registered_buffers = registered_buffers(raw.registered_buffers.as_deref())?;
        if raw.arrays.is_empty() {
            return Err(
                "no [[array]] defined: there is nothing to serve (`raidd config scan \
                 PATTERN` prints the arrays it finds, to paste here)"
                    .into(),
            );
        }
        let scan = scan_patterns(&raw.scan, base)?;
        let mut all_members = HashSet::new();
        let raw_arrays = std::mem::take(&mut raw.arrays);
        let arrays =
            arrays::arrays_config(raw_arrays, &mut all_members, &resolve, !scan.is_empty())?;
        let ctx = ParseCtx {
            arrays: &arrays,
            resolve: &resolve,
        };
        let frontends = Frontends::parse(sections, &ctx)?;
        let limits = Limits::parse(&raw, frontends.connection_memory())?;
        frontends.check_held_memory(threads, limits.buffer_memory)?;
        let sync = sync_limits(&raw.sync)?;
        let spares = spares_config(raw.spares, &mut all_members, &resolve)?;
        let http = raw.http.map(|h| http_config(h, &resolve)).transpose()?;
        Ok(Config {
            http,
            sync,
            program: raw.monitor.program.map(resolve),
            spares,
            control_socket: raw
                .control_socket
                .map(resolve)
                .unwrap_or_else(|| PathBuf::from(DEFAULT_CONTROL_SOCKET)),
            threads,
            poll: std::time::Duration::from_micros(poll_us),
            registered_buffers,
            scan,
            arrays,
            limits,
            frontends,
        })
    }

    /// What the connections may hold: the buffer budget less what the frontends hold for
    /// their whole life (ublk's buffers).
    pub fn connection_buffer_memory(&self) -> u64 {
        self.limits
            .buffer_memory
            .saturating_sub(self.frontends.held_memory(self.threads))
    }
}

/// `scan`: glob patterns, each checked, relative ones taken from `base` (made absolute, so
/// the patterns mean the same wherever the daemon runs).
fn scan_patterns(raw: &[String], base: &Path) -> Result<Vec<String>, String> {
    raw.iter()
        .map(|p| {
            let full = raidd_admin::scan::absolute_pattern(p, base);
            debug_assert!(Path::new(&full).is_absolute(), "patterns mean one place");
            raidd_admin::scan::check_pattern(&full).map(|()| full)
        })
        .collect()
}

/// `registered_buffers`: bytes of buffers registered with each ring (0: none).
fn registered_buffers(text: Option<&str>) -> Result<usize, String> {
    let Some(t) = text else {
        return Ok(DEFAULT_REGISTERED_BUFFERS);
    };
    raidd_admin::size::parse_size(t)
        .ok()
        .and_then(|b| usize::try_from(b).ok())
        .filter(|&b| b == 0 || (4096..=raidd_rt::MAX_ARENA).contains(&b))
        .ok_or_else(|| {
            format!("registered_buffers = {t:?}: not a size from 4K to 1G (or \"0\" for none)")
        })
}

fn http_config(raw: RawHttp, resolve: &dyn Fn(PathBuf) -> PathBuf) -> Result<HttpConfig, String> {
    let text = raw.listen.as_deref().unwrap_or(DEFAULT_HTTP_LISTEN);
    let listen: SocketAddr = text.parse().map_err(|_| {
        format!("http.listen = {text:?}: not an address:port (e.g. \"127.0.0.1:9810\")")
    })?;
    if raw.tls.as_ref().is_some_and(|t| t.require) {
        return Err(
            "http.tls.require: with [http.tls] every connection is HTTPS; leave require out".into(),
        );
    }
    let loopback = listen.ip().is_loopback();
    if !loopback && (raw.tls.is_none() || raw.token_file.is_none()) {
        return Err(format!(
            "http.listen = {text:?} is reachable from other hosts: it needs [http.tls] \
             (certificate and key) and http.token_file (a file holding the bearer token \
             clients send as \"Authorization: Bearer TOKEN\"), or a loopback address \
             such as \"127.0.0.1:9810\""
        ));
    }
    Ok(HttpConfig {
        listen,
        node_md_compat: raw.node_md_compat,
        tls: raw.tls.map(|t| TlsConfig::from_raw(t, resolve)),
        open_reads: raw.open_reads.unwrap_or(loopback),
        token_file: raw.token_file.map(resolve),
    })
}

fn sync_limits(raw: &RawSync) -> Result<raidd_engine::SyncLimits, String> {
    let defaults = raidd_engine::SyncLimits::default();
    let sync = raidd_engine::SyncLimits {
        min_kib_s: raw.speed_min.unwrap_or(defaults.min_kib_s),
        max_kib_s: raw.speed_max.unwrap_or(defaults.max_kib_s),
        ..defaults
    };
    if sync.min_kib_s == 0 || sync.max_kib_s < sync.min_kib_s {
        return Err(format!(
            "sync.speed_min = {} and sync.speed_max = {}: need 0 < speed_min <= speed_max (KiB/s)",
            sync.min_kib_s, sync.max_kib_s
        ));
    }
    Ok(sync)
}

/// The pool's spares; none may be a member or another spare.
fn spares_config(
    raw: Vec<RawSpare>,
    all_members: &mut HashSet<PathBuf>,
    resolve: &dyn Fn(PathBuf) -> PathBuf,
) -> Result<Vec<SpareConfig>, String> {
    let mut spares = Vec::new();
    for s in raw {
        let path = resolve(s.path);
        if !all_members.insert(path.clone()) {
            return Err(format!(
                "spare {} is also named as a member or another spare",
                path.display()
            ));
        }
        if let Some(g) = &s.group {
            check_name("spare group", g)?;
        }
        spares.push(SpareConfig {
            path,
            group: s.group,
        });
    }
    Ok(spares)
}

/// Checks a spare group name given at run time (`raidd spare add --group`).
pub fn check_spare_group(name: &str) -> Result<(), String> {
    check_name("spare group", name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::Frontend;
    use crate::iscsi::config::{check_iscsi_name, LunConfig, DEFAULT_ISCSI_LISTEN};
    use crate::nbd::config::DEFAULT_NBD_LISTEN;
    use crate::ublk::UblkConfig;
    use raidd_admin::volume::VolumeRef;

    fn parse(text: &str) -> Result<Config, String> {
        Config::parse(text, Path::new("/etc/raidd"))
    }

    #[test]
    fn arrays_that_did_not_start_take_their_exports_and_luns_along() {
        let c = parse(
            r#"
            [[array]]
            name = "a"
            members = ["a0"]
            [[array]]
            name = "b"
            members = ["b0"]
            [[array]]
            name = "c"
            members = ["c0"]
            [[export]]
            name = "eb"
            array = "b"
            [[export]]
            name = "ec"
            array = "c"
            [[export]]
            name = "ea"
            array = "a"
            [[target]]
            name = "iqn.2026-11.test:only-b"
            [[target.lun]]
            array = "b"
            [[target]]
            name = "iqn.2026-11.test:mixed"
            [[target.lun]]
            array = "c"
            [[target.lun]]
            lun = 3
            array = "b"
            "#,
        )
        .expect("valid");
        let (left, notes) = c.without_arrays(&[1]);
        let names: Vec<&str> = left.arrays.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["a", "c"]);
        let exports: Vec<(&str, &str)> = left
            .frontends
            .nbd
            .exports
            .iter()
            .map(|e| (e.name.as_str(), left.arrays[e.array].name.as_str()))
            .collect();
        assert_eq!(exports, [("ec", "c"), ("ea", "a")]);
        let targets = &left.frontends.iscsi.as_ref().expect("iscsi").targets;
        assert_eq!(targets.len(), 1, "{targets:?}");
        assert_eq!(targets[0].name, "iqn.2026-11.test:mixed");
        assert_eq!(
            targets[0].luns,
            vec![LunConfig {
                lun: 0,
                array: 1,
                volume: None,
                read_only: false
            }]
        );
        assert_eq!(notes.len(), 4, "{notes:?}");
        assert!(notes[0].contains("export \"eb\"") && notes[0].contains("\"b\""));
        assert!(notes.iter().any(|n| n.contains("only-b is not offered")));
        // Nothing gone: the same configuration.
        assert_eq!(c.without_arrays(&[]), (c.clone(), Vec::new()));
    }

    #[test]
    fn a_minimal_config_exports_its_array_on_loopback() {
        let c = parse(
            r#"
            [[array]]
            name = "vol"
            members = ["d0.img", "/abs/d1.img"]
            "#,
        )
        .expect("valid");
        assert_eq!(
            c.frontends.nbd.listen,
            DEFAULT_NBD_LISTEN.parse::<SocketAddr>().expect("addr")
        );
        assert!(c.frontends.nbd.listen.ip().is_loopback());
        assert_eq!(
            c.arrays[0].find,
            Find::Paths(vec![
                PathBuf::from("/etc/raidd/d0.img"),
                PathBuf::from("/abs/d1.img")
            ])
        );
        assert_eq!(c.frontends.nbd.exports.len(), 1);
        assert_eq!(
            (
                c.frontends.nbd.exports[0].name.as_str(),
                c.frontends.nbd.exports[0].array
            ),
            ("vol", 0)
        );
        assert_eq!(c.control_socket, PathBuf::from(DEFAULT_CONTROL_SOCKET));
        assert!(c.threads >= 1);
    }

    #[test]
    fn arrays_named_by_uuid_need_scan_patterns_and_one_way_of_naming_members() {
        let c = parse(
            r#"
            scan = ["*.img", "/dev/disk/by-id/wwn-*"]
            [[array]]
            name = "a"
            uuid = "01234567:89abcdef:fedcba98:76543210"
            [[array]]
            name = "n"
            uuid = "11111111-1111-1111-1111-111111111111"
            inner = ["22222222222222222222222222222222"]
            [[array]]
            name = "p"
            members = ["x.img"]
            "#,
        )
        .expect("valid");
        assert_eq!(c.scan, ["/etc/raidd/*.img", "/dev/disk/by-id/wwn-*"]);
        let Find::Uuid { uuid, inner } = &c.arrays[0].find else {
            panic!("{:?}", c.arrays[0].find)
        };
        assert_eq!(uuid[..4], [0x01, 0x23, 0x45, 0x67]);
        assert!(inner.is_empty());
        assert_eq!(
            c.arrays[1].find,
            Find::Uuid {
                uuid: [0x11; 16],
                inner: vec![[0x22; 16]]
            }
        );
        assert_eq!(
            c.arrays[2].find.paths(),
            [PathBuf::from("/etc/raidd/x.img")]
        );
        assert_eq!(c.arrays[0].find.paths(), [] as [PathBuf; 0]);
        // The config's directory is escaped, not read as a pattern.
        let c = Config::parse(
            "scan = [\"*.img\"]\n[[array]]\nname = \"a\"\nuuid = \"01234567:89abcdef:fedcba98:76543210\"\n",
            Path::new("/srv/[x]"),
        )
        .expect("valid");
        assert_eq!(c.scan, ["/srv/[[]x[]]/*.img"]);
        assert!(raidd_admin::scan::matches_any(
            &c.scan,
            Path::new("/srv/[x]/d.img")
        ));

        let uuid = "uuid = \"01234567:89abcdef:fedcba98:76543210\"";
        for (text, want) in [
            (
                format!("[[array]]\nname = \"a\"\n{uuid}\n"),
                "no scan patterns",
            ),
            (
                format!("scan = [\"*\"]\n[[array]]\nname = \"a\"\n{uuid}\nmembers = [\"x\"]\n"),
                "both members and uuid",
            ),
            (
                "scan = [\"*\"]\n[[array]]\nname = \"a\"\n".to_string(),
                "has no members: list them",
            ),
            (
                "[[array]]\nname = \"a\"\nmembers = [\"x\"]\ninner = [\"y\"]\n".to_string(),
                "inner is for an array named by uuid",
            ),
            (
                "scan = [\"*\"]\n[[array]]\nname = \"a\"\nuuid = \"0123\"\n".to_string(),
                "not an md UUID",
            ),
            (
                format!("scan = [\"*\"]\n[[array]]\nname = \"a\"\n{uuid}\n[[array]]\nname = \"b\"\n{uuid}\n"),
                "is named twice",
            ),
            (
                format!("scan = [\"/srv/[x\"]\n[[array]]\nname = \"a\"\n{uuid}\n"),
                "scan pattern \"/srv/[x\"",
            ),
        ] {
            let e = parse(&text).expect_err(&text);
            assert!(e.contains(want), "{text}: {e}");
        }
    }

    #[test]
    fn limits_have_defaults_bounds_and_off_only_where_it_makes_sense() {
        let base = "[[array]]\nname = \"a\"\nmembers = [\"x\"]\n";
        let full = parse(base).expect("valid");
        let d = &full.limits;
        assert_eq!(d.max_connections, DEFAULT_MAX_CONNECTIONS);
        assert_eq!(
            full.frontends.nbd.connection_memory,
            crate::nbd::config::DEFAULT_CONNECTION_MEMORY
        );
        assert_eq!(
            crate::iscsi::Iscsi::connection_memory(&full.frontends.iscsi),
            crate::iscsi::config::DEFAULT_CONNECTION_MEMORY
        );
        assert_eq!(d.buffer_memory, default_buffer_memory());
        assert!((256 << 20..=4 << 30).contains(&d.buffer_memory));
        assert_eq!(d.request_timeout, DEFAULT_REQUEST_TIMEOUT);
        assert_eq!(d.send_timeout, DEFAULT_SEND_TIMEOUT);
        assert_eq!(d.drain_timeout, DEFAULT_DRAIN_TIMEOUT);
        assert_eq!(d.member_timeout, Some(DEFAULT_MEMBER_TIMEOUT));
        assert_eq!(
            full.frontends.nbd.idle_timeout, None,
            "kernel clients keep idle connections"
        );
        let with = |top: &str, nbd: &str| parse(&format!("{top}\n{base}[nbd]\n{nbd}\n"));
        let l = with(
            "buffer_memory = \"512M\"\nmax_connections = 10\nrequest_timeout = \"2s\"\n\
             send_timeout = \"1500ms\"\nmember_timeout = \"off\"\ndrain_timeout = \"5s\"",
            "connection_memory = \"32M\"\nidle_timeout = \"10m\"",
        );
        assert!(l.is_err(), "minutes are not a unit: {l:?}");
        let l = with(
            "buffer_memory = \"512M\"\nmax_connections = 10\nrequest_timeout = \"2s\"\n\
             send_timeout = \"1500ms\"\nmember_timeout = \"off\"\ndrain_timeout = \"5s\"",
            "connection_memory = \"32M\"\nidle_timeout = \"600s\"",
        )
        .expect("valid");
        let nbd = &l.frontends.nbd;
        let l = &l.limits;
        assert_eq!(
            (l.buffer_memory, l.max_connections, nbd.connection_memory),
            (512 << 20, 10, 32 << 20)
        );
        assert_eq!(l.request_timeout, Duration::from_secs(2));
        assert_eq!(l.send_timeout, Duration::from_millis(1500));
        assert_eq!(l.drain_timeout, Duration::from_secs(5));
        assert_eq!(l.member_timeout, None);
        assert_eq!(nbd.idle_timeout, Some(Duration::from_secs(600)));
        for (top, nbd, says) in [
            ("max_connections = 0", "", "max_connections"),
            ("buffer_memory = \"1M\"", "", "buffer_memory"),
            (
                "buffer_memory = \"64M\"",
                "connection_memory = \"128M\"",
                "buffer_memory",
            ),
            ("", "connection_memory = \"1M\"", "connection_memory"),
            ("request_timeout = \"off\"", "", "request_timeout"),
            ("send_timeout = \"0\"", "", "send_timeout"),
            ("drain_timeout = \"3\"", "", "drain_timeout"),
            ("member_timeout = \"soon\"", "", "member_timeout"),
        ] {
            let e = with(top, nbd).expect_err(top);
            assert!(e.contains(says), "{top} {nbd}: {e}");
        }
    }

    #[test]
    fn registered_buffers_take_a_size_or_zero() {
        for (text, want) in [("\"0\"", 0), ("\"16M\"", 16 << 20), ("\"1G\"", 1 << 30)] {
            let c = parse(&format!(
                "registered_buffers = {text}\n[[array]]\nname = \"a\"\nmembers = [\"x\"]\n"
            ))
            .expect("valid");
            assert_eq!(c.registered_buffers, want, "{text}");
        }
    }

    #[test]
    fn safe_mode_delay_takes_a_delay_with_its_unit_or_off() {
        let with = |v: &str| {
            parse(&format!("[[array]]\nname = \"a\"\nmembers = [\"x\"]\n{v}"))
                .map(|c| c.arrays[0].safe_mode_delay)
        };
        let ms = std::time::Duration::from_millis;
        assert_eq!(with(""), Ok(Some(DEFAULT_SAFE_MODE_DELAY)));
        assert_eq!(DEFAULT_SAFE_MODE_DELAY, ms(200), "md's default");
        assert_eq!(with("safe_mode_delay = \"50ms\""), Ok(Some(ms(50))));
        assert_eq!(with("safe_mode_delay = \"1.5s\""), Ok(Some(ms(1500))));
        assert_eq!(with("safe_mode_delay = \"off\""), Ok(None));
        assert_eq!(with("safe_mode_delay = \"0\""), Ok(None));
        for bad in [
            "\"200\"",
            "\"-1s\"",
            "\"2h\"",
            "\"7200s\"",
            "\"fast\"",
            "\"nanms\"",
            "200",
        ] {
            let e = with(&format!("safe_mode_delay = {bad}")).expect_err(bad);
            assert!(
                e.contains("safe_mode_delay") || e.contains("invalid type"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn ublk_entries_are_checked_and_follow_their_arrays() {
        let base = "[[array]]\nname = \"a\"\nmembers = [\"a0\"]\n\
                    [[array]]\nname = \"b\"\nmembers = [\"b0\"]\nread_only = true\n";
        let c = parse(&format!(
            "{base}[[ublk]]\narray = \"a\"\nvolume = \"data\"\n\
             [[ublk]]\narray = \"b\"\nid = 7\nqueue_depth = 128\nmax_io = \"1M\"\n"
        ))
        .expect("valid");
        assert_eq!(
            c.frontends.ublk,
            vec![
                UblkConfig {
                    array: 0,
                    volume: Some(VolumeRef::Name("data".into())),
                    id: 0,
                    read_only: false,
                    queue_depth: 64,
                    max_io: 512 << 10,
                },
                UblkConfig {
                    array: 1,
                    volume: None,
                    id: 7,
                    read_only: true,
                    queue_depth: 128,
                    max_io: 1 << 20,
                },
            ]
        );
        // An array that does not start takes its device along; the others are renumbered.
        let (left, notes) = c.without_arrays(&[0]);
        assert_eq!(left.frontends.ublk.len(), 1);
        assert_eq!(
            (left.frontends.ublk[0].array, left.frontends.ublk[0].id),
            (0, 7)
        );
        assert!(
            notes.iter().any(|n| n.contains("/dev/ublkb0 is not made")),
            "{notes:?}"
        );
        for (entry, want) in [
            ("array = \"zz\"", "no array named"),
            ("array = \"a\"\nqueue_depth = 0", "queue_depth = 0"),
            ("array = \"a\"\nqueue_depth = 5000", "queue_depth = 5000"),
            ("array = \"a\"\nmax_io = \"6K\"", "max_io"),
            ("array = \"a\"\nmax_io = \"8M\"", "max_io"),
            ("array = \"a\"\nid = 2000000", "id: at most"),
            ("array = \"a\"\nvolume = 0", "numbered from 1"),
            ("array = \"a\"\nsize = 3", "unknown field"),
        ] {
            let e = parse(&format!("{base}[[ublk]]\n{entry}\n")).unwrap_err();
            assert!(e.contains(want), "{entry}: {e}");
        }
        let e = parse(&format!(
            "{base}[[ublk]]\narray = \"a\"\nid = 1\n[[ublk]]\narray = \"b\"\n"
        ))
        .unwrap_err();
        assert!(e.contains("given twice"), "{e}");
        let e = parse(&format!(
            "threads = 4\nbuffer_memory = \"128M\"\n{base}[[ublk]]\narray = \"a\"\n\
             queue_depth = 64\nmax_io = \"1M\"\n[[ublk]]\narray = \"b\"\nqueue_depth = 64\nmax_io = \"1M\"\n"
        ))
        .unwrap_err();
        assert!(e.contains("more than buffer_memory"), "{e}");
    }

    #[test]
    fn explicit_exports_and_options() {
        let c = parse(
            r#"
            control_socket = "run/ctl.sock"
            threads = 3
            [nbd]
            listen = "[::1]:10900"
            max_in_flight = 8
            [[array]]
            name = "a"
            members = ["a0", "a1"]
            read_only = true
            start_dirty_degraded = true
            [[array]]
            name = "b"
            members = ["b0"]
            [[export]]
            name = "a-ro"
            array = "a"
            [[export]]
            name = "b"
            array = "b"
            description = "scratch"
            read_only = true
            "#,
        )
        .expect("valid");
        assert_eq!(c.control_socket, PathBuf::from("/etc/raidd/run/ctl.sock"));
        assert_eq!(c.threads, 3);
        assert_eq!(c.registered_buffers, DEFAULT_REGISTERED_BUFFERS);
        assert_eq!(c.poll, std::time::Duration::ZERO);
        assert_eq!(c.frontends.nbd.listen.port(), 10900);
        assert_eq!(c.frontends.nbd.max_in_flight, 8);
        assert_eq!(c.frontends.nbd.exports.len(), 2);
        assert!(
            c.frontends.nbd.exports[0].read_only,
            "an export of a read-only array is read-only"
        );
        assert!(c.frontends.nbd.exports[1].read_only);
        assert_eq!(c.frontends.nbd.exports[1].description, "scratch");
        assert!(c.arrays[0].start_dirty_degraded && !c.arrays[1].start_dirty_degraded);
        assert!(parse(
            "[[array]]\nname = \"a\"\nmembers = [\"x\"]\nstart_dirty_degraded = \"yes\"\n"
        )
        .is_err());
        assert_eq!(c.sync, raidd_engine::SyncLimits::default());
        assert!(c.spares.is_empty() && c.program.is_none());
    }

    #[test]
    fn spares_groups_speeds_and_the_event_program() {
        let c = parse(
            r#"
            [sync]
            speed_min = 5000
            speed_max = 90000
            [monitor]
            program = "hooks/event"
            [[spare]]
            path = "s0.img"
            [[spare]]
            path = "/abs/s1.img"
            group = "fast"
            [[array]]
            name = "a"
            members = ["a0", "a1"]
            spare_group = "fast"
            "#,
        )
        .expect("valid");
        assert_eq!((c.sync.min_kib_s, c.sync.max_kib_s), (5000, 90000));
        assert_eq!(c.program, Some(PathBuf::from("/etc/raidd/hooks/event")));
        assert_eq!(
            c.spares,
            vec![
                SpareConfig {
                    path: PathBuf::from("/etc/raidd/s0.img"),
                    group: None
                },
                SpareConfig {
                    path: PathBuf::from("/abs/s1.img"),
                    group: Some("fast".into())
                },
            ]
        );
        assert_eq!(c.arrays[0].spare_group.as_deref(), Some("fast"));
    }

    #[test]
    fn iscsi_is_off_unless_asked_and_defaults_to_a_target_per_array() {
        let c = parse("[[array]]\nname = \"Vol_1\"\nmembers = [\"x\"]\n").expect("valid");
        assert!(c.frontends.iscsi.is_none());
        let c =
            parse("[iscsi]\n[[array]]\nname = \"Vol_1\"\nmembers = [\"x\"]\nread_only = true\n")
                .expect("valid");
        let i = c.frontends.iscsi.expect("iscsi on");
        assert_eq!(
            i.listen,
            DEFAULT_ISCSI_LISTEN.parse::<SocketAddr>().expect("addr")
        );
        assert_eq!(i.targets.len(), 1);
        assert_eq!(i.targets[0].name, "iqn.2026-11.org.raidd:vol-1");
        assert!(check_iscsi_name(&i.targets[0].name).is_ok());
        assert_eq!(
            i.targets[0].luns,
            vec![LunConfig {
                lun: 0,
                array: 0,
                volume: None,
                read_only: true
            }]
        );
        assert_eq!(i.nop_interval, Some(std::time::Duration::from_secs(5)));
    }

    #[test]
    fn explicit_targets_with_chap_acls_and_luns() {
        let c = parse(
            r#"
            [iscsi]
            listen = "127.0.0.1:3261"
            state_dir = "state"
            nop_interval = 0
            discovery_chap = { user = "disc", secret = "discoverysecret" }
            [[array]]
            name = "a"
            members = ["a0"]
            [[array]]
            name = "b"
            members = ["b0"]
            [[target]]
            name = "iqn.2026-11.test:t1"
            initiators = ["iqn.2026-11.test:client"]
            chap = { user = "alice", secret = "alicesecret12" }
            mutual_chap = { user = "target", secret = "targetsecret1" }
            [[target.lun]]
            array = "b"
            [[target.lun]]
            lun = 7
            array = "a"
            read_only = true
            "#,
        )
        .expect("valid");
        let i = c.frontends.iscsi.expect("iscsi on");
        assert_eq!(i.listen.port(), 3261);
        assert_eq!(i.state_dir, PathBuf::from("/etc/raidd/state"));
        assert_eq!(i.nop_interval, None);
        assert_eq!(
            i.discovery_chap.as_ref().map(|c| c.user.as_str()),
            Some("disc")
        );
        let t = &i.targets[0];
        assert_eq!(t.initiators, vec!["iqn.2026-11.test:client".to_string()]);
        assert_eq!(t.chap.as_ref().map(|c| c.user.as_str()), Some("alice"));
        assert_eq!(
            t.luns,
            vec![
                LunConfig {
                    lun: 0,
                    array: 1,
                    volume: None,
                    read_only: false
                },
                LunConfig {
                    lun: 7,
                    array: 0,
                    volume: None,
                    read_only: true
                }
            ]
        );
    }

    #[test]
    fn bad_iscsi_configs_say_what_is_wrong() {
        let arr = "[[array]]\nname = \"a\"\nmembers = [\"x\"]\n";
        let cases = [
            ("[iscsi]\nlisten = \"nowhere\"\n", "not an address"),
            ("[[target]]\nname = \"Target\"\n[[target.lun]]\narray = \"a\"\n", "not an iSCSI name"),
            ("[[target]]\nname = \"iqn.2026-11.x:t\"\n", "no [[target.lun]]"),
            ("[[target]]\nname = \"iqn.2026-11.x:t\"\n[[target.lun]]\narray = \"zz\"\n", "no array named"),
            ("[[target]]\nname = \"iqn.2026-11.x:t\"\n[[target.lun]]\narray = \"a\"\n[[target.lun]]\nlun = 0\narray = \"a\"\n", "defined twice"),
            ("[[target]]\nname = \"iqn.2026-11.x:t\"\n[[target.lun]]\nlun = 99999\narray = \"a\"\n", "at most"),
            ("[[target]]\nname = \"iqn.2026-11.x:t\"\nchap = { user = \"u\", secret = \"short\" }\n[[target.lun]]\narray = \"a\"\n", "secret must be"),
            ("[[target]]\nname = \"iqn.2026-11.x:t\"\nmutual_chap = { user = \"u\", secret = \"longenoughsecret\" }\n[[target.lun]]\narray = \"a\"\n", "needs chap"),
            ("[[target]]\nname = \"iqn.2026-11.x:t\"\nchap = { user = \"u\", secret = \"longenoughsecret\" }\nmutual_chap = { user = \"t\", secret = \"longenoughsecret\" }\n[[target.lun]]\narray = \"a\"\n", "different secrets"),
            ("[[target]]\nname = \"iqn.2026-11.x:t\"\ninitiators = [\"bob\"]\n[[target.lun]]\narray = \"a\"\n", "initiator"),
            ("[iscsi]\nnop_interval = 100000\n", "nop_interval"),
        ];
        for (text, want) in cases {
            let text = format!("{arr}{text}");
            let e = parse(&text).expect_err(&text);
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn bad_configs_say_what_is_wrong() {
        let cases = [
            ("", "no [[array]]"),
            ("[[array]]\nname = \"a\"\nmembers = []\n", "no members"),
            ("[[array]]\nname = \"\"\nmembers = [\"x\"]\n", "empty name"),
            (
                "[[array]]\nname = \"a\"\nmembers = [\"x\"]\n[[array]]\nname = \"a\"\nmembers = [\"y\"]\n",
                "defined twice",
            ),
            (
                "[[array]]\nname = \"a\"\nmembers = [\"x\"]\n[[array]]\nname = \"b\"\nmembers = [\"x\"]\n",
                "named twice",
            ),
            (
                "[[array]]\nname = \"a\"\nmembers = [\"x\"]\n[[export]]\nname = \"e\"\narray = \"zz\"\n",
                "no array named",
            ),
            ("[nbd]\nlisten = \"localhost\"\n[[array]]\nname = \"a\"\nmembers = [\"x\"]\n", "not an address"),
            ("threads = 0\n[[array]]\nname = \"a\"\nmembers = [\"x\"]\n", "threads"),
            ("poll_us = 5000\n[[array]]\nname = \"a\"\nmembers = [\"x\"]\n", "poll_us"),
            ("registered_buffers = \"2G\"\n[[array]]\nname = \"a\"\nmembers = [\"x\"]\n", "registered_buffers"),
            ("registered_buffers = \"1K\"\n[[array]]\nname = \"a\"\nmembers = [\"x\"]\n", "registered_buffers"),
            ("registered_buffers = \"lots\"\n[[array]]\nname = \"a\"\nmembers = [\"x\"]\n", "registered_buffers"),
            ("[nbd]\nmax_in_flight = 0\n[[array]]\nname = \"a\"\nmembers = [\"x\"]\n", "max_in_flight"),
            ("bogus = 1\n[[array]]\nname = \"a\"\nmembers = [\"x\"]\n", "unknown field"),
            ("[[array]]\nname = \"a\nb\"\nmembers = [\"x\"]\n", ""),
            ("[[array]]\nname = \"a\\u0001\"\nmembers = [\"x\"]\n", "control"),
            ("[[array", ""),
            (
                "[sync]\nspeed_min = 10\nspeed_max = 5\n[[array]]\nname = \"a\"\nmembers = [\"x\"]\n",
                "speed_min",
            ),
            (
                "[[spare]]\npath = \"x\"\n[[array]]\nname = \"a\"\nmembers = [\"x\"]\n",
                "also named",
            ),
        ];
        for (text, want) in cases {
            let e = parse(text).expect_err(text);
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn stripe_cache_and_gather_per_array() {
        let c = parse(
            "[[array]]\nname = \"a\"\nmembers = [\"x\"]\nstripe_cache = \"4M\"\ngather = \"limit:16\"\n\
             write_alone = \"never\"\njournal_mode = \"write-back\"\n\
             [[array]]\nname = \"b\"\nmembers = [\"y\"]\n",
        )
        .expect("valid");
        assert_eq!(c.arrays[0].stripe_cache, 4 << 20);
        assert_eq!(c.arrays[0].gather, raidd_engine::Gather::Limit(16));
        assert_eq!(c.arrays[1].stripe_cache, raidd_engine::DEFAULT_CACHE_BYTES);
        assert_eq!(c.arrays[1].gather, raidd_engine::Gather::Plug);
        assert_eq!(c.arrays[0].write_alone, raidd_engine::Alone::Never);
        assert_eq!(c.arrays[1].write_alone, raidd_engine::Alone::Auto);
        assert_eq!(
            c.arrays[0].journal_mode,
            raidd_engine::JournalMode::WriteBack
        );
        assert_eq!(
            c.arrays[1].journal_mode,
            raidd_engine::JournalMode::WriteThrough
        );
        let none = parse("[[array]]\nname = \"a\"\nmembers = [\"x\"]\nstripe_cache = \"0\"\n")
            .expect("valid");
        assert_eq!(none.arrays[0].stripe_cache, 0);
        for (line, want) in [
            ("stripe_cache = \"lots\"", "stripe_cache \"lots\""),
            ("stripe_cache = \"1T\"", "up to 64G"),
            ("gather = \"sometimes\"", "unknown gather policy"),
            ("gather = \"limit:0\"", "unknown gather policy"),
            ("write_alone = \"sometimes\"", "write_alone: unknown policy"),
            (
                "journal_mode = \"write-around\"",
                "journal_mode: unknown journal mode",
            ),
        ] {
            let e = parse(&format!(
                "[[array]]\nname = \"a\"\nmembers = [\"x\"]\n{line}\n"
            ))
            .expect_err(line);
            assert!(e.contains(want) && e.contains("\"a\""), "{line}: {e}");
        }
    }
}
