//! An array's status as `raidd detail` reports it.

use raidd_layout::SECTOR_SIZE;

use super::parity::ParityIo;
use super::report::{
    ArrayState, ArrayStatus, BitmapStatus, CounterStatus, JournalStatus, MemberDab,
};
use super::{layout_name, uuid_string, Array};
use crate::meta::Metadata;

impl Array {
    pub async fn status(&self) -> ArrayStatus {
        let p = self.parts();
        let state = if self.is_failed() {
            ArrayState::Failed
        } else if self.is_degraded() {
            ArrayState::Degraded
        } else if p.meta.is_some_and(Metadata::is_dirty) {
            ArrayState::Active
        } else {
            ArrayState::Clean
        };
        let events = match p.meta {
            Some(m) => Some(m.events().await),
            None => None,
        };
        let c = p.counters;
        let g = self.geometry();
        let slots = p.slots;
        ArrayStatus {
            name: self.name().to_string(),
            uuid: uuid_string(&self.uuid()),
            level: g.level().to_string(),
            layout: layout_name(g),
            chunk_bytes: u64::from(g.chunk_sectors()) * SECTOR_SIZE,
            raid_devices: slots.len(),
            size_bytes: self.size_bytes(),
            block_size: self.block_size(),
            state,
            needs_resync: self.needs_resync(),
            read_only: self.is_read_only(),
            events,
            slots: (0..slots.len()).map(|r| slots.status(r)).collect(),
            spares: slots.spare_names(),
            faulty: slots.detached_names(),
            consistency_policy: self.consistency().policy(),
            checksums: (0..slots.len())
                .filter_map(|r| slots.member(r))
                .find_map(|m| m.checksums().map(|c| c.algorithm_name().to_string())),
            checksums_unverified_blocks: super::rederive::unverified_tags(self),
            ppl_recovered: p.ppl.and_then(|l| l.last_recovery()),
            journal: slots.journal_state().map(|state| {
                let live = p.journal.live();
                let place = live.as_ref().map(|j| j.place());
                let cache = p.cache;
                let page = raidd_md::journal::BLOCK as u64;
                JournalStatus {
                    member: slots.journal_member().map(|m| m.info().name.clone()),
                    state,
                    mode: cache.mode(),
                    cached_bytes: cache.pages() as u64 * page,
                    cache_limit_bytes: if cache.is_on() {
                        cache.limit() as u64 * page
                    } else {
                        0
                    },
                    log_bytes: place.map(|p| p.ring * SECTOR_SIZE),
                    used_bytes: place.map(|p| (p.head + p.ring - p.tail) % p.ring * SECTOR_SIZE),
                    recovered: live.and_then(|j| j.recovered()),
                }
            }),
            sync: p
                .passes
                .status(|r| slots.member(r).map(|m| m.info().name.clone())),
            bitmap: self
                .write_intent()
                .map(|(dirty, chunks)| BitmapStatus { dirty, chunks }),
            last_sync: p.passes.last(),
            counters: CounterStatus {
                reads: c.sum(|s| &s.reads),
                writes: c.sum(|s| &s.writes),
                read_bytes: c.sum(|s| &s.read_bytes),
                written_bytes: c.sum(|s| &s.written_bytes),
                degraded_reads: c.sum(|s| &s.degraded_reads),
                full_stripe_writes: c.sum(|s| &s.full_stripe_writes),
                rmw_writes: c.sum(|s| &s.rmw_writes),
                rcw_writes: c.sum(|s| &s.rcw_writes),
                reconstruct_writes: c.sum(|s| &s.reconstruct_writes),
                copied_bytes: c.sum(|s| &s.copied_bytes),
                stripe_cache: p.parity.map(ParityIo::cache_status),
                dab: (0..slots.len())
                    .filter_map(|r| slots.member(r))
                    .filter_map(|m| {
                        m.dab().map(|counts| MemberDab {
                            member: m.info().name.clone(),
                            counts,
                        })
                    })
                    .collect(),
            },
        }
    }
}
