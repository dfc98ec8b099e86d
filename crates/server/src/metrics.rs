//! `/metrics`: the status report as Prometheus metrics, encoded by the `prometheus-client`
//! crate (OpenMetrics text). Built afresh from a [`StatusReport`] on every scrape, so the
//! data path keeps no metric state of its own: the counters are the engine's and the
//! server's, the same `raidd status` reads. With `node_md_compat`, node_exporter's mdadm
//! collector metrics (`node_md_*`, its names, help texts and labels) follow for each array,
//! so dashboards made for md work unchanged.
//!
//! Every name is listed in docs/METRICS.md.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use raidd_admin::status::{OpLatency, StatusReport};
use raidd_engine::array::{ArrayState, ArrayStatus, MemberIoStatus, SlotState};
use raidd_engine::{ConsistencyPolicy, SyncKind};

/// What `/metrics` answers with.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

type Labels = Vec<(String, String)>;
type GaugeF = Gauge<f64, AtomicU64>;

/// A registry filled one sample at a time: a family is registered when its first sample
/// comes.
#[derive(Default)]
pub struct Sink {
    reg: Registry,
    gauges: HashMap<&'static str, Family<Labels, GaugeF>>,
    counters: HashMap<&'static str, Family<Labels, Counter>>,
    /// Request latency: one histogram per export (or LUN) and operation, from counts the
    /// data path keeps (so not the crate's `Histogram`, which observes values itself).
    latency: Histograms,
}

/// Histograms whose bucket counts are already made, encoded as one family.
#[derive(Debug, Default, Clone)]
struct Histograms {
    series: Vec<(Labels, OpLatency)>,
}

const LATENCY_NAME: &str = "raidd_request_duration_seconds";
const LATENCY_HELP: &str = "Time from a request's arrival to its reply, by export (or iSCSI \
    target/LUN), protocol and operation";

impl Collector for Histograms {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
        if self.series.is_empty() {
            return Ok(());
        }
        let mut family =
            enc.encode_descriptor(LATENCY_NAME, LATENCY_HELP, None, MetricType::Histogram)?;
        for (l, h) in &self.series {
            debug_assert_eq!(
                h.buckets.len(),
                h.bounds_us.len() + 1,
                "one past the last bound"
            );
            debug_assert_eq!(
                h.buckets.iter().sum::<u64>(),
                h.count,
                "count is the buckets'"
            );
            debug_assert!(h.bounds_us.windows(2).all(|w| w[0] < w[1]), "rising bounds");
            let buckets: Vec<(f64, u64)> = h
                .buckets
                .iter()
                .enumerate()
                .map(|(k, &n)| {
                    let le = h.bounds_us.get(k).map_or(f64::MAX, |&us| us as f64 / 1e6);
                    (le, n)
                })
                .collect();
            family.encode_family(l)?.encode_histogram::<NoLabelSet>(
                h.sum_seconds,
                h.count,
                &buckets,
                None,
            )?;
        }
        Ok(())
    }
}

fn labels(l: &[(&str, &str)]) -> Labels {
    l.iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect()
}

/// Help as the encoder wants it: it ends every help text with a full stop of its own.
fn help_text(help: &str) -> &str {
    help.strip_suffix('.').unwrap_or(help)
}

impl std::fmt::Debug for Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sink")
            .field("gauges", &self.gauges.len())
            .field("counters", &self.counters.len())
            .finish()
    }
}

impl Sink {
    /// A gauge with no labels.
    fn value(&mut self, name: &'static str, help: &'static str, v: f64) {
        debug_assert!(self.unused(name), "{name} registered twice");
        let g = GaugeF::default();
        g.set(v);
        self.reg.register(name, help_text(help), g);
    }

    pub(crate) fn gauge(
        &mut self,
        name: &'static str,
        help: &'static str,
        l: &[(&str, &str)],
        v: f64,
    ) {
        debug_assert!(!self.counters.contains_key(name), "{name} is a counter");
        let reg = &mut self.reg;
        let f = self.gauges.entry(name).or_insert_with(|| {
            let f = Family::<Labels, GaugeF>::default();
            reg.register(name, help_text(help), f.clone());
            f
        });
        f.get_or_create(&labels(l)).set(v);
    }

