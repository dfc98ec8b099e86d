//! The report of `raidd detail`, offline and from the daemon: each array, its slots, the
//! members not used and why, spares, and for nested arrays the tree, as text and as JSON.

use raidd_engine::array::ArrayStatus;
use raidd_engine::assemble::{Assembled, Decision, MemberReport};
use raidd_engine::{ArrayState, SlotState};
use raidd_md::Superblock;
use serde::Serialize;

use crate::exit::ErrorJson;
use crate::md_names::layout_text;
use crate::session::{self, Unavailable};
use crate::size;
use crate::text::{self, KvBlock};

/// `detail --json` (and `create --json`).
#[derive(Debug, Serialize)]
pub struct DetailJson {
    /// The outermost array; nested arrays appear in its slots' `array` field.
    pub array: ArrayJson,
    /// Members named on the command line that could not be used at all.
    pub unavailable: Vec<UnavailableJson>,
    /// The outermost array's volumes (absent where they were not looked at).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volumes: Option<crate::status::VolumeTable>,
}

#[derive(Debug, Serialize)]
pub struct ArrayJson {
    /// The array's name without the host part.
    pub name: String,
    /// The stored "host:name".
    pub full_name: String,
    pub uuid: String,
    pub level: String,
    pub layout: Option<String>,
    pub chunk_bytes: u64,
    pub raid_devices: usize,
    pub size_bytes: u64,
    pub block_size: u32,
    /// `clean`, `active` (writes may be in flight / unclean shutdown), `degraded`, `failed`.
    pub state: ArrayState,
    pub needs_resync: bool,
    pub read_only: bool,
    pub events: Option<u64>,
    /// Seconds since the epoch.
    pub creation_time: u64,
    pub update_time: u64,
    pub slots: Vec<SlotJson>,
    pub spares: Vec<String>,
    /// Failed members out of their slot, waiting for `raidd remove`.
    pub faulty: Vec<String>,
    /// The write journal (md's role 0xfffd), where the array has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub journal: Option<raidd_engine::JournalStatus>,
    /// md's consistency policy: `none`, `resync`, `bitmap` or `ppl`.
    pub consistency_policy: raidd_engine::ConsistencyPolicy,
    /// raidd's checksum tags of every block (`crc32c`), where the array has them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checksums: Option<String>,
    /// What the partial parity log recovered at the start (absent when it recovered
    /// nothing: a clean start, or no log).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ppl_recovered: Option<raidd_engine::PplRecovered>,
    /// The recovery, resync or scrub running now.
    pub sync: Option<raidd_engine::SyncStatus>,
    /// How the last one ended (with its mismatch count).
    pub last_sync: Option<raidd_engine::LastSync>,
    /// Members of this array that assembly left out, with the reason.
    pub not_used: Vec<NotUsedJson>,
    /// I/O counters since the array started (zero offline), with the stripe cache's.
    pub counters: raidd_engine::CounterStatus,
}

#[derive(Debug, Serialize)]
pub struct SlotJson {
    pub role: usize,
    /// The member's name (a path, or `array:NAME` for a nested array); `null` if missing.
    pub member: Option<String>,
    /// `insync`, `faulty`, `missing` or `recovering`.
    pub state: SlotState,
    /// What the member did since it took the slot (zero offline).
    pub io: raidd_engine::array::MemberIoStatus,
    /// While recovering: bytes of the member rebuilt so far.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recovered_bytes: Option<u64>,
    /// While recovering: only the chunks its write-intent bitmap marks are rebuilt (a
    /// former member re-added).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub by_bitmap: bool,
    /// md's write-mostly: read only when no other copy can be.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub write_mostly: bool,
    pub device_uuid: Option<String>,
    pub events: Option<u64>,
    /// The nested array in this slot, if the member is one.
    pub array: Option<Box<ArrayJson>>,
}

