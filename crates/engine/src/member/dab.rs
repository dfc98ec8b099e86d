//! The DMA-aligned buffer of seed 000 (DAB), as a member that wraps another: small reads
//! are served from blocks aligned to the member's largest transfer, fetched whole, so a
//! run of small sequential reads costs one member I/O per block instead of one per request.
//!
//! It sits below the RAID mapping, one per member, as the paper keys its blocks by adapter,
//! device and LBA: every read and write of the array (rebuilds and read-modify-write
//! included) passes through the member's buffer, so coherence is the member's own affair
//! and no array-level state can disagree with it. The members of an array share one pool of
//! blocks (one memory budget), replaced by CLOCK.
//!
//! The paper's four cases, for a request smaller than a block: (1) its first and last
//! sectors are held: served from memory; (2) only the first: the aligned block holding the
//! last is fetched; (3) only the last: the block holding the first; (4) neither: the aligned
//! block or blocks holding it. Requests of a block or more go around the buffer. One fetch
//! per block is in flight; a second reader of it waits for it.
//!
//! Writes ([`DabMode`]) go through by default: when a write completes, the blocks it
//! touched are dropped and a fetch it overlapped installs nothing, so no read that starts
//! after a write completes is served the bytes from before it. In write-back mode a write
//! smaller than a block is copied into its blocks (fetched first if need be) and
//! acknowledged; those blocks are dirty until written back, which a flush does for all of
//! the member's dirty blocks (the array's FLUSH, FUA, and its ordering points: before a
//! superblock is marked clean, before write-intent bits are cleared), and which room being
//! needed does for some. A dirty block is never evicted, and a read that goes around the
//! buffer first writes back the dirty blocks it overlaps, so the member it reads is current.

use std::fmt;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Poll, Waker};

use raidd_rt::{AlignedBuf, IoVec, IoVecMut, SharedBuf};

use super::contract::{DabCounts, Member, MemberFuture, MemberInfo};
use crate::hash::NumberMap;

/// How writes meet the buffer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DabMode {
    /// A write goes to the member; the blocks it touched are dropped when it completes.
    #[default]
    WriteThrough,
    /// A write smaller than a block is held in memory and acknowledged; the member gets it
    /// when the block is written back (a flush, or room needed). Only while every array
    /// whose members the pool holds can lose a member ([`DabPool::set_redundant`]): a held
    /// block of a member that fails is lost, which redundancy covers and nothing else does.
    WriteBack,
    /// Write-back whatever the arrays' redundancy: the administrator accepts that the
    /// blocks a failing member holds are lost on an array that cannot rebuild them.
    WriteBackUnsafe,
}

impl DabMode {
    /// Whether writes may be held (dirty blocks may exist).
    pub fn is_write_back(self) -> bool {
        matches!(self, DabMode::WriteBack | DabMode::WriteBackUnsafe)
    }
}

/// The block size the buffer uses unless told: 256 ATA sectors, the paper's.
pub const DEFAULT_BLOCK: u64 = 128 << 10;
/// Bounds on a block.
pub const MIN_BLOCK: u64 = 4 << 10;
pub const MAX_BLOCK: u64 = 64 << 20;

/// The block of a buffer in front of members whose largest transfers are `max_transfers`
/// ([`MemberInfo::max_transfer`]): the smallest any of them states, rounded down to a power
/// of two within [`MIN_BLOCK`]..=[`MAX_BLOCK`], so no fetch is split by any member; `fallback`
/// when none states one.
pub fn block_for(max_transfers: impl IntoIterator<Item = Option<u64>>, fallback: u64) -> u64 {
    match max_transfers.into_iter().flatten().min() {
        None => fallback,
        Some(m) => {
            let m = m.clamp(MIN_BLOCK, MAX_BLOCK);
            let block = 1 << (63 - m.leading_zeros());
            debug_assert!(block <= m && block.is_power_of_two(), "no fetch is split");
            block
        }
    }
}

/// Dirty blocks one member writes back at once when every slot is dirty or busy.
const RELIEVE: usize = 8;

