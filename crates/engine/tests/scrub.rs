//! Scrubbing: `check` counts inconsistent sectors as md's mismatch_cnt does (whole 4 KiB
//! blocks) and changes nothing; `repair` rewrites the redundancy and a second check finds
//! nothing; resync after an unclean start runs through the same pass. Corruption is put on
//! the members behind the array's back.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;

use common::{random_writes, verify_all, write_pattern, Model, Rng};
use raidd_engine::assemble::{assemble, examine, AssembleOptions};
use raidd_engine::create::{create, CreateSpec};
use raidd_engine::member::MemMember;
use raidd_engine::{ErrorKind, Member, SyncKind, SyncLimits};
use raidd_lab::{FaultMember, FaultPlan};
use raidd_layout::{Geometry, Level};

const MEMBER_BYTES: u64 = 4 << 20;

fn spec(level: Level, members: Vec<Arc<dyn Member>>, assume_clean: bool) -> CreateSpec {
    CreateSpec {
        name: "scrub".into(),
        homehost: "test".into(),
        level,
        layout: None,
        chunk_sectors: Some(16),
        members: members.into_iter().map(Some).collect(),
        size_sectors: Some(2048),
        assume_clean,
        force: false,
        bitmap_chunk: None,
        ppl: false,
        journal: None,
        checksums: None,
    }
}

fn mems(n: usize) -> Vec<Arc<MemMember>> {
    (0..n)
        .map(|i| Arc::new(MemMember::new(format!("c{i}"), MEMBER_BYTES)))
        .collect()
}

/// Members full of garbage, different on each, whose parity cannot match.
fn junk_mems(n: usize) -> Vec<Arc<MemMember>> {
    let raw = mems(n);
    for (i, m) in raw.iter().enumerate() {
        let junk: Vec<u8> = (0..MEMBER_BYTES)
            .map(|b| (b as usize * 31 + i * 7) as u8)
            .collect();
        m.write_sync(0, &junk);
    }
    raw
}

fn dyn_members(raw: &[Arc<MemMember>]) -> Vec<Arc<dyn Member>> {
    raw.iter().map(|m| m.clone() as _).collect()
}

/// `spec` with an internal write-intent bitmap of 64 KiB per bit.
fn bitmap_spec(level: Level, members: Vec<Arc<dyn Member>>, assume_clean: bool) -> CreateSpec {
    let mut s = spec(level, members, assume_clean);
    s.bitmap_chunk = Some(64 << 10);
    s
}

/// Flips a byte in member sector `sector` (of the data area), behind the array's back.
async fn flip_sector(m: &MemMember, sector: u64) {
    let at = examine(m).await.unwrap().data_offset * 512 + sector * 512;
    let mut b = [0u8; 512];
    m.read_sync(at, &mut b);
    b[17] ^= 0xff;
    m.write_sync(at, &b);
}

/// Flips bytes in member sectors `sector` and `sector + 9` (two different 4 KiB blocks).
async fn corrupt(m: &MemMember, sector: u64) {
    for s in [sector, sector + 9] {
        flip_sector(m, s).await;
    }
}

async fn scrub(a: &raidd_engine::Array, kind: SyncKind) -> u64 {
    a.scrub(kind, SyncLimits::UNLIMITED, |_, _| {})
        .await
        .unwrap()
}

#[test]
fn check_counts_and_repair_fixes_every_level() {
    raidd_rt::block_on(async {
        for (level, n) in [
            (Level::Raid1, 2),
            (Level::Raid1, 3),
            (Level::Raid10, 4),
            (Level::Raid4, 3),
            (Level::Raid5, 4),
            (Level::Raid6, 5),
        ] {
            let raw = mems(n);
            let members = dyn_members(&raw);
            let a = create(spec(level, members, true)).await.unwrap();
            let array = a.array.clone();
            let sectors = array.size_bytes() / 512;
            let mut model = Model::new(sectors, 3);
            write_pattern(&array, &mut model, 0, sectors).await;
            assert_eq!(scrub(&array, SyncKind::Check).await, 0, "{level} n={n}");
            // Corrupt what repair rewrites: a second copy, or parity (P of stripe 2).
            let (victim, sector) = match array.geometry() {
                Geometry::Parity(pg) => (pg.stripe_map(2).p, pg.member_sector(2, 0)),
                g => {
                    let piece = &g.pieces(100, 1)[0];
                    (piece.copies[1].member, piece.copies[1].sector)
                }
            };
            corrupt(&raw[victim], sector).await;
            let what = format!("{level} n={n}, member {victim} sector {sector}");
            assert_eq!(scrub(&array, SyncKind::Check).await, 16, "{what}");
            // Check changed nothing.
            assert_eq!(scrub(&array, SyncKind::Check).await, 16, "{what}");
            assert_eq!(scrub(&array, SyncKind::Repair).await, 16, "{what}");
            assert_eq!(scrub(&array, SyncKind::Check).await, 0, "{what}");
            verify_all(&array, &model, &what).await;
            // The repaired copy serves reads alone.
            for m in 0..n {
                if m != victim && array.geometry().redundancy() > 0 {
                    let mut missing = vec![false; n];
                    missing[m] = true;
                    if array.geometry().survives(&missing) && m != victim {
                        array.fail_member(m).await.unwrap();
                        break;
                    }
                }
            }
            verify_all(&array, &model, &format!("{what}, after repair, degraded")).await;
            // Degraded: parity has nothing left to compare with; mirrors compare the copies
            // left (they match after the repair).
            let r = array
                .scrub(SyncKind::Check, SyncLimits::UNLIMITED, |_, _| {})
                .await;
            if level.has_parity() {
                assert_eq!(r.unwrap_err().kind(), ErrorKind::InvalidInput, "{what}");
            } else {
                assert_eq!(r.unwrap(), 0, "{what}, degraded");
            }
        }
    });
}

