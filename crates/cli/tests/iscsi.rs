//! `raidd serve`'s iSCSI target driven by the initiators users have: libiscsi's tools
//! (iscsi-ls, iscsi-inq, iscsi-readcapacity16) and qemu-img's libiscsi driver. Data goes in
//! through iSCSI and is checked offline on the members (and the other way round) with
//! self-verifying sectors, healthy and degraded.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};

use common::daemon::{
    array_config as config, create_array as create, must, run_tool, tool, Daemon,
};
use common::iscsi_raw as raw;
use common::{raidd, scratch, sectors};

const SEED: u64 = 0x15c5_1000;
const INITIATOR: &str = "iqn.2026-11.org.raidd:test-initiator";

fn target_name(array: &str) -> String {
    format!("iqn.2026-11.org.raidd:{array}")
}

fn iscsi_config(level: &str, members: &[PathBuf], extra: &str) -> String {
    format!(
        "[iscsi]\nlisten = \"127.0.0.1:0\"\nstate_dir = \"state\"\nnop_interval = 0\n{extra}{}",
        config(level, members)
    )
}

fn pattern_file(dir: &Path, len: u64, generation: u64) -> PathBuf {
    sectors::pattern_file(dir, len, generation, SEED)
}

fn verify_file(p: &Path, generation: u64, what: &str) {
    sectors::verify_file(p, generation, SEED, what)
}

fn offline(verb: &str, members: &[PathBuf], len: u64, generation: u64) {
    sectors::offline(verb, members, len, generation, SEED)
}

/// The LUN's size in bytes as READ CAPACITY(16) reports it.
fn capacity(url: &str) -> u64 {
    let out = must(tool("iscsi-readcapacity16").args(["-i", INITIATOR, url]));
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix("Total size:"))
        .unwrap_or_else(|| panic!("no size in {out}"));
    line.trim().parse().unwrap()
}

fn qemu_write(input: &Path, url: &str) {
    must(tool("qemu-img").args([
        "convert",
        "-n",
        "-f",
        "raw",
        "-O",
        "raw",
        input.to_str().unwrap(),
        url,
    ]));
}

fn qemu_read(url: &str, out: &Path) {
    let _ = std::fs::remove_file(out);
    must(tool("qemu-img").args([
        "convert",
        "-f",
        "raw",
        "-O",
        "raw",
        url,
        out.to_str().unwrap(),
    ]));
}

#[test]
fn discovery_inquiry_and_capacity() {
    let dir = scratch();
    let members = create(dir.path(), "raid5", 4, &["--chunk", "64K"]);
    let d = Daemon::start(dir.path(), &iscsi_config("raid5", &members, ""));
    let portal = format!("iscsi://{}", d.iscsi.unwrap());
    let ls = must(tool("iscsi-ls").args(["-i", INITIATOR, &portal]));
    assert!(
        ls.contains(&format!("Target:{}", target_name("raid5"))),
        "{ls}"
    );
    let url = d.iscsi_url("", &target_name("raid5"), 0);
    let inq = must(tool("iscsi-inq").args(["-i", INITIATOR, &url]));
    assert!(inq.contains("Vendor:RAIDD"), "{inq}");
    assert!(inq.contains("DIRECT_ACCESS"), "{inq}");
    let serial = must(tool("iscsi-inq").args(["-i", INITIATOR, "-e", "1", "-c", "0x80", &url]));
    assert!(
        !serial.trim().is_empty(),
        "unit serial number page: {serial}"
    );
    // The LUN is the array: 3 data members of 24 MiB less md's metadata, chunk-aligned.
    let size = capacity(&url);
    let nbd = must(tool("nbdinfo").args(["--size", &d.uri("raid5")]));
    assert_eq!(size, nbd.trim().parse::<u64>().unwrap());
    assert!(size > 60 << 20 && size <= 72 << 20, "{size}");
    let ctl = d.control.to_str().unwrap().to_string();
    let st = raidd(&["status", "--control", &ctl]).ok().text();
    let addr = d.iscsi.unwrap();
    assert!(st.contains(&format!("iSCSI on {addr}, 1 targets")), "{st}");
    let j = raidd(&["status", "--json", "--control", &ctl]).ok().json();
    assert_eq!(
        j["iscsi"]["targets"][0]["name"],
        target_name("raid5"),
        "{j}"
    );
    assert_eq!(j["iscsi"]["targets"][0]["luns"][0]["array"], "raid5", "{j}");
    d.stop();
}