/// What one member's buffer did.
#[derive(Debug, Default)]
pub struct DabCounters {
    /// Reads served from memory: first and last sector held (case 1).
    pub hits: AtomicU64,
    /// Only the first sector held: the block with the last fetched (case 2).
    pub head_hits: AtomicU64,
    /// Only the last sector held: the block with the first fetched (case 3).
    pub tail_hits: AtomicU64,
    /// Neither held (case 4).
    pub misses: AtomicU64,
    /// Bytes fetched into blocks.
    pub prefetched_bytes: AtomicU64,
    /// Requests that went around the buffer (a block or larger, writes through, discards).
    pub bypassed: AtomicU64,
    /// Blocks replaced to make room.
    pub evicted: AtomicU64,
    /// Writes held in memory (write-back).
    pub absorbed: AtomicU64,
    /// Dirty blocks written back to the member.
    pub dirty_flushed: AtomicU64,
}

impl DabCounters {
    pub fn snapshot(&self) -> DabCounts {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        DabCounts {
            hits: g(&self.hits),
            head_hits: g(&self.head_hits),
            tail_hits: g(&self.tail_hits),
            misses: g(&self.misses),
            prefetched_bytes: g(&self.prefetched_bytes),
            bypassed: g(&self.bypassed),
            evicted: g(&self.evicted),
            absorbed: g(&self.absorbed),
            dirty_flushed: g(&self.dirty_flushed),
            holds_writes: false,
        }
    }
}

fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// A block's key: which member of the pool, which aligned block.
type Key = (u32, u64);

#[derive(Debug, PartialEq, Eq)]
enum State {
    Empty,
    /// Being fetched; installed only if `gen` is still the slot's when the data arrives.
    Fetching,
    Valid,
}

#[derive(Debug)]
struct Slot {
    key: Option<Key>,
    state: State,
    /// Woken when a fetch or a write-back of the block ends.
    waiters: Vec<Waker>,
    /// Bumped by every write that goes around the block: a fetch that started before
    /// carries an older value and installs nothing.
    gen: u64,
    /// The block's bytes; out of the slot while a fetch fills them.
    data: Option<AlignedBuf>,
    /// Valid bytes (a member's last block may be short).
    len: usize,
    referenced: bool,
    /// Holds bytes the member has not been given (write-back).
    dirty: bool,
    /// A copy of the block is being written to the member. One at a time per block, so
    /// write-backs reach the member in the order they were taken.
    writing: bool,
}

impl Slot {
    fn empty() -> Slot {
        Slot {
            key: None,
            state: State::Empty,
            waiters: Vec::new(),
            gen: 0,
            data: None,
            len: 0,
            referenced: false,
            dirty: false,
            writing: false,
        }
    }

    fn valid(&self) -> bool {
        self.state == State::Valid
    }

    fn wake(&mut self) {
        for w in self.waiters.drain(..) {
            w.wake();
        }
    }
}

struct Inner {
    slots: Vec<Slot>,
    map: NumberMap<Key, usize>,
    hand: usize,
}

/// The blocks an array's members share: the memory budget and its replacement.
pub struct DabPool {
    block: u64,
    mode: DabMode,
    /// Arrays over the pool's members that cannot lose a member now: while any is listed,
    /// a `WriteBack` pool holds no writes.
    not_redundant: Mutex<Vec<String>>,
    holding: std::sync::atomic::AtomicBool,
    inner: Mutex<Inner>,
    members: AtomicU64,
    /// Each wrapped member's name and counters, for reports.
    counters: Mutex<Vec<(String, Arc<DabCounters>)>>,
}

impl fmt::Debug for DabPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DabPool")
            .field("block", &self.block)
            .field("mode", &self.mode)
            .field("blocks", &self.lock().slots.len())
            .finish()
    }
}

impl DabPool {
    /// A pool of `budget` bytes in blocks of `block` bytes (a power of two, at least 4 KiB):
    /// at least one block. Block memory is allocated when first used and then kept.
    pub fn new(budget: u64, block: u64, mode: DabMode) -> Arc<DabPool> {
        assert!(
            block.is_power_of_two() && block >= 4096,
            "DAB block {block} is not a power of two of at least 4096"
        );
        let n = (budget / block).max(1) as usize;
        debug_assert!(
            n >= 1 && n as u64 * block <= budget.max(block),
            "within the budget"
        );
        Arc::new(DabPool {
            block,
            mode,
            not_redundant: Mutex::new(Vec::new()),
            holding: std::sync::atomic::AtomicBool::new(mode.is_write_back()),
            inner: Mutex::new(Inner {
                slots: (0..n).map(|_| Slot::empty()).collect(),
                map: NumberMap::with_capacity_and_hasher(n, Default::default()),
                hand: 0,
            }),
            members: AtomicU64::new(0),
            counters: Mutex::new(Vec::new()),
        })
    }

