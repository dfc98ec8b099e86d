//! Helpers shared by the integration tests: a sample superblock, a deterministic PRNG, and
//! what `mdadm --examine` (4.2) prints for a superblock.
//!
//! Each test binary uses a different subset, hence the dead_code allowance.
#![allow(dead_code)]

use raidd_md::{feature, DevRole, Superblock, MAX_SECTOR};
use std::collections::BTreeMap;

/// A plausible clean RAID5 member superblock (4 members, 64 KiB chunk, v1.2).
pub fn sample_superblock() -> Superblock {
    let mut sb = Superblock {
        feature_map: 0,
        set_uuid: *b"\x40\x20\x91\xca\x9f\xdd\x21\xb6\xac\xbb\x3f\x66\x66\xde\xab\x47",
        set_name: [0; 32],
        ctime: Superblock::join_time(1_700_000_000, 0),
        level: 5,
        layout: 2,
        size: 30_720,
        chunksize: 128,
        raid_disks: 4,
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
        device_uuid: [0x11; 16],
        devflags: 0,
        bblog_shift: 0,
        bblog_size: 8,
        bblog_offset: 16,
        utime: Superblock::join_time(1_700_000_100, 0),
        events: 17,
        resync_offset: MAX_SECTOR,
        dev_roles: vec![0xffff; 128],
    };
    for slot in 0..4u16 {
        sb.dev_roles[usize::from(slot)] = slot;
    }
    sb.set_array_name("host:r5");
    sb
}

/// Re-stamps the checksum of encoded superblock bytes after a deliberate edit, so a test
/// reaches the checks behind the checksum.
pub fn fix_checksum(bytes: &mut [u8]) {
    let csum = Superblock::checksum(bytes);
    bytes[216..220].copy_from_slice(&csum.to_le_bytes());
}

/// xorshift64*: deterministic, dependency-free randomness for the bulk tests.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform-ish in 0..n (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(len + 8);
        while out.len() < len {
            out.extend_from_slice(&self.next_u64().to_le_bytes());
        }
        out.truncate(len);
        out
    }
}

/// "402091ca:9fdd21b6:acbb3f66:66deab47", as mdadm prints UUIDs.
pub fn uuid_colons(uuid: &[u8; 16]) -> String {
    let hex: Vec<String> = uuid
        .chunks(4)
        .map(|w| w.iter().map(|b| format!("{b:02x}")).collect())
        .collect();
    hex.join(":")
}

/// Parses "510670fd-ad3a-f51a-..." or colon-separated forms into bytes.
pub fn uuid_from_text(text: &str) -> [u8; 16] {
    let hex: String = text.chars().filter(|c| c.is_ascii_hexdigit()).collect();
    assert_eq!(hex.len(), 32, "uuid {text:?}");
    let mut out = [0u8; 16];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("hex digit");
    }
    out
}

/// `ctime(3)` in UTC, as mdadm prints times (`%.24s`): "Sun Nov 22 13:54:59 2026".
pub fn ctime_utc(secs: u64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{} {} {:2} {:02}:{:02}:{:02} {}",
        DAYS[(days % 7) as usize],
        MONTHS[(month - 1) as usize],
        day,
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        year
    )
}

/// Days since 1970-01-01 to (year, month 1-12, day 1-31), proleptic Gregorian.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

/// One `/dev/x:` (or `### /dev/x`) section of mdadm output as key -> value.
pub type Section = BTreeMap<String, String>;

/// Splits `mdadm --examine` / `--examine-bitmap` output into sections of "Key : value".
pub fn parse_mdadm_sections(text: &str) -> Vec<(String, Section)> {
    let mut sections: Vec<(String, Section)> = Vec::new();
    for line in text.lines() {
        let header = line
            .strip_prefix("### ")
            .or_else(|| line.strip_suffix(':').filter(|l| !l.starts_with(' ')));
        if let Some(name) = header {
            sections.push((name.trim().to_string(), Section::new()));
            continue;
        }
        if let Some((key, value)) = line.split_once(" : ") {
            // Output for a single file may start without a header.
            if sections.is_empty() {
                sections.push((String::new(), Section::new()));
            }
            if let Some(last) = sections.last_mut() {
                last.1
                    .insert(key.trim().to_string(), value.trim().to_string());
            }
        }
    }
    sections
}

/// A value without mdadm's trailing parenthesised note: the human-readable size
/// " (63.00 MiB 66.06 MB)", "  (local to host x)", " ('A' == active, ...)", " (1.6%)".
pub fn before_paren(value: &str) -> &str {
    match value.rsplit_once(" (") {
        Some((head, tail)) if tail.ends_with(')') => head.trim(),
        _ => value.trim(),
    }
}

