//! Finding an array's members by the UUID in their superblocks (mdadm's `--assemble
//! --scan`), so a configuration can name an array by UUID and where to look (glob patterns)
//! instead of by member paths that change with every replaced or moved disk.
//!
//! Parsing a UUID, matching patterns and picking an array's members from what was found are
//! pure; [`expand`] and [`examine_all`] are the I/O around them (the file system's names
//! and each candidate's superblock).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use raidd_md::Superblock;

use crate::members::{self, Access};

/// Candidates one scan looks at, at most: a pattern that matches more (a whole `/dev`) is
/// cut there with a warning rather than opening every file it names.
pub const MAX_CANDIDATES: usize = 4096;

/// An md array UUID from its text: 32 hex digits, grouped as `raidd examine` and mdadm
/// print it (`8:8:8:8`) or as a dashed RFC 4122 UUID, or not at all.
pub fn parse_uuid(text: &str) -> Result<[u8; 16], String> {
    let digits: Vec<u8> = text
        .bytes()
        .filter(|b| !matches!(b, b':' | b'-' | b'.' | b' '))
        .collect();
    let bad = || {
        format!(
            "uuid {text:?} is not an md UUID (32 hex digits, as `raidd examine` prints it: \
             xxxxxxxx:xxxxxxxx:xxxxxxxx:xxxxxxxx)"
        )
    };
    // from_str_radix alone would take a sign.
    if digits.len() != 32 || !digits.iter().all(u8::is_ascii_hexdigit) {
        return Err(bad());
    }
    let mut uuid = [0u8; 16];
    for (i, pair) in digits.chunks_exact(2).enumerate() {
        let hex = std::str::from_utf8(pair).map_err(|_| bad())?;
        uuid[i] = u8::from_str_radix(hex, 16).map_err(|_| bad())?;
    }
    Ok(uuid)
}

/// A pattern's syntax: an error names it. Checked when a configuration is read, so a typo
/// is not found at the first start.
pub fn check_pattern(pattern: &str) -> Result<(), String> {
    glob::Pattern::new(pattern)
        .map(|_| ())
        .map_err(|e| format!("scan pattern {pattern:?}: {e}"))
}

/// `pattern` as an absolute pattern: a relative one is taken from `dir` (made absolute),
/// whose own glob characters are escaped so they are not read as a pattern.
pub fn absolute_pattern(pattern: &str, dir: &Path) -> String {
    if Path::new(pattern).is_absolute() {
        return pattern.to_string();
    }
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let escaped = glob::Pattern::escape(&dir.display().to_string());
    format!("{}/{pattern}", escaped.trim_end_matches('/'))
}

/// Whether `path` is among what `patterns` name (so the next scan finds it).
pub fn matches_any(patterns: &[String], path: &Path) -> bool {
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    patterns
        .iter()
        .any(|p| glob::Pattern::new(p).is_ok_and(|g| g.matches_path(path) || g.matches_path(&abs)))
}

/// The files and block devices `patterns` name, in pattern order then name order, each once
/// (a disk reached through two names, e.g. two `/dev/disk/by-id` links, is kept under the
/// first). At most [`MAX_CANDIDATES`]; what was cut or unreadable is in the warnings.
pub fn expand(patterns: &[String]) -> (Vec<PathBuf>, Vec<String>) {
    let mut out = Vec::new();
    let mut warnings = Vec::new();
    let mut seen = HashSet::new();
    'patterns: for p in patterns {
        let paths = match glob::glob(p) {
            Ok(paths) => paths,
            Err(e) => {
                warnings.push(format!("scan pattern {p:?}: {e}"));
                continue;
            }
        };
        for entry in paths {
            let path = match entry {
                Ok(path) => path,
                Err(e) => {
                    warnings.push(format!("scan {p:?}: {e}"));
                    continue;
                }
            };
            if !members::is_member_like(&path) || !seen.insert(members::identity(&path)) {
                continue;
            }
            if out.len() == MAX_CANDIDATES {
                warnings.push(format!(
                    "scan: more than {MAX_CANDIDATES} files match; the rest are not looked at \
                     (narrow the scan patterns)"
                ));
                break 'patterns;
            }
            out.push(path);
        }
    }
    debug_assert!(out.len() <= MAX_CANDIDATES, "the scan is bounded");
    (out, warnings)
}

