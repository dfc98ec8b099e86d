//! The write journal at work (md's raid5-cache in write-through mode; its bytes are
//! `raidd_md::journal`): every stripe write of an array with a journal logs its new data
//! pages and its new parity to the journal member, durably, before any of it goes to the
//! slots; recovery then rewrites from the log whatever an unclean stop left half done.
//!
//! The log is a ring of units in the journal member's data area. A batch's rows become one
//! or more units, appended at the head under one lock ([`Journal::append`]) so that units
//! take ring positions and sequence numbers in one order. A batch goes on to the slots
//! when its units are on the journal *and every unit before them is* ([`Ticket::durable`]):
//! recovery reads units from the tail only while each is whole and next in sequence, so an
//! acknowledged write must never sit behind a torn unit. A unit whose batch was dropped
//! before writing it is written by the first later batch that needs it.
//!
//! Space comes back by reclaim ([`Journal::reclaim`], md's `r5l_do_reclaim`): once the
//! oldest units' batches have written the slots, the slots are flushed and the superblock's
//! `journal_tail` moves past them.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures::future::LocalBoxFuture;
use raidd_md::journal::{page_checksum, MetaBlock, Payload, BLOCK, BLOCK_SECTORS};
use raidd_rt::{AlignedBuf, BufSlice, IoVec, SharedBuf};
use smallvec::SmallVec;

use super::journal_replay::JournalRecovered;
use super::journal_slot::RingPlace;
use super::latch::Latch;
use super::member_io::Owner;
use crate::error::{Error, ErrorKind, Result};

/// What the journal needs of its array beyond member I/O: the slots flushed before the
/// tail moves, the tail recorded, and the journal failed.
pub(crate) trait JournalHost: Owner {
    /// Flushes every slot that takes writes (failing one whose flush fails).
    fn flush_slots(&self) -> LocalBoxFuture<'_, ()>;
    /// Records the log's tail in the journal member's superblock; an error when the
    /// journal failed.
    fn journal_tail(&self, tail: u64) -> LocalBoxFuture<'_, Result<()>>;
    /// The journal member failed an I/O: the array turns read-only.
    fn fail_journal<'a>(
        &'a self,
        member: &'a Arc<dyn crate::member::Member>,
        why: &'a std::io::Error,
    ) -> LocalBoxFuture<'a, ()>;
}

/// One 4 KiB row of a stripe that a batch writes (md's stripe head): the new data pages,
/// each at its array sector, and the row's new parity (P, then Q on RAID6) at its member
/// sector, where the stripe has parity to write.
#[derive(Debug, Default)]
pub(crate) struct JournalRow {
    pub(crate) data: SmallVec<[(u64, BufSlice); 4]>,
    pub(crate) parity: Option<(u64, SmallVec<[BufSlice; 2]>)>,
}

/// The array's journal: where its log lies, as assembly found it (`None`: no journal
/// member), and the journal in the write path once started (`start.rs`).
#[derive(Debug)]
pub(crate) struct JournalLog {
    place: Option<RingPlace>,
    live: std::sync::RwLock<Option<Journal>>,
}

impl JournalLog {
    pub(crate) fn new(place: Option<RingPlace>) -> JournalLog {
        JournalLog {
            place,
            live: std::sync::RwLock::new(None),
        }
    }

    pub(crate) fn place(&self) -> Option<RingPlace> {
        self.place
    }

    /// The journal, once started.
    pub(crate) fn live(&self) -> Option<Journal> {
        self.live.read().expect(crate::POISONED).clone()
    }

    /// Puts the started journal in the write path.
    pub(crate) fn start(&self, j: Journal) {
        *self.live.write().expect(crate::POISONED) = Some(j);
    }
}

/// Sectors of log one stripe's batch may take at most: every 4 KiB row of the chunk with a
/// page per member (data and parity), and the meta blocks that name them.
pub(crate) fn stripe_log_sectors(pg: &raidd_layout::ParityGeometry) -> u64 {
    let rows = u64::from(pg.chunk_sectors).div_ceil(BLOCK_SECTORS);
    let members = pg.members as u64;
    let k = pg.data_members() as u64;
    // A data payload's descriptor is 20 bytes, a parity payload's 16 + 4 per page.
    let per_row = 20 * k + 16 + 4 * (members - k);
    let metas = (rows * per_row).div_ceil(BLOCK as u64 - 64) + 1;
    (rows * members + metas) * BLOCK_SECTORS
}

