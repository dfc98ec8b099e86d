//! Checksum tags that are not known to match their data (after a crash, writes by the
//! kernel, a member that joined; `member::ChecksummedMember`'s suspect blocks): narrowed at
//! assembly to the regions the write-intent bitmap marks where a crash of raidd's left
//! them, and re-derived from the data while the array serves.

use std::ops::Range;
use std::time::Instant;

use raidd_layout::Geometry;
use raidd_md::tags::BLOCK_SECTORS;

use super::pass::SyncLimits;
use super::passes::Throttle;
use super::report::SlotState;
use super::Array;
use crate::error::Result;
use crate::member::Member;

/// Past this many bitmap chunks set, mapping them is not worth it: every block stays
/// suspect.
const MAX_NARROWED_CHUNKS: usize = 1 << 16;

/// The blocks of each member the write-intent bitmap's set chunks cover (`chunk_sectors`
/// of the resync space each: member sectors on parity levels, array sectors on others).
fn bitmap_blocks(geometry: &Geometry, set: &[bool], chunk_sectors: u64) -> Vec<Vec<Range<u64>>> {
    let mut out = vec![Vec::new(); geometry.members()];
    let blocks = |sector: u64, sectors: u64| {
        sector / BLOCK_SECTORS..(sector + sectors).div_ceil(BLOCK_SECTORS)
    };
    let chunks = set
        .iter()
        .enumerate()
        .filter(|(_, &b)| b)
        .map(|(c, _)| c as u64);
    for c in chunks {
        let start = c * chunk_sectors;
        match geometry {
            Geometry::Parity(_) => {
                for member in out.iter_mut() {
                    member.push(blocks(start, chunk_sectors));
                }
            }
            g => {
                let end = (start + chunk_sectors).min(g.array_sectors());
                if start >= end {
                    continue;
                }
                for piece in g.pieces(start, end - start) {
                    for loc in &piece.copies {
                        out[loc.member].push(blocks(loc.sector, piece.sectors));
                    }
                }
            }
        }
    }
    out
}

/// At the start after a crash of raidd's own: the members' suspect tags narrowed to the
/// regions the write-intent bitmap marks (the writes in flight were there; every other
/// region's tags reached the member at the flush before its bit was cleared). Without a
/// bitmap, or for tags untrusted for another reason, every block stays suspect.
pub(crate) fn narrow_to_bitmap(array: &Array) {
    let p = array.parts();
    let Some((set, chunk_sectors)) = p.intent.set_chunks() else {
        return;
    };
    let marked = set.iter().filter(|&&b| b).count();
    if marked > MAX_NARROWED_CHUNKS {
        return;
    }
    let mut per_member: Option<Vec<Vec<Range<u64>>>> = None;
    for role in 0..p.slots.len() {
        let Some(m) = p.slots.member(role) else {
            continue;
        };
        let Some(tags) = m.checksums() else { continue };
        let keep =
            per_member.get_or_insert_with(|| bitmap_blocks(array.geometry(), &set, chunk_sectors));
        if tags.narrow(&keep[role]) {
            tracing::info!(array = %array.name(), member = %m.info().name,
                "checksum tags after an unclean stop: only the {marked} regions the bitmap marks are re-derived");
        }
    }
}

/// Blocks of the members in sync whose checksum tags are not known to match their data
/// yet: what [`rederive_checksums`] has to do.
pub fn unverified_tags(array: &Array) -> u64 {
    let slots = array.slots();
    (0..slots.len())
        .filter(|&r| slots.state(r) == SlotState::InSync)
        .filter_map(|r| slots.member(r))
        .filter_map(|m| m.checksums().map(|t| t.counts().unverified_blocks))
        .sum()
}

