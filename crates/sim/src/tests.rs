//! The model against figures worked out by hand from its parameters.

use std::path::Path;

use crate::drive::{Drive, DriveSpec, SECTOR};
use crate::topology::{load_model, parse_model, Topology};
use crate::world::{Op, World};

fn djna() -> Drive {
    load_model("djna-371350", Path::new(".")).expect("built-in model")
}

fn spec_with(f: impl FnOnce(&mut DriveSpec)) -> Drive {
    let mut s = djna().spec().clone();
    f(&mut s);
    Drive::new(s).expect("valid variant")
}

/// A deterministic xorshift for test draws.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Each stream issues its requests one after another (QD1), all streams at once; requests
/// are submitted in time order, as an event loop would. Returns when each stream finished.
fn run_streams(w: &mut World, streams: &[Vec<(usize, Op, u64, u64)>]) -> Vec<u64> {
    let mut next = vec![0usize; streams.len()];
    let mut at = vec![0u64; streams.len()];
    loop {
        let pick = (0..streams.len())
            .filter(|&s| next[s] < streams[s].len())
            .min_by_key(|&s| (at[s], s));
        let Some(s) = pick else { return at };
        let (drive, op, off, len) = streams[s][next[s]];
        at[s] = w.submit(drive, op, off, len, at[s]);
        next[s] += 1;
    }
}

#[test]
fn built_in_models_parse_and_give_their_papers_figures() {
    let d = djna();
    // Seed 000's Table 3: 13.5 GB, 7200 rpm (4.17 ms half revolution), 17 MB/s outer.
    assert!(
        (d.bytes() as f64 / 1e9 - 13.5).abs() < 0.01,
        "{}",
        d.bytes()
    );
    assert!((d.revolution_ns() / 2.0 - 4.1667e6).abs() < 1e3);
    let outer_media = 277.0 * 512.0 / d.revolution_ns() * 1e3;
    assert!((outer_media - 17.0).abs() < 0.05, "{outer_media} MB/s");
    let a = load_model("ata100-7200", Path::new(".")).expect("built-in model");
    let outer = 570.0 * 512.0 / a.revolution_ns() * 1e3;
    assert!((outer - 35.0).abs() < 0.1, "{outer} MB/s");
}

