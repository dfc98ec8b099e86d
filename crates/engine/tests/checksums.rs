//! Checksum tags (`raidd create --checksums`): silent corruption on a member (flipped bits,
//! misdirected blocks) is found on every read, the right bytes come from redundancy, the bad
//! blocks are rewritten, and each member's checksum count says how many blocks were bad.
//! The tags decide which of two mirror copies is right; a block with no good copy fails
//! its read rather than return wrong data. Tags survive a clean stop and are re-derived,
//! never reported, after a crash.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::sync::Arc;

use common::{Model, Rng};
use raidd_engine::array::rederive;
use raidd_engine::assemble::{assemble, AssembleOptions};
use raidd_engine::create::{create, CreateSpec};
use raidd_engine::member::MemMember;
use raidd_engine::{pattern, Array, Member, SlotState, SyncKind, SyncLimits};
use raidd_layout::Level;
use raidd_md::tags::Algorithm;

const MIB: u64 = 1 << 20;
/// Sectors of a 4 KiB block: the unit of every I/O of a checksummed array.
const BLOCK: u64 = 8;

fn mems(n: usize, size: u64) -> Vec<Arc<MemMember>> {
    (0..n)
        .map(|i| Arc::new(MemMember::new(format!("c{i}"), size)))
        .collect()
}

fn spec(level: Level, members: &[Arc<MemMember>]) -> CreateSpec {
    CreateSpec {
        name: "ck".into(),
        homehost: "test".into(),
        level,
        layout: None,
        chunk_sectors: Some(128),
        members: members
            .iter()
            .map(|m| Some(m.clone() as Arc<dyn Member>))
            .collect(),
        size_sectors: None,
        assume_clean: true,
        force: false,
        bitmap_chunk: None,
        ppl: false,
        journal: None,
        checksums: Some(Algorithm::Crc32c),
    }
}

fn as_members(raw: &[Arc<MemMember>]) -> Vec<Arc<dyn Member>> {
    raw.iter().map(|m| m.clone() as _).collect()
}

/// The array `members` make up, assembled again (after a clean stop or a crash).
async fn reassemble(members: &[Arc<dyn Member>]) -> Arc<Array> {
    assemble(members.to_vec(), AssembleOptions::default())
        .await
        .unwrap()
        .array
}

/// Fills the whole array with the pattern (no two blocks alike), in 1 MiB writes.
async fn fill(a: &Array, m: &mut Model) {
    let total = a.size_bytes() / 512;
    let mut at = 0;
    while at < total {
        let n = 2048.min(total - at);
        common::write_pattern(a, m, at, n).await;
        at += n;
    }
}

/// Random writes of whole 4 KiB blocks (1 to 48 of them), each a fresh generation.
async fn write_blocks(a: &Array, m: &mut Model, rng: &mut Rng, count: usize) {
    let blocks = a.size_bytes() / 4096;
    for _ in 0..count {
        let len = 1 + rng.below(48.min(blocks));
        let start = rng.below(blocks - len + 1);
        common::write_pattern(a, m, start * BLOCK, len * BLOCK).await;
    }
}

/// Reads the whole array in 4 KiB-aligned requests of varying size and checks every sector.
async fn verify_blocks(a: &Array, m: &Model, what: &str) {
    let total = a.size_bytes() / 512;
    let (mut pos, mut step) = (0, 1);
    while pos < total {
        let n = (step * BLOCK).min(total - pos);
        let buf = a
            .read_to_buf(pos * 512, (n * 512) as usize)
            .await
            .unwrap_or_else(|e| panic!("{what}: read {pos}+{n}: {e}"));
        let bad: Vec<_> = pattern::verify(&buf, pos, m.seed, |s| m.generation[s as usize])
            .into_iter()
            .filter(|mm| {
                !(m.generation[mm.sector as usize] == 0 && mm.problem == pattern::Problem::Zero)
            })
            .collect();
        assert!(
            bad.is_empty(),
            "{what}: {} bad, first: {}",
            bad.len(),
            bad[0]
        );
        pos += n;
        step = step * 5 % 37 + 1;
    }
}

