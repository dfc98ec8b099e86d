//! Volumes on a running array: the table read from and written to the array's two ends
//! (the logic is [`crate::volume`]'s, on bytes), and a volume's [`Extent`] to do I/O in.
//! The offline commands and the daemon share these.

use std::sync::Arc;

use raidd_engine::{Array, Extent};
use raidd_rt::AlignedBuf;

use crate::exit::{AdminError, AdminResult, Exit};
use crate::session;
use crate::volume::{self, Edges, Volume, VolumeRef, EDGE};

/// The array's two ends.
pub async fn read_edges(array: &Arc<Array>) -> AdminResult<Edges> {
    let size = array.size_bytes();
    if size < 4 * EDGE {
        return Err(AdminError::usage(format!(
            "{} has {size} bytes: too small for volumes (4 MiB at least)",
            array.name()
        )));
    }
    let whole = Extent::whole(array.clone());
    let head = session::read_at(&whole, 0, AlignedBuf::zeroed(EDGE as usize)).await?;
    let tail = session::read_at(
        &whole,
        Edges::tail_offset(size),
        AlignedBuf::zeroed(EDGE as usize),
    )
    .await?;
    Edges::new(size, head.to_vec(), tail.to_vec()).map_err(AdminError::usage)
}

/// Writes the two ends back, and flushes them to the members: a table is metadata, and a
/// later client of a volume must find it after a crash.
pub async fn write_edges(array: &Arc<Array>, edges: Edges) -> AdminResult {
    let whole = Extent::whole(array.clone());
    let size = array.size_bytes();
    let (head, tail) = edges.into_parts();
    session::write_at(&whole, 0, AlignedBuf::from_slice(&head)).await?;
    session::write_at(
        &whole,
        Edges::tail_offset(size),
        AlignedBuf::from_slice(&tail),
    )
    .await?;
    array.flush().await?;
    Ok(())
}

/// The array's volumes; `None` when it has no partition table.
pub async fn table(array: &Arc<Array>) -> AdminResult<Option<Vec<Volume>>> {
    let edges = read_edges(array).await?;
    volume::list(edges)
        .map_err(|m| AdminError::new(Exit::Corrupt, format!("{}: {m}", array.name())))
}

/// Reads the table, applies `f` (a create, resize or delete), and writes it back if `f`
/// succeeded; returns the volume `f` acted on. Nothing is written when it fails.
pub async fn change(
    array: &Arc<Array>,
    f: impl FnOnce(Edges) -> Result<(Edges, Volume), String>,
) -> AdminResult<Volume> {
    let edges = read_edges(array).await?;
    // A table that cannot be trusted is reported as such, not as a refused change.
    volume::list(edges.clone())
        .map_err(|m| AdminError::new(Exit::Corrupt, format!("{}: {m}", array.name())))?;
    let (edges, vol) =
        f(edges).map_err(|m| AdminError::new(Exit::Usage, format!("{}: {m}", array.name())))?;
    write_edges(array, edges).await?;
    Ok(vol)
}

/// The 16 bytes of a volume's GUID (as the table's text gives it), to tell volumes apart
/// where a client wants a unique identifier.
fn guid_bytes(guid: &str) -> [u8; 16] {
    let hex: Vec<u8> = guid
        .chars()
        .filter_map(|c| c.to_digit(16).map(|d| d as u8))
        .collect();
    let mut out = [0u8; 16];
    for (i, pair) in hex.chunks(2).take(16).enumerate() {
        out[i] = pair[0] << 4 | pair.get(1).copied().unwrap_or(0);
    }
    out
}

/// The extent of `vol` on `array`.
pub fn extent_of(array: &Arc<Array>, vol: &Volume) -> AdminResult<Extent> {
    Extent::part(
        array.clone(),
        vol.offset_bytes,
        vol.size_bytes,
        guid_bytes(&vol.guid),
        format!("{}/{}", array.name(), vol.name),
    )
    .map_err(|e| AdminError::new(Exit::Failure, format!("volume {:?}: {e}", vol.name)))
}

/// The volume `r` names on `array`, and its extent.
pub async fn open(array: &Arc<Array>, r: &VolumeRef) -> AdminResult<(Volume, Extent)> {
    let vols = table(array).await?;
    let vol = volume::find(vols.as_deref(), r, array.name())
        .map_err(|m| AdminError::new(Exit::NotFound, m))?;
    let extent = extent_of(array, &vol)?;
    Ok((vol, extent))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guids_become_their_sixteen_bytes() {
        assert_eq!(
            guid_bytes("0FC63DAF-8483-4772-8E79-3D69D8477DE4"),
            [
                0x0f, 0xc6, 0x3d, 0xaf, 0x84, 0x83, 0x47, 0x72, 0x8e, 0x79, 0x3d, 0x69, 0xd8, 0x47,
                0x7d, 0xe4
            ]
        );
        assert_eq!(guid_bytes(""), [0; 16]);
    }
}
