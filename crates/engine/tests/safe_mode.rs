//! md's safe mode: an idle array is marked clean, so a crash of an idle server needs no
//! resync (and a degraded parity array still starts); the next write marks it dirty again
//! before any data reaches a member, however writes and the marking interleave.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::cell::RefCell;
use std::io;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{Model, Rng};
use raidd_engine::assemble::{assemble, examine, AssembleOptions};
use raidd_engine::create::{create, CreateSpec};
use raidd_engine::member::{MemMember, MemberFuture};
use raidd_engine::{
    Array, ArrayState, Gather, Member, MemberInfo, SyncKind, SyncLimits, DEFAULT_CACHE_BYTES,
};
use raidd_lab::{FaultMember, FaultPlan};
use raidd_layout::Level;
use raidd_rt::{IoVec, IoVecMut};

const MIB: u64 = 1 << 20;

/// A memory member that checks, as each data write reaches it, that its own superblock says
/// the array is dirty (a clean one over data in flight is what safe mode must never leave).
#[derive(Debug)]
struct Witness {
    inner: Arc<MemMember>,
    /// Where the data area starts (bytes); superblock and bitmap writes lie below.
    data_from: AtomicU64,
    data_writes: AtomicU64,
    over_clean: AtomicU64,
}

impl Witness {
    fn new(name: &str, size: u64) -> Witness {
        Witness {
            inner: Arc::new(MemMember::new(name.to_string(), size)),
            data_from: AtomicU64::new(u64::MAX),
            data_writes: AtomicU64::new(0),
            over_clean: AtomicU64::new(0),
        }
    }

    async fn arm(&self) {
        let sb = examine(&*self.inner).await.unwrap();
        self.data_from.store(sb.data_offset * 512, Ordering::SeqCst);
    }
}

impl Member for Witness {
    fn info(&self) -> &MemberInfo {
        self.inner.info()
    }
    fn read(&self, offset: u64, iov: IoVecMut) -> MemberFuture<'_, (io::Result<()>, IoVecMut)> {
        self.inner.read(offset, iov)
    }
    fn write(&self, offset: u64, iov: IoVec) -> MemberFuture<'_, io::Result<()>> {
        MemberFuture::new(async move {
            if offset >= self.data_from.load(Ordering::SeqCst) {
                self.data_writes.fetch_add(1, Ordering::SeqCst);
                if examine(&*self.inner).await.unwrap().is_clean() {
                    self.over_clean.fetch_add(1, Ordering::SeqCst);
                }
            }
            self.inner.write(offset, iov).await
        })
    }
    fn flush(&self) -> MemberFuture<'_, io::Result<()>> {
        self.inner.flush()
    }
    fn discard(&self, offset: u64, len: u64) -> MemberFuture<'_, io::Result<()>> {
        self.inner.discard(offset, len)
    }
}

fn spec(level: Level, members: Vec<Option<Arc<dyn Member>>>, bitmap: bool) -> CreateSpec {
    CreateSpec {
        name: "safe".into(),
        homehost: "test".into(),
        level,
        layout: None,
        chunk_sectors: Some(128),
        members,
        size_sectors: None,
        assume_clean: true,
        force: false,
        bitmap_chunk: bitmap.then_some(64 << 10),
        ppl: false,
        journal: None,
        checksums: None,
    }
}

fn mems(n: usize) -> Vec<Arc<MemMember>> {
    (0..n)
        .map(|i| Arc::new(MemMember::new(format!("mem:{i}"), 16 * MIB)))
        .collect()
}

fn dyns(m: &[Arc<MemMember>]) -> Vec<Arc<dyn Member>> {
    m.iter().map(|m| m.clone() as Arc<dyn Member>).collect()
}

/// Whether every member's superblock says clean (all of them must agree).
async fn on_disk_clean(members: &[Arc<MemMember>], what: &str) -> bool {
    let mut states = Vec::new();
    for m in members {
        states.push(examine(&**m).await.unwrap().is_clean());
    }
    assert!(
        states.iter().all(|&c| c == states[0]),
        "{what}: members disagree: {states:?}"
    );
    states[0]
}

/// Calls safe mode until it marks the array clean (the first call after writes only notes
/// that the count moved).
async fn idle_out(a: &Array, what: &str) {
    for _ in 0..3 {
        if a.mark_clean_if_idle(Duration::ZERO).await {
            return;
        }
    }
    panic!("{what}: an idle array was not marked clean");
}

