//! One DMA-aligned buffer member (seed 000's DAB) on its own, over a member that answers
//! after a seeded number of executor turns: no read is ever stale, write-back loses nothing
//! a flush covered, the block size chosen, and the paper's four cases counted.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::sync::Arc;

use proptest::prelude::*;
use raidd_engine::member::{
    block_for, DabCounts, DabMember, DabMode, DabPool, MemMember,
    DAB_DEFAULT_BLOCK as DEFAULT_BLOCK, DAB_MAX_BLOCK as MAX_BLOCK, DAB_MIN_BLOCK as MIN_BLOCK,
};
use raidd_engine::{pattern, Member};
use raidd_lab::{FaultMember, FaultPlan};
use raidd_rt::AlignedBuf;
use std::cell::RefCell;
use std::rc::Rc;

const SIZE: u64 = 64 << 10;
const SECTORS: usize = (SIZE / 512) as usize;
const SEED: u64 = 0xdab;

/// What every sector may hold: the newest write completed before a read started, up to
/// the newest write issued by the time it ended. Writes to a sector do not overlap in
/// time (the order of overlapping writes is the device's, and not what is tested here).
/// `durable`: the oldest write the member itself must hold after a crash (one a
/// completed flush, or FUA, covered).
struct Model {
    completed: Vec<u64>,
    issued: Vec<u64>,
    writing: Vec<bool>,
    durable: Vec<u64>,
    next: u64,
}

fn written(first: u64, sectors: u64, gen: u64) -> AlignedBuf {
    let mut b = AlignedBuf::zeroed((sectors * 512) as usize);
    pattern::fill(&mut b, first, gen, SEED);
    b
}

/// Sectors of `b` (from sector `first`) holding none of the generations `lo[k]..=hi[k]`.
fn outside(b: &[u8], first: u64, lo: &[u64], hi: &[u64]) -> usize {
    b.chunks_exact(512)
        .enumerate()
        .filter(|&(k, sec)| {
            !(lo[k]..=hi[k])
                .any(|g| pattern::check_sector(sec, first + k as u64, g, SEED).is_none())
        })
        .count()
}

/// What a run saw: stale sectors read, sectors the member lost across a crash at the
/// end (older than a flush or FUA made durable), and the counters.
struct Outcome {
    stale: usize,
    lost: usize,
    counts: DabCounts,
}

