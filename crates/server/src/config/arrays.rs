//! `[[array]]`: the arrays to serve, each checked (members by path or by UUID, spare
//! group, stripe cache, safe mode, DMA-aligned buffer).

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::keys::{check_name, parse_delay};

/// How long an array is idle before it is marked clean, unless the config says otherwise
/// (md's default safe_mode_delay).
pub const DEFAULT_SAFE_MODE_DELAY: std::time::Duration = std::time::Duration::from_millis(200);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawArray {
    name: String,
    /// The members' paths; or, instead, `uuid` (found under the top-level `scan`).
    members: Option<Vec<PathBuf>>,
    /// md's array UUID: the members are whatever the scan patterns name that carries it.
    uuid: Option<String>,
    /// For an array of arrays named by `uuid`: its inner arrays' UUIDs.
    inner: Option<Vec<String>>,
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
    /// RAID4/5/6 with a write journal: "write-through" (md's default) or "write-back".
    journal_mode: Option<String>,
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
    /// Memory for the checksum tags of an array with checksums ("16M", the default).
    checksum_cache: Option<String>,
}

/// How an array's members are found when the daemon starts.
#[derive(Clone, Debug, PartialEq)]
pub enum Find {
    /// The paths the config lists: every leaf member (for nested arrays: the members of
    /// the inner arrays).
    Paths(Vec<PathBuf>),
    /// What the config's scan patterns name that carries this array UUID in its superblock,
    /// or one of `inner` (the UUIDs of an array of arrays' inner arrays): members, spares
    /// and journals wherever they are now.
    Uuid {
        uuid: [u8; 16],
        inner: Vec<[u8; 16]>,
    },
}

