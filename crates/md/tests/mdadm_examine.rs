//! Interop with mdadm: members built by this crate (with mdadm's create defaults from
//! `raidd_md::create`) are written into sparse image files and read back by the real
//! `mdadm --examine` / `--examine-bitmap`, which must agree on every field it prints and
//! call the checksum correct. Skipped, with a notice, where mdadm is not installed.

mod common;

use common::{before_paren, examine_mismatches, parse_mdadm_sections, uuid_colons, Section};
use raidd_md::{create, feature, BitmapSuper, DevRole, Superblock, MAX_SECTOR};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// 64 MiB members (sparse).
const DEV_SECTORS: u64 = 64 * 1024 * 2;
const CHUNK_SECTORS: u32 = 128; // 64 KiB
const SB_BYTE: u64 = 4096;
const BITMAP_BYTE: u64 = SB_BYTE + 8 * 512;
/// max_dev as mdadm 4.2 and the kernel write it for small arrays.
const MAX_DEV: usize = 128;

#[derive(Clone, Copy)]
struct Array {
    label: &'static str,
    level: i32,
    layout: u32,
    raid_disks: u16,
    /// Extra members beyond raid_disks, recorded as spares.
    spares: u16,
    /// A slot whose member has failed: its own role (and every member's view) says faulty.
    failed_slot: Option<u16>,
    bitmap: bool,
}

const fn array(label: &'static str, level: i32, layout: u32, raid_disks: u16) -> Array {
    Array {
        label,
        level,
        layout,
        raid_disks,
        spares: 0,
        failed_slot: None,
        bitmap: false,
    }
}

fn arrays() -> Vec<Array> {
    let mut all = vec![
        array("linear", -1, 0, 3),
        array("raid0", 0, 1, 3),
        array("raid1", 1, 0, 2),
        array("raid4", 4, 0, 4),
    ];
    let r5_names = ["r5-la", "r5-ra", "r5-ls", "r5-rs", "r5-pf", "r5-pl"];
    for (layout, label) in (0u32..).zip(r5_names) {
        all.push(array(label, 5, layout, 4));
    }
    all.extend([
        array("raid6", 6, 2, 5),
        array("r10-n2", 10, 0x102, 4),
        array("r10-f2", 10, 0x201, 4),
        array("r10-o2", 10, 0x10201, 4),
        Array {
            spares: 1,
            ..array("r5-spare", 5, 2, 4)
        },
        Array {
            failed_slot: Some(1),
            ..array("r6-failed", 6, 2, 5)
        },
        Array {
            bitmap: true,
            ..array("r1-bitmap", 1, 0, 2)
        },
        Array {
            bitmap: true,
            ..array("r5-bitmap", 5, 2, 3)
        },
    ]);
    all
}

fn chunk_for(level: i32) -> u32 {
    if matches!(level, -1 | 1) {
        0
    } else {
        CHUNK_SECTORS
    }
}

/// The superblock for member `dev_number` (its own role comes from `dev_roles`).
fn member_superblock(a: &Array, dev_number: u16, roles: &[u16]) -> Superblock {
    let chunk = chunk_for(a.level);
    let data_offset = create::default_data_offset(DEV_SECTORS, chunk);
    let data_size = DEV_SECTORS - data_offset;
    let size = create::component_size_sectors(a.level, data_size, chunk);
    let mut sb = Superblock {
        feature_map: 0,
        set_uuid: *b"raidd-md-interop",
        set_name: [0; 32],
        ctime: Superblock::join_time(1_700_000_000, 250_000),
        level: a.level,
        layout: a.layout,
        size,
        chunksize: chunk,
        raid_disks: u32::from(a.raid_disks),
        bitmap_offset: 0,
        new_level: 0,
        reshape_position: 0,
        delta_disks: 0,
        new_layout: 0,
        new_chunk: 0,
        new_offset: 0,
        data_offset,
        data_size,
        super_offset: SB_BYTE / 512,
        recovery_offset: 0,
        dev_number: u32::from(dev_number),
        cnt_corrected_read: 0,
        device_uuid: [0xd0 + dev_number as u8; 16],
        devflags: 0,
        bblog_shift: 0,
        bblog_size: 0,
        bblog_offset: 0,
        utime: Superblock::join_time(1_700_086_400 + 3_723, 0),
        events: 42,
        resync_offset: MAX_SECTOR,
        dev_roles: roles.to_vec(),
    };
    sb.set_array_name(&format!("raidd:{}", a.label));
    sb.set_uuid[0] = a.label.len() as u8; // a different UUID per array
    let bitmap = a.bitmap.then(|| bitmap_for(&sb));
    if bitmap.is_some() {
        sb.feature_map |= feature::BITMAP_OFFSET;
        sb.bitmap_offset = create::BITMAP_OFFSET_SECTORS as i32;
    }
    let bm_space = create::bblog_bm_space_sectors(size, bitmap.as_ref());
    (sb.bblog_offset, sb.bblog_size) = create::bblog_placement(data_offset, bm_space);
    sb
}

fn bitmap_for(sb: &Superblock) -> BitmapSuper {
    BitmapSuper {
        version: 4,
        uuid: sb.set_uuid,
        events: sb.events,
        events_cleared: sb.events,
        sync_size: sb.size,
        state: 0,
        chunksize: 1 << 20,
        daemon_sleep: 5,
        write_behind: 0,
        sectors_reserved: 0,
        nodes: 0,
        cluster_name: [0; 64],
    }
}

fn dev_roles(a: &Array) -> Vec<u16> {
    let mut roles = vec![DevRole::Spare.to_raw(); MAX_DEV];
    for slot in 0..a.raid_disks {
        let role = if a.failed_slot == Some(slot) {
            DevRole::Faulty
        } else {
            DevRole::Active(slot)
        };
        roles[usize::from(slot)] = role.to_raw();
    }
    roles
}

