//! Creating arrays: md v1.2 superblocks as mdadm 4.2 would write them (data offset, bad
//! block log, sizes, names), then assembly through the same path as any existing array.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use raidd_layout::{Geometry, Level, ParityLayout, Raid0Layout, Raid10Layout};
use raidd_md::create::{
    bblog_bm_space_sectors, bblog_placement, component_size_sectors, data_offset_with,
    default_data_offset, BITMAP_OFFSET_SECTORS, PPL_SPACE_SECTORS,
};
use raidd_md::ppl::Area;
use raidd_md::{feature, BitmapSuper, DevRole, Superblock, MAX_SECTOR, SB_OFFSET_V12_SECTORS};

use crate::array::{stripe_log_sectors, write_empty_ppl, LogArea};
use crate::assemble::{assemble, examine, AssembleOptions, Assembled};
use crate::error::{Error, ErrorKind, Result};
use crate::member::write_bytes;
use crate::member::Member;

/// mdadm's default chunk for v1.2 metadata: 512 KiB.
pub const DEFAULT_CHUNK_SECTORS: u32 = 1024;
/// Slots in dev_roles, as mdadm writes for small arrays.
const MAX_DEV: usize = 128;

/// What to create.
#[derive(Clone, Debug)]
pub struct CreateSpec {
    pub name: String,
    /// The host part of md's "host:name" (mdadm uses the hostname).
    pub homehost: String,
    pub level: Level,
    /// md's layout number; `None` = the level's default (left-symmetric, near=2).
    pub layout: Option<u32>,
    /// Chunk in sectors for striped levels (`None` = 512 KiB); ignored by linear and RAID1.
    pub chunk_sectors: Option<u32>,
    /// One entry per slot; `None` creates the array degraded with that slot missing.
    pub members: Vec<Option<Arc<dyn Member>>>,
    /// Use at most this many sectors per member (component size); `None` = all.
    pub size_sectors: Option<u64>,
    /// Members are known consistent (all zero), so no initial sync is needed.
    pub assume_clean: bool,
    /// Overwrite members that already carry an md superblock.
    pub force: bool,
    /// An internal write-intent bitmap with this many bytes per bit (`None`: no bitmap).
    pub bitmap_chunk: Option<u32>,
    /// A partial parity log (md's `--consistency-policy=ppl`, RAID5 only, not with a
    /// bitmap): 1 MiB after the superblock of every member, as mdadm places it.
    pub ppl: bool,
    /// A write journal on this member (md's `--write-journal`, RAID4/5/6, neither with a
    /// bitmap nor a partial parity log): role 0xfffd, its data area the log.
    pub journal: Option<Arc<dyn Member>>,
    /// Checksum tags of every 4 KiB block of every member (`raidd_md::tags`), in an area
    /// past each member's data that md never touches; the data area shrinks to make room.
    pub checksums: Option<raidd_md::tags::Algorithm>,
}

/// mdadm's bitmap daemon period, seconds.
const BITMAP_DAEMON_SLEEP: u32 = 5;

fn invalid(msg: String) -> Error {
    Error::new(ErrorKind::InvalidInput, msg)
}

fn random16() -> Result<[u8; 16]> {
    let mut u = [0u8; 16];
    getrandom::fill(&mut u)
        .map_err(|e| Error::new(ErrorKind::Io, format!("no randomness for a UUID: {e}")))?;
    Ok(u)
}

fn md_time_now() -> u64 {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    Superblock::join_time(d.as_secs(), d.subsec_micros())
}

/// Chooses the layout number and checks it against the level.
fn layout_number(level: Level, layout: Option<u32>, multi_zone: bool) -> Result<u32> {
    let n = match (level, layout) {
        (Level::Linear | Level::Raid1, None) => 0,
        (Level::Linear | Level::Raid1, Some(l)) => {
            return Err(invalid(format!("{level} takes no layout (got {l})")));
        }
        (Level::Raid0, None) => {
            if multi_zone {
                Raid0Layout::Alternate.md_number()
            } else {
                0
            }
        }
        (Level::Raid0, Some(l)) => {
            Raid0Layout::from_md_number(l)
                .ok_or_else(|| invalid(format!("raid0 layout {l} is unknown")))?;
            l
        }
        (Level::Raid10, l) => {
            let l = l.unwrap_or(0x102);
            Raid10Layout::from_md_number(l)
                .ok_or_else(|| invalid(format!("raid10 layout {l:#x} is invalid")))?;
            l
        }
        (Level::Raid4, None) => ParityLayout::ParityLast.md_number(),
        (Level::Raid5 | Level::Raid6, None) => ParityLayout::LeftSymmetric.md_number(),
        (_, Some(l)) => {
            let p = ParityLayout::from_md_number(l)
                .filter(|p| p.valid_for(level))
                .ok_or_else(|| invalid(format!("layout {l} is not valid for {level}")))?;
            p.md_number()
        }
    };
    Ok(n)
}

