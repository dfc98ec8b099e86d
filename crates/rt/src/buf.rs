//! I/O buffers.
//!
//! [`AlignedBuf`] is an owned, page-aligned, zero-initialised byte buffer: what O_DIRECT and
//! DMA want. io_uring needs the buffer to outlive the kernel's use of it, which a borrowed
//! `&mut [u8]` cannot promise once the future that lent it is dropped, so I/O takes buffers by
//! value and gives them back.
//!
//! One request buffer often feeds several member I/Os at once (a RAID0 read fills every
//! member's chunks of the same client buffer). [`SharedBuf`] shares one `AlignedBuf` among
//! them as [`BufSlice`] (read-only) and [`BufSliceMut`] (exclusive) windows. The windows are
//! borrow-checked at run time like a `RefCell` over byte ranges: overlapping exclusive windows
//! are refused, so two member reads can never write the same bytes, and the buffer stays
//! alive until the last window (possibly held by an orphaned io_uring op) is gone.

use std::fmt;
use std::ops::{Deref, DerefMut, Range};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use smallvec::SmallVec;

use crate::borrows::{BorrowKind, Borrows};
use crate::digests::Digests;

pub use crate::sizes::ALIGN;

/// An owned, `ALIGN`-aligned buffer whose capacity is a power of two of at least `ALIGN`.
/// Dropped buffers go back to a per-thread pool.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    cap: usize,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared references only give shared access to the bytes, like Vec<u8>.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// Capacity for `len` bytes: a power of two (so freed buffers fit a pool class), at
    /// least `ALIGN`.
    fn capacity_for(len: usize) -> usize {
        let cap = len
            .max(ALIGN)
            .checked_next_power_of_two()
            .expect("buffer size overflows usize");
        debug_assert!(
            cap >= len && cap.is_multiple_of(ALIGN),
            "a capacity holds its length"
        );
        cap
    }

    /// A buffer of `len` bytes from this thread's pool, or freshly allocated (zeroed).
    fn take(len: usize) -> (AlignedBuf, bool) {
        let cap = AlignedBuf::capacity_for(len);
        if let Some(ptr) = pool::take(cap) {
            debug_assert_eq!(
                ptr.as_ptr() as usize % ALIGN,
                0,
                "pooled blocks are aligned"
            );
            return (AlignedBuf { ptr, len, cap }, true);
        }
        if let Some((ptr, reused)) = pool::from_arena(cap) {
            debug_assert_eq!(ptr.as_ptr() as usize % ALIGN, 0, "arena blocks are aligned");
            return (AlignedBuf { ptr, len, cap }, reused);
        }
        (
            AlignedBuf {
                ptr: pool::fresh(cap),
                len,
                cap,
            },
            false,
        )
    }

    /// An empty placeholder that owns no memory (left in a recycled shared-buffer header).
    fn detached() -> AlignedBuf {
        AlignedBuf {
            ptr: NonNull::dangling(),
            len: 0,
            cap: 0,
        }
    }

    /// A zeroed buffer of `len` bytes.
    pub fn zeroed(len: usize) -> AlignedBuf {
        let (mut b, reused) = AlignedBuf::take(len);
        if reused {
            b.fill(0);
        }
        b
    }

    /// A buffer of `len` bytes that the caller will overwrite entirely (an I/O target): its
    /// bytes are initialised but hold whatever an earlier buffer of this thread left there.
    /// Reusing pooled memory saves the page faults and zeroing of a fresh allocation, which
    /// dominate the cost of large requests.
    pub fn for_overwrite(len: usize) -> AlignedBuf {
        let b = AlignedBuf::take(len).0;
        debug_assert!(b.len == len && b.len <= b.cap);
        b
    }

    /// A buffer holding a copy of `data`.
    pub fn from_slice(data: &[u8]) -> AlignedBuf {
        let mut b = AlignedBuf::zeroed(data.len());
        b.copy_from_slice(data);
        debug_assert_eq!(b.len(), data.len());
        b
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Changes the length within the capacity. The bytes are always initialised (zeroed at
    /// allocation), so growing exposes zeros or earlier contents, never uninitialised memory.
    pub fn set_len(&mut self, len: usize) {
        assert!(
            len <= self.cap,
            "set_len({len}) beyond capacity {}",
            self.cap
        );
        self.len = len;
    }

    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.cap == 0 {
            return; // a placeholder (`detached`): nothing was allocated
        }
        if pool::give(self.ptr, self.cap) {
            return;
        }
        // SAFETY: ptr was allocated with exactly this layout and is not used after this.
        unsafe { pool::free(self.ptr, self.cap) }
    }
}

/// Empties this thread's buffer pool if it was not used since the last call: the bytes
/// given back. Call it now and then from a thread that serves bursts of large requests.
pub fn trim_idle_pool() -> usize {
    pool::trim_idle()
}

