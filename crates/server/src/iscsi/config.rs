//! The iSCSI frontend's sections: `[iscsi]` (where it listens, reservations, discovery
//! CHAP, NOP-In pings, memory per connection) and `[[target]]` with its `[[target.lun]]`s.
//! With neither, iSCSI is off; with `[iscsi]` alone, every array is a target of its own.

use std::net::SocketAddr;
use std::path::PathBuf;

use raidd_admin::volume::VolumeRef;
use serde::Deserialize;

use crate::config::arrays::ArrayConfig;
use crate::config::keys::{check_name, check_volume_ref, size_key, MAX_MEMORY, MAX_REQUEST};
use crate::frontend::{ParseCtx, Sections};

/// Where iSCSI initiators connect when the config names no address: loopback only.
pub const DEFAULT_ISCSI_LISTEN: &str = "127.0.0.1:3260";
/// Where persistent reservations live when the config names no directory.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/raidd";
/// Prefix of the target names raidd makes up for arrays when no `[[target]]` is given.
pub const DEFAULT_IQN_PREFIX: &str = "iqn.2026-11.org.raidd:";

/// Each connection's buffer memory unless the config says otherwise.
pub const DEFAULT_CONNECTION_MEMORY: u64 = 128 << 20;

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

/// A `[[target.lun]]` as written (or as `raidd lun add` sends it).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLun {
    pub lun: Option<u64>,
    pub array: String,
    /// A volume of the array (its name, or its number), instead of all of it.
    pub volume: Option<VolumeRef>,
    #[serde(default)]
    pub read_only: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct IscsiConfig {
    pub listen: SocketAddr,
    /// Bytes one connection's commands may hold.
    pub connection_memory: u64,
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

/// Checks `[iscsi]` and `[[target]]`: `None` (iSCSI off) when the file has neither.
pub(super) fn parse(mut s: Sections, ctx: &ParseCtx) -> Result<Option<IscsiConfig>, String> {
    let raw: Option<RawIscsi> = s.get("iscsi")?;
    let targets: Vec<RawTarget> = s.get("target")?.unwrap_or_default();
    if raw.is_none() && targets.is_empty() {
        return Ok(None);
    }
    iscsi_config(raw.unwrap_or_default(), targets, ctx.arrays, ctx.resolve).map(Some)
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
    let connection_memory = size_key(
        "iscsi.connection_memory",
        raw.connection_memory.as_deref(),
        DEFAULT_CONNECTION_MEMORY,
        MAX_REQUEST..=MAX_MEMORY,
    )?;
    Ok(IscsiConfig {
        listen,
        connection_memory,
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
        let l = lun_config(l, n as u64, arrays).map_err(|m| what(&m))?;
        if luns.iter().any(|o| o.lun == l.lun) {
            return Err(what(&format!("lun {} is defined twice", l.lun)));
        }
        luns.push(l);
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

/// One LUN checked against `arrays` (`number` where it names none).
pub(crate) fn lun_config(
    l: RawLun,
    number: u64,
    arrays: &[ArrayConfig],
) -> Result<LunConfig, String> {
    let lun = l.lun.unwrap_or(number);
    if lun > MAX_LUN {
        return Err(format!("lun {lun}: at most {MAX_LUN}"));
    }
    let array = arrays
        .iter()
        .position(|a| a.name == l.array)
        .ok_or_else(|| format!("lun {lun}: no array named {:?}", l.array))?;
    check_volume_ref(l.volume.as_ref()).map_err(|m| format!("lun {lun}: {m}"))?;
    Ok(LunConfig {
        lun,
        array,
        volume: l.volume,
        read_only: l.read_only || arrays[array].read_only,
    })
}