/// Creates the array and returns it assembled (read-write). Unless `assume_clean` (or the
/// level has no redundancy), the array is marked as needing its initial sync; the caller runs
/// [`crate::Array::resync`].
pub async fn create(spec: CreateSpec) -> Result<Assembled> {
    let level = spec.level;
    check_policy(&spec)?;
    let n = spec.members.len();
    let present = members_to_use(&spec).await?;
    let chunk = match level {
        Level::Linear | Level::Raid1 => 0,
        _ => spec.chunk_sectors.unwrap_or(DEFAULT_CHUNK_SECTORS),
    };
    let Sizes {
        data_offset,
        avail,
        min_avail,
        component,
    } = sizes(&spec, &present, chunk)?;
    let rounded = |s: u64| {
        if chunk == 0 {
            s
        } else {
            s / u64::from(chunk) * u64::from(chunk)
        }
    };
    let multi_zone =
        level == Level::Raid0 && avail.iter().any(|&a| rounded(a) != rounded(min_avail));
    let layout = layout_number(level, spec.layout, multi_zone)?;
    // Validate the geometry before touching any member.
    let data_sizes: Vec<Option<u64>> = {
        let mut v = vec![None; n];
        for ((i, _), a) in present.iter().zip(&avail) {
            v[*i] = Some(*a);
        }
        v
    };
    let mut probe = template(
        &spec,
        level,
        layout,
        chunk,
        component,
        data_offset,
        multi_zone,
    )?;
    probe.data_size = min_avail;
    let geometry = check_geometry(&probe, &data_sizes)?;
    let bitmap = match spec.bitmap_chunk {
        None => None,
        Some(chunk) => Some(bitmap_for(&probe, &geometry, chunk, data_offset)?),
    };
    if bitmap.is_some() {
        probe.feature_map |= feature::BITMAP_OFFSET;
        probe.bitmap_offset = BITMAP_OFFSET_SECTORS as i32;
    }
    let ppl = spec.ppl.then_some(Area::MDADM);
    if let Some(area) = ppl {
        area.store(&mut probe);
        if u64::from(chunk) * 512 > area.unit_space() as u64 {
            return Err(invalid(format!(
                "a chunk of {} KiB is more than the partial parity log holds in one unit",
                chunk / 2
            )));
        }
    }
    let space = match ppl {
        Some(_) => PPL_SPACE_SECTORS,
        None => bblog_bm_space_sectors(component, bitmap.as_ref()),
    };
    let (bblog_offset, bblog_size) = bblog_placement(data_offset, space);
    let journal_sb = match &spec.journal {
        Some(j) => Some(journal_superblock(
            &**j,
            &mut probe,
            &geometry,
            (bblog_offset, bblog_size),
        )?),
        None => None,
    };
    for ((i, m), a) in present.iter().zip(&avail) {
        let mut sb = probe.clone();
        sb.dev_number = *i as u32;
        sb.device_uuid = random16()?;
        sb.data_size = *a;
        sb.bblog_offset = bblog_offset;
        sb.bblog_size = bblog_size;
        sb.bblog_shift = 0;
        write_member(&***m, &sb, bitmap.as_ref(), ppl).await?;
        if let Some(algorithm) = spec.checksums {
            write_tags(m, &sb, algorithm).await?;
        }
    }
    let mut members: Vec<Arc<dyn Member>> = present.iter().map(|(_, m)| (*m).clone()).collect();
    if let (Some(j), Some(sb)) = (&spec.journal, journal_sb) {
        write_journal_member(&**j, &sb).await?;
        members.push(j.clone());
    }
    debug_assert!(!members.is_empty() && members.len() <= n + usize::from(spec.journal.is_some()));
    assemble(members, AssembleOptions::default()).await
}

