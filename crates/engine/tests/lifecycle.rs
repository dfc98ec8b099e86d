//! Failure handling with md metadata: members failing during I/O (served from redundancy,
//! recorded in the survivors' superblocks), stale members refused at assembly, unclean
//! shutdown detection, nested arrays, and bad input refused without changing anything.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::sync::Arc;

use common::{random_writes, verify_all, Model, Rng};
use raidd_engine::assemble::{assemble, assemble_all, examine, AssembleOptions, Decision};
use raidd_engine::create::{create, CreateSpec};
use raidd_engine::member::MemMember;
use raidd_engine::{ArrayState, ErrorKind, Member, SlotState, SyncKind, SyncLimits};
use raidd_lab::{FaultControl, FaultMember, FaultPlan};
use raidd_layout::Level;
use raidd_md::{DevRole, Superblock};

const MIB: u64 = 1 << 20;

fn mems(prefix: &str, n: usize, size: u64) -> Vec<Arc<MemMember>> {
    (0..n)
        .map(|i| Arc::new(MemMember::new(format!("{prefix}{i}"), size)))
        .collect()
}

fn spec(name: &str, level: Level, members: Vec<Option<Arc<dyn Member>>>) -> CreateSpec {
    CreateSpec {
        name: name.into(),
        homehost: "test".into(),
        level,
        layout: None,
        chunk_sectors: Some(128),
        members,
        size_sectors: None,
        assume_clean: true,
        force: false,
        bitmap_chunk: None,
        ppl: false,
        journal: None,
        checksums: None,
    }
}

/// Members wrapped in fault injectors (all healthy at first).
fn faulty(mems: &[Arc<MemMember>]) -> (Vec<Arc<dyn Member>>, Vec<Arc<FaultControl>>) {
    mems.iter()
        .map(|m| {
            let f = FaultMember::new(m.clone(), FaultPlan::default());
            let c = f.control();
            (Arc::new(f) as Arc<dyn Member>, c)
        })
        .unzip()
}

async fn sb_of(m: &MemMember) -> Superblock {
    examine(m).await.unwrap()
}

/// A member fails in the middle of a write load: no request fails, the array degrades, the
/// survivors' superblocks record the failure, and every block still verifies, also after a
/// second failure for RAID6.
#[test]
fn members_failing_under_load_are_survived_and_recorded() {
    for (level, n, fail) in [
        (Level::Raid1, 2, vec![1]),
        (Level::Raid10, 4, vec![2]),
        (Level::Raid5, 4, vec![1]),
        (Level::Raid6, 5, vec![0, 3]),
        (Level::Raid4, 3, vec![2]),
    ] {
        raidd_rt::block_on(async move {
            let raw = mems(&format!("{level}-"), n, 16 * MIB);
            let (members, controls) = faulty(&raw);
            let a = create(spec(
                "load",
                level,
                members.iter().cloned().map(Some).collect(),
            ))
            .await
            .unwrap();
            let array = a.array.clone();
            let mut model = Model::new(array.size_bytes() / 512, 99);
            let mut rng = Rng(n as u64);
            random_writes(&array, &mut model, &mut rng, 30).await;
            for &f in &fail {
                controls[f].fail();
                random_writes(&array, &mut model, &mut rng, 30).await;
                assert_eq!(
                    array.slots().state(f),
                    SlotState::Faulty,
                    "{level}: member {f} marked faulty"
                );
            }
            verify_all(&array, &model, &format!("{level} after failures")).await;
            assert_eq!(array.status().await.state, ArrayState::Degraded);
            // The survivors' superblocks say which members failed, with a newer event count.
            let survivor = (0..n).find(|i| !fail.contains(i)).unwrap();
            let sb = sb_of(&raw[survivor]).await;
            for &f in &fail {
                assert_eq!(
                    DevRole::from_raw(sb.dev_roles[f]),
                    DevRole::Faulty,
                    "{level}: role {f}"
                );
                assert!(
                    sb_of(&raw[f]).await.events < sb.events,
                    "{level}: failed member is behind"
                );
            }
            array.close().await.unwrap();
            drop(array);
            drop(a);
            // Reassembled from every member (the failed ones healed), the failed ones stay out.
            for c in &controls {
                c.heal();
            }
            let again = assemble(members.clone(), AssembleOptions::default())
                .await
                .unwrap();
            for &f in &fail {
                let r = &again.report[f];
                assert!(
                    matches!(r.decision, Decision::Faulty | Decision::Stale { .. }),
                    "{level}: member {f} must not be used again, got {:?}",
                    r.decision
                );
            }
            verify_all(&again.array, &model, &format!("{level} reassembled")).await;
        });
    }
}

