//! The RAID4/5/6 stripe cache (seed 004 section 5): where writes to the same stripe meet.
//!
//! A write is cut into its share of each stripe (a [`Part`]) and attached to that stripe's
//! head. The head has no explicit state machine: its state is what it holds — parts waiting
//! (`pending`), whether some request is working on the stripe now (`leader`), and the
//! up-to-date contents of some rows of every member (`cached`). A part can join at any time;
//! whichever request finds the stripe idle becomes its leader, takes *every* part pending
//! at that moment as one batch (so writes that arrived together become one full-stripe or
//! one read-modify-write), runs it, and hands the stripe to the oldest part that arrived
//! meanwhile. Nobody waits for a lock that is shared by all stripes: heads live in shards
//! (one short `Mutex` hold per attach and per hand-off, never across I/O), and the member
//! I/O of different stripes runs in parallel.
//!
//! Two ways of letting partial stripes gather company before they start (try both; see
//! docs/ARCHITECTURE.md for the measurements that picked the default):
//! - [`Gather::Plug`]: a leader whose batch does not cover its stripe waits until its thread
//!   has nothing else to run (`raidd_rt::unplugged`), so requests already arriving join it;
//! - [`Gather::Limit`]: at most N stripes have member I/O in flight; a leader waits for a
//!   slot, and the parts that arrive meanwhile join its batch (seed 004's "simulate the
//!   delay of a busy drive").
//!
//! A small write that finds its stripe idle may skip all of this (see [`Alone`]): random
//! small writes gather nothing, and the attach, plug and hand-off cost them a third of their
//! time. [`StripeCache::claim`] is how such a write makes sure nothing here holds its stripe.
//!
//! The cache is write-through: a write is acknowledged once its data and parity are on the
//! members, so the members always hold every acknowledged write and reads bypass the cache
//! entirely. What the cache saves is *reads*: the contents of small written rows (data of
//! every member whose contents are known, and the parity just computed) are kept, bounded
//! in bytes, so the next write to those rows needs no pre-read at all.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};

use raidd_rt::recycle::{keep_vec, pop_vec};
use raidd_rt::AlignedBuf;
use smallvec::SmallVec;

use super::super::counters::Padded;
use super::governor::Governor;
use super::mailbox::{give_signal, signal, Outcome, Signal};
use super::policy::{Alone, Gather, DEFAULT_CACHE_BYTES};
use super::shares::{ChunkCover, Part, Parts, Segs};
use crate::error::Result;
use crate::hash::NumberMap;
use crate::iov::Req;

/// Heads hash onto this many shards, each with its own lock.
const SHARDS: usize = 64;

/// Rows wider than this (sectors per member) are not kept after a write: big writes stream
/// through, and keeping them would cost a copy of every byte written.
pub(crate) const CACHE_MAX_ROWS: u64 = 128;

/// Most row ranges kept per stripe (the oldest goes first): small writes to different rows
/// of one stripe each keep their own.
pub(crate) const CACHE_MAX_RANGES: usize = 16;

/// One buffer or none per member of a stripe (inline for arrays of up to 8 members).
pub(crate) type Blocks = SmallVec<[Option<AlignedBuf>; 8]>;

/// Up-to-date contents of rows `rows` of a stripe: per member, `Some` where known.
pub(crate) struct Cached {
    pub(crate) rows: Range<u64>,
    pub(crate) blocks: Blocks,
}

impl Cached {
    fn bytes(&self) -> usize {
        self.blocks.iter().flatten().map(|b| b.len()).sum()
    }
}

/// An empty list for a stripe's kept contents, with room, from this thread's lists when it
/// has one.
pub(crate) fn cached_list() -> Vec<Cached> {
    pop_vec()
}

/// Empties a stripe's kept contents (their buffers go back to the pool now) and keeps the
/// list for the next stripe: the blocks pass from evicted stripes to newly kept ones.
pub(crate) fn give_cached_list(list: Vec<Cached>) {
    keep_vec(list, usize::MAX);
}