/// Writes one sparse member image: superblock at 4 KiB, bitmap (if any) 8 sectors later.
fn write_member(path: &Path, sb: &Superblock, bitmap: Option<&[u8]>) {
    sb.validate(sb.super_offset)
        .expect("built superblock is valid");
    let file = File::create(path).expect("create image");
    file.set_len(DEV_SECTORS * 512).expect("size image");
    file.write_all_at(&sb.encode(), SB_BYTE)
        .expect("write superblock");
    if let Some(area) = bitmap {
        file.write_all_at(area, BITMAP_BYTE).expect("write bitmap");
    }
}

/// The on-disk bitmap area: header then all-clean bits, padded to mdadm's 4 KiB.
fn bitmap_area(bm: &BitmapSuper) -> Vec<u8> {
    let mut area = bm.encode();
    area.resize(bm.stored_len(4096) as usize, 0);
    area
}

fn mdadm(args: &[&str], image: &Path) -> String {
    let out = Command::new("mdadm")
        .args(args)
        .arg(image)
        .env("TZ", "UTC") // times are compared as UTC
        .output()
        .expect("run mdadm");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "mdadm {args:?} {}: {}\n{text}",
        image.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

fn mdadm_available() -> bool {
    match Command::new("mdadm").arg("--version").output() {
        Ok(out) => out.status.success(),
        Err(_) => false,
    }
}

/// The one section of `--examine` output for a single image.
fn only_section(text: &str, image: &Path) -> Section {
    let mut sections = parse_mdadm_sections(text);
    assert_eq!(sections.len(), 1, "{}:\n{text}", image.display());
    let (name, section) = sections.remove(0);
    assert_eq!(PathBuf::from(&name), image, "section header");
    section
}

fn check_member(dir: &Path, a: &Array, dev_number: u16, roles: &[u16]) {
    let sb = member_superblock(a, dev_number, roles);
    let bitmap = a.bitmap.then(|| bitmap_for(&sb));
    let image = dir.join(format!("{}-{dev_number}.img", a.label));
    let area = bitmap.as_ref().map(bitmap_area);
    write_member(&image, &sb, area.as_deref());
    let text = mdadm(&["--examine"], &image);
    let section = only_section(&text, &image);
    let bad = examine_mismatches(&sb, &section);
    assert!(
        bad.is_empty(),
        "{} member {dev_number}:\n{}\n{text}",
        a.label,
        bad.join("\n")
    );
    // The checks that matter most, spelled out (also covered by the comparison above).
    assert_eq!(section.get("State").map(String::as_str), Some("clean"));
    let checksum = section.get("Checksum").expect("Checksum line");
    assert!(checksum.ends_with("- correct"), "{}: {checksum}", a.label);
    if let (Some(bm), Some(area)) = (&bitmap, &area) {
        check_bitmap(&image, bm, area);
    }
}

/// mdadm reads an internal bitmap only through a block device; from a plain file it reads
/// a bitmap file. So the same bytes written 8 sectors after the superblock go into a file
/// of their own, which `mdadm --examine-bitmap` then reads.
fn check_bitmap(image: &Path, bm: &BitmapSuper, area: &[u8]) {
    let file = image.with_extension("bitmap");
    std::fs::write(&file, area).expect("write bitmap file");
    let text = mdadm(&["--examine-bitmap"], &file);
    let sections = parse_mdadm_sections(&text);
    let section = &sections.first().expect("bitmap section").1;
    let want = [
        ("Magic", "6d746962".to_string()),
        ("Version", "4".to_string()),
        ("UUID", uuid_colons(&bm.uuid)),
        ("Events", bm.events.to_string()),
        ("Chunksize", "1 MB".to_string()),
        ("Daemon", "5s flush period".to_string()),
        ("Sync Size", (bm.sync_size / 2).to_string()),
        ("Bitmap", format!("{} bits (chunks), 0 dirty", bm.bits())),
    ];
    for (key, value) in want {
        let got = section.get(key).map(|v| before_paren(v));
        assert_eq!(
            got,
            Some(value.as_str()),
            "{}: {key}\n{text}",
            file.display()
        );
    }
}

#[test]
fn mdadm_examine_agrees_with_our_superblocks() {
    if !mdadm_available() {
        eprintln!("skipping mdadm interop test: `mdadm` is not installed");
        return;
    }
    // Under the target dir, not /tmp: mdadm opens bitmap files with O_DIRECT, which tmpfs
    // refuses.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let mut members = 0;
    for a in arrays() {
        // Spares (dev_number >= raid_disks) keep the spare role dev_roles starts with.
        let roles = dev_roles(&a);
        for dev_number in 0..a.raid_disks + a.spares {
            check_member(dir.path(), &a, dev_number, &roles);
            members += 1;
        }
    }
    assert!(members >= 50, "{members} members examined");
}

/// The mdadm defaults hold at sizes the fixtures do not cover.
#[test]
fn large_member_geometry() {
    let tb_sectors = 1_000_000_000_000 / 512;
    let data_offset = create::default_data_offset(tb_sectors, CHUNK_SECTORS);
    assert_eq!(data_offset, 264_192);
    let size = create::component_size_sectors(5, tb_sectors - data_offset, CHUNK_SECTORS);
    assert_eq!(size % u64::from(CHUNK_SECTORS), 0);
    // Over 200 GiB mdadm reserves 128 KiB for a bitmap; the log follows it.
    let bm_space = create::bblog_bm_space_sectors(size, None);
    assert_eq!(bm_space, 256);
    assert_eq!(create::bblog_placement(data_offset, bm_space), (264, 8));
}
