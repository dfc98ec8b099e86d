//! md RAID0: striping over strip zones (md's `create_strip_zones` / `map_sector`).
//!
//! Members of unequal size form zones: zone 0 stripes over every member up to the smallest
//! member's size, zone 1 over the members that are larger, from that size up to the next
//! smallest, and so on. Within a zone with `nb` members, zone chunk `z` lives in member chunk
//! `z / nb`; which member holds it depends on the layout: md's original layout picks
//! `(array chunk) % nb`, the alternate layout (kernels 3.14 to 5.3) `(zone chunk) % nb`.

use crate::level::{Level, Raid0Layout};
use crate::limits::{check_chunk, check_member_size, check_members, chunk_span, LayoutError};
use crate::map::{push_merged, Loc, Piece, Pieces, Reverse};

/// md RAID0 with strip zones for unequal members.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Raid0Geometry {
    pub chunk_sectors: u32,
    /// Usable sectors per member, rounded down to a chunk multiple (md's `rdev->sectors`).
    pub member_sectors: Vec<u64>,
    pub layout: Raid0Layout,
    /// md's strip zones, in array order.
    pub(crate) zones: Vec<Zone>,
}

/// One md strip zone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Zone {
    /// Array sectors `[array_start, array_end)` live in this zone.
    array_start: u64,
    array_end: u64,
    /// Member sectors `[dev_start, dev_end)` of every member of the zone belong to it.
    dev_start: u64,
    dev_end: u64,
    /// The zone's members, in role order (md's devlist order).
    members: Vec<usize>,
}

impl Zone {
    fn width(&self) -> u64 {
        self.members.len() as u64
    }
}

/// md's zones for members of the given (chunk-rounded) sizes.
fn strip_zones(member_sectors: &[u64]) -> Vec<Zone> {
    let mut zones: Vec<Zone> = Vec::new();
    let mut dev_start = 0u64;
    let mut array_start = 0u64;
    loop {
        let members: Vec<usize> = (0..member_sectors.len())
            .filter(|&m| member_sectors[m] > dev_start)
            .collect();
        let Some(dev_end) = members.iter().map(|&m| member_sectors[m]).min() else {
            break;
        };
        let array_end = array_start + (dev_end - dev_start) * members.len() as u64;
        zones.push(Zone {
            array_start,
            array_end,
            dev_start,
            dev_end,
            members,
        });
        dev_start = dev_end;
        array_start = array_end;
    }
    debug_assert!(zones.len() <= member_sectors.len());
    zones
}

impl Raid0Geometry {
    pub(crate) fn new(
        member_sectors: &[u64],
        chunk_sectors: u32,
        layout: Raid0Layout,
    ) -> Result<Raid0Geometry, LayoutError> {
        check_members(Level::Raid0, member_sectors.len())?;
        check_chunk(chunk_sectors)?;
        let chunk = u64::from(chunk_sectors);
        let mut rounded = Vec::with_capacity(member_sectors.len());
        for (member, &sectors) in member_sectors.iter().enumerate() {
            check_member_size(member, sectors)?;
            let usable = sectors - sectors % chunk;
            if usable == 0 {
                return Err(LayoutError::MemberTooSmall { member, sectors });
            }
            rounded.push(usable);
        }
        let zones = strip_zones(&rounded);
        debug_assert_eq!(
            zones.last().map(|z| z.array_end),
            Some(rounded.iter().sum::<u64>())
        );
        Ok(Raid0Geometry {
            chunk_sectors,
            member_sectors: rounded,
            layout,
            zones,
        })
    }

    pub(crate) fn array_sectors(&self) -> u64 {
        self.zones.last().map_or(0, |zone| zone.array_end)
    }

    fn chunk_shift(&self) -> u32 {
        self.chunk_sectors.trailing_zeros()
    }

    /// Index of the zone holding array sector `sector`.
    fn zone_of(&self, sector: u64) -> usize {
        let index = self.zones.partition_point(|zone| zone.array_end <= sector);
        debug_assert!(
            index < self.zones.len(),
            "sector {sector} is beyond the array"
        );
        index
    }

    /// Member location of array sector `sector`, which lies in zone `zone`.
    fn locate(&self, zone: &Zone, sector: u64) -> Loc {
        debug_assert!(zone.array_start <= sector && sector < zone.array_end);
        let shift = self.chunk_shift();
        let in_zone = sector - zone.array_start;
        let offset = sector & (u64::from(self.chunk_sectors) - 1);
        let member_chunk = (in_zone >> shift) / zone.width();
        // md picks the member from the chunk number of the original array sector (original
        // layout) or of the zone-relative sector (alternate layout).
        let selector = match self.layout {
            Raid0Layout::Original => sector >> shift,
            Raid0Layout::Alternate => in_zone >> shift,
        };
        let index = (selector % zone.width()) as usize;
        let loc = Loc {
            member: zone.members[index],
            sector: zone.dev_start + (member_chunk << shift) + offset,
        };
        debug_assert!(loc.sector < zone.dev_end);
        loc
    }

    pub(crate) fn pieces(&self, sector: u64, count: u64, pieces: &mut Pieces) {
        let chunk = u64::from(self.chunk_sectors);
        let end = sector + count;
        pieces.reserve(chunk_span(sector, count, chunk));
        let mut zone_index = self.zone_of(sector);
        let mut at = sector;
        while at < end {
            let mut zone = &self.zones[zone_index];
            if at >= zone.array_end {
                zone_index += 1;
                zone = &self.zones[zone_index];
            }
            // Zones start on chunk boundaries, so a chunk never straddles two zones.
            let len = (chunk - at % chunk).min(end - at);
            push_merged(pieces, Piece::single(at, len, self.locate(zone, at)));
            at += len;
        }
    }

    pub(crate) fn reverse(&self, member: usize, member_sector: u64) -> Reverse {
        if member_sector >= self.member_sectors[member] {
            return Reverse::Unused;
        }
        // The zone whose member range holds the sector; the member belongs to it because
        // the member is larger than member_sector >= dev_start.
        let zone_index = self
            .zones
            .partition_point(|zone| zone.dev_start <= member_sector)
            - 1;
        let zone = &self.zones[zone_index];
        let found = zone.members.binary_search(&member);
        debug_assert!(
            found.is_ok(),
            "member {member} missing from zone {zone_index}"
        );
        let Ok(index) = found else {
            return Reverse::Unused;
        };
        let shift = self.chunk_shift();
        let width = zone.width();
        let in_zone = member_sector - zone.dev_start;
        let offset = in_zone & (u64::from(self.chunk_sectors) - 1);
        let row_first = (in_zone >> shift) * width;
        // Which zone chunk of this row md sends to the member at `index`.
        let column = match self.layout {
            Raid0Layout::Alternate => index as u64,
            Raid0Layout::Original => {
                let first_selector = (zone.array_start >> shift) + row_first;
                (index as u64 + width - first_selector % width) % width
            }
        };
        let array_sector = zone.array_start + ((row_first + column) << shift) + offset;
        debug_assert!(array_sector < zone.array_end);
        Reverse::Data {
            array_sector,
            copy: 0,
        }
    }
}
