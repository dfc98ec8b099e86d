//! Per-thread free lists of `Arc` headers, for objects made and dropped once per request
//! (shared-buffer headers here; a parity write's request and mailboxes in the engine): the
//! next request reuses a header instead of allocating one. A header goes back only when
//! `Arc::get_mut` proves its last handle is back, and is emptied at once, so what it held
//! (buffers, client windows, wakers) goes then, not when it is reused. Lists are bounded.
//!
//! The same for the heap blocks of Vecs made per request (a member I/O's iovec array, a
//! kept stripe's list of contents): [`VecList`], [`pop_vec`], [`keep_vec`].

use std::cell::RefCell;
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
    });
}

/// An `Arc` holding `value`, on a header from `list` when it has one.
pub fn take<T>(list: &'static LocalKey<FreeList<T>>, value: T) -> Arc<T> {
    match pop(list) {
        Some(mut a) => {
            *Arc::get_mut(&mut a).expect("a kept header is unshared") = value;
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

/// A thread's list of emptied Vecs, kept for their heap blocks: declare one per element
/// type with `thread_local! { static L: VecList<T> = const { RefCell::new(Vec::new()) }; }`.
pub type VecList<T> = RefCell<Vec<Vec<T>>>;

/// An empty Vec from `list`, with room, when it has one (a new, unallocated one otherwise).
pub fn pop_vec<T>(list: &'static LocalKey<VecList<T>>) -> Vec<T> {
    let v = list
        .try_with(|l| l.borrow_mut().pop())
        .ok()
        .flatten()
        .unwrap_or_default();
    debug_assert!(v.is_empty(), "a kept Vec is empty");
    v
}

/// Empties `v` (its elements are dropped now) and keeps its block in `list`, unless it has
/// none or holds more than `max_capacity` elements, the list is full or the thread is
/// exiting.
pub fn keep_vec<T>(list: &'static LocalKey<VecList<T>>, mut v: Vec<T>, max_capacity: usize) {
    v.clear();
    if v.capacity() == 0 || v.capacity() > max_capacity {
        return;
    }
    let _ = list.try_with(move |l| {
        let mut l = l.borrow_mut();
        if l.len() < KEPT {
            l.push(v);
        }
    });
}

/// A SmallVec with room for `n`: inline when `n` fits there, else on a heap block from
/// `list` (a new one when the list has none). For a table that is inline for small requests
/// and spills for large ones; give it back with [`keep_small_vec`].
pub fn small_vec<A: smallvec::Array>(
    list: &'static LocalKey<VecList<A::Item>>,
    n: usize,
) -> smallvec::SmallVec<A> {
    if n <= A::size() {
        return smallvec::SmallVec::new();
    }
    let mut v = pop_vec(list);
    v.reserve(n);
    // A Vec with more room than the inline size lends its block as is.
    smallvec::SmallVec::from_vec(v)
}

/// Empties `v` (its elements are dropped now) and keeps its heap block in `list` when it has
/// one (see [`keep_vec`] for the bounds).
pub fn keep_small_vec<A: smallvec::Array>(
    list: &'static LocalKey<VecList<A::Item>>,
    v: smallvec::SmallVec<A>,
    max_capacity: usize,
) {
    if v.spilled() {
        keep_vec(list, v.into_vec(), max_capacity);
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

    thread_local! {
        static VECS: VecList<Vec<u8>> = const { RefCell::new(Vec::new()) };
    }

    #[test]
    fn a_kept_vec_is_emptied_at_once_and_its_block_reused() {
        let mut v = pop_vec(&VECS);
        v.push(vec![1u8; 10]);
        let block = v.as_ptr();
        keep_vec(&VECS, v, 4);
        let again = pop_vec(&VECS);
        assert_eq!((again.as_ptr(), again.len()), (block, 0));
        // Larger than the limit: freed, not kept.
        keep_vec(&VECS, Vec::with_capacity(8), 4);
        assert_eq!(pop_vec(&VECS).capacity(), 0);
    }

    #[test]
    fn a_spilled_small_vec_lends_and_returns_a_kept_block() {
        type Small = smallvec::SmallVec<[Vec<u8>; 2]>;
        // Fits inline: no block taken.
        let v: Small = small_vec(&VECS, 2);
        assert!(!v.spilled());
        keep_small_vec(&VECS, v, 16);
        assert_eq!(VECS.with(|l| l.borrow().len()), 0);
        // Spills: a block with room for all, which goes back to the list emptied.
        let mut v: Small = small_vec(&VECS, 5);
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
        keep_small_vec(&VECS, v, 16);
        let again: Small = small_vec(&VECS, 3);
        assert_eq!((again.as_ptr(), again.len()), (block, 0));
    }
}
