//! The DMA-aligned buffer under a RAID5: every member behind a buffer from one small pool,
//! reads and writes from several tasks (read-modify-write, full stripes), a member failed
//! in the middle and a spare rebuilt while the load goes on: no read ever returns a sector
//! older than the last write that completed before it started, and at the end the array
//! holds exactly the last write of every sector.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use proptest::prelude::*;
use raidd_engine::create::{create, CreateSpec};
use raidd_engine::member::{DabMode, DabPool, MemMember};
use raidd_engine::{pattern, Added, Array, Member, SyncLimits};
use raidd_lab::{FaultMember, FaultPlan};
use raidd_layout::Level;
use raidd_rt::AlignedBuf;

const SEED: u64 = 0xdab5;
/// Per member: 1 MiB of data after md's data offset.
const MEMBER: u64 = 4 << 20;

struct Model {
    completed: Vec<u64>,
    issued: Vec<u64>,
    writing: Vec<bool>,
    next: u64,
}

fn member(i: usize, pool: &Arc<DabPool>, seed: u64) -> Arc<dyn Member> {
    let mem = Arc::new(MemMember::new(format!("m{i}"), MEMBER));
    let plan = FaultPlan {
        seed: seed ^ i as u64,
        delay_yields: Some((0, 5)),
        ..FaultPlan::default()
    };
    Arc::new(pool.wrap(Arc::new(FaultMember::new(mem, plan))))
}

/// Runs `tasks` × `ops` random requests (reads, writes, some FUA, flushes) against a RAID5
/// of four buffered members, failing member 1 and rebuilding a buffered spare half way: the
/// stale sectors seen.
fn run(seed: u64, blocks: u64, mode: DabMode) -> usize {
    let pool = DabPool::new(blocks * 16384, 16384, mode);
    let members: Vec<Option<Arc<dyn Member>>> =
        (0..4).map(|i| Some(member(i, &pool, seed))).collect();
    // The spare comes bare: the array puts it behind its buffer when it joins.
    let spare: Arc<dyn Member> = Arc::new(FaultMember::new(
        Arc::new(MemMember::new("m9", MEMBER)),
        FaultPlan {
            seed: seed ^ 9,
            delay_yields: Some((0, 5)),
            ..FaultPlan::default()
        },
    ));
    raidd_rt::block_on(async move {
        let spec = CreateSpec {
            name: "dab".into(),
            homehost: "test".into(),
            level: Level::Raid5,
            layout: None,
            chunk_sectors: Some(16),
            members,
            size_sectors: Some(1 << 11),
            assume_clean: false,
            force: true,
            bitmap_chunk: None,
            ppl: false,
            journal: None,
            checksums: None,
        };
        let a = create(spec).await.unwrap().array;
        a.set_dab(pool.clone());
        let sectors = (a.size_bytes() / 512) as usize;
        // Generation 1 everywhere first (the initial sync has made parity right).
        let mut b = AlignedBuf::zeroed(sectors * 512);
        pattern::fill(&mut b, 0, 1, SEED);
        a.write_buf(0, b).await.unwrap();
        let model = Rc::new(RefCell::new(Model {
            completed: vec![1; sectors],
            issued: vec![1; sectors],
            writing: vec![false; sectors],
            next: 2,
        }));
        let stale = Rc::new(std::cell::Cell::new(0usize));
        let tasks: Vec<_> = (0..4u64)
            .map(|t| {
                let (a, model, stale) = (a.clone(), model.clone(), stale.clone());
                raidd_rt::spawn_local(load(a, model, stale, seed ^ ((t + 1) * 0x9e37_79b9), 50))
            })
            .collect();
        // Half way through, member 1 fails and a spare is rebuilt under the load.
        for _ in 0..40 {
            raidd_rt::yield_now().await;
        }
        a.fail_member(1).await.unwrap();
        let role = match a.add_member(spare).await.unwrap() {
            Added::Recovering(r) => r,
            Added::Spare => panic!("the failed slot was free"),
        };
        a.recover(role, SyncLimits::UNLIMITED).await.unwrap();
        let behind: Vec<String> = a
            .status()
            .await
            .counters
            .dab
            .into_iter()
            .map(|d| d.member)
            .collect();
        assert!(
            behind.contains(&"m9".to_string()),
            "the spare joined behind the buffer: {behind:?}"
        );
        for t in tasks {
            t.await;
        }
        // Quiet now: every sector holds its last write.
        let back = a.read_to_buf(0, sectors * 512).await.unwrap();
        let m = model.borrow();
        let bad = pattern::verify(&back, 0, SEED, |s| m.completed[s as usize]).len();
        stale.get() + bad
    })
}

