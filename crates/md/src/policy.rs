//! Switching md's consistency policy in a member's superblock: the partial parity log on
//! and off, as `mdadm --grow --consistency-policy=ppl|resync` does (super1.c's `ppl` and
//! `no-ppl` updates, then the kernel's feature bits for the area it is given), and the
//! internal write-intent bitmap on and off, as `mdadm --grow --bitmap=internal|none` does
//! (at 8 sectors past the superblock, where mdadm puts it).
//!
//! The area goes right after the superblock (v1.2) and takes the space up to the bad-block
//! log, or to the data when there is no log: 1 MiB at most (then md keeps several units),
//! otherwise what one chunk's partial parity needs. One step goes past mdadm: when that
//! space is short of 1 MiB and the bad-block log is empty, the log moves to the 8 sectors
//! just before the data (where mdadm itself puts it when nothing fits after the bitmap) and
//! the area takes all the space up to it (1 MiB at most). The kernel reads the log wherever the superblock says,
//! and an area of a few KiB would hold less than a chunk (raidd logs up to a chunk per
//! stripe write in one unit), so without the move most arrays made without a log could
//! never have one.

use crate::create::{BBLOG_SECTORS, BITMAP_OFFSET_SECTORS};
use crate::ppl::{Area, HEADER_SECTORS};
use crate::{feature, Superblock};

/// mdadm's largest area (`MULTIPLE_PPL_AREA_SIZE_SUPER1`): 1 MiB.
const MAX_AREA_SECTORS: u64 = 2048;

/// Why a member's superblock cannot take a partial parity log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SwitchError {
    #[error("a partial parity log is for RAID5 only (md's PPL), not level {0}")]
    NotRaid5(i32),
    #[error(
        "the array has a write-intent bitmap: md keeps a partial parity log or a bitmap, not \
         both (remove the bitmap first)"
    )]
    HasBitmap,
    #[error("the array has a write journal: md keeps a partial parity log or a journal, not both")]
    HasJournal,
    #[error("the array already has a partial parity log")]
    AlreadyPpl,
    #[error(
        "the array has a partial parity log: md keeps a bitmap or a partial parity log, not \
         both (switch to resync first)"
    )]
    HasPpl,
    #[error("the array already has a write-intent bitmap")]
    AlreadyBitmap,
    #[error("a bitmap goes after a v1.2 superblock; this one is at the member's end")]
    NotV12,
    #[error(
        "{space} sectors between the superblock and the data (or the bad-block log, which \
         holds entries) are too few for a bitmap of {need} sectors: use a larger bitmap chunk"
    )]
    NoBitmapRoom { space: u64, need: u64 },
    #[error(
        "{space} sectors between the superblock and the data (or the bad-block log, which \
         holds entries) are too few: a partial parity log of a {chunk_kib} KiB chunk needs {need}"
    )]
    NoRoom {
        space: u64,
        need: u64,
        chunk_kib: u32,
    },
}

/// What turning the log on changes in one superblock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PplPlan {
    pub area: Area,
    /// The bad-block log's new offset (from the superblock), when it moves.
    pub bblog_offset: Option<i32>,
}

impl PplPlan {
    /// Writes the plan into `sb`: the area and its feature bit, and the log's new place.
    pub fn apply(self, sb: &mut Superblock) {
        if let Some(offset) = self.bblog_offset {
            sb.bblog_offset = offset;
        }
        self.area.store(sb);
    }
}

/// Where the log would go in `sb` and what moves for it. A unit must hold a chunk's partial
/// parity (`chunksize` sectors) after its header.
pub fn plan_ppl(sb: &Superblock) -> Result<PplPlan, SwitchError> {
    if sb.level != 5 {
        return Err(SwitchError::NotRaid5(sb.level));
    }
    if sb.feature_map & (feature::PPL | feature::MULTIPLE_PPLS) != 0 {
        return Err(SwitchError::AlreadyPpl);
    }
    if sb.feature_map & feature::BITMAP_OFFSET != 0 {
        return Err(SwitchError::HasBitmap);
    }
    if sb.feature_map & feature::JOURNAL != 0 {
        return Err(SwitchError::HasJournal);
    }
    let chunk = u64::from(sb.chunksize);
    let need = HEADER_SECTORS + chunk.max(8);
    let (offset, space) = mdadm_space(sb);
    let (space, bblog_offset) = match moved_bblog(sb) {
        Some((moved_space, at)) if space < MAX_AREA_SECTORS && moved_space > space => {
            (moved_space, Some(at))
        }
        _ => (space, None),
    };
    if space < need || offset == 0 {
        return Err(SwitchError::NoRoom {
            space,
            need,
            chunk_kib: sb.chunksize / 2,
        });
    }
    // mdadm keeps one chunk's area where it cannot have 1 MiB; the space a moved log
    // leaves is taken whole, for several units.
    let size = if space >= MAX_AREA_SECTORS {
        MAX_AREA_SECTORS
    } else if bblog_offset.is_some() {
        space
    } else {
        space.min(choose_ppl_space(chunk))
    };
    let area = Area {
        offset,
        size: size as u16,
    };
    debug_assert!(
        area.unit_space() as u64 >= chunk * 512,
        "a unit holds a chunk's partial parity"
    );
    Ok(PplPlan { area, bblog_offset })
}