    pub fn block(&self) -> u64 {
        self.block
    }

    pub fn mode(&self) -> DabMode {
        self.mode
    }

    /// Whether writes are held in memory now (write-back, and allowed by redundancy).
    pub fn holds_writes(&self) -> bool {
        self.holding.load(Ordering::Acquire)
    }

    /// Records whether array `array` (one whose members the pool holds) can lose a member
    /// now. Returns whether the pool stopped (`Some(false)`) or started again
    /// (`Some(true)`) holding writes; the caller flushes the members when it stopped, so
    /// that no acknowledged write is left in memory alone.
    pub fn set_redundant(&self, array: &str, redundant: bool) -> Option<bool> {
        if self.mode != DabMode::WriteBack {
            return None;
        }
        let mut list = self.not_redundant.lock().expect(crate::POISONED);
        list.retain(|a| a != array);
        if !redundant {
            list.push(array.to_string());
        }
        debug_assert!(
            list.iter().filter(|a| *a == array).count() <= 1,
            "an array is listed once"
        );
        let hold = list.is_empty();
        let was = self.holding.swap(hold, Ordering::AcqRel);
        debug_assert!(
            self.mode == DabMode::WriteBack,
            "only write-back follows redundancy"
        );
        (was != hold).then_some(hold)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().expect(crate::POISONED)
    }

    /// Wraps `member` so its small reads (and, in write-back mode, writes) go through this
    /// pool.
    pub fn wrap(self: &Arc<DabPool>, member: Arc<dyn Member>) -> DabMember {
        let id = self.members.fetch_add(1, Ordering::Relaxed) as u32;
        let counters = Arc::new(DabCounters::default());
        self.counters
            .lock()
            .expect(crate::POISONED)
            .push((member.info().name.clone(), counters.clone()));
        DabMember {
            info: member.info().clone(),
            inner: member,
            pool: self.clone(),
            id,
            counters,
        }
    }

    /// Each member's counters, by name, in the order they were wrapped.
    pub fn member_counts(&self) -> Vec<(String, DabCounts)> {
        self.counters
            .lock()
            .expect(crate::POISONED)
            .iter()
            .map(|(n, c)| (n.clone(), c.snapshot()))
            .collect()
    }

    /// The counters of every member together.
    pub fn counts(&self) -> DabCounts {
        let mut sum = DabCounts::default();
        for (_, c) in self.member_counts() {
            sum.add(&c);
        }
        sum
    }

    /// Dirty blocks in the pool (write-back): bytes no member has been given yet.
    pub fn dirty_blocks(&self) -> usize {
        self.lock().slots.iter().filter(|s| s.dirty).count()
    }
}

impl Inner {
    /// A slot for `key`, replacing by CLOCK: skips blocks being fetched, dirty or being
    /// written back, and gives a second chance to referenced ones. `None` when no slot
    /// can be had.
    fn claim(&mut self, key: Key, evicted: &AtomicU64) -> Option<usize> {
        let n = self.slots.len();
        for _ in 0..2 * n {
            let i = self.hand;
            self.hand = (self.hand + 1) % n;
            let s = &mut self.slots[i];
            if s.state == State::Fetching || s.dirty || s.writing {
                continue;
            }
            if s.referenced {
                s.referenced = false;
                continue;
            }
            if let Some(old) = s.key.take() {
                self.map.remove(&old);
                if s.valid() {
                    bump(evicted, 1);
                }
            }
            s.key = Some(key);
            s.state = State::Fetching;
            s.gen += 1;
            let before = self.map.insert(key, i);
            debug_assert!(before.is_none(), "a block is held in one slot");
            debug_assert!(self.map.len() <= n, "the map names slots only");
            return Some(i);
        }
        None
    }

