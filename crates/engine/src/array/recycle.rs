//! Reused `Arc` headers for the per-request objects of a parity write: its shared request
//! ([`Req`]) and its stripe shares' mailboxes ([`Signal`]), which a small write would
//! otherwise allocate each time (`raidd_rt::recycle`: reused only once the last handle is
//! back, emptied at once, so a request's client windows are not held); and the lists of a
//! kept stripe's contents, whose blocks pass from evicted stripes to newly kept ones.

use std::cell::RefCell;
use std::sync::Arc;

use raidd_rt::recycle::{give, keep_vec, pop_vec, take, FreeList, Table};
use raidd_rt::IoVec;

use super::parity::ChunkPiece;
use super::stripe_cache::{Cached, Parts, Signal};
use crate::iov::Req;

thread_local! {
    static REQS: FreeList<Req> = const { RefCell::new(Vec::new()) };
    static SIGNALS: FreeList<Signal> = const { RefCell::new(Vec::new()) };
}

/// An empty list for a chunk's pieces, from this thread's lists when it has one.
pub(crate) fn piece_list() -> Vec<ChunkPiece> {
    pop_vec()
}

/// Empties a chunk's pieces (their windows are released now) and keeps the list.
pub(crate) fn give_piece_list(list: Vec<ChunkPiece>) {
    // A chunk of 64 KiB gathered from 4 KiB writes comes in sixteen pieces.
    keep_vec(list, 256);
}

/// The parts taken from each stripe of a run, in stripe order.
pub(crate) type RunParts = Table<[Parts; 1]>;

/// The kept contents of each stripe of a run, in stripe order.
pub(crate) type RunKept = Table<[Vec<Cached>; 1]>;

/// An empty list for a stripe's kept contents, with room, from this thread's list when it
/// has one.
pub(crate) fn cached_list() -> Vec<Cached> {
    pop_vec()
}

/// Empties a stripe's kept contents (their buffers go back to the pool now) and keeps the
/// list for the next stripe.
pub(crate) fn give_cached_list(list: Vec<Cached>) {
    keep_vec(list, usize::MAX);
}

/// A shared request over the client's windows.
pub(crate) fn req(iov: IoVec) -> Arc<Req> {
    take(&REQS, Req::new(iov))
}

/// Gives a request handle back; its header is kept if this was the last handle.
pub(crate) fn give_req(req: Arc<Req>) {
    give(&REQS, req, || Req::new(IoVec::new()));
}

/// A fresh mailbox.
pub(crate) fn signal() -> Arc<Signal> {
    take(&SIGNALS, Signal::default())
}

/// Gives a mailbox handle back; its header is kept if this was the last handle.
pub(crate) fn give_signal(signal: Arc<Signal>) {
    give(&SIGNALS, signal, Signal::default);
}

#[cfg(test)]
mod tests {
    use super::*;
    use raidd_rt::{AlignedBuf, SharedBuf};

    #[test]
    fn a_header_is_reused_only_when_its_last_handle_is_back_and_lets_go_of_the_client() {
        let client = SharedBuf::new(AlignedBuf::zeroed(4096));
        let mut iov = IoVec::new();
        iov.push(client.slice(0..4096).unwrap());
        let r = req(iov);
        let other = r.clone();
        let at = Arc::as_ptr(&r);
        give_req(r); // not the last handle: not kept
        let fresh = req(IoVec::new());
        assert_ne!(Arc::as_ptr(&fresh), at);
        give_req(other); // the last: kept, and the client's window is released now
        assert!(
            client.slice_mut(0..4096).is_ok(),
            "the request let go of the window"
        );
        let again = req(IoVec::new());
        assert_eq!(Arc::as_ptr(&again), at);
        assert_eq!(again.len(), 0);
        drop((fresh, again));

        let s = signal();
        let at = Arc::as_ptr(&s);
        give_signal(s);
        assert_eq!(Arc::as_ptr(&signal()), at);
    }
}
