//! The RAID5/6 stripe cache: concurrent writes to one stripe gather into one full-stripe
//! write, rows a write leaves known spare the next write its pre-reads, and a request that
//! is dropped half way never stalls its stripe. Member reads and writes are counted by
//! fault-free `FaultMember`s; contents are checked with self-verifying sectors.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::sync::Arc;

use common::{verify_all, write_pattern, Model, DATA_OFFSET};
use futures::FutureExt;
use raidd_engine::member::MemMember;
use raidd_engine::pattern;
use raidd_engine::{Alone, Array, ArrayParts, Gather, Member, SlotParts};
use raidd_lab::{FaultControl, FaultMember, FaultPlan};
use raidd_layout::{Geometry, Level, ParityLayout};
use raidd_rt::AlignedBuf;

const CHUNK: u32 = 8; // sectors: one 4 KiB chunk per member and stripe
const MEMBER_SECTORS: u64 = 512;

struct Rig {
    array: Arc<Array>,
    controls: Vec<Arc<FaultControl>>,
}

impl Rig {
    fn new(members: usize, raid6: bool) -> Rig {
        let level = if raid6 { Level::Raid6 } else { Level::Raid5 };
        let geometry = Geometry::parity(
            level,
            members,
            ParityLayout::LeftSymmetric,
            CHUNK,
            MEMBER_SECTORS,
        )
        .unwrap();
        let faults: Vec<Arc<FaultMember>> = (0..members)
            .map(|i| {
                let mem = Arc::new(MemMember::new(
                    format!("m{i}"),
                    DATA_OFFSET + MEMBER_SECTORS * 512,
                ));
                // Every member I/O yields once, so concurrent requests really overlap.
                let plan = FaultPlan {
                    delay_yields: Some((1, 1)),
                    ..FaultPlan::default()
                };
                Arc::new(FaultMember::new(mem, plan))
            })
            .collect();
        let controls = faults.iter().map(|f| f.control()).collect();
        let slots = faults
            .iter()
            .map(|f| {
                Some(SlotParts {
                    member: f.clone() as Arc<dyn Member>,
                    data_offset: DATA_OFFSET,
                    recovered: None,
                    by_bitmap: false,
                    write_mostly: false,
                })
            })
            .collect();
        let array = Arc::new(
            Array::new(ArrayParts {
                name: "cache".into(),
                uuid: [3; 16],
                geometry,
                slots,
                spares: Vec::new(),
                journal: None,
                ppl: None,
                read_only: false,
            })
            .unwrap(),
        );
        Rig { array, controls }
    }

    fn reads(&self) -> u64 {
        self.controls.iter().map(|c| c.reads()).sum()
    }

    fn writes(&self) -> u64 {
        self.controls.iter().map(|c| c.writes()).sum()
    }
}

fn pattern_buf(sector: u64, sectors: u64, generation: u64, seed: u64) -> AlignedBuf {
    let mut b = AlignedBuf::zeroed((sectors * 512) as usize);
    pattern::fill(&mut b, sector, generation, seed);
    b
}

/// Three writes of one chunk each, issued together, cover stripe 0 of a 4-member RAID5.
async fn three_chunk_writes(rig: &Rig, model: &mut Model) {
    let a = &rig.array;
    let g = model.next;
    model.next += 1;
    let writes = (0..3u64).map(|dd| {
        let s = dd * u64::from(CHUNK);
        let buf = pattern_buf(s, u64::from(CHUNK), g, model.seed);
        raidd_rt::spawn_local({
            let a = a.clone();
            async move { a.write_buf(s * 512, buf).await }
        })
    });
    for r in futures::future::join_all(writes).await {
        r.unwrap();
    }
    for s in 0..3 * u64::from(CHUNK) {
        model.generation[s as usize] = g;
    }
}