    /// Forgets slot `i`'s block (it must be neither dirty nor being written back).
    fn free(&mut self, i: usize) {
        let s = &mut self.slots[i];
        debug_assert!(!s.dirty && !s.writing, "a dirty block is never dropped");
        if let Some(k) = s.key.take() {
            self.map.remove(&k);
        }
        s.state = State::Empty;
        s.wake();
        debug_assert!(self.slots[i].key.is_none() && !self.slots[i].valid());
    }

    /// The slot holding `key`'s block, valid or not.
    fn slot_of(&self, key: Key) -> Option<usize> {
        let i = self.map.get(&key).copied();
        debug_assert!(
            i.is_none_or(|i| self.slots[i].key == Some(key)),
            "the map is true"
        );
        i
    }
}

/// Calls `f(block, offset in the block, offset in the range, bytes)` for each piece of the
/// `len` bytes at `pos`, cut at block boundaries.
fn pieces(b: u64, pos: u64, len: usize, mut f: impl FnMut(u64, usize, usize, usize)) {
    let mut done = 0;
    while done < len {
        let at = pos + done as u64;
        let within = (at % b) as usize;
        let n = (len - done).min(b as usize - within);
        debug_assert!(
            n > 0 && within + n <= b as usize,
            "a piece lies in its block"
        );
        f(at / b, within, done, n);
        done += n;
    }
    debug_assert_eq!(done, len);
}

/// A member with a DMA-aligned buffer in front of it.
pub struct DabMember {
    info: MemberInfo,
    inner: Arc<dyn Member>,
    pool: Arc<DabPool>,
    id: u32,
    counters: Arc<DabCounters>,
}

impl fmt::Debug for DabMember {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DabMember")
            .field("info", &self.info)
            .field("block", &self.pool.block)
            .field("mode", &self.pool.mode)
            .finish()
    }
}

/// What a look found of a request's blocks.
enum Found {
    /// Every block held: the request was served from (or into) them.
    Held,
    /// Blocks to fetch (slots claimed: slot, block, the slot's write generation), and
    /// whether others are fetching some (wait for them, then look again).
    Work {
        fetch: Vec<(usize, u64, u64)>,
        wait: bool,
    },
    /// No slot free: go around the buffer.
    Full,
}

/// The slots of a small request's blocks, all held: `slots[k]` holds block `first + k`.
#[derive(Clone, Copy)]
struct Held {
    first: u64,
    slots: [usize; 2],
}

impl Held {
    fn slot(&self, blk: u64) -> usize {
        debug_assert!(
            blk >= self.first && blk - self.first < 2,
            "a block of the request"
        );
        self.slots[(blk - self.first) as usize]
    }
}

/// Puts a claimed slot back if its fetch is dropped before it ends, so that nobody waits
/// on it forever.
struct FetchGuard<'a> {
    pool: &'a DabPool,
    i: usize,
    key: Key,
}

impl Drop for FetchGuard<'_> {
    fn drop(&mut self) {
        let mut inner = self.pool.lock();
        let s = &inner.slots[self.i];
        if s.key == Some(self.key) && s.state == State::Fetching {
            inner.free(self.i);
        }
    }
}

/// Marks a block dirty again if its write-back is dropped before it ends.
struct WritingGuard<'a> {
    pool: &'a DabPool,
    i: usize,
    key: Key,
}

impl Drop for WritingGuard<'_> {
    fn drop(&mut self) {
        let mut inner = self.pool.lock();
        let s = &mut inner.slots[self.i];
        if s.key == Some(self.key) && s.writing {
            s.writing = false;
            s.dirty = true;
            s.wake();
        }
    }
}

impl DabMember {
    pub fn counters(&self) -> Arc<DabCounters> {
        self.counters.clone()
    }

    /// Whether dirty blocks may exist: reads around the buffer and flushes write them back.
    fn write_back_mode(&self) -> bool {
        self.pool.mode.is_write_back()
    }

    /// The aligned blocks `[offset, offset + len)` touches.
    fn blocks(&self, offset: u64, len: u64) -> std::ops::RangeInclusive<u64> {
        debug_assert!(
            len > 0 && offset + len <= self.info.size_bytes,
            "a range of the member"
        );
        let b = self.pool.block;
        offset / b..=(offset + len - 1) / b
    }

