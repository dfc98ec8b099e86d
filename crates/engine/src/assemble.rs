//! Assembly: from members carrying md v1.2 superblocks to a running array.
//!
//! Decisions follow md and mdadm: the member with the highest event count is the reference;
//! a member more than one event behind it is stale and never used silently; a member the
//! reference records as faulty stays out; two members claiming one slot keep the newer.
//! Every decision is reported, so `raidd detail` can say why a member is not in use.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use raidd_layout::{Geometry, Level, ParityLayout, Raid0Layout, Raid10Layout};
use raidd_md::badblocks::BadRange;
use raidd_md::journal::BLOCK_SECTORS;
use raidd_md::ppl::Area;
use raidd_md::{feature, BitmapSuper, DevRole, Superblock};
use serde::Serialize;

use crate::array::{
    stripe_log_sectors, uuid_string, Array, ArrayParts, JournalParts, PplParts, RingPlace,
    SlotParts,
};
use crate::error::{Error, ErrorKind, Result};
pub use crate::md_io::examine;
use crate::md_io::read_bad_blocks;
use crate::member::read_bytes;
use crate::member::Member;
use crate::meta::{MemberSb, Metadata};

/// What assembly did with one member.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase", tag = "decision")]
pub enum Decision {
    /// In use in this slot.
    Active { role: usize },
    /// A spare.
    Spare,
    /// Not used: its event count is behind the array's.
    Stale {
        /// Also in [`MemberReport::events`]; not serialised twice.
        #[serde(skip)]
        events: u64,
        array_events: u64,
    },
    /// Not used: the array records it as failed.
    Faulty,
    /// In this slot, part way through its rebuild: current below `recovery_offset` (member
    /// sectors); the recovery resumes there.
    Recovering { role: usize, recovery_offset: u64 },
    /// Not used: another member holds its slot with newer data.
    Displaced { role: usize },
    /// Not used: a replacement the kernel was building for this slot (`mdadm --replace`),
    /// part way, while the member it replaces is here and in use.
    Replacement { role: usize },
    /// Not used: its bad-block log records sectors where it does not hold the array's data
    /// (the kernel reads around them; raidd does not). Adding it back rebuilds it whole.
    /// The array's write journal (md's role 0xfffd).
    Journal,
    #[serde(rename = "bad_blocks")]
    BadBlocks {
        /// Ranges recorded, their sectors in all, and the first (device sector).
        ranges: usize,
        sectors: u64,
        first: u64,
    },
}

impl std::fmt::Display for Decision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Decision::Active { role } => write!(f, "active in slot {role}"),
            Decision::Spare => write!(f, "spare"),
            Decision::Journal => write!(f, "write journal"),
            Decision::Stale {
                events,
                array_events,
            } => write!(
                f,
                "stale: its event count {events} is behind the array's {array_events}"
            ),
            Decision::Faulty => write!(f, "faulty: the array records it as failed"),
            Decision::Recovering {
                role,
                recovery_offset,
            } => write!(
                f,
                "recovering in slot {role}: rebuilt up to sector {recovery_offset}"
            ),
            Decision::Displaced { role } => write!(
                f,
                "displaced: another member holds slot {role} with newer data"
            ),
            Decision::Replacement { role } => write!(
                f,
                "replacement: a replacement for slot {role} stopped part way, and the member \
                 it replaces is in use (replace it again to finish)"
            ),
            Decision::BadBlocks {
                ranges,
                sectors,
                first,
            } => write!(
                f,
                "bad blocks: its bad-block log records {sectors} sectors in {ranges} range(s), \
                 the first at device sector {first}, where it does not hold the array's data \
                 (raidd does not read around them; add it back to rebuild it whole)"
            ),
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct MemberReport {
    pub member: String,
    pub device_uuid: String,
    pub events: u64,
    #[serde(flatten)]
    pub decision: Decision,
}

/// A running array and how it was put together.
#[derive(Debug)]
pub struct Assembled {
    pub array: Arc<Array>,
    pub report: Vec<MemberReport>,
    /// The reference (newest) superblock.
    pub superblock: Superblock,
}

