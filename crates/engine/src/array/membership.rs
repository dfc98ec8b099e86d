//! Membership changes: failing, removing and adding members, and claiming spares. Each
//! change takes the slots' change lock, looks at the slots, writes the superblocks, then
//! moves the slot by one of [`Slots`](super::Slots)' transitions. A member added to a
//! degraded array takes a free slot as *recovering*; `recovery` rebuilds it.

use std::sync::Arc;

use raidd_md::DevRole;

use super::pass::Added;
use super::{Array, MetaWrite, SlotState};
use crate::error::{Error, ErrorKind, Result};
use crate::member::Member;

impl Array {
    /// Fails a working member on request (`raidd fail`): as an I/O error would.
    pub async fn fail_member(&self, role: usize) -> Result<()> {
        self.check_writable()?;
        let slots = self.slots();
        if role >= slots.len() || !slots.takes_writes(role) {
            let s = (role < slots.len()).then(|| slots.state(role));
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "{}: slot {role} is {}, not a working member",
                    self.name(),
                    s.map_or("not a slot".to_string(), |s| format!("{s:?}"))
                ),
            ));
        }
        self.fail_slot(role, &std::io::Error::other("failed by the administrator"))
            .await;
        Ok(())
    }

    /// Removes a failed member or a spare from the array (`raidd remove`) and returns it:
    /// nothing refers to it afterwards, so its device is free. Working members must be
    /// failed first.
    pub async fn remove_member(&self, name: &str) -> Result<Arc<dyn Member>> {
        self.check_writable()?;
        let p = self.parts();
        let changing = p.slots.lock_changes().await;
        if let Some((m, failed)) = p.slots.take_listed(name) {
            if let (true, Some(meta)) = (failed, p.meta) {
                meta.forget_failed(&m).await;
            }
            return Ok(m);
        }
        let Some(role) = p.slots.role_of(name) else {
            return Err(Error::new(
                ErrorKind::NotFound,
                format!("{name} is not a member of {}", self.name()),
            ));
        };
        if p.slots.state(role) != SlotState::Faulty {
            return Err(Error::new(
                ErrorKind::Conflict,
                format!("{name} is working in {}; fail it first", self.name()),
            ));
        }
        let m = p.slots.remove(&changing, role);
        if let Some(meta) = p.meta {
            meta.forget_failed(&m).await;
        }
        Ok(m)
    }

    /// Adds a member (`raidd add`, or a spare claimed on failure). It takes the first slot
    /// that is missing or whose member failed (the failed member stays listed until
    /// removed) and starts as recovering; with no such slot it becomes a spare. The caller
    /// runs [`Array::recover`] for a recovering slot.
    ///
    /// A former member of this array goes back to its own slot if that is free, and if it
    /// missed nothing the write-intent bitmap does not mark, its recovery rebuilds only
    /// the marked chunks (md's re-add; [`super::Slots::recovering_by_bitmap`]).
    pub async fn add_member(&self, member: Arc<dyn Member>) -> Result<Added> {
        let member = self.admit(member);
        self.check_writable()?;
        self.check_alive()?;
        let p = self.parts();
        let changing = p.slots.lock_changes().await;
        let Some(meta) = p.meta else {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!(
                    "{} has no md metadata to record a new member in",
                    self.name()
                ),
            ));
        };
        if self.geometry().redundancy() == 0 {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "{} is {}: it has no redundancy to rebuild a member from",
                    self.name(),
                    self.geometry().level()
                ),
            ));
        }
        let name = member.info().name.clone();
        if p.slots.names().contains(&name) {
            return Err(Error::new(
                ErrorKind::Conflict,
                format!("{name} is already part of {}", self.name()),
            ));
        }
        // A former member of this array goes back to its own slot when that is free.
        let old = crate::md_io::examine(&*member).await.ok();
        let own = old
            .as_ref()
            .filter(|sb| sb.set_uuid == self.uuid())
            .and_then(|sb| match sb.own_role() {
                DevRole::Active(r) if usize::from(r) < p.slots.len() => Some(usize::from(r)),
                _ => None,
            })
            .filter(|&r| p.slots.is_free(r));
        let free = own.or_else(|| (0..p.slots.len()).find(|&r| p.slots.is_free(r)));
        let (member, id) = super::checksums::joining(meta, p.slots, member).await?;
        let Some(role) = free else {
            let failed = meta
                .add_member(None, member.clone(), None, &id)
                .await?
                .failed;
            p.slots.add_spare(member);
            tracing::info!(array = %self.name(), member = %name, "added as a spare");
            self.superblocks_failed(failed, MetaWrite::Superblock).await;
            return Ok(Added::Spare);
        };
        // Its data is where it was only if the data area does not move (checked by `meta`).
        let by_bitmap_at = match (&old, own) {
            (Some(sb), Some(r)) if r == role && self.may_recover_by_bitmap(&*member, sb).await => {
                Some(sb.data_offset)
            }
            _ => None,
        };
        if let Some(ppl) = p.ppl {
            // Its partial parity log starts empty before any write reaches it.
            ppl.attach(&*member, role)
                .await
                .map_err(|e| Error::io(format!("{name}: writing its partial parity log"), e))?;
        }
        let added = meta
            .add_member(Some(role), member.clone(), by_bitmap_at, &id)
            .await?;
        p.slots
            .admit(&changing, role, member, added.data_offset, added.by_bitmap);
        if added.by_bitmap {
            tracing::info!(array = %self.name(), member = %name, role, "re-added: recovering the chunks its bitmap marks");
        } else {
            tracing::info!(array = %self.name(), member = %name, role, "added; recovery needed");
        }
        self.superblocks_failed(added.failed, MetaWrite::Superblock)
            .await;
        Ok(Added::Recovering(role))
    }

    /// Whether a former member of this slot, with superblock `sb`, missed nothing but the
    /// chunks the write-intent bitmap marks (md's rule for a re-add): it was in sync when it
    /// left (no recovery offset), and no bit has been cleared since (its events are at
    /// least the bitmap's events_cleared, which clearing raises first). Not while a resync
    /// is due: the bits then also stand for chunks the resync must visit. Nor with bad
    /// blocks in its log: the kernel never wrote there, bit or not.
    async fn may_recover_by_bitmap(&self, member: &dyn Member, sb: &raidd_md::Superblock) -> bool {
        let p = self.parts();
        let Some(meta) = p.meta else { return false };
        if !p.intent.is_loaded() || self.needs_resync() {
            return false;
        }
        let (events, cleared) = meta.events_and_cleared().await;
        let Some(cleared) = cleared else { return false };
        sb.feature_map & raidd_md::feature::RECOVERY_OFFSET == 0
            && sb.events >= cleared
            && sb.events <= events
            && crate::md_io::read_bad_blocks(member, sb)
                .await
                .is_ok_and(|bad| bad.is_empty())
    }

    /// Takes a spare of this array (one assembled with md's spare role, or added while the
    /// array was whole) into a free slot. Returns the slot to recover, if one was taken.
    pub async fn claim_own_spare(&self) -> Result<Option<usize>> {
        let slots = self.slots();
        if !(0..slots.len()).any(|r| slots.is_free(r)) {
            return Ok(None);
        }
        let Some(spare) = slots.take_spare() else {
            return Ok(None);
        };
        match self.add_member(spare).await? {
            Added::Recovering(r) => Ok(Some(r)),
            Added::Spare => Ok(None),
        }
    }
}
