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
//! Writes go through (the default and, for now, the only mode): when a write completes, the
//! blocks it touched are dropped and a fetch it overlapped installs nothing, so no read that
//! starts after a write completes is served the bytes from before it.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Poll, Waker};

use raidd_rt::{AlignedBuf, IoVec, IoVecMut, SharedBuf};

use super::contract::{DabCounts, Member, MemberFuture, MemberInfo};

/// What one member's buffer did.
#[derive(Debug, Default)]
pub struct DabCounters {
    /// Requests served from memory: first and last sector held (case 1).
    pub hits: AtomicU64,
    /// Only the first sector held: the block with the last fetched (case 2).
    pub head_hits: AtomicU64,
    /// Only the last sector held: the block with the first fetched (case 3).
    pub tail_hits: AtomicU64,
    /// Neither held (case 4).
    pub misses: AtomicU64,
    /// Bytes fetched into blocks.
    pub prefetched_bytes: AtomicU64,
    /// Requests that went around the buffer (a block or larger, writes, discards).
    pub bypassed: AtomicU64,
    /// Blocks replaced to make room.
    pub evicted: AtomicU64,
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
        }
    }
}

fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// A block's key: which member of the pool, which aligned block.
type Key = (u32, u64);

#[derive(Debug)]
enum State {
    Empty,
    /// Being fetched; installed only if `gen` is still the slot's when the data arrives.
    Fetching {
        waiters: Vec<Waker>,
    },
    Valid,
}

#[derive(Debug)]
struct Slot {
    key: Option<Key>,
    state: State,
    /// Bumped by every write that touches the block: a fetch that started before carries
    /// an older value and installs nothing.
    gen: u64,
    /// The block's bytes; out of the slot while a fetch fills them.
    data: Option<AlignedBuf>,
    /// Valid bytes (a member's last block may be short).
    len: usize,
    referenced: bool,
}

struct Inner {
    slots: Vec<Slot>,
    map: HashMap<Key, usize>,
    hand: usize,
}

/// The blocks an array's members share: the memory budget and its replacement.
pub struct DabPool {
    block: u64,
    inner: Mutex<Inner>,
    members: AtomicU64,
    /// Each wrapped member's name and counters, for reports.
    counters: Mutex<Vec<(String, Arc<DabCounters>)>>,
}

impl fmt::Debug for DabPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DabPool")
            .field("block", &self.block)
            .field("blocks", &self.lock().slots.len())
            .finish()
    }
}

impl DabPool {
    /// A pool of `budget` bytes in blocks of `block` bytes (a power of two, at least 4 KiB):
    /// at least one block. Block memory is allocated when first used and then kept.
    pub fn new(budget: u64, block: u64) -> Arc<DabPool> {
        assert!(
            block.is_power_of_two() && block >= 4096,
            "DAB block {block} is not a power of two of at least 4096"
        );
        let n = (budget / block).max(1) as usize;
        let slots = (0..n)
            .map(|_| Slot {
                key: None,
                state: State::Empty,
                gen: 0,
                data: None,
                len: 0,
                referenced: false,
            })
            .collect();
        Arc::new(DabPool {
            block,
            inner: Mutex::new(Inner {
                slots,
                map: HashMap::with_capacity(n),
                hand: 0,
            }),
            members: AtomicU64::new(0),
            counters: Mutex::new(Vec::new()),
        })
    }

    pub fn block(&self) -> u64 {
        self.block
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().expect(crate::POISONED)
    }

    /// Wraps `member` so its small reads go through this pool.
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
}

impl Inner {
    /// A slot for `key`, replacing by CLOCK: skips blocks being fetched and gives a second
    /// chance to referenced ones. `None` when every slot is being fetched.
    fn claim(&mut self, key: Key, evicted: &AtomicU64) -> Option<usize> {
        let n = self.slots.len();
        for _ in 0..2 * n {
            let i = self.hand;
            self.hand = (self.hand + 1) % n;
            let s = &mut self.slots[i];
            if matches!(s.state, State::Fetching { .. }) {
                continue;
            }
            if s.referenced {
                s.referenced = false;
                continue;
            }
            if let Some(old) = s.key.take() {
                self.map.remove(&old);
                if matches!(s.state, State::Valid) {
                    bump(evicted, 1);
                }
            }
            s.key = Some(key);
            s.state = State::Fetching {
                waiters: Vec::new(),
            };
            s.gen += 1;
            self.map.insert(key, i);
            return Some(i);
        }
        None
    }

