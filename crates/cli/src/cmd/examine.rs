//! `raidd examine`: each member's md superblock, as `mdadm --examine` prints it.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use raidd_admin::exit::{AdminError, AdminResult, ErrorJson, Exit};
use raidd_admin::md_names::{layout_text, level_text};
use raidd_admin::members::{self, Access};
use raidd_admin::size;
use raidd_admin::text::{self, KvBlock};
use raidd_engine::array::uuid_string;
use raidd_md::{feature, DevRole, Superblock, MD_SB_MAGIC};
use serde::Serialize;

use crate::output;

#[derive(Args, Debug)]
pub struct ExamineArgs {
    /// Member image files or block devices.
    #[arg(required = true, value_name = "MEMBER")]
    pub members: Vec<PathBuf>,
}

/// One member in `examine --json`.
#[derive(Debug, Serialize)]
pub struct MemberJson {
    pub member: String,
    /// `null` when the member could not be examined (see `error`).
    pub superblock: Option<SuperblockJson>,
    pub error: Option<ErrorJson>,
}

/// A superblock in `examine --json` (the fields `mdadm --examine` prints).
#[derive(Debug, Serialize)]
pub struct SuperblockJson {
    pub magic: String,
    pub version: &'static str,
    pub feature_map: u32,
    pub array_uuid: String,
    /// "host:name" as stored.
    pub name: String,
    /// Seconds since the epoch.
    pub creation_time: u64,
    /// md's name ("raid5"), or "-unknown-".
    pub level: String,
    pub level_number: i32,
    pub raid_devices: u32,
    pub avail_dev_size_sectors: u64,
    /// As mdadm computes it from this superblock; `null` for linear and raid0 (their size
    /// depends on every member).
    pub array_size_kib: Option<u64>,
    /// Component size (sectors of each member the array uses); `null` for linear/raid0.
    pub used_dev_size_sectors: Option<u64>,
    pub data_offset_sectors: u64,
    pub super_offset_sectors: u64,
    /// "clean" or "active".
    pub state: &'static str,
    pub device_uuid: String,
    pub update_time: u64,
    pub checksum: String,
    pub events: u64,
    /// Layout name (`left-symmetric`, `near=2`, ...); `null` where the level has none.
    pub layout: Option<String>,
    pub layout_number: u32,
    /// Chunk size in bytes (the "rounding" for linear); 0 where the level has none.
    pub chunk_bytes: u64,
    pub dev_number: u32,
    /// "Active device N", "spare", ...
    pub device_role: String,
    /// The slot this member holds, if active.
    pub role: Option<u32>,
    /// One character per slot: `A` active, `.` missing, `R` replacing.
    pub array_state: String,
    /// md's per-device flags (`write-mostly`, `failfast`), as mdadm names them.
    pub flags: Vec<&'static str>,
}

/// The names of a superblock's devflags, as `mdadm --examine` prints them.
pub fn devflag_names(devflags: u8) -> Vec<&'static str> {
    [
        (raidd_md::devflags::WRITE_MOSTLY, "write-mostly"),
        (raidd_md::devflags::FAIL_FAST, "failfast"),
    ]
    .iter()
    .filter(|(bit, _)| devflags & bit != 0)
    .map(|(_, name)| *name)
    .collect()
}

/// The array size mdadm derives from one superblock (bytes); `None` for linear and raid0.
pub fn array_size_bytes(sb: &Superblock) -> Option<u64> {
    let disks = u64::from(sb.raid_disks);
    let (data_disks, copies) = match sb.level {
        1 => (1, 1),
        4 | 5 => (disks.checked_sub(1)?, 1),
        6 => (disks.checked_sub(2)?, 1),
        10 => (
            disks,
            u64::from(sb.layout & 255) * u64::from((sb.layout >> 8) & 255),
        ),
        _ => return None,
    };
    if copies == 0 || data_disks == 0 {
        return None;
    }
    let bytes = u128::from(sb.size) * 512 * u128::from(data_disks) / u128::from(copies);
    u64::try_from(bytes).ok()
}