#[test]
fn plugging_gathers_concurrent_chunk_writes_into_one_full_stripe() {
    raidd_rt::block_on(async {
        let rig = Rig::new(4, false);
        // No cached rows, so only gathering can avoid the pre-reads.
        rig.array.set_stripe_cache(0, Gather::Plug);
        let mut model = Model::new(rig.array.size_bytes() / 512, 11);
        three_chunk_writes(&rig, &mut model).await;
        let c = rig.array.status().await.counters;
        let sc = c.stripe_cache.clone().unwrap();
        assert_eq!(
            (c.full_stripe_writes, sc.batches, sc.gathered),
            (1, 1, 2),
            "{c:?}"
        );
        assert_eq!(rig.reads(), 0, "a full stripe is written without reading");
        assert_eq!(rig.writes(), 4, "three data chunks and the parity");
        verify_all(&rig.array, &model, "plugged").await;
    });
}

/// Writes of `sectors` at each start, issued together, into generation `g` of the model.
async fn writes_together(rig: &Rig, model: &mut Model, pieces: &[(u64, u64)]) {
    let g = model.next;
    model.next += 1;
    let writes = pieces.iter().map(|&(s, n)| {
        let buf = pattern_buf(s, n, g, model.seed);
        raidd_rt::spawn_local({
            let a = rig.array.clone();
            async move { a.write_buf(s * 512, buf).await }
        })
    });
    for r in futures::future::join_all(writes).await {
        r.unwrap();
    }
    for &(s, n) in pieces {
        for x in s..s + n {
            model.generation[x as usize] = g;
        }
    }
}

#[test]
fn a_full_stripe_gathered_from_pieces_of_chunks_copies_nothing() {
    for raid6 in [false, true] {
        raidd_rt::block_on(async move {
            let rig = Rig::new(if raid6 { 5 } else { 4 }, raid6);
            rig.array.set_stripe_cache(0, Gather::Plug);
            let mut model = Model::new(rig.array.size_bytes() / 512, 12);
            // Stripe 0's three data chunks (8 sectors each) in seven requests whose edges
            // differ from chunk to chunk: parity is generated over rows 0-2, 2-4, 4-6, 6-8
            // from different requests' windows.
            let pieces = [(0, 4), (4, 4), (8, 2), (10, 6), (16, 2), (18, 4), (22, 2)];
            writes_together(&rig, &mut model, &pieces).await;
            let c = rig.array.status().await.counters;
            assert_eq!(c.full_stripe_writes, 1, "raid6={raid6}: {c:?}");
            assert_eq!(rig.reads(), 0, "raid6={raid6}: nothing read");
            assert_eq!(
                c.copied_bytes, 0,
                "raid6={raid6}: parity from the windows, data written from them"
            );
            verify_all(&rig.array, &model, "pieces").await;
            rig.verify_every_single_loss(&model, raid6).await;
        });
    }
}

#[test]
fn a_small_write_alone_on_its_stripe_skips_the_cache() {
    for raid6 in [false, true] {
        raidd_rt::block_on(async move {
            let rig = Rig::new(if raid6 { 6 } else { 4 }, raid6);
            rig.array.set_stripe_cache(1 << 20, Gather::Plug);
            rig.array.set_write_alone(Alone::Always);
            let parity = if raid6 { 2 } else { 1 };
            let mut model = Model::new(rig.array.size_bytes() / 512, 15);
            let stripe = stripe_sectors(&rig);
            // Three sectors inside chunk 1 of stripe 2, then all of chunk 0 of stripe 5.
            for (i, (sector, sectors)) in [(2 * stripe + 10, 3), (5 * stripe, 8)]
                .into_iter()
                .enumerate()
            {
                let (r0, w0) = (rig.reads(), rig.writes());
                write_pattern(&rig.array, &mut model, sector, sectors).await;
                // Read-modify-write: the old data and parity read, the new written.
                assert_eq!(rig.reads() - r0, 1 + parity, "raid6={raid6} write {i}");
                assert_eq!(rig.writes() - w0, 1 + parity, "raid6={raid6} write {i}");
            }
            let c = rig.array.status().await.counters;
            let sc = c.stripe_cache.clone().unwrap();
            assert_eq!(
                (c.rmw_writes, sc.batches, sc.cached_bytes),
                (2, 0, 0),
                "{c:?}"
            );
            assert_eq!(
                c.copied_bytes, 0,
                "data goes to the member from the request"
            );
            verify_all(&rig.array, &model, "alone").await;
            // Parity is right: every member's loss reads back through it.
            rig.verify_every_single_loss(&model, raid6).await;
        });
    }
}

