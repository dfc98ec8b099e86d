//! `raidd serve` driven by the NBD clients users have: qemu-img, nbdinfo, nbdcopy, nbdsh
//! (libnbd's Python shell) and fio's nbd engine. Data goes in through NBD and is checked
//! offline on the members (and the other way round) with self-verifying sectors, so a
//! misplaced, stale or torn block is caught whichever side put it there.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::daemon::{
    array_config as config, create_array as create, make_certificate, must, run_tool, tool, Daemon,
};
use common::nbd_raw::{closed, handshake_to_transmission};
use common::{args_with, raidd, scratch, sectors};

const SEED: u64 = 0x05ee_d0bd;

fn export_size(d: &Daemon, export: &str) -> u64 {
    let out = must(tool("nbdinfo").args(["--size", &d.uri(export)]));
    out.trim().parse().unwrap()
}

fn pattern_file(dir: &Path, len: u64, generation: u64) -> PathBuf {
    sectors::pattern_file(dir, len, generation, SEED)
}

fn verify_file(p: &Path, generation: u64, what: &str) {
    sectors::verify_file(p, generation, SEED, what)
}

/// `raidd pattern write|verify` over the whole array, offline on its members.
/// Copies the first MiB of `export` out through NBD and checks it holds `generation`.
fn verify_served(d: &Daemon, dir: &Path, export: &str, generation: u64, what: &str) {
    let got = dir.join("got.bin");
    must(tool("nbdcopy").args([&d.uri(export), got.to_str().unwrap()]));
    std::fs::File::options()
        .write(true)
        .open(&got)
        .unwrap()
        .set_len(1 << 20)
        .unwrap();
    verify_file(&got, generation, what);
}

fn offline_pattern(verb: &str, members: &[PathBuf], len: u64, generation: u64) {
    sectors::offline(verb, members, len, generation, SEED)
}

fn offline_verify(members: &[PathBuf], len: u64, generation: u64) {
    offline_pattern("verify", members, len, generation);
}

fn offline_write(members: &[PathBuf], len: u64, generation: u64) {
    offline_pattern("write", members, len, generation);
}

/// Every redundant and striped level: data written through NBD reads back through NBD and
/// offline from the members; data written offline reads back through NBD; then the same
/// with members missing (degraded service).
#[test]
fn every_level_round_trips_through_nbd_healthy_and_degraded() {
    for (level, n, extra, lose) in [
        ("raid0", 3, &[][..], 0),
        ("raid1", 2, &[][..], 1),
        ("raid5", 4, &["--chunk", "64K"][..], 1),
        ("raid6", 5, &["--chunk", "64K"][..], 2),
        ("raid10", 4, &[][..], 1),
    ] {
        let dir = scratch();
        let members = create(dir.path(), level, n, extra);
        let d = Daemon::start(dir.path(), &config(level, &members));
        let size = export_size(&d, level);
        assert!(size > 0, "{level}: export size");
        let input = pattern_file(dir.path(), size, 1);
        must(tool("nbdcopy").args([input.to_str().unwrap(), &d.uri(level)]));
        must(tool("qemu-img").args([
            "compare",
            "-f",
            "raw",
            "-F",
            "raw",
            input.to_str().unwrap(),
            &d.uri(level),
        ]));
        let out = dir.path().join("out.bin");
        must(tool("nbdcopy").args([&d.uri(level), out.to_str().unwrap()]));
        verify_file(&out, 1, &format!("{level} read back through NBD"));
        let log = d.stop();
        assert!(log.contains("array closed cleanly"), "{level}:\n{log}");
        offline_verify(&members, size, 1);

        // Written offline, read through NBD.
        offline_write(&members, size, 2);
        if lose == 0 {
            let d = Daemon::start(dir.path(), &config(level, &members));
            must(tool("nbdcopy").args([&d.uri(level), out.to_str().unwrap()]));
            verify_file(&out, 2, &format!("{level} offline write read through NBD"));
            d.stop();
            continue;
        }
        // Degraded: the first `lose` members are left out of the config.
        let survivors = &members[lose..];
        let d = Daemon::start(dir.path(), &config(level, survivors));
        assert!(
            d.log().contains("running degraded"),
            "{level}:\n{}",
            d.log()
        );
        must(tool("nbdcopy").args([&d.uri(level), out.to_str().unwrap()]));
        verify_file(&out, 2, &format!("{level} degraded read through NBD"));
        let input = pattern_file(dir.path(), size, 3);
        must(tool("nbdcopy").args([input.to_str().unwrap(), &d.uri(level)]));
        must(tool("nbdcopy").args([&d.uri(level), out.to_str().unwrap()]));
        verify_file(&out, 3, &format!("{level} degraded write read back"));
        d.stop();
        offline_verify(survivors, size, 3);
    }
}