/// Flips one bit of the 4 KiB block at member sector `sector` (data-relative) of slot
/// `role`, behind the array's back; returns the block's bytes from before.
fn flip(a: &Array, raw: &MemMember, role: usize, sector: u64, byte: usize) -> Vec<u8> {
    let at = a.slots().data_offset(role) + sector * 512;
    let mut before = vec![0u8; 4096];
    raw.read_sync(at, &mut before);
    let mut bad = before.clone();
    bad[byte] ^= 0x20;
    raw.write_sync(at, &bad);
    before
}

/// Puts block `from`'s bytes where block `to` belongs on slot `role` (a misdirected write).
fn misdirect(a: &Array, raw: &MemMember, role: usize, from: u64, to: u64) -> Vec<u8> {
    let base = a.slots().data_offset(role);
    let (mut before, mut moved) = (vec![0u8; 4096], vec![0u8; 4096]);
    raw.read_sync(base + to * 512, &mut before);
    raw.read_sync(base + from * 512, &mut moved);
    raw.write_sync(base + to * 512, &moved);
    before
}

fn raw_block(a: &Array, raw: &MemMember, role: usize, sector: u64) -> Vec<u8> {
    let mut b = vec![0u8; 4096];
    raw.read_sync(a.slots().data_offset(role) + sector * 512, &mut b);
    b
}

/// Corruption on two members of each level with redundancy, in data and parity, in blocks
/// no stripe row shares: every read returns the right bytes, a check finds what reads did
/// not touch (parity), each member counts exactly its bad blocks, and the member bytes are
/// right again afterwards.
#[test]
fn silent_corruption_is_found_counted_and_healed_from_redundancy() {
    for (level, n) in [
        (Level::Raid1, 2),
        (Level::Raid1, 3),
        (Level::Raid5, 4),
        (Level::Raid6, 5),
        (Level::Raid10, 4),
    ] {
        raidd_rt::block_on(async move {
            let raw = mems(n, 24 * MIB);
            let a = create(spec(level, &raw)).await.unwrap().array;
            assert_eq!(a.block_size(), 4096, "{level}: clients see 4 KiB blocks");
            let mut model = Model::new(a.size_bytes() / 512, 11);
            fill(&a, &mut model).await;
            write_blocks(&a, &mut model, &mut Rng(3), 120).await;
            // Member sectors in different stripe rows on slots 0 and 1 (chunks of 128
            // sectors: 0 in rows 0.., 1 in rows 16..).
            let plan: [(usize, Vec<u64>); 2] = [
                (0, vec![0, 8 * 128 + 16, 40 * 128 + 120, 90 * 128]),
                (1, vec![16 * 128 + 8, 60 * 128 + 64, 61 * 128 + 64]),
            ];
            let mut healthy = Vec::new();
            for (role, sectors) in &plan {
                for (k, &s) in sectors.iter().enumerate() {
                    let before = if k == 1 {
                        misdirect(&a, &raw[*role], *role, s + 128, s)
                    } else {
                        flip(&a, &raw[*role], *role, s, 100 + k * 7)
                    };
                    healthy.push((*role, s, before));
                }
            }
            verify_blocks(&a, &model, &format!("{level} corrupted")).await;
            let found = a
                .scrub(SyncKind::Check, SyncLimits::UNLIMITED, |_, _| {})
                .await
                .unwrap();
            assert_eq!(found, 0, "{level}: a check finds no mismatch");
            let st = a.status().await;
            for (role, sectors) in &plan {
                assert_eq!(a.slots().state(*role), SlotState::InSync, "{level} {role}");
                let io = st.slots[*role].io;
                assert_eq!(
                    io.checksum_errors,
                    sectors.len() as u64,
                    "{level} slot {role}: {io:?}"
                );
                assert_eq!(io.read_errors + io.write_errors, 0, "{level}: {io:?}");
                assert!(io.repaired_bytes >= 4096 * sectors.len() as u64, "{io:?}");
            }
            for s in &st.slots[2..] {
                assert_eq!(s.io.checksum_errors, 0, "{level}: {:?}", s.io);
            }
            for (role, s, before) in &healthy {
                assert!(
                    raw_block(&a, &raw[*role], *role, *s) == *before,
                    "{level}: slot {role} sector {s} holds the right bytes again"
                );
            }
            verify_blocks(&a, &model, &format!("{level} healed")).await;
            let again = a.status().await;
            for (role, _) in &plan {
                assert_eq!(
                    again.slots[*role].io.checksum_errors, st.slots[*role].io.checksum_errors,
                    "{level}: healed blocks are not reported again"
                );
            }
        });
    }
}

