//! Superblocks and bitmaps written by the real kernel md (see tests/data/README.md),
//! checked field by field against the fixtures' manifest.json, examine.txt and bitmap.txt.

mod common;

use common::{before_paren, examine_mismatches, parse_mdadm_sections, uuid_colons, Section};
use raidd_md::{create, feature, BitmapSuper, DevRole, Superblock};
use serde_json::Value;
use std::fs;
use std::path::{Path, PathBuf};

const DATA_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data");
/// v1.2: the superblock is read at sector 8 (byte 4096).
const SB_SECTOR: u64 = 8;
const FIXTURE_COUNT: usize = 7;

struct Member {
    /// File stem: "m0", "m2-faulty".
    stem: String,
    json: Value,
    sb_bytes: Vec<u8>,
    sb: Superblock,
    /// a7 only: the 4 KiB after the superblock slot (bitmap header + bits).
    bitmap_bytes: Option<Vec<u8>>,
}

struct Fixture {
    name: String,
    manifest: Value,
    examine: Vec<(String, Section)>,
    bitmap_txt: Option<Vec<(String, Section)>>,
    members: Vec<Member>,
}

impl Fixture {
    fn raid_disks(&self) -> u32 {
        u32_of(&self.manifest["raid_devices"])
    }

    /// The member whose examine.txt section carries its device UUID.
    fn examine_section(&self, member: &Member) -> (&str, &Section) {
        let uuid = uuid_colons(&member.sb.device_uuid);
        let found = self
            .examine
            .iter()
            .find(|(_, s)| s.get("Device UUID") == Some(&uuid));
        let (dev, section) =
            found.unwrap_or_else(|| panic!("{}: no section for {uuid}", self.name));
        (dev.as_str(), section)
    }
}

fn u64_of(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a u64: {v}"))
}

fn u32_of(v: &Value) -> u32 {
    u32::try_from(u64_of(v)).expect("fits u32")
}

fn read(path: &Path) -> Vec<u8> {
    fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn load_fixture(dir: &Path) -> Fixture {
    let name = dir
        .file_name()
        .expect("dir name")
        .to_string_lossy()
        .into_owned();
    let manifest: Value =
        serde_json::from_slice(&read(&dir.join("manifest.json"))).expect("manifest.json");
    let examine = parse_mdadm_sections(&String::from_utf8_lossy(&read(&dir.join("examine.txt"))));
    let bitmap_path = dir.join("bitmap.txt");
    let bitmap_txt = bitmap_path
        .exists()
        .then(|| parse_mdadm_sections(&String::from_utf8_lossy(&read(&bitmap_path))));
    let members = manifest["members"]
        .as_array()
        .expect("members")
        .iter()
        .map(|json| load_member(dir, json))
        .collect();
    Fixture {
        name,
        manifest,
        examine,
        bitmap_txt,
        members,
    }
}

fn load_member(dir: &Path, json: &Value) -> Member {
    let file = json["name"].as_str().expect("member name");
    let stem = file.trim_end_matches(".img.xz").to_string();
    let sb_bytes = read(&dir.join(format!("{stem}.sb")));
    assert_eq!(
        sb_bytes.len(),
        4096,
        "{stem}.sb holds the 4 KiB superblock slot"
    );
    let sb = Superblock::parse(&sb_bytes, SB_SECTOR)
        .unwrap_or_else(|e| panic!("{}/{stem}: {e}", dir.display()));
    let bitmap_path = dir.join(format!("{stem}.bitmap"));
    let bitmap_bytes = bitmap_path.exists().then(|| read(&bitmap_path));
    Member {
        stem,
        json: json.clone(),
        sb_bytes,
        sb,
        bitmap_bytes,
    }
}

fn fixtures() -> Vec<Fixture> {
    let mut dirs: Vec<PathBuf> = fs::read_dir(DATA_DIR)
        .expect("tests/data")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.join("manifest.json").exists())
        .collect();
    dirs.sort();
    let all: Vec<Fixture> = dirs.iter().map(|d| load_fixture(d)).collect();
    assert_eq!(all.len(), FIXTURE_COUNT, "fixtures a1..a7 under tests/data");
    all
}

