//! Member I/O: every read and write an array sends to its members goes out here, one I/O or
//! a batch of them issued together and joined in place (`join.rs`). A member whose I/O
//! fails is failed by identity (see [`Owner::fail_member_io`]) once the batch is over;
//! callers look at the results only then. Each I/O is counted on its slot, and a write to a
//! slot being replaced goes to the replacement too where that is current.
//!
//! These are functions over the array's port [`Owner`] (its slots, its name, and failing a
//! member), so the level paths and the passes share them without this module knowing the
//! array.

use std::io;
use std::sync::Arc;

use futures::future::LocalBoxFuture;
use raidd_rt::recycle::Table;
use raidd_rt::{AlignedBuf, BufSlice, BufSliceMut, IoVec, IoVecMut};
use smallvec::SmallVec;

use super::join::{join_inline, join_slots, Futures, Joined, Results, INLINE};
use super::misread::{FailedReads, MemberSpan};
use super::slot_member::MemberRef;
use super::slots::Slots;
use crate::error::{Error, Result};
use crate::iov::{
    untag, Batch, MemberIo, MemberIos, ReadBack, ReadLayout, ReqMut, Tagged, Window, Windows,
};
use crate::member::{Member, MemberFuture};

/// What member I/O needs of the array that owns the members.
pub(crate) trait Owner {
    /// The members, their states and counters.
    fn slots(&self) -> &Slots;
    /// The array's name, for errors and log lines.
    fn name(&self) -> &str;
    /// Fails slot `role` after `member`'s I/O failed: recorded in the superblocks before
    /// this completes; nothing when the slot holds another member by now. Boxed: the
    /// failure path (superblock updates on every member) would otherwise be part of every
    /// request's state in flight.
    fn fail_member_io<'a>(
        &'a self,
        role: usize,
        member: &'a Arc<dyn Member>,
        why: &'a io::Error,
    ) -> LocalBoxFuture<'a, ()>;
    /// Whether slot `role`'s member stays in its slot after a read that failed with `why`,
    /// its blocks to be rebuilt from redundancy and rewritten by the caller (md's read
    /// error correction); counts the error against the member's limit.
    fn keeps_after_read_error(&self, role: usize, why: &io::Error) -> bool;
}

/// Whether a batch's read errors may leave their members in their slots
/// ([`Owner::keeps_after_read_error`]): only reads whose caller corrects what failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OnReadError {
    Fail,
    Keep,
}

/// The outputs of a batch that failed and whose members were kept (their indices).
pub(crate) type Kept = SmallVec<[usize; 2]>;

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

/// Issues every member I/O of `ios` at once (draining it) and joins them in place; keeps of
/// each output what `keep` returns, fails the members whose I/O failed (`error` finds the
/// error in what was kept); each slot with its kept output, in order. Every batch of member
/// I/O goes through here. What is held while members are failed is only what was kept, and
/// the batch is borrowed, not taken (an async fn keeps its arguments for its whole life):
/// both are part of every request's state in flight.
async fn join_member_ios<O: Owner + ?Sized, W: Window, T, U>(
    o: &O,
    ios: &mut MemberIos<W>,
    start: Start<W, T>,
    keep: fn(T) -> U,
    error: fn(&U) -> Option<&io::Error>,
    on_read_error: OnReadError,
) -> (Results<(usize, U)>, Kept) {
    let slots = o.slots();
    // Each I/O's slot and member, held while its future borrows the member; the futures
    // join in place and the outputs are kept straight from them (three tables per batch:
    // each one more was a collect on every small write and a spill on large batches). The
    // join slots, declared after the members, are dropped before them (not moved into
    // `drop`: a move copies the whole inline table).
    let members: Table<[(usize, MemberRef); INLINE]> = ios
        .iter()
        .map(|io| {
            debug_assert!(io.len > 0, "an empty member I/O");
            slots.io(io.member).issued(W::WRITES, io.len);
            (io.member, slots.member_ref(io.member))
        })
        .collect();
    let mut joined: super::join::Slots<_> = members
        .iter()
        .zip(ios.drain(..))
        .map(|((_, m), io)| Joined::Running(start(&***m, io.offset, io.windows)))
        .collect();
    join_slots(&mut joined).await;
    let outputs: Results<(usize, U)> = members
        .iter()
        .zip(joined.drain(..))
        .map(|((role, _), slot)| (*role, keep(slot.output())))
        .collect();
    debug_assert_eq!(
        outputs.len(),
        members.len(),
        "every I/O of a batch has a result"
    );
    let mut kept = Kept::new();
    for (i, ((role, out), (_, member))) in outputs.iter().zip(&members).enumerate() {
        if let Some(e) = error(out) {
            if W::WRITES {
                slots.io(*role).failed_write();
            } else {
                slots.io(*role).failed_read(e);
            }
            if !W::WRITES
                && on_read_error == OnReadError::Keep
                && o.keeps_after_read_error(*role, e)
            {
                kept.push(i);
                continue;
            }
            o.fail_member_io(*role, member, e).await;
        }
    }
    (outputs, kept)
}

