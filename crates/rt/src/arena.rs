//! Buffer memory registered with every thread's ring, so member reads and writes into it
//! go out as io_uring's fixed-buffer operations.
//!
//! An O_DIRECT transfer pins the pages of its buffer for the device; the kernel does that for
//! every operation unless the memory was registered with the ring beforehand, in which case
//! the pages are pinned once. fio measured the difference on this project's member files:
//! about 10% of the CPU per 4 KiB read or write (docs/BENCHMARKS.md). The kernel accepts a
//! fixed operation only on memory registered with *that* ring, and a buffer may be received
//! on one thread and written to a member on another, so the memory is one region for the
//! whole process, registered with each ring as buffer 0 when the ring is made.
//!
//! [`AlignedBuf`](crate::AlignedBuf) takes its memory from here when the thread's own pool
//! has none: power-of-two blocks carved from the region, kept by the per-thread pool when
//! freed (at most half the region per thread) and otherwise on a free list per size for
//! any thread. When the region is
//! used up, buffers come from the heap as before and their I/O is not fixed; nothing fails.
//! The region is off unless the process asks for it ([`crate::register_arena`]): its pages
//! are pinned the moment it is registered.

use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use crate::sizes::{ALIGN, POOL_CLASSES};

/// The kernel's limit on one registered buffer.
pub const MAX_ARENA: usize = 1 << 30;

static ARENA: OnceLock<Arena> = OnceLock::new();

/// The registered region: `len` bytes at `base`, carved upwards from `next`.
pub(crate) struct Arena {
    base: usize,
    len: usize,
    next: AtomicUsize,
    /// Freed blocks by size class (see `buf::pool`), for any thread.
    free: Vec<Mutex<Vec<usize>>>,
}

/// A new anonymous private mapping of `len` bytes (non-zero): page-aligned, reading as
/// zeros, resident only where written. The caller unmaps it, or keeps it for good.
pub(crate) fn map_anonymous(len: usize) -> io::Result<NonNull<u8>> {
    debug_assert!(len > 0, "a mapping of some bytes");
    // SAFETY: an anonymous private mapping at an address the kernel picks aliases nothing;
    // the result is checked.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(NonNull::new(p.cast::<u8>()).expect("mmap returns no null mapping"))
}

/// Sets aside `bytes` (rounded up to whole pages, at most [`MAX_ARENA`]) of buffer memory
/// that every ring made from now on registers as a fixed buffer. Once per process; threads
/// whose runtime started earlier keep using plain operations.
pub fn register_arena(bytes: usize) -> io::Result<()> {
    if bytes == 0 || bytes > MAX_ARENA {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("registered buffer memory must be 4 KiB to 1 GiB, not {bytes} bytes"),
        ));
    }
    let len = bytes.next_multiple_of(ALIGN);
    if let Some(a) = ARENA.get() {
        return if a.len == len {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("registered buffer memory is already {} bytes", a.len),
            ))
        };
    }
    // Never unmapped: buffers carved from it may live until the process ends.
    let p = map_anonymous(len)?.as_ptr().cast::<libc::c_void>();
    // A child process (the monitor's event program) never needs these buffers, and the
    // kernel would otherwise copy every pinned page into it at fork.
    // SAFETY: advice on the mapping just made; failure only loses the optimisation.
    unsafe { libc::madvise(p, len, libc::MADV_DONTFORK) };
    let arena = Arena {
        base: p as usize,
        len,
        next: AtomicUsize::new(0),
        free: (0..POOL_CLASSES).map(|_| Mutex::new(Vec::new())).collect(),
    };
    if let Err(lost) = ARENA.set(arena) {
        // Another thread set it first: give this mapping back.
        // SAFETY: nothing was carved from it.
        unsafe { libc::munmap(lost.base as *mut libc::c_void, lost.len) };
        return register_arena(bytes);
    }
    Ok(())
}

/// The registered region, if the process asked for one.
pub(crate) fn get() -> Option<&'static Arena> {
    ARENA.get()
}

impl Arena {
    /// The region as the iovec the kernel registers.
    pub fn iovec(&self) -> libc::iovec {
        libc::iovec {
            iov_base: self.base as *mut libc::c_void,
            iov_len: self.len,
        }
    }

    /// The region's size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether `len` bytes at `ptr` lie inside the region.
    pub fn contains(&self, ptr: *const u8, len: usize) -> bool {
        let p = ptr as usize;
        p >= self.base && p.saturating_add(len) <= self.base + self.len
    }

    /// A block of `cap` bytes (a pool class size) and whether it held data before (a fresh
    /// block is zero, as the mapping was); None when the region is used up.
    pub fn alloc(&self, class: usize, cap: usize) -> Option<(NonNull<u8>, bool)> {
        debug_assert!(cap.is_power_of_two() && cap >= ALIGN, "a pool class's size");
        let reused = self.free[class].lock().expect(crate::POISONED).pop();
        if let Some(p) = reused {
            debug_assert!(
                self.contains(p as *const u8, cap),
                "a freed block is the arena's"
            );
            return Some((NonNull::new(p as *mut u8)?, true));
        }
        let at = self
            .next
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                n.checked_add(cap).filter(|&end| end <= self.len)
            })
            .ok()?;
        debug_assert!(
            at % ALIGN == 0 && at + cap <= self.len,
            "blocks are carved aligned"
        );
        NonNull::new((self.base + at) as *mut u8).map(|p| (p, false))
    }

    /// Takes back a block [`Arena::alloc`] gave out.
    pub fn free(&self, class: usize, ptr: NonNull<u8>) {
        debug_assert!(self.contains(ptr.as_ptr(), ALIGN));
        self.free[class]
            .lock()
            .expect(crate::POISONED)
            .push(ptr.as_ptr() as usize);
    }
}