#[derive(Clone, Copy, Debug, Default)]
pub struct AssembleOptions {
    /// Never write to the members (no superblock updates either).
    pub read_only: bool,
    /// Start a RAID4/5/6 array that was stopped uncleanly and is degraded. Its parity may
    /// not match the data where writes were in flight, and there a missing member's data,
    /// computed from that parity, comes back wrong: md refuses to start such an array
    /// ("cannot start dirty degraded array") unless told to (`start_dirty_degraded`).
    pub start_dirty_degraded: bool,
    /// Bytes of checksum tag pages held in memory for the whole array (0: the default,
    /// [`DEFAULT_TAG_CACHE`]), shared out evenly among its members.
    pub tag_cache: u64,
}

/// The tag cache of an array with checksums when none is configured: 16 MiB holds the tags
/// of 16 TiB of data, so a 4 KiB random read costs no second member read once warm.
pub const DEFAULT_TAG_CACHE: u64 = 16 << 20;

impl AssembleOptions {
    /// Options that never write to the members.
    pub fn read_only() -> AssembleOptions {
        AssembleOptions {
            read_only: true,
            ..AssembleOptions::default()
        }
    }
}

struct Found {
    member: Arc<dyn Member>,
    sb: Superblock,
    /// What its bad-block log records within its data area.
    bad: Vec<BadRange>,
}

fn check_features(name: &str, sb: &Superblock) -> Result<()> {
    let ppl = feature::PPL | feature::MULTIPLE_PPLS;
    if sb.feature_map & ppl != 0 && sb.level != 5 {
        // md: "PPL is not compatible with raid level N".
        return Err(Error::new(
            ErrorKind::BadMetadata,
            format!(
                "{name}: a partial parity log on md level {}: md keeps one only for RAID5",
                sb.level
            ),
        ));
    }
    if sb.feature_map & feature::JOURNAL != 0 && !matches!(sb.level, 4..=6) {
        // md: a journal is raid5-cache's, for RAID4/5/6.
        return Err(Error::new(
            ErrorKind::BadMetadata,
            format!(
                "{name}: a write journal on md level {}: md keeps one only for RAID4/5/6",
                sb.level
            ),
        ));
    }
    let unsupported = sb.feature_map & !(feature::SUPPORTED | ppl | feature::JOURNAL);
    if unsupported == 0 {
        return Ok(());
    }
    let names: Vec<&str> = [
        (feature::RESHAPE_ACTIVE, "reshape in progress"),
        (feature::RESHAPE_BACKWARDS, "backwards reshape"),
        (feature::NEW_OFFSET, "data offset change"),
        (feature::CLUSTERED, "clustered md"),
        (feature::JOURNAL, "write journal"),
    ]
    .iter()
    .filter(|(bit, _)| unsupported & bit != 0)
    .map(|(_, n)| *n)
    .collect();
    Err(Error::new(
        ErrorKind::Unsupported,
        format!(
            "{name}: md features raidd does not support: {} ({unsupported:#x})",
            names.join(", ")
        ),
    ))
}