#[derive(Default)]
struct Head {
    pending: Parts,
    leader: bool,
    /// Kept row ranges, disjoint, oldest first.
    cached: Vec<Cached>,
    /// Shard clock at the last use, for least-recently-used eviction.
    used: u64,
}

#[derive(Default)]
struct Shard {
    heads: NumberMap<u64, Head>,
    clock: u64,
    cached_bytes: usize,
}

/// What a leader takes from a head: the parts and the cached contents.
pub(crate) struct Taken {
    pub(crate) parts: Parts,
    pub(crate) cached: Vec<Cached>,
}

/// Counts stripes with member I/O in flight under [`Gather::Limit`].
#[derive(Default)]
struct InFlight {
    count: AtomicUsize,
    waiters: Mutex<VecDeque<Waker>>,
}

/// Holds one in-flight slot of [`Gather::Limit`]; released on drop.
pub(crate) struct Slot<'a>(Option<&'a InFlight>);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        if let Some(f) = self.0 {
            f.count.fetch_sub(1, Ordering::AcqRel);
            // Every waiter is woken, not one: a waiter re-registers on each poll, so the
            // queue may hold stale wakers of tasks that got a slot meanwhile (or were
            // dropped), and waking only the front one could spend the release on such a
            // waker and leave a live waiter asleep with a slot free. The losers re-register.
            let woken = std::mem::take(&mut *f.waiters.lock().expect(crate::POISONED));
            for w in woken {
                w.wake();
            }
        }
    }
}

pub(crate) struct StripeCache {
    /// Each on its own lines: neighbouring stripes land in neighbouring shards.
    shards: Box<[Padded<Mutex<Shard>>]>,
    /// Bytes of cached contents allowed per shard.
    shard_budget: AtomicUsize,
    gather: AtomicU8,
    limit: AtomicUsize,
    alone: AtomicU8,
    in_flight: InFlight,
    governor: Governor,
}

impl Default for StripeCache {
    fn default() -> Self {
        let c = StripeCache {
            shards: (0..SHARDS)
                .map(|_| Padded(Mutex::new(Shard::default())))
                .collect(),
            shard_budget: AtomicUsize::new(0),
            gather: AtomicU8::new(0),
            limit: AtomicUsize::new(0),
            alone: AtomicU8::new(Alone::Auto.encode()),
            in_flight: InFlight::default(),
            governor: Governor::default(),
        };
        c.configure(DEFAULT_CACHE_BYTES, Gather::Plug);
        c
    }
}

impl StripeCache {
    pub(crate) fn configure(&self, cache_bytes: usize, gather: Gather) {
        self.shard_budget
            .store(cache_bytes / SHARDS, Ordering::Relaxed);
        let (g, n) = gather.encode();
        self.limit.store(n, Ordering::Relaxed);
        self.gather.store(g, Ordering::Relaxed);
        debug_assert_eq!(
            std::mem::discriminant(&self.gather()),
            std::mem::discriminant(&gather),
            "the policy reads back as set"
        );
    }

    pub(crate) fn gather(&self) -> Gather {
        match self.gather.load(Ordering::Relaxed) {
            1 => Gather::Plug,
            2 => Gather::Limit(self.limit.load(Ordering::Relaxed)),
            _ => Gather::None,
        }
    }

    pub(crate) fn set_alone(&self, alone: Alone) {
        self.alone.store(alone.encode(), Ordering::Relaxed);
    }

    pub(crate) fn alone_policy(&self) -> Alone {
        Alone::decode(self.alone.load(Ordering::Relaxed))
    }

    /// Whether a small write on this thread may go alone now (see [`Alone`]); under
    /// `Auto`, each yes spends one of the run a window granted.
    pub(crate) fn alone(&self) -> bool {
        match self.alone_policy() {
            Alone::Always => true,
            Alone::Never => false,
            Alone::Auto if self.gather() != Gather::Plug => false,
            Alone::Auto => self.governor.alone(),
        }
    }

    fn count_batch(&self, parts: usize) {
        self.governor.count_batch(parts);
    }

    /// A batch found its rows kept.
    pub(crate) fn hit(&self) {
        self.governor.hit();
    }