/// Per-thread free lists of buffers by power-of-two capacity, bounded in bytes. Every pooled
/// buffer was zero-initialised when first allocated, so its bytes are always initialised.
/// Blocks of the registered arena (`crate::arena`) are pooled the same way and go back to
/// the arena, not to the heap, when the pool is full.
mod pool {
    use std::alloc::{self, Layout};
    use std::cell::RefCell;
    use std::ptr::NonNull;

    use crate::sizes::{ALIGN, MAX_SHIFT, MIN_SHIFT, POOL_CLASSES as CLASSES};
    /// Most bytes one thread keeps for reuse.
    const MAX_POOLED: usize = 128 << 20;

    struct Pool {
        classes: [Vec<NonNull<u8>>; CLASSES],
        bytes: usize,
        /// Of `bytes`, those in blocks of the registered arena.
        arena_bytes: usize,
        /// A block was taken or given since the last [`trim_idle`].
        used: bool,
    }

    impl Pool {
        /// Frees every block it keeps; the bytes freed.
        fn empty(&mut self) -> usize {
            let freed = self.bytes;
            for (i, class) in self.classes.iter_mut().enumerate() {
                for ptr in class.drain(..) {
                    // SAFETY: pooled buffers were allocated with this class's layout and
                    // are owned by the pool.
                    unsafe { free(ptr, 1 << (i as u32 + MIN_SHIFT)) }
                }
            }
            self.bytes = 0;
            self.arena_bytes = 0;
            freed
        }
    }

    impl Drop for Pool {
        fn drop(&mut self) {
            self.empty();
        }
    }

    thread_local! {
        static POOL: RefCell<Pool> = RefCell::new(Pool {
            classes: Default::default(),
            bytes: 0,
            arena_bytes: 0,
            used: false,
        });
    }

    /// Empties this thread's pool if no block was taken from it or given to it since the
    /// last call; the bytes freed. A thread that calls it now and then (the daemon's
    /// workers, every few seconds) gives back what a burst of large requests left pooled
    /// once the burst is over, and keeps its pool while requests come.
    pub(crate) fn trim_idle() -> usize {
        POOL.try_with(|p| {
            let mut p = p.borrow_mut();
            if std::mem::take(&mut p.used) {
                return 0;
            }
            p.empty()
        })
        .unwrap_or(0)
    }

    fn class(cap: usize) -> Option<usize> {
        if !cap.is_power_of_two() {
            return None;
        }
        let shift = cap.trailing_zeros();
        (MIN_SHIFT..=MAX_SHIFT)
            .contains(&shift)
            .then(|| (shift - MIN_SHIFT) as usize)
    }

    pub(super) fn take(cap: usize) -> Option<NonNull<u8>> {
        let c = class(cap)?;
        POOL.try_with(|p| {
            let mut p = p.borrow_mut();
            p.used = true;
            let ptr = p.classes[c].pop()?;
            debug_assert!(p.bytes >= cap, "the pool counts every block it keeps");
            p.bytes -= cap;
            if in_arena(ptr, cap).is_some() {
                p.arena_bytes -= cap;
            }
            debug_assert!(
                p.arena_bytes <= p.bytes,
                "arena bytes are part of the pool's"
            );
            Some(ptr)
        })
        .ok()
        .flatten()
    }

