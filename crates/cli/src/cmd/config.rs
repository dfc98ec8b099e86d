//! `raidd config scan`: a configuration for the arrays whose members the given patterns name,
//! each array named by its UUID (as `mdadm --detail --scan` prints ARRAY lines), so the
//! daemon finds the members wherever they are at its next start.

use std::path::Path;

use clap::{Args, Subcommand};
use raidd_admin::exit::AdminResult;
use raidd_admin::members::{self, Access};
use raidd_admin::scan::{self, Seen};
use raidd_engine::array::uuid_string;
use raidd_engine::assemble::AssembleOptions;
use serde::Serialize;

use crate::output;

#[derive(Args, Debug)]
pub struct ConfigArgs {
    #[command(subcommand)]
    command: ConfigCommand,
}

#[derive(Subcommand, Debug)]
enum ConfigCommand {
    /// Print a config that names, by UUID, every array whose members the patterns name
    /// (arrays of arrays as one array with its inner arrays).
    Scan(ScanArgs),
}

#[derive(Args, Debug)]
struct ScanArgs {
    /// Where to look: glob patterns of member files and block devices.
    #[arg(value_name = "PATTERN", default_value = "/dev/disk/by-id/*")]
    patterns: Vec<String>,
}

/// One array of the printed config.
#[derive(Clone, Debug, PartialEq, Serialize)]
struct ScanArray {
    name: String,
    uuid: String,
    level: String,
    raid_disks: u32,
    /// The UUIDs of its inner arrays (an array of arrays).
    inner: Vec<String>,
    /// Every path found for it (its inner arrays' too).
    members: Vec<String>,
}

#[derive(Debug, Serialize)]
struct ScanJson {
    scan: Vec<String>,
    arrays: Vec<ScanArray>,
    warnings: Vec<String>,
}

pub fn run(args: ConfigArgs, json: bool) -> AdminResult {
    match args.command {
        ConfigCommand::Scan(a) => scan_cmd(a, json),
    }
}

fn scan_cmd(args: ScanArgs, json: bool) -> AdminResult {
    // The printed config may be saved anywhere: a relative pattern would then mean another
    // place.
    let patterns: Vec<String> = args
        .patterns
        .iter()
        .map(|p| scan::absolute_pattern(p, Path::new(".")))
        .collect();
    for p in &patterns {
        scan::check_pattern(p).map_err(raidd_admin::exit::AdminError::usage)?;
    }
    raidd_rt::block_on(async move {
        let (candidates, warnings) = scan::expand(&patterns);
        let found = scan::examine_all(&candidates, None).await;
        let groups = scan::group(&found);
        let mut outer = Vec::with_capacity(groups.len());
        for g in &groups {
            outer.push(outer_of(g).await);
        }
        let arrays = nest(&groups, &outer);
        if json {
            return output::emit_json(&ScanJson {
                scan: patterns,
                arrays,
                warnings,
            });
        }
        for w in &warnings {
            eprintln!("raidd: {w}");
        }
        output::emit(&config_text(&patterns, &arrays))
    })
}

/// The array whose superblock the array `g` carries in its data (`g` is then an inner array
/// of it); `None` when it carries none or cannot be assembled read-only. Only `g` itself is
/// assembled: the outer array would want its other inner arrays too.
async fn outer_of(g: &Seen) -> Option<Outer> {
    let mut opened = Vec::with_capacity(g.paths.len());
    for p in &g.paths {
        match members::open(p, Access::Inspect) {
            Ok(m) => opened.push(m),
            Err(e) => tracing::info!(member = %p.display(), "not opened: {e}"),
        }
    }
    let opts = AssembleOptions {
        read_only: true,
        start_dirty_degraded: true,
        tag_cache: 0,
    };
    let a = match raidd_engine::assemble::assemble(opened, opts).await {
        Ok(a) => a.array,
        Err(e) => {
            tracing::info!(uuid = %uuid_string(&g.uuid), "not assembled to look inside: {e}");
            return None;
        }
    };
    let outer = raidd_engine::assemble::examine(&*a)
        .await
        .ok()
        .map(|sb| Outer {
            uuid: sb.set_uuid,
            name: sb.array_name(),
            level: raidd_admin::md_names::level_text(sb.level),
            raid_disks: sb.raid_disks,
        });
    if let Err(e) = a.close().await {
        tracing::info!("closing the array looked inside: {e}");
    }
    outer.filter(|o| o.uuid != g.uuid)
}

/// The array an inner array belongs to, as its superblock inside that inner array says.
#[derive(Clone, Debug, PartialEq)]
struct Outer {
    uuid: [u8; 16],
    name: String,
    level: String,
    raid_disks: u32,
}