#[test]
fn every_member_matches_its_manifest() {
    for fx in fixtures() {
        let m = &fx.manifest;
        let sbm = &m["superblock"];
        for member in &fx.members {
            let sb = &member.sb;
            let ctx = format!("{}/{}", fx.name, member.stem);
            assert_eq!(
                i64::from(sb.level),
                m["level_number"].as_i64().expect("level"),
                "{ctx}"
            );
            assert_eq!(sb.layout, u32_of(&m["layout"]["number"]), "{ctx} layout");
            assert_eq!(
                u64::from(sb.chunksize) * 512,
                u64_of(&m["chunk_bytes"]),
                "{ctx} chunk"
            );
            assert_eq!(sb.raid_disks, fx.raid_disks(), "{ctx} raid_disks");
            let array_uuid = common::uuid_from_text(m["array_uuid"].as_str().expect("uuid"));
            assert_eq!(sb.set_uuid, array_uuid, "{ctx} set_uuid");
            assert_eq!(
                sb.full_name(),
                m["array_name"].as_str().expect("name"),
                "{ctx}"
            );
            assert_eq!(sb.array_name(), fx.name, "{ctx} name after host:");
            let dev_uuid = common::uuid_from_text(member.json["device_uuid"].as_str().expect("u"));
            assert_eq!(sb.device_uuid, dev_uuid, "{ctx} device_uuid");
            assert_eq!(
                sb.dev_number,
                u32_of(&member.json["dev_number"]),
                "{ctx} dev_number"
            );
            assert_eq!(sb.events, u64_of(&member.json["events"]), "{ctx} events");
            let data_offset = u64_of(&member.json["data_offset_sectors"]);
            assert_eq!(sb.data_offset, data_offset, "{ctx} data_offset");
            assert_eq!(
                sb.data_size,
                u64_of(&member.json["data_size_sectors"]),
                "{ctx}"
            );
            assert_eq!(
                sb.size,
                u64_of(&sbm["component_size_sectors"]),
                "{ctx} size"
            );
            let sysfs_kib: u64 = m["sysfs"]["component_size"]
                .as_str()
                .expect("s")
                .parse()
                .expect("n");
            assert_eq!(sb.size / 2, sysfs_kib, "{ctx} component_size in KiB");
            assert_eq!(sb.super_offset * 512, u64_of(&sbm["offset_bytes"]), "{ctx}");
            assert_eq!(
                sb.feature_map,
                u32_of(&sbm["feature_map"]),
                "{ctx} feature_map"
            );
            assert_eq!(
                sb.resync_offset,
                u64_of(&sbm["resync_offset"]),
                "{ctx} resync"
            );
            assert!(sb.is_clean(), "{ctx} stopped cleanly");
            let own = u16::try_from(u64_of(&member.json["role_in_own_superblock"])).expect("u16");
            assert_eq!(sb.own_role(), DevRole::Active(own), "{ctx} own role");
            match sbm["bitmap_offset_sectors"].as_i64() {
                Some(off) => {
                    assert_ne!(sb.feature_map & feature::BITMAP_OFFSET, 0, "{ctx}");
                    assert_eq!(i64::from(sb.bitmap_offset), off, "{ctx} bitmap_offset");
                }
                None => assert_eq!(sb.feature_map & feature::BITMAP_OFFSET, 0, "{ctx}"),
            }
        }
        check_array_size(&fx);
    }
}

/// The manifest's array size (blockdev --getsize64) follows from the superblocks.
fn check_array_size(fx: &Fixture) {
    let first = &fx.members[0].sb;
    let n = u64::from(first.raid_disks);
    let chunk = u64::from(first.chunksize).max(1);
    let sectors = match first.level {
        -1 => fx.members.iter().map(|m| m.sb.data_size).sum(),
        0 => fx
            .members
            .iter()
            .map(|m| m.sb.data_size / chunk * chunk)
            .sum(),
        1 => first.size,
        4 | 5 => first.size * (n - 1),
        6 => first.size * (n - 2),
        10 => {
            let copies = u64::from(first.layout & 255) * u64::from((first.layout >> 8) & 255);
            first.size * n / copies
        }
        other => panic!("{}: unexpected level {other}", fx.name),
    };
    assert_eq!(
        sectors * 512,
        u64_of(&fx.manifest["array_size_bytes"]),
        "{} size",
        fx.name
    );
}