/// Where each slot's member keeps its partial parity log, where the array has one: its
/// superblock's area, checked as md checks it. A chunk must fit one unit of the log (a
/// stripe write logs up to a chunk of partial parity at once).
fn ppl_parts(
    found: &[Found],
    slots: &[Option<usize>],
    reference: &Superblock,
) -> Result<Option<PplParts>> {
    if Area::of(reference).is_none() {
        return Ok(None);
    }
    let areas = slots
        .iter()
        .map(|s| {
            let Some(i) = *s else { return Ok(None) };
            let a = crate::array::ppl_log_area(&found[i].sb, &found[i].member.info().name)?;
            Ok(Some((a.at, a.area)))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Some(PplParts { areas }))
}

/// The array's geometry from the reference superblock and the members' data sizes.
fn geometry_from(sb: &Superblock, data_sectors: &[Option<u64>]) -> Result<Geometry> {
    let bad = |why: String| Error::new(ErrorKind::BadMetadata, why);
    let level = Level::from_md_number(sb.level).ok_or_else(|| {
        Error::new(
            ErrorKind::Unsupported,
            format!("md level {} is not supported", sb.level),
        )
    })?;
    let n = sb.raid_disks as usize;
    let all_sizes = || -> Result<Vec<u64>> {
        data_sectors
            .iter()
            .enumerate()
            .map(|(r, s)| {
                s.ok_or_else(|| {
                    Error::new(
                        ErrorKind::InsufficientMembers,
                        format!("{level} cannot run without member {r}: it has no redundancy"),
                    )
                })
            })
            .collect()
    };
    let g = match level {
        Level::Linear => Geometry::linear(&all_sizes()?, sb.chunksize)?,
        Level::Raid0 => {
            let layout = if sb.feature_map & feature::RAID0_LAYOUT != 0 {
                Raid0Layout::from_md_number(sb.layout)
                    .ok_or_else(|| bad(format!("raid0 layout {} is unknown", sb.layout)))?
            } else {
                Raid0Layout::Original
            };
            let sizes = all_sizes()?;
            let g = Geometry::raid0(&sizes, sb.chunksize, layout)?;
            let chunk = u64::from(sb.chunksize.max(1));
            let multi_zone = sizes.iter().any(|s| s / chunk != sizes[0] / chunk);
            if multi_zone && sb.feature_map & feature::RAID0_LAYOUT == 0 {
                return Err(Error::new(
                    ErrorKind::Unsupported,
                    "raid0 with members of different sizes and no recorded layout: \
                     the kernel refuses it too (see md's raid0.default_layout)",
                ));
            }
            g
        }
        Level::Raid1 => Geometry::raid1(n, sb.size)?,
        Level::Raid10 => {
            let layout = Raid10Layout::from_md_number(sb.layout)
                .ok_or_else(|| bad(format!("raid10 layout {:#x} is not supported", sb.layout)))?;
            Geometry::raid10(n, layout, sb.chunksize, sb.size)?
        }
        Level::Raid4 | Level::Raid5 | Level::Raid6 => {
            let layout = if level == Level::Raid4 {
                ParityLayout::ParityLast
            } else {
                ParityLayout::from_md_number(sb.layout).ok_or_else(|| {
                    Error::new(
                        ErrorKind::Unsupported,
                        format!("{level} layout {} is not supported", sb.layout),
                    )
                })?
            };
            Geometry::parity(level, n, layout, sb.chunksize, sb.size)?
        }
    };
    debug_assert_eq!(g.members(), n, "a member per raid disk");
    debug_assert_eq!(g.level(), level);
    Ok(g)
}

/// Assembles one array from members that all carry its superblock.
pub async fn assemble(members: Vec<Arc<dyn Member>>, opts: AssembleOptions) -> Result<Assembled> {
    if members.is_empty() {
        return Err(Error::new(ErrorKind::InvalidInput, "no members given"));
    }
    let mut found = Vec::with_capacity(members.len());
    for m in members {
        let sb = examine(&*m).await?;
        check_features(&m.info().name, &sb)?;
        let bad = read_bad_blocks(&*m, &sb).await?;
        found.push(Found { member: m, sb, bad });
    }
    check_one_array(&found)?;
    let newest = found
        .iter()
        .map(|f| f.sb.events)
        .max()
        .expect("at least one member");
    let reference = found
        .iter()
        .find(|f| f.sb.events == newest)
        .expect("newest exists")
        .sb
        .clone();
    let placed = place(&found, &reference, newest);
    debug_assert_eq!(
        placed.report.len(),
        found.len(),
        "every member found is reported"
    );
    for r in &placed.report {
        match &r.decision {
            Decision::Active { .. } | Decision::Spare | Decision::Journal => {}
            d => tracing::warn!(member = %r.member, "not used: {d}"),
        }
    }
    open_checksums(&mut found, &placed, newest, &opts).await?;
    let data_sectors: Vec<Option<u64>> = placed
        .slots
        .iter()
        .map(|s| s.map(|i| found[i].sb.data_size))
        .collect();
    let geometry = geometry_from(&reference, &data_sectors)?;
    let bitmap = read_bitmap(&found, &placed.slots, &placed.partial, &reference).await?;
    let journal = journal_parts(&found, placed.journal, &reference, &geometry)?;
    let parts = ArrayParts {
        name: reference.array_name(),
        uuid: reference.set_uuid,
        geometry,
        slots: placed.slot_parts(&found),
        spares: placed
            .spares
            .iter()
            .map(|&i| found[i].member.clone())
            .collect(),
        journal,
        ppl: ppl_parts(&found, &placed.slots, &reference)?,
        read_only: opts.read_only,
    };
    let meta = placed.metadata(&found, bitmap);
    let array = Array::build(parts, Some(meta)).map_err(|e| naming_unused(e, &placed.report))?;
    // After a crash of raidd's own, only the regions the bitmap marks need their tags
    // re-derived.
    crate::array::rederive::narrow_to_bitmap(&array);
    // The partial parity log recovers an unclean stop before anything else reads the
    // array (a read-only array recovers nothing: it writes nothing).
    let recovered = array.start_logs().await?;
    if !opts.start_dirty_degraded && !recovered {
        check_dirty_degraded(&array)?;
    }
    Ok(Assembled {
        array: Arc::new(array),
        report: placed.report,
        superblock: reference,
    })
}

/// An array whose members carry checksum tags (a member's tag header that belongs to it,
/// `raidd_md::tags`) gets each member in a slot or spare in a [`ChecksummedMember`]:
/// tags found trusted are used, others are suspect until [`crate::array::rederive::rederive_checksums`]
/// re-derives them from the data. A read-only assembly re-derives nothing (it writes
/// nothing): a member whose tags it cannot trust is read unverified, and says so.
async fn open_checksums(
    found: &mut [Found],
    placed: &Placed,
    events: u64,
    opts: &AssembleOptions,
) -> Result<()> {
    let used: Vec<usize> = placed
        .slots
        .iter()
        .flatten()
        .chain(&placed.spares)
        .copied()
        .collect();
    let mut headers = Vec::with_capacity(used.len());
    for &i in &used {
        let f = &found[i];
        let facts = crate::member::TagFacts::of(&f.sb, events);
        let h = crate::member::read_tag_header(&*f.member, &facts)
            .await
            .map_err(|e| {
                Error::io(
                    format!("{}: reading its tag header", f.member.info().name),
                    e,
                )
            })?;
        headers.push((i, facts, h));
    }
    let Some(algorithm) = headers
        .iter()
        .find_map(|(_, _, h)| h.as_ref().ok().map(|h| h.algorithm))
    else {
        return Ok(());
    };
    let cache = if opts.tag_cache == 0 {
        DEFAULT_TAG_CACHE
    } else {
        opts.tag_cache
    } / used.len().max(1) as u64;
    for (i, facts, h) in headers {
        let name = found[i].member.info().name.clone();
        if opts.read_only && !h.as_ref().is_ok_and(|h| h.trusted_at(events)) {
            tracing::warn!(member = %name, "checksums not verified (read-only, and its tags are not known to match its data)");
            continue;
        }
        let (m, how) =
            crate::member::open_checksums(found[i].member.clone(), &facts, h, algorithm, cache)
                .await
                .map_err(|e| Error::io(format!("{name}: opening its checksum tags"), e))?;
        if let crate::member::ChecksumsOpened::Untrusted(why) = how {
            tracing::warn!(member = %name, "checksum tags not trusted ({why}): re-deriving them from the data");
        }
        debug_assert!(
            m.info().block_size >= 4096,
            "checksummed members take 4 KiB blocks"
        );
        found[i].member = Arc::new(m);
    }
    Ok(())
}

/// Where assembly puts each member found (indexes into the members found).
struct Placed {
    /// The member in each slot.
    slots: Vec<Option<usize>>,
    /// Slots held by a member part way through its rebuild, with its recovery point.
    partial: Vec<Option<u64>>,
    spares: Vec<usize>,
    /// The write journal's member, where one was found.
    journal: Option<usize>,
    /// Every member found, with what assembly decided for it.
    report: Vec<MemberReport>,
}

/// Decides each member's place against the newest superblock (`reference`, with `newest`
/// events): a slot, a spare, or set aside. Two members claiming one slot: a finished one
/// wins over a recovering one, then newer events.
fn place(found: &[Found], reference: &Superblock, newest: u64) -> Placed {
    let n = reference.raid_disks as usize;
    let mut p = Placed {
        slots: vec![None; n],
        partial: vec![None; n],
        spares: Vec::new(),
        journal: None,
        report: Vec::new(),
    };
    for (i, f) in found.iter().enumerate() {
        let decision = decide(f, reference, newest);
        let (role, recovery) = match decision {
            Decision::Active { role } => (Some(role), None),
            Decision::Recovering {
                role,
                recovery_offset,
            } => (Some(role), Some(recovery_offset)),
            _ => (None, None),
        };
        let decision = match role {
            Some(role) if role >= n => Decision::Spare,
            Some(role) => {
                let rank = |k: usize, rec: Option<u64>| (rec.is_none(), found[k].sb.events);
                let displaced = |k: usize| {
                    if found[k].sb.feature_map & feature::REPLACEMENT != 0 {
                        Decision::Replacement { role }
                    } else {
                        Decision::Displaced { role }
                    }
                };
                match p.slots[role] {
                    Some(j) if rank(j, p.partial[role]) >= rank(i, recovery) => displaced(i),
                    prev => {
                        if let Some(j) = prev {
                            p.report[j] = report_of(&found[j], displaced(j));
                        }
                        p.slots[role] = Some(i);
                        p.partial[role] = recovery;
                        decision
                    }
                }
            }
            None => decision,
        };
        let decision = match decision {
            // Two journals: the one with newer events is the array's; the other stands
            // aside like a displaced member.
            Decision::Journal => match p.journal {
                Some(j) if found[j].sb.events >= f.sb.events => Decision::Spare,
                _ => {
                    p.journal = Some(i);
                    decision
                }
            },
            d => d,
        };
        if decision == Decision::Spare {
            p.spares.push(i);
        }
        p.report.push(report_of(f, decision));
    }
    debug_assert!(
        p.slots.iter().flatten().all(|i| !p.spares.contains(i)),
        "a member is in a slot or a spare, not both"
    );
    debug_assert!(
        p.slots
            .iter()
            .zip(&p.partial)
            .all(|(s, r)| s.is_some() || r.is_none()),
        "only a held slot has a recovery point"
    );
    p
}

impl Placed {
    /// What the array starts from in each slot.
    fn slot_parts(&self, found: &[Found]) -> Vec<Option<SlotParts>> {
        debug_assert_eq!(
            self.slots.len(),
            self.partial.len(),
            "a recovery point per slot"
        );
        self.slots
            .iter()
            .zip(&self.partial)
            .map(|(s, rec)| {
                s.map(|i| SlotParts {
                    member: found[i].member.clone(),
                    data_offset: found[i].sb.data_offset * 512,
                    recovered: *rec,
                    by_bitmap: found[i].sb.feature_map & feature::RECOVERY_BITMAP != 0,
                    write_mostly: found[i].sb.devflags & raidd_md::devflags::WRITE_MOSTLY != 0,
                })
            })
            .collect()
    }

    /// The array's metadata: each slot's and spare's superblock.
    fn metadata(&self, found: &[Found], bitmap: Option<(BitmapSuper, Vec<u8>)>) -> Metadata {
        Metadata::new(
            self.slots
                .iter()
                .map(|s| {
                    s.map(|i| {
                        // A replacement in its slot (the member it replaced is gone) is this
                        // slot's recovering member from now on.
                        let mut sb = found[i].sb.clone();
                        sb.feature_map &= !feature::REPLACEMENT;
                        MemberSb {
                            sb,
                            member: found[i].member.clone(),
                        }
                    })
                })
                .collect(),
            self.spares
                .iter()
                .map(|&i| MemberSb {
                    sb: found[i].sb.clone(),
                    member: found[i].member.clone(),
                })
                .collect(),
            self.journal.map(|i| MemberSb {
                sb: found[i].sb.clone(),
                member: found[i].member.clone(),
            }),
            bitmap,
        )
    }
}

/// The write journal of an array with md's JOURNAL feature: its member, where one was
/// found, and where its log lies (the member's data area, whole 4 KiB blocks, and the
/// superblock's `journal_tail`), checked.
fn journal_parts(
    found: &[Found],
    journal: Option<usize>,
    reference: &Superblock,
    geometry: &Geometry,
) -> Result<Option<JournalParts>> {
    if reference.feature_map & feature::JOURNAL == 0 {
        return Ok(None);
    }
    let Some(i) = journal else {
        tracing::warn!(array = %reference.array_name(),
            "the write journal is missing: the array starts read-only (md: journal disk is missing)");
        return Ok(Some(JournalParts {
            member: None,
            place: None,
        }));
    };
    let (sb, name) = (&found[i].sb, found[i].member.info().name.clone());
    let bad = |why: String| Error::new(ErrorKind::BadMetadata, format!("{name}: {why}"));
    let ring = sb.data_size / BLOCK_SECTORS * BLOCK_SECTORS;
    let tail = sb.recovery_offset;
    if ring < 4 * BLOCK_SECTORS {
        return Err(bad(format!(
            "a write journal of {ring} sectors: md's log needs some 4 KiB blocks"
        )));
    }
    // raidd logs a stripe's rows at once (md logs 4 KiB rows one by one): two stripes'
    // worth must fit.
    let need = geometry
        .as_parity()
        .map_or(0, |pg| 2 * stripe_log_sectors(pg));
    if ring < need {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "{name}: a write journal of {} KiB; raidd needs {} KiB for this array's chunks",
                ring / 2,
                need / 2
            ),
        ));
    }
    if tail >= ring || !tail.is_multiple_of(BLOCK_SECTORS) {
        return Err(bad(format!(
            "the journal's tail {tail} is not a block of its {ring}-sector log"
        )));
    }
    Ok(Some(JournalParts {
        member: Some(found[i].member.clone()),
        place: Some(RingPlace {
            data_at: sb.data_offset * 512,
            ring,
            head: tail,
            seq: 0,
            tail,
        }),
    }))
}