/// Reads that fail on one member are served from the others; a member that fails every
/// read (the read-back of a correction too) is failed.
#[test]
fn read_errors_are_served_from_redundancy() {
    for (level, n) in [
        (Level::Raid1, 3),
        (Level::Raid5, 3),
        (Level::Raid6, 4),
        (Level::Raid10, 2),
    ] {
        raidd_rt::block_on(async move {
            let raw = mems("r", n, 16 * MIB);
            let (members, controls) = faulty(&raw);
            let a = create(spec("rd", level, members.into_iter().map(Some).collect()))
                .await
                .unwrap();
            let mut model = Model::new(a.array.size_bytes() / 512, 5);
            random_writes(&a.array, &mut model, &mut Rng(3), 40).await;
            controls[0].set_plan(FaultPlan {
                seed: 1,
                read_error_ppm: 1_000_000,
                ..FaultPlan::default()
            });
            let before = a.array.status().await.slots[0].io;
            verify_all(&a.array, &model, &format!("{level} with read errors")).await;
            assert_eq!(a.array.slots().state(0), SlotState::Faulty);
            // The member's own counts say what happened, as zpool status would.
            let st = a.array.status().await;
            let io = st.slots[0].io;
            assert!(
                io.read_errors >= 1 && io.read_errors <= io.reads,
                "{level}: {io:?}"
            );
            assert_eq!(io.write_errors, 0, "{level}: {io:?}");
            assert!(before.writes > 0 && before.written_bytes >= 512 * before.writes);
            let others: u64 = st.slots[1..].iter().map(|s| s.io.read_errors).sum();
            assert_eq!(others, 0, "{level}: only member 0 failed");
        });
    }
}

/// Byte ranges of the 4 KiB blocks at member `sectors` of slot `role`'s member.
fn blocks_at(
    a: &raidd_engine::Array,
    role: usize,
    sectors: impl IntoIterator<Item = u64>,
) -> Vec<std::ops::Range<u64>> {
    let base = a.slots().data_offset(role);
    sectors
        .into_iter()
        .map(|s| base + s * 512..base + s * 512 + 4096)
        .collect()
}

/// Unreadable sectors (latent sector errors: a read fails until the sectors are written) on
/// two members of an array with redundancy, in data and in parity: every read returns the
/// right bytes; what a client's read meets is rebuilt from the others, written back and
/// read back (md's read error correction), and a check corrects the rest (md's check does).
/// (A write's read-modify-write that meets them: `simulation.rs`.)
/// No member leaves its slot, and each member's counts say what was corrected.
#[test]
fn latent_sector_errors_are_corrected_from_redundancy() {
    for (level, n) in [
        (Level::Raid1, 3),
        (Level::Raid5, 3),
        (Level::Raid6, 4),
        (Level::Raid10, 4),
        (Level::Raid10, 3),
    ] {
        raidd_rt::block_on(async move {
            let raw = mems("l", n, 16 * MIB);
            let (members, controls) = faulty(&raw);
            let a = create(spec("lat", level, members.into_iter().map(Some).collect()))
                .await
                .unwrap();
            let mut model = Model::new(a.array.size_bytes() / 512, 7);
            random_writes(&a.array, &mut model, &mut Rng(5), 60).await;
            // Never two in one stripe of 64 KiB chunks: a RAID5 stripe rebuilds one block.
            let planted = [
                (
                    0,
                    blocks_at(&a.array, 0, (0..9).map(|k| k * 1820 + 8 * (k % 5))),
                ),
                (1, blocks_at(&a.array, 1, (0..4).map(|k| k * 4096 + 640))),
            ];
            let mut count = 0;
            for (role, ranges) in planted {
                for r in ranges {
                    controls[role].add_latent_error(r);
                    count += 1;
                }
            }
            verify_all(&a.array, &model, &format!("{level} with bad sectors")).await;
            let hits0 = controls[0].latent_hits() + controls[1].latent_hits();
            assert!(hits0 >= 2, "{level}: the reads met {hits0} bad sectors");
            let found = a
                .array
                .scrub(SyncKind::Check, SyncLimits::UNLIMITED, |_, _| {})
                .await
                .unwrap();
            assert_eq!(
                found, 0,
                "{level}: a check after corrections finds no mismatch"
            );
            for (role, c) in controls.iter().enumerate() {
                assert!(
                    c.latent_errors().is_empty(),
                    "{level} slot {role}: {:?} left",
                    c.latent_errors()
                );
            }
            let st = a.array.status().await;
            assert!(
                matches!(st.state, ArrayState::Clean | ArrayState::Active),
                "{level}: {:?}",
                st.state
            );
            let mut corrected = 0;
            for (role, c) in controls.iter().enumerate() {
                let io = st.slots[role].io;
                assert_eq!(
                    a.array.slots().state(role),
                    SlotState::InSync,
                    "{level} slot {role}"
                );
                // A correction follows a read that failed and a read of its blocks one by
                // one that failed again.
                assert_eq!(
                    io.read_errors,
                    c.latent_hits(),
                    "{level} slot {role}: {io:?}"
                );
                assert!(
                    io.corrected_errors + u64::from(io.read_errors > 0) <= io.read_errors,
                    "{level} slot {role}: {io:?}"
                );
                assert!(
                    io.repaired_bytes >= 512 * io.corrected_errors,
                    "{level}: {io:?}"
                );
                assert_eq!(io.write_errors, 0, "{level}: {io:?}");
                corrected += io.corrected_errors;
            }
            // Each planted block failed a read at least once (a block a read only partly
            // covered, twice); blocks one scrub window covers share one correction.
            assert!(
                corrected >= 2 && count >= 13,
                "{level}: {corrected} for {count}"
            );
            // Corrected for good: read again, nothing fails and the data is right.
            let hits: u64 = controls.iter().map(|c| c.latent_hits()).sum();
            verify_all(&a.array, &model, &format!("{level} after")).await;
            assert_eq!(hits, controls.iter().map(|c| c.latent_hits()).sum::<u64>());
        });
    }
}