/// The array's write journal. Clones share it.
#[derive(Debug, Clone)]
pub(crate) struct Journal {
    sh: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    uuid_sum: u32,
    data_at: u64,
    ring: u64,
    st: Mutex<State>,
    /// One reclaim at a time.
    reclaim: futures::lock::Mutex<()>,
    /// What the start replayed.
    recovered: Mutex<Option<JournalRecovered>>,
}

#[derive(Debug)]
struct State {
    seq: u64,
    head: u64,
    tail: u64,
    /// Units ahead of the tail, oldest first.
    units: VecDeque<Arc<Unit>>,
    /// Sectors kept free for the parity of pages the write-back cache holds
    /// (`write_back.rs`): only the writes that take those pages to the slots may use them.
    reserved: u64,
}

#[derive(Debug)]
struct Unit {
    position: u64,
    /// The meta block and its pages (windows on the batch's buffers, lent, not copied),
    /// until somebody writes them.
    bytes: Mutex<Option<IoVec>>,
    /// The unit before it, until this one is written.
    prev: Mutex<Option<Arc<Unit>>>,
    /// It and every unit before it are written to the journal (or one of them failed:
    /// `ok`); durable once the journal member is flushed after.
    written: Latch,
    ok: AtomicBool,
    /// Its batch is done with the slots (or gone): reclaim may pass it.
    done: Latch,
    /// Its pages wait in the write-back cache: reclaim does not wait for it (the cache
    /// writes them to the slots when it needs room).
    cached: bool,
}

/// A unit being built: its meta block (placed when the unit takes its place at the head)
/// and the pages its payloads name.
struct Draft {
    meta: MetaBlock,
    pages: Vec<BufSlice>,
}

impl Default for Draft {
    fn default() -> Draft {
        Draft {
            meta: MetaBlock::empty(0, 0),
            pages: Vec::new(),
        }
    }
}

impl Draft {
    fn sectors(&self) -> u64 {
        debug_assert_eq!(
            self.pages.len() as u64,
            self.meta.pages(),
            "a page for each the payloads name"
        );
        self.meta.sectors()
    }
}

impl Journal {
    pub(crate) fn new(uuid: &[u8; 16], place: RingPlace) -> Journal {
        assert!(
            place.ring.is_multiple_of(BLOCK_SECTORS)
                && place.head < place.ring
                && place.tail < place.ring,
            "a ring of whole blocks, head and tail inside it"
        );
        Journal {
            sh: Arc::new(Shared {
                uuid_sum: raidd_md::journal::uuid_checksum(uuid),
                data_at: place.data_at,
                ring: place.ring,
                st: Mutex::new(State {
                    seq: place.seq,
                    head: place.head,
                    tail: place.tail,
                    units: VecDeque::new(),
                    reserved: 0,
                }),
                reclaim: futures::lock::Mutex::new(()),
                recovered: Mutex::new(None),
            }),
        }
    }

    /// Whole stripes one run may write at once: a run logs all of them before its member
    /// writes, and must leave room in the ring for the writes around it (a quarter of the
    /// ring at most).
    pub(crate) fn run_limit(&self, pg: &raidd_layout::ParityGeometry) -> usize {
        usize::try_from((self.sh.ring / 4 / stripe_log_sectors(pg)).max(1)).unwrap_or(usize::MAX)
    }

    fn add(&self, at: u64, sectors: u64) -> u64 {
        (at + sectors) % self.sh.ring
    }

    /// Sectors in use between the tail and the head.
    fn used(&self, st: &State) -> u64 {
        (st.head + self.sh.ring - st.tail) % self.sh.ring
    }