/// "Active device N", "spare", "Journal", "Replacement device N".
pub fn device_role(sb: &Superblock) -> String {
    match sb.own_role() {
        DevRole::Spare | DevRole::Faulty => "spare".to_string(),
        DevRole::Journal => "Journal".to_string(),
        DevRole::Active(n) if sb.feature_map & feature::REPLACEMENT != 0 => {
            format!("Replacement device {n}")
        }
        DevRole::Active(n) => format!("Active device {n}"),
    }
}

/// Longest array-state string built (a corrupt raid_disks must not allocate gigabytes).
const MAX_STATE_CHARS: u32 = 4096;

/// One character per slot as this member's superblock records it: `A` one active member,
/// `.` none, `R` two (a replacement in progress, levels above 0).
pub fn array_state(sb: &Superblock) -> String {
    (0..sb.raid_disks.min(MAX_STATE_CHARS))
        .map(|slot| {
            let holders = sb
                .dev_roles
                .iter()
                .filter(|&&r| matches!(DevRole::from_raw(r), DevRole::Active(s) if u32::from(s) == slot))
                .count();
            match holders {
                0 => '.',
                1 => 'A',
                2 if sb.level > 0 => 'R',
                _ => '?',
            }
        })
        .collect()
}

fn chunk_bytes(sb: &Superblock) -> u64 {
    u64::from(sb.chunksize) * 512
}

pub fn superblock_json(sb: &Superblock) -> SuperblockJson {
    let role = match sb.own_role() {
        DevRole::Active(n) => Some(u32::from(n)),
        _ => None,
    };
    SuperblockJson {
        magic: format!("{MD_SB_MAGIC:08x}"),
        version: "1.2",
        feature_map: sb.feature_map,
        array_uuid: uuid_string(&sb.set_uuid),
        name: sb.full_name(),
        creation_time: Superblock::split_time(sb.ctime).0,
        level: level_text(sb.level),
        level_number: sb.level,
        raid_devices: sb.raid_disks,
        avail_dev_size_sectors: sb.data_size,
        array_size_kib: array_size_bytes(sb).map(|b| b / 1024),
        used_dev_size_sectors: (sb.size != 0).then_some(sb.size),
        data_offset_sectors: sb.data_offset,
        super_offset_sectors: sb.super_offset,
        state: if sb.is_clean() { "clean" } else { "active" },
        device_uuid: uuid_string(&sb.device_uuid),
        update_time: Superblock::split_time(sb.utime).0,
        checksum: format!("{:x}", Superblock::checksum(&sb.encode())),
        events: sb.events,
        layout: layout_text(sb.level, sb.layout, sb.feature_map),
        layout_number: sb.layout,
        chunk_bytes: chunk_bytes(sb),
        dev_number: sb.dev_number,
        device_role: device_role(sb),
        role,
        array_state: array_state(sb),
        flags: devflag_names(sb.devflags),
    }
}

