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

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};

use raidd_layout::ParityGeometry;
use raidd_rt::AlignedBuf;
use smallvec::SmallVec;

use super::counters::{bump, sum, Padded, PerThread};
use crate::error::Result;
use crate::iov::Req;

/// Heads hash onto this many shards, each with its own lock.
const SHARDS: usize = 64;

/// Rows wider than this (sectors per member) are not kept after a write: big writes stream
/// through, and keeping them would cost a copy of every byte written.
pub(crate) const CACHE_MAX_ROWS: u64 = 128;

/// Most row ranges kept per stripe (the oldest goes first): small writes to different rows
/// of one stripe each keep their own.
pub(crate) const CACHE_MAX_RANGES: usize = 16;

/// Default bytes of cached stripe contents per array.
pub const DEFAULT_CACHE_BYTES: usize = 16 << 20;

/// Default stripes with member I/O in flight under [`Gather::Limit`].
pub const DEFAULT_INFLIGHT_STRIPES: usize = 64;

/// How partial-stripe writes wait for company before their member I/O starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gather {
    /// Start at once (gathering happens only among writes that wait for a busy stripe).
    None,
    /// Wait until the thread has nothing else to run.
    Plug,
    /// At most this many stripes with member I/O in flight per array.
    Limit(usize),
}

impl Gather {
    fn encode(self) -> (u8, usize) {
        match self {
            Gather::None => (0, 0),
            Gather::Plug => (1, 0),
            Gather::Limit(n) => (2, n.max(1)),
        }
    }
}

impl std::fmt::Display for Gather {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Gather::None => write!(f, "none"),
            Gather::Plug => write!(f, "plug"),
            Gather::Limit(n) => write!(f, "limit:{n}"),
        }
    }
}

impl std::str::FromStr for Gather {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Gather, String> {
        match s {
            "none" => Ok(Gather::None),
            "plug" => Ok(Gather::Plug),
            "limit" => Ok(Gather::Limit(DEFAULT_INFLIGHT_STRIPES)),
            _ => match s.strip_prefix("limit:").map(str::parse::<usize>) {
                Some(Ok(n)) if n > 0 => Ok(Gather::Limit(n)),
                _ => Err(format!(
                    "unknown gather policy {s:?}: use none, plug, limit or limit:N (N > 0)"
                )),
            },
        }
    }
}

/// Whether a small write that finds its stripe idle skips the cache: written at once by
/// read-modify-write under the stripe's lock, with none of the gathering (plug, batch,
/// hand-off) that costs a random small write about a third of its time and gathers nothing
/// for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Alone {
    /// Under [`Gather::Plug`], while gathering does not pay on this thread: each window of
    /// batches through the cache that gathered (and hit kept rows) for fewer than 1 in 16
    /// lets the next small writes go alone, then the cache is tried again. Never under the
    /// other policies, which say how to gather.
    Auto,
    /// Every write within one data chunk whose stripe is idle, under any policy.
    Always,
    /// None: every write goes through the cache.
    Never,
}

impl Alone {
    fn encode(self) -> u8 {
        match self {
            Alone::Auto => 0,
            Alone::Always => 1,
            Alone::Never => 2,
        }
    }

    fn decode(v: u8) -> Alone {
        match v {
            1 => Alone::Always,
            2 => Alone::Never,
            _ => Alone::Auto,
        }
    }
}

impl std::fmt::Display for Alone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Alone::Auto => "auto",
            Alone::Always => "always",
            Alone::Never => "never",
        })
    }
}

impl std::str::FromStr for Alone {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Alone, String> {
        match s {
            "auto" => Ok(Alone::Auto),
            "always" => Ok(Alone::Always),
            "never" => Ok(Alone::Never),
            _ => Err(format!(
                "unknown policy for small writes {s:?}: use auto, always or never"
            )),
        }
    }
}

/// Which rows of one data chunk each part supplies: sorted, disjoint ranges of chunk rows
/// (sectors), each with the index of the part whose data it is. Where parts overlap the
/// later one wins, so a batch writes what writing its parts one after the other would.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Segs(pub(crate) SmallVec<[(Range<u64>, usize); 2]>);

