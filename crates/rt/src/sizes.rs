//! Sizes the buffers, the arena and the I/O paths agree on: the alignment of every buffer,
//! the pooled size classes, and the kernel's limit on iovecs per request.

/// Alignment of every buffer: the page size, which covers any device's logical block size.
pub const ALIGN: usize = 4096;

/// The smallest pooled buffer is one `ALIGN` block: 2^12 bytes.
pub(crate) const MIN_SHIFT: u32 = ALIGN.trailing_zeros();
/// Largest pooled buffer: 64 MiB (a maximal request plus room).
pub(crate) const MAX_SHIFT: u32 = 26;
/// Size classes of pooled buffers (4 KiB to 64 MiB), one per power of two.
pub(crate) const POOL_CLASSES: usize = (MAX_SHIFT - MIN_SHIFT + 1) as usize;

/// The kernel's limit on iovecs per request (UIO_MAXIOV).
pub const IOV_MAX: usize = 1024;

const _: () = assert!(ALIGN.is_power_of_two() && MIN_SHIFT < MAX_SHIFT);