    /// Whether this batch should keep its rows (see [`Governor`]).
    pub(crate) fn keeping(&self) -> bool {
        self.governor.keeping()
    }

    /// A batch kept its rows.
    pub(crate) fn kept(&self) {
        self.governor.kept();
    }

    /// Batches run, parts that joined another's batch, and batches that found their rows
    /// kept (all threads).
    pub(crate) fn totals(&self) -> (u64, u64, u64) {
        self.governor.totals()
    }

    pub(crate) fn cache_bytes(&self) -> usize {
        self.shard_budget.load(Ordering::Relaxed) * SHARDS
    }

    fn shard(&self, stripe: u64) -> &Mutex<Shard> {
        // Neighbouring stripes land in different shards.
        &self.shards[(stripe % SHARDS as u64) as usize]
    }

    /// Attaches a part to its stripe. Returns its mailbox, which already holds
    /// [`Outcome::Lead`] when the stripe was idle (the caller leads now).
    pub(crate) fn attach(
        &self,
        stripe: u64,
        req: Arc<Req>,
        offset: u64,
        cover: ChunkCover,
        logged: bool,
    ) -> Arc<Signal> {
        let mut signal = signal();
        let mut sh = self.shard(stripe).lock().expect(crate::POISONED);
        sh.clock += 1;
        let clock = sh.clock;
        let head = sh.heads.entry(stripe).or_default();
        head.used = clock;
        if !head.leader {
            head.leader = true;
            // Not shared yet: no other reference can see it.
            Arc::get_mut(&mut signal).expect("fresh signal").lead_now();
        }
        head.pending.push(Part {
            req,
            offset,
            cover,
            logged,
            signal: signal.clone(),
        });
        debug_assert!(head.leader, "a stripe with parts pending has a leader");
        signal
    }

    /// Whether the parts pending on `stripe` cover every data chunk over `chunk_rows` (a
    /// batch that needs no company).
    pub(crate) fn pending_full(&self, stripe: u64, data_chunks: usize, chunk_rows: u64) -> bool {
        let sh = self.shard(stripe).lock().expect(crate::POISONED);
        let Some(head) = sh.heads.get(&stripe) else {
            return false;
        };
        let full = 0..chunk_rows;
        if let [p] = head.pending.as_slice() {
            // One part (the common case): it covers every chunk itself or not at all.
            return p.cover.covers_stripe(data_chunks);
        }
        let mut segs: SmallVec<[Segs; 16]> = (0..data_chunks).map(|_| Segs::default()).collect();
        for p in &head.pending {
            for (dd, r) in p.cover.iter() {
                if let Some(s) = segs.get_mut(dd) {
                    s.insert(r, 0);
                }
            }
        }
        segs.iter().all(|s| s.covers(&full))
    }

    /// The leader takes every pending part and the cached contents.
    /// Claims `stripe` for a write that goes alone: `None` when parts are waiting on it or
    /// a leader works on it; otherwise its kept rows, dropped (the write is about to make
    /// them stale), and the stripe holds nothing in the cache. The caller holds the
    /// stripe's lock, so it stays so until the lock is dropped: only a leader, which takes
    /// that lock first, changes the stripe's members or kept rows.
    pub(crate) fn claim(&self, stripe: u64) -> Option<Vec<Cached>> {
        let mut sh = self.shard(stripe).lock().expect(crate::POISONED);
        let Some(head) = sh.heads.get_mut(&stripe) else {
            return Some(Vec::new());
        };
        if head.leader {
            return None;
        }
        // Parts wait only on a stripe some request leads (the first to attach leads, and a
        // leader hands over to the oldest waiting part).
        assert!(
            head.pending.is_empty(),
            "parts wait on stripe {stripe} with no leader"
        );
        let cached = std::mem::take(&mut head.cached);
        let bytes = cached.iter().map(Cached::bytes).sum::<usize>();
        debug_assert!(
            sh.cached_bytes >= bytes,
            "a shard counts what its heads keep"
        );
        sh.cached_bytes -= bytes;
        sh.heads.remove(&stripe);
        Some(cached)
    }