/// The copies' own tags say which is right: a RAID1 with each copy bad at another block
/// heals both; where both copies of one block are bad, its read fails (never wrong bytes)
/// and the blocks around it still read. RAID6 with two members bad in one stripe row
/// rebuilds both from the rest.
#[test]
fn tags_decide_between_copies_and_a_block_with_no_good_copy_fails() {
    raidd_rt::block_on(async {
        let raw = mems(2, 16 * MIB);
        let a = create(spec(Level::Raid1, &raw)).await.unwrap().array;
        let mut model = Model::new(a.size_bytes() / 512, 5);
        common::write_pattern(&a, &mut model, 0, 4096).await;
        flip(&a, &raw[0], 0, 64, 9);
        flip(&a, &raw[1], 1, 72, 9);
        verify_blocks(&a, &model, "raid1 both copies bad at other blocks").await;
        let st = a.status().await;
        assert_eq!(
            st.slots[0].io.checksum_errors + st.slots[1].io.checksum_errors,
            2
        );
        // Both copies of the block at sector 800.
        flip(&a, &raw[0], 0, 800, 1);
        flip(&a, &raw[1], 1, 800, 2);
        for _ in 0..3 {
            let e = a.read_to_buf(800 * 512, 4096).await.unwrap_err();
            assert_eq!(e.kind(), raidd_engine::ErrorKind::Io, "{e}");
        }
        assert!(a.read_to_buf(808 * 512, 4096).await.is_ok());
        assert!(a.read_to_buf(792 * 512, 4096).await.is_ok());
        // Both members stay: failing either would lose every other block's redundancy.
        let st = a.status().await;
        assert!(
            st.slots.iter().all(|s| s.state == SlotState::InSync),
            "{st:?}"
        );
        assert_eq!(
            st.slots[0].io.checksum_errors + st.slots[1].io.checksum_errors,
            4
        );
        // Written again, the block is good on both copies.
        common::write_pattern(&a, &mut model, 800, 8).await;
        verify_blocks(&a, &model, "raid1 after the lost block was written").await;

        let _ = tracing_subscriber::fmt().with_test_writer().try_init();
        let raw = mems(5, 16 * MIB);
        let a = create(spec(Level::Raid6, &raw)).await.unwrap().array;
        let mut model = Model::new(a.size_bytes() / 512, 6);
        common::write_pattern(&a, &mut model, 0, 8192).await;
        // Row 8 of stripe 2 on slots 0 and 3; another row of it on slot 1.
        flip(&a, &raw[0], 0, 2 * 128 + 8, 3);
        flip(&a, &raw[3], 3, 2 * 128 + 8, 4);
        flip(&a, &raw[1], 1, 2 * 128 + 40, 5);
        verify_blocks(&a, &model, "raid6 two bad in a row").await;
        a.scrub(SyncKind::Check, SyncLimits::UNLIMITED, |_, _| {})
            .await
            .unwrap();
        let st = a.status().await;
        let counted: u64 = st.slots.iter().map(|s| s.io.checksum_errors).sum();
        assert_eq!(
            counted,
            3,
            "{:?}",
            st.slots.iter().map(|s| s.io).collect::<Vec<_>>()
        );
        assert!(st.slots.iter().all(|s| s.state == SlotState::InSync));
    });
}

