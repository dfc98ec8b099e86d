//! `raidd create`: write md v1.2 superblocks on the members (creating image files when asked),
//! run the initial sync if one is needed, shut down cleanly and report like `detail`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use raidd_engine::create::{create, CreateSpec};
use raidd_engine::member::FileMember;
use raidd_engine::Member;
use raidd_layout::{Level, ParityLayout, Raid0Layout, Raid10Layout};

use crate::cmd::detail;
use crate::progress::Progress;
use raidd_admin::exit::{AdminError, AdminResult, Exit};
use raidd_admin::md_names::parse_level;
use raidd_admin::members::{self, Access, Limited, MISSING};
use raidd_admin::size;

#[derive(Args, Debug)]
pub struct CreateArgs {
    /// RAID level: linear, raid0 (0, stripe), raid1 (1, mirror), raid4, raid5, raid6,
    /// raid10.
    #[arg(short, long, value_parser = parse_level)]
    pub level: Level,
    /// Chunk size for striped levels (power of two, at least 4K; default 512K).
    #[arg(short, long, value_parser = size::parse_chunk, value_name = "SIZE")]
    pub chunk: Option<u64>,
    /// Layout: raid5/6 left-symmetric (default), left-asymmetric, right-symmetric,
    /// right-asymmetric, parity-first, parity-last (and the -6 forms for raid6); raid10 n2
    /// (default), f2, o2, n3, ...; raid0 original or alternate.
    #[arg(long, alias = "parity", value_name = "L")]
    pub layout: Option<String>,
    /// Array name (default: the first member's file name without extension).
    #[arg(short = 'N', long)]
    pub name: Option<String>,
    /// Host part of md's "host:name" (default: this machine's hostname).
    #[arg(long, value_name = "HOST")]
    pub homehost: Option<String>,
    /// Bytes each member contributes; image files that do not exist are created (sparse)
    /// with this size; larger members are used only up to it.
    #[arg(short = 'z', long, value_parser = size::parse_sector_multiple, value_name = "SIZE")]
    pub size: Option<u64>,
    /// Skip the initial sync: the members are known to be consistent (e.g. all zeros).
    #[arg(long)]
    pub assume_clean: bool,
    /// Overwrite members that already carry an md superblock.
    #[arg(short, long)]
    pub force: bool,
    /// Write-intent bitmap: `internal` (stored after the superblock, as mdadm's) or `none`.
    /// After an unclean stop only regions with their bit set are resynced.
    #[arg(short, long, value_parser = ["internal", "none"], default_value = "none")]
    pub bitmap: String,
    /// Bytes of the resync space per bitmap bit (power of two, default 64M).
    #[arg(long, value_parser = size::parse_size, value_name = "SIZE")]
    pub bitmap_chunk: Option<u64>,
    /// What keeps parity right across an unclean stop, as mdadm's option: `resync` (the
    /// whole array after it), `bitmap` (what the bitmap marks; as --bitmap internal) or
    /// `ppl` (RAID5: a partial parity log in each member's metadata area closes the write
    /// hole, so a dirty degraded array starts with nothing lost). Default: `bitmap` with
    /// --bitmap internal, else `resync`.
    #[arg(long, value_parser = ["resync", "bitmap", "ppl"], value_name = "POLICY")]
    pub consistency_policy: Option<String>,
    /// A write journal on this file or device (mdadm's --write-journal; raid4/5/6): every
    /// write is logged there with its parity before it reaches the members, so an unclean
    /// stop, degraded or not, loses nothing acknowledged. An image file that does not exist
    /// is created with --size bytes. Excludes a bitmap and a partial parity log.
    #[arg(long, value_name = "PATH")]
    pub write_journal: Option<PathBuf>,
    /// Checksum every 4 KiB block of every member (`crc32c`): each read is verified, and a
    /// block that does not match is rebuilt from redundancy and rewritten. The tags take
    /// 0.1 % of each member, past md's data area (the kernel still assembles the array);
    /// clients see 4 KiB logical blocks.
    #[arg(long, value_parser = ["crc32c"], value_name = "ALGORITHM")]
    pub checksums: Option<String>,
    /// An inner array to make first, as a member of this one (repeat it: one per slot, in
    /// order): `[NAME=]LEVEL:MEMBER,MEMBER,...`, e.g. `raid5:a0.img,a1.img,a2.img,a3.img`.
    /// Its members are files or devices as above (`missing` too); NAME defaults to this
    /// array's name and the group's number (`pool-0`). md's layout: each inner array's
    /// superblock on its members, this array's inside each inner array.
    #[arg(
        short,
        long = "group",
        value_name = "[NAME=]LEVEL:MEMBERS",
        conflicts_with = "members"
    )]
    pub groups: Vec<String>,
    /// Chunk size of the inner arrays (`--group`; default 512K).
    #[arg(long, value_parser = size::parse_chunk, value_name = "SIZE", requires = "groups")]
    pub group_chunk: Option<u64>,
    /// Members in slot order: image files, block devices, or the word `missing` for an
    /// absent member (degraded creation; use ./missing for a file of that name).
    #[arg(required_unless_present = "groups", value_name = "MEMBER")]
    pub members: Vec<PathBuf>,
}

