//! One member's md metadata on disk: its v1.2 superblock read and checked, and its bad-block
//! log read and emptied. Below both assembly (which decides from them) and the running
//! array's metadata (which writes them).

use raidd_md::badblocks::BadRange;
use raidd_md::{SbError, Superblock, SB_OFFSET_V12_SECTORS};

use crate::error::{Error, ErrorKind, Result};
use crate::member::{read_bytes, Member};

/// Bytes read to find a superblock: the 4 KiB block at 4 KiB.
const SB_READ: usize = 4096;

/// Reads and validates a member's v1.2 superblock.
pub async fn examine(member: &dyn Member) -> Result<Superblock> {
    let name = &member.info().name;
    let at = SB_OFFSET_V12_SECTORS * 512;
    if member.info().size_bytes < at + SB_READ as u64 {
        return Err(Error::new(
            ErrorKind::NotFound,
            format!("{name}: too small to hold an md superblock"),
        ));
    }
    let block = read_bytes(member, at, SB_READ)
        .await
        .map_err(|e| Error::io(format!("{name}: reading the superblock"), e))?;
    Superblock::parse(&block, SB_OFFSET_V12_SECTORS).map_err(|e| match e {
        SbError::BadMagic { .. } => Error::new(
            ErrorKind::NotFound,
            format!("{name}: no md v1.2 superblock ({e})"),
        ),
        e => Error::new(ErrorKind::BadMetadata, format!("{name}: {e}")),
    })
}

/// Where `sb` places its member's bad-block log: byte offset and length (`None` for no log:
/// the kernel reads one wherever the superblock places it, feature bit or not).
fn bblog_at(name: &str, sb: &Superblock) -> Result<Option<(u64, usize)>> {
    if sb.bblog_offset == 0 || sb.bblog_size == 0 {
        return Ok(None);
    }
    let at = i64::try_from(sb.super_offset)
        .ok()
        .and_then(|s| s.checked_add(i64::from(sb.bblog_offset)))
        .and_then(|s| u64::try_from(s).ok())
        .and_then(|s| s.checked_mul(512))
        .ok_or_else(|| {
            Error::new(
                ErrorKind::BadMetadata,
                format!("{name}: the bad-block log lies outside the device"),
            )
        })?;
    Ok(Some((at, usize::from(sb.bblog_size) * 512)))
}

/// The ranges a member's bad-block log records within its data area.
pub(crate) async fn read_bad_blocks(member: &dyn Member, sb: &Superblock) -> Result<Vec<BadRange>> {
    let name = &member.info().name;
    let Some((at, len)) = bblog_at(name, sb)? else {
        return Ok(Vec::new());
    };
    let log = read_bytes(member, at, len)
        .await
        .map_err(|e| Error::io(format!("{name}: reading the bad-block log"), e))?;
    let ranges = raidd_md::badblocks::parse(&log, sb.bblog_shift)
        .map_err(|e| Error::new(ErrorKind::BadMetadata, format!("{name}: {e}")))?;
    let data = sb.data_offset..sb.data_offset.saturating_add(sb.data_size);
    Ok(ranges
        .into_iter()
        .filter(|r| r.start < data.end && r.start + r.sectors > data.start)
        .collect())
}

/// Empties the bad-block log that `sb` places on `member` (all ones, as mdadm and the kernel
/// write it): a member given a new superblock is written whole before it is read, and
/// whatever a log there held (an earlier life of the device) must not be taken for its own.
pub(crate) async fn clear_bad_blocks(member: &dyn Member, sb: &Superblock) -> Result<()> {
    let name = &member.info().name;
    let Some((at, len)) = bblog_at(name, sb)? else {
        return Ok(());
    };
    let mut log = raidd_rt::AlignedBuf::zeroed(len);
    log.fill(0xff);
    crate::member::write_bytes(member, at, log)
        .await
        .map_err(|e| Error::io(format!("{name}: writing the bad-block log"), e))
}
