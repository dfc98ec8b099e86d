//! Member I/O: every read and write an array sends to its members goes out here, one I/O or
//! a batch of them issued together and joined in place (`join.rs`). A member whose I/O fails is failed by identity (see [`Array::fail_member_io`]) once the
//! batch is over; callers look at the results only then.

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use raidd_layout::SECTOR_SIZE;
use raidd_rt::recycle::Table;
use raidd_rt::{BufSlice, BufSliceMut, IoVec, IoVecMut};
use smallvec::SmallVec;

use super::join::{join_inline, join_slots, Futures, Joined, Results, Slots, INLINE};
use super::{read_lock, Array, MemberRef};
use crate::iov::{untag, MemberIo, MemberIos, ReadBack, ReadLayout, Tagged, Window, Windows};
use crate::member::{Member, MemberFuture};

/// A write's copy to a slot's replacement: (slot, replacement, byte offset, windows).
type ReplacementCopy = (usize, Arc<dyn Member>, u64, IoVec);

/// Starts one member I/O: the member's own (boxed) future for an offset and windows.
type Start<W, T> = for<'m> fn(&'m dyn Member, u64, Windows<W>) -> MemberFuture<'m, T>;

type ReadFuture<'m> = MemberFuture<'m, (io::Result<()>, IoVecMut)>;

fn read_at(m: &dyn Member, offset: u64, w: Windows<BufSliceMut>) -> ReadFuture<'_> {
    m.read(offset, w)
}

fn write_at(m: &dyn Member, offset: u64, w: Windows<BufSlice>) -> MemberFuture<'_, io::Result<()>> {
    m.write(offset, w)
}

fn read_error((r, _): &(io::Result<()>, IoVecMut)) -> Option<&io::Error> {
    r.as_ref().err()
}

fn result_error(r: &io::Result<()>) -> Option<&io::Error> {
    r.as_ref().err()
}

fn same<T>(t: T) -> T {
    t
}

/// A scratch read's result without its windows (the caller holds the buffers).
fn result_only((r, _iov): (io::Result<()>, IoVecMut)) -> io::Result<()> {
    r
}

impl Array {
    /// Issues every member I/O of `ios` at once (draining it) and joins them in place; keeps
    /// of each output what `keep` returns, fails the members whose I/O failed (`error`
    /// finds the error in what was kept); each slot with its kept output, in order. Every
    /// batch of member I/O goes through here. What is held while members are failed is only
    /// what was kept, and the batch is borrowed, not taken (an async fn keeps its arguments
    /// for its whole life): both are part of every request's state in flight.
    async fn join_member_ios<W: Window, T, U>(
        &self,
        ios: &mut MemberIos<W>,
        start: Start<W, T>,
        keep: fn(T) -> U,
        error: fn(&U) -> Option<&io::Error>,
    ) -> Results<(usize, U)> {
        // Each I/O's slot and member, held while its future borrows the member; the futures
        // join in place and the outputs are kept straight from them (three tables per batch:
        // each one more was a collect on every small write and a spill on large batches). The
        // slots, declared after the members, are dropped before them (not moved into `drop`:
        // a move copies the whole inline table).
        let members: Table<[(usize, MemberRef); INLINE]> = ios
            .iter()
            .map(|io| {
                self.slots[io.member].io.issued(W::WRITES, io.len);
                (io.member, self.member_ref(io.member))
            })
            .collect();
        let mut slots: Slots<_> = members
            .iter()
            .zip(ios.drain(..))
            .map(|((_, m), io)| Joined::Running(start(&***m, io.offset, io.windows)))
            .collect();
        join_slots(&mut slots).await;
        let outputs: Results<(usize, U)> = members
            .iter()
            .zip(slots.drain(..))
            .map(|((role, _), slot)| (*role, keep(slot.output())))
            .collect();
        for ((role, out), (_, member)) in outputs.iter().zip(&members) {
            if let Some(e) = error(out) {
                self.slots[*role].io.failed(W::WRITES);
                self.fail_member_io(*role, member, e).await;
            }
        }
        outputs
    }

    /// Reads into the request's windows; returns each I/O's member, result, windows and the
    /// layout to restore them by.
    pub(super) async fn issue_reads(
        &self,
        mut ios: MemberIos<Tagged>,
    ) -> Results<(usize, io::Result<()>, ReadBack)> {
        let mut layouts: Table<[ReadLayout; INLINE]> = Table::with_room(ios.len());
        let mut plain = MemberIos::<BufSliceMut>::with_room(ios.len());
        plain.extend(ios.drain(..).map(|io| {
            let (windows, layout) = untag(io.windows);
            layouts.push(layout);
            MemberIo {
                member: io.member,
                offset: io.offset,
                len: io.len,
                windows,
            }
        }));
        self.join_member_ios(&mut plain, read_at, same, read_error)
            .await
            .into_iter()
            .zip(layouts)
            .map(|((role, (r, iov)), layout)| (role, r, (iov, layout)))
            .collect()
    }

    /// Reads into scratch windows; returns each I/O's member and result.
    pub(super) async fn issue_scratch_reads(
        &self,
        mut ios: MemberIos<BufSliceMut>,
    ) -> Results<(usize, io::Result<()>)> {
        self.join_member_ios(&mut ios, read_at, result_only, result_error)
            .await
    }

