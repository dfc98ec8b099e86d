//! A member that stops answering (a hung disk, an image on a network or FUSE filesystem that
//! no longer replies) is failed within its timeout, as an I/O error fails it: the array
//! serves degraded, reads that it held are read again into new buffers, writes go on, and a
//! hang in the middle of a superblock write fails the member too.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{verify_all, write_pattern, Model, Rng};
use raidd_engine::assemble::{assemble, examine, AssembleOptions};
use raidd_engine::create::{create, CreateSpec};
use raidd_engine::member::MemMember;
use raidd_engine::{Array, ArrayState, ErrorKind, Member, SlotState};
use raidd_lab::{FaultControl, FaultMember, FaultPlan};
use raidd_layout::Level;
use raidd_md::DevRole;
use raidd_rt::{AlignedBuf, IoVecMut, SharedBuf};

const MEMBER_BYTES: u64 = 8 << 20;
const TIMEOUT: Duration = Duration::from_millis(300);

/// Memory members behind fault injectors whose operations time out after [`TIMEOUT`].
fn members(n: usize) -> (Vec<Arc<dyn Member>>, Vec<Arc<FaultControl>>) {
    let mut ms: Vec<Arc<dyn Member>> = Vec::new();
    let mut cs = Vec::new();
    for i in 0..n {
        let mem = Arc::new(MemMember::new(format!("m{i}"), MEMBER_BYTES));
        let f = FaultMember::new(
            mem,
            FaultPlan {
                seed: i as u64,
                timeout: Some(TIMEOUT),
                ..FaultPlan::default()
            },
        );
        cs.push(f.control());
        ms.push(Arc::new(f));
    }
    (ms, cs)
}

fn spec(level: Level, members: &[Arc<dyn Member>]) -> CreateSpec {
    CreateSpec {
        name: "hang".into(),
        homehost: "test".into(),
        level,
        layout: None,
        chunk_sectors: Some(16),
        members: members.iter().cloned().map(Some).collect(),
        size_sectors: Some(4096),
        assume_clean: true,
        force: false,
        bitmap_chunk: None,
        ppl: false,
        journal: None,
        checksums: None,
    }
}

/// Writes `count` random pattern runs and returns the model.
async fn written(a: &Array, seed: u64, count: usize) -> Model {
    let mut m = Model::new(a.size_bytes() / 512, seed);
    let mut rng = Rng(seed);
    write_pattern(a, &mut m, 0, a.size_bytes() / 512).await;
    common::random_writes(a, &mut m, &mut rng, count).await;
    m
}

#[test]
fn a_member_that_stops_answering_is_failed_and_the_array_serves_degraded() {
    for (level, n) in [
        (Level::Raid1, 2),
        (Level::Raid5, 4),
        (Level::Raid6, 5),
        (Level::Raid10, 4),
    ] {
        raidd_rt::block_on(async move {
            let what = format!("{level} over {n}");
            let (ms, cs) = members(n);
            let a = create(spec(level, &ms)).await.unwrap().array;
            let mut m = written(&a, 7, 40).await;
            let victim = 1;
            cs[victim].hang();
            let start = Instant::now();
            // Reads and writes that meet the hung member wait for its timeout, fail it, and
            // then go on without it.
            verify_all(&a, &m, &format!("{what}: read with a member hung")).await;
            let mut rng = Rng(99);
            common::random_writes(&a, &mut m, &mut rng, 40).await;
            verify_all(&a, &m, &format!("{what}: after writes")).await;
            let took = start.elapsed();
            assert_eq!(a.slots().state(victim), SlotState::Faulty, "{what}");
            assert_eq!(a.status().await.state, ArrayState::Degraded, "{what}");
            assert!(
                cs[victim].hung_ops() > 0,
                "{what}: the member was asked and hung"
            );
            // Each I/O of the hung member waits at most one timeout (and one tick); once it
            // is failed nothing more goes to it.
            assert!(
                took < TIMEOUT * 4 + Duration::from_secs(2),
                "{what}: took {took:?}"
            );
            for (i, c) in cs.iter().enumerate() {
                if i != victim {
                    assert_eq!(c.hung_ops(), 0, "{what}: member {i}");
                }
            }
        });
    }
}

/// A read into the caller's windows that meets the hung member ends with `TimedOut`: the
/// member kept some of the windows, so they are not handed back whole; `read_new` reads
/// again into a new buffer and gets the data.
#[test]
fn a_read_whose_windows_a_hung_member_kept_is_read_again_into_a_new_buffer() {
    raidd_rt::block_on(async {
        let (ms, cs) = members(4);
        let a = create(spec(Level::Raid5, &ms)).await.unwrap().array;
        let m = written(&a, 3, 10).await;
        // The first data chunk of stripe 0 is on member 0 (left-symmetric).
        cs[0].hang();
        let len = 16 * 512;
        let buf = SharedBuf::new(AlignedBuf::zeroed(len));
        let mut iov = IoVecMut::new();
        iov.push(buf.slice_mut(0..len).unwrap());
        let (r, back) = a.read(0, iov).await;
        let e = r.expect_err("the member held the read");
        assert_eq!(e.kind(), ErrorKind::TimedOut, "{e}");
        let back_len: usize = back.iter().map(|w| w.len()).sum();
        assert!(
            back_len < len,
            "the windows the member kept do not come back"
        );
        drop(back);
        assert!(
            buf.slice(0..len).is_err(),
            "the buffer is still lent to the hung read"
        );
        assert_eq!(a.slots().state(0), SlotState::Faulty);
        let again = a.read_new(0, len).await.unwrap();
        let data = again.try_into_inner().unwrap();
        let bad = raidd_engine::pattern::verify(&data, 0, m.seed, |s| m.generation[s as usize]);
        assert!(bad.is_empty(), "read again: {}", bad[0]);
    });
}

/// The first write after a clean close marks the superblocks dirty; a member that hangs in
/// that superblock write is failed, the write succeeds, and the superblocks left say so.
#[test]
fn a_member_hung_in_a_superblock_write_is_failed() {
    raidd_rt::block_on(async {
        let (ms, cs) = members(4);
        let a = create(spec(Level::Raid5, &ms)).await.unwrap().array;
        let m = written(&a, 5, 5).await;
        a.close().await.unwrap();
        drop(a);
        let a = assemble(ms.clone(), AssembleOptions::default())
            .await
            .unwrap()
            .array;
        let mut m = m;
        cs[2].hang();
        write_pattern(&a, &mut m, 100, 8).await;
        assert_eq!(a.slots().state(2), SlotState::Faulty);
        verify_all(&a, &m, "after the hang").await;
        let sb = examine(&*ms[0]).await.unwrap();
        assert!(!sb.is_clean(), "marked dirty on the members left");
        assert_eq!(
            DevRole::from_raw(sb.dev_roles[2]),
            DevRole::Faulty,
            "the hung member is recorded faulty"
        );
        // Closed cleanly without it; reassembled without it (it still hangs): degraded, and
        // the data is all there.
        a.close().await.unwrap();
        drop(a);
        let survivors: Vec<_> = ms
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != 2)
            .map(|(_, m)| m.clone())
            .collect();
        let b = assemble(survivors, AssembleOptions::default())
            .await
            .unwrap()
            .array;
        assert!(b.is_degraded());
        verify_all(&b, &m, "reassembled").await;
    });
}
