//! The write journal in write-back mode (md's raid5-cache `r5c` cache, Linux 4.10 on): a
//! write is acknowledged once its pages are written to the journal, and held in memory;
//! the members get them later, a stripe at a time, with their parity logged first. Clients
//! see a volatile cache: a flush makes every acknowledged write durable by flushing the
//! journal member alone.
//!
//! Why the pieces are as they are:
//! - **Pages.** A write is held as whole 4 KiB pages (the journal's unit): a page it writes
//!   part of is read first (as a reader sees it) and the new bytes written over it.
//! - **Reads** take the held pages over their range before reading the members, then copy
//!   them over what the members returned: a page leaves the cache only once the members
//!   have it, so a read sees every acknowledged write.
//! - **Stripes.** Writers holding pages of a stripe and the destage of that stripe keep
//!   apart by an exact hold per stripe (`stripe_holds.rs`; the parity path takes its own
//!   locks below it).
//! - **Modes.** Every write of a journal array holds a pass of the mode gate while it
//!   runs; a switch of mode waits for them and holds new ones back (as md suspends the
//!   array for it), and a switch to write-through takes every held page to the members
//!   before writes go on. So writes past the cache never meet held pages: the journal
//!   space kept for the cache's parity is only ever taken by the cache. A destage takes every page held in the stripe as one batch
//!   (`ParityIo::write_pieces`), whose parity is logged (parity alone: the pages are logged
//!   already) before any member write. Recovery replays a page logged without parity
//!   through the array, and the parity logged after it straight to its members; the parity
//!   must therefore cover all the stripe's pages logged before it, which taking the whole
//!   stripe at once under its lock guarantees.
//! - **Room.** The cache holds at most [`WriteBack::limit`] pages; a write past it first
//!   takes the oldest pages to the members (back-pressure, said once in the log); pages
//!   claimed by writes on their way in count too. Each held page keeps journal space for
//!   its parity ([`Journal::try_append_cached`]), so a destage always finds room in the
//!   ring however full the cache left it; a unit of held pages is passed by reclaim only
//!   once its pages left the cache (destaged, or replaced by a newer write of the same
//!   page once that write's own unit is written).
//! - **Time.** The daemon's tick takes pages held for a whole period to the members, so data
//!   does not sit in the journal alone for long.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use futures::future::LocalBoxFuture;
use raidd_layout::{ParityGeometry, SECTOR_SIZE};
use raidd_md::journal::{BLOCK, BLOCK_SECTORS};
use raidd_rt::{AlignedBuf, IoVec, IoVecMut, SharedBuf};

use super::host::Host;
use super::journal::{Journal, JournalRow, Ticket};
use super::report::JournalMode;
use super::stripe_holds::{ModeGate, Pass, StripeHolds};
use crate::error::{Error, ErrorKind, Result};
use crate::iov::{Req, ReqMut};

/// Pages one write takes into the cache at once (a longer write goes in pieces).
const PIECE_PAGES: u64 = 256;

/// Stripes one destage takes to the members at once.
const DESTAGE_STRIPES: usize = 64;

/// How long a page may stay held before the tick takes it to the members.
const HOLD_PERIOD: std::time::Duration = std::time::Duration::from_secs(5);

/// What the cache needs of its array beyond the parity path's host.
pub(crate) trait WriteBackHost: Host {
    /// Writes pieces of one stripe (array byte offset, windows) to the members as one
    /// batch, as any write goes (through the gate), a read-only array's too: they were
    /// acknowledged.
    fn write_stripe(
        &self,
        stripe: u64,
        pieces: Vec<(u64, IoVec)>,
    ) -> LocalBoxFuture<'_, Result<()>>;
    /// Reads `len` bytes at array byte `offset` as a reader sees them.
    fn read_bytes(&self, offset: u64, len: usize) -> LocalBoxFuture<'_, Result<AlignedBuf>>;
}

