//! Passes that compare redundancy with data: check (count mismatches, md's mismatch_cnt),
//! repair (also rewrite them) and resync (rewrite redundancy from data everywhere, after an
//! unclean shutdown: seed 004 asks for resync and recovery to share their machinery, and
//! they do: the same windows, barriers, limits and progress).
//!
//! Mirrors: every copy is read and compared with the first; repair and resync write the
//! first copy over the others (md does the same: there is no telling which copy is right).
//! Parity: the parity is computed from the data and compared with what the members hold;
//! repair and resync write the computed parity. For RAID6 a mismatch in both P and Q that
//! one data member explains is reported with that member's name.

use std::ops::Range;
use std::sync::atomic::Ordering;
use std::time::Instant;

use raidd_layout::{Geometry, Level, StripeRole, SECTOR_SIZE};
use raidd_rt::{AlignedBuf, SharedBuf};
use smallvec::SmallVec;

use super::host::Host;
use super::member_io;
use super::parity::Blocks;
use super::pass::{SyncKind, SyncLimits, SyncProgress};
use super::passes::{SyncGuard, Throttle};
use super::{Array, MetaWrite};
use crate::error::{Error, ErrorKind, Result};
use crate::iov::Batch;

/// Unit of comparison: md compares (and counts) 4 KiB pages.
const BLOCK: usize = 4096;
/// At most this many mismatch locations are logged per pass.
const LOG_LIMIT: u64 = 32;

impl Array {
    /// Runs a check, repair or resync over the whole array while it serves I/O. Returns the
    /// sectors found inconsistent. `progress(done, total)` follows it. Needs every member in
    /// sync: a degraded array has nothing to compare (and resync waits for recovery).
    pub async fn scrub(
        &self,
        kind: SyncKind,
        limits: SyncLimits,
        mut progress: impl FnMut(u64, u64),
    ) -> Result<u64> {
        assert!(
            !matches!(kind, SyncKind::Recovery | SyncKind::Replace),
            "recovery and replace have their own passes"
        );
        if kind != SyncKind::Check {
            self.check_writable()?;
        }
        self.check_alive()?;
        if !self.can_scrub_now() {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "{} is degraded: a {kind} of parity needs every member (recover first)",
                    self.name()
                ),
            ));
        }
        let parts = self.parts();
        // Mirrors scrub degraded (the copies left are compared); a member lost during the
        // pass ends it.
        let lost = parts.slots.not_in_sync().len();
        let (total, mut step) = scrub_extent(self, kind, limits.window_bytes)?;
        let p = parts.passes.begin(self.name(), kind, None, total, 0)?;
        let guard = SyncGuard::new(parts.passes, p.clone(), None);
        tracing::info!(array = %self.name(), "{kind} started");
        // A pass that writes keeps the array dirty until it ends (safe mode sees it in the
        // sync slot, registered above); in turn, so an idle marking in progress is not missed.
        if let (Some(meta), true) = (parts.meta, kind != SyncKind::Check) {
            self.superblocks_failed(meta.mark_dirty_in_turn().await, MetaWrite::Superblock)
                .await;
            super::checksums::mark_dirty(parts.slots, meta).await;
            self.check_alive()?;
        }
        let mut throttle = Throttle::new(limits, || self.parts().counters.foreground(), 0);
        let mut pos = 0;
        let started = Instant::now();
        // With a write-intent bitmap a resync only visits the chunks whose bit is set (in
        // the same space: member sectors for parity, array sectors for mirrors).
        let only = bitmap_chunks(self, kind);
        if let Some((_, bit_sectors)) = &only {
            // Windows of whole bitmap chunks (and whole stripes), so clean ones are skipped.
            let layout_chunk = u64::from(self.geometry().chunk_sectors()).max(1);
            step = (*bit_sectors).max(layout_chunk);
        }
        while pos < total {
            self.check_alive()?;
            if parts.slots.not_in_sync().len() > lost {
                return Err(Error::new(
                    ErrorKind::Io,
                    format!("{}: a member failed during the {kind}", self.name()),
                ));
            }
            if p.cancelled() {
                return Err(Error::new(
                    ErrorKind::Interrupted,
                    format!("{}: {kind} stopped at sector {pos}", self.name()),
                ));
            }
            throttle.pace(pos, &p).await;
            if p.cancelled() {
                continue; // reported at the top of the loop
            }
            raidd_rt::yield_now().await;
            let end = (pos + step).min(total);
            if let Some((set, _)) = &only {
                let chunks = parts.intent.chunk_range(&(pos..end));
                if !set[chunks].iter().any(|&b| b) {
                    pos = end;
                    p.done.store(pos, Ordering::Relaxed);
                    passed(self, kind, pos);
                    continue;
                }
            }
            scrub_window(self, pos..end, kind, &p).await?;
            pos = end;
            p.done.store(pos, Ordering::Relaxed);
            passed(self, kind, pos);
            progress(pos * SECTOR_SIZE, total * SECTOR_SIZE);
        }
        let found = p.mismatches();
        tracing::info!(
            array = %self.name(),
            mismatch_sectors = found,
            seconds = started.elapsed().as_secs_f64(),
            "{kind} finished"
        );
        if kind == SyncKind::Resync {
            parts.passes.resync_done();
        }
        guard.finish();
        Ok(found)
    }

    /// Whether the level compares anything in a scrub.
    pub fn can_scrub(&self) -> bool {
        !matches!(self.geometry().level(), Level::Linear | Level::Raid0)
    }

    /// Whether a scrub (check, repair, resync) can run now: parity levels need every member
    /// (with one missing there is nothing left to compare parity with); mirrors compare the
    /// copies they have left, as md resyncs a RAID1 that has lost one of three.
    pub fn can_scrub_now(&self) -> bool {
        self.can_scrub() && !(self.geometry().level().has_parity() && self.is_degraded())
    }
}

