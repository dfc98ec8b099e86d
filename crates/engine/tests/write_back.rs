//! The write journal in write-back mode (md's `journal_mode` write-back): a write is
//! acknowledged once logged, before any member has it; every read sees it; the cache holds
//! at most its limit; a crash before the members got it loses nothing (the start replays
//! the log, degraded too); a failed journal still lets the held pages reach the members.
//! (Crashes at seeded points are in write_hole.rs.)

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use common::Rng;
use raidd_engine::assemble::{assemble, AssembleOptions};
use raidd_engine::create::{create, CreateSpec};
use raidd_engine::member::MemMember;
use raidd_engine::{pattern, Array, ErrorKind, JournalMode, Member};
use raidd_lab::{FaultMember, FaultPlan};
use raidd_layout::Level;
use raidd_rt::AlignedBuf;

const MIB: u64 = 1 << 20;
const SEED: u64 = 0x0b0c;

/// A RAID6 over five memory members (each behind a fault member that counts its I/O) and
/// a journal of `journal` bytes, generation 1 written everywhere (write-through).
async fn raid6(
    tag: &str,
    journal: u64,
) -> (Arc<Array>, Vec<Arc<MemMember>>, Vec<Arc<FaultMember>>) {
    let mem: Vec<Arc<MemMember>> = (0..6)
        .map(|i| {
            let size = if i == 5 { journal } else { 8 * MIB };
            Arc::new(MemMember::new(format!("{tag}{i}"), size))
        })
        .collect();
    let faults: Vec<Arc<FaultMember>> = mem
        .iter()
        .map(|m| {
            Arc::new(FaultMember::new(
                m.clone() as Arc<dyn Member>,
                FaultPlan::default(),
            ))
        })
        .collect();
    let a = create(spec(
        tag,
        Level::Raid6,
        faults[..5]
            .iter()
            .map(|f| Some(f.clone() as Arc<dyn Member>))
            .collect(),
        Some(faults[5].clone() as Arc<dyn Member>),
    ))
    .await
    .unwrap()
    .array;
    write(&a, 0, a.size_bytes() / 512, 1).await;
    (a, mem, faults)
}

/// An array of `level` over `members` (64 KiB chunks, clean), with `journal`.
fn spec(
    name: &str,
    level: Level,
    members: Vec<Option<Arc<dyn Member>>>,
    journal: Option<Arc<dyn Member>>,
) -> CreateSpec {
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
        journal,
        checksums: None,
    }
}

async fn write(a: &Array, sector: u64, sectors: u64, g: u64) {
    let mut buf = AlignedBuf::zeroed((sectors * 512) as usize);
    pattern::fill(&mut buf, sector, g, SEED);
    a.write_buf(sector * 512, buf).await.unwrap();
}

/// Sectors that do not read back as `want(sector)` says.
async fn wrong(a: &Array, want: &[u64]) -> Vec<u64> {
    let buf = a.read_to_buf(0, want.len() * 512).await.unwrap();
    pattern::verify(&buf, 0, SEED, |s| want[s as usize])
        .iter()
        .map(|m| m.sector)
        .collect()
}

fn member_writes(f: &[Arc<FaultMember>]) -> u64 {
    f.iter().map(|f| f.control().writes()).sum()
}