/// The human form, one member.
pub fn render(member: &str, sb: &Superblock) -> String {
    let j = superblock_json(sb);
    let mut b = KvBlock::new();
    b.add("Magic", j.magic);
    b.add("Version", j.version);
    b.add("Feature Map", format!("{:#x}", sb.feature_map));
    b.add("Array UUID", j.array_uuid);
    b.add("Name", j.name);
    b.add("Creation Time", text::md_time_text(sb.ctime));
    b.add("Raid Level", j.level);
    b.add("Raid Devices", j.raid_devices.to_string());
    b.blank();
    b.add("Avail Dev Size", size::sectors_text(sb.data_size));
    if let Some(bytes) = array_size_bytes(sb) {
        b.add("Array Size", size::kib_text(bytes));
    }
    if sb.size != 0 && sb.size != sb.data_size {
        b.add("Used Dev Size", size::sectors_text(sb.size));
    }
    b.add("Data Offset", format!("{} sectors", sb.data_offset));
    b.add("Super Offset", format!("{} sectors", sb.super_offset));
    if sb.feature_map & feature::RECOVERY_OFFSET != 0 {
        b.add("Recovery Offset", format!("{} sectors", sb.recovery_offset));
    }
    b.add("State", j.state);
    b.add("Device UUID", j.device_uuid);
    b.blank();
    if !j.flags.is_empty() {
        b.add("Flags", j.flags.join(" "));
    }
    if sb.feature_map & feature::BITMAP_OFFSET != 0 {
        b.add(
            "Internal Bitmap",
            format!("{} sectors from superblock", sb.bitmap_offset),
        );
    }
    b.add("Update Time", text::md_time_text(sb.utime));
    if sb.bblog_size != 0 && sb.bblog_offset != 0 {
        b.add(
            "Bad Block Log",
            format!(
                "{} entries available at offset {} sectors{}",
                u32::from(sb.bblog_size) * 512 / 8,
                sb.bblog_offset,
                // As mdadm words it: the kernel sets the bit while the log has entries.
                if sb.feature_map & feature::BAD_BLOCKS != 0 {
                    " - bad blocks present."
                } else {
                    ""
                }
            ),
        );
    }
    b.add("Checksum", format!("{} - correct", j.checksum));
    b.add("Events", sb.events.to_string());
    b.blank();
    if let Some(layout) = j.layout {
        b.add("Layout", layout);
    }
    match sb.level {
        -1 => b.add("Rounding", size::chunk_text(chunk_bytes(sb))),
        0 | 4 | 5 | 6 | 10 => b.add("Chunk Size", size::chunk_text(chunk_bytes(sb))),
        _ => {}
    }
    b.blank();
    b.add("Device Role", j.device_role);
    b.add(
        "Array State",
        format!(
            "{} ('A' == active, '.' == missing, 'R' == replacing)",
            j.array_state
        ),
    );
    format!("{member}:\n{}", b.render(15))
}

pub fn run(args: ExamineArgs, json: bool) -> AdminResult {
    raidd_rt::block_on(async move {
        let mut results = Vec::new();
        for p in &args.members {
            let name = p.display().to_string();
            let r = match members::open(p, Access::Inspect) {
                Ok(m) => raidd_engine::assemble::examine(&*m)
                    .await
                    .map_err(AdminError::from),
                Err(e) => Err(e),
            };
            results.push((name, r));
        }
        report(results, json)
    })
}