/// Re-deriving is paced as a sync pass is: with a speed limit it takes at least the time
/// the limit allows for its bytes (the limit is set from an unpaced run of the same work, so
/// that a pass that ignored it would end in a quarter of that time).
#[test]
fn rederiving_keeps_to_the_speed_limit() {
    raidd_rt::block_on(async {
        let mut crashed = Vec::new();
        for _ in 0..2 {
            let raw = mems(3, 8 * MIB);
            let a = create(spec(Level::Raid5, &raw)).await.unwrap().array;
            let mut model = Model::new(a.size_bytes() / 512, 4);
            write_blocks(&a, &mut model, &mut Rng(4), 20).await;
            drop(a); // a crash: every tag suspect at the next assembly
            crashed.push(reassemble(&as_members(&raw)).await);
        }
        let blocks = rederive::unverified_tags(&crashed[0]);
        assert_eq!(blocks, rederive::unverified_tags(&crashed[1]));
        let started = std::time::Instant::now();
        let unpaced = SyncLimits::UNLIMITED;
        assert!(rederive::rederive_checksums(&crashed[0], unpaced, &|| true)
            .await
            .unwrap());
        let t0 = started.elapsed().as_secs_f64();
        // Each member's first MiB goes at once; the rest keeps to the limit.
        let paced_kib = (blocks * 4).saturating_sub(3 * 1024);
        let floor = (4.0 * t0).max(0.3);
        let max_kib_s = (paced_kib as f64 / floor) as u64;
        let limits = SyncLimits {
            max_kib_s,
            ..SyncLimits::default()
        };
        let started = std::time::Instant::now();
        assert!(rederive::rederive_checksums(&crashed[1], limits, &|| true)
            .await
            .unwrap());
        let t1 = started.elapsed().as_secs_f64();
        assert!(
            t1 >= floor * 0.95,
            "{blocks} blocks at {max_kib_s} KiB/s took {t1:.3} s (unpaced {t0:.3} s)"
        );
        assert_eq!(rederive::unverified_tags(&crashed[1]), 0);
    });
}

/// Tags written at a clean stop are trusted at the next assembly (corruption made while
/// the array was stopped is found); after a crash (no clean stop) they are re-derived from
/// the data and nothing is reported for the writes that were in flight.
#[test]
fn tags_survive_a_clean_stop_and_are_rederived_after_a_crash() {
    raidd_rt::block_on(async {
        let raw = mems(3, 16 * MIB);
        let a = create(spec(Level::Raid5, &raw)).await.unwrap().array;
        let mut model = Model::new(a.size_bytes() / 512, 9);
        write_blocks(&a, &mut model, &mut Rng(8), 60).await;
        a.close().await.unwrap();
        drop(a);
        let members = as_members(&raw);
        let a = reassemble(&members).await;
        flip(&a, &raw[2], 2, 300, 77);
        verify_blocks(&a, &model, "after a clean stop").await;
        a.scrub(SyncKind::Check, SyncLimits::UNLIMITED, |_, _| {})
            .await
            .unwrap();
        assert_eq!(a.status().await.slots[2].io.checksum_errors, 1);
        // A crash: writes, and no clean stop. Tag pages never flushed are behind the data.
        write_blocks(&a, &mut model, &mut Rng(9), 60).await;
        drop(a);
        let a = reassemble(&members).await;
        // Suspect until re-derived (no bitmap: every block), read meanwhile without alarms.
        let blocks = a.slots().member(0).unwrap().checksums().unwrap().counts();
        assert!(rederive::unverified_tags(&a) > 0, "{blocks:?}");
        verify_blocks(&a, &model, "after a crash, tags suspect").await;
        // Asked to stop (a daemon's shutdown), the pass stops between its steps.
        let before = rederive::unverified_tags(&a);
        let steps = std::cell::Cell::new(0);
        let two_steps = || {
            steps.set(steps.get() + 1);
            steps.get() <= 2
        };
        assert!(
            !rederive::rederive_checksums(&a, SyncLimits::UNLIMITED, &two_steps)
                .await
                .unwrap()
        );
        let after = rederive::unverified_tags(&a);
        assert!(after > 0 && after < before, "{before} → {after}");
        a.resync(|_, _| {}).await.unwrap();
        verify_blocks(&a, &model, "after a crash").await;
        assert!(
            rederive::rederive_checksums(&a, SyncLimits::UNLIMITED, &|| true)
                .await
                .unwrap()
        );
        assert_eq!(rederive::unverified_tags(&a), 0);
        let st = a.status().await;
        assert!(
            st.slots.iter().all(|s| s.io.checksum_errors == 0),
            "no false alarms: {:?}",
            st.slots.iter().map(|s| s.io).collect::<Vec<_>>()
        );
        // Re-derived, the tags find corruption again, and a clean stop trusts them.
        flip(&a, &raw[1], 1, 600, 5);
        verify_blocks(&a, &model, "after re-deriving").await;
        a.scrub(SyncKind::Check, SyncLimits::UNLIMITED, |_, _| {})
            .await
            .unwrap();
        assert_eq!(a.status().await.slots[1].io.checksum_errors, 1);
        a.close().await.unwrap();
        drop(a);
        let members = as_members(&raw);
        let a = reassemble(&members).await;
        assert_eq!(
            rederive::unverified_tags(&a),
            0,
            "trusted after a clean stop"
        );
    });
}