/// What mdadm 4.2's `examine_super1` prints for `sb`, for the lines these tests compare.
/// Values are given without mdadm's trailing parenthesised notes (compare with
/// [`before_paren`]).
pub fn expected_examine(sb: &Superblock) -> Vec<(&'static str, String)> {
    let mut lines = vec![
        ("Magic", "a92b4efc".to_string()),
        ("Version", "1.2".to_string()),
        ("Feature Map", format!("0x{:x}", sb.feature_map)),
        ("Array UUID", uuid_colons(&sb.set_uuid)),
        ("Name", sb.full_name()),
        (
            "Creation Time",
            ctime_utc(Superblock::split_time(sb.ctime).0),
        ),
        ("Raid Level", level_name(sb.level).to_string()),
        ("Raid Devices", sb.raid_disks.to_string()),
        ("Avail Dev Size", format!("{} sectors", sb.data_size)),
    ];
    lines.extend(size_lines(sb));
    if sb.data_offset != 0 {
        lines.push(("Data Offset", format!("{} sectors", sb.data_offset)));
    }
    lines.extend([
        ("Super Offset", format!("{} sectors", sb.super_offset)),
        (
            "State",
            if sb.is_clean() { "clean" } else { "active" }.to_string(),
        ),
        ("Device UUID", uuid_colons(&sb.device_uuid)),
        ("Update Time", ctime_utc(Superblock::split_time(sb.utime).0)),
        (
            "Checksum",
            format!("{:x} - correct", Superblock::checksum(&sb.encode())),
        ),
        ("Events", sb.events.to_string()),
        ("Device Role", device_role(sb)),
        ("Array State", array_state(sb)),
    ]);
    if sb.feature_map & feature::BITMAP_OFFSET != 0 {
        lines.push((
            "Internal Bitmap",
            format!("{} sectors from superblock", sb.bitmap_offset),
        ));
    }
    if sb.bblog_size != 0 && sb.bblog_offset != 0 {
        let entries = u32::from(sb.bblog_size) * 512 / 8;
        lines.push((
            "Bad Block Log",
            format!(
                "{entries} entries available at offset {} sectors",
                sb.bblog_offset
            ),
        ));
    }
    lines.extend(layout_line(sb).map(|l| ("Layout", l)));
    lines.extend(chunk_line(sb));
    lines
}

/// "Array Size" (KiB of array data) and "Used Dev Size", printed for levels whose u32
/// value is > 0 — which includes linear (-1 as u32).
fn size_lines(sb: &Superblock) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    if sb.level == 0 {
        return out;
    }
    let (data_disks, denom) = match sb.level {
        1 => (1, 1),
        4 | 5 => (u64::from(sb.raid_disks) - 1, 1),
        6 => (u64::from(sb.raid_disks) - 2, 1),
        10 => (
            u64::from(sb.raid_disks),
            u64::from(sb.layout & 255) * u64::from((sb.layout >> 8) & 255),
        ),
        _ => (0, 1),
    };
    if data_disks > 0 {
        let bytes = (sb.size << 9) * data_disks / denom;
        out.push(("Array Size", format!("{} KiB", bytes >> 10)));
    }
    if sb.size != sb.data_size {
        out.push(("Used Dev Size", format!("{} sectors", sb.size)));
    }
    out
}

pub fn level_name(level: i32) -> &'static str {
    match level {
        -1 => "linear",
        0 => "raid0",
        1 => "raid1",
        4 => "raid4",
        5 => "raid5",
        6 => "raid6",
        10 => "raid10",
        _ => "-unknown-",
    }
}

/// mdadm's names for RAID5/6 algorithms 0..=5.
pub const PARITY_LAYOUTS: [&str; 6] = [
    "left-asymmetric",
    "right-asymmetric",
    "left-symmetric",
    "right-symmetric",
    "parity-first",
    "parity-last",
];

fn layout_line(sb: &Superblock) -> Option<String> {
    match sb.level {
        5 | 6 => Some(
            PARITY_LAYOUTS
                .get(sb.layout as usize)
                .unwrap_or(&"-unknown-")
                .to_string(),
        ),
        10 => Some(raid10_layout(sb.layout)),
        0 if sb.feature_map & feature::RAID0_LAYOUT != 0 => Some(
            match sb.layout {
                0 => "dangerous",
                1 => "original",
                2 => "alternate",
                _ => "-unknown-",
            }
            .to_string(),
        ),
        _ => None,
    }
}

/// `print_r10_layout`: "near=2", "far=2", "offset=2", "near=2, far=2".
pub fn raid10_layout(layout: u32) -> String {
    let near = layout & 255;
    let far = (layout >> 8) & 255;
    let offset = layout & 0x10000 != 0;
    let mut parts = Vec::new();
    if near != 1 {
        parts.push(format!("near={near}"));
    }
    if far != 1 {
        parts.push(format!("{}={far}", if offset { "offset" } else { "far" }));
    }
    if near * far == 1 {
        parts.push("NO REDUNDANCY".to_string());
    }
    parts.join(", ")
}

fn chunk_line(sb: &Superblock) -> Option<(&'static str, String)> {
    let kib = format!("{}K", sb.chunksize / 2);
    match sb.level {
        0 | 4 | 5 | 6 | 10 => Some(("Chunk Size", kib)),
        -1 => Some(("Rounding", kib)),
        _ => None,
    }
}

fn device_role(sb: &Superblock) -> String {
    match sb.own_role() {
        DevRole::Spare | DevRole::Faulty => "spare".to_string(),
        DevRole::Journal => "Journal".to_string(),
        DevRole::Active(n) if sb.feature_map & feature::REPLACEMENT != 0 => {
            format!("Replacement device {n}")
        }
        DevRole::Active(n) => format!("Active device {n}"),
    }
}

/// One character per slot: 'A' held by one member, '.' by none ('R' two, on levels > 0).
fn array_state(sb: &Superblock) -> String {
    (0..sb.raid_disks)
        .map(|slot| {
            let holders = sb
                .dev_roles
                .iter()
                .filter(|&&r| u32::from(r) == slot)
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

/// Compares every expected line with a parsed mdadm section; returns the mismatches.
pub fn examine_mismatches(sb: &Superblock, section: &Section) -> Vec<String> {
    let mut bad = Vec::new();
    for (key, want) in expected_examine(sb) {
        let got = section.get(key).map(|v| before_paren(v));
        if got != Some(want.as_str()) {
            bad.push(format!("{key}: mdadm printed {got:?}, expected {want:?}"));
        }
    }
    bad
}