    pub(crate) fn take(&self, stripe: u64) -> Taken {
        let mut sh = self.shard(stripe).lock().expect(crate::POISONED);
        let Some(head) = sh.heads.get_mut(&stripe) else {
            return Taken {
                parts: Parts::new(),
                cached: Vec::new(),
            };
        };
        debug_assert!(head.leader, "take without leading stripe {stripe}");
        let parts = std::mem::take(&mut head.pending);
        let cached = std::mem::take(&mut head.cached);
        let bytes = cached.iter().map(Cached::bytes).sum::<usize>();
        debug_assert!(
            sh.cached_bytes >= bytes,
            "a shard counts what its heads keep"
        );
        sh.cached_bytes -= bytes;
        drop(sh);
        self.count_batch(parts.len());
        Taken { parts, cached }
    }

    /// The leader is done with its batch: keeps `cached` (within the budget), hands the
    /// stripe to the oldest part still waiting, and posts the batch's outcome to each part.
    pub(crate) fn finish(
        &self,
        stripe: u64,
        mut cached: Vec<Cached>,
        parts: Parts,
        r: &Result<()>,
    ) {
        let budget = self.shard_budget.load(Ordering::Relaxed);
        let mut not_kept = Vec::new();
        let evicted = {
            let mut sh = self.shard(stripe).lock().expect(crate::POISONED);
            sh.clock += 1;
            let clock = sh.clock;
            let head = sh.heads.get_mut(&stripe).expect("a led stripe has a head");
            debug_assert!(head.leader, "only a leader finishes a batch");
            debug_assert!(head.cached.is_empty(), "the leader took the kept rows");
            head.used = clock;
            let mut add = 0;
            cached.retain(|c| c.bytes() > 0);
            let bytes: usize = cached.iter().map(Cached::bytes).sum();
            if bytes <= budget && !cached.is_empty() {
                add = bytes;
                head.cached = cached;
            } else {
                not_kept = cached;
            }
            Self::pass_lead(head);
            sh.cached_bytes += add;
            let evicted = Self::evict(&mut sh, budget);
            Self::drop_if_idle(&mut sh, stripe);
            debug_assert!(
                sh.cached_bytes <= budget
                    || sh.heads.values().all(|h| h.cached.is_empty() || h.leader),
                "a shard keeps within its budget what it can evict"
            );
            evicted
        };
        // Buffers go back to the pool outside the lock; the lists, to this thread's.
        for list in evicted.into_iter().chain([not_kept]) {
            give_cached_list(list);
        }
        for Part { req, signal, .. } in parts {
            // Every part gets the outcome (an error's whole message, once per part).
            let r = match r {
                Ok(()) => Ok(()),
                Err(e) => Err(crate::error::Error::new(e.kind(), e.to_string())),
            };
            signal.post(Outcome::Done(r));
            give_signal(signal);
            Req::give(req);
        }
    }

    /// Gives the lead to the oldest pending part whose request still waits; with none, the
    /// stripe becomes idle (parts whose requests are gone are dropped unwritten: nobody was
    /// told they were written).
    fn pass_lead(head: &mut Head) {
        match head.pending.iter().find(|p| !p.signal.abandoned()) {
            Some(p) => p.signal.post(Outcome::Lead),
            None => {
                head.pending.clear();
                head.leader = false;
            }
        }
        debug_assert!(
            head.leader || head.pending.is_empty(),
            "parts wait only on a led stripe"
        );
    }

    fn drop_if_idle(sh: &mut Shard, stripe: u64) {
        let idle = sh
            .heads
            .get(&stripe)
            .is_some_and(|h| h.cached.is_empty() && h.pending.is_empty() && !h.leader);
        if idle {
            sh.heads.remove(&stripe);
        }
    }