#[derive(Debug, Serialize)]
pub struct NotUsedJson {
    pub member: String,
    pub device_uuid: String,
    pub events: u64,
    /// `stale`, `faulty`, `displaced`, `replacement` or `bad_blocks` (the explanation says
    /// more).
    pub reason: &'static str,
    /// For `stale`: the array's event count.
    pub array_events: Option<u64>,
    /// For `displaced` and `replacement`: the slot (another member holds it).
    pub role: Option<usize>,
    /// The reason in words.
    pub explanation: String,
}

#[derive(Debug, Serialize)]
pub struct UnavailableJson {
    pub member: String,
    pub error: ErrorJson,
}

/// Why a member is not used, in words and as a JSON record; `None` for used members.
pub fn not_used(r: &MemberReport) -> Option<NotUsedJson> {
    let mut j = NotUsedJson {
        member: r.member.clone(),
        device_uuid: r.device_uuid.clone(),
        events: r.events,
        reason: "",
        array_events: None,
        role: None,
        explanation: r.decision.to_string(),
    };
    match &r.decision {
        Decision::Active { .. }
        | Decision::Spare
        | Decision::Journal
        | Decision::Recovering { .. } => return None,
        Decision::Stale { array_events, .. } => {
            j.reason = "stale";
            j.array_events = Some(*array_events);
        }
        Decision::Faulty => j.reason = "faulty",
        Decision::BadBlocks { .. } => j.reason = "bad_blocks",
        Decision::Displaced { role } => {
            j.reason = "displaced";
            j.role = Some(*role);
        }
        Decision::Replacement { role } => {
            j.reason = "replacement";
            j.role = Some(*role);
        }
    }
    Some(j)
}

fn slot_state_text(s: SlotState) -> &'static str {
    match s {
        SlotState::InSync => "in sync",
        SlotState::Faulty => "faulty",
        SlotState::Missing => "missing",
        SlotState::Recovering => "rebuilding",
    }
}

fn state_text(s: ArrayState) -> &'static str {
    match s {
        ArrayState::Clean => "clean",
        ArrayState::Active => "active",
        ArrayState::Degraded => "degraded",
        ArrayState::Failed => "failed",
    }
}

/// Everything detail needs about the arrays, gathered once (statuses are async).
#[derive(Debug)]
pub struct Gathered<'a> {
    pub arrays: &'a [Assembled],
    pub statuses: Vec<ArrayStatus>,
    pub root: usize,
}

/// One line per member behind a DMA-aligned buffer: what it did.
fn dab_lines(b: &mut KvBlock, dab: &[raidd_engine::array::MemberDab]) {
    for d in dab {
        let c = &d.counts;
        b.add(
            "DAB",
            format!(
                "{}: {} hits, {} head hits, {} tail hits, {} misses, {} prefetched, \
                 {} around, {} evicted, {} writes held, {} blocks written back{}",
                d.member,
                c.hits,
                c.head_hits,
                c.tail_hits,
                c.misses,
                size::human(c.prefetched_bytes),
                c.bypassed,
                c.evicted,
                c.absorbed,
                c.dirty_flushed,
                if c.holds_writes {
                    ", holding writes"
                } else {
                    ""
                }
            ),
        );
    }
}

