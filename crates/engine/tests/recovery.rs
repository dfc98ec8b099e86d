//! Online recovery: a member fails while clients write, a new member is added and rebuilt
//! while the writes go on, and afterwards the rebuilt member alone (with the others failed
//! as far as redundancy allows) serves every sector as the model says. Members reorder I/O
//! on a seeded schedule, so a failing seed replays exactly. Also: an interrupted recovery
//! resumes from its checkpoint after reassembly, and the superblocks say what md would.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use common::{verify_all, write_pattern, Model, Rng};
use raidd_engine::assemble::{assemble, examine, AssembleOptions, Decision};
use raidd_engine::create::{create, CreateSpec};
use raidd_engine::member::MemMember;
use raidd_engine::{Added, Array, ErrorKind, Member, SlotState, SyncKind, SyncLimits};
use raidd_lab::{FaultMember, FaultPlan};
use raidd_layout::{Geometry, Level};
use raidd_md::{feature, DevRole};

const MEMBER_BYTES: u64 = 4 << 20;
const CLIENTS: u64 = 3;
const UNIT: u64 = 8;

fn limits(window_sectors: u64) -> SyncLimits {
    SyncLimits {
        window_bytes: window_sectors * 512,
        ..SyncLimits::UNLIMITED
    }
}

fn wrapped(m: &Arc<MemMember>, seed: u64) -> Arc<dyn Member> {
    let plan = FaultPlan {
        seed,
        delay_yields: Some((0, 3)),
        ..FaultPlan::default()
    };
    Arc::new(FaultMember::new(m.clone(), plan))
}

fn spec(level: Level, layout: Option<u32>, members: Vec<Arc<dyn Member>>) -> CreateSpec {
    CreateSpec {
        name: "rec".into(),
        homehost: "test".into(),
        level,
        layout,
        chunk_sectors: Some(16),
        members: members.into_iter().map(Some).collect(),
        size_sectors: Some(2048),
        assume_clean: true,
        force: false,
        bitmap_chunk: None,
        ppl: false,
        journal: None,
        checksums: None,
    }
}

/// Fails up to the array's redundancy of working members other than `keep`, so that reads
/// must use `keep`'s copy. RAID10 fails `keep`'s mirror partners.
async fn fail_all_but(array: &Array, keep: usize) {
    let n = array.geometry().members();
    let victims: Vec<usize> = match array.geometry() {
        Geometry::Raid10(_) => {
            // The members holding the other copies of keep's first chunk.
            let mut v = Vec::new();
            for piece in array.geometry().pieces(0, array.size_bytes() / 512) {
                if piece.copies.iter().any(|c| c.member == keep) {
                    for c in &piece.copies {
                        if c.member != keep && !v.contains(&c.member) {
                            v.push(c.member);
                        }
                    }
                }
            }
            // Losing every partner of keep loses nothing only if keep covers them all: keep
            // the failures to what the layout survives.
            let mut chosen: Vec<usize> = Vec::new();
            for m in v {
                let mut missing = vec![false; n];
                for &c in chosen.iter().chain([m].iter()) {
                    missing[c] = true;
                }
                if array.geometry().survives(&missing) {
                    chosen.push(m);
                }
            }
            chosen
        }
        g => (0..n).filter(|&m| m != keep).take(g.redundancy()).collect(),
    };
    assert!(!victims.is_empty(), "nothing to fail besides {keep}");
    for v in victims {
        array.fail_member(v).await.unwrap();
    }
}

/// How the member is renewed while the clients write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Renew {
    /// Fail it, remove it, add a new one and rebuild.
    Rebuild,
    /// Copy it onto a new one while it still serves (`raidd replace`).
    Replace,
}

