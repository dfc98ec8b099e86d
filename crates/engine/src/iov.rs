//! Request buffers and member I/O batches.
//!
//! An array request arrives as a list of windows (one for a plain buffer, several for a
//! vectored client request or a nested array). The engine carves it into the parts each
//! member needs without copying ([`ReqMut::take`], [`Req::take`]), and [`Batch`] joins the
//! parts that are contiguous on a member into one vectored member I/O (seed 002: large
//! requests stay large; one member I/O per member extent).

use std::cell::RefCell;
use std::ops::Range;
use std::sync::Arc;

use raidd_rt::buf::give_iov;
use raidd_rt::fs::IOV_MAX;
use raidd_rt::recycle::{
    give, keep_vec, pop_vec, small_vec, spill_before_push, take, FreeList, Table,
};
use raidd_rt::{AlignedBuf, BufSlice, BufSliceMut, IoVec, IoVecMut};
use smallvec::SmallVec;

/// The exclusive windows of a read request, addressed by request byte offset.
#[derive(Debug, Default)]
pub(crate) struct ReqMut {
    /// (request offset, window), sorted by offset; windows out on member I/O are absent.
    /// The Vec comes from the thread's recycled list (a large read has one entry per piece
    /// and split: a tree of them allocated its nodes per request).
    frags: Vec<(usize, BufSliceMut)>,
    len: usize,
}

/// Entries a recycled fragment list may keep (a read of this many pieces and splits).
const FRAG_LIST_MAX: usize = 1024;

impl ReqMut {
    pub(crate) fn new(mut iov: IoVecMut) -> ReqMut {
        let mut frags = pop_vec();
        let mut pos = 0;
        for w in iov.drain(..) {
            let n = w.len();
            if n > 0 {
                frags.push((pos, w));
            }
            pos += n;
        }
        give_iov(iov);
        debug_assert!(
            frags.iter().all(|(_, w)| !w.is_empty()),
            "no empty fragment is kept"
        );
        ReqMut { frags, len: pos }
    }

    /// Removes and returns the windows covering `range` (request offsets) with their request
    /// offsets, splitting windows at the range's ends. A byte can be out only once: taking it
    /// again before it is put back is an engine bug and panics.
    pub(crate) fn take(&mut self, range: Range<usize>) -> Windows<Tagged> {
        assert!(
            range.end <= self.len,
            "take {range:?} beyond request of {}",
            self.len
        );
        let mut out = Windows::new();
        if range.is_empty() {
            return out;
        }
        let taken_twice = |pos: usize| -> ! { panic!("request byte {pos} taken twice") };
        // The fragments that can hold the range: from the last one starting at or before
        // its start to the last one starting before its end. They must be contiguous.
        let first = self
            .frags
            .partition_point(|(s, _)| *s <= range.start)
            .checked_sub(1)
            .unwrap_or_else(|| taken_twice(range.start));
        let last = self.frags.partition_point(|(s, _)| *s < range.end);
        let (mut head, mut rest) = (None, None);
        let mut pos = range.start;
        for (start, w) in self.frags.drain(first..last) {
            if start > pos || pos >= start + w.len() {
                taken_twice(pos);
            }
            let w = if start < pos {
                let (h, t) = w.split_at(pos - start);
                head = Some((start, h));
                t
            } else {
                w
            };
            let w = if pos + w.len() > range.end {
                let (mid, r) = w.split_at(range.end - pos);
                rest = Some((range.end, r));
                mid
            } else {
                w
            };
            let n = w.len();
            out.push(Tagged {
                req_off: pos,
                window: w,
            });
            pos += n;
        }
        if pos < range.end {
            taken_twice(pos);
        }
        // What lay outside the range goes back where it was, in order.
        for (at, part) in (first..).zip([head, rest].into_iter().flatten()) {
            self.frags.insert(at, part);
        }
        out
    }

    /// Puts a window back at its request offset.
    pub(crate) fn put(&mut self, t: Tagged) {
        let at = self.frags.partition_point(|(s, _)| *s < t.req_off);
        assert!(
            self.frags.get(at).is_none_or(|(s, _)| *s != t.req_off),
            "request window at {} put back twice",
            t.req_off
        );
        self.frags.insert(at, (t.req_off, t.window));
    }