impl Gathered<'_> {
    pub async fn new(arrays: &[Assembled], root: usize) -> Gathered<'_> {
        let mut statuses = Vec::with_capacity(arrays.len());
        for a in arrays {
            statuses.push(a.array.status().await);
        }
        Gathered {
            arrays,
            statuses,
            root,
        }
    }

    fn array_json(&self, index: usize, depth: usize) -> ArrayJson {
        let a = &self.arrays[index];
        let st = &self.statuses[index];
        let sb: &Superblock = &a.superblock;
        let kids = session::children(self.arrays, index);
        let slots = st
            .slots
            .iter()
            .map(|s| {
                let rep = a.report.iter().find(|r| {
                    matches!(r.decision, Decision::Active { role } | Decision::Recovering { role, .. } if role == s.role)
                        && Some(&r.member) == s.member.as_ref()
                });
                let child = kids
                    .iter()
                    .find(|(role, _)| *role == Some(s.role))
                    .map(|(_, i)| *i);
                SlotJson {
                    role: s.role,
                    member: s.member.clone(),
                    state: s.state,
                    io: s.io,
                    recovered_bytes: s.recovered_bytes,
                    by_bitmap: s.by_bitmap,
                    write_mostly: s.write_mostly,
                    device_uuid: rep.map(|r| r.device_uuid.clone()),
                    events: rep.map(|r| r.events),
                    // Depth guard: md nesting is shallow; a cycle must not recurse forever.
                    array: child
                        .filter(|_| depth < 16)
                        .map(|i| Box::new(self.array_json(i, depth + 1))),
                }
            })
            .collect();
        ArrayJson {
            name: st.name.clone(),
            full_name: sb.full_name(),
            uuid: st.uuid.clone(),
            level: st.level.clone(),
            layout: layout_text(sb.level, sb.layout, sb.feature_map),
            chunk_bytes: st.chunk_bytes,
            raid_devices: st.raid_devices,
            size_bytes: st.size_bytes,
            block_size: st.block_size,
            state: st.state,
            needs_resync: st.needs_resync,
            read_only: st.read_only,
            events: st.events,
            creation_time: Superblock::split_time(sb.ctime).0,
            update_time: Superblock::split_time(sb.utime).0,
            slots,
            spares: st.spares.clone(),
            faulty: st.faulty.clone(),
            journal: st.journal.clone(),
            consistency_policy: st.consistency_policy,
            checksums: st.checksums.clone(),
            ppl_recovered: st.ppl_recovered,
            sync: st.sync.clone(),
            last_sync: st.last_sync.clone(),
            not_used: a.report.iter().filter_map(not_used).collect(),
            counters: st.counters.clone(),
        }
    }

    pub fn json(&self, unavailable: &[Unavailable]) -> DetailJson {
        DetailJson {
            array: self.array_json(self.root, 0),
            unavailable: unavailable
                .iter()
                .map(|u| UnavailableJson {
                    member: u.member.clone(),
                    error: ErrorJson::from(&u.error),
                })
                .collect(),
            volumes: None,
        }
    }

    /// Indexes in report order: the outermost array first, then its inner arrays
    /// depth-first.
    fn order(&self) -> Vec<usize> {
        let mut out = Vec::new();
        let mut stack = vec![self.root];
        while let Some(i) = stack.pop() {
            if out.contains(&i) {
                continue;
            }
            out.push(i);
            let kids = session::children(self.arrays, i);
            stack.extend(kids.iter().rev().map(|(_, c)| *c));
        }
        out
    }

    fn block(&self, index: usize) -> String {
        let a = &self.arrays[index];
        let st = &self.statuses[index];
        let sb = &a.superblock;
        let mut b = KvBlock::new();
        b.add("Name", sb.full_name());
        b.add("UUID", st.uuid.clone());
        b.add("Raid Level", st.level.clone());
        if let Some(l) = layout_text(sb.level, sb.layout, sb.feature_map) {
            b.add("Layout", l);
        }
        if st.chunk_bytes != 0 {
            b.add("Chunk Size", size::chunk_text(st.chunk_bytes));
        }
        b.add("Raid Devices", st.raid_devices.to_string());
        b.add("Array Size", size::kib_text(st.size_bytes));
        b.add("Block Size", st.block_size.to_string());
        b.add("Creation Time", text::md_time_text(sb.ctime));
        b.blank();
        b.add("State", state_text(st.state));
        b.add("Needs Resync", text::yes_no(st.needs_resync));
        if let Some(e) = st.events {
            b.add("Events", e.to_string());
        }
        consistency_lines(&mut b, st);
        if let Some(sc) = &st.counters.stripe_cache {
            b.add("Stripe Cache", stripe_cache_text(sc));
        }
        dab_lines(&mut b, &st.counters.dab);
        let mut text = format!("array {}:\n{}\n", st.name, b.render(15));
        let kids = session::children(self.arrays, index);
        text.push_str("    Role  State     Member\n");
        for s in &st.slots {
            let member = s.member.as_deref().unwrap_or("-");
            let nested = kids
                .iter()
                .find(|(role, _)| *role == Some(s.role))
                .map(|(_, i)| {
                    let inner = &self.statuses[*i];
                    format!(" ({}, {}, see below)", inner.level, state_text(inner.state))
                })
                .unwrap_or_default();
            let mut how = String::new();
            if s.write_mostly {
                how.push_str(" (write-mostly)");
            }
            if s.by_bitmap {
                how.push_str(" (re-added: only the chunks its bitmap marks)");
            }
            if s.io.read_errors + s.io.write_errors + s.io.checksum_errors > 0 {
                how.push_str(&format!(
                    " (errors: {} read, {} write, {} checksum; {} corrected, {} repaired)",
                    s.io.read_errors,
                    s.io.write_errors,
                    s.io.checksum_errors,
                    s.io.corrected_errors,
                    crate::size::short(s.io.repaired_bytes)
                ));
            }
            text.push_str(&format!(
                "    {:>4}  {:<8}  {member}{nested}{how}\n",
                s.role,
                slot_state_text(s.state)
            ));
        }
        let unused: Vec<NotUsedJson> = a.report.iter().filter_map(not_used).collect();
        if !unused.is_empty() {
            text.push_str("\n    Not used:\n");
            for u in unused {
                text.push_str(&format!("      {}  {}\n", u.member, u.explanation));
            }
        }
        if !st.spares.is_empty() {
            text.push_str("\n    Spares:\n");
            for s in &st.spares {
                text.push_str(&format!("      {s}\n"));
            }
        }
        if !st.faulty.is_empty() {
            text.push_str("\n    Failed, out of their slot (raidd remove):\n");
            for s in &st.faulty {
                text.push_str(&format!("      {s}\n"));
            }
        }
        if let Some(j) = &st.journal {
            text.push_str(&format!("\n    {}\n", crate::progress::journal_line(j)));
        }
        if let Some(sync) = &st.sync {
            text.push_str(&format!("\n    {}\n", crate::progress::sync_line(sync)));
        }
        text
    }

    fn tree(&self, index: usize, prefix: &str, out: &mut String, depth: usize) {
        let st = &self.statuses[index];
        let kids = session::children(self.arrays, index);
        let n = st.slots.len();
        for (k, s) in st.slots.iter().enumerate() {
            let last = k + 1 == n;
            let (branch, cont) = if last {
                ("`-- ", "    ")
            } else {
                ("|-- ", "|   ")
            };
            let child = kids
                .iter()
                .find(|(role, _)| *role == Some(s.role))
                .map(|(_, i)| *i);
            let label = match child {
                Some(i) => {
                    let inner = &self.statuses[i];
                    format!(
                        "{} ({}, {})",
                        inner.name,
                        inner.level,
                        state_text(inner.state)
                    )
                }
                None => s.member.clone().unwrap_or_else(|| "-".to_string()),
            };
            out.push_str(&format!(
                "{prefix}{branch}[{}] {}: {label}\n",
                s.role,
                slot_state_text(s.state)
            ));
            if let Some(i) = child.filter(|_| depth < 16) {
                self.tree(i, &format!("{prefix}{cont}"), out, depth + 1);
            }
        }
    }

    /// The human report.
    pub fn text(&self, unavailable: &[Unavailable]) -> String {
        let order = self.order();
        let mut text = String::new();
        if order.len() > 1 {
            let st = &self.statuses[self.root];
            text.push_str(&format!(
                "{} ({}, {})\n",
                st.name,
                st.level,
                state_text(st.state)
            ));
            self.tree(self.root, "", &mut text, 0);
            text.push('\n');
        }
        for (k, i) in order.iter().enumerate() {
            if k > 0 {
                text.push('\n');
            }
            text.push_str(&self.block(*i));
        }
        if !unavailable.is_empty() {
            text.push_str("\nUnavailable members:\n");
            for u in unavailable {
                text.push_str(&format!("  {}: {}\n", u.member, u.error));
            }
        }
        text
    }
}