/// A correction rewrites a block from redundancy while a write of the same stripe races
/// it: the write waits for the correction's barrier, so the block ends with the write's
/// data, never the older data the correction rebuilt. The write starts at each of many
/// moments of the correction (slow members stretch it), on a fresh array each time.
#[test]
fn a_correction_never_writes_older_data_over_a_racing_write() {
    raidd_rt::block_on(async {
        let mut raced = 0;
        for delay in (0..240).step_by(8) {
            let raw = mems("race", 3, 16 * MIB);
            let (members, controls) = faulty(&raw);
            let a = create(spec(
                "race",
                Level::Raid5,
                members.into_iter().map(Some).collect(),
            ))
            .await
            .unwrap();
            let array = a.array.clone();
            let mut model = Model::new(array.size_bytes() / 512, 11);
            // Stripe 0: 64 KiB chunks, data on slots 0 and 1.
            common::write_pattern(&array, &mut model, 0, 256).await;
            let x = 40; // a block of slot 0's data chunk
            assert!(matches!(
                array.geometry().reverse(0, x),
                raidd_layout::Reverse::Data {
                    array_sector: 40,
                    ..
                }
            ));
            controls[0].add_latent_error(blocks_at(&array, 0, [x])[0].clone());
            for c in &controls[1..] {
                c.set_plan(FaultPlan {
                    delay_yields: Some((40, 40)),
                    ..FaultPlan::default()
                });
            }
            let started = std::rc::Rc::new(std::cell::Cell::new(false));
            let reader = raidd_rt::spawn_local({
                let (array, started) = (array.clone(), started.clone());
                async move {
                    let r = array.read_to_buf(x * 512, 4096).await;
                    (r, started.get())
                }
            });
            let g = model.next;
            model.next += 1;
            let writer = raidd_rt::spawn_local({
                let (array, started) = (array.clone(), started.clone());
                let seed = model.seed;
                async move {
                    for _ in 0..delay {
                        raidd_rt::yield_now().await;
                    }
                    started.set(true);
                    let mut buf = raidd_rt::AlignedBuf::zeroed(256 * 512);
                    raidd_engine::pattern::fill(&mut buf, 0, g, seed);
                    array.write_buf(0, buf).await
                }
            });
            let (read, during) = reader.await;
            let read = read.unwrap();
            writer.await.unwrap();
            for s in 0..256 {
                model.generation[s] = g;
            }
            // The read saw one whole version of its block, the old or the new.
            let old = raidd_engine::pattern::verify(&read, x, model.seed, |_| g - 1);
            let new = raidd_engine::pattern::verify(&read, x, model.seed, |_| g);
            assert!(
                old.is_empty() || new.is_empty(),
                "delay {delay}: a torn read"
            );
            // Counted where the write began before the read (and its correction) ended.
            raced += usize::from(during);
            for c in &controls[1..] {
                c.set_plan(FaultPlan::default());
            }
            verify_all(&array, &model, &format!("delay {delay}")).await;
            let st = array.status().await;
            assert_eq!(
                st.slots[0].io.corrected_errors, 1,
                "delay {delay}: {:?}",
                st.slots[0].io
            );
            let found = array
                .scrub(SyncKind::Check, SyncLimits::UNLIMITED, |_, _| {})
                .await
                .unwrap();
            assert_eq!(found, 0, "delay {delay}");
        }
        assert!(
            raced > 3,
            "writes must begin while corrections run: {raced}"
        );
    });
}

/// A small write into a stripe whose old rows are unreadable on the member it writes
/// (read-modify-write over five members reads that member's old rows and the parity):
/// the write rebuilds the rows from the others and writes them back before it plans, the
/// member keeps its slot, and everything reads back right.
#[test]
fn a_read_modify_write_mends_the_rows_it_cannot_read() {
    for level in [Level::Raid5, Level::Raid6] {
        raidd_rt::block_on(async move {
            let raw = mems("rmw", 6, 16 * MIB);
            let (members, controls) = faulty(&raw);
            let a = create(spec("rmw", level, members.into_iter().map(Some).collect()))
                .await
                .unwrap();
            let mut model = Model::new(a.array.size_bytes() / 512, 13);
            random_writes(&a.array, &mut model, &mut Rng(9), 40).await;
            // Bad blocks on slot 0's data in three stripes; a one-sector write into each.
            let data: Vec<(u64, u64)> = (0..40u64)
                .map(|k| k * 128 + 40)
                .filter_map(|s| match a.array.geometry().reverse(0, s) {
                    raidd_layout::Reverse::Data { array_sector, .. } => Some((s, array_sector)),
                    _ => None,
                })
                .take(3)
                .collect();
            assert_eq!(data.len(), 3);
            for r in blocks_at(&a.array, 0, data.iter().map(|d| d.0)) {
                controls[0].add_latent_error(r);
            }
            for &(_, array_sector) in &data {
                common::write_pattern(&a.array, &mut model, array_sector + 1, 1).await;
            }
            let io = a.array.status().await.slots[0].io;
            assert_eq!(a.array.slots().state(0), SlotState::InSync, "{level}");
            assert!(
                io.corrected_errors >= 1,
                "{level}: the writes mended nothing: {io:?}"
            );
            verify_all(&a.array, &model, &format!("{level} after the writes")).await;
            let found = a
                .array
                .scrub(SyncKind::Check, SyncLimits::UNLIMITED, |_, _| {})
                .await
                .unwrap();
            assert_eq!(found, 0, "{level}");
            assert!(controls[0].latent_errors().is_empty(), "{level}");
        });
    }
}

