//! What each slot's member did: reads, writes, their bytes, and the I/O errors it
//! returned (`zpool status`'s READ and WRITE columns). Kept per thread ([`PerThread`]) as
//! the array's own counters are; zeroed when another member takes the slot.

use std::sync::atomic::{AtomicU64, Ordering};

use raidd_rt::shard::{bump, sum, PerThread};

use super::report::MemberIoStatus;

#[derive(Debug, Default)]
#[repr(align(128))]
pub(super) struct Shard {
    reads: AtomicU64,
    writes: AtomicU64,
    read_bytes: AtomicU64,
    written_bytes: AtomicU64,
    read_errors: AtomicU64,
    write_errors: AtomicU64,
}

/// One slot's counters.
#[derive(Debug, Default)]
pub(super) struct MemberCounts {
    shards: PerThread<Shard>,
}

impl MemberCounts {
    /// One I/O of `bytes` issued to the member.
    pub(super) fn issued(&self, write: bool, bytes: u64) {
        debug_assert!(bytes.is_multiple_of(512), "member I/O is whole sectors");
        let (s, owned) = self.shards.mine();
        if write {
            bump(&s.writes, 1, owned);
            bump(&s.written_bytes, bytes, owned);
        } else {
            bump(&s.reads, 1, owned);
            bump(&s.read_bytes, bytes, owned);
        }
    }

    /// One I/O the member failed.
    pub(super) fn failed(&self, write: bool) {
        let (s, owned) = self.shards.mine();
        bump(
            if write {
                &s.write_errors
            } else {
                &s.read_errors
            },
            1,
            owned,
        );
    }

    pub(super) fn status(&self) -> MemberIoStatus {
        let g = |f: fn(&Shard) -> &AtomicU64| sum(&self.shards, f);
        MemberIoStatus {
            reads: g(|s| &s.reads),
            writes: g(|s| &s.writes),
            read_bytes: g(|s| &s.read_bytes),
            written_bytes: g(|s| &s.written_bytes),
            read_errors: g(|s| &s.read_errors),
            write_errors: g(|s| &s.write_errors),
        }
    }

    /// Zeroes the counts (a new member took the slot). A count added by another thread at
    /// the same moment may survive or be lost; none is torn.
    pub(super) fn reset(&self) {
        for s in self.shards.iter() {
            for c in [
                &s.reads,
                &s.writes,
                &s.read_bytes,
                &s.written_bytes,
                &s.read_errors,
                &s.write_errors,
            ] {
                c.store(0, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_resets() {
        let c = MemberCounts::default();
        c.issued(false, 4096);
        c.issued(true, 512);
        c.issued(true, 512);
        c.failed(false);
        assert_eq!(
            c.status(),
            MemberIoStatus {
                reads: 1,
                writes: 2,
                read_bytes: 4096,
                written_bytes: 1024,
                read_errors: 1,
                write_errors: 0,
            }
        );
        c.reset();
        assert_eq!(c.status(), MemberIoStatus::default());
    }
}