/// Reads and writes from clients so far (a pass yields to them above its minimum speed).
/// The sectors a pass of `kind` covers (member sectors of whole stripes on parity
/// arrays, array sectors on mirrors) and its window.
fn scrub_extent(array: &Array, kind: SyncKind, window_bytes: u64) -> Result<(u64, u64)> {
    let shape = array.parts().shapes.current();
    match shape.geometry() {
        Geometry::Linear(_) | Geometry::Raid0(_) => Err(Error::new(
            ErrorKind::InvalidInput,
            format!(
                "{} is {}: it has no redundancy to {kind}",
                array.name(),
                shape.level()
            ),
        )),
        Geometry::Parity(pg) => Ok((
            pg.dev_sectors / u64::from(pg.chunk_sectors) * u64::from(pg.chunk_sectors),
            shape.sync_window(window_bytes),
        )),
        g => Ok((g.array_sectors(), shape.sync_window(window_bytes))),
    }
}

/// With a write-intent bitmap a resync only visits the chunks whose bit is set (in the
/// same space: member sectors for parity, array sectors for mirrors): which are.
fn bitmap_chunks(array: &Array, kind: SyncKind) -> Option<(Vec<bool>, u64)> {
    if kind != SyncKind::Resync {
        return None;
    }
    let (set, bit_sectors) = array.parts().intent.set_chunks()?;
    tracing::info!(
        array = %array.name(),
        "resyncing {} of {} bitmap chunks",
        set.iter().filter(|&&b| b).count(),
        set.len()
    );
    Some((set, bit_sectors))
}

/// One window of a pass, under a gate barrier over what it covers: its parity stripes
/// concurrently, or its mirrored extent.
async fn scrub_window(
    array: &Array,
    window: Range<u64>,
    kind: SyncKind,
    p: &SyncProgress,
) -> Result<()> {
    let (pos, end) = (window.start, window.end);
    let gate = array.parts().gate;
    match array.geometry() {
        Geometry::Parity(pg) => {
            let chunk = u64::from(pg.chunk_sectors);
            let per = pg.stripe_data_sectors();
            let stripes = pos / chunk..end.div_ceil(chunk);
            let _barrier = gate
                .barrier([(stripes.start * per, (stripes.end - stripes.start) * per)])
                .await;
            futures::future::try_join_all(stripes.map(|s| scrub_stripe(array, s, kind, p))).await?;
        }
        _ => {
            let _barrier = gate.barrier([(pos, end - pos)]).await;
            scrub_mirrors(array, pos, end - pos, kind, p).await?;
        }
    }
    Ok(())
}

/// A pass of `kind` has covered everything below `pos` (member sectors on parity
/// arrays): a resync's parity there is consistent from now on.
fn passed(array: &Array, kind: SyncKind, pos: u64) {
    if kind == SyncKind::Resync && matches!(array.geometry(), Geometry::Parity(_)) {
        array.parts().passes.resynced_to(pos);
    }
}

