//! Per-thread free lists of `Arc` headers, for objects made and dropped once per request
//! (shared-buffer headers here; a parity write's request and mailboxes in the engine): the
//! next request reuses a header instead of allocating one. A header goes back only when
//! `Arc::get_mut` proves its last handle is back, and is emptied at once, so what it held
//! (buffers, client windows, wakers) goes then, not when it is reused. Lists are bounded.
//!
//! The same for the heap blocks of Vecs made per request (a member I/O's iovec array, a
//! kept stripe's list of contents, a large request's tables): [`pop_vec`], [`keep_vec`],
//! [`small_vec`], [`keep_small_vec`], kept by their elements' layout, and [`Table`], a
//! SmallVec that gives its block back when dropped.

use std::alloc::Layout;
use std::cell::RefCell;
use std::ptr::NonNull;
use std::sync::Arc;
use std::thread::LocalKey;

/// Headers kept per list and thread.
pub const KEPT: usize = 256;

/// A thread's free list of emptied headers: declare one per type with
/// `thread_local! { static L: FreeList<T> = const { RefCell::new(Vec::new()) }; }`.
pub type FreeList<T> = RefCell<Vec<Arc<T>>>;

/// An emptied header from `list`, unshared, if it has one.
pub fn pop<T>(list: &'static LocalKey<FreeList<T>>) -> Option<Arc<T>> {
    list.try_with(|l| l.borrow_mut().pop()).ok().flatten()
}

/// Keeps an emptied, unshared header in `list` (freed instead when the list is full or the
/// thread is exiting).
pub fn keep<T>(list: &'static LocalKey<FreeList<T>>, a: Arc<T>) {
    debug_assert_eq!(Arc::strong_count(&a), 1, "a kept header is unshared");
    let _ = list.try_with(move |l| {
        let mut l = l.borrow_mut();
        if l.len() < KEPT {
            l.push(a);
        }
        debug_assert!(l.len() <= KEPT, "free lists are bounded");
    });
}

/// An `Arc` holding `value`, on a header from `list` when it has one.
pub fn take<T>(list: &'static LocalKey<FreeList<T>>, value: T) -> Arc<T> {
    match pop(list) {
        Some(mut a) => {
            *Arc::get_mut(&mut a).expect("a kept header is unshared") = value;
            debug_assert_eq!(Arc::weak_count(&a), 0, "a kept header has no weak handle");
            a
        }
        None => Arc::new(value),
    }
}

/// Gives a handle back: if it is the last, its value is replaced by `empty()` now and the
/// header kept in `list`.
pub fn give<T>(list: &'static LocalKey<FreeList<T>>, mut a: Arc<T>, empty: impl FnOnce() -> T) {
    if let Some(v) = Arc::get_mut(&mut a) {
        *v = empty();
        keep(list, a);
    }
}

/// Heap blocks of emptied Vecs, kept per thread by their elements' layout (size and
/// alignment): a Vec of any element type with that layout takes one up, whatever type gave
/// it back. An empty block holds no values, so the types may borrow (a batch's member
/// futures borrow the members they run on, and such a table could not sit in a per-type
/// `'static` list). Classes sit in a small open-addressed table whose home slot is a
/// constant of the element type; each class keeps at most [`KEPT`] blocks.
struct Blocks {
    classes: [Class; CLASSES],
}

/// One element layout's kept blocks: (start, capacity in elements).
struct Class {
    size: usize,
    align: usize,
    blocks: Vec<(NonNull<u8>, usize)>,
}

/// Slots of the class table, and how far from its home slot a class may sit.
const CLASSES: usize = 64;
const PROBES: usize = 4;

thread_local! {
    static BLOCKS: RefCell<Blocks> = const {
        RefCell::new(Blocks {
            classes: [const { Class { size: 0, align: 0, blocks: Vec::new() } }; CLASSES],
        })
    };
}