/// An inner array of `--group`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub name: Option<String>,
    pub level: Level,
    pub members: Vec<PathBuf>,
}

/// Parses `[NAME=]LEVEL:MEMBER,MEMBER,...` (pure).
pub fn parse_group(s: &str) -> Result<Group, String> {
    let (name, rest) = match s.split_once('=') {
        Some((n, r)) if !n.contains(':') => (Some(n.to_string()), r),
        _ => (None, s),
    };
    let (level, members) = rest.split_once(':').ok_or_else(|| {
        format!("--group {s:?}: LEVEL:MEMBER,MEMBER,... (e.g. raid5:a.img,b.img,c.img)")
    })?;
    let level = parse_level(level).map_err(|e| format!("--group {s:?}: {e}"))?;
    let members: Vec<PathBuf> = members
        .split(',')
        .filter(|m| !m.is_empty())
        .map(PathBuf::from)
        .collect();
    if members.len() < 2 {
        return Err(format!(
            "--group {s:?}: an inner array needs at least two members"
        ));
    }
    if name
        .as_deref()
        .is_some_and(|n| n.is_empty() || n.len() > 32)
    {
        return Err(format!("--group {s:?}: a name of 1 to 32 characters"));
    }
    Ok(Group {
        name,
        level,
        members,
    })
}

/// mdadm's default bitmap chunk for internal bitmaps.
const DEFAULT_BITMAP_CHUNK: u64 = 64 << 20;

/// The md layout number for `--layout` at `level`.
pub fn layout_number(level: Level, text: &str) -> Result<u32, String> {
    match level {
        Level::Linear | Level::Raid1 => Err(format!("--layout does not apply to {level}")),
        Level::Raid0 => match text.to_ascii_lowercase().as_str() {
            "original" => Ok(Raid0Layout::Original.md_number()),
            "alternate" => Ok(Raid0Layout::Alternate.md_number()),
            _ => Err(format!(
                "unknown raid0 layout {text:?} (use original or alternate)"
            )),
        },
        Level::Raid10 => Raid10Layout::parse(text)
            .map(Raid10Layout::md_number)
            .ok_or_else(|| format!("unknown raid10 layout {text:?} (use n2, f2, o2, n3, f3, ...)")),
        Level::Raid4 | Level::Raid5 | Level::Raid6 => {
            let l = ParityLayout::parse(text).ok_or_else(|| {
                format!("unknown {level} layout {text:?} (e.g. left-symmetric, la, ra, ls, rs)")
            })?;
            if !l.valid_for(level) {
                let valid: Vec<String> = ParityLayout::ALL
                    .iter()
                    .filter(|p| p.valid_for(level))
                    .map(ToString::to_string)
                    .collect();
                return Err(format!(
                    "layout {l} is not valid for {level} (valid: {})",
                    valid.join(", ")
                ));
            }
            Ok(l.md_number())
        }
    }
}

/// mdadm's rule: "host:name" when it fits md's 32 bytes, else the name alone.
pub fn homehost_for(host: &str, name: &str) -> String {
    if host.is_empty() || host.len() + 1 + name.len() > 32 {
        String::new()
    } else {
        host.to_string()
    }
}

/// The default array name: the first present member's file name without extension.
pub fn default_name(members: &[Option<PathBuf>]) -> String {
    members
        .iter()
        .flatten()
        .next()
        .and_then(|p| p.file_stem())
        .map(|s| s.to_string_lossy().into_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "raidd".to_string())
}