    /// Looks up a request's blocks (smaller than a block: one or two): when both are held,
    /// runs `held` on their slots under the lock (a copy out, or in); else claims what to
    /// fetch. `count` counts the paper's case. Each block is looked up once.
    fn look(
        &self,
        offset: u64,
        len: u64,
        count: bool,
        held: &mut dyn FnMut(&mut Inner, Held),
    ) -> Found {
        debug_assert!(len > 0 && len < self.pool.block, "a small request");
        let mut inner = self.pool.lock();
        let blocks = self.blocks(offset, len);
        let (first, last) = (*blocks.start(), *blocks.end());
        let valid = |inner: &Inner, blk: u64| {
            inner
                .slot_of((self.id, blk))
                .filter(|&i| inner.slots[i].valid())
        };
        let head = valid(&inner, first);
        let tail = if last == first {
            head
        } else {
            valid(&inner, last)
        };
        if count {
            let c = &self.counters;
            bump(
                match (head.is_some(), tail.is_some()) {
                    (true, true) => &c.hits,
                    (true, false) => &c.head_hits,
                    (false, true) => &c.tail_hits,
                    (false, false) => &c.misses,
                },
                1,
            );
        }
        if let (Some(h), Some(t)) = (head, tail) {
            debug_assert!(
                last - first <= 1,
                "a small request spans at most two blocks"
            );
            held(
                &mut inner,
                Held {
                    first,
                    slots: [h, t],
                },
            );
            return Found::Held;
        }
        let mut fetch = Vec::new();
        let mut wait = false;
        for blk in blocks {
            match inner.slot_of((self.id, blk)) {
                Some(i) if inner.slots[i].valid() => {}
                Some(_) => wait = true,
                None => match inner.claim((self.id, blk), &self.counters.evicted) {
                    Some(i) => {
                        let gen = inner.slots[i].gen;
                        fetch.push((i, blk, gen));
                    }
                    None => {
                        // Give back what this look claimed: nobody waits on those yet.
                        for (i, _, _) in fetch {
                            inner.free(i);
                        }
                        return Found::Full;
                    }
                },
            }
        }
        Found::Work { fetch, wait }
    }

    /// Copies the held blocks' bytes at `offset` into the windows of `iov`.
    fn copy_out(&self, inner: &mut Inner, held: Held, offset: u64, iov: &mut IoVecMut) {
        let mut pos = offset;
        for w in iov.iter_mut() {
            let out = w.as_mut_slice();
            pieces(self.pool.block, pos, out.len(), |blk, within, at, n| {
                let s = &mut inner.slots[held.slot(blk)];
                s.referenced = true;
                let data = s.data.as_ref().expect("a valid block has its bytes");
                debug_assert!(
                    s.valid() && within + n <= s.len,
                    "held bytes are valid ones"
                );
                out[at..at + n].copy_from_slice(&data[within..within + n]);
            });
            pos += out.len() as u64;
        }
    }

    /// Copies the windows of `iov` (bytes at `offset`) into those of their blocks that are
    /// held, which become dirty.
    fn copy_in(&self, inner: &mut Inner, offset: u64, iov: &IoVec) {
        let mut pos = offset;
        for w in iov.iter() {
            let src = w.as_slice();
            pieces(self.pool.block, pos, src.len(), |blk, within, at, n| {
                let Some(i) = inner.slot_of((self.id, blk)) else {
                    return;
                };
                let s = &mut inner.slots[i];
                if !s.valid() {
                    return;
                }
                let data = s.data.as_mut().expect("a valid block has its bytes");
                data[within..within + n].copy_from_slice(&src[at..at + n]);
                s.dirty = true;
                s.referenced = true;
            });
            pos += src.len() as u64;
        }
    }