/// Re-derives the suspect checksum tags of the members in sync (after a crash, writes by
/// the kernel, a member that joined): reads them as a client's read would, and where a
/// block does not match its tag takes the data's. Runs while the array serves, for as long
/// as `keep_going()` says (asked between steps: a daemon that stops does not wait for a
/// whole member's pass), paced by `limits` as a sync pass is (above `min` it yields to
/// clients' I/O; it never goes faster than `max`, per member). Returns whether every
/// member's tags are known to match now.
pub async fn rederive_checksums(
    array: &Array,
    limits: SyncLimits,
    keep_going: &dyn Fn() -> bool,
) -> Result<bool> {
    let slots = array.slots();
    let mut all = true;
    for role in 0..slots.len() {
        let Some(m) = slots.member(role) else {
            continue;
        };
        let Some(tags) = m.checksums() else { continue };
        let left = tags.counts().unverified_blocks;
        if left == 0 {
            continue;
        }
        if slots.state(role) != SlotState::InSync {
            all = false;
            continue;
        }
        let name = m.info().name.clone();
        tracing::info!(array = %array.name(), member = %name, blocks = left, "re-deriving checksum tags from the data");
        let started = Instant::now();
        if !rederive_member(array, role, &*m, limits, keep_going).await {
            all = false;
            continue;
        }
        let c = tags.counts();
        debug_assert_eq!(
            c.unverified_blocks, 0,
            "{name}: a pass that ended left none"
        );
        tracing::info!(array = %array.name(), member = %name, changed = c.rederived,
                seconds = started.elapsed().as_secs_f64(),
                "checksum tags re-derived from the data of {name}: {} blocks, {} tags changed",
                left, c.rederived);
    }
    // Superblocks dirty since the start (a resync due): the headers, whose tags match now,
    // say dirty at the array's event count from here on, so a crash is told as raidd's own
    // (and narrowed to the bitmap) as after any other dirty marking.
    if let Some(meta) = array.parts().meta.filter(|m| m.is_dirty()) {
        super::checksums::mark_dirty(slots, meta).await;
    }
    Ok(all)
}

/// How long a paced pass waits before it asks its throttle again.
const PACED: std::time::Duration = std::time::Duration::from_millis(20);

/// How often a step that failed (a read error, writes racing it) is tried again before the
/// member's tags are left suspect until the next start.
const STEP_TRIES: u32 = 8;

async fn rederive_member(
    array: &Array,
    role: usize,
    m: &dyn Member,
    limits: SyncLimits,
    keep_going: &dyn Fn() -> bool,
) -> bool {
    let Some(tags) = m.checksums() else {
        return true;
    };
    let mut failures = 0;
    // The throttle counts member sectors done: the blocks settled so far.
    let first = tags.counts().unverified_blocks;
    let mut throttle = Throttle::new(limits, || array.parts().counters.foreground(), 0);
    let mut left = first;
    loop {
        while !throttle.allows((first - left) * BLOCK_SECTORS) && keep_going() {
            raidd_rt::time::sleep(PACED).await;
        }
        if array.is_failed() || array.slots().state(role) != SlotState::InSync {
            return false;
        }
        if !keep_going() {
            tracing::info!(array = %array.name(), member = %m.info().name,
                "re-deriving checksum tags stopped: the next start goes on with them");
            return false;
        }
        match tags.rederive_step().await {
            Ok(0) => return true,
            Ok(n) => {
                failures = 0;
                left = n.min(left);
            }
            Err(e) if failures < STEP_TRIES => {
                failures += 1;
                tracing::debug!(array = %array.name(), member = %m.info().name, "re-deriving checksum tags: {e}; again");
            }
            Err(e) => {
                tracing::warn!(array = %array.name(), member = %m.info().name,
                    "checksum tags not re-derived ({e}): its suspect blocks are read unverified until the next start");
                return false;
            }
        }
        raidd_rt::yield_now().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use raidd_layout::{Level, ParityLayout};

    #[test]
    #[allow(clippy::unwrap_used)]
    fn bitmap_chunks_map_to_the_blocks_of_every_copy() {
        let mirror = Geometry::raid1(2, 1 << 16).unwrap();
        let got = bitmap_blocks(&mirror, &[false, true, false], 1 << 14);
        assert_eq!(got, vec![vec![2048..4096], vec![2048..4096]]);
        let parity =
            Geometry::parity(Level::Raid5, 4, ParityLayout::LeftSymmetric, 128, 1 << 16).unwrap();
        let got = bitmap_blocks(&parity, &[true, false, true, false], 1 << 14);
        assert!(
            got.iter().all(|m| m == &vec![0..2048, 4096..6144]),
            "{got:?}"
        );
    }
}