/// Acknowledged once logged, before any member has it; read back from the cache at once,
/// partial pages included; a flush is the journal's alone; a crash then loses nothing
/// (whole, or degraded by either kind of member: data or parity).
#[test]
fn a_write_is_acknowledged_once_logged_and_replayed_after_a_crash() {
    raidd_rt::block_on(async {
        let (a, mem, faults) = raid6("wb-a", 8 * MIB).await;
        let sectors = a.size_bytes() / 512;
        a.consistency()
            .set_journal_mode(JournalMode::WriteBack)
            .await
            .unwrap();
        assert_eq!(a.consistency().journal_mode(), Some(JournalMode::WriteBack));
        let mut want = vec![1u64; sectors as usize];
        let (slots_before, journal_before) =
            (member_writes(&faults[..5]), faults[5].control().writes());
        // Generation 2 over 256 KiB in 4 KiB writes, and a few writes of parts of pages.
        for k in 0..64 {
            write(&a, k * 8, 8, 2).await;
        }
        for (at, n) in [(1001, 3), (2049, 1), (4000, 17)] {
            write(&a, at, n, 2).await;
        }
        for (at, n) in [(0, 512), (1001, 3), (2049, 1), (4000, 17)] {
            want[at..at + n].iter_mut().for_each(|g| *g = 2);
        }
        assert_eq!(wrong(&a, &want).await, Vec::<u64>::new());
        a.flush().await.unwrap();
        assert_eq!(
            member_writes(&faults[..5]),
            slots_before,
            "no member was written: the cache holds every page"
        );
        assert!(faults[5].control().writes() > journal_before);
        let js = a.status().await.journal.unwrap();
        assert_eq!(js.mode, JournalMode::WriteBack);
        // 64 pages, and the pages the partial writes touched (1001 and 1003 share one).
        assert_eq!(js.cached_bytes, (64 + 1 + 1 + 3) * 4096, "{js:?}");
        assert!(js.cache_limit_bytes >= js.cached_bytes);
        // The crash: the members as they are, read back whole and without each member.
        drop(a);
        drop(faults);
        let images: Vec<Vec<u8>> = mem.iter().map(|m| image(m)).collect();
        for missing in [None, Some(0), Some(1), Some(4)] {
            for (m, b) in mem.iter().zip(&images) {
                m.write_sync(0, b);
            }
            let given: Vec<Arc<dyn Member>> = mem
                .iter()
                .enumerate()
                .filter(|(i, _)| Some(*i) != missing)
                .map(|(_, m)| m.clone() as Arc<dyn Member>)
                .collect();
            let a = assemble(given, AssembleOptions::default())
                .await
                .unwrap()
                .array;
            let r = a.status().await.journal.unwrap().recovered.unwrap();
            assert!(r.data_pages >= 69, "{missing:?}: {r:?}");
            assert_eq!(
                a.consistency().journal_mode(),
                Some(JournalMode::WriteThrough),
                "a start is write-through, md's default"
            );
            assert_eq!(wrong(&a, &want).await, Vec::<u64>::new(), "{missing:?}");
            a.close().await.unwrap();
        }
    });
}

/// The array started from its five members alone (read-only: no journal replayed).
async fn without_journal(mem: &[Arc<MemMember>]) -> Arc<Array> {
    let given: Vec<Arc<dyn Member>> = mem[..5]
        .iter()
        .map(|m| m.clone() as Arc<dyn Member>)
        .collect();
    assemble(given, AssembleOptions::default())
        .await
        .unwrap()
        .array
}

fn image(m: &MemMember) -> Vec<u8> {
    let mut b = vec![0u8; m.info().size_bytes as usize];
    m.read_sync(0, &mut b);
    b
}

/// Random 4 KiB and partial writes from several clients, many times what the cache may
/// hold and round a small log many times, with the mode switched back and forth while
/// they run: the cache never holds more than its limit, every acknowledged write reads
/// back, and once write-through again every page is on the members (a start without the
/// journal's replay finds them there).
#[test]
fn the_cache_stays_within_its_limit_and_drains_to_the_members() {
    raidd_rt::block_on(async {
        let (a, mem, faults) = raid6("wb-b", 4 * MIB).await;
        let sectors = a.size_bytes() / 512;
        a.consistency()
            .set_journal_mode(JournalMode::WriteBack)
            .await
            .unwrap();
        let limit = a.status().await.journal.unwrap().cache_limit_bytes;
        assert!(limit > 0 && limit < MIB, "{limit}");
        let want = Rc::new(RefCell::new(vec![1u64; sectors as usize]));
        let most = Rc::new(RefCell::new(0u64));
        let clients = (0..4u64).map(|c| {
            let (a, want, most) = (a.clone(), want.clone(), most.clone());
            async move {
                let mut rng = Rng(SEED + c);
                for i in 0..300u64 {
                    // Each client its own quarter: writes of one client never overlap
                    // another's, so each sector's last generation is known.
                    let quarter = sectors / 4;
                    let (at, n) = if i % 5 == 0 {
                        (c * quarter + rng.below(quarter - 16), 1 + rng.below(15))
                    } else {
                        (c * quarter + rng.below(quarter / 8 - 1) * 8, 8)
                    };
                    let g = 2 + i;
                    write(&a, at, n, g).await;
                    want.borrow_mut()[at as usize..(at + n) as usize]
                        .iter_mut()
                        .for_each(|x| *x = g);
                    let held = a.status().await.journal.unwrap().cached_bytes;
                    let mut m = most.borrow_mut();
                    *m = (*m).max(held);
                }
            }
        });
        let switch = {
            let a = a.clone();
            async move {
                for mode in [JournalMode::WriteThrough, JournalMode::WriteBack] {
                    raidd_rt::yield_now().await;
                    a.consistency().set_journal_mode(mode).await.unwrap();
                }
            }
        };
        futures::future::join(futures::future::join_all(clients), switch).await;
        let most = *most.borrow();
        assert!(most <= limit, "held {most} of {limit}");
        assert!(most > limit / 2, "the cache filled: {most} of {limit}");
        let want = want.borrow().clone();
        assert_eq!(wrong(&a, &want).await, Vec::<u64>::new());
        a.consistency()
            .set_journal_mode(JournalMode::WriteThrough)
            .await
            .unwrap();
        assert_eq!(a.status().await.journal.unwrap().cached_bytes, 0);
        // The members have it all: read without the journal (read-only, nothing replayed).
        drop(a);
        drop(faults);
        let a = without_journal(&mem).await;
        assert!(a.is_read_only());
        assert_eq!(wrong(&a, &want).await, Vec::<u64>::new());
    });
}

