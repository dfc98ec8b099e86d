//! `raidd serve` against clients that try to exhaust it, and with members that stop
//! answering: memory stays within the configured budget (plus the fixed overhead of the
//! per-thread buffer pools), stalled clients are closed by their time limits, a flood of
//! connections is refused and then forgotten, a stop with writes in flight leaves the array
//! marked unclean (and the resync after it loses nothing), a panic ends the daemon at once,
//! and a hung member is failed within its timeout while fio's verified writes go on.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::daemon::{array_config, create_array, must, run_tool, tool, Daemon};
use common::fuse::FuseImages;
use common::iscsi_raw::Raw;
use common::nbd_raw::{self, closed, handshake_to_transmission};
use common::sectors::{pattern_file, verify_file};
use common::{args_with, raidd, scratch, MIB};
use raidd_engine::pattern;

const SEED: u64 = 0x4057_11e5;
/// What raidd holds besides the buffer budget: each worker thread's pool of freed buffers
/// (at most 128 MiB each, two workers here), code, stacks and the like.
const OVERHEAD: u64 = 2 * 128 * MIB + 96 * MIB;

/// A RAID5 over four 24 MiB images, with `extra` config lines, two workers, no registered
/// buffer region (its 64 MiB would only widen the bounds).
fn raid5(dir: &Path, top: &str, nbd: &str) -> (Daemon, Vec<PathBuf>) {
    let members = create_array(dir, "raid5", 4, &[]);
    let cfg = format!(
        "threads = 2\nregistered_buffers = \"0\"\n{top}\n{}\n[nbd]\nlisten = \"127.0.0.1:0\"\n{nbd}\n",
        array_config("raid5", &members)
    );
    (Daemon::start(dir, &cfg), members)
}

fn used(d: &Daemon) -> u64 {
    d.status()["buffer_memory_used_bytes"].as_u64().unwrap()
}

/// Polls `cond` every 50 ms until it holds; fails the test after `limit`.
fn poll_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Polls `cond` every 50 ms until it holds; fails the test after `limit`, with the
/// daemon's log.
fn wait_for(d: &Daemon, what: &str, limit: Duration, mut cond: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < limit,
            "{what}: not within {limit:?}\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    start.elapsed()
}

/// The largest RSS seen over `span` while `good` runs, and `good`'s result.
fn peak_rss_while<T>(d: &Daemon, span: Duration, good: JoinHandle<T>) -> (u64, T) {
    let start = Instant::now();
    let mut peak = 0;
    while start.elapsed() < span || !good.is_finished() {
        peak = peak.max(d.rss());
        std::thread::sleep(Duration::from_millis(20));
    }
    (peak, good.join().unwrap())
}

/// A client of the export that behaves: writes the pattern and reads it back.
fn good_client(d: &Daemon, dir: &Path, generation: u64) -> JoinHandle<()> {
    let uri = d.uri("raid5");
    let size = d.export_size("raid5");
    let input = pattern_file(dir, size, generation, SEED);
    let out = dir.join(format!("good-{generation}.bin"));
    std::thread::spawn(move || {
        must(tool("nbdcopy").args([input.to_str().unwrap(), &uri]));
        must(tool("nbdcopy").args([&uri, out.to_str().unwrap()]));
        verify_file(&out, generation, SEED, "the good client");
    })
}

/// Three clients each ask for 24 reads of 32 MiB and read no reply: each connection holds
/// its 64 MiB, the server as a whole stays within its budget, a well-behaved client is
/// served meanwhile, and the send timeout closes the three.
#[test]
fn nbd_clients_that_read_no_replies_are_held_to_the_budget() {
    let dir = scratch();
    let (d, _) = raid5(
        dir.path(),
        "buffer_memory = \"256M\"\nsend_timeout = \"8s\"",
        "connection_memory = \"64M\"",
    );
    let base = d.rss();
    let mut hostile = Vec::new();
    for c in 0..3u64 {
        let mut s = handshake_to_transmission(d.addr, "raid5");
        for i in 0..24u64 {
            let h = nbd_raw::request(nbd_raw::READ, c * 100 + i, (i % 2) * 32 * MIB, 32 << 20);
            s.write_all(&h).unwrap();
        }
        hostile.push(s);
    }
    wait_for(
        &d,
        "the three connections' accounts fill",
        Duration::from_secs(10),
        || used(&d) >= 3 * 64 * MIB,
    );
    let good = good_client(&d, dir.path(), 1);
    let (peak, ()) = peak_rss_while(&d, Duration::from_secs(2), good);
    let st = d.status();
    assert!(
        st["buffer_memory_used_bytes"].as_u64().unwrap() <= 256 * MIB,
        "{st}"
    );
    assert!(
        peak - base <= 256 * MIB + OVERHEAD,
        "RSS grew by {} MiB (budget 256 MiB):\n{}",
        (peak - base) >> 20,
        d.log()
    );
    // Still reading nothing (reading would let the replies go): the server closes them.
    wait_for(
        &d,
        "the send timeout closes the three",
        Duration::from_secs(30),
        || d.status()["connections"].as_u64() == Some(0),
    );
    wait_for(&d, "the budget comes back", Duration::from_secs(10), || {
        used(&d) == 0
    });
    drop(hostile);
    let log = d.stop();
    assert!(log.contains("send_timeout"), "{log}");
}

