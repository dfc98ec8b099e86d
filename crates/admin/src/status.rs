//! The daemon's status report (`raidd status`): every array it serves with its exports,
//! the arrays that did not start, the iSCSI target and the spare pool. The daemon fills in
//! a [`StatusReport`]; the text and the JSON are both made from it here.

use std::fmt::Write as _;

use raidd_engine::array::ArrayStatus;
use raidd_engine::{ArrayState, SlotState};
use serde::Serialize;

use crate::progress::sync_line;
use crate::size;
use crate::volume::Volume;

/// What `raidd status --json` prints (JSON.md documents the fields).
#[derive(Debug, Serialize)]
pub struct StatusReport {
    pub version: String,
    pub nbd_listen: String,
    pub iscsi: Option<IscsiStatus>,
    pub threads: usize,
    /// Client connections open now, and the most the daemon takes.
    pub connections: usize,
    pub max_connections: usize,
    /// Request and reply buffer memory the connections hold now, and the budget.
    pub buffer_memory_used_bytes: u64,
    pub buffer_memory_bytes: u64,
    pub arrays: Vec<ServedArray>,
    pub not_started: Vec<NotStarted>,
    pub spare_pool: Vec<PoolSpare>,
    /// The `[[ublk]]` devices.
    pub ublk: Vec<UblkStatus>,
}

/// A `[[ublk]]` device: the block device, what it serves, or why it was not made.
#[derive(Clone, Debug, Serialize)]
pub struct UblkStatus {
    /// `/dev/ublkbN`.
    pub device: String,
    /// The array's name, or `array/volume`.
    pub serves: String,
    pub size_bytes: u64,
    /// Taken over from a raidd that died (the kernel held its requests meanwhile).
    pub taken_over: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct ServedArray {
    /// The name in the daemon's config.
    pub name: String,
    /// The outermost array.
    pub status: ArrayStatus,
    /// The inner arrays of a nested array, innermost first (their passes and loose members
    /// are shown too).
    #[serde(skip)]
    pub inner: Vec<ArrayStatus>,
    pub exports: Vec<ExportStatus>,
    /// Its volumes, with what serves each.
    pub volumes: VolumeTable,
}

/// An array's volumes as the reports show them (`status`, `detail`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct VolumeTable {
    /// Whether the array carries a partition table.
    pub partitioned: bool,
    pub volumes: Vec<VolumeStatus>,
    /// Why the table could not be read, or cannot be used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct VolumeStatus {
    #[serde(flatten)]
    pub volume: Volume,
    /// What serves it: `export NAME` (NBD), `LUN N of TARGET` (iSCSI).
    pub served_as: Vec<String>,
}

/// One volume as `volume list` and the changes print it.
pub fn volume_line(v: &Volume) -> String {
    format!(
        "{:>3}  {:<24} at {:>12}  {:>12} bytes ({})\n",
        v.number,
        v.name,
        v.offset_bytes,
        v.size_bytes,
        size::short(v.size_bytes)
    )
}

impl VolumeTable {
    /// The table as read (`None`: no partition table), nothing serving it yet.
    pub fn from_read(read: Result<Option<Vec<Volume>>, String>) -> VolumeTable {
        match read {
            Ok(found) => VolumeTable {
                partitioned: found.is_some(),
                volumes: found
                    .unwrap_or_default()
                    .into_iter()
                    .map(|volume| VolumeStatus {
                        volume,
                        served_as: Vec::new(),
                    })
                    .collect(),
                error: None,
            },
            Err(e) => VolumeTable {
                error: Some(e),
                ..VolumeTable::default()
            },
        }
    }

    /// `volume list`'s text for the array named `array`.
    pub fn listing(&self, array: &str) -> String {
        if let Some(e) = &self.error {
            return format!("{array}: {e}\n");
        }
        if !self.partitioned {
            return format!("{array}: no partition table, no volumes\n");
        }
        if self.volumes.is_empty() {
            return format!("{array}: no volumes\n");
        }
        let mut t = format!("{array}:\n");
        for v in &self.volumes {
            t.push_str(&volume_line(&v.volume));
            if !v.served_as.is_empty() {
                t.pop();
                let _ = writeln!(t, ", served as {}", v.served_as.join(", "));
            }
        }
        t
    }

    /// `detail`'s lines: a blank line, then one per volume (or the table's error); nothing
    /// for an array without a table.
    pub fn write_detail(&self, text: &mut String) {
        if self.error.is_some() || !self.volumes.is_empty() {
            text.push('\n');
            self.write_text(text, "");
        }
    }

