//! End-to-end tests of the `raidd` binary on image files: create, detail, examine, read,
//! write, pattern, bench; degraded and stale members; bad input and its exit codes.
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::fs;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

/// (level, members) for every level.
const LEVELS: [(&str, usize); 7] = [
    ("linear", 3),
    ("raid0", 3),
    ("raid1", 2),
    ("raid4", 4),
    ("raid5", 4),
    ("raid6", 5),
    ("raid10", 4),
];

fn create(level: &str, imgs: &[PathBuf], extra: &[&str]) -> Run {
    let mut fixed = vec!["create", "--level", level, "--chunk", "64K", "--size", "8M"];
    fixed.extend_from_slice(extra);
    raidd(&args_with(&fixed, imgs))
}

fn detail_json(imgs: &[PathBuf]) -> Value {
    raidd(&args_with(&["detail", "--json"], imgs)).ok().json()["array"].clone()
}

fn slot_states(array: &Value) -> Vec<String> {
    array["slots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["state"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn every_level_round_trips_pattern_and_bytes() {
    for (level, n) in LEVELS {
        let dir = scratch();
        let imgs = images(dir.path(), "d", n);
        let created = create(level, &imgs, &[]).ok();
        assert!(
            created.text().contains("State : clean"),
            "{}",
            created.text()
        );

        let a = detail_json(&imgs);
        assert_eq!(a["level"], level);
        assert_eq!(a["state"], "clean", "{a}");
        assert_eq!(a["needs_resync"], false);
        assert_eq!(a["raid_devices"], n);
        assert_eq!(slot_states(&a), vec!["insync"; n]);
        assert_eq!(a["name"], "d0");
        let size = a["size_bytes"].as_u64().unwrap();
        assert!(size >= 6 * MIB, "{level}: {size}");

        raidd(&args_with(&["pattern", "write"], &imgs)).ok();
        let v = raidd(&args_with(&["pattern", "verify"], &imgs)).ok();
        assert!(v.text().contains(": 0 bad sectors"), "{}", v.text());

        // Bytes in through `write`, out through `read` (to a file and to stdout).
        let data = bytes(256 * 1024 + 512, n as u64);
        let input = dir.path().join("in.bin");
        fs::write(&input, &data).unwrap();
        let w = raidd(&args_with(
            &[
                "write",
                "--offset",
                "1M",
                "--input",
                input.to_str().unwrap(),
            ],
            &imgs,
        ))
        .ok();
        assert!(
            w.text().contains(&format!("wrote {} bytes", data.len())),
            "{}",
            w.text()
        );
        let out = dir.path().join("out.bin");
        let len = data.len().to_string();
        raidd(&args_with(
            &[
                "read",
                "--offset",
                "1M",
                "--length",
                &len,
                "--output",
                out.to_str().unwrap(),
            ],
            &imgs,
        ))
        .ok();
        assert!(
            fs::read(&out).unwrap() == data,
            "{level}: read --output differs"
        );
        let r = raidd(&args_with(
            &["read", "--offset", "1024K", "--length", &len],
            &imgs,
        ))
        .ok();
        assert!(r.stdout == data, "{level}: read to stdout differs");

        // The pattern around the written bytes is intact; exactly the overwritten sectors
        // no longer verify.
        raidd(&args_with(&["pattern", "verify", "--length", "1M"], &imgs)).ok();
        let bad = raidd(&args_with(&["pattern", "verify", "--json"], &imgs)).expect(8);
        let j = bad.json();
        assert_eq!(j["bad_sectors"], data.len() as u64 / 512, "{level}");
        assert_eq!(j["mismatches"][0]["sector"], MIB / 512);
        assert!(
            bad.error().contains("verification failed"),
            "{}",
            bad.stderr
        );

        // Whole-array read matches size.
        let all = raidd(&args_with(&["read"], &imgs)).ok();
        assert_eq!(all.stdout.len() as u64, size, "{level}");

        // Members are clean after every command (clean shutdown).
        let ex = raidd(&args_with(&["examine", "--json"], &imgs)).ok().json();
        for m in ex["members"].as_array().unwrap() {
            assert_eq!(m["superblock"]["state"], "clean", "{level}: {m}");
            assert_eq!(m["superblock"]["array_uuid"], a["uuid"]);
        }
    }
}

#[test]
fn stdin_write_and_partial_reads() {
    let dir = scratch();
    let imgs = images(dir.path(), "s", 3);
    create("raid5", &imgs, &[]).ok();
    let data = bytes(3 * 4096, 7);
    raidd_stdin(&args_with(&["write", "--offset", "8192"], &imgs), &data).ok();
    let r = raidd(&args_with(
        &["read", "--offset", "8K", "--length", "12K"],
        &imgs,
    ))
    .ok();
    assert!(r.stdout == data);
    // A pipe whose length is not a multiple of the block size: refused at the end, with a
    // clean shutdown all the same.
    let e = raidd_stdin(&args_with(&["write"], &imgs), &data[..1000]).expect(2);
    assert!(
        e.error()
            .contains("not a multiple of the array's block size"),
        "{}",
        e.stderr
    );
    let ex = raidd(&args_with(&["examine", "--json"], &imgs)).ok().json();
    assert_eq!(ex["members"][0]["superblock"]["state"], "clean");
    // read --json reports what it copied.
    let out = dir.path().join("o.bin");
    let j = raidd(&args_with(
        &[
            "read",
            "--json",
            "--length",
            "4K",
            "--output",
            out.to_str().unwrap(),
        ],
        &imgs,
    ))
    .ok()
    .json();
    assert_eq!(j["bytes"], 4096);
    assert_eq!(j["offset"], 0);
    let e = raidd(&args_with(&["read", "--json"], &imgs)).expect(2);
    assert!(e.error().contains("--output"), "{}", e.stderr);
}

#[test]
fn degraded_raid5_created_with_missing() {
    let dir = scratch();
    let imgs = images(dir.path(), "m", 4);
    let mut members: Vec<String> = imgs.iter().map(|p| p.display().to_string()).collect();
    members[1] = "missing".to_string();
    let mut args: Vec<String> = [
        "create", "--level", "raid5", "--chunk", "64K", "--size", "8M",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(members);
    raidd(&args).ok();
    assert!(!imgs[1].exists());
    let present = [imgs[0].clone(), imgs[2].clone(), imgs[3].clone()];
    let a = detail_json(&present);
    assert_eq!(a["state"], "degraded");
    assert_eq!(slot_states(&a), ["insync", "missing", "insync", "insync"]);
    assert!(a["slots"][1]["member"].is_null());
    raidd(&args_with(
        &["pattern", "write", "--seed", "0x55"],
        &present,
    ))
    .ok();
    raidd(&args_with(
        &["pattern", "verify", "--seed", "0x55"],
        &present,
    ))
    .ok();
    let human = raidd(&args_with(&["detail"], &present)).ok().text();
    assert!(human.contains("State : degraded"), "{human}");
    assert!(human.contains("missing"), "{human}");
}

#[test]
fn deleted_member_shows_as_missing_slot() {
    let dir = scratch();
    let imgs = images(dir.path(), "x", 4);
    create("raid5", &imgs, &[]).ok();
    raidd(&args_with(
        &["pattern", "write", "--generation", "3"],
        &imgs,
    ))
    .ok();
    fs::remove_file(&imgs[2]).unwrap();
    // Named with the others: reported unavailable (exit 3), the rest still reported.
    let r = raidd(&args_with(&["detail", "--json"], &imgs)).expect(3);
    let j = r.json();
    assert_eq!(j["array"]["state"], "degraded");
    assert_eq!(
        slot_states(&j["array"]),
        ["insync", "insync", "missing", "insync"]
    );
    assert_eq!(j["unavailable"][0]["member"], imgs[2].display().to_string());
    assert_eq!(j["unavailable"][0]["error"]["exit_code"], 3);
    assert_eq!(j["unavailable"][0]["error"]["kind"], "not_found");
    // Left out: a plain degraded array, data verifies from parity.
    let rest = [imgs[0].clone(), imgs[1].clone(), imgs[3].clone()];
    let a = detail_json(&rest);
    assert_eq!(a["state"], "degraded");
    raidd(&args_with(
        &["pattern", "verify", "--generation", "3"],
        &rest,
    ))
    .ok();
    // Commands that need every named member refuse the missing one.
    let e = raidd(&args_with(
        &["pattern", "verify", "--generation", "3"],
        &imgs,
    ))
    .expect(3);
    assert!(e.error().contains("No such file"), "{}", e.stderr);
}

#[test]
fn raid0_with_a_member_missing_cannot_run() {
    let dir = scratch();
    let imgs = images(dir.path(), "z", 3);
    create("raid0", &imgs, &[]).ok();
    let e = raidd(&args_with(&["detail"], &imgs[..2])).expect(5);
    assert!(e.error().contains("raid0"), "{}", e.stderr);
    raidd(&args_with(&["read", "--length", "4K"], &imgs[..2])).expect(5);
    // And raid0 cannot be created degraded.
    let dir2 = scratch();
    let mut args = args_with(
        &["create", "--level", "0", "--size", "8M"],
        &images(dir2.path(), "q", 1),
    );
    args.push("missing".into());
    let e = raidd(&args).expect(2);
    assert!(e.error().contains("no redundancy"), "{}", e.stderr);
}

#[test]
fn stale_member_is_reported_and_not_used() {
    let dir = scratch();
    let imgs = images(dir.path(), "r", 2);
    create("raid1", &imgs, &[]).ok();
    raidd(&args_with(
        &["pattern", "write", "--generation", "1"],
        &imgs,
    ))
    .ok();
    let aside = dir.path().join("r1.old");
    fs::copy(&imgs[1], &aside).unwrap();
    // A degraded write through member 0 alone bumps its event count.
    raidd(&args_with(
        &["pattern", "write", "--generation", "2"],
        &imgs[..1],
    ))
    .ok();
    fs::rename(&aside, &imgs[1]).unwrap();
    let r = raidd(&args_with(&["detail", "--json"], &imgs)).ok();
    // Engine warnings are visible by default.
    assert!(
        r.stderr.contains("WARN") && r.stderr.contains("not used"),
        "{}",
        r.stderr
    );
    let a = &r.json()["array"];
    assert_eq!(a["state"], "degraded");
    assert_eq!(slot_states(a), ["insync", "missing"]);
    let nu = &a["not_used"][0];
    assert_eq!(nu["member"], imgs[1].display().to_string());
    assert_eq!(nu["reason"], "stale");
    let (old, new) = (
        nu["events"].as_u64().unwrap(),
        nu["array_events"].as_u64().unwrap(),
    );
    assert!(old + 1 < new, "{nu}");
    let human = raidd(&args_with(&["detail"], &imgs)).ok().text();
    assert!(
        human.contains("Not used:") && human.contains("stale"),
        "{human}"
    );
    // Data comes from the fresh member: generation 2 everywhere.
    raidd(&args_with(
        &["pattern", "verify", "--generation", "2"],
        &imgs,
    ))
    .ok();
}

#[test]
fn members_of_different_arrays_and_duplicates_conflict() {
    let dir = scratch();
    let a = images(dir.path(), "a", 2);
    let b = images(dir.path(), "b", 2);
    create("raid1", &a, &[]).ok();
    create("raid1", &b, &[]).ok();
    let e = raidd(&args_with(&["detail"], &[a[0].clone(), b[0].clone()])).expect(4);
    assert!(e.error().contains("different arrays"), "{}", e.stderr);
    raidd(&args_with(
        &["read", "--length", "4K"],
        &[a[0].clone(), b[0].clone()],
    ))
    .expect(4);
    // The same member twice, also under another name.
    let e = raidd(&args_with(&["detail"], &[a[0].clone(), a[0].clone()])).expect(4);
    assert!(e.error().contains("twice"), "{}", e.stderr);
    let other_name = dir.path().join(".").join("a0.img");
    raidd(&args_with(&["detail"], &[a[0].clone(), other_name.clone()])).expect(4);
    let dir2 = scratch();
    let c = images(dir2.path(), "c", 1);
    let e = raidd(&args_with(
        &["create", "--level", "1", "--size", "8M"],
        &[c[0].clone(), c[0].clone()],
    ))
    .expect(4);
    assert!(e.error().contains("twice"), "{}", e.stderr);
    assert!(!c[0].exists(), "nothing created on refusal");
    // Existing superblocks: refused without --force, overwritten with it.
    let e = raidd(&args_with(&["create", "--level", "1"], &a)).expect(4);
    assert!(e.error().contains("--force"), "{}", e.stderr);
    let old_uuid = detail_json(&a)["uuid"].clone();
    raidd(&args_with(
        &["create", "--level", "1", "--force", "--name", "again"],
        &a,
    ))
    .ok();
    let fresh = detail_json(&a);
    assert_ne!(fresh["uuid"], old_uuid);
    assert_eq!(fresh["name"], "again");
}

#[test]
fn too_few_and_too_small_members() {
    let dir = scratch();
    let one = images(dir.path(), "f", 1);
    let e = raidd(&args_with(
        &["create", "--level", "5", "--size", "8M"],
        &one,
    ))
    .expect(2);
    assert!(e.error().contains("at least 2 members"), "{}", e.stderr);
    let three = images(dir.path(), "g", 3);
    let e = raidd(&args_with(
        &["create", "--level", "raid6", "--size", "8M"],
        &three,
    ))
    .expect(2);
    assert!(e.error().contains("at least 4 members"), "{}", e.stderr);
    assert!(
        three.iter().all(|p| !p.exists()),
        "created files removed after failure"
    );
    // Too small to hold the metadata and data.
    let tiny = images(dir.path(), "t", 2);
    let e = raidd(&args_with(
        &["create", "--level", "1", "--size", "64K"],
        &tiny,
    ))
    .expect(2);
    assert!(e.error().contains("larger than"), "{}", e.stderr);
    // An existing member smaller than --size.
    let small = dir.path().join("small.img");
    fs::File::create(&small).unwrap().set_len(4 * MIB).unwrap();
    let other = dir.path().join("other.img");
    let e = raidd(&args_with(
        &["create", "--level", "1", "--size", "8M"],
        &[small.clone(), other],
    ))
    .expect(2);
    assert!(e.error().contains("less than --size"), "{}", e.stderr);
    // No such file and no --size; a directory that does not exist.
    let e = raidd(&args_with(
        &["create", "--level", "1"],
        &images(dir.path(), "n", 2),
    ))
    .expect(3);
    assert!(e.error().contains("--size"), "{}", e.stderr);
    let nowhere = dir.path().join("no/such/dir/x.img");
    let e = raidd(&args_with(
        &["create", "--level", "1", "--size", "8M"],
        &[nowhere, dir.path().join("y.img")],
    ))
    .expect(3);
    assert!(e.error().contains("does not exist"), "{}", e.stderr);
}

#[test]
fn size_limits_larger_members_for_every_level_kind() {
    let dir = scratch();
    for level in ["raid0", "raid5"] {
        let imgs = images(dir.path(), level, 3);
        for p in &imgs {
            fs::File::create(p).unwrap().set_len(32 * MIB).unwrap();
        }
        create(level, &imgs, &["--assume-clean"]).ok();
        let ex = raidd(&args_with(&["examine", "--json"], &imgs)).ok().json();
        let sb = &ex["members"][0]["superblock"];
        let used = sb["data_offset_sectors"].as_u64().unwrap()
            + sb["avail_dev_size_sectors"].as_u64().unwrap();
        assert_eq!(used * 512, 8 * MIB, "{level}: {sb}");
        let a = detail_json(&imgs);
        assert!(
            a["size_bytes"].as_u64().unwrap() < 3 * 8 * MIB,
            "{level}: {a}"
        );
    }
}

#[test]
fn initial_resync_runs_with_progress_on_existing_members() {
    let dir = scratch();
    let imgs = images(dir.path(), "p", 3);
    for p in &imgs {
        fs::File::create(p).unwrap().set_len(8 * MIB).unwrap();
    }
    let r = raidd(&args_with(
        &["create", "--level", "raid5", "--chunk", "64K"],
        &imgs,
    ))
    .ok();
    assert!(
        r.stderr.contains("resync") && r.stderr.contains("100.0%"),
        "{}",
        r.stderr
    );
    let a = detail_json(&imgs);
    assert_eq!(a["state"], "clean");
    assert_eq!(a["needs_resync"], false);
    // The whole array verifies as zeros-with-consistent-parity: write and check a pattern.
    raidd(&args_with(&["pattern", "write"], &imgs)).ok();
    raidd(&args_with(&["pattern", "verify"], &imgs)).ok();
}

fn superblock_bytes(p: &Path) -> Vec<u8> {
    let f = fs::File::open(p).unwrap();
    let mut b = vec![0u8; 4096];
    f.read_exact_at(&mut b, 4096).unwrap();
    b
}

#[test]
fn corrupt_and_unsupported_superblocks() {
    let dir = scratch();
    let imgs = images(dir.path(), "c", 2);
    create("raid1", &imgs, &[]).ok();
    // A flipped byte: the checksum no longer matches.
    let f = fs::OpenOptions::new().write(true).open(&imgs[1]).unwrap();
    let mut b = superblock_bytes(&imgs[1]);
    b[20] ^= 0x40;
    f.write_all_at(&b[20..21], 4096 + 20).unwrap();
    let e = raidd(&args_with(&["examine"], &imgs)).expect(7);
    assert!(e.error().contains("checksum"), "{}", e.stderr);
    // Examine still printed the good member.
    assert!(e.text().contains("Active device 0"), "{}", e.text());
    let d = raidd(&args_with(&["detail", "--json"], &imgs)).expect(7);
    assert_eq!(d.json()["array"]["state"], "degraded");
    assert_eq!(d.json()["unavailable"][0]["error"]["kind"], "corrupt");
    raidd(&args_with(&["read", "--length", "4K"], &imgs)).expect(7);

    // A feature raidd does not implement (clustered md), with a correct checksum.
    let dir2 = scratch();
    let imgs2 = images(dir2.path(), "u", 2);
    create("raid1", &imgs2, &[]).ok();
    for p in &imgs2 {
        let mut sb = raidd_md::Superblock::parse(&superblock_bytes(p), 8).unwrap();
        sb.feature_map |= 0x100;
        let f = fs::OpenOptions::new().write(true).open(p).unwrap();
        f.write_all_at(&sb.encode(), 4096).unwrap();
    }
    let e = raidd(&args_with(&["detail"], &imgs2)).expect(6);
    assert!(e.error().contains("clustered"), "{}", e.stderr);
    raidd(&args_with(&["pattern", "verify"], &imgs2)).expect(6);
    // Examine shows it (and succeeds: it only reads).
    let ex = raidd(&args_with(&["examine", "--json"], &imgs2))
        .ok()
        .json();
    assert_eq!(ex["members"][0]["superblock"]["feature_map"], 0x100);
}

#[test]
fn no_superblock_and_unreadable_members() {
    let dir = scratch();
    let imgs = images(dir.path(), "e", 2);
    create("raid1", &imgs, &[]).ok();
    let blank = dir.path().join("blank.img");
    fs::File::create(&blank).unwrap().set_len(8 * MIB).unwrap();
    let e = raidd(&args_with(
        &["examine", "--json"],
        &[imgs[0].clone(), blank.clone()],
    ))
    .expect(3);
    let j = e.json();
    assert!(j["members"][0]["superblock"].is_object());
    assert!(j["members"][1]["superblock"].is_null());
    assert_eq!(j["members"][1]["error"]["exit_code"], 3);
    assert!(e.error().contains("no md v1.2 superblock"), "{}", e.stderr);
    // A directory is not a member; a path that does not exist is not found.
    let e = raidd(&args_with(&["examine"], &[dir.path().to_path_buf()])).expect(2);
    assert!(
        e.error()
            .contains("neither a regular file nor a block device"),
        "{}",
        e.stderr
    );
    raidd(&args_with(&["detail"], &[dir.path().join("nope.img")])).expect(3);
    raidd(&args_with(&["read"], &[dir.path().to_path_buf()])).expect(2);
    raidd(&args_with(&["detail"], &[blank])).expect(3);
}

#[test]
fn unaligned_and_out_of_range_io_is_refused() {
    let dir = scratch();
    let imgs = images(dir.path(), "o", 2);
    create("raid1", &imgs, &[]).ok();
    let size = detail_json(&imgs)["size_bytes"].as_u64().unwrap();
    let e = raidd(&args_with(&["read", "--offset", "100"], &imgs)).expect(2);
    assert!(
        e.error()
            .contains("not a multiple of the array's block size"),
        "{}",
        e.stderr
    );
    let e = raidd(&args_with(&["read", "--length", "1000"], &imgs)).expect(2);
    assert!(e.error().contains("length 1000"), "{}", e.stderr);
    let past = (size + 512).to_string();
    let e = raidd(&args_with(&["read", "--offset", &past], &imgs)).expect(2);
    assert!(e.error().contains("beyond the end"), "{}", e.stderr);
    let e = raidd(&args_with(&["read", "--length", &past], &imgs)).expect(2);
    assert!(e.error().contains("past the end"), "{}", e.stderr);
    // Reading up to the very end works; zero bytes at the end too.
    let last = (size - 4096).to_string();
    assert_eq!(
        raidd(&args_with(&["read", "--offset", &last], &imgs))
            .ok()
            .stdout
            .len(),
        4096
    );
    raidd(&args_with(&["read", "--offset", &size.to_string()], &imgs)).ok();
    raidd(&args_with(&["pattern", "write", "--offset", "7"], &imgs)).expect(2);

    // Writes: refused before anything is written.
    raidd(&args_with(&["pattern", "write"], &imgs)).ok();
    let odd = dir.path().join("odd.bin");
    fs::write(&odd, vec![1u8; 1000]).unwrap();
    let e = raidd(&args_with(
        &["write", "--input", odd.to_str().unwrap()],
        &imgs,
    ))
    .expect(2);
    assert!(e.error().contains("nothing was written"), "{}", e.stderr);
    let ok = dir.path().join("ok.bin");
    fs::write(&ok, vec![1u8; 4096]).unwrap();
    raidd(&args_with(
        &["write", "--offset", "4000", "--input", ok.to_str().unwrap()],
        &imgs,
    ))
    .expect(2);
    let e = raidd(&args_with(
        &["write", "--offset", &last, "--input", odd.to_str().unwrap()],
        &imgs,
    ))
    .expect(2);
    assert!(e.error().contains("nothing was written"), "{}", e.stderr);
    let big = dir.path().join("big.bin");
    fs::write(&big, vec![1u8; 8192]).unwrap();
    let e = raidd(&args_with(
        &["write", "--offset", &last, "--input", big.to_str().unwrap()],
        &imgs,
    ))
    .expect(2);
    assert!(e.error().contains("past the end"), "{}", e.stderr);
    // From a pipe the length is unknown up front: refused before the chunk that would run
    // past the end.
    let e = raidd_stdin(
        &args_with(&["write", "--offset", &last], &imgs),
        &vec![1u8; 8192],
    )
    .expect(2);
    assert!(e.error().contains("past the end"), "{}", e.stderr);
    raidd(&args_with(
        &["write", "--input", "/nonexistent/in.bin"],
        &imgs,
    ))
    .expect(3);
    // Nothing was written by any refusal: the pattern still verifies.
    raidd(&args_with(&["pattern", "verify"], &imgs)).ok();
}

#[test]
fn bad_sizes_and_usage_errors() {
    let dir = scratch();
    let imgs = images(dir.path(), "b", 2);
    for (opt, val) in [
        ("--size", "1.5M"),
        ("--size", "12Q"),
        ("--size", "1000"),
        ("--size", ""),
        ("--chunk", "3K"),
        ("--chunk", "2K"),
        ("--level", "raid7"),
    ] {
        let mut args = vec!["create".to_string(), "--level".into(), "raid1".into()];
        args.extend([opt.to_string(), val.to_string()]);
        args.extend(imgs.iter().map(|p| p.display().to_string()));
        let r = raidd(&args);
        assert_eq!(r.code, 2, "{opt} {val}: {}", r.stderr);
        assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    }
    let e = raidd(&args_with(
        &[
            "create", "--level", "raid1", "--layout", "n2", "--size", "8M",
        ],
        &imgs,
    ))
    .expect(2);
    assert!(e.error().contains("does not apply"), "{}", e.stderr);
    let e = raidd(&args_with(
        &[
            "create",
            "--level",
            "raid5",
            "--layout",
            "left-symmetric-6",
            "--size",
            "8M",
        ],
        &imgs,
    ))
    .expect(2);
    assert!(e.error().contains("not valid for raid5"), "{}", e.stderr);
    assert!(imgs.iter().all(|p| !p.exists()));
    assert_eq!(raidd(&["read", "--offset", "1X", "x"]).code, 2);
    assert_eq!(raidd(&["bench", "parity", "--seconds", "0"]).code, 2);
    assert_eq!(raidd(&["pattern", "check", "x"]).code, 2);
    assert_eq!(raidd::<&str>(&[]).code, 2);
    let help = raidd(&["--help"]).ok().text();
    assert!(
        help.contains("Exit codes:") && help.contains("8  verification found bad data"),
        "{help}"
    );
}

#[test]
fn json_output_has_the_documented_fields() {
    let dir = scratch();
    let imgs = images(dir.path(), "j", 4);
    let c = raidd(&args_with(
        &[
            "create",
            "--json",
            "--level",
            "raid6",
            "--layout",
            "ls",
            "--chunk",
            "64K",
            "--size",
            "8M",
            "--name",
            "vol",
            "--homehost",
            "box",
        ],
        &imgs,
    ))
    .ok()
    .json();
    let a = &c["array"];
    for key in [
        "name",
        "full_name",
        "uuid",
        "level",
        "layout",
        "chunk_bytes",
        "raid_devices",
        "size_bytes",
        "block_size",
        "state",
        "needs_resync",
        "read_only",
        "events",
        "creation_time",
        "update_time",
        "slots",
        "spares",
        "not_used",
    ] {
        assert!(a.get(key).is_some(), "create --json lacks {key}: {a}");
    }
    assert_eq!(a["name"], "vol");
    assert_eq!(a["full_name"], "box:vol");
    assert_eq!(a["layout"], "left-symmetric");
    assert_eq!(a["chunk_bytes"], 65536);
    assert!(c["unavailable"].as_array().unwrap().is_empty());
    for key in ["role", "member", "state", "device_uuid", "events", "array"] {
        assert!(a["slots"][0].get(key).is_some(), "slot lacks {key}");
    }
    let d = detail_json(&imgs);
    assert_eq!(d["uuid"], a["uuid"]);
    assert_eq!(d["read_only"], true);

    let ex = raidd(&args_with(&["examine", "--json"], &imgs)).ok().json();
    let members = ex["members"].as_array().unwrap();
    assert_eq!(members.len(), 4);
    for (i, m) in members.iter().enumerate() {
        assert_eq!(m["member"], imgs[i].display().to_string());
        assert!(m["error"].is_null());
        let sb = &m["superblock"];
        for key in [
            "magic",
            "version",
            "feature_map",
            "array_uuid",
            "name",
            "creation_time",
            "level",
            "level_number",
            "raid_devices",
            "avail_dev_size_sectors",
            "array_size_kib",
            "used_dev_size_sectors",
            "data_offset_sectors",
            "super_offset_sectors",
            "state",
            "device_uuid",
            "update_time",
            "checksum",
            "events",
            "layout",
            "layout_number",
            "chunk_bytes",
            "dev_number",
            "device_role",
            "role",
            "array_state",
        ] {
            assert!(sb.get(key).is_some(), "examine --json lacks {key}: {sb}");
        }
        assert_eq!(sb["magic"], "a92b4efc");
        assert_eq!(sb["version"], "1.2");
        assert_eq!(sb["level"], "raid6");
        assert_eq!(sb["role"], i);
        assert_eq!(sb["device_role"], format!("Active device {i}"));
        assert_eq!(sb["array_state"], "AAAA");
        assert_eq!(sb["array_uuid"], a["uuid"]);
        assert_eq!(sb["device_uuid"], a["slots"][i]["device_uuid"]);
        assert_eq!(
            sb["array_size_kib"].as_u64().unwrap() * 1024,
            a["size_bytes"].as_u64().unwrap()
        );
    }
    let p = raidd(&args_with(
        &["pattern", "write", "--json", "--length", "64K"],
        &imgs,
    ))
    .ok()
    .json();
    assert_eq!(p["op"], "write");
    assert_eq!(p["sectors"], 128);
    let w = raidd_stdin(&args_with(&["write", "--json"], &imgs), &[0u8; 512])
        .ok()
        .json();
    assert_eq!(w["bytes"], 512);
}

#[test]
fn bench_parity_reports_positive_rates() {
    let j = raidd(&["bench", "parity", "--seconds", "0.2", "--json"])
        .ok()
        .json();
    let rows = j["rows"].as_array().unwrap();
    assert!(!rows.is_empty());
    for r in rows {
        assert!(r["gb_per_s"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["ratio_to_memcpy"].as_f64().unwrap() > 0.0, "{r}");
    }
    for blocks in [4, 8] {
        for op in ["memcpy", "xor", "pq"] {
            assert!(
                rows.iter()
                    .any(|r| r["data_blocks"] == blocks && r["op"] == op),
                "no {op} row for {blocks} blocks"
            );
        }
    }
}

/// `bench io` drives arrays and raw members, in memory and on files, and says how the
/// writes were served: a RAID5 sequential write of whole stripes is all full-stripe writes,
/// small random writes are not.
#[test]
fn bench_io_drives_arrays_and_raw_members() {
    let run = |extra: &[&str]| {
        let mut a = vec![
            "bench",
            "io",
            "--json",
            "--seconds",
            "0.3",
            "--member-size",
            "16M",
        ];
        a.extend_from_slice(extra);
        raidd(&a).ok().json()
    };
    let raw = run(&["--target", "raw", "--rw", "randread"]);
    // Behind a DMA-aligned buffer, and with latency added to every member I/O.
    let buffered = run(&[
        "--target",
        "raid0",
        "--rw",
        "read",
        "--dab",
        "4M",
        "--member-latency",
        "100us",
    ]);
    assert!(buffered["iops"].as_f64().unwrap() > 0.0, "{buffered}");
    assert_eq!(raw["target"], "raw");
    assert!(raw["iops"].as_f64().unwrap() > 0.0, "{raw}");
    assert!(raw["engine"].is_null());
    let r0 = run(&[
        "--target",
        "raid0",
        "--rw",
        "read",
        "--bs",
        "256K",
        "--threads",
        "2",
    ]);
    assert!(r0["ops"].as_u64().unwrap() > 0, "{r0}");
    assert_eq!(
        r0["copied_bytes_per_io"], 0.0,
        "RAID0 reads copy nothing: {r0}"
    );
    assert!(r0["read_state_bytes"].as_u64().unwrap() > 0, "{r0}");
    assert!(raw["read_state_bytes"].is_null());
    // 3 data chunks of 64K: a 192K request is one whole stripe.
    let full = run(&[
        "--target", "raid5", "--rw", "write", "--bs", "192K", "--qd", "4",
    ]);
    let e = &full["engine"];
    assert!(e["full_stripe_writes"].as_u64().unwrap() > 0, "{full}");
    assert_eq!(e["rmw_writes"], 0, "{full}");
    assert_eq!(e["rcw_writes"], 0, "{full}");
    let small = run(&["--target", "raid6", "--rw", "randwrite", "--members", "5"]);
    let e = &small["engine"];
    assert!(
        e["rmw_writes"].as_u64().unwrap() + e["rcw_writes"].as_u64().unwrap() > 0,
        "{small}"
    );
    assert_eq!(small["alone"], "auto", "{small}");
    // Small writes alone on their stripes: read-modify-write, nothing copied or kept.
    let alone = run(&[
        "--target",
        "raid5",
        "--rw",
        "randwrite",
        "--alone",
        "always",
    ]);
    let e = &alone["engine"];
    assert_eq!(alone["alone"], "always", "{alone}");
    assert!(e["rmw_writes"].as_u64().unwrap() > 0, "{alone}");
    assert_eq!(e["rcw_writes"], 0, "{alone}");
    assert_eq!(e["copied_bytes"], 0, "{alone}");
    let dir = scratch();
    let files = run(&[
        "--target",
        "raid1",
        "--members",
        "2",
        "--dir",
        dir.path().to_str().unwrap(),
        "--rw",
        "randwrite",
    ]);
    assert_eq!(files["member_kind"], "file");
    assert!(files["ops"].as_u64().unwrap() > 0, "{files}");
    assert!(dir.path().join("raidd-bench-1.img").exists());
    // Bad arguments are usage errors, not panics.
    for bad in [
        &["--target", "raid7"][..],
        &["--bs", "1000"],
        &["--qd", "0"],
        &["--rw", "trim"],
        &["--gather", "limit:0"],
        &["--alone", "sometimes"],
        &["--member-size", "4K", "--bs", "4K"],
        &["--member-size", "1P"],
    ] {
        let mut a = vec!["bench", "io", "--seconds", "0.1"];
        a.extend_from_slice(bad);
        assert_eq!(raidd(&a).code, 2, "{bad:?}");
    }
}

/// Nested arrays (raid0 over two raid1 groups) made with the engine, then reported as a tree
/// and used through the outermost array.
#[test]
fn nested_arrays_show_as_a_tree() {
    use raidd_engine::create::{create, CreateSpec};
    use raidd_engine::member::{FileMember, OpenOptions};
    use raidd_engine::Member;
    use raidd_layout::Level;
    use std::sync::Arc;

    let dir = scratch();
    let imgs = images(dir.path(), "n", 4);
    for p in &imgs {
        FileMember::create_image(p, 8 * MIB).unwrap();
    }
    let paths = imgs.clone();
    raidd_rt::block_on(async move {
        let spec = |name: &str, level, members: Vec<Arc<dyn Member>>| CreateSpec {
            name: name.to_string(),
            homehost: "box".to_string(),
            level,
            layout: None,
            chunk_sectors: Some(128),
            members: members.into_iter().map(Some).collect(),
            size_sectors: None,
            assume_clean: true,
            force: false,
            bitmap_chunk: None,
            ppl: false,
            journal: None,
            checksums: None,
        };
        let open = |p: &PathBuf| -> Arc<dyn Member> {
            Arc::new(FileMember::open(p, OpenOptions::default()).unwrap())
        };
        let g1 = create(spec(
            "g1",
            Level::Raid1,
            vec![open(&paths[0]), open(&paths[1])],
        ))
        .await
        .unwrap();
        let g2 = create(spec(
            "g2",
            Level::Raid1,
            vec![open(&paths[2]), open(&paths[3])],
        ))
        .await
        .unwrap();
        let inner: Vec<Arc<dyn Member>> = vec![g1.array.clone(), g2.array.clone()];
        let top = create(spec("top", Level::Raid0, inner)).await.unwrap();
        top.array.close().await.unwrap();
        g1.array.close().await.unwrap();
        g2.array.close().await.unwrap();
    });
    let j = raidd(&args_with(&["detail", "--json"], &imgs)).ok().json();
    let top = &j["array"];
    assert_eq!(top["name"], "top");
    assert_eq!(top["level"], "raid0");
    assert_eq!(top["state"], "clean");
    for (k, group) in ["g1", "g2"].iter().enumerate() {
        let inner = &top["slots"][k]["array"];
        assert_eq!(inner["name"], *group, "{top}");
        assert_eq!(inner["level"], "raid1");
        assert_eq!(
            inner["slots"][1]["member"],
            imgs[2 * k + 1].display().to_string()
        );
        assert_eq!(inner["slots"][1]["state"], "insync");
        assert!(inner["slots"][0]["array"].is_null());
    }
    let human = raidd(&args_with(&["detail"], &imgs)).ok().text();
    assert!(
        human.starts_with(
            "top (raid0, clean)\n|-- [0] in sync: g1 (raid1, clean)\n|   |-- [0] in sync: "
        ),
        "{human}"
    );
    assert!(human.contains("array g2:"), "{human}");
    // I/O goes through the outermost array.
    raidd(&args_with(&["pattern", "write"], &imgs)).ok();
    raidd(&args_with(&["pattern", "verify"], &imgs)).ok();
    let ex = raidd(&args_with(&["examine", "--json"], &imgs)).ok().json();
    assert_eq!(ex["members"][0]["superblock"]["state"], "clean");
    // The order of members does not matter.
    let mut shuffled = imgs.clone();
    shuffled.reverse();
    assert_eq!(detail_json(&shuffled)["uuid"], top["uuid"]);
}

/// A member held open read-write by one raidd process is refused by another (exit 4).
#[test]
fn member_in_use_by_another_process_conflicts() {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::process::{Command, Stdio};

    let dir = scratch();
    let imgs = images(dir.path(), "w", 2);
    create("raid1", &imgs, &[]).ok();
    // `write` from a pipe we keep open: it assembles, then waits for input. Its `-v` log
    // says when it holds the members; probing before that would race it for the lock.
    let mut writer = Command::new(env!("CARGO_BIN_EXE_raidd"))
        .arg("-v")
        .args(args_with(&["write"], &imgs))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut log = BufReader::new(writer.stderr.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        let n = log.read_line(&mut line).unwrap();
        seen.push_str(&line);
        assert!(n > 0, "the writer ended before assembling: {seen}");
        if line.contains("assembled") {
            break;
        }
    }
    let refused = raidd(&args_with(&["detail"], &imgs[..1]));
    assert_eq!(refused.code, 4, "{refused:?}");
    assert!(refused.error().contains("in use"), "{}", refused.stderr);
    let mut stdin = writer.stdin.take().unwrap();
    stdin.write_all(&[7u8; 4096]).unwrap();
    drop(stdin);
    log.read_to_string(&mut seen).unwrap();
    let status = writer.wait().unwrap();
    assert!(status.success(), "{seen}");
    let back = raidd(&args_with(&["read", "--length", "4K"], &imgs)).ok();
    assert!(back.stdout.iter().all(|&b| b == 7));
}

/// `pattern --raw` writes and verifies the pattern on a plain device or file (a kernel md
/// device in the interop tests): a flipped byte is caught, and it takes exactly one path.
#[test]
fn pattern_on_a_raw_file() {
    let dir = scratch();
    let f = dir.path().join("raw.bin");
    fs::File::create(&f).unwrap().set_len(MIB).unwrap();
    let p = f.display().to_string();
    raidd(&["pattern", "write", "--raw", "--seed", "9", &p]).ok();
    raidd(&["pattern", "verify", "--raw", "--seed", "9", &p]).ok();
    let wrong_seed = raidd(&["pattern", "verify", "--raw", "--seed", "8", &p]).expect(8);
    assert!(
        wrong_seed.text().contains("2048 bad sectors"),
        "{}",
        wrong_seed.text()
    );
    {
        use std::os::unix::fs::FileExt;
        let h = fs::OpenOptions::new().write(true).open(&f).unwrap();
        h.write_all_at(&[0xee], 4096 + 100).unwrap();
    }
    let bad = raidd(&["pattern", "verify", "--raw", "--seed", "9", "--json", &p]).expect(8);
    let j = bad.json();
    assert_eq!(j["bad_sectors"], 1, "{j}");
    assert_eq!(j["mismatches"][0]["sector"], 8, "{j}");
    let e = raidd(&["pattern", "verify", "--raw", &p, &p]).expect(2);
    assert!(e.error().contains("exactly one"), "{}", e.error());
}

/// `create --group` refuses what cannot be a pool before it writes anything: two arrays of
/// one name, a group that is not LEVEL:MEMBERS, members given beside groups; and a group
/// that fails half way (a member that does not exist) leaves no image behind; a pool given
/// the members of only some of its inner arrays does not start and changes nothing.
#[test]
fn bad_pools_are_refused_and_leave_nothing() {
    let dir = scratch();
    let d = dir.path();
    let g = |n: &str| {
        let m: Vec<String> = (0..3)
            .map(|i| d.join(format!("{n}{i}.img")).display().to_string())
            .collect();
        format!("raid5:{}", m.join(","))
    };
    let base = ["create", "--level", "raid0", "--name", "p", "--size", "8M"];
    let with = |extra: &[&str]| {
        let mut v: Vec<String> = base.iter().map(|s| s.to_string()).collect();
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let e = raidd(&with(&[
        "--group",
        &format!("p={}", g("a")),
        "--group",
        &g("b"),
    ]))
    .expect(2);
    assert!(
        e.error().contains("two arrays would be named \"p\""),
        "{}",
        e.error()
    );
    let e = raidd(&with(&["--group", "raid5"])).expect(2);
    assert!(e.error().contains("LEVEL:MEMBER"), "{}", e.error());
    let r = raidd(&with(&["--group", &g("a"), "x.img"]));
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("cannot be used with"), "{}", r.stderr);
    // The second group names a member in a directory that does not exist.
    let missing = format!("raid5:{}/nodir/x.img,y.img,z.img", d.display());
    let e = raidd(&with(&["--group", &g("a"), "--group", &missing])).expect(3);
    assert!(e.error().contains("nodir"), "{}", e.error());
    let left: Vec<_> = fs::read_dir(d)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    // A pool given only one group's members: it cannot run, says why in terms of its inner
    // arrays, and no member changes.
    raidd(&with(&["--group", &g("a"), "--group", &g("b")])).ok();
    let a: Vec<PathBuf> = (0..3).map(|i| d.join(format!("a{i}.img"))).collect();
    let before: Vec<Vec<u8>> = a.iter().map(|p| fs::read(p).unwrap()).collect();
    for args in [
        vec!["detail"],
        vec!["pattern", "write"],
        vec!["volume", "create", "--name", "v", "--size", "1M"],
    ] {
        let e = raidd(&args_with(&args, &a)).expect(5);
        assert!(
            e.error().contains("its members are arrays")
                && e.error().contains("array:p-0")
                && e.error().contains("give the members of every inner array"),
            "{args:?}: {}",
            e.error()
        );
    }
    let after: Vec<Vec<u8>> = a.iter().map(|p| fs::read(p).unwrap()).collect();
    assert!(before == after, "a refused pool changed its members");
}

/// `raidd volume`: GPT volumes on a RAID1, made and listed offline; sgdisk reads raidd's
/// table as valid, raidd reads partitions sgdisk adds, a delete leaves the rest, and bad
/// requests change nothing.
#[test]
fn volumes_are_gpt_partitions_sgdisk_agrees_with() {
    let dir = scratch();
    let d = dir.path();
    let m = [d.join("v0.img"), d.join("v1.img")];
    raidd(&args_with(
        &["create", "--level", "raid1", "--name", "v", "--size", "32M"],
        &m,
    ))
    .ok();
    let list = || {
        raidd(&args_with(&["volume", "list", "--json"], &m))
            .ok()
            .json()
    };
    assert_eq!(list()["partitioned"], false);
    for (name, size) in [("data", "8M"), ("logs", "4M")] {
        raidd(&args_with(
            &["volume", "create", "--name", name, "--size", size],
            &m,
        ))
        .ok();
    }
    let l = list();
    assert_eq!(l["partitioned"], true);
    assert_eq!(l["volumes"][0]["name"], "data");
    assert_eq!(l["volumes"][0]["offset_bytes"], 1 << 20);
    assert_eq!(l["volumes"][1]["name"], "logs");
    assert_eq!(l["volumes"][1]["offset_bytes"], 9 << 20);
    // The array's bytes as a disk image: sgdisk finds raidd's table sound.
    let image = d.join("array.img");
    raidd(&args_with(
        &["read", "--output", image.to_str().unwrap()],
        &m,
    ))
    .ok();
    let sg = |args: &[&str]| {
        let mut a: Vec<&str> = args.to_vec();
        a.push(image.to_str().unwrap());
        common::daemon::must(common::daemon::tool("sgdisk").args(&a))
    };
    let verify = sg(&["-v"]);
    assert!(verify.contains("No problems found"), "{verify}");
    let printed = sg(&["-p"]);
    assert!(
        printed.contains("2048           18431") && printed.contains("logs"),
        "{printed}"
    );
    // sgdisk adds one; written back, raidd lists it.
    sg(&["-n", "3:0:+2M", "-c", "3:extra"]);
    raidd(&args_with(
        &["write", "--input", image.to_str().unwrap()],
        &m,
    ))
    .ok();
    let l = list();
    let names: Vec<&str> = l["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["data", "logs", "extra"], "{l}");
    // Bad requests are refused and change nothing.
    for (args, want) in [
        (vec!["create", "--name", "data", "--size", "1M"], "exists"),
        (
            vec!["create", "--name", "big", "--size", "64M"],
            "no free space",
        ),
        (
            vec!["create", "--name", "odd", "--size", "1000"],
            "multiple of 512",
        ),
        (vec!["delete", "--name", "nosuch"], "no volume \"nosuch\""),
    ] {
        let mut a = vec!["volume"];
        a.extend(args);
        let e = raidd(&args_with(&a, &m)).expect(2);
        assert!(e.error().contains(want), "{a:?}: {}", e.error());
    }
    assert_eq!(list(), l);
    raidd(&args_with(&["volume", "delete", "--name", "logs"], &m)).ok();
    let after = list();
    assert_eq!(after["volumes"].as_array().unwrap().len(), 2, "{after}");
    assert_eq!(after["volumes"][0]["name"], "data");
    assert_eq!(after["volumes"][1]["name"], "extra");
}
