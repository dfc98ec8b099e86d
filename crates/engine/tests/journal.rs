//! md's write journal in raidd's engine: created as mdadm's `--write-journal` writes it,
//! every write logged and the log reclaimed round its ring, replayed at each start, and a
//! journal that fails or is missing turning the array read-only, as md does. (Crashes at
//! seeded points are in write_hole.rs; the kernel's side in the CLI's kernel tests.)

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::sync::Arc;

use raidd_engine::assemble::{assemble, examine, AssembleOptions};
use raidd_engine::create::{create, CreateSpec};
use raidd_engine::member::MemMember;
use raidd_engine::{pattern, Alone, Array, ConsistencyPolicy, ErrorKind, JournalState, Member};
use raidd_lab::{FaultMember, FaultPlan};
use raidd_layout::Level;
use raidd_md::journal::{scan, uuid_checksum, MetaBlock, BLOCK, BLOCK_SECTORS};
use raidd_rt::AlignedBuf;

const MIB: u64 = 1 << 20;
const SEED: u64 = 0x0042;

fn mem(n: usize, tag: &str, bytes: u64) -> Vec<Arc<MemMember>> {
    (0..n)
        .map(|i| Arc::new(MemMember::new(format!("{tag}{i}"), bytes)))
        .collect()
}

/// Every byte of a memory member.
fn snapshot(m: &MemMember) -> Vec<u8> {
    let mut b = vec![0u8; m.info().size_bytes as usize];
    m.read_sync(0, &mut b);
    b
}

fn dyns(m: &[Arc<MemMember>]) -> Vec<Arc<dyn Member>> {
    m.iter().map(|m| m.clone() as Arc<dyn Member>).collect()
}

fn spec(level: Level, slots: Vec<Option<Arc<dyn Member>>>, journal: Arc<dyn Member>) -> CreateSpec {
    CreateSpec {
        name: "journal".into(),
        homehost: "test".into(),
        level,
        layout: None,
        chunk_sectors: Some(128),
        members: slots,
        size_sectors: None,
        assume_clean: true,
        force: false,
        bitmap_chunk: None,
        ppl: false,
        journal: Some(journal),
        checksums: None,
    }
}

/// Writes generation `g` over the whole array in writes of `step` sectors.
async fn fill(a: &Array, g: u64, step: u64) {
    let sectors = a.size_bytes() / 512;
    let mut at = 0;
    while at < sectors {
        let n = step.min(sectors - at);
        let mut buf = AlignedBuf::zeroed((n * 512) as usize);
        pattern::fill(&mut buf, at, g, SEED);
        a.write_buf(at * 512, buf).await.unwrap();
        at += n;
    }
}

async fn bad_sectors(a: &Array, g: u64) -> usize {
    let sectors = a.size_bytes() / 512;
    let buf = a.read_to_buf(0, (sectors * 512) as usize).await.unwrap();
    pattern::verify(&buf, 0, SEED, |_| g).len()
}

/// The journal member's log as md's recovery reads it: units from the tail.
async fn log_of(j: &MemMember) -> (u64, Vec<scan::Unit>, scan::End) {
    let sb = examine(j).await.unwrap();
    let ring = sb.data_size / BLOCK_SECTORS * BLOCK_SECTORS;
    let read = |pos: u64| {
        let mut b = vec![0u8; BLOCK];
        j.read_sync((sb.data_offset + pos) * 512, &mut b);
        b
    };
    let (units, end) = scan::scan(ring, sb.recovery_offset, uuid_checksum(&sb.set_uuid), read);
    (sb.recovery_offset, units, end)
}