/// The write-back cache of an array with a write journal (idle in write-through mode).
#[derive(Debug, Default)]
pub(crate) struct WriteBack {
    on: AtomicBool,
    /// Pages held, for a read's look without the lock.
    count: AtomicUsize,
    /// Most pages held, set when write-back is turned on.
    limit: AtomicUsize,
    /// Pages claimed by writes on their way in ([`WriteBack::claim`]).
    claimed: AtomicUsize,
    st: Mutex<Pages>,
    /// Writers holding pages of a stripe, and the destage of that stripe, one at a time.
    holds: StripeHolds,
    /// One destage at a time.
    destage: futures::lock::Mutex<()>,
    /// Writes against a switch of mode.
    gate: ModeGate,
}

#[derive(Debug, Default)]
struct Pages {
    /// By the array sector of the page.
    by_sector: BTreeMap<u64, Page>,
    /// (age, sector) of every page held, the oldest first.
    by_age: BTreeSet<(u64, u64)>,
    next_age: u64,
    /// The age below which the next tick takes pages to the members.
    tick_mark: u64,
    last_tick: Option<std::time::Instant>,
    /// Writes are waiting for room (said in the log once per episode).
    full: bool,
}

#[derive(Debug)]
struct Page {
    age: u64,
    buf: SharedBuf,
    _held: Arc<Held>,
}

/// Room claimed for a write's pages until they are held (or the write gives up).
struct Claim<'a> {
    wb: &'a WriteBack,
    n: usize,
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        let was = self.wb.claimed.fetch_sub(self.n, Ordering::AcqRel);
        debug_assert!(was >= self.n, "gives back only what was claimed");
    }
}

/// A write's place in the journal: its units stay ahead of the tail, and the space kept for
/// its pages' parity stays kept, until the last of its pages leaves the cache.
#[derive(Debug)]
struct Held {
    ticket: Ticket,
    journal: Journal,
    reserve: u64,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.journal.unreserve(self.reserve);
    }
}

/// Journal sectors kept per held page for its destage: its row's parity pages (P, and Q on
/// RAID6) and room for a meta block.
pub(crate) fn reserve_per_page(pg: &ParityGeometry) -> u64 {
    let parity = (pg.members - pg.data_members()) as u64;
    (parity + 1) * BLOCK_SECTORS
}

/// The most pages a cache may hold over a ring of `ring` sectors: their pages and the space
/// kept for their parity take half the ring at most, the rest is for destages in flight.
pub(crate) fn limit_pages(pg: &ParityGeometry, ring: u64) -> usize {
    let per_page = BLOCK_SECTORS * 2 + reserve_per_page(pg);
    usize::try_from(ring / 2 / per_page).unwrap_or(usize::MAX)
}

/// The array byte range of stripe `s`'s data.
fn stripe_bytes(pg: &ParityGeometry, s: u64) -> Range<u64> {
    let start = pg.array_sector(s, 0, 0) * SECTOR_SIZE;
    start..start + pg.data_members() as u64 * u64::from(pg.chunk_sectors) * SECTOR_SIZE
}

fn stripe_of(pg: &ParityGeometry, byte: u64) -> u64 {
    pg.locate(byte / SECTOR_SIZE).0
}

/// Runs of consecutive pages (array sector, page) as pieces of one write each.
fn pieces(pages: Vec<(u64, SharedBuf)>) -> Vec<(u64, IoVec)> {
    let mut out: Vec<(u64, IoVec)> = Vec::new();
    let mut next = None;
    for (sector, buf) in pages {
        let slice = buf.slice(0..BLOCK).expect("a held page is only read");
        match out.last_mut() {
            Some((_, iov)) if next == Some(sector) => iov.push(slice),
            _ => {
                let mut iov = IoVec::new();
                iov.push(slice);
                out.push((sector * SECTOR_SIZE, iov));
            }
        }
        next = Some(sector + BLOCK_SECTORS);
    }
    out
}

impl WriteBack {
    /// Whether writes go to the cache.
    pub(crate) fn is_on(&self) -> bool {
        self.on.load(Ordering::Acquire)
    }

