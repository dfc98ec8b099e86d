//! md's internal write-intent bitmap: one bit per bitmap chunk of the resync space (array
//! sectors for RAID1/10, member sectors for RAID4/5/6, as md's `resync_max_sectors`). A bit
//! is set on every member, and made durable, before the first write into its chunk; it is
//! cleared once the chunk has had no write in flight for a whole flush period and the
//! members have been flushed. After an unclean stop only chunks whose bit is set need a
//! resync. While the array is degraded no bit is cleared, so a returning member could be
//! brought up to date from them.
//!
//! Per chunk: a count of writes in flight and a state. The write path does one atomic add
//! and one load per chunk when the bit is already on disk; only a clean chunk takes the
//! flush lock and writes the bitmap. The cleaner and the write path meet Dekker-style: the
//! cleaner marks a chunk `CLEARING` and then looks at its count; a writer counts itself and
//! then looks at the state, so one of them always sees the other.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, RwLock};

use std::time::{Duration, Instant};

use futures::lock::Mutex;
use raidd_layout::{Geometry, SECTOR_SIZE};

use crate::meta::Metadata;

const CLEAN: u8 = 0;
const ONDISK: u8 = 1;
const CLEARING: u8 = 2;

#[derive(Debug)]
pub(crate) struct WriteIntent {
    /// Resync-space sectors per bit.
    chunk_sectors: u64,
    /// Resync-space sectors covered.
    sync_sectors: u64,
    /// Whether the resync space is member sectors of stripes (parity levels).
    stripe_space: Option<(u64, u64)>,
    pending: Box<[AtomicU32]>,
    state: Box<[AtomicU8]>,
    /// The flush period in which each chunk was last written.
    touched: Box<[AtomicU64]>,
    period: AtomicU64,
    /// Held while the on-disk image changes.
    lock: Mutex<()>,
}

/// A write's hold on its chunks; they cannot be cleared until it drops. It keeps the bitmap
/// it counted in alive, should the bitmap be taken off the array meanwhile.
pub(crate) struct Intent {
    wi: Arc<WriteIntent>,
    chunks: std::ops::Range<usize>,
}

impl Drop for Intent {
    fn drop(&mut self) {
        for c in self.chunks.clone() {
            let was = self.wi.pending[c].fetch_sub(1, Ordering::SeqCst);
            debug_assert!(was > 0, "a hold leaves only chunks it counted itself in");
        }
    }
}

impl WriteIntent {
    /// The bitmap of an array with `geometry`, `chunk_bytes` per bit, and the bits as read
    /// from a member (set bits stay set: their chunks may need a resync).
    pub(crate) fn new(geometry: &Geometry, chunk_bytes: u32, bits: &[u8]) -> WriteIntent {
        let (sync_sectors, stripe_space) = match geometry {
            Geometry::Parity(pg) => (
                pg.dev_sectors,
                Some((u64::from(pg.chunk_sectors), pg.stripe_data_sectors())),
            ),
            g => (g.array_sectors(), None),
        };
        let chunk_sectors = (u64::from(chunk_bytes) / SECTOR_SIZE).max(1);
        let n = sync_sectors.div_ceil(chunk_sectors) as usize;
        debug_assert!(
            n as u64 * chunk_sectors >= sync_sectors,
            "the bits cover the space"
        );
        let state: Box<[AtomicU8]> = (0..n)
            .map(|c| {
                let set = bits.get(c / 8).is_some_and(|b| b & (1 << (c % 8)) != 0);
                AtomicU8::new(if set { ONDISK } else { CLEAN })
            })
            .collect();
        WriteIntent {
            chunk_sectors,
            sync_sectors,
            stripe_space,
            pending: (0..n).map(|_| AtomicU32::new(0)).collect(),
            state,
            touched: (0..n).map(|_| AtomicU64::new(0)).collect(),
            period: AtomicU64::new(1),
            lock: Mutex::new(()),
        }
    }

    pub(crate) fn chunks(&self) -> usize {
        self.state.len()
    }

    /// Resync-space sectors per bit.
    pub(crate) fn chunk_sectors(&self) -> u64 {
        self.chunk_sectors
    }

    /// The resync-space sectors an array write of `[sector, sector + count)` touches.
    pub(crate) fn sync_range(&self, sector: u64, count: u64) -> std::ops::Range<u64> {
        match self.stripe_space {
            Some((chunk, per_stripe)) => {
                debug_assert!(chunk > 0 && per_stripe > 0);
                let first = sector / per_stripe;
                let last = (sector + count.max(1) - 1) / per_stripe;
                first * chunk..(last + 1) * chunk
            }
            None => sector..sector + count,
        }
    }

