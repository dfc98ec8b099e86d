//! The RAID5 write hole, shown and closed. A degraded RAID5 takes concurrent writes of a
//! new generation over data of an old one; at a seeded point every member stops (each has
//! done some prefix of what it was asked: what a crash leaves); the array is then started
//! again from the members' bytes and every sector read back. An acknowledged write must
//! read back new and a sector no write touched old; where a write was in flight anything
//! goes (a torn write's own sectors on the missing member are lost with it, md's PPL
//! included). Without a consistency policy the missing member's untouched sectors,
//! computed from parity a torn write left stale, come back wrong; with md's partial
//! parity log (PPL) the start recovers parity first and nothing is lost; with md's write
//! journal (RAID5 and RAID6) the start replays the log and nothing is lost either.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use common::Rng;
use futures::future::{join_all, select, Either};
use raidd_engine::assemble::{assemble, AssembleOptions};
use raidd_engine::create::{create, CreateSpec};
use raidd_engine::member::MemMember;
use raidd_engine::{pattern, JournalMode, Member};
use raidd_lab::{FaultMember, FaultPlan};
use raidd_layout::Level;
use raidd_rt::AlignedBuf;

const MIB: u64 = 1 << 20;
const SEED: u64 = 0x5eed_0041;

/// What one crash did.
#[derive(Debug)]
struct Run {
    /// Sectors that read back as neither generation the crash allows.
    lost: usize,
    /// The crash came before every write was done.
    crashed: bool,
    /// Log entries the start applied.
    recovered: u64,
}

/// What keeps the array consistent in a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Policy {
    None,
    Ppl,
    /// The write journal, on RAID5 (over 4) or RAID6 (over 5), one slot missing.
    Journal(Level),
    /// The same in write-back mode: writes acknowledged once logged, the members written
    /// later from the cache (the journal member keeps what it was given: no volatile
    /// cache, so an acknowledged write is a durable one).
    WriteBack(Level),
}