fn block(g: u8) -> raidd_rt::AlignedBuf {
    raidd_rt::AlignedBuf::from_slice(&[g; 4096])
}

async fn expect_blocks(a: &Array, blocks: &[(u64, u8)], what: &str) {
    for &(at, g) in blocks {
        let got = a.read_to_buf(at, 4096).await.unwrap();
        assert!(got.iter().all(|&b| b == g), "{what}: block at {at}");
    }
}

/// Idle arrays are marked clean and a crash then costs nothing; writes mark them dirty
/// again; a degraded parity array idle at the crash starts without being asked.
#[test]
fn an_idle_array_is_marked_clean_and_a_crash_then_needs_no_resync() {
    for (level, n, bitmap) in [
        (Level::Raid1, 2, false),
        (Level::Raid5, 4, false),
        (Level::Raid5, 3, true),
        (Level::Raid6, 5, false),
        (Level::Raid10, 4, true),
    ] {
        raidd_rt::block_on(async move {
            let what = format!("{level} over {n}, bitmap {bitmap}");
            let raw = mems(n);
            let all = dyns(&raw);
            let a = create(spec(level, all.iter().cloned().map(Some).collect(), bitmap))
                .await
                .unwrap()
                .array;
            a.write_buf(0, block(1)).await.unwrap();
            assert!(!on_disk_clean(&raw, &what).await, "{what}: written");
            assert!(
                !a.mark_clean_if_idle(Duration::from_secs(3600)).await,
                "{what}: not idle for an hour yet"
            );
            assert!(!on_disk_clean(&raw, &what).await, "{what}");
            idle_out(&a, &what).await;
            assert!(on_disk_clean(&raw, &what).await, "{what}: idle");
            assert_eq!(a.status().await.state, ArrayState::Clean, "{what}");
            assert!(
                !a.mark_clean_if_idle(Duration::ZERO).await,
                "{what}: already clean, nothing to write"
            );
            a.write_buf(8192, block(2)).await.unwrap();
            assert!(!on_disk_clean(&raw, &what).await, "{what}: written again");
            assert_eq!(a.status().await.state, ArrayState::Active, "{what}");
            idle_out(&a, &what).await;
            drop(a); // crash while idle

            let b = assemble(all.clone(), AssembleOptions::default())
                .await
                .unwrap()
                .array;
            assert!(!b.needs_resync(), "{what}: crashed while marked clean");
            expect_blocks(&b, &[(0, 1), (8192, 2)], &what).await;
            drop(b);

            // Degraded: written, idle, crashed; it starts (parity levels without the flag).
            let survivors = all[1..].to_vec();
            let c = assemble(survivors.clone(), AssembleOptions::default())
                .await
                .unwrap()
                .array;
            assert!(c.is_degraded(), "{what}");
            c.write_buf(16384, block(3)).await.unwrap();
            assert!(
                !on_disk_clean(&raw[1..], &what).await,
                "{what}: degraded, written"
            );
            idle_out(&c, &what).await;
            drop(c);
            let d = assemble(survivors, AssembleOptions::default())
                .await
                .unwrap_or_else(|e| panic!("{what}: idle at the crash, yet refused: {e}"))
                .array;
            assert!(!d.needs_resync(), "{what}");
            expect_blocks(&d, &[(0, 1), (8192, 2), (16384, 3)], &what).await;
        });
    }
}