impl Find {
    /// The paths the config names (none for an array found by UUID).
    pub fn paths(&self) -> &[PathBuf] {
        match self {
            Find::Paths(p) => p,
            Find::Uuid { .. } => &[],
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct ArrayConfig {
    pub name: String,
    pub find: Find,
    pub read_only: bool,
    pub spare_group: Option<String>,
    /// The RAID4/5/6 stripe cache's size in bytes and gathering policy.
    pub stripe_cache: usize,
    pub gather: raidd_engine::Gather,
    /// Whether small writes that find their stripe idle skip the stripe cache.
    pub write_alone: raidd_engine::Alone,
    /// The write journal's mode once started (md starts every array write-through).
    pub journal_mode: raidd_engine::JournalMode,
    /// Start the array even if it was stopped uncleanly and is degraded (RAID4/5/6).
    pub start_dirty_degraded: bool,
    /// Mark the array clean once no write has started for this long (md's safe mode);
    /// `None`: only at a clean stop.
    pub safe_mode_delay: Option<std::time::Duration>,
    /// A DMA-aligned buffer in front of the members (write-through).
    pub dab: Option<raidd_admin::session::DabSetting>,
    /// Bytes of checksum tags held in memory (0: the default).
    pub checksum_cache: u64,
}

impl ArrayConfig {
    /// How the array is started (`start_dirty_degraded`), its members' I/O failing after
    /// `member_timeout`.
    pub fn start(&self, member_timeout: Option<Duration>) -> raidd_admin::session::Start {
        raidd_admin::session::Start {
            dirty_degraded: self.start_dirty_degraded,
            member_timeout,
            dab: self.dab,
            tag_cache: self.checksum_cache,
            rederive_in_background: true,
            // Set once the array is up (`arrays.rs`): an array that cannot take it is
            // served write-through, not left out.
            journal_mode: raidd_engine::JournalMode::WriteThrough,
        }
    }
}

/// The arrays, each checked; `all_members` collects the members named by path (no two
/// arrays share one); `scanning` says whether the config has scan patterns (an array by
/// UUID needs them).
pub(super) fn arrays_config(
    raw: Vec<RawArray>,
    all_members: &mut HashSet<PathBuf>,
    resolve: &dyn Fn(PathBuf) -> PathBuf,
    scanning: bool,
) -> Result<Vec<ArrayConfig>, String> {
    let mut names = HashSet::new();
    let mut uuids = HashSet::new();
    let mut arrays = Vec::with_capacity(raw.len());
    for a in raw {
        check_name("array", &a.name)?;
        if !names.insert(a.name.clone()) {
            return Err(format!("array {:?} is defined twice", a.name));
        }
        let find = find_config(&a, resolve, scanning)?;
        match &find {
            Find::Paths(members) => {
                for m in members {
                    if !all_members.insert(m.clone()) {
                        return Err(format!(
                            "member {} is named twice (arrays cannot share members)",
                            m.display()
                        ));
                    }
                }
            }
            Find::Uuid { uuid, inner } => {
                for u in std::iter::once(uuid).chain(inner) {
                    if !uuids.insert(*u) {
                        return Err(format!(
                            "array {:?}: uuid {} is named twice (by this array or another)",
                            a.name,
                            raidd_engine::array::uuid_string(u)
                        ));
                    }
                }
            }
        }
        arrays.push(array_config(a, find)?);
    }
    Ok(arrays)
}

/// How the array's members are found: `members`, or `uuid` (and `inner`) with scan
/// patterns; one of the two.
fn find_config(
    a: &RawArray,
    resolve: &dyn Fn(PathBuf) -> PathBuf,
    scanning: bool,
) -> Result<Find, String> {
    let name = &a.name;
    match (&a.members, &a.uuid) {
        (Some(_), Some(_)) => Err(format!(
            "array {name:?} has both members and uuid: name its members one way"
        )),
        (None, None) => Err(format!(
            "array {name:?} has no members: list them (members = [...]) or name the array by \
             uuid = \"...\" with a top-level scan = [...]"
        )),
        (Some(m), None) => {
            if a.inner.is_some() {
                return Err(format!(
                    "array {name:?}: inner is for an array named by uuid; list every leaf member \
                     in members"
                ));
            }
            if m.is_empty() {
                return Err(format!("array {name:?} has no members"));
            }
            Ok(Find::Paths(m.iter().cloned().map(resolve).collect()))
        }
        (None, Some(u)) => {
            if !scanning {
                return Err(format!(
                    "array {name:?} is named by uuid, but the config has no scan patterns: add \
                     a top-level scan = [\"/dev/disk/by-id/*\"] (or where its members are)"
                ));
            }
            let parse = |t: &str| {
                raidd_admin::scan::parse_uuid(t).map_err(|e| format!("array {name:?}: {e}"))
            };
            let uuid = parse(u)?;
            let inner = a
                .inner
                .iter()
                .flatten()
                .map(|t| parse(t))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Find::Uuid { uuid, inner })
        }
    }
}

/// One array's settings past its name and members.
fn array_config(a: RawArray, find: Find) -> Result<ArrayConfig, String> {
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
    let journal_mode = match &a.journal_mode {
        None => raidd_engine::JournalMode::WriteThrough,
        Some(m) => m
            .parse::<raidd_engine::JournalMode>()
            .map_err(|e| format!("array {:?}: journal_mode: {e}", a.name))?,
    };
    let safe_mode_delay = match a.safe_mode_delay.as_deref() {
        None => Some(DEFAULT_SAFE_MODE_DELAY),
        Some(t) => {
            parse_delay(t).map_err(|e| format!("array {:?}: safe_mode_delay {e}", a.name))?
        }
    };
    let dab = dab_config(&a)?;
    let checksum_cache = match &a.checksum_cache {
        None => 0,
        Some(t) => raidd_admin::size::parse_size(t)
            .ok()
            .filter(|&b| (4096..=16 << 30).contains(&b))
            .ok_or_else(|| {
                format!(
                    "array {:?}: checksum_cache {t:?} is not a size from 4K to 16G (like \"16M\")",
                    a.name
                )
            })?,
    };
    Ok(ArrayConfig {
        name: a.name,
        find,
        read_only: a.read_only,
        spare_group: a.spare_group,
        stripe_cache,
        gather,
        write_alone,
        journal_mode,
        start_dirty_degraded: a.start_dirty_degraded,
        safe_mode_delay,
        dab,
        checksum_cache,
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
        Some("write-back-unsafe") => raidd_engine::member::DabMode::WriteBackUnsafe,
        Some(m) => {
            return Err(format!(
                "array {:?}: dab_mode {m:?}: write-through, write-back or write-back-unsafe",
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