impl Blocks {
    /// The class of `T`'s layout: found, or claimed when `claim` and a slot is free.
    fn class<T>(&mut self, claim: bool) -> Option<&mut Class> {
        let (size, align) = (std::mem::size_of::<T>(), std::mem::align_of::<T>());
        let home = ((size as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ^ (align as u64).wrapping_mul(0xC2B2_AE3D_27D4_EB4F))
            >> 58;
        let mut at = None;
        for i in 0..PROBES {
            let c = (home as usize + i) % CLASSES;
            let class = &self.classes[c];
            if class.size == size && class.align == align {
                at = Some(c);
                break;
            }
            if class.size == 0 {
                debug_assert!(class.blocks.is_empty(), "an unclaimed class keeps nothing");
                if claim {
                    self.classes[c].size = size;
                    self.classes[c].align = align;
                    at = Some(c);
                }
                break;
            }
        }
        debug_assert!(
            at.is_none_or(|c| self.classes[c].size == size && self.classes[c].align == align),
            "a class found is the type's layout's"
        );
        at.map(|c| &mut self.classes[c])
    }
}

impl Drop for Blocks {
    fn drop(&mut self) {
        for class in &mut self.classes {
            for (start, cap) in class.blocks.drain(..) {
                let layout = Layout::from_size_align(class.size * cap, class.align)
                    .expect("a kept block's layout was a Vec's");
                // SAFETY: the block was a Vec's buffer, allocated by the global allocator
                // with exactly this layout (`cap` elements of `size` bytes at `align`), and
                // it is freed once: it leaves the class here.
                unsafe { std::alloc::dealloc(start.as_ptr(), layout) };
            }
        }
    }
}

/// An empty Vec on a kept block of `T`'s layout when this thread has one (a new,
/// unallocated one otherwise).
pub fn pop_vec<T>() -> Vec<T> {
    pop_vec_with_room(0)
}

/// An empty Vec with room for `n`, on a kept block when this thread has one (grown if it
/// has less room).
pub fn vec_with_room<T>(n: usize) -> Vec<T> {
    let mut v = pop_vec_with_room(n);
    v.reserve(n);
    debug_assert!(v.is_empty() && v.capacity() >= n);
    v
}

/// An empty Vec on a kept block of `T`'s layout, the newest with room for `n` (the newest
/// kept otherwise; a new, unallocated Vec when there is none). Types of one layout share a
/// class, and one that keeps small blocks must not make another grow its own every time: a
/// table that spills looks through the class (`n` = 0, the small lists' case, takes the
/// newest at once).
fn pop_vec_with_room<T>(n: usize) -> Vec<T> {
    if std::mem::size_of::<T>() == 0 {
        return Vec::new();
    }
    let block = BLOCKS
        .try_with(|b| {
            let mut b = b.borrow_mut();
            let blocks = &mut b.class::<T>(false)?.blocks;
            let fit = blocks
                .iter()
                .rev()
                .position(|&(_, cap)| cap >= n)
                .map_or(blocks.len().checked_sub(1)?, |i| blocks.len() - 1 - i);
            Some(blocks.swap_remove(fit))
        })
        .ok()
        .flatten();
    match block {
        // SAFETY: the block was the buffer of a Vec whose elements had `T`'s size and
        // alignment, with capacity `cap` (see `keep_vec`): allocated by the global allocator
        // with the layout of `cap` `T`s. It is taken out of the list, so it has one owner,
        // and the Vec starts empty, so no value of the type that gave it back is read.
        Some((start, cap)) => {
            debug_assert!(cap > 0, "only blocks are kept");
            // SAFETY: as above.
            unsafe { Vec::from_raw_parts(start.as_ptr().cast::<T>(), 0, cap) }
        }
        None => Vec::new(),
    }
}

/// Empties `v` (its elements are dropped now) and keeps its block for the next Vec of the
/// same element layout, unless it has none or room for more than `max_capacity` elements,
/// its class is full or the thread is exiting.
pub fn keep_vec<T>(mut v: Vec<T>, max_capacity: usize) {
    v.clear();
    let cap = v.capacity();
    if std::mem::size_of::<T>() == 0 || cap == 0 || cap > max_capacity {
        return;
    }
    let mut v = std::mem::ManuallyDrop::new(v);
    let start = NonNull::from(&mut v[..]).cast::<u8>();
    let kept = BLOCKS
        .try_with(|b| match b.borrow_mut().class::<T>(true) {
            Some(class) if class.blocks.len() < KEPT => {
                debug_assert_eq!(class.size, std::mem::size_of::<T>(), "kept by its layout");
                class.blocks.push((start, cap));
                true
            }
            _ => false,
        })
        .unwrap_or(false);
    if !kept {
        // SAFETY: not kept, so this is still the only handle to the block, which is
        // freed here as the Vec would have.
        drop(unsafe { std::mem::ManuallyDrop::take(&mut v) });
    }
}

/// A SmallVec with room for `n`: inline when `n` fits there, else on a kept block (a new
/// one when this thread has none). For a table that is inline for small requests and spills
/// for large ones; give it back with [`keep_small_vec`].
#[inline]
pub fn small_vec<A: smallvec::Array>(n: usize) -> smallvec::SmallVec<A> {
    if n <= A::size() {
        smallvec::SmallVec::new()
    } else {
        spilled_small_vec(n)
    }
}

/// [`small_vec`] past the inline size (out of line: small requests never come here).
#[inline(never)]
fn spilled_small_vec<A: smallvec::Array>(n: usize) -> smallvec::SmallVec<A> {
    // A Vec with more room than the inline size lends its block as is.
    smallvec::SmallVec::from_vec(vec_with_room(n))
}

/// Empties `v` (its elements are dropped now) and keeps its heap block when it has one (see
/// [`keep_vec`] for the bounds).
#[inline]
pub fn keep_small_vec<A: smallvec::Array>(v: smallvec::SmallVec<A>, max_capacity: usize) {
    if v.spilled() {
        keep_vec(v.into_vec(), max_capacity);
    }
}

/// Before a push past `v`'s inline size, moves its elements onto a kept block with room for
/// four times as many (a table that grows one element at a time: a large request's batch,
/// a member's windows). Does nothing while there is room.
#[inline]
pub fn spill_before_push<A: smallvec::Array>(v: &mut smallvec::SmallVec<A>) {
    if !v.spilled() && v.len() == A::size() {
        let mut more: smallvec::SmallVec<A> = spilled_small_vec(4 * A::size().max(1));
        more.extend(v.drain(..));
        *v = more;
        debug_assert!(v.len() < v.capacity(), "room for the push");
    }
}

/// A SmallVec whose heap block, when it spilled, goes back to this thread's kept blocks
/// when it is dropped (see [`keep_small_vec`]): for a table that is inline for small
/// requests, spills for large ones and is handed on, so that whoever drops it last need not
/// know. Taken up with room for `n` by [`Table::with_room`].
pub struct Table<A: smallvec::Array>(smallvec::SmallVec<A>);

/// Elements a table's block may have room for and still be kept.
const TABLE_KEPT_MAX: usize = 1024;

impl<A: smallvec::Array> Table<A> {
    /// An empty table with room for `n`: inline when `n` fits there, else on a kept block.
    #[inline]
    pub fn with_room(n: usize) -> Table<A> {
        Table(small_vec(n))
    }
}

impl<A: smallvec::Array> Default for Table<A> {
    fn default() -> Table<A> {
        Table(smallvec::SmallVec::new())
    }
}

impl<A: smallvec::Array> std::ops::Deref for Table<A> {
    type Target = smallvec::SmallVec<A>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl<A: smallvec::Array> std::ops::DerefMut for Table<A> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl<A: smallvec::Array> Drop for Table<A> {
    #[inline]
    fn drop(&mut self) {
        // Inline, the SmallVec drops as it would (nothing else to do).
        if self.0.spilled() {
            keep_vec(std::mem::take(&mut self.0).into_vec(), TABLE_KEPT_MAX);
        }
    }
}

impl<A: smallvec::Array> FromIterator<A::Item> for Table<A> {
    #[inline]
    fn from_iter<I: IntoIterator<Item = A::Item>>(iter: I) -> Table<A> {
        let iter = iter.into_iter();
        let mut t = Table::with_room(iter.size_hint().0);
        t.extend(iter);
        t
    }
}

impl<A: smallvec::Array> IntoIterator for Table<A> {
    type Item = A::Item;
    type IntoIter = TableIntoIter<A>;
    /// In order; the block goes back once the iterator is dropped. For small elements (a
    /// batch's results): it reverses the table to pop from the back, which moves every
    /// element once more; tables of large elements are better drained in place.
    #[inline]
    fn into_iter(mut self) -> TableIntoIter<A> {
        // Popped from the back: a handful of swaps, and no unsafe reads of moved-out slots.
        self.0.reverse();
        TableIntoIter(self)
    }
}

/// A [`Table`]'s elements by value, in order.
pub struct TableIntoIter<A: smallvec::Array>(Table<A>);

impl<A: smallvec::Array> std::fmt::Debug for TableIntoIter<A>
where
    A::Item: std::fmt::Debug,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("TableIntoIter").field(&self.0).finish()
    }
}