    /// Fetches block `blk` into slot `i`; installs it if no write went around it meanwhile.
    /// False when the member's read failed.
    async fn fetch(&self, i: usize, blk: u64, gen: u64) -> bool {
        let guard = FetchGuard {
            pool: &self.pool,
            i,
            key: (self.id, blk),
        };
        let b = self.pool.block;
        let start = blk * b;
        debug_assert!(start < self.info.size_bytes, "a block of the member");
        let len = b.min(self.info.size_bytes - start) as usize;
        let buf = self.pool.lock().slots[i].data.take();
        let buf = SharedBuf::new(match buf {
            Some(mut x) if x.capacity() >= b as usize => {
                x.set_len(len);
                x
            }
            _ => AlignedBuf::for_overwrite(len),
        });
        let mut iov = IoVecMut::new();
        iov.push(buf.slice_mut(0..len).expect("a fresh block"));
        let (r, iov) = self.inner.read(start, iov).await;
        let lost = super::contract::windows_lost(&r);
        drop(iov);
        let data = if lost {
            None
        } else {
            buf.try_into_inner().ok()
        };
        std::mem::forget(guard);
        let mut inner = self.pool.lock();
        let read_ok = r.is_ok() && data.is_some();
        let s = &mut inner.slots[i];
        let ok = read_ok && s.gen == gen && s.key == Some((self.id, blk));
        s.data = data;
        if ok {
            debug_assert_eq!(s.state, State::Fetching, "only a fetch makes a block valid");
            s.state = State::Valid;
            s.len = len;
            s.referenced = true;
            s.wake();
            bump(&self.counters.prefetched_bytes, len as u64);
        } else if s.key == Some((self.id, blk)) {
            // A write went around it, or the read failed: nothing is installed.
            inner.free(i);
        } else {
            s.wake();
        }
        read_ok
    }

    /// Waits until none of the blocks `[offset, offset + len)` touches is being fetched.
    async fn settle(&self, offset: u64, len: u64) {
        std::future::poll_fn(|cx| {
            let mut inner = self.pool.lock();
            let mut pending = false;
            for blk in self.blocks(offset, len) {
                if let Some(i) = inner.slot_of((self.id, blk)) {
                    let s = &mut inner.slots[i];
                    if s.state == State::Fetching {
                        s.waiters.push(cx.waker().clone());
                        pending = true;
                    }
                }
            }
            if pending {
                Poll::Pending
            } else {
                Poll::Ready(())
            }
        })
        .await
    }

    /// Serves `[offset, offset + len)` through the buffer, fetching the blocks it lacks,
    /// and runs `held` on them under the lock once all are held. False when it could not
    /// (no room, a failed fetch, blocks lost to writes again and again): the caller goes
    /// to the member, which then reports any failure.
    async fn through_buffer(
        &self,
        offset: u64,
        len: u64,
        read: bool,
        held: &mut dyn FnMut(&mut Inner, Held),
    ) -> bool {
        for attempt in 0..4 {
            match self.look(offset, len, read && attempt == 0, held) {
                Found::Held => return true,
                Found::Full => {
                    if !(self.write_back_mode() && self.relieve().await) {
                        return false;
                    }
                }
                Found::Work { fetch, wait } => {
                    let mut failed = false;
                    for (i, blk, gen) in fetch {
                        failed |= !self.fetch(i, blk, gen).await;
                    }
                    if failed {
                        return false;
                    }
                    if wait {
                        self.settle(offset, len).await;
                    }
                }
            }
        }
        false
    }

    /// A read that goes around the buffer. In write-back mode the dirty blocks it overlaps
    /// are written back first, so the member holds every write acknowledged before it.
    async fn read_around(&self, offset: u64, iov: IoVecMut) -> (io::Result<()>, IoVecMut) {
        bump(&self.counters.bypassed, 1);
        if self.write_back_mode() {
            let len: u64 = iov.iter().map(|w| w.len() as u64).sum();
            if let Err(e) = self.clean(offset, len).await {
                return (Err(e), iov);
            }
        }
        self.inner.read(offset, iov).await
    }

    /// A write that goes to the member. When it completes, a fetch of its blocks still in
    /// flight (it may have read the old bytes) installs nothing; a held block is dropped
    /// (write-through) or given the written bytes and marked dirty (write-back: a copy of
    /// it being written back may carry the old bytes, and it may hold bytes not yet written).
    async fn write_around(&self, offset: u64, iov: IoVec) -> io::Result<()> {
        bump(&self.counters.bypassed, 1);
        let len: u64 = iov.iter().map(|w| w.len() as u64).sum();
        let kept = self.write_back_mode().then(|| iov.clone());
        let r = self.inner.write(offset, iov).await;
        // A write-back pool that holds no writes now drops what a write-through one
        // drops: the blocks with nothing of their own to write back.
        let holding = self.pool.holds_writes();
        let mut inner = self.pool.lock();
        for blk in self.blocks(offset, len) {
            if let Some(i) = inner.slot_of((self.id, blk)) {
                let s = &mut inner.slots[i];
                s.gen += 1;
                let idle = !holding && !s.dirty && !s.writing;
                if s.valid() && (kept.is_none() || idle) {
                    inner.free(i);
                }
            }
        }
        if let Some(iov) = &kept {
            self.copy_in(&mut inner, offset, iov);
        }
        r
    }