#[test]
fn narrow_arrays_write_small_writes_through_the_cache() {
    // RAID5 over 3 and RAID6 over 4 and 5: reconstruct-write reads fewer members than
    // read-modify-write would, so even `always` leaves their small writes to the planner.
    for (members, raid6) in [(3, false), (4, true), (5, true)] {
        raidd_rt::block_on(async move {
            let rig = Rig::new(members, raid6);
            rig.array.set_stripe_cache(0, Gather::Plug);
            rig.array.set_write_alone(Alone::Always);
            let mut model = Model::new(rig.array.size_bytes() / 512, 18);
            let r0 = rig.reads();
            write_pattern(&rig.array, &mut model, 2, 3).await;
            let data = members - if raid6 { 2 } else { 1 };
            assert_eq!(
                rig.reads() - r0,
                data as u64 - 1,
                "{members} members: other data"
            );
            let c = rig.array.status().await.counters;
            let sc = c.stripe_cache.clone().unwrap();
            assert_eq!((c.rcw_writes, sc.batches), (1, 1), "{members}: {c:?}");
            verify_all(&rig.array, &model, "narrow").await;
        });
    }
}

#[test]
fn a_write_alone_drops_kept_rows_and_meets_cache_writes_on_its_stripe() {
    for raid6 in [false, true] {
        raidd_rt::block_on(async move {
            let rig = Rig::keeping_rows(raid6);
            rig.array.set_stripe_cache(1 << 20, Gather::Plug);
            let mut model = Model::new(rig.array.size_bytes() / 512, 16);
            // Through the cache: the stripe's rows are kept.
            rig.array.set_write_alone(Alone::Never);
            write_pattern(&rig.array, &mut model, 1, 2).await;
            let kept = rig.array.status().await.counters.stripe_cache.unwrap();
            assert!(kept.cached_bytes > 0, "{kept:?}");
            // Alone on the same stripe: the kept rows would be stale, so they go.
            rig.array.set_write_alone(Alone::Always);
            write_pattern(&rig.array, &mut model, 9, 2).await;
            let after = rig.array.status().await.counters.stripe_cache.unwrap();
            assert_eq!(after.cached_bytes, 0, "{after:?}");
            assert_eq!(after.batches, kept.batches, "the second write went alone");
            // Writes alone and writes through the cache (a whole stripe, two chunks) on the
            // same stripes at once, round after round.
            let stripe = stripe_sectors(&rig);
            let data = stripe - u64::from(CHUNK) * if raid6 { 2 } else { 1 };
            for round in 0..8u64 {
                let s = (round % 3) * data;
                let pieces = [(s + 1, 3), (s, data), (s + 9, 2), (s + 8, 16), (s + 20, 1)];
                writes_together(&rig, &mut model, &pieces).await;
            }
            verify_all(&rig.array, &model, "alone with the cache").await;
            rig.verify_every_single_loss(&model, raid6).await;
        });
    }
}

