//! Read errors the array corrects instead of failing the member (md's read error
//! correction: raid1's `fix_read_error`, raid5's `R5_ReadError` then `R5_ReWrite`, and the
//! same in md's check and repair).
//!
//! A read that a member fails with a medium error ([`crate::member::medium_error`]) leaves
//! the member in its slot while its limit allows
//! ([`super::member_io::Owner::keeps_after_read_error`], md's `max_read_errors`). This file
//! corrects for the two kinds of reads that hold nothing a write may wait for:
//! - **A client's read.** The level path reads what failed from another copy or rebuilds
//!   it from parity, and notes it ([`super::misread::Misreads`]): for the rest of that
//!   read those member sectors are not asked for again. Once the read has its bytes, and before it
//!   returns, [`correct`] reads the failed range again one 4 KiB block at a time (md's
//!   unit), and rewrites each run of blocks that still fail under a barrier, as a rebuild
//!   window does: writes in flight there finish first and new ones wait, so what is
//!   rewritten is the newest data. A read that failed because every copy of a piece had a
//!   bad block somewhere in it is read again once the blocks are corrected.
//! - **A scrub** (check, repair; not a resync, whose parity is not trusted) already holds a
//!   barrier over its window: [`mend_copies`] narrows a mirror's failed reads down to
//!   blocks the same way and rewrites them from the other copies; a parity stripe's are
//!   mended as a write mends them (`ParityIo::read_rows_mended`).
//!
//! Each rewritten range is read back. A member whose rewrite or read-back fails is failed,
//! as md fails it; one whose read-back works counts a corrected error (md's per-device
//! `errors`) and the bytes repaired. Where no other member could give the bytes either
//! (both copies of a block bad), a member with checksum tags stays in its slot, the block
//! as it is, its reads failing (never wrong bytes) and the log naming it, as ZFS keeps a
//! disk with a permanent error in one block: its other blocks read, and failing it would
//! lose the redundancy of all of them. A member without tags is failed then, as md does. A RAID4/5/6 write that reads old rows mends them
//! itself while it holds the stripe (`ParityIo::read_rows_mended`): it runs under a pass
//! of the gate that a barrier would wait for. A rebuild or a replace of an array with
//! checksums keeps a member whose read fails in the same way (`recovery.rs`: parity rebuilt
//! where it covers both, a mirror's blocks rewritten from the rebuilt copy, a replaced
//! member's window rebuilt onto it before it is copied on); one of an array without
//! checksums still fails it, as md does.

use std::io;

use raidd_layout::{Geometry, SECTOR_SIZE};
use smallvec::SmallVec;

use super::host::Host;
use super::member_io;
use super::misread::{Misread, Misreads};
use super::recovery::{copy_run, data_runs, recover_rows, regions_of};
use super::slots::same_member;
use super::Array;
use crate::error::Result;

use super::narrow::{narrow, Runs};

/// Corrects each misread of a client's read whose bytes are in hand (see the module's
/// comment): rewritten from redundancy and read back, or the member is failed. What the
/// rebuilding itself could not read on another member is corrected in turn (each one
/// counted against that member's limit, so this ends).
pub(super) async fn correct(array: &Array, misreads: Misreads) {
    let mut queue: std::collections::VecDeque<Misread> = misreads.into_list().into_iter().collect();
    // Each member range once: two copies bad at one block would otherwise send each
    // other's correction back and forth.
    let mut tried: SmallVec<[(usize, std::ops::Range<u64>); 4]> = SmallVec::new();
    while let Some(m) = queue.pop_front() {
        let range = m.sector..m.sector + m.sectors;
        if tried
            .iter()
            .any(|(r, t)| *r == m.role && t.start <= range.start && range.end <= t.end)
        {
            continue;
        }
        tried.push((m.role, range));
        queue.extend(correct_one(array, m).await);
    }
}

/// Narrows a misread down to the 4 KiB blocks that still fail, and corrects each run of
/// them under a barrier; returns what the rebuilding could not read elsewhere.
async fn correct_one(array: &Array, m: Misread) -> SmallVec<[Misread; 2]> {
    let slots = array.slots();
    let mut more = SmallVec::new();
    let Some(member) = m.member else {
        return more;
    };
    let range = m.sector..m.sector + m.sectors;
    let still = || {
        slots
            .member(m.role)
            .is_some_and(|now| same_member(&now, &member))
            && slots.in_sync_at(m.role, range.end)
    };
    if !still() {
        return more; // failed or replaced meanwhile: nothing of it to correct
    }
    let mut scratch = vec![0u8; (m.sectors * SECTOR_SIZE) as usize];
    let Ok(bad) = narrow(array, m.role, range.start, &mut scratch).await else {
        return more; // the member failed a read outright: it is failed
    };
    for run in bad {
        if !still() {
            break;
        }
        let barrier = array
            .parts()
            .gate
            .barrier(regions_of(array, m.role, run.clone()))
            .await;
        let rewritten = rewrite(array, m.role, run.clone(), &mut more).await;
        let outcome = match rewritten {
            Ok(()) => member_io::read_back(array, m.role, &member, run.clone()).await,
            // A member with checksums reads: its bad block is the block's, not the
            // member's (without them, a block no copy gives fails the member, as in md).
            Err(e) if still() && member.checksums().is_some() => {
                drop(barrier);
                unrecoverable(array, m.role, &member, run, &e);
                continue;
            }
            Err(e) => Err(io::Error::other(e.to_string())),
        };
        drop(barrier);
        member_io::settle(array, m.role, &member, run, outcome).await;
    }
    more
}