/// Too few members to run: the error also names the members assembly set aside, and why
/// (that is what an administrator needs to decide what to bring back).
fn naming_unused(e: Error, report: &[MemberReport]) -> Error {
    if e.kind() != ErrorKind::InsufficientMembers {
        return e;
    }
    let unused: Vec<String> = report
        .iter()
        .filter(|r| {
            !matches!(
                r.decision,
                Decision::Active { .. } | Decision::Spare | Decision::Recovering { .. }
            )
        })
        .map(|r| format!("{}: {}", r.member, r.decision))
        .collect();
    if unused.is_empty() {
        return e;
    }
    Error::new(
        e.kind(),
        format!("{}; not used: {}", e.message(), unused.join("; ")),
    )
}

/// Refuses a RAID4/5/6 array that was stopped with writes in flight and has lost a member
/// since (md's rule). Until a resync, parity there may be stale, and the lost member's data
/// would be computed from it: reads would return wrong data without an error, and a rebuild
/// would write it onto the new member for good.
fn check_dirty_degraded(array: &Array) -> Result<()> {
    if !array.geometry().level().has_parity() || !array.needs_resync() || !array.is_degraded() {
        return Ok(());
    }
    debug_assert!(
        !array.slots().not_in_sync().is_empty(),
        "a degraded array misses a slot"
    );
    let slots: Vec<String> = array
        .slots()
        .not_in_sync()
        .iter()
        .map(ToString::to_string)
        .collect();
    Err(Error::new(
        ErrorKind::Conflict,
        format!(
            "array {} was not shut down cleanly and is degraded (slot {} not in sync): where \
             writes were in flight its parity may not match the data, so the missing data \
             computed from it could be wrong. Give every member so that it resyncs first, or \
             start it anyway (start_dirty_degraded = true in its configuration, \
             --start-dirty-degraded on the command line); md refuses this array too",
            array.name(),
            slots.join(", ")
        ),
    ))
}