/// Data written through iSCSI reads back through iSCSI and offline from the members; data
/// written offline reads back through iSCSI; then the same with members missing.
#[test]
fn every_level_round_trips_through_iscsi_healthy_and_degraded() {
    for (level, n, extra, lose) in [
        ("raid0", 3, &[][..], 0),
        ("raid5", 4, &["--chunk", "64K"][..], 1),
        ("raid6", 5, &["--chunk", "64K"][..], 2),
        ("raid10", 4, &[][..], 1),
    ] {
        let dir = scratch();
        let members = create(dir.path(), level, n, extra);
        let d = Daemon::start(dir.path(), &iscsi_config(level, &members, ""));
        let url = d.iscsi_url("", &target_name(level), 0);
        let size = capacity(&url);
        let input = pattern_file(dir.path(), size, 1);
        qemu_write(&input, &url);
        let out = dir.path().join("out.bin");
        qemu_read(&url, &out);
        verify_file(&out, 1, &format!("{level} read back through iSCSI"));
        let log = d.stop();
        assert!(log.contains("array closed cleanly"), "{level}:\n{log}");
        offline("verify", &members, size, 1);

        offline("write", &members, size, 2);
        let survivors = &members[lose..];
        let d = Daemon::start(dir.path(), &iscsi_config(level, survivors, ""));
        if lose > 0 {
            assert!(
                d.log().contains("running degraded"),
                "{level}:\n{}",
                d.log()
            );
        }
        let url = d.iscsi_url("", &target_name(level), 0);
        qemu_read(&url, &out);
        verify_file(
            &out,
            2,
            &format!("{level} (missing {lose}) read through iSCSI"),
        );
        let input = pattern_file(dir.path(), size, 3);
        qemu_write(&input, &url);
        qemu_read(&url, &out);
        verify_file(
            &out,
            3,
            &format!("{level} (missing {lose}) written through iSCSI"),
        );
        d.stop();
        offline("verify", survivors, size, 3);
    }
}

#[test]
fn chap_mutual_chap_and_initiator_acls() {
    let dir = scratch();
    let members = create(dir.path(), "raid1", 2, &[]);
    let t = "iqn.2026-11.org.raidd:secure";
    let extra = format!(
        "[[target]]\nname = \"{t}\"\ninitiators = [\"{INITIATOR}\"]\n\
         chap = {{ user = \"alice\", secret = \"alice-secret-1\" }}\n\
         mutual_chap = {{ user = \"raidd\", secret = \"target-secret-2\" }}\n\
         [[target.lun]]\narray = \"raid1\"\n"
    );
    let d = Daemon::start(dir.path(), &iscsi_config("raid1", &members, &extra));
    let inq = |url: &str, initiator: &str| run_tool(tool("iscsi-inq").args(["-i", initiator, url]));

    let good = d.iscsi_url("alice%alice-secret-1@", t, 0);
    let (ok, out, err) = inq(&good, INITIATOR);
    assert!(ok, "the right secret logs in: {out}{err}");
    assert!(out.contains("Vendor:RAIDD"), "{out}");

    let (ok, _, err) = inq(&d.iscsi_url("alice%wrong-secret-1@", t, 0), INITIATOR);
    assert!(!ok, "a wrong secret must be refused: {err}");
    let (ok, _, err) = inq(&d.iscsi_url("", t, 0), INITIATOR);
    assert!(!ok, "no CHAP at all must be refused: {err}");
    let (ok, _, err) = inq(&good, "iqn.2026-11.org.raidd:stranger");
    assert!(!ok, "an initiator outside the ACL must be refused: {err}");

    // Mutual: the initiator checks the target's answer too.
    let mutual = format!("{good}?target_user=raidd&target_password=target-secret-2");
    let (ok, out, err) = inq(&mutual, INITIATOR);
    assert!(ok, "mutual CHAP with the right target secret: {out}{err}");
    let bad_mutual = format!("{good}?target_user=raidd&target_password=not-the-secret");
    let (ok, _, err) = inq(&bad_mutual, INITIATOR);
    assert!(
        !ok,
        "the initiator must refuse a target that answers wrongly: {err}"
    );

    let log = d.stop();
    assert!(log.contains("iSCSI login refused"), "{log}");
}