fn run(seed: u64, level: Level, layout: Option<u32>, n: usize, renew: Renew) {
    raidd_rt::block_on(async move {
        let what = format!("seed {seed} {level} n={n} {renew:?}");
        let raw: Vec<Arc<MemMember>> = (0..n)
            .map(|i| Arc::new(MemMember::new(format!("m{i}"), MEMBER_BYTES)))
            .collect();
        let members: Vec<Arc<dyn Member>> = raw
            .iter()
            .enumerate()
            .map(|(i, m)| wrapped(m, seed ^ i as u64))
            .collect();
        let a = create(spec(level, layout, members)).await.unwrap();
        let array = a.array.clone();
        let sectors = array.size_bytes() / 512;
        // Some data before the failure.
        let mut first = Model::new(sectors, seed);
        let mut pos = 0;
        while pos < sectors {
            let len = 64.min(sectors - pos);
            write_pattern(&array, &mut first, pos, len).await;
            pos += len;
        }
        let model = Rc::new(RefCell::new(first));
        let mut rng = Rng(seed);
        let victim = rng.below(n as u64) as usize;
        let fresh = Arc::new(MemMember::new("new", MEMBER_BYTES));
        let mut tasks = Vec::new();
        for c in 0..CLIENTS {
            tasks.push(raidd_rt::spawn_local(common::client(
                array.clone(),
                model.clone(),
                seed,
                c,
                CLIENTS,
                UNIT,
                150,
                4,
                what.clone(),
            )));
        }
        // Fail, remove, add and rebuild while the clients run.
        let rebuild = {
            let array = array.clone();
            let fresh = wrapped(&fresh, seed ^ 0xabc);
            let what = what.clone();
            raidd_rt::spawn_local(async move {
                for _ in 0..rng.below(50) {
                    raidd_rt::yield_now().await;
                }
                let gone = array.slots().member(victim).unwrap().info().name.clone();
                match renew {
                    Renew::Rebuild => {
                        array.fail_member(victim).await.unwrap();
                        array.remove_member(&gone).await.unwrap();
                        assert_eq!(array.slots().state(victim), SlotState::Missing);
                        let added = array.add_member(fresh).await.unwrap();
                        assert_eq!(added, Added::Recovering(victim), "{what}");
                        array.recover(victim, limits(32)).await.unwrap();
                    }
                    Renew::Replace => {
                        array.replace(victim, fresh, limits(32)).await.unwrap();
                        // The old member waits for removal; it never left the array.
                        assert_eq!(
                            array.status().await.faulty,
                            std::slice::from_ref(&gone),
                            "{what}"
                        );
                        array.remove_member(&gone).await.unwrap();
                    }
                }
                assert_eq!(
                    array.slots().member(victim).unwrap().info().name,
                    "new",
                    "{what}"
                );
            })
        };
        rebuild.await;
        for t in tasks {
            t.await;
        }
        assert_eq!(array.slots().state(victim), SlotState::InSync, "{what}");
        assert!(array.passes().progress().is_none());
        let m = Rc::try_unwrap(model)
            .ok()
            .expect("clients done")
            .into_inner();
        verify_all(&array, &m, &what).await;
        let mismatches = array
            .scrub(SyncKind::Check, SyncLimits::UNLIMITED, |_, _| {})
            .await
            .unwrap();
        assert_eq!(mismatches, 0, "{what}: check after the rebuild");
        // The rebuilt member now carries data others no longer can.
        fail_all_but(&array, victim).await;
        verify_all(&array, &m, &format!("{what}, served by the rebuilt member")).await;
        // Its superblock says what md's would: the slot's role, rebuild finished, same events.
        let sb = examine(&*fresh).await.unwrap();
        assert_eq!(sb.own_role(), DevRole::Active(victim as u16), "{what}");
        assert_eq!(sb.feature_map & feature::RECOVERY_OFFSET, 0, "{what}");
    });
}

#[test]
fn rebuild_under_concurrent_writes_over_many_seeds() {
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    let seeds: Vec<u64> = match env("RAIDD_SIM_SEED") {
        Some(s) => vec![s],
        None => (1..=env("RAIDD_SIM_SEEDS").unwrap_or(4)).collect(),
    };
    for seed in seeds {
        for (level, layout, n) in [
            (Level::Raid1, None, 3),
            (Level::Raid10, None, 4),
            (Level::Raid10, Some(0x201), 4),   // far 2
            (Level::Raid10, Some(0x10102), 3), // offset 2
            (Level::Raid4, None, 4),
            (Level::Raid5, None, 4),
            (Level::Raid6, None, 5),
        ] {
            run(seed, level, layout, n, Renew::Rebuild);
            run(seed, level, layout, n, Renew::Replace);
        }
    }
}