fn report_of(f: &Found, decision: Decision) -> MemberReport {
    MemberReport {
        member: f.member.info().name.clone(),
        device_uuid: uuid_string(&f.sb.device_uuid),
        events: f.sb.events,
        decision,
    }
}

fn decide(f: &Found, reference: &Superblock, newest: u64) -> Decision {
    debug_assert!(f.sb.events <= newest, "the reference is the newest member");
    if f.sb.events.saturating_add(1) < newest {
        return Decision::Stale {
            events: f.sb.events,
            array_events: newest,
        };
    }
    let recorded = reference
        .dev_roles
        .get(f.sb.dev_number as usize)
        .map(|&r| DevRole::from_raw(r))
        .unwrap_or(DevRole::Spare);
    if recorded == DevRole::Faulty {
        return Decision::Faulty;
    }
    if let (Some(first), DevRole::Active(_)) = (f.bad.first(), f.sb.own_role()) {
        return Decision::BadBlocks {
            ranges: f.bad.len(),
            sectors: f.bad.iter().map(|r| r.sectors).sum(),
            first: first.start,
        };
    }
    match f.sb.own_role() {
        // A replacement is a member of its slot that is being rebuilt: current below its
        // recovery offset, as a recovering member (without one, none of it is known yet).
        DevRole::Active(r) if f.sb.feature_map & feature::REPLACEMENT != 0 => {
            Decision::Recovering {
                role: usize::from(r),
                recovery_offset: if f.sb.feature_map & feature::RECOVERY_OFFSET != 0 {
                    f.sb.recovery_offset.min(f.sb.size)
                } else {
                    0
                },
            }
        }
        DevRole::Active(r)
            if f.sb.feature_map & feature::RECOVERY_OFFSET != 0
                && f.sb.recovery_offset < f.sb.size =>
        {
            Decision::Recovering {
                role: usize::from(r),
                recovery_offset: f.sb.recovery_offset,
            }
        }
        DevRole::Active(r) => Decision::Active {
            role: usize::from(r),
        },
        DevRole::Faulty => Decision::Faulty,
        DevRole::Journal => Decision::Journal,
        DevRole::Spare => Decision::Spare,
    }
}