/// An array that still needs its resync, or runs a pass that writes, stays dirty however
/// long it is idle.
#[test]
fn a_resync_due_or_a_repair_running_keeps_the_array_dirty() {
    raidd_rt::block_on(async {
        let raw = mems(4);
        let all = dyns(&raw);
        let a = create(spec(
            Level::Raid5,
            all.iter().cloned().map(Some).collect(),
            false,
        ))
        .await
        .unwrap()
        .array;
        a.write_buf(0, block(1)).await.unwrap();
        drop(a); // crash while dirty
        let b = assemble(all.clone(), AssembleOptions::default())
            .await
            .unwrap()
            .array;
        assert!(b.needs_resync());
        for _ in 0..3 {
            assert!(!b.mark_clean_if_idle(Duration::ZERO).await, "resync due");
        }
        assert!(!on_disk_clean(&raw, "resync due").await);
        b.scrub(SyncKind::Resync, SyncLimits::UNLIMITED, |_, _| {})
            .await
            .unwrap();
        idle_out(&b, "after the resync").await;
        assert!(on_disk_clean(&raw, "after the resync").await);

        // A repair over slow members: safe mode must wait for its end.
        let slow: Vec<Arc<dyn Member>> = raw
            .iter()
            .map(|m| {
                let plan = FaultPlan {
                    delay_yields: Some((2, 2)),
                    ..FaultPlan::default()
                };
                Arc::new(FaultMember::new(m.clone(), plan)) as Arc<dyn Member>
            })
            .collect();
        drop(b);
        let c = assemble(slow, AssembleOptions::default())
            .await
            .unwrap()
            .array;
        let repair = {
            let c = c.clone();
            raidd_rt::spawn_local(async move {
                c.scrub(SyncKind::Repair, SyncLimits::UNLIMITED, |_, _| {})
                    .await
            })
        };
        let mut polls = 0;
        // The repair registers, then marks the array dirty (it starts clean).
        while c.passes().progress().is_none() || on_disk_clean(&raw, "repair").await {
            raidd_rt::yield_now().await;
        }
        loop {
            let marked = c.mark_clean_if_idle(Duration::ZERO).await;
            if c.passes().progress().is_none() {
                break; // it may have ended meanwhile: then marking clean was right
            }
            assert!(!marked, "marked clean during a repair");
            assert!(
                !on_disk_clean(&raw, "repair").await,
                "clean during a repair"
            );
            polls += 1;
            raidd_rt::yield_now().await;
        }
        assert_eq!(repair.await.unwrap(), 0);
        assert!(
            polls > 3,
            "the repair was too quick to overlap ({polls} polls)"
        );
        // (Already marked if the repair ended while the last call above was marking.)
        for _ in 0..2 {
            c.mark_clean_if_idle(Duration::ZERO).await;
        }
        assert!(on_disk_clean(&raw, "after the repair").await);
    });
}

/// Levels without redundancy have nothing to resync: writes leave them clean (as md's
/// raid0 and linear).
#[test]
fn writes_leave_arrays_without_redundancy_clean() {
    for level in [Level::Raid0, Level::Linear] {
        raidd_rt::block_on(async move {
            let raw = mems(3);
            let a = create(spec(
                level,
                dyns(&raw).into_iter().map(Some).collect(),
                false,
            ))
            .await
            .unwrap()
            .array;
            a.write_buf(0, block(1)).await.unwrap();
            assert!(on_disk_clean(&raw, &level.to_string()).await, "{level}");
        });
    }
}