    /// Splits rows into units: a row's payloads stay in one unit (its data with its
    /// parity, as md logs a stripe), a unit takes what one meta block describes.
    fn drafts(&self, rows: Vec<JournalRow>) -> Vec<Draft> {
        let mut drafts: Vec<Draft> = vec![Draft::default()];
        let sum = self.sh.uuid_sum;
        for row in rows {
            let mut payloads: SmallVec<[Payload; 6]> = SmallVec::new();
            let mut pages: SmallVec<[BufSlice; 6]> = SmallVec::new();
            for (location, page) in row.data {
                debug_assert_eq!(page.len(), BLOCK, "a data payload is one page");
                payloads.push(Payload::Data {
                    flags: 0,
                    location,
                    checksum: page_checksum(sum, page.as_slice()),
                });
                pages.push(page);
            }
            if let Some((location, parity)) = row.parity {
                payloads.push(Payload::Parity {
                    flags: 0,
                    location,
                    checksums: parity
                        .iter()
                        .map(|p| page_checksum(sum, p.as_slice()))
                        .collect(),
                });
                pages.extend(parity);
            }
            let len: usize = payloads.iter().map(Payload::descriptor_len).sum();
            if !drafts.last().expect("one at least").meta.fits(len) {
                drafts.push(Draft::default());
            }
            let d = drafts.last_mut().expect("one at least");
            d.meta.payloads.extend(payloads);
            d.pages.extend(pages);
        }
        drafts.retain(|d| !d.meta.payloads.is_empty());
        drafts
    }

    /// Takes ring space for a batch's rows, in order after every unit appended before;
    /// waits for reclaim where the ring is full. The ticket says when they are durable and
    /// must be released once the batch is done with the slots.
    ///
    /// A `destage` (the write-back cache taking its pages to the slots) may use the space
    /// its pages kept, and always finds room there; any other batch leaves it alone (it
    /// runs only in write-through mode, when the cache holds nothing).
    pub(crate) async fn append(
        &self,
        host: &impl JournalHost,
        rows: Vec<JournalRow>,
        destage: bool,
    ) -> Result<Ticket> {
        let drafts = self.drafts(rows);
        self.check_fits(&drafts, 0)?;
        let mut drafts = Some(drafts);
        loop {
            if let Some(t) = self.take_room(&mut drafts, 0, false, destage)? {
                return Ok(t);
            }
            if !self.reclaim(host).await? {
                debug_assert!(
                    false,
                    "only the cache's units stop reclaim, and they kept room"
                );
                return Err(Error::new(
                    ErrorKind::Io,
                    "the write journal has no room: the write-back cache holds the rest"
                        .to_string(),
                ));
            }
        }
    }

    /// Appends the data pages of a write the write-back cache takes (`rows` without parity)
    /// where the ring has room for them and for `reserve` more sectors kept for their
    /// parity, past what is kept already; `None`, with nothing taken, where it has not (the
    /// caller frees room: reclaim, or the cache's oldest pages to the slots).
    pub(crate) fn try_append_cached(
        &self,
        rows: Vec<JournalRow>,
        reserve: u64,
    ) -> Result<Option<Ticket>> {
        debug_assert!(
            rows.iter().all(|r| r.parity.is_none()),
            "the cache logs data alone"
        );
        let drafts = self.drafts(rows);
        self.check_fits(&drafts, reserve)?;
        self.take_room(&mut Some(drafts), reserve, true, false)
    }

