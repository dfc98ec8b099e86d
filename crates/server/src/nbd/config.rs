//! The NBD frontend's sections: `[nbd]` (where it listens, requests in flight, memory and
//! idle time per connection, STARTTLS) and `[[export]]` (what it offers, by name).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use raidd_admin::volume::VolumeRef;
use serde::Deserialize;

use crate::config::arrays::ArrayConfig;
use crate::config::keys::{
    check_name, check_volume_ref, delay_key, size_key, RawTls, TlsConfig, MAX_MEMORY, MAX_NAME,
    MAX_REQUEST,
};
use crate::frontend::{ParseCtx, Sections};

/// Where NBD clients connect when the config names no address: loopback only.
pub const DEFAULT_NBD_LISTEN: &str = "127.0.0.1:10809";
/// Each connection's buffer memory unless the config says otherwise.
pub const DEFAULT_CONNECTION_MEMORY: u64 = 64 << 20;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawNbd {
    listen: Option<String>,
    /// Most requests a connection may have in flight.
    max_in_flight: Option<usize>,
    /// Buffer memory one connection's requests may hold (a size).
    connection_memory: Option<String>,
    /// A connection with nothing in flight and no request for this long is closed.
    idle_timeout: Option<String>,
    tls: Option<RawTls>,
}

/// An `[[export]]` as written (or as `raidd export add` gives it).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawExport {
    pub name: String,
    pub array: String,
    /// A volume of the array (its name, or its number), instead of all of it.
    pub volume: Option<VolumeRef>,
    #[serde(default)]
    pub read_only: bool,
    pub description: Option<String>,
}

/// `[nbd]` and the exports, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct NbdConfig {
    pub listen: SocketAddr,
    pub max_in_flight: usize,
    pub tls: Option<TlsConfig>,
    /// Bytes one connection's requests may hold.
    pub connection_memory: u64,
    /// A connection idle this long is closed; `None`: never.
    pub idle_timeout: Option<Duration>,
    /// What it offers; with no `[[export]]` at all, every array under its own name.
    pub exports: Vec<ExportConfig>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ExportConfig {
    pub name: String,
    /// Index into [`Config::arrays`].
    pub array: usize,
    /// The volume of it served; `None`: all of it.
    pub volume: Option<VolumeRef>,
    pub read_only: bool,
    pub description: String,
}

/// Bounds on `nbd.max_in_flight`: at least one request, and not so many that a client
/// can pin unbounded server memory (payload is bounded separately).
const MAX_IN_FLIGHT: std::ops::RangeInclusive<usize> = 1..=1024;

/// Checks `[nbd]` and `[[export]]`.
pub(super) fn parse(mut s: Sections, ctx: &ParseCtx) -> Result<NbdConfig, String> {
    let raw: RawNbd = s.get("nbd")?.unwrap_or_default();
    let exports: Vec<RawExport> = s.get("export")?.unwrap_or_default();
    let mut nbd = nbd_config(raw, ctx.resolve)?;
    nbd.exports = exports_config(exports, ctx.arrays)?;
    Ok(nbd)
}

fn nbd_config(raw: RawNbd, resolve: &dyn Fn(PathBuf) -> PathBuf) -> Result<NbdConfig, String> {
    let listen_text = raw.listen.as_deref().unwrap_or(DEFAULT_NBD_LISTEN);
    let listen: SocketAddr = listen_text.parse().map_err(|_| {
        format!("nbd.listen = {listen_text:?}: not an address:port (e.g. \"127.0.0.1:10809\")")
    })?;
    let max_in_flight = raw.max_in_flight.unwrap_or(64);
    if !MAX_IN_FLIGHT.contains(&max_in_flight) {
        return Err(format!(
            "nbd.max_in_flight = {max_in_flight}: must be {}..={}",
            MAX_IN_FLIGHT.start(),
            MAX_IN_FLIGHT.end()
        ));
    }
    let tls = raw.tls.map(|t| TlsConfig::from_raw(t, resolve));
    let connection_memory = size_key(
        "nbd.connection_memory",
        raw.connection_memory.as_deref(),
        DEFAULT_CONNECTION_MEMORY,
        MAX_REQUEST..=MAX_MEMORY,
    )?;
    let idle_timeout = delay_key("nbd.idle_timeout", raw.idle_timeout.as_deref(), None, true)?;
    Ok(NbdConfig {
        exports: Vec::new(),
        listen,
        max_in_flight,
        tls,
        connection_memory,
        idle_timeout,
    })
}

/// The exports; with no `[[export]]` at all, every array under its own name.
fn exports_config(
    raw: Vec<RawExport>,
    arrays: &[ArrayConfig],
) -> Result<Vec<ExportConfig>, String> {
    if raw.is_empty() {
        return Ok(arrays
            .iter()
            .enumerate()
            .map(|(i, a)| ExportConfig {
                name: a.name.clone(),
                array: i,
                volume: None,
                read_only: a.read_only,
                description: String::new(),
            })
            .collect());
    }
    let mut exports: Vec<ExportConfig> = Vec::new();
    for e in raw {
        let e = export_config(e, arrays)?;
        if exports.iter().any(|x| x.name == e.name) {
            return Err(format!("export {:?} is defined twice", e.name));
        }
        exports.push(e);
    }
    Ok(exports)
}

/// One export, checked against the arrays (its name alone; the caller checks it is unique).
pub(crate) fn export_config(e: RawExport, arrays: &[ArrayConfig]) -> Result<ExportConfig, String> {
    check_name("export", &e.name)?;
    let array = arrays
        .iter()
        .position(|a| a.name == e.array)
        .ok_or_else(|| format!("export {:?}: no array named {:?}", e.name, e.array))?;
    let description = e.description.unwrap_or_default();
    if description.len() > MAX_NAME {
        return Err(format!(
            "export {:?}: description longer than {MAX_NAME} bytes",
            e.name
        ));
    }
    check_volume_ref(e.volume.as_ref()).map_err(|m| format!("export {:?}: {m}", e.name))?;
    Ok(ExportConfig {
        name: e.name,
        array,
        volume: e.volume,
        read_only: e.read_only || arrays[array].read_only,
        description,
    })
}
