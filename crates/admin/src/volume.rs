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

/// The volumes on the array, or `None` when it has no GPT. A table whose entries overlap or
/// leave the space its header gives them (made by hand, or by a tool with a bug) is an
/// error: none of its volumes can be trusted with a client's writes.
pub fn list(edges: Edges) -> Result<Option<Vec<Volume>>, String> {
    match config(false).open_from_device(edges) {
        Ok(disk) => {
            let h = disk.header();
            let vols = volumes_of(disk.partitions());
            check_table(&vols, h.first_usable * SECTOR, (h.last_usable + 1) * SECTOR)?;
            Ok(Some(vols))
        }
        Err(gpt::GptError::Header(gpt::header::HeaderError::InvalidGptSignature)) => Ok(None),
        Err(e) => Err(format!("the partition table cannot be read: {e}")),
    }
}

/// Checks that every volume lies in `[first, end)` (bytes: the space the table's header
/// leaves for volumes) and that no two overlap.
pub fn check_table(vols: &[Volume], first: u64, end: u64) -> Result<(), String> {
    for v in vols {
        let v_end = v.offset_bytes.checked_add(v.size_bytes);
        if v.size_bytes == 0 || v.offset_bytes < first || v_end.is_none_or(|e| e > end) {
            return Err(format!(
                "the partition table is not usable: volume {} ({:?}, {} bytes at {}) is outside \
                 the space for volumes (bytes {first} to {end})",
                v.number, v.name, v.size_bytes, v.offset_bytes
            ));
        }
    }
    let mut by_start: Vec<&Volume> = vols.iter().collect();
    by_start.sort_by_key(|v| v.offset_bytes);
    for w in by_start.windows(2) {
        if w[0].offset_bytes + w[0].size_bytes > w[1].offset_bytes {
            return Err(format!(
                "the partition table is not usable: volumes {} ({:?}) and {} ({:?}) overlap",
                w[0].number, w[0].name, w[1].number, w[1].name
            ));
        }
    }
    Ok(())
}

/// How a volume is named: by its name, or by its number (`/dev/md0p<N>` to the kernel).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(untagged)]
pub enum VolumeRef {
    Number(u32),
    Name(String),
}

impl std::fmt::Display for VolumeRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VolumeRef::Number(n) => write!(f, "volume {n}"),
            VolumeRef::Name(n) => write!(f, "volume {n:?}"),
        }
    }
}

impl VolumeRef {
    /// A name as typed: all digits is a number.
    pub fn parse(s: &str) -> VolumeRef {
        match s.parse::<u32>() {
            Ok(n) if !s.starts_with('+') => VolumeRef::Number(n),
            _ => VolumeRef::Name(s.to_string()),
        }
    }
}

/// The volume `r` names among `vols` (the array's, `None` when it has no table).
pub fn find(vols: Option<&[Volume]>, r: &VolumeRef, array: &str) -> Result<Volume, String> {
    let Some(vols) = vols else {
        return Err(format!(
            "{array} has no volumes (no partition table), so no {r}"
        ));
    };
    vols.iter()
        .find(|v| match r {
            VolumeRef::Number(n) => v.number == *n,
            VolumeRef::Name(n) => v.name == *n,
        })
        .cloned()
        .ok_or_else(|| {
            let names: Vec<String> = vols
                .iter()
                .map(|v| format!("{} {:?}", v.number, v.name))
                .collect();
            format!(
                "{array} has no {r} (it has: {})",
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            )
        })
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
    let vol = find(Some(&vols), &VolumeRef::Name(name.to_string()), "the array")?;
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

/// Gives the volume named `name` a new size: it keeps its start, and grows only into free
/// space right after it. Shrinking cuts off the data past the new end, so it must be asked
/// for (`shrink`). The edges to write back, and the volume as it is now.
pub fn resize(
    edges: Edges,
    name: &str,
    size: u64,
    shrink: bool,
) -> Result<(Edges, Volume), String> {
    if size == 0 || !size.is_multiple_of(SECTOR) {
        return Err(format!(
            "volume size {size}: a multiple of 512 bytes, above zero"
        ));
    }
    let vols = list(edges.clone())?;
    let vol = find(
        vols.as_deref(),
        &VolumeRef::Name(name.to_string()),
        "the array",
    )?;
    if size < vol.size_bytes && !shrink {
        return Err(format!(
            "volume {name:?} has {} bytes: shrinking it to {size} drops the data past the new \
             end (say --shrink to do that)",
            vol.size_bytes
        ));
    }
    let mut disk = config(true)
        .open_from_device(edges)
        .map_err(|e| format!("the partition table cannot be read: {e}"))?;
    let end = vol.offset_bytes + size;
    let h = disk.header();
    let limit = vols
        .iter()
        .flatten()
        .filter(|v| v.offset_bytes > vol.offset_bytes)
        .map(|v| v.offset_bytes)
        .min()
        .unwrap_or((h.last_usable + 1) * SECTOR);
    if end > limit {
        return Err(format!(
            "volume {name:?} can grow to {} bytes at most: the space after it ends at byte {limit}",
            limit - vol.offset_bytes
        ));
    }
    let mut parts = disk.take_partitions();
    let p = parts
        .get_mut(&vol.number)
        .ok_or("the volume is not in the table")?;
    p.last_lba = end / SECTOR - 1;
    disk.update_partitions(parts)
        .map_err(|e| format!("changing the partition table: {e}"))?;
    let now = volumes_of(disk.partitions())
        .into_iter()
        .find(|v| v.number == vol.number)
        .ok_or("the volume is not in the table")?;
    let edges = disk
        .write()
        .map_err(|e| format!("writing the partition table: {e}"))?;
    Ok((edges, now))
}

/// A change to a table, as `raidd volume` asks for it offline or through the daemon.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    Create {
        name: String,
        size: u64,
    },
    Resize {
        name: String,
        size: u64,
        shrink: bool,
    },
    Delete {
        name: String,
    },
}