/// What to do with each member before the engine sees it.
struct Plan {
    slots: Vec<Option<PathBuf>>,
    /// Image files to create.
    to_create: Vec<PathBuf>,
}

fn plan(members: &[PathBuf], size: Option<u64>) -> AdminResult<Plan> {
    let slots: Vec<Option<PathBuf>> = members
        .iter()
        .map(|p| (p.as_os_str() != MISSING).then(|| p.clone()))
        .collect();
    members::check_distinct(slots.iter().flatten().map(PathBuf::as_path))?;
    let mut to_create = Vec::new();
    for p in slots.iter().flatten() {
        match std::fs::symlink_metadata(p) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if size.is_none() {
                    return Err(AdminError::new(
                        Exit::NotFound,
                        format!(
                            "{} does not exist (give --size to create image files)",
                            p.display()
                        ),
                    ));
                }
                let parent = match p.parent() {
                    Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
                    _ => PathBuf::from("."),
                };
                if !parent.is_dir() {
                    return Err(AdminError::new(
                        Exit::NotFound,
                        format!(
                            "cannot create {}: directory {} does not exist",
                            p.display(),
                            parent.display()
                        ),
                    ));
                }
                to_create.push(p.clone());
            }
            Err(e) => return Err(AdminError::io(format!("checking {}", p.display()), &e)),
        }
    }
    Ok(Plan { slots, to_create })
}

fn open_member(path: &Path, size: Option<u64>) -> AdminResult<Arc<dyn Member>> {
    let m = members::open(path, Access::ReadWrite)?;
    let Some(limit) = size else { return Ok(m) };
    let have = m.info().size_bytes;
    if have < limit {
        return Err(AdminError::usage(format!(
            "{} has {have} bytes, less than --size {limit}",
            path.display()
        )));
    }
    if have == limit {
        return Ok(m);
    }
    Ok(Arc::new(Limited::new(m, limit)))
}

/// Chunk sectors for `level` from a `--chunk`-style size (none for levels without chunks).
fn chunk_sectors(level: Level, chunk: Option<u64>) -> AdminResult<Option<u32>> {
    match chunk {
        Some(bytes) if matches!(level, Level::Linear | Level::Raid1) => {
            tracing::warn!(
                "a chunk of {} is ignored: {level} has no chunks",
                size::chunk_text(bytes)
            );
            Ok(None)
        }
        Some(bytes) => u32::try_from(bytes / size::SECTOR)
            .map(Some)
            .map_err(|_| AdminError::usage("chunk size too large")),
        None => Ok(None),
    }
}

/// `--consistency-policy` against `--bitmap`: whether the array keeps a partial parity log.
fn ppl(args: &CreateArgs) -> AdminResult<bool> {
    match (args.consistency_policy.as_deref(), args.bitmap.as_str()) {
        (Some("ppl"), "internal") => Err(AdminError::usage(
            "--consistency-policy ppl and --bitmap internal exclude each other (as md's do)",
        )),
        (Some("resync"), "internal") => Err(AdminError::usage(
            "--consistency-policy resync keeps no bitmap: drop --bitmap internal",
        )),
        (Some("ppl"), _) if args.level != Level::Raid5 => Err(AdminError::usage(format!(
            "--consistency-policy ppl is for raid5 (md's partial parity log), not {}",
            args.level
        ))),
        (p, _) => Ok(p == Some("ppl")),
    }
}

/// `--bitmap` and `--bitmap-chunk`: the bitmap chunk in bytes, or none.
fn bitmap_chunk(args: &CreateArgs) -> AdminResult<Option<u32>> {
    let bitmap = match args.consistency_policy.as_deref() {
        Some("bitmap") => "internal",
        _ => args.bitmap.as_str(),
    };
    match (bitmap, args.bitmap_chunk) {
        ("none", Some(_)) => Err(AdminError::usage("--bitmap-chunk needs --bitmap internal")),
        ("none", None) => Ok(None),
        (_, chunk) => {
            let chunk = chunk.unwrap_or(DEFAULT_BITMAP_CHUNK);
            u32::try_from(chunk)
                .map(Some)
                .map_err(|_| AdminError::usage(format!("--bitmap-chunk {chunk}: at most 2 GiB")))
        }
    }
}