    /// A line per volume, each starting with `indent`; nothing for an array without a table.
    pub fn write_text(&self, text: &mut String, indent: &str) {
        if let Some(e) = &self.error {
            let _ = writeln!(text, "{indent}volumes: {e}");
        }
        for v in &self.volumes {
            let served = if v.served_as.is_empty() {
                String::new()
            } else {
                format!(", served as {}", v.served_as.join(", "))
            };
            let _ = writeln!(
                text,
                "{indent}volume {} {:?}: {} at {}{served}",
                v.volume.number,
                v.volume.name,
                size::short(v.volume.size_bytes),
                size::short(v.volume.offset_bytes),
            );
        }
    }
}

#[derive(Debug, Serialize)]
pub struct ExportStatus {
    pub name: String,
    /// The volume it serves (none: the whole array).
    pub volume: Option<String>,
    pub size_bytes: u64,
    pub read_only: bool,
    /// Connections open on it now.
    pub connections: usize,
    /// Requests served since the start.
    pub requests: u64,
    /// WRITE payload bytes the server copied (the rest went from the socket straight into
    /// the buffer the members are written from).
    pub copied_bytes: u64,
    /// Reads, writes and flushes: how many, their bytes, and how long they took.
    pub latency: Vec<OpLatency>,
}

/// One operation's requests and their latency histogram: `buckets[k]` requests took at most
/// `bounds_us[k]` µs and more than the bound before it (the last bucket: more than every
/// bound).
#[derive(Clone, Debug, Serialize)]
pub struct OpLatency {
    pub op: &'static str,
    pub count: u64,
    pub bytes: u64,
    pub sum_seconds: f64,
    pub bounds_us: Vec<u64>,
    pub buckets: Vec<u64>,
}

#[derive(Debug, Serialize)]
pub struct IscsiStatus {
    pub listen: String,
    pub targets: Vec<TargetStatus>,
}

#[derive(Debug, Serialize)]
pub struct TargetStatus {
    pub name: String,
    /// Sessions (I_T nexuses) logged in now.
    pub sessions: usize,
    pub luns: Vec<LunStatus>,
}

#[derive(Debug, Serialize)]
pub struct LunStatus {
    pub lun: u64,
    pub array: String,
    /// The volume it serves (none: the whole array).
    pub volume: Option<String>,
    pub read_only: bool,
    /// Reads, writes and flushes (SYNCHRONIZE CACHE): how many, their bytes, how long.
    pub latency: Vec<OpLatency>,
}

/// A configured array that could not be started, and why.
#[derive(Clone, Debug, Serialize)]
pub struct NotStarted {
    pub name: String,
    pub error: String,
}

#[derive(Debug, Serialize)]
pub struct PoolSpare {
    pub member: String,
    pub group: Option<String>,
}

fn state_word(s: ArrayState) -> &'static str {
    match s {
        ArrayState::Clean => "clean",
        ArrayState::Active => "active",
        ArrayState::Degraded => "degraded",
        ArrayState::Failed => "FAILED",
    }
}

impl StatusReport {
    /// The mdstat-like summary.
    pub fn text(&self) -> String {
        let mut text = format!(
            "raidd {}: NBD on {}, {} worker threads\n",
            self.version, self.nbd_listen, self.threads
        );
        let _ = writeln!(
            text,
            "connections: {} of at most {}; buffer memory: {} of {} in use",
            self.connections,
            self.max_connections,
            size::short(self.buffer_memory_used_bytes),
            size::short(self.buffer_memory_bytes)
        );
        if let Some(st) = &self.iscsi {
            let sessions: usize = st.targets.iter().map(|t| t.sessions).sum();
            let _ = writeln!(
                text,
                "iSCSI on {}, {} targets, {sessions} sessions",
                st.listen,
                st.targets.len(),
            );
        }
        text.push('\n');
        for (i, a) in self.arrays.iter().enumerate() {
            a.write_text(&mut text);
            if i + 1 < self.arrays.len() {
                text.push('\n');
            }
        }
        for n in &self.not_started {
            let _ = writeln!(text, "\n{} : not started: {}", n.name, n.error);
        }
        for u in &self.ublk {
            match &u.error {
                None => {
                    let _ = writeln!(
                        text,
                        "\n{} : {}, {}{}",
                        u.device,
                        u.serves,
                        size::short(u.size_bytes),
                        if u.taken_over {
                            ", taken over at start"
                        } else {
                            ""
                        }
                    );
                }
                Some(e) => {
                    let _ = writeln!(text, "\n{} : {} not made: {e}", u.device, u.serves);
                }
            }
        }
        if !self.spare_pool.is_empty() {
            let names: Vec<String> = self
                .spare_pool
                .iter()
                .map(|s| match &s.group {
                    Some(g) => format!("{} (group {g})", s.member),
                    None => s.member.clone(),
                })
                .collect();
            let _ = writeln!(text, "\nspare pool: {}", names.join(", "));
        }
        text
    }
}