#[test]
fn dev_roles_record_failures_only_on_fresh_members() {
    for fx in fixtures() {
        let newest = fx
            .members
            .iter()
            .map(|m| m.sb.events)
            .max()
            .expect("members");
        let degraded: Vec<u64> = fx.manifest["degraded_roles"]
            .as_array()
            .expect("degraded_roles")
            .iter()
            .map(u64_of)
            .collect();
        for member in &fx.members {
            // A member that missed the failure still shows the array as it last saw it.
            let saw_failure = member.sb.events == newest;
            let mut want = vec![0xffffu16; member.sb.max_dev()];
            for other in &fx.members {
                let slot = u64_of(&other.json["role"]);
                let index = u64_of(&other.json["dev_number"]) as usize;
                want[index] = if saw_failure && degraded.contains(&slot) {
                    DevRole::Faulty.to_raw()
                } else {
                    DevRole::Active(slot as u16).to_raw()
                };
            }
            assert_eq!(member.sb.dev_roles, want, "{}/{}", fx.name, member.stem);
        }
    }
    let a7 = fixtures().into_iter().find(|f| f.name == "a7").expect("a7");
    let survivors = a7.members.iter().filter(|m| !m.stem.contains("faulty"));
    for m in survivors {
        assert_eq!(m.sb.dev_roles[2], 0xfffe, "a7/{}: role 2 failed", m.stem);
        assert_eq!(m.sb.events, 8);
    }
}

#[test]
fn every_member_matches_mdadm_examine() {
    for fx in fixtures() {
        assert_eq!(
            fx.examine.len(),
            fx.members.len(),
            "{}: one section per member",
            fx.name
        );
        for member in &fx.members {
            let (dev, section) = fx.examine_section(member);
            let bad = examine_mismatches(&member.sb, section);
            assert!(
                bad.is_empty(),
                "{}/{} ({dev}):\n{}",
                fx.name,
                member.stem,
                bad.join("\n")
            );
        }
    }
}

#[test]
fn reencoding_reproduces_the_kernel_bytes() {
    for fx in fixtures() {
        for member in &fx.members {
            let ctx = format!("{}/{}", fx.name, member.stem);
            let encoded = member.sb.encode();
            assert_eq!(encoded.len(), member.sb.encoded_len(), "{ctx}");
            assert_eq!(encoded.len(), 512, "{ctx}: max_dev 128 -> one sector");
            assert_eq!(encoded[..], member.sb_bytes[..encoded.len()], "{ctx}");
            assert!(
                member.sb_bytes[encoded.len()..].iter().all(|&b| b == 0),
                "{ctx} tail"
            );
        }
    }
}

/// mdadm's create-time choices, recomputed from member sizes alone, give what mdadm wrote.
#[test]
fn create_defaults_reproduce_the_fixtures() {
    for fx in fixtures() {
        let chunk_sectors = u32_of(&fx.manifest["chunk_bytes"]) / 512;
        let first = &fx.members[0].sb;
        let avail = fx
            .members
            .iter()
            .map(|m| m.sb.data_size)
            .min()
            .expect("members");
        let size = create::component_size_sectors(first.level, avail, chunk_sectors);
        for member in &fx.members {
            let ctx = format!("{}/{}", fx.name, member.stem);
            let sb = &member.sb;
            let dev_sectors = u64_of(&member.json["size_bytes"]) / 512;
            let data_offset = create::default_data_offset(dev_sectors, chunk_sectors);
            assert_eq!(sb.data_offset, data_offset, "{ctx} data_offset");
            assert_eq!(sb.data_size, dev_sectors - data_offset, "{ctx} data_size");
            assert_eq!(sb.size, size, "{ctx} component size");
            let bitmap = member
                .bitmap_bytes
                .as_ref()
                .map(|b| BitmapSuper::parse(b).expect("bitmap"));
            let bm_space = create::bblog_bm_space_sectors(sb.size, bitmap.as_ref());
            let placement = create::bblog_placement(data_offset, bm_space);
            assert_eq!(
                placement,
                (sb.bblog_offset, sb.bblog_size),
                "{ctx} bad-block log"
            );
        }
    }
}

#[test]
fn bblog_offset_depends_on_the_recorded_component_size() {
    // The documented fixture difference: 8 for linear/raid0, 16 for the other levels.
    for fx in fixtures() {
        let sb = &fx.members[0].sb;
        let want = if sb.level <= 0 { 8 } else { 16 };
        assert_eq!(sb.bblog_offset, want, "{}", fx.name);
        assert_eq!(sb.bblog_size, 8, "{}: 512 entries", fx.name);
    }
}