/// Refuses members of different arrays and the same member given twice.
fn check_one_array(found: &[Found]) -> Result<()> {
    let first = &found[0].sb;
    for f in &found[1..] {
        if f.sb.set_uuid != first.set_uuid {
            return Err(Error::new(
                ErrorKind::Conflict,
                format!(
                    "{} belongs to array {} ({}) but {} belongs to {} ({})",
                    f.member.info().name,
                    f.sb.full_name(),
                    uuid_string(&f.sb.set_uuid),
                    found[0].member.info().name,
                    first.full_name(),
                    uuid_string(&first.set_uuid)
                ),
            ));
        }
    }
    let mut seen: HashMap<[u8; 16], &str> = HashMap::new();
    let mut names: HashMap<&str, ()> = HashMap::new();
    for f in found {
        let name = f.member.info().name.as_str();
        if names.insert(name, ()).is_some() {
            return Err(Error::new(
                ErrorKind::Conflict,
                format!("{name} is given twice"),
            ));
        }
        if let Some(other) = seen.insert(f.sb.device_uuid, name) {
            return Err(Error::new(
                ErrorKind::Conflict,
                format!(
                    "{name} and {other} carry the same device UUID {}: the same member twice, \
                     or a copy of one",
                    uuid_string(&f.sb.device_uuid)
                ),
            ));
        }
    }
    Ok(())
}

