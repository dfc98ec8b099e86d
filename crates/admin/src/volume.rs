//! Volumes: the partitions of a GPT on an array (seed 003's pool carved for its clients),
//! read and written with the `gpt` crate. The table lives in the array's first and last
//! sectors only, so the logic runs on an [`Edges`] image of them (pure: bytes in, bytes
//! out) and the I/O is the caller's: read both edges of the array, change, write them back.
//! md arrays are block devices to the kernel, so a table made here is `/dev/md0p1` there,
//! and one made by sgdisk or parted on `/dev/md0` is read here.

use std::collections::BTreeMap;
use std::io::{self, Read, Seek, SeekFrom, Write};

use gpt::disk::LogicalBlockSize;
use gpt::mbr::ProtectiveMBR;
use gpt::GptConfig;
use serde::Serialize;

/// Bytes kept of each end of the array: the primary table (LBA 0 to 33) and the backup
/// (the last 33 sectors) with room to spare.
pub const EDGE: u64 = 1 << 20;
/// Where volumes start and how they are aligned: 1 MiB, as parted and sgdisk do.
pub const ALIGN_SECTORS: u64 = 2048;

/// An array seen through its two ends: reads elsewhere return zeros, writes elsewhere fail
/// (a GPT touches nothing there).
#[derive(Debug, Clone)]
pub struct Edges {
    size: u64,
    head: Vec<u8>,
    tail: Vec<u8>,
    pos: u64,
}

impl Edges {
    /// An array of `size` bytes whose first and last [`EDGE`] bytes are `head` and `tail`.
    pub fn new(size: u64, head: Vec<u8>, tail: Vec<u8>) -> Result<Edges, String> {
        if size < 4 * EDGE || head.len() as u64 != EDGE || tail.len() as u64 != EDGE {
            return Err(format!(
                "an array of {size} bytes is too small for volumes (4 MiB at least)"
            ));
        }
        Ok(Edges {
            size,
            head,
            tail,
            pos: 0,
        })
    }

    /// The two ends, to write back.
    pub fn into_parts(self) -> (Vec<u8>, Vec<u8>) {
        (self.head, self.tail)
    }

    /// Byte offset of the tail.
    pub fn tail_offset(size: u64) -> u64 {
        size - EDGE
    }

    /// The buffer and offset in it holding byte `at`, and how many bytes from there are in it.
    fn region(&mut self, at: u64) -> Option<(&mut Vec<u8>, usize, usize)> {
        let tail_at = Self::tail_offset(self.size);
        if at < EDGE {
            let i = at as usize;
            Some((&mut self.head, i, EDGE as usize - i))
        } else if at >= tail_at && at < self.size {
            let i = (at - tail_at) as usize;
            Some((&mut self.tail, i, EDGE as usize - i))
        } else {
            None
        }
    }

    /// Bytes from `at` to the next edge (or the end).
    fn gap(&self, at: u64) -> u64 {
        let tail_at = Self::tail_offset(self.size);
        if at < tail_at {
            tail_at - at
        } else {
            self.size.saturating_sub(at)
        }
    }
}

impl Read for Edges {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let at = self.pos;
        if at >= self.size || out.is_empty() {
            return Ok(0);
        }
        let n = match self.region(at) {
            Some((buf, i, left)) => {
                let n = out.len().min(left);
                out[..n].copy_from_slice(&buf[i..i + n]);
                n
            }
            None => {
                let n = (out.len() as u64).min(self.gap(at)) as usize;
                out[..n].fill(0);
                n
            }
        };
        self.pos += n as u64;
        Ok(n)
    }
}