/// Protocol errors get the RFC's answers and cost nobody else anything: an unknown opcode
/// and an out-of-order Data-Out are rejected, stray Data-Out is dropped, a command outside
/// the CmdSN window is ignored, a bad header digest or an oversized segment ends only that
/// connection.
#[test]
fn protocol_errors_are_rejected_and_other_sessions_carry_on() {
    use raidd_iscsi::pdu::{build, op, reject, BHS_LEN};
    let dir = scratch();
    let members = create(dir.path(), "raid1", 2, &[]);
    let d = Daemon::start(dir.path(), &iscsi_config("raid1", &members, ""));
    let addr = d.iscsi.unwrap();
    let t = target_name("raid1");
    let mut a = raw::Raw::login(addr, INITIATOR, &t, false);
    let mut b = raw::Raw::login(addr, "iqn.2026-11.org.raidd:other", &t, true);

    // TEST UNIT READY: good status. Unit attentions may come first on a fresh nexus.
    let mut cmdsn = a.cmdsn;
    let mut ok = false;
    for _ in 0..3 {
        let itt = a.command(&[0; 6], 0, cmdsn);
        cmdsn += 1;
        let (h, _) = a.recv();
        assert_eq!((h.opcode(), h.itt()), (op::SCSI_RESPONSE, itt));
        if h.0[3] == 0 {
            ok = true;
            break;
        }
    }
    assert!(ok, "TEST UNIT READY never succeeded");
    a.cmdsn = cmdsn;

    // Unknown opcode: Reject (command not supported) carrying the header back.
    let mut h = [0u8; BHS_LEN];
    h[0] = 0x1c;
    h[16..20].copy_from_slice(&77u32.to_be_bytes());
    a.send(h, &[]);
    let (r, data) = a.recv();
    assert_eq!((r.opcode(), r.0[2]), (op::REJECT, reject::NOT_SUPPORTED));
    assert_eq!(&data[..], &h[..]);
    a.ping();

    // Data-Out for a task that does not exist: dropped without an answer.
    a.send(
        build::data_out(0x5555, u32::MAX, 0, 0, true, 512),
        &[7u8; 512],
    );
    a.ping();

    // A write (InitialR2T=Yes): the target asks with an R2T; Data-Out at the wrong offset is
    // rejected, at the right one it completes the command, and the data reads back.
    let itt = a.itt();
    let mut cdb = [0u8; 10];
    cdb[0] = 0x2a;
    cdb[5] = 8; // LBA 8
    cdb[8] = 2; // two blocks
    a.send(
        build::command(itt, 0, &cdb, false, true, 1024, a.cmdsn, a.statsn, 0),
        &[],
    );
    a.cmdsn += 1;
    let (r2t, _) = a.recv();
    assert_eq!(r2t.opcode(), op::R2T);
    let ttt = u32::from_be_bytes(r2t.0[20..24].try_into().unwrap());
    let want = u32::from_be_bytes(r2t.0[44..48].try_into().unwrap());
    assert_eq!(want, 1024);
    a.send(build::data_out(itt, ttt, 0, 512, true, 512), &[1u8; 512]);
    let (r, _) = a.recv();
    assert_eq!((r.opcode(), r.0[2]), (op::REJECT, reject::PROTOCOL_ERROR));
    let payload: Vec<u8> = (0..1024u32).map(|i| (i * 7 + 3) as u8).collect();
    a.send(build::data_out(itt, ttt, 0, 0, true, 1024), &payload);
    let (r, _) = a.recv();
    assert_eq!((r.opcode(), r.itt(), r.0[3]), (op::SCSI_RESPONSE, itt, 0));
    let mut cdb = [0u8; 10];
    cdb[0] = 0x28;
    cdb[5] = 8;
    cdb[8] = 2;
    let itt = a.command(&cdb, 1024, a.cmdsn);
    a.cmdsn += 1;
    let (r, data) = a.recv();
    assert_eq!((r.opcode(), r.itt()), (op::DATA_IN, itt));
    assert!(r.0[1] & 0x01 != 0, "status in the last Data-In");
    assert_eq!(data, payload);

    // A command beyond MaxCmdSN is ignored; the next in-window one is answered.
    a.command(&[0; 6], 0, a.cmdsn + 1000);
    let itt = a.command(&[0; 6], 0, a.cmdsn);
    a.cmdsn += 1;
    let (r, _) = a.recv();
    assert_eq!((r.opcode(), r.itt()), (op::SCSI_RESPONSE, itt));

    // Session b: a header digest that does not match ends b's connection only.
    b.ping();
    let mut h = [0u8; BHS_LEN];
    h[0] = 0x40;
    h[1] = 0x80;
    h[16..20].copy_from_slice(&9u32.to_be_bytes());
    h[20..24].copy_from_slice(&u32::MAX.to_be_bytes());
    b.send_with(h, &[], true);
    assert!(
        b.try_recv().is_none(),
        "a bad header digest must close the connection"
    );
    a.ping();

    // An oversized data segment (beyond MaxRecvDataSegmentLength) ends a's connection.
    let mut c = raw::Raw::login(addr, INITIATOR, &t, false);
    let mut h = [0u8; BHS_LEN];
    h[0] = 0x40;
    h[1] = 0x80;
    h[5] = 0x10; // 1 MiB
    h[16..20].copy_from_slice(&9u32.to_be_bytes());
    h[20..24].copy_from_slice(&u32::MAX.to_be_bytes());
    c.send(h, &[]);
    assert!(
        c.try_recv().is_none(),
        "an oversized segment must close the connection"
    );
    a.ping();
    drop(a);
    d.stop();
}