fn crash_once(seed: u64, policy: Policy) -> Run {
    raidd_rt::block_on(async move {
        let (level, slots) = match policy {
            Policy::Journal(Level::Raid6) | Policy::WriteBack(Level::Raid6) => (Level::Raid6, 5),
            _ => (Level::Raid5, 4),
        };
        let journal = matches!(policy, Policy::Journal(_) | Policy::WriteBack(_));
        // With the journal, every other run starts whole and loses its last member with
        // the crash (the write alone on a whole stripe takes the journal too).
        let lose_later = journal && seed % 2 == 1;
        let at_start = if lose_later { slots } else { slots - 1 };
        // The members present, then the journal's.
        let present = at_start + usize::from(journal);
        let mem: Vec<Arc<MemMember>> = (0..present)
            .map(|i| Arc::new(MemMember::new(format!("m{i}-{seed}-{policy:?}"), 8 * MIB)))
            .collect();
        let faulty: Vec<Arc<FaultMember>> = mem
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let plan = FaultPlan {
                    seed: seed ^ i as u64,
                    delay_yields: Some((0, 3)),
                    ..FaultPlan::default()
                };
                Arc::new(FaultMember::new(m.clone() as Arc<dyn Member>, plan))
            })
            .collect();
        let mut members: Vec<Option<Arc<dyn Member>>> = faulty
            .iter()
            .take(at_start)
            .map(|f| Some(f.clone() as Arc<dyn Member>))
            .collect();
        members.resize(slots, None); // degraded: the last slot is missing
        let array = create(CreateSpec {
            name: "hole".into(),
            homehost: "test".into(),
            level,
            layout: None,
            chunk_sectors: Some(128),
            members,
            size_sectors: None,
            assume_clean: true,
            force: false,
            bitmap_chunk: None,
            ppl: policy == Policy::Ppl,
            journal: journal.then(|| faulty[at_start].clone() as Arc<dyn Member>),
            checksums: None,
        })
        .await
        .unwrap()
        .array;
        let sectors = array.size_bytes() / 512;
        // Generation 1 everywhere.
        let mut at = 0;
        while at < sectors {
            let n = (2048).min(sectors - at);
            let mut buf = AlignedBuf::zeroed((n * 512) as usize);
            pattern::fill(&mut buf, at, 1, seed);
            array.write_buf(at * 512, buf).await.unwrap();
            at += n;
        }
        if let Policy::WriteBack(_) = policy {
            array
                .consistency()
                .set_journal_mode(JournalMode::WriteBack)
                .await
                .unwrap();
        }
        // Generation 2: disjoint writes of 1 to 96 sectors, spread over the array; with the
        // journal every other one on whole 4 KiB pages.
        let mut rng = Rng(seed);
        let mut writes = Vec::new();
        let mut at = rng.below(64);
        while at + 96 < sectors {
            let mut len = 1 + rng.below(96);
            if journal && writes.len() % 2 == 0 {
                at = at.div_ceil(8) * 8;
                len = len.div_ceil(8) * 8;
            }
            writes.push((at, len));
            at += len + rng.below(200);
        }
        // Each member stops after a seeded number of further operations.
        for (i, f) in faulty.iter().enumerate() {
            let c = f.control();
            c.set_plan(FaultPlan {
                seed: seed ^ i as u64,
                delay_yields: Some((0, 3)),
                hang_after_ops: Some(c.ops() + 5 + Rng(seed + i as u64).below(400)),
                ..FaultPlan::default()
            });
        }
        let acked: Rc<RefCell<Vec<(u64, u64)>>> = Rc::default();
        let clients = 8;
        let work = join_all((0..clients).map(|c| {
            let (array, acked) = (array.clone(), acked.clone());
            let mine: Vec<(u64, u64)> = writes.iter().copied().skip(c).step_by(clients).collect();
            async move {
                for (at, len) in mine {
                    let mut buf = AlignedBuf::zeroed((len * 512) as usize);
                    pattern::fill(&mut buf, at, 2, seed);
                    if array.write_buf(at * 512, buf).await.is_ok() {
                        acked.borrow_mut().push((at, len));
                    }
                }
            }
        }));
        // Everything stops when the members have: the crash.
        let crashed = match select(Box::pin(work), Box::pin(raidd_rt::idle())).await {
            Either::Left(_) => false,
            Either::Right(_) => true,
        };
        drop(array);
        drop(faulty);
        // The start after the crash, from the members' bytes (`--start-dirty-degraded`
        // where there is no log: md refuses the array otherwise).
        let mut plain: Vec<Arc<dyn Member>> =
            mem.iter().map(|m| m.clone() as Arc<dyn Member>).collect();
        if lose_later {
            plain.remove(slots - 1); // the last slot's member is lost with the crash
        }
        let opts = AssembleOptions {
            start_dirty_degraded: policy == Policy::None,
            ..AssembleOptions::default()
        };
        let array = assemble(plain, opts).await.unwrap().array;
        // Bit 0: generation 1 is right, bit 1: generation 2; a write in flight may leave
        // anything where it wrote (md's PPL too: "arbitrary data in the written part of a
        // stripe if that disk is lost"), but nothing else may change. The journal logs
        // every page whole, so a write in flight leaves one generation or the other.
        let mut allowed = vec![1u8; sectors as usize];
        let in_flight = if journal { 3 } else { 0xff };
        for &(at, len) in &writes {
            for s in at..at + len {
                allowed[s as usize] = in_flight;
            }
        }
        for &(at, len) in acked.borrow().iter() {
            for s in at..at + len {
                allowed[s as usize] = 2;
            }
        }
        let buf = array
            .read_to_buf(0, (sectors * 512) as usize)
            .await
            .unwrap();
        let lost = (0..sectors)
            .filter(|&s| {
                let b = &buf[(s * 512) as usize..(s * 512 + 512) as usize];
                let ok = |g: u64| pattern::check_sector(b, s, g, seed).is_none();
                let a = allowed[s as usize];
                a != 0xff && !((a & 1 != 0 && ok(1)) || (a & 2 != 0 && ok(2)))
            })
            .count();
        let st = array.status().await;
        let recovered = match policy {
            Policy::Journal(_) => st.journal.and_then(|j| j.recovered).map_or(0, |r| r.rows),
            Policy::WriteBack(_) => st
                .journal
                .and_then(|j| j.recovered)
                .map_or(0, |r| r.rows + r.data_pages),
            _ => st.ppl_recovered.map_or(0, |r| r.entries),
        };
        array.close().await.unwrap();
        Run {
            lost,
            crashed,
            recovered,
        }
    })
}

