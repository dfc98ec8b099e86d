//! What every geometry checks before it is built: md's limits on members, chunks and
//! sizes, and the error that names what was refused. The level families build on these;
//! nothing here knows a family.

use crate::level::Level;

/// Why a geometry cannot be built. Messages are shown to users as they are.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// {level} needs at least {min} members, got {got}
    #[error("{level} needs at least {min} members, got {got}")]
    TooFewMembers {
        level: Level,
        min: usize,
        got: usize,
    },
    /// too many members
    #[error("{got} members is more than the {max} that md allows")]
    TooManyMembers { got: usize, max: usize },
    #[error("chunk size {0} sectors is not a power of two of at least 8 sectors (4 KiB)")]
    BadChunk(u32),
    #[error("layout {layout} is not valid for {level}")]
    BadLayout { level: Level, layout: String },
    #[error("member {member} has {sectors} usable sectors, less than one chunk")]
    MemberTooSmall { member: usize, sectors: u64 },
    #[error("raid10 with {copies} copies needs at least {copies} members, got {members}")]
    Raid10TooFewMembers { copies: usize, members: usize },
    #[error("array would be empty")]
    Empty,
    /// A size so large that array arithmetic could overflow (a corrupt superblock, usually).
    #[error("member {member} has {sectors} sectors, more than the {max} raidd supports")]
    MemberTooLarge {
        member: usize,
        sectors: u64,
        max: u64,
    },
}

/// The largest number of members raidd accepts in one array (md: 1920 roles in v1.2; the
/// RAID levels themselves stop earlier).
pub const MAX_MEMBERS: usize = 256;

/// The largest member data area raidd accepts: 2^48 sectors (128 PiB). With at most
/// [`MAX_MEMBERS`] members and at most 255 copies every product in this crate stays far
/// below `u64::MAX`, so no mapping can overflow.
pub const MAX_MEMBER_SECTORS: u64 = 1 << 48;

/// The smallest chunk md accepts (one 4 KiB page).
pub const MIN_CHUNK_SECTORS: u32 = 8;

// The largest intermediate value is a RAID10 slot number: array chunks times near copies.
const _: () = assert!(
    (MAX_MEMBERS as u64) * (MAX_MEMBER_SECTORS / MIN_CHUNK_SECTORS as u64) * 255 < u64::MAX / 4
);

/// Refuses member counts outside `[level.min_members(), MAX_MEMBERS]`.
pub(crate) fn check_members(level: Level, members: usize) -> Result<(), LayoutError> {
    let min = level.min_members();
    if members < min {
        return Err(LayoutError::TooFewMembers {
            level,
            min,
            got: members,
        });
    }
    if members > MAX_MEMBERS {
        return Err(LayoutError::TooManyMembers {
            got: members,
            max: MAX_MEMBERS,
        });
    }
    Ok(())
}

/// md's chunk rule for striped levels: a power of two, at least one page.
pub(crate) fn check_chunk(chunk_sectors: u32) -> Result<(), LayoutError> {
    if chunk_sectors < MIN_CHUNK_SECTORS || !chunk_sectors.is_power_of_two() {
        return Err(LayoutError::BadChunk(chunk_sectors));
    }
    Ok(())
}

/// Refuses member sizes that could overflow the array arithmetic.
pub(crate) fn check_member_size(member: usize, sectors: u64) -> Result<(), LayoutError> {
    if sectors > MAX_MEMBER_SECTORS {
        return Err(LayoutError::MemberTooLarge {
            member,
            sectors,
            max: MAX_MEMBER_SECTORS,
        });
    }
    Ok(())
}

/// Number of pieces a range can split into when pieces break at every chunk: used to size
/// the output vector once.
pub(crate) fn chunk_span(sector: u64, count: u64, chunk_sectors: u64) -> usize {
    debug_assert!(count > 0);
    let first = sector / chunk_sectors;
    let last = (sector + count - 1) / chunk_sectors;
    usize::try_from(last - first + 1).unwrap_or(usize::MAX)
}