/// md's limit: a member whose corrected read errors pass 20 is failed at the next one, and
/// the read is still served from redundancy.
#[test]
fn too_many_read_errors_fail_the_member() {
    raidd_rt::block_on(async {
        let raw = mems("m", 3, 16 * MIB);
        let (members, controls) = faulty(&raw);
        let a = create(spec(
            "many",
            Level::Raid5,
            members.into_iter().map(Some).collect(),
        ))
        .await
        .unwrap();
        let mut model = Model::new(a.array.size_bytes() / 512, 9);
        random_writes(&a.array, &mut model, &mut Rng(6), 60).await;
        // One block in each of 30 chunks of slot 0 that hold data.
        let data: Vec<u64> = (0..60u64)
            .map(|k| k * 128 + 16)
            .filter(|&s| {
                matches!(
                    a.array.geometry().reverse(0, s),
                    raidd_layout::Reverse::Data { .. }
                )
            })
            .take(30)
            .collect();
        assert_eq!(data.len(), 30);
        for r in blocks_at(&a.array, 0, data) {
            controls[0].add_latent_error(r);
        }
        verify_all(&a.array, &model, "raid5 with many bad sectors").await;
        assert_eq!(a.array.slots().state(0), SlotState::Faulty);
        let st = a.array.status().await;
        assert_eq!(st.state, ArrayState::Degraded);
        assert_eq!(st.slots[0].io.corrected_errors, 20, "{:?}", st.slots[0].io);
        // Each correction: the read, and the block's read again; then the read that failed
        // the member.
        assert_eq!(st.slots[0].io.read_errors, 41, "{:?}", st.slots[0].io);
    });
}

/// Losing more members than the level survives fails I/O with an error, never wrong data.
#[test]
fn too_many_failures_fail_the_array_not_the_data() {
    raidd_rt::block_on(async {
        let raw = mems("x", 4, 16 * MIB);
        let (members, controls) = faulty(&raw);
        let a = create(spec(
            "x",
            Level::Raid5,
            members.into_iter().map(Some).collect(),
        ))
        .await
        .unwrap();
        let mut model = Model::new(a.array.size_bytes() / 512, 5);
        random_writes(&a.array, &mut model, &mut Rng(4), 10).await;
        controls[1].fail();
        controls[2].fail();
        let r = a.array.read_to_buf(0, 1 << 20).await;
        let e = r.expect_err("two failures in RAID5 cannot be served");
        assert_eq!(e.kind(), ErrorKind::Io);
        assert_eq!(a.array.status().await.state, ArrayState::Failed);
        assert!(a
            .array
            .write_buf(0, raidd_rt::AlignedBuf::zeroed(4096))
            .await
            .is_err());
    });
}

/// A member that missed writes (absent while the array ran degraded) is stale: assembly
/// refuses it and reads come from the members that are current.
#[test]
fn stale_members_are_refused() {
    raidd_rt::block_on(async {
        let raw = mems("s", 2, 16 * MIB);
        let members: Vec<Arc<dyn Member>> =
            raw.iter().map(|m| m.clone() as Arc<dyn Member>).collect();
        let a = create(spec(
            "stale",
            Level::Raid1,
            members.iter().cloned().map(Some).collect(),
        ))
        .await
        .unwrap();
        let mut model = Model::new(a.array.size_bytes() / 512, 7);
        random_writes(&a.array, &mut model, &mut Rng(1), 10).await;
        a.array.close().await.unwrap();
        drop(a);
        // Run with member 0 only, several state changes.
        let only0 = assemble(vec![members[0].clone()], AssembleOptions::default())
            .await
            .unwrap();
        assert!(only0.array.is_degraded());
        random_writes(&only0.array, &mut model, &mut Rng(2), 10).await;
        only0.array.close().await.unwrap();
        let only0_again = assemble(vec![members[0].clone()], AssembleOptions::default())
            .await
            .unwrap();
        random_writes(&only0_again.array, &mut model, &mut Rng(3), 10).await;
        only0_again.array.close().await.unwrap();
        drop((only0, only0_again));
        let both = assemble(members.clone(), AssembleOptions::default())
            .await
            .unwrap();
        assert!(
            matches!(both.report[1].decision, Decision::Stale { .. }),
            "{:?}",
            both.report[1]
        );
        assert_eq!(both.array.slots().state(1), SlotState::Missing);
        verify_all(&both.array, &model, "raid1 with a stale member").await;
    });
}