/// Whether `level` keeps redundancy (a bitmap means something to it).
fn redundant(level: Level) -> bool {
    !matches!(level, Level::Linear | Level::Raid0)
}

/// One array's members, opened.
struct Opened {
    /// As given (`None`: `missing`).
    paths: Vec<Option<PathBuf>>,
    slots: Vec<Option<Arc<dyn Member>>>,
    /// Every present member is a new image (all zeros: nothing to sync).
    all_new: bool,
}

/// One array's members, opened: image files made first (recorded in `created`, so a
/// failure can remove them).
fn open_slots(
    members: &[PathBuf],
    size: Option<u64>,
    created: &mut Vec<PathBuf>,
) -> AdminResult<Opened> {
    let plan = plan(members, size)?;
    let before = created.len();
    for p in &plan.to_create {
        let bytes = size.unwrap_or(0);
        FileMember::create_image(p, bytes)?;
        tracing::info!("created image file {} ({bytes} bytes, sparse)", p.display());
        created.push(p.clone());
    }
    let mut slots: Vec<Option<Arc<dyn Member>>> = Vec::with_capacity(plan.slots.len());
    for s in &plan.slots {
        slots.push(match s {
            Some(p) => Some(open_member(p, size)?),
            None => None,
        });
    }
    let all_new = plan.slots.iter().flatten().count() == created.len() - before;
    Ok(Opened {
        paths: plan.slots,
        slots,
        all_new,
    })
}

/// Creates an array and runs its initial sync when it needs one (left open).
async fn build(spec: CreateSpec) -> AdminResult<raidd_engine::assemble::Assembled> {
    let assembled = create(spec).await?;
    let array = assembled.array.clone();
    if array.needs_resync() {
        let mut progress = Progress::new(&format!("resync {}", array.name()));
        if let Err(e) = array
            .resync(|done, total| progress.update(done, total))
            .await
        {
            let _ = array.close().await;
            return Err(AdminError::from(e));
        }
    }
    Ok(assembled)
}

pub fn run(args: CreateArgs, json: bool) -> AdminResult {
    let layout = args
        .layout
        .as_deref()
        .map(|t| layout_number(args.level, t))
        .transpose()
        .map_err(AdminError::usage)?;
    let chunk = chunk_sectors(args.level, args.chunk)?;
    let bitmap = bitmap_chunk(&args)?;
    let ppl = ppl(&args)?;
    let groups: Vec<Group> = args
        .groups
        .iter()
        .map(|g| parse_group(g))
        .collect::<Result<_, _>>()
        .map_err(AdminError::usage)?;
    let mut created: Vec<PathBuf> = Vec::new();
    let checksums = args
        .checksums
        .as_deref()
        .map(|a| {
            raidd_md::tags::Algorithm::parse(a)
                .ok_or_else(|| AdminError::usage(format!("--checksums {a:?}: crc32c")))
        })
        .transpose()?;
    let shape = Shape {
        layout,
        chunk,
        bitmap,
        ppl,
        checksums,
    };
    let result = if groups.is_empty() {
        create_flat(&args, shape, json, &mut created)
    } else {
        create_nested(&args, &groups, shape, json, &mut created)
    };
    if result.is_err() {
        for p in &created {
            if let Err(e) = std::fs::remove_file(p) {
                tracing::warn!("could not remove {} after the failure: {e}", p.display());
            }
        }
    }
    result
}

/// The outer array's layout, chunk sectors, bitmap chunk and partial parity log, from the
/// arguments (the log is the outer array's only: inner arrays resync).
#[derive(Clone, Copy)]
struct Shape {
    layout: Option<u32>,
    chunk: Option<u32>,
    bitmap: Option<u32>,
    ppl: bool,
    checksums: Option<raidd_md::tags::Algorithm>,
}

/// The spec of the array the command names (the outermost one): its level, layout, chunk
/// and bitmap from the arguments; `fresh` when every member is new (nothing to sync).
fn top_spec(
    args: &CreateArgs,
    shape: Shape,
    name: String,
    slots: Vec<Option<Arc<dyn Member>>>,
    fresh: bool,
    journal: Option<Arc<dyn Member>>,
) -> CreateSpec {
    let host = args.homehost.clone().unwrap_or_else(members::hostname);
    CreateSpec {
        homehost: homehost_for(&host, &name),
        name,
        level: args.level,
        layout: shape.layout,
        chunk_sectors: shape.chunk,
        members: slots,
        size_sectors: None,
        assume_clean: args.assume_clean || fresh,
        force: args.force,
        bitmap_chunk: shape.bitmap,
        ppl: shape.ppl,
        journal,
        checksums: shape.checksums,
    }
}

