//! The array's side of its members' checksum tags (`member::ChecksummedMember`): verifying
//! and tagging are the members' own affair, below the level paths; the array only says when
//! its superblocks are clean, so that each member's tag header says so too and a clean stop
//! leaves tags the next start trusts.

use super::slots::Slots;

/// After the superblocks say clean at `events`: each member with tags writes its dirty
/// tag pages and a clean tag header. One that cannot (a write started meanwhile, an I/O
/// error) stays dirty, and the next start re-derives its tags instead of trusting them.
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
                tracing::debug!(array, role, "checksum tags stay dirty: a write came in")
            }
            Err(e) => tracing::warn!(array, role, member = %member.info().name,
                "checksum tags not marked clean ({e}): the next start re-derives them"),
        }
    }
}
