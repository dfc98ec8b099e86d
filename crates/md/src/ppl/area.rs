//! Where a member's PPL lives and how much it holds: the superblock's `ppl.offset` and
//! `ppl.size` (sectors, the offset signed and from the superblock; a union with
//! `bitmap_offset`), checked and rounded as md's `ppl_validate_rdev` does.

use super::header::{PplError, HEADER_SECTORS, HEADER_SIZE, SPACE_SIZE};
use crate::{feature, Superblock};

/// One member's PPL area, in sectors from its superblock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Area {
    pub offset: i16,
    pub size: u16,
}

/// md works in 4 KiB stripe blocks: an area's partial parity space is whole blocks.
const BLOCK_SECTORS: u16 = 8;

impl Area {
    /// What mdadm gives an array created with `--consistency-policy=ppl` on metadata 1.2:
    /// 1 MiB (room for several units: md then sets MULTIPLE_PPLS) right after the 4 KiB of
    /// the superblock.
    pub const MDADM: Area = Area {
        offset: 8,
        size: 2048,
    };

    /// The area a superblock with PPL or MULTIPLE_PPLS names; `None` without either.
    pub fn of(sb: &Superblock) -> Option<Area> {
        if sb.feature_map & (feature::PPL | feature::MULTIPLE_PPLS) == 0 {
            return None;
        }
        let raw = sb.bitmap_offset as u32;
        Some(Area {
            offset: (raw & 0xffff) as u16 as i16,
            size: (raw >> 16) as u16,
        })
    }

    /// Writes the area into `sb` with the feature bit md sets for it (MULTIPLE_PPLS when
    /// it holds more than one unit), clearing the other.
    pub fn store(self, sb: &mut Superblock) {
        sb.bitmap_offset = ((u32::from(self.size) << 16) | u32::from(self.offset as u16)) as i32;
        sb.feature_map &= !(feature::PPL | feature::MULTIPLE_PPLS);
        sb.feature_map |= if self.multiple() {
            feature::MULTIPLE_PPLS
        } else {
            feature::PPL
        };
    }

    /// md's checks on a member's area, and the size it then uses (the partial parity
    /// space rounded down to whole 4 KiB blocks). `sb_sector`: where the superblock is;
    /// `sb_bytes`: its size; the data area is `data_offset` and `data_sectors` long.
    pub fn validate(
        self,
        sb_sector: u64,
        sb_bytes: usize,
        data_offset: u64,
        data_sectors: u64,
    ) -> Result<Area, PplError> {
        let space = i32::from(self.size) - HEADER_SECTORS as i32;
        let space = space - space.rem_euclid(i32::from(BLOCK_SECTORS));
        if space <= 0 {
            return Err(PplError::AreaTooSmall(self.size));
        }
        let size = space + HEADER_SECTORS as i32;
        let start = sb_sector as i64 + i64::from(self.offset);
        let end = start + i64::from(size);
        let (data, data_end) = (data_offset as i64, (data_offset + data_sectors) as i64);
        if start < 0 || (start < data && end > data) || (start >= data && data_end > start) {
            return Err(PplError::AreaOverlapsData {
                start: start.max(0) as u64,
                end: end.max(0) as u64,
            });
        }
        let sb_sectors = sb_bytes.div_ceil(512) as i32;
        let offset = i32::from(self.offset);
        if (offset > 0 && offset < sb_sectors) || (offset <= 0 && offset + size > 0) {
            return Err(PplError::AreaOverlapsSuperblock {
                offset: self.offset,
                size: self.size,
            });
        }
        Ok(Area {
            offset: self.offset,
            size: size as u16,
        })
    }

    /// Whether the area holds a sequence of units (md's MULTIPLE_PPLS): room for two of
    /// the largest.
    pub fn multiple(self) -> bool {
        u64::from(self.size) * 512 >= 2 * (u64::from(SPACE_SIZE) + HEADER_SIZE as u64)
    }

    /// Bytes of partial parity one unit may hold.
    pub fn entry_space(self) -> u32 {
        if self.multiple() {
            SPACE_SIZE
        } else {
            u32::from(self.size) * 512 - HEADER_SIZE as u32
        }
    }

    /// The most partial parity one unit can hold: all of the area after its header. md
    /// never writes more than [`Area::entry_space`] in a unit, but reads any unit that
    /// fits (its scan steps by each unit's own size).
    pub fn unit_space(self) -> usize {
        (u64::from(self.size) * 512).saturating_sub(HEADER_SIZE as u64) as usize
    }

    /// The area's first sector on the member.
    pub fn sector(self, sb_sector: u64) -> u64 {
        sb_sector.saturating_add_signed(i64::from(self.offset))
    }

    pub fn bytes(self) -> u64 {
        u64::from(self.size) * 512
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mdadm_s_area_holds_several_units() {
        let a = Area::MDADM;
        assert!(a.multiple());
        assert_eq!(a.entry_space(), 128 * 1024);
        // Superblock at 8, 1 KiB; data at 2048 (mdadm's 1 MiB) or later.
        assert_eq!(a.validate(8, 1024, 2048 + 16, 1 << 20), Ok(a));
        assert_eq!(a.sector(8), 16);
        // The smallest multiple area: two units of 128 KiB and their headers.
        let edge = Area {
            offset: 8,
            size: 528,
        };
        assert!(edge.multiple() && !Area { size: 527, ..edge }.multiple());
        let single = Area {
            offset: 8,
            size: 264,
        };
        assert!(!single.multiple());
        assert_eq!(single.entry_space(), (264 - 8) * 512);
    }

    #[test]
    fn the_partial_parity_space_is_rounded_to_blocks() {
        let a = Area {
            offset: 8,
            size: 8 + 13,
        };
        assert_eq!(a.validate(8, 512, 4096, 100).map(|a| a.size), Ok(16));
        for size in [0, 7, 8, 15] {
            assert_eq!(
                Area { offset: 8, size }.validate(8, 512, 4096, 100),
                Err(PplError::AreaTooSmall(size))
            );
        }
    }

    #[test]
    fn an_area_over_the_data_or_the_superblock_is_refused() {
        let a = Area::MDADM;
        assert!(matches!(
            a.validate(8, 1024, 2000, 1 << 20),
            Err(PplError::AreaOverlapsData { .. })
        ));
        // After the data: the data must end before it.
        let after = Area {
            offset: 100,
            size: 16,
        };
        assert!(after.validate(8, 512, 0, 100).is_ok());
        assert!(matches!(
            after.validate(8, 512, 0, 109),
            Err(PplError::AreaOverlapsData { .. })
        ));
        let on_sb = Area {
            offset: 1,
            size: 16,
        };
        assert!(matches!(
            on_sb.validate(8, 1024, 4096, 10),
            Err(PplError::AreaOverlapsSuperblock { .. })
        ));
        let before = Area {
            offset: -16,
            size: 16,
        };
        assert!(before.validate(1 << 20, 512, 0, 1 << 19).is_ok());
        assert!(matches!(
            Area {
                offset: -8,
                size: 16
            }
            .validate(1 << 20, 512, 0, 1 << 19),
            Err(PplError::AreaOverlapsSuperblock { .. })
        ));
        assert!(matches!(
            Area {
                offset: -16,
                size: 16
            }
            .validate(8, 512, 4096, 10),
            Err(PplError::AreaOverlapsData { .. })
        ));
    }
}
