//! How the config file writes values, and the checks every section shares: sizes, delays,
//! names, volume references, TLS certificates. Nothing here knows a section.

use std::path::PathBuf;
use std::time::Duration;

use raidd_admin::volume::VolumeRef;
use serde::Deserialize;

/// The largest request either protocol takes (NBD's maximum block size, iSCSI's MAXIMUM
/// TRANSFER LENGTH): what every connection's memory must hold at least.
pub const MAX_REQUEST: u64 = 32 << 20;
/// Bounds on the memory keys (far above any machine raidd runs on, low enough that sums of
/// them cannot overflow).
pub const MAX_MEMORY: u64 = 1 << 40;
/// Names are at most 4096 bytes (NBD's limit on strings).
pub const MAX_NAME: usize = 4096;

/// A size key, or its default; `what` names it in the error.
pub fn size_key(
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
pub fn delay_key(
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

/// A delay as the config writes it: "200ms", "2s", "1.5s", or "off" (also "0": never).
pub fn parse_delay(text: &str) -> Result<Option<std::time::Duration>, String> {
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

/// Checks a volume named in an export or a LUN: a name a volume can have, or a number from 1.
pub fn check_volume_ref(r: Option<&VolumeRef>) -> Result<(), String> {
    match r {
        None => Ok(()),
        Some(VolumeRef::Number(0)) => Err("volume 0: volumes are numbered from 1".into()),
        Some(VolumeRef::Number(_)) => Ok(()),
        Some(VolumeRef::Name(n)) => raidd_admin::volume::check_name(n),
    }
}

/// Checks a name the config gives something (`what`): not empty, not too long, no control
/// characters.
pub fn check_name(what: &str, name: &str) -> Result<(), String> {
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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTls {
    pub certificate: PathBuf,
    pub key: PathBuf,
    #[serde(default)]
    pub require: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TlsConfig {
    pub certificate: PathBuf,
    pub key: PathBuf,
    /// Refuse clients that do not upgrade with STARTTLS.
    pub require: bool,
}

impl TlsConfig {
    /// A `[*.tls]` section, its paths relative to the config file.
    pub fn from_raw(t: RawTls, resolve: &dyn Fn(PathBuf) -> PathBuf) -> TlsConfig {
        TlsConfig {
            certificate: resolve(t.certificate),
            key: resolve(t.key),
            require: t.require,
        }
    }
}