impl Segs {
    pub(crate) fn insert(&mut self, r: Range<u64>, part: usize) {
        assert!(r.start < r.end, "empty segment {r:?}");
        // The usual part: a chunk's first, or one after all before it (segments are sorted
        // and disjoint, so the last ends furthest). Nothing to cut or sort.
        if self.0.last().is_none_or(|(s, _)| s.end <= r.start) {
            self.0.push((r, part));
            return;
        }
        let mut out: SmallVec<[(Range<u64>, usize); 2]> = SmallVec::new();
        for (s, p) in self.0.drain(..) {
            if s.end <= r.start || s.start >= r.end {
                out.push((s, p));
                continue;
            }
            if s.start < r.start {
                out.push((s.start..r.start, p));
            }
            if s.end > r.end {
                out.push((r.end..s.end, p));
            }
        }
        out.push((r, part));
        out.sort_by_key(|(s, _)| s.start);
        self.0 = out;
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether the segments cover every row of `rows` (no hole).
    pub(crate) fn covers(&self, rows: &Range<u64>) -> bool {
        let mut at = rows.start;
        for (s, _) in &self.0 {
            if s.start > at {
                return false;
            }
            at = at.max(s.end);
        }
        at >= rows.end
    }

    /// The smallest range holding every segment.
    pub(crate) fn hull(&self) -> Option<Range<u64>> {
        Some(self.0.first()?.0.start..self.0.last()?.0.end)
    }
}

/// The rows of a stripe's data chunks that one write covers. A write is a contiguous stretch
/// of the array, so its share of a stripe is too: chunk `first` from row `start`, every
/// chunk after it over all rows, and chunk `last` up to row `end` (one chunk when `first ==
/// last`). Constant size, whatever the number of chunks: a list of (chunk, rows) spilled to
/// the heap for every whole stripe of more than two data chunks, and parts move between
/// queues.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ChunkCover {
    first: usize,
    start: u64,
    last: usize,
    end: u64,
    chunk_rows: u64,
}

impl ChunkCover {
    /// The cover of `rows`, a stretch of a stripe's data rows (`0..data_chunks *
    /// chunk_rows`, chunk by chunk in order), in chunks of `chunk_rows` rows.
    pub(crate) fn stretch(rows: Range<u64>, chunk_rows: u64) -> ChunkCover {
        assert!(
            rows.start < rows.end && chunk_rows > 0,
            "an empty stretch {rows:?} (chunks of {chunk_rows})"
        );
        let last = rows.end - 1;
        ChunkCover {
            first: (rows.start / chunk_rows) as usize,
            start: rows.start % chunk_rows,
            last: (last / chunk_rows) as usize,
            end: last % chunk_rows + 1,
            chunk_rows,
        }
    }

    /// Each covered chunk with its rows, in chunk order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (usize, Range<u64>)> + '_ {
        (self.first..=self.last).map(move |dd| {
            let from = if dd == self.first { self.start } else { 0 };
            let to = if dd == self.last {
                self.end
            } else {
                self.chunk_rows
            };
            (dd, from..to)
        })
    }

    /// The one chunk it covers and its rows, when it covers one.
    pub(crate) fn single(&self) -> Option<(usize, Range<u64>)> {
        (self.first == self.last).then_some((self.first, self.start..self.end))
    }

    /// Whether it writes every one of `data_chunks` chunks over all their rows.
    pub(crate) fn covers_stripe(&self, data_chunks: usize) -> bool {
        self.first == 0
            && self.start == 0
            && self.last + 1 == data_chunks
            && self.end == self.chunk_rows
    }
}

/// Each stripe a write of `count` sectors from array sector `sector` touches, in order,
/// with its cover: computed, not collected, so a write over many stripes allocates no list.
pub(crate) fn stripe_shares(pg: &ParityGeometry, sector: u64, count: u64) -> StripeShares {
    let end = sector.checked_add(count);
    assert!(
        count > 0 && end.is_some_and(|end| end <= pg.array_sectors()),
        "write {sector}+{count} outside the array of {} sectors",
        pg.array_sectors()
    );
    StripeShares {
        at: sector,
        end: sector + count,
        chunk_rows: u64::from(pg.chunk_sectors),
        stripe_rows: pg.stripe_data_sectors(),
    }
}