    /// A leader gives up (its future was dropped): its own part is abandoned, parts it had
    /// taken are told they failed, and the lead passes on.
    pub(crate) fn resign(&self, stripe: u64, own: &Signal, taken: Parts) {
        own.abandon();
        {
            let mut sh = self.shard(stripe).lock().expect(crate::POISONED);
            if let Some(head) = sh.heads.get_mut(&stripe) {
                Self::pass_lead(head);
                Self::drop_if_idle(&mut sh, stripe);
            }
        }
        for part in taken {
            part.signal.post(Outcome::Done(Err(crate::error::Error::new(
                crate::error::ErrorKind::Io,
                "the write leading this stripe was cancelled",
            ))));
        }
    }

    /// A waiting part's future was dropped. If the lead was already posted to it, pass the
    /// lead on.
    pub(crate) fn abandon(&self, stripe: u64, signal: &Signal) {
        if signal.abandon() {
            self.resign(stripe, signal, Parts::new());
        }
    }

    /// Drops cached contents of idle heads, least recently used first, until the shard is
    /// within its budget. Returns them so they are freed outside the lock.
    fn evict(sh: &mut Shard, budget: usize) -> SmallVec<[Vec<Cached>; 2]> {
        let mut out = SmallVec::new();
        while sh.cached_bytes > budget {
            let victim = sh
                .heads
                .iter()
                .filter(|(_, h)| !h.cached.is_empty() && !h.leader)
                .min_by_key(|(_, h)| h.used)
                .map(|(s, _)| *s);
            let Some(s) = victim else { break };
            let head = sh.heads.get_mut(&s).expect("found above");
            debug_assert!(!head.leader, "a led stripe's rows are not evicted");
            let c = std::mem::take(&mut head.cached);
            let bytes = c.iter().map(Cached::bytes).sum::<usize>();
            debug_assert!(
                bytes > 0 && sh.cached_bytes >= bytes,
                "a victim keeps something"
            );
            sh.cached_bytes -= bytes;
            if head.pending.is_empty() {
                sh.heads.remove(&s);
            }
            out.push(c);
        }
        out
    }

