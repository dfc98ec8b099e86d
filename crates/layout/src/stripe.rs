//! RAID4/5/6 stripe maps: where data, P and Q of one stripe live.
//!
//! Every md parity layout (`raid5_compute_sector`) is described here by where P (and Q) sit
//! in a stripe plus one of two data orders: data in increasing member order skipping the
//! parity members (asymmetric, parity-first/last, RAID4), or data starting right after the
//! parity and wrapping round (symmetric).

use smallvec::SmallVec;

use crate::level::{Level, ParityLayout};
use crate::limits::{check_chunk, check_member_size, check_members, chunk_span, LayoutError};
use crate::map::{Loc, Piece, Pieces, Reverse};

/// RAID4/5/6.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParityGeometry {
    pub level: Level,
    pub members: usize,
    pub layout: ParityLayout,
    pub chunk_sectors: u32,
    /// Sectors used on each member: md's component size rounded down to a chunk multiple.
    pub dev_sectors: u64,
}

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
    /// The role of `member` in this stripe. Panics if `member` is not a member of the array
    /// (a caller bug).
    pub fn role_of(&self, member: usize) -> StripeRole {
        if member == self.p {
            return StripeRole::P;
        }
        if self.q == Some(member) {
            return StripeRole::Q;
        }
        let dd = self.data.iter().position(|&m| m == member);
        assert!(dd.is_some(), "member {member} is not in this stripe");
        dd.map_or(StripeRole::P, StripeRole::Data)
    }
}

/// How the data chunks of a stripe are spread over the members that do not hold parity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DataOrder {
    /// Increasing member order, skipping P and Q.
    Ascending,
    /// Data chunk dd on member `(start + dd) % modulus`.
    Rotating { start: usize, modulus: usize },
}

/// Where P, Q and the data of one stripe live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Placement {
    p: usize,
    q: Option<usize>,
    order: DataOrder,
}

impl Placement {
    /// md's placement for `stripe` of `level` with `layout` over `members` members.
    fn of(level: Level, layout: ParityLayout, members: usize, stripe: u64) -> Placement {
        use ParityLayout as L;
        let n = members;
        let raid6 = level == Level::Raid6;
        let fixed = |p: usize, q: Option<usize>| Placement {
            p,
            q,
            order: DataOrder::Ascending,
        };
        match layout {
            _ if level == Level::Raid4 => fixed(n - 1, None),
            L::ParityLast if raid6 => fixed(n - 2, Some(n - 1)),
            L::ParityLast => fixed(n - 1, None),
            L::ParityFirst if raid6 => fixed(0, Some(1)),
            L::ParityFirst => fixed(0, None),
            L::ParityFirst6 => fixed(0, Some(n - 1)),
            L::LeftAsymmetric | L::RightAsymmetric | L::LeftSymmetric | L::RightSymmetric => {
                // P rotates over all members; RAID6 puts Q right after P (wrapping).
                let p = rotating_parity(layout, n, stripe);
                let q = raid6.then_some((p + 1) % n);
                let after_parity = if raid6 { p + 2 } else { p + 1 };
                Placement {
                    p,
                    q,
                    order: data_order(layout, after_parity % n, n),
                }
            }
            L::LeftAsymmetric6 | L::RightAsymmetric6 | L::LeftSymmetric6 | L::RightSymmetric6 => {
                // A RAID5 layout over the first n-1 members, Q fixed on the last.
                let m = n - 1;
                let p = rotating_parity(layout, m, stripe);
                Placement {
                    p,
                    q: Some(n - 1),
                    order: data_order(layout, (p + 1) % m, m),
                }
            }
        }
    }

    fn is_parity(&self, member: usize) -> bool {
        member == self.p || self.q == Some(member)
    }

    /// The parity members as (lower, higher); a missing Q counts as past every member.
    fn parity_bounds(&self) -> (usize, usize) {
        let q = self.q.unwrap_or(usize::MAX);
        (self.p.min(q), self.p.max(q))
    }

