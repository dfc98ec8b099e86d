//! md's consistency policy of a running array (what keeps parity true across an unclean
//! stop), and switching it while the array serves, as `mdadm --grow --consistency-policy`
//! does: the partial parity log on or off for RAID5.
//!
//! A switch holds every write at the gate (a barrier over the whole array) and membership
//! still, so no stripe write sees the log appear or go half way through: writes in flight
//! finish under the old policy, writes after it go under the new one. Turning the log on
//! writes each member's empty log (and an empty bad-block log where it moves, see
//! `raidd_md::ppl::plan_ppl`) before any superblock names it, so a crash in between leaves
//! the old policy whole.

use raidd_md::policy::{drop_bitmap, drop_ppl, plan_bitmap, plan_ppl, SwitchError};

use super::bitmap::WriteIntent;

use std::sync::Arc;

use raidd_md::journal::BLOCK_SECTORS;

use super::gate::Barrier;
use super::journal::{stripe_log_sectors, Journal};
use super::journal_slot::RingPlace;
use super::ppl::{log_area, write_empty, Ppl};
use super::report::{ConsistencyPolicy, JournalMode};
use super::slots::Changing;
use super::{Array, MetaWrite};
use crate::error::{Error, ErrorKind, Result};
use crate::member::Member;
use crate::meta::{MemberSb, Metadata};

/// mdadm's bitmap chunk when none is given: 64 MiB per bit.
pub const DEFAULT_BITMAP_CHUNK: u32 = 64 << 20;

/// What a switch holds while it runs (see [`Consistency::quiesce`]).
struct Quiet<'a> {
    meta: &'a Metadata,
    _changing: Changing<'a>,
    _barrier: Barrier<'a>,
}

/// The array's consistency policy: read it, or switch it.
#[derive(Debug)]
pub struct Consistency<'a> {
    array: &'a Array,
}

impl Array {
    /// md's consistency policy, and the way to switch it.
    pub fn consistency(&self) -> Consistency<'_> {
        Consistency { array: self }
    }
}