/// A recovery stopped part way records its recovery point; after reassembly the member is
/// back in its slot as recovering, reads avoid what it does not have yet, and the recovery
/// resumes there and finishes.
#[test]
fn interrupted_recovery_resumes_after_reassembly() {
    raidd_rt::block_on(async {
        let raw: Vec<Arc<MemMember>> = (0..4)
            .map(|i| Arc::new(MemMember::new(format!("r{i}"), MEMBER_BYTES)))
            .collect();
        let members: Vec<Arc<dyn Member>> = raw.iter().map(|m| m.clone() as _).collect();
        let a = create(spec(Level::Raid5, None, members)).await.unwrap();
        let array = a.array.clone();
        let sectors = array.size_bytes() / 512;
        let mut model = Model::new(sectors, 7);
        write_pattern(&array, &mut model, 0, sectors).await;
        array.fail_member(2).await.unwrap();
        array.remove_member("r2").await.unwrap();
        let fresh = Arc::new(MemMember::new("fresh", MEMBER_BYTES));
        assert_eq!(
            array.add_member(fresh.clone()).await.unwrap(),
            Added::Recovering(2)
        );
        // Let a few windows pass, then stop it.
        let job = {
            let array = array.clone();
            raidd_rt::spawn_local(async move { array.recover(2, limits(16)).await })
        };
        let mut seen = None;
        for _ in 0..10_000 {
            raidd_rt::yield_now().await;
            if let Some(p) = array.passes().progress() {
                assert_eq!(p.kind, SyncKind::Recovery);
                if p.done() >= 256 {
                    seen = Some(p.done());
                    break;
                }
            }
        }
        assert!(seen.is_some(), "recovery made no progress");
        assert!(array.passes().cancel());
        let err = job.await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Interrupted, "{err}");
        let stopped = array.status().await.slots[2].recovered_bytes.unwrap();
        assert!(stopped >= 256 * 512, "stopped at {stopped}");
        assert_eq!(array.slots().state(2), SlotState::Recovering);
        // Reads work meanwhile (the unrebuilt part comes from parity).
        verify_all(&array, &model, "while recovering").await;
        array.close().await.unwrap();
        drop(array);
        drop(a);

        let sb = examine(&*fresh).await.unwrap();
        assert_ne!(sb.feature_map & feature::RECOVERY_OFFSET, 0);
        assert_eq!(sb.recovery_offset * 512, stopped);
        let again: Vec<Arc<dyn Member>> = vec![
            raw[0].clone(),
            raw[1].clone(),
            fresh.clone(),
            raw[3].clone(),
            raw[2].clone(), // the failed, removed member: refused
        ];
        let b = assemble(again, AssembleOptions::default()).await.unwrap();
        let decisions: Vec<&Decision> = b.report.iter().map(|r| &r.decision).collect();
        assert_eq!(
            decisions[2],
            &Decision::Recovering {
                role: 2,
                recovery_offset: stopped / 512
            }
        );
        assert!(
            matches!(decisions[4], Decision::Faulty | Decision::Stale { .. }),
            "{:?}",
            decisions[4]
        );
        let array = b.array.clone();
        assert_eq!(array.slots().state(2), SlotState::Recovering);
        write_pattern(&array, &mut model, 100, 900).await;
        verify_all(&array, &model, "reassembled, recovering").await;
        array.recover(2, limits(64)).await.unwrap();
        assert_eq!(array.slots().state(2), SlotState::InSync);
        array.fail_member(0).await.unwrap();
        verify_all(&array, &model, "resumed rebuild, member 0 failed").await;
    });
}

/// Adding to a whole array makes a spare; a later failure lets the array claim it.
#[test]
fn spares_wait_and_are_claimed() {
    raidd_rt::block_on(async {
        let raw: Vec<Arc<MemMember>> = (0..3)
            .map(|i| Arc::new(MemMember::new(format!("s{i}"), MEMBER_BYTES)))
            .collect();
        let members: Vec<Arc<dyn Member>> = raw.iter().map(|m| m.clone() as _).collect();
        let a = create(spec(Level::Raid1, None, members)).await.unwrap();
        let array = a.array.clone();
        let sectors = array.size_bytes() / 512;
        let mut model = Model::new(sectors, 9);
        write_pattern(&array, &mut model, 0, sectors).await;
        let spare = Arc::new(MemMember::new("spare", MEMBER_BYTES));
        assert_eq!(array.add_member(spare.clone()).await.unwrap(), Added::Spare);
        assert_eq!(array.status().await.spares, ["spare"]);
        // It carries a spare's superblock, as mdadm --add writes one.
        let sb = examine(&*spare).await.unwrap();
        assert_eq!(sb.own_role(), DevRole::Spare);
        let spare_dev = sb.dev_number;
        // Adding it again is refused; so is a member too small.
        let err = array.add_member(spare.clone()).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Conflict);
        assert_eq!(array.claim_own_spare().await.unwrap(), None);
        array.fail_member(1).await.unwrap();
        let small = Arc::new(MemMember::new("small", 64 << 10));
        let err = array.add_member(small).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
        assert_eq!(array.claim_own_spare().await.unwrap(), Some(1));
        let st = array.status().await;
        assert!(st.spares.is_empty());
        assert_eq!(st.faulty, ["s1"], "the failed member waits for removal");
        array.recover(1, limits(64)).await.unwrap();
        let sb = examine(&*spare).await.unwrap();
        assert_eq!(
            (sb.own_role(), sb.dev_number),
            (DevRole::Active(1), spare_dev),
            "the spare keeps its device number"
        );
        array.remove_member("s1").await.unwrap();
        assert!(array.status().await.faulty.is_empty());
        array.fail_member(0).await.unwrap();
        array.fail_member(2).await.unwrap();
        verify_all(&array, &model, "served by the claimed spare").await;
        // A working member can't be removed; an unknown one is not found.
        let err = array.remove_member("spare").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Conflict);
        let err = array.remove_member("nope").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotFound);
    });
}

