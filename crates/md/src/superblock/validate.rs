//! The kernel's semantic checks on a decoded superblock (`super_1_load`, plus the parts of
//! `super_1_validate` that refuse a device outright).

use super::fields::{DevRole, SbError, Superblock};
use super::layout;
use crate::feature;

/// md's smallest accepted data area (sectors).
const MIN_DATA_SECTORS: u64 = 10;
/// The kernel loads at most one page of bad-block log.
const MAX_BBLOG_SECTORS: u16 = 8;

pub(crate) fn validate(sb: &Superblock, read_at_sector: u64) -> Result<(), SbError> {
    check_size_limits(sb)?;
    if sb.super_offset != read_at_sector {
        return Err(SbError::WrongSuperOffset {
            stored: sb.super_offset,
            read_at: read_at_sector,
        });
    }
    let unknown = sb.feature_map & !feature::ALL;
    if unknown != 0 {
        return Err(SbError::UnknownFeatures(unknown));
    }
    if sb.data_size < MIN_DATA_SECTORS {
        return Err(SbError::DataTooSmall(sb.data_size));
    }
    check_ppl(sb.feature_map)?;
    check_data_placement(sb, read_at_sector)?;
    check_bad_block_log(sb)?;
    check_level_features(sb)?;
    check_own_role(sb)
}

/// What `parse` enforces on bytes, repeated for superblocks built in memory.
fn check_size_limits(sb: &Superblock) -> Result<(), SbError> {
    let max_dev = u32::try_from(sb.dev_roles.len()).unwrap_or(u32::MAX);
    if max_dev > crate::MAX_DEV_LIMIT {
        return Err(SbError::TooManyDevs(max_dev));
    }
    Ok(())
}

/// A PPL lives where a bitmap or journal would; the kernel refuses the combinations, and
/// the single and multiple PPL flavours exclude each other.
fn check_ppl(features: u32) -> Result<(), SbError> {
    let ppl = feature::PPL | feature::MULTIPLE_PPLS;
    if features & ppl == 0 {
        return Ok(());
    }
    if features & (feature::BITMAP_OFFSET | feature::JOURNAL) != 0 {
        return Err(SbError::PplConflict);
    }
    if features & ppl == ppl {
        return Err(invalid("feature_map", "both PPL and MULTIPLE_PPLS are set"));
    }
    Ok(())
}

/// The data area (and, during a reshape, the new one) must not overlap the superblock.
///
/// For v1.1/v1.2 this is the kernel's `data_offset >= sb_start + sb_sectors` check. For
/// v1.0 (superblock after the data) the kernel requires `data_size <= sb_start`; we check
/// the data's end, which is the same for md's data_offset of 0 and stricter otherwise.
fn check_data_placement(sb: &Superblock, sb_start: u64) -> Result<(), SbError> {
    let sb_sectors = (layout::encoded_len(sb.dev_roles.len()) / layout::SECTOR_BYTES) as u64;
    let sb_end = sb_start.saturating_add(sb_sectors);
    let fits = |offset: u64| offset >= sb_end || offset.saturating_add(sb.data_size) <= sb_start;
    if !fits(sb.data_offset) {
        return Err(invalid(
            "data_offset",
            format!(
                "data at sector {} (+{}) overlaps the superblock at sector {sb_start}",
                sb.data_offset, sb.data_size
            ),
        ));
    }
    if let Some(new_offset) = reshape_data_offset(sb) {
        if !fits(new_offset) {
            return Err(invalid(
                "new_offset",
                format!("reshape data at sector {new_offset} overlaps the superblock"),
            ));
        }
    }
    Ok(())
}

/// The data offset a reshape moves to, when it moves (signed delta from `data_offset`).
fn reshape_data_offset(sb: &Superblock) -> Option<u64> {
    let moving = feature::RESHAPE_ACTIVE | feature::NEW_OFFSET;
    if sb.feature_map & moving != moving {
        return None;
    }
    // new_offset is an s32 on disk; the field keeps its raw bits.
    let delta = i64::from(sb.new_offset as i32);
    let target = i128::from(sb.data_offset) + i128::from(delta);
    // A negative target cannot be placed anywhere: report it as sector 0, which overlaps.
    Some(u64::try_from(target).unwrap_or(0))
}

/// With recorded bad blocks the kernel must be able to load the log: one page at most, at a
/// non-zero offset.
fn check_bad_block_log(sb: &Superblock) -> Result<(), SbError> {
    if sb.feature_map & feature::BAD_BLOCKS == 0 {
        return Ok(());
    }
    if sb.bblog_size > MAX_BBLOG_SECTORS {
        return Err(invalid(
            "bblog_size",
            format!("{} sectors exceeds {MAX_BBLOG_SECTORS}", sb.bblog_size),
        ));
    }
    if sb.bblog_offset == 0 {
        return Err(invalid(
            "bblog_offset",
            "bad blocks recorded but no log offset",
        ));
    }
    Ok(())
}

/// RAID0_LAYOUT means something only to RAID0; the kernel refuses it elsewhere.
fn check_level_features(sb: &Superblock) -> Result<(), SbError> {
    if sb.feature_map & feature::RAID0_LAYOUT != 0 && sb.level != 0 {
        return Err(invalid(
            "feature_map",
            format!("RAID0_LAYOUT set on level {}", sb.level),
        ));
    }
    Ok(())
}

/// A journal device in an array without the journal feature is refused by the kernel.
fn check_own_role(sb: &Superblock) -> Result<(), SbError> {
    if sb.own_role() == DevRole::Journal && sb.feature_map & feature::JOURNAL == 0 {
        return Err(invalid(
            "dev_roles",
            "journal role without the JOURNAL feature",
        ));
    }
    Ok(())
}

fn invalid(field: &'static str, why: impl Into<String>) -> SbError {
    SbError::Invalid {
        field,
        why: why.into(),
    }
}