/// The consistency policy (mdadm's "Consistency Policy") and what a partial parity log
/// recovered at the start.
fn consistency_lines(b: &mut KvBlock, st: &ArrayStatus) {
    b.add("Consistency Policy", st.consistency_policy.to_string());
    if let Some(c) = &st.checksums {
        b.add(
            "Checksums",
            format!("{c} of every 4 KiB block, verified on every read"),
        );
        if st.checksums_unverified_blocks > 0 {
            b.add(
                "Checksums Unverified",
                format!(
                    "{} of tags being re-derived from the data (read unverified until then)",
                    crate::size::short(st.checksums_unverified_blocks * 4096)
                ),
            );
        }
    }
    if let Some(r) = &st.ppl_recovered {
        b.add(
            "PPL Recovery",
            format!(
                "{} entries applied ({} blocks of parity rewritten), {} not applied",
                r.entries, r.blocks, r.not_applied
            ),
        );
    }
}

/// The stripe cache on one line.
fn stripe_cache_text(sc: &raidd_engine::StripeCacheStatus) -> String {
    format!(
        "{} kept of {}, gather {}, small writes alone {}; {} batches, {} joined, {} with rows \
         known",
        size::human(sc.cached_bytes as u64),
        size::human(sc.limit_bytes as u64),
        sc.gather,
        sc.write_alone,
        sc.batches,
        sc.gathered,
        sc.hits
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_in_words() {
        let r = |decision| MemberReport {
            member: "/m".into(),
            device_uuid: "u".into(),
            events: 3,
            decision,
        };
        assert!(not_used(&r(Decision::Active { role: 0 })).is_none());
        assert!(not_used(&r(Decision::Spare)).is_none());
        let s = not_used(&r(Decision::Stale {
            events: 3,
            array_events: 9,
        }))
        .expect("stale");
        assert_eq!(s.reason, "stale");
        assert_eq!(s.array_events, Some(9));
        assert!(s.explanation.contains("3") && s.explanation.contains("9"));
        let d = not_used(&r(Decision::Displaced { role: 2 })).expect("displaced");
        assert_eq!((d.reason, d.role), ("displaced", Some(2)));
        assert!(not_used(&r(Decision::Recovering {
            role: 1,
            recovery_offset: 64,
        }))
        .is_none());
        assert_eq!(
            not_used(&r(Decision::Faulty)).map(|f| f.reason),
            Some("faulty")
        );
        assert_eq!(slot_state_text(SlotState::InSync), "in sync");
        assert_eq!(state_text(ArrayState::Degraded), "degraded");
    }

    #[test]
    fn a_journal_that_is_not_working_says_the_array_is_read_only() {
        use raidd_engine::{JournalState, JournalStatus};
        let line = |member: Option<&str>, state| {
            crate::progress::journal_line(&JournalStatus {
                member: member.map(str::to_string),
                state,
                mode: raidd_engine::JournalMode::WriteThrough,
                cached_bytes: 0,
                cache_limit_bytes: 0,
                log_bytes: None,
                used_bytes: None,
                recovered: None,
            })
        };
        assert_eq!(
            line(Some("/d/j.img"), JournalState::Active),
            "Write journal: /d/j.img (active)"
        );
        assert!(
            line(Some("/d/j.img"), JournalState::Faulty).contains("faulty: the array is read-only")
        );
        assert!(line(None, JournalState::Missing).contains("missing (the array is read-only"));
    }
}