    /// An error where `drafts` and `reserve` could never fit, however empty the ring.
    fn check_fits(&self, drafts: &[Draft], reserve: u64) -> Result<()> {
        let need: u64 = drafts.iter().map(Draft::sectors).sum::<u64>() + reserve;
        if need + BLOCK_SECTORS > self.sh.ring {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "a write of {} KiB of log is more than the write journal holds ({} KiB)",
                    need / 2,
                    self.sh.ring / 2
                ),
            ));
        }
        Ok(())
    }

    /// Places `drafts` at the head if the ring has room (past the reserved space unless
    /// `use_reserved`), keeping `reserve` more; takes them only then.
    fn take_room(
        &self,
        drafts: &mut Option<Vec<Draft>>,
        reserve: u64,
        cached: bool,
        use_reserved: bool,
    ) -> Result<Option<Ticket>> {
        let need: u64 = drafts.iter().flatten().map(Draft::sectors).sum();
        let mut st = self.sh.st.lock().expect(crate::POISONED);
        let kept = if use_reserved { 0 } else { st.reserved };
        if self.used(&st) + need + kept + reserve + BLOCK_SECTORS > self.sh.ring {
            return Ok(None);
        }
        st.reserved += reserve;
        let units = drafts
            .take()
            .into_iter()
            .flatten()
            .map(|d| self.unit_at_head(&mut st, d, cached))
            .collect::<Result<_>>()?;
        Ok(Some(Ticket {
            units,
            released: false,
        }))
    }

    /// Gives back sectors kept for the parity of cached pages (they went to the slots, or a
    /// newer write took their place).
    pub(crate) fn unreserve(&self, sectors: u64) {
        let mut st = self.sh.st.lock().expect(crate::POISONED);
        assert!(st.reserved >= sectors, "gives back only what was kept");
        st.reserved -= sectors;
    }

    /// The ring's size in sectors.
    pub(crate) fn ring(&self) -> u64 {
        self.sh.ring
    }

    /// The next unit at the head: its meta block, checksummed, and its pages.
    fn unit_at_head(&self, st: &mut State, mut d: Draft, cached: bool) -> Result<Arc<Unit>> {
        d.meta.seq = st.seq;
        d.meta.position = st.head;
        let mut block = AlignedBuf::for_overwrite(BLOCK);
        d.meta
            .encode_into(self.sh.uuid_sum, &mut block)
            .map_err(|e| Error::new(ErrorKind::Io, format!("journal meta block: {e}")))?;
        let mut buf = IoVec::new();
        buf.push(SharedBuf::new(block).slice(0..BLOCK).expect("fresh"));
        buf.extend(d.pages);
        let unit = Arc::new(Unit {
            position: st.head,
            bytes: Mutex::new(Some(buf)),
            prev: Mutex::new(st.units.back().cloned()),
            written: Latch::default(),
            ok: AtomicBool::new(false),
            done: Latch::default(),
            cached,
        });
        st.head = self.add(st.head, d.meta.sectors());
        st.seq = st.seq.wrapping_add(1);
        debug_assert!(
            self.used(st) + BLOCK_SECTORS <= self.sh.ring,
            "the head never runs into the tail"
        );
        st.units.push_back(unit.clone());
        Ok(unit)
    }

    /// Frees ring space: waits for the oldest unit's batch to be done with the slots, then
    /// flushes the slots and moves the tail past every unit done, in the journal member's
    /// superblock. Whether it freed any: it does not wait for a unit whose pages the
    /// write-back cache holds (the cache takes them to the slots first). An error when the
    /// journal fails (the array is read-only then).
    pub(crate) async fn reclaim(&self, host: &impl JournalHost) -> Result<bool> {
        let _one = self.sh.reclaim.lock().await;
        loop {
            let (front, passed, tail) = {
                let st = self.sh.st.lock().expect(crate::POISONED);
                let passed = st
                    .units
                    .iter()
                    .take_while(|u| u.done.is_set() && u.written.is_set())
                    .count();
                let front = st.units.get(passed).cloned();
                let tail = front.as_ref().map_or(st.head, |u| u.position);
                (front, passed, tail)
            };
            if passed == 0 {
                match front {
                    Some(u) if u.cached && !u.done.is_set() => return Ok(false),
                    Some(u) => {
                        // A unit nobody wrote (its batch dropped early) is written now.
                        self.settle(host, &u).await;
                        u.done.wait().await;
                        continue;
                    }
                    None => return Ok(false),
                }
            }
            host.flush_slots().await;
            host.journal_tail(tail).await?;
            let mut st = self.sh.st.lock().expect(crate::POISONED);
            debug_assert!(
                st.units.iter().take(passed).all(|u| u.done.is_set()),
                "the tail passes only units done with the slots"
            );
            st.units.drain(..passed);
            st.tail = tail;
            return Ok(true);
        }
    }

    /// Writes `unit` where its batch never did, after every unit before it; whether all of
    /// them reached the journal (written, not yet flushed).
    async fn settle(&self, host: &impl JournalHost, unit: &Arc<Unit>) -> bool {
        let mine = unit.bytes.lock().expect(crate::POISONED).take();
        let Some(bytes) = mine else {
            unit.written.wait().await;
            return unit.ok.load(Ordering::Acquire);
        };
        let wrote = self.write(host, unit.position, bytes).await;
        let prev = unit.prev.lock().expect(crate::POISONED).take();
        let before = match prev {
            Some(p) => Box::pin(self.settle(host, &p)).await,
            None => true,
        };
        unit.ok.store(wrote && before, Ordering::Release);
        unit.written.set();
        wrote && before
    }

    /// Writes a unit's blocks at `position` (in two pieces where it wraps the ring); on
    /// error the journal fails.
    async fn write(&self, host: &impl JournalHost, position: u64, mut blocks: IoVec) -> bool {
        let Some(member) = host.slots().journal_member() else {
            return false;
        };
        debug_assert!(
            blocks.iter().all(|b| b.len() == BLOCK),
            "a unit is whole blocks"
        );
        let room = ((self.sh.ring - position) / BLOCK_SECTORS) as usize;
        let r = if blocks.len() <= room {
            member.write(self.sh.data_at + position * 512, blocks).await
        } else {
            let rest: IoVec = blocks.drain(room..).collect();
            match member.write(self.sh.data_at + position * 512, blocks).await {
                Ok(()) => member.write(self.sh.data_at, rest).await,
                Err(e) => Err(e),
            }
        };
        match r {
            Ok(()) => true,
            Err(e) => {
                host.fail_journal(&member, &e).await;
                false
            }
        }
    }

    /// Makes every unit written so far durable (a flush of the journal member); on error
    /// the journal fails.
    pub(crate) async fn flush(&self, host: &impl JournalHost) -> Result<()> {
        let Some(member) = host.slots().journal_member() else {
            return Err(failed());
        };
        match member.flush().await {
            Ok(()) => Ok(()),
            Err(e) => {
                host.fail_journal(&member, &e).await;
                Err(failed())
            }
        }
    }

    /// Where the log lies and stands now.
    pub(crate) fn place(&self) -> RingPlace {
        let st = self.sh.st.lock().expect(crate::POISONED);
        RingPlace {
            data_at: self.sh.data_at,
            ring: self.sh.ring,
            head: st.head,
            seq: st.seq,
            tail: st.tail,
        }
    }

    /// Records what the start replayed.
    pub(crate) fn set_recovered(&self, r: JournalRecovered) {
        *self.sh.recovered.lock().expect(crate::POISONED) = Some(r);
    }

    pub(crate) fn recovered(&self) -> Option<JournalRecovered> {
        *self.sh.recovered.lock().expect(crate::POISONED)
    }

    /// Starts the log where recovery left it: units go on at `head` with `seq`; the tail
    /// is what the superblock says now. Nothing may be in flight.
    pub(crate) fn restart(&self, head: u64, seq: u64, tail: u64) {
        let mut st = self.sh.st.lock().expect(crate::POISONED);
        assert!(
            st.units.is_empty(),
            "the log restarts with nothing in flight"
        );
        assert!(
            head < self.sh.ring && tail < self.sh.ring,
            "inside the ring"
        );
        st.head = head;
        st.seq = seq;
        st.tail = tail;
    }
}

