//! Checksum tags put on an array that was made without them (`raidd grow --checksums`),
//! offline. Each member's md data area shrinks to whole chunks that leave room past them
//! for its tags, never below what the array uses of it (md's `size`, which does not
//! change), and a tag header that trusts nothing is written past it: the next start makes
//! every block suspect and re-derives its tag from the data (`rederive.rs`; in the
//! background when served). Offline only: the array's clients would see its logical block
//! grow from 512 bytes to 4 KiB.

use std::collections::HashMap;

use raidd_md::tags::{Algorithm, Geometry, BLOCK_SECTORS};

use super::report::SlotState;
use super::{Array, MetaWrite};
use crate::error::{Error, ErrorKind, Result};
use crate::member::{ChecksummedMember, TagFacts};

fn refuse(msg: String) -> Error {
    Error::new(ErrorKind::InvalidInput, msg)
}

/// Puts `algorithm` tags on every member of `array` (see the module's comment); returns
/// the bytes their areas take. Refused, with nothing changed, on an array that has tags
/// already, is read-only or not whole, or has a member with no room for its tags past what
/// the array uses of it (shrink the array first).
pub async fn add_checksums(array: &Array, algorithm: Algorithm) -> Result<u64> {
    let p = array.parts();
    let name = array.name();
    let Some(meta) = p.meta else {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!("{name} has no md metadata to record checksums in"),
        ));
    };
    array.check_writable()?;
    let slots = p.slots;
    if let Some(c) = (0..slots.len())
        .filter_map(|r| slots.member(r))
        .find_map(|m| m.checksums().map(|c| c.algorithm_name()))
    {
        return Err(refuse(format!("{name} has checksums already ({c})")));
    }
    if let Some(r) = (0..slots.len()).find(|&r| slots.state(r) != SlotState::InSync) {
        return Err(refuse(format!(
            "{name} is not whole (slot {r} is {:?}): checksums go on every member at once",
            slots.state(r)
        )));
    }
    let members = meta.superblocks().await;
    let mut sizes = HashMap::new();
    let mut tag_bytes = 0;
    for (_, m) in &members {
        let g = room(
            &m.sb,
            m.member.info().size_bytes / 512,
            &m.member.info().name,
        )?;
        tag_bytes += g.cost_sectors() * 512;
        sizes.insert(m.sb.device_uuid, g.data_size);
    }
    let failed = meta
        .change_all(|sb| {
            if let Some(&d) = sizes.get(&sb.device_uuid) {
                debug_assert!(d >= sb.size, "{d} holds what the array uses");
                sb.data_size = d;
            }
        })
        .await;
    array
        .superblocks_failed(failed, MetaWrite::Superblock)
        .await;
    array.check_alive()?;
    let events = meta.events().await;
    for (_, m) in meta.superblocks().await {
        let facts = TagFacts::of(&m.sb, events);
        debug_assert_eq!(Some(&facts.data_size), sizes.get(&facts.device_uuid));
        ChecksummedMember::untrusted(m.member.clone(), &facts, algorithm)
            .await
            .map_err(|e| {
                Error::io(
                    format!("{}: writing its tag header", m.member.info().name),
                    e,
                )
            })?;
    }
    tracing::info!(array = %name, algorithm = algorithm.name(), tag_bytes,
        "checksums added: every tag is derived from the data at the next start");
    Ok(tag_bytes)
}

/// The data area and tag area of a member whose superblock is `sb` and that holds
/// `sectors`: whole chunks, at least what the array uses of it.
fn room(sb: &raidd_md::Superblock, sectors: u64, member: &str) -> Result<Geometry> {
    if !sb.data_offset.is_multiple_of(BLOCK_SECTORS) {
        return Err(refuse(format!(
            "{member}: its data starts at sector {}, not on a 4 KiB boundary",
            sb.data_offset
        )));
    }
    let unit = u64::from(sb.chunksize).max(BLOCK_SECTORS);
    let used = sb.size.div_ceil(unit) * unit;
    match Geometry::fit(sectors, sb.data_offset, unit) {
        Some(g) if g.data_size >= used => Ok(g),
        _ => {
            let need = Geometry::of(sb.data_offset, used).end();
            Err(refuse(format!(
                "{member}: no room for checksum tags past the {} KiB the array uses of it \
                 (it needs {} KiB, it has {} KiB): shrink the array first",
                used / 2,
                need / 2,
                sectors / 2
            )))
        }
    }
}