#[test]
fn seek_curve_meets_its_three_figures() {
    let d = djna();
    let cyl0 = d.place(0);
    // One cylinder: 6 heads × 277 sectors further.
    let cyl1 = d.place(6 * 277);
    assert_eq!(cyl1.cylinder, 1);
    assert!((d.seek_ns(&cyl0, &cyl1) - 1.0e6).abs() < 1.0);
    let last = d.place(d.sectors() - 1);
    assert!((d.seek_ns(&cyl0, &last) - 15.5e6).abs() < 1.0);
    assert_eq!(d.seek_ns(&cyl0, &cyl0), 0.0);
    // The mean over uniformly drawn cylinder pairs is the average seek.
    let cyls = last.cylinder + 1;
    let first_lba_of = |c: u32| {
        // Binary search for the cylinder's first LBA.
        let (mut lo, mut hi) = (0u64, d.sectors() - 1);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if d.place(mid).cylinder < c {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    };
    let mut rng = Rng(77);
    let n = 20_000;
    let mut sum = 0.0;
    for _ in 0..n {
        let a = d.place(first_lba_of((rng.next() % u64::from(cyls)) as u32));
        let b = d.place(first_lba_of((rng.next() % u64::from(cyls)) as u32));
        if a.cylinder != b.cylinder {
            sum += d.seek_ns(&a, &b);
        }
    }
    let mean = sum / f64::from(n);
    assert!((mean / 9.0e6 - 1.0).abs() < 0.02, "mean seek {mean} ns");
}

#[test]
fn a_random_4k_read_takes_seek_half_a_turn_transfer_and_overhead() {
    let d = djna();
    let mut w = World::new(&Topology::separate(d.clone(), 1));
    let mut rng = Rng(5);
    let cyls = u64::from(d.place(d.sectors() - 1).cylinder) + 1;
    let (mut t, n) = (0u64, 4000);
    let mut transfer = 0.0;
    for _ in 0..n {
        // A uniformly drawn cylinder, head and sector: the draw the average seek is for.
        let c = rng.next() % cyls;
        let lba = (c as f64 / cyls as f64 * d.sectors() as f64) as u64;
        let p = d.place(lba.min(d.sectors() - 16));
        let lba = p.track_lba + rng.next() % u64::from(p.spt - 8);
        transfer += 8.0 * d.sector_ns(&d.place(lba));
        t = w.submit(0, Op::Read, lba * SECTOR, 4096, t);
    }
    let mean = t as f64 / f64::from(n);
    // The last sector also crosses the interface (66 MB/s) once off the platter.
    let hand = 9.0e6 + d.revolution_ns() / 2.0 + transfer / f64::from(n) + 0.5e6 + 512.0 / 0.066;
    assert!(
        (mean / hand - 1.0).abs() < 0.02,
        "mean {mean} ns, by hand {hand} ns"
    );
}

#[test]
fn an_outer_zone_sequential_read_runs_at_the_zone_rate() {
    let d = djna();
    let mut w = World::new(&Topology::separate(d.clone(), 1));
    // 200 MiB from the start, 128 KiB at a time at QD1: well inside the first zone.
    let (mut t, len) = (0u64, 128 << 10);
    let total = 200u64 << 20;
    let mut off = 0;
    let mut t_first = 0;
    while off < total {
        t = w.submit(0, Op::Read, off, len, t);
        if off == 0 {
            t_first = t;
        }
        off += len;
    }
    let rate = (total - len) as f64 / (t - t_first) as f64;
    // By hand: a cylinder of 6 tracks of 277 sectors passes in 6 revolutions plus 5 head
    // skews and one cylinder skew (each the switch time rounded up to whole sectors).
    let st = d.revolution_ns() / 277.0;
    let (hs, cs) = ((1.0e6 / st).floor() + 1.0, (1.0e6 / st).floor() + 1.0);
    let hand = 6.0 * 277.0 * 512.0 / ((6.0 * 277.0 + 5.0 * hs + cs) * st);
    assert!((d.zone_rate(0) / hand - 1.0).abs() < 1e-9);
    assert!(
        (rate / hand - 1.0).abs() < 0.01,
        "{rate} B/ns against {hand}"
    );
}

#[test]
fn a_host_slower_than_the_platter_loses_a_revolution_per_track() {
    // One track per command, starting on a track; the host's 1.5 ms per command is longer
    // than the head skew (34 sectors, 1.02 ms) and shorter than a revolution.
    let period = |segment_kib: u64, overhead_us: f64| {
        let d = spec_with(|s| {
            s.segment_kib = segment_kib;
            s.overhead_us = overhead_us;
            s.max_transfer_sectors = 277;
        });
        let mut w = World::new(&Topology::separate(d.clone(), 1));
        let track = 277 * SECTOR;
        let mut t = w.submit(0, Op::Read, 0, track, 0);
        let t1 = t;
        // Five tracks of the first cylinder: head switches only.
        for k in 1..6 {
            t = w.submit(0, Op::Read, k * track, track, t);
        }
        (t - t1) as f64 / 5.0
    };
    let d = djna();
    let rev = d.revolution_ns();
    let keeping_up = period(512, 0.0);
    let falling_behind = period(0, 1500.0);
    let skew = ((1.0e6 / (rev / 277.0)).floor() + 1.0) * rev / 277.0;
    assert!(
        (keeping_up / (rev + skew) - 1.0).abs() < 0.001,
        "{keeping_up}"
    );
    assert!(
        ((falling_behind - keeping_up) / rev - 1.0).abs() < 0.001,
        "lost {} of a revolution",
        (falling_behind - keeping_up) / rev
    );
    // With a read-ahead segment the same slow host keeps the platter's pace.
    let buffered = period(512, 1500.0);
    assert!((buffered / keeping_up - 1.0).abs() < 0.01, "{buffered}");
}

/// Two drives read sequentially, 128 KiB at a time, each its own stream.
fn two_streams(topology: &Topology, mib: u64) -> f64 {
    let mut w = World::new(topology);
    let n = (mib << 20) / (128 << 10);
    let streams: Vec<Vec<_>> = (0..2)
        .map(|d| {
            (0..n)
                .map(|i| (d, Op::Read, i * (128 << 10), 128 << 10))
                .collect()
        })
        .collect();
    let ends = run_streams(&mut w, &streams);
    (2 * (mib << 20)) as f64 / *ends.iter().max().expect("two") as f64 * 1e3
}

/// RAID0 over drives 0 and 1 read a stripe at a time: both chunks at once, the next
/// stripe when both are in.
fn striped(topology: &Topology, chunk: u64, mib: u64) -> f64 {
    let mut w = World::new(topology);
    let mut t = 0;
    for i in 0..(mib << 20) / chunk {
        let a = w.submit(0, Op::Read, i * chunk, chunk, t);
        let b = w.submit(1, Op::Read, i * chunk, chunk, t);
        t = a.max(b);
    }
    (2 * (mib << 20)) as f64 / t as f64 * 1e3
}

fn topo(text: &str) -> Topology {
    Topology::parse(text, Path::new(".")).expect("valid topology")
}

#[test]
fn master_and_slave_on_a_slow_channel_halve_a_stripe_set() {
    // Seed 001: two 35 MB/s drives striped with 64 KiB chunks, the host reading a stripe at
    // a time; channels that carry 40 MB/s, less than two drives give.
    let separate = striped(
        &topo(
            "[[controller]]\n[[controller.channel]]\nmb_s = 40\ndrives = [\"ata100-7200\"]\n\
             [[controller.channel]]\nmb_s = 40\ndrives = [\"ata100-7200\"]\n",
        ),
        64 << 10,
        64,
    );
    let shared = striped(
        &topo(
            "[[controller]]\n[[controller.channel]]\nmb_s = 40\noverlap = false\n\
             drives = [\"ata100-7200\", \"ata100-7200\"]\n",
        ),
        64 << 10,
        64,
    );
    let a = load_model("ata100-7200", Path::new(".")).expect("built in");
    // Apart, each drive streams its zone rate.
    assert!(
        (separate / (2.0 * a.zone_rate(0) * 1e3) - 1.0).abs() < 0.02,
        "{separate}"
    );
    // Together, each falls behind its platter and waits for it to come round.
    assert!(
        shared <= 0.5 * separate,
        "shared {shared} MB/s, separate {separate} MB/s"
    );
    // Independent streams on the one channel keep it busy instead: not a revolution lost
    // that the channel would not have lost anyway.
    let streams = two_streams(
        &topo(
            "[[controller]]\n[[controller.channel]]\nmb_s = 40\noverlap = false\n\
             drives = [\"ata100-7200\", \"ata100-7200\"]\n",
        ),
        64,
    );
    assert!(streams > shared, "{streams} against {shared}");
}

#[test]
fn drives_on_one_bus_share_its_rate() {
    let t = topo(
        "bus_mb_s = 40\n[[controller]]\n[[controller.channel]]\ndrives = [\"djna-371350\"]\n\
         [[controller.channel]]\ndrives = [\"djna-371350\"]\n[[controller]]\n\
         [[controller.channel]]\ndrives = [\"djna-371350\"]\n[[controller.channel]]\n\
         drives = [\"djna-371350\"]\n",
    );
    let mut w = World::new(&t);
    let n = (32u64 << 20) / (128 << 10);
    let streams: Vec<Vec<_>> = (0..4)
        .map(|d| {
            (0..n)
                .map(|i| (d, Op::Read, i * (128 << 10), 128 << 10))
                .collect()
        })
        .collect();
    let ends = run_streams(&mut w, &streams);
    let rate = (4 * (32u64 << 20)) as f64 / *ends.iter().max().expect("four") as f64 * 1e3;
    // Four drives of 17 MB/s want 68 MB/s; the bus carries 40.
    assert!((rate / 40.0 - 1.0).abs() < 0.05, "{rate} MB/s");
}

#[test]
fn the_same_requests_give_the_same_times() {
    let t = Topology::separate(djna(), 3);
    let mut rng = Rng(9);
    let reqs: Vec<(usize, Op, u64, u64)> = (0..2000)
        .map(|_| {
            let op = if rng.next().is_multiple_of(3) {
                Op::Write
            } else {
                Op::Read
            };
            let len = (1 + rng.next() % 512) * SECTOR;
            let off = rng.next() % (djna().sectors() - 1024) * SECTOR;
            ((rng.next() % 3) as usize, op, off, len)
        })
        .collect();
    let run = || {
        let mut w = World::new(&t);
        let mut now = 0;
        reqs.iter()
            .map(|&(d, op, off, len)| {
                let done = w.submit(d, op, off, len, now);
                assert!(done > now, "a request takes time");
                now += 100_000;
                done
            })
            .collect::<Vec<u64>>()
    };
    assert_eq!(run(), run());
}

#[test]
fn writes_reach_the_platter_before_they_complete() {
    let d = djna();
    let mut w = World::new(&Topology::separate(d.clone(), 1));
    // A 4 KiB write at the start: overhead, the data across the interface, then the wait
    // for the sector (the head is already on cylinder 0) and 8 sectors under the head.
    let done = w.submit(0, Op::Write, 0, 4096, 0) as f64;
    let min = 0.5e6 + 8.0 * d.revolution_ns() / 277.0;
    assert!(
        done >= min && done <= min + d.revolution_ns() + 1e5,
        "{done}"
    );
    // A write cache completes it once the data is in the drive.
    let cached = spec_with(|s| s.write_cache = true);
    let mut w = World::new(&Topology::separate(cached, 1));
    let done = w.submit(0, Op::Write, 0, 4096, 0) as f64;
    assert!((done - (0.5e6 + 4096.0 / 0.066)).abs() < 2.0, "{done}");
}

#[test]
fn bad_models_and_topologies_are_refused_with_reasons() {
    let base = djna().spec().clone();
    let refuse = |f: &dyn Fn(&mut DriveSpec), want: &str| {
        let mut s = base.clone();
        f(&mut s);
        let e = Drive::new(s).expect_err(want);
        assert!(e.contains(want), "{e:?} should say {want:?}");
    };
    refuse(&|s| s.rpm = 0.0, "rpm");
    refuse(&|s| s.rpm = f64::NAN, "rpm");
    refuse(&|s| s.heads = 0, "heads");
    refuse(&|s| s.zones.clear(), "zones");
    refuse(&|s| s.zones[0].sectors_per_track = 0, "zone");
    refuse(&|s| s.seek_full_ms = 2.0, "seeks must grow");
    refuse(&|s| s.seek_average_ms = 15.0, "no rising seek curve");
    refuse(&|s| s.max_transfer_sectors = 0, "max_transfer_sectors");
    refuse(&|s| s.interface_mb_s = -1.0, "interface_mb_s");
    assert!(parse_model("rpm = 1").is_err());
    assert!(parse_model("nonsense").is_err());
    assert!(load_model("djna", Path::new("."))
        .expect_err("unknown")
        .contains("built in are"));
    assert!(load_model("missing.toml", Path::new("/nonexistent")).is_err());
    for (text, want) in [
        ("bus_mb_s = 0\n[[controller]]\n[[controller.channel]]\ndrives=[\"djna-371350\"]", "bus_mb_s"),
        ("[[controller]]\nchannel = []", "without channels"),
        ("[[controller]]\n[[controller.channel]]\ndrives = []", "without drives"),
        (
            "[[controller]]\n[[controller.channel]]\noverlap = false\ndrives = [\"djna-371350\",\"djna-371350\",\"djna-371350\"]",
            "at most two",
        ),
        ("[[controller]]\n[[controller.channel]]\ndrives = [\"nope\"]", "no drive model"),
        ("bus = 1", "unknown field"),
    ] {
        let e = Topology::parse(text, Path::new(".")).expect_err(want);
        assert!(e.contains(want), "{e:?} should say {want:?}");
    }
}

mod calendar {
    use crate::world::Calendar;
    use proptest::prelude::*;

    proptest! {
        /// Whatever is booked where `fit` says, bookings never overlap, and `fit` gives the
        /// earliest free start: one nanosecond earlier would overlap a booking.
        #[test]
        fn fits_are_free_and_earliest(reqs in proptest::collection::vec((0u32..1000, 1u32..100), 1..60)) {
            let mut c = Calendar::default();
            let mut booked: Vec<(f64, f64)> = Vec::new();
            for (t, len) in reqs {
                let (t, len) = (f64::from(t), f64::from(len));
                let s = c.fit(t, len);
                prop_assert!(s >= t);
                let overlaps = |a: f64| booked.iter().any(|&(b, e)| a < e && b < a + len);
                prop_assert!(!overlaps(s), "fit {s}+{len} overlaps {booked:?}");
                if s > t {
                    prop_assert!(overlaps(s - 1.0), "fit {s} is not the earliest for {t}");
                }
                c.book(s, s + len);
                booked.push((s, s + len));
            }
            c.prune(500.0);
            let s = c.fit(500.0, 1.0);
            prop_assert!(!booked.iter().any(|&(b, e)| s < e && b < s + 1.0));
        }
    }
}

#[test]
fn every_zone_streams_at_its_rate() {
    // Sequential 128 KiB reads at QD1 in the middle of each zone of both built-in models:
    // no revolution lost at a track or cylinder switch, whatever the track's length.
    for name in ["djna-371350", "ata100-7200"] {
        let d = load_model(name, Path::new(".")).unwrap();
        let zones = d.spec().zones.len();
        let per_cyl: Vec<u64> = d
            .spec()
            .zones
            .iter()
            .map(|z| {
                u64::from(z.cylinders) * u64::from(d.spec().heads) * u64::from(z.sectors_per_track)
            })
            .collect();
        let mut first = 0;
        for (zi, &n) in per_cyl.iter().enumerate().take(zones) {
            let start = (first + n / 2) / 256 * 256 * SECTOR;
            first += n;
            let mut w = World::new(&Topology::separate(d.clone(), 1));
            let mut t = w.submit(0, Op::Read, start, 128 << 10, 0);
            let t0 = t;
            for i in 1..100 {
                t = w.submit(0, Op::Read, start + i * (128 << 10), 128 << 10, t);
            }
            let rate = (99 * (128 << 10)) as f64 / (t - t0) as f64;
            let want = d.zone_rate(start / SECTOR);
            assert!(
                (rate / want - 1.0).abs() < 0.01,
                "{name} zone {zi}: {rate} against {want} bytes/ns"
            );
        }
    }
}