#[test]
fn listing_info_and_map_show_every_export() {
    let dir = scratch();
    let members = create(dir.path(), "raid5", 3, &[]);
    let cfg = format!(
        "{}[[export]]\nname = \"rw\"\narray = \"raid5\"\ndescription = \"the writable one\"\n\
         [[export]]\nname = \"ro\"\narray = \"raid5\"\nread_only = true\n",
        config("raid5", &members)
    );
    let d = Daemon::start(dir.path(), &cfg);
    let base = format!("nbd://{}", d.addr);
    let list = must(tool("nbdinfo").args(["--list", &base]));
    assert!(
        list.contains("export=\"rw\"") && list.contains("export=\"ro\""),
        "{list}"
    );
    assert!(list.contains("the writable one"), "{list}");
    let info = must(tool("nbdinfo").args(["--json", &d.uri("ro")]));
    let j: serde_json::Value = serde_json::from_str(&info).unwrap();
    let e = &j["exports"][0];
    assert_eq!(e["is_read_only"], true, "{info}");
    assert_eq!(e["can_multi_conn"], true, "{info}");
    assert_eq!(e["block_size_minimum"], 512, "{info}");
    let size = e["export-size"].as_u64().unwrap();
    let qi = must(tool("qemu-img").args(["info", "--output=json", &d.uri("rw")]));
    let q: serde_json::Value = serde_json::from_str(&qi).unwrap();
    assert_eq!(q["virtual-size"].as_u64(), Some(size), "{qi}");
    let map = must(tool("qemu-img").args(["map", "--output=json", &d.uri("rw")]));
    let m: serde_json::Value = serde_json::from_str(&map).unwrap();
    let covered: u64 = m
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["length"].as_u64().unwrap())
        .sum();
    assert_eq!(covered, size, "{map}");
    let nmap = must(tool("nbdinfo").args(["--map", &d.uri("rw")]));
    assert!(nmap.contains("data"), "{nmap}");
    // qemu-img convert in both directions, then compare.
    let input = pattern_file(dir.path(), size, 5);
    must(tool("qemu-img").args([
        "convert",
        "-n",
        "-f",
        "raw",
        "-O",
        "raw",
        input.to_str().unwrap(),
        &d.uri("rw"),
    ]));
    let out = dir.path().join("converted.raw");
    must(tool("qemu-img").args([
        "convert",
        "-f",
        "raw",
        "-O",
        "raw",
        &d.uri("ro"),
        out.to_str().unwrap(),
    ]));
    verify_file(&out, 5, "qemu-img convert through the read-only export");
    must(tool("qemu-img").args([
        "compare",
        "-f",
        "raw",
        "-F",
        "raw",
        out.to_str().unwrap(),
        &d.uri("rw"),
    ]));
    // An export that does not exist.
    let (ok, _, err) = run_tool(tool("nbdinfo").args([&d.uri("nope")]));
    assert!(!ok, "an unknown export must be refused: {err}");
    d.stop();
}

/// libnbd scripts: both reply styles, the commands and their errors, multi-conn.
#[test]
fn nbdsh_commands_errors_and_multi_conn() {
    let dir = scratch();
    let members = create(dir.path(), "raid6", 4, &["--chunk", "16K"]);
    let cfg = format!(
        "{}[[export]]\nname = \"vol\"\narray = \"raid6\"\n[[export]]\nname = \"ro\"\narray = \"raid6\"\nread_only = true\n",
        config("raid6", &members)
    );
    let d = Daemon::start(dir.path(), &cfg);
    let script = r#"
import nbd
def connect(export, structured=True, meta=True):
    h = nbd.NBD()
    h.set_request_structured_replies(structured)
    if meta:
        h.add_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
    h.connect_uri(SERVER_URI + "/" + export)
    # Let bad requests reach the server: its checks are what is tested.
    h.set_strict_mode(0)
    return h

for structured in (False, True):
    h = connect("vol", structured)
    assert h.get_structured_replies_negotiated() == structured
    assert h.can_meta_context(nbd.CONTEXT_BASE_ALLOCATION) == structured
    size = h.get_size()
    data = bytes((i * 7 + structured) % 251 for i in range(65536))
    h.pwrite(data, 1048576)
    assert h.pread(65536, 1048576) == data
    h.pwrite(data[:4096], 8192, nbd.CMD_FLAG_FUA)
    assert h.pread(4096, 8192) == data[:4096]
    h.zero(65536, 1048576)
    assert h.pread(65536, 1048576) == bytes(65536)
    h.trim(4096, 0)
    h.flush()
    h.cache(4096, 0)
    for off, ln, want in ((size, 512, "EINVAL"), (size - 512, 1024, "EINVAL"), (1, 512, "EINVAL")):
        try:
            h.pread(ln, off)
            raise AssertionError("pread %d@%d should fail" % (ln, off))
        except nbd.Error as e:
            assert e.errno == want, (off, ln, e)
    try:
        h.pwrite(b"x" * 512, size)
        raise AssertionError("write past the end should fail")
    except nbd.Error as e:
        assert e.errno == "ENOSPC", e
    try:
        h.zero(4096, 0, nbd.CMD_FLAG_FAST_ZERO)
        raise AssertionError("fast zero should be refused")
    except nbd.Error as e:
        assert e.errno == "ENOTSUP", e
    if structured:
        seen = []
        h.block_status(65536, 0, lambda ctx, off, ents, err: seen.append((ctx, ents)) or 0)
        assert seen and seen[0][0] == nbd.CONTEXT_BASE_ALLOCATION, seen
        assert sum(seen[0][1][0::2]) >= 4096, seen
        chunks = []
        h.pread_structured(4096, 0, lambda buf, off, status, err: chunks.append((off, len(buf), status)) or 0, nbd.CMD_FLAG_DF)
        assert chunks == [(0, 4096, nbd.READ_DATA)], chunks
    h.shutdown()

ro = connect("ro")
assert ro.is_read_only()
try:
    ro.pwrite(b"y" * 512, 0)
    raise AssertionError("write to a read-only export should fail")
except nbd.Error as e:
    assert e.errno == "EPERM", e
ro.shutdown()

# Multi-conn: a flush on one connection covers writes acknowledged on another.
a, b = connect("vol"), connect("vol")
assert a.can_multi_conn()
block = b"m" * 4096
a.pwrite(block, 4096 * 100)
b.flush()
assert b.pread(4096, 4096 * 100) == block
a.shutdown(); b.shutdown()
print("ok")
"#
    .replace("SERVER_URI", &format!("{:?}", format!("nbd://{}", d.addr)));
    let (ok, out, err) = run_tool(tool("nbdsh").args(["-c", &script]));
    assert!(
        ok && out.contains("ok"),
        "nbdsh script failed:\n{out}\n{err}\n{}",
        d.log()
    );
    d.stop();
}