    /// Drops `key`'s block, or makes its fetch in flight install nothing.
    fn invalidate(&mut self, key: Key) {
        if let Some(&i) = self.map.get(&key) {
            let s = &mut self.slots[i];
            s.gen += 1;
            if matches!(s.state, State::Valid) {
                s.state = State::Empty;
                s.key = None;
                self.map.remove(&key);
            }
        }
    }
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
            .finish()
    }
}

/// What a read found of its blocks.
enum Found {
    /// Every block held: copied out.
    Served,
    /// Blocks to fetch (slots claimed: slot, block, the slot's write generation), and
    /// whether others are fetching some (wait for them, then look again).
    Work {
        fetch: Vec<(usize, u64, u64)>,
        wait: bool,
    },
    /// No slot free: go around the buffer.
    Full,
}

impl DabMember {
    pub fn counters(&self) -> Arc<DabCounters> {
        self.counters.clone()
    }

    /// The aligned blocks `[offset, offset + len)` touches.
    fn blocks(&self, offset: u64, len: u64) -> std::ops::RangeInclusive<u64> {
        let b = self.pool.block;
        offset / b..=(offset + len - 1) / b
    }

    /// Looks up a read's blocks: copies it out if all are held, else claims what to fetch.
    fn look(&self, offset: u64, iov: &mut IoVecMut, first_look: bool) -> Found {
        let len: u64 = iov.iter().map(|w| w.len() as u64).sum();
        let b = self.pool.block;
        let mut inner = self.pool.lock();
        // A range, not a list: a hit allocates nothing.
        let blocks = self.blocks(offset, len);
        let (first, last) = (*blocks.start(), *blocks.end());
        let held = |inner: &Inner, blk: u64| {
            inner
                .map
                .get(&(self.id, blk))
                .is_some_and(|&i| matches!(inner.slots[i].state, State::Valid))
        };
        if first_look {
            let (head, tail) = (held(&inner, first), held(&inner, last));
            let c = &self.counters;
            bump(
                match (head, tail) {
                    (true, true) => &c.hits,
                    (true, false) => &c.head_hits,
                    (false, true) => &c.tail_hits,
                    (false, false) => &c.misses,
                },
                1,
            );
        }
        if blocks.clone().all(|blk| held(&inner, blk)) {
            let mut pos = offset;
            for w in iov.iter_mut() {
                let out = w.as_mut_slice();
                let mut done = 0;
                while done < out.len() {
                    let at = pos + done as u64;
                    let i = inner.map[&(self.id, at / b)];
                    let s = &mut inner.slots[i];
                    s.referenced = true;
                    let within = (at % b) as usize;
                    let n = (out.len() - done).min(b as usize - within);
                    let data = s.data.as_ref().expect("a valid block has its bytes");
                    out[done..done + n].copy_from_slice(&data[within..within + n]);
                    done += n;
                }
                pos += out.len() as u64;
            }
            return Found::Served;
        }
        let mut fetch = Vec::new();
        let mut wait = false;
        for blk in blocks {
            match inner.map.get(&(self.id, blk)).copied() {
                Some(i) if matches!(inner.slots[i].state, State::Valid) => {}
                Some(_) => wait = true,
                None => match inner.claim((self.id, blk), &self.counters.evicted) {
                    Some(i) => {
                        let gen = inner.slots[i].gen;
                        fetch.push((i, blk, gen));
                    }
                    None => {
                        // Give back what this look claimed: nobody waits on those yet.
                        for (i, blk, _) in fetch {
                            let s = &mut inner.slots[i];
                            s.state = State::Empty;
                            s.key = None;
                            inner.map.remove(&(self.id, blk));
                        }
                        return Found::Full;
                    }
                },
            }
        }
        Found::Work { fetch, wait }
    }