    /// Puts back the windows a member read returned. `layout` lists (request offset, length)
    /// of the windows as they were submitted; the member may have split them further, or
    /// joined neighbours of one buffer (an array member gives back whole windows), which are
    /// split again where the submitted windows met.
    pub(crate) fn restore(&mut self, layout: &[(usize, usize)], mut returned: IoVecMut) {
        let mut parts = layout.iter();
        let mut cur = parts.next().copied();
        let mut used = 0;
        for mut w in returned.drain(..) {
            loop {
                let (off, len) = cur.expect("member returned more bytes than it was given");
                let room = len - used;
                let (head, rest) = if w.len() > room {
                    let (h, t) = w.split_at(room);
                    (h, Some(t))
                } else {
                    (w, None)
                };
                let n = head.len();
                self.put(Tagged {
                    req_off: off + used,
                    window: head,
                });
                used += n;
                if used == len {
                    cur = parts.next().copied();
                    used = 0;
                }
                match rest {
                    Some(t) => w = t,
                    None => break,
                }
            }
        }
        assert!(
            cur.is_none() && used == 0,
            "member returned fewer bytes than it was given"
        );
        give_iov(returned);
    }

    /// Copies `data` into `range` of the request (reconstructed data is computed in scratch
    /// buffers).
    pub(crate) fn fill(&mut self, range: Range<usize>, data: &[u8]) {
        assert_eq!(range.len(), data.len());
        let base = range.start;
        for mut t in self.take(range) {
            let from = t.req_off - base;
            let n = t.window.len();
            t.window
                .as_mut_slice()
                .copy_from_slice(&data[from..from + n]);
            self.put(t);
        }
    }

    /// The windows in request order, once every one is back, the pieces of each window the
    /// request came with joined again: the caller gets back the windows it lent, not one per
    /// member piece (a 1 MiB read of 64K chunks came back as sixteen, and spilled).
    /// The windows still here, after a member read timed out and kept some of them (the
    /// request fails: what is returned is only handed back, never read).
    pub(crate) fn into_partial(mut self) -> IoVecMut {
        let out = self.frags.drain(..).map(|(_, w)| w).collect();
        keep_vec(std::mem::take(&mut self.frags), FRAG_LIST_MAX);
        out
    }

    pub(crate) fn into_iov(mut self) -> IoVecMut {
        let mut pos = 0;
        let mut out = IoVecMut::new();
        for (off, w) in self.frags.drain(..) {
            assert_eq!(off, pos, "request window at {pos} missing");
            pos += w.len();
            match out.pop() {
                None => out.push(w),
                Some(last) => match last.join(w) {
                    Ok(joined) => out.push(joined),
                    Err((last, w)) => {
                        out.push(last);
                        out.push(w);
                    }
                },
            }
        }
        assert_eq!(pos, self.len, "request windows missing at the end");
        keep_vec(std::mem::take(&mut self.frags), FRAG_LIST_MAX);
        out
    }
}

/// An exclusive request window with its offset in the request.
#[derive(Debug)]
pub(crate) struct Tagged {
    pub(crate) req_off: usize,
    pub(crate) window: BufSliceMut,
}

impl Window for Tagged {
    const WRITES: bool = false;
    fn len(&self) -> usize {
        self.window.len()
    }
}

/// Where a member read's windows go back in the request: (request offset, length) each.
pub(crate) type ReadLayout = Table<[(usize, usize); 4]>;

/// The windows of a read and how to put them back in the request (see [`untag`]).
pub(crate) type ReadBack = (IoVecMut, ReadLayout);

/// Splits tagged windows into what a member read takes and the layout to restore them by.
pub(crate) fn untag(mut windows: Windows<Tagged>) -> (Windows<BufSliceMut>, ReadLayout) {
    let mut iov = small_vec(windows.len());
    let mut layout = ReadLayout::with_room(windows.len());
    for t in windows.drain(..) {
        layout.push((t.req_off, t.window.len()));
        iov.push(t.window);
    }
    give_iov(windows);
    (iov, layout)
}

/// The read-only windows of a write request, addressed by request byte offset.
#[derive(Debug, Default)]
pub(crate) struct Req {
    /// (request offset, window), sorted, contiguous; inline for the usual one or two.
    frags: Table<[(usize, BufSlice); 2]>,
    len: usize,
}

thread_local! {
    /// Reused `Arc` headers of shared requests (see [`Req::shared`]).
    static REQS: FreeList<Req> = const { RefCell::new(Vec::new()) };
}

