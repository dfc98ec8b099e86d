//! Boxed futures whose memory is recycled per thread.
//!
//! A trait object future (a member's read or write, a spawned task) needs a heap block per
//! call. Every request makes such calls, so their blocks come from small per-thread free lists, one per
//! size class, instead of the allocator: after warm-up a request allocates nothing for them.
//! A future is created, polled and dropped on one thread (`PooledFuture` is neither `Send`
//! nor `Sync`), so the lists need no lock; a block freed on a thread goes to that thread's
//! list. Futures bigger than the largest class, or aligned more than [`BLOCK_ALIGN`], are
//! boxed as usual.

use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::ptr::NonNull;
use std::task::{Context, Poll};

/// Block sizes of the classes. The larger ones hold tasks (a request's whole state: a RAID5
/// write through NBD is about 5 KiB).
const CLASSES: [usize; 8] = [64, 128, 256, 512, 1024, 2048, 4096, 8192];
/// Alignment of every block.
pub const BLOCK_ALIGN: usize = 16;
/// Free blocks kept per class and thread (more are returned to the allocator).
const KEEP: usize = 512;

fn class_layout(class: usize) -> Layout {
    Layout::from_size_align(CLASSES[class], BLOCK_ALIGN).expect("valid class layout")
}

/// The class that holds `layout`, if any.
fn class_of(layout: Layout) -> Option<usize> {
    if layout.size() == 0 || layout.align() > BLOCK_ALIGN {
        return None;
    }
    let class = CLASSES.iter().position(|&c| layout.size() <= c);
    debug_assert!(
        class.is_none_or(|c| CLASSES[c] >= layout.size()),
        "a class holds it"
    );
    class
}

#[derive(Default)]
struct Pool {
    free: [Vec<NonNull<u8>>; CLASSES.len()],
}

impl Drop for Pool {
    fn drop(&mut self) {
        for (class, list) in self.free.iter_mut().enumerate() {
            for p in list.drain(..) {
                // SAFETY: every block in the list was allocated with this class's layout
                // (`take`) and is owned by the list alone.
                unsafe { dealloc(p.as_ptr(), class_layout(class)) };
            }
        }
    }
}

thread_local! {
    static POOL: RefCell<Pool> = RefCell::default();
}

/// A block of `class`, from this thread's list or the allocator.
fn take(class: usize) -> NonNull<u8> {
    let reused = POOL
        .try_with(|p| p.borrow_mut().free[class].pop())
        .ok()
        .flatten();
    reused.unwrap_or_else(|| {
        let layout = class_layout(class);
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { alloc(layout) };
        NonNull::new(p).unwrap_or_else(|| handle_alloc_error(layout))
    })
}

/// Returns a block of `class` to this thread's list (or to the allocator when the list is
/// full or the thread is exiting).
///
/// # Safety
/// `p` was returned by `take(class)` and nothing uses it any more.
unsafe fn give(class: usize, p: NonNull<u8>) {
    let kept = POOL
        .try_with(|pool| {
            let mut pool = pool.borrow_mut();
            let list = &mut pool.free[class];
            debug_assert!(list.len() <= KEEP, "a free list is bounded");
            if list.len() < KEEP {
                list.push(p);
                true
            } else {
                false
            }
        })
        .unwrap_or(false);
    if !kept {
        // SAFETY: allocated with this layout (`take`), and the caller gives it up.
        unsafe { dealloc(p.as_ptr(), class_layout(class)) };
    }
}

/// A boxed, pinned future of output `T` whose block comes from the thread's pool: a drop-in
/// for `LocalBoxFuture` on the data path.
///
/// As small as a `Box<dyn Future>` (a future's state holds these inline): the block's class
/// is not stored but found again from the future's size and alignment, which the vtable
/// gives.
pub struct PooledFuture<'a, T> {
    fut: NonNull<dyn Future<Output = T> + 'a>,
}

impl<'a, T> PooledFuture<'a, T> {
    pub fn new<F: Future<Output = T> + 'a>(f: F) -> Self {
        let Some(class) = class_of(Layout::new::<F>()) else {
            let b: Box<dyn Future<Output = T> + 'a> = Box::new(f);
            return PooledFuture {
                fut: NonNull::from(Box::leak(b)),
            };
        };
        let p = take(class).cast::<F>();
        debug_assert_eq!(p.as_ptr() as usize % BLOCK_ALIGN, 0, "blocks are aligned");
        // SAFETY: the block is CLASSES[class] >= size_of::<F>() bytes, aligned to
        // BLOCK_ALIGN >= align_of::<F>() (`class_of`), uninitialised and ours alone.
        unsafe { p.as_ptr().write(f) };
        let fut: NonNull<dyn Future<Output = T> + 'a> = p;
        PooledFuture { fut }
    }
}

impl<T> PooledFuture<'_, T> {
    /// The block's class: where `new` put a future of this size and alignment.
    fn class(&self) -> Option<usize> {
        // SAFETY: the future is alive at `fut` until `drop` (which calls this first).
        class_of(Layout::for_value(unsafe { self.fut.as_ref() }))
    }

    /// Whether the block came from the pool (false: too big or over-aligned, a plain box).
    pub fn is_pooled(&self) -> bool {
        self.class().is_some()
    }
}