/// The `--write-journal` member, opened (an image file made first, recorded in
/// `created`).
fn open_journal(
    args: &CreateArgs,
    created: &mut Vec<PathBuf>,
) -> AdminResult<Option<Arc<dyn Member>>> {
    let Some(path) = &args.write_journal else {
        return Ok(None);
    };
    if !matches!(args.level, Level::Raid4 | Level::Raid5 | Level::Raid6) {
        return Err(AdminError::usage(format!(
            "--write-journal is for raid4/5/6 (md's raid5-cache), not {}",
            args.level
        )));
    }
    if args.bitmap != "none"
        || args
            .consistency_policy
            .as_deref()
            .is_some_and(|p| p != "resync")
    {
        return Err(AdminError::usage(
            "--write-journal excludes a bitmap and a partial parity log (as md's does)",
        ));
    }
    match std::fs::metadata(path) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let Some(bytes) = args.size else {
                return Err(AdminError::usage(format!(
                    "{} does not exist: give --size to create it as an image file",
                    path.display()
                )));
            };
            FileMember::create_image(path, bytes)?;
            tracing::info!(
                "created journal image {} ({bytes} bytes, sparse)",
                path.display()
            );
            created.push(path.clone());
        }
        Err(e) => return Err(AdminError::io(format!("checking {}", path.display()), &e)),
    }
    open_member(path, None).map(Some)
}

/// One array over files and devices.
fn create_flat(
    args: &CreateArgs,
    shape: Shape,
    json: bool,
    created: &mut Vec<PathBuf>,
) -> AdminResult {
    let Opened {
        paths,
        slots,
        all_new,
    } = open_slots(&args.members, args.size, created)?;
    let name = args.name.clone().unwrap_or_else(|| default_name(&paths));
    let journal = open_journal(args, created)?;
    let spec = top_spec(args, shape, name, slots, all_new, journal);
    raidd_rt::block_on(async move {
        let assembled = build(spec).await?;
        assembled.array.close().await?;
        detail::print(std::slice::from_ref(&assembled), 0, &[], None, json).await
    })
}