impl Req {
    /// A shared request over the client's windows, in a reused `Arc` header: a parity write
    /// shares its request among its stripes' parts, and a small write would otherwise
    /// allocate one each time (`raidd_rt::recycle`: reused only once the last handle is
    /// back, emptied at once, so a request's client windows are not held).
    pub(crate) fn shared(iov: IoVec) -> Arc<Req> {
        take(&REQS, Req::new(iov))
    }

    /// Gives a shared request's handle back; its header is kept if this was the last handle.
    pub(crate) fn give(req: Arc<Req>) {
        give(&REQS, req, || Req::new(IoVec::new()));
    }

    pub(crate) fn new(mut iov: IoVec) -> Req {
        let mut frags = Table::with_room(iov.len());
        let mut pos = 0;
        for w in iov.drain(..) {
            let n = w.len();
            if n > 0 {
                frags.push((pos, w));
            }
            pos += n;
        }
        give_iov(iov);
        debug_assert_eq!(
            frags
                .iter()
                .map(|(_, w): &(usize, BufSlice)| w.len())
                .sum::<usize>(),
            pos,
            "the fragments cover the request"
        );
        Req { frags, len: pos }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn first_frag(&self, pos: usize) -> usize {
        let i = self
            .frags
            .partition_point(|(start, w)| start + w.len() <= pos);
        debug_assert!(
            i < self.frags.len() || pos >= self.len,
            "a byte has its fragment"
        );
        i
    }

    /// Read-only windows covering `range` (may be taken any number of times).
    pub(crate) fn take(&self, range: Range<usize>) -> IoVec {
        assert!(
            range.end <= self.len,
            "take {range:?} beyond request of {}",
            self.len
        );
        let mut out = IoVec::new();
        let mut i = self.first_frag(range.start);
        let mut pos = range.start;
        while pos < range.end {
            let (start, w) = &self.frags[i];
            let from = pos - start;
            let to = (range.end - start).min(w.len());
            out.push(w.sub(from..to));
            pos = start + to;
            i += 1;
        }
        debug_assert_eq!(
            out.iter().map(BufSlice::len).sum::<usize>(),
            range.len(),
            "the windows taken cover the range"
        );
        out
    }

    /// The bytes of `range`: borrowed when one window holds them (the usual case), copied
    /// into a scratch buffer when they straddle windows.
    pub(crate) fn bytes(&self, range: Range<usize>) -> Bytes {
        let i = self.first_frag(range.start);
        let (start, w) = &self.frags[i];
        if range.end <= start + w.len() {
            return Bytes::Window(w.sub(range.start - start..range.end - start));
        }
        let mut copy = AlignedBuf::zeroed(range.len());
        let mut off = 0;
        for part in self.take(range) {
            copy[off..off + part.len()].copy_from_slice(part.as_slice());
            off += part.len();
        }
        debug_assert_eq!(off, copy.len(), "a copy takes every byte");
        Bytes::Copy(copy)
    }
}

/// Bytes borrowed from a request or copied out of it.
pub(crate) enum Bytes {
    Window(BufSlice),
    Copy(AlignedBuf),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Window(w) => w.as_slice(),
            Bytes::Copy(b) => b,
        }
    }
}

/// Member I/O parts waiting to be issued: `(member, byte offset on the member, window)`;
/// inline up to a stripe's worth, so a small request's batch allocates nothing.
#[derive(Debug)]
pub(crate) struct Batch<W> {
    items: Table<[BatchPart<W>; 8]>,
}

/// A part of a batch: member, byte offset on the member, window.
pub(crate) type BatchPart<W> = (usize, u64, W);

impl<W> Default for Batch<W> {
    fn default() -> Self {
        Batch {
            items: Table::default(),
        }
    }
}

/// The coalesced member I/Os of a batch, inline up to three: a small write's reads or writes
/// (RAID6's read-modify-write has three of each). They are passed by value into the futures
/// that issue them, which hold them while they wait, so the inline sizes here (and their
/// windows') are part of every request's state in flight: four of four windows each made
/// an NBD write's state 5,784 B, three 5,528 B.
pub(crate) type MemberIos<W> = Table<[MemberIo<W>; 3]>;