/// libiscsi's conformance suite, every family, against a RAID5 LUN: nothing may fail.
/// (`bench/iscsi_conformance.py` runs the same suite against tgt beside it for comparison.)
#[test]
fn libiscsi_conformance_suite_passes() {
    let dir = scratch();
    let members = create(dir.path(), "raid5", 4, &["--chunk", "64K"]);
    let d = Daemon::start(dir.path(), &iscsi_config("raid5", &members, ""));
    let url = d.iscsi_url("", &target_name("raid5"), 0);
    let (_, out, err) = run_tool(tool("iscsi-test-cu").args(["--dataloss", "--test=ALL", &url]));
    let text = format!("{out}{err}");
    // CUnit's summary: "tests  TOTAL  RAN  PASSED  FAILED  INACTIVE".
    let counts: Vec<u64> = text
        .lines()
        .find(|l| l.trim_start().starts_with("tests "))
        .unwrap_or_else(|| panic!("no summary in:\n{text}"))
        .split_whitespace()
        .skip(1)
        .filter_map(|w| w.parse().ok())
        .collect();
    let failed: Vec<&str> = text
        .lines()
        .filter(|l| l.trim_start().starts_with("Test:") && l.ends_with("FAILED"))
        .collect();
    assert_eq!(counts.len(), 5, "{text}");
    assert!(
        counts[0] >= 200 && counts[1] == counts[0],
        "every test ran:\n{text}"
    );
    assert_eq!(counts[3], 0, "failed tests: {failed:?}\n{text}");
    let skipped = text.matches("[SKIPPED]").count();
    assert!(
        skipped < 120,
        "most tests must run for real, {skipped} skip messages"
    );
    d.stop();
}