/// Inner arrays first (`--group`), then this one over them; closed outermost first.
fn create_nested(
    args: &CreateArgs,
    groups: &[Group],
    shape: Shape,
    json: bool,
    created: &mut Vec<PathBuf>,
) -> AdminResult {
    if args.write_journal.is_some() {
        return Err(AdminError::usage(
            "--write-journal is for an array over files or devices, not one over --group arrays",
        ));
    }
    let name = args.name.clone().unwrap_or_else(|| "pool".to_string());
    let host = args.homehost.clone().unwrap_or_else(members::hostname);
    let mut names: Vec<String> = groups
        .iter()
        .enumerate()
        .map(|(k, g)| g.name.clone().unwrap_or_else(|| format!("{name}-{k}")))
        .collect();
    names.push(name.clone());
    if let Some(dup) = (1..names.len()).find(|&i| names[..i].contains(&names[i])) {
        return Err(AdminError::usage(format!(
            "two arrays would be named {:?}: name the groups (NAME=LEVEL:...)",
            names[dup]
        )));
    }
    // The members of every group, opened (images made) before anything is written.
    let mut inner = Vec::with_capacity(groups.len());
    let mut fresh = true;
    for (g, gname) in groups.iter().zip(&names) {
        let Opened { slots, all_new, .. } = open_slots(&g.members, args.size, created)?;
        fresh &= all_new;
        inner.push(CreateSpec {
            homehost: homehost_for(&host, gname),
            name: gname.clone(),
            level: g.level,
            layout: None,
            chunk_sectors: chunk_sectors(g.level, args.group_chunk)?,
            members: slots,
            size_sectors: None,
            assume_clean: args.assume_clean || all_new,
            force: args.force,
            bitmap_chunk: shape.bitmap.filter(|_| redundant(g.level)),
            ppl: false,
            journal: None,
            checksums: None,
        });
    }
    let outer = CreateSpec {
        bitmap_chunk: shape.bitmap.filter(|_| redundant(args.level)),
        ..top_spec(args, shape, name, Vec::new(), fresh, None)
    };
    raidd_rt::block_on(async move {
        let mut all: Vec<raidd_engine::assemble::Assembled> = Vec::new();
        let made: AdminResult = async {
            for spec in inner {
                all.push(build(spec).await?);
            }
            let members = all
                .iter()
                .map(|a| Some(a.array.clone() as Arc<dyn Member>))
                .collect();
            all.push(build(CreateSpec { members, ..outer }).await?);
            Ok(())
        }
        .await;
        let mut closed = Ok(());
        for a in all.iter().rev() {
            if let Err(e) = a.array.close().await {
                closed = closed.and(Err(AdminError::from(e)));
            }
        }
        made?;
        closed?;
        detail::print(&all, all.len() - 1, &[], None, json).await
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_as_users_write_them() {
        assert_eq!(
            parse_group("raid5:a,b,c"),
            Ok(Group {
                name: None,
                level: Level::Raid5,
                members: vec!["a".into(), "b".into(), "c".into()],
            })
        );
        let g = parse_group("fast=raid1:/dev/sda,/dev/sdb").unwrap();
        assert_eq!((g.name.as_deref(), g.level), (Some("fast"), Level::Raid1));
        // A path holding '=' is a path, not a name, when no name precedes the level.
        let g = parse_group("raid1:x=1.img,y.img").unwrap();
        assert_eq!(g.name, None);
        assert_eq!(g.members[0], PathBuf::from("x=1.img"));
        for bad in ["raid5", "raid9:a,b", "raid1:a", "=raid1:a,b", "raid5:", ""] {
            assert!(parse_group(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn layouts_by_name() {
        assert_eq!(layout_number(Level::Raid5, "left-symmetric"), Ok(2));
        assert_eq!(layout_number(Level::Raid5, "la"), Ok(0));
        assert_eq!(layout_number(Level::Raid5, "parity-last"), Ok(5));
        assert_eq!(layout_number(Level::Raid6, "left-symmetric-6"), Ok(18));
        assert!(layout_number(Level::Raid5, "left-symmetric-6")
            .expect_err("q-last on raid5")
            .contains("not valid for raid5"));
        assert_eq!(layout_number(Level::Raid4, "parity-last"), Ok(5));
        assert!(layout_number(Level::Raid4, "left-symmetric").is_err());
        assert_eq!(layout_number(Level::Raid10, "n2"), Ok(0x102));
        assert_eq!(layout_number(Level::Raid10, "f2"), Ok(0x201));
        assert_eq!(layout_number(Level::Raid10, "o2"), Ok(0x10201));
        assert!(layout_number(Level::Raid10, "x2").is_err());
        assert_eq!(layout_number(Level::Raid0, "alternate"), Ok(2));
        assert_eq!(layout_number(Level::Raid0, "Original"), Ok(1));
        assert!(layout_number(Level::Raid0, "n2").is_err());
        assert!(layout_number(Level::Raid1, "n2")
            .expect_err("raid1")
            .contains("does not apply"));
        assert!(layout_number(Level::Linear, "x").is_err());
        assert!(layout_number(Level::Raid5, "bogus").is_err());
    }

    #[test]
    fn names_and_homehost() {
        let m = |s: &str| Some(PathBuf::from(s));
        assert_eq!(default_name(&[None, m("/var/tmp/disk0.img")]), "disk0");
        assert_eq!(default_name(&[m("plain")]), "plain");
        assert_eq!(default_name(&[None]), "raidd");
        assert_eq!(default_name(&[m("/")]), "raidd");
        assert_eq!(homehost_for("box", "r5"), "box");
        assert_eq!(homehost_for("", "r5"), "");
        let long = "h".repeat(30);
        assert_eq!(homehost_for(&long, "r5"), "");
        assert_eq!(homehost_for(&"h".repeat(29), "r5"), "h".repeat(29));
    }

    #[test]
    fn levels_parse_like_mdadm() {
        assert_eq!(parse_level("5"), Ok(Level::Raid5));
        assert_eq!(parse_level("mirror"), Ok(Level::Raid1));
        assert!(parse_level("raid7").is_err());
    }
}