    /// The registered arena, if `cap` bytes at `ptr` are one of its blocks.
    fn in_arena(ptr: NonNull<u8>, cap: usize) -> Option<&'static crate::arena::Arena> {
        crate::arena::get().filter(|a| a.contains(ptr.as_ptr(), cap))
    }

    /// Keeps the buffer for reuse; false if the pool is full (or gone at thread exit). A
    /// thread keeps at most half the registered arena: beyond that its blocks go back to
    /// the arena's shared lists, so one busy thread cannot leave the others none.
    pub(super) fn give(ptr: NonNull<u8>, cap: usize) -> bool {
        let Some(c) = class(cap) else { return false };
        let arena = in_arena(ptr, cap);
        POOL.try_with(|p| {
            let mut p = p.borrow_mut();
            p.used = true;
            if p.bytes + cap > MAX_POOLED {
                return false;
            }
            if let Some(a) = arena {
                if p.arena_bytes + cap > a.len() / 2 {
                    return false;
                }
                p.arena_bytes += cap;
            }
            p.bytes += cap;
            p.classes[c].push(ptr);
            debug_assert!(p.bytes <= MAX_POOLED && p.arena_bytes <= p.bytes);
            true
        })
        .unwrap_or(false)
    }

    /// A block of the registered arena, if the process has one with room; and whether the
    /// block held data before.
    pub(super) fn from_arena(cap: usize) -> Option<(NonNull<u8>, bool)> {
        crate::arena::get()?.alloc(class(cap)?, cap)
    }

    /// Blocks of this size and more are mapped pages of their own (`mmap`), not heap
    /// memory: zero until written and resident only where written. The heap's aligned
    /// zeroed allocation writes every byte, so a 32 MiB buffer waiting for a payload that
    /// never comes (a client that sends a write's header alone) would hold 32 MiB of
    /// memory; mapped, it holds what the payload has filled.
    const MAPPED_FROM: usize = 1 << 20;

    /// A new zeroed block of `cap` bytes, aligned to `ALIGN`.
    pub(super) fn fresh(cap: usize) -> NonNull<u8> {
        let layout = Layout::from_size_align(cap, ALIGN).expect("buffer size overflows a Layout");
        if cap >= MAPPED_FROM {
            let Ok(ptr) = crate::arena::map_anonymous(cap) else {
                alloc::handle_alloc_error(layout)
            };
            debug_assert_eq!(
                ptr.as_ptr() as usize % ALIGN,
                0,
                "mappings are page-aligned"
            );
            return ptr;
        }
        // SAFETY: layout has a non-zero size.
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            alloc::handle_alloc_error(layout)
        };
        ptr
    }

    /// # Safety
    /// `ptr` must have been allocated with size `cap` and alignment `ALIGN` (by [`fresh`] or
    /// from the arena) and not be used afterwards.
    pub(super) unsafe fn free(ptr: NonNull<u8>, cap: usize) {
        debug_assert!(
            cap >= ALIGN && cap.is_power_of_two(),
            "a block of a pool class"
        );
        if let Some(a) = in_arena(ptr, cap) {
            let c = class(cap).expect("arena blocks have a pool class");
            a.free(c, ptr);
            return;
        }
        if cap >= MAPPED_FROM {
            // SAFETY: per this function's contract the block is `fresh`'s mapping of `cap`
            // bytes, and nothing uses it any more.
            let r = unsafe { libc::munmap(ptr.as_ptr().cast(), cap) };
            debug_assert_eq!(r, 0, "a mapping of ours unmaps");
            return;
        }
        let layout = Layout::from_size_align(cap, ALIGN).expect("layout was valid at alloc");
        // SAFETY: per this function's contract.
        unsafe { alloc::dealloc(ptr.as_ptr(), layout) }
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        debug_assert!(
            self.len <= self.cap,
            "a buffer's length is within its capacity"
        );
        // SAFETY: ptr is valid for cap >= len initialised bytes and we hold &self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        debug_assert!(
            self.len <= self.cap,
            "a buffer's length is within its capacity"
        );
        // SAFETY: ptr is valid for cap >= len initialised bytes and we hold &mut self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Clone for AlignedBuf {
    fn clone(&self) -> AlignedBuf {
        AlignedBuf::from_slice(self)
    }
}

impl fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len)
            .field("cap", &self.cap)
            .finish()
    }
}

struct Inner {
    buf: AlignedBuf,
    borrows: Mutex<Borrows>,
    /// Digests remembered of the bytes (`digests.rs`), and whether there are any: an
    /// exclusive window, lent on every member read, looks at the flag alone.
    digests: Mutex<Digests>,
    remembered: AtomicBool,
}

impl Inner {
    fn borrows(&self) -> std::sync::MutexGuard<'_, Borrows> {
        self.borrows.lock().expect(crate::POISONED)
    }

    fn borrow(&self, range: Range<usize>, kind: BorrowKind) -> Result<(), BorrowError> {
        assert!(range.start <= range.end, "inverted range {range:?}");
        if range.end > self.buf.len() {
            return Err(BorrowError::OutOfBounds {
                range,
                len: self.buf.len(),
            });
        }
        self.borrows()
            .lend(range.clone(), kind)
            .map_err(|held| BorrowError::Overlap { range, held })?;
        if kind == BorrowKind::Exclusive {
            // Its holder may write the bytes: what was remembered of them no longer holds.
            self.forget_digests();
        }
        Ok(())
    }

    fn digests(&self) -> std::sync::MutexGuard<'_, Digests> {
        self.digests.lock().expect(crate::POISONED)
    }

    /// The flag changes only with the digests' lock held, so it is never false while some
    /// digest is kept (one kept then could outlive the bytes it was taken of).
    fn forget_digests(&self) {
        if self.remembered.load(Ordering::Acquire) {
            let mut d = self.digests();
            d.clear();
            self.remembered.store(false, Ordering::Release);
        }
    }

    fn empty(buf: AlignedBuf) -> Inner {
        Inner {
            buf,
            borrows: Mutex::new(Borrows::default()),
            digests: Mutex::new(Digests::default()),
            remembered: AtomicBool::new(false),
        }
    }

    /// Replaces the exclusive borrows `left` and `right`, which meet, by their union.
    fn join_exclusive(&self, left: &Range<usize>, right: &Range<usize>) {
        debug_assert_eq!(left.end, right.start, "joined windows meet");
        self.borrows().join_exclusive(left, right);
    }

    /// Replaces the exclusive borrow `range` by its two halves at `mid`.
    fn split_exclusive(&self, range: &Range<usize>, mid: usize) {
        debug_assert!(
            range.contains(&mid) || mid == range.end,
            "split inside the window"
        );
        self.borrows().split_exclusive(range, mid);
    }

    fn release(&self, range: &Range<usize>, kind: BorrowKind) {
        self.borrows().give_back(range, kind);
    }
}