/// Thirty clients each send the header of a 32 MiB write and 4 KiB of its payload, then
/// nothing: each holds of the budget only the first piece (1 MiB) its bytes opened, each
/// stalled request is closed by the request timeout, nothing of them reaches the array,
/// sockets and budget come back, and a well-behaved client is served meanwhile.
#[test]
fn nbd_payloads_that_stall_are_closed_by_the_request_timeout() {
    let dir = scratch();
    let (d, members) = raid5(
        dir.path(),
        "buffer_memory = \"256M\"\nrequest_timeout = \"2s\"",
        "connection_memory = \"64M\"",
    );
    // The array holds generation 1 everywhere before the stalled writes.
    let size = d.export_size("raid5");
    d.write_pattern("raid5", dir.path(), size, 1, SEED);
    let (base_rss, base_fds) = (d.rss(), d.fds());
    let mut hostile = Vec::new();
    for c in 0..30u64 {
        let mut s = handshake_to_transmission(d.addr, "raid5");
        s.write_all(&nbd_raw::request(nbd_raw::WRITE, c, 0, 32 << 20))
            .unwrap();
        s.write_all(&[0xee; 4096]).unwrap();
        hostile.push(s);
    }
    wait_for(
        &d,
        "stalled payloads hold a piece each",
        Duration::from_secs(10),
        || used(&d) >= 30 * MIB,
    );
    assert_eq!(used(&d), 30 * MIB, "the budget follows the bytes sent");
    // nbdinfo needs no buffer: answered at once.
    must(tool("nbdinfo").arg(d.uri("raid5")));
    let good = good_client(&d, dir.path(), 2);
    let (peak, ()) = peak_rss_while(&d, Duration::from_secs(1), good);
    assert!(
        peak - base_rss <= 256 * MIB + OVERHEAD,
        "RSS grew by {} MiB (budget 256 MiB)",
        (peak - base_rss) >> 20
    );
    let start = Instant::now();
    for mut s in hostile {
        s.set_read_timeout(Some(Duration::from_secs(40))).unwrap();
        assert!(closed(&mut s), "a stalled payload is closed");
    }
    // 30 stalled writes, all at once, 2 s each.
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "{:?}",
        start.elapsed()
    );
    wait_for(
        &d,
        "budget and sockets come back",
        Duration::from_secs(10),
        || used(&d) == 0 && d.fds() <= base_fds + 2,
    );
    let log = d.stop();
    assert!(log.contains("request_timeout"), "{log}");
    // The last good write (generation 2) is all there: no stalled byte was written.
    common::sectors::offline("verify", &members, size, 2, SEED);
}

/// A flood of connections under a low descriptor limit: raidd lowers max_connections to
/// what the limit leaves room for, refuses the rest with a log line, answers its control
/// socket throughout, and once the flood has gone serves again with its descriptors back.
#[test]
fn a_connection_flood_is_refused_and_then_forgotten() {
    let dir = scratch();
    let members = create_array(dir.path(), "raid5", 4, &[]);
    let cfg = format!(
        "threads = 2\n{}\n[nbd]\nlisten = \"127.0.0.1:0\"\n",
        array_config("raid5", &members)
    );
    let mut d = Daemon::start_with_nofile(dir.path(), &cfg, 200);
    let max = d.status()["max_connections"].as_u64().unwrap();
    assert!(
        max > 50 && max < 200,
        "max_connections {max} fits 200 descriptors"
    );
    let base_fds = d.fds();
    let mut flood = Vec::new();
    for _ in 0..300 {
        if let Ok(s) = TcpStream::connect(d.addr) {
            flood.push(s);
        }
    }
    wait_for(&d, "every place taken", Duration::from_secs(10), || {
        d.status()["connections"].as_u64() == Some(max)
    });
    // The control socket answers during the flood; data connections beyond the limit are
    // refused (closed at once).
    let st = d.status();
    assert_eq!(st["connections"].as_u64(), Some(max), "{st}");
    let mut extra = TcpStream::connect(d.addr).unwrap();
    extra
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    assert!(
        closed(&mut extra),
        "a connection past max_connections is closed"
    );
    drop(flood);
    wait_for(
        &d,
        "the flood's places come back",
        Duration::from_secs(10),
        || d.status()["connections"].as_u64() == Some(0),
    );
    wait_for(
        &d,
        "the flood's descriptors come back",
        Duration::from_secs(10),
        || d.fds() <= base_fds + 2,
    );
    must(tool("nbdinfo").arg(d.uri("raid5")));
    assert!(d.alive());
    let log = d.stop();
    assert!(log.contains("max_connections"), "{log}");
}

