//! Seeded concurrency: many clients read and write *overlapping* sector ranges (the same
//! sectors, not just the same stripes) while members fail, a fresh member is added and
//! rebuilt, all at once. Every read is checked against what block-device semantics allow,
//! and at the end every sector, and every sector with each member taken away in turn.
//!
//! What a read may return, per sector (the model): a write W of the sector is *possible*
//! for a read R when W started before R finished, and no other write W2 of the sector both
//! started after W was acknowledged and was acknowledged before R started (then W was
//! certainly overwritten). The initial contents count as a write acknowledged at time 0.
//! This is exactly as permissive as concurrent I/O to one block device: writes that
//! overlapped in time may land in either order, but an acknowledged write is never lost
//! and a read never sees a write that had not been issued yet.
//!
//! Memory members with seeded yields and the single-threaded executor make a run depend
//! only on its seed: `RAIDD_CONC_SEED=S` replays the seed a failure names, and
//! `RAIDD_CONC_SEEDS=N` runs more schedules. The same clients also run over O_DIRECT files
//! (fault injection around them as around memory), where member I/O goes through io_uring:
//! contiguous member I/O gathered into one operation and buffers registered with the ring.
//! The kernel's timing makes those runs unrepeatable, but the model holds them all the same.

#![allow(clippy::unwrap_used, clippy::await_holding_refcell_ref)] // test code; the history is borrowed across awaits only once every client has ended

mod common;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use common::Rng;
use raidd_engine::create::{create, CreateSpec};
use raidd_engine::member::{FileMember, MemMember, OpenOptions};
use raidd_engine::pattern::{self, Problem};
use raidd_engine::{Added, Alone, Array, Gather, Member, SlotState, SyncLimits};
use raidd_lab::{FaultMember, FaultPlan};
use raidd_layout::Level;
use raidd_rt::AlignedBuf;

const MEMBER_BYTES: u64 = 4 << 20;
const CLIENTS: u64 = 6;
const OPS: usize = 60;

/// One write of one sector: its generation and when it started and was acknowledged.
#[derive(Clone, Copy, Debug)]
struct Write {
    generation: u64,
    start: u64,
    end: Option<u64>,
}

/// The history of every sector, on a logical clock that ticks at every start and finish.
struct History {
    clock: u64,
    next_generation: u64,
    sectors: Vec<Vec<Write>>,
}

