//! The write journal's place among the members (md's role 0xfffd, raid5-cache): an array
//! with md's JOURNAL feature holds one journal member beside its slots and spares. Every
//! write to such an array is logged there before it reaches the slots, so the array may
//! take writes only while its journal works: with the journal faulty or missing it is
//! read-only, as md makes it ("journal disk is missing, force array readonly").
//!
//! The journal's state moves by one pure table ([`JournalTransition::target`]), like the
//! slots' (`Transition` in slots.rs); `Slots` owns the journal slot and says what each
//! transition writes on disk.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, RwLock};

use serde::Serialize;

use crate::member::Member;

/// Health of the journal member of an array that has one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum JournalState {
    /// Takes every write before the slots do.
    Active,
    /// Failed while running: the array is read-only until a new journal is attached.
    Faulty,
    /// The array has the JOURNAL feature but no journal member: read-only likewise.
    Missing,
}

impl JournalState {
    fn from_u8(v: u8) -> JournalState {
        match v {
            0 => JournalState::Active,
            1 => JournalState::Faulty,
            _ => JournalState::Missing,
        }
    }

    /// Whether the array may take writes in this state.
    pub fn allows_writes(self) -> bool {
        self == JournalState::Active
    }
}

/// A change of the journal's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum JournalTransition {
    /// A member becomes the journal (md's `--add-journal`): of an array whose journal is
    /// missing, or in place of a faulty one, which is listed as failed until removed.
    Attach,
    /// An I/O error on the journal or the administrator: the array turns read-only.
    Fail,
    /// The failed journal leaves the array.
    Remove,
}

impl JournalTransition {
    #[cfg(test)]
    pub(crate) const ALL: [JournalTransition; 3] = [
        JournalTransition::Attach,
        JournalTransition::Fail,
        JournalTransition::Remove,
    ];

    /// The state a journal in `from` moves to, or `None` where the transition is not
    /// allowed from there.
    pub(crate) const fn target(self, from: JournalState) -> Option<JournalState> {
        use JournalState::*;
        match (self, from) {
            (JournalTransition::Attach, Missing | Faulty) => Some(Active),
            (JournalTransition::Fail, Active) => Some(Faulty),
            (JournalTransition::Remove, Faulty) => Some(Missing),
            _ => None,
        }
    }
}

/// Where the log lies on the journal member and where recovery left it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingPlace {
    /// Byte offset of the ring (the member's data offset).
    pub data_at: u64,
    /// Sectors in the ring: the data area, whole 4 KiB blocks.
    pub ring: u64,
    /// Where the next unit goes and its sequence number.
    pub head: u64,
    pub seq: u64,
    /// The superblock's `journal_tail`: where recovery would start.
    pub tail: u64,
}

/// What the journal slot is built from: the journal member, if one was found, and where
/// its log lies (`None` for a missing member).
#[derive(Clone, Debug)]
pub struct JournalParts {
    pub member: Option<Arc<dyn Member>>,
    pub place: Option<RingPlace>,
}

/// The journal member and its state.
#[derive(Debug)]
pub(super) struct JournalSlot {
    state: AtomicU8,
    member: RwLock<Option<Arc<dyn Member>>>,
}

impl JournalSlot {
    pub(super) fn new(parts: JournalParts) -> JournalSlot {
        let state = match parts.member {
            Some(_) => JournalState::Active,
            None => JournalState::Missing,
        };
        JournalSlot {
            state: AtomicU8::new(state as u8),
            member: RwLock::new(parts.member),
        }
    }

    pub(super) fn state(&self) -> JournalState {
        JournalState::from_u8(self.state.load(Ordering::Acquire))
    }

    pub(super) fn member(&self) -> Option<Arc<dyn Member>> {
        self.member.read().expect(crate::POISONED).clone()
    }

    /// Moves the journal by `t`, asserting the transition is allowed from where it is.
    fn apply(&self, t: JournalTransition) {
        let from = self.state();
        let Some(to) = t.target(from) else {
            panic!("journal: {t:?} is not allowed from {from:?}");
        };
        self.state.store(to as u8, Ordering::Release);
    }

    /// [`JournalTransition::Fail`] by compare and swap: any thread may fail a working
    /// journal, once; false when it was not working.
    pub(super) fn try_fail(&self) -> bool {
        let Some(to) = JournalTransition::Fail.target(JournalState::Active) else {
            unreachable!("Fail leaves Active")
        };
        self.state
            .compare_exchange(
                JournalState::Active as u8,
                to as u8,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
    }

    /// [`JournalTransition::Attach`]: `member` is the journal now; returns the failed one
    /// it takes the place of.
    pub(super) fn attach(&self, member: Arc<dyn Member>) -> Option<Arc<dyn Member>> {
        let mut slot = self.member.write().expect(crate::POISONED);
        let was = self.state();
        debug_assert_eq!(
            slot.is_some(),
            was == JournalState::Faulty,
            "a faulty journal holds its member, a missing one none"
        );
        self.apply(JournalTransition::Attach);
        slot.replace(member)
    }

    /// [`JournalTransition::Remove`]: the failed journal leaves; returns it.
    pub(super) fn remove(&self) -> Arc<dyn Member> {
        let mut slot = self.member.write().expect(crate::POISONED);
        self.apply(JournalTransition::Remove);
        slot.take()
            .expect("a faulty journal holds its member until removed")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATES: [JournalState; 3] = [
        JournalState::Active,
        JournalState::Faulty,
        JournalState::Missing,
    ];

    /// md's rules for the journal, every transition from every state.
    #[test]
    fn the_journal_table_is_md_s() {
        use JournalState::*;
        for t in JournalTransition::ALL {
            for from in STATES {
                let want = match t {
                    JournalTransition::Attach => (from != Active).then_some(Active),
                    JournalTransition::Fail => (from == Active).then_some(Faulty),
                    JournalTransition::Remove => (from == Faulty).then_some(Missing),
                };
                assert_eq!(t.target(from), want, "{t:?} from {from:?}");
            }
        }
    }

    /// Only an active journal lets the array write; every way out of Active ends where
    /// writes are refused until a journal is attached again.
    #[test]
    fn writes_need_an_active_journal() {
        for from in STATES {
            assert_eq!(from.allows_writes(), from == JournalState::Active);
            for t in JournalTransition::ALL {
                if let Some(to) = t.target(from) {
                    assert_eq!(to.allows_writes(), t == JournalTransition::Attach);
                }
            }
        }
    }

    #[test]
    fn state_round_trips_through_its_byte() {
        for s in STATES {
            assert_eq!(JournalState::from_u8(s as u8), s);
        }
    }
}