#[test]
fn a7_bitmaps_match_examine_bitmap() {
    let fx = fixtures().into_iter().find(|f| f.name == "a7").expect("a7");
    let sections = fx.bitmap_txt.as_ref().expect("a7/bitmap.txt");
    assert_eq!(sections.len(), fx.members.len());
    for member in &fx.members {
        let ctx = format!("a7/{}", member.stem);
        let bytes = member.bitmap_bytes.as_ref().expect("bitmap bytes");
        let bm = BitmapSuper::parse(bytes).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        let (dev, _) = fx.examine_section(member);
        let (_, text) = sections
            .iter()
            .find(|(name, _)| name == dev)
            .unwrap_or_else(|| panic!("{ctx}: no bitmap.txt section for {dev}"));
        let dirty = bm.count_dirty(&bytes[256..]);
        let want = [
            ("Magic", "6d746962".to_string()),
            ("Version", bm.version.to_string()),
            ("UUID", uuid_colons(&bm.uuid)),
            ("Events", bm.events.to_string()),
            ("Events Cleared", bm.events_cleared.to_string()),
            (
                "State",
                if bm.is_stale() { "Out of date" } else { "OK" }.to_string(),
            ),
            ("Chunksize", human_chunksize(bm.chunksize)),
            ("Daemon", format!("{}s flush period", bm.daemon_sleep)),
            ("Write Mode", "Normal".to_string()),
            ("Sync Size", (bm.sync_size / 2).to_string()),
            (
                "Bitmap",
                format!("{} bits (chunks), {dirty} dirty", bm.bits()),
            ),
        ];
        for (key, value) in want {
            let got = text.get(key).map(|v| before_paren(v));
            assert_eq!(got, Some(value.as_str()), "{ctx} {key}");
        }
        // Cross-checks with the superblock, and the exact bytes back.
        assert_eq!(bm.uuid, member.sb.set_uuid, "{ctx}");
        assert_eq!(bm.sync_size, member.sb.size, "{ctx}");
        assert_eq!(bm.events, member.sb.events, "{ctx}");
        assert_eq!(bm.encode()[..], bytes[..256], "{ctx} re-encode");
        let stale = member.stem.contains("faulty");
        assert_eq!(dirty, if stale { 0 } else { 1 }, "{ctx} dirty bits");
    }
}

/// mdadm's `human_chunksize`: "1 MB", "64 KB", "512 B".
fn human_chunksize(mut bytes: u32) -> String {
    let units = ["B", "KB", "MB", "GB", "TB"];
    let mut i = 0;
    while bytes >> 10 != 0 {
        bytes >>= 10;
        i += 1;
    }
    format!("{bytes} {}", units[i])
}

/// The small files under tests/data are exact copies of the kernel images' bytes. Checked
/// when the shared fixture images are around (`RAIDD_MD_KERNEL_FIXTURES` or
/// ../../testdata/md-kernel, always present in the repository).
#[test]
fn test_data_is_copied_from_the_kernel_images() {
    let root = std::env::var_os("RAIDD_MD_KERNEL_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/md-kernel"));
    assert!(
        root.join("README.md").exists(),
        "fixtures missing at {}",
        root.display()
    );
    for fx in fixtures() {
        for member in &fx.members {
            let file = member.json["name"].as_str().expect("name");
            let head = image_head(&root.join(&fx.name).join(file), 3 * 4096);
            assert_eq!(
                member.sb_bytes[..],
                head[4096..8192],
                "{}/{}",
                fx.name,
                file
            );
            if let Some(bitmap) = &member.bitmap_bytes {
                assert_eq!(bitmap[..], head[8192..12288], "{}/{} bitmap", fx.name, file);
            }
        }
    }
}

/// The first `len` bytes of an xz-compressed image (decompresses only that much).
fn image_head(path: &Path, len: usize) -> Vec<u8> {
    use std::io::Read;
    let file = fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut head = vec![0u8; len];
    xz2::read::XzDecoder::new(file)
        .read_exact(&mut head)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    head
}

/// Guards the comparison itself: a superblock that differs in one field must not match.
#[test]
fn examine_comparison_notices_a_wrong_field() {
    let fx = fixtures().into_iter().find(|f| f.name == "a7").expect("a7");
    let member = &fx.members[0];
    let (_, section) = fx.examine_section(member);
    let mut sb = member.sb.clone();
    sb.events += 1;
    sb.dev_roles[3] = 0xffff;
    let bad = examine_mismatches(&sb, section);
    assert!(bad.iter().any(|l| l.starts_with("Events:")), "{bad:?}");
    assert!(bad.iter().any(|l| l.starts_with("Array State:")), "{bad:?}");
    assert!(bad.iter().any(|l| l.starts_with("Checksum:")), "{bad:?}");
}