/// fio's nbd engine writes random blocks to `uri` with crc32c in each, then reads them back
/// and verifies (fatal on a mismatch); `shape` sets block sizes, depth and size. Insists
/// the job reports no error; returns its figures.
fn fio_verify(dir: &Path, uri: &str, shape: &[&str]) -> serde_json::Value {
    // fio writes its verify state into its working directory: keep that in the scratch dir.
    let out = must(
        tool("fio")
            .current_dir(dir)
            .args(["--name=verify", "--ioengine=nbd", &format!("--uri={uri}")])
            .args(["--rw=randwrite", "--verify=crc32c", "--do_verify=1"])
            .args(["--verify_fatal=1", "--output-format=json"])
            .args(shape),
    );
    let j: serde_json::Value = serde_json::from_str(&out[out.find('{').unwrap()..]).unwrap();
    assert_eq!(j["jobs"][0]["error"], 0, "{out}");
    j["jobs"][0].clone()
}

#[test]
fn fio_verifies_crc32c_at_depth() {
    let dir = scratch();
    let members = create(dir.path(), "raid5", 4, &["--chunk", "32K"]);
    let d = Daemon::start(dir.path(), &config("raid5", &members));
    let j = fio_verify(
        dir.path(),
        &d.uri("raid5"),
        &[
            "--bs=4k,64k",
            "--bsrange=4k-64k",
            "--iodepth=32",
            "--size=48m",
        ],
    );
    assert!(j["write"]["io_bytes"].as_u64().unwrap() >= 48 << 20);
    assert!(
        j["read"]["io_bytes"].as_u64().unwrap() > 0,
        "verify read nothing"
    );
    d.stop();
}

/// `RAIDD_RING_WAIT=poll` (how `bench/instructions.py` runs the daemon under callgrind):
/// threads sleep in poll(2), not in io_uring_enter. Each worker takes several connections
/// one after another (a wake that reached a worker only once hung its second), and data
/// written at depth verifies.
#[test]
fn the_poll_wait_serves_connection_after_connection() {
    let dir = scratch();
    let members = create(dir.path(), "raid5", 4, &["--chunk", "32K"]);
    let d = Daemon::start_with_env(
        dir.path(),
        &config("raid5", &members),
        &[("RAIDD_RING_WAIT", "poll")],
    );
    // Under `timeout`, so that a connection left unanswered fails the test, not hangs it.
    for i in 0..6 {
        let uri = d.uri("raid5");
        let (ok, out, err) = run_tool(tool("timeout").args(["20", "nbdinfo", "--size", &uri]));
        assert!(ok, "connection {i} got no answer: {out}{err}\n{}", d.log());
        assert!(out.trim().parse::<u64>().unwrap() > 0);
    }
    let j = fio_verify(
        dir.path(),
        &d.uri("raid5"),
        &["--bs=4k", "--iodepth=16", "--size=8m"],
    );
    assert!(j["read"]["io_bytes"].as_u64().unwrap() >= 8 << 20);
    d.stop();
}