/// The consistency policy asked for, checked against the level and the other policy: md's
/// partial parity log is RAID5's alone and excludes a write-intent bitmap.
fn check_policy(spec: &CreateSpec) -> Result<()> {
    let level = spec.level;
    if spec.ppl && level != Level::Raid5 {
        return Err(invalid(format!(
            "a partial parity log is for RAID5 only (md's PPL), not {level}"
        )));
    }
    if spec.journal.is_some() && !matches!(level, Level::Raid4 | Level::Raid5 | Level::Raid6) {
        return Err(invalid(format!(
            "a write journal is for RAID4/5/6 (md's raid5-cache), not {level}"
        )));
    }
    if spec.journal.is_some() && (spec.ppl || spec.bitmap_chunk.is_some()) {
        return Err(invalid(
            "a write journal excludes a partial parity log and a write-intent bitmap (as md \
             enforces)"
                .into(),
        ));
    }
    if spec.ppl && spec.bitmap_chunk.is_some() {
        return Err(invalid(
            "a partial parity log and a write-intent bitmap exclude each other (as md enforces)"
                .into(),
        ));
    }
    Ok(())
}

/// Writes one member's metadata: its superblock over a cleared bad-block log, then the
/// bitmap or the empty partial parity log the array has.
async fn write_member(
    m: &dyn Member,
    sb: &Superblock,
    bitmap: Option<&BitmapSuper>,
    ppl: Option<Area>,
) -> Result<()> {
    crate::md_io::clear_bad_blocks(m, sb).await?;
    write_superblock(m, sb).await?;
    if let Some(bm) = bitmap {
        write_bitmap(m, bm, sb.resync_offset != MAX_SECTOR).await?;
    }
    if let Some(area) = ppl {
        let at = area.sector(sb.super_offset) * 512;
        let signature = raidd_md::ppl::signature(&sb.set_uuid);
        write_empty_ppl(m, LogArea { at, area }, signature)
            .await
            .map_err(|e| {
                Error::io(
                    format!("{}: writing the partial parity log", m.info().name),
                    e,
                )
            })?;
    }
    Ok(())
}

/// The journal member's superblock (device number and role after the slots', its whole
/// data area the log), checked to hold enough; `probe` gets md's JOURNAL feature and the
/// journal's role for every member.
fn journal_superblock(
    j: &dyn Member,
    probe: &mut Superblock,
    g: &Geometry,
    (bblog_offset, bblog_size): (i32, u16),
) -> Result<Superblock> {
    let n = probe.raid_disks as usize;
    probe.feature_map |= feature::JOURNAL;
    probe.dev_roles[n] = DevRole::Journal.to_raw();
    let mut sb = probe.clone();
    sb.dev_number = n as u32;
    sb.device_uuid = random16()?;
    sb.data_size = (j.info().size_bytes / 512).saturating_sub(sb.data_offset);
    sb.bblog_offset = bblog_offset;
    sb.bblog_size = bblog_size;
    let min = g.as_parity().map_or(0, |pg| 8 * stripe_log_sectors(pg));
    check_journal_room(&j.info().name, &sb, min)?;
    Ok(sb)
}

/// Whether the journal member's log holds eight stripes' writes in flight at once (`min`
/// sectors), 2 MiB at least.
fn check_journal_room(name: &str, sb: &Superblock, min: u64) -> Result<()> {
    let min = min.max(2 * 1024 * 2);
    if sb.data_size < min {
        return Err(invalid(format!(
            "{name}: a write journal for this array needs at least {} KiB past the metadata \
             area ({} KiB), it has {} KiB",
            min / 2,
            sb.data_offset / 2,
            sb.data_size / 2
        )));
    }
    Ok(())
}

/// Writes the journal member's metadata: its superblock (role 0xfffd, the log's tail at
/// 0) and an empty meta block at the start of its log with a random sequence number, as
/// mdadm's `write_empty_r5l_meta_block` does. Its log must hold a few units at least.
async fn write_journal_member(m: &dyn Member, sb: &Superblock) -> Result<()> {
    crate::md_io::clear_bad_blocks(m, sb).await?;
    write_superblock(m, sb).await?;
    let mut seq = [0u8; 4];
    getrandom::fill(&mut seq)
        .map_err(|e| Error::new(ErrorKind::Io, format!("no randomness: {e}")))?;
    let block = raidd_md::journal::MetaBlock::empty(u64::from(u32::from_le_bytes(seq)), 0)
        .encode(raidd_md::journal::uuid_checksum(&sb.set_uuid))
        .map_err(|e| Error::new(ErrorKind::Io, e.to_string()))?;
    let name = &m.info().name;
    write_bytes(
        m,
        sb.data_offset * 512,
        raidd_rt::AlignedBuf::from_slice(&block),
    )
    .await
    .map_err(|e| Error::io(format!("{name}: writing the journal's first block"), e))?;
    m.flush()
        .await
        .map_err(|e| Error::io(format!("{name}: flushing the journal"), e))
}

