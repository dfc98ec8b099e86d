//! RAID4/5/6 stripe maps: where data, P and Q of one stripe live.

use smallvec::SmallVec;

use crate::geometry::ParityGeometry;

/// One stripe of a parity array: a chunk from every member at member sector
/// `stripe * chunk_sectors`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StripeMap {
    /// Member holding P.
    pub p: usize,
    /// Member holding Q (RAID6 only).
    pub q: Option<usize>,
    /// `data[dd]` = member holding data chunk `dd` (dd = position in array order within the
    /// stripe).
    pub data: SmallVec<[usize; 16]>,
    /// `q_coef[dd]` = the exponent i such that data chunk dd contributes g^i * D to Q, in md's
    /// order (md walks the disks from just after Q; for left-symmetric this equals dd).
    /// Empty for RAID4/5.
    pub q_coef: SmallVec<[u8; 16]>,
}

/// What one member is in one stripe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StripeRole {
    Data(usize),
    P,
    Q,
}

impl StripeMap {
    pub fn role_of(&self, member: usize) -> StripeRole {
        todo!()
    }
}

impl ParityGeometry {
    /// Data chunks per stripe (members - 1 for RAID4/5, members - 2 for RAID6).
    pub fn data_members(&self) -> usize {
        todo!()
    }
    /// Number of stripes (dev_sectors / chunk_sectors).
    pub fn stripes(&self) -> u64 {
        todo!()
    }
    /// Array sectors per stripe (data_members * chunk_sectors).
    pub fn stripe_data_sectors(&self) -> u64 {
        todo!()
    }
    /// `(stripe, dd, offset_in_chunk)` of an array sector.
    pub fn locate(&self, array_sector: u64) -> (u64, usize, u64) {
        todo!()
    }
    /// Inverse of [`ParityGeometry::locate`].
    pub fn array_sector(&self, stripe: u64, dd: usize, offset: u64) -> u64 {
        todo!()
    }
    /// The member map of `stripe` (md's `raid5_compute_sector` for every dd at once).
    pub fn stripe_map(&self, stripe: u64) -> StripeMap {
        todo!()
    }
    /// Member sector (relative to the data area) of `offset` within `stripe`'s chunks.
    pub fn member_sector(&self, stripe: u64, offset: u64) -> u64 {
        todo!()
    }
}
