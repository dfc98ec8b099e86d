//! Membership changes: failing, removing and adding members, spares, and which member is
//! where. Each change looks at the slots, writes the superblocks, then changes the slots,
//! under the array's membership lock. A member added to a degraded array takes a free slot
//! as *recovering*; `recovery` rebuilds it.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use raidd_md::DevRole;

use super::pass::Added;
use super::{Array, SlotState};
use crate::error::{Error, ErrorKind, Result};
use crate::member::Member;

impl Array {
    pub(super) fn check_writable(&self) -> Result<()> {
        if self.read_only {
            return Err(Error::new(
                ErrorKind::ReadOnly,
                format!("{} is read-only", self.name),
            ));
        }
        Ok(())
    }

    /// Names of every member the array holds: in its slots, its spares, and failed members
    /// not yet removed.
    pub fn member_names(&self) -> Vec<String> {
        let mut v: Vec<String> = (0..self.slots.len())
            .filter_map(|r| self.member(r).map(|m| m.info().name.clone()))
            .collect();
        v.extend(super::names(&self.spares_list));
        v.extend(super::names(&self.detached));
        v
    }

    /// The slot of the member called `name` (as [`Member::info`] names it).
    pub fn role_of(&self, name: &str) -> Option<usize> {
        (0..self.slots.len()).find(|&r| self.member(r).is_some_and(|m| m.info().name == name))
    }