/// Compares (and for repair/resync, rewrites) every copy of array sectors
/// `[sector, sector + count)`.
async fn scrub_mirrors(
    array: &Array,
    sector: u64,
    count: u64,
    kind: SyncKind,
    p: &SyncProgress,
) -> Result<()> {
    let slots = array.slots();
    for piece in array.geometry().pieces(sector, count) {
        // The copies in sync, in layout order: the first is the one reads choose before a
        // resync (`readable_copy`) and the one the others are made equal to. A piece with
        // one copy left (degraded) has nothing to compare.
        let copies: SmallVec<[raidd_layout::Loc; 4]> = piece
            .copies
            .iter()
            .copied()
            .filter(|l| slots.in_sync_at(l.member, l.sector + piece.sectors))
            .collect();
        if copies.len() < 2 {
            continue;
        }
        let len = (piece.sectors * SECTOR_SIZE) as usize;
        let bufs: Vec<SharedBuf> = copies
            .iter()
            .map(|_| SharedBuf::new(AlignedBuf::for_overwrite(len)))
            .collect();
        let mut batch = Batch::default();
        for (loc, b) in copies.iter().zip(&bufs) {
            batch.push(
                loc.member,
                slots.member_offset(loc.member, loc.sector),
                b.slice_mut(0..len).expect("fresh"),
            );
        }
        let results = member_io::issue_scratch_reads_keeping(array, batch.into_ios()).await;
        let lost = || {
            Error::new(
                ErrorKind::Io,
                format!("{}: a member failed during the {kind}", array.name()),
            )
        };
        if results.iter().any(|(_, r, kept)| r.is_err() && !kept) {
            return Err(lost());
        }
        // By member: a batch's I/O may come back in another order than the copies'.
        let unread: SmallVec<[usize; 2]> = (0..copies.len())
            .filter(|&k| {
                results
                    .iter()
                    .any(|(role, r, _)| *role == copies[k].member && r.is_err())
            })
            .collect();
        let mut bufs: Vec<AlignedBuf> = bufs
            .into_iter()
            .map(|b| b.try_into_inner().expect("scratch released"))
            .collect();
        // Blocks a copy could not give are rewritten from another copy's (md's check and
        // repair both correct read errors) before the copies are compared.
        if !unread.is_empty()
            && !super::correct::mend_copies(array, &copies, &mut bufs, &unread).await
        {
            return Err(lost());
        }
        let first = &bufs[0];
        let mut fixes = Vec::new();
        for (k, other) in bufs.iter().enumerate().skip(1) {
            let bad = differing_sectors(first, other);
            if bad > 0 {
                if kind != SyncKind::Resync {
                    p.add_mismatches(bad);
                    log_mismatch(
                        array,
                        p,
                        format!(
                            "sectors {}..{}: copy on {} differs from the first copy",
                            piece.array_sector,
                            piece.array_sector + piece.sectors,
                            member_name(array, copies[k].member)
                        ),
                    );
                }
                fixes.push(copies[k]);
            }
        }
        if kind != SyncKind::Check {
            for loc in fixes {
                member_io::write_data(array, loc.member, loc.sector, first.clone()).await?;
            }
        }
    }
    Ok(())
}

/// Compares one stripe's parity with its data (and for repair/resync, rewrites it).
async fn scrub_stripe(array: &Array, stripe: u64, kind: SyncKind, p: &SyncProgress) -> Result<()> {
    let pg = Host::parity_shape(array);
    let chunk = u64::from(pg.chunk_sectors);
    let map = pg.stripe_map(stripe);
    let blocks = read_stripe(array, stripe, kind).await?;
    let block = |m: usize| blocks[m].as_ref().expect("every member read");
    let len = (chunk * SECTOR_SIZE) as usize;
    let k = map.data.len();
    let mut data: Vec<&[u8]> = vec![&[]; k];
    for (dd, &m) in map.data.iter().enumerate() {
        data[super::parity::q_index(&map, dd)] = &block(m)[..];
    }
    let mut pc = AlignedBuf::zeroed(len);
    let mut qc = map.q.map(|_| AlignedBuf::zeroed(len));
    match qc.as_mut() {
        Some(q) => raidd_parity::gen_pq(&data, &mut pc, q),
        None => raidd_parity::xor_gen(&mut pc, &data),
    }
    let p_bad = differing_sectors(&pc, block(map.p));
    let q_bad = match (map.q, &qc) {
        (Some(qm), Some(q)) => differing_sectors(q, block(qm)),
        _ => 0,
    };
    if p_bad == 0 && q_bad == 0 {
        return Ok(());
    }
    let at = pg.member_sector(stripe, 0);
    if kind != SyncKind::Resync {
        // A 4 KiB row counts once, whether P, Q or both disagree there.
        let rows = mismatched_rows(
            &pc,
            block(map.p),
            qc.as_deref(),
            map.q.map(|q| &block(q)[..]),
        );
        p.add_mismatches(rows);
        let culprit = match (map.q, &qc) {
            (Some(qm), Some(q)) => blame(&map, &pc, q, block(map.p), block(qm)),
            _ => None,
        };
        let who = match culprit {
            Some(m) => format!("; {} holds the wrong data", member_name(array, m)),
            None => String::new(),
        };
        log_mismatch(
            array,
            p,
            format!(
                "stripe {stripe} (member sectors {at}..{}): parity does not match the data{who}",
                at + chunk
            ),
        );
    }
    if kind != SyncKind::Check {
        if p_bad > 0 {
            member_io::write_data(array, map.p, at, pc).await?;
        }
        if let (Some(qm), Some(q)) = (map.q, qc) {
            if q_bad > 0 {
                member_io::write_data(array, qm, at, q).await?;
            }
        }
    }
    Ok(())
}