/// Twenty connections each queue 16 WRITE_ZEROES of the whole array: memory stays bounded
/// (each holds one 1 MiB piece at a time, counted against the budget), and a stop ends them
/// at their next piece, well before the drain limit, with the array closed cleanly.
#[test]
fn write_zeroes_floods_are_bounded_and_stop_at_a_stop() {
    let dir = scratch();
    let (d, _) = raid5(dir.path(), "buffer_memory = \"256M\"", "");
    let base = d.rss();
    let size = d.export_size("raid5") as u32;
    let mut clients = Vec::new();
    for c in 0..20u64 {
        let mut s = handshake_to_transmission(d.addr, "raid5");
        for i in 0..16 {
            s.write_all(&nbd_raw::request(
                nbd_raw::WRITE_ZEROES,
                c * 100 + i,
                0,
                size,
            ))
            .unwrap();
        }
        clients.push(s);
    }
    let mut peak = 0;
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(3) {
        peak = peak.max(d.rss());
        assert!(used(&d) <= 256 * MIB);
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        peak - base <= 256 * MIB + OVERHEAD,
        "RSS grew by {} MiB",
        (peak - base) >> 20
    );
    let stopping = Instant::now();
    let log = d.stop();
    let took = stopping.elapsed();
    assert!(
        took < Duration::from_secs(20),
        "the stop took {took:?}:\n{log}"
    );
    assert!(log.contains("array closed cleanly"), "{log}");
    drop(clients);
}

/// iSCSI: an initiator that sends 30 READ(16) of 32 MiB and reads no response holds at most
/// its connection's memory; a well-behaved initiator is served meanwhile; the send timeout
/// closes the first. MaxCmdSN moves when a command ends, not when it arrives.
#[test]
fn iscsi_initiators_that_read_no_responses_are_held_to_the_budget() {
    let dir = scratch();
    let members = create_array(dir.path(), "raid5", 4, &[]);
    let cfg = format!(
        "threads = 2\nregistered_buffers = \"0\"\nbuffer_memory = \"256M\"\nsend_timeout = \"8s\"\n\
         [iscsi]\nlisten = \"127.0.0.1:0\"\nconnection_memory = \"64M\"\n{}\n[nbd]\nlisten = \"127.0.0.1:0\"\n",
        array_config("raid5", &members)
    );
    let d = Daemon::start(dir.path(), &cfg);
    let addr = d.iscsi.unwrap();
    let target = "iqn.2026-11.org.raidd:raid5";
    let initiator = "iqn.2026-11.org.raidd:hostile";

    // MaxCmdSN: the window is 128 from the login's CmdSN; a command that has arrived and
    // ended moves it on by one.
    let mut calm = Raw::login(addr, initiator, target, false);
    let tur = [0u8; 6];
    let (status, _, _) = calm.command_in(&tur, 0);
    assert_eq!(status, 0);
    let max_after = calm.ping_seq().1;
    assert_eq!(max_after, 128, "one command ended: the window moved by one");
    drop(calm);

    let base = d.rss();
    let mut r = Raw::login(addr, initiator, target, false);
    for i in 0..30u32 {
        let mut cdb = [0u8; 16];
        cdb[0] = 0x88; // READ(16)
        cdb[2..10].copy_from_slice(&u64::from(i % 2 * 65536).to_be_bytes());
        cdb[10..14].copy_from_slice(&65536u32.to_be_bytes()); // 32 MiB of 512-byte blocks
        r.command(&cdb, 32 << 20, i);
    }
    wait_for(
        &d,
        "the connection's account fills",
        Duration::from_secs(10),
        || used(&d) >= 32 * MIB,
    );
    let url = d.iscsi_url("", target, 0);
    let good = std::thread::spawn(move || {
        let (ok, out, err) =
            run_tool(tool("iscsi-inq").args(["-i", "iqn.2026-11.org.raidd:calm", &url]));
        assert!(ok, "{out}{err}");
    });
    let (peak, ()) = peak_rss_while(&d, Duration::from_secs(2), good);
    assert!(used(&d) <= 256 * MIB);
    assert!(
        peak - base <= 64 * MIB + OVERHEAD,
        "RSS grew by {} MiB (connection memory 64 MiB)",
        (peak - base) >> 20
    );
    // Still reading nothing: the server closes it.
    wait_for(
        &d,
        "the send timeout closes it",
        Duration::from_secs(30),
        || d.status()["connections"].as_u64() == Some(0),
    );
    wait_for(&d, "the budget comes back", Duration::from_secs(10), || {
        used(&d) == 0
    });
    drop(r);
    let log = d.stop();
    assert!(log.contains("send_timeout"), "{log}");
}