/// Writers and safe mode interleaved on a seeded schedule (member I/O yields a random
/// number of times, clients pause at random): every data write that reaches a member finds
/// its superblock dirty, the array is marked clean many times over, and every block reads
/// back as last written. `RAIDD_SIM_SEEDS` runs more seeds.
#[test]
fn no_write_reaches_a_member_whose_superblock_says_clean() {
    let seeds: u64 = std::env::var("RAIDD_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6);
    for seed in 0..seeds {
        for (level, n) in [
            (Level::Raid1, 2),
            (Level::Raid5, 4),
            (Level::Raid6, 5),
            (Level::Raid10, 4),
        ] {
            raidd_rt::block_on(race(level, n, seed));
        }
    }
}

async fn race(level: Level, n: usize, seed: u64) {
    let what = format!("{level} over {n}, seed {seed}");
    let witnesses: Vec<Arc<Witness>> = (0..n)
        .map(|i| Arc::new(Witness::new(&format!("w{i}"), 8 * MIB)))
        .collect();
    let members: Vec<Arc<dyn Member>> = witnesses
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let plan = FaultPlan {
                seed: seed * 131 + i as u64,
                delay_yields: Some((0, 4)),
                ..FaultPlan::default()
            };
            Arc::new(FaultMember::new(w.clone(), plan)) as Arc<dyn Member>
        })
        .collect();
    let a = create(spec(
        level,
        members.iter().cloned().map(Some).collect(),
        false,
    ))
    .await
    .unwrap()
    .array;
    // This loop never lets the thread idle, and a plugged RAID5/6 write waits for that
    // (beside the daemon's timer-driven safe mode it comes): gather without plugging.
    let gather = if seed.is_multiple_of(2) {
        Gather::None
    } else {
        Gather::Limit(2)
    };
    a.set_stripe_cache(DEFAULT_CACHE_BYTES, gather);
    // Half the seeds send small writes alone (past the cache): they mark dirty the same way.
    if seed % 4 >= 2 {
        a.set_write_alone(raidd_engine::Alone::Always);
    }
    for w in &witnesses {
        w.arm().await;
    }
    let sectors = a.size_bytes() / 512;
    let model = Rc::new(RefCell::new(Model::new(sectors, seed)));
    let clients = 3;
    let done = Rc::new(std::cell::Cell::new(0));
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (a, model, done) = (a.clone(), model.clone(), done.clone());
        tasks.push(raidd_rt::spawn_local(async move {
            let mut rng = Rng(seed.wrapping_mul(7919).wrapping_add(c));
            for _ in 0..60 {
                // Clients own interleaved 64 KiB units, so their writes never overlap.
                let units = sectors / 128;
                let unit = rng.below(units / clients) * clients + c;
                let len = 1 + rng.below(128);
                let start = unit * 128 + rng.below(128 - len + 1);
                let g = {
                    let mut m = model.borrow_mut();
                    m.next += 1;
                    m.next
                };
                let mut buf = raidd_rt::AlignedBuf::zeroed((len * 512) as usize);
                raidd_engine::pattern::fill(&mut buf, start, g, seed);
                a.write_buf(start * 512, buf).await.unwrap();
                model.borrow_mut().generation[start as usize..(start + len) as usize].fill(g);
                for _ in 0..rng.below(40) {
                    raidd_rt::yield_now().await;
                }
            }
            done.set(done.get() + 1);
        }));
    }
    let mut marked = 0;
    let mut rng = Rng(seed ^ 0x5afe);
    while done.get() < clients {
        if a.mark_clean_if_idle(Duration::ZERO).await {
            marked += 1;
        }
        for _ in 0..=rng.below(6) {
            raidd_rt::yield_now().await;
        }
    }
    for t in tasks {
        t.await;
    }
    let data_writes: u64 = witnesses
        .iter()
        .map(|w| w.data_writes.load(Ordering::SeqCst))
        .sum();
    let over_clean: u64 = witnesses
        .iter()
        .map(|w| w.over_clean.load(Ordering::SeqCst))
        .sum();
    assert_eq!(
        over_clean, 0,
        "{what}: {over_clean} of {data_writes} data writes reached a member marked clean"
    );
    assert!(
        marked >= 5,
        "{what}: marked clean only {marked} times: the race was not exercised"
    );
    let model = model.replace(Model::new(0, 0));
    common::verify_all(&a, &model, &what).await;
}

/// A close while a write is still in flight (a stop that gave up waiting for it) leaves the
/// superblocks dirty, so the next start resyncs. (Member 1 hangs with a timeout, so the
/// close's flush and the write end once it is failed.)
#[test]
fn a_close_with_a_write_in_flight_leaves_the_array_dirty() {
    raidd_rt::block_on(async {
        let raw = mems(4);
        let plan = FaultPlan {
            timeout: Some(Duration::from_millis(300)),
            ..FaultPlan::default()
        };
        let faulty = FaultMember::new(raw[1].clone(), plan);
        let control = faulty.control();
        let mut all = dyns(&raw);
        all[1] = Arc::new(faulty);
        let a = Arc::new(
            create(spec(
                Level::Raid5,
                all.iter().cloned().map(Some).collect(),
                false,
            ))
            .await
            .unwrap()
            .array,
        );
        a.write_buf(0, block(1)).await.unwrap();
        // The next write (to the second chunk, on member 1) waits there.
        control.hang();
        let writer = {
            let a = a.clone();
            raidd_rt::spawn_local(async move { a.write_buf(64 << 10, block(2)).await })
        };
        // Waiting lets the thread go idle, which is when gathered writes leave.
        for _ in 0..1000 {
            if control.hung_ops() > 0 {
                break;
            }
            raidd_rt::time::sleep(Duration::from_millis(1)).await;
        }
        assert!(control.hung_ops() > 0, "the write reached the hung member");
        assert_eq!(a.close().await.unwrap(), raidd_engine::Closed::LeftDirty);
        let others: Vec<_> = [0, 2, 3].iter().map(|&i| raw[i].clone()).collect();
        assert!(!on_disk_clean(&others, "closed with a write in flight").await);
        writer.await.unwrap();
        // Nothing in flight now: a close marks it clean.
        assert_eq!(a.close().await.unwrap(), raidd_engine::Closed::Clean);
        assert!(on_disk_clean(&others, "closed idle").await);
    });
}