    /// Fetches block `blk` into slot `i`; installs it if no write touched it meanwhile.
    /// False when the member's read failed.
    async fn fetch(&self, i: usize, blk: u64, gen: u64) -> bool {
        let b = self.pool.block;
        let start = blk * b;
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
        let mut inner = self.pool.lock();
        let s = &mut inner.slots[i];
        let waiters = match std::mem::replace(&mut s.state, State::Empty) {
            State::Fetching { waiters } => waiters,
            _ => Vec::new(),
        };
        let read_ok = r.is_ok() && data.is_some();
        let ok = read_ok && s.gen == gen && s.key == Some((self.id, blk));
        s.data = data;
        if ok {
            s.state = State::Valid;
            s.len = len;
            s.referenced = true;
            bump(&self.counters.prefetched_bytes, len as u64);
        } else if s.key == Some((self.id, blk)) {
            // A write overlapped, or the read failed: nothing is installed.
            s.key = None;
            inner.map.remove(&(self.id, blk));
        }
        drop(inner);
        for w in waiters {
            w.wake();
        }
        read_ok
    }

    /// Waits until none of the blocks `[offset, offset + len)` touches is being fetched.
    async fn settle(&self, offset: u64, len: u64) {
        std::future::poll_fn(|cx| {
            let mut inner = self.pool.lock();
            let mut pending = false;
            for blk in self.blocks(offset, len) {
                if let Some(&i) = inner.map.get(&(self.id, blk)) {
                    if let State::Fetching { waiters } = &mut inner.slots[i].state {
                        waiters.push(cx.waker().clone());
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

    /// A read smaller than a block: from the buffer, fetching what it lacks. A block lost
    /// to a write before it could be copied is looked for again, a few times; after that,
    /// or when the member's read fails or no slot is free, the read goes to the member
    /// (which, writes going through, always holds the data; a failure is reported there).
    async fn read_through(&self, offset: u64, mut iov: IoVecMut) -> (io::Result<()>, IoVecMut) {
        let len: u64 = iov.iter().map(|w| w.len() as u64).sum();
        for attempt in 0..4 {
            match self.look(offset, &mut iov, attempt == 0) {
                Found::Served => return (Ok(()), iov),
                Found::Full => break,
                Found::Work { fetch, wait } => {
                    let mut failed = false;
                    for (i, blk, gen) in fetch {
                        failed |= !self.fetch(i, blk, gen).await;
                    }
                    if failed {
                        break;
                    }
                    if wait {
                        self.settle(offset, len).await;
                    }
                }
            }
        }
        bump(&self.counters.bypassed, 1);
        self.inner.read(offset, iov).await
    }

    fn invalidate(&self, offset: u64, len: u64) {
        if len == 0 {
            return;
        }
        let mut inner = self.pool.lock();
        for blk in self.blocks(offset, len) {
            inner.invalidate((self.id, blk));
        }
    }
}

impl Member for DabMember {
    fn info(&self) -> &MemberInfo {
        &self.info
    }

    fn read(&self, offset: u64, iov: IoVecMut) -> MemberFuture<'_, (io::Result<()>, IoVecMut)> {
        let len: u64 = iov.iter().map(|w| w.len() as u64).sum();
        if len == 0 || len >= self.pool.block {
            bump(&self.counters.bypassed, 1);
            return self.inner.read(offset, iov);
        }
        MemberFuture::new(self.read_through(offset, iov))
    }

    fn write(&self, offset: u64, iov: IoVec) -> MemberFuture<'_, io::Result<()>> {
        let len: u64 = iov.iter().map(|w| w.len() as u64).sum();
        MemberFuture::new(async move {
            let r = self.inner.write(offset, iov).await;
            // Once the member holds the new bytes: a block fetched before is dropped, and a
            // fetch still in flight (it may have read the old bytes) installs nothing. A
            // read that started before the write completed may still see the old bytes, as
            // it may from any device.
            self.invalidate(offset, len);
            r
        })
    }

    fn flush(&self) -> MemberFuture<'_, io::Result<()>> {
        self.inner.flush()
    }

    fn dab(&self) -> Option<DabCounts> {
        Some(self.counters.snapshot())
    }

    fn discard(&self, offset: u64, len: u64) -> MemberFuture<'_, io::Result<()>> {
        MemberFuture::new(async move {
            let r = self.inner.discard(offset, len).await;
            self.invalidate(offset, len);
            r
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::member::{FaultMember, FaultPlan, MemMember};
    use crate::pattern;
    use proptest::prelude::*;
    use std::cell::RefCell;
    use std::rc::Rc;

    const SIZE: u64 = 64 << 10;
    const SECTORS: usize = (SIZE / 512) as usize;
    const SEED: u64 = 0xdab;

    /// What every sector may hold: the newest write completed before a read started, up to
    /// the newest write issued by the time it ended. Writes to a sector do not overlap in
    /// time (the order of overlapping writes is the device's, and not what is tested here).
    struct Model {
        completed: Vec<u64>,
        issued: Vec<u64>,
        writing: Vec<bool>,
        next: u64,
    }

    fn written(first: u64, sectors: u64, gen: u64) -> AlignedBuf {
        let mut b = AlignedBuf::zeroed((sectors * 512) as usize);
        pattern::fill(&mut b, first, gen, SEED);
        b
    }

    /// `ops` run by `tasks` concurrent tasks over one DAB member of a pool of `blocks`
    /// blocks of 4 KiB, the member answering after a seeded number of executor turns: every
    /// read returns, for each sector, a generation no older than the last write completed
    /// before it started. Returns the number of stale sectors seen and the counters.
    fn run(seed: u64, tasks: usize, ops: usize, blocks: u64) -> (usize, DabCounts) {
        let mem = Arc::new(MemMember::new("m", SIZE));
        // Generation 1 everywhere to start.
        mem.write_sync(0, &written(0, SIZE / 512, 1));
        let plan = FaultPlan {
            seed,
            delay_yields: Some((0, 6)),
            ..FaultPlan::default()
        };
        let faulty: Arc<dyn Member> = Arc::new(FaultMember::new(mem, plan));
        let pool = DabPool::new(blocks * 4096, 4096);
        let dab = Rc::new(pool.wrap(faulty));
        let model = Rc::new(RefCell::new(Model {
            completed: vec![1; SECTORS],
            issued: vec![1; SECTORS],
            writing: vec![false; SECTORS],
            next: 2,
        }));
        let stale = Rc::new(std::cell::Cell::new(0usize));
        raidd_rt::block_on({
            let (dab, model, stale) = (dab.clone(), model.clone(), stale.clone());
            async move {
                let handles: Vec<_> = (0..tasks as u64)
                    .map(|t| {
                        let (dab, model, stale) = (dab.clone(), model.clone(), stale.clone());
                        raidd_rt::spawn_local(async move {
                            let mut x = seed ^ (t + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                            let mut rnd = move |n: u64| {
                                x ^= x << 13;
                                x ^= x >> 7;
                                x ^= x << 17;
                                x % n
                            };
                            for _ in 0..ops {
                                // Mostly small reads, some of them across a block boundary,
                                // and writes of a sector to two blocks.
                                let first = rnd(SECTORS as u64 - 24);
                                let long = rnd(4) == 0;
                                let sectors = 1 + rnd(if long { 20 } else { 7 });
                                let range = first as usize..(first + sectors) as usize;
                                let busy = model.borrow().writing[range.clone()].iter().any(|&w| w);
                                match rnd(10) {
                                    0..=2 if !busy => {
                                        let gen = {
                                            let mut m = model.borrow_mut();
                                            let g = m.next;
                                            m.next += 1;
                                            for s in range.clone() {
                                                m.issued[s] = m.issued[s].max(g);
                                                m.writing[s] = true;
                                            }
                                            g
                                        };
                                        crate::member::write_bytes(
                                            &*dab,
                                            first * 512,
                                            written(first, sectors, gen),
                                        )
                                        .await
                                        .expect("write");
                                        let mut m = model.borrow_mut();
                                        for s in range {
                                            m.completed[s] = m.completed[s].max(gen);
                                            m.writing[s] = false;
                                        }
                                    }
                                    3 => {
                                        // The whole member, going around the buffer.
                                        crate::member::read_bytes(&*dab, 0, SIZE as usize)
                                            .await
                                            .expect("read");
                                    }
                                    _ => {
                                        let lo: Vec<u64> =
                                            model.borrow().completed[range.clone()].to_vec();
                                        let b = crate::member::read_bytes(
                                            &*dab,
                                            first * 512,
                                            (sectors * 512) as usize,
                                        )
                                        .await
                                        .expect("read");
                                        let hi: Vec<u64> =
                                            model.borrow().issued[range.clone()].to_vec();
                                        for (k, sec) in b.chunks_exact(512).enumerate() {
                                            let s = first + k as u64;
                                            let ok = (lo[k]..=hi[k]).any(|g| {
                                                pattern::check_sector(sec, s, g, SEED).is_none()
                                            });
                                            if !ok {
                                                stale.set(stale.get() + 1);
                                            }
                                        }
                                    }
                                }
                            }
                        })
                    })
                    .collect();
                for h in handles {
                    h.await;
                }
            }
        });
        (stale.get(), dab.counters.snapshot())
    }

    /// Cases to run: `RAIDD_DAB_CASES` if set, else `default`.
    fn cases(default: u32) -> u32 {
        std::env::var("RAIDD_DAB_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    }

    proptest! {
        // RAIDD_DAB_CASES runs more (the 10,000; the test command runs 64).
        #![proptest_config(ProptestConfig::with_cases(cases(64)))]
        /// Concurrent reads, writes and whole-member reads, with a pool of one to four
        /// blocks (so blocks are evicted all the time) or more than the member: never a
        /// stale sector.
        #[test]
        fn no_read_is_ever_stale(seed in any::<u64>(), blocks in prop_oneof![1u64..5, Just(32u64)]) {
            let (stale, _) = run(seed, 4, 60, blocks);
            prop_assert_eq!(stale, 0);
        }
    }

    #[test]
    fn sequential_small_reads_cost_one_member_read_per_block() {
        let mem = Arc::new(MemMember::new("m", SIZE));
        mem.write_sync(0, &written(0, SIZE / 512, 1));
        let plan = FaultPlan::default();
        let faulty = Arc::new(FaultMember::new(mem, plan));
        let control = faulty.control();
        let pool = DabPool::new(1 << 20, 16384);
        let dab = pool.wrap(faulty);
        let bad = raidd_rt::block_on(async move {
            let mut bad = 0;
            // 1 KiB reads through the whole member.
            for i in 0..SIZE / 1024 {
                let b = crate::member::read_bytes(&dab, i * 1024, 1024)
                    .await
                    .unwrap();
                bad += pattern::verify(&b, i * 2, SEED, |_| 1).len();
            }
            (bad, dab.counters.snapshot())
        });
        assert_eq!(bad.0, 0);
        let c = bad.1;
        // 64 KiB in 16 KiB blocks: four member reads; each block's first request missed,
        // the other 15 hit.
        assert_eq!(control.reads(), 4);
        assert_eq!((c.misses, c.hits, c.head_hits, c.tail_hits), (4, 60, 0, 0));
        assert_eq!(c.prefetched_bytes, SIZE);
    }

    #[test]
    fn the_four_cases_are_counted_as_the_paper_has_them() {
        let mem: Arc<dyn Member> = Arc::new(MemMember::new("m", SIZE));
        let pool = DabPool::new(1 << 20, 4096);
        let dab = pool.wrap(mem);
        let c = raidd_rt::block_on(async move {
            let r = |off: u64, len: usize| crate::member::read_bytes(&dab, off, len);
            r(0, 1024).await.unwrap(); // neither: fetch block 0 (miss)
            r(1024, 1024).await.unwrap(); // both in block 0 (hit)
            r(3584, 1024).await.unwrap(); // head in block 0, tail in 1 (head hit)
            r(3 * 4096 + 3584, 1024).await.unwrap(); // neither: blocks 3 and 4 (miss)
            r(2 * 4096 + 3584, 1024).await.unwrap(); // tail in block 3 (tail hit)
            r(0, 8192).await.unwrap(); // two blocks: around the buffer
            dab.counters.snapshot()
        });
        assert_eq!((c.hits, c.head_hits, c.tail_hits, c.misses), (1, 1, 1, 2));
        assert_eq!(c.bypassed, 1);
        assert_eq!(c.prefetched_bytes, 5 * 4096);
    }

    #[test]
    fn a_failing_member_read_is_reported_not_cached() {
        let mem = Arc::new(MemMember::new("m", SIZE));
        let plan = FaultPlan {
            read_error_ppm: 1_000_000,
            ..FaultPlan::default()
        };
        let dab = DabPool::new(1 << 20, 4096).wrap(Arc::new(FaultMember::new(mem, plan)));
        let r = raidd_rt::block_on(async move {
            let a = crate::member::read_bytes(&dab, 0, 1024).await.is_err();
            let b = crate::member::read_bytes(&dab, 1024, 1024).await.is_err();
            (a, b, dab.counters.snapshot())
        });
        assert!(r.0 && r.1, "errors come through");
        assert_eq!(r.2.hits, 0, "nothing was installed");
    }
}