/// A window could not be lent: a bug in the caller (the engine), never bad input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BorrowError {
    #[error("buffer range {range:?} overlaps a range already lent out ({held:?})")]
    Overlap {
        range: Range<usize>,
        held: Range<usize>,
    },
    #[error("buffer range {range:?} is outside the buffer of {len} bytes")]
    OutOfBounds { range: Range<usize>, len: usize },
}

/// An [`AlignedBuf`] lent out in windows to concurrent I/O. See the module docs.
#[derive(Clone)]
pub struct SharedBuf {
    inner: Arc<Inner>,
}

thread_local! {
    /// Shared-buffer headers emptied by `try_into_inner`: a parity write makes a shared
    /// buffer for every scratch and parity block, and reusing their headers saves an
    /// allocation each (the buffers themselves come from the buffer pool).
    static FREE_HEADERS: crate::recycle::FreeList<Inner> =
        const { std::cell::RefCell::new(Vec::new()) };
}

impl SharedBuf {
    pub fn new(buf: AlignedBuf) -> SharedBuf {
        // A kept header gets only its buffer set (its borrow table is already empty): the
        // header is not moved in and out whole, which would copy it twice per buffer.
        let inner = match crate::recycle::pop(&FREE_HEADERS) {
            Some(mut inner) => {
                let i = Arc::get_mut(&mut inner).expect("a kept header is unshared");
                debug_assert_eq!(i.buf.capacity(), 0, "a kept header holds no buffer");
                debug_assert!(
                    !*i.remembered.get_mut(),
                    "a kept header remembers nothing of the buffer it held"
                );
                i.buf = buf;
                inner
            }
            None => Arc::new(Inner::empty(buf)),
        };
        SharedBuf { inner }
    }

    pub fn len(&self) -> usize {
        self.inner.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A read-only window (for writing the bytes to a member). Overlaps other read-only
    /// windows freely; refused while an exclusive window overlaps it.
    pub fn slice(&self, range: Range<usize>) -> Result<BufSlice, BorrowError> {
        self.inner.borrow(range.clone(), BorrowKind::Shared)?;
        debug_assert!(range.end <= self.len(), "a window lies inside its buffer");
        Ok(BufSlice {
            inner: self.inner.clone(),
            range,
        })
    }

    /// An exclusive window (for reading a member into). Refused if any window overlaps it.
    pub fn slice_mut(&self, range: Range<usize>) -> Result<BufSliceMut, BorrowError> {
        self.inner.borrow(range.clone(), BorrowKind::Exclusive)?;
        debug_assert!(range.end <= self.len(), "a window lies inside its buffer");
        Ok(BufSliceMut {
            inner: self.inner.clone(),
            range,
        })
    }

    /// Takes the buffer back once every window and every other handle is gone.
    /// The emptied header is kept for this thread's next `SharedBuf::new`.
    pub fn try_into_inner(mut self) -> Result<AlignedBuf, SharedBuf> {
        let Some(inner) = Arc::get_mut(&mut self.inner) else {
            return Err(self);
        };
        // Every window holds a handle: with none left, nothing is lent.
        debug_assert!(
            inner.borrows.get_mut().is_ok_and(|b| b.is_empty()),
            "a buffer taken back has no window out"
        );
        let buf = std::mem::replace(&mut inner.buf, AlignedBuf::detached());
        forget_all(inner);
        // Dropping the last handle keeps the emptied header.
        drop(self);
        Ok(buf)
    }

    /// Runs `f` over the whole buffer, read-only. Panics if an exclusive window is lent out
    /// (a caller bug: reading bytes that a member is still writing).
    pub fn with<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        let all = 0..self.len();
        let window = self
            .slice(all)
            .expect("read the whole buffer while a member writes into it");
        f(window.as_slice())
    }
}

impl Drop for SharedBuf {
    fn drop(&mut self) {
        keep_if_last(&mut self.inner);
    }
}

thread_local! {
    /// What a handle's header is swapped for when its own is kept: a clone of this is a
    /// reference count, not an allocation.
    static PLACEHOLDER: Arc<Inner> = Arc::new(Inner::empty(AlignedBuf::detached()));
}

/// The buffer left its header: nothing remembered of its bytes may stay with the header.
fn forget_all(i: &mut Inner) {
    if std::mem::replace(i.remembered.get_mut(), false) {
        if let Ok(d) = i.digests.get_mut() {
            d.clear();
        }
    }
}

/// Called as a handle (the buffer or a window) is dropped: when it is the last one, its
/// buffer goes back to the pool now and its emptied header to this thread's list, for the
/// next `SharedBuf::new`. A request's payload header is then reused, not allocated.
fn keep_if_last(inner: &mut Arc<Inner>) {
    let Some(i) = Arc::get_mut(inner) else {
        return;
    };
    let borrows = i.borrows.get_mut();
    debug_assert!(
        borrows.as_ref().map(|b| b.is_empty()).unwrap_or(true),
        "the last handle leaves no window lent"
    );
    if !borrows.is_ok_and(|b| b.is_empty()) {
        return;
    }
    drop(std::mem::replace(&mut i.buf, AlignedBuf::detached()));
    forget_all(i);
    let Ok(placeholder) = PLACEHOLDER.try_with(Arc::clone) else {
        return; // the thread is exiting: the header is freed with the handle
    };
    let header = std::mem::replace(inner, placeholder);
    crate::recycle::keep(&FREE_HEADERS, header);
}