/// Reads into the request's windows; returns each I/O's member, result, windows and the
/// layout to restore them by, and whether the member of a failed read was kept in its
/// slot for the caller to correct (see [`OnReadError`]).
pub(crate) async fn issue_reads<O: Owner + ?Sized>(
    o: &O,
    mut ios: MemberIos<Tagged>,
) -> Results<(usize, io::Result<()>, ReadBack, bool)> {
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
    let (outputs, kept) =
        join_member_ios(o, &mut plain, read_at, same, read_error, OnReadError::Keep).await;
    outputs
        .into_iter()
        .zip(layouts)
        .enumerate()
        .map(|(i, ((role, (r, iov)), layout))| (role, r, (iov, layout), kept.contains(&i)))
        .collect()
}

/// Reads a batch into a request's windows and gives them back to `req`; returns the reads
/// that failed, or the slot whose member kept its windows (it timed out: the caller
/// returns what it has, [`ReqMut::into_partial`]).
pub(crate) async fn read_into<O: Owner + ?Sized>(
    o: &O,
    batch: Batch<Tagged>,
    req: &mut ReqMut,
) -> std::result::Result<FailedReads, usize> {
    let ios = batch.into_ios();
    let spans: Table<[MemberSpan; INLINE]> = ios
        .iter()
        .map(|io| (io.member, io.offset, io.len))
        .collect();
    let mut failed = FailedReads::default();
    for ((member, r, (iov, layout), kept), span) in issue_reads(o, ios).await.into_iter().zip(spans)
    {
        if crate::member::windows_lost(&r) {
            return Err(member);
        }
        req.restore(&layout, iov);
        if r.is_err() {
            failed.note(span, kept);
        }
    }
    Ok(failed)
}

/// Reads into scratch windows; returns each I/O's member and result.
pub(crate) async fn issue_scratch_reads<O: Owner + ?Sized>(
    o: &O,
    mut ios: MemberIos<BufSliceMut>,
) -> Results<(usize, io::Result<()>)> {
    join_member_ios(
        o,
        &mut ios,
        read_at,
        result_only,
        result_error,
        OnReadError::Fail,
    )
    .await
    .0
}

/// [`issue_scratch_reads`] for a caller that corrects what fails: also whether each failed
/// read's member was kept in its slot (see [`OnReadError`]).
pub(crate) async fn issue_scratch_reads_keeping<O: Owner + ?Sized>(
    o: &O,
    mut ios: MemberIos<BufSliceMut>,
) -> Results<(usize, io::Result<()>, bool)> {
    let (outputs, kept) = join_member_ios(
        o,
        &mut ios,
        read_at,
        result_only,
        result_error,
        OnReadError::Keep,
    )
    .await;
    outputs
        .into_iter()
        .enumerate()
        .map(|(i, (role, r))| (role, r, kept.contains(&i)))
        .collect()
}