/// RAID0 has nothing to scrub; a read-only array may be checked but not repaired.
#[test]
fn scrub_refusals() {
    raidd_rt::block_on(async {
        let raw = mems(2);
        let members = dyn_members(&raw);
        let a = create(spec(Level::Raid0, members, true)).await.unwrap();
        let err = a
            .array
            .scrub(SyncKind::Check, SyncLimits::UNLIMITED, |_, _| {})
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        a.array.close().await.unwrap();

        let raw = mems(3);
        let members = dyn_members(&raw);
        let a = create(spec(Level::Raid5, members.clone(), true))
            .await
            .unwrap();
        a.array.close().await.unwrap();
        drop(a);
        let ro = assemble(members, AssembleOptions::read_only())
            .await
            .unwrap();
        assert_eq!(scrub(&ro.array, SyncKind::Check).await, 0);
        let err = ro
            .array
            .scrub(SyncKind::Repair, SyncLimits::UNLIMITED, |_, _| {})
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::ReadOnly);
    });
}

/// A new array that was not assumed clean has inconsistent parity until its initial resync;
/// the resync fixes it without counting, after which the array is clean.
#[test]
fn resync_makes_redundancy_consistent() {
    raidd_rt::block_on(async {
        for (level, n) in [(Level::Raid1, 2), (Level::Raid5, 4), (Level::Raid6, 4)] {
            // Garbage on the members before creation: the parity cannot match it.
            let raw = junk_mems(n);
            let members = dyn_members(&raw);
            let a = create(spec(level, members, false)).await.unwrap();
            let array = a.array.clone();
            assert!(array.needs_resync(), "{level}");
            assert!(scrub(&array, SyncKind::Check).await > 0, "{level}");
            assert_eq!(scrub(&array, SyncKind::Resync).await, 0, "{level}");
            assert!(!array.needs_resync(), "{level}");
            assert_eq!(scrub(&array, SyncKind::Check).await, 0, "{level}");
            array.close().await.unwrap();
            let sb = examine(&*raw[0]).await.unwrap();
            assert!(sb.is_clean(), "{level}: clean after resync and close");
        }
    });
}

/// Until its resync has passed them, a new (or uncleanly stopped) array's parity may not match
/// its data. A small write there must leave its rows consistent (reconstruct-write), not
/// carry the mismatch forward by difference (read-modify-write): otherwise a member lost
/// before the resync gets there takes the acknowledged write with it. Every member is lost
/// in turn after one 4 KiB write on parity junk, and the write must read back each time.
#[test]
fn writes_before_the_resync_survive_a_lost_member() {
    raidd_rt::block_on(async {
        for (level, n) in [(Level::Raid5, 4), (Level::Raid5, 6), (Level::Raid6, 6)] {
            for lost in 0..n {
                let raw = junk_mems(n);
                let members = dyn_members(&raw);
                let a = create(spec(level, members, false)).await.unwrap();
                let array = a.array.clone();
                assert!(array.needs_resync(), "{level}");
                let mut model = Model::new(array.size_bytes() / 512, 21);
                // Half of a data chunk (chunks are 16 sectors), in the second stripe.
                let at = 16 * (n as u64) + 4;
                write_pattern(&array, &mut model, at, 8).await;
                array.fail_member(lost).await.unwrap();
                let buf = array.read_to_buf(at * 512, 8 * 512).await.unwrap();
                let bad = raidd_engine::pattern::verify(&buf, at, model.seed, |s| {
                    model.generation[s as usize]
                });
                assert!(
                    bad.is_empty(),
                    "{level} over {n}, member {lost} lost: {} of 8 sectors wrong",
                    bad.len()
                );
            }
        }
    });
}

/// Small writes run while a resync of parity junk walks the array, and the resync stops half
/// way; then a member is lost. Every write must read back: those behind the resync point
/// (trusted parity, read-modify-write) as well as those ahead of it (reconstruct-write), and
/// those that waited at the resync's window. Each member is lost in turn, over a few seeds.
#[test]
fn writes_during_an_interrupted_resync_survive_a_lost_member() {
    for seed in 1..=3u64 {
        for (level, n) in [(Level::Raid5, 4), (Level::Raid5, 6), (Level::Raid6, 6)] {
            for lost in 0..n {
                raidd_rt::block_on(async move {
                    let what = format!("seed {seed}, {level} over {n}, member {lost} lost");
                    let raw = junk_mems(n);
                    let members = dyn_members(&raw);
                    let a = create(spec(level, members, false)).await.unwrap();
                    let array = a.array.clone();
                    let resync = raidd_rt::spawn_local({
                        let array = array.clone();
                        async move {
                            // Windows of two stripes: the writes meet many of them.
                            let limits = SyncLimits {
                                window_bytes: 16 << 10,
                                ..SyncLimits::UNLIMITED
                            };
                            let stop = array.clone();
                            array
                                .scrub(SyncKind::Resync, limits, move |done, total| {
                                    if done >= total / 2 {
                                        stop.passes().cancel();
                                    }
                                })
                                .await
                        }
                    });
                    let writer = raidd_rt::spawn_local({
                        let array = array.clone();
                        async move {
                            let sectors = array.size_bytes() / 512;
                            let mut model = Model::new(sectors, seed);
                            let mut rng = Rng(seed);
                            for _ in 0..150 {
                                let len = 1 + rng.below(12);
                                let start = rng.below(sectors - len + 1);
                                write_pattern(&array, &mut model, start, len).await;
                            }
                            model
                        }
                    });
                    let model = writer.await;
                    let r = resync.await;
                    assert_eq!(r.unwrap_err().kind(), ErrorKind::Interrupted, "{what}");
                    assert!(array.needs_resync(), "{what}");
                    array.fail_member(lost).await.unwrap();
                    let buf = array
                        .read_to_buf(0, array.size_bytes() as usize)
                        .await
                        .unwrap();
                    let bad: Vec<_> = raidd_engine::pattern::verify(&buf, 0, model.seed, |s| {
                        model.generation[s as usize]
                    })
                    .into_iter()
                    .filter(|m| model.generation[m.sector as usize] != 0)
                    .collect();
                    assert!(
                        bad.is_empty(),
                        "{what}: {} written sectors wrong, first {}",
                        bad.len(),
                        bad[0]
                    );
                });
            }
        }
    }
}