fn prout_register(r: &mut raw::Raw, old: u64, new: u64, aptpl: bool) -> u8 {
    let mut cdb = [0u8; 10];
    cdb[0] = 0x5f;
    cdb[1] = 0x00; // REGISTER
    cdb[8] = 24;
    let mut p = [0u8; 24];
    p[..8].copy_from_slice(&old.to_be_bytes());
    p[8..16].copy_from_slice(&new.to_be_bytes());
    p[20] = u8::from(aptpl);
    let (h, _) = r.command_out(&cdb, &p);
    h.0[3]
}

fn prin_keys(r: &mut raw::Raw) -> Vec<u64> {
    let cdb = [0x5e, 0, 0, 0, 0, 0, 0, 1, 0, 0];
    let (status, data, _) = r.command_in(&cdb, 256);
    assert_eq!(status, 0, "READ KEYS");
    let n = u32::from_be_bytes(data[4..8].try_into().unwrap()) as usize;
    data[8..8 + n]
        .chunks(8)
        .map(|k| u64::from_be_bytes(k.try_into().unwrap()))
        .collect()
}

/// Unit attentions (power on) may come first on a fresh nexus: TEST UNIT READY until good.
fn settle(r: &mut raw::Raw) {
    for _ in 0..4 {
        let (status, _, _) = r.command_in(&[0; 6], 0);
        if status == 0 {
            return;
        }
    }
    panic!("TEST UNIT READY never succeeded");
}

/// A registration made with APTPL survives a restart of the daemon; once it is removed
/// with APTPL off, a restart finds none.
#[test]
fn persistent_reservations_survive_a_restart() {
    let dir = scratch();
    let members = create(dir.path(), "raid1", 2, &[]);
    let cfg = iscsi_config("raid1", &members, "");
    let t = target_name("raid1");
    const KEY: u64 = 0x0123_4567_89ab_cdef;
    let d = Daemon::start(dir.path(), &cfg);
    let mut a = raw::Raw::login(d.iscsi.unwrap(), INITIATOR, &t, false);
    settle(&mut a);
    assert_eq!(prin_keys(&mut a), Vec::<u64>::new());
    assert_eq!(prout_register(&mut a, 0, KEY, true), 0);
    assert_eq!(prin_keys(&mut a), vec![KEY]);
    drop(a);
    d.stop();

    let d = Daemon::start(dir.path(), &cfg);
    assert!(
        d.log().contains("persistent reservations restored"),
        "{}",
        d.log()
    );
    let mut a = raw::Raw::login(d.iscsi.unwrap(), INITIATOR, &t, false);
    settle(&mut a);
    assert_eq!(prin_keys(&mut a), vec![KEY], "kept across the restart");
    // Unregister (the same nexus, its key, new key 0) with APTPL off.
    assert_eq!(prout_register(&mut a, KEY, 0, false), 0);
    assert_eq!(prin_keys(&mut a), Vec::<u64>::new());
    drop(a);
    d.stop();

    let d = Daemon::start(dir.path(), &cfg);
    let mut a = raw::Raw::login(d.iscsi.unwrap(), INITIATOR, &t, false);
    settle(&mut a);
    assert_eq!(prin_keys(&mut a), Vec::<u64>::new());
    drop(a);
    d.stop();
}

