//! What an array lends its parts: member I/O's [`Owner`] (the slots, the name, failing a
//! member) and the level paths' [`Host`] (the shape in hand, the read policy, the array's
//! health and counters). Neither part sees anything else of the array.

use std::io;
use std::sync::Arc;

use futures::future::LocalBoxFuture;
use raidd_layout::{Loc, ParityGeometry, Piece};

use super::counters::Counters;
use super::host::Host;
use super::journal::{Journal, JournalHost};
use super::member_io::Owner;
use super::misread::Misreads;
use super::ppl::Ppl;
use super::slots::Failed;
use super::slots::Slots;
use super::write_back::WriteBackHost;
use super::{lost, lost_windows, rotation, Array, MetaWrite};
use crate::error::{Error, ErrorKind, Result};
use crate::member::Member;

impl Owner for Array {
    fn slots(&self) -> &Slots {
        Array::slots(self)
    }

    fn name(&self) -> &str {
        Array::name(self)
    }

    fn fail_member_io<'a>(
        &'a self,
        role: usize,
        member: &'a Arc<dyn Member>,
        why: &'a io::Error,
    ) -> LocalBoxFuture<'a, ()> {
        Box::pin(self.fail_slot_with(role, Some(member), why))
    }

    fn keeps_after_read_error(&self, role: usize, why: &io::Error) -> bool {
        // Correcting writes the member: never on an array that must not be written, nor
        // where no other member holds what it could not read.
        if self.is_read_only()
            || self.geometry().redundancy() == 0
            || !crate::member::medium_error(why)
        {
            return false;
        }
        if crate::member::known_bad(why) {
            return true; // counted when it was found
        }
        let n = self
            .slots()
            .io(role)
            .note_read_error(std::time::Instant::now());
        if n > super::member_counts::MAX_READ_ERRORS {
            tracing::error!(array = %self.name(), role,
                "too many read errors ({n} recent, the limit is {}): failing the member",
                super::member_counts::MAX_READ_ERRORS);
            return false;
        }
        true
    }
}

impl JournalHost for Array {
    fn flush_slots(&self) -> LocalBoxFuture<'_, ()> {
        Box::pin(async {
            // A slot whose flush fails is failed by it; the array going down is the
            // writes' error, not the reclaim's.
            let _ = self.flush_members(|_| true).await;
        })
    }

    fn journal_tail(&self, tail: u64) -> LocalBoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let Some(meta) = &self.meta else {
                return Ok(()); // an array without md metadata keeps no tail
            };
            match meta.set_journal_tail(tail).await {
                Ok(failed) => {
                    self.superblocks_failed(failed, MetaWrite::Superblock).await;
                    Ok(())
                }
                Err(e) => {
                    if let Some(m) = self.slots().journal_member() {
                        self.fail_journal(&m, &e).await;
                    }
                    Err(Error::new(
                        ErrorKind::ReadOnly,
                        format!(
                            "{}: the write journal's tail could not be recorded: {e}",
                            self.name()
                        ),
                    ))
                }
            }
        })
    }

    fn fail_journal<'a>(
        &'a self,
        member: &'a Arc<dyn Member>,
        why: &'a io::Error,
    ) -> LocalBoxFuture<'a, ()> {
        Box::pin(async move {
            if self.slots().fail_journal(member) != Failed::Marked {
                return;
            }
            tracing::error!(array = %self.name(), member = %member.info().name,
                "write journal failed: {why}; the array is read-only until a new journal is added");
            if let Some(meta) = &self.meta {
                let failed = meta.fail_journal().await;
                self.superblocks_failed(failed, MetaWrite::Superblock).await;
            }
        })
    }
}

impl Host for Array {
    fn parity_shape(&self) -> &ParityGeometry {
        self.shapes()
            .current()
            .parity()
            .expect("the parity path runs on a parity shape")
    }

    fn parity_trusted(&self, end: u64) -> bool {
        debug_assert!(
            self.geometry().level().has_parity(),
            "parity on a parity array"
        );
        self.passes().parity_trusted(end)
    }

    fn check_alive(&self) -> Result<()> {
        Array::check_alive(self)
    }

    fn lost_error(&self) -> Error {
        lost(self.name())
    }

    fn lost_windows(&self, role: usize) -> Error {
        lost_windows(self.name(), role)
    }

    fn counters(&self) -> &Counters {
        self.parts().counters
    }

    /// A copy of `p` that can be read now: data levels rotate over the in-sync copies,
    /// write-mostly members only when no other copy can be read (md's write-mostly);
    /// parity levels have one, the data member's. Until a resync has run, copies may differ
    /// where writes were in flight: every read then goes to the first in-sync copy, the one
    /// the resync keeps (md's choose_first), so no read returns a version the resync then
    /// replaces.
    fn correct(&self, misreads: Misreads) -> LocalBoxFuture<'_, ()> {
        Box::pin(super::correct::correct(self, misreads))
    }

    fn readable_copy(&self, p: &Piece, avoid: &Misreads) -> Option<Loc> {
        let slots = self.slots();
        let readable = |l: &Loc| {
            !avoid.avoids(l.member, l.sector..l.sector + p.sectors)
                && slots.in_sync_at(l.member, l.sector + p.sectors)
        };
        let n = p.copies.len();
        if n == 1 || self.needs_resync() {
            return p.copies.iter().copied().find(readable);
        }
        let rot = rotation();
        let copies = || (0..n).map(|k| p.copies[(rot + k) % n]);
        let chosen = copies()
            .find(|l| !slots.write_mostly(l.member) && readable(l))
            .or_else(|| copies().find(readable));
        debug_assert!(
            chosen.is_none_or(|c| p.copies.contains(&c)),
            "one of the piece's copies"
        );
        chosen
    }

    fn ppl(&self) -> Option<Ppl> {
        self.ppl.read().expect(crate::POISONED).clone()
    }

    fn journal(&self) -> Option<Journal> {
        // A failed or missing journal takes nothing: the array is read-only then, and the
        // write-back cache's pages go to the members unlogged, as md writes them.
        let works = self
            .slots()
            .journal_state()
            .is_some_and(|s| s.allows_writes());
        self.journal.live().filter(|_| works)
    }
}

impl WriteBackHost for Array {
    fn write_stripe(
        &self,
        stripe: u64,
        pieces: Vec<(u64, raidd_rt::IoVec)>,
    ) -> LocalBoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let (Some(first), Some(last)) = (pieces.first(), pieces.last()) else {
                return Ok(());
            };
            let end = last.0 + last.1.iter().map(|b| b.len() as u64).sum::<u64>();
            let _pass = self.enter_gate(first.0, end - first.0).await;
            self.ensure_dirty().await?;
            let parity = self
                .levels
                .parity()
                .expect("the write-back cache is a parity array's");
            parity.write_pieces(self, stripe, pieces).await
        })
    }

    fn read_bytes(
        &self,
        offset: u64,
        len: usize,
    ) -> LocalBoxFuture<'_, Result<raidd_rt::AlignedBuf>> {
        Box::pin(self.read_to_buf(offset, len))
    }
}
