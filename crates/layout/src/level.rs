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

/// Every level, for tables and tests.
const LEVELS: [Level; 7] = [
    Level::Linear,
    Level::Raid0,
    Level::Raid1,
    Level::Raid4,
    Level::Raid5,
    Level::Raid6,
    Level::Raid10,
];

impl Level {
    /// The number md stores in the superblock `level` field.
    pub fn md_number(self) -> i32 {
        match self {
            Level::Linear => -1,
            Level::Raid0 => 0,
            Level::Raid1 => 1,
            Level::Raid4 => 4,
            Level::Raid5 => 5,
            Level::Raid6 => 6,
            Level::Raid10 => 10,
        }
    }
    /// Inverse of [`Level::md_number`]; `None` for levels raidd does not implement
    /// (multipath -4, faulty -5, container -2, ...).
    pub fn from_md_number(n: i32) -> Option<Level> {
        LEVELS.into_iter().find(|level| level.md_number() == n)
    }
    /// Parse a user-supplied name the way mdadm does: `linear`, `0`/`raid0`/`stripe`,
    /// `1`/`raid1`/`mirror`, `4`/`raid4`, `5`/`raid5`, `6`/`raid6`, `10`/`raid10`
    /// (case-insensitive).
    pub fn parse(s: &str) -> Option<Level> {
        let level = match s.to_ascii_lowercase().as_str() {
            "linear" => Level::Linear,
            "0" | "raid0" | "stripe" => Level::Raid0,
            "1" | "raid1" | "mirror" => Level::Raid1,
            "4" | "raid4" => Level::Raid4,
            "5" | "raid5" => Level::Raid5,
            "6" | "raid6" => Level::Raid6,
            "10" | "raid10" => Level::Raid10,
            _ => return None,
        };
        Some(level)
    }
    /// The fewest members md accepts for this level (linear 1, raid0 1, raid1 1, raid4/5 2,
    /// raid6 4, raid10 2).
    pub fn min_members(self) -> usize {
        match self {
            Level::Linear | Level::Raid0 | Level::Raid1 => 1,
            Level::Raid4 | Level::Raid5 | Level::Raid10 => 2,
            Level::Raid6 => 4,
        }
    }
    /// Whether the level keeps parity (RAID4/5/6).
    pub fn has_parity(self) -> bool {
        matches!(self, Level::Raid4 | Level::Raid5 | Level::Raid6)
    }
}

impl fmt::Display for Level {
    /// md's names: `linear`, `raid0`, `raid1`, `raid4`, `raid5`, `raid6`, `raid10`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Level::Linear => "linear",
            Level::Raid0 => "raid0",
            Level::Raid1 => "raid1",
            Level::Raid4 => "raid4",
            Level::Raid5 => "raid5",
            Level::Raid6 => "raid6",
            Level::Raid10 => "raid10",
        };
        f.write_str(name)
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

/// Every parity layout with its md number and mdadm's long name.
const PARITY_LAYOUTS: [(ParityLayout, u32, &str); 11] = [
    (ParityLayout::LeftAsymmetric, 0, "left-asymmetric"),
    (ParityLayout::RightAsymmetric, 1, "right-asymmetric"),
    (ParityLayout::LeftSymmetric, 2, "left-symmetric"),
    (ParityLayout::RightSymmetric, 3, "right-symmetric"),
    (ParityLayout::ParityFirst, 4, "parity-first"),
    (ParityLayout::ParityLast, 5, "parity-last"),
    (ParityLayout::LeftAsymmetric6, 16, "left-asymmetric-6"),
    (ParityLayout::RightAsymmetric6, 17, "right-asymmetric-6"),
    (ParityLayout::LeftSymmetric6, 18, "left-symmetric-6"),
    (ParityLayout::RightSymmetric6, 19, "right-symmetric-6"),
    (ParityLayout::ParityFirst6, 20, "parity-first-6"),
];