/// See [`stripe_shares`].
#[derive(Clone, Debug)]
pub(crate) struct StripeShares {
    at: u64,
    end: u64,
    chunk_rows: u64,
    stripe_rows: u64,
}

impl StripeShares {
    /// How many stripes are left.
    pub(crate) fn stripes(&self) -> u64 {
        if self.at >= self.end {
            return 0;
        }
        (self.end - 1) / self.stripe_rows - self.at / self.stripe_rows + 1
    }
}

impl Iterator for StripeShares {
    type Item = (u64, ChunkCover);

    fn next(&mut self) -> Option<(u64, ChunkCover)> {
        if self.at >= self.end {
            return None;
        }
        let stripe = self.at / self.stripe_rows;
        let base = stripe * self.stripe_rows;
        let stop = (base + self.stripe_rows).min(self.end);
        let cover = ChunkCover::stretch(self.at - base..stop - base, self.chunk_rows);
        self.at = stop;
        Some((stripe, cover))
    }

    /// Exact: a table collected from the shares takes up the room it needs at once.
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = usize::try_from(self.stripes()).unwrap_or(usize::MAX);
        (n, Some(n))
    }
}

impl ExactSizeIterator for StripeShares {}

/// The parts of a batch (inline for two: most batches are one small write).
pub(crate) type Parts = SmallVec<[Part; 2]>;

/// One request's share of one stripe.
pub(crate) struct Part {
    /// The request's data, shared by its parts (on any thread).
    pub(crate) req: Arc<Req>,
    /// The request's byte offset in the array.
    pub(crate) offset: u64,
    /// Per data chunk, the rows this part writes.
    pub(crate) cover: ChunkCover,
    signal: Arc<Signal>,
}

/// What a waiting part is told.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The part is on the members (or failed with this error).
    Done(Result<()>),
    /// The stripe is yours: lead the next batch (which holds this part).
    Lead,
}

#[derive(Default)]
struct SignalState {
    outcome: Option<Outcome>,
    waker: Option<Waker>,
    /// The waiting future was dropped: never hand it the lead.
    abandoned: bool,
}

/// A part's mailbox: the leader of the batch that holds it posts the outcome.
#[derive(Default)]
pub(crate) struct Signal(Mutex<SignalState>);