    /// The member holding data chunk `dd`.
    fn data_member(&self, dd: usize) -> usize {
        match self.order {
            DataOrder::Ascending => {
                let (low, high) = self.parity_bounds();
                let mut member = dd;
                if member >= low {
                    member += 1;
                }
                if member >= high {
                    member += 1;
                }
                member
            }
            DataOrder::Rotating { start, modulus } => {
                debug_assert!(start < modulus && dd < modulus);
                wrap_once(start + dd, modulus)
            }
        }
    }

    /// The data chunk index held by `member`, or `None` for P and Q.
    fn data_index(&self, member: usize) -> Option<usize> {
        if self.is_parity(member) {
            return None;
        }
        match self.order {
            DataOrder::Ascending => {
                let (low, high) = self.parity_bounds();
                Some(member - usize::from(low < member) - usize::from(high < member))
            }
            DataOrder::Rotating { start, modulus } => {
                debug_assert!(member < modulus);
                Some((member + modulus - start) % modulus)
            }
        }
    }

    /// md's Q coefficient of the data on `member` (`raid6_idx_to_slot`, non-DDF): md walks
    /// the members from just after Q, wrapping, and numbers the data members in walk order.
    fn q_slot(&self, members: usize, member: usize) -> u8 {
        let Some(q) = self.q else {
            return 0;
        };
        let first = if q == members - 1 { 0 } else { q + 1 };
        // m and first are members, so m + members - first < 2 * members.
        let walk = |m: usize| wrap_once(m + members - first, members);
        // Q is always last in the walk, so only P can come before a data member.
        debug_assert_eq!(walk(q), members - 1);
        let slot = walk(member) - usize::from(walk(self.p) < walk(member));
        slot as u8
    }
}

/// `x % modulus` for `x < 2 * modulus`, by one subtraction: a stripe's map wraps once per
/// chunk, and a division per chunk showed in every parity write's profile.
fn wrap_once(x: usize, modulus: usize) -> usize {
    debug_assert!(x < 2 * modulus, "{x} wraps more than once around {modulus}");
    if x >= modulus {
        x - modulus
    } else {
        x
    }
}

/// md's rotating parity member over `width` members: left layouts start at the last member
/// and move down, right layouts start at member 0 and move up.
fn rotating_parity(layout: ParityLayout, width: usize, stripe: u64) -> usize {
    use ParityLayout as L;
    let turn = (stripe % width as u64) as usize;
    match layout {
        L::LeftAsymmetric | L::LeftSymmetric | L::LeftAsymmetric6 | L::LeftSymmetric6 => {
            width - 1 - turn
        }
        _ => turn,
    }
}

/// Asymmetric layouts skip the parity; symmetric ones continue after it.
fn data_order(layout: ParityLayout, start: usize, modulus: usize) -> DataOrder {
    use ParityLayout as L;
    match layout {
        L::LeftSymmetric | L::RightSymmetric | L::LeftSymmetric6 | L::RightSymmetric6 => {
            DataOrder::Rotating { start, modulus }
        }
        _ => DataOrder::Ascending,
    }
}

impl ParityGeometry {
    pub(crate) fn new(
        level: Level,
        members: usize,
        layout: ParityLayout,
        chunk_sectors: u32,
        dev_sectors: u64,
    ) -> Result<ParityGeometry, LayoutError> {
        if !level.has_parity() {
            return Err(LayoutError::BadLayout {
                level,
                layout: layout.to_string(),
            });
        }
        check_members(level, members)?;
        if !layout.valid_for(level) {
            return Err(LayoutError::BadLayout {
                level,
                layout: layout.to_string(),
            });
        }
        check_chunk(chunk_sectors)?;
        check_member_size(0, dev_sectors)?;
        let rounded = dev_sectors - dev_sectors % u64::from(chunk_sectors);
        if rounded == 0 {
            return Err(LayoutError::Empty);
        }
        Ok(ParityGeometry {
            level,
            members,
            layout,
            chunk_sectors,
            dev_sectors: rounded,
        })
    }

    fn chunk_shift(&self) -> u32 {
        self.chunk_sectors.trailing_zeros()
    }

    fn placement(&self, stripe: u64) -> Placement {
        Placement::of(self.level, self.layout, self.members, stripe)
    }