/// A candidate with an md superblock: what of it a scan goes by.
#[derive(Clone, Debug, PartialEq)]
pub struct Found {
    pub path: PathBuf,
    pub uuid: [u8; 16],
    /// The array's name (after "host:").
    pub name: String,
    pub level: i32,
    pub raid_disks: u32,
    pub events: u64,
}

impl Found {
    fn new(path: PathBuf, sb: &Superblock) -> Found {
        Found {
            path,
            uuid: sb.set_uuid,
            name: sb.array_name(),
            level: sb.level,
            raid_disks: sb.raid_disks,
            events: sb.events,
        }
    }
}

/// The superblocks of `paths`, read without locking (a member in use can be looked at);
/// those without one, or that cannot be opened, are left out.
pub async fn examine_all(paths: &[PathBuf], timeout: Option<Duration>) -> Vec<Found> {
    let mut found = Vec::new();
    for p in paths {
        let Ok(m) = members::open_timed(p, Access::Inspect, timeout) else {
            tracing::debug!(path = %p.display(), "scan: cannot open");
            continue;
        };
        match raidd_engine::assemble::examine(&*m).await {
            Ok(sb) => found.push(Found::new(p.clone(), &sb)),
            Err(e) => tracing::debug!(path = %p.display(), "scan: no md superblock: {e}"),
        }
    }
    found
}

/// The members of the array `uuid` among what was found: those whose superblock names it,
/// and, for an array of arrays, those of its inner arrays (`inner`), in the order found.
pub fn members_of(found: &[Found], uuid: &[u8; 16], inner: &[[u8; 16]]) -> Vec<PathBuf> {
    found
        .iter()
        .filter(|f| f.uuid == *uuid || inner.contains(&f.uuid))
        .map(|f| f.path.clone())
        .collect()
}

/// One array seen in a scan: its UUID, name and level from the newest superblock, and the
/// paths that carry it.
#[derive(Clone, Debug, PartialEq)]
pub struct Seen {
    pub uuid: [u8; 16],
    pub name: String,
    pub level: String,
    pub raid_disks: u32,
    pub paths: Vec<PathBuf>,
}

