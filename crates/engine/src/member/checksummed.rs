//! A member whose data blocks carry checksum tags (`raidd_md::tags`): every read of its data
//! area is verified block by block, and every write sets the tags of the blocks it writes.
//! A block that does not match its tag fails its read with `EBADMSG`, a medium error: the
//! array keeps the member, rebuilds the block from redundancy, returns the right bytes and
//! rewrites it here (md's read error correction, `array/correct.rs`), as dm-integrity turns
//! corruption into a read error under md. So the array needs no knowledge of tags on its
//! paths, and which of two mirror copies is right is decided by the copies' own tags.
//!
//! It sits right above the array's member (a device, or the DMA-aligned buffer in front of
//! one, whose held blocks it then verifies as they are served). I/O outside the data area (superblock, bitmap, PPL) passes through.
//! Offsets and lengths in the data area are whole 4 KiB blocks: the member says its block
//! size is 4096, and a checksummed array presents 4 KiB logical blocks to its clients.
//!
//! Tags live in a bounded [`TagCache`]; dirty pages reach the member when the member is
//! flushed (before the flush of the device completes) or when the cache makes room. All I/O
//! of the tag area (pages and header) is serialized by one lock, so a page is never read
//! from the member while a newer copy of it is on its way there.
//!
//! The header says clean only while every tag on the member matches its block: the array
//! marks it clean when it marks its superblocks clean ([`ChecksummedMember::close`], at a
//! stop and in md's safe mode), and no write sets a tag before the header says dirty again,
//! durably. Tags a crash may have left behind their blocks are then never trusted: [`open`]
//! makes them suspect ([`Suspect`]), a read there that does not match takes the data's tag
//! instead of reporting it, and the array re-derives them in the background
//! ([`ChecksummedMember::rederive_step`]) while it serves, so a crash causes no false
//! checksum errors. After a crash of raidd itself (the header dirty at the array's event
//! count) only the regions the write-intent bitmap marks stay suspect
//! ([`ChecksummedMember::narrow`]): every other region's writes ended, and their tags
//! reached the member at the flush before the bitmap let go of them.
//!
//! A read that races a write of the same block may see the old or the new bytes: while a
//! write is in flight its blocks' old tags are accepted too, and a mismatch seen while a
//! write of this member started during the read is read again before it is reported.

use std::fmt;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use raidd_md::tags::{self, Algorithm, Geometry, Header, TagError, BLOCK, NO_TAG, PAGE};
use raidd_rt::buf::BufSlice;
use raidd_rt::{IoVec, IoVecMut};
use smallvec::SmallVec;

use super::contract::TagFacts;
use super::contract::{
    read_bytes, write_bytes, ChecksumCounts, Checksums, DabCounts, KnownBad, Member, MemberFuture,
    MemberInfo,
};
use super::suspect::Suspect;
use crate::tags::{PageId, TagCache};

/// How often a read whose mismatch may be a racing write's is read again before it counts.
const RETRIES: usize = 4;

/// Bad blocks remembered until rewritten, so that each is counted once however often it is
/// read meanwhile (the array's correction reads it again); past this many, every report
/// counts.
const REMEMBERED: usize = 4096;

/// Bytes read at a time when tags are built or re-derived from a member's data.
const BUILD_CHUNK: usize = 1 << 20;

/// What a member's checksums did, for reports.
#[derive(Debug, Default)]
pub struct ChecksumCounters {
    /// Blocks read and found to match their tags.
    verified: AtomicU64,
    /// Blocks read that did not match (each counted once per read that reported it).
    mismatches: AtomicU64,
    pages_read: AtomicU64,
    pages_written: AtomicU64,
}

/// How the tags were found at [`open`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Opened {
    /// Written at a clean stop at the array's event count: used as they are.
    Trusted,
    /// Not known to match the data, for the reason given (a crash, the kernel wrote to the
    /// array, a header missing or damaged): suspect until re-derived.
    Untrusted(String),
}

/// What the tag header on the member says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OnDisk {
    /// Every tag on the member matches its block: no tag may change before it says dirty.
    Clean,
    Dirty,
    /// This member has no header yet (it has just joined the array): as for a clean one, a
    /// dirty header goes out before any tag.
    Missing,
}

/// One write in flight: its first block, the tags its blocks had, and its number.
#[derive(Debug)]
struct Writing {
    first: u64,
    old: SmallVec<[u32; 8]>,
    seq: u64,
}

#[derive(Debug)]
struct State {
    cache: TagCache,
    writing: Vec<Writing>,
    /// Blocks reported bad and not written since.
    bad: std::collections::BTreeSet<u64>,
    /// Blocks whose tags are not known to match their data yet.
    suspect: Suspect,
    /// Tags taken from the data of suspect blocks that did not match.
    rederived: u64,
    /// The header on the member's word.
    on_disk: OnDisk,
    /// The array's event count when it last marked its superblocks dirty: a dirty header
    /// says it, so the next start can tell a crash of raidd's (the superblocks still there)
    /// from writes by another (the kernel moves the count on).
    dirty_events: u64,
    /// The header was dirty at the array's event count at [`open`]: tags outside the
    /// regions the write-intent bitmap marks are right ([`ChecksummedMember::narrow`]).
    narrowable: bool,
    /// [`ChecksummedMember::close`] is writing a clean header: no write may start.
    clean_marking: bool,
}

/// A member with checksum tags (see the module's comment).
pub struct ChecksummedMember {
    inner: Arc<dyn Member>,
    info: MemberInfo,
    g: Geometry,
    algorithm: Algorithm,
    /// The tag cache's bytes (a member joining the array gets as much).
    cache_bytes: u64,
    /// Byte offset of data block 0 on the member.
    base: u64,
    state: Mutex<State>,
    /// Numbers the writes, moved on under the state's lock as each sets its tags; a read
    /// takes it before its I/O (no lock) and compares it under the lock after: a read
    /// that saw it change may have raced a write.
    write_seq: AtomicU64,
    /// Serializes the tag area's I/O; holds the header as it is on the member.
    area: futures::lock::Mutex<Header>,
    counters: ChecksumCounters,
}

impl fmt::Debug for ChecksummedMember {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChecksummedMember")
            .field("name", &self.info.name)
            .field("geometry", &self.g)
            .finish_non_exhaustive()
    }
}