/// The members given (by role; missing ones left out), checked: enough for the level,
/// none twice, and none that already belongs to an md array unless `force`.
async fn members_to_use(spec: &CreateSpec) -> Result<Vec<(usize, &Arc<dyn Member>)>> {
    let level = spec.level;
    let n = spec.members.len();
    if n < level.min_members() {
        return Err(invalid(format!(
            "{level} needs at least {} members, got {n}",
            level.min_members()
        )));
    }
    if n > MAX_DEV {
        return Err(invalid(format!("at most {MAX_DEV} members, got {n}")));
    }
    let present: Vec<(usize, &Arc<dyn Member>)> = spec
        .members
        .iter()
        .enumerate()
        .filter_map(|(i, m)| m.as_ref().map(|m| (i, m)))
        .collect();
    if present.is_empty() {
        return Err(invalid("every member is missing".into()));
    }
    if matches!(level, Level::Linear | Level::Raid0) && present.len() < n {
        return Err(invalid(format!(
            "{level} has no redundancy: no member can be missing"
        )));
    }
    let mut names = std::collections::HashSet::new();
    let journal = spec.journal.as_ref().map(|j| (n, j));
    for (_, m) in present.iter().copied().chain(journal) {
        if !names.insert(m.info().name.clone()) {
            return Err(invalid(format!("{} is given twice", m.info().name)));
        }
        if !spec.force {
            if let Ok(sb) = examine(&**m).await {
                return Err(Error::new(
                    ErrorKind::Conflict,
                    format!(
                        "{} already belongs to md array {} ({}); use --force to overwrite it",
                        m.info().name,
                        sb.full_name(),
                        crate::array::uuid_string(&sb.set_uuid)
                    ),
                ));
            }
        }
    }
    Ok(present)
}

/// Where data starts on every member, what each has past it, and md's component size.
struct Sizes {
    data_offset: u64,
    /// Sectors past the data offset, per present member.
    avail: Vec<u64>,
    min_avail: u64,
    component: u64,
}

/// The members' sizes as md lays them out (sectors), and the component size (`--size`
/// at most what the members allow).
fn sizes(spec: &CreateSpec, present: &[(usize, &Arc<dyn Member>)], chunk: u32) -> Result<Sizes> {
    let sizes: Vec<u64> = present
        .iter()
        .map(|(_, m)| m.info().size_bytes / 512)
        .collect();
    let smallest = *sizes.iter().min().expect("present is not empty");
    let data_offset = if spec.ppl {
        data_offset_with(smallest, chunk, PPL_SPACE_SECTORS)
    } else {
        default_data_offset(smallest, chunk)
    };
    if smallest < data_offset + 16 {
        return Err(invalid(format!(
            "members must be larger than {} KiB (the metadata area); the smallest has {} KiB",
            (data_offset + 16) / 2,
            smallest / 2
        )));
    }
    let avail: Vec<u64> = match spec.checksums {
        None => sizes.iter().map(|s| s - data_offset).collect(),
        Some(_) => tagged_sizes(&sizes, data_offset, chunk)?,
    };
    let min_avail = *avail.iter().min().expect("present is not empty");
    debug_assert!(min_avail >= 16, "room for data past the metadata area");
    let md_level = spec.level.md_number();
    let mut component = component_size_sectors(md_level, min_avail, chunk);
    if let Some(limit) = spec.size_sectors {
        if component != 0 && limit > component {
            return Err(invalid(format!(
                "--size {} KiB is larger than the members allow ({} KiB)",
                limit / 2,
                component / 2
            )));
        }
        if component != 0 {
            component = component_size_sectors(md_level, limit, chunk);
        }
    }
    debug_assert!(component <= min_avail, "a component fits every member");
    Ok(Sizes {
        data_offset,
        avail,
        min_avail,
        component,
    })
}

/// Tags of every block of a new member's data area, built from what it holds now, and
/// their header clean at the superblock's event count (`sb`: the member's superblock).
async fn write_tags(
    m: &Arc<dyn Member>,
    sb: &Superblock,
    algorithm: raidd_md::tags::Algorithm,
) -> Result<()> {
    let facts = crate::member::TagFacts::of(sb, sb.events);
    crate::member::ChecksummedMember::create(
        m.clone(),
        &facts,
        algorithm,
        raidd_md::tags::PAGE as u64,
    )
    .await
    .map_err(|e| Error::io(format!("{}: writing its checksum tags", m.info().name), e))?;
    Ok(())
}