impl<A: smallvec::Array> Iterator for TableIntoIter<A> {
    type Item = A::Item;
    #[inline]
    fn next(&mut self) -> Option<A::Item> {
        self.0.pop()
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.0.len(), Some(self.0.len()))
    }
}

impl<A: smallvec::Array> ExactSizeIterator for TableIntoIter<A> {}

impl<'a, A: smallvec::Array> IntoIterator for &'a Table<A> {
    type Item = &'a A::Item;
    type IntoIter = std::slice::Iter<'a, A::Item>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl<'a, A: smallvec::Array> IntoIterator for &'a mut Table<A> {
    type Item = &'a mut A::Item;
    type IntoIter = std::slice::IterMut<'a, A::Item>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter_mut()
    }
}

impl<A: smallvec::Array> std::fmt::Debug for Table<A>
where
    A::Item: std::fmt::Debug,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        static LIST: FreeList<Vec<u8>> = const { RefCell::new(Vec::new()) };
    }

    #[test]
    fn only_the_last_handle_brings_its_header_back_emptied_and_lists_are_bounded() {
        let a = take(&LIST, vec![1, 2, 3]);
        let at = Arc::as_ptr(&a);
        let b = a.clone();
        give(&LIST, a, Vec::new); // not the last handle
        assert_eq!(LIST.with(|l| l.borrow().len()), 0);
        give(&LIST, b, Vec::new);
        LIST.with(|l| {
            let l = l.borrow();
            assert_eq!(l.len(), 1);
            assert!(l[0].is_empty(), "emptied when given back");
        });
        let c = take(&LIST, vec![9]);
        assert_eq!((Arc::as_ptr(&c), c[0]), (at, 9));
        let many: Vec<_> = (0..KEPT + 5).map(|_| take(&LIST, Vec::new())).collect();
        for a in many {
            give(&LIST, a, Vec::new);
        }
        assert_eq!(LIST.with(|l| l.borrow().len()), KEPT);
    }

    #[test]
    fn a_kept_vec_is_emptied_at_once_and_its_block_reused() {
        let mut v: Vec<Vec<u8>> = pop_vec();
        v.push(vec![1u8; 10]);
        let block = v.as_ptr();
        keep_vec(v, 4);
        let again: Vec<Vec<u8>> = pop_vec();
        assert_eq!((again.as_ptr(), again.len()), (block, 0));
        // Larger than the limit: freed, not kept.
        keep_vec(Vec::<Vec<u8>>::with_capacity(8), 4);
        assert_eq!(pop_vec::<Vec<u8>>().capacity(), 0);
    }

    #[test]
    fn a_block_passes_between_types_of_one_layout_borrowing_ones_included() {
        // Its own thread: the test harness's other tests keep blocks too.
        std::thread::spawn(|| {
            let mut v: Vec<u64> = Vec::with_capacity(16);
            v.extend(0..16);
            let block = v.as_ptr() as usize;
            keep_vec(v, 64);
            // Another layout does not take it.
            assert_eq!(pop_vec::<u32>().capacity(), 0);
            assert_eq!(pop_vec::<[u64; 2]>().capacity(), 0);
            // A type of the same layout that borrows does, empty, with the room it had.
            let x = 7u64;
            let mut refs: Vec<&u64> = pop_vec();
            assert_eq!((refs.as_ptr() as usize, refs.len()), (block, 0));
            assert!(refs.capacity() >= 16);
            refs.extend(std::iter::repeat_n(&x, 16));
            assert!(refs.iter().all(|r| **r == 7));
            keep_vec(refs, 64);
            // Each class keeps at most KEPT blocks; what is left at thread exit is freed (the
            // sanitizer run checks for leaks).
            for _ in 0..KEPT + 3 {
                keep_vec(Vec::<u64>::with_capacity(4), 64);
            }
            let n = BLOCKS.with(|b| b.borrow_mut().class::<u64>(false).map(|c| c.blocks.len()));
            assert_eq!(n, Some(KEPT));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_block_with_the_room_asked_for_is_preferred() {
        std::thread::spawn(|| {
            let big: Vec<u32> = Vec::with_capacity(64);
            let big_at = big.as_ptr();
            keep_vec(big, 1024);
            keep_vec(Vec::<u32>::with_capacity(4), 1024); // newer, too small
            let v: smallvec::SmallVec<[u32; 2]> = small_vec(40);
            assert_eq!(v.as_ptr(), big_at, "the block with room, not the newest");
            // Without one that fits, the newest is taken and grown.
            let w: smallvec::SmallVec<[u32; 2]> = small_vec(100);
            assert!(w.capacity() >= 100);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_full_inline_table_moves_onto_a_kept_block_before_it_grows() {
        let mut v: smallvec::SmallVec<[u16; 2]> = smallvec::SmallVec::new();
        v.push(1);
        spill_before_push(&mut v);
        assert!(!v.spilled(), "room left inline");
        v.push(2);
        spill_before_push(&mut v);
        assert!(v.spilled() && v.capacity() >= 8);
        assert_eq!(v.as_slice(), &[1, 2]);
        v.push(3);
        assert_eq!(v.as_slice(), &[1, 2, 3]);
    }

    #[test]
    fn zero_sized_elements_keep_nothing() {
        let mut v: Vec<()> = pop_vec();
        v.push(());
        keep_vec(v, 4);
        assert_eq!(pop_vec::<()>().len(), 0);
    }

    #[test]
    fn a_spilled_small_vec_lends_and_returns_a_kept_block() {
        type Small = smallvec::SmallVec<[Vec<u16>; 2]>;
        // Fits inline: no block taken.
        let v: Small = small_vec(2);
        assert!(!v.spilled());
        keep_small_vec(v, 16);
        // Spills: a block with room for all, which goes back to the list emptied.
        let mut v: Small = small_vec(5);
        assert!(v.spilled() && v.capacity() >= 5);
        let block = v.as_ptr();
        for i in 0..5 {
            v.push(vec![i; 3]);
        }
        assert_eq!(
            v.as_ptr(),
            block,
            "no reallocation while within the room asked for"
        );
        keep_small_vec(v, 16);
        let again: Small = small_vec(3);
        assert_eq!((again.as_ptr(), again.len()), (block, 0));
    }

    #[test]
    fn a_table_gives_its_block_back_when_dropped() {
        type T = Table<[(u32, u16); 2]>;
        let mut t = T::with_room(6);
        assert!(t.spilled());
        t.extend((0..6).map(|i| (i, 0)));
        let block = t.as_ptr();
        drop(t);
        let again = T::with_room(3);
        assert_eq!((again.as_ptr(), again.len()), (block, 0));
        // Inline: nothing taken, nothing kept.
        let small = T::with_room(2);
        assert!(!small.spilled());
        // By value in order, collected onto a kept block, given back after iterating.
        let t: T = (0..5).map(|i| (i, 1)).collect();
        let block = t.as_ptr();
        assert_eq!(
            t.into_iter().map(|(i, _)| i).collect::<Vec<_>>(),
            [0, 1, 2, 3, 4]
        );
        assert_eq!(T::with_room(5).as_ptr(), block);
    }
}