/// The windows of one member I/O, inline up to four: one for a small request, one per
/// stripe for a member's share of a run of whole stripes. As many as an `IoVec` holds
/// inline, so a member I/O's windows go to the member as they are, not copied into one.
pub(crate) type Windows<W> = SmallVec<[W; 4]>;

/// A coalesced member I/O.
#[derive(Debug)]
pub(crate) struct MemberIo<W> {
    pub(crate) member: usize,
    pub(crate) offset: u64,
    pub(crate) len: u64,
    pub(crate) windows: Windows<W>,
}

pub(crate) trait Window: Sized {
    /// Whether I/O with these windows writes them (else it reads into them).
    const WRITES: bool;
    fn len(&self) -> usize;
}

impl Window for BufSlice {
    const WRITES: bool = true;
    fn len(&self) -> usize {
        BufSlice::len(self)
    }
}

impl Window for BufSliceMut {
    const WRITES: bool = false;
    fn len(&self) -> usize {
        BufSliceMut::len(self)
    }
}

impl<W: Window> Batch<W> {
    pub(crate) fn push(&mut self, member: usize, offset: u64, window: W) {
        if window.len() == 0 {
            return;
        }
        // A large request's batch goes on to a kept block, with room to grow.
        spill_before_push(&mut self.items);
        self.items.push((member, offset, window));
    }

    /// Pushes `windows` one after the other on `member` from byte `offset`.
    pub(crate) fn push_all(
        &mut self,
        member: usize,
        mut offset: u64,
        windows: impl IntoIterator<Item = W>,
    ) {
        for w in windows {
            let n = w.len() as u64;
            self.push(member, offset, w);
            offset += n;
        }
    }

    /// Joins parts contiguous on the same member into one I/O of at most IOV_MAX windows.
    /// Overlapping parts on one member are an engine bug and panic.
    pub(crate) fn into_ios(mut self) -> MemberIos<W> {
        self.items.sort_by_key(|(m, off, _)| (*m, *off));
        // No more I/Os than parts; past the inline size, one per member where its parts join
        // (more where they do not: the table grows, and its grown block is kept for the next).
        let mut room = self.items.len();
        if room > MemberIos::<W>::default().inline_size() {
            room = 1 + self.items.windows(2).filter(|p| p[0].0 != p[1].0).count();
        }
        let mut out = MemberIos::<W>::with_room(room);
        for (member, offset, w) in self.items.drain(..) {
            let n = w.len() as u64;
            if let Some(last) = out.last_mut() {
                if last.member == member {
                    assert!(
                        last.offset + last.len <= offset,
                        "overlapping member I/O on member {member} at {offset}"
                    );
                    if last.offset + last.len == offset && last.windows.len() < IOV_MAX {
                        last.len += n;
                        // A member's share of a large request goes on to a kept block (the
                        // member gives it back, `give_iov`), with room to grow.
                        spill_before_push(&mut last.windows);
                        last.windows.push(w);
                        continue;
                    }
                }
            }
            let mut windows = SmallVec::new();
            windows.push(w);
            out.push(MemberIo {
                member,
                offset,
                len: n,
                windows,
            });
        }
        debug_assert!(
            out.iter().all(|io| io.windows.len() <= IOV_MAX
                && io.len == io.windows.iter().map(|w| w.len() as u64).sum::<u64>()),
            "each I/O is its windows, at most IOV_MAX of them"
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use raidd_rt::SharedBuf;

    #[test]
    fn a_request_header_is_reused_only_when_its_last_handle_is_back_and_lets_go_of_the_client() {
        let client = SharedBuf::new(AlignedBuf::zeroed(4096));
        let mut iov = IoVec::new();
        iov.push(client.slice(0..4096).unwrap());
        let r = Req::shared(iov);
        let other = r.clone();
        let at = Arc::as_ptr(&r);
        Req::give(r); // not the last handle: not kept
        let fresh = Req::shared(IoVec::new());
        assert_ne!(Arc::as_ptr(&fresh), at);
        Req::give(other); // the last: kept, and the client's window is released now
        assert!(
            client.slice_mut(0..4096).is_ok(),
            "the request let go of the window"
        );
        let again = Req::shared(IoVec::new());
        assert_eq!(Arc::as_ptr(&again), at);
        assert_eq!(again.len(), 0);
        drop((fresh, again));
    }

    fn shared(len: usize) -> SharedBuf {
        let mut b = AlignedBuf::zeroed(len);
        for (i, x) in b.iter_mut().enumerate() {
            *x = i as u8;
        }
        SharedBuf::new(b)
    }

    #[test]
    fn take_splits_windows_and_refuses_double_takes() {
        let a = shared(1000);
        let b = shared(500);
        let mut iov = IoVecMut::new();
        iov.push(a.slice_mut(0..1000).unwrap());
        iov.push(b.slice_mut(0..500).unwrap());
        let mut r = ReqMut::new(iov);
        let mid = r.take(900..1100);
        assert_eq!(
            mid.iter()
                .map(|t| (t.req_off, t.window.len()))
                .collect::<Vec<_>>(),
            vec![(900, 100), (1000, 100)]
        );
        let head = r.take(0..900);
        assert_eq!(head.len(), 1);
        let tail = r.take(1100..1500);
        assert_eq!(tail.len(), 1);
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| r.take(950..960)));
        assert!(caught.is_err());
        // A member that split the windows further hands them back; they restore in place.
        let mut split = IoVecMut::new();
        for t in mid {
            let (x, y) = t.window.split_at(40);
            split.push(x);
            split.push(y);
        }
        r.restore(&[(900, 100), (1000, 100)], split);
        for t in head.into_iter().chain(tail) {
            r.put(t);
        }
        r.fill(0..4, &[9, 9, 9, 9]);
        let back = r.into_iov();
        // The two windows lent, each whole again (not the pieces they were taken in).
        assert_eq!(
            back.iter()
                .map(|w| (w.offset(), w.len()))
                .collect::<Vec<_>>(),
            vec![(0, 1000), (0, 500)]
        );
        drop(back);
        assert_eq!(a.try_into_inner().unwrap()[..5], [9, 9, 9, 9, 4]);
    }

