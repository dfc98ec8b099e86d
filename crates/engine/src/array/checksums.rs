//! The array's side of its members' checksum tags (`member::ChecksummedMember`): verifying
//! and tagging are the members' own affair, below the level paths. The array says when its
//! superblocks are clean and dirty, so that each member's tag header says so too (a clean
//! stop leaves tags the next start trusts, and a crash of raidd's is told from writes by
//! another); and a member joining it gets tags like the others'. Re-deriving suspect tags
//! is `rederive`'s.

use std::sync::Arc;

use super::slots::Slots;
use crate::error::{Error, Result};
use crate::member::{Member, TagFacts};
use crate::meta::Metadata;

/// After the superblocks say clean at `events`: each member with tags writes its dirty
/// tag pages and a clean tag header. One that cannot (a write started meanwhile, tags still
/// suspect, an I/O error) stays dirty, and the next start does not trust its tags.
pub(super) async fn mark_clean(slots: &Slots, array: &str, events: u64) {
    for role in 0..slots.len() {
        let Some(member) = slots.member(role) else {
            continue;
        };
        let Some(tags) = member.checksums() else {
            continue;
        };
        match tags.close(events).await {
            Ok(true) => {}
            Ok(false) => {
                tracing::debug!(
                    array,
                    role,
                    "checksum tags stay dirty: a write came in, or tags are still being re-derived"
                )
            }
            Err(e) => tracing::warn!(array, role, member = %member.info().name,
                "checksum tags not marked clean ({e}): the next start re-derives them"),
        }
    }
}

/// After the superblocks say dirty: each member's tag header says dirty at the same event
/// count, written to or not. One that cannot write it is left to the next start, which
/// then does not trust its tags (the header's count is older).
pub(super) async fn mark_dirty(slots: &Slots, meta: &Metadata) {
    let events = meta.events().await;
    let members: Vec<Arc<dyn Member>> = (0..slots.len()).filter_map(|r| slots.member(r)).collect();
    let marks = members.iter().map(|m| async move {
        let Some(tags) = m.checksums() else { return };
        if let Err(e) = tags.dirty_at(events).await {
            tracing::warn!(member = %m.info().name,
                "checksum tag header not marked dirty ({e}): the next start re-derives its tags");
        }
    });
    futures::future::join_all(marks).await;
}

/// A member with tags in a slot, if the array has checksums.
fn tagged_member(slots: &Slots) -> Option<Arc<dyn Member>> {
    (0..slots.len())
        .filter_map(|r| slots.member(r))
        .find(|m| m.checksums().is_some())
}

/// Whether the array's members carry checksum tags.
pub(super) fn tagged(slots: &Slots) -> bool {
    tagged_member(slots).is_some()
}

/// A member joining the array (added, a spare taking a slot, a replacement): what its
/// superblock is to say, and the member as the array holds it: with checksum tags like the
/// others' where the array has them (a spare of the array has its own already).
pub(super) async fn joining(
    meta: &Metadata,
    slots: &Slots,
    member: Arc<dyn Member>,
) -> Result<(Arc<dyn Member>, TagFacts)> {
    let like = tagged_member(slots);
    let facts = meta.joining(&*member, like.is_some()).await?;
    let member = match like.as_ref().and_then(|m| m.checksums()) {
        Some(tags) if member.checksums().is_none() => {
            let name = member.info().name.clone();
            tags.joining(member, &facts)
                .map_err(|e| Error::io(format!("{name}: its checksum tags"), e))?
        }
        _ => member,
    };
    Ok((member, facts))
}