/// Parity is trusted again where the resync has passed, before it ends: behind an
/// interrupted resync a small write that ties goes to read-modify-write, ahead of it to
/// reconstruct-write; once the resync has finished, to read-modify-write everywhere.
#[test]
fn the_resync_point_decides_where_parity_is_trusted() {
    raidd_rt::block_on(async {
        let raw = mems(4);
        let members = dyn_members(&raw);
        let a = create(spec(Level::Raid5, members, false)).await.unwrap();
        let array = a.array.clone();
        let mut model = Model::new(array.size_bytes() / 512, 22);
        // Windows of 64 KiB per member: eight stripes of 16-sector chunks. Stop after one.
        let limits = SyncLimits {
            window_bytes: 64 << 10,
            ..SyncLimits::UNLIMITED
        };
        let r = array
            .scrub(SyncKind::Resync, limits, |done, _| {
                if done > 0 {
                    array.passes().cancel();
                }
            })
            .await;
        assert_eq!(r.unwrap_err().kind(), ErrorKind::Interrupted);
        assert!(array.needs_resync());
        let strategies = || async {
            let c = array.status().await.counters;
            (c.rmw_writes, c.rcw_writes)
        };
        // Half a chunk in stripe 1 (48 data sectors a stripe), behind the resync point.
        write_pattern(&array, &mut model, 48 + 4, 8).await;
        assert_eq!(strategies().await, (1, 0), "behind the resync point");
        // The same in stripe 20, ahead of it.
        write_pattern(&array, &mut model, 20 * 48 + 4, 8).await;
        assert_eq!(strategies().await, (1, 1), "ahead of the resync point");
        assert_eq!(scrub(&array, SyncKind::Resync).await, 0);
        assert!(!array.needs_resync());
        write_pattern(&array, &mut model, 20 * 48 + 24, 8).await;
        assert_eq!(strategies().await, (2, 1), "after the resync");
        verify_all(&array, &model, "around the resync").await;
    });
}

/// With an internal write-intent bitmap, a write sets its chunk's bit on every member before
/// it lands, an unclean stop leaves exactly the written chunks set, and the resync visits
/// only those: a mismatch planted in a chunk nobody wrote survives it (and a later check
/// still finds it), while the written chunks end consistent. A clean close clears the bits.
#[test]
fn bitmap_limits_resync_to_written_chunks() {
    raidd_rt::block_on(async {
        for (level, n) in [(Level::Raid5, 4), (Level::Raid1, 2), (Level::Raid10, 4)] {
            let raw = mems(n);
            let members = dyn_members(&raw);
            let a = create(bitmap_spec(level, members.clone(), true))
                .await
                .unwrap();
            let array = a.array.clone();
            let (dirty, chunks) = array.write_intent().unwrap();
            assert_eq!(dirty, 0, "{level}");
            assert!(chunks >= 8, "{level}: {chunks} chunks");
            let mut model = Model::new(array.size_bytes() / 512, 5);
            write_pattern(&array, &mut model, 0, 16).await;
            assert_eq!(
                array.write_intent().unwrap().0,
                1,
                "{level}: one chunk written"
            );
            // The bit is on the members already.
            let bits = bitmap_bits(&raw[0]).await;
            assert_eq!(bits[0] & 1, 1, "{level}: bit 0 on disk");
            assert_eq!(
                bits.iter().map(|b| b.count_ones()).sum::<u32>(),
                1,
                "{level}"
            );
            drop(array);
            drop(a); // unclean: no close

            // Plant mismatches: one in the written chunk 0, one in the last chunk.
            let size = examine(&*raw[0]).await.unwrap().size;
            let victim = if level == Level::Raid1 { 1 } else { n - 1 };
            for sector in [1, size - 8] {
                flip_sector(&raw[victim], sector).await;
            }
            let b = assemble(members.clone(), AssembleOptions::default())
                .await
                .unwrap();
            let array = b.array.clone();
            assert!(array.needs_resync(), "{level}");
            assert_eq!(scrub(&array, SyncKind::Resync).await, 0, "{level}");
            let left = scrub(&array, SyncKind::Check).await;
            assert!(left > 0, "{level}: the unwritten chunk was not resynced");
            // Repair fixes the rest; a clean close clears every bit.
            scrub(&array, SyncKind::Repair).await;
            assert_eq!(scrub(&array, SyncKind::Check).await, 0, "{level}");
            array.close().await.unwrap();
            assert_eq!(array.write_intent().unwrap().0, 0, "{level}");
            let bits = bitmap_bits(&raw[1]).await;
            assert!(bits.iter().all(|&b| b == 0), "{level}: {bits:?}");
        }
    });
}

/// The bits found set at an unclean start mark chunks the resync still has to visit. Nothing
/// clears them before it has (md keeps such chunks NEEDED): not the periodic sweep, not a
/// clean close. A stop before the resync leaves them on disk, and the next start resyncs
/// them: a mismatch planted there is gone after it.
#[test]
fn an_unfinished_resync_keeps_its_bits() {
    raidd_rt::block_on(async {
        for (level, n) in [(Level::Raid5, 4), (Level::Raid6, 5), (Level::Raid1, 2)] {
            let raw = mems(n);
            let members = dyn_members(&raw);
            let a = create(bitmap_spec(level, members.clone(), true))
                .await
                .unwrap();
            let mut model = Model::new(a.array.size_bytes() / 512, 9);
            write_pattern(&a.array, &mut model, 0, 16).await;
            drop(a); // unclean: no close
            let victim = if level == Level::Raid1 { 1 } else { n - 1 };
            flip_sector(&raw[victim], 1).await;

            // Started, stopped cleanly before any resync.
            let b = assemble(members.clone(), AssembleOptions::default())
                .await
                .unwrap();
            assert!(b.array.needs_resync(), "{level}");
            assert_eq!(b.array.write_intent().unwrap().0, 1, "{level}");
            b.array.close().await.unwrap();
            drop(b);
            assert_eq!(bitmap_bits(&raw[0]).await[0] & 1, 1, "{level}: bit 0 kept");

            let c = assemble(members.clone(), AssembleOptions::default())
                .await
                .unwrap();
            assert!(c.array.needs_resync(), "{level}: the resync is still due");
            assert_eq!(c.array.write_intent().unwrap().0, 1, "{level}");
            assert_eq!(scrub(&c.array, SyncKind::Resync).await, 0, "{level}");
            assert_eq!(
                scrub(&c.array, SyncKind::Check).await,
                0,
                "{level}: the written chunk was resynced"
            );
            c.array.close().await.unwrap();
            assert_eq!(c.array.write_intent().unwrap().0, 0, "{level}");
            verify_all(&c.array, &model, "after the resync").await;
        }
    });
}