#[test]
fn small_writes_go_alone_once_a_window_gathered_nothing() {
    raidd_rt::block_on(async {
        let rig = Rig::new(4, false);
        rig.array.set_stripe_cache(0, Gather::Plug); // the default policy, and Auto
        let mut model = Model::new(rig.array.size_bytes() / 512, 17);
        let stripe = stripe_sectors(&rig);
        let stripes = rig.array.size_bytes() / 512 / stripe;
        // One small write at a time: nothing to gather. The first window's writes go
        // through the cache, the rest alone.
        for i in 0..300u64 {
            let sector = (i * 7 % stripes) * stripe + (i % 3) * u64::from(CHUNK) + i % 5;
            write_pattern(&rig.array, &mut model, sector, 2).await;
        }
        let c = rig.array.status().await.counters;
        let sc = c.stripe_cache.clone().unwrap();
        assert_eq!(c.rmw_writes, 300, "{c:?}");
        assert!(
            (64..=70).contains(&sc.batches),
            "one window through the cache: {sc:?}"
        );
        verify_all(&rig.array, &model, "auto").await;
        rig.verify_every_single_loss(&model, false).await;
    });
}

#[test]
fn without_plugging_the_first_write_starts_alone() {
    raidd_rt::block_on(async {
        let rig = Rig::new(4, false);
        rig.array.set_stripe_cache(0, Gather::None);
        let mut model = Model::new(rig.array.size_bytes() / 512, 12);
        three_chunk_writes(&rig, &mut model).await;
        let c = rig.array.status().await.counters;
        let sc = c.stripe_cache.clone().unwrap();
        // The first write leads at once (read-modify-write, two reads); the other two wait
        // for it and then go together (one read).
        assert_eq!(
            (c.full_stripe_writes, sc.batches, sc.gathered),
            (0, 2, 1),
            "{c:?}"
        );
        assert_eq!(rig.reads(), 3);
        verify_all(&rig.array, &model, "unplugged").await;
    });
}

#[test]
fn a_limit_on_stripes_in_flight_gathers_too() {
    raidd_rt::block_on(async {
        let rig = Rig::new(4, false);
        rig.array.set_stripe_cache(0, Gather::Limit(1));
        let mut model = Model::new(rig.array.size_bytes() / 512, 13);
        // Occupy the only slot with a write to another stripe while the three arrive.
        let other = {
            let a = rig.array.clone();
            let buf = pattern_buf(64, 8, 1, model.seed);
            raidd_rt::spawn_local(async move { a.write_buf(64 * 512, buf).await })
        };
        three_chunk_writes(&rig, &mut model).await;
        other.await.unwrap();
        for s in 64..72 {
            model.generation[s] = 1;
        }
        let c = rig.array.status().await.counters;
        assert!(
            c.stripe_cache.as_ref().unwrap().gathered >= 1,
            "parts waiting for a slot join one batch: {c:?}"
        );
        verify_all(&rig.array, &model, "limit").await;
    });
}

#[test]
fn known_rows_spare_the_next_writes_their_reads() {
    for raid6 in [false, true] {
        raidd_rt::block_on(async move {
            let rig = Rig::keeping_rows(raid6);
            let a = &rig.array;
            let mut model = Model::new(a.size_bytes() / 512, 14);
            let parity = if raid6 { 2 } else { 1 };
            // One sector in chunk 0, then one in chunk 1 of the same row, chunk 0 again, and
            // chunk 2.
            // Then row 1 (a new range), row 1 again, and row 0 again: each stripe keeps
            // several row ranges.
            // New rows are a tie between read-modify-write and reconstruct-write, which goes
            // to RMW: it reads the chunk and parity (2 on RAID5, 3 on RAID6), and leaves
            // those known. A later write to another chunk of known rows reads only what is
            // still unknown of the cheaper strategy; a chunk written before reads nothing.
            let expected: [u64; 7] = if raid6 {
                [3, 1, 0, 1, 3, 1, 0]
            } else {
                [2, 1, 0, 0, 2, 1, 0]
            };
            for (i, sector) in [0u64, 8, 0, 16, 9, 1, 8].into_iter().enumerate() {
                let (r0, w0) = (rig.reads(), rig.writes());
                common::write_pattern(a, &mut model, sector, 1).await;
                let (reads, writes) = (rig.reads() - r0, rig.writes() - w0);
                assert_eq!(
                    writes,
                    1 + parity,
                    "raid6={raid6} write {i}: data and parity"
                );
                assert_eq!(reads, expected[i], "raid6={raid6} write {i}: reads");
            }
            let sc = a.status().await.counters.stripe_cache.unwrap();
            assert_eq!(sc.hits, 5);
            assert!(sc.cached_bytes > 0 && sc.cached_bytes <= sc.limit_bytes);
            verify_all(a, &model, "cached").await;
            // The members agree with the cache: every single loss still reads back right.
            rig.verify_every_single_loss(&model, raid6).await;
        });
    }
}

