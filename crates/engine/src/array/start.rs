//! Starting an array's logs before it serves: the partial parity log (`ppl_recover.rs`)
//! and the write journal (`journal_replay.rs`) recover what an unclean stop left, and
//! each starts afresh. A read-only array is left alone: it writes nothing.

use raidd_md::journal::scan::Cursor;
use raidd_md::journal::BLOCK_SECTORS;

use super::journal::Journal;
use super::journal_replay::JournalRecovered;
use super::journal_replay::{empty_block, plan_unit, read_unit, restart_point, Replay};
use super::member_io::Owner;
use super::ppl_recover;
use super::{Array, MetaWrite};
use crate::error::{Error, ErrorKind, Result};
use crate::member::write_bytes;

impl Array {
    /// Starts the partial parity log and the write journal, where the array keeps one. True
    /// when a log made the array consistent (a dirty start is then safe degraded too, as
    /// md starts a dirty degraded array with PPL or a journal).
    pub(crate) async fn start_logs(&self) -> Result<bool> {
        if self.is_read_only() {
            return Ok(false);
        }
        let ppl = start_ppl(self).await?;
        let journal = start_journal(self).await?;
        Ok(ppl || journal)
    }
}

/// Starts the partial parity log, as md's `ppl_load` does: after an unclean stop, recovers
/// each member's newest log unit, and when that applied entries and refused none the array
/// is consistent again and is marked clean; then every log starts empty.
async fn start_ppl(a: &Array) -> Result<bool> {
    let p = a.parts();
    let Some(ppl) = p.ppl else {
        return Ok(false);
    };
    if let Some(meta) = p.meta.filter(|m| m.is_dirty()) {
        let r = ppl_recover::recover(a, &ppl, a.name()).await;
        tracing::warn!(array = %a.name(), entries = r.entries, blocks = r.blocks,
            not_applied = r.not_applied, degraded = a.is_degraded(),
            "not shut down cleanly: recovered from the partial parity log");
        ppl.recovered(r);
        if r.entries > 0 && r.not_applied == 0 {
            a.superblocks_failed(meta.mark_clean().await, MetaWrite::Superblock)
                .await;
            p.passes.resync_done();
        }
    }
    for role in 0..p.slots.len() {
        let Some(member) = p.slots.member(role) else {
            continue;
        };
        if !p.slots.takes_writes(role) {
            continue;
        }
        if let Err(e) = ppl.reset_member(&*member, role).await {
            a.fail_slot_with(role, Some(&member), &e).await;
        }
    }
    a.check_alive()?;
    Ok(true)
}

/// Starts the write journal, as md's `r5l_load_log` does: replays the log from its tail
/// (every start, clean or not: replaying what reached the slots writes it again), starts
/// a fresh log past it, and puts the journal in the write path. After an unclean stop the
/// replay made every row written since the tail consistent, so the array is marked clean.
async fn start_journal(a: &Array) -> Result<bool> {
    let p = a.parts();
    let (Some(place), Some(member)) = (p.journal.place(), p.slots.journal_member()) else {
        return Ok(false);
    };
    let uuid_sum = raidd_md::journal::uuid_checksum(&a.uuid());
    let mut cur = Cursor::new(place.ring, place.tail);
    let mut r = JournalRecovered::default();
    loop {
        let unit = match read_unit(&*member, place.data_at, &cur, uuid_sum).await {
            Ok(u) => u,
            Err(e) => return Err(journal_failed(a, &member, e).await),
        };
        let Ok((meta, pages)) = unit else { break };
        r.units += 1;
        cur.advance(&meta);
        let Some(pg) = p.shapes.current().parity() else {
            return Err(Error::new(
                ErrorKind::BadMetadata,
                format!("{}: a write journal on an array without parity", a.name()),
            ));
        };
        let plan = plan_unit(pg, &meta, pages);
        for step in plan {
            apply(a, step, &mut r, meta.seq).await?;
        }
    }
    let fresh = {
        let mut b = [0u8; 4];
        getrandom::fill(&mut b)
            .map_err(|e| Error::new(ErrorKind::Io, format!("no randomness: {e}")))?;
        u64::from(u32::from_le_bytes(b))
    };
    let (at, seq) = restart_point(&cur, fresh);
    a.flush_members(|_| true).await?;
    let block = empty_block(uuid_sum, seq, at);
    let wrote = match write_bytes(&*member, place.data_at + at * 512, block).await {
        Ok(()) => member.flush().await,
        Err(e) => Err(e),
    };
    if let Err(e) = wrote {
        return Err(journal_failed(a, &member, e).await);
    }
    if let Some(meta) = p.meta {
        match meta.set_journal_tail(at).await {
            Ok(failed) => a.superblocks_failed(failed, MetaWrite::Superblock).await,
            Err(e) => return Err(journal_failed(a, &member, e).await),
        }
    }
    let journal = Journal::new(&a.uuid(), place);
    journal.restart((at + BLOCK_SECTORS) % place.ring, seq.wrapping_add(1), at);
    journal.set_recovered(r);
    p.journal.start(journal);
    let dirty = p.meta.is_some_and(|m| m.is_dirty());
    tracing::info!(array = %a.name(), units = r.units, rows = r.rows, data_pages = r.data_pages,
        skipped = r.skipped, dirty, degraded = a.is_degraded(),
        "write journal started: replayed its log from the tail");
    if let (true, Some(meta)) = (dirty && r.skipped == 0, p.meta) {
        a.superblocks_failed(meta.mark_clean().await, MetaWrite::Superblock)
            .await;
        p.passes.resync_done();
    }
    a.check_alive()?;
    Ok(true)
}

/// Writes one step of a unit's replay.
async fn apply(a: &Array, step: Replay, r: &mut JournalRecovered, seq: u64) -> Result<()> {
    match step {
        Replay::Row(pages) => {
            let slots = a.slots();
            for (role, sector, page) in pages {
                let (Some(m), true) = (
                    slots.member(role),
                    slots.in_sync_at(role, sector + BLOCK_SECTORS),
                ) else {
                    continue; // a slot not in sync is rebuilt whole later
                };
                let at = slots.member_offset(role, sector);
                let buf = raidd_rt::AlignedBuf::from_slice(&page);
                if let Err(e) = write_bytes(&*m, at, buf).await {
                    a.fail_member_io(role, &m, &e).await;
                }
            }
            a.check_alive()?;
            r.rows += 1;
        }
        Replay::Data { sector, page } => {
            a.write_buf(sector * 512, raidd_rt::AlignedBuf::from_slice(&page))
                .await?;
            r.data_pages += 1;
        }
        Replay::Skip { payload, why } => {
            tracing::warn!(array = %a.name(), seq, payload, "journal payload not replayed: {why}");
            r.skipped += 1;
        }
    }
    Ok(())
}

/// The journal failed while starting: the array turns read-only, and the start says why.
async fn journal_failed(
    a: &Array,
    member: &std::sync::Arc<dyn crate::member::Member>,
    e: std::io::Error,
) -> Error {
    use super::journal::JournalHost;
    a.fail_journal(member, &e).await;
    Error::io(
        format!(
            "{}: the write journal failed while starting",
            member.info().name
        ),
        e,
    )
}