/// The data area of each member of `sizes` sectors once its checksum tags have room past it:
/// whole chunks (or 4 KiB blocks), their data starting on a block boundary.
fn tagged_sizes(sizes: &[u64], data_offset: u64, chunk: u32) -> Result<Vec<u64>> {
    if !data_offset.is_multiple_of(raidd_md::tags::BLOCK_SECTORS) {
        return Err(invalid(format!(
            "checksums need the data to start on a 4 KiB boundary (sector {data_offset})"
        )));
    }
    let unit = u64::from(chunk).max(raidd_md::tags::BLOCK_SECTORS);
    sizes
        .iter()
        .map(|&s| {
            raidd_md::tags::Geometry::fit(s, data_offset, unit)
                .inspect(|g| debug_assert!(g.end() <= s && g.data_size % unit == 0, "{g:?}"))
                .map(|g| g.data_size)
                .ok_or_else(|| {
                    invalid(format!(
                        "a member of {} KiB has no room for data and its checksum tags",
                        s / 2
                    ))
                })
        })
        .collect()
}

/// An empty internal bitmap for the array `sb` describes: one bit per `chunk` bytes of the
/// resync space (member sectors for RAID4/5/6 and RAID1, array sectors for RAID10, as the
/// kernel's `resync_max_sectors`), checked to fit between the superblock and the data.
pub(crate) fn bitmap_for(
    sb: &Superblock,
    g: &Geometry,
    chunk: u32,
    data_offset: u64,
) -> Result<BitmapSuper> {
    let level = g.level();
    if matches!(level, Level::Linear | Level::Raid0) {
        return Err(invalid(format!(
            "{level} has no redundancy: a write-intent bitmap has nothing to resync"
        )));
    }
    if chunk < 512 || !chunk.is_power_of_two() {
        return Err(invalid(format!(
            "bitmap chunk {chunk} bytes: must be a power of two of at least 512"
        )));
    }
    let sync_size = match g {
        Geometry::Raid10(_) => g.array_sectors(),
        _ => sb.size,
    };
    let bm = BitmapSuper {
        version: 4,
        uuid: sb.set_uuid,
        events: 0,
        events_cleared: 0,
        sync_size,
        state: 0,
        chunksize: chunk,
        daemon_sleep: BITMAP_DAEMON_SLEEP,
        write_behind: 0,
        sectors_reserved: 0,
        nodes: 0,
        cluster_name: [0; 64],
    };
    let room = data_offset.saturating_sub(SB_OFFSET_V12_SECTORS + BITMAP_OFFSET_SECTORS) * 512;
    let need = bm.stored_len(4096);
    debug_assert!(
        need >= raidd_md::bitmap::BITMAP_SUPER_LEN as u64,
        "a header at least"
    );
    if need > room {
        return Err(invalid(format!(
            "a bitmap with {} KiB chunks needs {need} bytes, more than the {room} before the data: use a larger --bitmap-chunk",
            chunk / 1024
        )));
    }
    Ok(bm)
}

/// Writes a new bitmap (header and bits) after the superblock. An array that still needs
/// its initial sync gets every bit set, as mdadm writes it: the bits are what an unclean
/// start resyncs, and with none set the sync would visit nothing.
pub(crate) async fn write_bitmap(m: &dyn Member, bm: &BitmapSuper, needs_sync: bool) -> Result<()> {
    let len = bm.stored_len(4096) as usize;
    let mut block = raidd_rt::AlignedBuf::zeroed(len);
    let header = raidd_md::bitmap::BITMAP_SUPER_LEN;
    debug_assert!(
        header + bm.bitmap_bytes() as usize <= len,
        "the bits follow the header"
    );
    block[..header].copy_from_slice(&bm.encode());
    if needs_sync {
        block[header..header + bm.bitmap_bytes() as usize].fill(0xff);
    }
    write_bytes(
        m,
        (SB_OFFSET_V12_SECTORS + BITMAP_OFFSET_SECTORS) * 512,
        block,
    )
    .await
    .map_err(|e| Error::io(format!("{}: writing the bitmap", m.info().name), e))
}

