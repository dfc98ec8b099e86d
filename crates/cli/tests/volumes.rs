//! Volumes (GPT partitions of an array) end to end: made, resized and deleted offline and
//! through the daemon; addressed by `read|write|pattern --volume`; served at once as NBD
//! exports and an iSCSI LUN, each client verifying its own volume under concurrent load
//! while writes stay inside their volume; bad tables and missing volumes refused with
//! nothing changed.
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::path::{Path, PathBuf};

use common::daemon::{array_config, create_array, fio_ok, must, spawn_fio, tool, Daemon};
use common::*;
use serde_json::Value;

const SEED: u64 = 0x7e57;
const IQN: &str = "iqn.2026-11.org.raidd:volumes";

fn volume(args: &[&str], members: &[PathBuf]) -> Run {
    let mut a = vec!["volume"];
    a.extend_from_slice(args);
    raidd(&args_with(&a, members))
}

fn list(members: &[PathBuf]) -> Value {
    volume(&["list", "--json"], members).ok().json()
}

/// `raidd pattern VERB --volume NAME` over the whole volume; the run, for its exit code.
fn pattern(verb: &str, vol: &str, generation: u64, members: &[PathBuf]) -> Run {
    let (g, s) = (generation.to_string(), SEED.to_string());
    raidd(&args_with(
        &[
            "pattern",
            verb,
            "--volume",
            vol,
            "--generation",
            &g,
            "--seed",
            &s,
        ],
        members,
    ))
}

/// A RAID5 over four members with volumes of 16 MiB named alpha, beta and gamma.
fn three_volumes(dir: &Path) -> Vec<PathBuf> {
    let m = create_array(dir, "raid5", 4, &["--chunk", "64K"]);
    for name in ["alpha", "beta", "gamma"] {
        volume(&["create", "--name", name, "--size", "16M"], &m).ok();
    }
    m
}

