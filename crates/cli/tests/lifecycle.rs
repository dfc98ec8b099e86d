//! The daemon keeps arrays redundant while they serve: members fail under a real NBD
//! client's write load (fio with crc32c verification), spares from the shared pool are
//! claimed and rebuilt under that load, the rebuilt members then serve the data alone, and
//! check finds nothing; two arrays share a pool; the admin commands and their errors; and
//! repeated SIGKILLs during writes are followed by a resync after which a check finds no
//! mismatch and every write acknowledged before a completed flush reads back.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::daemon::{array_config, create_array, fio_ok, must, run_tool, spawn_fio, tool, Daemon};
use common::{args_with, raidd, scratch, sectors, MIB};
use serde_json::Value;

/// New empty image files to serve as spares.
fn spares(dir: &Path, n: usize) -> Vec<PathBuf> {
    (0..n)
        .map(|i| {
            let p = dir.join(format!("spare{i}.img"));
            std::fs::File::create(&p)
                .unwrap()
                .set_len(32 * MIB)
                .unwrap();
            p
        })
        .collect()
}

fn spare_config(spares: &[PathBuf]) -> String {
    spares
        .iter()
        .map(|p| format!("[[spare]]\npath = {:?}\n", p.display().to_string()))
        .collect()
}

/// A program that appends each event it is called with to `events.txt`.
fn event_hook(dir: &Path) -> (PathBuf, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let log = dir.join("events.txt");
    let hook = dir.join("hook.sh");
    std::fs::write(
        &hook,
        format!(
            "#!/bin/sh\necho \"$@\" >> {:?}\n",
            log.display().to_string()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    (hook, log)
}

fn ctl(d: &Daemon) -> String {
    d.control.display().to_string()
}

fn status(d: &Daemon) -> Value {
    raidd(&["status", "--json", "--control", &ctl(d)])
        .ok()
        .json()
}

/// The status of configured array `name`.
fn array_status(d: &Daemon, name: &str) -> Value {
    let st = status(d);
    st["arrays"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == name)
        .unwrap_or_else(|| panic!("no array {name} in {st}"))["status"]
        .clone()
}

fn whole(st: &Value) -> bool {
    st["slots"]
        .as_array()
        .unwrap()
        .iter()
        .all(|s| s["state"] == "insync")
        && st["sync"].is_null()
        && st["needs_resync"] == false
}

/// Waits until `name` has every slot in sync, no pass running and no resync pending.
fn wait_whole(d: &Daemon, name: &str, limit: Duration) -> Value {
    let start = Instant::now();
    loop {
        let st = array_status(d, name);
        if whole(&st) {
            return st;
        }
        assert!(
            start.elapsed() < limit,
            "{name} not whole after {limit:?}: {st}\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn fio_args(d: &Daemon, export: &str, size: u64) -> Vec<String> {
    vec![
        "--name=load".into(),
        "--ioengine=nbd".into(),
        format!("--uri={}", d.uri(export)),
        "--rw=randwrite".into(),
        "--bs=16k".into(),
        "--iodepth=8".into(),
        format!("--size={size}"),
        "--randrepeat=1".into(),
        "--verify=crc32c".into(),
        "--verify_fatal=1".into(),
        "--output-format=terse".into(),
    ]
}

fn export_size(d: &Daemon, export: &str) -> u64 {
    must(tool("nbdinfo").args(["--size", &d.uri(export)]))
        .trim()
        .parse()
        .unwrap()
}

/// One round of the iSCSI client on the first `len` bytes of a LUN: the pattern of
/// `generation` written with qemu-img, the LUN read back, every sector of the range checked.
fn iscsi_round(dir: &Path, lun: &str, len: u64, generation: u64) {
    let input = sectors::pattern_file(dir, len, generation, 0x150);
    must(tool("qemu-img").args([
        "convert",
        "-n",
        "-f",
        "raw",
        "-O",
        "raw",
        input.to_str().unwrap(),
        lun,
    ]));
    let back = dir.join("lun-back.bin");
    let _ = std::fs::remove_file(&back);
    must(tool("qemu-img").args([
        "convert",
        "-f",
        "raw",
        "-O",
        "raw",
        lun,
        back.to_str().unwrap(),
    ]));
    let got = std::fs::read(&back).unwrap();
    let bad = raidd_engine::pattern::verify(&got[..len as usize], 0, 0x150, |_| generation);
    assert!(
        bad.is_empty(),
        "iSCSI round {generation}: {} bad sectors, first {}",
        bad.len(),
        bad[0]
    );
}

/// RAID1, RAID10, RAID5 and RAID6 (two at once): members fail while fio writes (rate-limited
/// so the load outlasts the rebuild); spares from the pool rebuild under the load; fio sees
/// no error and verifies every block; the rebuilt members then serve the data with the
/// others failed, fio verifies again, and a check finds no mismatch.
#[test]
fn members_fail_under_load_and_pool_spares_rebuild() {
    for (level, n, fail_first, fail_after) in [
        ("raid1", 2, vec![0], vec![1]),
        ("raid10", 4, vec![1], vec![0]),
        ("raid5", 4, vec![1], vec![2]),
        ("raid6", 5, vec![1, 3], vec![0, 2]),
    ] {
        let dir = scratch();
        let members = create_array(dir.path(), level, n, &[]);
        let pool = spares(dir.path(), fail_first.len());
        let (hook, events) = event_hook(dir.path());
        let cfg = format!(
            "[sync]\nspeed_min = 1000000\nspeed_max = 1000000\n[monitor]\nprogram = {:?}\n{}{}",
            hook.display().to_string(),
            spare_config(&pool),
            array_config(level, &members)
        );
        let d = Daemon::start(dir.path(), &cfg);
        let size = export_size(&d, level);
        let mut args = fio_args(&d, level, size);
        args.push("--rate=24m".into());
        let fio = spawn_fio(dir.path(), &args);
        std::thread::sleep(Duration::from_millis(700));
        for &m in &fail_first {
            let p = members[m].display().to_string();
            raidd(&["fail", level, &p, "--control", &ctl(&d)]).ok();
        }
        let st = wait_whole(&d, level, Duration::from_secs(60));
        let mut fio = fio;
        assert!(
            fio.try_wait().unwrap().is_none(),
            "{level}: the load must outlast the rebuild"
        );
        for (k, &m) in fail_first.iter().enumerate() {
            assert_eq!(
                st["slots"][m]["member"],
                pool[k].display().to_string(),
                "{level}: {st}"
            );
        }
        assert_eq!(st["last_sync"]["kind"], "recovery", "{level}: {st}");
        fio_ok(fio, level);
        let check = raidd(&["check", level, "--wait", "--control", &ctl(&d)]).ok();
        assert!(
            check.text().contains("0 mismatched sectors"),
            "{}",
            check.text()
        );
        // Now the rebuilt members must carry the data.
        for &m in &fail_after {
            let p = members[m].display().to_string();
            raidd(&["fail", level, &p, "--control", &ctl(&d)]).ok();
        }
        let mut verify = fio_args(&d, level, size);
        verify.push("--verify_only".into());
        fio_ok(
            spawn_fio(dir.path(), &verify),
            &format!("{level} rebuilt members only"),
        );
        let log = d.stop();
        assert!(log.contains("array closed cleanly"), "{log}");
        let ev = std::fs::read_to_string(&events).unwrap();
        for want in ["Fail", "DegradedArray", "RebuildStarted", "SpareActive"] {
            assert!(
                ev.contains(&format!("{want} {level}")),
                "{level}: no {want} in\n{ev}"
            );
        }
    }
}

/// `raidd replace` under fio's verified write load: the copy runs while the old member
/// still serves, fio sees no error, the new member takes the slot, the old one waits for
/// removal, a check finds nothing, and the new member then carries the data alone.
#[test]
fn replace_under_load_keeps_the_array_redundant() {
    let dir = scratch();
    let members = create_array(dir.path(), "raid5", 3, &[]);
    let new = spares(dir.path(), 1).remove(0);
    let cfg = format!(
        "[sync]\nspeed_min = 1000000\nspeed_max = 1000000\n{}",
        array_config("raid5", &members)
    );
    let d = Daemon::start(dir.path(), &cfg);
    let size = export_size(&d, "raid5");
    let mut args = fio_args(&d, "raid5", size);
    args.push("--rate=16m".into());
    let mut fio = spawn_fio(dir.path(), &args);
    std::thread::sleep(Duration::from_millis(500));
    let out = raidd(&[
        "replace",
        "raid5",
        members[1].to_str().unwrap(),
        "--with",
        new.to_str().unwrap(),
        "--wait",
        "--control",
        &ctl(&d),
    ])
    .ok()
    .text();
    assert!(out.contains("replace finished"), "{out}");
    assert!(
        fio.try_wait().unwrap().is_none(),
        "the load must outlast the copy"
    );
    let st = array_status(&d, "raid5");
    assert_eq!(st["slots"][1]["member"], new.display().to_string(), "{st}");
    assert_eq!(st["slots"][1]["state"], "insync", "{st}");
    assert_eq!(st["faulty"][0], members[1].display().to_string(), "{st}");
    fio_ok(fio, "replace");
    raidd(&[
        "remove",
        "raid5",
        members[1].to_str().unwrap(),
        "--control",
        &ctl(&d),
    ])
    .ok();
    let check = raidd(&["check", "raid5", "--wait", "--control", &ctl(&d)]).ok();
    assert!(check.text().contains(" 0 mismatched"), "{}", check.text());
    raidd(&[
        "fail",
        "raid5",
        members[0].to_str().unwrap(),
        "--control",
        &ctl(&d),
    ])
    .ok();
    let mut verify = fio_args(&d, "raid5", size);
    verify.push("--verify_only".into());
    fio_ok(spawn_fio(dir.path(), &verify), "replaced member serving");
    // Replacing needs a working member and an unused new one.
    let e = raidd(&[
        "replace",
        "raid5",
        members[0].to_str().unwrap(),
        "--with",
        members[2].to_str().unwrap(),
        "--control",
        &ctl(&d),
    ])
    .expect(4);
    assert!(e.error().contains("not working"), "{}", e.error());
    d.stop();
}

/// A rebuild held back by its speed limit does not hold the daemon up: SIGTERM stops it
/// within seconds, its progress is in the new member's superblock (mdadm --examine shows
/// the Recovery Offset), and the next start resumes and finishes it.
#[test]
fn a_crawling_rebuild_checkpoints_at_shutdown_and_resumes() {
    let dir = scratch();
    let members = create_array(dir.path(), "raid1", 2, &[]);
    let pool = spares(dir.path(), 1);
    let input = dir.path().join("in");
    let slow = format!(
        "[sync]\nspeed_min = 100\nspeed_max = 100\n{}{}",
        spare_config(&pool),
        array_config("m", &members)
    );
    let d = Daemon::start(dir.path(), &slow);
    std::fs::write(&input, common::bytes(export_size(&d, "m") as usize, 11)).unwrap();
    must(tool("nbdcopy").args([input.to_str().unwrap(), &d.uri("m")]));
    raidd(&[
        "fail",
        "m",
        members[0].to_str().unwrap(),
        "--control",
        &ctl(&d),
    ])
    .ok();
    let start = Instant::now();
    loop {
        let st = array_status(&d, "m");
        if st["sync"]["done_bytes"].as_u64().unwrap_or(0) > 0 {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "{st}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let asked = Instant::now();
    let log = d.stop();
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "stop took {:?}",
        asked.elapsed()
    );
    assert!(log.contains("recovery interrupted"), "{log}");
    let ex = must(
        std::process::Command::new("mdadm")
            .arg("--examine")
            .arg(&pool[0]),
    );
    assert!(ex.contains("Recovery Offset"), "{ex}");
    // Full speed: the rebuild resumes from its checkpoint and the data verifies.
    let fast = slow.replace(
        "speed_min = 100\nspeed_max = 100",
        "speed_min = 1000000\nspeed_max = 1000000",
    );
    let d = Daemon::start(dir.path(), &fast);
    assert!(d.log().contains("recovering in slot 0"), "{}", d.log());
    wait_whole(&d, "m", Duration::from_secs(60));
    raidd(&[
        "fail",
        "m",
        members[1].to_str().unwrap(),
        "--control",
        &ctl(&d),
    ])
    .ok();
    let out = dir.path().join("out");
    must(tool("nbdcopy").args([&d.uri("m"), out.to_str().unwrap()]));
    assert!(std::fs::read(&out).unwrap() == std::fs::read(&input).unwrap());
    d.stop();
}

/// Two arrays degrade at the same time and share a pool of two spares: both rebuild at once
/// (the speed limit keeps each rebuild long enough to overlap) and both verify through the
/// rebuilt members.
#[test]
fn two_arrays_share_a_pool_and_recover_concurrently() {
    let dir = scratch();
    let a = create_array(dir.path(), "raid5", 3, &[]);
    let b = create_array(dir.path(), "raid1", 2, &[]);
    let pool = spares(dir.path(), 2);
    let cfg = format!(
        "[sync]\nspeed_min = 8000\nspeed_max = 16000\n{}{}{}",
        spare_config(&pool),
        array_config("a", &a),
        array_config("b", &b)
    );
    let d = Daemon::start(dir.path(), &cfg);
    let mut inputs = Vec::new();
    for (name, generation) in [("a", 1u64), ("b", 2)] {
        let len = export_size(&d, name);
        let input = dir.path().join(format!("in-{name}"));
        std::fs::write(&input, common::bytes(len as usize, generation)).unwrap();
        must(tool("nbdcopy").args([input.to_str().unwrap(), &d.uri(name)]));
        inputs.push((name, input));
    }
    raidd(&["fail", "a", a[0].to_str().unwrap(), "--control", &ctl(&d)]).ok();
    raidd(&["fail", "b", b[1].to_str().unwrap(), "--control", &ctl(&d)]).ok();
    // Both passes are seen running at the same moment.
    let start = Instant::now();
    loop {
        let st = status(&d);
        let running = st["arrays"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|x| x["status"]["sync"]["kind"] == "recovery")
            .count();
        if running == 2 {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "{st}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let text = raidd(&["status", "--control", &ctl(&d)]).ok().text();
    assert!(text.contains("recovery of"), "{text}");
    wait_whole(&d, "a", Duration::from_secs(60));
    wait_whole(&d, "b", Duration::from_secs(60));
    raidd(&["fail", "a", a[1].to_str().unwrap(), "--control", &ctl(&d)]).ok();
    raidd(&["fail", "b", b[0].to_str().unwrap(), "--control", &ctl(&d)]).ok();
    for (name, input) in &inputs {
        let out = dir.path().join(format!("out-{name}"));
        must(tool("nbdcopy").args([&d.uri(name), out.to_str().unwrap()]));
        assert!(
            std::fs::read(&out).unwrap() == std::fs::read(input).unwrap(),
            "{name}: data differs after recovery"
        );
    }
    d.stop();
}

/// The admin commands: add/remove/fail/spare/idle/check/repair, with the errors a user
/// gets for wrong requests; a corruption planted on a member is counted and repaired.
/// A three-way mirror killed while written and restarted with two of its members and no
/// spare: the daemon resyncs the two copies left instead of waiting for a spare (md does the
/// same), after which it is clean; a check of it counts nothing, and the data reads back.
#[test]
fn a_degraded_mirror_is_resynced_without_a_spare() {
    let dir = scratch();
    let m = create_array(dir.path(), "raid1", 3, &[]);
    let unclean = format!("{}safe_mode_delay = \"off\"\n", array_config("m", &m));
    let d = Daemon::start(dir.path(), &unclean);
    let input = dir.path().join("in");
    std::fs::write(&input, common::bytes(export_size(&d, "m") as usize, 9)).unwrap();
    must(tool("nbdcopy").args([input.to_str().unwrap(), &d.uri("m")]));
    d.kill();
    let d = Daemon::start(dir.path(), &array_config("m", &m[1..]));
    let start = Instant::now();
    let st = loop {
        let st = array_status(&d, "m");
        if st["needs_resync"] == false && st["sync"].is_null() {
            break st;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "not resynced: {st}\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(st["last_sync"]["kind"], "resync", "{st}");
    assert_eq!(st["last_sync"]["outcome"], "finished", "{st}");
    assert_eq!(st["state"], "degraded", "{st}");
    let check = raidd(&["check", "m", "--wait", "--control", &ctl(&d)]).ok();
    assert!(check.text().contains(" 0 mismatched"), "{}", check.text());
    let got = dir.path().join("got");
    must(tool("nbdcopy").args([&d.uri("m"), got.to_str().unwrap()]));
    assert!(std::fs::read(&got).unwrap() == std::fs::read(&input).unwrap());
    d.stop();
}

/// `raidd add` of a member that was failed and removed puts it back in its own slot and,
/// with a write-intent bitmap, rebuilds only the chunks written while it was away (md's
/// re-add): the answer says so, the array is whole again, and with the other members failed
/// the re-added one alone serves everything written before and after.
#[test]
fn a_failed_member_added_back_is_rebuilt_by_its_bitmap() {
    let dir = scratch();
    let m = create_array(
        dir.path(),
        "raid1",
        2,
        &["--bitmap", "internal", "--bitmap-chunk", "1M"],
    );
    let d = Daemon::start(dir.path(), &array_config("m", &m));
    let c = ctl(&d);
    let path = |p: &PathBuf| p.display().to_string();
    let size = export_size(&d, "m") as usize;
    let first = dir.path().join("first");
    std::fs::write(&first, common::bytes(size, 3)).unwrap();
    must(tool("nbdcopy").args([first.to_str().unwrap(), &d.uri("m")]));
    raidd(&["fail", "m", &path(&m[0]), "--control", &c]).ok();
    // Written while it is away: one region of 1 MiB.
    let second = dir.path().join("second");
    let mut want = std::fs::read(&first).unwrap();
    let patch = common::bytes(1 << 20, 4);
    want[4 << 20..5 << 20].copy_from_slice(&patch);
    std::fs::write(&second, &patch).unwrap();
    let script = format!(
        "h.pwrite(open({:?}, 'rb').read(), {})",
        second.display().to_string(),
        4 << 20
    );
    must(tool("nbdsh").args(["-u", &d.uri("m"), "-c", &script]));
    raidd(&["remove", "m", &path(&m[0]), "--control", &c]).ok();
    let added = raidd(&["add", "m", &path(&m[0]), "--control", &c])
        .ok()
        .text();
    assert!(
        added.contains("in slot 0") && added.contains("re-added"),
        "{added}"
    );
    let st = wait_whole(&d, "m", Duration::from_secs(60));
    assert_eq!(st["last_sync"]["kind"], "recovery", "{st}");
    raidd(&["fail", "m", &path(&m[1]), "--control", &c]).ok();
    let got = dir.path().join("got");
    must(tool("nbdcopy").args([&d.uri("m"), got.to_str().unwrap()]));
    assert!(
        std::fs::read(&got).unwrap() == want,
        "the re-added member alone does not hold what was written"
    );
    d.stop();
}

#[test]
fn admin_commands_check_and_repair() {
    let dir = scratch();
    let m = create_array(dir.path(), "raid1", 2, &[]);
    let extra = spares(dir.path(), 2);
    let d = Daemon::start(
        dir.path(),
        &format!(
            "[sync]\nspeed_min = 1000000\nspeed_max = 1000000\n{}",
            array_config("m", &m)
        ),
    );
    let c = ctl(&d);
    let path = |p: &PathBuf| p.display().to_string();
    let input = dir.path().join("in");
    std::fs::write(&input, common::bytes(export_size(&d, "m") as usize, 7)).unwrap();
    must(tool("nbdcopy").args([input.to_str().unwrap(), &d.uri("m")]));
    // Wrong requests.
    let e = raidd(&["fail", "m", "/nonexistent.img", "--control", &c]).expect(3);
    assert!(e.error().contains("not a member"), "{}", e.error());
    let e = raidd(&["fail", "zz", &path(&m[0]), "--control", &c]).expect(3);
    assert!(e.error().contains("no array named"), "{}", e.error());
    let e = raidd(&["remove", "m", &path(&m[0]), "--control", &c]).expect(4);
    assert!(e.error().contains("fail it first"), "{}", e.error());
    let e = raidd(&["add", "m", &path(&m[1]), "--control", &c]).expect(4);
    assert!(e.error().contains("already used"), "{}", e.error());
    let e = raidd(&["spare", "add", &path(&m[1]), "--control", &c]).expect(4);
    assert!(e.error().contains("member of"), "{}", e.error());
    // A spare added to a whole array waits, with md's spare superblock.
    let out = raidd(&["add", "m", &path(&extra[0]), "--control", &c])
        .ok()
        .text();
    assert!(out.contains("as a spare"), "{out}");
    let ex = raidd(&["examine", "--json", &path(&extra[0])]).ok().json();
    assert_eq!(
        ex["members"][0]["superblock"]["device_role"], "spare",
        "{ex}"
    );
    // Check, then plant a mismatch behind the daemon's back, count it and repair it.
    let ok = raidd(&["check", "m", "--wait", "--control", &c])
        .ok()
        .text();
    assert!(
        ok.contains("check finished") && ok.contains(" 0 mismatched"),
        "{ok}"
    );
    let sb = raidd(&["examine", "--json", &path(&m[1])]).ok().json();
    let data_offset = sb["members"][0]["superblock"]["data_offset_sectors"]
        .as_u64()
        .unwrap_or_else(|| panic!("{sb}"));
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&m[1]).unwrap();
        f.write_all_at(&[0x5a; 512], (data_offset + 4096) * 512)
            .unwrap();
    }
    let bad = raidd(&["check", "m", "--wait", "--control", &c]).expect(8);
    assert!(bad.text().contains(" 8 mismatched"), "{}", bad.text());
    let fixed = raidd(&["repair", "m", "--wait", "--control", &c])
        .ok()
        .text();
    assert!(fixed.contains("repair finished"), "{fixed}");
    raidd(&["check", "m", "--wait", "--control", &c]).ok();
    let det = raidd(&["detail", "m", "--json", "--control", &c])
        .ok()
        .json();
    assert_eq!(det["array"]["last_sync"]["mismatch_sectors"], 0, "{det}");
    // Idle stops a running check.
    let d2 = &d;
    raidd(&["check", "m", "--control", &c]).ok();
    let idle = raidd(&["idle", "m", "--control", &c]).ok().text();
    assert!(
        idle.contains("stopping") || idle.contains("nothing runs"),
        "{idle}"
    );
    // Fail a member: the array's own spare is claimed and rebuilt; remove the failed one.
    raidd(&["fail", "m", &path(&m[0]), "--control", &c]).ok();
    let st = wait_whole(d2, "m", Duration::from_secs(60));
    assert_eq!(st["slots"][0]["member"], path(&extra[0]), "{st}");
    assert_eq!(st["faulty"][0], path(&m[0]), "{st}");
    raidd(&["remove", "m", &path(&m[0]), "--control", &c]).ok();
    // The pool: add, list, remove.
    raidd(&[
        "spare",
        "add",
        &path(&extra[1]),
        "--group",
        "g",
        "--control",
        &c,
    ])
    .ok();
    let text = raidd(&["status", "--control", &c]).ok().text();
    assert!(
        text.contains("spare pool:") && text.contains("(group g)"),
        "{text}"
    );
    let e = raidd(&["spare", "add", &path(&extra[1]), "--control", &c]).expect(4);
    assert!(e.error().contains("spare pool"), "{}", e.error());
    raidd(&["spare", "remove", &path(&extra[1]), "--control", &c]).ok();
    raidd(&["spare", "remove", &path(&extra[1]), "--control", &c]).expect(3);
    // The removed member can come back: it rebuilds into the free slot? No: the array is
    // whole, so it waits as a spare.
    let back = raidd(&["add", "m", &path(&m[0]), "--control", &c])
        .ok()
        .text();
    assert!(back.contains("as a spare"), "{back}");
    let out = dir.path().join("out");
    must(tool("nbdcopy").args([&d.uri("m"), out.to_str().unwrap()]));
    assert!(std::fs::read(&out).unwrap() == std::fs::read(&input).unwrap());
    d.stop();
    // Offline, the members say what happened: the claimed spare is active in slot 0.
    let ex = raidd(&["examine", "--json", &path(&extra[0])]).ok().json();
    assert_eq!(
        ex["members"][0]["superblock"]["device_role"], "Active device 0",
        "{ex}"
    );
}

/// A Python NBD client that writes 4 KiB blocks, each naming its offset and generation,
/// flushes every few writes and records in a log (fsynced) what each completed flush
/// covered. Run until the daemon disappears under it. An optional fourth argument is the
/// first block it may write.
const WRITER: &str = r#"
import nbd, os, random, struct, sys
uri, log_path, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
first = int(sys.argv[4]) if len(sys.argv) > 4 else 0
rng = random.Random(seed)
h = nbd.NBD()
h.connect_uri(uri)
blocks = h.get_size() // 4096
log = open(log_path, "a")
gen = seed * 1000000
pending = []
try:
    while True:
        for _ in range(rng.randint(1, 8)):
            gen += 1
            b = rng.randrange(first, blocks)
            h.pwrite(struct.pack("<QQ", b, gen) * 256, b * 4096)
            pending.append((b, gen))
        h.flush()
        for b, g in pending:
            log.write(f"{b} {g}\n")
        log.flush()
        os.fsync(log.fileno())
        pending = []
except Exception:
    pass
"#;

/// Reads every block the log names and checks it holds its offset and a generation no
/// older than the last one flushed there. Prints the number of blocks checked.
const CHECKER: &str = r#"
import nbd, struct, sys
uri, log_path = sys.argv[1], sys.argv[2]
want = {}
for line in open(log_path):
    parts = line.split()
    if len(parts) == 2:
        b, g = int(parts[0]), int(parts[1])
        want[b] = max(g, want.get(b, 0))
h = nbd.NBD()
h.connect_uri(uri)
for b, g in sorted(want.items()):
    data = h.pread(4096, b * 4096)
    first = data[:16]
    if data != first * 256:
        sys.exit(f"block {b}: torn or foreign data")
    ob, og = struct.unpack("<QQ", first)
    if ob != b:
        sys.exit(f"block {b}: holds block {ob}")
    if og < g:
        sys.exit(f"block {b}: generation {og} is older than the flushed {g}")
print(len(want))
"#;

/// The daemon is killed with SIGKILL during writes at seeded moments, 20 times, with two
/// arrays: a RAID5 without a bitmap (resynced whole) and a RAID6 with an internal
/// write-intent bitmap (resynced where bits are set). After each restart the resyncs run, a
/// check then finds no mismatch, and every write acknowledged before a completed flush
/// reads back.
#[test]
fn sigkill_during_writes_then_resync_loses_nothing_flushed() {
    let dir = scratch();
    let plain = create_array(dir.path(), "raid5", 4, &[]);
    let bitmap = create_array(
        dir.path(),
        "raid6",
        4,
        &["--bitmap", "internal", "--bitmap-chunk", "1M"],
    );
    let writer = dir.path().join("writer.py");
    let checker = dir.path().join("checker.py");
    std::fs::write(&writer, WRITER).unwrap();
    std::fs::write(&checker, CHECKER).unwrap();
    let arrays = ["r", "b"];
    let logs: Vec<PathBuf> = arrays
        .iter()
        .map(|a| dir.path().join(format!("flushed-{a}.log")))
        .collect();
    let cfg = format!(
        "[sync]\nspeed_min = 1000000\nspeed_max = 1000000\n{}{}",
        array_config("r", &plain),
        array_config("b", &bitmap)
    );
    let mut seed = 0x5eed_u64;
    let mut resyncs = [0; 2];
    for round in 0..20u64 {
        let d = Daemon::start(dir.path(), &cfg);
        for (k, name) in arrays.iter().enumerate() {
            // A restart after a kill resyncs before anything else is checked.
            let st = wait_whole(&d, name, Duration::from_secs(60));
            if round == 0 {
                continue;
            }
            if st["last_sync"]["kind"] == "resync" {
                resyncs[k] += 1;
            }
            let check = raidd(&["check", name, "--wait", "--control", &ctl(&d)]).ok();
            assert!(
                check.text().contains(" 0 mismatched"),
                "round {round} {name}: {}",
                check.text()
            );
            let (ok, out, err) = run_tool(tool("python3").args([
                checker.to_str().unwrap(),
                &d.uri(name),
                logs[k].to_str().unwrap(),
            ]));
            assert!(ok, "round {round} {name}: {out}{err}");
        }
        if round > 0 {
            let b = array_status(&d, "b");
            assert!(!b["bitmap"].is_null(), "{b}");
        }
        let writers: Vec<Child> = arrays
            .iter()
            .zip(&logs)
            .map(|(name, log)| {
                tool("python3")
                    .args([
                        writer.to_str().unwrap(),
                        &d.uri(name),
                        log.to_str().unwrap(),
                        &(round + 1).to_string(),
                    ])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        std::thread::sleep(Duration::from_millis(150 + seed % 400));
        d.kill();
        for mut w in writers {
            let _ = w.wait();
        }
    }
    for (k, name) in arrays.iter().enumerate() {
        assert!(
            resyncs[k] >= 15,
            "{name}: only {} of 19 restarts resynced",
            resyncs[k]
        );
        let lines = std::fs::read_to_string(&logs[k]).unwrap().lines().count();
        assert!(
            lines > 100,
            "{name}: too little progress: {lines} flushed writes"
        );
    }
}

/// Arrays with checksums killed with SIGKILL under writes at seeded moments: tag pages that
/// never reached the members are behind their blocks, so after each restart the tags are
/// suspect and re-derived in the background while the array serves (and the log says so)
/// instead of corruption being reported. With a bitmap only the regions it marks are
/// (in some round at least: a crash during the re-deriving leaves it all to do again).
/// fio's verified random writes run in each array's first half, raidd's own flushing writer
/// in the second. After every restart: no checksum error on any member, a check finds no
/// mismatch, every write fio completed before the kill passes its verify, every flushed write
/// of the other writer reads back, and the re-deriving ends. A RAID5 without a bitmap and a
/// RAID6 with one.
#[test]
fn sigkill_under_writes_with_checksums_raises_no_false_alarm() {
    let dir = scratch();
    let plain = create_array(dir.path(), "raid5", 4, &["--checksums", "crc32c"]);
    let bitmap = create_array(
        dir.path(),
        "raid6",
        4,
        &[
            "--checksums",
            "crc32c",
            "--bitmap",
            "internal",
            "--bitmap-chunk",
            "1M",
        ],
    );
    let writer = dir.path().join("writer.py");
    let checker = dir.path().join("checker.py");
    std::fs::write(&writer, WRITER).unwrap();
    std::fs::write(&checker, CHECKER).unwrap();
    let arrays = ["r", "b"];
    let logs: Vec<PathBuf> = arrays
        .iter()
        .map(|a| dir.path().join(format!("flushed-{a}.log")))
        .collect();
    let cfg = format!(
        "[sync]\nspeed_min = 1000000\nspeed_max = 1000000\n{}{}",
        array_config("r", &plain),
        array_config("b", &bitmap)
    );
    let fio_dirs: Vec<PathBuf> = arrays
        .iter()
        .map(|a| {
            let p = dir.path().join(format!("fio-{a}"));
            std::fs::create_dir(&p).unwrap();
            p
        })
        .collect();
    let mut seed = 0xc4ec_u64;
    let mut narrowed = 0;
    let mut fio_verified = 0;
    let mut halves = Vec::new();
    for round in 0..6u64 {
        let d = Daemon::start(dir.path(), &cfg);
        if halves.is_empty() {
            halves = arrays.iter().map(|a| d.export_size(a) / 2).collect();
        }
        for (k, name) in arrays.iter().enumerate() {
            let st = wait_whole(&d, name, Duration::from_secs(60));
            for slot in st["slots"].as_array().unwrap() {
                assert_eq!(
                    slot["io"]["checksum_errors"], 0,
                    "round {round} {name}: {st}"
                );
            }
            if round == 0 {
                continue;
            }
            let check = raidd(&["check", name, "--wait", "--control", &ctl(&d)]).ok();
            assert!(
                check.text().contains(" 0 mismatched"),
                "round {round} {name}: {}",
                check.text()
            );
            let (ok, out, err) = run_tool(tool("python3").args([
                checker.to_str().unwrap(),
                &d.uri(name),
                logs[k].to_str().unwrap(),
            ]));
            assert!(ok, "round {round} {name}: {out}{err}");
            // fio's writes of the round before: each it completed reads back with its
            // checksum (its saved state leaves out the one in flight at the kill).
            if fio_dirs[k].join(FIO_STATE).exists() {
                let args = fio_crash_args(&d.uri(name), halves[k], round - 1, true);
                fio_ok(
                    spawn_fio(&fio_dirs[k], &args),
                    &format!("round {round} {name}: fio verify"),
                );
                fio_verified += 1;
            }
            let st = wait_rederived(&d, name, Duration::from_secs(60));
            for slot in st["slots"].as_array().unwrap() {
                assert_eq!(
                    slot["io"]["checksum_errors"], 0,
                    "round {round} {name}: {st}"
                );
            }
        }
        let log = d.log();
        assert!(!log.contains("checksum mismatch"), "round {round}: {log}");
        if round > 0 {
            assert!(
                log.contains("checksum tags not trusted")
                    && log.contains("checksum tags re-derived from the data of"),
                "round {round}: {log}"
            );
            narrowed +=
                usize::from(log.contains("only the") && log.contains("regions the bitmap marks"));
        }
        let writers: Vec<Child> = arrays
            .iter()
            .zip(&logs)
            .enumerate()
            .map(|(k, (name, log))| {
                tool("python3")
                    .args([
                        writer.to_str().unwrap(),
                        &d.uri(name),
                        log.to_str().unwrap(),
                        &(round + 1).to_string(),
                        &(halves[k] / 4096).to_string(),
                    ])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let fios: Vec<Child> = arrays
            .iter()
            .zip(&fio_dirs)
            .zip(&halves)
            .map(|((name, at), &half)| {
                let _ = std::fs::remove_file(at.join(FIO_STATE));
                let args = fio_crash_args(&d.uri(name), half, round, false);
                spawn_fio(at, &args)
            })
            .collect();
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        std::thread::sleep(Duration::from_millis(150 + seed % 400));
        d.kill();
        for mut w in writers {
            let _ = w.wait();
        }
        for f in fios {
            let _ = f.wait_with_output();
        }
    }
    assert!(
        fio_verified >= 8,
        "fio's writes were verified after only {fio_verified} of 10 restarts"
    );
    for log in &logs {
        let lines = std::fs::read_to_string(log).unwrap().lines().count();
        assert!(lines > 30, "too little progress: {lines} flushed writes");
    }
    assert!(
        narrowed > 0,
        "the bitmap never narrowed what was re-derived"
    );
}

/// What fio saves of a write job it ends during its write phase (job `load`).
const FIO_STATE: &str = "local-load-0-verify.state";

/// fio's verified random writes over the first `half` bytes of `uri` (seeded by `round`),
/// or, with `verify`, the check of the writes that a job killed under load completed, from
/// the state it saved. One write at a time: at a greater depth fio's saved state may count a
/// write that failed in flight at the kill as done.
fn fio_crash_args(uri: &str, half: u64, round: u64, verify: bool) -> Vec<String> {
    let mut a: Vec<String> = [
        "--name=load",
        "--ioengine=nbd",
        "--rw=randwrite",
        "--bs=4k",
        "--iodepth=1",
        "--randrepeat=0",
        "--verify=crc32c",
        "--verify_fatal=1",
    ]
    .map(String::from)
    .to_vec();
    a.push(format!("--uri={uri}"));
    a.push(format!("--size={half}"));
    a.push(format!("--randseed={}", round + 1));
    if verify {
        a.extend(["--verify_only".into(), "--verify_state_load=1".into()]);
    } else {
        a.push("--verify_state_save=1".into());
    }
    a
}

/// Waits until no checksum tag of `name` is being re-derived; its status then.
fn wait_rederived(d: &Daemon, name: &str, limit: Duration) -> Value {
    let start = Instant::now();
    loop {
        let st = array_status(d, name);
        if st.get("checksums_unverified_blocks").is_none() {
            return st;
        }
        assert!(
            start.elapsed() < limit,
            "{name}: tags still being re-derived after {limit:?}: {st}\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The write hole closed where it opens: a RAID5 with md's partial parity log, one member
/// missing, is killed with SIGKILL under writes at seeded moments. Each restart starts the
/// dirty degraded array at once (without the log md and raidd refuse it), recovers parity
/// from the log first (its status says what it applied), and every write acknowledged
/// before a completed flush reads back, on the missing member's chunks too.
#[test]
fn sigkill_while_degraded_with_the_partial_parity_log_loses_nothing_flushed() {
    let dir = scratch();
    let all = create_array(dir.path(), "raid5", 4, &["--consistency-policy", "ppl"]);
    let present = &all[..3];
    let writer = dir.path().join("writer.py");
    let checker = dir.path().join("checker.py");
    std::fs::write(&writer, WRITER).unwrap();
    std::fs::write(&checker, CHECKER).unwrap();
    let log = dir.path().join("flushed-p.log");
    let cfg = array_config("p", present);
    let mut seed = 0x0041_u64;
    let mut recovered = 0;
    for round in 0..10u64 {
        let d = Daemon::start(dir.path(), &cfg);
        let st = array_status(&d, "p");
        assert_eq!(st["state"], "degraded", "round {round}: {st}");
        assert_eq!(st["consistency_policy"], "ppl", "round {round}: {st}");
        if round > 0 {
            let r = &st["ppl_recovered"];
            assert!(
                r.is_object(),
                "round {round}: an unclean start recovers: {st}"
            );
            assert_eq!(r["not_applied"], 0, "round {round}: {st}");
            recovered += r["entries"].as_u64().unwrap();
            let (ok, out, err) = run_tool(tool("python3").args([
                checker.to_str().unwrap(),
                &d.uri("p"),
                log.to_str().unwrap(),
            ]));
            assert!(ok, "round {round}: {out}{err}\n{}", d.log());
        }
        let mut w = tool("python3")
            .args([
                writer.to_str().unwrap(),
                &d.uri("p"),
                log.to_str().unwrap(),
                &(round + 1).to_string(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        std::thread::sleep(Duration::from_millis(150 + seed % 400));
        d.kill();
        let _ = w.wait();
    }
    assert!(recovered > 0, "the restarts recovered entries from the log");
    let lines = std::fs::read_to_string(&log).unwrap().lines().count();
    assert!(lines > 50, "too little progress: {lines} flushed writes");
}

/// The write hole closed with md's write journal: a RAID6 with a journal, one member
/// missing, is killed with SIGKILL under writes at seeded moments, in write-through and in
/// write-back mode (set in the configuration, or switched on while serving). The array
/// stays clean (md keeps a journal array clean), so each restart starts it at once, replays
/// the log first (its status says what), and every write acknowledged before a completed
/// flush reads back, on the missing member's chunks too.
#[test]
fn sigkill_while_degraded_with_the_write_journal_loses_nothing_flushed() {
    let dir = scratch();
    let journal = dir.path().join("journal.img");
    let j = journal.display().to_string();
    let all = create_array(
        dir.path(),
        "raid6",
        5,
        &["--chunk", "64K", "--write-journal", &j],
    );
    let mut present: Vec<PathBuf> = all[..4].to_vec();
    present.push(journal);
    let (writer, checker) = (dir.path().join("writer.py"), dir.path().join("checker.py"));
    std::fs::write(&writer, WRITER).unwrap();
    std::fs::write(&checker, CHECKER).unwrap();
    let log = dir.path().join("flushed-j.log");
    // Every block a completed flush covered reads back.
    let check = |d: &Daemon| {
        let (ok, out, err) = run_tool(tool("python3").args([
            checker.to_str().unwrap(),
            &d.uri("j"),
            log.to_str().unwrap(),
        ]));
        assert!(ok, "{out}{err}\n{}", d.log());
    };
    let cfg = array_config("j", &present);
    let write_back = format!("{cfg}journal_mode = \"write-back\"\n");
    let mut seed = 0x0051_u64;
    let (mut replayed, mut replayed_pages) = (0, 0);
    // Rounds in write-through mode, in write-back set by the configuration, and in
    // write-back switched on while serving (`raidd grow --journal-mode`).
    for round in 0..6u64 {
        let d = Daemon::start(dir.path(), if round % 3 == 1 { &write_back } else { &cfg });
        if round % 3 == 2 {
            raidd(&[
                "grow",
                "--array",
                "j",
                "--journal-mode",
                "write-back",
                "--control",
                &ctl(&d),
            ])
            .ok();
        }
        let st = array_status(&d, "j");
        assert_eq!(st["state"], "degraded", "round {round}: {st}");
        assert_eq!(st["consistency_policy"], "journal", "round {round}: {st}");
        assert_eq!(st["journal"]["state"], "active", "round {round}: {st}");
        let mode = if round % 3 == 0 {
            "write-through"
        } else {
            "write-back"
        };
        assert_eq!(st["journal"]["mode"], mode, "round {round}: {st}");
        let r = &st["journal"]["recovered"];
        assert_eq!(r["skipped"], 0, "round {round}: {st}");
        replayed += r["rows"].as_u64().unwrap();
        replayed_pages += r["data_pages"].as_u64().unwrap();
        if round > 0 {
            check(&d);
        }
        let mut w = tool("python3")
            .args([
                writer.to_str().unwrap(),
                &d.uri("j"),
                log.to_str().unwrap(),
                &(round + 1).to_string(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        std::thread::sleep(Duration::from_millis(150 + seed % 400));
        d.kill();
        let _ = w.wait();
    }
    assert!(replayed > 0, "the restarts replayed rows from the journal");
    assert!(
        replayed_pages > 0,
        "the restarts replayed pages the write-back cache held"
    );
    let lines = std::fs::read_to_string(&log).unwrap().lines().count();
    assert!(lines > 30, "too little progress: {lines} flushed writes");
    // The mode lives in the running array alone (md keeps none on the members): offline
    // there is nothing to switch.
    let offline = raidd(&args_with(
        &["grow", "--journal-mode", "write-back"],
        &present,
    ))
    .expect(2);
    assert!(
        offline.error().contains("served array"),
        "{}",
        offline.error()
    );
    // A clean start and stop with the journal first: in write-back mode acknowledged writes
    // may be in the journal alone, and the replay puts them on the members.
    let d = Daemon::start(dir.path(), &cfg);
    check(&d);
    d.stop();
    // Served without its journal the array is read-only; `raidd add --journal` gives it a
    // new one and it takes writes again, over NBD and over iSCSI (whose LUN says write
    // protected, then not, as the array is).
    let iscsi = "[iscsi]\nlisten = \"127.0.0.1:0\"\nstate_dir = \"state\"\nnop_interval = 0\n";
    let d = Daemon::start(
        dir.path(),
        &format!("{iscsi}{}", array_config("j", &all[..4])),
    );
    let st = array_status(&d, "j");
    assert_eq!(st["read_only"], true, "{st}");
    assert_eq!(st["journal"]["state"], "missing", "{st}");
    let lun = d.iscsi_url("", "iqn.2026-11.org.raidd:j", 0);
    // A block no flushed write named (the checker reads those): the writes after it do
    // log what they put there.
    let named: std::collections::HashSet<u64> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect();
    let free = (0u64..).find(|b| !named.contains(b)).unwrap();
    let write = format!("write -P 0x5a {} 4k", free * 4096);
    let iscsi_write = || run_tool(tool("qemu-io").args(["-f", "raw", "-c", &write, &lun]));
    let (ok, out, err) = iscsi_write();
    assert!(
        !ok,
        "a write through iSCSI to a read-only array: {out}{err}"
    );
    let fresh = dir.path().join("journal2.img");
    std::fs::File::create(&fresh)
        .unwrap()
        .set_len(24 << 20)
        .unwrap();
    let f = fresh.display().to_string();
    raidd(&["add", "j", &f, "--journal", "--control", &ctl(&d)]).ok();
    let st = array_status(&d, "j");
    assert_eq!(st["read_only"], false, "{st}");
    assert_eq!(st["journal"]["state"], "active", "{st}");
    assert_eq!(st["journal"]["member"], f.as_str(), "{st}");
    let (ok, out, err) = iscsi_write();
    assert!(
        ok,
        "a write through iSCSI once the journal is back: {out}{err}"
    );
    let lines = || std::fs::read_to_string(&log).map_or(0, |t| t.lines().count());
    let before = lines();
    let mut w = tool("python3")
        .args([
            writer.to_str().unwrap(),
            &d.uri("j"),
            log.to_str().unwrap(),
            "99",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while lines() < before + 10 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = w.kill();
    let _ = w.wait();
    assert!(lines() >= before + 10, "writes go on with the new journal");
    check(&d);
    d.stop();
}

/// `raidd grow --array` switches a served RAID5 made without a log to md's partial parity
/// log while a client writes over NBD; a SIGKILL under that load is then recovered from the
/// log (no resync, every flushed write reads back); and the log is switched off again.
#[test]
fn the_partial_parity_log_is_switched_on_while_serving_and_holds_a_sigkill() {
    let dir = scratch();
    let all = create_array(dir.path(), "raid5", 4, &[]);
    let (writer, checker) = (dir.path().join("writer.py"), dir.path().join("checker.py"));
    std::fs::write(&writer, WRITER).unwrap();
    std::fs::write(&checker, CHECKER).unwrap();
    let log = dir.path().join("flushed.log");
    let cfg = array_config("g", &all);
    let d = Daemon::start(dir.path(), &cfg);
    assert_eq!(array_status(&d, "g")["consistency_policy"], "resync");
    let write = |d: &Daemon, seed: u64| {
        tool("python3")
            .args([
                writer.to_str().unwrap(),
                &d.uri("g"),
                log.to_str().unwrap(),
                &seed.to_string(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut w = write(&d, 1);
    let switched = raidd(&[
        "grow",
        "--json",
        "--array",
        "g",
        "--consistency-policy",
        "ppl",
        "--control",
        &ctl(&d),
    ])
    .ok()
    .json();
    assert_eq!(switched["consistency_policy"]["to"], "ppl", "{switched}");
    assert_eq!(array_status(&d, "g")["consistency_policy"], "ppl");
    // Writes go on under the log until the kill.
    let lines = || std::fs::read_to_string(&log).map_or(0, |t| t.lines().count());
    let at_switch = lines();
    let deadline = Instant::now() + Duration::from_secs(60);
    while lines() < at_switch + 20 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(lines() >= at_switch + 20, "writes went on after the switch");
    d.kill();
    let _ = w.wait();
    let d = Daemon::start(dir.path(), &cfg);
    let st = array_status(&d, "g");
    assert_eq!(st["consistency_policy"], "ppl", "{st}");
    assert!(st["ppl_recovered"].is_object(), "{st}");
    assert_eq!(st["ppl_recovered"]["not_applied"], 0, "{st}");
    assert_eq!(st["needs_resync"], false, "{st}");
    let (ok, out, err) = run_tool(tool("python3").args([
        checker.to_str().unwrap(),
        &d.uri("g"),
        log.to_str().unwrap(),
    ]));
    assert!(ok, "{out}{err}\n{}", d.log());
    // Off again, served, with writes running; the superblocks keep it.
    w = write(&d, 2);
    raidd(&[
        "grow",
        "--array",
        "g",
        "--consistency-policy",
        "resync",
        "--control",
        &ctl(&d),
    ])
    .ok();
    let at_switch = lines();
    while lines() < at_switch + 10 && Instant::now() < deadline + Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = w.kill();
    let _ = w.wait();
    assert!(lines() >= at_switch + 10, "writes went on after the switch");
    assert_eq!(array_status(&d, "g")["consistency_policy"], "resync");
    d.stop();
    let detail = raidd(&args_with(&["detail"], &all)).ok().text();
    assert!(detail.contains("Consistency Policy : resync"), "{detail}");
}

/// `raidd create --group` makes seed 003's pool: a RAID0 over two RAID5 groups of four
/// images. `detail` shows the tree offline; `raidd serve` assembles it from its eight leaf
/// members; under fio's verified writes over NBD a member of each group is failed, the
/// shared spare pool rebuilds both groups while the load goes on, fio verifies every block,
/// and `check` on the pool checks both groups and finds nothing.
#[test]
fn a_pool_of_two_raid5_groups_is_made_served_and_rebuilt() {
    let dir = scratch();
    let d0 = dir.path();
    let leaf = |g: &str, i: usize| d0.join(format!("{g}{i}.img"));
    let group = |g: &str| {
        let list: Vec<String> = (0..4).map(|i| leaf(g, i).display().to_string()).collect();
        format!("raid5:{}", list.join(","))
    };
    let made = raidd(&[
        "create",
        "--level",
        "raid0",
        "--name",
        "pool",
        "--size",
        "24M",
        "--group-chunk",
        "64K",
        "--group",
        &group("a"),
        "--group",
        &format!("second={}", group("b")),
        "--json",
    ])
    .ok()
    .json();
    assert_eq!(made["array"]["level"], "raid0", "{made}");
    assert_eq!(
        made["array"]["slots"][0]["array"]["name"], "pool-0",
        "{made}"
    );
    assert_eq!(
        made["array"]["slots"][1]["array"]["name"], "second",
        "{made}"
    );
    assert_eq!(
        made["array"]["slots"][1]["array"]["chunk_bytes"], 65536,
        "{made}"
    );
    let leaves: Vec<PathBuf> = ["a", "b"]
        .iter()
        .flat_map(|g| (0..4).map(move |i| leaf(g, i)))
        .collect();
    // Offline, from the leaves alone, in any order.
    let mut shuffled = leaves.clone();
    shuffled.reverse();
    let text = raidd(&common::args_with(&["detail"], &shuffled))
        .ok()
        .text();
    assert!(
        text.contains("pool (raid0") && text.contains("second (raid5"),
        "{text}"
    );

    let spare = spares(d0, 2);
    let iqn = "iqn.2026-11.org.raidd:pool";
    let cfg = format!(
        "[sync]\nspeed_min = 1000000\nspeed_max = 1000000\n{}{}\
         [iscsi]\nlisten = \"127.0.0.1:0\"\nstate_dir = \"state\"\n\
         [[target]]\nname = \"{iqn}\"\n[[target.lun]]\narray = \"pool\"\n",
        array_config("pool", &leaves),
        spare_config(&spare)
    );
    let d = Daemon::start(d0, &cfg);
    let size = export_size(&d, "pool");
    let half = size / 2 / MIB * MIB;
    // fio's verified writes over the pool's second half through NBD, paced to outlast
    // both rebuilds; the first half is the iSCSI client's.
    let mut args = fio_args(&d, "pool", size - half);
    args.push(format!("--offset={half}"));
    args.push("--rate=8m".into());
    let mut fio = spawn_fio(d0, &args);
    // The members fail once fio's writes are reaching the pool.
    let start = Instant::now();
    while array_status(&d, "pool")["counters"]["writes"].as_u64() == Some(0) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "fio wrote nothing"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    for m in [leaf("a", 1), leaf("b", 2)] {
        raidd(&["fail", "pool", m.to_str().unwrap(), "--control", &ctl(&d)]).ok();
    }
    // Both groups rebuilt onto the pool's spares while the pool serves; meanwhile the
    // iSCSI client writes its half and reads it back, a generation a round.
    let lun = d.iscsi_url("", iqn, 0);
    let mut generation = 0;
    let start = Instant::now();
    loop {
        generation += 1;
        iscsi_round(d0, &lun, half, generation);
        let j = raidd(&["detail", "pool", "--json", "--control", &ctl(&d)])
            .ok()
            .json();
        let groups: Vec<&Value> = (0..2).map(|k| &j["array"]["slots"][k]["array"]).collect();
        let rebuilt = groups.iter().all(|g| {
            g["slots"]
                .as_array()
                .unwrap()
                .iter()
                .all(|s| s["state"] == "insync")
                && g["sync"].is_null()
                && g["faulty"].as_array().is_some_and(|f| f.len() == 1)
        });
        if rebuilt {
            let on: Vec<&str> = groups
                .iter()
                .flat_map(|g| g["slots"].as_array().unwrap())
                .filter_map(|s| s["member"].as_str())
                .collect();
            assert!(
                spare.iter().all(|s| on.contains(&s.to_str().unwrap())),
                "both spares in use: {on:?}"
            );
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "not rebuilt: {j}\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Once more on the rebuilt groups, with fio still writing.
    iscsi_round(d0, &lun, half, generation + 1);
    assert!(
        fio.try_wait().unwrap().is_none(),
        "the load must outlast the rebuilds"
    );
    fio_ok(fio, "the pool while two groups rebuilt");
    let check = raidd(&["check", "pool", "--wait", "--control", &ctl(&d)]).ok();
    let said = check.text();
    assert!(
        said.contains("pool-0") && said.contains("second"),
        "both groups checked: {said}"
    );
    // One line per group, named after it, each with nothing found.
    for group in ["pool-0", "second"] {
        assert!(
            said.lines()
                .any(|l| l.starts_with(&format!("{group}: check finished"))
                    && l.ends_with(" 0 mismatched sectors")),
            "{said}"
        );
    }
    assert_eq!(said.matches(" 0 mismatched sectors").count(), 2, "{said}");
    assert_eq!(said.matches("mismatched").count(), 2, "{said}");
    d.stop();
}

/// An array named by UUID in the config (as `raidd config scan` prints it) keeps serving
/// across restarts with no config edit: after a member fails and a new disk is added and
/// rebuilt, and after a member file is renamed, the next start finds the current members by
/// their superblocks, leaves the failed one out as stale, and every sector written reads
/// back.
#[test]
fn an_array_named_by_uuid_is_found_after_a_rebuild_and_a_moved_disk_with_no_config_edit() {
    let dir = scratch();
    let disks = dir.path().join("disks");
    std::fs::create_dir(&disks).unwrap();
    let m = create_array(&disks, "raid5", 3, &["--bitmap", "internal"]);
    let new = disks.join("new.img");
    std::fs::File::create(&new)
        .unwrap()
        .set_len(32 * MIB)
        .unwrap();
    let uuid = raidd(&["examine", "--json", m[0].to_str().unwrap()])
        .ok()
        .json()["members"][0]["superblock"]["array_uuid"]
        .as_str()
        .unwrap()
        .to_string();
    let pattern = format!("{}/*.img", disks.display());
    let scanned = raidd(&["config", "scan", &pattern]).ok().text();
    assert!(
        scanned.contains(&format!("uuid = \"{uuid}\"")) && scanned.contains("name = \"raid5\""),
        "{scanned}"
    );
    let cfg = format!("{scanned}\n[sync]\nspeed_min = 1000000\nspeed_max = 1000000\n");
    let d = Daemon::start(dir.path(), &cfg);
    let len = export_size(&d, "raid5");
    d.write_pattern("raid5", dir.path(), len, 1, 7);
    let path = |p: &PathBuf| p.display().to_string();
    raidd(&["fail", "raid5", &path(&m[1]), "--control", &ctl(&d)]).ok();
    raidd(&["remove", "raid5", &path(&m[1]), "--control", &ctl(&d)]).ok();
    let added = raidd(&["add", "raid5", &path(&new), "--control", &ctl(&d)])
        .ok()
        .text();
    assert!(!added.contains("note:"), "under the scan patterns: {added}");
    let st = wait_whole(&d, "raid5", Duration::from_secs(60));
    assert_eq!(st["slots"][1]["member"], path(&new), "{st}");
    d.stop();

    // The disk in slot 0 moves; the failed one stays where it was, with its old superblock.
    let moved = disks.join("moved.img");
    std::fs::rename(&m[0], &moved).unwrap();
    let d = Daemon::start(dir.path(), &cfg);
    let st = wait_whole(&d, "raid5", Duration::from_secs(60));
    let slots: Vec<&str> = st["slots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["member"].as_str().unwrap())
        .collect();
    assert_eq!(slots, [path(&moved), path(&new), path(&m[2])], "{st}");
    let log = d.log();
    assert!(
        log.contains(&path(&m[1])) && log.contains("stale"),
        "the failed member is left out as stale:\n{log}"
    );
    let out = dir.path().join("got");
    must(tool("nbdcopy").args([&d.uri("raid5"), out.to_str().unwrap()]));
    sectors::verify_file(&out, 1, 7, "after the rebuild and the move");
    d.stop();

    // With no member under the patterns the array is not started, and the log says why.
    for p in [&moved, &new, &m[1], &m[2]] {
        std::fs::rename(p, p.with_extension("old")).unwrap();
    }
    let log = Daemon::try_start(dir.path(), &cfg)
        .err()
        .unwrap_or_default();
    assert!(
        log.contains(&format!("no member carrying its uuid {uuid}")),
        "{log}"
    );
}

/// A pool (RAID0 over two RAID5 groups) named by UUID: `config scan` prints it as one array
/// with its inner arrays, and the daemon assembles it from what it finds, also after its
/// member files are renamed.
#[test]
fn a_pool_named_by_uuid_is_found_through_its_inner_arrays() {
    let dir = scratch();
    let disks = dir.path().join("disks");
    std::fs::create_dir(&disks).unwrap();
    let group = |n: &str| {
        let m: Vec<String> = (0..3)
            .map(|i| disks.join(format!("{n}{i}.img")).display().to_string())
            .collect();
        format!("raid5:{}", m.join(","))
    };
    raidd(&[
        "create",
        "--level",
        "raid0",
        "--name",
        "pool",
        "--size",
        "8M",
        "--group",
        &group("a"),
        "--group",
        &group("b"),
    ])
    .ok();
    let pattern = format!("{}/*.img", disks.display());
    let scanned = raidd(&["config", "scan", &pattern]).ok().text();
    assert_eq!(scanned.matches("[[array]]").count(), 1, "{scanned}");
    assert!(
        scanned.contains("name = \"pool\"") && scanned.contains("inner = ["),
        "{scanned}"
    );
    let j = raidd(&["config", "scan", "--json", &pattern]).ok().json();
    assert_eq!(j["arrays"][0]["inner"].as_array().unwrap().len(), 2, "{j}");
    assert_eq!(
        j["arrays"][0]["members"].as_array().unwrap().len(),
        6,
        "{j}"
    );
    let d = Daemon::start(dir.path(), &scanned);
    let len = export_size(&d, "pool");
    d.write_pattern("pool", dir.path(), len, 3, 11);
    d.stop();
    for i in 0..3 {
        let from = disks.join(format!("a{i}.img"));
        std::fs::rename(&from, disks.join(format!("renamed-a{i}.img"))).unwrap();
    }
    let d = Daemon::start(dir.path(), &scanned);
    assert_eq!(export_size(&d, "pool"), len);
    let out = dir.path().join("got");
    must(tool("nbdcopy").args([&d.uri("pool"), out.to_str().unwrap()]));
    sectors::verify_file(&out, 3, 11, "the pool after its members were renamed");
    d.stop();
}
