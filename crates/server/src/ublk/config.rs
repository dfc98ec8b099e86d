//! The ublk frontend's section: `[[ublk]]`, an array or a volume as /dev/ublkbN.

use raidd_admin::volume::VolumeRef;
use serde::Deserialize;

use crate::config::arrays::ArrayConfig;
use crate::config::keys::check_volume_ref;
use crate::frontend::{ParseCtx, Sections};

/// A `[[ublk]]` as written (or as `raidd ublk add` sends it).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawUblk {
    pub array: String,
    /// A volume of the array (its name, or its number), instead of all of it.
    pub volume: Option<VolumeRef>,
    /// The device's number (/dev/ublkbN); absent: the entry's position among `[[ublk]]`.
    pub id: Option<u32>,
    #[serde(default)]
    pub read_only: bool,
    /// Requests in flight per queue (one queue per worker thread).
    pub queue_depth: Option<u16>,
    /// The largest request (a size): each in-flight request's buffer.
    pub max_io: Option<String>,
}

/// `[[ublk]]`: an array or a volume as /dev/ublkbN while the daemon runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UblkConfig {
    /// Index into [`Config::arrays`].
    pub array: usize,
    pub volume: Option<VolumeRef>,
    pub id: u32,
    pub read_only: bool,
    pub queue_depth: u16,
    pub max_io: u32,
}

/// ublk's limits on a queue: its tags are 16 bits, and the kernel takes at most this many.
const UBLK_DEPTH: std::ops::RangeInclusive<u16> = 1..=1024;
/// Each request in flight holds a buffer of `max_io` bytes: 4 KiB to 4 MiB.
const UBLK_MAX_IO: std::ops::RangeInclusive<u64> = 4096..=(4 << 20);
/// Device numbers the kernel gives (it allocates below 2^20).
const UBLK_MAX_ID: u32 = (1 << 20) - 1;

/// Checks `[[ublk]]`.
pub(super) fn parse(mut s: Sections, ctx: &ParseCtx) -> Result<Vec<UblkConfig>, String> {
    let raw: Vec<RawUblk> = s.get("ublk")?.unwrap_or_default();
    ublk_config(raw, ctx.arrays)
}

/// The `[[ublk]]` entries, checked: a known array, a device number given once, limits in
/// range.
fn ublk_config(raw: Vec<RawUblk>, arrays: &[ArrayConfig]) -> Result<Vec<UblkConfig>, String> {
    let mut out: Vec<UblkConfig> = Vec::new();
    for (n, u) in raw.into_iter().enumerate() {
        let u = ublk_entry(u, n as u32, arrays)?;
        if out.iter().any(|o| o.id == u.id) {
            return Err(format!(
                "[[ublk]] {}: the device number is given twice",
                u.id
            ));
        }
        out.push(u);
    }
    Ok(out)
}

/// One `[[ublk]]` checked against `arrays` (`number` where it names no id).
pub(crate) fn ublk_entry(
    u: RawUblk,
    number: u32,
    arrays: &[ArrayConfig],
) -> Result<UblkConfig, String> {
    let id = u.id.unwrap_or(number);
    let what = |m: &str| format!("[[ublk]] {id}: {m}");
    if id > UBLK_MAX_ID {
        return Err(what(&format!("id: at most {UBLK_MAX_ID}")));
    }
    let array = arrays
        .iter()
        .position(|a| a.name == u.array)
        .ok_or_else(|| what(&format!("no array named {:?}", u.array)))?;
    check_volume_ref(u.volume.as_ref()).map_err(|m| what(&m))?;
    let queue_depth = u.queue_depth.unwrap_or(64);
    if !UBLK_DEPTH.contains(&queue_depth) {
        return Err(what(&format!("queue_depth = {queue_depth}: 1 to 1024")));
    }
    let max_io = match u.max_io.as_deref() {
        None => 512 << 10,
        Some(t) => raidd_admin::size::parse_size(t)
            .ok()
            .filter(|b| UBLK_MAX_IO.contains(b) && b.is_multiple_of(4096))
            .ok_or_else(|| what(&format!("max_io = {t:?}: 4K to 4M, in whole 4K pages")))?
            as u32,
    };
    Ok(UblkConfig {
        array,
        volume: u.volume,
        id,
        read_only: u.read_only || arrays[array].read_only,
        queue_depth,
        max_io,
    })
}

/// The bytes of buffers the ublk devices hold.
pub(super) fn buffer_bytes(ublk: &[UblkConfig], threads: usize) -> u64 {
    ublk.iter()
        .map(|u| u64::from(u.queue_depth) * u64::from(u.max_io) * threads as u64)
        .sum()
}

/// ublk's buffers are held for the devices' life (one of `max_io` bytes per tag, `queue_depth`
/// tags per queue, a queue per worker thread): together they must fit the server's buffer
/// budget, so a config cannot make raidd hold unbounded memory.
pub(super) fn refuse_held(
    ublk: &[UblkConfig],
    threads: usize,
    one: u64,
    buffer_memory: u64,
) -> Result<(), String> {
    let held = buffer_bytes(ublk, threads);
    if held.saturating_add(one) > buffer_memory {
        return Err(format!(
            "[[ublk]] buffers would take {held} bytes (queue_depth x max_io x {threads} \
             threads, summed over the devices): with one connection's {one} bytes, more than \
             buffer_memory ({buffer_memory} bytes); lower them or raise buffer_memory"
        ));
    }
    Ok(())
}