/// Takes the log out of `sb` (mdadm's `no-ppl`): its feature bits, and the area's place in
/// the union it shares with the bitmap offset.
pub fn drop_ppl(sb: &mut Superblock) {
    if sb.feature_map & (feature::PPL | feature::MULTIPLE_PPLS) != 0 {
        sb.feature_map &= !(feature::PPL | feature::MULTIPLE_PPLS);
        sb.bitmap_offset = 0;
    }
}

/// What turning the bitmap on changes in one superblock: the bad-block log's new offset,
/// when it moves out of the bitmap's way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BitmapPlan {
    pub bblog_offset: Option<i32>,
}

impl BitmapPlan {
    /// Writes the plan into `sb`: the bitmap 8 sectors past the superblock and its feature
    /// bit, and the log's new place.
    pub fn apply(self, sb: &mut Superblock) {
        if let Some(offset) = self.bblog_offset {
            sb.bblog_offset = offset;
        }
        sb.feature_map |= feature::BITMAP_OFFSET;
        sb.bitmap_offset = BITMAP_OFFSET_SECTORS as i32;
    }
}

/// Whether a bitmap of `need` sectors (its header and bits, as stored) fits after `sb`, and
/// what moves for it: the same room a partial parity log would take.
pub fn plan_bitmap(sb: &Superblock, need: u64) -> Result<BitmapPlan, SwitchError> {
    if sb.feature_map & feature::BITMAP_OFFSET != 0 {
        return Err(SwitchError::AlreadyBitmap);
    }
    if sb.feature_map & (feature::PPL | feature::MULTIPLE_PPLS) != 0 {
        return Err(SwitchError::HasPpl);
    }
    if sb.feature_map & feature::JOURNAL != 0 {
        return Err(SwitchError::HasJournal);
    }
    if sb.super_offset >= sb.data_offset {
        return Err(SwitchError::NotV12);
    }
    let (_, space) = mdadm_space(sb);
    if need <= space {
        return Ok(BitmapPlan { bblog_offset: None });
    }
    match moved_bblog(sb) {
        Some((moved, at)) if need <= moved => Ok(BitmapPlan {
            bblog_offset: Some(at),
        }),
        _ => Err(SwitchError::NoBitmapRoom { space, need }),
    }
}

/// Takes the bitmap out of `sb` (mdadm's `--bitmap=none`).
pub fn drop_bitmap(sb: &mut Superblock) {
    if sb.feature_map & feature::BITMAP_OFFSET != 0 {
        sb.feature_map &= !feature::BITMAP_OFFSET;
        sb.bitmap_offset = 0;
    }
}

/// mdadm's area offset and the sectors it may take (super1.c, `ppl` update).
fn mdadm_space(sb: &Superblock) -> (i16, u64) {
    let bb = i64::from(sb.bblog_offset);
    let (sb_at, data, data_size) = (
        sb.super_offset as i64,
        sb.data_offset as i64,
        sb.data_size as i64,
    );
    let (offset, space) = if sb_at < data {
        let space = if bb != 0 { bb - 8 } else { data - sb_at - 8 };
        (8, space)
    } else {
        let offset = (-(sb_at - data - data_size)).max(i64::from(i16::MIN));
        (offset, -(offset - bb))
    };
    (offset as i16, space.max(0) as u64)
}

/// With the bad-block log moved to the 8 sectors before the data: the space after the
/// superblock's 4 KiB, and the log's new offset. Only on v1.2 (superblock before the data)
/// with a log that records no bad block.
fn moved_bblog(sb: &Superblock) -> Option<(u64, i32)> {
    let log = u64::from(BBLOG_SECTORS);
    if sb.bblog_offset <= 0 || sb.feature_map & feature::BAD_BLOCKS != 0 {
        return None;
    }
    let gap = sb.data_offset.checked_sub(sb.super_offset)?;
    let at = gap.checked_sub(log)?;
    let space = at.checked_sub(8)?;
    Some((space, i32::try_from(at).ok()?))
}

/// mdadm's area for a chunk when it cannot have 1 MiB: a header and a chunk's partial
/// parity, at least 128 KiB of it.
fn choose_ppl_space(chunk: u64) -> u64 {
    HEADER_SECTORS + chunk.max(256)
}