fn bad_input(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// Reads the tag header of a member whose superblock says `facts`: the header, or why
/// there is none that belongs to it.
pub async fn read_header(
    inner: &dyn Member,
    facts: &TagFacts,
) -> io::Result<Result<Header, TagError>> {
    let g = Geometry::of(facts.data_offset, facts.data_size);
    if (g.end() * 512) > inner.info().size_bytes {
        return Ok(Err(TagError::NoHeader));
    }
    let page = read_bytes(inner, g.header_at * 512, PAGE).await?;
    Ok(Header::decode(&page).and_then(|h| {
        h.belongs_to(
            &facts.array_uuid,
            &facts.device_uuid,
            facts.data_offset,
            facts.data_size,
        )
        .map(|()| h)
    }))
}

/// Opens a member's tags: `header` as [`read_header`] found it (`Err`: the tags are built
/// from the data, as for a new member of a checksummed array). Tags that cannot be trusted
/// at `facts.events` are re-derived from the data before this returns.
pub async fn open(
    inner: Arc<dyn Member>,
    facts: &TagFacts,
    header: Result<Header, TagError>,
    algorithm: Algorithm,
    cache_bytes: u64,
) -> io::Result<(ChecksummedMember, Opened)> {
    let m = ChecksummedMember::new(inner, facts, algorithm, cache_bytes)?;
    let why = match &header {
        Ok(h) if h.algorithm != algorithm => {
            format!(
                "its tags are {}, the array's {}",
                h.algorithm.name(),
                algorithm.name()
            )
        }
        Ok(h) if h.trusted_at(facts.events) => {
            *m.area.lock().await = h.clone();
            m.state().on_disk = OnDisk::Clean;
            return Ok((m, Opened::Trusted));
        }
        Ok(h) if h.events == 0 => "they have not been derived from the data yet".to_string(),
        Ok(h) if !h.clean => "it was not stopped cleanly".to_string(),
        Ok(h) if h.events != facts.events => format!(
            "the array was written without them (events {} → {})",
            h.events, facts.events
        ),
        Ok(_) => "a build of its tags was not finished".to_string(),
        Err(e) => e.to_string(),
    };
    let crashed = matches!(&header, Ok(h) if h.algorithm == algorithm && !h.clean && h.events == facts.events);
    m.distrust(crashed).await?;
    Ok((m, Opened::Untrusted(why)))
}

impl ChecksummedMember {
    fn new(
        inner: Arc<dyn Member>,
        facts: &TagFacts,
        algorithm: Algorithm,
        cache_bytes: u64,
    ) -> io::Result<ChecksummedMember> {
        let g = Geometry::of(facts.data_offset, facts.data_size);
        let name = &inner.info().name;
        if g.end() * 512 > inner.info().size_bytes {
            return Err(bad_input(format!(
                "{name}: its tag area ends at sector {}, past the member's end",
                g.end()
            )));
        }
        if !facts.data_offset.is_multiple_of(tags::BLOCK_SECTORS) {
            return Err(bad_input(format!(
                "{name}: its data starts at sector {}, not on a 4 KiB boundary",
                facts.data_offset
            )));
        }
        let mut info = inner.info().clone();
        info.block_size = info.block_size.max(BLOCK as u32);
        let header = Header {
            algorithm,
            array_uuid: facts.array_uuid,
            device_uuid: facts.device_uuid,
            data_offset: facts.data_offset,
            data_size: facts.data_size,
            events: facts.events,
            clean: false,
            built: 0,
        };
        Ok(ChecksummedMember {
            base: facts.data_offset * 512,
            info,
            g,
            algorithm,
            cache_bytes,
            state: Mutex::new(State {
                cache: TagCache::new(algorithm, cache_bytes, 1),

                writing: Vec::new(),
                bad: std::collections::BTreeSet::new(),
                suspect: Suspect::default(),
                rederived: 0,
                on_disk: OnDisk::Missing,
                dirty_events: facts.events,
                narrowable: false,
                clean_marking: false,
            }),
            write_seq: AtomicU64::new(0),
            area: futures::lock::Mutex::new(header),
            counters: ChecksumCounters::default(),
            inner,
        })
    }

    /// The tags of a new member (`raidd create --checksums`): built from what its data area
    /// holds now, the header clean at `facts.events`.
    pub async fn create(
        inner: Arc<dyn Member>,
        facts: &TagFacts,
        algorithm: Algorithm,
        cache_bytes: u64,
    ) -> io::Result<ChecksummedMember> {
        let m = ChecksummedMember::new(inner, facts, algorithm, cache_bytes)?;
        m.build().await?;
        Ok(m)
    }

    /// A member joining the array (added, a spare, a replacement) whose superblock will say
    /// `facts`: tags like this member's, every block suspect until a rebuild writes it or
    /// the tags are re-derived, and no header until its first write.
    pub fn joining(
        &self,
        inner: Arc<dyn Member>,
        facts: &TagFacts,
    ) -> io::Result<ChecksummedMember> {
        let m = ChecksummedMember::new(inner, facts, self.algorithm, self.cache_bytes)?;
        m.state().suspect = Suspect::all(m.g.blocks());
        Ok(m)
    }

    /// Writes the tag header of a member of an array that had no tags, saying it trusts none
    /// (`raidd grow --checksums`): its next start re-derives every tag from the data.
    pub async fn untrusted(
        inner: Arc<dyn Member>,
        facts: &TagFacts,
        algorithm: Algorithm,
    ) -> io::Result<()> {
        let m = ChecksummedMember::new(inner, facts, algorithm, PAGE as u64)?;
        m.distrust(false).await
    }

    /// Untrusted tags: every block suspect, and the header dirty on the member before any
    /// tag changes. `crashed`: the header was dirty at the array's event count, and stays
    /// so (the bitmap may narrow what is suspect); otherwise it says an event count no start
    /// matches, so a crash before the tags are re-derived leaves them untrusted still.
    async fn distrust(&self, crashed: bool) -> io::Result<()> {
        let mut h = self.area.lock().await;
        let dirty = Header {
            clean: false,
            built: 0,
            events: if crashed { h.events } else { 0 },
            ..h.clone()
        };
        self.write_header_locked(&dirty).await?;
        self.inner.flush().await?;
        *h = dirty;
        let mut st = self.state();
        st.on_disk = OnDisk::Dirty;
        st.suspect = Suspect::all(self.g.blocks());
        st.narrowable = crashed;
        Ok(())
    }

    /// After a crash of raidd's: only `keep` (blocks) stays suspect, the regions the
    /// write-intent bitmap marks. Whether it did: not for tags that were untrusted for
    /// another reason.
    pub fn narrow(&self, keep: &[std::ops::Range<u64>]) -> bool {
        let mut st = self.state();
        if !st.narrowable {
            return false;
        }
        let before = st.suspect.blocks();
        st.suspect.narrow(&Suspect::of(keep.iter().cloned()));
        st.narrowable = false;
        debug_assert!(st.suspect.blocks() <= before, "narrowing adds no block");
        true
    }

    /// Re-derives the tags of the next suspect blocks (up to 1 MiB) from the data, as a
    /// read does that finds them; the suspect blocks left.
    pub async fn rederive_step(&self) -> io::Result<u64> {
        let Some(next) = self.state().suspect.first() else {
            return Ok(0);
        };
        let n = (next.end - next.start).min((BUILD_CHUNK / BLOCK) as u64);
        read_bytes(
            self,
            self.base + next.start * BLOCK as u64,
            n as usize * BLOCK,
        )
        .await?;
        let st = self.state();
        debug_assert!(
            st.suspect.first().is_none_or(|f| f.start >= next.start + n),
            "a read that succeeded settled its blocks: {next:?}+{n} → {:?}",
            st.suspect.first()
        );
        Ok(st.suspect.blocks())
    }

    /// The array marked its superblocks dirty at `events`: the header says dirty at
    /// `events` now, before any write of this dirty period, so that after a crash every
    /// member's header, written to or not, tells a crash of raidd's from writes by another.
    /// Not while tags are suspect: the header keeps saying why they are.
    pub async fn dirty_at(&self, events: u64) -> io::Result<()> {
        let mut h = self.area.lock().await;
        {
            let mut st = self.state();
            st.dirty_events = events;
            if !st.suspect.is_empty() || (st.on_disk == OnDisk::Dirty && h.events == events) {
                return Ok(());
            }
            debug_assert!(!st.clean_marking, "no clean marking while the area is held");
            debug_assert!(
                events >= h.events,
                "the event count only grows: {} → {events}",
                h.events
            );
        }
        self.write_dirty_locked_at(&mut h, events).await
    }

    pub fn geometry(&self) -> &Geometry {
        &self.g
    }

    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// The member below.
    pub fn inner(&self) -> &Arc<dyn Member> {
        &self.inner
    }

    pub fn counts(&self) -> ChecksumCounts {
        let st = self.state();
        let (cache_hits, cache_misses) = st.cache.hits_and_misses();
        ChecksumCounts {
            verified_blocks: self.counters.verified.load(Ordering::Relaxed),
            mismatches: self.counters.mismatches.load(Ordering::Relaxed),
            pages_read: self.counters.pages_read.load(Ordering::Relaxed),
            pages_written: self.counters.pages_written.load(Ordering::Relaxed),
            cache_hits,
            cache_misses,
            unverified_blocks: st.suspect.blocks(),
            rederived: st.rederived,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding it aborts the process (panic = "abort"): never poisoned in
        // a running daemon.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The blocks of an I/O of `len` bytes at byte `offset` that lie in the tagged area,
    /// and the bytes of the I/O before the first of them.
    /// `Err` for an I/O in part of a block: its tag could be neither checked nor set (the
    /// member's block size says 4096; a caller that breaks it stops loudly in tests).
    fn span(&self, offset: u64, len: u64) -> io::Result<Option<(std::ops::Range<u64>, usize)>> {
        let Some((blocks, skip, whole)) = self.touched(offset, len) else {
            return Ok(None);
        };
        debug_assert!(
            whole,
            "{}: I/O {offset}+{len} is not in whole blocks",
            self.info.name
        );
        if !whole {
            return Err(bad_input(format!(
                "{}: I/O {offset}+{len} is not in whole 4 KiB blocks of its data",
                self.info.name
            )));
        }
        Ok(Some((blocks, skip)))
    }

    /// The blocks of the tagged area an I/O touches, the bytes of the I/O before the
    /// first, and whether it covers each of them whole.
    fn touched(&self, offset: u64, len: u64) -> Option<(std::ops::Range<u64>, usize, bool)> {
        let end_tagged = self.base + self.g.blocks() * BLOCK as u64;
        let (start, end) = (offset.max(self.base), (offset + len).min(end_tagged));
        if start >= end {
            return None;
        }
        let b = BLOCK as u64;
        let whole = (start - self.base).is_multiple_of(b) && (end - self.base).is_multiple_of(b);
        let first = (start - self.base) / b;
        let last = (end - self.base).div_ceil(b);
        Some((first..last, (start - offset) as usize, whole))
    }

    /// Reads tag page `page` into the cache unless it is there; writes back a dirty page
    /// the cache gives up to make room. The caller holds the tag area's lock.
    async fn load_locked(&self, page: u64) -> io::Result<()> {
        debug_assert!(page < self.g.pages, "page {page} of {}", self.g.pages);
        let id = PageId { role: 0, page };
        if self.state().cache.holds(id) {
            return Ok(());
        }
        let at = self.g.place(self.g.page_blocks(page).start).sector * 512;
        let bytes = read_bytes(&*self.inner, at, PAGE).await?;
        self.counters.pages_read.fetch_add(1, Ordering::Relaxed);
        let evicted = self.state().cache.insert(id, &bytes);
        debug_assert!(self.state().cache.holds(id), "a page read is held");
        if let Some((gone, bytes)) = evicted {
            debug_assert_ne!(gone, id, "the page read is not the one given up");
            self.write_page_locked(gone.page, &bytes).await?;
        }
        Ok(())
    }

    async fn load(&self, page: u64) -> io::Result<()> {
        let _area = self.area.lock().await;
        self.load_locked(page).await
    }

    async fn write_page_locked(&self, page: u64, bytes: &[u8]) -> io::Result<()> {
        debug_assert!(page < self.g.pages && bytes.len() == PAGE, "page {page}");
        let at = self.g.place(self.g.page_blocks(page).start).sector * 512;
        let mut buf = raidd_rt::AlignedBuf::for_overwrite(PAGE);
        buf.copy_from_slice(bytes);
        write_bytes(&*self.inner, at, buf).await?;
        self.counters.pages_written.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// The header `h` (held under the area's lock) says dirty at `events` on the member,
    /// durably.
    async fn write_dirty_locked_at(&self, h: &mut Header, events: u64) -> io::Result<()> {
        let dirty = Header {
            clean: false,
            events,
            ..h.clone()
        };
        self.write_header_locked(&dirty).await?;
        self.inner.flush().await?;
        *h = dirty;
        self.state().on_disk = OnDisk::Dirty;
        Ok(())
    }

    async fn write_header_locked(&self, h: &Header) -> io::Result<()> {
        let bytes = h.encode();
        let mut buf = raidd_rt::AlignedBuf::for_overwrite(PAGE);
        buf.copy_from_slice(&bytes);
        write_bytes(&*self.inner, self.g.header_at * 512, buf).await
    }

    /// Writes every dirty tag page to the member (not yet flushed).
    async fn write_dirty(&self) -> io::Result<()> {
        let _area = self.area.lock().await;
        self.write_dirty_locked().await
    }

    async fn write_dirty_locked(&self) -> io::Result<()> {
        let dirty = self.state().cache.dirty();
        for (id, bytes) in dirty {
            self.write_page_locked(id.page, &bytes).await?;
            self.state().cache.written(id, &bytes);
        }
        Ok(())
    }

    /// Before a tag changes after a clean stop (or on a member that joined): the header says
    /// dirty, durably, at the event count the array last marked its superblocks dirty at.
    async fn mark_dirty(&self) -> io::Result<()> {
        let mut h = self.area.lock().await;
        let events = {
            let st = self.state();
            if st.on_disk == OnDisk::Dirty {
                return Ok(());
            }
            st.dirty_events
        };
        self.write_dirty_locked_at(&mut h, events).await?;
        debug_assert!(
            !self.state().clean_marking,
            "no clean marking while the area is held"
        );
        Ok(())
    }

    /// Where the array marks its superblocks clean at `events` (a clean stop, md's safe
    /// mode), after flushing: every tag goes to the member, then the header says clean at
    /// `events`, durably. Returns whether it does: not while a write is in flight or set a
    /// tag meanwhile (the array is not idle after all; the header stays dirty), nor while
    /// tags are suspect (they are not known to match).
    pub async fn close(&self, events: u64) -> io::Result<bool> {
        let mut h = self.area.lock().await;
        {
            let st = self.state();
            if !st.suspect.is_empty() {
                return Ok(false);
            }
            if st.on_disk == OnDisk::Clean && h.events == events {
                return Ok(true);
            }
        }
        self.write_dirty_locked().await?;
        self.inner.flush().await?;
        {
            let mut st = self.state();
            if !st.writing.is_empty() || st.cache.has_dirty() {
                return Ok(false);
            }
            debug_assert!(!st.clean_marking, "one clean marking at a time");
            st.clean_marking = true;
        }
        let clean = Header {
            clean: true,
            events,
            built: self.g.blocks(),
            ..h.clone()
        };
        let written = match self.write_header_locked(&clean).await {
            Ok(()) => self.inner.flush().await,
            Err(e) => Err(e),
        };
        let mut st = self.state();
        st.clean_marking = false;
        debug_assert!(st.writing.is_empty(), "no write began while marking clean");
        written?;
        st.on_disk = OnDisk::Clean;
        drop(st);
        *h = clean;
        Ok(true)
    }

    /// Derives every tag from the data and writes the tags and a clean header at the
    /// header's event count. Nothing else may use the member meanwhile.
    async fn build(&self) -> io::Result<()> {
        let mut h = self.area.lock().await;
        let dirty = Header {
            clean: false,
            built: 0,
            ..h.clone()
        };
        self.write_header_locked(&dirty).await?;
        let blocks = self.g.blocks();
        debug_assert!(blocks > 0 && self.g.pages == blocks.div_ceil(tags::TAGS_PER_PAGE));
        let per_read = (BUILD_CHUNK / BLOCK) as u64;
        let mut page = vec![0u8; PAGE];
        let mut b = 0;
        while b < blocks {
            let n = per_read.min(blocks - b);
            let data = read_bytes(
                &*self.inner,
                self.base + b * BLOCK as u64,
                n as usize * BLOCK,
            )
            .await?;
            for (k, block) in data.chunks_exact(BLOCK).enumerate() {
                let at = b + k as u64;
                tags::set(
                    &mut page,
                    self.g.place(at).offset / tags::TAG_BYTES,
                    self.algorithm.tag(block),
                );
                if self.g.page_blocks(self.g.place(at).page).end == at + 1 {
                    self.write_page_locked(self.g.place(at).page, &page).await?;
                    page.fill(0);
                }
            }
            b += n;
        }
        debug_assert!(
            self.state().cache.is_empty(),
            "tags are built before any use"
        );
        let built = Header {
            clean: true,
            built: blocks,
            ..dirty
        };
        self.write_header_locked(&built).await?;
        self.inner.flush().await?;
        *h = built;
        let mut st = self.state();
        st.on_disk = OnDisk::Clean;
        st.suspect = Suspect::default();
        Ok(())
    }

    /// Verifies the blocks from `first` whose tags `computed` are, read while the write
    /// counter was `seq`: `Ok`, or the first bad block (`Err(Some)`), or `Err(None)` when a
    /// racing write may explain a mismatch (read again).
    async fn verify(&self, first: u64, computed: &[u32], seq: u64) -> Result<(), Option<Bad>> {
        debug_assert!(
            first + computed.len() as u64 <= self.g.blocks(),
            "blocks {first}+{} are tagged",
            computed.len()
        );
        loop {
            let missing = {
                let mut st = self.state();
                let now = self.write_seq.load(Ordering::Acquire);
                match check(&mut st, &self.g, first, computed, seq, now) {
                    Checked::Missing(page) => Some(page),
                    Checked::Dirty => None,
                    Checked::Good => {
                        self.counters
                            .verified
                            .fetch_add(computed.len() as u64, Ordering::Relaxed);
                        return Ok(());
                    }
                    Checked::Raced => return Err(None),
                    Checked::Bad(bad) => return Err(Some(bad)),
                }
            };
            let got = match missing {
                Some(page) => self.load(page).await,
                None => self.mark_dirty().await,
            };
            if let Err(e) = got {
                return Err(Some(Bad::Unreadable(e)));
            }
        }
    }

    async fn read_verified(&self, offset: u64, iov: IoVecMut) -> (io::Result<()>, IoVecMut) {
        let len: u64 = iov.iter().map(|w| w.len() as u64).sum();
        let (blocks, skip) = match self.span(offset, len) {
            Ok(Some(s)) => s,
            Ok(None) => return self.inner.read(offset, iov).await,
            Err(e) => return (Err(e), iov),
        };
        let mut iov = iov;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let seq = self.write_seq.load(Ordering::Acquire);
            let (r, back) = self.inner.read(offset, iov).await;
            iov = back;
            if r.is_err() {
                return (r, iov);
            }
            let computed = tags_of(
                self.algorithm,
                iov.iter().map(|w| (w.as_slice(), None)),
                skip,
                (blocks.end - blocks.start) as usize,
            );
            match self.verify(blocks.start, &computed, seq).await {
                Ok(()) => return (Ok(()), iov),
                Err(None) if attempt <= RETRIES => continue,
                Err(None) => {
                    // Writes kept racing it: the bytes are not known to be wrong, but
                    // they are not known to be right either.
                    return (Err(raced(&self.info.name)), iov);
                }
                Err(Some(bad)) => return (Err(self.report(bad)), iov),
            }
        }
    }

    /// Counts and logs a mismatch; the read's error.
    fn report(&self, bad: Bad) -> io::Error {
        match bad {
            Bad::Unreadable(e) => e,
            Bad::Mismatch {
                block,
                tag,
                computed,
            } => {
                let sector = self.g.data_offset + block * tags::BLOCK_SECTORS;
                let new = {
                    let mut st = self.state();
                    st.bad.len() >= REMEMBERED || st.bad.insert(block)
                };
                if !new {
                    return io::Error::new(io::ErrorKind::InvalidData, KnownBad);
                }
                self.counters.mismatches.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(member = %self.info.name, block, sector,
                    "checksum mismatch: 4 KiB at sector {sector} of {} reads as {computed:#010x}, its tag is {tag:#010x}",
                    self.info.name);
                io::Error::from_raw_os_error(libc::EBADMSG)
            }
        }
    }

    /// Sets the tags of the blocks a write is about to write, keeping their old tags until
    /// it ends ([`ChecksummedMember::end_write`]); its number. Only once the header says
    /// dirty on the member: a tag set before could reach the member (a page evicted) under
    /// a clean header.
    async fn begin_write(&self, first: u64, computed: &[u32]) -> io::Result<u64> {
        loop {
            let wait = {
                let mut st = self.state();
                match self.try_begin(&mut st, first, computed) {
                    Ok(seq) => return Ok(seq),
                    Err(wait) => wait,
                }
            };
            match wait {
                Wait::Page(page) => self.load(page).await?,
                Wait::Dirty => self.mark_dirty().await?,
            }
        }
    }

    fn try_begin(&self, st: &mut State, first: u64, computed: &[u32]) -> Result<u64, Wait> {
        debug_assert!(
            first + computed.len() as u64 <= self.g.blocks(),
            "blocks {first}+{} are tagged",
            computed.len()
        );
        if st.on_disk != OnDisk::Dirty || st.clean_marking {
            return Err(Wait::Dirty);
        }
        let mut old = SmallVec::with_capacity(computed.len());
        for k in 0..computed.len() as u64 {
            match st.cache.tag(0, &self.g, first + k) {
                Ok(t) => old.push(t),
                Err(id) => return Err(Wait::Page(id.page)),
            }
        }
        let seq = self.write_seq.fetch_add(1, Ordering::AcqRel) + 1;
        let end = first + computed.len() as u64;
        if st.bad.range(first..end).next().is_some() {
            st.bad.retain(|b| !(first..end).contains(b));
        }
        for (k, &t) in computed.iter().enumerate() {
            st.cache
                .put(0, &self.g, first + k as u64, t)
                .expect("every page was found just now");
        }
        debug_assert_eq!(old.len(), computed.len(), "an old tag per block written");
        st.suspect.settle(first..end);
        st.writing.push(Writing { first, old, seq });
        Ok(seq)
    }

    fn end_write(&self, seq: u64) {
        let mut st = self.state();
        let before = st.writing.len();
        st.writing.retain(|w| w.seq != seq);
        debug_assert_eq!(st.writing.len() + 1, before, "write {seq} was in flight");
    }

    async fn write_tagged(&self, offset: u64, iov: IoVec) -> io::Result<()> {
        let len: u64 = iov.iter().map(|w| w.len() as u64).sum();
        let Some((blocks, skip)) = self.span(offset, len)? else {
            return self.inner.write(offset, iov).await;
        };
        let computed = tags_of(
            self.algorithm,
            iov.iter().map(|w| (w.as_slice(), Some(w))),
            skip,
            (blocks.end - blocks.start) as usize,
        );
        let seq = self.begin_write(blocks.start, &computed).await?;
        let r = self.inner.write(offset, iov).await;
        self.end_write(seq);
        r
    }

    async fn discard_tagged(&self, offset: u64, len: u64) -> io::Result<()> {
        if let Some((blocks, _, _)) = self.touched(offset, len) {
            // Later reads may return zeros or the old bytes: neither is verified (a block
            // discarded in part too).
            let none = vec![NO_TAG; (blocks.end - blocks.start) as usize];
            let seq = self.begin_write(blocks.start, &none).await?;
            let r = self.inner.discard(offset, len).await;
            self.end_write(seq);
            return r;
        }
        self.inner.discard(offset, len).await
    }
}

fn raced(name: &str) -> io::Error {
    io::Error::other(format!(
        "{name}: a block kept changing under its read ({RETRIES} tries)"
    ))
}

/// Why a read's blocks were not verified.
#[derive(Debug)]
enum Bad {
    Mismatch {
        block: u64,
        tag: u32,
        computed: u32,
    },
    /// A tag page could not be read.
    Unreadable(io::Error),
}

/// What a write waits for before it may set its tags.
enum Wait {
    Page(u64),
    Dirty,
}

enum Checked {
    Good,
    Missing(u64),
    /// A suspect block's tag is to be re-derived: the header must say dirty first.
    Dirty,
    Raced,
    Bad(Bad),
}

/// Checks tags `computed` of the blocks from `first` against the cache: a block matches
/// its tag, or a tag it had before a write still in flight, or has no tag; a mismatch while
/// writes moved on from `seq` to `now` (or one of its blocks is being written) may be a race.
/// A suspect block that does not match (or has no tag) takes the data's tag, and what all
/// its blocks match is suspect no longer.
fn check(
    st: &mut State,
    g: &Geometry,
    first: u64,
    computed: &[u32],
    seq: u64,
    now: u64,
) -> Checked {
    // Every block matching its tag is the common case: a lookup per tag page.
    let start = match st.cache.first_mismatch(0, g, first, computed) {
        Ok(None) => computed.len(),
        Ok(Some(k)) => k,
        Err(id) => return Checked::Missing(id.page),
    };
    for (k, &c) in computed.iter().enumerate().skip(start) {
        let b = first + k as u64;
        let tag = match st.cache.tag(0, g, b) {
            Ok(t) => t,
            Err(id) => return Checked::Missing(id.page),
        };
        if tag == c {
            continue;
        }
        let suspect = st.suspect.contains(b);
        if tag == NO_TAG && !suspect {
            continue;
        }
        let in_flight = |w: &Writing| b >= w.first && b < w.first + w.old.len() as u64;
        if st
            .writing
            .iter()
            .any(|w| in_flight(w) && w.old[(b - w.first) as usize] == c)
        {
            continue;
        }
        if now != seq || st.writing.iter().any(in_flight) {
            return Checked::Raced;
        }
        if suspect {
            if st.on_disk != OnDisk::Dirty || st.clean_marking {
                return Checked::Dirty;
            }
            st.cache
                .put(0, g, b, c)
                .expect("its page is held: its tag was read just now");
            st.rederived += 1;
            continue;
        }
        return Checked::Bad(Bad::Mismatch {
            block: b,
            tag,
            computed: c,
        });
    }
    st.suspect.settle(first..first + computed.len() as u64);
    Checked::Good
}

/// Whole blocks in one window from which a buffer's remembered tags are worth keeping for
/// the next member written from it (a mirror's other copies): below this the lock and the
/// copy cost more than the CRCs they save.
const REMEMBERED_FROM: usize = 4;

/// The tags of the whole blocks `bytes` holds, found among those its buffer remembers
/// (`window` and where `bytes` starts in it) or computed, and then remembered.
fn whole_blocks(
    a: Algorithm,
    bytes: &[u8],
    window: Option<(&BufSlice, usize)>,
    out: &mut SmallVec<[u32; 16]>,
) {
    let n = bytes.len() / BLOCK;
    debug_assert_eq!(bytes.len(), n * BLOCK, "whole blocks");
    let window = window.filter(|_| n >= REMEMBERED_FROM);
    if let Some((w, at)) = window {
        if let Some(kept) = w.remembered_digests(at, BLOCK, a.code(), n) {
            out.extend_from_slice(&kept);
            return;
        }
    }
    let from = out.len();
    out.extend(bytes.chunks_exact(BLOCK).map(|b| a.tag(b)));
    if let Some((w, at)) = window {
        w.remember_digests(at, BLOCK, a.code(), &out[from..]);
    }
}

/// The tags of `blocks` whole blocks of the bytes `pieces` hold in order, from byte `skip`;
/// a piece that is a shared buffer's window comes with it, so that tags of the same bytes
/// written to several members are computed once.
fn tags_of<'a>(
    a: Algorithm,
    pieces: impl Iterator<Item = (&'a [u8], Option<&'a BufSlice>)>,
    skip: usize,
    blocks: usize,
) -> SmallVec<[u32; 16]> {
    let mut out = SmallVec::with_capacity(blocks);
    let (mut skip, mut sum, mut filled) = (skip, a.start(), 0usize);
    for (piece, window) in pieces {
        let mut p = piece;
        if skip >= p.len() {
            skip -= p.len();
            continue;
        }
        p = &p[skip..];
        skip = 0;
        while !p.is_empty() && out.len() < blocks {
            if filled == 0 && p.len() >= BLOCK {
                // Whole blocks in one piece: the fast way.
                let n = (p.len() / BLOCK).min(blocks - out.len());
                let at = piece.len() - p.len();
                whole_blocks(a, &p[..n * BLOCK], window.map(|w| (w, at)), &mut out);
                p = &p[n * BLOCK..];
                continue;
            }
            let take = (BLOCK - filled).min(p.len());
            sum = a.append(sum, &p[..take]);
            filled += take;
            p = &p[take..];
            if filled == BLOCK {
                out.push(sum);
                sum = a.start();
                filled = 0;
            }
        }
        if out.len() == blocks {
            break;
        }
    }
    debug_assert_eq!(out.len(), blocks, "the pieces hold every block");
    out
}

impl Member for ChecksummedMember {
    fn info(&self) -> &MemberInfo {
        &self.info
    }

    fn read(&self, offset: u64, iov: IoVecMut) -> MemberFuture<'_, (io::Result<()>, IoVecMut)> {
        MemberFuture::new(self.read_verified(offset, iov))
    }

    fn write(&self, offset: u64, iov: IoVec) -> MemberFuture<'_, io::Result<()>> {
        MemberFuture::new(self.write_tagged(offset, iov))
    }

    fn flush(&self) -> MemberFuture<'_, io::Result<()>> {
        MemberFuture::new(async move {
            self.write_dirty().await?;
            self.inner.flush().await
        })
    }

    fn discard(&self, offset: u64, len: u64) -> MemberFuture<'_, io::Result<()>> {
        MemberFuture::new(self.discard_tagged(offset, len))
    }

    fn dab(&self) -> Option<DabCounts> {
        self.inner.dab()
    }

    fn checksums(&self) -> Option<&dyn Checksums> {
        Some(self)
    }
}