/// Every member's chunk of `stripe`, for a pass of `kind` to compare: blocks that could not
/// be read are rebuilt from the others and rewritten first (md's check and repair both
/// correct read errors), except by a resync, whose parity is not trusted. An error when a
/// member is (or becomes) not in sync: it holds data that writes since have skipped, and
/// comparing with it would count false mismatches, a repair write parity made from it.
async fn read_stripe(array: &Array, stripe: u64, kind: SyncKind) -> Result<Blocks> {
    let lost = || {
        Error::new(
            ErrorKind::Io,
            format!("{}: a member failed during the {kind}", array.name()),
        )
    };
    if !array.slots().not_in_sync().is_empty() {
        return Err(lost());
    }
    let pio = array
        .parts()
        .parity
        .expect("parity stripes on a parity array");
    let pg = Host::parity_shape(array);
    let chunk = u64::from(pg.chunk_sectors);
    let all: SmallVec<[usize; 16]> = (0..array.slots().len()).collect();
    // Rows a member could not read are mended first, as a write mends them.
    let blocks = if kind == SyncKind::Resync {
        pio.read_rows(array, stripe, &(0..chunk), &all).await?
    } else {
        pio.read_rows_mended(array, stripe, &(0..chunk), &all)
            .await?
    };
    if blocks.iter().any(Option::is_none) || !array.slots().not_in_sync().is_empty() {
        return Err(lost());
    }
    Ok(blocks)
}

fn member_name(array: &Array, role: usize) -> String {
    array
        .slots()
        .member(role)
        .map(|m| m.info().name.clone())
        .unwrap_or_else(|| format!("slot {role}"))
}

fn log_mismatch(array: &Array, p: &SyncProgress, what: String) {
    if p.logged.fetch_add(1, Ordering::Relaxed) < LOG_LIMIT {
        tracing::warn!(array = %array.name(), "{}: {what}", p.kind);
    }
}

/// RAID6: the member whose wrong data explains both P's and Q's mismatch, if one does
/// (or P or Q itself when only that one is wrong).
fn blame(
    map: &raidd_layout::StripeMap,
    pc: &[u8],
    qc: &[u8],
    ps: &[u8],
    qs: &[u8],
) -> Option<usize> {
    let p_ok = pc == ps;
    let q_ok = qc == qs;
    match (p_ok, q_ok) {
        (true, true) => return None,
        (false, true) => return Some(map.p),
        (true, false) => return map.q,
        (false, false) => {}
    }
    // Data member z off by e: P is off by e, Q by g^z * e, the same z for every byte.
    let mut z: Option<usize> = None;
    for i in 0..pc.len() {
        let pd = pc[i] ^ ps[i];
        let qd = qc[i] ^ qs[i];
        match (pd, qd) {
            (0, 0) => continue,
            (0, _) | (_, 0) => return None,
            _ => {}
        }
        let ratio = raidd_parity::gf::div(qd, pd);
        let here = (0..map.data.len()).find(|&j| raidd_parity::gf::exp2(j) == ratio)?;
        if z.is_some_and(|z| z != here) {
            return None;
        }
        z = Some(here);
    }
    let z = z?;
    (0..map.data.len())
        .find(|&dd| super::parity::q_index(map, dd) == z)
        .map(|dd| map.data[dd])
        .filter(|&m| matches!(map.role_of(m), StripeRole::Data(_)))
}