    /// Fails a working member on request (`raidd fail`): as an I/O error would.
    pub async fn fail_member(&self, role: usize) -> Result<()> {
        self.check_writable()?;
        match self.slot_state(role) {
            SlotState::InSync | SlotState::Recovering => {}
            s => {
                return Err(Error::new(
                    ErrorKind::InvalidInput,
                    format!("{}: slot {role} is {s:?}, not a working member", self.name),
                ))
            }
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
        let _membership = self.membership.lock().await;
        let take = |l: &std::sync::Mutex<Vec<Arc<dyn Member>>>| {
            let mut v = l.lock().expect(crate::POISONED);
            let i = v.iter().position(|m| m.info().name == name)?;
            Some(v.remove(i))
        };
        if let Some(m) = take(&self.detached) {
            if let Some(meta) = &self.meta {
                meta.forget_failed(&m).await;
            }
            return Ok(m);
        }
        if let Some(m) = take(&self.spares_list) {
            return Ok(m);
        }
        let Some(role) = self.role_of(name) else {
            return Err(Error::new(
                ErrorKind::NotFound,
                format!("{name} is not a member of {}", self.name),
            ));
        };
        if self.slot_state(role) != SlotState::Faulty {
            return Err(Error::new(
                ErrorKind::Conflict,
                format!("{name} is working in {}; fail it first", self.name),
            ));
        }
        let m = self
            .take_slot_member(role)
            .expect("a faulty slot holds its member");
        self.slots[role]
            .state
            .store(SlotState::Missing as u8, Ordering::Release);
        if let Some(meta) = &self.meta {
            meta.forget_failed(&m).await;
        }
        Ok(m)
    }

    fn take_slot_member(&self, role: usize) -> Option<Arc<dyn Member>> {
        self.slots[role].member.take()
    }

    /// Adds a member (`raidd add`, or a spare claimed on failure). It takes the first slot
    /// that is missing or whose member failed (the failed member stays listed until
    /// removed) and starts as recovering; with no such slot it becomes a spare. The caller
    /// runs [`Array::recover`] for a recovering slot.
    ///
    /// A former member of this array goes back to its own slot if that is free, and if it
    /// missed nothing the write-intent bitmap does not mark, its recovery rebuilds only
    /// the marked chunks (md's re-add; [`Array::recovering_by_bitmap`]).
    pub async fn add_member(&self, member: Arc<dyn Member>) -> Result<Added> {
        let member = self.admit(member);
        self.check_writable()?;
        self.check_alive()?;
        let _membership = self.membership.lock().await;
        let Some(meta) = &self.meta else {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!("{} has no md metadata to record a new member in", self.name),
            ));
        };
        if self.geometry.redundancy() == 0 {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "{} is {}: it has no redundancy to rebuild a member from",
                    self.name,
                    self.geometry.level()
                ),
            ));
        }
        let name = member.info().name.clone();
        if self.member_names().contains(&name) {
            return Err(Error::new(
                ErrorKind::Conflict,
                format!("{name} is already part of {}", self.name),
            ));
        }
        let is_free =
            |r: usize| matches!(self.slot_state(r), SlotState::Missing | SlotState::Faulty);
        // A former member of this array goes back to its own slot when that is free.
        let old = crate::md_io::examine(&*member).await.ok();
        let own = old
            .as_ref()
            .filter(|sb| sb.set_uuid == self.uuid)
            .and_then(|sb| match sb.own_role() {
                DevRole::Active(r) if usize::from(r) < self.slots.len() => Some(usize::from(r)),
                _ => None,
            })
            .filter(|&r| is_free(r));
        let free = own.or_else(|| (0..self.slots.len()).find(|&r| is_free(r)));
        let Some(role) = free else {
            let failed = meta.add_member(None, member.clone(), None).await?.failed;
            self.spares_list.lock().expect(crate::POISONED).push(member);
            tracing::info!(array = %self.name, member = %name, "added as a spare");
            self.superblocks_failed(failed).await;
            return Ok(Added::Spare);
        };
        let detached = if self.slot_state(role) == SlotState::Faulty {
            self.take_slot_member(role)
        } else {
            None
        };
        // Its data is where it was only if the data area does not move (checked by `meta`).
        let by_bitmap_at = match (&old, own) {
            (Some(sb), Some(r))
                if r == role && self.may_recover_by_bitmap(meta, &*member, sb).await =>
            {
                Some(sb.data_offset)
            }
            _ => None,
        };
        let added = match meta
            .add_member(Some(role), member.clone(), by_bitmap_at)
            .await
        {
            Ok(x) => x,
            Err(e) => {
                if let Some(d) = detached {
                    self.slots[role].member.replace(Some(d));
                }
                return Err(e);
            }
        };
        if let Some(d) = detached {
            self.detached.lock().expect(crate::POISONED).push(d);
        }
        let slot = &self.slots[role];
        slot.data_offset.store(added.data_offset, Ordering::Relaxed);
        slot.recovered.store(0, Ordering::Release);
        let by_bitmap = added.by_bitmap;
        slot.by_bitmap.store(by_bitmap, Ordering::Release);
        // Its superblock carries no devflags (`Metadata::add_member`): not write-mostly.
        slot.write_mostly.store(false, Ordering::Relaxed);
        slot.member.replace(Some(member));
        slot.io.reset();
        slot.state
            .store(SlotState::Recovering as u8, Ordering::Release);
        if by_bitmap {
            tracing::info!(array = %self.name, member = %name, role, "re-added: recovering the chunks its bitmap marks");
        } else {
            tracing::info!(array = %self.name, member = %name, role, "added; recovery needed");
        }
        self.superblocks_failed(added.failed).await;
        Ok(Added::Recovering(role))
    }

    /// Whether a former member of this slot, with superblock `sb`, missed nothing but the
    /// chunks the write-intent bitmap marks (md's rule for a re-add): it was in sync when it
    /// left (no recovery offset), and no bit has been cleared since (its events are at
    /// least the bitmap's events_cleared, which clearing raises first). Not while a resync
    /// is due: the bits then also stand for chunks the resync must visit. Nor with bad
    /// blocks in its log: the kernel never wrote there, bit or not.
    async fn may_recover_by_bitmap(
        &self,
        meta: &crate::meta::Metadata,
        member: &dyn Member,
        sb: &raidd_md::Superblock,
    ) -> bool {
        if self.intent.is_none() || self.needs_resync() {
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

    /// Whether slot `role` recovers only the chunks the write-intent bitmap marks (a member
    /// added back to its own slot, see [`Array::add_member`]).
    pub fn recovering_by_bitmap(&self, role: usize) -> bool {
        self.slots
            .get(role)
            .is_some_and(|s| s.by_bitmap.load(Ordering::Acquire))
    }

    /// Takes a spare of this array (one assembled with md's spare role, or added while the
    /// array was whole) into a free slot. Returns the slot to recover, if one was taken.
    pub async fn claim_own_spare(&self) -> Result<Option<usize>> {
        let free = (0..self.slots.len())
            .any(|r| matches!(self.slot_state(r), SlotState::Missing | SlotState::Faulty));
        if !free {
            return Ok(None);
        }
        let spare = {
            let mut v = self.spares_list.lock().expect(crate::POISONED);
            if v.is_empty() {
                return Ok(None);
            }
            v.remove(0)
        };
        match self.add_member(spare).await? {
            Added::Recovering(r) => Ok(Some(r)),
            Added::Spare => Ok(None),
        }
    }
}