#[test]
fn sigterm_under_load_drains_and_leaves_the_array_clean() {
    let dir = scratch();
    let members = create(dir.path(), "raid5", 3, &[]);
    let d = Daemon::start(dir.path(), &config("raid5", &members));
    let mut fio = tool("fio")
        .args([
            "--name=load",
            "--ioengine=nbd",
            &format!("--uri={}", d.uri("raid5")),
            "--rw=randwrite",
            "--bs=64k",
            "--iodepth=16",
            "--size=32m",
            "--time_based",
            "--runtime=30",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let log = d.stop();
    assert!(log.contains("draining"), "{log}");
    assert!(log.contains("array closed cleanly"), "{log}");
    let _ = fio.wait();
    let detail = raidd(&args_with(&["detail", "--json"], &members))
        .ok()
        .json();
    assert_eq!(detail["array"]["state"], "clean", "{detail}");
    assert_eq!(detail["array"]["needs_resync"], false, "{detail}");
}

/// An array of `level` over `n` members that a daemon served 1 MiB of pattern (generation 1)
/// into through NBD, and was then killed: its superblocks say writes may be in flight (safe
/// mode is off, so the idle moment before the kill does not mark it clean).
fn written_then_killed(dir: &Path, level: &str, n: usize) -> Vec<PathBuf> {
    let members = create(dir, level, n, &[]);
    let cfg = format!("{}safe_mode_delay = \"off\"\n", config(level, &members));
    let d = Daemon::start(dir, &cfg);
    let input = pattern_file(dir, 1 << 20, 1);
    must(tool("nbdcopy").args([input.to_str().unwrap(), &d.uri(level)]));
    d.kill();
    members
}

#[test]
fn an_unclean_stop_is_reported_at_the_next_start() {
    let dir = scratch();
    let members = written_then_killed(dir.path(), "raid1", 2);
    let d = Daemon::start(dir.path(), &config("raid1", &members));
    assert!(d.log().contains("not shut down cleanly"), "{}", d.log());
    d.stop();
}

/// A RAID5 array killed while serving writes and then missing a member is not started (md's
/// rule: its parity may be stale where writes were in flight, and the missing data is
/// computed from it), neither by the daemon nor offline, with a message that says why and
/// how to start it anyway; asked (`start_dirty_degraded`, `--start-dirty-degraded`), it
/// serves its data degraded.
#[test]
fn a_dirty_degraded_raid5_starts_only_when_asked() {
    let dir = scratch();
    let members = written_then_killed(dir.path(), "raid5", 3);
    let survivors = &members[1..];
    let err = Daemon::try_start(dir.path(), &config("raid5", survivors))
        .err()
        .expect("a dirty degraded RAID5 must not be served");
    assert!(
        err.contains("not shut down cleanly") && err.contains("start_dirty_degraded"),
        "{err}"
    );
    let out = dir.path().join("read.bin");
    let read = |extra: &[&str]| {
        let mut fixed = vec!["read", "--length", "1M", "--output", out.to_str().unwrap()];
        fixed.extend_from_slice(extra);
        raidd(&args_with(&fixed, survivors))
    };
    let e = read(&[]).expect(4);
    assert!(
        e.error().contains("not shut down cleanly") && e.error().contains("--start-dirty-degraded"),
        "{}",
        e.error()
    );
    read(&["--start-dirty-degraded"]).ok();
    verify_file(&out, 1, "read offline, dirty and degraded");
    let asked = format!(
        "{}start_dirty_degraded = true\n",
        config("raid5", survivors)
    );
    let d = Daemon::start(dir.path(), &asked);
    assert!(d.log().contains("running degraded"), "{}", d.log());
    verify_served(&d, dir.path(), "raid5", 1, "served dirty and degraded");
    d.stop();
}

/// One array that cannot start (here refused as dirty and degraded) does not keep the others
/// from serving: the daemon starts with the rest, says which array is missing and why (log,
/// `status`, `detail`), and offers none of the missing array's exports.
#[test]
fn an_array_that_cannot_start_leaves_the_others_serving() {
    let dir = scratch();
    let bad = written_then_killed(dir.path(), "raid5", 3);
    let good = create(dir.path(), "raid1", 2, &[]);
    let cfg = format!("{}{}", config("raid5", &bad[1..]), config("raid1", &good));
    let d = Daemon::start(dir.path(), &cfg);
    let log = d.log();
    assert!(
        log.contains("array raid5 not started") && log.contains("start_dirty_degraded"),
        "{log}"
    );
    assert!(log.contains("export \"raid5\" is not offered"), "{log}");
    let list = must(tool("nbdinfo").args(["--list", &format!("nbd://{}", d.addr)]));
    assert!(
        list.contains("export=\"raid1\"") && !list.contains("export=\"raid5\""),
        "{list}"
    );
    let input = pattern_file(dir.path(), 1 << 20, 4);
    must(tool("nbdcopy").args([input.to_str().unwrap(), &d.uri("raid1")]));
    verify_served(&d, dir.path(), "raid1", 4, "the array that started");
    let ctl = d.control.display().to_string();
    let st = raidd(&["status", "--json", "--control", &ctl]).ok().json();
    assert_eq!(st["arrays"].as_array().unwrap().len(), 1, "{st}");
    assert_eq!(st["not_started"][0]["name"], "raid5", "{st}");
    let why = st["not_started"][0]["error"].as_str().unwrap();
    assert!(why.contains("not shut down cleanly"), "{why}");
    let text = raidd(&["status", "--control", &ctl]).ok().text();
    assert!(text.contains("raid5 : not started: "), "{text}");
    let e = raidd(&["detail", "raid5", "--control", &ctl]).expect(4);
    assert!(e.error().contains("was not started"), "{}", e.error());
    d.stop();
    // Nothing was written to the refused array's members.
    let e = raidd(&args_with(
        &["read", "--length", "4K", "--output", "/dev/null"],
        &bad[1..],
    ));
    assert!(e.expect(4).error().contains("not shut down cleanly"));
}

/// Members another process holds (here: this test's flock) are set aside, and when too
/// few are left the error says which were not used and why.
#[test]
fn too_few_members_names_the_ones_not_used_and_why() {
    use std::os::unix::io::AsRawFd;
    let dir = scratch();
    let members = create(dir.path(), "raid5", 3, &[]);
    let held: Vec<std::fs::File> = members[..2]
        .iter()
        .map(|m| {
            let f = std::fs::File::open(m).unwrap();
            // SAFETY: flock on a descriptor this test owns.
            assert_eq!(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) }, 0);
            f
        })
        .collect();
    let err = Daemon::try_start(dir.path(), &config("raid5", &members))
        .err()
        .expect("two of three members are busy");
    assert!(
        err.contains("not enough to run")
            && err.contains("members not used")
            && err.contains("in use by another process"),
        "{err}"
    );
    drop(held);
    Daemon::start(dir.path(), &config("raid5", &members)).stop();
}

