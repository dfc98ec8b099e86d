//! `[[array]]`: the arrays to serve, each checked (members, spare group, stripe cache,
//! safe mode, DMA-aligned buffer).

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
    /// The write journal's mode once started (md starts every array write-through).
    pub journal_mode: raidd_engine::JournalMode,
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
            // Set once the array is up (`arrays.rs`): an array that cannot take it is
            // served write-through, not left out.
            journal_mode: raidd_engine::JournalMode::WriteThrough,
        }
    }
}

/// The arrays, each checked; `all_members` collects their members (no two arrays share
/// one).
pub(super) fn arrays_config(
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
    Ok(ArrayConfig {
        name: a.name,
        members,
        read_only: a.read_only,
        spare_group: a.spare_group,
        stripe_cache,
        gather,
        write_alone,
        journal_mode,
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