/// A journal that fails while the cache holds pages: the array turns read-only, the held
/// pages still read back, and they reach the members (unlogged, as md writes them then)
/// when the array closes.
#[test]
fn held_pages_reach_the_members_when_the_journal_fails() {
    raidd_rt::block_on(async {
        let (a, mem, faults) = raid6("wb-c", 8 * MIB).await;
        let sectors = a.size_bytes() / 512;
        a.consistency()
            .set_journal_mode(JournalMode::WriteBack)
            .await
            .unwrap();
        let mut want = vec![1u64; sectors as usize];
        write(&a, 64, 128, 2).await;
        want[64..192].iter_mut().for_each(|g| *g = 2);
        faults[5].control().set_plan(FaultPlan {
            write_error_ppm: 1_000_000,
            ..FaultPlan::default()
        });
        let mut buf = AlignedBuf::zeroed(4096);
        pattern::fill(&mut buf, 4096, 3, SEED);
        let e = a.write_buf(4096 * 512, buf).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ReadOnly, "{e}");
        assert!(a.is_read_only());
        // What a failed write leaves where it wrote is undefined, as on a disk.
        let failed = 4096..4104;
        let outside =
            |w: Vec<u64>| -> Vec<u64> { w.into_iter().filter(|s| !failed.contains(s)).collect() };
        assert_eq!(outside(wrong(&a, &want).await), Vec::<u64>::new());
        assert!(
            a.flush().await.is_err(),
            "acknowledged writes are not durable"
        );
        a.close().await.unwrap();
        assert_eq!(a.status().await.journal.unwrap().cached_bytes, 0);
        drop(a);
        drop(faults);
        let a = without_journal(&mem).await;
        assert_eq!(outside(wrong(&a, &want).await), Vec::<u64>::new());
    });
}

/// Write-back is refused where it cannot work: an array without a journal, or one whose
/// journal failed.
#[test]
fn write_back_needs_a_working_journal() {
    raidd_rt::block_on(async {
        let m: Vec<Arc<dyn Member>> = (0..4)
            .map(|i| Arc::new(MemMember::new(format!("wb-d{i}"), 8 * MIB)) as Arc<dyn Member>)
            .collect();
        let a = create(spec(
            "wb-d",
            Level::Raid5,
            m.into_iter().map(Some).collect(),
            None,
        ))
        .await
        .unwrap()
        .array;
        let e = a
            .consistency()
            .set_journal_mode(JournalMode::WriteBack)
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
        assert_eq!(a.consistency().journal_mode(), None);
        let (a, _mem, faults) = raid6("wb-e", 8 * MIB).await;
        faults[5].control().set_plan(FaultPlan {
            write_error_ppm: 1_000_000,
            ..FaultPlan::default()
        });
        assert!(a.write_buf(0, AlignedBuf::zeroed(4096)).await.is_err());
        let e = a
            .consistency()
            .set_journal_mode(JournalMode::WriteBack)
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ReadOnly, "{e}");
    });
}

/// What one crash of [`pages_shared_by_writers_survive_a_crash`] left.
#[derive(Debug)]
struct SharedRun {
    /// Sectors that read back as neither their last acknowledged write nor the write in
    /// flight there.
    lost: usize,
    crashed: bool,
    /// Data pages the start replayed.
    replayed: u64,
}

