//! A member's failed read looked at again one 4 KiB block at a time, to find which blocks
//! still fail: what a correction rewrites (`correct.rs`, and a rebuild's sources in
//! `recovery.rs`), md's page-sized read error correction.

use raidd_layout::SECTOR_SIZE;
use raidd_rt::{IoVecMut, SharedBuf};
use smallvec::SmallVec;

use super::Array;

/// Runs of member sectors.
pub(super) type Runs = SmallVec<[std::ops::Range<u64>; 4]>;

/// Block size of a correction: md corrects 4 KiB pages.
const BLOCK_SECTORS: u64 = 8;

/// Reads member sectors of slot `role` from `sector` into `buf` again, one 4 KiB block
/// (aligned on the member) at a time; returns the runs of member sectors that still fail,
/// their bytes in `buf` left as they were. `Err` when the member was failed by a read.
/// These reads look again at an error already counted against the member's limit, and do
/// not count against it a second time.
pub(super) async fn narrow(
    array: &Array,
    role: usize,
    sector: u64,
    buf: &mut [u8],
) -> std::result::Result<Runs, ()> {
    let end = sector + buf.len() as u64 / SECTOR_SIZE;
    let mut bad = Runs::new();
    let mut s = sector;
    while s < end {
        let next = ((s / BLOCK_SECTORS + 1) * BLOCK_SECTORS).min(end);
        let len = ((next - s) * SECTOR_SIZE) as usize;
        let block = SharedBuf::new(raidd_rt::AlignedBuf::for_overwrite(len));
        let mut iov = IoVecMut::new();
        iov.push(block.slice_mut(0..len).expect("fresh buffer"));
        let at = array.slots().member_offset(role, s);
        let member = array.slots().member_ref(role);
        let counts = array.slots().io(role);
        counts.issued(false, len as u64);
        let (r, iov) = member.read(at, iov).await;
        drop(iov);
        match r {
            Ok(()) => {
                let off = ((s - sector) * SECTOR_SIZE) as usize;
                let data = block.try_into_inner().expect("read released the buffer");
                buf[off..off + len].copy_from_slice(&data);
            }
            Err(e) => {
                counts.failed_read(&e);
                if !crate::member::medium_error(&e) {
                    array.fail_slot_with(role, Some(&member), &e).await;
                    return Err(());
                }
                match bad.last_mut() {
                    Some(last) if last.end == s => last.end = next,
                    _ => bad.push(s..next),
                }
            }
        }
        s = next;
    }
    debug_assert!(
        bad.iter()
            .all(|r| sector <= r.start && r.start < r.end && r.end <= end),
        "the runs that fail lie in what was read again"
    );
    Ok(bad)
}