fn report(results: Vec<(String, AdminResult<Superblock>)>, json: bool) -> AdminResult {
    let mut first_error: Option<Exit> = None;
    let mut text = String::new();
    let mut out = Vec::new();
    for (name, r) in results {
        match r {
            Ok(sb) => {
                if json {
                    out.push(MemberJson {
                        member: name,
                        superblock: Some(superblock_json(&sb)),
                        error: None,
                    });
                } else {
                    if !text.is_empty() {
                        text.push('\n');
                    }
                    text.push_str(&render(&name, &sb));
                }
            }
            Err(e) => {
                if json {
                    out.push(MemberJson {
                        member: name,
                        superblock: None,
                        error: Some(ErrorJson::from(&e)),
                    });
                }
                // Every failed member gets its line; the exit code is the first one's.
                let _ = writeln!(std::io::stderr().lock(), "raidd: {e}");
                first_error.get_or_insert(e.exit);
            }
        }
    }
    if json {
        #[derive(Serialize)]
        struct Out {
            members: Vec<MemberJson>,
        }
        output::emit_json(&Out { members: out })?;
    } else {
        output::emit(&text)?;
    }
    match first_error {
        Some(exit) => Err(AdminError::reported(exit)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use raidd_md::MAX_SECTOR;

    fn sb(level: i32, layout: u32, raid_disks: u32) -> Superblock {
        let mut sb = Superblock {
            feature_map: 0,
            set_uuid: [0x11; 16],
            set_name: [0; 32],
            ctime: Superblock::join_time(1_700_000_000, 0),
            level,
            layout,
            size: 30_720,
            chunksize: 128,
            raid_disks,
            bitmap_offset: 0,
            new_level: 0,
            reshape_position: 0,
            delta_disks: 0,
            new_layout: 0,
            new_chunk: 0,
            new_offset: 0,
            data_offset: 2048,
            data_size: 30_720,
            super_offset: 8,
            recovery_offset: 0,
            dev_number: 1,
            cnt_corrected_read: 0,
            device_uuid: [0x22; 16],
            devflags: 0,
            bblog_shift: 0,
            bblog_size: 8,
            bblog_offset: 16,
            utime: Superblock::join_time(1_700_000_100, 0),
            events: 17,
            resync_offset: MAX_SECTOR,
            dev_roles: vec![0xffff; 128],
        };
        for slot in 0..raid_disks.min(128) {
            sb.dev_roles[slot as usize] = slot as u16;
        }
        sb.set_array_name("host:r5");
        sb
    }

    #[test]
    fn array_state_marks_missing_and_replacing_slots() {
        let mut s = sb(5, 2, 4);
        assert_eq!(array_state(&s), "AAAA");
        s.dev_roles[2] = 0xfffe;
        assert_eq!(array_state(&s), "AA.A");
        s.dev_roles[5] = 1;
        assert_eq!(array_state(&s), "AR.A");
        let mut r0 = sb(0, 0, 2);
        r0.dev_roles[3] = 1;
        assert_eq!(array_state(&r0), "A?");
        let mut huge = sb(5, 2, 4);
        huge.raid_disks = u32::MAX;
        assert_eq!(array_state(&huge).len(), MAX_STATE_CHARS as usize);
    }

    #[test]
    fn roles_layouts_and_sizes_like_mdadm() {
        let s = sb(5, 2, 4);
        assert_eq!(device_role(&s), "Active device 1");
        assert_eq!(layout_text(5, 2, 0).as_deref(), Some("left-symmetric"));
        assert_eq!(layout_text(6, 18, 0).as_deref(), Some("left-symmetric-6"));
        assert_eq!(layout_text(10, 0x102, 0).as_deref(), Some("near=2"));
        assert_eq!(layout_text(10, 0x202, 0).as_deref(), Some("near=2, far=2"));
        assert_eq!(layout_text(10, 0x10201, 0).as_deref(), Some("offset=2"));
        assert_eq!(layout_text(1, 0, 0), None);
        assert_eq!(layout_text(0, 2, 0), None);
        assert_eq!(
            layout_text(0, 2, feature::RAID0_LAYOUT).as_deref(),
            Some("alternate")
        );
        assert!(layout_text(5, 9, 0).is_some_and(|t| t.contains("unknown")));
        assert_eq!(array_size_bytes(&s), Some(3 * 30_720 * 512));
        assert_eq!(array_size_bytes(&sb(6, 2, 5)), Some(3 * 30_720 * 512));
        assert_eq!(array_size_bytes(&sb(10, 0x102, 4)), Some(2 * 30_720 * 512));
        assert_eq!(array_size_bytes(&sb(1, 0, 3)), Some(30_720 * 512));
        assert_eq!(array_size_bytes(&sb(0, 0, 3)), None);
        assert_eq!(array_size_bytes(&sb(-1, 0, 3)), None);
        assert_eq!(array_size_bytes(&sb(10, 0, 4)), None);
        assert_eq!(array_size_bytes(&sb(5, 2, 0)), None);
        let mut spare = sb(5, 2, 4);
        spare.dev_number = 7;
        assert_eq!(device_role(&spare), "spare");
        assert_eq!(level_text(-4), "-unknown-");
    }

    #[test]
    fn render_has_mdadm_lines() {
        let s = sb(5, 2, 4);
        let text = render("/dev/x", &s);
        assert!(
            text.starts_with("/dev/x:\n          Magic : a92b4efc\n"),
            "{text}"
        );
        for want in [
            "     Array UUID : 11111111:11111111:11111111:11111111",
            "           Name : host:r5",
            "     Raid Level : raid5",
            "     Array Size : 46080 KiB",
            "    Data Offset : 2048 sectors",
            "          State : clean",
            "         Layout : left-symmetric",
            "     Chunk Size : 64K",
            "    Device Role : Active device 1",
            "    Array State : AAAA (",
            " - correct",
        ] {
            assert!(text.contains(want), "missing {want:?} in\n{text}");
        }
        let j = superblock_json(&s);
        assert_eq!(j.role, Some(1));
        assert_eq!(j.array_size_kib, Some(46_080));
        assert_eq!(j.creation_time, 1_700_000_000);
    }
}