    /// Writes back slot `i`'s block if it is this member's, dirty and not being written
    /// back already: a copy, so the block can be read and written meanwhile. Whether it
    /// wrote; a failure leaves the block dirty.
    async fn write_back(&self, i: usize) -> io::Result<bool> {
        let (key, copy) = {
            let mut inner = self.pool.lock();
            let s = &mut inner.slots[i];
            let Some(key) = s.key.filter(|k| k.0 == self.id) else {
                return Ok(false);
            };
            if !s.dirty || s.writing || !s.valid() {
                return Ok(false);
            }
            let data = s.data.as_ref().expect("a valid block has its bytes");
            let copy = AlignedBuf::from_slice(&data[..s.len]);
            s.dirty = false;
            s.writing = true;
            (key, copy)
        };
        let guard = WritingGuard {
            pool: &self.pool,
            i,
            key,
        };
        let r = super::contract::write_bytes(&*self.inner, key.1 * self.pool.block, copy).await;
        std::mem::forget(guard);
        let mut inner = self.pool.lock();
        let s = &mut inner.slots[i];
        debug_assert_eq!(s.key, Some(key), "a block being written back stays");
        s.writing = false;
        if r.is_err() {
            s.dirty = true;
        } else {
            bump(&self.counters.dirty_flushed, 1);
        }
        s.wake();
        r.map(|()| true)
    }

    /// Makes sure the member holds what slot `i` held as `key` when this was called:
    /// waits for a write-back in flight, writes back a dirty block.
    async fn clean_slot(&self, i: usize, key: Key) -> io::Result<()> {
        loop {
            let writing = {
                let inner = self.pool.lock();
                let s = &inner.slots[i];
                if s.key != Some(key) || !(s.dirty || s.writing) {
                    return Ok(());
                }
                s.writing
            };
            if writing {
                std::future::poll_fn(|cx| {
                    let mut inner = self.pool.lock();
                    let s = &mut inner.slots[i];
                    if s.key == Some(key) && s.writing {
                        s.waiters.push(cx.waker().clone());
                        Poll::Pending
                    } else {
                        Poll::Ready(())
                    }
                })
                .await;
            } else if self.write_back(i).await? {
                return Ok(());
            }
        }
    }

    /// Writes back the dirty blocks `[offset, offset + len)` touches.
    async fn clean(&self, offset: u64, len: u64) -> io::Result<()> {
        for blk in self.blocks(offset, len) {
            let key = (self.id, blk);
            let slot = self.pool.lock().slot_of(key);
            if let Some(i) = slot {
                self.clean_slot(i, key).await?;
            }
        }
        Ok(())
    }

    /// Writes back some of this member's dirty blocks to make room (every slot was dirty
    /// or busy). Whether any was written.
    async fn relieve(&self) -> bool {
        let picks: Vec<usize> = {
            let inner = self.pool.lock();
            (0..inner.slots.len())
                .filter(|&i| {
                    let s = &inner.slots[i];
                    s.key.is_some_and(|k| k.0 == self.id) && s.dirty && !s.writing
                })
                .take(RELIEVE)
                .collect()
        };
        let done = futures::future::join_all(picks.into_iter().map(|i| self.write_back(i))).await;
        let mut wrote = false;
        for r in done {
            match r {
                Ok(w) => wrote |= w,
                Err(e) => tracing::warn!(member = %self.info.name, "DAB write-back failed: {e}"),
            }
        }
        wrote
    }

    /// Writes back every block of this member that was dirty when it was called.
    async fn flush_dirty(&self) -> io::Result<()> {
        let dirty: Vec<(usize, Key)> = {
            let inner = self.pool.lock();
            inner
                .slots
                .iter()
                .enumerate()
                .filter_map(|(i, s)| {
                    s.key
                        .filter(|k| k.0 == self.id && (s.dirty || s.writing))
                        .map(|k| (i, k))
                })
                .collect()
        };
        let done =
            futures::future::join_all(dirty.into_iter().map(|(i, k)| self.clean_slot(i, k))).await;
        done.into_iter().collect()
    }