/// With a write-intent bitmap, a crash of raidd's leaves only the regions the bitmap marks
/// suspect: the rest stays verified from the start, and a byte changed there is found.
#[test]
fn after_a_crash_only_the_bitmap_regions_are_rederived() {
    raidd_rt::block_on(async {
        for level in [Level::Raid5, Level::Raid1] {
            let raw = mems(4, 40 * MIB);
            let mut sp = spec(level, &raw);
            sp.bitmap_chunk = Some(1 << 20);
            let a = create(sp).await.unwrap().array;
            let mut model = Model::new(a.size_bytes() / 512, 3);
            fill(&a, &mut model).await;
            a.close().await.unwrap();
            drop(a);
            let members = as_members(&raw);
            let a = reassemble(&members).await;
            // A crash: writes into the first MiB of the array only, no clean stop.
            common::write_pattern(&a, &mut model, 0, 64).await;
            common::write_pattern(&a, &mut model, 512, 8).await;
            drop(a);
            let a = reassemble(&members).await;
            let total: u64 = (0..4)
                .map(|r| a.slots().member(r).unwrap().checksums().unwrap().counts())
                .map(|c| c.unverified_blocks + c.verified_blocks)
                .sum();
            let suspect = rederive::unverified_tags(&a);
            assert!(
                suspect > 0 && suspect <= 4 * 256,
                "{level}: {suspect} blocks suspect of {total}"
            );
            // Outside the marked regions the tags are trusted from the start.
            flip(&a, &raw[2], 2, 20 * 2048, 9);
            a.resync(|_, _| {}).await.unwrap();
            assert!(
                rederive::rederive_checksums(&a, SyncLimits::UNLIMITED, &|| true)
                    .await
                    .unwrap()
            );
            verify_blocks(&a, &model, "after the crash").await;
            let errors: u64 = a
                .status()
                .await
                .slots
                .iter()
                .map(|s| s.io.checksum_errors)
                .sum();
            assert_eq!(
                errors, 1,
                "{level}: the one flipped block, and no false alarm"
            );
            // Crashes in a row: after one, the tags re-derived before any resync, writes,
            // and a crash again: narrowed again (the headers say dirty at the count the
            // superblocks say once the tags match).
            let members = as_members(&raw);
            common::write_pattern(&a, &mut model, 256, 16).await;
            drop(a);
            let a = reassemble(&members).await;
            assert!(
                rederive::rederive_checksums(&a, SyncLimits::UNLIMITED, &|| true)
                    .await
                    .unwrap()
            );
            common::write_pattern(&a, &mut model, 1024, 16).await;
            drop(a);
            let a = reassemble(&members).await;
            let suspect = rederive::unverified_tags(&a);
            assert!(
                suspect > 0 && suspect <= 4 * 256,
                "{level}: {suspect} blocks suspect after crashes in a row"
            );
            assert!(
                rederive::rederive_checksums(&a, SyncLimits::UNLIMITED, &|| true)
                    .await
                    .unwrap()
            );
            verify_blocks(&a, &model, "after crashes in a row").await;
        }
    });
}