/// The internal bitmap's header and bits, read from an in-sync member with the newest
/// events (`partial[role]` is set for a slot whose member is still being rebuilt).
///
/// A member being rebuilt holds the bits of when it was added at best (as in md, which
/// reads the bitmap from in-sync members only): with no other member to read from, every
/// chunk counts as set.
async fn read_bitmap(
    found: &[Found],
    slots: &[Option<usize>],
    partial: &[Option<u64>],
    reference: &Superblock,
) -> Result<Option<(BitmapSuper, Vec<u8>)>> {
    if reference.feature_map & feature::BITMAP_OFFSET == 0 {
        return Ok(None);
    }
    let newest = |&(_, i): &(usize, usize)| found[i].sb.events == reference.events;
    let held = || {
        slots
            .iter()
            .enumerate()
            .filter_map(|(r, s)| s.map(|i| (r, i)))
    };
    let (i, in_sync) = match held().filter(newest).find(|&(r, _)| partial[r].is_none()) {
        Some((_, i)) => (i, true),
        None => match held().find(newest) {
            Some((_, i)) => (i, false),
            None => return Ok(None),
        },
    };
    let f = &found[i];
    let name = &f.member.info().name;
    let off = (f.sb.super_offset as i64 + i64::from(f.sb.bitmap_offset)) * 512;
    let off = u64::try_from(off).map_err(|_| {
        Error::new(
            ErrorKind::BadMetadata,
            format!("{name}: bitmap offset before the device"),
        )
    })?;
    let block = read_bytes(&*f.member, off, 4096)
        .await
        .map_err(|e| Error::io(format!("{name}: reading the bitmap"), e))?;
    let mut bm = BitmapSuper::parse(&block)
        .map_err(|e| Error::new(ErrorKind::BadMetadata, format!("{name}: {e}")))?;
    if bm.uuid != reference.set_uuid {
        return Err(Error::new(
            ErrorKind::BadMetadata,
            format!(
                "{name}: the write-intent bitmap belongs to array {}, not {} (the kernel \
                 refuses it too)",
                uuid_string(&bm.uuid),
                uuid_string(&reference.set_uuid)
            ),
        ));
    }
    // The bits follow the header; a bitmap larger than the space before the data is corrupt.
    let len = bm.stored_len(4096);
    let room = f.sb.data_offset.saturating_mul(512).saturating_sub(off);
    if len > room {
        return Err(Error::new(
            ErrorKind::BadMetadata,
            format!("{name}: the bitmap ({len} bytes) does not fit before the data"),
        ));
    }
    let all = read_bytes(&*f.member, off, len as usize)
        .await
        .map_err(|e| Error::io(format!("{name}: reading the bitmap"), e))?;
    let start = raidd_md::bitmap::BITMAP_SUPER_LEN;
    let mut bits = all[start..start + bm.bitmap_bytes() as usize].to_vec();
    if !in_sync {
        tracing::warn!(
            member = %name,
            "the write-intent bitmap is read from a member being rebuilt: every chunk is \
             treated as dirty"
        );
        bits.fill(0xff);
        bm.set_stale(true);
    } else if bm.is_out_of_date(reference.events) {
        // Its clear bits prove nothing (a failed bitmap write, an older copy): every chunk
        // counts as set, as in md; the header stays marked stale until these bits have
        // been written out again (meta.rs).
        tracing::warn!(
            member = %name,
            bitmap_events = bm.events,
            array_events = reference.events,
            "the write-intent bitmap is out of date: every chunk is treated as dirty"
        );
        bits.fill(0xff);
        bm.set_stale(true);
    }
    Ok(Some((bm, bits)))
}