/// Sectors of the 4 KiB blocks in which `a` and `b` differ (md counts whole pages).
fn differing_sectors(a: &[u8], b: &[u8]) -> u64 {
    a.chunks(BLOCK)
        .zip(b.chunks(BLOCK))
        .filter(|(x, y)| x != y)
        .map(|(x, _)| (x.len() / SECTOR_SIZE as usize) as u64)
        .sum()
}

/// Sectors of the 4 KiB rows in which P or Q differs from what the data gives.
fn mismatched_rows(pc: &[u8], ps: &[u8], qc: Option<&[u8]>, qs: Option<&[u8]>) -> u64 {
    let mut n = 0;
    for (i, (a, b)) in pc.chunks(BLOCK).zip(ps.chunks(BLOCK)).enumerate() {
        let q_differs = match (qc, qs) {
            (Some(qc), Some(qs)) => {
                let r = i * BLOCK..(i * BLOCK + a.len());
                qc[r.clone()] != qs[r]
            }
            _ => false,
        };
        if a != b || q_differs {
            n += (a.len() / SECTOR_SIZE as usize) as u64;
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A RAID6 stripe with one data block wrong is blamed on that block's member, for every
    /// position; P or Q alone wrong is blamed on P or Q; two wrong blocks on nobody.
    #[test]
    fn raid6_blames_the_wrong_member() {
        let g = raidd_layout::Geometry::parity(
            Level::Raid6,
            6,
            raidd_layout::ParityLayout::LeftSymmetric,
            8,
            64,
        )
        .unwrap();
        let pg = g.as_parity().unwrap();
        for stripe in 0..6 {
            let map = pg.stripe_map(stripe);
            let k = map.data.len();
            let mut data: Vec<Vec<u8>> = (0..k)
                .map(|i| {
                    (0..1024)
                        .map(|b| (b * 7 + i * 13 + stripe as usize) as u8)
                        .collect()
                })
                .collect();
            let refs =
                |d: &Vec<Vec<u8>>| -> Vec<Vec<u8>> { (0..k).map(|dd| d[dd].clone()).collect() };
            let pq = |d: &Vec<Vec<u8>>| {
                let mut ordered: Vec<&[u8]> = vec![&[]; k];
                for dd in 0..k {
                    ordered[super::super::parity::q_index(&map, dd)] = &d[dd];
                }
                let (mut p, mut q) = (vec![0u8; 1024], vec![0u8; 1024]);
                raidd_parity::gen_pq(&ordered, &mut p, &mut q);
                (p, q)
            };
            let (ps, qs) = pq(&data);
            for dd in 0..k {
                let mut bad = refs(&data);
                bad[dd][100] ^= 0x5a;
                bad[dd][700] ^= 0x01;
                let (pc, qc) = pq(&bad);
                assert_eq!(blame(&map, &pc, &qc, &ps, &qs), Some(map.data[dd]));
            }
            let mut wrong_p = ps.clone();
            wrong_p[3] ^= 1;
            assert_eq!(blame(&map, &ps, &qs, &wrong_p, &qs), Some(map.p));
            let mut wrong_q = qs.clone();
            wrong_q[3] ^= 1;
            assert_eq!(blame(&map, &ps, &qs, &ps, &wrong_q), map.q);
            data[0][5] ^= 1;
            data[1][6] ^= 2;
            let (pc, qc) = pq(&data);
            assert_eq!(blame(&map, &pc, &qc, &ps, &qs), None);
            assert_eq!(blame(&map, &ps, &qs, &ps, &qs), None);
        }
    }

    #[test]
    fn counts_whole_blocks() {
        let a = vec![0u8; 3 * BLOCK];
        let mut b = a.clone();
        assert_eq!(differing_sectors(&a, &b), 0);
        b[5] = 1;
        b[BLOCK * 2 + 100] = 1;
        assert_eq!(differing_sectors(&a, &b), 16);
        // A short tail counts its own sectors.
        assert_eq!(differing_sectors(&a[..BLOCK + 512], &b[..BLOCK + 512]), 8);
        assert_eq!(mismatched_rows(&a, &b, Some(&a), Some(&a)), 16);
        let mut q = a.clone();
        q[BLOCK + 1] = 9;
        assert_eq!(mismatched_rows(&a, &b, Some(&a), Some(&q)), 24);
    }
}
