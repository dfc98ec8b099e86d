//! What a read could not get from which members, where the member stays in its slot
//! to be corrected (`correct.rs`, which says how): the level paths note it here and steer
//! the rest of the read around those member sectors.

use std::sync::Arc;

use smallvec::SmallVec;

use super::slots::Slots;
use crate::member::Member;

/// Member sectors a slot's member could not read during one request.
#[derive(Clone, Debug)]
pub(crate) struct Misread {
    pub(crate) role: usize,
    /// The member that failed the read (the slot may hold another by the time it is
    /// corrected: then nothing is done).
    pub(crate) member: Option<Arc<dyn Member>>,
    pub(crate) sector: u64,
    pub(crate) sectors: u64,
}

/// What one read could not get from which members, and which slot it must not read at
/// all (a rebuild's target).
#[derive(Debug, Default)]
pub(crate) struct Misreads {
    avoid: Option<usize>,
    list: SmallVec<[Misread; 2]>,
}

impl Misreads {
    /// None yet, and slot `role` never read.
    pub(crate) fn avoiding(role: usize) -> Misreads {
        Misreads {
            avoid: Some(role),
            list: SmallVec::new(),
        }
    }

    /// Whether member sectors `sectors` of slot `role` are to be left alone for the rest of
    /// this read (they overlap what it could not read there, or the slot is not read).
    pub(crate) fn avoids(&self, role: usize, sectors: std::ops::Range<u64>) -> bool {
        self.avoid == Some(role)
            || self.list.iter().any(|m| {
                m.role == role && m.sector < sectors.end && sectors.start < m.sector + m.sectors
            })
    }

    /// Slot `role`'s member failed to read `sectors` member sectors at `sector`, and stays
    /// in its slot.
    pub(crate) fn push(&mut self, slots: &Slots, role: usize, sector: u64, sectors: u64) {
        assert!(sectors > 0, "an empty misread");
        self.list.push(Misread {
            role,
            member: slots.member(role),
            sector,
            sectors,
        });
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// What was noted, in order.
    pub(crate) fn into_list(self) -> SmallVec<[Misread; 2]> {
        self.list
    }
}

/// The reads of one batch that failed: each one's member and byte span on it, and
/// whether the member stayed in its slot.
#[derive(Debug, Default)]
pub(crate) struct FailedReads(SmallVec<[(MemberSpan, bool); 2]>);

/// A member I/O's slot, byte offset and length.
pub(crate) type MemberSpan = (usize, u64, u64);

impl FailedReads {
    pub(crate) fn note(&mut self, span: MemberSpan, kept: bool) {
        debug_assert!(span.2 > 0, "a failed read of nothing");
        self.0.push((span, kept));
    }

    /// Whether a failed read held bytes `at..at + len` of slot `role`'s member: `None`
    /// if none did, else whether its member stayed in its slot.
    pub(crate) fn of(&self, role: usize, at: u64, len: u64) -> Option<bool> {
        self.0
            .iter()
            .find(|((m, off, n), _)| *m == role && *off < at + len && at < off + n)
            .map(|(_, kept)| *kept)
    }
}