    pub(crate) fn mode(&self) -> JournalMode {
        if self.is_on() {
            JournalMode::WriteBack
        } else {
            JournalMode::WriteThrough
        }
    }

    /// Pages held now.
    pub(crate) fn pages(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    /// The most pages held.
    pub(crate) fn limit(&self) -> usize {
        self.limit.load(Ordering::Acquire)
    }

    /// A write's pass: the mode stays as it is while the write runs.
    pub(crate) async fn pass(&self) -> Pass<'_> {
        self.gate.pass().await
    }

    /// Turns write-back on over `journal` for an array of shape `pg`, once the writes in
    /// flight are done.
    pub(crate) async fn turn_on(&self, pg: &ParityGeometry, journal: &Journal) {
        let _switch = self.gate.switch().await;
        self.limit
            .store(limit_pages(pg, journal.ring()).max(1), Ordering::Release);
        self.on.store(true, Ordering::Release);
    }

    /// Turns write-back off once the writes in flight are done: every page held goes to
    /// the members before writes go on (through, past the cache).
    pub(crate) async fn turn_off(&self, host: &impl WriteBackHost) -> Result<()> {
        let _switch = self.gate.switch().await;
        self.on.store(false, Ordering::Release);
        self.drain(host).await
    }

    /// Takes every page held to the members.
    pub(crate) async fn drain(&self, host: &impl WriteBackHost) -> Result<()> {
        while self.pages() > 0 {
            self.destage_oldest(host, None, &|_| true).await?;
        }
        Ok(())
    }

    /// The daemon's tick: pages held since before the last tick a period ago go to the
    /// members.
    pub(crate) async fn tick(&self, host: &impl WriteBackHost) -> Result<()> {
        let mark = {
            let mut st = self.st.lock().expect(crate::POISONED);
            let now = std::time::Instant::now();
            if st.last_tick.is_some_and(|t| now - t < HOLD_PERIOD) {
                return Ok(());
            }
            st.last_tick = Some(now);
            let next = st.next_age;
            std::mem::replace(&mut st.tick_mark, next)
        };
        loop {
            let old = {
                let st = self.st.lock().expect(crate::POISONED);
                st.by_age.first().is_some_and(|(age, _)| *age < mark)
            };
            if !old {
                return Ok(());
            }
            self.destage_oldest(host, Some(mark), &|_| true).await?;
        }
    }

    /// Takes a write into the cache: its pages logged and held; returns once they are
    /// written to the journal (durable at the next flush). A longer write goes in pieces
    /// of at most a quarter of the cache.
    pub(crate) async fn write(
        &self,
        host: &impl WriteBackHost,
        journal: &Journal,
        offset: u64,
        iov: IoVec,
    ) -> Result<()> {
        let req = Req::new(iov);
        let end = offset + req.len() as u64;
        let page = BLOCK as u64;
        let piece = PIECE_PAGES.min(self.limit() as u64 / 4).max(1) * page;
        let mut at = offset / page * page;
        while at < end {
            let to = (at + piece).min(end.div_ceil(page) * page);
            self.write_piece(host, journal, (offset, &req), at..to)
                .await?;
            at = to;
        }
        Ok(())
    }

    /// Takes the pages `pages` (array bytes, whole pages) of a write (`req` at `offset`).
    async fn write_piece(
        &self,
        host: &impl WriteBackHost,
        journal: &Journal,
        (offset, req): (u64, &Req),
        pages: Range<u64>,
    ) -> Result<()> {
        let pg = host.parity_shape();
        let n = (pages.end - pages.start) / BLOCK as u64;
        let reserve = reserve_per_page(pg) * n;
        let (first, last) = (stripe_of(pg, pages.start), stripe_of(pg, pages.end - 1));
        let mut stuck = 0;
        loop {
            let claim = self.claim(host, n as usize).await?;
            let lock = self.holds.hold(first..=last).await;
            let bufs = self.new_pages(host, (offset, req), pages.clone()).await?;
            let rows = bufs
                .iter()
                .map(|(sector, b)| JournalRow {
                    data: smallvec::smallvec![(*sector, b.slice(0..BLOCK).expect("fresh"))],
                    parity: None,
                })
                .collect();
            let Some(ticket) = journal.try_append_cached(rows, reserve)? else {
                drop((lock, claim));
                stuck = self.free_room(host, journal, stuck).await?;
                continue;
            };
            // Held at once, in log order (under the stripe's lock): a destage of the stripe
            // waits for the lock, and its parity is logged after this unit in any case.
            let held = Arc::new(Held {
                ticket,
                journal: journal.clone(),
                reserve,
            });
            let replaced = self.hold(held.clone(), bufs);
            drop(claim);
            let r = held.ticket.written(journal, host).await;
            // The pages this write replaced keep their units ahead of the tail until its own
            // unit is written: recovery must find one or the other.
            drop(replaced);
            drop(lock);
            return r;
        }
    }