impl ServedArray {
    fn write_text(&self, text: &mut String) {
        let st = &self.status;
        let members: Vec<String> = st
            .slots
            .iter()
            .filter_map(|sl| sl.member.as_ref().map(|m| format!("{m}[{}]", sl.role)))
            .collect();
        let map: String = st
            .slots
            .iter()
            .map(|sl| {
                if sl.state == SlotState::InSync {
                    'U'
                } else {
                    '_'
                }
            })
            .collect();
        let in_sync = map.chars().filter(|&c| c == 'U').count();
        let state = if st.read_only {
            "active (read-only)"
        } else {
            "active"
        };
        let _ = writeln!(
            text,
            "{} : {state} {} {}",
            self.name,
            st.level,
            members.join(" ")
        );
        let mut geo = format!("      {}", size::kib_text(st.size_bytes));
        if st.chunk_bytes != 0 {
            let _ = write!(geo, ", chunk {}", size::chunk_text(st.chunk_bytes));
        }
        if let Some(l) = &st.layout {
            let _ = write!(geo, ", {l}");
        }
        let resync = if st.needs_resync {
            ", needs resync"
        } else {
            ""
        };
        let _ = writeln!(
            text,
            "{geo} [{}/{in_sync}] [{map}], {}{resync}",
            st.raid_devices,
            state_word(st.state),
        );
        write_health(text, st);
        // Passes and loose members of the inner arrays, then of the array.
        for inner in &self.inner {
            write_passes(text, inner, &format!("{}: ", inner.name));
        }
        write_passes(text, st, "");
        self.volumes.write_text(text, "      ");
        for e in &self.exports {
            let access = if e.read_only {
                "read-only"
            } else {
                "read-write"
            };
            let plural = if e.connections == 1 { "" } else { "s" };
            let of = e
                .volume
                .as_ref()
                .map_or(String::new(), |v| format!(" of volume {v:?}"));
            let _ = writeln!(
                text,
                "      export {}{of} ({access}): {} connection{plural}, {} requests, {} of \
                 payload copied",
                e.name,
                e.connections,
                e.requests,
                size::short(e.copied_bytes)
            );
        }
    }
}

/// The bitmap's dirty chunks, checksum tags being re-derived, and the members that returned
/// errors (as `zpool status`'s READ, WRITE and CKSUM columns) with what was corrected from
/// redundancy.
fn write_health(text: &mut String, st: &ArrayStatus) {
    if let Some(b) = &st.bitmap {
        let _ = writeln!(text, "      bitmap: {}/{} chunks dirty", b.dirty, b.chunks);
    }
    if st.checksums_unverified_blocks > 0 {
        let _ = writeln!(
            text,
            "      checksums: {} of tags being re-derived from the data",
            size::short(st.checksums_unverified_blocks * 4096)
        );
    }
    // Members that returned errors, as `zpool status`'s READ and WRITE columns, and
    // what was corrected from redundancy.
    for sl in &st.slots {
        let io = &sl.io;
        if io.read_errors + io.write_errors + io.checksum_errors == 0 {
            continue;
        }
        let _ = writeln!(
            text,
            "      errors: {}[{}]: {} read, {} write, {} checksum; {} corrected, {} repaired",
            sl.member.as_deref().unwrap_or("-"),
            sl.role,
            io.read_errors,
            io.write_errors,
            io.checksum_errors,
            io.corrected_errors,
            size::short(io.repaired_bytes)
        );
    }
}

/// A running pass, failed members not yet removed, spares and the write journal, each on a
/// line of its own.
fn write_passes(text: &mut String, st: &ArrayStatus, who: &str) {
    if let Some(sync) = &st.sync {
        let _ = writeln!(text, "      {who}{}", sync_line(sync));
    }
    if !st.faulty.is_empty() {
        let _ = writeln!(
            text,
            "      {who}failed, not yet removed: {}",
            st.faulty.join(" ")
        );
    }
    if !st.spares.is_empty() {
        let _ = writeln!(text, "      {who}spares: {}", st.spares.join(" "));
    }
    if let Some(j) = &st.journal {
        let _ = writeln!(text, "      {who}{}", crate::progress::journal_line(j));
    }
}
