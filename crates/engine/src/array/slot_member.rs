//! A slot's member, as every member I/O takes it: from a copy of the reference that belongs
//! to the calling thread. One lock and one reference count shared by all threads would be
//! two cache lines that every core writes on every member I/O (a reader writes the lock
//! word, a clone writes the count), which limits how far reads scale with cores
//! (BENCHMARKS.md, "Scaling to 16 cores").
//!
//! Each thread's shard ([`PerThread`]) holds its own lock and its own `Arc` of the member
//! reference, alone on its lines; a change of member (add, replace, removal of a failed one)
//! takes every shard's lock at once, so a reader holding its shard's lock keeps the member
//! from changing, as with one lock.

use std::io;
use std::ops::Deref;
use std::sync::{Arc, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};

use raidd_rt::{IoVec, IoVecMut};

use super::counters::{Padded, PerThread};
use crate::member::{Member, MemberFuture, MemberInfo};

/// A thread's reference to a slot's member, for the length of a member I/O: a clone counts on
/// the thread's own line. Derefs to the member's `Arc`.
#[derive(Clone)]
pub(super) struct MemberRef(Arc<Held>);

/// What a shard's `Arc` points to, aligned so that its reference counts (at the start of
/// the allocation) are alone on their lines.
#[repr(align(128))]
struct Held(Arc<dyn Member>);

/// What an I/O planned to a slot gets when the slot was emptied before the I/O took its
/// member: the administrator removed a member that failed meanwhile (from another thread,
/// or during the await between a pass's plan and its reads). Every operation fails, as the
/// removed member's own would have, and the caller handles it as a member I/O error: a
/// failure of a member no longer in the slot is stale and changes nothing.
#[derive(Debug)]
struct Removed(MemberInfo);

impl Removed {
    fn error() -> io::Error {
        io::Error::new(
            io::ErrorKind::NotConnected,
            "the member was removed from its slot",
        )
    }
}

impl Member for Removed {
    fn info(&self) -> &MemberInfo {
        &self.0
    }
    fn read(&self, _: u64, iov: IoVecMut) -> MemberFuture<'_, (io::Result<()>, IoVecMut)> {
        MemberFuture::new(std::future::ready((Err(Self::error()), iov)))
    }
    fn write(&self, _: u64, iov: IoVec) -> MemberFuture<'_, io::Result<()>> {
        raidd_rt::buf::give_iov(iov);
        MemberFuture::new(std::future::ready(Err(Self::error())))
    }
    fn flush(&self) -> MemberFuture<'_, io::Result<()>> {
        MemberFuture::new(std::future::ready(Err(Self::error())))
    }
    fn discard(&self, _: u64, _: u64) -> MemberFuture<'_, io::Result<()>> {
        MemberFuture::new(std::future::ready(Err(Self::error())))
    }
}

/// The one [`Removed`] stand-in.
pub(super) fn removed() -> MemberRef {
    static GONE: OnceLock<MemberRef> = OnceLock::new();
    GONE.get_or_init(|| {
        let info = MemberInfo {
            name: "(removed)".into(),
            size_bytes: u64::MAX,
            block_size: 512,
            rotational: false,
            max_transfer: None,
        };
        MemberRef(Arc::new(Held(Arc::new(Removed(info)))))
    })
    .clone()
}

impl Deref for MemberRef {
    type Target = Arc<dyn Member>;
    fn deref(&self) -> &Arc<dyn Member> {
        &self.0 .0
    }
}

impl std::fmt::Debug for MemberRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("MemberRef")
            .field(&self.0 .0.info().name)
            .finish()
    }
}

/// The member of one slot (or none).
pub(super) struct SlotMember {
    shards: PerThread<Padded<RwLock<Option<MemberRef>>>>,
}

impl std::fmt::Debug for SlotMember {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("SlotMember").field(&*self.read()).finish()
    }
}

fn held(member: &Option<Arc<dyn Member>>) -> Option<MemberRef> {
    member
        .as_ref()
        .map(|m| MemberRef(Arc::new(Held(m.clone()))))
}

impl SlotMember {
    pub(super) fn new(member: Option<Arc<dyn Member>>) -> SlotMember {
        SlotMember {
            shards: PerThread::from_fn(|| Padded(RwLock::new(held(&member)))),
        }
    }

    /// The member, through this thread's shard.
    pub(super) fn get(&self) -> Option<MemberRef> {
        self.read().clone()
    }

