//! RAID levels and md layout numbers.

use std::fmt;

/// A RAID level as md knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Level {
    /// Concatenation ("spanning"); md level -1.
    Linear,
    /// Striping without redundancy; md level 0.
    Raid0,
    /// n-way mirror; md level 1.
    Raid1,
    /// Dedicated parity disk; md level 4 (layout is always parity-last).
    Raid4,
    /// Rotating parity; md level 5.
    Raid5,
    /// P+Q over GF(2^8); md level 6.
    Raid6,
    /// Striped mirrors (near/far/offset); md level 10.
    Raid10,
}

impl Level {
    /// The number md stores in the superblock `level` field.
    pub fn md_number(self) -> i32 {
        todo!()
    }
    /// Inverse of [`Level::md_number`]; `None` for levels raidd does not implement
    /// (multipath -4, faulty -5, container -2, ...).
    pub fn from_md_number(n: i32) -> Option<Level> {
        todo!()
    }
    /// Parse a user-supplied name the way mdadm does: `linear`, `0`/`raid0`/`stripe`,
    /// `1`/`raid1`/`mirror`, `4`/`raid4`, `5`/`raid5`, `6`/`raid6`, `10`/`raid10`
    /// (case-insensitive).
    pub fn parse(s: &str) -> Option<Level> {
        todo!()
    }
    /// The fewest members md accepts for this level (linear 1, raid0 1, raid1 1, raid4/5 2,
    /// raid6 4, raid10 2).
    pub fn min_members(self) -> usize {
        todo!()
    }
    /// Whether the level keeps parity (RAID4/5/6).
    pub fn has_parity(self) -> bool {
        todo!()
    }
}

impl fmt::Display for Level {
    /// md's names: `linear`, `raid0`, `raid1`, `raid4`, `raid5`, `raid6`, `raid10`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        todo!()
    }
}

/// RAID4/5/6 parity placement (md's `ALGORITHM_*`).
///
/// RAID5 uses the first six; RAID6 uses all of them (the `*6` variants are "RAID5 layout with
/// Q on the last device"). RAID4 is always [`ParityLayout::ParityLast`]. md's DDF layouts
/// (8, 9, 10) are not supported and are refused with a clear error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ParityLayout {
    LeftAsymmetric,
    RightAsymmetric,
    LeftSymmetric,
    RightSymmetric,
    ParityFirst,
    ParityLast,
    LeftAsymmetric6,
    RightAsymmetric6,
    LeftSymmetric6,
    RightSymmetric6,
    ParityFirst6,
}

impl ParityLayout {
    /// md's number: 0..=5 and 16..=20.
    pub fn md_number(self) -> u32 {
        todo!()
    }
    pub fn from_md_number(n: u32) -> Option<ParityLayout> {
        todo!()
    }
    /// mdadm's names: `left-asymmetric` (`la`), `right-asymmetric` (`ra`), `left-symmetric`
    /// (`ls`), `right-symmetric` (`rs`), `parity-first`, `parity-last`, and the `-6` forms.
    pub fn parse(s: &str) -> Option<ParityLayout> {
        todo!()
    }
    /// Whether the layout is valid for `level` (RAID4: only ParityLast; RAID5: the first six;
    /// RAID6: all).
    pub fn valid_for(self, level: Level) -> bool {
        todo!()
    }
}

impl fmt::Display for ParityLayout {
    /// mdadm's long names (`left-symmetric`, `left-symmetric-6`, ...).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        todo!()
    }
}

/// RAID10 layout word: near copies (bits 0-7), far copies (bits 8-15), offset (bit 16),
/// far-set mode (bits 17+, md accepts 0 and 2; 1 was a buggy layout and is refused).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Raid10Layout {
    pub near: u8,
    pub far: u8,
    pub offset: bool,
    /// 0 = original (far set = all disks), 2 = far sets of near*far disks.
    pub far_set_mode: u8,
}

impl Raid10Layout {
    pub fn md_number(self) -> u32 {
        todo!()
    }
    /// Decodes and validates (near >= 1, far >= 1, mode 0 or 2).
    pub fn from_md_number(n: u32) -> Option<Raid10Layout> {
        todo!()
    }
    /// mdadm's names: `n2`, `f2`, `o2`, `n3`, ... (near2 is the default).
    pub fn parse(s: &str) -> Option<Raid10Layout> {
        todo!()
    }
    /// Copies of every chunk: near * far.
    pub fn copies(self) -> usize {
        todo!()
    }
}

impl fmt::Display for Raid10Layout {
    /// Like mdadm --detail: `near=2`, `far=2`, `offset=2`, `near=2,far=2`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        todo!()
    }
}

/// RAID0 multi-zone layout (md's `RAID0_ORIG_LAYOUT` = 1, `RAID0_ALT_MULTIZONE_LAYOUT` = 2).
/// Only matters when members differ in size (more than one zone).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Raid0Layout {
    Original,
    Alternate,
}