/// A registration with APTPL whose save fails (the state directory cannot be written) is
/// not answered GOOD: CHECK CONDITION, HARDWARE ERROR / INTERNAL TARGET FAILURE.
#[test]
fn a_reservation_that_cannot_be_saved_is_an_error() {
    let dir = scratch();
    let members = create(dir.path(), "raid1", 2, &[]);
    // A file where the state directory (`state`, next to the config) should be.
    std::fs::write(dir.path().join("state"), b"not a directory").unwrap();
    let cfg = iscsi_config("raid1", &members, "");
    let t = target_name("raid1");
    let d = Daemon::start(dir.path(), &cfg);
    let mut a = raw::Raw::login(d.iscsi.unwrap(), INITIATOR, &t, false);
    settle(&mut a);
    let mut cdb = [0u8; 10];
    cdb[0] = 0x5f; // PERSISTENT RESERVE OUT, REGISTER
    cdb[8] = 24;
    let mut p = [0u8; 24];
    p[8..16].copy_from_slice(&7u64.to_be_bytes());
    p[20] = 1; // APTPL
    let (h, sense) = a.command_out(&cdb, &p);
    assert_eq!(h.0[3], 0x02, "CHECK CONDITION");
    let sense = &sense[2..];
    assert_eq!(
        (sense[2] & 0x0f, sense[12], sense[13]),
        (0x04, 0x44, 0x00),
        "{sense:02x?}"
    );
    // The registration stands (the target kept it, only not on disk); changed without
    // APTPL, nothing needs saving, and the command is good.
    assert_eq!(prin_keys(&mut a), vec![7]);
    assert_eq!(prout_register(&mut a, 7, 8, false), 0);
    assert_eq!(prin_keys(&mut a), vec![8]);
    drop(a);
    let log = d.stop();
    assert!(log.contains("cannot save persistent reservations"), "{log}");
}

/// Two paths to one LUN (libiscsi's multipath tests): a LUN RESET on one leaves a unit
/// attention on both, a write on one is read on the other.
#[test]
fn libiscsi_multipath_tests_pass_over_two_paths() {
    let dir = scratch();
    let members = create(dir.path(), "raid5", 4, &["--chunk", "64K"]);
    let d = Daemon::start(dir.path(), &iscsi_config("raid5", &members, ""));
    let url = d.iscsi_url("", &target_name("raid5"), 0);
    let (_, out, err) =
        run_tool(tool("iscsi-test-cu").args(["--dataloss", "--test=SCSI.MultipathIO", &url, &url]));
    let text = format!("{out}{err}");
    let summary = text
        .lines()
        .find(|l| l.trim_start().starts_with("tests "))
        .unwrap_or_else(|| panic!("no summary in:\n{text}"));
    let counts: Vec<u64> = summary
        .split_whitespace()
        .skip(1)
        .filter_map(|w| w.parse().ok())
        .collect();
    assert_eq!(counts.len(), 5, "{text}");
    assert!(counts[1] >= 3, "the multipath tests ran: {text}");
    assert_eq!(counts[3], 0, "failures:\n{text}");
    assert!(!text.contains("[SKIPPED]"), "{text}");
    d.stop();
}

/// When the array cannot serve a read (RAID5 with two members gone), the initiator gets
/// CHECK CONDITION with MEDIUM ERROR / UNRECOVERED READ ERROR, and the session goes on.
#[test]
fn unreadable_data_is_a_medium_error() {
    let dir = scratch();
    let members = create(dir.path(), "raid5", 3, &["--chunk", "64K"]);
    // One member missing from the start: degraded, still served.
    let d = Daemon::start(dir.path(), &iscsi_config("raid5", &members[1..], ""));
    let t = target_name("raid5");
    let mut a = raw::Raw::login(d.iscsi.unwrap(), INITIATOR, &t, false);
    settle(&mut a);
    let read10 = [0x28, 0, 0, 0, 0, 0, 0, 0, 8, 0];
    let (status, data, _) = a.command_in(&read10, 4096);
    assert_eq!((status, data.len()), (0, 4096), "degraded reads work");
    // A second member fails: nothing can reconstruct the data.
    raidd(&[
        "fail",
        "raid5",
        members[1].to_str().unwrap(),
        "--control",
        d.control.to_str().unwrap(),
    ])
    .ok();
    let (status, _, sense) = a.command_in(&read10, 4096);
    assert_eq!(status, 0x02, "CHECK CONDITION");
    assert!(sense.len() >= 14, "{sense:?}");
    let (key, asc) = if sense[0] & 0x7f >= 0x72 {
        (sense[1] & 0x0f, sense[2])
    } else {
        (sense[2] & 0x0f, sense[12])
    };
    assert_eq!(
        (key, asc),
        (0x03, 0x11),
        "MEDIUM ERROR / UNRECOVERED READ ERROR: {sense:?}"
    );
    a.ping();
    drop(a);
    drop(d);
}

