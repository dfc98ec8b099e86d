//! An array's status as `raidd detail` reports it.

use std::sync::atomic::Ordering;

use raidd_layout::SECTOR_SIZE;

use super::parity::ParityIo;
use super::report::{
    ArrayState, ArrayStatus, BitmapStatus, CounterStatus, MemberDab, SlotState, SlotStatus,
};
use super::{layout_name, names, read_lock, uuid_string, Array};
use crate::meta::Metadata;

impl Array {
    pub async fn status(&self) -> ArrayStatus {
        let state = if self.failed.load(Ordering::Acquire) {
            ArrayState::Failed
        } else if self.is_degraded() {
            ArrayState::Degraded
        } else if self.meta.as_ref().is_some_and(Metadata::is_dirty) {
            ArrayState::Active
        } else {
            ArrayState::Clean
        };
        let events = match &self.meta {
            Some(m) => Some(m.events().await),
            None => None,
        };
        let c = &self.counters;
        ArrayStatus {
            name: self.name.clone(),
            uuid: uuid_string(&self.uuid),
            level: self.geometry.level().to_string(),
            layout: layout_name(&self.geometry),
            chunk_bytes: u64::from(self.geometry.chunk_sectors()) * SECTOR_SIZE,
            raid_devices: self.slots.len(),
            size_bytes: self.info.size_bytes,
            block_size: self.info.block_size,
            state,
            needs_resync: self.needs_resync(),
            read_only: self.read_only,
            events,
            slots: (0..self.slots.len())
                .map(|r| {
                    let state = self.slot_state(r);
                    SlotStatus {
                        role: r,
                        member: self.member(r).map(|m| m.info().name.clone()),
                        state,
                        recovered_bytes: (state == SlotState::Recovering)
                            .then(|| self.slots[r].recovered.load(Ordering::Acquire) * SECTOR_SIZE),
                        by_bitmap: state == SlotState::Recovering && self.recovering_by_bitmap(r),
                        write_mostly: self.write_mostly(r),
                        replacement: read_lock(&self.slots[r].replacement)
                            .as_ref()
                            .map(|(m, _)| m.info().name.clone()),
                        replaced_bytes: self.slots[r]
                            .replacing
                            .load(Ordering::Acquire)
                            .then(|| self.slots[r].replaced.load(Ordering::Acquire) * SECTOR_SIZE),
                        io: self.slots[r].io.status(),
                    }
                })
                .collect(),
            spares: names(&self.spares_list),
            faulty: names(&self.detached),
            sync: self.sync_status(),
            bitmap: self
                .write_intent()
                .map(|(dirty, chunks)| BitmapStatus { dirty, chunks }),
            last_sync: self.last_sync(),
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
                stripe_cache: self.parity.as_ref().map(ParityIo::cache_status),
                dab: (0..self.slots.len())
                    .filter_map(|r| self.member(r))
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