/// A panic in a worker ends the daemon at once (no half-alive server dropping some
/// clients), and leaves the written array marked unclean: the next start resyncs it.
#[test]
fn a_panic_ends_the_daemon_and_leaves_the_array_unclean() {
    let dir = scratch();
    let members = create_array(dir.path(), "raid5", 4, &[]);
    let cfg = format!(
        "threads = 2\n{}safe_mode_delay = \"off\"\n[nbd]\nlisten = \"127.0.0.1:0\"\n",
        array_config("raid5", &members)
    );
    let mut d = Daemon::start_with_env(dir.path(), &cfg, &[("RAIDD_DEBUG_PANIC", "nbd-cache")]);
    d.write_pattern("raid5", dir.path(), 4 * MIB, 1, SEED);
    let script = format!(
        "h.connect_uri({:?})\ntry:\n    h.cache(4096, 0)\nexcept Exception:\n    pass\n",
        d.uri("raid5")
    );
    let _ = run_tool(tool("nbdsh").args(["-c", &script]));
    poll_until("the daemon ends", Duration::from_secs(10), || !d.alive());
    let log = d.log();
    assert!(log.contains("RAIDD_DEBUG_PANIC"), "{log}");
    assert!(!log.contains("array closed cleanly array="), "{log}");
    let ex = raidd(&args_with(&["examine", "--json"], &members[..1])).ok();
    let j: serde_json::Value = serde_json::from_slice(&ex.stdout).unwrap();
    assert_eq!(j["members"][0]["superblock"]["state"], "active", "{j}");
    let d = Daemon::start(dir.path(), &cfg);
    assert!(d.log().contains("not shut down cleanly"), "{}", d.log());
    d.stop();
}

/// Every sector of `buf` (array sector `first` onwards) carries its address and a good
/// checksum, of generation `old` or `new`.
fn check_either(buf: &[u8], first: u64, old: u64, new: u64, what: &str) {
    let bad: Vec<_> = pattern::verify(buf, first, SEED, |_| new)
        .into_iter()
        .filter(|m| {
            m.problem
                != pattern::Problem::Stale {
                    found_generation: old,
                }
        })
        .collect();
    assert!(
        bad.is_empty(),
        "{what}: {} bad sectors, first {}",
        bad.len(),
        bad[0]
    );
}

/// Member 3 behind FUSE, so the test can hold its writes up or hang it.
fn raid5_on_fuse(dir: &Path, slow_ms: u64) -> (FuseImages, Vec<PathBuf>) {
    let fuse = FuseImages::start(dir, &["m3.img"], 24 * MIB, slow_ms);
    let mut members = common::images(dir, "m", 3);
    members.push(fuse.path("m3.img"));
    raidd(&args_with(
        &[
            "create", "--level", "raid5", "--name", "raid5", "--size", "24M",
        ],
        &members,
    ))
    .ok();
    (fuse, members)
}

/// A stop whose write outlives the drain (a member holds it up): the array is closed
/// without being marked clean, the next start resyncs it, and then every stripe read
/// degraded (without each of two members in turn) returns the data.
#[test]
fn a_stop_with_writes_in_flight_leaves_the_array_unclean_and_the_resync_loses_nothing() {
    let dir = scratch();
    let (fuse, members) = raid5_on_fuse(dir.path(), 4000);
    let cfg = |members: &[PathBuf]| {
        format!(
            "threads = 2\ndrain_timeout = \"1s\"\nmember_timeout = \"60s\"\n{}\
             safe_mode_delay = \"off\"\n[nbd]\nlisten = \"127.0.0.1:0\"\n",
            array_config("raid5", members)
        )
    };
    let d = Daemon::start(dir.path(), &cfg(&members));
    let size = d.export_size("raid5");
    d.write_pattern("raid5", dir.path(), size, 1, SEED);
    // One 64 KiB write of generation 2 at the start: stripe 0, whose parity is on the
    // slow member (left-symmetric over four).
    fuse.slow(true);
    let mut data = vec![0u8; 64 << 10];
    pattern::fill(&mut data, 0, 2, SEED);
    let mut s = handshake_to_transmission(d.addr, "raid5");
    s.write_all(&nbd_raw::request(nbd_raw::WRITE, 1, 0, data.len() as u32))
        .unwrap();
    s.write_all(&data).unwrap();
    wait_for(
        &d,
        "the write held up on the slow member",
        Duration::from_secs(20),
        || fuse.slow_writes() > 0,
    );
    let (ok, log) = d.stop_status();
    assert!(!ok, "not every array closed cleanly:\n{log}");
    assert!(log.contains("left marked unclean"), "{log}");
    assert!(!log.contains("array closed cleanly array="), "{log}");
    let ex = raidd(&args_with(&["examine", "--json"], &members[..1])).ok();
    let j: serde_json::Value = serde_json::from_slice(&ex.stdout).unwrap();
    assert_eq!(j["members"][0]["superblock"]["state"], "active", "{j}");
    drop(s);
    fuse.slow(false);
    poll_until("the held write finishes", Duration::from_secs(30), || {
        fuse.slow_writes() == 0
    });
    // The next start resyncs.
    let d = Daemon::start(dir.path(), &cfg(&members));
    assert!(d.log().contains("not shut down cleanly"), "{}", d.log());
    wait_for(&d, "the resync", Duration::from_secs(60), || {
        let st = d.status();
        let a = &st["arrays"][0]["status"];
        a["sync"].is_null() && a["needs_resync"] == false
    });
    d.stop();
    // Every stripe, degraded without member 0 and then without the slow one.
    for gone in [0, 3] {
        let left: Vec<PathBuf> = members
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != gone)
            .map(|(_, m)| m.clone())
            .collect();
        let d = Daemon::start(dir.path(), &cfg(&left));
        let out = dir.path().join(format!("degraded-{gone}.bin"));
        must(tool("nbdcopy").args([&d.uri("raid5"), out.to_str().unwrap()]));
        check_either(
            &std::fs::read(&out).unwrap(),
            0,
            1,
            2,
            &format!("without member {gone}"),
        );
        d.stop();
    }
    drop(fuse);
}