async fn load(
    a: Arc<Array>,
    model: Rc<RefCell<Model>>,
    stale: Rc<std::cell::Cell<usize>>,
    seed: u64,
    ops: usize,
) {
    let mut x = seed | 1;
    let mut rnd = move |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    let sectors = model.borrow().completed.len() as u64;
    for _ in 0..ops {
        let long = rnd(3) == 0;
        let n = 1 + rnd(if long { 96 } else { 12 });
        let first = rnd(sectors - n);
        let range = first as usize..(first + n) as usize;
        let busy = model.borrow().writing[range.clone()].iter().any(|&w| w);
        let kind = rnd(12);
        if kind == 0 {
            a.flush().await.unwrap();
        } else if kind < 5 && !busy {
            let fua = kind == 1;
            let gen = {
                let mut m = model.borrow_mut();
                let g = m.next;
                m.next += 1;
                for s in range.clone() {
                    m.issued[s] = g;
                    m.writing[s] = true;
                }
                g
            };
            let mut b = AlignedBuf::zeroed((n * 512) as usize);
            pattern::fill(&mut b, first, gen, SEED);
            a.write_buf(first * 512, b).await.unwrap();
            if fua {
                a.flush_range(first * 512, n * 512).await.unwrap();
            }
            let mut m = model.borrow_mut();
            for s in range {
                m.completed[s] = gen;
                m.writing[s] = false;
            }
        } else {
            let lo: Vec<u64> = model.borrow().completed[range.clone()].to_vec();
            let b = a
                .read_to_buf(first * 512, (n * 512) as usize)
                .await
                .unwrap();
            let hi: Vec<u64> = model.borrow().issued[range.clone()].to_vec();
            for (k, sec) in b.chunks_exact(512).enumerate() {
                let s = first + k as u64;
                if !(lo[k]..=hi[k]).any(|g| pattern::check_sector(sec, s, g, SEED).is_none()) {
                    stale.set(stale.get() + 1);
                }
            }
        }
    }
}