/// mdadm's layout (JOURNAL on every member, role 0xfffd, an empty meta block at the
/// log's start), writes logged and reclaimed round a small ring many times over, and a
/// clean restart that finds everything.
#[test]
fn mdadm_s_layout_a_log_reclaimed_round_its_ring_and_a_clean_restart() {
    raidd_rt::block_on(async {
        let m = mem(4, "a", 8 * MIB);
        let j = Arc::new(MemMember::new("aj", 4 * MIB));
        let slots = dyns(&m).into_iter().map(Some).collect();
        let a = create(spec(Level::Raid5, slots, j.clone()))
            .await
            .unwrap()
            .array;
        for member in m.iter() {
            let sb = examine(&**member).await.unwrap();
            assert_eq!(
                sb.feature_map & raidd_md::feature::JOURNAL,
                raidd_md::feature::JOURNAL
            );
            assert_eq!(sb.dev_roles[4], raidd_md::DevRole::Journal.to_raw());
        }
        let jsb = examine(&*j).await.unwrap();
        assert_eq!(jsb.dev_number, 4);
        assert_eq!(jsb.own_role(), raidd_md::DevRole::Journal);
        let st = a.status().await;
        assert_eq!(st.consistency_policy, ConsistencyPolicy::Journal);
        let js = st.journal.unwrap();
        assert_eq!(js.state, JournalState::Active);
        let ring = js.log_bytes.unwrap();
        // Some 21 MiB (and their parity) through a ring of 3 MiB: reclaimed many times.
        assert!(
            a.size_bytes() > 6 * ring,
            "{} through {ring}",
            a.size_bytes()
        );
        fill(&a, 1, 200).await;
        let used = a.status().await.journal.unwrap().used_bytes.unwrap();
        assert!(used < ring, "{used} of {ring} in use");
        let (tail, units, _) = log_of(&j).await;
        assert!(tail > 0, "reclaim moved the tail");
        assert!(!units.is_empty(), "units ahead of the tail");
        a.close().await.unwrap();
        // The restart replays what is ahead of the tail (already on the slots) and starts
        // a fresh log past it.
        let mut all = dyns(&m);
        all.push(j.clone());
        let a = assemble(all, AssembleOptions::default())
            .await
            .unwrap()
            .array;
        let r = a.status().await.journal.unwrap().recovered.unwrap();
        assert_eq!(
            r.units as usize,
            units.len(),
            "every unit ahead of the tail read"
        );
        assert_eq!(r.skipped, 0);
        assert_eq!(bad_sectors(&a, 1).await, 0);
        let (_, after, _) = log_of(&j).await;
        assert_eq!(
            after.len(),
            1,
            "the fresh log holds its empty block: {after:?}"
        );
        assert!(after[0].0.payloads.is_empty());
        a.close().await.unwrap();
    });
}

/// A unit logged but never applied (the slots lost the writes, as a crash would leave
/// them) is replayed at the next start: the data and parity come back, degraded or not.
/// Over stripe batches (`Alone::Never`) and writes alone on their stripes.
fn logged_writes_the_slots_never_got_are_replayed(alone: Alone) {
    raidd_rt::block_on(async move {
        let m = mem(4, "b", 8 * MIB);
        let j = Arc::new(MemMember::new("bj", 8 * MIB));
        let slots = dyns(&m).into_iter().map(Some).collect();
        let a = create(spec(Level::Raid5, slots, j.clone()))
            .await
            .unwrap()
            .array;
        fill(&a, 1, 256).await;
        a.set_write_alone(alone);
        let batches = || async {
            a.status()
                .await
                .counters
                .stripe_cache
                .map_or(0, |c| c.batches)
        };
        let before_batches = batches().await;
        let before: Vec<Vec<u8>> = m.iter().map(|x| snapshot(x)).collect();
        // Generation 2 over the first MiB, logged and written 4 KiB at a time; then the
        // slots are put back as they were, as if the crash came after the log and before
        // the slots.
        for k in 0..256u64 {
            let mut buf = AlignedBuf::zeroed(4096);
            pattern::fill(&mut buf, k * 8, 2, SEED);
            a.write_buf(k * 4096, buf).await.unwrap();
        }
        let batched = batches().await - before_batches;
        let want = if alone == Alone::Always { 0 } else { 256 };
        assert_eq!(batched, want, "writes through the stripe cache");
        drop(a);
        for (x, b) in m.iter().zip(&before) {
            x.write_sync(0, b);
        }
        // Started without slot 1: the replayed parity must carry its part too.
        let all: Vec<Arc<dyn Member>> = vec![m[0].clone(), m[2].clone(), m[3].clone(), j.clone()];
        let a = assemble(all, AssembleOptions::default())
            .await
            .unwrap()
            .array;
        let r = a.status().await.journal.unwrap().recovered.unwrap();
        assert!(r.rows > 0, "{r:?}");
        assert!(!a.needs_resync(), "the journal made the array consistent");
        let buf = a.read_to_buf(0, MIB as usize).await.unwrap();
        assert!(pattern::verify(&buf, 0, SEED, |_| 2).is_empty());
        let rest = a.size_bytes() - MIB;
        let buf = a.read_to_buf(MIB, rest as usize).await.unwrap();
        assert!(pattern::verify(&buf, MIB / 512, SEED, |_| 1).is_empty());
        a.close().await.unwrap();
    });
}