    /// Writes a batch; returns each I/O's member and result. A slot being replaced gets what
    /// lands below its replacement's copy point on the replacement too.
    pub(super) async fn issue_writes(
        &self,
        mut ios: MemberIos<BufSlice>,
    ) -> Results<(usize, io::Result<()>)> {
        let mut copies: SmallVec<[ReplacementCopy; 2]> = SmallVec::new();
        for io in &ios {
            if let Some((m, at)) = self.replacement_for(io.member, io.offset, io.len) {
                copies.push((io.member, m, at, io.windows.iter().cloned().collect()));
            }
        }
        if copies.is_empty() {
            return self
                .join_member_ios(&mut ios, write_at, same, result_error)
                .await;
        }
        // Rare (a `raidd replace` in progress): boxed, so that its second join does not
        // enlarge every write's state in flight.
        Box::pin(async {
            let extra: Futures<MemberFuture<'_, _>> = copies
                .iter_mut()
                .map(|(_, m, at, iov)| m.write(*at, std::mem::take(iov)))
                .collect();
            let (results, extra) = futures::future::join(
                self.join_member_ios(&mut ios, write_at, same, result_error),
                join_inline(extra),
            )
            .await;
            for ((role, ..), r) in copies.iter().zip(extra) {
                if let Err(e) = r {
                    self.abort_replacement(*role, &e);
                }
            }
            results
        })
        .await
    }

    /// Writes the same windows to each `(slot, byte offset)` at once (the copies of a
    /// mirrored piece); each write's result, in order.
    pub(super) async fn write_same(
        &self,
        at: &[(usize, u64)],
        iov: IoVec,
    ) -> Results<io::Result<()>> {
        let len = raidd_rt::buf::iov_len(&iov) as u64;
        let mut ios: MemberIos<BufSlice> = at
            .iter()
            .map(|&(member, offset)| MemberIo {
                member,
                offset,
                len,
                windows: iov.iter().cloned().collect(),
            })
            .collect();
        drop(iov);
        self.join_member_ios(&mut ios, write_at, same, result_error)
            .await
            .into_iter()
            .map(|(_, r)| r)
            .collect()
    }

    /// Counts an I/O of `len` bytes issued to slot `role`'s member.
    fn count_issued(&self, role: usize, write: bool, len: usize) {
        self.slots[role].io.issued(write, len as u64);
    }

    /// Counts an I/O slot `role`'s member failed.
    fn count_failed(&self, role: usize, write: bool) {
        self.slots[role].io.failed(write);
    }

    /// Reads slot `role`'s member at byte `offset` into `iov` (a single I/O; batches go
    /// through [`Array::issue_reads`]).
    pub(super) async fn read_member(
        &self,
        role: usize,
        offset: u64,
        iov: IoVecMut,
    ) -> (io::Result<()>, IoVecMut) {
        let member = self.member_ref(role);
        let (r, iov) = member.read(offset, iov).await;
        // Counted once done, by the windows that came back (none after a timeout): counted
        // before the read, the length would widen every read's state in flight (by 104
        // bytes of an NBD read's, measured by `a_request_in_flight_holds_a_bounded_state`).
        self.count_issued(role, false, raidd_rt::buf::iov_mut_len(&iov));
        if let Err(e) = &r {
            self.count_failed(role, false);
            self.fail_member_io(role, &member, e).await;
        }
        (r, iov)
    }

    /// Writes `iov` to slot `role`'s member at byte `offset` (see [`Array::read_member`]).
    pub(super) async fn write_member(
        &self,
        role: usize,
        offset: u64,
        iov: IoVec,
    ) -> io::Result<()> {
        let member = self.member_ref(role);
        self.count_issued(role, true, raidd_rt::buf::iov_len(&iov));
        let r = member.write(offset, iov).await;
        if let Err(e) = &r {
            self.count_failed(role, true);
            self.fail_member_io(role, &member, e).await;
        }
        r
    }

    /// The replacement member of `role` and the byte offset on it that corresponds to a
    /// write of `len` bytes at byte `offset` of the slot's member, when the replacement
    /// is current there.
    pub(super) fn replacement_for(
        &self,
        role: usize,
        offset: u64,
        len: u64,
    ) -> Option<(Arc<dyn Member>, u64)> {
        let slot = &self.slots[role];
        if !slot.replacing.load(Ordering::Acquire) {
            return None;
        }
        let rel = offset - slot.data_offset.load(Ordering::Relaxed);
        if (rel + len).div_ceil(SECTOR_SIZE) > slot.replaced.load(Ordering::Acquire) {
            return None;
        }
        let (m, off) = read_lock(&slot.replacement).clone()?;
        Some((m, off + rel))
    }

    /// Gives up a replacement whose member failed a write: the slot keeps its member.
    pub(super) fn abort_replacement(&self, role: usize, why: &io::Error) {
        let slot = &self.slots[role];
        slot.replacing.store(false, Ordering::Release);
        let gone = slot.replacement.write().expect(crate::POISONED).take();
        if let Some((m, _)) = gone {
            tracing::error!(array = %self.name, member = %m.info().name, role, "replacement failed, replace abandoned: {why}");
        }
    }
}