/// Cases to run: `RAIDD_DAB_CASES` if set, else `default`.
fn cases(default: u32) -> u32 {
    std::env::var("RAIDD_DAB_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

proptest! {
    // RAIDD_DAB_CASES runs more (the 10,000; the test command runs 24).
    #![proptest_config(ProptestConfig::with_cases(cases(24)))]
    /// Pools of one block (every fetch evicts) to more than the whole array.
    #[test]
    fn a_raid5_behind_buffers_never_reads_stale_through_failure_and_rebuild(
        seed in any::<u64>(),
        blocks in prop_oneof![Just(1u64), 2u64..8, Just(1024u64)],
    ) {
        prop_assert_eq!(run(seed, blocks, DabMode::WriteThrough), 0);
    }

    /// The same with the buffers writing back.
    #[test]
    fn a_raid5_behind_write_back_buffers_never_reads_stale_through_failure_and_rebuild(
        seed in any::<u64>(),
        blocks in prop_oneof![Just(1u64), 2u64..8, Just(1024u64)],
    ) {
        prop_assert_eq!(run(seed, blocks, DabMode::WriteBack), 0);
    }
}

/// Writes `generation` to one 4 KiB piece at the start of each of `pieces` 64 KiB steps:
/// small writes, which a write-back buffer holds.
async fn small_writes(a: &Array, pieces: u64, generation: u64, gens: &mut [u64]) {
    for k in 0..pieces {
        let at = k * 65536;
        let mut b = AlignedBuf::zeroed(4096);
        pattern::fill(&mut b, at / 512, generation, SEED);
        a.write_buf(at, b).await.unwrap();
        for s in 0..8 {
            gens[(at / 512) as usize + s] = generation;
        }
    }
}

/// Writes `generation` over the whole array in one write (around the buffer): each
/// sector's generation.
async fn fill_all(a: &Array, generation: u64) -> Vec<u64> {
    let sectors = (a.size_bytes() / 512) as usize;
    let mut b = AlignedBuf::zeroed(sectors * 512);
    pattern::fill(&mut b, 0, generation, SEED);
    a.write_buf(0, b).await.unwrap();
    vec![generation; sectors]
}

/// An array of `level` over `n` fresh memory members behind `pool` (assumed clean, 1 MiB
/// per member), with the pool attached.
async fn buffered(pool: &Arc<DabPool>, level: Level, n: usize, tag: &str) -> Arc<Array> {
    let members: Vec<Option<Arc<dyn Member>>> = (0..n)
        .map(|i| {
            let m = Arc::new(MemMember::new(format!("{tag}{i}"), MEMBER));
            Some(Arc::new(pool.wrap(m)) as Arc<dyn Member>)
        })
        .collect();
    let spec = CreateSpec {
        name: tag.into(),
        homehost: "test".into(),
        level,
        layout: None,
        chunk_sectors: Some(16),
        members,
        size_sectors: Some(1 << 11),
        assume_clean: true,
        force: true,
        bitmap_chunk: None,
        ppl: false,
        journal: None,
        checksums: None,
    };
    let a = create(spec).await.unwrap().array;
    a.set_dab(pool.clone());
    a
}

/// A write-back buffer holds writes only while the array can lose a member: failing one
/// writes back every block it held and sends later small writes straight to the members;
/// once a spare is rebuilt it holds writes again. Every sector reads back as written.
#[test]
fn write_back_holds_writes_only_while_the_array_can_lose_a_member() {
    let pool = DabPool::new(64 * 16384, 16384, DabMode::WriteBack);
    raidd_rt::block_on(async move {
        let a = buffered(&pool, Level::Raid5, 4, "w").await;
        let mut gens = fill_all(&a, 1).await;
        let sectors = gens.len();
        let pieces = a.size_bytes() / 65536;
        small_writes(&a, pieces, 2, &mut gens).await;
        assert!(pool.holds_writes() && pool.dirty_blocks() > 0, "held");
        a.fail_member(1).await.unwrap();
        assert!(!pool.holds_writes(), "degraded: nothing held");
        // The failed member's blocks go with it; the others' were written back.
        drop(a.remove_member("w1").await.unwrap());
        assert_eq!(pool.dirty_blocks(), 0, "every held block written back");
        small_writes(&a, pieces, 3, &mut gens).await;
        assert_eq!(pool.dirty_blocks(), 0, "small writes went to the members");
        let spare: Arc<dyn Member> = Arc::new(MemMember::new("w9", MEMBER));
        let role = match a.add_member(spare).await.unwrap() {
            Added::Recovering(r) => r,
            Added::Spare => panic!("the failed slot was free"),
        };
        a.recover(role, SyncLimits::UNLIMITED).await.unwrap();
        assert!(pool.holds_writes(), "redundant again");
        small_writes(&a, pieces, 4, &mut gens).await;
        assert!(pool.dirty_blocks() > 0, "held again");
        let got = a.read_to_buf(0, sectors * 512).await.unwrap();
        let bad = pattern::verify(&got, 0, SEED, |s| gens[s as usize]);
        assert!(bad.is_empty(), "{} sectors read back wrong", bad.len());
        a.close().await.unwrap();
    });
}

/// `write-back-unsafe` holds writes whatever the array's redundancy: a RAID0 gets it.
#[test]
fn write_back_unsafe_holds_writes_without_redundancy() {
    let pool = DabPool::new(64 * 16384, 16384, DabMode::WriteBackUnsafe);
    raidd_rt::block_on(async move {
        let a = buffered(&pool, Level::Raid0, 2, "u").await;
        let mut gens = fill_all(&a, 0).await;
        small_writes(&a, a.size_bytes() / 65536, 5, &mut gens).await;
        assert!(pool.holds_writes() && pool.dirty_blocks() > 0, "held");
        a.close().await.unwrap();
        assert_eq!(pool.dirty_blocks(), 0, "a clean stop writes them back");
    });
}