/// Member sectors `run` of slot `role` could not be rebuilt: no other member gave their
/// bytes (`why`). They stay as they are, their reads failing.
fn unrecoverable(
    array: &Array,
    role: usize,
    member: &std::sync::Arc<dyn crate::member::Member>,
    run: std::ops::Range<u64>,
    why: &crate::error::Error,
) {
    let sectors = run.end - run.start;
    let at = array.slots().member_offset(role, run.start) / SECTOR_SIZE;
    let name = &member.info().name;
    tracing::error!(array = %array.name(), member = %name, role,
        "unrecoverable: no good copy of {sectors} sectors at {at} on {name} ({why}); reads there fail until they are written");
}

/// Rebuilds member sectors `range` of slot `role` from the other members and writes them
/// to it; what another copy could not give is noted in `more`.
async fn rewrite(
    array: &Array,
    role: usize,
    range: std::ops::Range<u64>,
    more: &mut SmallVec<[Misread; 2]>,
) -> Result<()> {
    match array.geometry() {
        Geometry::Parity(pg) => {
            let chunk = u64::from(pg.chunk_sectors);
            let mut sec = range.start;
            while sec < range.end {
                let stripe = sec / chunk;
                let rows = sec % chunk..(range.end - stripe * chunk).min(chunk);
                if !Host::parity_trusted(array, super::parity::stripe_end(pg, stripe)) {
                    return Err(crate::error::Error::new(
                        crate::error::ErrorKind::Io,
                        "parity there is not in sync yet",
                    ));
                }
                recover_rows(
                    array,
                    role,
                    stripe,
                    rows.clone(),
                    member_io::OnReadError::Keep,
                )
                .await?;
                sec = stripe * chunk + rows.end;
            }
            Ok(())
        }
        _ => {
            for run in data_runs(array, role, range) {
                let (r, misreads) = copy_run(array, role, &run).await;
                more.extend(misreads.into_list());
                r?;
            }
            Ok(())
        }
    }
}

/// A scrub's copies of one mirrored piece, `bufs[k]` read from `copies[k]`, where the
/// copies `unread` failed their read: each is read again block by block, and each block
/// still unreadable is rewritten from a copy that gave it (and put in its buffer). False
/// when a member failed, or no copy could give some block (its members are failed).
pub(super) async fn mend_copies(
    array: &Array,
    copies: &[raidd_layout::Loc],
    bufs: &mut [raidd_rt::AlignedBuf],
    unread: &[usize],
) -> bool {
    debug_assert_eq!(copies.len(), bufs.len(), "a buffer per copy");
    // The runs each copy could not give, in sectors from the piece's start.
    let mut bad: SmallVec<[Runs; 4]> = (0..copies.len()).map(|_| SmallVec::new()).collect();
    for &k in unread {
        let loc = copies[k];
        match narrow(array, loc.member, loc.sector, &mut bufs[k]).await {
            Ok(runs) => {
                bad[k] = runs
                    .into_iter()
                    .map(|r| r.start - loc.sector..r.end - loc.sector)
                    .collect()
            }
            Err(()) => return false,
        }
    }
    let overlaps = |runs: &[std::ops::Range<u64>], r: &std::ops::Range<u64>| {
        runs.iter().any(|b| b.start < r.end && r.start < b.end)
    };
    for &k in unread {
        for r in bad[k].clone() {
            let bytes = (r.start * SECTOR_SIZE) as usize..(r.end * SECTOR_SIZE) as usize;
            let loc = copies[k];
            let member = array.slots().member(loc.member);
            let Some(j) = (0..copies.len()).find(|&j| j != k && !overlaps(&bad[j], &r)) else {
                tracing::error!(array = %array.name(), role = loc.member,
                    "no copy of member sectors {}..{} can be read", loc.sector + r.start, loc.sector + r.end);
                member_io::fail_unreadable(array, loc.member, member.as_ref()).await;
                return false;
            };
            let mut data = raidd_rt::AlignedBuf::for_overwrite(bytes.len());
            data.copy_from_slice(&bufs[j][bytes.clone()]);
            bufs[k][bytes].copy_from_slice(&data);
            let Some(member) = member else {
                return false;
            };
            member_io::rewrite(array, loc.member, &member, loc.sector + r.start, data).await;
        }
    }
    unread
        .iter()
        .all(|&k| array.slots().in_sync(copies[k].member))
}