impl Write for Edges {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let at = self.pos;
        let Some((buf, i, left)) = self.region(at) else {
            return Err(io::Error::other(format!(
                "a partition table write at byte {at}, outside the array's ends"
            )));
        };
        let n = data.len().min(left);
        buf[i..i + n].copy_from_slice(&data[..n]);
        self.pos += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Seek for Edges {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let pos = match to {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::End(d) => self.size.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos = pos.ok_or_else(|| io::Error::other("seek before the start"))?;
        Ok(self.pos)
    }
}

/// One volume: a GPT partition.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Volume {
    /// The partition's number (1 is the first entry: `/dev/md0p1` to the kernel).
    pub number: u32,
    pub name: String,
    /// Byte offset in the array, and length.
    pub offset_bytes: u64,
    pub size_bytes: u64,
    pub type_guid: String,
    pub guid: String,
}

const SECTOR: u64 = 512;

fn config(writable: bool) -> GptConfig {
    GptConfig::new()
        .writable(writable)
        .logical_block_size(LogicalBlockSize::Lb512)
}

fn volumes_of(parts: &BTreeMap<u32, gpt::partition::Partition>) -> Vec<Volume> {
    parts
        .iter()
        .filter(|(_, p)| p.is_used())
        .map(|(&n, p)| Volume {
            number: n,
            name: p.name.clone(),
            offset_bytes: p.first_lba * SECTOR,
            size_bytes: (p.last_lba + 1 - p.first_lba) * SECTOR,
            type_guid: p.part_type_guid.guid.to_string(),
            guid: p.part_guid.to_string(),
        })
        .collect()
}

/// The volumes on the array, or `None` when it has no GPT.
pub fn list(edges: Edges) -> Result<Option<Vec<Volume>>, String> {
    match config(false).open_from_device(edges) {
        Ok(disk) => Ok(Some(volumes_of(disk.partitions()))),
        Err(gpt::GptError::Header(gpt::header::HeaderError::InvalidGptSignature)) => Ok(None),
        Err(e) => Err(format!("the partition table cannot be read: {e}")),
    }
}

/// Checks a volume name: 1 to 36 characters (a GPT entry holds 36 UTF-16 units), no
/// control characters.
pub fn check_name(name: &str) -> Result<(), String> {
    let units = name.encode_utf16().count();
    if name.is_empty() || units > 36 || name.chars().any(char::is_control) {
        return Err(format!(
            "volume name {name:?}: 1 to 36 characters, none of them control characters"
        ));
    }
    Ok(())
}

/// Adds a volume of `size` bytes named `name` (a GPT made first if the array has none):
/// aligned to 1 MiB, in the first free space that holds it. The edges to write back, and the
/// volume.
pub fn create(edges: Edges, name: &str, size: u64) -> Result<(Edges, Volume), String> {
    check_name(name)?;
    if size == 0 || !size.is_multiple_of(SECTOR) {
        return Err(format!(
            "volume size {size}: a multiple of 512 bytes, above zero"
        ));
    }
    let array_size = edges.size;
    let existing = list(edges.clone())?;
    if existing
        .as_ref()
        .is_some_and(|v| v.iter().any(|v| v.name == name))
    {
        return Err(format!("a volume named {name:?} exists already"));
    }
    let mut disk = match existing {
        Some(_) => config(true)
            .open_from_device(edges)
            .map_err(|e| format!("the partition table cannot be read: {e}"))?,
        None => {
            let mut edges = edges;
            let lbas = u32::try_from(array_size / SECTOR - 1).unwrap_or(u32::MAX);
            ProtectiveMBR::with_lb_size(lbas)
                .overwrite_lba0(&mut edges)
                .map_err(|e| format!("writing the protective MBR: {e}"))?;
            config(true)
                .create_from_device(edges, None)
                .map_err(|e| format!("making a partition table: {e}"))?
        }
    };
    let free = disk
        .find_free_sectors()
        .iter()
        .map(|&(_, n)| n * SECTOR)
        .max()
        .unwrap_or(0);
    let id = disk
        .add_partition(
            name,
            size,
            gpt::partition_types::LINUX_FS,
            0,
            Some(ALIGN_SECTORS),
        )
        .map_err(|_| {
            format!(
                "no free space of {size} bytes for {name:?} (the largest free run is {free} bytes, \
                 before 1 MiB alignment)"
            )
        })?;
    let vol = volumes_of(disk.partitions())
        .into_iter()
        .find(|v| v.number == id)
        .ok_or("the new volume is not in the table")?;
    let edges = disk
        .write()
        .map_err(|e| format!("writing the partition table: {e}"))?;
    Ok((edges, vol))
}

