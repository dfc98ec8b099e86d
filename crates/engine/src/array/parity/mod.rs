//! RAID4/5/6 I/O.
//!
//! Reads of in-sync members go straight into the client's buffer without touching any lock
//! or cache (seed 004 5.3: read bypass). Data of a missing member is reconstructed from the
//! rest of its stripe under the stripe's lock.
//!
//! A write is cut into its share of each stripe and attached to the stripe's head in the
//! stripe cache (`cache.rs`), where writes to the same stripe meet. The request that
//! finds a stripe idle leads it: it takes every share pending there as one batch, and per
//! batch picks the cheapest way to keep parity right with the members it has and the rows
//! the cache already knows: a full-stripe write (no reads), reconstruct-write (read the
//! untouched data), read-modify-write (read old data and parity), or, when a missing member's
//! old data is needed, reconstruct the stripe first. Data goes to the members straight from
//! the clients' buffers, parity from scratch buffers, which the cache then keeps. Member
//! writes are joined per member, within a batch and across the consecutive whole stripes
//! of one request, which it leads together: a long sequential write becomes one vectored
//! write per member.

//!
//! [`ParityIo`] owns all of it: the stripe cache (`cache.rs`: heads, shards, kept rows, and
//! the governors that decide when keeping and gathering pay), the per-stripe locks
//! (`lock.rs`), and the read and write paths (`read.rs`, `write.rs`, `batch.rs`). The array
//! holds one and lends it what it needs of itself through [`Host`] (`host.rs`): which
//! members are current, where a member's data starts, and member I/O, which fails a member
//! whose I/O fails. The choice between read-modify-write and reconstruct-write (`strategy.rs`) and
//! the rebuilding of lost blocks (`rebuild.rs`) are pure and know nothing of either.

mod batch;
mod cache;
mod governor;
mod lock;
mod logged;
mod mailbox;
mod policy;
mod read;
mod rebuild;
mod shares;
mod strategy;
mod write;

use raidd_layout::ParityGeometry;

pub(crate) use super::host::Host;
use super::report::StripeCacheStatus;
use cache::StripeCache;
use lock::StripeLocks;

pub(crate) use cache::Blocks;
pub use policy::{Alone, Gather, DEFAULT_CACHE_BYTES, DEFAULT_INFLIGHT_STRIPES};
pub(crate) use rebuild::{q_index, rebuild_blocks};

/// The member sector just past `stripe` of `pg`: a recovering member serves the stripe
/// once its recovery point has passed this.
pub(crate) fn stripe_end(pg: &ParityGeometry, stripe: u64) -> u64 {
    pg.member_sector(stripe, 0) + u64::from(pg.chunk_sectors)
}

/// The RAID4/5/6 read and write paths of one array, and the state they keep. It holds no
/// geometry: every path asks its host for the shape of the stripes in hand
/// ([`Host::parity_shape`]).
pub(crate) struct ParityIo {
    /// Per-stripe exclusion: a batch's read-compute-write, a write alone, a degraded read's
    /// reconstruction.
    locks: StripeLocks,
    /// Where writes to the same stripe meet (gathering, kept rows).
    cache: StripeCache,
    /// Reads of in-sync members go straight to the client's buffer (seed 004's read
    /// bypass, the default). Off, every chunk is read under its stripe's lock into a buffer
    /// of its own and copied, as md's stripe cache did before the bypass: kept for the
    /// paper's comparison.
    bypass: std::sync::atomic::AtomicBool,
}

impl ParityIo {
    pub(crate) fn new() -> ParityIo {
        ParityIo {
            locks: StripeLocks::default(),
            cache: StripeCache::default(),
            bypass: std::sync::atomic::AtomicBool::new(true),
        }
    }

    pub(crate) fn set_read_bypass(&self, on: bool) {
        self.bypass.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    pub(crate) fn read_bypass(&self) -> bool {
        self.bypass.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(crate) fn set_stripe_cache(&self, bytes: usize, gather: Gather) {
        self.cache.configure(bytes, gather);
    }

    pub(crate) fn set_write_alone(&self, alone: Alone) {
        self.cache.set_alone(alone);
    }

    /// The stripe cache as `raidd detail` reports it.
    pub(crate) fn cache_status(&self) -> StripeCacheStatus {
        let sc = &self.cache;
        let (batches, gathered, hits) = sc.totals();
        StripeCacheStatus {
            gather: sc.gather().to_string(),
            write_alone: sc.alone_policy().to_string(),
            limit_bytes: sc.cache_bytes(),
            cached_bytes: sc.cached_bytes(),
            batches,
            gathered,
            hits,
        }
    }
}
