//! Interop with Debian's mdadm: arrays made by `raidd create` at every level and layout are
//! read by the real `mdadm --examine`, which must report what raidd reports (level, layout,
//! chunk, raid devices, size, UUID, name, role, clean state) and call the checksum correct.
//!
//! mdadm is required: install it (`apt-get install mdadm`; CI does) or this test fails.
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use common::*;
use serde_json::Value;

const MDADM: &str = "/usr/sbin/mdadm";

fn mdadm_path() -> String {
    for p in [MDADM, "/sbin/mdadm", "/usr/bin/mdadm"] {
        if Path::new(p).exists() {
            return p.to_string();
        }
    }
    if let Ok(out) = Command::new("mdadm").arg("--version").output() {
        if out.status.success() || !out.stderr.is_empty() {
            return "mdadm".to_string();
        }
    }
    panic!(
        "mdadm is not installed: the interop test needs Debian's mdadm \
         (install it with `apt-get install mdadm`; CI installs it)"
    );
}

/// `mdadm --examine FILE` as "Key" -> "value" (without mdadm's parenthesised notes).
fn mdadm_examine(mdadm: &str, image: &Path) -> BTreeMap<String, String> {
    let out = Command::new(mdadm)
        .arg("--examine")
        .arg(image)
        .env("TZ", "UTC")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "mdadm --examine {}: {}\n{text}",
        image.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut map = BTreeMap::new();
    for line in text.lines() {
        if let Some((k, v)) = line.split_once(" : ") {
            map.insert(k.trim().to_string(), before_paren(v).to_string());
        }
    }
    map.insert("__text".to_string(), text);
    map
}

fn before_paren(v: &str) -> &str {
    match v.rsplit_once(" (") {
        Some((head, tail)) if tail.ends_with(')') => head.trim(),
        _ => v.trim(),
    }
}

struct Case {
    label: &'static str,
    level: &'static str,
    layout: Option<&'static str>,
    members: usize,
    /// What mdadm prints on its Layout line, if it prints one.
    mdadm_layout: Option<&'static str>,
    /// mdadm's chunk line: ("Chunk Size" | "Rounding", value) or none.
    chunk_line: Option<&'static str>,
}

fn cases() -> Vec<Case> {
    let c = |label, level, layout, members, mdadm_layout, chunk_line| Case {
        label,
        level,
        layout,
        members,
        mdadm_layout,
        chunk_line,
    };
    let mut v = vec![
        c("lin", "linear", None, 3, None, Some("Rounding")),
        c("r0", "raid0", None, 3, None, Some("Chunk Size")),
        c("r1", "raid1", None, 2, None, None),
        c("r4", "raid4", None, 4, None, Some("Chunk Size")),
    ];
    for (label, layout) in [
        ("r5la", "left-asymmetric"),
        ("r5ra", "right-asymmetric"),
        ("r5ls", "left-symmetric"),
        ("r5rs", "right-symmetric"),
        ("r5pf", "parity-first"),
        ("r5pl", "parity-last"),
    ] {
        v.push(c(
            label,
            "raid5",
            Some(layout),
            4,
            Some(layout),
            Some("Chunk Size"),
        ));
    }
    v.push(c(
        "r6",
        "raid6",
        None,
        5,
        Some("left-symmetric"),
        Some("Chunk Size"),
    ));
    for (label, layout, text) in [
        ("r10n2", "n2", "near=2"),
        ("r10f2", "f2", "far=2"),
        ("r10o2", "o2", "offset=2"),
    ] {
        v.push(c(
            label,
            "raid10",
            Some(layout),
            4,
            Some(text),
            Some("Chunk Size"),
        ));
    }
    v
}