/// Writes a batch; returns each I/O's member and result. A slot being replaced gets what
/// lands below its replacement's copy point on the replacement too.
pub(crate) async fn issue_writes<O: Owner + ?Sized>(
    o: &O,
    mut ios: MemberIos<BufSlice>,
) -> Results<(usize, io::Result<()>)> {
    let slots = o.slots();
    let mut copies: SmallVec<[ReplacementCopy; 2]> = SmallVec::new();
    for io in &ios {
        if let Some((m, at)) = slots.replacement_for(io.member, io.offset, io.len) {
            copies.push((io.member, m, at, io.windows.iter().cloned().collect()));
        }
    }
    if copies.is_empty() {
        return join_member_ios(o, &mut ios, write_at, same, result_error, OnReadError::Fail)
            .await
            .0;
    }
    // Rare (a `raidd replace` in progress): boxed, so that its second join does not
    // enlarge every write's state in flight.
    Box::pin(async {
        let extra: Futures<MemberFuture<'_, _>> = copies
            .iter_mut()
            .map(|(_, m, at, iov)| m.write(*at, std::mem::take(iov)))
            .collect();
        let (results, extra) = futures::future::join(
            join_member_ios(o, &mut ios, write_at, same, result_error, OnReadError::Fail),
            join_inline(extra),
        )
        .await;
        let results = results.0;
        for ((role, ..), r) in copies.iter().zip(extra) {
            if let Err(e) = r {
                abandon_replacement(o, *role, &e);
            }
        }
        results
    })
    .await
}

/// Writes the same windows to each `(slot, byte offset)` at once (the copies of a mirrored
/// piece); each write's result, in order.
pub(crate) async fn write_same<O: Owner + ?Sized>(
    o: &O,
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
    join_member_ios(o, &mut ios, write_at, same, result_error, OnReadError::Fail)
        .await
        .0
        .into_iter()
        .map(|(_, r)| r)
        .collect()
}

/// Reads slot `role`'s member at byte `offset` into `iov` (a single I/O; batches go through
/// [`issue_reads`]); a member whose read fails is failed, or kept for the caller to correct
/// (the `bool`, see [`OnReadError`]).
pub(crate) async fn read_member<O: Owner + ?Sized>(
    o: &O,
    role: usize,
    offset: u64,
    iov: IoVecMut,
) -> (io::Result<()>, IoVecMut, bool) {
    let member = o.slots().member_ref(role);
    let (r, iov) = member.read(offset, iov).await;
    // Counted once done, by the windows that came back (none after a timeout): counted
    // before the read, the length would widen every read's state in flight (by 104 bytes
    // of an NBD read's, measured by `a_request_in_flight_holds_a_bounded_state`).
    let counts = o.slots().io(role);
    counts.issued(false, raidd_rt::buf::iov_mut_len(&iov) as u64);
    if let Err(e) = &r {
        counts.failed_read(e);
        if o.keeps_after_read_error(role, e) {
            return (r, iov, true);
        }
        o.fail_member_io(role, &member, e).await;
    }
    (r, iov, false)
}

/// Writes `iov` to slot `role`'s member at byte `offset` (see [`read_member`]).
pub(crate) async fn write_member<O: Owner + ?Sized>(
    o: &O,
    role: usize,
    offset: u64,
    iov: IoVec,
) -> io::Result<()> {
    let member = o.slots().member_ref(role);
    o.slots()
        .io(role)
        .issued(true, raidd_rt::buf::iov_len(&iov) as u64);
    let r = member.write(offset, iov).await;
    if let Err(e) = &r {
        o.slots().io(role).failed_write();
        o.fail_member_io(role, &member, e).await;
    }
    r
}

/// Writes `data` at member sector `sector` of slot `role` (a rebuilt region, repaired
/// redundancy); a member that fails the write is failed.
pub(crate) async fn write_data<O: Owner + ?Sized>(
    o: &O,
    role: usize,
    sector: u64,
    data: AlignedBuf,
) -> Result<()> {
    let slots = o.slots();
    let member = slots.member_ref(role);
    slots.io(role).issued(true, data.len() as u64);
    let at = slots.member_offset(role, sector);
    if let Err(e) = crate::member::write_bytes(&**member, at, data).await {
        slots.io(role).failed_write();
        o.fail_member_io(role, &member, &e).await;
        return Err(Error::io(
            format!("{}: writing {}", o.name(), member.info().name),
            e,
        ));
    }
    Ok(())
}

/// Discards member byte ranges `(slot, offset, len)` (sorted, merged) on the members that
/// hold them, and on replacements current there; a member that fails its discard is
/// failed, a replacement that does is given up.
pub(crate) async fn discard<O: Owner + ?Sized>(o: &O, ranges: &[(usize, u64, u64)]) {
    let slots = o.slots();
    futures::future::join_all(ranges.iter().map(|&(m, off, n)| async move {
        let member = slots.member_ref(m);
        if let Err(e) = member.discard(off, n).await {
            slots.io(m).failed_write();
            o.fail_member_io(m, &member, &e).await;
        }
    }))
    .await;
    // A replacement being built must keep matching its slot's member.
    for &(m, off, n) in ranges {
        if let Some((r, at)) = slots.replacement_for(m, off, n) {
            if let Err(e) = r.discard(at, n).await {
                abandon_replacement(o, m, &e);
            }
        }
    }
}