    #[test]
    fn windows_a_member_joined_are_split_again_where_they_were_submitted() {
        let a = shared(1000);
        let mut iov = IoVecMut::new();
        iov.push(a.slice_mut(0..1000).unwrap());
        let mut r = ReqMut::new(iov);
        // Leave the fragments cut at 400 and 500.
        for t in r.take(400..500) {
            r.put(t);
        }
        let taken = r.take(300..700);
        let (joined, layout) = untag(taken);
        assert_eq!(layout.as_slice(), &[(300, 100), (400, 100), (500, 200)]);
        // An array member hands its windows back joined into one (as `into_iov` does).
        let mut windows = joined.into_iter();
        let mut one = windows.next().unwrap();
        for w in windows {
            one = one.join(w).unwrap();
        }
        assert_eq!((one.offset(), one.len()), (300, 400));
        let mut back = IoVecMut::new();
        back.push(one);
        r.restore(&layout, back);
        // Each piece is back at its own offset: a second take sees the same cuts.
        let again = r.take(400..500);
        assert_eq!(
            again
                .iter()
                .map(|t| (t.req_off, t.window.offset(), t.window.len()))
                .collect::<Vec<_>>(),
            vec![(400, 400, 100)]
        );
        for t in again {
            r.put(t);
        }
        let whole = r.into_iov();
        assert_eq!(
            whole
                .iter()
                .map(|w| (w.offset(), w.len()))
                .collect::<Vec<_>>(),
            vec![(0, 1000)]
        );
        drop(whole);
        assert_eq!(a.try_into_inner().unwrap()[699], (699 % 256) as u8);
    }