impl ParityLayout {
    /// Every layout, in md number order.
    pub const ALL: [ParityLayout; 11] = [
        ParityLayout::LeftAsymmetric,
        ParityLayout::RightAsymmetric,
        ParityLayout::LeftSymmetric,
        ParityLayout::RightSymmetric,
        ParityLayout::ParityFirst,
        ParityLayout::ParityLast,
        ParityLayout::LeftAsymmetric6,
        ParityLayout::RightAsymmetric6,
        ParityLayout::LeftSymmetric6,
        ParityLayout::RightSymmetric6,
        ParityLayout::ParityFirst6,
    ];

    fn entry(self) -> (ParityLayout, u32, &'static str) {
        let entry = PARITY_LAYOUTS[self as usize];
        debug_assert_eq!(entry.0, self, "PARITY_LAYOUTS is in declaration order");
        entry
    }

    /// md's number: 0..=5 and 16..=20.
    pub fn md_number(self) -> u32 {
        self.entry().1
    }
    pub fn from_md_number(n: u32) -> Option<ParityLayout> {
        PARITY_LAYOUTS
            .iter()
            .find(|entry| entry.1 == n)
            .map(|entry| entry.0)
    }
    /// mdadm's names: `left-asymmetric` (`la`), `right-asymmetric` (`ra`), `left-symmetric`
    /// (`ls`), `right-symmetric` (`rs`), `parity-first`, `parity-last`, and the `-6` forms.
    /// `default` is left-symmetric, as in mdadm. The DDF names are refused.
    pub fn parse(s: &str) -> Option<ParityLayout> {
        let lower = s.to_ascii_lowercase();
        let short = match lower.as_str() {
            "la" => Some(ParityLayout::LeftAsymmetric),
            "ra" => Some(ParityLayout::RightAsymmetric),
            "ls" | "default" => Some(ParityLayout::LeftSymmetric),
            "rs" => Some(ParityLayout::RightSymmetric),
            _ => None,
        };
        short.or_else(|| {
            PARITY_LAYOUTS
                .iter()
                .find(|entry| entry.2 == lower)
                .map(|entry| entry.0)
        })
    }
    /// Whether the layout is valid for `level` (RAID4: only ParityLast; RAID5: the first six;
    /// RAID6: all).
    pub fn valid_for(self, level: Level) -> bool {
        match level {
            Level::Raid4 => self == ParityLayout::ParityLast,
            Level::Raid5 => !self.is_q_last(),
            Level::Raid6 => true,
            _ => false,
        }
    }
    /// The RAID6-only "-6" forms: a RAID5 layout on all but the last member, Q on the last.
    pub(crate) fn is_q_last(self) -> bool {
        self.md_number() >= 16
    }
}

impl fmt::Display for ParityLayout {
    /// mdadm's long names (`left-symmetric`, `left-symmetric-6`, ...).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.entry().2)
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

/// mdadm refuses more copies than this in `n<N>`, `f<N>`, `o<N>`.
const RAID10_MAX_NAMED_COPIES: u8 = 200;

impl Raid10Layout {
    pub fn md_number(self) -> u32 {
        u32::from(self.near)
            | (u32::from(self.far) << 8)
            | (u32::from(self.offset) << 16)
            | (u32::from(self.far_set_mode) << 17)
    }
    /// Decodes and validates (near >= 1, far >= 1, mode 0 or 2).
    pub fn from_md_number(n: u32) -> Option<Raid10Layout> {
        let layout = Raid10Layout {
            near: (n & 0xff) as u8,
            far: ((n >> 8) & 0xff) as u8,
            offset: n & (1 << 16) != 0,
            far_set_mode: u8::try_from(n >> 17).ok()?,
        };
        layout.is_well_formed().then_some(layout)
    }
    /// mdadm's names: `n2`, `f2`, `o2`, `n3`, ... (near2 is the default).
    pub fn parse(s: &str) -> Option<Raid10Layout> {
        let lower = s.to_ascii_lowercase();
        let (kind, digits) = lower.split_at_checked(1)?;
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let copies: u8 = digits.parse().ok()?;
        if copies == 0 || copies > RAID10_MAX_NAMED_COPIES {
            return None;
        }
        let (near, far, offset) = match kind {
            "n" => (copies, 1, false),
            "f" => (1, copies, false),
            "o" => (1, copies, true),
            _ => return None,
        };
        Some(Raid10Layout {
            near,
            far,
            offset,
            far_set_mode: 0,
        })
    }
    /// Copies of every chunk: near * far.
    pub fn copies(self) -> usize {
        usize::from(self.near) * usize::from(self.far)
    }
    /// The field ranges md accepts (not yet checked against a member count).
    pub(crate) fn is_well_formed(self) -> bool {
        self.near >= 1 && self.far >= 1 && matches!(self.far_set_mode, 0 | 2)
    }
}

impl fmt::Display for Raid10Layout {
    /// Like mdadm --detail: `near=2`, `far=2`, `offset=2`, `near=2,far=2`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = Vec::with_capacity(2);
        if self.near != 1 {
            parts.push(format!("near={}", self.near));
        }
        if self.far != 1 {
            let word = if self.offset { "offset" } else { "far" };
            parts.push(format!("{word}={}", self.far));
        }
        if parts.is_empty() {
            // What mdadm prints for a layout with a single copy.
            return f.write_str("NO REDUNDANCY");
        }
        f.write_str(&parts.join(","))
    }
}