/// Writes mark the array dirty; a clean close marks it clean; a crash (no close) leaves it
/// marked for resync.
#[test]
fn unclean_shutdown_is_detected() {
    raidd_rt::block_on(async {
        let raw = mems("u", 3, 16 * MIB);
        let members: Vec<Arc<dyn Member>> =
            raw.iter().map(|m| m.clone() as Arc<dyn Member>).collect();
        let a = create(spec(
            "u",
            Level::Raid5,
            members.iter().cloned().map(Some).collect(),
        ))
        .await
        .unwrap();
        assert!(!a.array.needs_resync());
        let e0 = sb_of(&raw[0]).await.events;
        a.array
            .write_buf(0, raidd_rt::AlignedBuf::zeroed(4096))
            .await
            .unwrap();
        // Dirty while writing, but nothing to resync: the start was clean.
        assert_eq!(a.array.status().await.state, ArrayState::Active);
        assert!(!a.array.needs_resync());
        assert!(
            !sb_of(&raw[0]).await.is_clean(),
            "superblock marked dirty before the write"
        );
        a.array.close().await.unwrap();
        let sb = sb_of(&raw[2]).await;
        assert!(sb.is_clean());
        assert_eq!(sb.events, e0 + 2, "one event to go dirty, one to go clean");
        drop(a);
        let b = assemble(members.clone(), AssembleOptions::default())
            .await
            .unwrap();
        b.array
            .write_buf(8192, raidd_rt::AlignedBuf::zeroed(4096))
            .await
            .unwrap();
        drop(b); // "crash": no close
        let c = assemble(members, AssembleOptions::read_only())
            .await
            .unwrap();
        assert!(c.array.needs_resync());
        assert_eq!(c.array.status().await.state, ArrayState::Active);
    });
}

/// md's rule: a RAID4/5/6 array stopped with writes in flight and missing a member since is
/// not started unless asked (its parity may be stale there, and the missing data is computed
/// from it). The refusal changes nothing on the members; asked, it starts degraded and
/// still marked for resync. Mirrors are not refused, and neither is a degraded array with a
/// bitmap that was stopped cleanly (its bits stay set while degraded, yet nothing was in
/// flight).
#[test]
fn a_dirty_degraded_parity_array_starts_only_when_asked() {
    for (level, n, bitmap) in [
        (Level::Raid5, 3, false),
        (Level::Raid5, 4, true),
        (Level::Raid6, 4, false),
        (Level::Raid6, 5, true),
        (Level::Raid4, 3, false),
        (Level::Raid1, 2, false),
        (Level::Raid10, 4, true),
    ] {
        raidd_rt::block_on(async move {
            let what = format!("{level} over {n}, bitmap {bitmap}");
            let raw = mems(&format!("dd{level}-"), n, 16 * MIB);
            let all: Vec<Arc<dyn Member>> =
                raw.iter().map(|m| m.clone() as Arc<dyn Member>).collect();
            let mut s = spec("dd", level, all.iter().cloned().map(Some).collect());
            s.bitmap_chunk = bitmap.then_some(64 << 10);
            let a = create(s).await.unwrap();
            let block = |g: u8| raidd_rt::AlignedBuf::from_slice(&[g; 4096]);
            a.array.write_buf(0, block(1)).await.unwrap();
            a.array.close().await.unwrap();
            drop(a);

            // Degraded, written and stopped cleanly: starts without being asked, clean.
            let survivors: Vec<Arc<dyn Member>> = all[1..].to_vec();
            let b = assemble(survivors.clone(), AssembleOptions::default())
                .await
                .unwrap();
            assert!(b.array.is_degraded(), "{what}");
            assert!(!b.array.needs_resync(), "{what}: a clean stop");
            b.array.write_buf(8192, block(2)).await.unwrap();
            b.array.close().await.unwrap();
            drop(b);
            let c = assemble(survivors.clone(), AssembleOptions::default())
                .await
                .unwrap();
            assert!(
                !c.array.needs_resync(),
                "{what}: stopped cleanly while degraded"
            );
            c.array.write_buf(16384, block(3)).await.unwrap();
            drop(c); // "crash": no close

            let before: Vec<u64> = {
                let mut e = Vec::new();
                for m in &raw[1..] {
                    e.push(sb_of(m).await.events);
                }
                e
            };
            let r = assemble(survivors.clone(), AssembleOptions::default()).await;
            if level.has_parity() {
                let e = r.expect_err("a dirty degraded parity array is refused");
                assert_eq!(e.kind(), ErrorKind::Conflict, "{what}: {e}");
                let msg = e.to_string();
                assert!(
                    msg.contains("not shut down cleanly") && msg.contains("slot 0"),
                    "{what}: {msg}"
                );
                for (m, ev) in raw[1..].iter().zip(&before) {
                    let sb = sb_of(m).await;
                    assert_eq!(sb.events, *ev, "{what}: a refusal writes nothing");
                    assert!(!sb.is_clean(), "{what}: still marked for resync");
                }
            } else {
                let d = r.unwrap();
                assert!(d.array.needs_resync(), "{what}");
                drop(d);
            }
            let asked = AssembleOptions {
                start_dirty_degraded: true,
                ..Default::default()
            };
            let d = assemble(survivors, asked).await.unwrap();
            assert!(d.array.is_degraded() && d.array.needs_resync(), "{what}");
            for (at, g) in [(0u64, 1u8), (8192, 2), (16384, 3)] {
                let got = d.array.read_to_buf(at, 4096).await.unwrap();
                assert!(got.iter().all(|&b| b == g), "{what}: block at {at}");
            }
        });
    }
}