/// Removes the volume named `name`; its data stays where it was, unlisted. The `gpt` crate
/// writes the table's used entries first, so the volumes after it move up one number
/// (`/dev/md0p3` becomes `p2` to the kernel): address volumes by name or GUID.
pub fn delete(edges: Edges, name: &str) -> Result<(Edges, Volume), String> {
    let Some(vols) = list(edges.clone())? else {
        return Err("the array has no volumes (no partition table)".into());
    };
    let vol = vols
        .into_iter()
        .find(|v| v.name == name)
        .ok_or_else(|| format!("no volume named {name:?}"))?;
    let mut disk = config(true)
        .open_from_device(edges)
        .map_err(|e| format!("the partition table cannot be read: {e}"))?;
    disk.remove_partition(vol.number)
        .ok_or_else(|| format!("volume {name:?} could not be removed"))?;
    let edges = disk
        .write()
        .map_err(|e| format!("writing the partition table: {e}"))?;
    Ok((edges, vol))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blank(size: u64) -> Edges {
        Edges::new(size, vec![0; EDGE as usize], vec![0; EDGE as usize]).unwrap()
    }

    #[test]
    fn volumes_are_made_listed_and_deleted() {
        let size = 64 << 20;
        assert_eq!(list(blank(size)).unwrap(), None);
        let (e, a) = create(blank(size), "alpha", 8 << 20).unwrap();
        assert_eq!(
            (a.number, a.offset_bytes, a.size_bytes),
            (1, 1 << 20, 8 << 20)
        );
        let (e, b) = create(e, "beta", 16 << 20).unwrap();
        assert_eq!(b.offset_bytes, 9 << 20, "after alpha, aligned");
        assert!(create(e.clone(), "alpha", 1 << 20)
            .unwrap_err()
            .contains("exists"));
        assert!(create(e.clone(), "huge", 60 << 20)
            .unwrap_err()
            .contains("no free space"));
        let vols = list(e.clone()).unwrap().unwrap();
        assert_eq!(vols, vec![a.clone(), b.clone()]);
        let (e, gone) = delete(e, "alpha").unwrap();
        assert_eq!(gone, a);
        // The table is written compacted: beta is entry 1 now, same place, same GUID.
        let left = list(e.clone()).unwrap().unwrap();
        assert_eq!(left, vec![Volume { number: 1, ..b }]);
        // The freed space is used again.
        let (_, c) = create(e, "gamma", 4 << 20).unwrap();
        assert_eq!(c.offset_bytes, 1 << 20);
    }

    #[test]
    fn bad_input_is_refused() {
        let size = 64 << 20;
        assert!(create(blank(size), "", 1 << 20).is_err());
        assert!(create(blank(size), &"x".repeat(37), 1 << 20).is_err());
        assert!(create(blank(size), "a", 0).is_err());
        assert!(create(blank(size), "a", 1000).is_err());
        assert!(delete(blank(size), "a").unwrap_err().contains("no volumes"));
        assert!(Edges::new(1 << 20, vec![0; EDGE as usize], vec![0; EDGE as usize]).is_err());
    }

    #[test]
    fn reads_outside_the_edges_are_zeros_and_writes_there_fail() {
        let mut e = blank(8 << 20);
        e.seek(SeekFrom::Start(3 << 20)).unwrap();
        let mut b = [1u8; 16];
        e.read_exact(&mut b).unwrap();
        assert_eq!(b, [0; 16]);
        assert!(e.write(&[1]).is_err());
        e.seek(SeekFrom::End(-1)).unwrap();
        assert_eq!(e.write(&[7]).unwrap(), 1);
        let (_, tail) = e.into_parts();
        assert_eq!(tail[EDGE as usize - 1], 7);
    }
}