    proptest::proptest! {
        /// Takes of random ranges, and puts back in random order, against a model of which
        /// request bytes are out: every taken window is the request's own bytes at its
        /// offset, a range with any byte out panics, and once everything is back the windows
        /// come out whole and in order.
        #[test]
        fn takes_and_puts_match_a_model(
            sizes in proptest::collection::vec(1usize..300, 1..6),
            ops in proptest::collection::vec((0usize..2000, 1usize..400, proptest::bool::ANY), 1..40),
        ) {
            let total: usize = sizes.iter().sum();
            // Each window's bytes carry their request offset (mod 251).
            let bufs: Vec<SharedBuf> = sizes
                .iter()
                .scan(0usize, |pos, &n| {
                    let mut b = AlignedBuf::zeroed(n);
                    for (i, x) in b.iter_mut().enumerate() {
                        *x = ((*pos + i) % 251) as u8;
                    }
                    *pos += n;
                    Some(SharedBuf::new(b))
                })
                .collect();
            let mut iov = IoVecMut::new();
            for b in &bufs {
                iov.push(b.slice_mut(0..b.len()).unwrap());
            }
            let mut r = ReqMut::new(iov);
            let mut out_bytes = vec![false; total];
            let mut held: Vec<Tagged> = Vec::new();
            for (start, len, put_back) in ops {
                if put_back && !held.is_empty() {
                    let t = held.swap_remove(start % held.len());
                    for b in &mut out_bytes[t.req_off..t.req_off + t.window.len()] {
                        *b = false;
                    }
                    r.put(t);
                    continue;
                }
                let start = start % total;
                let range = start..(start + len).min(total);
                let clash = out_bytes[range.clone()].iter().any(|&b| b);
                let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    r.take(range.clone())
                }));
                proptest::prop_assert_eq!(got.is_err(), clash, "take {:?}", range);
                let Ok(got) = got else {
                    // A failed take may have left the fragments half changed: start over
                    // from what is known no more.
                    return Ok(());
                };
                let mut pos = range.start;
                for t in got {
                    proptest::prop_assert_eq!(t.req_off, pos);
                    for (i, &x) in t.window.as_slice().iter().enumerate() {
                        proptest::prop_assert_eq!(usize::from(x), (pos + i) % 251);
                    }
                    pos += t.window.len();
                    held.push(t);
                }
                proptest::prop_assert_eq!(pos, range.end);
                for b in &mut out_bytes[range] {
                    *b = true;
                }
            }
            for t in held {
                r.put(t);
            }
            let back = r.into_iov();
            let mut pos = 0;
            for w in back.iter() {
                for (i, &x) in w.as_slice().iter().enumerate() {
                    proptest::prop_assert_eq!(usize::from(x), (pos + i) % 251);
                }
                pos += w.len();
            }
            proptest::prop_assert_eq!(pos, total);
        }
    }

    #[test]
    fn read_only_bytes_borrow_or_copy() {
        let a = shared(1000);
        let b = shared(500);
        let mut iov = IoVec::new();
        iov.push(a.slice(0..1000).unwrap());
        iov.push(b.slice(0..500).unwrap());
        let r = Req::new(iov);
        assert!(matches!(r.bytes(10..20), Bytes::Window(_)));
        let straddle = r.bytes(998..1003);
        assert!(matches!(straddle, Bytes::Copy(_)));
        assert_eq!(&straddle[..], &[230, 231, 0, 1, 2]);
        let parts = r.take(990..1010);
        assert_eq!(
            parts.iter().map(|w| w.len()).collect::<Vec<_>>(),
            vec![10, 10]
        );
    }

    #[test]
    fn batch_coalesces_contiguous_parts() {
        let a = shared(4096 * 4);
        let mut batch = Batch::default();
        // member 1: parts at 8192 and 0 and 4096 (contiguous once sorted); member 0: one part.
        batch.push(1, 8192, a.slice(0..4096).unwrap());
        batch.push(1, 0, a.slice(4096..8192).unwrap());
        batch.push(0, 512, a.slice(8192..12288).unwrap());
        batch.push(1, 4096, a.slice(12288..16384).unwrap());
        let ios = batch.into_ios();
        assert_eq!(ios.len(), 2);
        assert_eq!((ios[0].member, ios[0].offset, ios[0].len), (0, 512, 4096));
        assert_eq!((ios[1].member, ios[1].offset, ios[1].len), (1, 0, 12288));
        assert_eq!(ios[1].windows[0].offset(), 4096);
        assert_eq!(ios[1].windows[1].offset(), 12288);
        assert_eq!(ios[1].windows[2].offset(), 0);
    }

    /// A window of a given length, for batch layout tests.
    #[derive(Debug, Clone)]
    struct Len(usize);

    impl Window for Len {
        const WRITES: bool = false;
        fn len(&self) -> usize {
            self.0
        }
    }

    #[test]
    fn overlapping_parts_on_a_member_panic_in_either_order() {
        for parts in [[(0, 0, 8), (0, 4, 8)], [(0, 4, 8), (0, 0, 8)]] {
            let caught = std::panic::catch_unwind(|| {
                let mut b = Batch::default();
                for (m, off, n) in parts {
                    b.push(m, off, Len(n));
                }
                b.into_ios()
            });
            assert!(caught.is_err(), "{parts:?} joined");
        }
    }
}