/// Gives up a replacement whose member failed a write: the slot keeps its member.
fn abandon_replacement<O: Owner + ?Sized>(o: &O, role: usize, why: &io::Error) {
    if let Some(m) = o.slots().abandon_replace(role) {
        tracing::error!(array = %o.name(), member = %m.info().name, role, "replacement failed, replace abandoned: {why}");
    }
}

/// Reads member sectors `range` of slot `role`'s `member` back after their rewrite by a
/// correction (counted as a read; a failure fails nothing here).
pub(crate) async fn read_back<O: Owner + ?Sized>(
    o: &O,
    role: usize,
    member: &Arc<dyn Member>,
    range: std::ops::Range<u64>,
) -> io::Result<()> {
    let len = ((range.end - range.start) * raidd_layout::SECTOR_SIZE) as usize;
    let buf = raidd_rt::SharedBuf::new(AlignedBuf::for_overwrite(len));
    let mut iov = IoVecMut::new();
    iov.push(buf.slice_mut(0..len).expect("fresh buffer"));
    let counts = o.slots().io(role);
    counts.issued(false, len as u64);
    let (r, iov) = member
        .read(o.slots().member_offset(role, range.start), iov)
        .await;
    drop(iov);
    if let Err(e) = &r {
        counts.failed_read(e);
    }
    r
}

/// Writes `data`, rebuilt from redundancy, over member sectors at `sector` of slot `role`'s
/// `member`, whose read failed, reads it back, and [`settle`]s the correction. The caller
/// keeps writes out of those sectors meanwhile (a barrier, or the stripe it holds).
pub(crate) async fn rewrite<O: Owner + ?Sized>(
    o: &O,
    role: usize,
    member: &Arc<dyn Member>,
    sector: u64,
    data: AlignedBuf,
) {
    let range = sector..sector + data.len() as u64 / raidd_layout::SECTOR_SIZE;
    let outcome = match write_data(o, role, sector, data).await {
        Ok(()) => read_back(o, role, member, range.clone()).await,
        Err(e) => Err(io::Error::other(e.to_string())),
    };
    settle(o, role, member, range, outcome).await;
}

/// How a correction of member sectors `range` of slot `role`'s `member` ended: counted and
/// logged (md's "read error corrected"), or the member failed (where the rewrite or the
/// read-back failed on the member itself, it is failed already).
pub(crate) async fn settle<O: Owner + ?Sized>(
    o: &O,
    role: usize,
    member: &Arc<dyn Member>,
    range: std::ops::Range<u64>,
    outcome: io::Result<()>,
) {
    debug_assert!(range.start < range.end, "an empty correction");
    let slots = o.slots();
    let sectors = range.end - range.start;
    let at = slots.member_offset(role, range.start) / raidd_layout::SECTOR_SIZE;
    let name = &member.info().name;
    match outcome {
        Ok(()) => {
            slots
                .io(role)
                .corrected(sectors * raidd_layout::SECTOR_SIZE);
            tracing::warn!(array = %o.name(), member = %name, role,
                "read error corrected ({sectors} sectors at {at} on {name})");
        }
        Err(e) => {
            tracing::error!(array = %o.name(), member = %name, role,
                "read error not correctable ({sectors} sectors at {at} on {name}): {e}");
            fail_unreadable(o, role, Some(member)).await;
        }
    }
}

/// Fails slot `role`'s `member` after a read that was not corrected.
pub(crate) async fn fail_unreadable<O: Owner + ?Sized>(
    o: &O,
    role: usize,
    member: Option<&Arc<dyn Member>>,
) {
    let why = io::Error::from_raw_os_error(libc::EIO);
    match member {
        Some(m) => o.fail_member_io(role, m, &why).await,
        None => {
            if let Some(m) = o.slots().member(role) {
                o.fail_member_io(role, &m, &why).await;
            }
        }
    }
}
