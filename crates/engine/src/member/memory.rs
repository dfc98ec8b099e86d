//! A member in memory: for tests, simulations and benchmarks of the engine without disks.
//! Sharded locks keep concurrent I/O to different regions from serialising.

use std::fmt;
use std::io;
use std::sync::{Mutex, MutexGuard};

use raidd_rt::{IoVec, IoVecMut};

use super::{assert_request, Member, MemberFuture, MemberInfo};

/// Bytes per lock shard.
const SHARD_BYTES: u64 = 1 << 20;

pub struct MemMember {
    info: MemberInfo,
    shards: Vec<Mutex<Vec<u8>>>,
}

impl fmt::Debug for MemMember {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemMember")
            .field("info", &self.info)
            .finish()
    }
}

impl MemMember {
    /// A zero-filled member of `size_bytes` (a multiple of 512).
    pub fn new(name: impl Into<String>, size_bytes: u64) -> MemMember {
        assert!(
            size_bytes.is_multiple_of(512),
            "memory member size must be a multiple of 512"
        );
        let shards = (0..size_bytes.div_ceil(SHARD_BYTES))
            .map(|i| {
                let len = (size_bytes - i * SHARD_BYTES).min(SHARD_BYTES);
                Mutex::new(vec![0u8; len as usize])
            })
            .collect();
        MemMember {
            info: MemberInfo {
                name: name.into(),
                size_bytes,
                block_size: 512,
                rotational: false,
            },
            shards,
        }
    }

    fn shard(&self, i: usize) -> MutexGuard<'_, Vec<u8>> {
        self.shards[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Calls `f(member_offset, bytes)` for each shard-bounded piece of `[offset, offset+len)`.
    fn for_each_piece(&self, offset: u64, len: u64, mut f: impl FnMut(u64, &mut [u8])) {
        let mut pos = offset;
        let end = offset + len;
        while pos < end {
            let i = (pos / SHARD_BYTES) as usize;
            let within = (pos % SHARD_BYTES) as usize;
            let n = ((SHARD_BYTES - pos % SHARD_BYTES).min(end - pos)) as usize;
            let mut shard = self.shard(i);
            f(pos - offset, &mut shard[within..within + n]);
            pos += n as u64;
        }
    }

    /// Copies bytes out synchronously (tests inspect members directly).
    pub fn read_sync(&self, offset: u64, out: &mut [u8]) {
        self.for_each_piece(offset, out.len() as u64, |rel, bytes| {
            let rel = rel as usize;
            out[rel..rel + bytes.len()].copy_from_slice(bytes);
        });
    }

    /// Writes bytes synchronously (tests corrupt members directly).
    pub fn write_sync(&self, offset: u64, data: &[u8]) {
        self.for_each_piece(offset, data.len() as u64, |rel, bytes| {
            let rel = rel as usize;
            bytes.copy_from_slice(&data[rel..rel + bytes.len()]);
        });
    }
}

impl Member for MemMember {
    fn info(&self) -> &MemberInfo {
        &self.info
    }

    fn read(&self, offset: u64, mut iov: IoVecMut) -> MemberFuture<'_, (io::Result<()>, IoVecMut)> {
        let total: u64 = iov.iter().map(|w| w.len() as u64).sum();
        assert_request(&self.info, offset, total);
        let mut pos = offset;
        for w in iov.iter_mut() {
            let out = w.as_mut_slice();
            self.read_sync(pos, out);
            pos += out.len() as u64;
        }
        MemberFuture::new(std::future::ready((Ok(()), iov)))
    }

    fn write(&self, offset: u64, iov: IoVec) -> MemberFuture<'_, io::Result<()>> {
        let total: u64 = iov.iter().map(|w| w.len() as u64).sum();
        assert_request(&self.info, offset, total);
        let mut pos = offset;
        for w in iov.iter() {
            self.write_sync(pos, w.as_slice());
            pos += w.len() as u64;
        }
        MemberFuture::new(std::future::ready(Ok(())))
    }

    fn flush(&self) -> MemberFuture<'_, io::Result<()>> {
        MemberFuture::new(std::future::ready(Ok(())))
    }

    fn discard(&self, offset: u64, len: u64) -> MemberFuture<'_, io::Result<()>> {
        assert_request(&self.info, offset, len);
        self.for_each_piece(offset, len, |_, bytes| bytes.fill(0));
        MemberFuture::new(std::future::ready(Ok(())))
    }
}