/// `ops` run by `tasks` concurrent tasks over one DAB member of a pool of `blocks`
/// blocks of 4 KiB, the member answering after a seeded number of executor turns:
/// reads, writes (some FUA), flushes, whole-member reads. Every read must return, for
/// each sector, a generation no older than the last write completed before it started;
/// at the end the buffer is thrown away unflushed (a crash) and the member must hold,
/// for each sector, a generation no older than the last one a flush or FUA covered.
fn run(seed: u64, tasks: usize, ops: usize, blocks: u64, mode: DabMode) -> Outcome {
    let mem = Arc::new(MemMember::new("m", SIZE));
    // Generation 1 everywhere to start.
    mem.write_sync(0, &written(0, SIZE / 512, 1));
    let plan = FaultPlan {
        seed,
        delay_yields: Some((0, 6)),
        ..FaultPlan::default()
    };
    let faulty: Arc<dyn Member> = Arc::new(FaultMember::new(mem.clone(), plan));
    let pool = DabPool::new(blocks * 4096, 4096, mode);
    let dab = Rc::new(pool.wrap(faulty));
    let model = Rc::new(RefCell::new(Model {
        completed: vec![1; SECTORS],
        issued: vec![1; SECTORS],
        writing: vec![false; SECTORS],
        durable: vec![1; SECTORS],
        next: 2,
    }));
    let stale = Rc::new(std::cell::Cell::new(0usize));
    raidd_rt::block_on({
        let (dab, model, stale) = (dab.clone(), model.clone(), stale.clone());
        async move {
            let handles: Vec<_> = (0..tasks as u64)
                .map(|t| {
                    let (dab, model, stale) = (dab.clone(), model.clone(), stale.clone());
                    let x = seed ^ (t + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                    raidd_rt::spawn_local(task(dab, model, stale, x, ops))
                })
                .collect();
            for h in handles {
                h.await;
            }
        }
    });
    let counts = dab.dab().expect("a DAB member counts");
    // The crash: whatever the buffer holds unwritten is gone.
    drop(dab);
    let mut image = vec![0u8; SIZE as usize];
    mem.read_sync(0, &mut image);
    let m = model.borrow();
    let lost = outside(&image, 0, &m.durable, &m.issued);
    Outcome {
        stale: stale.get(),
        lost,
        counts,
    }
}

/// One task of [`run`]: `ops` random requests from the xorshift state `x`.
async fn task(
    dab: Rc<DabMember>,
    model: Rc<RefCell<Model>>,
    stale: Rc<std::cell::Cell<usize>>,
    mut x: u64,
    ops: usize,
) {
    let mut rnd = move |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    for _ in 0..ops {
        // Mostly small reads, some of them across a block boundary, and writes of a
        // sector to two blocks.
        let first = rnd(SECTORS as u64 - 24);
        let long = rnd(4) == 0;
        let sectors = 1 + rnd(if long { 20 } else { 7 });
        let range = first as usize..(first + sectors) as usize;
        let busy = model.borrow().writing[range.clone()].iter().any(|&w| w);
        match rnd(12) {
            0..=2 if !busy => {
                let fua = rnd(4) == 0;
                let gen = {
                    let mut m = model.borrow_mut();
                    let g = m.next;
                    m.next += 1;
                    for s in range.clone() {
                        m.issued[s] = m.issued[s].max(g);
                        m.writing[s] = true;
                    }
                    g
                };
                raidd_engine::member::write_bytes(&*dab, first * 512, written(first, sectors, gen))
                    .await
                    .expect("write");
                {
                    let mut m = model.borrow_mut();
                    for s in range.clone() {
                        m.completed[s] = m.completed[s].max(gen);
                        m.writing[s] = false;
                    }
                }
                if fua {
                    // As the array does FUA: the write, then a flush of its member.
                    dab.flush().await.expect("flush");
                    let mut m = model.borrow_mut();
                    for s in range {
                        m.durable[s] = m.durable[s].max(gen);
                    }
                }
            }
            3 => {
                // The whole member, going around the buffer.
                raidd_engine::member::read_bytes(&*dab, 0, SIZE as usize)
                    .await
                    .expect("read");
            }
            4 => {
                let before = model.borrow().completed.clone();
                dab.flush().await.expect("flush");
                let mut m = model.borrow_mut();
                for (d, b) in m.durable.iter_mut().zip(before) {
                    *d = (*d).max(b);
                }
            }
            _ => {
                let lo: Vec<u64> = model.borrow().completed[range.clone()].to_vec();
                let b =
                    raidd_engine::member::read_bytes(&*dab, first * 512, (sectors * 512) as usize)
                        .await
                        .expect("read");
                let hi: Vec<u64> = model.borrow().issued[range.clone()].to_vec();
                stale.set(stale.get() + outside(&b, first, &lo, &hi));
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
    // RAIDD_DAB_CASES runs more (the 10,000; the test command runs 64).
    #![proptest_config(ProptestConfig::with_cases(cases(64)))]
    /// Concurrent reads, writes (some FUA), flushes and whole-member reads, with a pool
    /// of one to four blocks (so blocks are evicted all the time) or more than the
    /// member, writing through: never a stale sector, and nothing flushed is lost.
    #[test]
    fn no_read_is_ever_stale(seed in any::<u64>(), blocks in prop_oneof![1u64..5, Just(32u64)]) {
        let o = run(seed, 4, 60, blocks, DabMode::WriteThrough);
        prop_assert_eq!((o.stale, o.lost), (0, 0));
        prop_assert_eq!(o.counts.absorbed, 0);
    }

    /// The same, writing back: never a stale sector, and after a crash at the end the
    /// member holds everything a flush or FUA covered.
    #[test]
    fn write_back_is_never_stale_and_loses_nothing_flushed(
        seed in any::<u64>(),
        blocks in prop_oneof![1u64..5, Just(32u64)],
    ) {
        let o = run(seed, 4, 60, blocks, DabMode::WriteBack);
        prop_assert_eq!((o.stale, o.lost), (0, 0));
    }
}

#[test]
fn the_block_is_the_smallest_largest_transfer_as_a_power_of_two() {
    assert_eq!(block_for([None, None], DEFAULT_BLOCK), DEFAULT_BLOCK);
    assert_eq!(block_for([Some(128 << 10), None], 4096), 128 << 10);
    // max_sectors_kb 1280 (a common NVMe value) and 512: the smaller, as it is.
    assert_eq!(block_for([Some(1280 << 10), Some(512 << 10)], 0), 512 << 10);
    // Not a power of two: down to one (a simulated drive of 277 sectors).
    assert_eq!(block_for([Some(277 * 512)], 0), 128 << 10);
    assert_eq!(block_for([Some(512)], 0), MIN_BLOCK);
    assert_eq!(block_for([Some(1 << 40)], 0), MAX_BLOCK);
}

proptest! {
    #[test]
    fn a_chosen_block_is_a_power_of_two_no_larger_than_any_transfer(
        t in proptest::collection::vec(proptest::option::of(1u64..1 << 30), 0..5),
    ) {
        let b = block_for(t.iter().copied(), DEFAULT_BLOCK);
        prop_assert!(b.is_power_of_two() && (MIN_BLOCK..=MAX_BLOCK).contains(&b));
        for m in t.iter().flatten() {
            prop_assert!(b <= (*m).max(MIN_BLOCK));
        }
        if let Some(m) = t.iter().flatten().min() {
            prop_assert!(2 * b > (*m).clamp(MIN_BLOCK, MAX_BLOCK), "the largest that fits");
        }
    }
}

#[test]
fn sequential_small_reads_cost_one_member_read_per_block() {
    let mem = Arc::new(MemMember::new("m", SIZE));
    mem.write_sync(0, &written(0, SIZE / 512, 1));
    let plan = FaultPlan::default();
    let faulty = Arc::new(FaultMember::new(mem, plan));
    let control = faulty.control();
    let pool = DabPool::new(1 << 20, 16384, DabMode::WriteThrough);
    let dab = pool.wrap(faulty);
    let bad = raidd_rt::block_on(async move {
        let mut bad = 0;
        // 1 KiB reads through the whole member.
        for i in 0..SIZE / 1024 {
            let b = raidd_engine::member::read_bytes(&dab, i * 1024, 1024)
                .await
                .unwrap();
            bad += pattern::verify(&b, i * 2, SEED, |_| 1).len();
        }
        (bad, dab.dab().expect("a DAB member counts"))
    });
    assert_eq!(bad.0, 0);
    let c = bad.1;
    // 64 KiB in 16 KiB blocks: four member reads; each block's first request missed,
    // the other 15 hit.
    assert_eq!(control.reads(), 4);
    assert_eq!((c.misses, c.hits, c.head_hits, c.tail_hits), (4, 60, 0, 0));
    assert_eq!(c.prefetched_bytes, SIZE);
}

#[test]
fn the_four_cases_are_counted_as_the_paper_has_them() {
    let mem: Arc<dyn Member> = Arc::new(MemMember::new("m", SIZE));
    let pool = DabPool::new(1 << 20, 4096, DabMode::WriteThrough);
    let dab = pool.wrap(mem);
    let c = raidd_rt::block_on(async move {
        let r = |off: u64, len: usize| raidd_engine::member::read_bytes(&dab, off, len);
        r(0, 1024).await.unwrap(); // neither: fetch block 0 (miss)
        r(1024, 1024).await.unwrap(); // both in block 0 (hit)
        r(3584, 1024).await.unwrap(); // head in block 0, tail in 1 (head hit)
        r(3 * 4096 + 3584, 1024).await.unwrap(); // neither: blocks 3 and 4 (miss)
        r(2 * 4096 + 3584, 1024).await.unwrap(); // tail in block 3 (tail hit)
        r(0, 8192).await.unwrap(); // two blocks: around the buffer
        dab.dab().expect("a DAB member counts")
    });
    assert_eq!((c.hits, c.head_hits, c.tail_hits, c.misses), (1, 1, 1, 2));
    assert_eq!(c.bypassed, 1);
    assert_eq!(c.prefetched_bytes, 5 * 4096);
}

#[test]
fn a_failing_member_read_is_reported_not_cached() {
    let mem = Arc::new(MemMember::new("m", SIZE));
    let plan = FaultPlan {
        read_error_ppm: 1_000_000,
        ..FaultPlan::default()
    };
    let dab = DabPool::new(1 << 20, 4096, DabMode::WriteThrough)
        .wrap(Arc::new(FaultMember::new(mem, plan)));
    let r = raidd_rt::block_on(async move {
        let a = raidd_engine::member::read_bytes(&dab, 0, 1024)
            .await
            .is_err();
        let b = raidd_engine::member::read_bytes(&dab, 1024, 1024)
            .await
            .is_err();
        (a, b, dab.dab().expect("a DAB member counts"))
    });
    assert!(r.0 && r.1, "errors come through");
    assert_eq!(r.2.hits, 0, "nothing was installed");
}
