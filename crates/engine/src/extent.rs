//! An extent: a byte range of an array that its users see as a disk of its own (a volume,
//! or the whole array). The frontends (NBD exports, iSCSI LUNs, the offline commands) do
//! their I/O through one, so an I/O is confined to its range here, below every protocol's
//! own checks: a client of one volume cannot reach a neighbour's sectors whatever it sends.

use std::sync::Arc;

use raidd_rt::{IoVec, IoVecMut, SharedBuf};

use crate::error::{Error, ErrorKind, Result};
use crate::Array;

/// A range of an array.
#[derive(Clone, Debug)]
pub struct Extent {
    array: Arc<Array>,
    /// Byte offset of the range in the array.
    offset: u64,
    size: u64,
    /// What names it to clients that want a unique identifier (SCSI's device ID): the
    /// array's UUID, or the volume's GUID.
    id: [u8; 16],
    /// The array's name, or `array/volume`.
    name: String,
}

impl Extent {
    /// The whole array.
    pub fn whole(array: Arc<Array>) -> Extent {
        let e = Extent {
            offset: 0,
            size: array.size_bytes(),
            id: array.uuid(),
            name: array.name().to_string(),
            array,
        };
        debug_assert!(e.is_whole());
        e
    }

    /// `size` bytes at `offset` of `array`, named `name` and identified by `id`. Both ends
    /// must fall on the array's blocks, inside it.
    pub fn part(
        array: Arc<Array>,
        offset: u64,
        size: u64,
        id: [u8; 16],
        name: String,
    ) -> Result<Extent> {
        let bs = u64::from(array.block_size());
        if !offset.is_multiple_of(bs) || !size.is_multiple_of(bs) || size == 0 {
            return Err(Error::new(
                ErrorKind::Unaligned,
                format!(
                    "{name}: {size} bytes at {offset} are not whole blocks of {bs} bytes of {}",
                    array.name()
                ),
            ));
        }
        if offset
            .checked_add(size)
            .is_none_or(|end| end > array.size_bytes())
        {
            return Err(Error::new(
                ErrorKind::OutOfRange,
                format!(
                    "{name}: {size} bytes at {offset} run past the end of {} ({} bytes)",
                    array.name(),
                    array.size_bytes()
                ),
            ));
        }
        debug_assert!(
            offset + size <= array.size_bytes() && size > 0,
            "inside the array"
        );
        Ok(Extent {
            array,
            offset,
            size,
            id,
            name,
        })
    }

    pub fn array(&self) -> &Arc<Array> {
        &self.array
    }

    /// Where the extent starts in the array.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    pub fn size_bytes(&self) -> u64 {
        self.size
    }

    pub fn block_size(&self) -> u32 {
        self.array.block_size()
    }

    pub fn id(&self) -> [u8; 16] {
        self.id
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn is_read_only(&self) -> bool {
        self.array.is_read_only()
    }

    /// Whether it is the whole array.
    pub fn is_whole(&self) -> bool {
        self.offset == 0 && self.size == self.array.size_bytes()
    }

    /// The array offset of `len` bytes at `offset` of the extent; an error when they do not
    /// fit in it (alignment is the array's to check). For callers that await the array's
    /// own future (a smaller state than this type's wrappers).
    pub fn array_offset(&self, offset: u64, len: u64) -> Result<u64> {
        if offset.checked_add(len).is_none_or(|end| end > self.size) {
            return Err(Error::new(
                ErrorKind::OutOfRange,
                format!(
                    "{}: I/O {offset}+{len} is beyond its end ({} bytes)",
                    self.name, self.size
                ),
            ));
        }
        let at = self.offset + offset;
        debug_assert!(
            at + len <= self.offset + self.size,
            "confined to the extent"
        );
        debug_assert!(
            at + len <= self.array.size_bytes(),
            "an extent lies in its array"
        );
        Ok(at)
    }

    /// [`Array::read`] within the extent.
    pub async fn read(&self, offset: u64, iov: IoVecMut) -> (Result<()>, IoVecMut) {
        let len = iov.iter().map(|w| w.len() as u64).sum();
        match self.array_offset(offset, len) {
            Ok(at) => self.array.read(at, iov).await,
            Err(e) => (Err(e), iov),
        }
    }

    /// [`Array::read_new`] within the extent.
    pub async fn read_new(&self, offset: u64, len: usize) -> Result<SharedBuf> {
        let at = self.array_offset(offset, len as u64)?;
        self.array.read_new(at, len).await
    }

    /// [`Array::write`] within the extent.
    pub async fn write(&self, offset: u64, iov: IoVec) -> Result<()> {
        let len = iov.iter().map(|w| w.len() as u64).sum();
        let at = self.array_offset(offset, len)?;
        self.array.write(at, iov).await
    }

    /// Makes every acknowledged write durable (the whole array's members are flushed: a
    /// member's cache knows no ranges).
    pub async fn flush(&self) -> Result<()> {
        self.array.flush().await
    }

    /// [`Array::flush_range`] within the extent.
    pub async fn flush_range(&self, offset: u64, len: u64) -> Result<()> {
        let at = self.array_offset(offset, len)?;
        self.array.flush_range(at, len).await
    }

    /// [`Array::discard`] within the extent.
    pub async fn discard(&self, offset: u64, len: u64) -> Result<()> {
        let at = self.array_offset(offset, len)?;
        self.array.discard(at, len).await
    }
}