/// A write inside wider kept rows generates parity over its own rows only (it used to
/// generate it over all the kept rows: a 4K write into 64K of kept rows spent half its time
/// there). The parity it writes must land on exactly those rows, and the writes that follow
/// build on the kept rows around them: every single loss must still read back right.
#[test]
fn a_narrow_write_inside_kept_rows_keeps_the_parity_around_it() {
    for raid6 in [false, true] {
        raidd_rt::block_on(async move {
            let rig = Rig::keeping_rows(raid6);
            let a = &rig.array;
            let mut model = Model::new(a.size_bytes() / 512, 16);
            // Rows 0..4 of chunk 0 (kept), row 2 of chunk 1, row 0 of chunk 2, rows 1..3 of
            // chunk 1, row 3 of chunk 0: every write after the first lies in the kept rows
            // and works over all of them. The first is read-modify-write, which leaves chunk 0
            // and parity known; the next two read their own chunk over the kept rows once
            // (1 each), and after that every row is known.
            let expected: [u64; 4] = [1, 1, 0, 0];
            let c = u64::from(CHUNK);
            for (i, (sector, n)) in [(0, 4), (c + 2, 1), (2 * c, 1), (c + 1, 2), (3, 1)]
                .into_iter()
                .enumerate()
            {
                let r0 = rig.reads();
                common::write_pattern(a, &mut model, sector, n).await;
                if i > 0 {
                    let reads = rig.reads() - r0;
                    assert_eq!(reads, expected[i - 1], "raid6={raid6} write {i}: reads");
                }
            }
            verify_all(a, &model, "kept").await;
            rig.verify_every_single_loss(&model, raid6).await;
        });
    }
}

#[test]
fn dropped_requests_never_stall_their_stripe() {
    raidd_rt::block_on(async {
        let rig = Rig::new(4, false);
        rig.array.set_stripe_cache(1 << 20, Gather::Plug);
        let a = rig.array.clone();
        let mut model = Model::new(a.size_bytes() / 512, 15);
        // A leader dropped while plugged: the stripe must pass to the next writer.
        {
            let buf = pattern_buf(0, 1, 99, model.seed);
            let mut leader = Box::pin(a.write_buf(0, buf));
            assert!((&mut leader).now_or_never().is_none(), "plugged, not done");
        }
        common::write_pattern(&a, &mut model, 1, 1).await;
        // A waiter dropped while another request leads: the leader finishes, later writes go.
        {
            let b1 = pattern_buf(2, 1, 100, model.seed);
            let b2 = pattern_buf(3, 1, 101, model.seed);
            let mut first = Box::pin(a.write_buf(2 * 512, b1));
            let mut second = Box::pin(a.write_buf(3 * 512, b2));
            assert!((&mut first).now_or_never().is_none());
            assert!((&mut second).now_or_never().is_none());
            drop(second);
            first.await.unwrap();
            for s in 2..3 {
                model.generation[s] = 100;
            }
        }
        common::write_pattern(&a, &mut model, 4, 4).await;
        // What the dropped writes left is either old or new: overwrite and check everything.
        common::write_pattern(&a, &mut model, 0, 1).await;
        common::write_pattern(&a, &mut model, 3, 1).await;
        verify_all(&a, &model, "after dropped requests").await;
    });
}