    /// A counter: `name` without `_total`, which the encoder adds.
    pub(crate) fn counter(
        &mut self,
        name: &'static str,
        help: &'static str,
        l: &[(&str, &str)],
        v: u64,
    ) {
        debug_assert!(!name.ends_with("_total"), "{name}: the encoder adds _total");
        debug_assert!(!self.gauges.contains_key(name), "{name} is a gauge");
        let reg = &mut self.reg;
        let f = self.counters.entry(name).or_insert_with(|| {
            let f = Family::<Labels, Counter>::default();
            reg.register(name, help_text(help), f.clone());
            f
        });
        f.get_or_create(&labels(l)).inc_by(v);
    }

    /// Each operation's count, bytes and latency histogram, under `base` labels and `op`
    /// (a frontend's export, or target and LUN).
    pub(crate) fn operations(&mut self, ops: &[OpLatency], base: &[(&str, &str)]) {
        for o in ops {
            let mut l = base.to_vec();
            l.push(("op", o.op));
            self.counter(
                "raidd_export_operations",
                "Reads, writes and flushes completed, by export (or iSCSI target/LUN), protocol \
                 and operation.",
                &l,
                o.count,
            );
            self.counter(
                "raidd_export_operation_bytes",
                "Bytes read and written, by export (or iSCSI target/LUN), protocol and operation.",
                &l,
                o.bytes,
            );
            self.latency.series.push((labels(&l), o.clone()));
        }
    }

    /// No family of this name yet (a debug check: the registry itself takes duplicates).
    fn unused(&self, name: &str) -> bool {
        !self.gauges.contains_key(name) && !self.counters.contains_key(name)
    }

    fn flag(&mut self, name: &'static str, help: &'static str, l: &[(&str, &str)], on: bool) {
        self.gauge(name, help, l, if on { 1.0 } else { 0.0 });
    }
}

/// The report as metrics text (OpenMetrics; [`classic`] makes Prometheus' older text format
/// of it).
pub fn encode(
    report: &StatusReport,
    node_md_compat: bool,
    frontends: fn(&StatusReport, &mut Sink),
) -> String {
    let mut s = Sink::default();
    server(&mut s, report);
    for a in &report.arrays {
        for st in std::iter::once(&a.status).chain(&a.inner) {
            array(&mut s, st);
        }
    }
    frontends(report, &mut s);
    if node_md_compat {
        for a in &report.arrays {
            for st in std::iter::once(&a.status).chain(&a.inner) {
                node_md(&mut s, st);
            }
        }
    }
    let latency = std::mem::take(&mut s.latency);
    s.reg.register_collector(Box::new(latency));
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, &s.reg);
    out
}

fn server(s: &mut Sink, r: &StatusReport) {
    s.gauge(
        "raidd_info",
        "The running raidd's version.",
        &[("version", &r.version)],
        1.0,
    );
    s.value(
        "raidd_connections",
        "Client connections open (NBD and iSCSI).",
        r.connections as f64,
    );
    s.value(
        "raidd_max_connections",
        "Client connections the server takes at once.",
        r.max_connections as f64,
    );
    s.value(
        "raidd_buffer_memory_used_bytes",
        "Request and reply buffer memory held by connections now.",
        r.buffer_memory_used_bytes as f64,
    );
    s.value(
        "raidd_buffer_memory_bytes",
        "Request and reply buffer memory all connections together may hold.",
        r.buffer_memory_bytes as f64,
    );
    s.value(
        "raidd_arrays_not_started",
        "Configured arrays that could not be started.",
        r.not_started.len() as f64,
    );
    if let Some(p) = process() {
        let cpu = Counter::<f64, AtomicU64>::default();
        cpu.inc_by(p.cpu_seconds);
        s.reg.register(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds",
            cpu,
        );
        s.value(
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            p.rss_bytes as f64,
        );
        s.value(
            "process_open_fds",
            "Number of open file descriptors.",
            p.open_fds as f64,
        );
    }
}