/// Four writers over one region of a degraded RAID5 in write-back mode, each writing
/// single sectors of its own (sector `s` is writer `s % 4`'s), so every page is shared by
/// all four and each write replaces a page another writer's write left in the cache; the
/// region is larger than the cache and a small journal wraps often, so destages and reclaim
/// run among the writes. Every member and the journal answer after seeded delays and stop
/// at a seeded point (the crash); the start from the members' bytes must read every sector
/// as its last acknowledged write, or as the write in flight there.
fn shared_pages_crash_once(seed: u64) -> SharedRun {
    raidd_rt::block_on(async move {
        let mem: Vec<Arc<MemMember>> = (0..4)
            .map(|i| {
                let size = if i == 3 { 4 * MIB } else { 8 * MIB };
                Arc::new(MemMember::new(format!("wb-s{i}-{seed}"), size))
            })
            .collect();
        // The journal (the last) answers later than the members: its units stay on their way
        // while other writers' destages and reclaims go on.
        let plan = |i: usize, hang: Option<u64>| FaultPlan {
            seed: seed ^ i as u64,
            delay_yields: Some((0, if i == 3 { 24 } else { 3 })),
            hang_after_ops: hang,
            ..FaultPlan::default()
        };
        let faults: Vec<Arc<FaultMember>> = mem
            .iter()
            .enumerate()
            .map(|(i, m)| {
                Arc::new(FaultMember::new(
                    m.clone() as Arc<dyn Member>,
                    plan(i, None),
                ))
            })
            .collect();
        // RAID5 over 4, slot 3 missing; the journal is the last fault member.
        let mut members: Vec<Option<Arc<dyn Member>>> = faults[..3]
            .iter()
            .map(|f| Some(f.clone() as Arc<dyn Member>))
            .collect();
        members.push(None);
        let a = create(spec(
            "wb-s",
            Level::Raid5,
            members,
            Some(faults[3].clone() as Arc<dyn Member>),
        ))
        .await
        .unwrap()
        .array;
        let region: u64 = 4096; // 2 MiB: eight times what this journal's cache holds
        write(&a, 0, region, 1).await;
        a.consistency()
            .set_journal_mode(JournalMode::WriteBack)
            .await
            .unwrap();
        assert!(a.status().await.journal.unwrap().cache_limit_bytes * 4 < region * 512);
        for (i, f) in faults.iter().enumerate() {
            let c = f.control();
            let hang = c.ops() + 200 + Rng(seed + i as u64).below(4000);
            c.set_plan(plan(i, Some(hang)));
        }
        // Per sector: the last acknowledged generation; per writer: its write in flight.
        let acked = Rc::new(RefCell::new(vec![1u64; region as usize]));
        let flight = Rc::new(RefCell::new([None::<(u64, u64)>; 4]));
        let writers = (0..4u64).map(|w| {
            let (a, acked, flight) = (a.clone(), acked.clone(), flight.clone());
            async move {
                let mut rng = Rng(seed * 31 + w);
                for i in 0u64.. {
                    let s = w + 4 * rng.below(region / 4);
                    let g = 2 + 4 * i + w;
                    flight.borrow_mut()[w as usize] = Some((s, g));
                    let mut buf = AlignedBuf::zeroed(512);
                    pattern::fill(&mut buf, s, g, SEED);
                    if a.write_buf(s * 512, buf).await.is_err() {
                        return;
                    }
                    acked.borrow_mut()[s as usize] = g;
                    flight.borrow_mut()[w as usize] = None;
                }
            }
        });
        let work = futures::future::join_all(writers);
        let crashed = matches!(
            futures::future::select(Box::pin(work), Box::pin(raidd_rt::idle())).await,
            futures::future::Either::Right(_)
        );
        drop(a);
        drop(faults);
        let given: Vec<Arc<dyn Member>> =
            mem.iter().map(|m| m.clone() as Arc<dyn Member>).collect();
        let a = assemble(given, AssembleOptions::default())
            .await
            .unwrap()
            .array;
        let replayed = a
            .status()
            .await
            .journal
            .and_then(|j| j.recovered)
            .map_or(0, |r| r.data_pages);
        let buf = a.read_to_buf(0, (region * 512) as usize).await.unwrap();
        let (acked, flight) = (acked.borrow(), flight.borrow());
        let lost = (0..region)
            .filter(|&s| {
                let b = &buf[(s * 512) as usize..(s * 512 + 512) as usize];
                let ok = |g: u64| pattern::check_sector(b, s, g, SEED).is_none();
                let in_flight = flight[(s % 4) as usize].filter(|(fs, _)| *fs == s);
                !(ok(acked[s as usize]) || in_flight.is_some_and(|(_, g)| ok(g)))
            })
            .count();
        SharedRun {
            lost,
            crashed,
            replayed,
        }
    })
}

/// [`shared_pages_crash_once`] over many seeds (`WB_RUNS`, default 12; `WB_RUN` for one).
#[test]
fn pages_shared_by_writers_survive_a_crash() {
    let runs: u64 = std::env::var("WB_RUNS").map_or(12, |v| v.parse().unwrap());
    let only: Option<u64> = std::env::var("WB_RUN").ok().map(|v| v.parse().unwrap());
    let (mut crashed, mut replayed, mut ran) = (0, 0, 0);
    for k in (0..runs).filter(|k| only.is_none_or(|o| o == *k)) {
        let r = shared_pages_crash_once(0x5b00 + k);
        assert_eq!(r.lost, 0, "run {k}: sectors lost ({r:?})");
        crashed += u64::from(r.crashed);
        replayed += r.replayed;
        ran += 1;
    }
    assert_eq!(crashed, ran, "every run stops mid-way");
    assert!(replayed > 0, "the starts replayed pages from the journal");
}