#[test]
fn mdadm_examine_reads_raidd_created_members() {
    let mdadm = mdadm_path();
    let dir = scratch();
    let mut checked = 0;
    for case in cases() {
        let imgs = images(dir.path(), case.label, case.members);
        let mut fixed = vec![
            "create",
            "--json",
            "--level",
            case.level,
            "--chunk",
            "64K",
            "--size",
            "4M",
            "--name",
            case.label,
            "--homehost",
            "raidd",
        ];
        if let Some(l) = case.layout {
            fixed.extend(["--layout", l]);
        }
        let created = raidd(&args_with(&fixed, &imgs)).ok().json();
        let a: &Value = &created["array"];
        let detail = raidd(&args_with(&["detail", "--json"], &imgs)).ok().json();
        assert_eq!(detail["array"]["uuid"], a["uuid"]);
        let examined = raidd(&args_with(&["examine", "--json"], &imgs)).ok().json();
        for (i, img) in imgs.iter().enumerate() {
            let ours = &examined["members"][i]["superblock"];
            let m = mdadm_examine(&mdadm, img);
            let ctx = format!("{} member {i}:\n{}", case.label, m["__text"]);
            let get = |k: &str| m.get(k).map(String::as_str);
            assert_eq!(get("Magic"), Some("a92b4efc"), "{ctx}");
            assert_eq!(get("Version"), Some("1.2"), "{ctx}");
            assert_eq!(get("Raid Level"), Some(case.level), "{ctx}");
            assert_eq!(get("Raid Level"), ours["level"].as_str(), "{ctx}");
            let n = case.members.to_string();
            assert_eq!(get("Raid Devices"), Some(n.as_str()), "{ctx}");
            assert_eq!(get("Array UUID"), a["uuid"].as_str(), "{ctx}");
            assert_eq!(get("Array UUID"), ours["array_uuid"].as_str(), "{ctx}");
            assert_eq!(get("Device UUID"), ours["device_uuid"].as_str(), "{ctx}");
            let full_name = format!("raidd:{}", case.label);
            assert_eq!(get("Name"), Some(full_name.as_str()), "{ctx}");
            assert_eq!(a["full_name"], full_name);
            let role = format!("Active device {i}");
            assert_eq!(get("Device Role"), Some(role.as_str()), "{ctx}");
            assert_eq!(ours["device_role"], role);
            assert_eq!(get("State"), Some("clean"), "{ctx}");
            let checksum = get("Checksum").unwrap_or_default();
            assert_eq!(
                checksum,
                format!("{} - correct", ours["checksum"].as_str().unwrap()),
                "{ctx}"
            );
            assert_eq!(
                get("Events"),
                Some(ours["events"].to_string().as_str()),
                "{ctx}"
            );
            let sectors = |k: &str| format!("{} sectors", ours[k].as_u64().unwrap());
            assert_eq!(
                get("Data Offset"),
                Some(sectors("data_offset_sectors").as_str()),
                "{ctx}"
            );
            assert_eq!(
                get("Avail Dev Size"),
                Some(sectors("avail_dev_size_sectors").as_str()),
                "{ctx}"
            );
            assert_eq!(get("Array State"), ours["array_state"].as_str(), "{ctx}");
            assert_eq!(get("Layout"), case.mdadm_layout, "{ctx}");
            if let Some(layout) = case.mdadm_layout {
                assert_eq!(a["layout"], layout, "{ctx}");
            }
            match case.chunk_line {
                Some(key) => {
                    let want = if case.level == "linear" { "0K" } else { "64K" };
                    assert_eq!(get(key), Some(want), "{ctx}");
                }
                None => assert!(get("Chunk Size").is_none(), "{ctx}"),
            }
            if case.level != "linear" && case.level != "raid1" {
                assert_eq!(a["chunk_bytes"], 65536, "{ctx}");
            }
            // mdadm prints the array size where one superblock determines it.
            match get("Array Size") {
                Some(size) => {
                    let kib = a["size_bytes"].as_u64().unwrap() / 1024;
                    assert_eq!(size, format!("{kib} KiB"), "{ctx}");
                    assert_eq!(ours["array_size_kib"], kib, "{ctx}");
                }
                None => assert!(
                    matches!(case.level, "linear" | "raid0"),
                    "mdadm printed no Array Size for {}: {ctx}",
                    case.level
                ),
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 3 + 3 + 2 + 4 + 6 * 4 + 5 + 3 * 4);
}

/// `mdadm --examine-bitmap` of a member, through a read-only loop device (mdadm reads a
/// regular file as a bitmap file), as "Key" -> "value".
fn mdadm_examine_bitmap(mdadm: &str, image: &Path) -> BTreeMap<String, String> {
    let out = Command::new("losetup")
        .args(["-f", "--show", "-r"])
        .arg(image)
        .output()
        .expect("losetup (util-linux) is needed");
    assert!(
        out.status.success(),
        "losetup: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let x = Command::new(mdadm).args(["-X", &dev]).output().unwrap();
    let _ = Command::new("losetup").args(["-d", &dev]).status();
    let text = String::from_utf8_lossy(&x.stdout).into_owned();
    assert!(
        x.status.success(),
        "mdadm -X: {}\n{text}",
        String::from_utf8_lossy(&x.stderr)
    );
    text.lines()
        .filter_map(|l| l.split_once(" : "))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// An internal write-intent bitmap made by `raidd create --bitmap internal` is read by
/// mdadm: its chunk, sync size, bit count and, after raidd wrote and closed cleanly, no
/// dirty bits; `mdadm --examine` places it where mdadm would.
#[test]
fn mdadm_reads_raidd_bitmaps() {
    let mdadm = mdadm_path();
    let dir = scratch();
    for (level, n, sync_kib) in [
        ("raid1", 2, 32768u64),
        ("raid5", 3, 32768),
        ("raid10", 4, 65536),
    ] {
        let members = images(dir.path(), level, n);
        raidd(&args_with(
            &[
                "create",
                "--level",
                level,
                "--size",
                "33M",
                "--chunk",
                "64K",
                "--bitmap",
                "internal",
                "--bitmap-chunk",
                "1M",
            ],
            &members,
        ))
        .ok();
        raidd_stdin(
            &args_with(&["write", "--offset", "1M"], &members),
            &bytes(1 << 20, 3),
        )
        .ok();
        let ex = mdadm_examine(&mdadm, &members[0]);
        assert_eq!(
            ex["Internal Bitmap"], "8 sectors from superblock",
            "{level}"
        );
        let x = mdadm_examine_bitmap(&mdadm, &members[1]);
        assert_eq!(x["Magic"], "6d746962", "{level}: {x:?}");
        assert_eq!(x["Chunksize"], "1 MB", "{level}: {x:?}");
        assert!(
            x["Sync Size"].starts_with(&sync_kib.to_string()),
            "{level}: {x:?}"
        );
        let bits = sync_kib / 1024;
        assert_eq!(
            x["Bitmap"],
            format!("{bits} bits (chunks), 0 dirty (0.0%)"),
            "{level}: {x:?}"
        );
        assert_eq!(x["State"], "OK", "{level}");
    }
    // Bitmaps need redundancy; too small a chunk for the space is refused.
    let m = images(dir.path(), "r0", 2);
    let e = raidd(&args_with(
        &[
            "create", "--level", "raid0", "--size", "8M", "--bitmap", "internal",
        ],
        &m,
    ))
    .expect(2);
    assert!(e.error().contains("no redundancy"), "{}", e.error());
    let m = images(dir.path(), "tiny", 2);
    let e = raidd(&args_with(
        &[
            "create",
            "--level",
            "raid1",
            "--size",
            "2T",
            "--bitmap",
            "internal",
            "--bitmap-chunk",
            "512",
        ],
        &m,
    ))
    .expect(2);
    assert!(e.error().contains("larger --bitmap-chunk"), "{}", e.error());
}

/// `raidd grow --checksums crc32c` offline: refused with nothing changed where the members
/// have no room past what the array uses; otherwise mdadm examines every member as valid,
/// its used size the same and its data area ending where the tags begin, the data reads
/// back the same, and the tags then find a bit flipped behind raidd's back (and the read
/// still returns the right bytes).
#[test]
fn checksums_added_offline_keep_the_superblocks_valid_for_mdadm() {
    let mdadm = mdadm_path();
    let dir = scratch();
    let sized = |prefix: &str, n: usize| {
        let imgs = images(dir.path(), prefix, n);
        for img in &imgs {
            std::fs::File::create(img)
                .unwrap()
                .set_len(8 << 20)
                .unwrap();
        }
        imgs
    };
    let full = sized("full", 3);
    raidd(&args_with(
        &[
            "create", "--level", "raid5", "--chunk", "64K", "--name", "full",
        ],
        &full,
    ))
    .ok();
    let before = mdadm_examine(&mdadm, &full[0]);
    let e = raidd(&args_with(&["grow", "--checksums", "crc32c"], &full)).expect(2);
    assert!(
        e.error().contains("no room for checksum tags"),
        "{}",
        e.error()
    );
    let after = mdadm_examine(&mdadm, &full[0]);
    assert_eq!(before["Avail Dev Size"], after["Avail Dev Size"]);
    assert_eq!(before["Events"], after["Events"], "nothing written");
    let imgs = sized("ck", 4);
    raidd(&args_with(
        &[
            "create", "--level", "raid5", "--chunk", "64K", "--size", "4M", "--name", "ck",
        ],
        &imgs,
    ))
    .ok();
    raidd(&args_with(
        &["pattern", "write", "--generation", "3"],
        &imgs,
    ))
    .ok();
    let before = mdadm_examine(&mdadm, &imgs[0]);
    let out = raidd(&args_with(
        &["grow", "--json", "--checksums", "crc32c"],
        &imgs,
    ))
    .ok()
    .json();
    assert_eq!(out["checksums"], "crc32c", "{out}");
    assert!(out["tag_bytes"].as_u64().unwrap() > 0, "{out}");
    // What clients will see change is said: the logical block grows to the tags' block.
    assert_eq!(out["logical_block_bytes"]["from"], 512, "{out}");
    assert_eq!(out["logical_block_bytes"]["to"], 4096, "{out}");
    for img in &imgs {
        let ex = mdadm_examine(&mdadm, img);
        let text = &ex["__text"];
        assert_eq!(
            ex["Checksum"].split(" - ").nth(1),
            Some("correct"),
            "{text}"
        );
        // The array uses what it used (mdadm shows it apart from the larger data area now).
        let sectors = |v: &str| v.split(' ').next().unwrap().parse::<u64>().unwrap();
        let used = before
            .get("Used Dev Size")
            .unwrap_or(&before["Avail Dev Size"]);
        assert_eq!(sectors(&ex["Used Dev Size"]), sectors(used), "{text}");
        assert!(sectors(&ex["Avail Dev Size"]) >= sectors(used), "{text}");
        assert_eq!(ex["Data Offset"], before["Data Offset"], "{text}");
    }
    let detail = raidd(&args_with(&["detail"], &imgs)).ok().text();
    assert!(detail.contains("Checksums : crc32c"), "{detail}");
    raidd(&args_with(
        &["pattern", "verify", "--generation", "3"],
        &imgs,
    ))
    .ok();
    // Member 0 holds the array's first chunk: flip a bit there.
    let ex = raidd(&args_with(&["examine", "--json"], &imgs[..1]))
        .ok()
        .json();
    let base = ex["members"][0]["superblock"]["data_offset_sectors"]
        .as_u64()
        .unwrap()
        * 512;
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&imgs[0])
            .unwrap();
        let mut b = [0u8; 1];
        f.read_exact_at(&mut b, base + 8192 + 5).unwrap();
        f.write_all_at(&[b[0] ^ 0x10], base + 8192 + 5).unwrap();
    }
    let v = raidd(&args_with(
        &["pattern", "verify", "-v", "--generation", "3"],
        &imgs,
    ))
    .ok();
    assert!(v.stderr.contains("checksum mismatch"), "{}", v.stderr);
    let again = raidd(&args_with(&["grow", "--checksums", "crc32c"], &imgs)).expect(2);
    assert!(
        again.error().contains("checksums already"),
        "{}",
        again.error()
    );
}

/// `raidd grow --consistency-policy` offline on a RAID5 made without a log: mdadm reads the
/// partial parity log raidd switched on where the superblock says (after the superblock's
/// 4 KiB, up to the empty bad-block log it moved to just before the data), and after
/// the switch back neither; the data reads back the same throughout, and a second switch
/// to the policy in force is refused.
#[test]
fn mdadm_reads_a_partial_parity_log_switched_on_and_off_offline() {
    let mdadm = mdadm_path();
    let dir = scratch();
    let imgs = images(dir.path(), "sw", 4);
    let fixed = [
        "create", "--level", "raid5", "--chunk", "64K", "--size", "4M", "--name", "sw",
    ];
    raidd(&args_with(&fixed, &imgs)).ok();
    raidd(&args_with(
        &["pattern", "write", "--generation", "5"],
        &imgs,
    ))
    .ok();
    let before = mdadm_examine(&mdadm, &imgs[0]);
    assert!(!before.contains_key("PPL"), "{}", before["__text"]);
    let on = raidd(&args_with(
        &["grow", "--json", "--consistency-policy", "ppl"],
        &imgs,
    ))
    .ok()
    .json();
    assert_eq!(on["consistency_policy"]["from"], "resync", "{on}");
    assert_eq!(on["consistency_policy"]["to"], "ppl", "{on}");
    for img in &imgs {
        let ex = mdadm_examine(&mdadm, img);
        let text = &ex["__text"];
        // From the superblock's 4 KiB to the log's new place: 1 MiB at most.
        let data_offset: u64 = ex["Data Offset"]
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let ppl = (data_offset - 8 - 8 - 8).min(2048);
        assert_eq!(
            ex.get("PPL").map(String::as_str),
            Some(format!("{ppl} sectors at offset 8 sectors from superblock").as_str()),
            "{text}"
        );
        assert_eq!(
            ex.get("Bad Block Log").map(String::as_str),
            Some(
                format!(
                    "512 entries available at offset {} sectors",
                    data_offset - 16
                )
                .as_str()
            ),
            "{text}"
        );
        assert_eq!(
            ex["Checksum"].split(" - ").nth(1),
            Some("correct"),
            "{text}"
        );
    }
    let detail = raidd(&args_with(&["detail"], &imgs)).ok().text();
    assert!(detail.contains("Consistency Policy : ppl"), "{detail}");
    raidd(&args_with(
        &["pattern", "verify", "--generation", "5"],
        &imgs,
    ))
    .ok();
    let again = raidd(&args_with(&["grow", "--consistency-policy", "ppl"], &imgs)).expect(4);
    assert!(again.error().contains("already ppl"), "{}", again.error());
    raidd(&args_with(
        &["grow", "--consistency-policy", "resync"],
        &imgs,
    ))
    .ok();
    for img in &imgs {
        let ex = mdadm_examine(&mdadm, img);
        assert!(!ex.contains_key("PPL"), "{}", ex["__text"]);
    }
    let detail = raidd(&args_with(&["detail"], &imgs)).ok().text();
    assert!(detail.contains("Consistency Policy : resync"), "{detail}");
    raidd(&args_with(
        &["pattern", "verify", "--generation", "5"],
        &imgs,
    ))
    .ok();
}

/// `raidd grow --consistency-policy bitmap` offline on a RAID5 made without one: mdadm
/// reads the bitmap where mdadm puts it, with the chunk asked for, every bit clear after a
/// clean close, and its events those of the superblock; `--consistency-policy resync` takes
/// it off again. The data reads back the same throughout, and a bitmap and a partial parity
/// log exclude each other.
#[test]
fn mdadm_reads_a_bitmap_switched_on_offline() {
    let mdadm = mdadm_path();
    let dir = scratch();
    let imgs = images(dir.path(), "bm", 3);
    let fixed = [
        "create", "--level", "raid5", "--chunk", "64K", "--size", "33M", "--name", "bm",
    ];
    raidd(&args_with(&fixed, &imgs)).ok();
    raidd(&args_with(
        &["pattern", "write", "--generation", "4"],
        &imgs,
    ))
    .ok();
    let grow = |policy: &str, extra: &[&str]| {
        let mut a = vec!["grow", "--json", "--consistency-policy", policy];
        a.extend_from_slice(extra);
        raidd(&args_with(&a, &imgs))
    };
    let on = grow("bitmap", &["--bitmap-chunk", "1M"]).ok().json();
    assert_eq!(on["consistency_policy"]["to"], "bitmap", "{on}");
    for img in &imgs {
        let ex = mdadm_examine(&mdadm, img);
        assert_eq!(
            ex["Internal Bitmap"], "8 sectors from superblock",
            "{}",
            ex["__text"]
        );
        let x = mdadm_examine_bitmap(&mdadm, img);
        assert_eq!(x["Chunksize"], "1 MB", "{x:?}");
        assert_eq!(x["Bitmap"], "32 bits (chunks), 0 dirty (0.0%)", "{x:?}");
        assert_eq!(x["Events"], ex["Events"], "{x:?}");
        assert_eq!(x["State"], "OK", "{x:?}");
    }
    let detail = raidd(&args_with(&["detail"], &imgs)).ok().text();
    assert!(detail.contains("Consistency Policy : bitmap"), "{detail}");
    raidd(&args_with(
        &["pattern", "verify", "--generation", "4"],
        &imgs,
    ))
    .ok();
    let ppl = grow("ppl", &[]).expect(4);
    assert!(ppl.error().contains("not both"), "{}", ppl.error());
    grow("resync", &[]).ok();
    for img in &imgs {
        let ex = mdadm_examine(&mdadm, img);
        assert!(!ex.contains_key("Internal Bitmap"), "{}", ex["__text"]);
    }
    raidd(&args_with(
        &["pattern", "verify", "--generation", "4"],
        &imgs,
    ))
    .ok();
}