/// Until its resync, an uncleanly stopped mirror may hold two versions of a block that was
/// being written. Reads then come from the copy the resync will keep (md's choose_first), so
/// what a client reads before the resync is what is there after it: never one version,
/// then the other, then the first again as reads rotate over the copies.
#[test]
fn reads_before_a_mirror_resync_agree_with_it() {
    raidd_rt::block_on(async {
        for (level, n) in [(Level::Raid1, 2), (Level::Raid1, 3), (Level::Raid10, 4)] {
            let raw = mems(n);
            let members = dyn_members(&raw);
            let a = create(spec(level, members.clone(), true)).await.unwrap();
            a.array
                .write_buf(0, raidd_rt::AlignedBuf::from_slice(&[1u8; 4096]))
                .await
                .unwrap();
            drop(a); // unclean: no close
                     // One copy of block 0 got the next write before the crash, the others did not.
            let off = examine(&*raw[1]).await.unwrap().data_offset * 512;
            raw[1].write_sync(off, &[2u8; 4096]);

            let b = assemble(members.clone(), AssembleOptions::default())
                .await
                .unwrap();
            assert!(b.array.needs_resync(), "{level}");
            let mut seen = Vec::new();
            for _ in 0..8 {
                seen.push(b.array.read_to_buf(0, 4096).await.unwrap()[0]);
            }
            assert!(
                seen.iter().all(|&g| g == seen[0]),
                "{level} over {n}: {seen:?}"
            );
            scrub(&b.array, SyncKind::Resync).await;
            for _ in 0..8 {
                let after = b.array.read_to_buf(0, 4096).await.unwrap()[0];
                assert_eq!(
                    after, seen[0],
                    "{level} over {n}: the resync kept another copy"
                );
            }
        }
    });
}

/// A mirror that lost a member still has copies to keep equal: check counts, repair and
/// resync fix a difference between the copies left (md resyncs a RAID1 that lost one of
/// three); pieces with one copy left are skipped. The daemon resyncs such an array after an
/// unclean stop instead of waiting for a spare.
#[test]
fn a_degraded_mirror_scrubs_the_copies_it_has_left() {
    raidd_rt::block_on(async {
        for (level, n) in [(Level::Raid1, 3), (Level::Raid10, 4), (Level::Raid1, 2)] {
            let what = format!("{level} over {n}");
            let raw = mems(n);
            let members = dyn_members(&raw);
            let a = create(spec(level, members.clone(), true)).await.unwrap();
            let array = a.array.clone();
            let sectors = array.size_bytes() / 512;
            let mut model = Model::new(sectors, 5);
            write_pattern(&array, &mut model, 0, sectors).await;
            array.close().await.unwrap();
            // Slot 0 goes; a piece whose copies both remain gets its second copy corrupted
            // (a two-way mirror has none: it only skips).
            let both = array
                .geometry()
                .pieces(0, sectors)
                .into_iter()
                .find(|p| p.copies.iter().all(|l| l.member != 0))
                .map(|p| (p.copies[1].member, p.copies[1].sector));
            drop((a, array));
            if let Some((m, s)) = both {
                corrupt(&raw[m], s).await;
            }
            let survivors = members[1..].to_vec();
            let b = assemble(survivors.clone(), AssembleOptions::default())
                .await
                .unwrap()
                .array;
            assert!(b.is_degraded() && b.can_scrub_now(), "{what}");
            let expected = if both.is_some() { 16 } else { 0 };
            assert_eq!(scrub(&b, SyncKind::Check).await, expected, "{what}: check");
            assert_eq!(
                scrub(&b, SyncKind::Repair).await,
                expected,
                "{what}: repair"
            );
            assert_eq!(scrub(&b, SyncKind::Check).await, 0, "{what}: after repair");
            verify_all(&b, &model, &what).await;
            drop(b); // unclean: a resync is due
            if let Some((m, s)) = both {
                corrupt(&raw[m], s).await;
            }
            let c = assemble(survivors, AssembleOptions::default())
                .await
                .unwrap()
                .array;
            assert!(c.needs_resync(), "{what}");
            scrub(&c, SyncKind::Resync).await;
            assert!(!c.needs_resync(), "{what}: resynced degraded");
            assert_eq!(scrub(&c, SyncKind::Check).await, 0, "{what}: after resync");
            verify_all(&c, &model, &what).await;
        }
    });
}

/// A new array with a bitmap, not assumed clean, is synced whole: its bitmap starts with
/// every bit set (as mdadm writes it), so the initial resync visits every chunk, and after
/// it parity (or every mirror) matches over members that held garbage. An empty bitmap
/// here made the start look clean and skipped the sync.
#[test]
fn a_new_array_with_a_bitmap_is_synced_whole() {
    raidd_rt::block_on(async {
        for (level, n) in [
            (Level::Raid5, 4),
            (Level::Raid6, 5),
            (Level::Raid1, 2),
            (Level::Raid10, 4),
        ] {
            let raw = junk_mems(n);
            let members = dyn_members(&raw);
            let array = create(bitmap_spec(level, members.clone(), false))
                .await
                .unwrap()
                .array;
            let (dirty, chunks) = array.write_intent().unwrap();
            assert!(array.needs_resync(), "{level}");
            assert_eq!(dirty, chunks, "{level}: every chunk to sync");
            assert_eq!(scrub(&array, SyncKind::Resync).await, 0, "{level}");
            assert_eq!(scrub(&array, SyncKind::Check).await, 0, "{level}: synced");
            array.close().await.unwrap();
            assert_eq!(array.write_intent().unwrap().0, 0, "{level}");
            assert_eq!(bits_set(&raw[0]).await, 0);
        }
    });
}