impl Rig {
    /// A RAID5 over 4 or a RAID6 over 6 that keeps rows and does not plug (each write is a
    /// batch of its own).
    fn keeping_rows(raid6: bool) -> Rig {
        let rig = Rig::new(if raid6 { 6 } else { 4 }, raid6);
        rig.array.set_stripe_cache(1 << 20, Gather::None);
        rig
    }

    /// Reads everything back through a view without each member in turn.
    async fn verify_every_single_loss(&self, model: &Model, raid6: bool) {
        for lost in 0..self.array.geometry().members() {
            self.controls[lost].fail();
            let fresh = Rig::degraded_view(self, lost);
            verify_all(&fresh, model, &format!("raid6={raid6} without {lost}")).await;
            self.controls[lost].heal();
        }
    }

    /// A second array over the same members with slot `lost` missing (reads reconstruct).
    fn degraded_view(rig: &Rig, lost: usize) -> Array {
        let a = &rig.array;
        let slots = (0..a.geometry().members())
            .map(|i| {
                (i != lost).then(|| SlotParts {
                    member: a.slots().member(i).unwrap(),
                    data_offset: DATA_OFFSET,
                    recovered: None,
                    by_bitmap: false,
                    write_mostly: false,
                })
            })
            .collect();
        Array::new(ArrayParts {
            name: "view".into(),
            uuid: [3; 16],
            geometry: a.geometry().clone(),
            slots,
            spares: Vec::new(),
            journal: None,
            ppl: None,
            read_only: true,
        })
        .unwrap()
    }
}

/// Array sectors per stripe: a chunk per data member.
fn stripe_sectors(rig: &Rig) -> u64 {
    let g = rig.array.geometry();
    let parity = if g.level() == Level::Raid6 { 2 } else { 1 };
    u64::from(CHUNK) * (g.members() - parity) as u64
}

#[test]
fn whole_stripes_of_one_request_go_out_as_one_write_per_member() {
    for raid6 in [false, true] {
        raidd_rt::block_on(async move {
            let rig = Rig::new(if raid6 { 6 } else { 4 }, raid6);
            let a = &rig.array;
            let n = a.geometry().members() as u64;
            let ss = stripe_sectors(&rig);
            let mut model = Model::new(a.size_bytes() / 512, 16);
            // Four whole stripes: one run, one vectored write per member.
            let (r0, w0) = (rig.reads(), rig.writes());
            common::write_pattern(a, &mut model, 2 * ss, 4 * ss).await;
            assert_eq!(
                rig.reads() - r0,
                0,
                "raid6={raid6}: whole stripes read nothing"
            );
            assert_eq!(rig.writes() - w0, n, "raid6={raid6}: one write per member");
            let c = a.status().await.counters;
            assert_eq!(c.full_stripe_writes, 4, "raid6={raid6}: {c:?}");
            // Half a stripe, five whole ones, half a stripe: the partial ends are batches of
            // their own (each one write per member it touches), the middle is one run.
            let w0 = rig.writes();
            common::write_pattern(a, &mut model, 10 * ss + ss / 2, 6 * ss).await;
            let ends = 2 * (n / 2 + if raid6 { 2 } else { 1 });
            assert!(
                rig.writes() - w0 <= n + ends,
                "raid6={raid6}: {} member writes",
                rig.writes() - w0
            );
            verify_all(a, &model, "runs").await;
            rig.verify_every_single_loss(&model, raid6).await;
        });
    }
}