#[test]
fn logged_batches_the_slots_never_got_are_replayed() {
    logged_writes_the_slots_never_got_are_replayed(Alone::Never);
}

#[test]
fn logged_writes_alone_the_slots_never_got_are_replayed() {
    logged_writes_the_slots_never_got_are_replayed(Alone::Always);
}

/// A journal whose writes fail makes the array read-only (md: "journal disk failed"); what
/// was written reads back; the superblocks record it failed, so the next start is
/// read-only too, as it is without the journal member at all.
#[test]
fn a_failing_or_missing_journal_makes_the_array_read_only() {
    raidd_rt::block_on(async {
        let m = mem(4, "c", 8 * MIB);
        let jm = Arc::new(MemMember::new("cj", 8 * MIB));
        let j = Arc::new(FaultMember::new(
            jm.clone() as Arc<dyn Member>,
            FaultPlan::default(),
        ));
        let slots = dyns(&m).into_iter().map(Some).collect();
        let a = create(spec(Level::Raid6, slots, j.clone()))
            .await
            .unwrap()
            .array;
        let mut buf = AlignedBuf::zeroed(MIB as usize);
        pattern::fill(&mut buf, 0, 1, SEED);
        a.write_buf(0, buf).await.unwrap();
        j.control().set_plan(FaultPlan {
            write_error_ppm: 1_000_000,
            ..FaultPlan::default()
        });
        let mut buf = AlignedBuf::zeroed(64 * 1024);
        pattern::fill(&mut buf, 0, 2, SEED);
        let e = a.write_buf(0, buf).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ReadOnly, "{e}");
        assert!(a.is_read_only());
        assert_eq!(
            a.status().await.journal.unwrap().state,
            JournalState::Faulty
        );
        // Nothing of the refused write reached the slots.
        let buf = a.read_to_buf(0, MIB as usize).await.unwrap();
        assert!(pattern::verify(&buf, 0, SEED, |_| 1).is_empty());
        let e = a.write_buf(0, AlignedBuf::zeroed(4096)).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ReadOnly);
        assert!(e.to_string().contains("journal"), "{e}");
        drop(a);
        let sb = examine(&*m[0]).await.unwrap();
        assert_eq!(sb.dev_roles[4], raidd_md::DevRole::Faulty.to_raw());
        // The next start: the failed journal is set aside, and without one the array is
        // read-only, as it is with the journal member not given at all.
        for with_journal in [true, false] {
            let mut all = dyns(&m);
            if with_journal {
                all.push(jm.clone());
            }
            let a = assemble(all, AssembleOptions::default())
                .await
                .unwrap()
                .array;
            assert!(a.is_read_only());
            assert_eq!(
                a.status().await.journal.unwrap().state,
                JournalState::Missing
            );
            let buf = a.read_to_buf(0, MIB as usize).await.unwrap();
            assert!(pattern::verify(&buf, 0, SEED, |_| 1).is_empty());
        }
    });
}

/// What create refuses: a journal on a level without parity, with a bitmap or a partial
/// parity log, or too small to hold a few stripes of writes.
#[test]
fn create_refuses_a_journal_md_would_not_make() {
    raidd_rt::block_on(async {
        let m = mem(4, "d", 8 * MIB);
        let j = Arc::new(MemMember::new("dj", 8 * MIB));
        let slots = || dyns(&m).into_iter().map(Some).collect();
        let mut s = spec(Level::Raid1, slots(), j.clone());
        s.chunk_sectors = None;
        assert_eq!(create(s).await.unwrap_err().kind(), ErrorKind::InvalidInput);
        let mut s = spec(Level::Raid5, slots(), j.clone());
        s.bitmap_chunk = Some(1 << 20);
        assert_eq!(create(s).await.unwrap_err().kind(), ErrorKind::InvalidInput);
        let mut s = spec(Level::Raid5, slots(), j.clone());
        s.ppl = true;
        assert_eq!(create(s).await.unwrap_err().kind(), ErrorKind::InvalidInput);
        let tiny = Arc::new(MemMember::new("tiny", 2 * MIB));
        let e = create(spec(Level::Raid5, slots(), tiny)).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert!(e.to_string().contains("write journal"), "{e}");
        // Nothing was written on the way.
        for x in &m {
            assert!(examine(&**x).await.is_err());
        }
        assert!(MetaBlock::decode(&snapshot(&j)[..BLOCK], 0).is_err());
    });
}