/// What was found grouped by array, in the order each array was first seen; the name and
/// level are the superblock's with the highest event count.
pub fn group(found: &[Found]) -> Vec<Seen> {
    let mut seen: Vec<(Seen, u64)> = Vec::new();
    for f in found {
        let level = crate::md_names::level_text(f.level);
        let i = match seen.iter().position(|(s, _)| s.uuid == f.uuid) {
            Some(i) => i,
            None => {
                seen.push((
                    Seen {
                        uuid: f.uuid,
                        name: f.name.clone(),
                        level: level.clone(),
                        raid_disks: f.raid_disks,
                        paths: Vec::new(),
                    },
                    f.events,
                ));
                seen.len() - 1
            }
        };
        let (s, events) = &mut seen[i];
        if f.events > *events {
            *events = f.events;
            s.name = f.name.clone();
            s.level = level;
            s.raid_disks = f.raid_disks;
        }
        s.paths.push(f.path.clone());
    }
    seen.into_iter().map(|(s, _)| s).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_parse_in_every_grouping_and_bad_text_is_refused() {
        let want: [u8; 16] = [
            0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54,
            0x32, 0x10,
        ];
        for t in [
            "01234567:89abcdef:fedcba98:76543210",
            "01234567-89ab-cdef-fedc-ba9876543210",
            "0123456789ABCDEFFEDCBA9876543210",
            "01234567.89abcdef.fedcba98.76543210",
        ] {
            assert_eq!(parse_uuid(t), Ok(want), "{t}");
        }
        let printed = raidd_engine::array::uuid_string(&want);
        assert_eq!(
            parse_uuid(&printed),
            Ok(want),
            "what examine prints reads back"
        );
        for bad in [
            "",
            "0123",
            "01234567:89abcdef:fedcba98:7654321",
            "01234567:89abcdef:fedcba98:765432100",
            "g1234567:89abcdef:fedcba98:76543210",
            "+1234567:89abcdef:fedcba98:76543210",
            "0123456789abcdef0123456789abcdéf",
        ] {
            let e = parse_uuid(bad).unwrap_err();
            assert!(e.contains("not an md UUID"), "{bad}: {e}");
        }
    }

    fn found(path: &str, uuid: u8, events: u64, name: &str) -> Found {
        Found {
            path: PathBuf::from(path),
            uuid: [uuid; 16],
            name: name.into(),
            level: 5,
            raid_disks: 3,
            events,
        }
    }

    #[test]
    fn an_array_takes_its_own_members_and_its_inner_arrays_members() {
        let f = [
            found("a", 1, 5, "outer"),
            found("b", 2, 5, "in0"),
            found("c", 3, 5, "in1"),
            found("d", 4, 5, "other"),
            found("e", 2, 4, "in0"),
        ];
        let p = |v: &[&str]| v.iter().map(PathBuf::from).collect::<Vec<_>>();
        assert_eq!(members_of(&f, &[1; 16], &[]), p(&["a"]));
        assert_eq!(
            members_of(&f, &[1; 16], &[[2; 16], [3; 16]]),
            p(&["a", "b", "c", "e"])
        );
        assert_eq!(members_of(&f, &[9; 16], &[]), Vec::<PathBuf>::new());
    }

    #[test]
    fn groups_take_the_newest_superblocks_name() {
        let f = [
            found("x", 7, 3, "old"),
            found("y", 8, 1, "b"),
            found("z", 7, 9, "new"),
        ];
        let g = group(&f);
        assert_eq!(g.len(), 2);
        assert_eq!(g[0].uuid, [7; 16]);
        assert_eq!(g[0].name, "new");
        assert_eq!(g[0].paths, vec![PathBuf::from("x"), PathBuf::from("z")]);
        assert_eq!(g[1].name, "b");
    }

    #[test]
    fn patterns_are_checked_and_matched() {
        assert!(check_pattern("/srv/raidd/*.img").is_ok());
        let e = check_pattern("/srv/[raidd").unwrap_err();
        assert!(e.contains("/srv/[raidd"), "{e}");
        let pats = vec![
            "/srv/raidd/*.img".to_string(),
            "/dev/disk/by-id/wwn-*".into(),
        ];
        assert!(matches_any(&pats, Path::new("/srv/raidd/new.img")));
        assert!(matches_any(&pats, Path::new("/dev/disk/by-id/wwn-0x5000")));
        assert!(!matches_any(&pats, Path::new("/srv/other/new.img")));
        assert!(!matches_any(&pats, Path::new("/dev/sdb")));
    }

    #[test]
    fn expand_keeps_files_once_and_skips_directories() {
        let dir = tempfile::tempdir().unwrap();
        for n in ["a.img", "b.img"] {
            std::fs::write(dir.path().join(n), b"x").unwrap();
        }
        std::fs::create_dir(dir.path().join("d.img")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("a.img"), dir.path().join("link.img")).unwrap();
        let pat = format!("{}/*.img", dir.path().display());
        let (paths, warnings) = expand(&[pat.clone(), pat]);
        let names: Vec<_> = paths
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            ["a.img", "b.img"],
            "the link and the directory are left out"
        );
        assert!(warnings.is_empty(), "{warnings:?}");
    }
}