/// RAID0 over two RAID5 arrays (the papers' multi-stage striping): created, written,
/// verified with a member lost in each RAID5, and found again by assemble_all from the
/// bottom members alone.
#[test]
fn raid0_over_two_raid5_groups() {
    raidd_rt::block_on(async {
        let g1 = mems("g1-", 3, 16 * MIB);
        let g2 = mems("g2-", 3, 16 * MIB);
        let as_members = |g: &[Arc<MemMember>]| {
            g.iter()
                .map(|m| m.clone() as Arc<dyn Member>)
                .collect::<Vec<_>>()
        };
        let r1 = create(spec(
            "g1",
            Level::Raid5,
            as_members(&g1).into_iter().map(Some).collect(),
        ))
        .await
        .unwrap();
        let r2 = create(spec(
            "g2",
            Level::Raid5,
            as_members(&g2).into_iter().map(Some).collect(),
        ))
        .await
        .unwrap();
        let inner: Vec<Option<Arc<dyn Member>>> = vec![
            Some(r1.array.clone() as Arc<dyn Member>),
            Some(r2.array.clone() as Arc<dyn Member>),
        ];
        let outer = create(spec("pool", Level::Raid0, inner)).await.unwrap();
        let mut model = Model::new(outer.array.size_bytes() / 512, 11);
        random_writes(&outer.array, &mut model, &mut Rng(9), 60).await;
        verify_all(&outer.array, &model, "raid0 over raid5").await;
        // Both inner arrays carried data (striping spread it).
        assert!(
            r1.array.status().await.counters.writes > 0
                && r2.array.status().await.counters.writes > 0
        );
        outer.array.close().await.unwrap();
        r1.array.close().await.unwrap();
        r2.array.close().await.unwrap();
        drop((outer, r1, r2));
        // From the six bottom members, with one member of each group missing.
        let mut bottom = as_members(&g1)[1..].to_vec();
        bottom.extend(as_members(&g2)[..2].iter().cloned());
        let all = assemble_all(bottom, AssembleOptions::read_only())
            .await
            .unwrap();
        assert_eq!(all.len(), 3, "two RAID5 groups and the RAID0 over them");
        let top = all.last().unwrap();
        assert_eq!(top.array.geometry().level(), Level::Raid0);
        assert!(all[0].array.is_degraded() && all[1].array.is_degraded());
        verify_all(&top.array, &model, "raid0 over degraded raid5s").await;
    });
}

/// Bad input is refused with the right kind of error and changes nothing on the members.
#[test]
fn bad_input_is_refused_without_changes() {
    raidd_rt::block_on(async {
        let a = mems("a", 3, 16 * MIB);
        let b = mems("b", 3, 16 * MIB);
        let am: Vec<Arc<dyn Member>> = a.iter().map(|m| m.clone() as Arc<dyn Member>).collect();
        let bm: Vec<Arc<dyn Member>> = b.iter().map(|m| m.clone() as Arc<dyn Member>).collect();
        let arr_a = create(spec(
            "a",
            Level::Raid5,
            am.iter().cloned().map(Some).collect(),
        ))
        .await
        .unwrap();
        create(spec(
            "b",
            Level::Raid5,
            bm.iter().cloned().map(Some).collect(),
        ))
        .await
        .unwrap();
        let snapshot = |m: &MemMember| {
            let mut v = vec![0u8; 16 * MIB as usize];
            m.read_sync(0, &mut v);
            v
        };
        let before: Vec<Vec<u8>> = a.iter().chain(&b).map(|m| snapshot(m)).collect();
        let kind =
            |r: raidd_engine::Result<raidd_engine::assemble::Assembled>| r.unwrap_err().kind();
        // Members of different arrays.
        let mixed = vec![am[0].clone(), am[1].clone(), bm[2].clone()];
        assert_eq!(
            kind(assemble(mixed, AssembleOptions::default()).await),
            ErrorKind::Conflict
        );
        // The same member twice.
        let twice = vec![am[0].clone(), am[0].clone(), am[1].clone()];
        assert_eq!(
            kind(assemble(twice, AssembleOptions::default()).await),
            ErrorKind::Conflict
        );
        // Creating over members that carry a superblock, without force.
        let over = spec(
            "again",
            Level::Raid1,
            vec![Some(am[0].clone()), Some(am[1].clone())],
        );
        assert_eq!(create(over).await.unwrap_err().kind(), ErrorKind::Conflict);
        // Too few members / members too small.
        let one = spec(
            "one",
            Level::Raid5,
            vec![Some(
                Arc::new(MemMember::new("lone", 16 * MIB)) as Arc<dyn Member>
            )],
        );
        assert_eq!(
            create(one).await.unwrap_err().kind(),
            ErrorKind::InvalidInput
        );
        let tiny: Vec<Option<Arc<dyn Member>>> = (0..3)
            .map(|i| Some(Arc::new(MemMember::new(format!("t{i}"), 64 * 1024)) as Arc<dyn Member>))
            .collect();
        assert_eq!(
            create(spec("tiny", Level::Raid5, tiny))
                .await
                .unwrap_err()
                .kind(),
            ErrorKind::InvalidInput
        );
        // Unaligned and out-of-range I/O.
        let arr = &arr_a.array;
        assert_eq!(
            arr.read_to_buf(100, 512).await.unwrap_err().kind(),
            ErrorKind::Unaligned
        );
        assert_eq!(
            arr.read_to_buf(0, 100).await.unwrap_err().kind(),
            ErrorKind::Unaligned
        );
        assert_eq!(
            arr.read_to_buf(arr.size_bytes(), 512)
                .await
                .unwrap_err()
                .kind(),
            ErrorKind::OutOfRange
        );
        let e = arr
            .write_buf(arr.size_bytes() - 512, raidd_rt::AlignedBuf::zeroed(1024))
            .await;
        assert_eq!(e.unwrap_err().kind(), ErrorKind::OutOfRange);
        drop(arr_a);
        let after: Vec<Vec<u8>> = a.iter().chain(&b).map(|m| snapshot(m)).collect();
        assert!(before == after, "refused requests changed a member");
        // Corrupt superblock: one flipped byte.
        let mut byte = [0u8; 1];
        a[1].read_sync(4096 + 40, &mut byte);
        a[1].write_sync(4096 + 40, &[byte[0] ^ 0x55]);
        assert_eq!(
            kind(assemble(am.clone(), AssembleOptions::default()).await),
            ErrorKind::BadMetadata
        );
        // Unknown feature bit with a valid checksum.
        let mut sb = sb_of(&b[0]).await;
        sb.feature_map |= 0x8000;
        b[0].write_sync(4096, &sb.encode());
        assert_eq!(
            kind(assemble(bm[..1].to_vec(), AssembleOptions::default()).await),
            ErrorKind::BadMetadata
        );
        // A feature the kernel knows but raidd does not implement.
        sb.feature_map = raidd_md::feature::CLUSTERED;
        b[0].write_sync(4096, &sb.encode());
        assert_eq!(
            kind(assemble(bm[..1].to_vec(), AssembleOptions::default()).await),
            ErrorKind::Unsupported
        );
        // No superblock at all.
        let blank: Arc<dyn Member> = Arc::new(MemMember::new("blank", 16 * MIB));
        assert_eq!(
            kind(assemble(vec![blank], AssembleOptions::default()).await),
            ErrorKind::NotFound
        );
    });
}