    /// Data chunks per stripe (members - 1 for RAID4/5, members - 2 for RAID6).
    pub fn data_members(&self) -> usize {
        match self.level {
            Level::Raid6 => self.members - 2,
            _ => self.members - 1,
        }
    }
    /// Number of stripes (dev_sectors / chunk_sectors).
    pub fn stripes(&self) -> u64 {
        self.dev_sectors >> self.chunk_shift()
    }
    /// Array sectors per stripe (data_members * chunk_sectors).
    pub fn stripe_data_sectors(&self) -> u64 {
        (self.data_members() as u64) << self.chunk_shift()
    }
    /// Size of the array: every stripe's data.
    pub fn array_sectors(&self) -> u64 {
        self.stripes() * self.stripe_data_sectors()
    }
    /// `(stripe, dd, offset_in_chunk)` of an array sector.
    pub fn locate(&self, array_sector: u64) -> (u64, usize, u64) {
        let offset = array_sector & (u64::from(self.chunk_sectors) - 1);
        let chunk = array_sector >> self.chunk_shift();
        let k = self.data_members() as u64;
        (chunk / k, (chunk % k) as usize, offset)
    }
    /// Inverse of [`ParityGeometry::locate`].
    pub fn array_sector(&self, stripe: u64, dd: usize, offset: u64) -> u64 {
        debug_assert!(dd < self.data_members());
        debug_assert!(offset < u64::from(self.chunk_sectors));
        let chunk = stripe * self.data_members() as u64 + dd as u64;
        (chunk << self.chunk_shift()) + offset
    }
    /// The member map of `stripe` (md's `raid5_compute_sector` for every dd at once).
    pub fn stripe_map(&self, stripe: u64) -> StripeMap {
        let placement = self.placement(stripe);
        let k = self.data_members();
        // Pushed one by one into tables of known room: built for every stripe a parity write
        // touches, where the iterator collects cost more than the placement itself.
        let mut data: SmallVec<[usize; 16]> = SmallVec::with_capacity(k);
        let mut q_coef: SmallVec<[u8; 16]> = SmallVec::new();
        for dd in 0..k {
            let member = placement.data_member(dd);
            data.push(member);
            if placement.q.is_some() {
                q_coef.push(placement.q_slot(self.members, member));
            }
        }
        StripeMap {
            p: placement.p,
            q: placement.q,
            data,
            q_coef,
        }
    }
    /// Member sector (relative to the data area) of `offset` within `stripe`'s chunks.
    pub fn member_sector(&self, stripe: u64, offset: u64) -> u64 {
        debug_assert!(offset < u64::from(self.chunk_sectors));
        (stripe << self.chunk_shift()) + offset
    }

    /// Data pieces, one per chunk touched (never merged across chunks, so every piece lies
    /// in one stripe on one data member).
    pub(crate) fn pieces(&self, sector: u64, count: u64, pieces: &mut Pieces) {
        let chunk = u64::from(self.chunk_sectors);
        let end = sector + count;
        pieces.reserve(chunk_span(sector, count, chunk));
        let mut at = sector;
        while at < end {
            let (stripe, dd, offset) = self.locate(at);
            let len = (chunk - offset).min(end - at);
            let loc = Loc {
                member: self.placement(stripe).data_member(dd),
                sector: self.member_sector(stripe, offset),
            };
            pieces.push(Piece::single(at, len, loc));
            at += len;
        }
    }

    pub(crate) fn reverse(&self, member: usize, member_sector: u64) -> Reverse {
        if member_sector >= self.dev_sectors {
            return Reverse::Unused;
        }
        let stripe = member_sector >> self.chunk_shift();
        let offset = member_sector & (u64::from(self.chunk_sectors) - 1);
        let placement = self.placement(stripe);
        if member == placement.p {
            return Reverse::P { stripe, offset };
        }
        if placement.q == Some(member) {
            return Reverse::Q { stripe, offset };
        }
        match placement.data_index(member) {
            Some(dd) => Reverse::Data {
                array_sector: self.array_sector(stripe, dd, offset),
                copy: 0,
            },
            None => Reverse::Unused,
        }
    }
}