#[test]
fn a_stripe_led_by_another_request_splits_the_run_around_it() {
    raidd_rt::block_on(async {
        let rig = Rig::keeping_rows(false);
        let a = rig.array.clone();
        let ss = stripe_sectors(&rig);
        let mut model = Model::new(a.size_bytes() / 512, 17);
        // A small write leads stripe 2 (its member I/O yields), then a write of stripes 0..6
        // arrives: stripes 0..2 and 3..6 are runs, stripe 2 joins the small write's head.
        let g = model.next;
        model.next += 2;
        let small = pattern_buf(2 * ss + 1, 2, g, model.seed);
        let big = pattern_buf(0, 6 * ss, g + 1, model.seed);
        let w0 = rig.writes();
        let mut first = Box::pin(a.write_buf((2 * ss + 1) * 512, small));
        assert!(
            (&mut first).now_or_never().is_none(),
            "waits on its member I/O"
        );
        let second = a.write_buf(0, big);
        let (r1, r2) = futures::future::join(first, second).await;
        r1.unwrap();
        r2.unwrap();
        // The small write (data and parity), the two runs (a write per member each) and
        // stripe 2's second batch (a write per member); stripe by stripe it would be 26.
        assert_eq!(rig.writes() - w0, 2 + 4 + 4 + 4);
        // The big write arrived last, so it wins everywhere.
        for s in 0..6 * ss {
            model.generation[s as usize] = g + 1;
        }
        verify_all(&a, &model, "split run").await;
        rig.verify_every_single_loss(&model, false).await;
    });
}

#[test]
fn a_dropped_run_never_stalls_its_stripes() {
    raidd_rt::block_on(async {
        let rig = Rig::new(4, false);
        let a = rig.array.clone();
        let ss = stripe_sectors(&rig);
        let mut model = Model::new(a.size_bytes() / 512, 18);
        for polls in 0..4 {
            let buf = pattern_buf(0, 4 * ss, 200 + polls, model.seed);
            let mut run = Box::pin(a.write_buf(0, buf));
            for _ in 0..=polls {
                if (&mut run).now_or_never().is_some() {
                    break;
                }
            }
            drop(run);
            // Every stripe of the run takes writes again; what the dropped run left is
            // overwritten.
            for s in 0..4 {
                common::write_pattern(&a, &mut model, s * ss + 1, 1).await;
            }
            common::write_pattern(&a, &mut model, 0, 4 * ss).await;
            verify_all(&a, &model, &format!("after a run dropped at poll {polls}")).await;
        }
    });
}

/// With the read bypass off (seed 004's comparison), reads go through a buffer per chunk
/// and are copied: the same data, every byte copied once, nothing counted as degraded; on,
/// nothing is copied.
#[test]
fn reads_without_the_bypass_copy_every_byte_and_return_the_same_data() {
    for raid6 in [false, true] {
        raidd_rt::block_on(async move {
            let rig = Rig::new(if raid6 { 5 } else { 4 }, raid6);
            let mut model = Model::new(rig.array.size_bytes() / 512, 21);
            let all = rig.array.size_bytes() / 512;
            write_pattern(&rig.array, &mut model, 0, all).await;
            let before = rig.array.status().await.counters;
            verify_all(&rig.array, &model, "bypass on").await;
            let on = rig.array.status().await.counters;
            assert_eq!(on.copied_bytes, before.copied_bytes, "raid6={raid6}");
            rig.array.set_read_bypass(false);
            verify_all(&rig.array, &model, "bypass off").await;
            let off = rig.array.status().await.counters;
            assert_eq!(
                off.copied_bytes - on.copied_bytes,
                rig.array.size_bytes(),
                "raid6={raid6}: every byte copied once"
            );
            assert_eq!(off.degraded_reads, on.degraded_reads, "raid6={raid6}");
            rig.array.set_read_bypass(true);
            verify_all(&rig.array, &model, "bypass on again").await;
            let again = rig.array.status().await.counters;
            assert_eq!(again.copied_bytes, off.copied_bytes, "raid6={raid6}");
        });
    }
}