/// Records `sectors` bad from data sector `at` in member `m`'s bad-block log (as the kernel
/// does when a write there fails), and leaves junk in those sectors (the kernel never wrote
/// them): a member read there would return it.
async fn record_bad_blocks(m: &MemMember, at: u64, sectors: u64) {
    let sb = sb_of(m).await;
    let log = (sb.super_offset as i64 + i64::from(sb.bblog_offset)) as u64 * 512;
    let start = sb.data_offset + at;
    let entry = raidd_md::badblocks::entry(start, sectors, sb.bblog_shift).unwrap();
    m.write_sync(log, &entry);
    m.write_sync(start * 512, &vec![0x5a; (sectors * 512) as usize]);
}

/// What member `m`'s bad-block log records.
async fn bad_blocks_of(m: &MemMember) -> Vec<raidd_md::badblocks::BadRange> {
    let sb = sb_of(m).await;
    let log = (sb.super_offset as i64 + i64::from(sb.bblog_offset)) as u64 * 512;
    let mut bytes = vec![0u8; usize::from(sb.bblog_size) * 512];
    m.read_sync(log, &mut bytes);
    raidd_md::badblocks::parse(&bytes, sb.bblog_shift).unwrap()
}

/// A member whose bad-block log records sectors (where the kernel never wrote the array's
/// data, and reads around them) is not used: the array runs without it, and reads never
/// return what those sectors hold. Added back, it is rebuilt whole (not by its bitmap, though
/// it missed no write) and its log emptied, after which it alone serves every sector. With
/// too few members left the error names each one set aside and why.
#[test]
fn members_with_bad_blocks_recorded_are_not_read() {
    raidd_rt::block_on(async {
        for (level, n) in [(Level::Raid1, 2), (Level::Raid5, 4)] {
            let what = format!("{level} over {n}");
            let raw = mems("b", n, 16 * MIB);
            let members: Vec<Arc<dyn Member>> =
                raw.iter().map(|m| m.clone() as Arc<dyn Member>).collect();
            let mut s = spec("bad", level, members.iter().cloned().map(Some).collect());
            s.bitmap_chunk = Some(64 << 10);
            let a = create(s).await.unwrap();
            let sectors = a.array.size_bytes() / 512;
            let mut model = Model::new(sectors, 11);
            common::write_pattern(&a.array, &mut model, 0, sectors).await;
            a.array.close().await.unwrap();
            drop(a);
            assert!(bad_blocks_of(&raw[1]).await.is_empty(), "{what}: a new log");
            record_bad_blocks(&raw[1], 200, 16).await;
            let b = assemble(members.clone(), AssembleOptions::default())
                .await
                .unwrap();
            let data_offset = sb_of(&raw[1]).await.data_offset;
            assert_eq!(
                b.report[1].decision,
                Decision::BadBlocks {
                    ranges: 1,
                    sectors: 16,
                    first: data_offset + 200
                },
                "{what}"
            );
            assert_eq!(b.array.slots().state(1), SlotState::Missing, "{what}");
            verify_all(&b.array, &model, &format!("{what}: without it")).await;
            // Added back: rebuilt whole, its log emptied.
            assert_eq!(
                b.array.add_member(members[1].clone()).await.unwrap(),
                raidd_engine::Added::Recovering(1),
                "{what}"
            );
            assert!(
                !b.array.slots().recovering_by_bitmap(1),
                "{what}: not by its bitmap"
            );
            assert!(
                bad_blocks_of(&raw[1]).await.is_empty(),
                "{what}: log emptied"
            );
            b.array
                .recover(1, raidd_engine::SyncLimits::UNLIMITED)
                .await
                .unwrap();
            b.array.fail_member(0).await.unwrap();
            verify_all(&b.array, &model, &format!("{what}: leaning on it")).await;
            b.array.close().await.unwrap();
        }
        // Both mirrors with bad blocks: not enough to run, and the error says why.
        let raw = mems("bb", 2, 16 * MIB);
        let members: Vec<Arc<dyn Member>> =
            raw.iter().map(|m| m.clone() as Arc<dyn Member>).collect();
        let a = create(spec(
            "both",
            Level::Raid1,
            members.iter().cloned().map(Some).collect(),
        ))
        .await
        .unwrap();
        a.array.close().await.unwrap();
        drop(a);
        record_bad_blocks(&raw[0], 8, 8).await;
        record_bad_blocks(&raw[1], 64, 8).await;
        let e = assemble(members.clone(), AssembleOptions::default())
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InsufficientMembers, "{e}");
        let msg = e.to_string();
        assert!(
            msg.contains("bb0: bad blocks") && msg.contains("bb1: bad blocks"),
            "{msg}"
        );
        // A new array over them does not inherit their logs.
        let mut s = spec(
            "again",
            Level::Raid1,
            members.iter().cloned().map(Some).collect(),
        );
        s.force = true;
        let a = create(s).await.unwrap();
        assert!(!a.array.is_degraded());
        for m in &raw {
            assert!(bad_blocks_of(m).await.is_empty());
        }
    });
}