/// Rewrites the bitmap on every member: `edit` changes its header, and every bit is cleared
/// (a bitmap that missed the writes it should have recorded).
async fn doctor_bitmap(raw: &[Arc<MemMember>], edit: impl Fn(&mut raidd_md::BitmapSuper)) {
    for m in raw {
        let at = bitmap_at(m).await;
        let mut head = vec![0u8; 4096];
        m.read_sync(at, &mut head);
        let mut bm = raidd_md::BitmapSuper::parse(&head).unwrap();
        edit(&mut bm);
        let mut image = bm.encode();
        image.resize(256 + bm.bitmap_bytes() as usize, 0);
        m.write_sync(at, &image);
    }
}

/// A bitmap that is out of date (marked stale, or older than the superblocks) proves nothing
/// by its clear bits: every chunk counts as dirty, as in md, so after an unclean stop the
/// resync covers the whole array, and a mismatch in a chunk the bitmap shows clean is
/// repaired. A bitmap of another array is refused.
#[test]
fn an_out_of_date_bitmap_counts_every_chunk() {
    raidd_rt::block_on(async {
        for how in ["stale flag", "old events", "other uuid"] {
            let raw = mems(4);
            let members = dyn_members(&raw);
            let a = create(bitmap_spec(Level::Raid5, members.clone(), true))
                .await
                .unwrap();
            let chunks = a.array.write_intent().unwrap().1;
            let mut model = Model::new(a.array.size_bytes() / 512, 11);
            write_pattern(&a.array, &mut model, 0, 16).await;
            drop(a); // unclean
            doctor_bitmap(&raw, |bm| match how {
                "stale flag" => bm.set_stale(true),
                "old events" => bm.events -= 1,
                _ => bm.uuid[0] ^= 1,
            })
            .await;
            // Stripe 0's parity (left-symmetric: on the last member), in a chunk the
            // doctored bitmap shows clean.
            flip_sector(&raw[3], 1).await;

            let r = assemble(members.clone(), AssembleOptions::default()).await;
            if how == "other uuid" {
                let e = r.expect_err("a bitmap of another array");
                assert_eq!(e.kind(), ErrorKind::BadMetadata, "{e}");
                assert!(e.to_string().contains("belongs to array"), "{e}");
                continue;
            }
            let array = r.unwrap().array;
            assert!(array.needs_resync(), "{how}");
            assert_eq!(
                array.write_intent().unwrap().0,
                chunks,
                "{how}: every chunk"
            );
            assert_eq!(scrub(&array, SyncKind::Resync).await, 0, "{how}");
            assert_eq!(
                scrub(&array, SyncKind::Check).await,
                0,
                "{how}: the chunk the bitmap showed clean was resynced"
            );
            array.close().await.unwrap();
            assert_eq!(array.write_intent().unwrap().0, 0, "{how}");
            verify_all(&array, &model, how).await;
            drop(array);
            // Written out again, the bits are trusted at the next start.
            let again = assemble(members, AssembleOptions::default()).await.unwrap();
            assert!(!again.array.needs_resync(), "{how}");
            assert_eq!(again.array.write_intent().unwrap().0, 0, "{how}");
        }
    });
}

/// The bitmap header as stored on a member.
async fn bitmap_header(m: &MemMember) -> raidd_md::BitmapSuper {
    let mut head = vec![0u8; 4096];
    m.read_sync(bitmap_at(m).await, &mut head);
    raidd_md::BitmapSuper::parse(&head).unwrap()
}

/// Clearing bits first records the event count as the bitmap's events_cleared, md's bound
/// for bringing a member back by its bitmap (events >= events_cleared: recover only the
/// chunks still set). A member that failed, was replaced, and whose slot could free up
/// again missed writes whose bits the replacement's period cleared: its events must fall
/// below events_cleared, or the kernel (or a later raidd) would bring it back stale.
/// Clearing runs on the bitmap's daemon_sleep (1 s here), not a fixed 5 s.
#[test]
fn clearing_bits_moves_events_cleared_past_members_that_left() {
    raidd_rt::block_on(async {
        for (level, n) in [(Level::Raid1, 3), (Level::Raid5, 4)] {
            let what = format!("{level} over {n}");
            let raw = mems(n + 1);
            let members = dyn_members(&raw);
            let a = create(bitmap_spec(level, members[..n].to_vec(), true))
                .await
                .unwrap();
            a.array.close().await.unwrap();
            drop(a);
            doctor_bitmap(&raw[..n], |bm| bm.daemon_sleep = 1).await;
            let array = assemble(members[..n].to_vec(), AssembleOptions::default())
                .await
                .unwrap()
                .array;
            let mut model = Model::new(array.size_bytes() / 512, 13);
            write_pattern(&array, &mut model, 0, 64).await;
            array.fail_member(0).await.unwrap();
            let left = examine(&*raw[0]).await.unwrap().events;
            write_pattern(&array, &mut model, 256, 64).await;
            array.remove_member(&raw[0].info().name).await.unwrap();
            array.add_member(members[n].clone()).await.unwrap();
            array.recover(0, SyncLimits::UNLIMITED).await.unwrap();
            assert!(!array.is_degraded(), "{what}");
            write_pattern(&array, &mut model, 512, 64).await;
            assert!(array.write_intent().unwrap().0 > 0, "{what}");
            let before = bitmap_header(&raw[1]).await.events_cleared;
            assert!(
                before <= left,
                "{what}: {before} > {left} before any clearing"
            );
            // Two periods: chunks written in the period now ending are kept one more.
            for _ in 0..2 {
                std::thread::sleep(std::time::Duration::from_millis(1050));
                array.write_intent_tick().await;
            }
            assert_eq!(array.write_intent().unwrap().0, 0, "{what}: all cleared");
            assert_eq!(bits_set(&raw[1]).await, 0, "{what}");
            for m in &raw[1..] {
                let h = bitmap_header(m).await;
                assert!(
                    h.events_cleared > left,
                    "{what}: events_cleared {} does not exclude the member that left at {left}",
                    h.events_cleared
                );
            }
            verify_all(&array, &model, &what).await;
        }
    });
}