/// md's safe mode: an array idle for its delay is marked clean while served, so a SIGKILL
/// then leaves nothing to resync, and a degraded RAID5 starts without being asked; writing
/// marks it active again. With safe mode off it stays active until a clean stop.
#[test]
fn an_idle_array_is_marked_clean_while_served() {
    let dir = scratch();
    let members = create(dir.path(), "raid5", 3, &[]);
    let with_delay =
        |m: &[PathBuf], delay: &str| format!("{}safe_mode_delay = {delay:?}\n", config("raid5", m));
    // What the superblock of `m` says (mdadm's "clean" or "active").
    let on_disk = |m: &Path| {
        let text = raidd(&["examine", m.to_str().unwrap()]).ok().text();
        if text.contains("State : clean") {
            "clean"
        } else {
            assert!(text.contains("State : active"), "{text}");
            "active"
        }
    };
    let wait_clean = |d: &Daemon, m: &Path| {
        let start = std::time::Instant::now();
        while on_disk(m) != "clean" {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "not marked clean: {}",
                d.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let d = Daemon::start(dir.path(), &with_delay(&members, "100ms"));
    let input = pattern_file(dir.path(), 1 << 20, 1);
    must(tool("nbdcopy").args([input.to_str().unwrap(), &d.uri("raid5")]));
    wait_clean(&d, &members[0]);
    d.kill();

    // Idle at the kill: the degraded array starts as it is, with nothing to resync.
    let survivors = &members[1..];
    let d = Daemon::start(dir.path(), &with_delay(survivors, "100ms"));
    assert!(!d.log().contains("not shut down cleanly"), "{}", d.log());
    verify_served(
        &d,
        dir.path(),
        "raid5",
        1,
        "served degraded after a kill while idle",
    );
    // Written again, it is marked clean again once idle.
    let second = pattern_file(dir.path(), 1 << 20, 2);
    must(tool("nbdcopy").args([second.to_str().unwrap(), &d.uri("raid5")]));
    wait_clean(&d, &survivors[0]);
    d.stop();

    // Safe mode off: a write leaves it active until the stop.
    let d = Daemon::start(dir.path(), &with_delay(survivors, "off"));
    must(tool("nbdcopy").args([input.to_str().unwrap(), &d.uri("raid5")]));
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(on_disk(&survivors[0]), "active", "{}", d.log());
    d.stop();
    assert_eq!(on_disk(&survivors[0]), "clean", "a clean stop");
}

/// `write_alone` per array: small random writes through NBD go past the stripe cache where
/// it says always, and through it (as batches) where it says never; the data reads back.
#[test]
fn write_alone_is_set_per_array() {
    let dir = scratch();
    let a = create(dir.path(), "raid5", 4, &["--chunk", "64K"]);
    let b = create(dir.path(), "raid6", 5, &["--chunk", "64K"]);
    let cfg = format!(
        "{}write_alone = \"always\"\n{}write_alone = \"never\"\n",
        config("raid5", &a),
        config("raid6", &b)
    );
    let d = Daemon::start(dir.path(), &cfg);
    let ctl = d.control.display().to_string();
    for (name, policy, alone) in [("raid5", "always", true), ("raid6", "never", false)] {
        // 64 single-sector writes, one per stripe, then read back.
        let script = format!(
            "import nbd\nh = nbd.NBD()\nh.connect_uri({:?})\n\
             for i in range(64):\n    h.pwrite(bytes([i]) * 512, i * (1 << 20) + 4096)\n\
             h.flush()\n\
             assert all(h.pread(512, i * (1 << 20) + 4096) == bytes([i]) * 512 for i in range(64))\n\
             h.shutdown()\nprint('ok')\n",
            d.uri(name)
        );
        let (ok, out, err) = run_tool(tool("nbdsh").args(["-c", &script]));
        assert!(ok && out.contains("ok"), "{name}: {out}{err}");
        let det = raidd(&["detail", name, "--json", "--control", &ctl])
            .ok()
            .json();
        let c = &det["array"]["counters"];
        let sc = &c["stripe_cache"];
        assert_eq!(sc["write_alone"], policy, "{det}");
        let n = |k: &str| c[k].as_u64().unwrap();
        assert_eq!(n("rmw_writes") + n("rcw_writes"), 64, "{name}: {det}");
        let batches = sc["batches"].as_u64().unwrap();
        if alone {
            // Alone is read-modify-write, whatever reconstruct-write would have cost.
            assert_eq!(n("rmw_writes"), 64, "{name}: {det}");
            assert_eq!(batches, 0, "{name}: every write went alone: {det}");
        } else {
            assert!(batches >= 64, "{name}: every write was a batch: {det}");
        }
        let text = raidd(&["detail", name, "--control", &ctl]).ok().text();
        assert!(
            text.contains(&format!("small writes alone {policy}")),
            "{text}"
        );
    }
}

#[test]
fn control_socket_status_and_detail() {
    let dir = scratch();
    let a = create(dir.path(), "raid10", 4, &[]);
    let b = create(dir.path(), "raid1", 2, &[]);
    let cfg = format!("{}{}", config("raid10", &a), config("mirror", &b));
    let d = Daemon::start(dir.path(), &cfg);
    let mode = std::fs::metadata(&d.control).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the control socket is root-only");
    let ctl = d.control.display().to_string();
    let st = raidd(&["status", "--control", &ctl]).ok().text();
    assert!(
        st.contains("raid10 : active raid10") && st.contains("mirror : active raid1"),
        "{st}"
    );
    assert!(st.contains("[UUUU]") && st.contains("[UU]"), "{st}");
    let j = raidd(&["status", "--json", "--control", &ctl]).ok().json();
    assert_eq!(j["arrays"].as_array().unwrap().len(), 2, "{j}");
    // The server's own payload copies: a 1 MiB write is received straight into its buffer
    // but for what came with its header into the 16 KiB receive-ahead buffer.
    let script = format!(
        "import nbd\nh = nbd.NBD()\nh.connect_uri({:?})\nh.pwrite(b'w' * (1 << 20), 0)\n\
         h.pwrite(b's' * 4096, 1 << 20)\nh.shutdown()\nprint('ok')\n",
        d.uri("raid10")
    );
    let (ok, out, err) = run_tool(tool("nbdsh").args(["-c", &script]));
    assert!(ok && out.contains("ok"), "{out}{err}");
    let j = raidd(&["status", "--json", "--control", &ctl]).ok().json();
    let export = &j["arrays"][0]["exports"][0];
    assert_eq!(export["name"], "raid10", "{j}");
    let copied = export["copied_bytes"].as_u64().unwrap();
    assert!(
        copied <= (16 << 10) + 4096,
        "{copied} payload bytes copied: {j}"
    );
    assert!(
        j["arrays"][0]["status"]["counters"]["copied_bytes"].is_u64(),
        "the engine's copies are shown too: {j}"
    );
    let st = raidd(&["status", "--control", &ctl]).ok().text();
    assert!(st.contains("of payload copied"), "{st}");
    let det = raidd(&["detail", "mirror", "--json", "--control", &ctl])
        .ok()
        .json();
    assert_eq!(det["array"]["level"], "raid1", "{det}");
    assert_eq!(det["array"]["slots"].as_array().unwrap().len(), 2);
    let text = raidd(&["detail", "raid10", "--control", &ctl]).ok().text();
    assert!(text.contains("Raid Level : raid10"), "{text}");
    let e = raidd(&["detail", "nope", "--control", &ctl]).expect(3);
    assert!(e.error().contains("no array named"), "{}", e.error());
    d.stop();
    assert!(!d_control_exists(&ctl), "the socket is removed at exit");
    // Without a daemon, status says so.
    let e = raidd(&["status", "--control", &ctl]).expect(3);
    assert!(e.error().contains("no raidd daemon"), "{}", e.error());
}

fn d_control_exists(p: &str) -> bool {
    Path::new(p).exists()
}

/// Garbage, truncated and hostile clients are cut off; a well-behaved client working at the
/// same time is not disturbed and loses nothing.
#[test]
fn bad_clients_are_cut_off_and_others_are_unaffected() {
    let dir = scratch();
    let members = create(dir.path(), "raid5", 3, &[]);
    let d = Daemon::start(dir.path(), &config("raid5", &members));
    let size = export_size(&d, "raid5");
    let input = pattern_file(dir.path(), size, 1);
    let uri = d.uri("raid5");
    let good = {
        let input = input.clone();
        let out = dir.path().join("good.bin");
        std::thread::spawn(move || {
            for _ in 0..3 {
                must(tool("nbdcopy").args([input.to_str().unwrap(), &uri]));
                must(tool("nbdcopy").args([&uri, out.to_str().unwrap()]));
                verify_file(&out, 1, "the good client");
            }
        })
    };
    // Garbage instead of client flags.
    let mut s = TcpStream::connect(d.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&[0xff; 64]).unwrap();
    assert!(closed(&mut s), "garbage flags must close the connection");
    // Bad option magic.
    let mut s = TcpStream::connect(d.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut g = [0u8; 18];
    s.read_exact(&mut g).unwrap();
    assert_eq!(&g[..16], b"NBDMAGICIHAVEOPT");
    s.write_all(&1u32.to_be_bytes()).unwrap();
    s.write_all(b"NOTMAGIC\0\0\0\x03\0\0\0\0").unwrap();
    assert!(closed(&mut s), "bad option magic must close");
    // An option claiming a 4 GiB payload.
    let mut s = TcpStream::connect(d.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.read_exact(&mut g).unwrap();
    s.write_all(&1u32.to_be_bytes()).unwrap();
    s.write_all(b"IHAVEOPT\0\0\0\x06\xff\xff\xff\xff").unwrap();
    assert!(closed(&mut s), "a huge option must close");
    // Transmission: bad request magic.
    let mut s = handshake_to_transmission(d.addr, "raid5");
    s.write_all(&[0x11; 28]).unwrap();
    assert!(closed(&mut s), "bad request magic must close");
    // A write announcing more payload than the server accepts.
    let mut s = handshake_to_transmission(d.addr, "raid5");
    let mut h = Vec::new();
    h.extend_from_slice(&0x2560_9513u32.to_be_bytes());
    h.extend_from_slice(&0u16.to_be_bytes());
    h.extend_from_slice(&1u16.to_be_bytes()); // WRITE
    h.extend_from_slice(&7u64.to_be_bytes());
    h.extend_from_slice(&0u64.to_be_bytes());
    h.extend_from_slice(&u32::MAX.to_be_bytes());
    s.write_all(&h).unwrap();
    assert!(closed(&mut s), "an oversized write must close");
    // A write that vanishes halfway through its payload: nothing of it is acknowledged.
    let mut s = handshake_to_transmission(d.addr, "raid5");
    let mut h2 = h.clone();
    h2[24..28].copy_from_slice(&65536u32.to_be_bytes());
    s.write_all(&h2).unwrap();
    s.write_all(&[0u8; 1000]).unwrap();
    drop(s);
    // An unknown command gets EINVAL and the connection goes on.
    let mut s = handshake_to_transmission(d.addr, "raid5");
    let mut h3 = h.clone();
    h3[6..8].copy_from_slice(&99u16.to_be_bytes());
    h3[24..28].copy_from_slice(&0u32.to_be_bytes());
    s.write_all(&h3).unwrap();
    let mut r = [0u8; 16];
    s.read_exact(&mut r).unwrap();
    assert_eq!(&r[0..4], &0x6744_6698u32.to_be_bytes());
    assert_eq!(u32::from_be_bytes([r[4], r[5], r[6], r[7]]), 22, "EINVAL");
    assert_eq!(&r[8..16], &7u64.to_be_bytes(), "the cookie comes back");
    // A slow client: one byte at a time through a whole read request.
    let mut h4 = h.clone();
    h4[6..8].copy_from_slice(&0u16.to_be_bytes()); // READ
    h4[24..28].copy_from_slice(&4096u32.to_be_bytes());
    for b in &h4 {
        s.write_all(&[*b]).unwrap();
        std::thread::sleep(Duration::from_millis(2));
    }
    let mut r = vec![0u8; 16 + 4096];
    s.read_exact(&mut r).unwrap();
    assert_eq!(u32::from_be_bytes([r[4], r[5], r[6], r[7]]), 0);
    drop(s);
    good.join().unwrap();
    let log = d.stop();
    assert!(!log.contains("panicked"), "{log}");
}

#[test]
fn bad_configs_and_busy_addresses_are_clear_errors() {
    let dir = scratch();
    let cfg = dir.path().join("bad.toml");
    std::fs::write(&cfg, "[[array]]\nname = \"x\"\n").unwrap();
    let e = raidd(&["serve", "--config", cfg.to_str().unwrap()]).expect(2);
    assert!(e.error().contains("members"), "{}", e.error());
    let e = raidd(&[
        "serve",
        "--config",
        dir.path().join("none.toml").to_str().unwrap(),
    ])
    .expect(2);
    assert!(e.error().contains("cannot read config"), "{}", e.error());
    // Two daemons on one control socket / port: the second refuses and changes nothing.
    let members = create(dir.path(), "raid1", 2, &[]);
    let d = Daemon::start(dir.path(), &config("raid1", &members));
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    let busy = format!(
        "control_socket = {:?}\n[nbd]\nlisten = \"{}\"\n{}",
        other.join("c.sock").display().to_string(),
        d.addr,
        config("raid1", &members)
    );
    let err = Daemon::try_start(&other, &busy)
        .err()
        .expect("second daemon must fail");
    assert!(err.contains("in use") || err.contains("lock"), "{err}");
    d.stop();
}

/// STARTTLS: optional TLS serves both kinds of client; required TLS refuses plain text.
#[test]
fn tls_on_off_and_required() {
    let dir = scratch();
    let members = create(dir.path(), "raid1", 2, &[]);
    let (cert, key) = make_certificate(dir.path());
    // libnbd looks for the CA as ca-cert.pem in a directory; the self-signed cert is its own CA.
    let ca_dir = dir.path().join("ca");
    std::fs::create_dir(&ca_dir).unwrap();
    std::fs::copy(&cert, ca_dir.join("ca-cert.pem")).unwrap();
    for require in [false, true] {
        let cfg = format!(
            "[nbd]\nlisten = \"127.0.0.1:0\"\n[nbd.tls]\ncertificate = {:?}\nkey = {:?}\nrequire = {require}\n{}",
            cert.display().to_string(),
            key.display().to_string(),
            config("raid1", &members)
        );
        let d = Daemon::start(dir.path(), &cfg);
        let script = format!(
            r#"
import nbd
def connect(tls):
    h = nbd.NBD()
    h.set_tls(tls)
    h.set_tls_certificates({ca:?})
    h.set_export_name("raid1")
    h.connect_tcp("127.0.0.1", "{port}")
    return h
h = connect(nbd.TLS_REQUIRE)
assert h.get_tls_negotiated()
data = bytes(range(256)) * 256
h.pwrite(data, 65536)
h.flush()
assert h.pread(len(data), 65536) == data
h.shutdown()
try:
    p = connect(nbd.TLS_DISABLE)
    plain_ok = p.pread(512, 65536) == data[:512]
    assert not p.get_tls_negotiated()
    p.shutdown()
except nbd.Error as e:
    plain_ok = False
print("plain", plain_ok)
"#,
            ca = ca_dir.display().to_string(),
            port = d.addr.port()
        );
        let (ok, out, err) = run_tool(tool("nbdsh").args(["-c", &script]));
        assert!(
            ok,
            "TLS script (require={require}) failed:\n{out}\n{err}\n{}",
            d.log()
        );
        let want = if require { "plain False" } else { "plain True" };
        assert!(out.contains(want), "require={require}: {out}");
        d.stop();
    }
    // A bad certificate path is a clear configuration error.
    let cfg = dir.path().join("bad.toml");
    std::fs::write(
        &cfg,
        format!(
            "[nbd.tls]\ncertificate = \"/nonexistent.pem\"\nkey = {:?}\n{}",
            key.display().to_string(),
            config("raid1", &members)
        ),
    )
    .unwrap();
    let e = raidd(&["serve", "--config", cfg.to_str().unwrap()]).expect(2);
    assert!(e.error().contains("TLS certificate"), "{}", e.error());
}

/// Sends `n` 4 KiB writes of `generation` from byte `start`, `stride` bytes apart,
/// pipelined (FUA on each when `fua`), then waits for every reply: all must succeed.
fn small_writes(s: &mut TcpStream, start: u64, stride: u64, n: u64, generation: u64, fua: bool) {
    const FLAG_FUA: u16 = 1;
    for k in 0..n {
        let off = start + k * stride;
        let mut h = common::nbd_raw::request(common::nbd_raw::WRITE, k, off, 4096);
        if fua {
            h[4..6].copy_from_slice(&FLAG_FUA.to_be_bytes());
        }
        let mut data = vec![0u8; 4096];
        raidd_engine::pattern::fill(&mut data, off / 512, generation, SEED);
        s.write_all(&h).unwrap();
        s.write_all(&data).unwrap();
    }
    for _ in 0..n {
        simple_reply_ok(s);
    }
}

/// Reads one simple reply and checks it says success.
fn simple_reply_ok(s: &mut TcpStream) {
    let mut r = [0u8; 16];
    s.read_exact(&mut r).unwrap();
    assert_eq!(r[0..4], 0x6744_6698u32.to_be_bytes(), "a simple reply");
    assert_eq!(r[4..8], [0, 0, 0, 0], "the request succeeded");
}

/// Write-back DAB holds acknowledged writes in memory: over a RAID0 a member that fails
/// takes them with it, so `dab_mode = "write-back"` is refused there with a message that
/// names the way out, and `write-back-unsafe` serves it (the administrator accepts the
/// loss).
#[test]
fn write_back_buffers_are_refused_without_redundancy_unless_unsafe() {
    let dir = scratch();
    let members = create(dir.path(), "raid0", 2, &[]);
    let with = |mode: &str| {
        format!(
            "{}dab = \"16M\"\ndab_block = \"64K\"\ndab_mode = {mode:?}\n",
            config("raid0", &members)
        )
    };
    let log = match Daemon::try_start(dir.path(), &with("write-back")) {
        Ok(d) => {
            let log = d.log();
            let size = d.export_size("raid0");
            d.stop();
            panic!("served ({size} bytes):\n{log}")
        }
        Err(log) => log,
    };
    assert!(
        log.contains("dab_mode = \"write-back\"")
            && log.contains("raid0 has no redundancy")
            && log.contains("\"write-back-unsafe\""),
        "{log}"
    );
    let d = Daemon::start(dir.path(), &with("write-back-unsafe"));
    assert!(d.export_size("raid0") > 20 << 20);
    d.stop();
}

/// Write-back DAB across kill -9: 4 KiB writes are held in the buffer (so the members lack
/// them until a flush), yet after a SIGKILL and the resync at the next start, everything
/// an NBD FLUSH or a FUA write acknowledged is there; what was acknowledged without either
/// is either there or the old data, sector by sector — and some of it was indeed lost, so
/// the buffer held it.
#[test]
fn write_back_buffers_lose_nothing_a_flush_or_fua_acknowledged_across_kill_9() {
    let dir = scratch();
    let members = create(dir.path(), "raid5", 4, &[]);
    let cfg = format!(
        "{}safe_mode_delay = \"off\"\ndab = \"16M\"\ndab_block = \"64K\"\ndab_mode = \"write-back\"\n",
        config("raid5", &members)
    );
    let d = Daemon::start(dir.path(), &cfg);
    let mut s = handshake_to_transmission(d.addr, "raid5");
    const MIB: u64 = 1 << 20;
    // Generation 1 over 3 MiB, then a FLUSH.
    small_writes(&mut s, 0, 4096, 3 * 256, 1, false);
    s.write_all(&common::nbd_raw::request(3, 9999, 0, 0))
        .unwrap(); // NBD_CMD_FLUSH
    simple_reply_ok(&mut s);
    // Generation 2 with FUA over the first MiB; generation 3 plain to every fourth 4 KiB of
    // the second, one at a time, so that none joins another in a full-stripe write (those
    // go around the buffer).
    small_writes(&mut s, 0, 4096, 256, 2, true);
    for k in 0..64 {
        small_writes(&mut s, MIB + k * 16384, 16384, 1, 3, false);
    }
    let detail = raidd(&[
        "detail",
        "raid5",
        "--json",
        "--control",
        d.control.to_str().unwrap(),
    ])
    .ok()
    .json();
    let dab = detail["array"]["counters"]["dab"]
        .as_array()
        .unwrap()
        .clone();
    let absorbed: u64 = dab.iter().map(|m| m["absorbed"].as_u64().unwrap()).sum();
    assert!(absorbed > 0, "writes were held in the buffer: {dab:?}");
    assert!(
        dab.iter().all(|m| m["holds_writes"] == true),
        "a redundant array's buffer holds writes: {dab:?}"
    );
    d.kill();
    drop(s);
    let d = Daemon::start(dir.path(), &cfg);
    assert!(d.log().contains("not shut down cleanly"), "{}", d.log());
    let got = dir.path().join("after-kill.bin");
    must(tool("nbdcopy").args([&d.uri("raid5"), got.to_str().unwrap()]));
    d.stop();
    let back = std::fs::read(&got).unwrap();
    let mib = MIB as usize;
    let first = raidd_engine::pattern::verify(&back[..mib], 0, SEED, |_| 2);
    assert!(first.is_empty(), "FUA writes lost: {}", first[0]);
    let third = raidd_engine::pattern::verify(&back[2 * mib..3 * mib], 2 * MIB / 512, SEED, |_| 1);
    assert!(third.is_empty(), "flushed writes lost: {}", third[0]);
    // The second MiB: generation 3 where it was written (or still 1), 1 elsewhere.
    let written = |s: u64| (s - MIB / 512) % 32 < 8;
    let want = |s: u64| if written(s) { 3 } else { 1 };
    let second = raidd_engine::pattern::verify(&back[mib..2 * mib], MIB / 512, SEED, want);
    let old = raidd_engine::pattern::Problem::Stale {
        found_generation: 1,
    };
    assert!(
        second.iter().all(|m| m.problem == old && written(m.sector)),
        "unflushed writes read back neither old nor new: {}",
        second
            .iter()
            .find(|m| m.problem != old || !written(m.sector))
            .unwrap()
    );
    assert!(
        !second.is_empty(),
        "every unflushed write reached the members: nothing was held in the buffer"
    );
    // The stop above marked the array clean on the members (every superblock write is
    // flushed, buffer and all); with no flush at all before the next kill, the mark that
    // writes may be in flight still reached them, so the start after it resyncs.
    let d = Daemon::start(dir.path(), &cfg);
    assert!(!d.log().contains("not shut down cleanly"), "{}", d.log());
    let mut s = handshake_to_transmission(d.addr, "raid5");
    for k in 0..16 {
        small_writes(&mut s, k * 16384, 16384, 1, 4, false);
    }
    d.kill();
    drop(s);
    let d = Daemon::start(dir.path(), &cfg);
    assert!(d.log().contains("not shut down cleanly"), "{}", d.log());
    d.stop();
}