impl Change {
    /// Applies the change: the edges to write back, and the volume it acted on.
    pub fn apply(&self, edges: Edges) -> Result<(Edges, Volume), String> {
        match self {
            Change::Create { name, size } => create(edges, name, *size),
            Change::Resize { name, size, shrink } => resize(edges, name, *size, *shrink),
            Change::Delete { name } => delete(edges, name),
        }
    }

    /// What the change did, as a word.
    pub fn done(&self) -> &'static str {
        match self {
            Change::Create { .. } => "created",
            Change::Resize { .. } => "resized",
            Change::Delete { .. } => "deleted",
        }
    }

    /// The volume a resize or delete acts on (a create's is new).
    pub fn existing(&self) -> Option<&str> {
        match self {
            Change::Create { .. } => None,
            Change::Resize { name, .. } | Change::Delete { name } => Some(name),
        }
    }
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
    fn volumes_grow_into_the_space_after_them_and_shrink_only_when_asked() {
        let size = 64 << 20;
        let (e, a) = create(blank(size), "a", 4 << 20).unwrap();
        let (e, b) = create(e, "b", 4 << 20).unwrap();
        let (e, _) = delete(e, "a").unwrap();
        // b is alone now, with free space on both sides.
        let (e, b2) = resize(e, "b", 8 << 20, false).unwrap();
        assert_eq!(
            (b2.offset_bytes, b2.size_bytes, &b2.guid),
            (b.offset_bytes, 8 << 20, &b.guid)
        );
        // Up to the backup table: its header and 32 sectors of entries end the array.
        let room = size - 33 * 512 - b.offset_bytes;
        assert_eq!(
            resize(e.clone(), "b", room, false).unwrap().1.size_bytes,
            room
        );
        let err = resize(e.clone(), "b", room + 512, false).unwrap_err();
        assert!(err.contains(&format!("can grow to {room} bytes")), "{err}");
        assert!(resize(e.clone(), "b", 2 << 20, false)
            .unwrap_err()
            .contains("--shrink"));
        let (e, b3) = resize(e, "b", 2 << 20, true).unwrap();
        assert_eq!(b3.size_bytes, 2 << 20);
        // A neighbour bounds the growth.
        let (e, c) = create(e, "c", 4 << 20).unwrap();
        assert_eq!(c.offset_bytes, a.offset_bytes, "the first free space");
        let (e, d) = create(e, "d", 4 << 20).unwrap();
        assert_eq!(d.offset_bytes, b3.offset_bytes + b3.size_bytes);
        let err = resize(e.clone(), "b", (2 << 20) + 512, false).unwrap_err();
        assert!(err.contains("2097152 bytes at most"), "{err}");
        assert!(resize(e.clone(), "nope", 1 << 20, false)
            .unwrap_err()
            .contains("no volume \"nope\""));
        assert!(resize(e, "b", 1000, false).is_err());
    }

    #[test]
    fn volumes_are_found_by_name_or_number() {
        let (e, _) = create(blank(64 << 20), "data", 4 << 20).unwrap();
        let (e, _) = create(e, "7", 4 << 20).unwrap();
        let vols = list(e).unwrap().unwrap();
        assert_eq!(VolumeRef::parse("2"), VolumeRef::Number(2));
        assert_eq!(VolumeRef::parse("data"), VolumeRef::Name("data".into()));
        let by = |r: VolumeRef| find(Some(&vols), &r, "md0").map(|v| v.name);
        assert_eq!(by(VolumeRef::Number(1)).unwrap(), "data");
        assert_eq!(by(VolumeRef::Number(2)).unwrap(), "7");
        assert_eq!(by(VolumeRef::Name("7".into())).unwrap(), "7");
        let err = by(VolumeRef::Name("x".into())).unwrap_err();
        assert!(
            err.contains("md0 has no volume \"x\"") && err.contains("1 \"data\""),
            "{err}"
        );
        assert!(find(None, &VolumeRef::Number(1), "md0")
            .unwrap_err()
            .contains("no partition table"));
    }

    fn crc32(bytes: &[u8]) -> u32 {
        let mut c = !0u32;
        for &b in bytes {
            c ^= u32::from(b);
            for _ in 0..8 {
                c = if c & 1 != 0 {
                    (c >> 1) ^ 0xedb8_8320
                } else {
                    c >> 1
                };
            }
        }
        !c
    }

    /// Sets entry `i`'s sectors in the primary table, its checksums made right again (what
    /// a tool writing a bad table would leave).
    fn patch_entry(e: Edges, i: usize, first: u64, last: u64) -> Edges {
        let size = e.size;
        let (mut head, tail) = e.into_parts();
        let entries = 1024;
        let at = entries + i * 128;
        head[at + 32..at + 40].copy_from_slice(&first.to_le_bytes());
        head[at + 40..at + 48].copy_from_slice(&last.to_le_bytes());
        let crc = crc32(&head[entries..entries + 128 * 128]);
        head[512 + 88..512 + 92].copy_from_slice(&crc.to_le_bytes());
        head[512 + 16..512 + 20].fill(0);
        let crc = crc32(&head[512..512 + 92]);
        head[512 + 16..512 + 20].copy_from_slice(&crc.to_le_bytes());
        Edges::new(size, head, tail).unwrap()
    }

    #[test]
    fn tables_with_overlapping_or_outside_volumes_are_refused_and_left_alone() {
        let size = 64 << 20;
        let (e, _) = create(blank(size), "a", 4 << 20).unwrap();
        let (e, b) = create(e, "b", 4 << 20).unwrap();
        let b_first = b.offset_bytes / 512;
        let b_last = b_first + b.size_bytes / 512 - 1;
        let overlap = patch_entry(e.clone(), 0, 2048, b_first + 8);
        let outside = patch_entry(e.clone(), 1, b_first, size / 512 - 1);
        let before_table = patch_entry(e.clone(), 0, 10, 4000);
        for (bad, what) in [
            (overlap, "overlap"),
            (outside, "outside"),
            (before_table, "outside"),
        ] {
            let err = list(bad.clone()).unwrap_err();
            assert!(err.contains(what) && err.contains("not usable"), "{err}");
            assert!(create(bad.clone(), "c", 1 << 20).is_err());
            assert!(delete(bad.clone(), "a").is_err());
            assert!(resize(bad, "a", 1 << 20, true).is_err());
        }
        // The unpatched table still reads: the checks see the entries, not the bytes.
        assert_eq!(
            list(patch_entry(e, 1, b_first, b_last))
                .unwrap()
                .unwrap()
                .len(),
            2
        );
    }

    #[test]
    fn check_table_finds_every_overlap_and_overrun() {
        let v = |number: u32, off: u64, size: u64| Volume {
            number,
            name: format!("v{number}"),
            offset_bytes: off,
            size_bytes: size,
            type_guid: String::new(),
            guid: String::new(),
        };
        assert!(check_table(&[v(1, 100, 50), v(2, 150, 50)], 100, 200).is_ok());
        assert!(check_table(&[v(2, 150, 50), v(1, 100, 51)], 100, 200)
            .unwrap_err()
            .contains("overlap"));
        assert!(check_table(&[v(1, 99, 10)], 100, 200).is_err());
        assert!(check_table(&[v(1, 190, 11)], 100, 200).is_err());
        assert!(check_table(&[v(1, 150, 0)], 100, 200).is_err());
        assert!(check_table(&[v(1, u64::MAX, 2)], 100, 200).is_err());
        assert!(check_table(&[], 100, 200).is_ok());
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