impl fmt::Debug for SharedBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedBuf")
            .field("len", &self.len())
            .finish()
    }
}

/// A read-only window into a [`SharedBuf`].
pub struct BufSlice {
    inner: Arc<Inner>,
    range: Range<usize>,
}

impl BufSlice {
    pub fn len(&self) -> usize {
        self.range.len()
    }

    pub fn is_empty(&self) -> bool {
        self.range.is_empty()
    }

    pub fn as_slice(&self) -> &[u8] {
        debug_assert!(
            self.range.end <= self.inner.buf.len(),
            "a window inside its buffer"
        );
        // SAFETY: the range is in bounds (checked at borrow) and registered as shared, so no
        // exclusive window (the only way to write) overlaps it while self lives.
        unsafe {
            std::slice::from_raw_parts(self.inner.buf.as_ptr().add(self.range.start), self.len())
        }
    }

    /// Pointer to the first byte, valid for `len()` bytes while `self` lives.
    pub fn as_ptr(&self) -> *const u8 {
        self.as_slice().as_ptr()
    }

    /// Offset of this window in its buffer.
    pub fn offset(&self) -> usize {
        self.range.start
    }

    /// The digests of `kind` of `n` whole `block`-byte blocks from byte `at` of this window,
    /// if a holder of a window over them remembered them ([`BufSlice::remember_digests`]).
    pub fn remembered_digests(
        &self,
        at: usize,
        block: usize,
        kind: u32,
        n: usize,
    ) -> Option<SmallVec<[u32; 16]>> {
        debug_assert!(at + n * block <= self.len(), "blocks inside the window");
        if !self.inner.remembered.load(Ordering::Acquire) {
            return None;
        }
        let d = self.inner.digests();
        d.find(self.range.start + at, block, kind, n)
            .map(SmallVec::from_slice)
    }

    /// Remembers the digests of `kind` of the whole `block`-byte blocks from byte `at` of
    /// this window, for whoever writes the same bytes from this buffer next (a mirror's
    /// other copies). Sound because the bytes cannot change while this window is out, and
    /// are forgotten before any window that may change them is lent.
    pub fn remember_digests(&self, at: usize, block: usize, kind: u32, values: &[u32]) {
        debug_assert!(
            at + values.len() * block <= self.len(),
            "blocks inside the window"
        );
        let mut d = self.inner.digests();
        d.keep(self.range.start + at, block, kind, values);
        self.inner.remembered.store(true, Ordering::Release);
    }

    /// A read-only window on `range` (relative to this window) of the same buffer.
    pub fn sub(&self, range: Range<usize>) -> BufSlice {
        assert!(
            range.start <= range.end && range.end <= self.len(),
            "sub-window out of range"
        );
        let abs = self.range.start + range.start..self.range.start + range.end;
        self.inner
            .borrow(abs.clone(), BorrowKind::Shared)
            .expect("a shared window can be shared");
        BufSlice {
            inner: self.inner.clone(),
            range: abs,
        }
    }
}

impl Clone for BufSlice {
    fn clone(&self) -> BufSlice {
        self.inner
            .borrow(self.range.clone(), BorrowKind::Shared)
            .expect("a shared window can always be shared again");
        BufSlice {
            inner: self.inner.clone(),
            range: self.range.clone(),
        }
    }
}

impl Drop for BufSlice {
    fn drop(&mut self) {
        self.inner.release(&self.range, BorrowKind::Shared);
        keep_if_last(&mut self.inner);
    }
}

impl fmt::Debug for BufSlice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BufSlice({:?})", self.range)
    }
}

/// An exclusive window into a [`SharedBuf`].
pub struct BufSliceMut {
    inner: Arc<Inner>,
    range: Range<usize>,
}

impl BufSliceMut {
    pub fn len(&self) -> usize {
        self.range.len()
    }

    pub fn is_empty(&self) -> bool {
        self.range.is_empty()
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: the range is in bounds and registered as exclusive: no other window overlaps
        // it while self lives, and &mut self makes this the only reference through self.
        unsafe { std::slice::from_raw_parts_mut(self.raw_ptr(), self.len()) }
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: as in as_mut_slice; &self excludes a simultaneous &mut through self.
        unsafe { std::slice::from_raw_parts(self.raw_ptr(), self.len()) }
    }

