//! FileMember on different filesystems: tmpfs members run inline, others through io_uring;
//! both move the same bytes, with futures from the per-thread pool. (FUSE members go to
//! kernel workers: `crates/cli/tests/hostile.rs` has one hang.)
#![allow(clippy::unwrap_used)]

use raidd_engine::member::{FileMember, OpenOptions};
use raidd_engine::Member;
use raidd_rt::{AlignedBuf, Dispatch, IoVec, IoVecMut, SharedBuf};

fn round_trip(dir: &std::path::Path) -> Dispatch {
    let path = dir.join("m.img");
    FileMember::create_image(&path, 4 << 20).unwrap();
    let m = FileMember::open(&path, OpenOptions::default()).unwrap();
    let how = m.dispatch();
    raidd_rt::block_on(async move {
        let data: Vec<u8> = (0..1 << 20).map(|i| (i * 13 % 251) as u8).collect();
        let src = SharedBuf::new(AlignedBuf::from_slice(&data));
        let mut iov = IoVec::new();
        iov.push(src.slice(0..1 << 20).unwrap());
        let w = m.write(65536, iov);
        assert!(w.is_pooled(), "a file member's write fits the future pool");
        w.await.unwrap();
        m.flush().await.unwrap();
        let dst = SharedBuf::new(AlignedBuf::zeroed(1 << 20));
        let mut iov = IoVecMut::new();
        iov.push(dst.slice_mut(0..1 << 20).unwrap());
        let r = m.read(65536, iov);
        assert!(r.is_pooled(), "a file member's read fits the future pool");
        let (r, iov) = r.await;
        r.unwrap();
        drop(iov);
        assert!(dst.with(|b| b == &data[..]), "bytes differ");
    });
    how
}

#[test]
fn tmpfs_members_run_inline_and_others_do_not() {
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    assert_eq!(round_trip(shm.path()), Dispatch::Inline, "a tmpfs member");
    let disk = tempfile::tempdir_in("/var/tmp").unwrap();
    assert_eq!(
        round_trip(disk.path()),
        Dispatch::Ring,
        "a member on a disk filesystem goes through io_uring"
    );
}