/// What /proc says of this process.
struct Process {
    cpu_seconds: f64,
    rss_bytes: u64,
    open_fds: usize,
}

fn process() -> Option<Process> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    // The command name may hold spaces: fields are counted after its closing parenthesis.
    let after = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
    // utime and stime are fields 14 and 15 of stat(5), 12 and 13 after the name.
    let (utime, stime) = (ticks(11)?, ticks(12)?);
    // SAFETY: sysconf only reads a system constant.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    // SAFETY: as above.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as u64;
    let rss_pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    let open_fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count());
    Some(Process {
        cpu_seconds: (utime + stime) as f64 / hz,
        rss_bytes: rss_pages * page,
        open_fds,
    })
}

fn state_name(st: ArrayState) -> &'static str {
    match st {
        ArrayState::Clean => "clean",
        ArrayState::Active => "active",
        ArrayState::Degraded => "degraded",
        ArrayState::Failed => "failed",
    }
}

fn slot_name(st: SlotState) -> &'static str {
    match st {
        SlotState::InSync => "active",
        SlotState::Recovering => "recovering",
        SlotState::Faulty => "failed",
        SlotState::Missing => "missing",
    }
}

fn action_name(k: Option<SyncKind>) -> &'static str {
    match k {
        None => "idle",
        Some(SyncKind::Resync) => "resync",
        Some(SyncKind::Recovery) => "recover",
        Some(SyncKind::Check) => "check",
        Some(SyncKind::Repair) => "repair",
        Some(SyncKind::Replace) => "replace",
    }
}