    pub(crate) fn chunk_range(&self, r: &std::ops::Range<u64>) -> std::ops::Range<usize> {
        let end = r.end.min(self.sync_sectors).max(r.start + 1);
        let chunks = (r.start / self.chunk_sectors) as usize
            ..((end - 1) / self.chunk_sectors + 1).min(self.state.len() as u64) as usize;
        debug_assert!(chunks.end <= self.state.len(), "chunks of the bitmap");
        chunks
    }

    /// The bit image as it should be on disk now (clearing chunks count as clear).
    pub(crate) fn image(&self) -> Vec<u8> {
        let mut bits = vec![0u8; self.state.len().div_ceil(8)];
        debug_assert!(bits.len() * 8 >= self.state.len(), "a bit per chunk");
        for (c, s) in self.state.iter().enumerate() {
            if s.load(Ordering::SeqCst) == ONDISK {
                bits[c / 8] |= 1 << (c % 8);
            }
        }
        bits
    }

    /// Whether chunk `c`'s bit is set.
    pub(crate) fn is_set(&self, c: usize) -> bool {
        self.state[c].load(Ordering::SeqCst) != CLEAN
    }

    pub(crate) fn dirty_chunks(&self) -> usize {
        (0..self.state.len()).filter(|&c| self.is_set(c)).count()
    }

    /// Counts a write into the chunks of resync range `r`. Returns the hold and whether
    /// some chunk's bit must first be written (then call [`WriteIntent::set_bits`]).
    pub(crate) fn start(self: &Arc<Self>, r: std::ops::Range<u64>) -> (Intent, bool) {
        let chunks = self.chunk_range(&r);
        debug_assert!(
            !chunks.is_empty() || self.state.is_empty(),
            "a write touches a chunk"
        );
        let period = self.period.load(Ordering::Relaxed);
        let mut missing = false;
        for c in chunks.clone() {
            self.pending[c].fetch_add(1, Ordering::SeqCst);
            self.touched[c].store(period, Ordering::Relaxed);
            missing |= self.state[c].load(Ordering::SeqCst) != ONDISK;
        }
        let wi = self.clone();
        (Intent { wi, chunks }, missing)
    }

    /// The bit image, under the flush lock (no clearing half done): to write whole.
    pub(crate) async fn current(&self) -> (futures::lock::MutexGuard<'_, ()>, Vec<u8>) {
        let guard = self.lock.lock().await;
        (guard, self.image())
    }

    /// Marks the hold's chunks set under the flush lock; returns the lock guard and the
    /// image to write when anything changed (the caller writes it, durably, then drops the
    /// guard).
    pub(crate) async fn set_bits(
        &self,
        hold: &Intent,
    ) -> (futures::lock::MutexGuard<'_, ()>, Option<Vec<u8>>) {
        let guard = self.lock.lock().await;
        let mut changed = false;
        for c in hold.chunks.clone() {
            // CLEARING is never seen here: the cleaner finishes under this lock.
            let was = self.state[c].swap(ONDISK, Ordering::SeqCst);
            debug_assert_ne!(was, CLEARING, "the cleaner finishes under the lock");
            if was != ONDISK {
                changed = true;
            }
        }
        let image = changed.then(|| self.image());
        (guard, image)
    }

    /// Starts a flush period; chunks idle for the whole previous one, with nothing in
    /// flight, are marked clearing. Returns the lock guard and the image to write (after
    /// flushing the members) when any chunk is to be cleared; then call
    /// [`WriteIntent::cleared`].
    pub(crate) async fn begin_clear(
        &self,
        all_idle: bool,
    ) -> (futures::lock::MutexGuard<'_, ()>, Option<Vec<u8>>) {
        let guard = self.lock.lock().await;
        let period = self.period.fetch_add(1, Ordering::Relaxed);
        let mut any = false;
        for c in 0..self.state.len() {
            if self.state[c].load(Ordering::SeqCst) != ONDISK {
                continue;
            }
            if !all_idle && self.touched[c].load(Ordering::Relaxed) >= period {
                continue; // written in the period now ending: keep it one more
            }
            self.state[c].store(CLEARING, Ordering::SeqCst);
            if self.pending[c].load(Ordering::SeqCst) > 0 {
                self.state[c].store(ONDISK, Ordering::SeqCst);
                continue;
            }
            any = true;
        }
        debug_assert!(
            !any || self
                .state
                .iter()
                .any(|s| s.load(Ordering::SeqCst) == CLEARING),
            "what is to be cleared is marked clearing"
        );
        let image = any.then(|| self.image());
        (guard, image)
    }

    /// The clearing chunks' bits are off the disk (or the write failed: `ok` false keeps
    /// them set).
    pub(crate) fn cleared(&self, ok: bool) {
        let to = if ok { CLEAN } else { ONDISK };
        for s in self.state.iter() {
            let _ = s.compare_exchange(CLEARING, to, Ordering::SeqCst, Ordering::SeqCst);
        }
    }
}

