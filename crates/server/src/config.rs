//! The daemon's configuration file (TOML): arrays by name with their members, exports, the
//! listening address and the control socket. Parsing and checking are pure; paths are
//! resolved against the file's directory so a config can travel with its image files.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use raidd_admin::volume::VolumeRef;
use serde::Deserialize;

/// Where NBD clients connect when the config names no address: loopback only.
pub const DEFAULT_NBD_LISTEN: &str = "127.0.0.1:10809";
pub use raidd_admin::control::DEFAULT_CONTROL_SOCKET;
/// Buffer memory registered with io_uring unless the config says otherwise: enough for
/// every request in flight of a busy server; pinned from the start.
pub const DEFAULT_REGISTERED_BUFFERS: usize = 64 << 20;

/// The file as written.
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
    /// Client connections open at once (NBD and iSCSI together).
    max_connections: Option<usize>,
    /// A request whose bytes stop arriving for this long closes its connection.
    request_timeout: Option<String>,
    /// Replies a client does not take for this long close its connection.
    send_timeout: Option<String>,
    /// A member I/O that does not complete in this time fails the member ("off": never).
    member_timeout: Option<String>,
    /// How long a stop waits for requests in flight before it closes the arrays anyway.
    drain_timeout: Option<String>,
    #[serde(default)]
    nbd: RawNbd,
    #[serde(default, rename = "array")]
    arrays: Vec<RawArray>,
    #[serde(default, rename = "export")]
    exports: Vec<RawExport>,
    #[serde(default)]
    sync: RawSync,
    #[serde(default)]
    monitor: RawMonitor,
    #[serde(default, rename = "spare")]
    spares: Vec<RawSpare>,
    iscsi: Option<RawIscsi>,
    #[serde(default, rename = "target")]
    targets: Vec<RawTarget>,
    http: Option<RawHttp>,
    #[serde(default, rename = "ublk")]
    ublk: Vec<RawUblk>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawUblk {
    array: String,
    /// A volume of the array (its name, or its number), instead of all of it.
    volume: Option<VolumeRef>,
    /// The device's number (/dev/ublkbN); absent: the entry's position among `[[ublk]]`.
    id: Option<u32>,
    #[serde(default)]
    read_only: bool,
    /// Requests in flight per queue (one queue per worker thread).
    queue_depth: Option<u16>,
    /// The largest request (a size): each in-flight request's buffer.
    max_io: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHttp {
    listen: Option<String>,
    /// Also emit node_exporter's `node_md_*` metrics.
    #[serde(default)]
    node_md_compat: bool,
    tls: Option<RawTls>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawIscsi {
    listen: Option<String>,
    /// Where persistent reservations are kept across restarts.
    state_dir: Option<PathBuf>,
    /// CHAP for discovery sessions.
    discovery_chap: Option<RawChap>,
    /// Seconds between NOP-In pings on an idle connection (0: never).
    nop_interval: Option<u64>,
    /// Buffer memory one connection's commands may hold (a size).
    connection_memory: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawChap {
    user: String,
    secret: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTarget {
    name: String,
    alias: Option<String>,
    /// Initiator IQNs allowed to log in; absent: everyone.
    initiators: Option<Vec<String>>,
    /// The initiator must authenticate with this name and secret.
    chap: Option<RawChap>,
    /// The target's own name and secret, for initiators that ask for mutual CHAP.
    mutual_chap: Option<RawChap>,
    #[serde(default, rename = "lun")]
    luns: Vec<RawLun>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLun {
    lun: Option<u64>,
    array: String,
    /// A volume of the array (its name, or its number), instead of all of it.
    volume: Option<VolumeRef>,
    #[serde(default)]
    read_only: bool,
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

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNbd {
    listen: Option<String>,
    /// Most requests a connection may have in flight.
    max_in_flight: Option<usize>,
    /// Buffer memory one connection's requests may hold (a size).
    connection_memory: Option<String>,
    /// A connection with nothing in flight and no request for this long is closed.
    idle_timeout: Option<String>,
    tls: Option<RawTls>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    certificate: PathBuf,
    key: PathBuf,
    #[serde(default)]
    require: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawArray {
    name: String,
    members: Vec<PathBuf>,
    #[serde(default)]
    read_only: bool,
    /// Only spares of this group may replace this array's members.
    spare_group: Option<String>,
    /// RAID4/5/6: bytes of stripe contents kept for later writes ("16M"; "0": none).
    stripe_cache: Option<String>,
    /// RAID4/5/6: how partial-stripe writes gather company (none, plug, limit, limit:N).
    gather: Option<String>,
    /// RAID4/5/6: whether small writes on an idle stripe skip the cache (auto, always,
    /// never).
    write_alone: Option<String>,
    /// RAID4/5/6: start even if stopped uncleanly and degraded (data may read back wrong).
    #[serde(default)]
    start_dirty_degraded: bool,
    /// md's safe_mode_delay: idle time after which the array is marked clean ("200ms",
    /// "2s"; "off": only at a clean stop).
    safe_mode_delay: Option<String>,
    /// Seed 000's DMA-aligned buffer in front of the members: its memory ("64M"; "0", the
    /// default: none), its block ("128K"), and how writes pass it ("write-through").
    dab: Option<String>,
    dab_block: Option<String>,
    dab_mode: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExport {
    name: String,
    array: String,
    /// A volume of the array (its name, or its number), instead of all of it.
    volume: Option<VolumeRef>,
    #[serde(default)]
    read_only: bool,
    description: Option<String>,
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
    pub nbd: NbdConfig,
    pub arrays: Vec<ArrayConfig>,
    pub exports: Vec<ExportConfig>,
    pub sync: raidd_engine::SyncLimits,
    /// Program run on events (failures, rebuilds, mismatches).
    pub program: Option<PathBuf>,
    /// The hot-spare pool shared by all arrays.
    pub spares: Vec<SpareConfig>,
    /// The iSCSI target, when the config has an `[iscsi]` section or `[[target]]`s.
    pub iscsi: Option<IscsiConfig>,
    /// What clients and members may make the server hold, and for how long.
    pub limits: Limits,
    /// The metrics, API and dashboard listener, when the config has an `[http]` section.
    pub http: Option<HttpConfig>,
    /// Arrays and volumes served as local block devices (`[[ublk]]`).
    pub ublk: Vec<UblkConfig>,
}

/// `[[ublk]]`: an array or a volume as /dev/ublkbN while the daemon runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UblkConfig {
    /// Index into [`Config::arrays`].
    pub array: usize,
    pub volume: Option<VolumeRef>,
    pub id: u32,
    pub read_only: bool,
    pub queue_depth: u16,
    pub max_io: u32,
}

/// ublk's limits on a queue: its tags are 16 bits, and the kernel takes at most this many.
const UBLK_DEPTH: std::ops::RangeInclusive<u16> = 1..=1024;
/// Each request in flight holds a buffer of `max_io` bytes: 4 KiB to 4 MiB.
const UBLK_MAX_IO: std::ops::RangeInclusive<u64> = 4096..=(4 << 20);
/// Device numbers the kernel gives (it allocates below 2^20).
const UBLK_MAX_ID: u32 = (1 << 20) - 1;

/// `[http]`: where the metrics endpoint, the JSON API and the dashboard listen.
#[derive(Clone, Debug, PartialEq)]
pub struct HttpConfig {
    pub listen: SocketAddr,
    /// Also emit node_exporter's mdadm collector metrics (`node_md_*`) for each array.
    pub node_md_compat: bool,
    pub tls: Option<TlsConfig>,
}

/// Where `[http]` listens unless it says: loopback only.
pub const DEFAULT_HTTP_LISTEN: &str = "127.0.0.1:9810";

/// What clients and members may make the server hold, and for how long. Every one has a
/// default; the README lists them.
#[derive(Clone, Debug, PartialEq)]
pub struct Limits {
    /// Bytes of request and reply buffers all connections together may hold.
    pub buffer_memory: u64,
    /// Client connections (NBD and iSCSI) open at once; more are refused.
    pub max_connections: usize,
    /// Bytes one NBD connection's requests may hold.
    pub nbd_connection_memory: u64,
    /// Bytes one iSCSI connection's commands may hold.
    pub iscsi_connection_memory: u64,
    /// A request whose bytes stop arriving for this long closes its connection.
    pub request_timeout: Duration,
    /// Replies a client does not take for this long close its connection.
    pub send_timeout: Duration,
    /// An NBD connection idle this long is closed; `None`: never.
    pub nbd_idle_timeout: Option<Duration>,
    /// A member I/O that does not complete in this time fails the member; `None`: never.
    pub member_timeout: Option<Duration>,
    /// How long a stop waits for the requests in flight before it closes the arrays anyway
    /// (those with writes still in flight stay marked unclean).
    pub drain_timeout: Duration,
}

/// The largest request either protocol takes (NBD's maximum block size, iSCSI's MAXIMUM
/// TRANSFER LENGTH): what every connection's memory must hold at least.
pub const MAX_REQUEST: u64 = 32 << 20;
/// Client connections unless the config says otherwise.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Each NBD and iSCSI connection's buffer memory unless the config says otherwise.
pub const DEFAULT_NBD_CONNECTION_MEMORY: u64 = 64 << 20;
pub const DEFAULT_ISCSI_CONNECTION_MEMORY: u64 = 128 << 20;
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

/// A size key, or its default; `what` names it in the error.
fn size_key(
    what: &str,
    text: Option<&str>,
    default: u64,
    range: std::ops::RangeInclusive<u64>,
) -> Result<u64, String> {
    let Some(t) = text else { return Ok(default) };
    raidd_admin::size::parse_size(t)
        .ok()
        .filter(|b| range.contains(b))
        .ok_or_else(|| {
            format!(
                "{what} = {t:?}: not a size from {} to {}",
                raidd_admin::size::human(*range.start()),
                raidd_admin::size::human(*range.end())
            )
        })
}

/// A time-limit key ("30s"), or its default; "off" only where `off_ok`.
fn delay_key(
    what: &str,
    text: Option<&str>,
    default: Option<Duration>,
    off_ok: bool,
) -> Result<Option<Duration>, String> {
    let Some(t) = text else { return Ok(default) };
    match parse_delay(t).map_err(|e| format!("{what} {e}"))? {
        None if !off_ok => Err(format!("{what} = {t:?}: must be a delay, not off")),
        d => Ok(d),
    }
}

impl Limits {
    fn parse(raw: &RawConfig) -> Result<Limits, String> {
        let max_connections = raw.max_connections.unwrap_or(DEFAULT_MAX_CONNECTIONS);
        if !(1..=MAX_CONNECTIONS).contains(&max_connections) {
            return Err(format!(
                "max_connections = {max_connections}: must be 1..={MAX_CONNECTIONS}"
            ));
        }
        let conn = MAX_REQUEST..=MAX_MEMORY;
        let nbd_connection_memory = size_key(
            "nbd.connection_memory",
            raw.nbd.connection_memory.as_deref(),
            DEFAULT_NBD_CONNECTION_MEMORY,
            conn.clone(),
        )?;
        let iscsi_connection_memory = size_key(
            "iscsi.connection_memory",
            raw.iscsi
                .as_ref()
                .and_then(|i| i.connection_memory.as_deref()),
            DEFAULT_ISCSI_CONNECTION_MEMORY,
            conn,
        )?;
        let floor = nbd_connection_memory.max(iscsi_connection_memory);
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
            nbd_connection_memory,
            iscsi_connection_memory,
            request_timeout: delay(
                "request_timeout",
                &raw.request_timeout,
                DEFAULT_REQUEST_TIMEOUT,
            )?,
            send_timeout: delay("send_timeout", &raw.send_timeout, DEFAULT_SEND_TIMEOUT)?,
            drain_timeout: delay("drain_timeout", &raw.drain_timeout, DEFAULT_DRAIN_TIMEOUT)?,
            nbd_idle_timeout: delay_key(
                "nbd.idle_timeout",
                raw.nbd.idle_timeout.as_deref(),
                None,
                true,
            )?,
            member_timeout: delay_key(
                "member_timeout",
                raw.member_timeout.as_deref(),
                Some(DEFAULT_MEMBER_TIMEOUT),
                true,
            )?,
        })
    }
}

/// How long an array is idle before it is marked clean, unless the config says otherwise
/// (md's default safe_mode_delay).
pub const DEFAULT_SAFE_MODE_DELAY: std::time::Duration = std::time::Duration::from_millis(200);

/// A delay as the config writes it: "200ms", "2s", "1.5s", or "off" (also "0": never).
fn parse_delay(text: &str) -> Result<Option<std::time::Duration>, String> {
    let t = text.trim();
    if t == "off" || t == "0" {
        return Ok(None);
    }
    let (number, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else {
        return Err(format!(
            "{text:?}: expected a delay with its unit (\"200ms\", \"2s\") or \"off\""
        ));
    };
    match number.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v * scale <= 3600.0 => {
            Ok(Some(std::time::Duration::from_secs_f64(v * scale)))
        }
        _ => Err(format!(
            "{text:?}: expected a delay above 0 and at most an hour (\"200ms\", \"2s\") or \"off\""
        )),
    }
}

/// Where iSCSI initiators connect when the config names no address: loopback only.
pub const DEFAULT_ISCSI_LISTEN: &str = "127.0.0.1:3260";
/// Where persistent reservations live when the config names no directory.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/raidd";
/// Prefix of the target names raidd makes up for arrays when no `[[target]]` is given.
pub const DEFAULT_IQN_PREFIX: &str = "iqn.2026-11.org.raidd:";

#[derive(Clone, Debug, PartialEq)]
pub struct IscsiConfig {
    pub listen: SocketAddr,
    pub state_dir: PathBuf,
    pub discovery_chap: Option<ChapConfig>,
    pub nop_interval: Option<std::time::Duration>,
    pub targets: Vec<TargetConfig>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChapConfig {
    pub user: String,
    pub secret: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TargetConfig {
    pub name: String,
    pub alias: Option<String>,
    /// Empty: every initiator may log in.
    pub initiators: Vec<String>,
    pub chap: Option<ChapConfig>,
    pub mutual_chap: Option<ChapConfig>,
    pub luns: Vec<LunConfig>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LunConfig {
    pub lun: u64,
    /// Index into [`Config::arrays`].
    pub array: usize,
    /// The volume of it served; `None`: all of it.
    pub volume: Option<VolumeRef>,
    pub read_only: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct SpareConfig {
    pub path: PathBuf,
    /// Restricts the spare to arrays of this spare group; `None`: any array.
    pub group: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct NbdConfig {
    pub listen: SocketAddr,
    pub max_in_flight: usize,
    pub tls: Option<TlsConfig>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TlsConfig {
    pub certificate: PathBuf,
    pub key: PathBuf,
    /// Refuse clients that do not upgrade with STARTTLS.
    pub require: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ArrayConfig {
    pub name: String,
    /// Every leaf member (for nested arrays: the members of the inner arrays).
    pub members: Vec<PathBuf>,
    pub read_only: bool,
    pub spare_group: Option<String>,
    /// The RAID4/5/6 stripe cache's size in bytes and gathering policy.
    pub stripe_cache: usize,
    pub gather: raidd_engine::Gather,
    /// Whether small writes that find their stripe idle skip the stripe cache.
    pub write_alone: raidd_engine::Alone,
    /// Start the array even if it was stopped uncleanly and is degraded (RAID4/5/6).
    pub start_dirty_degraded: bool,
    /// Mark the array clean once no write has started for this long (md's safe mode);
    /// `None`: only at a clean stop.
    pub safe_mode_delay: Option<std::time::Duration>,
    /// A DMA-aligned buffer in front of the members (write-through).
    pub dab: Option<raidd_admin::session::DabSetting>,
}

impl ArrayConfig {
    /// How the array is started (`start_dirty_degraded`), its members' I/O failing after
    /// `member_timeout`.
    pub fn start(&self, member_timeout: Option<Duration>) -> raidd_admin::session::Start {
        raidd_admin::session::Start {
            dirty_degraded: self.start_dirty_degraded,
            member_timeout,
            dab: self.dab,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct ExportConfig {
    pub name: String,
    /// Index into [`Config::arrays`].
    pub array: usize,
    /// The volume of it served; `None`: all of it.
    pub volume: Option<VolumeRef>,
    pub read_only: bool,
    pub description: String,
}

/// Bounds on `nbd.max_in_flight`: at least one request, and not so many that a client
/// can pin unbounded server memory (payload is bounded separately).
const MAX_IN_FLIGHT: std::ops::RangeInclusive<usize> = 1..=1024;
const MAX_THREADS: usize = 256;
/// Bounds on the memory and connection keys (far above any machine raidd runs on, low
/// enough that sums of them cannot overflow).
const MAX_MEMORY: u64 = 1 << 40;
const MAX_CONNECTIONS: usize = 1 << 20;
/// Polling longer than this saves nothing a sleep would cost and burns a core.
const MAX_POLL_US: u64 = 1000;
/// NBD export names are at most 4096 bytes (the spec's limit on strings).
const MAX_NAME: usize = 4096;

fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(4)
}

impl Config {
    /// The configuration without the arrays at indices `gone` (arrays that could not be
    /// started): their exports and iSCSI LUNs go too, and targets left without a LUN. The
    /// other indices are renumbered. Returns what was left out, a line each.
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
        c.exports = Vec::new();
        for e in &self.exports {
            match kept[e.array] {
                Some(array) => c.exports.push(ExportConfig { array, ..e.clone() }),
                None => notes.push(format!(
                    "export {:?} is not offered: its array {:?} did not start",
                    e.name, self.arrays[e.array].name
                )),
            }
        }
        c.ublk = Vec::new();
        for u in &self.ublk {
            match kept[u.array] {
                Some(array) => c.ublk.push(UblkConfig { array, ..u.clone() }),
                None => notes.push(format!(
                    "/dev/ublkb{} is not made: its array {:?} did not start",
                    u.id, self.arrays[u.array].name
                )),
            }
        }
        if let Some(ic) = c.iscsi.as_mut() {
            let mut targets = Vec::new();
            for t in &ic.targets {
                let mut t = t.clone();
                t.luns.retain_mut(|l| match kept[l.array] {
                    Some(array) => {
                        l.array = array;
                        true
                    }
                    None => {
                        notes.push(format!(
                            "iSCSI target {} LUN {} is not offered: its array {:?} did not start",
                            t.name, l.lun, self.arrays[l.array].name
                        ));
                        false
                    }
                });
                if t.luns.is_empty() {
                    notes.push(format!(
                        "iSCSI target {} is not offered: it has no LUN left",
                        t.name
                    ));
                } else {
                    targets.push(t);
                }
            }
            ic.targets = targets;
        }
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
        let raw: RawConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        let limits = Limits::parse(&raw)?;
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
        let nbd = nbd_config(raw.nbd, &resolve)?;
        if raw.arrays.is_empty() {
            return Err("no [[array]] defined: there is nothing to serve".into());
        }
        let mut all_members = HashSet::new();
        let arrays = arrays_config(raw.arrays, &mut all_members, &resolve)?;
        let exports = exports_config(raw.exports, &arrays)?;
        let sync = sync_limits(&raw.sync)?;
        let spares = spares_config(raw.spares, &mut all_members, &resolve)?;
        let iscsi = if raw.iscsi.is_some() || !raw.targets.is_empty() {
            Some(iscsi_config(
                raw.iscsi.unwrap_or_default(),
                raw.targets,
                &arrays,
                &resolve,
            )?)
        } else {
            None
        };

        let http = raw.http.map(|h| http_config(h, &resolve)).transpose()?;
        let ublk = ublk_config(raw.ublk, &arrays)?;
        check_ublk_memory(&ublk, threads, &limits)?;
        Ok(Config {
            ublk,
            http,
            iscsi,
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
            nbd,
            arrays,
            exports,
            limits,
        })
    }
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

fn nbd_config(raw: RawNbd, resolve: &dyn Fn(PathBuf) -> PathBuf) -> Result<NbdConfig, String> {
    let listen_text = raw.listen.as_deref().unwrap_or(DEFAULT_NBD_LISTEN);
    let listen: SocketAddr = listen_text.parse().map_err(|_| {
        format!("nbd.listen = {listen_text:?}: not an address:port (e.g. \"127.0.0.1:10809\")")
    })?;
    let max_in_flight = raw.max_in_flight.unwrap_or(64);
    if !MAX_IN_FLIGHT.contains(&max_in_flight) {
        return Err(format!(
            "nbd.max_in_flight = {max_in_flight}: must be {}..={}",
            MAX_IN_FLIGHT.start(),
            MAX_IN_FLIGHT.end()
        ));
    }
    let tls = raw.tls.map(|t| TlsConfig {
        certificate: resolve(t.certificate),
        key: resolve(t.key),
        require: t.require,
    });
    Ok(NbdConfig {
        listen,
        max_in_flight,
        tls,
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
    Ok(HttpConfig {
        listen,
        node_md_compat: raw.node_md_compat,
        tls: raw.tls.map(|t| TlsConfig {
            certificate: resolve(t.certificate),
            key: resolve(t.key),
            require: t.require,
        }),
    })
}

/// The arrays, each checked; `all_members` collects their members (no two arrays share
/// one).
fn arrays_config(
    raw: Vec<RawArray>,
    all_members: &mut HashSet<PathBuf>,
    resolve: &dyn Fn(PathBuf) -> PathBuf,
) -> Result<Vec<ArrayConfig>, String> {
    let mut names = HashSet::new();
    let mut arrays = Vec::with_capacity(raw.len());
    for a in raw {
        check_name("array", &a.name)?;
        if !names.insert(a.name.clone()) {
            return Err(format!("array {:?} is defined twice", a.name));
        }
        if a.members.is_empty() {
            return Err(format!("array {:?} has no members", a.name));
        }
        let members: Vec<PathBuf> = a.members.iter().cloned().map(resolve).collect();
        for m in &members {
            if !all_members.insert(m.clone()) {
                return Err(format!(
                    "member {} is named twice (arrays cannot share members)",
                    m.display()
                ));
            }
        }
        arrays.push(array_config(a, members)?);
    }
    Ok(arrays)
}

/// One array's settings past its name and members.
fn array_config(a: RawArray, members: Vec<PathBuf>) -> Result<ArrayConfig, String> {
    if let Some(g) = &a.spare_group {
        check_name("spare group", g)?;
    }
    let stripe_cache = match &a.stripe_cache {
        None => raidd_engine::DEFAULT_CACHE_BYTES,
        Some(t) => raidd_admin::size::parse_size(t)
            .ok()
            .and_then(|b| usize::try_from(b).ok())
            .filter(|&b| b <= 64 << 30)
            .ok_or_else(|| {
                format!(
                    "array {:?}: stripe_cache {t:?} is not a size up to 64G (like \"16M\", or \"0\" for none)",
                    a.name
                )
            })?,
    };
    let gather = match &a.gather {
        None => raidd_engine::Gather::Plug,
        Some(g) => g
            .parse::<raidd_engine::Gather>()
            .map_err(|e| format!("array {:?}: {e}", a.name))?,
    };
    let write_alone = match &a.write_alone {
        None => raidd_engine::Alone::Auto,
        Some(w) => w
            .parse::<raidd_engine::Alone>()
            .map_err(|e| format!("array {:?}: write_alone: {e}", a.name))?,
    };
    let safe_mode_delay = match a.safe_mode_delay.as_deref() {
        None => Some(DEFAULT_SAFE_MODE_DELAY),
        Some(t) => {
            parse_delay(t).map_err(|e| format!("array {:?}: safe_mode_delay {e}", a.name))?
        }
    };
    let dab = dab_config(&a)?;
    Ok(ArrayConfig {
        name: a.name,
        members,
        read_only: a.read_only,
        spare_group: a.spare_group,
        stripe_cache,
        gather,
        write_alone,
        start_dirty_degraded: a.start_dirty_degraded,
        safe_mode_delay,
        dab,
    })
}

/// An array's `dab`, `dab_block` and `dab_mode`: none unless `dab` is a size above zero.
fn dab_config(a: &RawArray) -> Result<Option<raidd_admin::session::DabSetting>, String> {
    let size = |key: &str, t: &str, max: u64| {
        raidd_admin::size::parse_size(t)
            .ok()
            .filter(|&b| b <= max)
            .ok_or_else(|| format!("array {:?}: {key} {t:?} is not a size up to {max}", a.name))
    };
    let budget = match &a.dab {
        None => 0,
        Some(t) => size("dab", t, 64 << 30)?,
    };
    let block = match &a.dab_block {
        None => None,
        Some(t) if t == "auto" => None,
        Some(t) => {
            let b = size("dab_block", t, 64 << 20)?;
            if !b.is_power_of_two() || b < 4096 {
                return Err(format!(
                    "array {:?}: dab_block must be a power of two from 4K to 64M, or \"auto\"",
                    a.name
                ));
            }
            Some(b)
        }
    };
    let mode = match a.dab_mode.as_deref() {
        None | Some("write-through") => raidd_engine::member::DabMode::WriteThrough,
        Some("write-back") => raidd_engine::member::DabMode::WriteBack,
        Some(m) => {
            return Err(format!(
                "array {:?}: dab_mode {m:?}: write-through or write-back",
                a.name
            ))
        }
    };
    if budget == 0 {
        return Ok(None);
    }
    if budget < block.unwrap_or(4096) {
        return Err(format!(
            "array {:?}: dab must hold at least one dab_block (4K at least)",
            a.name
        ));
    }
    Ok(Some(raidd_admin::session::DabSetting {
        budget,
        block,
        mode,
    }))
}

/// The exports; with no `[[export]]` at all, every array under its own name.
fn exports_config(
    raw: Vec<RawExport>,
    arrays: &[ArrayConfig],
) -> Result<Vec<ExportConfig>, String> {
    if raw.is_empty() {
        return Ok(arrays
            .iter()
            .enumerate()
            .map(|(i, a)| ExportConfig {
                name: a.name.clone(),
                array: i,
                volume: None,
                read_only: a.read_only,
                description: String::new(),
            })
            .collect());
    }
    let mut exports = Vec::new();
    let mut export_names = HashSet::new();
    for e in raw {
        check_name("export", &e.name)?;
        if !export_names.insert(e.name.clone()) {
            return Err(format!("export {:?} is defined twice", e.name));
        }
        let array = arrays
            .iter()
            .position(|a| a.name == e.array)
            .ok_or_else(|| format!("export {:?}: no array named {:?}", e.name, e.array))?;
        let description = e.description.unwrap_or_default();
        if description.len() > MAX_NAME {
            return Err(format!(
                "export {:?}: description longer than {MAX_NAME} bytes",
                e.name
            ));
        }
        check_volume_ref(e.volume.as_ref()).map_err(|m| format!("export {:?}: {m}", e.name))?;
        exports.push(ExportConfig {
            name: e.name,
            array,
            volume: e.volume,
            read_only: e.read_only || arrays[array].read_only,
            description,
        });
    }
    Ok(exports)
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

/// LUN numbers as SAM's flat or peripheral addressing can carry them (14 bits).
const MAX_LUN: u64 = 16383;
/// CHAP secrets: RFC 7143 asks for at least 12 bytes; 255 is what initiators accept.
const CHAP_SECRET: std::ops::RangeInclusive<usize> = 12..=255;

fn chap(what: &str, c: RawChap) -> Result<ChapConfig, String> {
    if c.user.is_empty() || c.user.len() > 255 || c.user.chars().any(char::is_control) {
        return Err(format!(
            "{what}: user must be 1..=255 bytes without control characters"
        ));
    }
    if !CHAP_SECRET.contains(&c.secret.len()) {
        return Err(format!(
            "{what}: secret must be {}..={} bytes (RFC 7143 asks for at least 12)",
            CHAP_SECRET.start(),
            CHAP_SECRET.end()
        ));
    }
    Ok(ChapConfig {
        user: c.user,
        secret: c.secret,
    })
}

/// An iSCSI name as RFC 7143 4.2.7 allows: `iqn.`, `eui.` or `naa.` forms, at most 223
/// bytes, lower case letters, digits, `.`, `-` and `:`.
pub fn check_iscsi_name(name: &str) -> Result<(), String> {
    let ok_chars = name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-.:".contains(&b));
    let ok_form = ["iqn.", "eui.", "naa."].iter().any(|p| name.starts_with(p));
    if name.len() > 223 || !ok_chars || !ok_form {
        return Err(format!(
            "{name:?} is not an iSCSI name (iqn.YYYY-MM.reversed.domain[:id], at most 223 \
             bytes of a-z 0-9 . - :)"
        ));
    }
    Ok(())
}

/// The target name raidd gives an array when the config names no targets.
pub fn default_target_name(array: &str) -> String {
    let id: String = array
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!("{DEFAULT_IQN_PREFIX}{id}")
}

fn iscsi_config(
    raw: RawIscsi,
    targets: Vec<RawTarget>,
    arrays: &[ArrayConfig],
    resolve: &dyn Fn(PathBuf) -> PathBuf,
) -> Result<IscsiConfig, String> {
    let listen_text = raw.listen.as_deref().unwrap_or(DEFAULT_ISCSI_LISTEN);
    let listen: SocketAddr = listen_text.parse().map_err(|_| {
        format!("iscsi.listen = {listen_text:?}: not an address:port (e.g. \"127.0.0.1:3260\")")
    })?;
    let discovery_chap = raw
        .discovery_chap
        .map(|c| chap("iscsi.discovery_chap", c))
        .transpose()?;
    let nop_interval = match raw.nop_interval {
        None => Some(std::time::Duration::from_secs(5)),
        Some(0) => None,
        Some(s) if s <= 3600 => Some(std::time::Duration::from_secs(s)),
        Some(s) => return Err(format!("iscsi.nop_interval = {s}: at most 3600 seconds")),
    };
    let mut out = Vec::new();
    if targets.is_empty() {
        for (i, a) in arrays.iter().enumerate() {
            out.push(TargetConfig {
                name: default_target_name(&a.name),
                alias: Some(a.name.clone()),
                initiators: Vec::new(),
                chap: None,
                mutual_chap: None,
                luns: vec![LunConfig {
                    lun: 0,
                    array: i,
                    volume: None,
                    read_only: a.read_only,
                }],
            });
        }
    }
    for t in targets {
        check_iscsi_name(&t.name).map_err(|e| format!("target {e}"))?;
        if out.iter().any(|o: &TargetConfig| o.name == t.name) {
            return Err(format!("target {:?} is defined twice", t.name));
        }
        out.push(target_config(t, arrays)?);
    }
    Ok(IscsiConfig {
        listen,
        state_dir: raw
            .state_dir
            .map(resolve)
            .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR)),
        discovery_chap,
        nop_interval,
        targets: out,
    })
}

/// One `[[target]]` past its name: alias, initiators, CHAP and LUNs.
fn target_config(t: RawTarget, arrays: &[ArrayConfig]) -> Result<TargetConfig, String> {
    let what = |s: &str| format!("target {:?}: {s}", t.name);
    if let Some(a) = &t.alias {
        check_name("target alias", a)?;
    }
    let initiators = t.initiators.unwrap_or_default();
    for i in &initiators {
        check_iscsi_name(i).map_err(|e| what(&format!("initiator {e}")))?;
    }
    let c = t.chap.map(|c| chap(&what("chap"), c)).transpose()?;
    let m = t
        .mutual_chap
        .map(|c| chap(&what("mutual_chap"), c))
        .transpose()?;
    if m.is_some() && c.is_none() {
        return Err(what(
            "mutual_chap needs chap (the initiator authenticates first)",
        ));
    }
    if let (Some(c), Some(m)) = (&c, &m) {
        if c.secret == m.secret {
            return Err(what("chap and mutual_chap must have different secrets"));
        }
    }
    if t.luns.is_empty() {
        return Err(what("no [[target.lun]]"));
    }
    let mut luns: Vec<LunConfig> = Vec::new();
    for (n, l) in t.luns.into_iter().enumerate() {
        let lun = l.lun.unwrap_or(n as u64);
        if lun > MAX_LUN {
            return Err(what(&format!("lun {lun}: at most {MAX_LUN}")));
        }
        if luns.iter().any(|o| o.lun == lun) {
            return Err(what(&format!("lun {lun} is defined twice")));
        }
        let array = arrays
            .iter()
            .position(|a| a.name == l.array)
            .ok_or_else(|| what(&format!("lun {lun}: no array named {:?}", l.array)))?;
        check_volume_ref(l.volume.as_ref()).map_err(|m| what(&format!("lun {lun}: {m}")))?;
        luns.push(LunConfig {
            lun,
            array,
            volume: l.volume,
            read_only: l.read_only || arrays[array].read_only,
        });
    }
    Ok(TargetConfig {
        name: t.name,
        alias: t.alias,
        initiators,
        chap: c,
        mutual_chap: m,
        luns,
    })
}

/// The `[[ublk]]` entries, checked: a known array, a device number given once, limits in
/// range.
fn ublk_config(raw: Vec<RawUblk>, arrays: &[ArrayConfig]) -> Result<Vec<UblkConfig>, String> {
    let mut out: Vec<UblkConfig> = Vec::new();
    for (n, u) in raw.into_iter().enumerate() {
        let id = u.id.unwrap_or(n as u32);
        let what = |m: &str| format!("[[ublk]] {id}: {m}");
        if id > UBLK_MAX_ID {
            return Err(what(&format!("id: at most {UBLK_MAX_ID}")));
        }
        if out.iter().any(|o| o.id == id) {
            return Err(what("the device number is given twice"));
        }
        let array = arrays
            .iter()
            .position(|a| a.name == u.array)
            .ok_or_else(|| what(&format!("no array named {:?}", u.array)))?;
        check_volume_ref(u.volume.as_ref()).map_err(|m| what(&m))?;
        let queue_depth = u.queue_depth.unwrap_or(64);
        if !UBLK_DEPTH.contains(&queue_depth) {
            return Err(what(&format!("queue_depth = {queue_depth}: 1 to 1024")));
        }
        let max_io = match u.max_io.as_deref() {
            None => 512 << 10,
            Some(t) => raidd_admin::size::parse_size(t)
                .ok()
                .filter(|b| UBLK_MAX_IO.contains(b) && b.is_multiple_of(4096))
                .ok_or_else(|| what(&format!("max_io = {t:?}: 4K to 4M, in whole 4K pages")))?
                as u32,
        };
        out.push(UblkConfig {
            array,
            volume: u.volume,
            id,
            read_only: u.read_only || arrays[array].read_only,
            queue_depth,
            max_io,
        });
    }
    Ok(out)
}

/// The bytes of buffers the ublk devices hold.
fn ublk_buffer_bytes(ublk: &[UblkConfig], threads: usize) -> u64 {
    ublk.iter()
        .map(|u| u64::from(u.queue_depth) * u64::from(u.max_io) * threads as u64)
        .sum()
}

impl Config {
    /// What the connections may hold: the buffer budget less what the ublk devices hold.
    pub fn connection_buffer_memory(&self) -> u64 {
        self.limits
            .buffer_memory
            .saturating_sub(ublk_buffer_bytes(&self.ublk, self.threads))
    }
}

/// ublk's buffers are held for the devices' life (one of `max_io` bytes per tag, `queue_depth`
/// tags per queue, a queue per worker thread): together they must fit the server's buffer
/// budget, so a config cannot make raidd hold unbounded memory.
fn check_ublk_memory(ublk: &[UblkConfig], threads: usize, limits: &Limits) -> Result<(), String> {
    let held = ublk_buffer_bytes(ublk, threads);
    // What is left must still let one connection of either protocol work.
    let one = limits
        .nbd_connection_memory
        .max(limits.iscsi_connection_memory);
    if held.saturating_add(one) > limits.buffer_memory {
        return Err(format!(
            "[[ublk]] buffers would take {held} bytes (queue_depth x max_io x {threads} \
             threads, summed over the devices): with one connection's {one} bytes, more than \
             buffer_memory ({} bytes); lower them or raise buffer_memory",
            limits.buffer_memory
        ));
    }
    Ok(())
}

/// Checks a volume named in an export or a LUN: a name a volume can have, or a number from 1.
fn check_volume_ref(r: Option<&VolumeRef>) -> Result<(), String> {
    match r {
        None => Ok(()),
        Some(VolumeRef::Number(0)) => Err("volume 0: volumes are numbered from 1".into()),
        Some(VolumeRef::Number(_)) => Ok(()),
        Some(VolumeRef::Name(n)) => raidd_admin::volume::check_name(n),
    }
}

/// Checks a spare group name given at run time (`raidd spare add --group`).
pub fn check_spare_group(name: &str) -> Result<(), String> {
    check_name("spare group", name)
}

fn check_name(what: &str, name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err(format!("an {what} has an empty name"));
    }
    if name.len() > MAX_NAME {
        return Err(format!("{what} name longer than {MAX_NAME} bytes"));
    }
    if name.chars().any(char::is_control) {
        return Err(format!("{what} name {name:?} contains control characters"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
            .exports
            .iter()
            .map(|e| (e.name.as_str(), left.arrays[e.array].name.as_str()))
            .collect();
        assert_eq!(exports, [("ec", "c"), ("ea", "a")]);
        let targets = &left.iscsi.as_ref().expect("iscsi").targets;
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
            c.nbd.listen,
            DEFAULT_NBD_LISTEN.parse::<SocketAddr>().expect("addr")
        );
        assert!(c.nbd.listen.ip().is_loopback());
        assert_eq!(
            c.arrays[0].members,
            vec![
                PathBuf::from("/etc/raidd/d0.img"),
                PathBuf::from("/abs/d1.img")
            ]
        );
        assert_eq!(c.exports.len(), 1);
        assert_eq!((c.exports[0].name.as_str(), c.exports[0].array), ("vol", 0));
        assert_eq!(c.control_socket, PathBuf::from(DEFAULT_CONTROL_SOCKET));
        assert!(c.threads >= 1);
    }

    #[test]
    fn limits_have_defaults_bounds_and_off_only_where_it_makes_sense() {
        let base = "[[array]]\nname = \"a\"\nmembers = [\"x\"]\n";
        let d = parse(base).expect("valid").limits;
        assert_eq!(d.max_connections, DEFAULT_MAX_CONNECTIONS);
        assert_eq!(d.nbd_connection_memory, DEFAULT_NBD_CONNECTION_MEMORY);
        assert_eq!(d.iscsi_connection_memory, DEFAULT_ISCSI_CONNECTION_MEMORY);
        assert_eq!(d.buffer_memory, default_buffer_memory());
        assert!((256 << 20..=4 << 30).contains(&d.buffer_memory));
        assert_eq!(d.request_timeout, DEFAULT_REQUEST_TIMEOUT);
        assert_eq!(d.send_timeout, DEFAULT_SEND_TIMEOUT);
        assert_eq!(d.drain_timeout, DEFAULT_DRAIN_TIMEOUT);
        assert_eq!(d.member_timeout, Some(DEFAULT_MEMBER_TIMEOUT));
        assert_eq!(
            d.nbd_idle_timeout, None,
            "kernel clients keep idle connections"
        );
        let with =
            |top: &str, nbd: &str| parse(&format!("{top}\n{base}[nbd]\n{nbd}\n")).map(|c| c.limits);
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
        assert_eq!(
            (l.buffer_memory, l.max_connections, l.nbd_connection_memory),
            (512 << 20, 10, 32 << 20)
        );
        assert_eq!(l.request_timeout, Duration::from_secs(2));
        assert_eq!(l.send_timeout, Duration::from_millis(1500));
        assert_eq!(l.drain_timeout, Duration::from_secs(5));
        assert_eq!(l.member_timeout, None);
        assert_eq!(l.nbd_idle_timeout, Some(Duration::from_secs(600)));
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
            c.ublk,
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
        assert_eq!(left.ublk.len(), 1);
        assert_eq!((left.ublk[0].array, left.ublk[0].id), (0, 7));
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
        assert_eq!(c.nbd.listen.port(), 10900);
        assert_eq!(c.nbd.max_in_flight, 8);
        assert_eq!(c.exports.len(), 2);
        assert!(
            c.exports[0].read_only,
            "an export of a read-only array is read-only"
        );
        assert!(c.exports[1].read_only);
        assert_eq!(c.exports[1].description, "scratch");
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
        assert!(c.iscsi.is_none());
        let c =
            parse("[iscsi]\n[[array]]\nname = \"Vol_1\"\nmembers = [\"x\"]\nread_only = true\n")
                .expect("valid");
        let i = c.iscsi.expect("iscsi on");
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
        let i = c.iscsi.expect("iscsi on");
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
             write_alone = \"never\"\n[[array]]\nname = \"b\"\nmembers = [\"y\"]\n",
        )
        .expect("valid");
        assert_eq!(c.arrays[0].stripe_cache, 4 << 20);
        assert_eq!(c.arrays[0].gather, raidd_engine::Gather::Limit(16));
        assert_eq!(c.arrays[1].stripe_cache, raidd_engine::DEFAULT_CACHE_BYTES);
        assert_eq!(c.arrays[1].gather, raidd_engine::Gather::Plug);
        assert_eq!(c.arrays[0].write_alone, raidd_engine::Alone::Never);
        assert_eq!(c.arrays[1].write_alone, raidd_engine::Alone::Auto);
        let none = parse("[[array]]\nname = \"a\"\nmembers = [\"x\"]\nstripe_cache = \"0\"\n")
            .expect("valid");
        assert_eq!(none.arrays[0].stripe_cache, 0);
        for (line, want) in [
            ("stripe_cache = \"lots\"", "stripe_cache \"lots\""),
            ("stripe_cache = \"1T\"", "up to 64G"),
            ("gather = \"sometimes\"", "unknown gather policy"),
            ("gather = \"limit:0\"", "unknown gather policy"),
            ("write_alone = \"sometimes\"", "write_alone: unknown policy"),
        ] {
            let e = parse(&format!(
                "[[array]]\nname = \"a\"\nmembers = [\"x\"]\n{line}\n"
            ))
            .expect_err(line);
            assert!(e.contains(want) && e.contains("\"a\""), "{line}: {e}");
        }
    }
}