    /// Waits for an in-flight slot under [`Gather::Limit`] (returns at once otherwise).
    pub(crate) async fn slot(&self) -> Slot<'_> {
        let Gather::Limit(limit) = self.gather() else {
            return Slot(None);
        };
        let f = &self.in_flight;
        std::future::poll_fn(|cx| {
            let mut n = f.count.load(Ordering::Acquire);
            loop {
                if n >= limit {
                    let mut w = f.waiters.lock().expect(crate::POISONED);
                    w.push_back(cx.waker().clone());
                    // A slot freed between the load and the registration must not be lost.
                    if f.count.load(Ordering::Acquire) < limit {
                        drop(w);
                        n = f.count.load(Ordering::Acquire);
                        continue;
                    }
                    return Poll::Pending;
                }
                match f
                    .count
                    .compare_exchange(n, n + 1, Ordering::AcqRel, Ordering::Acquire)
                {
                    Ok(_) => return Poll::Ready(Slot(Some(f))),
                    Err(m) => n = m,
                }
            }
        })
        .await
    }

    /// Bytes of cached contents now held (all shards).
    pub(crate) fn cached_bytes(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().expect(crate::POISONED).cached_bytes)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::super::governor::{ALONE_RUN, ALONE_WINDOW, KEEP_PAUSE, KEEP_WINDOW};
    use super::*;

    /// A waiter polled twice leaves two wakers queued; the slot it then gets and frees must
    /// still reach the next live waiter (a release that woke only the queue's front woke the
    /// stale copy, and the last waiter slept forever: the concurrency test's stall).
    #[test]
    fn a_freed_slot_reaches_a_live_waiter_past_stale_wakers() {
        use std::future::Future;
        use std::pin::pin;
        use std::sync::atomic::AtomicBool;
        use std::task::{Context, Wake, Waker};

        struct Flag(AtomicBool);
        impl Wake for Flag {
            fn wake(self: Arc<Self>) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let flag = || Arc::new(Flag(AtomicBool::new(false)));
        let cache = StripeCache::default();
        cache.configure(0, Gather::Limit(1));
        let (fb, fc) = (flag(), flag());
        let (wb, wc) = (Waker::from(fb.clone()), Waker::from(fc.clone()));
        let a = pin!(cache.slot());
        let Poll::Ready(slot_a) = a.poll(&mut Context::from_waker(&wb)) else {
            panic!("the first slot is free");
        };
        let mut b = pin!(cache.slot());
        let mut c = pin!(cache.slot());
        assert!(b.as_mut().poll(&mut Context::from_waker(&wb)).is_pending());
        assert!(b.as_mut().poll(&mut Context::from_waker(&wb)).is_pending());
        assert!(c.as_mut().poll(&mut Context::from_waker(&wc)).is_pending());
        drop(slot_a);
        assert!(fb.0.load(Ordering::SeqCst), "b is woken");
        let Poll::Ready(slot_b) = b.as_mut().poll(&mut Context::from_waker(&wb)) else {
            panic!("b gets the freed slot");
        };
        drop(slot_b);
        assert!(
            fc.0.load(Ordering::SeqCst),
            "c is woken when b frees its slot"
        );
        assert!(c.as_mut().poll(&mut Context::from_waker(&wc)).is_ready());
    }

    #[test]
    fn small_writes_go_alone_while_gathering_does_not_pay() {
        let g = StripeCache::default();
        assert!(!g.alone(), "a new cache gathers first");
        // A window of batches that gathered nothing: a run of small writes may go alone.
        for _ in 0..ALONE_WINDOW {
            g.count_batch(1);
        }
        let run = (0..2 * ALONE_RUN).take_while(|_| g.alone()).count() as u64;
        assert_eq!(run, ALONE_RUN);
        // The writes through the cache after the run gather: no new run.
        for _ in 0..ALONE_WINDOW {
            g.count_batch(2);
        }
        assert!(
            !g.alone(),
            "gathering pays: writes keep going through the cache"
        );
        // A window in which 1 batch in 16 gathers is enough to keep gathering; fewer is not.
        for i in 0..ALONE_WINDOW {
            g.count_batch(if i % 16 == 0 { 2 } else { 1 });
        }
        assert!(!g.alone());
        for i in 0..ALONE_WINDOW {
            g.count_batch(if i == 0 { 2 } else { 1 });
        }
        assert!(g.alone());
        // Kept rows that hit keep writes in the cache as gathering does.
        let g = StripeCache::default();
        for i in 0..ALONE_WINDOW {
            if i % 8 == 0 {
                g.hit();
            }
            g.count_batch(1);
        }
        assert!(!g.alone(), "hits pay");
        // The policy: never under the other gathering policies unless always.
        let g = StripeCache::default();
        for _ in 0..ALONE_WINDOW {
            g.count_batch(1);
        }
        g.configure(0, Gather::None);
        assert!(!g.alone());
        g.set_alone(Alone::Always);
        assert!(g.alone());
        g.configure(0, Gather::Plug);
        g.set_alone(Alone::Never);
        assert!(!g.alone());
        g.set_alone(Alone::Auto);
        assert!(g.alone(), "the run granted before is still there");
        assert_eq!("always".parse::<Alone>(), Ok(Alone::Always));
        assert_eq!(Alone::Never.to_string().parse::<Alone>(), Ok(Alone::Never));
        assert!("sometimes".parse::<Alone>().is_err());
    }

    #[test]
    fn keeping_pauses_when_it_does_not_pay_and_tries_again() {
        let g = StripeCache::default();
        // Paying: one hit in eight keeps.
        for i in 0..4 * KEEP_WINDOW {
            assert!(g.keeping());
            g.kept();
            if i % 8 == 0 {
                g.hit();
            }
        }
        // Not paying: a window without hits pauses keeping.
        for _ in 0..KEEP_WINDOW {
            assert!(g.keeping());
            g.kept();
        }
        let paused = (0..KEEP_PAUSE).filter(|_| !g.keeping()).count() as u64;
        assert_eq!(paused, KEEP_PAUSE);
        assert!(g.keeping(), "keeping is tried again after the pause");
        assert_eq!(g.totals().2, KEEP_WINDOW / 2, "every hit counted");
    }
}