/// A pass held back by its speed limit still stops at once when asked (a daemon shutting
/// down must not wait for a crawling rebuild), keeping its progress.
#[test]
fn a_throttled_recovery_stops_when_asked() {
    raidd_rt::block_on(async {
        let raw: Vec<Arc<MemMember>> = (0..3)
            .map(|i| Arc::new(MemMember::new(format!("t{i}"), MEMBER_BYTES)))
            .collect();
        let members: Vec<Arc<dyn Member>> = raw.iter().map(|m| m.clone() as _).collect();
        let a = create(spec(Level::Raid5, None, members)).await.unwrap();
        let array = a.array.clone();
        array.fail_member(1).await.unwrap();
        array.remove_member("t1").await.unwrap();
        let fresh = Arc::new(MemMember::new("slow", MEMBER_BYTES));
        array.add_member(fresh).await.unwrap();
        let crawl = SyncLimits {
            min_kib_s: 1,
            max_kib_s: 1,
            window_bytes: 16 * 512,
        };
        let job = {
            let array = array.clone();
            raidd_rt::spawn_local(async move { array.recover(1, crawl).await })
        };
        // Let it do its first window and start waiting on the limit.
        raidd_rt::time::sleep(std::time::Duration::from_millis(200)).await;
        let p = array.passes().progress().expect("running");
        assert!(p.done() < p.total, "the limit must hold it back");
        let asked = std::time::Instant::now();
        assert!(array.passes().cancel());
        let limit = Box::pin(raidd_rt::time::sleep(std::time::Duration::from_secs(5)));
        let err = match futures::future::select(job, limit).await {
            futures::future::Either::Left((r, _)) => r.unwrap_err(),
            futures::future::Either::Right(_) => panic!("the recovery did not stop in 5 s"),
        };
        assert_eq!(err.kind(), ErrorKind::Interrupted, "{err}");
        assert!(
            asked.elapsed() < std::time::Duration::from_secs(2),
            "stopping took {:?}",
            asked.elapsed()
        );
        assert_eq!(array.slots().state(1), SlotState::Recovering);
        assert_eq!(array.passes().last().unwrap().outcome, "interrupted");
    });
}

/// Membership changes that run at the same time each see the other's result: two adds to an
/// array missing two members take different slots, and a remove racing an add leaves the
/// slot in the add's hands.
#[test]
fn concurrent_adds_take_different_slots() {
    raidd_rt::block_on(async {
        let raw: Vec<Arc<MemMember>> = (0..5)
            .map(|i| Arc::new(MemMember::new(format!("c{i}"), MEMBER_BYTES)))
            .collect();
        // Members that yield on every operation, so the two adds interleave.
        let members: Vec<Arc<dyn Member>> = raw
            .iter()
            .enumerate()
            .map(|(i, m)| wrapped(m, 77 + i as u64))
            .collect();
        let a = create(spec(Level::Raid6, None, members)).await.unwrap();
        let array = a.array.clone();
        array.fail_member(1).await.unwrap();
        array.fail_member(3).await.unwrap();
        let x = wrapped(&Arc::new(MemMember::new("x", MEMBER_BYTES)), 1);
        let y = wrapped(&Arc::new(MemMember::new("y", MEMBER_BYTES)), 2);
        // One add and one remove of a failed member race, then a second add.
        let gone = array.slots().member(3).unwrap().info().name.clone();
        let (ax, removed, ay) = futures::join!(
            array.add_member(x),
            array.remove_member(&gone),
            array.add_member(y),
        );
        let (ax, ay) = (ax.unwrap(), ay.unwrap());
        assert_ne!(ax, ay, "two adds took the same slot");
        for added in [ax, ay] {
            let Added::Recovering(r) = added else {
                panic!("{added:?}")
            };
            assert_eq!(array.slots().state(r), SlotState::Recovering, "slot {r}");
            assert!(
                array.slots().member(r).is_some(),
                "slot {r} lost its member"
            );
        }
        // The remove either found the failed member or an add had already detached it.
        if let Err(e) = removed {
            assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
        }
        array.recover(1, limits(64)).await.unwrap();
        array.recover(3, limits(64)).await.unwrap();
        assert!(!array.is_degraded());
    });
}