/// RAID0 multi-zone layout (md's `RAID0_ORIG_LAYOUT` = 1, `RAID0_ALT_MULTIZONE_LAYOUT` = 2).
/// Only matters when members differ in size (more than one zone).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Raid0Layout {
    Original,
    Alternate,
}

impl Raid0Layout {
    /// md's number in the superblock layout field (meaningful when the RAID0_LAYOUT feature
    /// bit is set).
    pub fn md_number(self) -> u32 {
        match self {
            Raid0Layout::Original => 1,
            Raid0Layout::Alternate => 2,
        }
    }
    pub fn from_md_number(n: u32) -> Option<Raid0Layout> {
        match n {
            1 => Some(Raid0Layout::Original),
            2 => Some(Raid0Layout::Alternate),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn level_numbers_round_trip() {
        for level in LEVELS {
            assert_eq!(Level::from_md_number(level.md_number()), Some(level));
            assert_eq!(Level::parse(&level.to_string()), Some(level));
            assert_eq!(
                Level::parse(&level.md_number().to_string()).is_some(),
                level != Level::Linear
            );
        }
        for n in [-5, -4, -3, -2, 2, 3, 7, 8, 9, 11, 100, i32::MIN, i32::MAX] {
            assert_eq!(Level::from_md_number(n), None, "level {n}");
        }
    }

    #[test]
    fn level_parse_accepts_mdadm_aliases() {
        assert_eq!(Level::parse("STRIPE"), Some(Level::Raid0));
        assert_eq!(Level::parse("Mirror"), Some(Level::Raid1));
        assert_eq!(Level::parse("RAID10"), Some(Level::Raid10));
        assert_eq!(Level::parse("0"), Some(Level::Raid0));
        for bad in [
            "",
            "raid",
            "raid7",
            "multipath",
            "mp",
            "faulty",
            "container",
            " 5",
            "5 ",
        ] {
            assert_eq!(Level::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn level_properties() {
        assert_eq!(Level::Raid6.min_members(), 4);
        assert_eq!(Level::Raid5.min_members(), 2);
        assert_eq!(Level::Raid10.min_members(), 2);
        let parity: Vec<Level> = LEVELS.into_iter().filter(|l| l.has_parity()).collect();
        assert_eq!(parity, [Level::Raid4, Level::Raid5, Level::Raid6]);
    }

    #[test]
    fn parity_layout_numbers_and_names_round_trip() {
        for layout in ParityLayout::ALL {
            assert_eq!(
                ParityLayout::from_md_number(layout.md_number()),
                Some(layout)
            );
            assert_eq!(ParityLayout::parse(&layout.to_string()), Some(layout));
            let upper = layout.to_string().to_ascii_uppercase();
            assert_eq!(ParityLayout::parse(&upper), Some(layout));
        }
        let numbers: Vec<u32> = ParityLayout::ALL.iter().map(|l| l.md_number()).collect();
        assert_eq!(numbers, [0, 1, 2, 3, 4, 5, 16, 17, 18, 19, 20]);
        // DDF layouts and gaps are refused.
        for n in [6, 7, 8, 9, 10, 11, 15, 21, 255, u32::MAX] {
            assert_eq!(ParityLayout::from_md_number(n), None, "layout {n}");
        }
    }

    #[test]
    fn parity_layout_parse_short_names() {
        assert_eq!(
            ParityLayout::parse("la"),
            Some(ParityLayout::LeftAsymmetric)
        );
        assert_eq!(
            ParityLayout::parse("ra"),
            Some(ParityLayout::RightAsymmetric)
        );
        assert_eq!(ParityLayout::parse("ls"), Some(ParityLayout::LeftSymmetric));
        assert_eq!(
            ParityLayout::parse("rs"),
            Some(ParityLayout::RightSymmetric)
        );
        assert_eq!(
            ParityLayout::parse("default"),
            Some(ParityLayout::LeftSymmetric)
        );
        for bad in [
            "",
            "ddf-zero-restart",
            "ddf-N-restart",
            "ddf-N-continue",
            "left",
            "ls6",
        ] {
            assert_eq!(ParityLayout::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn parity_layout_validity_per_level() {
        for layout in ParityLayout::ALL {
            assert!(layout.valid_for(Level::Raid6));
            assert_eq!(layout.valid_for(Level::Raid5), layout.md_number() <= 5);
            assert_eq!(
                layout.valid_for(Level::Raid4),
                layout == ParityLayout::ParityLast
            );
            for level in [Level::Linear, Level::Raid0, Level::Raid1, Level::Raid10] {
                assert!(!layout.valid_for(level));
            }
        }
    }

    #[test]
    fn raid10_layout_numbers_round_trip() {
        // mdadm's n2, f2, o2 and a far-set layout.
        assert_eq!(
            Raid10Layout::parse("n2").map(Raid10Layout::md_number),
            Some(0x102)
        );
        assert_eq!(
            Raid10Layout::parse("f2").map(Raid10Layout::md_number),
            Some(0x201)
        );
        assert_eq!(
            Raid10Layout::parse("o2").map(Raid10Layout::md_number),
            Some(0x10201)
        );
        assert_eq!(
            Raid10Layout::parse("N3").map(Raid10Layout::md_number),
            Some(0x103)
        );
        for near in [1u8, 2, 3, 255] {
            for far in [1u8, 2, 3, 255] {
                for offset in [false, true] {
                    for far_set_mode in [0u8, 2] {
                        let layout = Raid10Layout {
                            near,
                            far,
                            offset,
                            far_set_mode,
                        };
                        let n = layout.md_number();
                        assert_eq!(Raid10Layout::from_md_number(n), Some(layout), "{n:#x}");
                    }
                }
            }
        }
    }

    #[test]
    fn raid10_layout_invalid_numbers_and_names() {
        for n in [0x000, 0x100, 0x001, 0x20102, 0x60102, 0x80102, u32::MAX] {
            assert_eq!(Raid10Layout::from_md_number(n), None, "{n:#x}");
        }
        for bad in [
            "", "n", "n0", "x2", "n-1", "n201", "n2 ", "2", "nn2", "f+2", "o99999",
        ] {
            assert_eq!(Raid10Layout::parse(bad), None, "{bad:?}");
        }
        assert!(Raid10Layout::parse("n200").is_some());
    }

    #[test]
    fn raid10_layout_display_like_mdadm_detail() {
        let show = |s: &str| Raid10Layout::parse(s).map(|l| l.to_string());
        assert_eq!(show("n2").as_deref(), Some("near=2"));
        assert_eq!(show("f2").as_deref(), Some("far=2"));
        assert_eq!(show("o3").as_deref(), Some("offset=3"));
        let mixed = Raid10Layout {
            near: 2,
            far: 2,
            offset: false,
            far_set_mode: 0,
        };
        assert_eq!(mixed.to_string(), "near=2,far=2");
        assert_eq!(mixed.copies(), 4);
    }

    #[test]
    fn raid0_layout_numbers() {
        for layout in [Raid0Layout::Original, Raid0Layout::Alternate] {
            assert_eq!(
                Raid0Layout::from_md_number(layout.md_number()),
                Some(layout)
            );
        }
        assert_eq!(Raid0Layout::from_md_number(0), None);
        assert_eq!(Raid0Layout::from_md_number(3), None);
    }
}