/// md's write-mostly (a member's superblock devflags): a mirror reads from such a member only
/// when no other copy can be read, and while a resync is due, only if it is the copy the
/// resync keeps. A member added later does not take the flag from the superblock it copies.
#[test]
fn write_mostly_members_are_read_only_when_nothing_else_can_be() {
    raidd_rt::block_on(async {
        let raw = mems("w", 4, 16 * MIB);
        let plain: Vec<Arc<dyn Member>> = raw[..3]
            .iter()
            .map(|m| m.clone() as Arc<dyn Member>)
            .collect();
        let a = create(spec(
            "wm",
            Level::Raid1,
            plain.iter().cloned().map(Some).collect(),
        ))
        .await
        .unwrap();
        let sectors = a.array.size_bytes() / 512;
        let mut model = Model::new(sectors, 13);
        common::write_pattern(&a.array, &mut model, 0, sectors).await;
        a.array.close().await.unwrap();
        drop(a);
        for m in [&raw[0], &raw[2]] {
            let mut sb = sb_of(m).await;
            sb.devflags |= raidd_md::devflags::WRITE_MOSTLY;
            m.write_sync(sb.super_offset * 512, &sb.encode());
        }
        let (members, controls) = faulty(&raw[..3]);
        let b = assemble(members.clone(), AssembleOptions::default())
            .await
            .unwrap();
        assert!(
            b.array.slots().write_mostly(0)
                && !b.array.slots().write_mostly(1)
                && b.array.slots().write_mostly(2)
        );
        let reads = |c: &[Arc<FaultControl>]| c.iter().map(|c| c.reads()).collect::<Vec<_>>();
        let before = reads(&controls);
        verify_all(&b.array, &model, "write-mostly halves").await;
        let after = reads(&controls);
        assert_eq!(after[0], before[0], "read from write-mostly member 0");
        assert_eq!(after[2], before[2], "read from write-mostly member 2");
        assert!(after[1] > before[1]);
        // Only write-mostly members left: they serve.
        b.array.fail_member(1).await.unwrap();
        verify_all(&b.array, &model, "only write-mostly members").await;
        assert!(reads(&controls)[0] + reads(&controls)[2] > after[0] + after[2]);
        // A new member copies slot 0's superblock, not its flag, nor does it take over the
        // flag of the member whose slot it takes.
        b.array.remove_member("w1").await.unwrap();
        b.array.add_member(raw[3].clone()).await.unwrap();
        b.array
            .recover(1, raidd_engine::SyncLimits::UNLIMITED)
            .await
            .unwrap();
        b.array.fail_member(2).await.unwrap();
        b.array.remove_member("w2").await.unwrap();
        let back: Arc<dyn Member> = raw[1].clone();
        b.array.add_member(back).await.unwrap();
        assert!(!b.array.slots().write_mostly(1) && !b.array.slots().write_mostly(2));
        for m in [&raw[3], &raw[1]] {
            assert_eq!(sb_of(m).await.devflags, 0);
        }
        b.array
            .recover(2, raidd_engine::SyncLimits::UNLIMITED)
            .await
            .unwrap();
        b.array.close().await.unwrap();
        drop(b);
        assert_ne!(
            sb_of(&raw[0]).await.devflags & raidd_md::devflags::WRITE_MOSTLY,
            0,
            "the flag stays on the member's own superblock"
        );
    });
}