/// A member added to an array with checksums gets tags as its rebuild writes it: after the
/// rebuild its blocks are verified (a flipped bit there is found and healed), and a clean
/// stop leaves tags the next start trusts.
#[test]
fn a_member_added_later_is_verified_once_rebuilt() {
    raidd_rt::block_on(async {
        for (level, n) in [(Level::Raid1, 2), (Level::Raid5, 3)] {
            let raw = mems(n, 16 * MIB);
            let a = create(spec(level, &raw)).await.unwrap().array;
            let mut model = Model::new(a.size_bytes() / 512, 11);
            fill(&a, &mut model).await;
            a.fail_member(1).await.unwrap();
            a.remove_member("c1").await.unwrap();
            let new = Arc::new(MemMember::new("new", 16 * MIB));
            a.add_member(new.clone()).await.unwrap();
            a.recover(1, SyncLimits::UNLIMITED).await.unwrap();
            assert!(
                a.slots().member(1).unwrap().checksums().is_some(),
                "{level}"
            );
            assert!(
                rederive::rederive_checksums(&a, SyncLimits::UNLIMITED, &|| true)
                    .await
                    .unwrap()
            );
            assert_eq!(rederive::unverified_tags(&a), 0);
            write_blocks(&a, &mut model, &mut Rng(4), 20).await;
            flip(&a, &new, 1, 64, 3);
            verify_blocks(&a, &model, "after the rebuild").await;
            a.scrub(SyncKind::Check, SyncLimits::UNLIMITED, |_, _| {})
                .await
                .unwrap();
            assert_eq!(a.status().await.slots[1].io.checksum_errors, 1, "{level}");
            a.close().await.unwrap();
            drop(a);
            let members: Vec<Arc<dyn Member>> =
                vec![raw[0].clone(), new.clone(), raw[2.min(n - 1)].clone()];
            let members = members[..n].to_vec();
            let a = reassemble(&members).await;
            assert_eq!(
                rederive::unverified_tags(&a),
                0,
                "{level}: trusted after a clean stop"
            );
            verify_blocks(&a, &model, "after a restart").await;
        }
    });
}

/// Checksums put on an array made without them (`raidd grow --checksums`): refused where a
/// member has no room past what the array uses (nothing changes), else every member's data
/// area leaves room for its tags, the next start re-derives them all from the data without
/// a false alarm, and from then on they find corruption and heal it.
#[test]
fn checksums_are_added_to_an_array_made_without_them() {
    raidd_rt::block_on(async {
        for (level, n) in [(Level::Raid5, 4), (Level::Raid1, 2)] {
            let raw = mems(n, 16 * MIB);
            let members = as_members(&raw);
            let mut sp = spec(level, &raw);
            sp.checksums = None;
            let full = create(sp.clone()).await.unwrap().array;
            let e = raidd_engine::array::add_checksums::add_checksums(&full, Algorithm::Crc32c)
                .await
                .unwrap_err();
            assert!(e.to_string().contains("no room for checksum tags"), "{e}");
            full.close().await.unwrap();
            drop(full);
            sp.size_sectors = Some(12 * 2048);
            sp.force = true;
            let a = create(sp).await.unwrap().array;
            let mut model = Model::new(a.size_bytes() / 512, 21);
            fill(&a, &mut model).await;
            let size = a.size_bytes();
            let bytes = raidd_engine::array::add_checksums::add_checksums(&a, Algorithm::Crc32c)
                .await
                .unwrap();
            assert!(
                bytes > 0 && bytes < n as u64 * 64 * 1024,
                "{level}: {bytes}"
            );
            a.close().await.unwrap();
            drop(a);
            let a = reassemble(&members).await;
            assert_eq!(a.size_bytes(), size, "{level}: the array's size stays");
            assert!(a.status().await.checksums.is_some(), "{level}");
            assert!(rederive::unverified_tags(&a) > 0);
            verify_blocks(&a, &model, "before the tags are derived").await;
            assert!(
                rederive::rederive_checksums(&a, SyncLimits::UNLIMITED, &|| true)
                    .await
                    .unwrap()
            );
            let st = a.status().await;
            assert!(
                st.slots.iter().all(|s| s.io.checksum_errors == 0),
                "{level}"
            );
            flip(&a, &raw[1], 1, 256, 1);
            verify_blocks(&a, &model, "after the tags are derived").await;
            a.scrub(SyncKind::Check, SyncLimits::UNLIMITED, |_, _| {})
                .await
                .unwrap();
            assert_eq!(a.status().await.slots[1].io.checksum_errors, 1, "{level}");
            let e = raidd_engine::array::add_checksums::add_checksums(&a, Algorithm::Crc32c)
                .await
                .unwrap_err();
            assert!(e.to_string().contains("checksums already"), "{e}");
            a.close().await.unwrap();
            drop(a);
            let a = reassemble(&members).await;
            assert_eq!(rederive::unverified_tags(&a), 0, "{level}: trusted now");
        }
    });
}