fn template(
    spec: &CreateSpec,
    level: Level,
    layout: u32,
    chunk: u32,
    component: u64,
    data_offset: u64,
    multi_zone: bool,
) -> Result<Superblock> {
    let n = spec.members.len();
    let mut dev_roles = vec![DevRole::Spare.to_raw(); MAX_DEV];
    for (i, m) in spec.members.iter().enumerate() {
        if m.is_some() {
            dev_roles[i] = DevRole::Active(i as u16).to_raw();
        }
    }
    let redundant = !matches!(level, Level::Linear | Level::Raid0);
    let degraded = spec.members.iter().any(Option::is_none);
    let clean = spec.assume_clean || !redundant || degraded;
    let now = md_time_now();
    let mut sb = Superblock {
        feature_map: if multi_zone { feature::RAID0_LAYOUT } else { 0 },
        set_uuid: random16()?,
        set_name: [0; 32],
        ctime: now,
        level: level.md_number(),
        layout,
        size: component,
        chunksize: chunk,
        raid_disks: n as u32,
        bitmap_offset: 0,
        new_level: 0,
        reshape_position: 0,
        delta_disks: 0,
        new_layout: 0,
        new_chunk: 0,
        new_offset: 0,
        data_offset,
        data_size: 0,
        super_offset: SB_OFFSET_V12_SECTORS,
        recovery_offset: 0,
        dev_number: 0,
        cnt_corrected_read: 0,
        device_uuid: [0; 16],
        devflags: 0,
        bblog_shift: 0,
        bblog_size: 0,
        bblog_offset: 0,
        utime: now,
        events: 0,
        resync_offset: if clean { MAX_SECTOR } else { 0 },
        dev_roles,
    };
    if spec.name.is_empty() || spec.name.contains(':') || spec.name.contains('\0') {
        return Err(invalid(format!(
            "array name {:?} must be non-empty, without ':'",
            spec.name
        )));
    }
    let full = if spec.homehost.is_empty() {
        spec.name.clone()
    } else {
        format!("{}:{}", spec.homehost, spec.name)
    };
    if full.len() > 32 {
        return Err(invalid(format!(
            "array name {full:?} is longer than md's 32 bytes"
        )));
    }
    sb.set_array_name(&full);
    Ok(sb)
}

fn check_geometry(sb: &Superblock, data_sizes: &[Option<u64>]) -> Result<Geometry> {
    let level = Level::from_md_number(sb.level).expect("set from a Level");
    let n = data_sizes.len();
    let sizes = || {
        data_sizes
            .iter()
            .map(|s| s.unwrap_or(0))
            .collect::<Vec<_>>()
    };
    let g = match level {
        Level::Linear => Geometry::linear(&sizes(), 0),
        Level::Raid0 => {
            let l = if sb.feature_map & feature::RAID0_LAYOUT != 0 {
                Raid0Layout::from_md_number(sb.layout).unwrap_or(Raid0Layout::Alternate)
            } else {
                Raid0Layout::Original
            };
            Geometry::raid0(&sizes(), sb.chunksize, l)
        }
        Level::Raid1 => Geometry::raid1(n, sb.size),
        Level::Raid10 => Geometry::raid10(
            n,
            Raid10Layout::from_md_number(sb.layout).expect("validated"),
            sb.chunksize,
            sb.size,
        ),
        _ => Geometry::parity(
            level,
            n,
            ParityLayout::from_md_number(sb.layout).expect("validated"),
            sb.chunksize,
            sb.size,
        ),
    }?;
    if g.array_sectors() == 0 {
        return Err(invalid(
            "the array would be empty: members too small for the chunk size".into(),
        ));
    }
    debug_assert_eq!(g.members(), n, "a member per raid disk");
    Ok(g)
}

async fn write_superblock(m: &dyn Member, sb: &Superblock) -> Result<()> {
    let name = &m.info().name;
    let mut block = raidd_rt::AlignedBuf::zeroed(4096);
    let bytes = sb.encode();
    debug_assert!(bytes.len() <= 4096, "a superblock fits its block");
    block[..bytes.len()].copy_from_slice(&bytes);
    write_bytes(m, SB_OFFSET_V12_SECTORS * 512, block)
        .await
        .map_err(|e| Error::io(format!("{name}: writing the superblock"), e))?;
    let back = examine(m).await?;
    if back != *sb {
        return Err(Error::new(
            ErrorKind::Io,
            format!("{name}: the superblock did not read back as written"),
        ));
    }
    Ok(())
}