/// A member with unreadable sectors (latent sector errors, behind FUSE) in a served RAID5:
/// a client reading the whole export gets every sector right, the member keeps its slot,
/// the blocks a read met are rewritten from redundancy (FUSE sees the writes that clear
/// them), a check rewrites those no read met (parity), and status and the log say what was
/// corrected.
#[test]
fn unreadable_sectors_are_corrected_from_redundancy_while_serving() {
    let dir = scratch();
    let (fuse, members) = raid5_on_fuse(dir.path(), 0);
    let cfg = format!(
        "threads = 2\n{}[nbd]\nlisten = \"127.0.0.1:0\"\n",
        array_config("raid5", &members)
    );
    let ex = raidd(&args_with(&["examine", "--json"], &members[3..])).ok();
    let j: serde_json::Value = serde_json::from_slice(&ex.stdout).unwrap();
    let base = j["members"][0]["superblock"]["data_offset_sectors"]
        .as_u64()
        .unwrap()
        * 512;
    let d = Daemon::start(dir.path(), &cfg);
    let size = d.export_size("raid5");
    d.write_pattern("raid5", dir.path(), size, 1, SEED);
    // 4 KiB every 1.5 MiB of the member: chunks of data and of parity (512 KiB chunks,
    // parity on the last member every fourth stripe).
    let bad: Vec<std::ops::Range<u64>> = (0..8)
        .map(|k| base + k * 3 * MIB / 2 + 4096 * (k % 3))
        .map(|at| at..at + 4096)
        .collect();
    fuse.set_bad("m3.img", &bad);
    let out = dir.path().join("all.bin");
    must(tool("nbdcopy").args([&d.uri("raid5"), out.to_str().unwrap()]));
    verify_file(&out, 1, SEED, "read with unreadable sectors");
    let left = fuse.bad("m3.img");
    assert!(!left.is_empty() && left.len() < bad.len(), "{left:?}");
    let ctl = d.control.display().to_string();
    let check = raidd(&["check", "raid5", "--wait", "--control", &ctl]).ok();
    assert!(
        check.text().contains("0 mismatched sectors"),
        "{}",
        check.text()
    );
    assert!(fuse.bad("m3.img").is_empty(), "{:?}", fuse.bad("m3.img"));
    let st = d.status();
    let slot = &st["arrays"][0]["status"]["slots"][3];
    assert_eq!(slot["state"], "insync", "{st}");
    let io = &slot["io"];
    let corrected = io["corrected_errors"].as_u64().unwrap();
    assert!(corrected >= bad.len() as u64, "{io}");
    assert!(
        io["repaired_bytes"].as_u64().unwrap() >= 4096 * bad.len() as u64,
        "{io}"
    );
    assert!(io["read_errors"].as_u64().unwrap() > corrected, "{io}");
    let others = &st["arrays"][0]["status"]["slots"];
    for k in 0..3 {
        assert_eq!(others[k]["io"]["read_errors"], 0, "{st}");
    }
    let detail = raidd(&["detail", "raid5", "--control", &ctl]).ok();
    assert!(detail.text().contains("corrected"), "{}", detail.text());
    let status = raidd(&["status", "--control", &ctl]).ok();
    let line = format!(
        "m3.img[3]: {} read, 0 write, 0 checksum; {corrected} corrected",
        io["read_errors"]
    );
    assert!(status.text().contains(&line), "{line}\n{}", status.text());
    let log = d.stop();
    assert!(log.contains("read error corrected"), "{log}");
    assert!(!log.contains("member failed"), "{log}");
    let out2 = dir.path().join("again.bin");
    let d = Daemon::start(dir.path(), &cfg);
    must(tool("nbdcopy").args([&d.uri("raid5"), out2.to_str().unwrap()]));
    verify_file(&out2, 1, SEED, "read after the corrections");
    d.stop();
    drop(fuse);
}