/// The members wrapped so their operations are counted.
fn counted(raw: &[Arc<MemMember>]) -> (Vec<Arc<FaultMember>>, Vec<Arc<dyn Member>>) {
    raw.iter()
        .map(|m| {
            let f = Arc::new(FaultMember::new(m.clone(), FaultPlan::default()));
            (f.clone(), f as Arc<dyn Member>)
        })
        .unzip()
}

/// Fails every member but `keep` that the array can lose, so reads lean on `keep`.
async fn lean_on(array: &raidd_engine::Array, keep: usize) {
    let g = array.geometry().clone();
    let mut missing = vec![false; g.members()];
    for m in (0..g.members()).filter(|&m| m != keep) {
        missing[m] = true;
        if g.survives(&missing) {
            array.fail_member(m).await.unwrap();
        } else {
            missing[m] = false;
        }
    }
}

/// A member that failed and is added back returns to its own slot and is rebuilt only where
/// the write-intent bitmap marks chunks written since it left (md's re-add), writes made
/// during that recovery included. Afterwards the others are failed as far as the level
/// allows, so reads lean on the re-added member: a chunk it missed would read back stale.
#[test]
fn a_member_added_back_is_rebuilt_only_where_its_bitmap_marks() {
    raidd_rt::block_on(async {
        for (level, n) in [
            (Level::Raid1, 3),
            (Level::Raid5, 4),
            (Level::Raid6, 5),
            (Level::Raid10, 4),
        ] {
            let what = format!("{level} over {n}");
            let raw = mems(n);
            let (faults, members) = counted(&raw);
            let mut s = bitmap_spec(level, members.clone(), true);
            s.size_sectors = None;
            let array = create(s).await.unwrap().array;
            let sectors = array.size_bytes() / 512;
            let mut model = Model::new(sectors, 17);
            write_pattern(&array, &mut model, 0, sectors).await;
            array.close().await.unwrap();
            array.fail_member(0).await.unwrap();
            write_pattern(&array, &mut model, 100, 64).await;
            write_pattern(&array, &mut model, sectors / 2, 64).await;
            array.remove_member(&raw[0].info().name).await.unwrap();
            let before = faults[0].control().writes();
            let added = array.add_member(members[0].clone()).await.unwrap();
            assert_eq!(added, raidd_engine::Added::Recovering(0), "{what}");
            // Writes while it recovers, into chunks that were clean when it came back.
            let model = std::rc::Rc::new(std::cell::RefCell::new(model));
            let writer = {
                let (array, model) = (array.clone(), model.clone());
                raidd_rt::spawn_local(async move {
                    let mut rng = Rng(5);
                    for _ in 0..6 {
                        let at = rng.below(sectors - 16);
                        let mut m = model.replace(Model::new(0, 0));
                        write_pattern(&array, &mut m, at, 16).await;
                        model.replace(m);
                        raidd_rt::yield_now().await;
                    }
                })
            };
            // Windows of one layout chunk: a full rebuild writes each in one piece.
            let limits = SyncLimits {
                window_bytes: 16 * 512,
                ..SyncLimits::UNLIMITED
            };
            array.recover(0, limits).await.unwrap();
            writer.await;
            let model = model.replace(Model::new(0, 0));
            let full = array.geometry().member_used_sectors(0) / 16;
            let wrote = faults[0].control().writes() - before;
            assert!(
                wrote < full / 2,
                "{what}: {wrote} writes to the re-added member, {full} for a full rebuild"
            );
            assert!(!array.is_degraded(), "{what}");
            lean_on(&array, 0).await;
            verify_all(
                &array,
                &model,
                &format!("{what}: leaning on the re-added member"),
            )
            .await;
        }
    });
}