/// A rebuild that meets a block that does not match its tag on a source member: RAID6
/// rebuilds both from the parity left and rewrites the bad one (the source stays, one
/// checksum error counted, the new member right); RAID5 has nothing to rebuild it from: the
/// rebuild stops naming the stripe, the source stays in its slot, and the array goes on
/// serving degraded, every other block right.
#[test]
fn a_rebuild_keeps_a_source_whose_block_is_bad_and_mends_it_where_parity_allows() {
    raidd_rt::block_on(async {
        for (level, n) in [(Level::Raid6, 5), (Level::Raid5, 4)] {
            let raw = mems(n, 16 * MIB);
            let a = create(spec(level, &raw)).await.unwrap().array;
            let mut model = Model::new(a.size_bytes() / 512, 31);
            fill(&a, &mut model).await;
            let last = n - 1;
            a.fail_member(last).await.unwrap();
            a.remove_member(&format!("c{last}")).await.unwrap();
            // Stripe 2 of slot 1, data or parity: a flipped bit.
            flip(&a, &raw[1], 1, 2 * 128 + 16, 40);
            let new = Arc::new(MemMember::new("new", 16 * MIB));
            a.add_member(new.clone()).await.unwrap();
            let r = a.recover(last, SyncLimits::UNLIMITED).await;
            assert_eq!(
                a.slots().state(1),
                SlotState::InSync,
                "{level}: the source stays"
            );
            assert_eq!(a.status().await.slots[1].io.checksum_errors, 1, "{level}");
            if level == Level::Raid6 {
                r.unwrap();
                assert_eq!(a.slots().state(last), SlotState::InSync);
                verify_blocks(&a, &model, "after the rebuild").await;
                a.scrub(SyncKind::Check, SyncLimits::UNLIMITED, |_, _| {})
                    .await
                    .unwrap();
                let st = a.status().await;
                assert_eq!(st.slots[1].io.checksum_errors, 1, "healed: nothing more");
                assert_eq!(st.slots[last].io.checksum_errors, 0);
            } else {
                let e = r.unwrap_err().to_string();
                assert!(e.contains("stripe 2") && e.contains("no good copy"), "{e}");
                assert!(!a.is_failed());
                assert_eq!(a.slots().state(last), SlotState::Recovering);
                // Stripes the rebuild did not reach read as they are; the stripe with no
                // good copy fails its reads rather than return wrong bytes.
                let stripe_bytes = 3 * 128 * 512;
                let good = a.read_to_buf(0, 2 * stripe_bytes).await.unwrap();
                assert!(
                    pattern::verify(&good, 0, model.seed, |s| model.generation[s as usize])
                        .is_empty()
                );
            }
        }
    });
}