/// Slots in each state, the spares, and the failed members out of their slots.
fn disk_counts(st: &ArrayStatus) -> [(&'static str, usize); 5] {
    let n = |want: SlotState| st.slots.iter().filter(|s| s.state == want).count();
    [
        ("active", n(SlotState::InSync)),
        ("recovering", n(SlotState::Recovering)),
        ("failed", n(SlotState::Faulty) + st.faulty.len()),
        ("missing", n(SlotState::Missing)),
        ("spare", st.spares.len()),
    ]
}

/// md's consistency policy, and what a partial parity log recovered at the start.
fn consistency(s: &mut Sink, st: &ArrayStatus) {
    let a = st.name.as_str();
    for policy in [
        ConsistencyPolicy::None,
        ConsistencyPolicy::Resync,
        ConsistencyPolicy::Bitmap,
        ConsistencyPolicy::Ppl,
        ConsistencyPolicy::Journal,
    ] {
        s.flag(
            "raidd_array_consistency_policy",
            "1 for what keeps the array consistent across an unclean stop (md's \
             consistency_policy: none, resync, bitmap, ppl, journal), 0 for the others.",
            &[("array", a), ("policy", &policy.to_string())],
            st.consistency_policy == policy,
        );
    }
    if let Some(r) = &st.ppl_recovered {
        let l = [("array", a)];
        s.gauge(
            "raidd_array_ppl_recovered_entries",
            "Partial parity log entries applied when the array started after an unclean stop.",
            &l,
            r.entries as f64,
        );
        s.gauge(
            "raidd_array_ppl_not_applied_entries",
            "Partial parity log entries not applied at that start (bad checksum, or not one \
             md writes); the array then resyncs.",
            &l,
            r.not_applied as f64,
        );
    }
    if let Some(j) = &st.journal {
        journal(s, a, j);
    }
}

/// md's write journal: its state, its log's size and use, and what the start replayed.
fn journal(s: &mut Sink, a: &str, j: &raidd_engine::JournalStatus) {
    use raidd_engine::JournalState;
    let member = j.member.as_deref().unwrap_or("");
    for state in [
        JournalState::Active,
        JournalState::Faulty,
        JournalState::Missing,
    ] {
        let name = format!("{state:?}").to_lowercase();
        s.flag(
            "raidd_array_journal_state",
            "1 for the write journal's state (active; faulty or missing: the array is \
             read-only), 0 for the others.",
            &[("array", a), ("member", member), ("state", &name)],
            j.state == state,
        );
    }
    let l = [("array", a)];
    s.flag(
        "raidd_array_journal_write_back",
        "1 while the write journal is in write-back mode (writes acknowledged once logged), \
         0 in write-through mode.",
        &l,
        j.mode == raidd_engine::JournalMode::WriteBack,
    );
    s.gauge(
        "raidd_array_journal_cached_bytes",
        "Bytes the write-back cache holds: acknowledged, logged, not yet on the members.",
        &l,
        j.cached_bytes as f64,
    );
    s.gauge(
        "raidd_array_journal_cache_limit_bytes",
        "The most the write-back cache may hold (0 in write-through mode).",
        &l,
        j.cache_limit_bytes as f64,
    );
    if let (Some(log), Some(used)) = (j.log_bytes, j.used_bytes) {
        s.gauge(
            "raidd_array_journal_log_bytes",
            "Bytes of the write journal's log (its ring).",
            &l,
            log as f64,
        );
        s.gauge(
            "raidd_array_journal_used_bytes",
            "Bytes of the write journal's log between its tail and head (not yet reclaimed).",
            &l,
            used as f64,
        );
    }
    if let Some(r) = &j.recovered {
        s.gauge(
            "raidd_array_journal_replayed_rows",
            "Rows (data with parity) the start replayed from the write journal.",
            &l,
            r.rows as f64,
        );
        s.gauge(
            "raidd_array_journal_replayed_units",
            "Log units the start read from the write journal's tail.",
            &l,
            r.units as f64,
        );
    }
}

fn array(s: &mut Sink, st: &ArrayStatus) {
    let a = st.name.as_str();
    let l = [("array", a)];
    s.gauge(
        "raidd_array_info",
        "An array: its level, layout and UUID.",
        &[
            ("array", a),
            ("level", &st.level),
            ("layout", st.layout.as_deref().unwrap_or("")),
            ("uuid", &st.uuid),
        ],
        1.0,
    );
    for state in [
        ArrayState::Clean,
        ArrayState::Active,
        ArrayState::Degraded,
        ArrayState::Failed,
    ] {
        s.flag(
            "raidd_array_state",
            "1 for the array's state (clean, active, degraded, failed), 0 for the others.",
            &[("array", a), ("state", state_name(state))],
            st.state == state,
        );
    }
    s.flag(
        "raidd_array_degraded",
        "1 while the array serves with members missing, failed or rebuilding.",
        &l,
        matches!(st.state, ArrayState::Degraded | ArrayState::Failed)
            || st.slots.iter().any(|x| x.state != SlotState::InSync),
    );
    s.flag(
        "raidd_array_needs_resync",
        "1 while the array was stopped uncleanly and its redundancy is not yet resynced.",
        &l,
        st.needs_resync,
    );
    s.gauge(
        "raidd_array_size_bytes",
        "Bytes the array serves.",
        &l,
        st.size_bytes as f64,
    );
    s.gauge(
        "raidd_array_raid_disks",
        "Slots of the array (md's raid_disks).",
        &l,
        st.raid_devices as f64,
    );
    for (state, n) in disk_counts(st) {
        s.gauge(
            "raidd_array_disks",
            "Members by state: active, recovering, failed, missing (empty slots), spare.",
            &[("array", a), ("state", state)],
            n as f64,
        );
    }
    sync(s, st);
    consistency(s, st);
    if let Some(b) = &st.bitmap {
        s.gauge(
            "raidd_array_bitmap_dirty_chunks",
            "Write-intent bitmap chunks marked (writes since the last flush period).",
            &l,
            b.dirty as f64,
        );
        s.gauge(
            "raidd_array_bitmap_chunks",
            "Write-intent bitmap chunks in all.",
            &l,
            b.chunks as f64,
        );
    }
    members(s, st);
    counters(s, st);
}

fn sync(s: &mut Sink, st: &ArrayStatus) {
    let a = st.name.as_str();
    let l = [("array", a)];
    let running = st.sync.as_ref().map(|p| p.kind);
    for k in [
        None,
        Some(SyncKind::Resync),
        Some(SyncKind::Recovery),
        Some(SyncKind::Check),
        Some(SyncKind::Repair),
        Some(SyncKind::Replace),
    ] {
        s.flag(
            "raidd_array_sync_action",
            "1 for what the array's sync pass is doing (idle, resync, recover, check, repair, \
             replace), 0 for the others.",
            &[("array", a), ("action", action_name(k))],
            running == k,
        );
    }
    let (done, total, speed, eta) = match &st.sync {
        Some(p) => (p.done_bytes, p.total_bytes, p.speed_bytes_s, p.eta_s),
        None => (0, 0, 0, None),
    };
    s.gauge(
        "raidd_array_sync_done_bytes",
        "Bytes of each member the running sync pass has done (0 when idle).",
        &l,
        done as f64,
    );
    s.gauge(
        "raidd_array_sync_total_bytes",
        "Bytes of each member the running sync pass covers (0 when idle).",
        &l,
        total as f64,
    );
    s.gauge(
        "raidd_array_sync_speed_bytes_per_second",
        "How fast the running sync pass goes (0 when idle).",
        &l,
        speed as f64,
    );
    if let Some(eta) = eta {
        s.gauge(
            "raidd_array_sync_eta_seconds",
            "Seconds the running sync pass has left at its present speed.",
            &l,
            eta as f64,
        );
    }
    let mismatches = st
        .sync
        .as_ref()
        .map(|p| p.mismatch_sectors)
        .or_else(|| st.last_sync.as_ref().map(|l| l.mismatch_sectors))
        .unwrap_or(0);
    s.gauge(
        "raidd_array_mismatch_sectors",
        "Sectors the running or last check or repair found inconsistent (md's mismatch_cnt).",
        &l,
        mismatches as f64,
    );
}

fn members(s: &mut Sink, st: &ArrayStatus) {
    let a = st.name.as_str();
    for slot in &st.slots {
        let role = slot.role.to_string();
        let member = slot.member.as_deref().unwrap_or("");
        for state in [
            SlotState::InSync,
            SlotState::Recovering,
            SlotState::Faulty,
            SlotState::Missing,
        ] {
            s.flag(
                "raidd_member_state",
                "1 for the state of the member in each slot (active, recovering, failed, \
                 missing), 0 for the others.",
                &[
                    ("array", a),
                    ("role", &role),
                    ("member", member),
                    ("state", slot_name(state)),
                ],
                slot.state == state,
            );
        }
        member_io(
            s,
            &[("array", a), ("role", role.as_str()), ("member", member)],
            &slot.io,
        );
        if let Some(done) = slot.recovered_bytes {
            s.gauge(
                "raidd_member_recovered_bytes",
                "Bytes of a recovering member's data area rebuilt so far.",
                &[("array", a), ("role", &role), ("member", member)],
                done as f64,
            );
        }
    }
    dab(s, st);
}

/// The DMA-aligned buffer's counters of each member behind one.
fn dab(s: &mut Sink, st: &ArrayStatus) {
    let a = st.name.as_str();
    for d in &st.counters.dab {
        let l = [("array", a), ("member", d.member.as_str())];
        let c = &d.counts;
        for (name, help, v) in [
            (
                "raidd_dab_hits",
                "DAB reads served from memory (case 1).",
                c.hits,
            ),
            (
                "raidd_dab_head_hits",
                "DAB reads whose first sector was held (case 2).",
                c.head_hits,
            ),
            (
                "raidd_dab_tail_hits",
                "DAB reads whose last sector was held (case 3).",
                c.tail_hits,
            ),
            (
                "raidd_dab_misses",
                "DAB reads that found neither end held (case 4).",
                c.misses,
            ),
            (
                "raidd_dab_prefetched_bytes",
                "Bytes the DAB fetched into blocks.",
                c.prefetched_bytes,
            ),
            (
                "raidd_dab_bypassed",
                "Requests that went around the DAB.",
                c.bypassed,
            ),
            (
                "raidd_dab_evicted",
                "DAB blocks replaced to make room.",
                c.evicted,
            ),
            (
                "raidd_dab_absorbed",
                "Writes the DAB held in memory (write-back).",
                c.absorbed,
            ),
            (
                "raidd_dab_dirty_flushed",
                "Dirty DAB blocks written back.",
                c.dirty_flushed,
            ),
        ] {
            s.counter(name, help, &l, v);
        }
        s.flag(
            "raidd_dab_holds_writes",
            "1 while the DAB holds small writes in memory (write-back, and the array can \
             lose a member).",
            &l,
            c.holds_writes,
        );
    }
}

/// A slot's member's I/O and error counts.
fn member_io(s: &mut Sink, l: &[(&str, &str)], io: &MemberIoStatus) {
    for (name, help, v) in [
        (
            "raidd_member_reads",
            "Reads sent to the slot's member.",
            io.reads,
        ),
        (
            "raidd_member_writes",
            "Writes sent to the slot's member.",
            io.writes,
        ),
        (
            "raidd_member_read_bytes",
            "Bytes read from the slot's member.",
            io.read_bytes,
        ),
        (
            "raidd_member_written_bytes",
            "Bytes written to the slot's member.",
            io.written_bytes,
        ),
        (
            "raidd_member_read_errors",
            "Reads the slot's member failed (zpool status's READ column).",
            io.read_errors,
        ),
        (
            "raidd_member_write_errors",
            "Writes and flushes the slot's member failed (zpool status's WRITE column).",
            io.write_errors,
        ),
        (
            "raidd_member_corrected_errors",
            "Read errors of the slot's member corrected from redundancy (md's errors).",
            io.corrected_errors,
        ),
        (
            "raidd_member_repaired_bytes",
            "Bytes rewritten on the slot's member by those corrections.",
            io.repaired_bytes,
        ),
    ] {
        s.counter(name, help, l, v);
    }
    // The zpool status columns as one family, by kind: READ, WRITE and CKSUM.
    for (kind, v) in [
        ("read", io.read_errors),
        ("write", io.write_errors),
        ("checksum", io.checksum_errors),
    ] {
        let mut kl = l.to_vec();
        kl.push(("kind", kind));
        s.counter(
            "raidd_member_errors",
            "Errors of the slot's member by kind: reads and writes it failed, and blocks that \
             did not match their checksum tags (zpool status's READ, WRITE and CKSUM).",
            &kl,
            v,
        );
    }
}

fn counters(s: &mut Sink, st: &ArrayStatus) {
    let l = [("array", st.name.as_str())];
    let c = &st.counters;
    for (name, help, v) in [
        (
            "raidd_array_reads",
            "Read requests the array served.",
            c.reads,
        ),
        (
            "raidd_array_writes",
            "Write requests the array served.",
            c.writes,
        ),
        (
            "raidd_array_read_bytes",
            "Bytes read from the array.",
            c.read_bytes,
        ),
        (
            "raidd_array_written_bytes",
            "Bytes written to the array.",
            c.written_bytes,
        ),
        (
            "raidd_array_degraded_reads",
            "Reads rebuilt from redundancy (a member missing or failing).",
            c.degraded_reads,
        ),
        (
            "raidd_array_full_stripe_writes",
            "RAID4/5/6 stripes written whole.",
            c.full_stripe_writes,
        ),
        (
            "raidd_array_rmw_writes",
            "RAID4/5/6 read-modify-write stripe writes.",
            c.rmw_writes,
        ),
        (
            "raidd_array_rcw_writes",
            "RAID4/5/6 reconstruct-write stripe writes.",
            c.rcw_writes,
        ),
        (
            "raidd_array_reconstruct_writes",
            "Writes to a stripe with a member missing.",
            c.reconstruct_writes,
        ),
    ] {
        s.counter(name, help, &l, v);
    }
    if let Some(sc) = &c.stripe_cache {
        s.gauge(
            "raidd_stripe_cache_limit_bytes",
            "Bytes of stripe contents the RAID4/5/6 stripe cache may keep.",
            &l,
            sc.limit_bytes as f64,
        );
        s.gauge(
            "raidd_stripe_cache_cached_bytes",
            "Bytes of stripe contents the stripe cache keeps now.",
            &l,
            sc.cached_bytes as f64,
        );
        s.counter(
            "raidd_stripe_cache_batches",
            "Stripe batches run.",
            &l,
            sc.batches,
        );
        s.counter(
            "raidd_stripe_cache_gathered",
            "Requests that joined a batch another request led.",
            &l,
            sc.gathered,
        );
        s.counter(
            "raidd_stripe_cache_hits",
            "Batches whose rows were all in the cache.",
            &l,
            sc.hits,
        );
    }
}

/// node_exporter's mdadm collector, as its current version names and describes them: the
/// array's name is the `device` label, blocks are KiB (md's mdstat blocks), and a sync
/// pass's progress is in KiB of each member, as mdstat prints it.
fn node_md(s: &mut Sink, st: &ArrayStatus) {
    let d = st.name.as_str();
    let counts = disk_counts(st);
    let count = |name: &str| {
        counts
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(0, |(_, n)| *n)
    };
    s.gauge(
        "node_md_disks_required",
        "Total number of disks of device.",
        &[("device", d)],
        st.raid_devices as f64,
    );
    for state in ["active", "failed", "spare"] {
        s.gauge(
            "node_md_disks",
            "Number of active/failed/spare disks of device.",
            &[("device", d), ("state", state)],
            count(state) as f64,
        );
    }
    let activity = match (st.state, st.sync.as_ref().map(|p| p.kind)) {
        (ArrayState::Failed, _) => "inactive",
        (_, Some(SyncKind::Recovery | SyncKind::Replace)) => "recovering",
        (_, Some(SyncKind::Resync)) => "resync",
        (_, Some(SyncKind::Check | SyncKind::Repair)) => "check",
        _ => "active",
    };
    for state in ["active", "inactive", "recovering", "resync", "check"] {
        s.flag(
            "node_md_state",
            "Indicates the state of md-device.",
            &[("device", d), ("state", state)],
            activity == state,
        );
    }
    let blocks = st.size_bytes / 1024;
    s.gauge(
        "node_md_blocks",
        "Total number of blocks on device.",
        &[("device", d)],
        blocks as f64,
    );
    let synced = st.sync.as_ref().map_or(blocks, |p| p.done_bytes / 1024);
    s.gauge(
        "node_md_blocks_synced",
        "Number of blocks synced on device.",
        &[("device", d)],
        synced as f64,
    );
    s.gauge(
        "node_md_raid_disks",
        "Number of raid disks on device.",
        &[("device", d)],
        st.raid_devices as f64,
    );
    s.gauge(
        "node_md_degraded",
        "Number of degraded disks on device.",
        &[("device", d)],
        (st.raid_devices - count("active")) as f64,
    );
}

/// What the older Prometheus text format (0.0.4) calls the same metrics: there a counter's
/// HELP and TYPE name the sample with its `_total`, and nothing marks the end. Clients that
/// do not ask for OpenMetrics get this (promtool, curl); Prometheus asks for OpenMetrics.
pub fn classic(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|p| {
            let rest = line.strip_prefix(p)?;
            let (name, tail) = rest.split_once(' ')?;
            counters
                .contains(name)
                .then(|| format!("{p}{name}_total {tail}"))
        });
        out.push_str(renamed.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}

/// The content type of [`classic`]'s text.
pub const CLASSIC_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Whether a request's Accept header asks for OpenMetrics.
pub fn wants_openmetrics(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| a.contains("application/openmetrics-text"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_classic_format_names_counters_with_their_total() {
        let om = "# HELP a_reads Reads.\n# TYPE a_reads counter\na_reads_total{x=\"1\"} 3\n\
                  # HELP b Gauge.\n# TYPE b gauge\nb 1.0\n# EOF\n";
        let c = classic(om);
        assert_eq!(
            c,
            "# HELP a_reads_total Reads.\n# TYPE a_reads_total counter\na_reads_total{x=\"1\"} 3\n\
             # HELP b Gauge.\n# TYPE b gauge\nb 1.0\n"
        );
        assert!(wants_openmetrics(Some(
            "application/openmetrics-text;version=1.0.0,text/plain;q=0.5"
        )));
        assert!(!wants_openmetrics(Some("*/*")) && !wants_openmetrics(None));
    }
}