/// md's bitmap daemon period (the bitmap's daemon_sleep as mdadm writes it).
const INTENT_PERIOD: Duration = Duration::from_secs(5);

/// The array's write-intent bitmap as a part of the array: the bits (when the array has a
/// bitmap and is writable), the superblock writes that put them on every member, and the
/// sweep that clears idle ones once per flush period. What it writes goes through the
/// array's [`Metadata`]; the members whose bitmap write failed are handed back, and the
/// array fails them.
#[derive(Debug)]
pub(crate) struct IntentLog {
    /// Taken off or put on only while every write is held at the gate
    /// (`consistency.rs`).
    bits: RwLock<Option<Arc<WriteIntent>>>,
    /// When the idle bits were last swept, and how often they are.
    swept: std::sync::Mutex<Instant>,
    period: Duration,
}

impl IntentLog {
    /// `bits`: the bitmap loaded at start; `period`: its daemon_sleep, when it records one.
    pub(crate) fn new(bits: Option<WriteIntent>, period: Option<Duration>) -> IntentLog {
        IntentLog {
            bits: RwLock::new(bits.map(Arc::new)),
            swept: std::sync::Mutex::new(Instant::now()),
            period: period.unwrap_or(INTENT_PERIOD),
        }
    }

    fn bits(&self) -> Option<Arc<WriteIntent>> {
        self.bits.read().expect(crate::POISONED).clone()
    }

    /// Puts a bitmap on the array or takes it off (no write may be in flight).
    pub(crate) fn replace(&self, bits: Option<WriteIntent>) {
        *self.bits.write().expect(crate::POISONED) = bits.map(Arc::new);
    }

    pub(crate) fn is_loaded(&self) -> bool {
        self.bits.read().expect(crate::POISONED).is_some()
    }

    /// Chunks whose bit is set, out of all (`None` without a bitmap).
    pub(crate) fn counts(&self) -> Option<(usize, usize)> {
        self.bits().map(|wi| (wi.dirty_chunks(), wi.chunks()))
    }

    /// Which chunks' bits are set now, and the resync-space sectors per bit: what a resync
    /// narrows itself to.
    pub(crate) fn set_chunks(&self) -> Option<(Vec<bool>, u64)> {
        let wi = self.bits()?;
        Some((
            (0..wi.chunks()).map(|c| wi.is_set(c)).collect(),
            wi.chunk_sectors(),
        ))
    }

    /// The chunks resync range `r` touches (a bitmap must be loaded).
    pub(crate) fn chunk_range(&self, r: &std::ops::Range<u64>) -> std::ops::Range<usize> {
        self.bits()
            .expect("chunks of a loaded bitmap")
            .chunk_range(r)
    }

    /// Whether a bit is set for any of the array regions `(sector, count)` (true without a
    /// bitmap: nothing says they are clean).
    pub(crate) fn set_in(&self, regions: &[(u64, u64)]) -> bool {
        let Some(wi) = self.bits() else {
            return true;
        };
        regions.iter().any(|&(sector, count)| {
            wi.chunk_range(&wi.sync_range(sector, count))
                .any(|c| wi.is_set(c))
        })
    }

    /// Records a write of `count` array sectors at `sector`: the bits of its chunks are on
    /// every member (durably) before this returns; the hold keeps them set until the write
    /// is done. Also returns the members whose bitmap write failed.
    pub(crate) async fn note(
        &self,
        meta: Option<&Metadata>,
        sector: u64,
        count: u64,
    ) -> Option<(Intent, Vec<usize>)> {
        let wi = self.bits()?;
        let (hold, missing) = wi.start(wi.sync_range(sector, count));
        let mut failed = Vec::new();
        if missing {
            let (guard, image) = wi.set_bits(&hold).await;
            if let (Some(image), Some(meta)) = (image, meta) {
                failed = meta.write_bitmap_bits(&image, false).await;
            }
            drop(guard);
        }
        Some((hold, failed))
    }

    /// Writes every bit to every member, as md does when a recovery starts: a member's copy
    /// is only as new as the last change of bits it took, and one just added took none.
    /// Returns the members whose write failed.
    pub(crate) async fn write_whole(&self, meta: Option<&Metadata>) -> Vec<usize> {
        let (Some(wi), Some(meta)) = (self.bits(), meta) else {
            return Vec::new();
        };
        let (guard, image) = wi.current().await;
        let failed = meta.write_bitmap_bits(&image, false).await;
        drop(guard);
        failed
    }

    /// Whether a flush period has passed since the last sweep (and a sweep is due now).
    pub(crate) fn sweep_due(&self) -> bool {
        if !self.is_loaded() {
            return false;
        }
        let mut last = self.swept.lock().expect(crate::POISONED);
        if last.elapsed() < self.period {
            return false;
        }
        *last = Instant::now();
        true
    }