    /// This thread's shard, locked for reading: while it is held, the member cannot change.
    pub(super) fn read(&self) -> RwLockReadGuard<'_, Option<MemberRef>> {
        self.shards.mine().0.read().expect(crate::POISONED)
    }

    /// Puts `member` in the slot; returns the one it held.
    pub(super) fn replace(&self, member: Option<Arc<dyn Member>>) -> Option<Arc<dyn Member>> {
        // Every shard is locked before any changes, so no reader sees the new member on one
        // shard and then the old one on another. Readers lock one shard only: no deadlock.
        let mut locked: Vec<RwLockWriteGuard<'_, Option<MemberRef>>> = self
            .shards
            .iter()
            .map(|s| s.write().expect(crate::POISONED))
            .collect();
        let old = locked[0].as_ref().map(|r| Arc::clone(r));
        for shard in &mut locked {
            debug_assert!(
                shard.as_ref().map(|r| Arc::as_ptr(r) as *const ())
                    == old.as_ref().map(|o| Arc::as_ptr(o) as *const ()),
                "a slot's shards hold different members"
            );
            **shard = held(&member);
        }
        old
    }

    /// Empties the slot; returns the member it held.
    pub(super) fn take(&self) -> Option<Arc<dyn Member>> {
        self.replace(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::member::MemMember;

    fn mem(name: &str) -> Arc<dyn Member> {
        Arc::new(MemMember::new(name, 4096))
    }

    fn name(r: &Option<MemberRef>) -> Option<String> {
        r.as_ref().map(|m| m.info().name.clone())
    }

    #[test]
    fn every_thread_sees_the_member_put_in_the_slot() {
        let slot = Arc::new(SlotMember::new(Some(mem("a"))));
        assert_eq!(name(&slot.get()).as_deref(), Some("a"));
        let old = slot.replace(Some(mem("b")));
        assert_eq!(old.map(|m| m.info().name.clone()).as_deref(), Some("a"));
        let seen: Vec<Option<String>> = (0..8)
            .map(|_| {
                let slot = slot.clone();
                std::thread::spawn(move || name(&slot.get()))
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().expect("reader thread"))
            .collect();
        assert!(seen.iter().all(|s| s.as_deref() == Some("b")), "{seen:?}");
        assert_eq!(
            slot.take().map(|m| m.info().name.clone()).as_deref(),
            Some("b")
        );
        assert!(slot.get().is_none());
    }

    #[test]
    fn a_reference_keeps_its_member_after_the_slot_changes() {
        let a = mem("a");
        let slot = SlotMember::new(Some(a.clone()));
        let r = slot.get().expect("a member");
        slot.replace(Some(mem("b")));
        assert!(Arc::ptr_eq(&r, &a));
        // The slot, every shard, and `r` let go: only `a` and `r` hold it now.
        assert_eq!(Arc::strong_count(&a), 2);
        drop(r);
        assert_eq!(Arc::strong_count(&a), 1);
    }

    #[test]
    fn a_held_read_lock_keeps_the_member_from_changing() {
        let slot = Arc::new(SlotMember::new(Some(mem("a"))));
        let (tx, rx) = std::sync::mpsc::channel();
        let guard = slot.read();
        let writer = {
            let slot = slot.clone();
            std::thread::spawn(move || {
                slot.replace(Some(mem("b")));
                tx.send(()).expect("send");
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(
            rx.try_recv().is_err(),
            "replaced while a reader held its shard"
        );
        assert_eq!(name(&guard).as_deref(), Some("a"));
        drop(guard);
        rx.recv().expect("replace finished");
        writer.join().expect("writer thread");
        assert_eq!(name(&slot.get()).as_deref(), Some("b"));
    }

    #[test]
    fn shards_keep_their_counts_on_lines_of_their_own() {
        let slot = SlotMember::new(Some(mem("a")));
        let addrs: Vec<usize> = slot
            .shards
            .iter()
            .map(|s| {
                let r = s.read().expect("lock");
                Arc::as_ptr(&r.as_ref().expect("member").0) as usize
            })
            .collect();
        // The allocations are 128-aligned, so their counts start lines of their own.
        assert!(addrs.iter().all(|a| a % 128 == 0), "{addrs:x?}");
        let mut sorted = addrs.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), addrs.len(), "shards share an allocation");
    }
}