/// A re-add by bitmap interrupted part way is written down as one (md's RECOVERY_BITMAP,
/// beside the recovery offset), so after reassembly it goes on rebuilding only what the
/// bitmap marks; a new member added meanwhile, whose superblock is copied from the
/// re-added one, is not taken for one. Both finish with the flag gone, and each alone
/// serves what was written.
#[test]
fn an_interrupted_re_add_resumes_by_its_bitmap_after_reassembly() {
    use raidd_md::feature::{RECOVERY_BITMAP, RECOVERY_OFFSET};
    raidd_rt::block_on(async {
        let raw = mems(4);
        let (faults, members) = counted(&raw);
        let mut s = bitmap_spec(Level::Raid1, members[..3].to_vec(), true);
        s.size_sectors = None;
        let array = create(s).await.unwrap().array;
        let sectors = array.size_bytes() / 512;
        let mut model = Model::new(sectors, 29);
        write_pattern(&array, &mut model, 0, sectors).await;
        array.close().await.unwrap(); // a clean, whole close clears the bits
        array.fail_member(0).await.unwrap();
        // Missed while away: one region below where the recovery will stop, one above.
        write_pattern(&array, &mut model, 100, 64).await;
        write_pattern(&array, &mut model, sectors - 600, 64).await;
        array.remove_member(&raw[0].info().name).await.unwrap();
        array.add_member(members[0].clone()).await.unwrap();
        assert!(array.slots().recovering_by_bitmap(0));
        let sb = examine(&*raw[0]).await.unwrap();
        assert_eq!(
            sb.feature_map & (RECOVERY_OFFSET | RECOVERY_BITMAP),
            RECOVERY_OFFSET | RECOVERY_BITMAP,
            "the re-add is on disk from the start: {:#x}",
            sb.feature_map
        );
        // Windows of one bitmap chunk; stop it a few windows in.
        let limits = SyncLimits {
            window_bytes: 64 << 10,
            ..SyncLimits::UNLIMITED
        };
        let job = {
            let array = array.clone();
            raidd_rt::spawn_local(async move { array.recover(0, limits).await })
        };
        let mut stopped = false;
        for _ in 0..10_000 {
            raidd_rt::yield_now().await;
            if array.passes().progress().is_some_and(|p| p.done() >= 512) {
                stopped = array.passes().cancel();
                break;
            }
        }
        assert!(stopped, "recovery made no progress");
        let err = job.await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Interrupted, "{err}");
        // A new member into another slot, its superblock copied from slot 0's.
        array.fail_member(2).await.unwrap();
        array.remove_member(&raw[2].info().name).await.unwrap();
        array.add_member(members[3].clone()).await.unwrap();
        assert!(!array.slots().recovering_by_bitmap(2));
        array.close().await.unwrap();
        drop(array);
        for (m, by_bitmap) in [(0, true), (3, false)] {
            let sb = examine(&*raw[m]).await.unwrap();
            assert_ne!(sb.feature_map & RECOVERY_OFFSET, 0, "member {m}");
            assert_eq!(
                sb.feature_map & RECOVERY_BITMAP != 0,
                by_bitmap,
                "member {m}: feature map {:#x}",
                sb.feature_map
            );
        }
        // Closed clean while members are rebuilt: the bits are still what they lack, so
        // events_cleared stays behind (equal to the events, the kernel would skip them all).
        let events = examine(&*raw[1]).await.unwrap().events;
        let cleared = bitmap_header(&raw[1]).await.events_cleared;
        assert!(
            cleared < events,
            "events_cleared {cleared}, events {events}"
        );
        // The re-added member got the whole bitmap when its recovery started.
        let bits = bitmap_bits(&raw[1]).await;
        assert!(bits.iter().any(|&b| b != 0), "bits set while degraded");
        assert_eq!(
            bitmap_bits(&raw[0]).await,
            bits,
            "the re-added member's bitmap"
        );
        // The bitmap is read from a member in sync, never from one being rebuilt: with the
        // re-added member's copy cleared behind the array's back, the bits still hold.
        let at = bitmap_at(&raw[0]).await + 256;
        raw[0].write_sync(at, &vec![0u8; bits.len()]);
        let again = vec![members[0].clone(), members[1].clone(), members[3].clone()];
        let array = assemble(again, AssembleOptions::default())
            .await
            .unwrap()
            .array;
        assert!(array.slots().recovering_by_bitmap(0), "resumed as a re-add");
        assert!(!array.slots().recovering_by_bitmap(2));
        let before = faults[0].control().writes();
        array.recover(0, limits).await.unwrap();
        let windows = array.geometry().member_used_sectors(0) / 128;
        let wrote = faults[0].control().writes() - before;
        assert!(
            wrote < windows / 2,
            "{wrote} writes to the re-added member, {windows} windows for a full rebuild"
        );
        array.recover(2, SyncLimits::UNLIMITED).await.unwrap();
        for m in [0, 3] {
            assert_eq!(
                bitmap_bits(&raw[m]).await,
                bits,
                "member {m}'s bitmap once in sync"
            );
        }
        for m in [0, 3] {
            let sb = examine(&*raw[m]).await.unwrap();
            assert_eq!(
                sb.feature_map & (RECOVERY_OFFSET | RECOVERY_BITMAP),
                0,
                "member {m} finished: {:#x}",
                sb.feature_map
            );
        }
        array.close().await.unwrap();
        drop(array);
        for (keep, name) in [(0, "the re-added member"), (3, "the new member")] {
            let array = assemble(vec![members[keep].clone()], AssembleOptions::default())
                .await
                .unwrap()
                .array;
            verify_all(&array, &model, &format!("{name} alone")).await;
            array.close().await.unwrap();
        }
    });
}

/// A former member whose superblock was tampered with (a data offset no device has) is
/// added as a new member and rebuilt whole, without a panic on the arithmetic.
#[test]
fn a_member_with_a_tampered_superblock_is_rebuilt_whole() {
    raidd_rt::block_on(async {
        let raw = mems(3);
        let (faults, members) = counted(&raw);
        let mut s = bitmap_spec(Level::Raid1, members.clone(), true);
        s.size_sectors = None;
        let array = create(s).await.unwrap().array;
        let sectors = array.size_bytes() / 512;
        let mut model = Model::new(sectors, 23);
        write_pattern(&array, &mut model, 0, sectors).await;
        array.fail_member(0).await.unwrap();
        array.remove_member(&raw[0].info().name).await.unwrap();
        let mut sb = examine(&*raw[0]).await.unwrap();
        sb.data_offset = u64::MAX / 3;
        raw[0].write_sync(sb.super_offset * 512, &sb.encode());
        let before = faults[0].control().writes();
        array.add_member(members[0].clone()).await.unwrap();
        assert!(!array.slots().recovering_by_bitmap(0));
        array.recover(0, SyncLimits::UNLIMITED).await.unwrap();
        assert!(faults[0].control().writes() - before > 1, "rebuilt");
        lean_on(&array, 0).await;
        verify_all(&array, &model, "leaning on the member rebuilt whole").await;
    });
}