/// Silent corruption of member files, made by a corruptor outside raidd while fio writes
/// and verifies through NBD (bits flipped, a sector zeroed, two blocks swapped), on arrays
/// with checksums: fio sees no error, every read of the rest returns the pattern, a check
/// finds what reads did not (parity), each member counts exactly its corrupted blocks, and
/// the member files hold the right bytes again. RAID5, RAID6 and RAID1.
#[test]
fn silent_corruption_is_healed_from_redundancy_while_serving() {
    for (level, n, data) in [("raid5", 4, 3), ("raid6", 5, 3), ("raid1", 3, 1)] {
        let dir = scratch();
        let members = create_array(dir.path(), level, n, &["--checksums", "crc32c"]);
        let ex = raidd(&args_with(&["examine", "--json"], &members[..1])).ok();
        let j: serde_json::Value = serde_json::from_slice(&ex.stdout).unwrap();
        let base = j["members"][0]["superblock"]["data_offset_sectors"]
            .as_u64()
            .unwrap()
            * 512;
        let cfg = format!(
            "threads = 2\n{}[nbd]\nlisten = \"127.0.0.1:0\"\n",
            array_config(level, &members)
        );
        let d = Daemon::start(dir.path(), &cfg);
        let size = d.export_size(level);
        d.write_pattern(level, dir.path(), size, 1, SEED);
        // fio keeps to the array's first half: members' data up to half their component.
        let half = size / 2;
        let fio = tool("fio")
            .current_dir(dir.path())
            .args([
                "--name=load",
                "--ioengine=nbd",
                &format!("--uri={}", d.uri(level)),
            ])
            .args(["--rw=randwrite", "--bs=4k", "--iodepth=8", "--rate=8m"])
            .arg(format!("--size={half}"))
            .args(["--randrepeat=1", "--verify=crc32c", "--verify_fatal=1"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        wait_for(&d, "fio writing", Duration::from_secs(20), || {
            d.status()["arrays"][0]["status"]["counters"]["writes"]
                .as_u64()
                .unwrap_or(0)
                > 100
        });
        // Member blocks in the second half of the component, slot 0's and slot 1's in
        // different stripe rows.
        let component = size / data;
        let block = |fraction: f64, k: u64| {
            base + ((component as f64 * fraction) as u64 / 4096 + k * 37) * 4096
        };
        let mut saved = Vec::new();
        for (role, at) in [(0usize, 0.6), (1, 0.8)] {
            let path = &members[role];
            let blocks: Vec<u64> = (0..4).map(|k| block(at, k)).collect();
            for &b in &blocks {
                saved.push((role, b, read_at(path, b, 4096)));
            }
            let mut bytes = read_at(path, blocks[0], 4096);
            bytes[700] ^= 0x08; // a flipped bit
            write_at(path, blocks[0], &bytes);
            write_at(path, blocks[1] + 1024, &[0u8; 512]); // a zeroed sector
            let (a, b) = (
                read_at(path, blocks[2], 4096),
                read_at(path, blocks[3], 4096),
            );
            write_at(path, blocks[2], &b); // two blocks swapped
            write_at(path, blocks[3], &a);
        }
        let out = fio.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("err= 0"),
            "{level}: fio: {text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let all = dir.path().join("all.bin");
        must(tool("nbdcopy").args([&d.uri(level), all.to_str().unwrap()]));
        let bytes = std::fs::read(&all).unwrap();
        let bad = pattern::verify(&bytes[half as usize..], half / 512, SEED, |_| 1);
        assert!(
            bad.is_empty(),
            "{level}: {} bad sectors, first {}",
            bad.len(),
            bad[0]
        );
        let ctl = d.control.display().to_string();
        let check = raidd(&["check", level, "--wait", "--control", &ctl]).ok();
        assert!(
            check.text().contains("0 mismatched sectors"),
            "{}",
            check.text()
        );
        let st = d.status();
        let slots = &st["arrays"][0]["status"]["slots"];
        for role in 0..n {
            let io = &slots[role]["io"];
            assert_eq!(slots[role]["state"], "insync", "{level}: {st}");
            let want = if role < 2 { 4 } else { 0 };
            assert_eq!(io["checksum_errors"], want, "{level} slot {role}: {io}");
            assert_eq!(io["read_errors"], 0, "{level} slot {role}: {io}");
        }
        for (role, b, before) in &saved {
            assert!(
                read_at(&members[*role], *b, 4096) == *before,
                "{level}: slot {role} at byte {b} holds the right bytes again"
            );
        }
        let status = raidd(&["status", "--control", &ctl]).ok();
        assert!(
            status.text().contains("0 read, 0 write, 4 checksum"),
            "{}",
            status.text()
        );
        assert_eq!(st["arrays"][0]["status"]["checksums"], "crc32c", "{st}");
        let detail = raidd(&["detail", level, "--control", &ctl]).ok();
        assert!(
            detail.text().contains("Checksums : crc32c")
                && detail
                    .text()
                    .contains("(errors: 0 read, 0 write, 4 checksum;"),
            "{}",
            detail.text()
        );
        let log = d.stop();
        assert!(log.contains("checksum mismatch"), "{log}");
        assert!(!log.contains("member failed"), "{log}");
    }
}

fn read_at(path: &Path, at: u64, len: usize) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let mut b = vec![0u8; len];
    std::fs::File::open(path)
        .unwrap()
        .read_exact_at(&mut b, at)
        .unwrap();
    b
}

fn write_at(path: &Path, at: u64, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(bytes, at).unwrap();
    f.sync_all().unwrap();
}

/// A member that stops answering under fio's verified random writes: it is failed within its
/// timeout, the pool spare rebuilds in its place, and fio finishes with every block
/// verified.
#[test]
fn a_hung_member_is_failed_within_its_timeout_under_load() {
    let dir = scratch();
    let (fuse, members) = raid5_on_fuse(dir.path(), 0);
    let spare = common::images(dir.path(), "spare", 1).remove(0);
    std::fs::File::create(&spare)
        .unwrap()
        .set_len(24 * MIB)
        .unwrap();
    let cfg = format!(
        "threads = 2\nmember_timeout = \"3s\"\n[sync]\nspeed_min = 1000000\nspeed_max = 1000000\n\
         [[spare]]\npath = {:?}\n{}[nbd]\nlisten = \"127.0.0.1:0\"\n",
        spare.display().to_string(),
        array_config("raid5", &members)
    );
    let d = Daemon::start(dir.path(), &cfg);
    let fio = tool("fio")
        .current_dir(dir.path())
        .args([
            "--name=load",
            "--ioengine=nbd",
            &format!("--uri={}", d.uri("raid5")),
        ])
        .args([
            "--rw=randwrite",
            "--bs=16k",
            "--iodepth=8",
            "--size=64m",
            "--rate=8m",
        ])
        .args(["--randrepeat=1", "--verify=crc32c", "--verify_fatal=1"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(&d, "fio writing", Duration::from_secs(20), || {
        d.status()["arrays"][0]["status"]["counters"]["writes"]
            .as_u64()
            .unwrap_or(0)
            > 100
    });
    fuse.hang();
    let hung = Instant::now();
    let failed_after = wait_for(
        &d,
        "the hung member failed",
        Duration::from_secs(30),
        || {
            let st = d.status();
            let slot = &st["arrays"][0]["status"]["slots"][3];
            slot["state"] != "insync" || slot["member"] != members[3].display().to_string()
        },
    );
    assert!(
        failed_after < Duration::from_secs(3 + 4),
        "failed {failed_after:?} after the hang (member_timeout 3 s)"
    );
    wait_for(&d, "the spare rebuilt", Duration::from_secs(90), || {
        let st = d.status();
        let a = &st["arrays"][0]["status"];
        a["sync"].is_null()
            && a["slots"][3]["member"] == spare.display().to_string()
            && a["slots"][3]["state"] == "insync"
    });
    let out = fio.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "fio: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("err= 0"), "{text}");
    assert!(hung.elapsed() > failed_after);
    // The filesystem's process goes first, so the I/O it never answered completes.
    drop(fuse);
    let log = d.stop();
    assert!(log.contains("no answer within"), "{log}");
}

/// A RAID5 over four 24 MiB images served over NBD with the default budgets.
fn default_raid5(dir: &Path) -> Daemon {
    let members = create_array(dir, "raid5", 4, &[]);
    let cfg = format!(
        "{}\n[nbd]\nlisten = \"127.0.0.1:0\"\n",
        array_config("raid5", &members)
    );
    Daemon::start(dir, &cfg)
}

/// `n` connections that have each sent the header of a 32 MiB write at offset 0.
fn write_headers(d: &Daemon, n: u64) -> Vec<TcpStream> {
    (0..n)
        .map(|c| {
            let mut s = handshake_to_transmission(d.addr, "raid5");
            s.write_all(&nbd_raw::request(nbd_raw::WRITE, c, 0, 32 << 20))
                .unwrap();
            s
        })
        .collect()
}

/// Fifty clients each send the header of a 32 MiB write and nothing of its payload: the
/// buffers waiting for those payloads are mapped pages that hold no memory until bytes
/// arrive (before, each was written through when allocated: 1.6 GiB of RSS for these fifty),
/// and the server's budget is taken only as a payload arrives, so the fifty hold none of it
/// (before, the first seven took all of a 256 MiB budget and every other client waited for
/// their request timeout). RSS stays under 256 MiB; a client sending data meanwhile, with
/// requests of every size up to 32 MiB, is served and its data reads back; one of the fifty
/// that then sends its payload is answered; RSS is back within 64 MiB of its start once they
/// are gone.
#[test]
fn nbd_headers_alone_hold_no_memory() {
    let dir = scratch();
    let members = create_array(dir.path(), "raid5", 4, &[]);
    let cfg = format!(
        "buffer_memory = \"256M\"\nrequest_timeout = \"600s\"\n{}\n[nbd]\nlisten = \"127.0.0.1:0\"\n",
        array_config("raid5", &members)
    );
    let d = Daemon::start(dir.path(), &cfg);
    let base = d.rss();
    let mut hostile = write_headers(&d, 50);
    wait_for(
        &d,
        "the stalled headers are taken in",
        Duration::from_secs(10),
        || {
            d.status()["arrays"][0]["exports"][0]["requests"]
                .as_u64()
                .unwrap()
                >= 50
        },
    );
    assert_eq!(used(&d), 0, "stalled headers hold none of the budget");
    let held = d.rss();
    assert!(
        held < 256 * MIB,
        "RSS {} MiB with 50 stalled 32 MiB headers (at start {} MiB)",
        held >> 20,
        base >> 20
    );
    // A client that sends its data: whole-stripe and odd-sized writes through nbdcopy, and
    // 32 MiB writes of its own (a reply in a minute, where the stalled ones would hold it
    // up for the ten-minute request timeout).
    let len = d.export_size("raid5");
    for request in ["65536", "262144", "1048576", "4194304"] {
        let input = pattern_file(dir.path(), len, 1, SEED);
        must(tool("nbdcopy").args([
            &format!("--request-size={request}"),
            input.to_str().unwrap(),
            &d.uri("raid5"),
        ]));
    }
    let mut good = handshake_to_transmission(d.addr, "raid5");
    good.set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut want = vec![0u8; len as usize];
    pattern::fill(&mut want, 0, 2, SEED);
    for (k, piece) in want.chunks(32 << 20).enumerate() {
        let offset = (k as u64) << 25;
        good.write_all(&nbd_raw::request(
            nbd_raw::WRITE,
            100 + k as u64,
            offset,
            piece.len() as u32,
        ))
        .unwrap();
        good.write_all(piece).unwrap();
        let mut reply = [0u8; 16];
        std::io::Read::read_exact(&mut good, &mut reply).unwrap();
        assert_eq!(reply[4..8], [0, 0, 0, 0], "the good client's write {k}");
    }
    drop(good);
    let out = dir.path().join("got");
    must(tool("nbdcopy").args([&d.uri("raid5"), out.to_str().unwrap()]));
    verify_file(
        &out,
        2,
        SEED,
        "the good client's writes beside fifty stalled ones",
    );
    let mut late = hostile.remove(0);
    late.write_all(&vec![0x5a; 32 << 20]).unwrap();
    let mut reply = [0u8; 16];
    std::io::Read::read_exact(&mut late, &mut reply).unwrap();
    assert_eq!(reply[4..8], [0, 0, 0, 0], "the late payload is written");
    drop(late);
    drop(hostile);
    wait_for(&d, "the budget comes back", Duration::from_secs(10), || {
        used(&d) == 0
    });
    wait_for(
        &d,
        "RSS back within 64 MiB of its start",
        Duration::from_secs(60),
        || d.rss() <= base + 64 * MIB,
    );
    d.stop();
}

/// Ten clients each write 32 MiB at once, then leave: the buffers they filled stay pooled
/// while requests come, and the workers give their idle pools back, so RSS returns to
/// within 64 MiB of its start within a minute (before, 128 MiB a worker stayed).
#[test]
fn memory_a_burst_of_large_writes_took_comes_back() {
    let dir = scratch();
    let d = default_raid5(dir.path());
    let base = d.rss();
    let mut clients = write_headers(&d, 10);
    for s in &mut clients {
        s.write_all(&vec![0xa5; 32 << 20]).unwrap();
    }
    for s in &mut clients {
        let mut reply = [0u8; 16];
        std::io::Read::read_exact(s, &mut reply).unwrap();
        assert_eq!(reply[4..8], [0, 0, 0, 0], "the write is answered");
    }
    let busy = d.rss();
    drop(clients);
    let took = wait_for(
        &d,
        "RSS back within 64 MiB of its start",
        Duration::from_secs(60),
        || d.rss() <= base + 64 * MIB,
    );
    eprintln!(
        "RSS {} MiB at start, {} MiB after the burst, back in {took:?}",
        base >> 20,
        busy >> 20
    );
    d.stop();
}