impl Signal {
    fn post(&self, o: Outcome) {
        let waker = {
            let mut st = self.0.lock().expect(crate::POISONED);
            st.outcome = Some(o);
            st.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Whether the lead was posted here and not yet taken.
    pub(crate) fn holds_lead(&self) -> bool {
        let st = self.0.lock().expect(crate::POISONED);
        matches!(st.outcome, Some(Outcome::Lead))
    }

    /// Takes the lead posted here without waiting; false if there is none.
    pub(crate) fn take_lead(&self) -> bool {
        let mut st = self.0.lock().expect(crate::POISONED);
        if matches!(st.outcome, Some(Outcome::Lead)) {
            st.outcome = None;
            true
        } else {
            false
        }
    }

    fn abandoned(&self) -> bool {
        self.0.lock().expect(crate::POISONED).abandoned
    }

    pub(crate) async fn wait(&self) -> Outcome {
        std::future::poll_fn(|cx| {
            let mut st = self.0.lock().expect(crate::POISONED);
            match st.outcome.take() {
                Some(o) => Poll::Ready(o),
                None => {
                    st.waker = Some(cx.waker().clone());
                    Poll::Pending
                }
            }
        })
        .await
    }
}

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

#[derive(Default)]
struct Head {
    pending: Parts,
    leader: bool,
    /// Kept row ranges, disjoint, oldest first.
    cached: Vec<Cached>,
    /// Shard clock at the last use, for least-recently-used eviction.
    used: u64,
}

/// Hashes a stripe number: one multiplication (SipHash, the default, cost more than the
/// rest of an attach). Stripe numbers are not chosen by an adversary who could profit from
/// collisions: a client can only slow its own writes.
#[derive(Default)]
struct StripeHasher(u64);

impl Hasher for StripeHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        // Fibonacci hashing; hashbrown takes its control bits from the top.
        self.0 = (self.0 ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

#[derive(Default)]
struct Shard {
    heads: HashMap<u64, Head, BuildHasherDefault<StripeHasher>>,
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

/// Keeps of rows judged at a time by the keep governor.
const KEEP_WINDOW: u64 = 1024;
/// Batches that keep nothing after a window that did not pay.
const KEEP_PAUSE: u64 = 16 * KEEP_WINDOW;

/// Batches through the cache judged at a time by the alone governor.
const ALONE_WINDOW: u64 = 64;
/// Small writes that may go alone after a window in which gathering did not pay.
const ALONE_RUN: u64 = 64 * ALONE_WINDOW;

/// One thread's stripe-cache counters and keep governor, alone on its cache lines: a batch
/// counts and judges on its own thread, so no line is written by every core on every batch
/// (shared counters and a shared pause countdown cost the second thread 40% more CPU per
/// RAID5 small write).
///
/// The governor: a kept row costs a copy and memory, and pays only when a later write to
/// the same rows skips its pre-reads. Writes spread wide (random over a big array) almost
/// never come back while the rows are kept, and then keeping costs about 30% of small-write
/// throughput for nothing. Each window of kept batches is judged by its hits; after one with
/// fewer than 1 in 16, keeping pauses for a while and then tries again. Only a heuristic:
/// keeping or not is correct either way (threads past the owned shards share one and may
/// blur its windows).
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct CacheStats {
    batches: AtomicU64,
    gathered_parts: AtomicU64,
    hits: AtomicU64,
    /// Kept batches in the current window.
    kept: AtomicU64,
    /// `hits` when the current window began.
    hits_at_start: AtomicU64,
    /// Batches left in a pause.
    pause: AtomicU64,
    /// The alone governor: `batches`, `gathered_parts` and `hits` when its window began,
    /// and the small writes that may still go alone.
    window_batches: AtomicU64,
    window_gathered: AtomicU64,
    window_hits: AtomicU64,
    alone_left: AtomicU64,
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
    stats: PerThread<CacheStats>,
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
            stats: PerThread::default(),
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
            Alone::Auto => {
                let (st, owned) = self.stats.mine();
                let left = st.alone_left.load(Ordering::Relaxed);
                if left == 0 {
                    return false;
                }
                if owned {
                    st.alone_left.store(left - 1, Ordering::Relaxed);
                    true
                } else {
                    st.alone_left
                        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |l| l.checked_sub(1))
                        .is_ok()
                }
            }
        }
    }

    /// Counts a batch of `parts` in this thread's stats, and judges the alone governor's
    /// window once it is full.
    fn count_batch(&self, parts: usize) {
        let (st, owned) = self.stats.mine();
        bump(&st.batches, 1, owned);
        if parts > 1 {
            bump(&st.gathered_parts, parts as u64 - 1, owned);
        }
        self.judge_alone(st);
    }

    fn judge_alone(&self, st: &CacheStats) {
        let batches = st.batches.load(Ordering::Relaxed);
        let n = batches.wrapping_sub(st.window_batches.load(Ordering::Relaxed));
        if n < ALONE_WINDOW {
            return;
        }
        let gathered = st.gathered_parts.load(Ordering::Relaxed);
        let hits = st.hits.load(Ordering::Relaxed);
        let g = gathered.wrapping_sub(st.window_gathered.swap(gathered, Ordering::Relaxed));
        let h = hits.wrapping_sub(st.window_hits.swap(hits, Ordering::Relaxed));
        st.window_batches.store(batches, Ordering::Relaxed);
        if g * 16 < n && h * 16 < n {
            st.alone_left.store(ALONE_RUN, Ordering::Relaxed);
        }
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
    ) -> Arc<Signal> {
        let mut signal = super::recycle::signal();
        let mut sh = self.shard(stripe).lock().expect(crate::POISONED);
        sh.clock += 1;
        let clock = sh.clock;
        let head = sh.heads.entry(stripe).or_default();
        head.used = clock;
        if !head.leader {
            head.leader = true;
            // Not shared yet: no other reference can see it.
            let st = Arc::get_mut(&mut signal).expect("fresh signal");
            st.0.get_mut().expect(crate::POISONED).outcome = Some(Outcome::Lead);
        }
        head.pending.push(Part {
            req,
            offset,
            cover,
            signal: signal.clone(),
        });
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
        sh.cached_bytes -= cached.iter().map(Cached::bytes).sum::<usize>();
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
        sh.cached_bytes -= cached.iter().map(Cached::bytes).sum::<usize>();
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
            evicted
        };
        // Buffers go back to the pool outside the lock; the lists, to this thread's.
        for list in evicted.into_iter().chain([not_kept]) {
            super::recycle::give_cached_list(list);
        }
        for Part { req, signal, .. } in parts {
            // Every part gets the outcome (an error's whole message, once per part).
            let r = match r {
                Ok(()) => Ok(()),
                Err(e) => Err(crate::error::Error::new(e.kind(), e.to_string())),
            };
            signal.post(Outcome::Done(r));
            super::recycle::give_signal(signal);
            super::recycle::give_req(req);
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
        own.0.lock().expect(crate::POISONED).abandoned = true;
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
        let had_lead = {
            let mut st = signal.0.lock().expect(crate::POISONED);
            st.abandoned = true;
            matches!(st.outcome, Some(Outcome::Lead))
        };
        if had_lead {
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
            let c = std::mem::take(&mut head.cached);
            sh.cached_bytes -= c.iter().map(Cached::bytes).sum::<usize>();
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

    /// A batch found its rows kept.
    pub(crate) fn hit(&self) {
        let (st, owned) = self.stats.mine();
        bump(&st.hits, 1, owned);
    }

    /// Whether this batch should keep its rows (see [`CacheStats`]).
    pub(crate) fn keeping(&self) -> bool {
        let (st, owned) = self.stats.mine();
        let p = st.pause.load(Ordering::Relaxed);
        if p > 0 {
            if owned {
                st.pause.store(p - 1, Ordering::Relaxed);
            } else {
                let _ = st
                    .pause
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |p| p.checked_sub(1));
            }
            return false;
        }
        true
    }

    /// A batch kept its rows: counts it in this thread's window and judges a full window.
    pub(crate) fn kept(&self) {
        let (st, owned) = self.stats.mine();
        bump(&st.kept, 1, owned);
        let n = st.kept.load(Ordering::Relaxed);
        if n >= KEEP_WINDOW {
            st.kept.store(0, Ordering::Relaxed);
            let hits = st.hits.load(Ordering::Relaxed);
            let start = st.hits_at_start.swap(hits, Ordering::Relaxed);
            if hits.saturating_sub(start) * 16 < n {
                st.pause.store(KEEP_PAUSE, Ordering::Relaxed);
            }
        }
    }

    /// Batches run, parts that joined another's batch, and batches that found their rows
    /// kept (all threads).
    pub(crate) fn totals(&self) -> (u64, u64, u64) {
        (
            sum(&self.stats, |s| &s.batches),
            sum(&self.stats, |s| &s.gathered_parts),
            sum(&self.stats, |s| &s.hits),
        )
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
    use super::*;
    use proptest::prelude::*;
    use raidd_layout::{Geometry, Level, ParityLayout};

    /// Stripes, each with its chunks and their rows.
    type Shares = Vec<(u64, Vec<(usize, Range<u64>)>)>;

    proptest! {
        /// A write's stripe shares are the layout's pieces grouped by stripe: the same
        /// stripes, chunks and rows, for any chunk size, width and stretch of the array.
        #[test]
        fn stripe_shares_are_the_pieces_by_stripe(
            shift in 3u32..8,
            members in 3usize..9,
            raid6 in any::<bool>(),
            start in 0u64..4000,
            count in 1u64..3000,
        ) {
            let level = if raid6 && members >= 4 { Level::Raid6 } else { Level::Raid5 };
            let layout = if level == Level::Raid6 {
                ParityLayout::LeftSymmetric
            } else {
                ParityLayout::RightAsymmetric
            };
            let pg = ParityGeometry {
                level,
                members,
                layout,
                chunk_sectors: 1 << shift,
                dev_sectors: 4096,
            };
            let count = count.min(pg.array_sectors() - start.min(pg.array_sectors() - 1));
            let start = start.min(pg.array_sectors() - count);
            let mut want: Shares = Vec::new();
            for p in Geometry::Parity(pg.clone()).pieces(start, count) {
                let (stripe, dd, off) = pg.locate(p.array_sector);
                if want.last().is_none_or(|(s, _)| *s != stripe) {
                    want.push((stripe, Vec::new()));
                }
                want.last_mut().unwrap().1.push((dd, off..off + p.sectors));
            }
            let shares = stripe_shares(&pg, start, count);
            prop_assert_eq!(shares.stripes(), want.len() as u64);
            let got: Shares = shares
                .map(|(stripe, cover)| (stripe, cover.iter().collect()))
                .collect();
            prop_assert_eq!(&got, &want);
            // The size hint is exact at every step (tables are sized by it).
            let mut it = stripe_shares(&pg, start, count);
            for left in (0..=want.len()).rev() {
                prop_assert_eq!(it.size_hint(), (left, Some(left)));
                prop_assert_eq!(it.next().is_some(), left > 0);
            }
            let k = pg.data_members();
            let chunk = u64::from(pg.chunk_sectors);
            for (stripe, cover) in stripe_shares(&pg, start, count) {
                let whole = want.iter().find(|(s, _)| *s == stripe).unwrap().1.clone();
                let full = whole.len() == k && whole.iter().all(|(_, r)| *r == (0..chunk));
                prop_assert_eq!(cover.covers_stripe(k), full);
            }
        }
    }

    fn segs(list: &[(Range<u64>, usize)]) -> Segs {
        let mut s = Segs::default();
        for (r, p) in list {
            s.insert(r.clone(), *p);
        }
        s
    }

    #[test]
    fn later_parts_win_where_they_overlap() {
        let s = segs(&[(0..8, 0), (4..12, 1)]);
        assert_eq!(s.0.as_slice(), &[(0..4, 0), (4..12, 1)]);
        let s = segs(&[(0..16, 0), (4..8, 1)]);
        assert_eq!(s.0.as_slice(), &[(0..4, 0), (4..8, 1), (8..16, 0)]);
        let s = segs(&[(4..8, 0), (0..16, 1)]);
        assert_eq!(s.0.as_slice(), &[(0..16, 1)]);
    }

    #[test]
    fn coverage_and_hull() {
        let s = segs(&[(0..4, 0), (8..16, 1)]);
        assert!(!s.covers(&(0..16)));
        assert!(s.covers(&(8..16)));
        assert_eq!(s.hull(), Some(0..16));
        let s = segs(&[(0..4, 0), (4..16, 1)]);
        assert!(s.covers(&(0..16)));
        assert_eq!(Segs::default().hull(), None);
    }

    /// Exhaustive over small patterns: the segments say exactly which part wrote each row
    /// last, as writing the parts in order would.
    #[test]
    fn segments_match_writing_in_order() {
        let ranges: Vec<Range<u64>> = (0..6u64)
            .flat_map(|a| (a + 1..=6).map(move |b| a..b))
            .collect();
        for a in &ranges {
            for b in &ranges {
                for c in &ranges {
                    let s = segs(&[(a.clone(), 0), (b.clone(), 1), (c.clone(), 2)]);
                    let mut model = [None; 6];
                    for (i, r) in [a, b, c].iter().enumerate() {
                        for row in (*r).clone() {
                            model[row as usize] = Some(i);
                        }
                    }
                    let mut got = [None; 6];
                    let mut last_end = 0;
                    for (r, p) in &s.0 {
                        assert!(r.start >= last_end, "overlap or disorder in {s:?}");
                        last_end = r.end;
                        for row in r.clone() {
                            got[row as usize] = Some(*p);
                        }
                    }
                    assert_eq!(got, model, "{a:?} {b:?} {c:?}");
                }
            }
        }
    }

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

    #[test]
    fn gather_policies_parse() {
        assert_eq!("plug".parse::<Gather>(), Ok(Gather::Plug));
        assert_eq!("none".parse::<Gather>(), Ok(Gather::None));
        assert_eq!("limit:8".parse::<Gather>(), Ok(Gather::Limit(8)));
        assert_eq!(
            "limit".parse::<Gather>(),
            Ok(Gather::Limit(DEFAULT_INFLIGHT_STRIPES))
        );
        assert!("limit:0".parse::<Gather>().is_err());
        assert!("fast".parse::<Gather>().is_err());
        for g in [Gather::None, Gather::Plug, Gather::Limit(3)] {
            assert_eq!(g.to_string().parse::<Gather>(), Ok(g));
        }
    }
}
