//! Rebuilding a stripe's missing blocks from the others: pure, on buffers.

use raidd_layout::{StripeMap, StripeRole};
use raidd_parity::Lost;
use raidd_rt::AlignedBuf;
use smallvec::SmallVec;

use crate::error::{Error, ErrorKind, Result};

/// Members of a stripe in a fixed order: data chunks, then P, then Q.
pub(super) fn member_of_slot(map: &StripeMap, i: usize) -> usize {
    let k = map.data.len();
    match i {
        i if i < k => map.data[i],
        i if i == k => map.p,
        _ => map.q.expect("slot beyond P on RAID5"),
    }
}

/// Index of data chunk `dd` in the order parity code wants (Q coefficient order for RAID6).
pub(crate) fn q_index(map: &StripeMap, dd: usize) -> usize {
    if map.q.is_some() {
        usize::from(map.q_coef[dd])
    } else {
        dd
    }
}

/// Rebuilds the missing blocks of a stripe in place. `blocks[member]` holds each present
/// member's contents over the same rows; missing ones (None) are filled.
pub(crate) fn rebuild_blocks(
    map: &StripeMap,
    blocks: &mut [Option<AlignedBuf>],
    len: usize,
) -> Result<()> {
    let k = map.data.len();
    let raid6 = map.q.is_some();
    let mut lost_idx: SmallVec<[(StripeRole, usize); 2]> = SmallVec::new();
    for i in 0..k + 1 + usize::from(raid6) {
        let m = member_of_slot(map, i);
        if blocks[m].is_none() {
            let role = map.role_of(m);
            let idx = match role {
                StripeRole::Data(dd) => q_index(map, dd),
                _ => 0,
            };
            lost_idx.push((role, idx));
            blocks[m] = Some(AlignedBuf::zeroed(len));
        }
    }
    let lost = match lost_idx.as_slice() {
        [] => return Ok(()),
        [(StripeRole::Data(_), i)] => Lost::Data(*i),
        [(StripeRole::P, _)] => Lost::P,
        [(StripeRole::Q, _)] => Lost::Q,
        [(StripeRole::Data(_), i), (StripeRole::Data(_), j)] => Lost::DataData(*i, *j),
        [(StripeRole::Data(_), i), (StripeRole::P, _)] => Lost::DataP(*i),
        [(StripeRole::Data(_), i), (StripeRole::Q, _)] => Lost::DataQ(*i),
        [(StripeRole::P, _), (StripeRole::Q, _)] => Lost::PQ,
        _ => {
            return Err(Error::new(
                ErrorKind::Io,
                "more blocks lost in a stripe than parity covers",
            ))
        }
    };
    if !raid6 && !matches!(lost, Lost::Data(_) | Lost::P) {
        return Err(Error::new(
            ErrorKind::Io,
            "more blocks lost in a stripe than parity covers",
        ));
    }
    // Borrow every block mutably at once, in parity order.
    let mut data: Vec<Option<&mut [u8]>> = (0..k).map(|_| None).collect();
    let mut p = None;
    let mut q = None;
    for (m, b) in blocks.iter_mut().enumerate() {
        let Some(b) = b.as_mut() else { continue };
        match map.role_of(m) {
            StripeRole::Data(dd) => data[q_index(map, dd)] = Some(&mut b[..]),
            StripeRole::P => p = Some(&mut b[..]),
            StripeRole::Q => q = Some(&mut b[..]),
        }
    }
    let mut data: Vec<&mut [u8]> = data
        .into_iter()
        .map(|d| d.expect("every block present"))
        .collect();
    let p = p.expect("P block present");
    raidd_parity::reconstruct(&mut data, p, q, lost);
    Ok(())
}