    /// The new contents of `pages`: the write's bytes, over what a reader sees now where it
    /// writes part of a page.
    async fn new_pages(
        &self,
        host: &impl WriteBackHost,
        (offset, req): (u64, &Req),
        pages: Range<u64>,
    ) -> Result<Vec<(u64, SharedBuf)>> {
        let end = offset + req.len() as u64;
        let mut out = Vec::with_capacity(((pages.end - pages.start) / BLOCK as u64) as usize);
        for p in (pages.start..pages.end).step_by(BLOCK) {
            let (lo, hi) = (p.max(offset), (p + BLOCK as u64).min(end));
            let mut buf = if lo == p && hi == p + BLOCK as u64 {
                AlignedBuf::for_overwrite(BLOCK)
            } else {
                host.read_bytes(p, BLOCK).await?
            };
            let bytes = req.bytes((lo - offset) as usize..(hi - offset) as usize);
            buf[(lo - p) as usize..(hi - p) as usize].copy_from_slice(&bytes);
            out.push((p / SECTOR_SIZE, SharedBuf::new(buf)));
        }
        Ok(out)
    }

    /// Holds a write's pages, each in place of an older one of the same page; returns the
    /// older ones (their writes' units may leave the log once they are dropped).
    #[must_use = "a replaced page's unit must stay in the log until the new one is written"]
    fn hold(&self, held: Arc<Held>, bufs: Vec<(u64, SharedBuf)>) -> Vec<Page> {
        let mut gone = Vec::new();
        let mut st = self.st.lock().expect(crate::POISONED);
        let age = st.next_age;
        st.next_age += 1;
        for (sector, buf) in bufs {
            let page = Page {
                age,
                buf,
                _held: held.clone(),
            };
            match st.by_sector.insert(sector, page) {
                Some(old) => {
                    st.by_age.remove(&(old.age, sector));
                    gone.push(old);
                }
                None => {
                    self.count.fetch_add(1, Ordering::AcqRel);
                }
            }
            st.by_age.insert((age, sector));
        }
        debug_assert_eq!(
            st.by_sector.len(),
            st.by_age.len(),
            "every page held has its age"
        );
        drop(st);
        gone
    }