    /// Clears the bits of chunks with nothing in flight that were not written in the last
    /// flush period (`all`: of every chunk with nothing in flight), after `flush` made the
    /// data those bits covered durable. The caller decides whether bits may be cleared at
    /// all (not while degraded, nor while a resync is due). Returns the members whose
    /// bitmap write failed.
    pub(crate) async fn sweep<F>(
        &self,
        meta: Option<&Metadata>,
        all: bool,
        flush: impl FnOnce() -> F,
    ) -> Vec<usize>
    where
        F: std::future::Future<Output = bool>,
    {
        let (Some(wi), Some(meta)) = (self.bits(), meta) else {
            return Vec::new();
        };
        let (guard, image) = wi.begin_clear(all).await;
        let Some(image) = image else {
            return Vec::new();
        };
        let mut failed = Vec::new();
        let ok = flush().await && {
            failed = meta.write_bitmap_bits(&image, true).await;
            failed.is_empty()
        };
        wi.cleared(ok);
        drop(guard);
        failed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use raidd_layout::{Level, ParityLayout};

    fn raid5() -> Geometry {
        // 4 members, 16-sector chunks, 1024 sectors each: stripes hold 48 data sectors.
        Geometry::parity(Level::Raid5, 4, ParityLayout::LeftSymmetric, 16, 1024).unwrap()
    }

    #[test]
    fn writes_map_to_the_resync_space_and_chunks() {
        let wi = WriteIntent::new(&raid5(), 64 * 512, &[]);
        assert_eq!(wi.chunks(), 16);
        // Array sectors 0..48 are stripe 0: member sectors 0..16.
        assert_eq!(wi.sync_range(0, 48), 0..16);
        assert_eq!(wi.sync_range(47, 2), 0..32);
        assert_eq!(wi.chunk_range(&wi.sync_range(47, 2)), 0..1);
        assert_eq!(wi.chunk_range(&(60..70)), 0..2);
        let mirror = Geometry::raid1(2, 1000).unwrap();
        let wi = WriteIntent::new(&mirror, 128 * 512, &[0b10]);
        assert_eq!(wi.sync_range(5, 3), 5..8);
        assert_eq!(wi.chunks(), 8);
        assert!(wi.is_set(1) && !wi.is_set(0), "bits from disk are honoured");
    }

    #[test]
    fn set_then_clear_only_when_idle() {
        raidd_rt::block_on(async {
            let wi = Arc::new(WriteIntent::new(
                &Geometry::raid1(2, 1024).unwrap(),
                128 * 512,
                &[],
            ));
            let (hold, missing) = wi.start(0..10);
            assert!(missing);
            let (g, image) = wi.set_bits(&hold).await;
            assert_eq!(image.unwrap(), vec![0b1]);
            drop(g);
            // Already on disk: no write needed for the next one.
            let (hold2, missing) = wi.start(5..6);
            assert!(!missing);
            drop(hold2);
            // In flight: never cleared.
            for _ in 0..3 {
                let (g, image) = wi.begin_clear(false).await;
                assert!(image.is_none());
                drop(g);
            }
            drop(hold);
            // Written in the current period: kept one more period, then cleared.
            let (hold, _) = wi.start(0..1);
            drop(hold);
            let (g, image) = wi.begin_clear(false).await;
            assert!(image.is_none());
            drop(g);
            let (g, image) = wi.begin_clear(false).await;
            assert_eq!(image.unwrap(), vec![0]);
            wi.cleared(true);
            drop(g);
            assert!(!wi.is_set(0));
            assert_eq!(wi.dirty_chunks(), 0);
        });
    }

    #[test]
    fn a_write_racing_the_cleaner_keeps_its_bit() {
        raidd_rt::block_on(async {
            let wi = Arc::new(WriteIntent::new(
                &Geometry::raid1(2, 1024).unwrap(),
                128 * 512,
                &[0xff],
            ));
            // A writer counted itself: the cleaner must leave the chunk set.
            let (hold, missing) = wi.start(0..1);
            assert!(!missing);
            let (g, image) = wi.begin_clear(true).await;
            let image = image.unwrap();
            assert_eq!(image[0] & 1, 1, "chunk 0 stays set");
            assert_eq!(image[0] & 0b10, 0, "idle chunks clear");
            wi.cleared(true);
            drop(g);
            drop(hold);
            assert!(wi.is_set(0));
            // A failed write of the cleared image keeps the bits.
            let (g, image) = wi.begin_clear(true).await;
            assert!(image.is_some());
            wi.cleared(false);
            drop(g);
            assert!(wi.is_set(0));
        });
    }
}
