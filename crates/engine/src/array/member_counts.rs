//! What each slot's member did: reads, writes, their bytes, the I/O errors it returned
//! (`zpool status`'s READ and WRITE columns) and the read errors the array corrected by
//! rewriting the blocks from redundancy (md's per-device `errors`, with md's limit on how
//! many it corrects before it fails the member). Kept per thread ([`PerThread`]) as the
//! array's own counters are; zeroed when another member takes the slot.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

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
    corrected_errors: AtomicU64,
    repaired_bytes: AtomicU64,
}

/// md's `max_read_errors`: corrected read errors a member may have (halved for each hour
/// without one) before the next one fails it instead.
pub(crate) const MAX_READ_ERRORS: u32 = 20;

/// One slot's counters.
#[derive(Debug, Default)]
pub(super) struct MemberCounts {
    shards: PerThread<Shard>,
    /// The member's recent read errors as md counts them, and when the last one came.
    recent: Mutex<(u32, Option<Instant>)>,
}

/// md's decay of a member's read error count: halved for each whole hour since the last.
pub(crate) fn decayed(count: u32, hours: u64) -> u32 {
    if hours >= 32 {
        0
    } else {
        count >> hours
    }
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

    /// A write or flush the member failed.
    pub(super) fn failed_write(&self) {
        let (s, owned) = self.shards.mine();
        bump(&s.write_errors, 1, owned);
    }

    /// A read the member failed with `e`. Not a block that did not match its checksum tag
    /// (`EBADMSG`): the member's tags count those, each bad block once however often it
    /// is read before it is rewritten (`member::ChecksummedMember`).
    pub(super) fn failed_read(&self, e: &std::io::Error) {
        if e.raw_os_error() == Some(libc::EBADMSG) || crate::member::known_bad(e) {
            return;
        }
        let (s, owned) = self.shards.mine();
        bump(&s.read_errors, 1, owned);
    }

    /// A read error the array will try to correct, at `now`: the member's recent count
    /// with this one, decayed as md does. Above [`MAX_READ_ERRORS`] the member is failed.
    pub(super) fn note_read_error(&self, now: Instant) -> u32 {
        let mut r = self.recent.lock().expect(crate::POISONED);
        let hours =
            r.1.map_or(0, |t| now.saturating_duration_since(t).as_secs() / 3600);
        r.0 = decayed(r.0, hours).saturating_add(1);
        r.1 = Some(now);
        r.0
    }

    /// A read error corrected: `bytes` rewritten from redundancy and read back.
    pub(super) fn corrected(&self, bytes: u64) {
        let (s, owned) = self.shards.mine();
        bump(&s.corrected_errors, 1, owned);
        bump(&s.repaired_bytes, bytes, owned);
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
            checksum_errors: 0,
            corrected_errors: g(|s| &s.corrected_errors),
            repaired_bytes: g(|s| &s.repaired_bytes),
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
                &s.corrected_errors,
                &s.repaired_bytes,
            ] {
                c.store(0, Ordering::Relaxed);
            }
        }
        *self.recent.lock().expect(crate::POISONED) = (0, None);
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
        c.failed_read(&std::io::Error::from_raw_os_error(libc::EIO));
        c.failed_read(&std::io::Error::from_raw_os_error(libc::EBADMSG));
        c.corrected(4096);
        assert_eq!(
            c.status(),
            MemberIoStatus {
                reads: 1,
                writes: 2,
                read_bytes: 4096,
                written_bytes: 1024,
                read_errors: 1,
                write_errors: 0,
                checksum_errors: 0,
                corrected_errors: 1,
                repaired_bytes: 4096,
            }
        );
        let t = Instant::now();
        assert_eq!(c.note_read_error(t), 1);
        assert_eq!(c.note_read_error(t), 2);
        c.reset();
        assert_eq!(c.status(), MemberIoStatus::default());
        assert_eq!(c.note_read_error(t), 1, "a new member starts afresh");
    }

    #[test]
    fn read_errors_decay_as_md_counts_them() {
        assert_eq!(decayed(20, 0), 20);
        assert_eq!(decayed(20, 1), 10);
        assert_eq!(decayed(20, 4), 1);
        assert_eq!(decayed(u32::MAX, 31), 1);
        assert_eq!(decayed(u32::MAX, 32), 0);
        assert_eq!(decayed(u32::MAX, u64::MAX), 0);
        let c = MemberCounts::default();
        let t = Instant::now();
        for k in 1..=MAX_READ_ERRORS {
            assert_eq!(c.note_read_error(t), k);
        }
        let later = t + std::time::Duration::from_secs(2 * 3600 + 5);
        assert_eq!(c.note_read_error(later), MAX_READ_ERRORS / 4 + 1);
    }
}