    /// Claims room for `n` more pages, taking the oldest to the members until they fit:
    /// pages held and claimed by writes on their way in stay within the limit (a write
    /// into an empty cache goes in whatever its size).
    async fn claim(&self, host: &impl WriteBackHost, n: usize) -> Result<Claim<'_>> {
        let over = |wb: &WriteBack| {
            let held = wb.pages();
            held > 0 && held + wb.claimed.load(Ordering::Acquire) + n > wb.limit()
        };
        loop {
            let claimed = self.claimed.load(Ordering::Acquire);
            if !over(self) {
                let to = claimed + n;
                if self
                    .claimed
                    .compare_exchange(claimed, to, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    self.st.lock().expect(crate::POISONED).full = false;
                    return Ok(Claim { wb: self, n });
                }
                continue;
            }
            let first = {
                let mut st = self.st.lock().expect(crate::POISONED);
                !std::mem::replace(&mut st.full, true)
            };
            if first {
                tracing::info!(
                    array = %host.name(),
                    pages = self.pages(),
                    "write-back cache full: writes wait while its oldest pages go to the members"
                );
            }
            self.destage_oldest(host, None, &over).await?;
        }
    }

    /// Frees ring space for a write that found none: reclaim, or else the cache's oldest
    /// pages to the members (their units then let reclaim pass). `stuck`: how many times
    /// in a row neither freed anything; an error past a bound (the ring holds nothing the
    /// cache could free: a journal too small for the writes in flight).
    async fn free_room(
        &self,
        host: &impl WriteBackHost,
        journal: &Journal,
        stuck: u32,
    ) -> Result<u32> {
        if journal.reclaim(host).await? {
            return Ok(0);
        }
        if self.pages() > 0 {
            self.destage_oldest(host, None, &|_| true).await?;
            return Ok(0);
        }
        // Nothing held and nothing to pass: the room came back meanwhile (another destage
        // reclaimed it), or the ring is too small for what is in flight.
        if stuck >= 1000 {
            return Err(Error::new(
                ErrorKind::Io,
                format!(
                    "{}: the write journal has no room for the write-back cache's writes",
                    host.name()
                ),
            ));
        }
        Ok(stuck + 1)
    }

    /// Takes the stripes of the oldest pages (older than `before`, where given) to the
    /// members, if `still(self)` once this destage's turn comes; then lets reclaim pass
    /// what they held.
    async fn destage_oldest(
        &self,
        host: &impl WriteBackHost,
        before: Option<u64>,
        still: &dyn Fn(&WriteBack) -> bool,
    ) -> Result<()> {
        let _one = self.destage.lock().await;
        if !still(self) {
            return Ok(());
        }
        let pg = host.parity_shape();
        let stripes: Vec<u64> = {
            let st = self.st.lock().expect(crate::POISONED);
            let mut stripes = BTreeSet::new();
            for (age, sector) in &st.by_age {
                if stripes.len() == DESTAGE_STRIPES || before.is_some_and(|b| *age >= b) {
                    break;
                }
                stripes.insert(pg.locate(*sector).0);
            }
            stripes.into_iter().collect()
        };
        if stripes.is_empty() {
            return Ok(());
        }
        let done = futures::future::join_all(stripes.iter().map(|&s| async move {
            let _hold = self.holds.hold(s..=s).await;
            self.destage_stripe(host, s).await
        }));
        done.await.into_iter().collect::<Result<()>>()?;
        if let Some(journal) = host.journal() {
            journal.reclaim(host).await?;
        }
        Ok(())
    }

    /// Writes every page held in stripe `s` to the members as one batch, then lets them go.
    /// The caller holds the stripe's lock: no page of it changes meanwhile.
    async fn destage_stripe(&self, host: &impl WriteBackHost, s: u64) -> Result<()> {
        let span = stripe_bytes(host.parity_shape(), s);
        let sectors = span.start / SECTOR_SIZE..span.end / SECTOR_SIZE;
        let pages: Vec<(u64, SharedBuf)> = {
            let st = self.st.lock().expect(crate::POISONED);
            st.by_sector
                .range(sectors.clone())
                .map(|(sector, p)| (*sector, p.buf.clone()))
                .collect()
        };
        if pages.is_empty() {
            return Ok(());
        }
        host.write_stripe(s, pieces(pages)).await?;
        let gone: Vec<Page> = {
            let mut st = self.st.lock().expect(crate::POISONED);
            let keys: Vec<u64> = st.by_sector.range(sectors).map(|(k, _)| *k).collect();
            let gone: Vec<Page> = keys
                .into_iter()
                .filter_map(|k| {
                    let p = st.by_sector.remove(&k)?;
                    st.by_age.remove(&(p.age, k));
                    Some(p)
                })
                .collect();
            self.count.fetch_sub(gone.len(), Ordering::AcqRel);
            gone
        };
        drop(gone);
        Ok(())
    }

    /// A flush where the cache takes writes or holds pages: the journal's flush makes every
    /// write it acknowledged durable (`None`: the members' flush does).
    pub(crate) async fn flush(&self, host: &impl WriteBackHost) -> Option<Result<()>> {
        if !self.is_on() && self.pages() == 0 {
            return None;
        }
        Some(match host.journal() {
            Some(journal) => journal.flush(host).await,
            // A failed journal's pages all on the members: their flush makes them durable.
            None if self.pages() == 0 => return None,
            None => Err(Error::new(
                ErrorKind::ReadOnly,
                format!(
                    "{}: the write journal failed: writes the write-back cache acknowledged \
                     are in memory only until they reach the members",
                    host.name()
                ),
            )),
        })
    }

    /// The pages held over array bytes `[offset, offset + len)`, taken before a read goes to
    /// the members (`None`: none).
    pub(crate) fn snapshot(&self, offset: u64, len: u64) -> Option<Vec<(u64, SharedBuf)>> {
        if self.pages() == 0 {
            return None;
        }
        let first = offset / BLOCK as u64 * BLOCK as u64 / SECTOR_SIZE;
        let end = (offset + len).div_ceil(SECTOR_SIZE);
        let st = self.st.lock().expect(crate::POISONED);
        let held: Vec<(u64, SharedBuf)> = st
            .by_sector
            .range(first..end)
            .map(|(s, p)| (*s, p.buf.clone()))
            .collect();
        (!held.is_empty()).then_some(held)
    }
}