    /// Pointer to the first byte, valid for writes of `len()` bytes while `self` lives. The
    /// kernel writes through it; Rust code must not hold other references into the window
    /// meanwhile (holding `self` by value in the op guarantees that).
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.as_mut_slice().as_mut_ptr()
    }

    pub fn offset(&self) -> usize {
        self.range.start
    }

    /// Splits into the windows `[0, mid)` and `[mid, len)`, both still exclusive.
    pub fn split_at(self, mid: usize) -> (BufSliceMut, BufSliceMut) {
        assert!(
            mid <= self.len(),
            "split at {mid} beyond window of {}",
            self.len()
        );
        let at = self.range.start + mid;
        self.inner.split_exclusive(&self.range, at);
        let (inner, range) = self.into_parts();
        let left = BufSliceMut {
            inner: inner.clone(),
            range: range.start..at,
        };
        let right = BufSliceMut {
            inner,
            range: at..range.end,
        };
        debug_assert_eq!(
            left.len() + right.len(),
            range.len(),
            "the halves cover the window"
        );
        (left, right)
    }

    /// Joins `next` onto the end of this window when it continues it in the same buffer
    /// (the inverse of [`BufSliceMut::split_at`]); gives both back unchanged otherwise.
    pub fn join(self, next: BufSliceMut) -> Result<BufSliceMut, (BufSliceMut, BufSliceMut)> {
        if !Arc::ptr_eq(&self.inner, &next.inner) || self.range.end != next.range.start {
            return Err((self, next));
        }
        self.inner.join_exclusive(&self.range, &next.range);
        let (inner, range) = self.into_parts();
        // The second handle's count goes; the buffer lives on in `inner`.
        let (_, next_range) = next.into_parts();
        debug_assert!(range.start <= next_range.end);
        Ok(BufSliceMut {
            inner,
            range: range.start..next_range.end,
        })
    }

    /// Takes the window apart without giving its borrow back: for a caller that has just
    /// rewritten that borrow in the table (a split or a join).
    fn into_parts(self) -> (Arc<Inner>, Range<usize>) {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is never dropped, so its Arc is moved out exactly once, and its
        // borrow is not released twice (the caller replaced it in the table).
        let inner = unsafe { std::ptr::read(&this.inner) };
        (inner, this.range.clone())
    }

    fn raw_ptr(&self) -> *mut u8 {
        debug_assert!(
            self.range.end <= self.inner.buf.len(),
            "a window inside its buffer"
        );
        // The allocation is only ever written through exclusive windows; deriving a *mut from
        // the shared AlignedBuf pointer is how interior mutability is provided here.
        // SAFETY: range.start <= len <= cap, so the offset stays inside the allocation.
        unsafe { self.inner.buf.as_ptr().cast_mut().add(self.range.start) }
    }
}

impl Drop for BufSliceMut {
    fn drop(&mut self) {
        self.inner.release(&self.range, BorrowKind::Exclusive);
        keep_if_last(&mut self.inner);
    }
}

impl fmt::Debug for BufSliceMut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BufSliceMut({:?})", self.range)
    }
}

/// Read-only windows for one vectored write.
pub type IoVec = SmallVec<[BufSlice; 4]>;
/// Exclusive windows for one vectored read.
pub type IoVecMut = SmallVec<[BufSliceMut; 4]>;

/// Done with a list of windows (an [`IoVec`] or [`IoVecMut`], or any four-inline list of
/// them): the windows still in it are dropped now, and its heap block, if it spilled, is
/// kept for the next large request's list (`recycle::keep_small_vec`). Whoever consumes a
/// request's list last gives it back this way, so that a large request allocates none.
pub fn give_iov<W>(iov: SmallVec<[W; 4]>) {
    crate::recycle::keep_small_vec(iov, crate::sizes::IOV_MAX);
}

/// Total bytes of an [`IoVec`].
pub fn iov_len(iov: &[BufSlice]) -> usize {
    iov.iter().map(BufSlice::len).sum()
}