    /// A write smaller than a block, in write-back mode: into its blocks, fetched first if
    /// need be; around the buffer when that cannot be.
    async fn write_into(&self, offset: u64, iov: IoVec) -> io::Result<()> {
        let len: u64 = iov.iter().map(|w| w.len() as u64).sum();
        let mut held = |inner: &mut Inner, _: Held| self.copy_in(inner, offset, &iov);
        if self.through_buffer(offset, len, false, &mut held).await {
            bump(&self.counters.absorbed, 1);
            if !self.pool.holds_writes() {
                // The pool stopped holding writes while this one was on its way in: it
                // goes to the member before it is acknowledged.
                self.clean(offset, len).await?;
            }
            return Ok(());
        }
        self.write_around(offset, iov).await
    }
}

impl Drop for DabMember {
    /// Gives the member's blocks back to the pool. Dirty ones are lost: a member is let go
    /// with dirty blocks only when it failed or the array stopped without a flush.
    fn drop(&mut self) {
        let mut inner = self.pool.lock();
        let mine: Vec<usize> = (0..inner.slots.len())
            .filter(|&i| inner.slots[i].key.is_some_and(|k| k.0 == self.id))
            .collect();
        let mut lost = 0;
        for i in mine {
            let s = &mut inner.slots[i];
            lost += usize::from(s.dirty);
            s.dirty = false;
            s.writing = false;
            inner.free(i);
        }
        if lost > 0 {
            tracing::warn!(member = %self.info.name, blocks = lost, "DAB dropped unwritten dirty blocks");
        }
    }
}

impl Member for DabMember {
    fn info(&self) -> &MemberInfo {
        &self.info
    }

    fn read(&self, offset: u64, iov: IoVecMut) -> MemberFuture<'_, (io::Result<()>, IoVecMut)> {
        let len: u64 = iov.iter().map(|w| w.len() as u64).sum();
        if len == 0 || (len >= self.pool.block && !self.write_back_mode()) {
            bump(&self.counters.bypassed, 1);
            return self.inner.read(offset, iov);
        }
        MemberFuture::new(async move {
            let mut iov = iov;
            if len < self.pool.block {
                let mut held =
                    |inner: &mut Inner, h: Held| self.copy_out(inner, h, offset, &mut iov);
                if self.through_buffer(offset, len, true, &mut held).await {
                    return (Ok(()), iov);
                }
            }
            self.read_around(offset, iov).await
        })
    }

    fn write(&self, offset: u64, iov: IoVec) -> MemberFuture<'_, io::Result<()>> {
        let len: u64 = iov.iter().map(|w| w.len() as u64).sum();
        if self.pool.holds_writes() && len > 0 && len < self.pool.block {
            return MemberFuture::new(self.write_into(offset, iov));
        }
        MemberFuture::new(self.write_around(offset, iov))
    }

    fn flush(&self) -> MemberFuture<'_, io::Result<()>> {
        if !self.write_back_mode() {
            return self.inner.flush();
        }
        MemberFuture::new(async move {
            self.flush_dirty().await?;
            self.inner.flush().await
        })
    }

    fn dab(&self) -> Option<DabCounts> {
        Some(DabCounts {
            holds_writes: self.pool.holds_writes(),
            ..self.counters.snapshot()
        })
    }

    fn checksums(&self) -> Option<&dyn super::contract::Checksums> {
        self.inner.checksums()
    }

    fn discard(&self, offset: u64, len: u64) -> MemberFuture<'_, io::Result<()>> {
        MemberFuture::new(async move {
            bump(&self.counters.bypassed, 1);
            let r = self.inner.discard(offset, len).await;
            if len > 0 {
                // Later reads may return zeros or the old bytes: a dirty block (or one
                // being written back) keeps what it holds; a clean one is dropped.
                let mut inner = self.pool.lock();
                for blk in self.blocks(offset, len) {
                    if let Some(i) = inner.slot_of((self.id, blk)) {
                        let s = &mut inner.slots[i];
                        s.gen += 1;
                        if s.valid() && !s.dirty && !s.writing {
                            inner.free(i);
                        }
                    }
                }
            }
            r
        })
    }
}