/// Copies held pages (a [`WriteBack::snapshot`]) over what a read of `[offset, ..)` got
/// from the members.
pub(crate) fn overlay(held: &[(u64, SharedBuf)], offset: u64, iov: IoVecMut) -> IoVecMut {
    let end = offset + iov.iter().map(|w| w.len() as u64).sum::<u64>();
    let mut req = ReqMut::new(iov);
    for (sector, buf) in held {
        let p = sector * SECTOR_SIZE;
        let (lo, hi) = (p.max(offset), (p + BLOCK as u64).min(end));
        if lo < hi {
            buf.with(|b| {
                req.fill(
                    (lo - offset) as usize..(hi - offset) as usize,
                    &b[(lo - p) as usize..(hi - p) as usize],
                )
            });
        }
    }
    req.into_iov()
}

#[cfg(test)]
mod tests {
    use super::*;
    use raidd_layout::{Geometry, Level, ParityLayout};

    fn raid6() -> ParityGeometry {
        let g = Geometry::parity(Level::Raid6, 5, ParityLayout::LeftSymmetric, 128, 8192)
            .expect("a geometry");
        g.as_parity().expect("parity").clone()
    }

    #[test]
    fn held_pages_and_their_parity_take_half_the_ring_at_most() {
        let pg = raid6();
        assert_eq!(reserve_per_page(&pg), 24, "P, Q and a meta block");
        let ring = 1 << 19; // 256 MiB
        let n = limit_pages(&pg, ring) as u64;
        assert!(n * (2 * BLOCK_SECTORS + reserve_per_page(&pg)) <= ring / 2);
        assert!(n > 0);
    }

    #[test]
    fn consecutive_pages_are_one_piece() {
        let page = |s: u64| (s, SharedBuf::new(AlignedBuf::zeroed(BLOCK)));
        let p = pieces(vec![page(8), page(16), page(32), page(40), page(48)]);
        let shape: Vec<(u64, usize)> = p.iter().map(|(o, iov)| (*o, iov.len())).collect();
        assert_eq!(shape, vec![(8 * 512, 2), (32 * 512, 3)]);
    }

    #[test]
    fn a_stripe_is_its_data_chunks_in_array_bytes() {
        let pg = raid6();
        let chunk = 128 * 512;
        assert_eq!(stripe_bytes(&pg, 0), 0..3 * chunk);
        assert_eq!(stripe_bytes(&pg, 2), 6 * chunk..9 * chunk);
        assert_eq!(stripe_of(&pg, 3 * chunk - 1), 0);
        assert_eq!(stripe_of(&pg, 3 * chunk), 1);
    }
}