/// An array of arrays that cannot run for want of members says so in the user's terms: its
/// members are inner arrays, assembled from the leaves given, and some are not among them.
fn missing_inner(e: Error, nested: bool, found: &[String]) -> Error {
    if !nested || e.kind() != ErrorKind::InsufficientMembers {
        return e;
    }
    Error::new(
        e.kind(),
        format!(
            "{e}; its members are arrays, and only {} could be assembled from the members \
             given ({}): give the members of every inner array",
            found.len(),
            found.join(", ")
        ),
    )
}

/// Assembles every array the members belong to, including arrays whose members are other
/// arrays (md nesting: the outer array's superblocks live inside the inner arrays). Returns
/// the outermost arrays last.
pub async fn assemble_all(
    members: Vec<Arc<dyn Member>>,
    opts: AssembleOptions,
) -> Result<Vec<Assembled>> {
    let mut out = Vec::new();
    let mut level: Vec<Arc<dyn Member>> = members;
    loop {
        let mut groups: BTreeMap<[u8; 16], Vec<Arc<dyn Member>>> = BTreeMap::new();
        let mut order = Vec::new();
        for m in level {
            let sb = examine(&*m).await?;
            if !groups.contains_key(&sb.set_uuid) {
                order.push(sb.set_uuid);
            }
            groups.entry(sb.set_uuid).or_default().push(m);
        }
        let mut next: Vec<Arc<dyn Member>> = Vec::new();
        let nested = !out.is_empty();
        for uuid in order {
            let ms = groups.remove(&uuid).expect("grouped above");
            let found: Vec<String> = ms.iter().map(|m| m.info().name.clone()).collect();
            let a = assemble(ms, opts)
                .await
                .map_err(|e| missing_inner(e, nested, &found))?;
            let as_member: Arc<dyn Member> = a.array.clone();
            if examine(&*as_member).await.is_ok() {
                next.push(as_member);
            }
            out.push(a);
        }
        if next.is_empty() {
            return Ok(out);
        }
        level = next;
    }
}