/// The arrays to configure: each group that is not an inner array of another, with the
/// groups inside it (`outer[i]`: the array group `i` is inside of, if any).
fn nest(groups: &[Seen], outer: &[Option<Outer>]) -> Vec<ScanArray> {
    debug_assert_eq!(groups.len(), outer.len(), "one answer per group");
    let mut arrays: Vec<(ScanArray, [u8; 16])> = Vec::new();
    for (g, o) in groups.iter().zip(outer) {
        let paths = g.paths.iter().map(|p| p.display().to_string());
        let Some(o) = o else {
            arrays.push((
                ScanArray {
                    name: g.name.clone(),
                    uuid: uuid_string(&g.uuid),
                    level: g.level.clone(),
                    raid_disks: g.raid_disks,
                    inner: Vec::new(),
                    members: paths.collect(),
                },
                g.uuid,
            ));
            continue;
        };
        let i = match arrays.iter().position(|(_, u)| *u == o.uuid) {
            Some(i) => i,
            None => {
                arrays.push((
                    ScanArray {
                        name: o.name.clone(),
                        uuid: uuid_string(&o.uuid),
                        level: o.level.clone(),
                        raid_disks: o.raid_disks,
                        inner: Vec::new(),
                        members: Vec::new(),
                    },
                    o.uuid,
                ));
                arrays.len() - 1
            }
        };
        arrays[i].0.inner.push(uuid_string(&g.uuid));
        arrays[i].0.members.extend(paths);
    }
    let mut out: Vec<ScanArray> = arrays.into_iter().map(|(a, _)| a).collect();
    unique_names(&mut out);
    out
}

/// Names the config accepts, each once: an empty or unprintable name becomes `mdN`, a
/// repeated one gets `-2`, `-3`…
fn unique_names(arrays: &mut [ScanArray]) {
    let mut taken = std::collections::HashSet::new();
    for (i, a) in arrays.iter_mut().enumerate() {
        let mut base: String = a.name.chars().filter(|c| !c.is_control()).collect();
        if base.is_empty() {
            base = format!("md{i}");
        }
        let mut name = base.clone();
        let mut n = 1;
        while !taken.insert(name.clone()) {
            n += 1;
            name = format!("{base}-{n}");
        }
        a.name = name;
    }
}

/// The config as TOML: the scan patterns and an `[[array]]` a UUID, with what was found as
/// comments.
fn config_text(patterns: &[String], arrays: &[ScanArray]) -> String {
    let q = |s: &str| serde_json::to_string(s).unwrap_or_default();
    let mut t = String::from(
        "# raidd config scan: each array is named by the UUID in its members' superblocks;\n\
         # the daemon finds its members (spares and journals too) under `scan` at each start.\n",
    );
    let list: Vec<String> = patterns.iter().map(|p| q(p)).collect();
    t.push_str(&format!("scan = [{}]\n", list.join(", ")));
    if arrays.is_empty() {
        t.push_str("# no md superblock was found under these patterns\n");
    }
    for a in arrays {
        t.push_str(&format!(
            "\n[[array]]\nname = {}\nuuid = {}\n",
            q(&a.name),
            q(&a.uuid)
        ));
        if !a.inner.is_empty() {
            let inner: Vec<String> = a.inner.iter().map(|u| q(u)).collect();
            t.push_str(&format!("inner = [{}]\n", inner.join(", ")));
        }
        t.push_str(&format!(
            "# {}, {} devices, found: {}\n",
            a.level,
            a.raid_disks,
            a.members.join(" ")
        ));
    }
    t
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::path::PathBuf;

    fn seen(uuid: u8, name: &str, paths: &[&str]) -> Seen {
        Seen {
            uuid: [uuid; 16],
            name: name.into(),
            level: "raid1".into(),
            raid_disks: 2,
            paths: paths.iter().map(PathBuf::from).collect(),
        }
    }

    fn top() -> Outer {
        Outer {
            uuid: [9; 16],
            name: "top".into(),
            level: "raid0".into(),
            raid_disks: 2,
        }
    }

    #[test]
    fn inner_arrays_join_their_outer_array_and_names_are_made_unique() {
        let groups = [
            seen(1, "in0", &["/d/a", "/d/b"]),
            seen(2, "x", &["/d/c"]),
            seen(3, "in1", &["/d/e", "/d/f"]),
            seen(4, "x", &["/d/g"]),
            seen(5, "", &["/d/h"]),
        ];
        let outer = [Some(top()), None, Some(top()), None, None];
        let a = nest(&groups, &outer);
        let names: Vec<&str> = a.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["top", "x", "x-2", "md3"]);
        assert_eq!((a[0].level.as_str(), a[0].raid_disks), ("raid0", 2));
        assert_eq!(a[0].uuid, uuid_string(&[9; 16]));
        assert_eq!(a[0].inner, [uuid_string(&[1; 16]), uuid_string(&[3; 16])]);
        assert_eq!(a[0].members, ["/d/a", "/d/b", "/d/e", "/d/f"]);
        assert!(a[1].inner.is_empty());
    }

    #[test]
    fn the_printed_config_is_one_the_daemon_reads() {
        let groups = [
            seen(1, "in0", &["/d/a"]),
            seen(2, "web \"data\"", &["/d/c", "/d/d"]),
            seen(3, "in1", &["/d/e"]),
        ];
        let arrays = nest(&groups, &[Some(top()), None, Some(top())]);
        let text = config_text(&["/d/*".into()], &arrays);
        let c = raidd_server::config::Config::parse(&text, Path::new("/etc/raidd")).unwrap();
        assert_eq!(c.scan, ["/d/*"]);
        assert_eq!(c.arrays.len(), 2);
        assert_eq!(
            c.arrays[0].find,
            raidd_server::config::Find::Uuid {
                uuid: [9; 16],
                inner: vec![[1; 16], [3; 16]]
            }
        );
        assert_eq!(c.arrays[1].name, "web \"data\"");
        assert!(
            text.contains("# raid1, 2 devices, found: /d/c /d/d"),
            "{text}"
        );
        let none = config_text(&["/d/*".into()], &[]);
        assert!(none.contains("no md superblock"), "{none}");
    }
}