#[test]
fn without_a_log_a_crash_while_degraded_loses_data_the_writes_never_touched() {
    let runs: Vec<Run> = (0..12)
        .map(|k| crash_once(SEED + k, Policy::None))
        .collect();
    assert!(
        runs.iter().all(|r| r.crashed),
        "every run crashed mid-way: {runs:?}"
    );
    let lost: usize = runs.iter().map(|r| r.lost).sum();
    assert!(lost > 0, "the write hole shows: {runs:?}");
}

/// Over many kill points (`HOLE_RUNS` of them; `HOLE_RUN=k` replays one).
#[test]
fn with_the_partial_parity_log_no_crash_while_degraded_loses_a_sector() {
    let runs: u64 = std::env::var("HOLE_RUNS").map_or(24, |v| v.parse().unwrap());
    let only: Option<u64> = std::env::var("HOLE_RUN").ok().map(|v| v.parse().unwrap());
    let mut recovered = 0;
    for k in (0..runs).filter(|k| only.is_none_or(|o| o == *k)) {
        let r = crash_once(SEED + k, Policy::Ppl);
        assert!(r.crashed, "run {k} crashed mid-way");
        assert_eq!(r.lost, 0, "run {k}: sectors lost ({r:?})");
        recovered += r.recovered;
    }
    assert!(recovered > 0, "the starts recovered entries from the log");
}

/// md's write journal, over many kill points (`HOLE_RUNS`, `HOLE_RUN` as above): every
/// acknowledged write reads back, and no sector a write never touched changes.
fn journal_runs(policy: Policy) {
    let runs: u64 = std::env::var("HOLE_RUNS").map_or(24, |v| v.parse().unwrap());
    let only: Option<u64> = std::env::var("HOLE_RUN").ok().map(|v| v.parse().unwrap());
    let (mut recovered, mut crashed, mut ran) = (0, 0, 0);
    for k in (0..runs).filter(|k| only.is_none_or(|o| o == *k)) {
        let r = crash_once(SEED + k, policy);
        assert_eq!(r.lost, 0, "run {k}: sectors lost ({r:?})");
        recovered += r.recovered;
        crashed += u64::from(r.crashed);
        ran += 1;
    }
    // A seeded stop point may come after the last write (the journal adds its own
    // operations to count): most runs must still stop mid-way.
    assert!(
        4 * crashed >= 3 * ran,
        "{crashed} of {ran} runs crashed mid-way"
    );
    assert!(recovered > 0, "the starts replayed rows from the journal");
}

#[test]
fn with_the_write_journal_no_crash_of_a_degraded_raid5_loses_a_sector() {
    journal_runs(Policy::Journal(Level::Raid5));
}

#[test]
fn with_the_write_journal_no_crash_of_a_degraded_raid6_loses_a_sector() {
    journal_runs(Policy::Journal(Level::Raid6));
}

#[test]
fn with_the_write_back_journal_no_crash_of_a_degraded_raid5_loses_a_sector() {
    journal_runs(Policy::WriteBack(Level::Raid5));
}

#[test]
fn with_the_write_back_journal_no_crash_of_a_degraded_raid6_loses_a_sector() {
    journal_runs(Policy::WriteBack(Level::Raid6));
}