/// A mirror's rebuild that meets a block that does not match its tag on a source: with
/// another copy left (RAID1 over three) the source stays and its block is rewritten, every
/// copy right afterwards; with none (RAID1 over two) the rebuild stops, naming the region,
/// and the source stays in its slot, the array serving degraded.
#[test]
fn a_mirror_rebuild_keeps_a_source_whose_block_is_bad() {
    raidd_rt::block_on(async {
        for n in [3, 2] {
            let raw = mems(n, 16 * MIB);
            let a = create(spec(Level::Raid1, &raw)).await.unwrap().array;
            let mut model = Model::new(a.size_bytes() / 512, 41);
            fill(&a, &mut model).await;
            let last = n - 1;
            a.fail_member(last).await.unwrap();
            a.remove_member(&format!("c{last}")).await.unwrap();
            // A bad block on each source, far apart: whichever copy a run is read from.
            flip(&a, &raw[0], 0, 128, 7);
            if n == 3 {
                flip(&a, &raw[1], 1, 8 * 2048, 7);
            }
            let new = Arc::new(MemMember::new("new", 16 * MIB));
            a.add_member(new.clone()).await.unwrap();
            let r = a.recover(last, SyncLimits::UNLIMITED).await;
            assert!(
                (0..last).all(|s| a.slots().state(s) == SlotState::InSync),
                "sources stay"
            );
            if n == 3 {
                r.unwrap();
                verify_blocks(&a, &model, "after the rebuild").await;
                a.scrub(SyncKind::Check, SyncLimits::UNLIMITED, |_, _| {})
                    .await
                    .unwrap();
                let st = a.status().await;
                let repaired: u64 = st.slots.iter().map(|s| s.io.repaired_bytes).sum();
                assert_eq!(repaired, 2 * 4096, "only the bad blocks are rewritten");
                let counted: u64 = st.slots.iter().map(|s| s.io.checksum_errors).sum();
                assert_eq!(
                    counted,
                    2,
                    "each bad block once: {:?}",
                    st.slots.iter().map(|s| s.io).collect::<Vec<_>>()
                );
                // The bytes on every copy are the same again where the two were bad.
                for sector in [128, 8 * 2048] {
                    let first = raw_block(&a, &raw[0], 0, sector);
                    assert_eq!(raw_block(&a, &raw[1], 1, sector), first, "{sector}");
                    assert_eq!(raw_block(&a, &new, 2, sector), first, "{sector}");
                }
            } else {
                let e = r.unwrap_err().to_string();
                assert!(e.contains("no good copy"), "{e}");
                assert!(!a.is_failed());
                assert_eq!(a.status().await.slots[0].io.checksum_errors, 1);
            }
        }
    });
}

/// A replace whose old member has a block that does not match its tag: the window is
/// rebuilt onto the old member from the others and copied on, so the replace finishes, no
/// member fails, and the new member holds the right bytes.
#[test]
fn a_replace_rebuilds_a_bad_block_of_the_old_member_and_goes_on() {
    raidd_rt::block_on(async {
        for (level, n) in [(Level::Raid5, 4), (Level::Raid1, 2)] {
            let raw = mems(n, 16 * MIB);
            let a = create(spec(level, &raw)).await.unwrap().array;
            let mut model = Model::new(a.size_bytes() / 512, 51);
            fill(&a, &mut model).await;
            flip(&a, &raw[1], 1, 3 * 128 + 24, 2);
            let new = Arc::new(MemMember::new("new", 16 * MIB));
            a.replace(1, new.clone(), SyncLimits::UNLIMITED)
                .await
                .unwrap();
            assert!(
                (0..n).all(|s| a.slots().state(s) == SlotState::InSync),
                "{level}"
            );
            assert_eq!(a.slots().member(1).unwrap().info().name, "new");
            verify_blocks(&a, &model, "after the replace").await;
            let found = a
                .scrub(SyncKind::Check, SyncLimits::UNLIMITED, |_, _| {})
                .await
                .unwrap();
            assert_eq!(found, 0, "{level}");
            let st = a.status().await;
            assert!(
                st.slots.iter().all(|s| s.io.checksum_errors == 0),
                "{level}: the new member's bytes are right: {:?}",
                st.slots.iter().map(|s| s.io).collect::<Vec<_>>()
            );
        }
    });
}