/// An idle connection gets NOP-In pings (target transfer tag set, no status); answering
/// keeps it, and an initiator that stays silent for three intervals is disconnected.
#[test]
fn idle_connections_are_pinged_and_silent_ones_closed() {
    use raidd_iscsi::pdu::{op, BHS_LEN};
    let dir = scratch();
    let members = create(dir.path(), "raid1", 2, &[]);
    let cfg = iscsi_config("raid1", &members, "").replace("nop_interval = 0", "nop_interval = 1");
    let d = Daemon::start(dir.path(), &cfg);
    let mut a = raw::Raw::login(d.iscsi.unwrap(), INITIATOR, &target_name("raid1"), false);
    let start = std::time::Instant::now();
    let (h, _) = a.recv();
    assert_eq!(h.opcode(), op::NOP_IN);
    assert_eq!(h.itt(), u32::MAX, "a target ping has no initiator task");
    let ttt = u32::from_be_bytes(h.0[20..24].try_into().unwrap());
    assert_ne!(ttt, u32::MAX);
    assert!(start.elapsed() < std::time::Duration::from_secs(5));
    // The answer: NOP-Out, immediate, ITT reserved, the ping's TTT.
    let mut n = [0u8; BHS_LEN];
    n[0] = 0x40;
    n[1] = 0x80;
    n[16..20].copy_from_slice(&u32::MAX.to_be_bytes());
    n[20..24].copy_from_slice(&ttt.to_be_bytes());
    n[24..28].copy_from_slice(&a.cmdsn.to_be_bytes());
    a.send(n, &[]);
    // Silent from now on: more pings, then the connection closes.
    let silent = std::time::Instant::now();
    while a.try_recv().is_some() {
        assert!(
            silent.elapsed() < std::time::Duration::from_secs(8),
            "still open"
        );
    }
    let waited = silent.elapsed();
    assert!(
        waited >= std::time::Duration::from_secs(2) && waited < std::time::Duration::from_secs(8),
        "closed after {waited:?}"
    );
    d.stop();
}

/// With data digests on, a PDU whose data fails its digest gets a Reject (data digest error)
/// and is dropped; the session carries on, and good digests both ways keep working.
#[test]
fn data_digest_errors_are_rejected_and_the_session_goes_on() {
    use raidd_iscsi::pdu::{op, reject, BHS_LEN};
    let dir = scratch();
    let members = create(dir.path(), "raid1", 2, &[]);
    let d = Daemon::start(dir.path(), &iscsi_config("raid1", &members, ""));
    let mut a = raw::Raw::login_with(
        d.iscsi.unwrap(),
        INITIATOR,
        &target_name("raid1"),
        true,
        true,
    );
    a.ping();
    // A NOP-Out with 8 bytes of data and a wrong data digest.
    let mut h = [0u8; BHS_LEN];
    h[0] = 0x40;
    h[1] = 0x80;
    h[7] = 8;
    h[16..20].copy_from_slice(&4242u32.to_be_bytes());
    h[20..24].copy_from_slice(&u32::MAX.to_be_bytes());
    h[24..28].copy_from_slice(&a.cmdsn.to_be_bytes());
    a.send_digests(h, b"datadata", false, true);
    let (r, data) = a.recv();
    assert_eq!((r.opcode(), r.0[2]), (op::REJECT, reject::DATA_DIGEST));
    assert_eq!(&data[..], &h[..], "the Reject carries the rejected header");
    // Reads come back with good data digests (checked by the client).
    settle(&mut a);
    let (status, got, _) = a.command_in(&[0x28, 0, 0, 0, 0, 0, 0, 0, 8, 0], 4096);
    assert_eq!((status, got.len()), (0, 4096));
    a.ping();
    drop(a);
    d.stop();
}