impl History {
    fn new(sectors: u64) -> History {
        let initial = Write {
            generation: 0,
            start: 0,
            end: Some(0),
        };
        History {
            clock: 1,
            next_generation: 1,
            sectors: vec![vec![initial]; sectors as usize],
        }
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    fn start_write(&mut self, first: u64, count: u64) -> u64 {
        let g = self.next_generation;
        self.next_generation += 1;
        let start = self.tick();
        for s in first..first + count {
            self.sectors[s as usize].push(Write {
                generation: g,
                start,
                end: None,
            });
        }
        g
    }

    fn end_write(&mut self, first: u64, count: u64, generation: u64) {
        let end = self.tick();
        for s in first..first + count {
            let w = self.sectors[s as usize]
                .iter_mut()
                .find(|w| w.generation == generation)
                .expect("started");
            w.end = Some(end);
        }
    }

    /// Generations sector `s` may hold for a read that ran from `start` to `end`.
    fn possible(&self, s: u64, start: u64, end: u64) -> Vec<u64> {
        let ws = &self.sectors[s as usize];
        ws.iter()
            .filter(|w| w.start < end)
            .filter(|w| {
                !ws.iter().any(|w2| {
                    let after_w = w.end.is_some_and(|e| w2.start > e);
                    let before_read = w2.end.is_some_and(|e| e < start);
                    after_w && before_read
                })
            })
            .map(|w| w.generation)
            .collect()
    }
}

/// The generation a sector holds (0 for never written); any other problem is a failure.
fn found(sector: &[u8], s: u64, seed: u64) -> Result<u64, Problem> {
    match pattern::check_sector(sector, s, u64::MAX, seed) {
        Some(Problem::Zero) => Ok(0),
        Some(Problem::Stale { found_generation }) => Ok(found_generation),
        Some(p) => Err(p),
        None => unreachable!("no write has generation u64::MAX"),
    }
}

/// Checks a read of `buf` at `first`, done from `start` to `end`; returns the first
/// violation.
fn check_read(
    h: &History,
    buf: &[u8],
    first: u64,
    (start, end): (u64, u64),
    seed: u64,
) -> Option<String> {
    for (i, sector) in buf.chunks_exact(512).enumerate() {
        let s = first + i as u64;
        let ok = h.possible(s, start, end);
        match found(sector, s, seed) {
            Ok(g) if ok.contains(&g) => {}
            Ok(g) => {
                return Some(format!(
                    "sector {s} holds generation {g}, allowed {ok:?} (read {start}..{end})"
                ))
            }
            Err(p) => return Some(format!("sector {s}: {p:?}")),
        }
    }
    None
}

async fn client(array: Arc<Array>, h: Rc<RefCell<History>>, seed: u64, c: u64, what: String) {
    let sectors = array.size_bytes() / 512;
    let mut rng = Rng(seed.wrapping_mul(977).wrapping_add(c));
    // A small hot region shared by every client, so writes really overlap, and some
    // requests over several stripes (some over several whole ones).
    let hot = 192.min(sectors);
    for _ in 0..OPS {
        let len = if rng.below(8) == 0 {
            // Up to several whole stripes: runs of stripes led together.
            1 + rng.below(320)
        } else if rng.below(4) == 0 {
            1 + rng.below(96)
        } else {
            1 + rng.below(12)
        };
        let span = if rng.below(3) == 0 { sectors } else { hot };
        let len = len.min(span);
        let first = rng.below(span - len + 1);
        if rng.below(3) == 0 {
            let start = h.borrow_mut().tick();
            let buf = array
                .read_to_buf(first * 512, (len * 512) as usize)
                .await
                .unwrap_or_else(|e| panic!("{what}: client {c} read {first}+{len}: {e}"));
            let end = h.borrow_mut().tick();
            if let Some(bad) = check_read(&h.borrow(), &buf, first, (start, end), seed) {
                panic!("{what}: client {c} read {first}+{len}: {bad}");
            }
        } else {
            let g = h.borrow_mut().start_write(first, len);
            let mut buf = AlignedBuf::zeroed((len * 512) as usize);
            pattern::fill(&mut buf, first, g, seed);
            array
                .write_buf(first * 512, buf)
                .await
                .unwrap_or_else(|e| panic!("{what}: client {c} write {first}+{len}: {e}"));
            h.borrow_mut().end_write(first, len, g);
        }
    }
}

struct Outcome {
    members: Vec<Vec<u8>>,
    events: Vec<String>,
}

/// Where the members live: memory (seeded, replayable), or files in a directory (through
/// the ring, O_DIRECT).
#[derive(Clone)]
enum Media {
    Memory,
    Files(std::path::PathBuf),
}

/// A member of `MEMBER_BYTES` called `name`; memory members are also returned as such, so
/// that a run's outcome can hold their contents.
fn member(media: &Media, name: &str) -> (Arc<dyn Member>, Option<Arc<MemMember>>) {
    match media {
        Media::Memory => {
            let m = Arc::new(MemMember::new(name, MEMBER_BYTES));
            (m.clone() as Arc<dyn Member>, Some(m))
        }
        Media::Files(dir) => {
            let path = dir.join(format!("{name}.img"));
            // Written through once: O_DIRECT writes into holes would be the filesystem's
            // allocation, not what is tested.
            std::fs::write(&path, vec![0u8; MEMBER_BYTES as usize]).unwrap();
            let opts = OpenOptions {
                direct: Some(true),
                ..OpenOptions::default()
            };
            (Arc::new(FileMember::open(&path, opts).unwrap()), None)
        }
    }
}

fn run(seed: u64, level: Level, n: usize, gather: Gather) -> Outcome {
    run_on(Media::Memory, seed, level, n, gather)
}

fn run_on(media: Media, seed: u64, level: Level, n: usize, gather: Gather) -> Outcome {
    raidd_rt::block_on(async move {
        let kind = if matches!(media, Media::Files(_)) {
            "files"
        } else {
            "memory"
        };
        let what =
            format!("seed {seed} {level} n={n} gather {gather} on {kind} (RAIDD_CONC_SEED={seed})");
        // Shown with a failure, also one that panics inside the engine before any check
        // here can name the seed.
        println!("running {what}");
        let (members, raw): (Vec<_>, Vec<_>) =
            (0..n).map(|i| member(&media, &format!("m{i}"))).unzip();
        let plan = |s: u64| FaultPlan {
            seed: s,
            delay_yields: Some((0, 3)),
            ..FaultPlan::default()
        };
        let faults: Vec<Arc<FaultMember>> = members
            .iter()
            .enumerate()
            .map(|(i, m)| Arc::new(FaultMember::new(m.clone(), plan(seed ^ i as u64))))
            .collect();
        let spec = CreateSpec {
            name: "conc".into(),
            homehost: "test".into(),
            level,
            layout: None,
            chunk_sectors: Some(16),
            members: faults
                .iter()
                .map(|f| Some(f.clone() as Arc<dyn Member>))
                .collect(),
            size_sectors: Some(2048),
            assume_clean: true,
            force: false,
            bitmap_chunk: None,
            ppl: false,
            journal: None,
            checksums: None,
        };
        let array = create(spec).await.unwrap().array;
        array.set_stripe_cache(64 << 10, gather);
        // Every other seed sends each small write whose stripe is idle alone (skipping the
        // cache, under every gathering policy), so writes alone meet cache batches, degraded
        // stripes and the rebuild; the rest leave it to the governor.
        if (seed / 3) % 2 == 1 {
            array.set_write_alone(Alone::Always);
        }
        let sectors = array.size_bytes() / 512;
        let h = Rc::new(RefCell::new(History::new(sectors)));
        let mut tasks: Vec<_> = (0..CLIENTS)
            .map(|c| raidd_rt::spawn_local(client(array.clone(), h.clone(), seed, c, what.clone())))
            .collect();
        // Meanwhile: a member fails (an I/O error), is replaced by a fresh one that is
        // rebuilt while the clients go on; on RAID6 a second member fails mid-rebuild.
        let mut rng = Rng(seed ^ 0x5eed);
        let victim = rng.below(n as u64) as usize;
        let second =
            (level == Level::Raid6).then(|| (victim + 1 + rng.below(n as u64 - 1) as usize) % n);
        let events = Rc::new(RefCell::new(Vec::new()));
        let lifecycle = {
            let array = array.clone();
            let faults = faults.clone();
            let events = events.clone();
            let what = what.clone();
            let fresh = Arc::new(FaultMember::new(
                member(&media, "fresh").0,
                plan(seed ^ 0xf4e5),
            ));
            raidd_rt::spawn_local(async move {
                for _ in 0..rng.below(40) {
                    raidd_rt::yield_now().await;
                }
                // The member starts failing I/O; the next request that touches it fails it.
                faults[victim].control().fail();
                while array.slots().state(victim) == SlotState::InSync {
                    raidd_rt::yield_now().await;
                    // Nothing may reach it for a while (reads bypass); fail it by hand.
                    if rng.below(20) == 0 {
                        let _ = array.fail_member(victim).await;
                    }
                }
                events.borrow_mut().push(format!("failed {victim}"));
                let gone = array.slots().member(victim).unwrap().info().name.clone();
                array.remove_member(&gone).await.unwrap();
                let added = array.add_member(fresh as Arc<dyn Member>).await.unwrap();
                assert_eq!(added, Added::Recovering(victim), "{what}");
                events.borrow_mut().push(format!("rebuilding {victim}"));
                let rebuild = {
                    let array = array.clone();
                    raidd_rt::spawn_local(async move {
                        let limits = SyncLimits {
                            window_bytes: 16 * 512,
                            ..SyncLimits::UNLIMITED
                        };
                        array.recover(victim, limits).await
                    })
                };
                if let Some(s) = second {
                    for _ in 0..rng.below(60) {
                        raidd_rt::yield_now().await;
                    }
                    array.fail_member(s).await.unwrap();
                    events
                        .borrow_mut()
                        .push(format!("failed {s} during the rebuild"));
                }
                rebuild
                    .await
                    .unwrap_or_else(|e| panic!("{what}: rebuild: {e}; {:?}", events.borrow()));
                events.borrow_mut().push(format!("rebuilt {victim}"));
            })
        };
        lifecycle.await;
        for t in tasks.drain(..) {
            t.await;
        }
        assert_eq!(array.slots().state(victim), SlotState::InSync, "{what}");
        // Quiescent now: each sector holds one of the writes nothing certainly overwrote.
        #[allow(clippy::await_holding_refcell_ref)] // every client task has ended
        let h = h.borrow();
        let end = h.clock + 1;
        let all = array
            .read_to_buf(0, (sectors * 512) as usize)
            .await
            .unwrap();
        if let Some(bad) = check_read(&h, &all, 0, (end, end), seed) {
            panic!("{what}: final contents: {bad}");
        }
        // And without each member in turn (as far as the array survives that), every sector
        // still reads as the model allows: the rebuilt member and the parity are right.
        for m in 0..n {
            if array.slots().state(m) != SlotState::InSync {
                continue;
            }
            let others_ok = (0..n)
                .filter(|&o| o != m)
                .all(|o| array.slots().state(o) == SlotState::InSync)
                || level == Level::Raid6;
            if !others_ok {
                continue;
            }
            let view = without(&array, m);
            let got = view.read_to_buf(0, (sectors * 512) as usize).await.unwrap();
            // Mirrors may disagree where two writes overlapped in time (each copy may see
            // them land in a different order, as with md), so each view is held to the model,
            // not to the first read; parity rebuilt from a stripe that does not match its
            // data would not be a valid sector at all.
            if let Some(bad) = check_read(&h, &got, 0, (end, end), seed) {
                panic!("{what}: without member {m}: {bad}");
            }
        }
        let members = raw
            .iter()
            .flatten()
            .map(|m| {
                let mut v = vec![0u8; (MEMBER_BYTES - (1 << 20)) as usize];
                m.read_sync(1 << 20, &mut v);
                v
            })
            .collect();
        let events = events.borrow().clone();
        Outcome { members, events }
    })
}

/// A read-only view of the same members with slot `gone` left out.
fn without(array: &Array, gone: usize) -> Array {
    let slots = (0..array.geometry().members())
        .map(|i| {
            (i != gone && array.slots().state(i) == SlotState::InSync).then(|| {
                raidd_engine::SlotParts {
                    member: array.slots().member(i).unwrap(),
                    data_offset: array.slots().data_offset(i),
                    recovered: None,
                    by_bitmap: false,
                    write_mostly: false,
                }
            })
        })
        .collect();
    Array::new(raidd_engine::ArrayParts {
        name: "view".into(),
        uuid: array.uuid(),
        geometry: array.geometry().clone(),
        slots,
        spares: Vec::new(),
        journal: None,
        ppl: None,
        read_only: true,
    })
    .unwrap()
}

// RAID6 twice: over 5 its small writes always go through the cache (reconstruct-write
// reads less), over 6 they may go alone.
const LEVELS: [(Level, usize); 5] = [
    (Level::Raid5, 4),
    (Level::Raid6, 5),
    (Level::Raid6, 6),
    (Level::Raid1, 3),
    (Level::Raid10, 4),
];

#[test]
fn overlapping_clients_with_failures_and_a_rebuild_over_many_seeds() {
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    let seeds: Vec<u64> = match env("RAIDD_CONC_SEED") {
        Some(s) => vec![s],
        None => (1..=env("RAIDD_CONC_SEEDS").unwrap_or(24)).collect(),
    };
    for seed in seeds {
        for (level, n) in LEVELS {
            // Parity levels run under every gathering policy; the seed picks one of them.
            let gather = [Gather::Plug, Gather::None, Gather::Limit(2)][(seed % 3) as usize];
            let out = run(seed, level, n, gather);
            assert!(
                out.events.iter().any(|e| e.starts_with("rebuilt")),
                "seed {seed} {level}: the schedule must rebuild: {:?}",
                out.events
            );
        }
    }
}

#[test]
fn overlapping_clients_over_files_through_the_ring() {
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    let dir = tempfile::Builder::new()
        .prefix("raidd-conc-")
        .tempdir_in("/var/tmp")
        .unwrap();
    // Registered before this thread's runtime starts, so its ring registers it.
    raidd_rt::register_arena(16 << 20).unwrap();
    let before = raidd_rt::io_stats();
    for seed in 1..=env("RAIDD_CONC_FILE_SEEDS").unwrap_or(3) {
        for (level, n) in LEVELS {
            let gather = [Gather::Plug, Gather::None, Gather::Limit(2)][(seed % 3) as usize];
            let out = run_on(Media::Files(dir.path().to_owned()), seed, level, n, gather);
            assert!(
                out.events.iter().any(|e| e.starts_with("rebuilt")),
                "seed {seed} {level} on files: the schedule must rebuild: {:?}",
                out.events
            );
        }
    }
    // The paths the test is for were taken.
    let io = raidd_rt::io_stats();
    let (gathered, fixed) = (io.gathered - before.gathered, io.fixed - before.fixed);
    eprintln!(
        "files: {} member I/Os, {gathered} gathered operations, {fixed} fixed",
        io.file_ops - before.file_ops
    );
    assert!(gathered > 0, "no member I/O was gathered");
    assert!(fixed > 0, "no member I/O used the registered buffers");
}

#[test]
fn a_seed_replays_exactly() {
    let a = run(4242, Level::Raid6, 5, Gather::Plug);
    let b = run(4242, Level::Raid6, 5, Gather::Plug);
    assert_eq!(a.events, b.events);
    assert!(
        a.members == b.members,
        "same seed, different member contents"
    );
}

#[test]
fn the_model_rejects_what_it_must() {
    let mut h = History::new(4);
    let g1 = h.start_write(0, 1);
    h.end_write(0, 1, g1);
    let g2 = h.start_write(0, 1);
    h.end_write(0, 1, g2);
    // After two acknowledged writes in sequence, a later read may see only the second.
    let t = h.tick();
    assert_eq!(h.possible(0, t, t + 1), vec![g2]);
    // Overlapping writes: either may win.
    let g3 = h.start_write(1, 1);
    let g4 = h.start_write(1, 1);
    h.end_write(1, 1, g3);
    h.end_write(1, 1, g4);
    let t = h.tick();
    let mut p = h.possible(1, t, t + 1);
    p.sort_unstable();
    assert_eq!(p, vec![g3, g4]);
    // A read concurrent with a write sees old or new, never a write not yet issued.
    let r0 = h.tick();
    let g5 = h.start_write(2, 1);
    let r1 = h.tick();
    let mut p = h.possible(2, r0, r1);
    p.sort_unstable();
    assert_eq!(p, vec![0, g5]);
    assert_eq!(h.possible(2, r0, r0), vec![0], "nothing issued yet");
    // A stale sector is caught by the checker.
    let mut buf = vec![0u8; 512];
    pattern::fill(&mut buf, 0, g1, 9);
    let t = h.tick();
    assert!(
        check_read(&h, &buf, 0, (t, t), 9).is_some(),
        "stale g1 must fail"
    );
    pattern::fill(&mut buf, 0, g2, 9);
    assert!(check_read(&h, &buf, 0, (t, t), 9).is_none());
    pattern::fill(&mut buf, 1, g2, 9);
    assert!(
        check_read(&h, &buf, 0, (t, t), 9).is_some(),
        "misplaced must fail"
    );
}