impl Checksums for ChecksummedMember {
    fn algorithm_name(&self) -> &'static str {
        self.algorithm.name()
    }

    fn counts(&self) -> ChecksumCounts {
        ChecksummedMember::counts(self)
    }

    fn close(&self, events: u64) -> MemberFuture<'_, io::Result<bool>> {
        MemberFuture::new(ChecksummedMember::close(self, events))
    }

    fn dirty_at(&self, events: u64) -> MemberFuture<'_, io::Result<()>> {
        MemberFuture::new(ChecksummedMember::dirty_at(self, events))
    }

    fn narrow(&self, keep: &[std::ops::Range<u64>]) -> bool {
        ChecksummedMember::narrow(self, keep)
    }

    fn rederive_step(&self) -> MemberFuture<'_, io::Result<u64>> {
        MemberFuture::new(ChecksummedMember::rederive_step(self))
    }

    fn joining(&self, inner: Arc<dyn Member>, facts: &TagFacts) -> io::Result<Arc<dyn Member>> {
        Ok(Arc::new(ChecksummedMember::joining(self, inner, facts)?))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::member::{read_bytes, write_bytes, MemMember};
    use proptest::prelude::*;

    /// 16 MiB of data (4 tag pages) at sector 2048 of a member with room for its tags.
    const DATA_SECTORS: u64 = 16 << 11;

    fn facts(events: u64) -> TagFacts {
        TagFacts {
            array_uuid: [7; 16],
            device_uuid: [9; 16],
            data_offset: 2048,
            data_size: DATA_SECTORS,
            events,
        }
    }

    fn mem() -> Arc<MemMember> {
        let g = Geometry::of(2048, DATA_SECTORS);
        Arc::new(MemMember::new("mem:t", g.end() * 512))
    }

    /// A block of data: its number and a generation in every byte pair.
    fn block(n: u64, gen: u8) -> Vec<u8> {
        (0..BLOCK)
            .map(|i| (n as u8).wrapping_mul(31) ^ gen ^ (i as u8))
            .collect()
    }

    fn at(b: u64) -> u64 {
        2048 * 512 + b * BLOCK as u64
    }

    fn buf(bytes: &[u8]) -> raidd_rt::AlignedBuf {
        let mut b = raidd_rt::AlignedBuf::for_overwrite(bytes.len());
        b.copy_from_slice(bytes);
        b
    }

    /// Runs a future over memory members, which complete at once (no runtime needed).
    fn run<T>(f: impl std::future::Future<Output = T>) -> T {
        let mut f = std::pin::pin!(f);
        let mut cx = std::task::Context::from_waker(futures::task::noop_waker_ref());
        for _ in 0..1000 {
            if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
                return v;
            }
        }
        panic!("a memory member's I/O did not complete");
    }

    fn error_code(r: io::Result<raidd_rt::AlignedBuf>) -> Option<i32> {
        r.err().and_then(|e| e.raw_os_error())
    }

    #[test]
    fn reads_are_verified_and_a_flipped_bit_is_a_medium_error() {
        let inner = mem();
        for b in 0..8 {
            inner.write_sync(at(b), &block(b, 1));
        }
        let m = run(ChecksummedMember::create(
            inner.clone(),
            &facts(5),
            Algorithm::Crc32c,
            1 << 20,
        ))
        .unwrap();
        assert_eq!(m.info().block_size, 4096);
        let got = run(read_bytes(&m, at(0), 8 * BLOCK)).unwrap();
        for b in 0..8u64 {
            assert_eq!(&got[b as usize * BLOCK..][..BLOCK], &block(b, 1)[..]);
        }
        assert_eq!(m.counts().verified_blocks, 8);
        // One bit of block 3 flips on the device.
        let mut one = [0u8; 1];
        inner.read_sync(at(3) + 100, &mut one);
        inner.write_sync(at(3) + 100, &[one[0] ^ 0x10]);
        let r = run(read_bytes(&m, at(2), 4 * BLOCK));
        assert_eq!(error_code(r), Some(libc::EBADMSG));
        assert!(crate::member::medium_error(&io::Error::from_raw_os_error(
            libc::EBADMSG
        )));
        assert_eq!(m.counts().mismatches, 1);
        // Blocks beside it still read, and a rewrite heals it.
        run(read_bytes(&m, at(2), BLOCK)).unwrap();
        run(write_bytes(&m, at(3), buf(&block(3, 1)))).unwrap();
        let got = run(read_bytes(&m, at(3), BLOCK)).unwrap();
        assert_eq!(&got[..], &block(3, 1)[..]);
        // A misdirected block (block 5's bytes where block 6 belongs) is caught too.
        inner.write_sync(at(6), &block(5, 1));
        assert_eq!(
            error_code(run(read_bytes(&m, at(6), BLOCK))),
            Some(libc::EBADMSG)
        );
        assert_eq!(m.counts().mismatches, 2);
    }

    #[test]
    fn writes_set_tags_that_survive_a_clean_stop_and_a_small_cache() {
        let inner = mem();
        // A one-page cache over four pages: every write to another page evicts a dirty one.
        let m = run(ChecksummedMember::create(
            inner.clone(),
            &facts(1),
            Algorithm::Crc32c,
            4096,
        ))
        .unwrap();
        let blocks = m.geometry().blocks();
        let picks: Vec<u64> = (0..64).map(|k| (k * 977) % blocks).collect();
        for (k, &b) in picks.iter().enumerate() {
            run(write_bytes(&m, at(b), buf(&block(b, k as u8 + 2)))).unwrap();
        }
        assert!(m.counts().pages_written > 0, "evictions wrote pages back");
        assert!(run(m.close(9)).unwrap());
        drop(m);
        let h = run(read_header(&*inner, &facts(9))).unwrap().unwrap();
        assert!(h.clean && h.events == 9 && h.trusted_at(9));
        let (m, how) = run(open(
            inner.clone(),
            &facts(9),
            Ok(h),
            Algorithm::Crc32c,
            4096,
        ))
        .unwrap();
        assert_eq!(how, Opened::Trusted);
        let mut last = std::collections::HashMap::new();
        for (k, &b) in picks.iter().enumerate() {
            last.insert(b, k as u8 + 2);
        }
        for (&b, &gen) in &last {
            let got = run(read_bytes(&m, at(b), BLOCK)).unwrap();
            assert_eq!(&got[..], &block(b, gen)[..], "block {b}");
        }
        assert_eq!(m.counts().mismatches, 0);
        // A block the tags say nothing new about is still checked against its old tag.
        inner.write_sync(at(picks[0]), &block(picks[0], 200));
        assert_eq!(
            error_code(run(read_bytes(&m, at(picks[0]), BLOCK))),
            Some(libc::EBADMSG)
        );
    }

    /// Re-derives every suspect tag, as the array's background pass does.
    fn rederive(m: &ChecksummedMember) {
        let mut steps = 0;
        while run(m.rederive_step()).unwrap() > 0 {
            steps += 1;
            assert!(steps < 1000, "the pass ends");
        }
        assert_eq!(m.counts().unverified_blocks, 0);
    }

    #[test]
    fn tags_left_by_a_crash_or_a_foreign_writer_are_rederived_not_reported() {
        let inner = mem();
        let m = run(ChecksummedMember::create(
            inner.clone(),
            &facts(3),
            Algorithm::Crc32c,
            1 << 20,
        ))
        .unwrap();
        // A write after the clean create marks the header dirty (at the array's event
        // count) before it lands; the tag page is never written (no flush): a crash.
        run(write_bytes(&m, at(10), buf(&block(10, 4)))).unwrap();
        drop(m);
        let h = run(read_header(&*inner, &facts(3))).unwrap().unwrap();
        assert!(
            !h.clean && h.events == 3,
            "the first write marked the tags dirty"
        );
        let (m, how) = run(open(
            inner.clone(),
            &facts(3),
            Ok(h),
            Algorithm::Crc32c,
            1 << 20,
        ))
        .unwrap();
        assert!(
            matches!(how, Opened::Untrusted(ref why) if why.contains("not stopped cleanly")),
            "{how:?}"
        );
        let blocks = m.geometry().blocks();
        assert_eq!(m.counts().unverified_blocks, blocks);
        // The bitmap marks where writes were in flight: only that stays suspect.
        assert!(m.narrow(std::slice::from_ref(&(8..16))));
        assert_eq!(m.counts().unverified_blocks, 8);
        let got = run(read_bytes(&m, at(10), BLOCK)).unwrap();
        assert_eq!(
            &got[..],
            &block(10, 4)[..],
            "a suspect block takes its data's tag"
        );
        assert_eq!((m.counts().mismatches, m.counts().rederived), (0, 1));
        // Outside it the tags are trusted: a byte changed there is found.
        let mut b30 = run(read_bytes(&*inner, at(30), BLOCK)).unwrap().to_vec();
        b30[9] ^= 1;
        inner.write_sync(at(30), &b30);
        assert_eq!(
            error_code(run(read_bytes(&m, at(30), BLOCK))),
            Some(libc::EBADMSG)
        );
        assert!(
            !run(m.close(4)).unwrap(),
            "not clean while tags are suspect"
        );
        rederive(&m);
        assert!(run(m.close(4)).unwrap());
        drop(m);
        // The kernel wrote to the array meanwhile (its events moved on): every block is
        // suspect, none reported, and the pass re-derives them.
        inner.write_sync(at(11), &block(11, 5));
        inner.write_sync(at(30), &block(30, 5));
        let h = run(read_header(&*inner, &facts(6))).unwrap().unwrap();
        let (m, how) = run(open(
            inner.clone(),
            &facts(6),
            Ok(h),
            Algorithm::Crc32c,
            1 << 20,
        ))
        .unwrap();
        assert!(
            matches!(how, Opened::Untrusted(ref why) if why.contains("4 → 6")),
            "{how:?}"
        );
        assert!(
            !m.narrow(std::slice::from_ref(&(0..1))),
            "writes by another are not narrowed"
        );
        let got = run(read_bytes(&m, at(11), BLOCK)).unwrap();
        assert_eq!(&got[..], &block(11, 5)[..]);
        rederive(&m);
        assert_eq!((m.counts().mismatches, m.counts().rederived), (0, 2));
        // A crash before the pass ended leaves the tags untrusted at the next start.
        let h = run(read_header(&*inner, &facts(6))).unwrap().unwrap();
        assert!(!h.clean && h.events != 6, "{h:?}");
        assert!(run(m.close(6)).unwrap());
        inner.write_sync(at(11), &block(11, 9));
        assert_eq!(
            error_code(run(read_bytes(&m, at(11), BLOCK))),
            Some(libc::EBADMSG)
        );
        // Another array's header is not this member's.
        let other = TagFacts {
            array_uuid: [8; 16],
            ..facts(6)
        };
        assert_eq!(
            run(read_header(&*inner, &other)).unwrap(),
            Err(TagError::Foreign("array"))
        );
    }

    /// A member joining the array has no header and every block suspect until a rebuild
    /// writes it; its first write puts a dirty header out first.
    #[test]
    fn a_joining_member_is_tagged_by_what_writes_it() {
        let m = run(ChecksummedMember::create(
            mem(),
            &facts(3),
            Algorithm::Crc32c,
            1 << 20,
        ))
        .unwrap();
        let inner = mem();
        inner.write_sync(at(0), &block(0, 1));
        let facts = TagFacts {
            device_uuid: [5; 16],
            ..facts(4)
        };
        let j = m.joining(inner.clone(), &facts).unwrap();
        assert_eq!(
            run(read_header(&*inner, &facts)).unwrap(),
            Err(TagError::NoHeader)
        );
        let blocks = j.geometry().blocks();
        for b in 0..blocks / 2 {
            run(write_bytes(&j, at(b), buf(&block(b, 2)))).unwrap();
        }
        let h = run(read_header(&*inner, &facts)).unwrap().unwrap();
        assert!(!h.clean, "{h:?}");
        assert_eq!(
            j.counts().unverified_blocks,
            blocks - blocks / 2,
            "writes in order settle"
        );
        rederive(&j);
        assert!(run(j.close(5)).unwrap());
        inner.write_sync(at(3), &block(3, 7));
        assert_eq!(
            error_code(run(read_bytes(&j, at(3), BLOCK))),
            Some(libc::EBADMSG)
        );
    }

    #[test]
    fn discarded_blocks_are_not_verified_and_metadata_passes_through() {
        let inner = mem();
        inner.write_sync(at(20), &block(20, 1));
        let m = run(ChecksummedMember::create(
            inner.clone(),
            &facts(1),
            Algorithm::Crc32c,
            1 << 20,
        ))
        .unwrap();
        run(m.discard(at(20), BLOCK as u64)).unwrap();
        inner.write_sync(at(20), &[0u8; BLOCK]);
        run(read_bytes(&m, at(20), BLOCK)).unwrap();
        // The superblock's area is not tagged.
        run(write_bytes(&m, 4096, buf(&[5u8; BLOCK]))).unwrap();
        inner.write_sync(4096, &[6u8; 1]);
        let got = run(read_bytes(&m, 4096, BLOCK)).unwrap();
        assert_eq!(got[0], 6);
        assert_eq!(m.counts().mismatches, 0);
    }

    /// The bounds of the pieces `cuts` makes of `len` bytes: 0, the cuts inside, `len`.
    fn cut_points(cuts: Vec<usize>, len: usize) -> Vec<usize> {
        let mut cuts: Vec<usize> = cuts.into_iter().filter(|&c| c < len).collect();
        cuts.extend([0, len]);
        cuts.sort_unstable();
        cuts.dedup();
        cuts
    }

    proptest! {
        #[test]
        fn tags_of_split_windows_are_the_tags_of_their_blocks(
            seed in any::<u8>(),
            blocks in 1usize..5,
            skip_blocks in 0usize..2,
            cuts in proptest::collection::vec(1usize..5 * BLOCK, 0..8),
        ) {
            let bytes: Vec<u8> = (0..(blocks + skip_blocks) * BLOCK)
                .map(|i| (i as u8).wrapping_mul(seed | 1))
                .collect();
            let cuts = cut_points(cuts, bytes.len());
            let pieces = cuts.windows(2).map(|w| (&bytes[w[0]..w[1]], None));
            let a = Algorithm::Crc32c;
            let got = tags_of(a, pieces, skip_blocks * BLOCK, blocks);
            let want: Vec<u32> = bytes[skip_blocks * BLOCK..]
                .chunks_exact(BLOCK)
                .map(|b| a.tag(b))
                .collect();
            prop_assert_eq!(got.as_slice(), want.as_slice());
        }

        /// Windows of a shared buffer, tagged twice (a mirror's two copies: the second
        /// finds what the first remembered), then once more after the bytes changed
        /// through an exclusive window: always the tags of the bytes as they are.
        #[test]
        fn tags_remembered_by_a_buffer_are_the_tags_of_its_bytes(
            seed in any::<u8>(),
            blocks in 1usize..12,
            skip_blocks in 0usize..2,
            cuts in proptest::collection::vec(1usize..12 * BLOCK, 0..4),
            changed in any::<usize>(),
        ) {
            let len = (blocks + skip_blocks) * BLOCK;
            let bytes: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(seed | 1)).collect();
            let shared = raidd_rt::SharedBuf::new(raidd_rt::AlignedBuf::from_slice(&bytes));
            let cuts = cut_points(cuts, len);
            let a = Algorithm::Crc32c;
            let tags = |shared: &raidd_rt::SharedBuf| {
                let windows: Vec<BufSlice> =
                    cuts.windows(2).map(|w| shared.slice(w[0]..w[1]).unwrap()).collect();
                let pieces = windows.iter().map(|w| (w.as_slice(), Some(w)));
                tags_of(a, pieces, skip_blocks * BLOCK, blocks).to_vec()
            };
            let want = |b: &[u8]| -> Vec<u32> {
                b[skip_blocks * BLOCK..].chunks_exact(BLOCK).map(|b| a.tag(b)).collect()
            };
            prop_assert_eq!(tags(&shared), want(&bytes));
            prop_assert_eq!(tags(&shared), want(&bytes));
            let at = changed % len;
            {
                let mut w = shared.slice_mut(at..at + 1).unwrap();
                w.as_mut_slice()[0] ^= 0x40;
            }
            let mut now = bytes.clone();
            now[at] ^= 0x40;
            prop_assert_eq!(tags(&shared), want(&now));
        }
    }
}