#[test]
fn volumes_are_addressed_from_their_start_and_nothing_reaches_past_their_end() {
    let dir = scratch();
    let m = three_volumes(dir.path());
    let l = list(&m);
    let offsets: Vec<u64> = (0..3)
        .map(|i| l["volumes"][i]["offset_bytes"].as_u64().unwrap())
        .collect();
    assert_eq!(offsets, [MIB, 17 * MIB, 33 * MIB], "{l}");
    for (k, name) in ["alpha", "beta", "gamma"].iter().enumerate() {
        pattern("write", name, 10 + k as u64, &m).ok();
    }
    // beta, written whole from a file: its neighbours keep every sector.
    let input = sectors::pattern_file(dir.path(), 16 * MIB, 20, SEED);
    raidd(&args_with(
        &[
            "write",
            "--volume",
            "beta",
            "--input",
            input.to_str().unwrap(),
        ],
        &m,
    ))
    .ok();
    pattern("verify", "alpha", 10, &m).ok();
    pattern("verify", "2", 20, &m).ok();
    pattern("verify", "gamma", 12, &m).ok();
    // The volume's bytes are the array's at its offset.
    let whole = dir.path().join("whole.bin");
    let off = (17 * MIB).to_string();
    raidd(&args_with(
        &[
            "read",
            "--offset",
            &off,
            "--length",
            "16M",
            "--output",
            whole.to_str().unwrap(),
        ],
        &m,
    ))
    .ok();
    sectors::verify_file(&whole, 20, SEED, "beta through the whole array");
    let through = dir.path().join("beta.bin");
    let j = raidd(&args_with(
        &[
            "read",
            "--volume",
            "beta",
            "--output",
            through.to_str().unwrap(),
            "--json",
        ],
        &m,
    ))
    .ok()
    .json();
    assert_eq!(
        (j["volume"].as_str(), j["bytes"].as_u64()),
        (Some("beta"), Some(16 * MIB))
    );
    assert_eq!(
        std::fs::read(&whole).unwrap(),
        std::fs::read(&through).unwrap()
    );
    // Past the end: refused before anything is written, usage errors.
    let big = sectors::pattern_file(dir.path(), 17 * MIB, 30, SEED);
    for args in [
        vec![
            "write",
            "--volume",
            "alpha",
            "--input",
            big.to_str().unwrap(),
        ],
        vec![
            "write",
            "--volume",
            "alpha",
            "--offset",
            "16M",
            "--input",
            input.to_str().unwrap(),
        ],
        vec![
            "pattern", "write", "--volume", "alpha", "--offset", "15M", "--length", "2M",
        ],
        vec![
            "read",
            "--volume",
            "alpha",
            "--offset",
            "16M",
            "--length",
            "512",
            "--output",
            "/dev/null",
        ],
    ] {
        let e = raidd(&args_with(&args, &m)).expect(2);
        assert!(
            e.error().contains("past the end of volume raid5/alpha")
                || e.error().contains("beyond the end of volume raid5/alpha"),
            "{args:?}: {}",
            e.error()
        );
    }
    for (vol, g) in [("alpha", 10), ("beta", 20), ("gamma", 12)] {
        pattern("verify", vol, g, &m).ok();
    }
    // A volume that is not there.
    let e = pattern("verify", "delta", 1, &m).expect(3);
    assert!(
        e.error().contains("no volume \"delta\"") && e.error().contains("3 \"gamma\""),
        "{}",
        e.error()
    );
    assert!(pattern("verify", "9", 1, &m)
        .expect(3)
        .error()
        .contains("no volume 9"));

    // Resize: beta cannot grow into gamma; gamma grows into the free space after it; a
    // smaller size needs --shrink, and the data before the new end stays.
    let e = volume(&["resize", "--name", "beta", "--size", "17M"], &m).expect(2);
    assert!(
        e.error().contains("can grow to 16777216 bytes at most"),
        "{}",
        e.error()
    );
    let grown = volume(
        &["resize", "--name", "gamma", "--size", "24M", "--json"],
        &m,
    )
    .ok()
    .json();
    assert_eq!(
        (grown["offset_bytes"].as_u64(), grown["size_bytes"].as_u64()),
        (Some(33 * MIB), Some(24 * MIB))
    );
    let e = volume(&["resize", "--name", "alpha", "--size", "8M"], &m).expect(2);
    assert!(e.error().contains("--shrink"), "{}", e.error());
    volume(
        &["resize", "--name", "alpha", "--size", "8M", "--shrink"],
        &m,
    )
    .ok();
    let (g, s) = ("10".to_string(), SEED.to_string());
    raidd(&args_with(
        &[
            "pattern",
            "verify",
            "--volume",
            "alpha",
            "--generation",
            &g,
            "--seed",
            &s,
        ],
        &m,
    ))
    .ok();
    let l = list(&m);
    assert_eq!(l["volumes"][0]["size_bytes"], 8 * MIB, "{l}");
    // Delete: the data stays where it was, the table no longer lists it.
    volume(&["delete", "--name", "alpha"], &m).ok();
    let l = list(&m);
    let names: Vec<&str> = l["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["beta", "gamma"], "{l}");
    pattern("verify", "beta", 20, &m).ok();
    // detail shows the volumes too.
    let d = raidd(&args_with(&["detail", "--json"], &m)).ok().json();
    assert_eq!(d["volumes"]["volumes"][1]["name"], "gamma", "{d}");
    let text = raidd(&args_with(&["detail"], &m)).ok().text();
    assert!(
        text.contains("volume 1 \"beta\": 16.00 MiB at 17.00 MiB"),
        "{text}"
    );
}

fn fio_args(d: &Daemon, export: &str, size: u64, verify_only: bool) -> Vec<String> {
    let mut a: Vec<String> = vec![
        format!("--name={export}"),
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
    ];
    if verify_only {
        a.push("--verify_only".into());
    }
    a
}

fn qemu(args: &[&str]) {
    must(tool("qemu-img").args(args));
}

fn served_config(m: &[PathBuf]) -> String {
    format!(
        "{}[[export]]\nname = \"a\"\narray = \"raid5\"\nvolume = \"alpha\"\n\
         [[export]]\nname = \"b\"\narray = \"raid5\"\nvolume = 2\n\
         [iscsi]\nlisten = \"127.0.0.1:0\"\nstate_dir = \"state\"\n\
         [[target]]\nname = \"{IQN}\"\n[[target.lun]]\narray = \"raid5\"\nvolume = \"gamma\"\n",
        array_config("raid5", m)
    )
}

#[test]
fn three_volumes_are_served_at_once_each_client_confined_to_its_own() {
    let dir = scratch();
    let d0 = dir.path();
    let m = three_volumes(d0);
    let d = Daemon::start(d0, &served_config(&m));
    assert_eq!(d.export_size("a"), 16 * MIB);
    assert_eq!(d.export_size("b"), 16 * MIB);
    let lun = d.iscsi_url("", IQN, 0);
    let st = d.status();
    let vols = &st["arrays"][0]["volumes"]["volumes"];
    assert_eq!(
        vols[0]["served_as"],
        serde_json::json!(["export a"]),
        "{st}"
    );
    assert_eq!(
        vols[2]["served_as"],
        serde_json::json!([format!("LUN 0 of {IQN}")]),
        "{st}"
    );
    assert_eq!(st["arrays"][0]["exports"][1]["volume"], "beta", "{st}");
    assert_eq!(
        st["iscsi"]["targets"][0]["luns"][0]["volume"], "gamma",
        "{st}"
    );

    // Both NBD clients write and verify their whole volume while the iSCSI client writes
    // and reads back its own, round after round.
    let fa = spawn_fio(d0, &fio_args(&d, "a", 16 * MIB, false));
    let fb = spawn_fio(d0, &fio_args(&d, "b", 16 * MIB, false));
    let mut fios = [Some(fa), Some(fb)];
    let mut generation = 0;
    let back = d0.join("lun.bin");
    while generation < 2 || fios.iter().any(Option::is_some) {
        generation += 1;
        let input = sectors::pattern_file(d0, 16 * MIB, generation, SEED);
        qemu(&[
            "convert",
            "-n",
            "-f",
            "raw",
            "-O",
            "raw",
            input.to_str().unwrap(),
            &lun,
        ]);
        let _ = std::fs::remove_file(&back);
        qemu(&[
            "convert",
            "-f",
            "raw",
            "-O",
            "raw",
            &lun,
            back.to_str().unwrap(),
        ]);
        sectors::verify_file(
            &back,
            generation,
            SEED,
            "the LUN's volume as its client reads it",
        );
        for (f, name) in fios.iter_mut().zip(["a", "b"]) {
            if f.as_mut().is_some_and(|c| c.try_wait().unwrap().is_some()) {
                fio_ok(f.take().unwrap(), &format!("export {name}"));
            }
        }
        assert!(generation < 200, "fio did not finish");
    }
    let last = generation;
    d.stop();
    // Each volume holds exactly what its own client wrote last: fio's blocks (checked
    // again by a fresh daemon) and the LUN's pattern.
    let d = Daemon::start(d0, &served_config(&m));
    for e in ["a", "b"] {
        fio_ok(
            spawn_fio(d0, &fio_args(&d, e, 16 * MIB, true)),
            &format!("export {e}, read again"),
        );
    }
    d.stop();
    pattern("verify", "gamma", last, &m).ok();
    // The table the three sit in was not touched either.
    assert_eq!(list(&m)["volumes"].as_array().unwrap().len(), 3);
}

#[test]
fn the_daemon_changes_volumes_but_never_one_it_serves() {
    let dir = scratch();
    let d0 = dir.path();
    let m = three_volumes(d0);
    let d = Daemon::start(d0, &served_config(&m));
    let ctl = d.control.display().to_string();
    let on = |args: &[&str]| {
        let mut a = vec!["volume"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["--array", "raid5", "--control", &ctl]);
        raidd(&a)
    };
    let made = on(&["create", "--name", "delta", "--size", "8M", "--json"])
        .ok()
        .json();
    assert_eq!(
        (made["number"].as_u64(), made["offset_bytes"].as_u64()),
        (Some(4), Some(49 * MIB))
    );
    on(&["resize", "--name", "delta", "--size", "12M"]).ok();
    for args in [
        vec!["resize", "--name", "alpha", "--size", "8M", "--shrink"],
        vec!["delete", "--name", "beta"],
        vec!["delete", "--name", "gamma"],
    ] {
        let e = on(&args).expect(4);
        assert!(
            e.error().contains("is served as") && e.error().contains("restart"),
            "{}",
            e.error()
        );
    }
    let e = on(&["delete", "--name", "nosuch"]).expect(3);
    assert!(e.error().contains("no volume \"nosuch\""), "{}", e.error());
    let e = raidd(&["volume", "list", "--array", "nosuch", "--control", &ctl]).expect(3);
    assert!(
        e.error().contains("no array named \"nosuch\""),
        "{}",
        e.error()
    );
    let l = on(&["list", "--json"]).ok().json();
    assert_eq!(l["array"], "raid5");
    assert_eq!(l["volumes"][3]["size_bytes"], 12 * MIB, "{l}");
    assert_eq!(
        l["volumes"][1]["served_as"],
        serde_json::json!(["export b"]),
        "{l}"
    );
    let text = on(&["list"]).ok().text();
    assert!(
        text.contains("beta") && text.contains("served as export b"),
        "{text}"
    );
    let detail = raidd(&["detail", "raid5", "--json", "--control", &ctl])
        .ok()
        .json();
    assert_eq!(detail["volumes"]["volumes"][3]["name"], "delta", "{detail}");
    on(&["delete", "--name", "delta"]).ok();
    assert_eq!(
        d.status()["arrays"][0]["volumes"]["volumes"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    d.stop();
    // What the daemon wrote is what the members hold.
    assert_eq!(list(&m)["volumes"].as_array().unwrap().len(), 3);
}

/// Sets GPT entry `i`'s first and last sector in an image of the array's first MiB, with
/// the checksums made right again: what a tool writing a bad table would leave.
fn patch_entry(head: &mut [u8], i: usize, first: u64, last: u64) {
    fn crc32(bytes: &[u8]) -> u32 {
        let mut c = !0u32;
        for &b in bytes {
            c ^= u32::from(b);
            for _ in 0..8 {
                c = if c & 1 != 0 {
                    (c >> 1) ^ 0xedb8_8320
                } else {
                    c >> 1
                };
            }
        }
        !c
    }
    let at = 1024 + i * 128;
    head[at + 32..at + 40].copy_from_slice(&first.to_le_bytes());
    head[at + 40..at + 48].copy_from_slice(&last.to_le_bytes());
    let crc = crc32(&head[1024..1024 + 128 * 128]);
    head[512 + 88..512 + 92].copy_from_slice(&crc.to_le_bytes());
    head[512 + 16..512 + 20].fill(0);
    let crc = crc32(&head[512..512 + 92]);
    head[512 + 16..512 + 20].copy_from_slice(&crc.to_le_bytes());
}

#[test]
fn bad_tables_and_missing_volumes_are_refused_and_change_nothing() {
    let dir = scratch();
    let d0 = dir.path();
    let m = three_volumes(d0);
    pattern("write", "beta", 5, &m).ok();
    let head = d0.join("head.bin");
    let read_head = || {
        raidd(&args_with(
            &["read", "--length", "1M", "--output", head.to_str().unwrap()],
            &m,
        ))
        .ok();
        std::fs::read(&head).unwrap()
    };
    let good = read_head();
    for (entry, first, last, want) in [
        // alpha's end runs into beta.
        (0, 2048, 34 * 2048, "overlap"),
        // gamma runs past the end of the array.
        (2, 33 * 2048, 1 << 30, "outside"),
        // alpha starts inside the table itself.
        (0, 2, 2047, "outside"),
    ] {
        let mut bad = good.clone();
        patch_entry(&mut bad, entry, first, last);
        std::fs::write(&head, &bad).unwrap();
        raidd(&args_with(
            &["write", "--input", head.to_str().unwrap()],
            &m,
        ))
        .ok();
        for args in [
            vec!["list"],
            vec!["create", "--name", "new", "--size", "1M"],
            vec!["resize", "--name", "beta", "--size", "8M", "--shrink"],
            vec!["delete", "--name", "beta"],
        ] {
            let e = volume(&args, &m).expect(7);
            assert!(
                e.error().contains(want) && e.error().contains("not usable"),
                "{args:?}: {}",
                e.error()
            );
            assert_eq!(read_head(), bad, "{args:?} changed the table");
        }
        let e = pattern("verify", "beta", 5, &m).expect(7);
        assert!(e.error().contains(want), "{}", e.error());
        // The daemon serves nothing from such a table, and says why; the whole array
        // still serves.
        let cfg = format!(
            "{}[[export]]\nname = \"b\"\narray = \"raid5\"\nvolume = \"beta\"\n\
             [[export]]\nname = \"whole\"\narray = \"raid5\"\n",
            array_config("raid5", &m)
        );
        let d = Daemon::start(d0, &cfg);
        let log = d.log();
        assert!(
            log.contains("export b is not offered") && log.contains(want),
            "{log}"
        );
        assert_eq!(
            d.status()["arrays"][0]["volumes"]["error"]
                .as_str()
                .map(|e| e.contains(want)),
            Some(true)
        );
        assert!(d.export_size("whole") > 48 * MIB);
        d.stop();
        assert_eq!(read_head(), bad, "serving changed the table");
    }
    // Put right, the volumes are back, data and all.
    std::fs::write(&head, &good).unwrap();
    raidd(&args_with(
        &["write", "--input", head.to_str().unwrap()],
        &m,
    ))
    .ok();
    pattern("verify", "beta", 5, &m).ok();

    // Volumes of no array: members that are not one, an array the daemon does not serve.
    let loose = images(d0, "loose", 2);
    for p in &loose {
        std::fs::File::create(p).unwrap().set_len(8 * MIB).unwrap();
    }
    let e = volume(&["create", "--name", "x", "--size", "1M"], &loose).expect(3);
    assert!(!e.error().is_empty());
    assert!(
        loose
            .iter()
            .all(|p| std::fs::read(p).unwrap().iter().all(|&b| b == 0)),
        "nothing written"
    );
    // An export naming a volume the array does not have is not offered; a config naming a
    // volume 0 or an impossible name is refused before anything starts.
    let cfg = format!(
        "{}[[export]]\nname = \"x\"\narray = \"raid5\"\nvolume = \"nosuch\"\n\
         [[export]]\nname = \"a\"\narray = \"raid5\"\nvolume = 1\n",
        array_config("raid5", &m)
    );
    let d = Daemon::start(d0, &cfg);
    assert!(
        d.log()
            .contains("export x is not offered: raid5 has no volume \"nosuch\""),
        "{}",
        d.log()
    );
    assert_eq!(d.export_size("a"), 16 * MIB);
    d.stop();
    for (vol, want) in [("0", "numbered from 1"), ("\"\"", "1 to 36 characters")] {
        let cfg = format!(
            "{}[[export]]\nname = \"x\"\narray = \"raid5\"\nvolume = {vol}\n",
            array_config("raid5", &m)
        );
        let log = Daemon::try_start(d0, &cfg).err().expect("refused");
        assert!(log.contains(want), "{log}");
    }
}

/// The names `nbdinfo --list` shows, sorted.
fn export_names(d: &Daemon) -> Vec<String> {
    let base = format!("nbd://{}", d.addr);
    let list = must(tool("nbdinfo").args(["--list", "--json", &base]));
    let v: Value = serde_json::from_str(&list).unwrap();
    let mut names: Vec<String> = v["exports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["export-name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    names
}

/// Writes generation `g` over the whole export and reads it back through a new connection.
fn round(d: &Daemon, dir: &Path, export: &str, len: u64, g: u64) {
    d.write_pattern(export, dir, len, g, SEED);
    let out = dir.join(format!("{export}.got"));
    let _ = std::fs::remove_file(&out);
    must(tool("nbdcopy").args([&d.uri(export), out.to_str().unwrap()]));
    sectors::verify_file(&out, g, SEED, &format!("export {export}"));
}

/// Exports change while the daemon serves, without a restart: `raidd export add` offers a
/// volume created through the daemon at once (and it is then protected as served),
/// `raidd export remove` withdraws one and closes its client's connection (its volume may
/// change again), bad requests change nothing, and a SIGHUP applies the edited config:
/// exports added and removed, a change to `[nbd]` named as waiting for the next start.
#[test]
fn exports_are_added_and_removed_while_serving_and_on_sighup() {
    let dir = scratch();
    let d0 = dir.path();
    let m = three_volumes(d0);
    let d = Daemon::start(d0, &served_config(&m));
    let ctl = d.control.display().to_string();
    let run = |args: &[&str]| {
        let mut a = args.to_vec();
        a.extend_from_slice(&["--control", &ctl]);
        raidd(&a)
    };
    run(&[
        "volume", "create", "--array", "raid5", "--name", "delta", "--size", "8M",
    ])
    .ok();
    let added = run(&[
        "export", "add", "d", "--array", "raid5", "--volume", "delta",
    ])
    .ok()
    .text();
    assert!(added.contains("export d is offered"), "{added}");
    assert_eq!(export_names(&d), ["a", "b", "d"]);
    assert_eq!(d.export_size("d"), 8 * MIB);
    round(&d, d0, "d", 8 * MIB, 1);
    let e = run(&["volume", "delete", "--array", "raid5", "--name", "delta"]).expect(4);
    assert!(e.error().contains("served as export d"), "{}", e.error());

    // Refused, changing nothing.
    let e = run(&["export", "add", "b", "--array", "raid5"]).expect(4);
    assert!(e.error().contains("already offered"), "{}", e.error());
    let e = run(&["export", "add", "x", "--array", "nosuch"]).expect(3);
    assert!(e.error().contains("no array named"), "{}", e.error());
    let e = run(&[
        "export", "add", "x", "--array", "raid5", "--volume", "nosuch",
    ])
    .expect(3);
    assert!(e.error().contains("not offered"), "{}", e.error());
    let e = run(&["export", "remove", "nosuch"]).expect(3);
    assert!(e.error().contains("no export named"), "{}", e.error());
    assert_eq!(export_names(&d), ["a", "b", "d"]);

    // A client of `a` is cut off when it goes; its volume is no longer served.
    let mut client = nbd_raw::handshake_to_transmission(d.addr, "a");
    client
        .set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    run(&["export", "remove", "a"]).ok();
    assert!(
        nbd_raw::closed(&mut client),
        "the removed export's client is disconnected"
    );
    assert_eq!(export_names(&d), ["b", "d"]);
    let gone = tool("nbdinfo").arg(d.uri("a")).output().unwrap();
    assert!(!gone.status.success(), "export a is gone");
    run(&[
        "volume", "resize", "--array", "raid5", "--name", "alpha", "--size", "8M", "--shrink",
    ])
    .ok();

    // SIGHUP with an edited file: `b` and `d` (added over the socket) go, `c` comes, and
    // the changed [nbd] waits for the next start.
    let cfg = format!(
        "control_socket = {:?}\n{}[[export]]\nname = \"c\"\narray = \"raid5\"\nvolume = \"alpha\"\n\
         [nbd]\nlisten = \"127.0.0.1:0\"\nmax_in_flight = 8\n\
         [iscsi]\nlisten = \"127.0.0.1:0\"\nstate_dir = \"state\"\n\
         [[target]]\nname = \"{IQN}\"\n[[target.lun]]\narray = \"raid5\"\nvolume = \"gamma\"\n",
        ctl,
        array_config("raid5", &m)
    );
    std::fs::write(d0.join("raidd.toml"), cfg).unwrap();
    d.reload();
    let log = d.log();
    for want in [
        "export \"b\" removed",
        "export \"d\" removed",
        "export \"c\" added",
        "[nbd]: changed, applied at the next start",
    ] {
        assert!(log.contains(want), "no {want:?} in\n{log}");
    }
    assert_eq!(export_names(&d), ["c"]);
    round(&d, d0, "c", 8 * MIB, 2);
    run(&["volume", "delete", "--array", "raid5", "--name", "delta"]).ok();
    d.stop();
}

const INITIATOR: &str = "iqn.2026-11.org.raidd:volumes-test";

/// The LUN numbers REPORT LUNS lists (peripheral addressing: the number in byte 1).
fn report_luns(r: &mut iscsi_raw::Raw) -> Vec<u64> {
    let cdb = [0xa0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0];
    let (status, data, sense) = r.command_in(&cdb, 1024);
    assert_eq!(status, 0, "REPORT LUNS: {sense:02x?}");
    let len = u32::from_be_bytes(data[..4].try_into().unwrap()) as usize;
    data[8..8 + len]
        .chunks(8)
        .map(|e| u64::from(u16::from_be_bytes([e[0] & 0x3f, e[1]])))
        .collect()
}

/// READ CAPACITY(10) on LUN 0: its status and (sense key, ASC, ASCQ) when it is a CHECK
/// CONDITION.
fn capacity_on_lun0(r: &mut iscsi_raw::Raw) -> (u8, Option<(u8, u8, u8)>) {
    let (status, _, sense) = r.command_in(&[0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0], 8);
    let s = (sense.len() >= 14).then(|| (sense[2] & 0x0f, sense[12], sense[13]));
    (status, s)
}

/// The unit attention a logged-in initiator gets once its target's LUNs changed; the
/// command after it runs.
fn told_luns_changed(r: &mut iscsi_raw::Raw) {
    assert_eq!(capacity_on_lun0(r), (2, Some((6, 0x3f, 0x0e))));
    assert_eq!(capacity_on_lun0(r), (0, None));
}

/// iSCSI LUNs change while the daemon serves, without a restart: `raidd lun add` offers a
/// volume created through the daemon at once as a new LUN of a served target (a logged-in
/// initiator is told REPORTED LUNS DATA HAS CHANGED and REPORT LUNS lists it; data through
/// it lands in that volume alone); bad requests change nothing; `raidd lun remove` takes it
/// away (commands to it find no unit, the volume is free again) but not a target's only
/// LUN; a SIGHUP applies the edited config's LUNs and names the target settings that wait
/// for the next start.
#[test]
fn luns_are_added_and_removed_while_serving_and_on_sighup() {
    let dir = scratch();
    let d0 = dir.path();
    let m = three_volumes(d0);
    pattern("write", "gamma", 5, &m).ok();
    pattern("write", "beta", 6, &m).ok();
    let config = |lun0: &str, lun3: &str, alias: &str| {
        format!(
            "[iscsi]\nlisten = \"127.0.0.1:0\"\nstate_dir = \"state\"\nnop_interval = 0\n\
             [[target]]\nname = \"{IQN}\"\n{alias}[[target.lun]]\narray = \"raid5\"\n\
             volume = \"{lun0}\"\n{lun3}{}",
            array_config("raid5", &m)
        )
    };
    let d = Daemon::start(d0, &config("gamma", "", ""));
    let ctl = d.control.display().to_string();
    let run = |args: &[&str]| {
        let mut a = args.to_vec();
        a.extend_from_slice(&["--control", &ctl]);
        raidd(&a)
    };
    let mut r = iscsi_raw::Raw::login(d.iscsi.unwrap(), INITIATOR, IQN, false);
    assert_eq!(report_luns(&mut r), [0]);
    run(&[
        "volume", "create", "--array", "raid5", "--name", "delta", "--size", "8M",
    ])
    .ok();
    let added = run(&["lun", "add", IQN, "--array", "raid5", "--volume", "delta"])
        .ok()
        .text();
    assert!(
        added.contains(&format!("LUN 1 of {IQN} is offered")),
        "{added}"
    );
    told_luns_changed(&mut r);
    assert_eq!(report_luns(&mut r), [0, 1]);
    let st = d.status();
    assert_eq!(
        st["iscsi"]["targets"][0]["luns"][1]["volume"], "delta",
        "{st}"
    );

    // Data through the new LUN: read back whole, and (checked offline at the end) in the
    // volume delta alone.
    let url1 = d.iscsi_url("", IQN, 1);
    let input = sectors::pattern_file(d0, 8 * MIB, 31, SEED);
    let qemu = |from: &str, to: &str, new: bool| {
        let mut args = vec!["convert", "-f", "raw", "-O", "raw", from, to];
        if !new {
            args.insert(1, "-n");
        }
        must(tool("qemu-img").args(&args));
    };
    qemu(input.to_str().unwrap(), &url1, false);
    let got = d0.join("lun1.got");
    qemu(&url1, got.to_str().unwrap(), true);
    sectors::verify_file(&got, 31, SEED, "LUN 1");
    assert_eq!(std::fs::metadata(&got).unwrap().len(), 8 * MIB);
    let e = run(&["volume", "delete", "--array", "raid5", "--name", "delta"]).expect(4);
    assert!(e.error().contains("served as LUN 1 of"), "{}", e.error());

    // Refused, changing nothing.
    let e = run(&["lun", "add", IQN, "--lun", "1", "--array", "raid5"]).expect(4);
    assert!(e.error().contains("has a LUN 1 already"), "{}", e.error());
    let e = run(&[
        "lun",
        "add",
        "iqn.2026-11.org.raidd:nosuch",
        "--array",
        "raid5",
    ])
    .expect(3);
    assert!(e.error().contains("no target named"), "{}", e.error());
    let e = run(&["lun", "add", IQN, "--array", "nosuch"]).expect(3);
    assert!(e.error().contains("no array named"), "{}", e.error());
    let e = run(&["lun", "add", IQN, "--array", "raid5", "--volume", "nosuch"]).expect(3);
    assert!(e.error().contains("not offered"), "{}", e.error());
    let e = run(&["lun", "remove", IQN, "7"]).expect(3);
    assert!(e.error().contains("has no LUN 7"), "{}", e.error());
    assert_eq!(report_luns(&mut r), [0, 1]);
    assert_eq!(
        capacity_on_lun0(&mut r),
        (0, None),
        "no change: nobody is told"
    );

    // Removed: the initiator is told, commands to it find no unit, the volume is free.
    let removed = run(&["lun", "remove", IQN, "1"]).ok().text();
    assert!(removed.contains("no longer offered"), "{removed}");
    told_luns_changed(&mut r);
    assert_eq!(report_luns(&mut r), [0]);
    let gone = tool("iscsi-readcapacity16")
        .args(["-i", INITIATOR, &url1])
        .output()
        .unwrap();
    assert!(!gone.status.success(), "LUN 1 is gone");
    let e = run(&["lun", "remove", IQN, "0"]).expect(4);
    assert!(e.error().contains("only LUN"), "{}", e.error());
    assert_eq!(report_luns(&mut r), [0]);

    // SIGHUP: LUN 3 (alpha, read-only) comes from the file; the changed alias waits.
    let lun3 = "[[target.lun]]\nlun = 3\narray = \"raid5\"\nvolume = \"alpha\"\nread_only = true\n";
    let edited = format!(
        "control_socket = {ctl:?}\n{}",
        config("gamma", lun3, "alias = \"renamed\"\n")
    );
    std::fs::write(d0.join("raidd.toml"), edited).unwrap();
    d.reload();
    let log = d.log();
    for want in [
        format!("LUN 3 of {IQN} added"),
        "[iscsi], [[target]]: changed, applied at the next start".to_string(),
    ] {
        assert!(log.contains(&want), "no {want:?} in\n{log}");
    }
    told_luns_changed(&mut r);
    assert_eq!(report_luns(&mut r), [0, 3]);
    let st = d.status();
    let lun = &st["iscsi"]["targets"][0]["luns"][1];
    assert_eq!(
        (lun["lun"].as_u64(), lun["read_only"].as_bool()),
        (Some(3), Some(true)),
        "{st}"
    );

    // The next: LUN 0 serves beta instead (swapped in place, the initiator told on it too),
    // LUN 3 goes.
    let edited = format!("control_socket = {ctl:?}\n{}", config("beta", "", ""));
    std::fs::write(d0.join("raidd.toml"), edited).unwrap();
    d.reload();
    let log = d.log();
    for want in [
        format!("LUN 0 of {IQN} changed"),
        format!("LUN 3 of {IQN} removed"),
    ] {
        assert!(log.contains(&want), "no {want:?} in\n{log}");
    }
    told_luns_changed(&mut r);
    assert_eq!(report_luns(&mut r), [0]);
    let got = d0.join("lun0.got");
    qemu(&d.iscsi_url("", IQN, 0), got.to_str().unwrap(), true);
    sectors::verify_file(&got, 6, SEED, "LUN 0, now beta");
    drop(r);
    d.stop();
    pattern("verify", "delta", 31, &m).ok();
    pattern("verify", "gamma", 5, &m).ok();
}