/// A member away while bits it missed were cleared (its slot refilled, then free again)
/// has events below events_cleared: added back, it is rebuilt whole.
#[test]
fn a_member_that_missed_cleared_bits_is_rebuilt_whole() {
    raidd_rt::block_on(async {
        let raw = mems(4);
        let (faults, members) = counted(&raw);
        let mut s = bitmap_spec(Level::Raid1, members[..3].to_vec(), true);
        s.size_sectors = None;
        create(s).await.unwrap().array.close().await.unwrap();
        doctor_bitmap(&raw[..3], |bm| bm.daemon_sleep = 1).await;
        let array = assemble(members[..3].to_vec(), AssembleOptions::default())
            .await
            .unwrap()
            .array;
        let sectors = array.size_bytes() / 512;
        let mut model = Model::new(sectors, 19);
        write_pattern(&array, &mut model, 0, sectors).await;
        array.fail_member(0).await.unwrap();
        array.remove_member(&raw[0].info().name).await.unwrap();
        // Its slot is refilled and rebuilt; writes there, then their bits are cleared.
        array.add_member(members[3].clone()).await.unwrap();
        array.recover(0, SyncLimits::UNLIMITED).await.unwrap();
        write_pattern(&array, &mut model, 300, 64).await;
        for _ in 0..2 {
            std::thread::sleep(std::time::Duration::from_millis(1050));
            array.write_intent_tick().await;
        }
        assert_eq!(array.write_intent().unwrap().0, 0, "the bits were cleared");
        array.fail_member(0).await.unwrap();
        array.remove_member(&raw[3].info().name).await.unwrap();
        let before = faults[0].control().writes();
        array.add_member(members[0].clone()).await.unwrap();
        let limits = SyncLimits {
            window_bytes: 64 << 10,
            ..SyncLimits::UNLIMITED
        };
        array.recover(0, limits).await.unwrap();
        let windows = array.geometry().member_used_sectors(0) / 128;
        let wrote = faults[0].control().writes() - before;
        assert!(
            wrote >= windows,
            "{wrote} writes, {windows} windows: not rebuilt whole"
        );
        lean_on(&array, 0).await;
        verify_all(&array, &model, "leaning on the member rebuilt whole").await;
    });
}

/// Where a member's bitmap header is (bytes).
async fn bitmap_at(m: &MemMember) -> u64 {
    let sb = examine(m).await.unwrap();
    (sb.super_offset as i64 + i64::from(sb.bitmap_offset)) as u64 * 512
}

/// How many bits are set on a member.
async fn bits_set(m: &MemMember) -> u32 {
    bitmap_bits(m).await.iter().map(|b| b.count_ones()).sum()
}

/// The bits as stored on a member.
async fn bitmap_bits(m: &MemMember) -> Vec<u8> {
    let at = bitmap_at(m).await;
    let mut head = vec![0u8; 4096];
    m.read_sync(at, &mut head);
    let bm = raidd_md::BitmapSuper::parse(&head).unwrap();
    let mut all = vec![0u8; bm.stored_len(4096) as usize];
    m.read_sync(at, &mut all);
    all[256..256 + bm.bitmap_bytes() as usize].to_vec()
}

/// A member failed (and removed, or left in its slot) while a check or repair runs, with
/// writes going on: the pass ends with an error (no panic on a slot emptied under reads
/// planned to it), a repair
/// writes no parity made from the failed member's data (which the writes since skipped),
/// and every written sector reads back right without that member. Members answer after a
/// seeded number of executor turns; the pass is paced, so the member fails and goes while
/// it sleeps between windows.
#[test]
fn a_member_removed_during_a_check_or_repair_ends_it_and_loses_nothing() {
    for seed in 1..=18u64 {
        let kind = if seed % 2 == 0 {
            SyncKind::Repair
        } else {
            SyncKind::Check
        };
        raidd_rt::block_on(async move {
            let what = format!("{kind}, seed {seed}");
            let raw = mems(4);
            let members: Vec<Arc<dyn Member>> = raw
                .iter()
                .enumerate()
                .map(|(i, m)| {
                    let plan = FaultPlan {
                        seed: seed * 10 + i as u64,
                        delay_yields: Some((0, 12)),
                        ..FaultPlan::default()
                    };
                    Arc::new(FaultMember::new(m.clone() as Arc<dyn Member>, plan)) as _
                })
                .collect();
            let a = create(spec(Level::Raid5, members, true)).await.unwrap();
            let array = a.array.clone();
            let sectors = array.size_bytes() / 512;
            let mut model = Model::new(sectors, seed);
            let mut rng = Rng(seed);
            random_writes(&array, &mut model, &mut rng, 40).await;
            let half = Rc::new(Cell::new(false));
            let pass = raidd_rt::spawn_local({
                let (array, half) = (array.clone(), half.clone());
                async move {
                    // Paced (as the daemon paces passes): the pass sleeps between windows,
                    // and the member fails and goes while it does.
                    let limits = SyncLimits {
                        window_bytes: 16 << 10,
                        min_kib_s: 1000,
                        max_kib_s: 2000,
                    };
                    array
                        .scrub(kind, limits, move |done, total| {
                            if done >= total / 3 {
                                half.set(true);
                            }
                        })
                        .await
                }
            });
            let writer = raidd_rt::spawn_local({
                let (array, half) = (array.clone(), half.clone());
                async move {
                    let name = array.status().await.slots[1].member.clone().unwrap();
                    let mut rng = Rng(seed + 100);
                    // Writes until the pass is a third through (a write a millisecond),
                    // then the member goes at once, then more writes.
                    while !half.get() {
                        let len = 1 + rng.below(24);
                        let start = rng.below(sectors - len + 1);
                        write_pattern(&array, &mut model, start, len).await;
                        raidd_rt::time::sleep(std::time::Duration::from_millis(1)).await;
                    }
                    array.fail_member(1).await.unwrap();
                    // Removed at once, or left in its slot (still readable, going stale).
                    if seed % 3 != 0 {
                        array.remove_member(&name).await.unwrap();
                    }
                    for _ in 0..60 {
                        let len = 1 + rng.below(24);
                        let start = rng.below(sectors - len + 1);
                        write_pattern(&array, &mut model, start, len).await;
                    }
                    model
                }
            });
            let model = writer.await;
            let r = pass.await;
            // The pass may have ended before the member went; if not, it says why it stopped.
            if let Err(e) = r {
                assert!(e.to_string().contains("a member failed"), "{what}: {e}");
            }
            verify_all(&array, &model, &what).await;
        });
    }
}