/// A new journal takes the place of one that failed while serving, and of one missing at
/// the start (md's `--add-journal`): the array takes writes again, the superblocks name the
/// new one (the old one recorded failed), and the next start uses it.
#[test]
fn a_new_journal_takes_the_place_of_a_failed_or_missing_one() {
    raidd_rt::block_on(async {
        let m = mem(4, "e", 8 * MIB);
        let jm = Arc::new(MemMember::new("ej", 8 * MIB));
        let j = Arc::new(FaultMember::new(
            jm.clone() as Arc<dyn Member>,
            FaultPlan::default(),
        ));
        let slots = dyns(&m).into_iter().map(Some).collect();
        let a = create(spec(Level::Raid5, slots, j.clone()))
            .await
            .unwrap()
            .array;
        // A working journal is not replaced.
        let spare = Arc::new(MemMember::new("e-spare", 8 * MIB));
        let e = a.consistency().add_journal(spare).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Conflict, "{e}");
        j.control().set_plan(FaultPlan {
            write_error_ppm: 1_000_000,
            ..FaultPlan::default()
        });
        assert!(a.write_buf(0, AlignedBuf::zeroed(4096)).await.is_err());
        assert!(a.is_read_only());
        // Faulty -> a new journal, while serving.
        let j2 = Arc::new(MemMember::new("ej2", 8 * MIB));
        a.consistency().add_journal(j2.clone()).await.unwrap();
        assert!(!a.is_read_only());
        let st = a.status().await.journal.unwrap();
        assert_eq!(
            (st.state, st.member.as_deref()),
            (JournalState::Active, Some("ej2"))
        );
        fill(&a, 1, 256).await;
        a.close().await.unwrap();
        let sb = examine(&*m[0]).await.unwrap();
        let j2sb = examine(&*j2).await.unwrap();
        assert_eq!(
            sb.dev_roles[j2sb.dev_number as usize],
            raidd_md::DevRole::Journal.to_raw()
        );
        assert_eq!(sb.dev_roles[4], raidd_md::DevRole::Faulty.to_raw());
        // The next start uses the new journal; without it the array is read-only, and a
        // third journal takes the missing one's place.
        let mut all = dyns(&m);
        all.push(j2.clone());
        let a = assemble(all, AssembleOptions::default())
            .await
            .unwrap()
            .array;
        assert!(!a.is_read_only());
        assert_eq!(bad_sectors(&a, 1).await, 0);
        a.close().await.unwrap();
        let a = assemble(dyns(&m), AssembleOptions::default())
            .await
            .unwrap()
            .array;
        assert!(a.is_read_only());
        let j3 = Arc::new(MemMember::new("ej3", 8 * MIB));
        a.consistency().add_journal(j3.clone()).await.unwrap();
        fill(&a, 2, 256).await;
        a.close().await.unwrap();
        let mut all = dyns(&m);
        all.push(j3.clone());
        let a = assemble(all, AssembleOptions::default())
            .await
            .unwrap()
            .array;
        assert_eq!(
            a.status().await.journal.unwrap().state,
            JournalState::Active
        );
        assert_eq!(bad_sectors(&a, 2).await, 0);
        // The replaced journals name the array still but are set aside.
        let mut all = dyns(&m);
        all.extend([j2 as Arc<dyn Member>, j3 as Arc<dyn Member>]);
        drop(a);
        let a = assemble(all, AssembleOptions::default())
            .await
            .unwrap()
            .array;
        assert_eq!(
            a.status().await.journal.unwrap().member.as_deref(),
            Some("ej3")
        );
    });
}