impl Consistency<'_> {
    /// Attaches `member` as the write journal of an array whose journal failed or is
    /// missing (md's `--add-journal`): its superblock and an empty log first, then every
    /// superblock names it, then a fresh log takes the writes and the array is writable
    /// again. Nothing was written while the journal was away (the array was read-only), so
    /// the old log holds nothing the members lack.
    pub async fn add_journal(&self, member: Arc<dyn Member>) -> Result<()> {
        let a = self.array;
        let p = a.parts();
        let fail = |kind, why: &str| Err(Error::new(kind, format!("{}: {why}", a.name)));
        let Some(state) = p.slots.journal_state() else {
            return fail(
                ErrorKind::InvalidInput,
                "it has no write journal (md gives an array one when it is created)",
            );
        };
        if state.allows_writes() {
            return fail(
                ErrorKind::Conflict,
                "its write journal works: a new one replaces a failed or missing one",
            );
        }
        let (Some(meta), Some(pg)) = (p.meta, p.shapes.current().parity()) else {
            return fail(
                ErrorKind::InvalidInput,
                "a write journal needs md metadata and parity",
            );
        };
        let changing = p.slots.lock_changes().await;
        let seq = {
            let mut b = [0u8; 4];
            getrandom::fill(&mut b)
                .map_err(|e| Error::new(ErrorKind::Io, format!("no randomness: {e}")))?;
            u64::from(u32::from_le_bytes(b))
        };
        // Pages the write-back cache held when the journal failed are in the old log only:
        // they go to the members (unlogged, as md writes them then) before a new log starts.
        p.cache.drain(a).await?;
        let min = (2 * stripe_log_sectors(pg)).max(2 * 1024 * 2);
        let (sb, failed) = meta.attach_journal(member.clone(), seq, min).await?;
        a.superblocks_failed(failed, MetaWrite::Superblock).await;
        let ring = sb.data_size / BLOCK_SECTORS * BLOCK_SECTORS;
        let place = RingPlace {
            data_at: sb.data_offset * 512,
            ring,
            head: BLOCK_SECTORS,
            seq: seq.wrapping_add(1),
            tail: 0,
        };
        let journal = Journal::new(&a.uuid(), place);
        journal.restart(place.head, place.seq, place.tail);
        p.journal.start(journal);
        p.slots.attach_journal(&changing, member.clone());
        tracing::warn!(array = %a.name, member = %member.info().name,
            "write journal attached: the array takes writes again");
        Ok(())
    }

    /// The write journal's mode (`None`: no journal).
    pub fn journal_mode(&self) -> Option<JournalMode> {
        let p = self.array.parts();
        p.slots.journal_state().map(|_| p.cache.mode())
    }

    /// Switches the write journal between write-through and write-back while the array
    /// serves (md's `journal_mode` in sysfs). Turning write-back off takes every page the
    /// cache holds to the members before it returns.
    pub async fn set_journal_mode(&self, mode: JournalMode) -> Result<()> {
        let a = self.array;
        let p = a.parts();
        let refuse = |kind, why: &str| Err(Error::new(kind, format!("{}: {why}", a.name)));
        let (Some(journal), Some(pg)) = (p.journal.live(), p.shapes.current().parity()) else {
            return refuse(ErrorKind::InvalidInput, "it has no write journal");
        };
        match mode {
            JournalMode::WriteBack if a.is_read_only() => {
                return refuse(
                    ErrorKind::ReadOnly,
                    "it is read-only: write-back needs a working journal",
                );
            }
            JournalMode::WriteBack => p.cache.turn_on(pg, &journal).await,
            JournalMode::WriteThrough => p.cache.turn_off(a).await?,
        }
        tracing::info!(array = %a.name, "write journal mode: {mode}");
        Ok(())
    }

    /// The policy in force now.
    pub fn policy(&self) -> ConsistencyPolicy {
        let a = self.array;
        // A read-only array loads no bits, but keeps the bitmap its superblocks name.
        let bitmap_at_start = a.meta.as_ref().is_some_and(|m| m.bitmap_at_start.is_some());
        if a.geometry().redundancy() == 0 {
            ConsistencyPolicy::None
        } else if a.slots.journal_state().is_some() {
            ConsistencyPolicy::Journal
        } else if a.parts().ppl.is_some() {
            ConsistencyPolicy::Ppl
        } else if a.write_intent().is_some() || (a.read_only && bitmap_at_start) {
            ConsistencyPolicy::Bitmap
        } else {
            ConsistencyPolicy::Resync
        }
    }

    /// Switches to `to` while the array serves, as md allows: from `resync` to the
    /// partial parity log (RAID5) or to an internal bitmap of `bitmap_chunk` bytes per bit
    /// (64 MiB when `None`), and back to `resync`. Refused on a read-only array, while a
    /// sync pass runs or a resync is due, and between `ppl` and `bitmap` (md keeps one).
    pub async fn set(&self, to: ConsistencyPolicy, bitmap_chunk: Option<u32>) -> Result<()> {
        let a = self.array;
        let from = self.policy();
        let refuse = |kind, why: String| Err(Error::new(kind, format!("{}: {why}", a.name)));
        match (from, to) {
            (ConsistencyPolicy::Journal, _) | (_, ConsistencyPolicy::Journal) => refuse(
                ErrorKind::Unsupported,
                "a write journal is added when the array is created (raidd create \
                 --write-journal), and md keeps it for the array's life"
                    .to_string(),
            ),
            _ if from == to => refuse(
                ErrorKind::Conflict,
                format!("the consistency policy is already {to}"),
            ),
            (ConsistencyPolicy::None, _) | (_, ConsistencyPolicy::None) => refuse(
                ErrorKind::InvalidInput,
                format!(
                    "{} has no redundancy to keep consistent",
                    a.geometry().level()
                ),
            ),
            (ConsistencyPolicy::Resync, ConsistencyPolicy::Ppl) => self.log_on().await,
            (ConsistencyPolicy::Ppl, ConsistencyPolicy::Resync) => self.log_off().await,
            (ConsistencyPolicy::Resync, ConsistencyPolicy::Bitmap) => {
                self.bitmap_on(bitmap_chunk.unwrap_or(DEFAULT_BITMAP_CHUNK))
                    .await
            }
            (ConsistencyPolicy::Bitmap, ConsistencyPolicy::Resync) => self.bitmap_off().await,
            _ => refuse(
                ErrorKind::Conflict,
                format!(
                    "the array keeps {from}: md keeps a partial parity log or a bitmap, not \
                     both (switch to resync first)"
                ),
            ),
        }
    }

    /// The partial parity log on: every member's empty log, then the superblocks, then
    /// the log in the write path.
    async fn log_on(&self) -> Result<()> {
        let a = self.array;
        let quiet = self.quiesce().await?;
        let meta = quiet.meta;
        let signature = raidd_md::ppl::signature(&a.uuid);
        let members = meta.superblocks().await;
        // Every plan first: one member that cannot take a log refuses the switch before
        // anything is written.
        let mut plans = Vec::with_capacity(members.len());
        for (slot, m) in &members {
            let plan = plan_ppl(&m.sb).map_err(|e| refused(a, m, e))?;
            let mut sb = m.sb.clone();
            plan.apply(&mut sb);
            let area = log_area(&sb, &m.member.info().name)?;
            plans.push((*slot, m, sb, area));
        }
        let mut areas = vec![None; a.slots.len()];
        for (slot, m, sb, area) in &plans {
            let name = &m.member.info().name;
            let io = |what: &str, e: std::io::Error| {
                Error::io(format!("{}: {name}: writing {what}", a.name), e)
            };
            if sb.bblog_offset != m.sb.bblog_offset {
                crate::md_io::clear_bad_blocks(&*m.member, sb).await?;
            }
            write_empty(&*m.member, *area, signature)
                .await
                .map_err(|e| io("the partial parity log", e))?;
            if let Some(r) = *slot {
                areas[r] = Some(*area);
            }
        }
        let failed = meta
            .change_all(|sb| match plan_ppl(sb) {
                Ok(plan) => plan.apply(sb),
                Err(e) => debug_assert!(false, "planned before: {e}"),
            })
            .await;
        *a.ppl.write().expect(crate::POISONED) = Ppl::new(signature, areas);
        a.superblocks_failed(failed, MetaWrite::Superblock).await;
        tracing::info!(array = %a.name, "consistency policy resync -> ppl: stripe writes now \
            go through the partial parity log");
        debug_assert_eq!(self.policy(), ConsistencyPolicy::Ppl);
        Ok(())
    }

    /// The partial parity log off: out of the write path (no write is in flight), then out
    /// of the superblocks. An unclean stop from now on resyncs the whole array.
    async fn log_off(&self) -> Result<()> {
        let a = self.array;
        let quiet = self.quiesce().await?;
        let meta = quiet.meta;
        *a.ppl.write().expect(crate::POISONED) = None;
        let failed = meta.change_all(drop_ppl).await;
        a.superblocks_failed(failed, MetaWrite::Superblock).await;
        tracing::info!(array = %a.name, "consistency policy ppl -> resync: an unclean stop \
            now resyncs the whole array");
        debug_assert_eq!(self.policy(), ConsistencyPolicy::Resync);
        Ok(())
    }

    /// The bitmap on: every member's bitmap (a header, every bit clear: with no write in
    /// flight nothing needs a resync), then the superblocks, then the bits in the write
    /// path.
    async fn bitmap_on(&self, chunk: u32) -> Result<()> {
        let a = self.array;
        let quiet = self.quiesce().await?;
        let meta = quiet.meta;
        let members = meta.superblocks().await;
        let Some((_, first)) = members.first() else {
            return Err(a.read_only_error());
        };
        let first = &first.sb;
        let bm = crate::create::bitmap_for(first, a.geometry(), chunk, first.data_offset)?;
        let need = bm.stored_len(4096).div_ceil(512);
        let mut plans = Vec::with_capacity(members.len());
        for (_, m) in &members {
            let plan = plan_bitmap(&m.sb, need).map_err(|e| refused(a, m, e))?;
            let mut sb = m.sb.clone();
            plan.apply(&mut sb);
            plans.push((m, sb));
        }
        for (m, sb) in &plans {
            if sb.bblog_offset != m.sb.bblog_offset {
                crate::md_io::clear_bad_blocks(&*m.member, sb).await?;
            }
            crate::create::write_bitmap(&*m.member, &bm, false).await?;
        }
        let failed = meta
            .set_bitmap(Some(bm), |sb| match plan_bitmap(sb, need) {
                Ok(plan) => plan.apply(sb),
                Err(e) => debug_assert!(false, "planned before: {e}"),
            })
            .await;
        a.intent
            .replace(Some(WriteIntent::new(a.geometry(), chunk, &[])));
        a.superblocks_failed(failed, MetaWrite::Superblock).await;
        tracing::info!(array = %a.name, chunk, "consistency policy resync -> bitmap: an unclean \
            stop now resyncs only what the write-intent bitmap marks");
        debug_assert_eq!(self.policy(), ConsistencyPolicy::Bitmap);
        Ok(())
    }

    /// The bitmap off: out of the write path (no write is in flight), then out of the
    /// superblocks.
    async fn bitmap_off(&self) -> Result<()> {
        let a = self.array;
        let quiet = self.quiesce().await?;
        a.intent.replace(None);
        let failed = quiet.meta.set_bitmap(None, drop_bitmap).await;
        a.superblocks_failed(failed, MetaWrite::Superblock).await;
        tracing::info!(array = %a.name, "consistency policy bitmap -> resync: an unclean stop \
            now resyncs the whole array");
        debug_assert_eq!(self.policy(), ConsistencyPolicy::Resync);
        Ok(())
    }

    /// Holds the array still for a switch: membership locked, every write held at the gate
    /// and none in flight; refused where the array is read-only or a sync pass runs or is
    /// due.
    async fn quiesce(&self) -> Result<Quiet<'_>> {
        let a = self.array;
        let p = a.parts();
        let Some(meta) = p.meta else {
            return Err(a.read_only_error());
        };
        a.check_writable()?;
        let changing = p.slots.lock_changes().await;
        let barrier = p.gate.barrier([(0, u64::MAX / 2)]).await;
        self.check_idle()?;
        Ok(Quiet {
            meta,
            _changing: changing,
            _barrier: barrier,
        })
    }

    /// No sync pass runs and none is due (a log cannot vouch for parity a resync has yet
    /// to make true).
    fn check_idle(&self) -> Result<()> {
        let a = self.array;
        let busy = |why: String| {
            Err(Error::new(
                ErrorKind::Conflict,
                format!("{}: {why}: switch the consistency policy after it", a.name),
            ))
        };
        if let Some(pass) = a.passes.progress() {
            return busy(format!("a {} is running", pass.kind));
        }
        if a.passes.needs_resync() {
            return busy("the array was not shut down cleanly and awaits its resync".into());
        }
        Ok(())
    }
}

/// A switch member `m`'s superblock cannot take, named.
fn refused(a: &Array, m: &MemberSb, e: SwitchError) -> Error {
    Error::new(
        ErrorKind::Conflict,
        format!("{}: {}: {e}", a.name, m.member.info().name),
    )
}