impl<T> Future for PooledFuture<'_, T> {
    type Output = T;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        // SAFETY: the future lives at `fut` from `new` until `drop`, is reached only through
        // this handle, and never moves (moving the handle moves the pointer, not the block):
        // it stays pinned as in a `Pin<Box<_>>`.
        unsafe { Pin::new_unchecked(&mut *self.fut.as_ptr()) }.poll(cx)
    }
}

impl<T> Drop for PooledFuture<'_, T> {
    fn drop(&mut self) {
        match self.class() {
            // SAFETY: `fut` came from `Box::leak` in `new` and is dropped once, here.
            None => drop(unsafe { Box::from_raw(self.fut.as_ptr()) }),
            Some(class) => {
                // SAFETY: the future was written at `fut` in `new` and is dropped once,
                // here; then its block is free and goes back to the pool it came from.
                unsafe {
                    std::ptr::drop_in_place(self.fut.as_ptr());
                    give(class, self.fut.cast::<u8>());
                }
            }
        }
    }
}

impl<T> std::fmt::Debug for PooledFuture<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PooledFuture")
            .field("class", &self.class())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::rc::Rc;

    /// Counts its drops; pending for `pending` polls, then ready with its id.
    struct Probe {
        id: u32,
        pending: u32,
        drops: Rc<Cell<u32>>,
        _pad: [u8; 40],
    }

    impl Future for Probe {
        type Output = u32;
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<u32> {
            if self.pending == 0 {
                Poll::Ready(self.id)
            } else {
                self.pending -= 1;
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        }
    }

    impl Drop for Probe {
        fn drop(&mut self) {
            self.drops.set(self.drops.get() + 1);
        }
    }

    fn free_blocks(class: usize) -> usize {
        POOL.with(|p| p.borrow().free[class].len())
    }

    #[test]
    fn a_pooled_future_runs_drops_once_and_its_block_is_reused() {
        let drops = Rc::new(Cell::new(0));
        let class = class_of(Layout::new::<Probe>()).unwrap();
        let before = free_blocks(class);
        let mut f = PooledFuture::new(Probe {
            id: 7,
            pending: 2,
            drops: drops.clone(),
            _pad: [0; 40],
        });
        let addr = f.fut.cast::<u8>();
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(Pin::new(&mut f).poll(&mut cx).is_pending());
        assert!(Pin::new(&mut f).poll(&mut cx).is_pending());
        assert_eq!(Pin::new(&mut f).poll(&mut cx), Poll::Ready(7));
        drop(f);
        assert_eq!(drops.get(), 1);
        assert_eq!(free_blocks(class), before + 1, "the block went back");
        // The next future of the class takes the same block.
        let g = PooledFuture::new(Probe {
            id: 8,
            pending: 0,
            drops: drops.clone(),
            _pad: [0; 40],
        });
        assert_eq!(g.fut.cast::<u8>(), addr);
        assert_eq!(crate::block_on(g), 8);
        assert_eq!(drops.get(), 2);
    }

    #[test]
    fn a_future_dropped_unpolled_is_dropped_too() {
        let drops = Rc::new(Cell::new(0));
        drop(PooledFuture::new(Probe {
            id: 1,
            pending: 5,
            drops: drops.clone(),
            _pad: [0; 40],
        }));
        assert_eq!(drops.get(), 1);
    }

    #[test]
    fn big_overaligned_and_empty_futures_are_boxed() {
        #[repr(align(64))]
        struct Aligned(u8);
        impl Future for Aligned {
            type Output = u8;
            fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<u8> {
                Poll::Ready(self.0)
            }
        }
        let big = [3u8; 16384];
        let f = PooledFuture::new(async move { big.iter().map(|&b| u32::from(b)).sum::<u32>() });
        assert_eq!(f.class(), None);
        assert_eq!(crate::block_on(f), 3 * 16384);
        let a = PooledFuture::new(Aligned(9));
        assert_eq!(a.class(), None);
        assert_eq!(a.fut.cast::<u8>().as_ptr() as usize % 64, 0);
        assert_eq!(crate::block_on(a), 9);
        struct Empty;
        impl Future for Empty {
            type Output = ();
            fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
                Poll::Ready(())
            }
        }
        let e = PooledFuture::new(Empty);
        assert_eq!(e.class(), None);
        crate::block_on(e);
    }

    #[test]
    fn each_class_holds_what_it_claims() {
        for (class, &size) in CLASSES.iter().enumerate() {
            assert_eq!(
                class_of(Layout::from_size_align(size, 8).unwrap()),
                Some(class)
            );
            let over = class_of(Layout::from_size_align(size + 1, 8).unwrap());
            assert_eq!(over, (class + 1 < CLASSES.len()).then_some(class + 1));
        }
        // A block of every class is fully writable (ASan checks the bounds).
        for (class, &size) in CLASSES.iter().enumerate() {
            let p = take(class);
            // SAFETY: a fresh block of `size` bytes, ours alone.
            unsafe {
                std::ptr::write_bytes(p.as_ptr(), 0xa5, size);
                give(class, p);
            }
        }
    }

    #[test]
    fn the_free_lists_are_bounded() {
        let class = 0;
        let blocks: Vec<_> = (0..KEEP + 10).map(|_| take(class)).collect();
        for p in blocks {
            // SAFETY: each came from `take(class)` and is unused.
            unsafe { give(class, p) };
        }
        assert_eq!(free_blocks(class), KEEP);
    }
}