/// The error of a write the journal could not take: it failed, the array is read-only.
fn failed() -> Error {
    Error::new(
        ErrorKind::ReadOnly,
        "the write journal failed: the array takes no more writes".to_string(),
    )
}

/// A batch's units in the journal.
#[derive(Debug)]
pub(crate) struct Ticket {
    units: SmallVec<[Arc<Unit>; 1]>,
    released: bool,
}

impl Ticket {
    /// Returns once the batch's units and every unit before them are on the journal and
    /// flushed: the batch may then write the slots. An error when the journal failed on the
    /// way (the batch must not write the slots: nothing would recover a torn stripe).
    pub(crate) async fn durable(&self, journal: &Journal, host: &impl JournalHost) -> Result<()> {
        self.written(journal, host).await?;
        journal.flush(host).await
    }

    /// Returns once the batch's units and every unit before them are written to the
    /// journal (not yet flushed: a write the write-back cache acknowledges, made durable by
    /// the next flush).
    pub(crate) async fn written(&self, journal: &Journal, host: &impl JournalHost) -> Result<()> {
        let all = futures::future::join_all(self.units.iter().map(|u| journal.settle(host, u)))
            .await
            .into_iter()
            .all(|ok| ok);
        if all {
            Ok(())
        } else {
            Err(failed())
        }
    }

    /// The batch is done with the slots: reclaim may pass its units.
    pub(crate) fn release(mut self) {
        self.released = true;
        for u in &self.units {
            u.done.set();
        }
    }
}

impl Drop for Ticket {
    /// A batch dropped (its request cancelled) is done with the slots too; a unit it never
    /// wrote is written by the next batch that needs it (`settle`).
    fn drop(&mut self) {
        if !self.released {
            for u in &self.units {
                u.done.set();
            }
        }
    }
}