/// Total bytes of an [`IoVecMut`].
pub fn iov_mut_len(iov: &[BufSliceMut]) -> usize {
    iov.iter().map(BufSliceMut::len).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_remembered_for_the_same_bytes_until_they_may_change() {
        let shared = SharedBuf::new(AlignedBuf::zeroed(16384));
        let a = shared.slice(4096..16384).unwrap();
        a.remember_digests(0, 4096, 1, &[1, 2, 3]);
        // Another window over the same bytes (a mirror's other copy) finds them.
        let b = shared.slice(8192..16384).unwrap();
        assert_eq!(
            b.remembered_digests(0, 4096, 1, 2).unwrap().as_slice(),
            &[2, 3]
        );
        assert_eq!(b.remembered_digests(0, 4096, 2, 2), None, "another kind");
        drop((a, b));
        // An exclusive window may change the bytes: everything remembered is forgotten.
        let mut w = shared.slice_mut(0..4096).unwrap();
        w.as_mut_slice()[0] = 1;
        drop(w);
        let c = shared.slice(4096..16384).unwrap();
        assert_eq!(c.remembered_digests(0, 4096, 1, 3), None);
        // Nor does a header kept for the next buffer remember anything of the last one.
        c.remember_digests(0, 4096, 1, &[4, 5, 6]);
        drop(c);
        let back = shared.try_into_inner().unwrap();
        let again = SharedBuf::new(back);
        let d = again.slice(4096..16384).unwrap();
        assert_eq!(d.remembered_digests(0, 4096, 1, 3), None);
    }

    #[test]
    fn aligned_and_zeroed() {
        for len in [0, 1, 511, 4096, 4097, 1 << 20] {
            let b = AlignedBuf::zeroed(len);
            assert_eq!(b.as_ptr() as usize % ALIGN, 0);
            assert_eq!(b.len(), len);
            assert!(b.capacity() >= len && b.capacity().is_multiple_of(ALIGN));
            assert!(b.iter().all(|&x| x == 0));
        }
    }

    /// An idle pool is emptied at the second call without use in between; one in use is
    /// kept.
    #[test]
    fn an_idle_pool_is_trimmed() {
        drop(AlignedBuf::for_overwrite(2 << 20));
        assert_eq!(trim_idle_pool(), 0, "used since the last call: kept");
        assert!(trim_idle_pool() >= 2 << 20, "idle: emptied");
        assert_eq!(trim_idle_pool(), 0, "nothing left");
        drop(AlignedBuf::for_overwrite(2 << 20));
        assert_eq!(trim_idle_pool(), 0, "used again: kept");
    }

    /// Blocks of a mapping of their own: zero, writable to the last byte, reused through
    /// the pool, and unmapped when the pool cannot keep them (more than it holds at once).
    #[test]
    fn mapped_blocks_are_zero_writable_and_unmapped() {
        let bufs: Vec<AlignedBuf> = (0..40)
            .map(|i| {
                let mut b = AlignedBuf::for_overwrite(4 << 20);
                assert!(b.iter().all(|&x| x == 0), "a fresh mapping reads as zeros");
                b[0] = i as u8;
                let last = b.len() - 1;
                b[last] = i as u8;
                assert_eq!(b.as_ptr() as usize % ALIGN, 0);
                b
            })
            .collect();
        for (i, b) in bufs.iter().enumerate() {
            assert_eq!((b[0], b[b.len() - 1]), (i as u8, i as u8));
        }
        drop(bufs); // 160 MiB: past what the pool keeps, the rest is unmapped
        let b = AlignedBuf::zeroed(4 << 20);
        assert!(b.iter().all(|&x| x == 0), "a reused block is zeroed");
    }

    #[test]
    fn exclusive_windows_do_not_overlap() {
        let s = SharedBuf::new(AlignedBuf::zeroed(8192));
        let a = s.slice_mut(0..4096).unwrap();
        assert!(matches!(
            s.slice_mut(4095..4097),
            Err(BorrowError::Overlap { .. })
        ));
        assert!(matches!(
            s.slice(100..200),
            Err(BorrowError::Overlap { .. })
        ));
        let b = s.slice_mut(4096..8192).unwrap();
        drop(a);
        let c = s.slice(0..10).unwrap();
        let d = s.slice(5..20).unwrap();
        assert!(s.slice_mut(15..30).is_err());
        drop((b, c, d));
        assert!(matches!(
            s.slice(0..8193),
            Err(BorrowError::OutOfBounds { .. })
        ));
    }

    #[test]
    fn windows_write_through_and_buffer_comes_back() {
        let s = SharedBuf::new(AlignedBuf::zeroed(1024));
        let mut w1 = s.slice_mut(0..512).unwrap();
        let mut w2 = s.slice_mut(512..1024).unwrap();
        w1.as_mut_slice().fill(1);
        w2.as_mut_slice().fill(2);
        let s2 = s.clone();
        assert!(s.try_into_inner().is_err());
        drop((w1, w2));
        s2.with(|b| {
            assert!(b[..512].iter().all(|&x| x == 1));
            assert!(b[512..].iter().all(|&x| x == 2));
        });
        let back = s2.try_into_inner().unwrap();
        assert_eq!(back[0], 1);
        assert_eq!(back[1023], 2);
    }

    #[test]
    fn the_last_handle_dropped_gives_its_header_back() {
        // The buffer dropped first, its exclusive window last (a member read finishing
        // after its request let go), then a read-only window last.
        let a = SharedBuf::new(AlignedBuf::from_slice(&[1u8; 64]));
        let header = Arc::as_ptr(&a.inner);
        let w = a.slice_mut(0..64).unwrap();
        drop(a);
        drop(w);
        let b = SharedBuf::new(AlignedBuf::from_slice(&[2u8; 32]));
        assert_eq!(Arc::as_ptr(&b.inner), header, "kept when the window went");
        let r = b.slice(0..32).unwrap();
        drop(b);
        assert_eq!(r.as_slice(), &[2u8; 32], "the window still reads its bytes");
        drop(r);
        let c = SharedBuf::new(AlignedBuf::from_slice(&[3u8; 16]));
        assert_eq!(
            Arc::as_ptr(&c.inner),
            header,
            "kept when the read-only window went"
        );
        c.with(|x| assert_eq!(x, &[3u8; 16]));
        // Not the last handle: nothing is kept, the buffer stays.
        let d = c.slice(0..16).unwrap();
        drop(c);
        assert_eq!(d.as_slice(), &[3u8; 16]);
    }

    #[test]
    fn a_header_given_back_is_reused_clean() {
        let a = SharedBuf::new(AlignedBuf::from_slice(&[5u8; 300]));
        let header = Arc::as_ptr(&a.inner);
        let w = a.slice(0..300).unwrap();
        assert!(a.slice_mut(0..1).is_err(), "a shared window is lent");
        drop(w);
        let back = a.try_into_inner().unwrap();
        assert_eq!((back.len(), back[299]), (300, 5));
        // The next shared buffer on this thread takes the same header, with no window lent
        // and its own bytes.
        let b = SharedBuf::new(AlignedBuf::from_slice(&[9u8; 200]));
        assert_eq!(Arc::as_ptr(&b.inner), header);
        assert_eq!(b.len(), 200);
        let mut m = b
            .slice_mut(0..200)
            .expect("nothing lent on a reused header");
        m.as_mut_slice()[0] = 1;
        assert!(
            b.slice(0..1).is_err(),
            "borrows are checked on a reused header"
        );
        drop(m);
        b.with(|x| assert_eq!((x[0], x[199]), (1, 9)));
        // A buffer still shared does not give its header back.
        let c = b.clone();
        let b = b.try_into_inner().unwrap_err();
        drop(c);
        assert_eq!(b.try_into_inner().unwrap().len(), 200);
    }

    #[test]
    fn split_windows_stay_exclusive() {
        let s = SharedBuf::new(AlignedBuf::zeroed(100));
        let w = s.slice_mut(10..90).unwrap();
        let (mut a, b) = w.split_at(30);
        assert_eq!((a.offset(), a.len(), b.offset(), b.len()), (10, 30, 40, 50));
        a.as_mut_slice().fill(9);
        assert!(s.slice(39..41).is_err());
        drop(a);
        assert!(s.slice(10..40).is_ok());
        assert!(s.slice(40..41).is_err());
        drop(b);
        let r = s.slice(0..100).unwrap();
        let sub = r.sub(10..40);
        assert!(sub.as_slice().iter().all(|&x| x == 9));
        drop((r, sub));
        assert!(s.try_into_inner().is_ok());
    }

    #[test]
    fn window_keeps_buffer_alive() {
        let s = SharedBuf::new(AlignedBuf::from_slice(&[7u8; 100]));
        let w = s.slice(10..20).unwrap();
        drop(s);
        assert_eq!(w.as_slice(), &[7u8; 10]);
    }

    #[test]
    fn split_windows_join_back_into_one() {
        let b = SharedBuf::new(AlignedBuf::from_slice(&[7u8; 300]));
        let w = b.slice_mut(0..300).unwrap();
        let (l, r) = w.split_at(100);
        let (m, r) = r.split_at(50);
        // Not adjacent (l then r): refused, both given back as they were.
        let (l, r) = l.join(r).unwrap_err();
        let lm = l.join(m).expect("adjacent halves of one buffer");
        assert_eq!((lm.offset(), lm.len()), (0, 150));
        // Another buffer's window that happens to start where this one ends: refused.
        let other = SharedBuf::new(AlignedBuf::zeroed(300));
        let foreign = other.slice_mut(150..300).unwrap();
        let (lm, foreign) = lm.join(foreign).unwrap_err();
        drop(foreign);
        let mut all = lm.join(r).expect("the rest");
        assert_eq!((all.offset(), all.len()), (0, 300));
        all.as_mut_slice()[299] = 1;
        // One exclusive borrow over everything: nothing else can be lent.
        assert!(b.slice(0..1).is_err() && b.slice(299..300).is_err());
        drop(all);
        // Every borrow and handle is back: the buffer comes out whole.
        let back = b.try_into_inner().expect("no window left");
        assert_eq!((back.len(), back[298], back[299]), (300, 7, 1));
    }
}

#[cfg(test)]
mod pool_tests {
    use super::AlignedBuf;

    #[test]
    fn freed_buffers_are_reused_and_zeroed_means_zeroed() {
        let mut a = AlignedBuf::zeroed(100_000);
        a.fill(0xab);
        let p = a.as_ptr();
        drop(a);
        // Same class (128 KiB): the pooled buffer comes back, still holding old bytes.
        let b = AlignedBuf::for_overwrite(70_000);
        assert_eq!(b.as_ptr(), p, "pooled buffer reused");
        assert_eq!(b.len(), 70_000);
        assert!(b.capacity().is_power_of_two() && b.capacity() >= 70_000);
        drop(b);
        let c = AlignedBuf::zeroed(100_000);
        assert_eq!(c.as_ptr(), p);
        assert!(c.iter().all(|&x| x == 0), "zeroed() clears reused memory");
        // Sizes beyond the largest class are not pooled, and work.
        let big = AlignedBuf::zeroed((64 << 20) + 1);
        assert_eq!(big.capacity(), 128 << 20);
    }
}
