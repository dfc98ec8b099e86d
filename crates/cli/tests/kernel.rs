//! Proven against the real Linux kernel, in a qemu guest (scripts/vm.sh): arrays move both
//! ways between kernel md and raidd, and the kernel's NBD client uses raidd's server.
//!
//! These tests need the guest, so they are `#[ignore]`d in a plain `cargo test`;
//! `scripts/test.sh` builds (or reuses) the guest and runs them with `--ignored`, with
//! `RAIDD_VM` naming the guest's directory.
//!
//! Data is raidd's self-verifying pattern: inside the guest the same `raidd` binary writes or
//! verifies it on /dev/mdX as a plain device (`pattern --raw`), so a misplaced, stale or torn
//! sector is named by geometry and sector whichever side wrote it.
#![allow(clippy::unwrap_used)]

mod common;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{args_with, raidd, scratch};

/// Devices per guest boot (PCI slots are limited).
const DISKS_PER_BOOT: usize = 20;
const MEMBER_BYTES: u64 = 12 << 20;

/// One array geometry both sides must agree on.
#[derive(Clone, Debug)]
struct Geo {
    level: &'static str,
    /// mdadm's layout name (raidd accepts the same names).
    layout: Option<&'static str>,
    chunk_k: Option<u32>,
    members: usize,
    /// A slot left missing (degraded array).
    missing: Option<usize>,
    bitmap: bool,
    /// md's partial parity log (`--consistency-policy=ppl`, RAID5).
    ppl: bool,
    /// raidd's checksum tags past md's data (`--checksums crc32c`): raidd's arrays only.
    checksums: bool,
}

impl Geo {
    fn label(&self) -> String {
        let mut s = format!("{}-{}", self.level, self.members);
        if let Some(l) = self.layout {
            let _ = write!(s, "-{l}");
        }
        if let Some(c) = self.chunk_k {
            let _ = write!(s, "-{c}k");
        }
        if let Some(m) = self.missing {
            let _ = write!(s, "-missing{m}");
        }
        if self.bitmap {
            s.push_str("-bitmap");
        }
        if self.ppl {
            s.push_str("-ppl");
        }
        if self.checksums {
            s.push_str("-checksums");
        }
        s
    }

    /// Disks actually present.
    fn disks(&self) -> usize {
        self.members - usize::from(self.missing.is_some())
    }
}

fn geometries() -> Vec<Geo> {
    let g = |level, layout, chunk_k, members| Geo {
        level,
        layout,
        chunk_k,
        members,
        missing: None,
        bitmap: false,
        ppl: false,
        checksums: false,
    };
    vec![
        g("linear", None, None, 3),
        g("raid0", None, Some(64), 3),
        g("raid1", None, None, 2),
        g("raid1", None, None, 3),
        g("raid4", None, Some(64), 3),
        g("raid5", Some("left-symmetric"), Some(64), 4),
        g("raid5", Some("left-asymmetric"), Some(128), 3),
        g("raid5", Some("right-symmetric"), Some(32), 5),
        g("raid5", Some("right-asymmetric"), Some(512), 4),
        g("raid5", Some("parity-first"), Some(64), 4),
        g("raid5", Some("parity-last"), Some(64), 3),
        g("raid6", None, Some(64), 5),
        g("raid10", Some("n2"), Some(64), 4),
        g("raid10", Some("n2"), Some(64), 5),
        g("raid10", Some("f2"), Some(64), 4),
        g("raid10", Some("o2"), Some(64), 3),
        Geo {
            missing: Some(1),
            ..g("raid5", Some("left-symmetric"), Some(64), 4)
        },
        Geo {
            bitmap: true,
            ..g("raid1", None, None, 2)
        },
        Geo {
            ppl: true,
            ..g("raid5", Some("left-symmetric"), Some(64), 4)
        },
        Geo {
            ppl: true,
            missing: Some(2),
            ..g("raid5", Some("left-symmetric"), Some(128), 4)
        },
        Geo {
            checksums: true,
            ..g("raid5", Some("left-symmetric"), Some(64), 4)
        },
        Geo {
            checksums: true,
            ..g("raid1", None, None, 2)
        },
    ]
}

/// Boots the guest (Debian 12's stock kernel) with `disks` and `job` in `share`.
fn boot(share: &Path, job: &str, disks: &[PathBuf], netns: Option<&str>) -> (bool, String) {
    let vm = common::guest::vm_dir("RAIDD_VM", "build");
    common::guest::boot(&vm, share, job, disks, netns)
}

fn seed_of(i: usize) -> u64 {
    0x6b65_726e_0000 + i as u64
}

/// The member images of geometry `i`, `None` for a missing slot.
fn images(dir: &Path, i: usize, g: &Geo) -> Vec<Option<PathBuf>> {
    (0..g.members)
        .map(|k| {
            (g.missing != Some(k)).then(|| {
                let p = dir.join(format!("g{i}-m{k}.img"));
                let f = std::fs::File::create(&p).unwrap();
                f.set_len(MEMBER_BYTES).unwrap();
                p
            })
        })
        .collect()
}

/// The feature map of `member`'s superblock, as `raidd examine` reads it.
fn feature_map(member: &Path) -> u64 {
    let ex = raidd(&args_with(&["examine", "--json"], &[member.to_path_buf()]))
        .ok()
        .json();
    ex["members"][0]["superblock"]["feature_map"]
        .as_u64()
        .unwrap()
}

/// Geometries in boots of at most DISKS_PER_BOOT disks.
fn batches(geos: &[Geo]) -> Vec<Vec<usize>> {
    let mut out: Vec<Vec<usize>> = vec![Vec::new()];
    let mut used = 0;
    for (i, g) in geos.iter().enumerate() {
        if used + g.disks() > DISKS_PER_BOOT {
            out.push(Vec::new());
            used = 0;
        }
        out.last_mut().unwrap().push(i);
        used += g.disks();
    }
    out
}

/// The guest's name for the k-th disk of a boot.
fn vd(k: usize) -> String {
    format!("/dev/vd{}", (b'b' + k as u8) as char)
}

/// Kernel md creates every geometry and writes the pattern through /dev/mdX (and checks
/// it there, and scrubs); raidd then assembles each from the images and verifies every
/// sector, and reports the geometry mdadm made.
#[test]
#[ignore = "needs the qemu guest: scripts/test.sh runs it"]
fn kernel_md_arrays_read_back_in_raidd() {
    let dir = scratch();
    // mdadm makes no checksum tags.
    let geos: Vec<Geo> = geometries().into_iter().filter(|g| !g.checksums).collect();
    let mut members: Vec<Vec<Option<PathBuf>>> = Vec::new();
    for (i, g) in geos.iter().enumerate() {
        members.push(images(dir.path(), i, g));
    }
    in_guest(dir.path(), &geos, &members, |i, g, devs| {
        let mut create = format!(
            "mdadm --create /dev/md{i} --run --metadata=1.2 --level={} --raid-devices={}",
            g.level, g.members
        );
        if let Some(l) = g.layout {
            let _ = write!(create, " --layout={l}");
        }
        if let Some(c) = g.chunk_k {
            let _ = write!(create, " --chunk={c}");
        }
        if g.bitmap {
            create.push_str(" --bitmap=internal --bitmap-chunk=1M");
        }
        if g.ppl {
            create.push_str(" --consistency-policy=ppl");
        }
        if g.level != "linear" && g.level != "raid0" {
            create.push_str(" --assume-clean");
        }
        let seed = seed_of(i);
        format!(
            "{create} {devs} || fail=1\n\
             ./raidd pattern write --raw /dev/md{i} --seed {seed} || fail=1\n\
             ./raidd pattern verify --raw /dev/md{i} --seed {seed} || fail=1\n",
            devs = devs.join(" ")
        )
    });
    for (i, g) in geos.iter().enumerate() {
        let present: Vec<PathBuf> = members[i].iter().flatten().cloned().collect();
        let seed = seed_of(i).to_string();
        let label = g.label();
        let r = raidd(&args_with(
            &["pattern", "verify", "--seed", &seed],
            &present,
        ));
        assert_eq!(
            r.code,
            0,
            "{label}: raidd read the kernel's array wrong: {}{}",
            r.text(),
            r.stderr
        );
        let d = raidd(&args_with(&["detail", "--json"], &present))
            .ok()
            .json();
        let a = &d["array"];
        assert_eq!(a["level"], g.level, "{label}: {a}");
        assert_eq!(a["raid_devices"], g.members, "{label}");
        if let Some(c) = g.chunk_k {
            assert_eq!(a["chunk_bytes"], u64::from(c) * 1024, "{label}");
        }
        if let Some(l) = g.layout {
            // raidd names RAID10 layouts as mdadm --detail does ("near=2" for n2).
            let want = match l.split_at(1) {
                ("n", k) if g.level == "raid10" => format!("near={k}"),
                ("f", k) if g.level == "raid10" => format!("far={k}"),
                ("o", k) if g.level == "raid10" => format!("offset={k}"),
                _ => l.to_string(),
            };
            assert_eq!(a["layout"], want.as_str(), "{label}: {a}");
        }
        let want = if g.missing.is_some() {
            "degraded"
        } else {
            "clean"
        };
        assert_eq!(a["state"], want, "{label}: {a}");
        if g.ppl {
            assert_eq!(a["consistency_policy"], "ppl", "{label}: {a}");
        }
    }
}

/// raidd creates every geometry and writes the pattern; the kernel assembles each with
/// mdadm, verifies every sector through /dev/mdX and scrubs: mismatch_cnt must be 0.
#[test]
#[ignore = "needs the qemu guest: scripts/test.sh runs it"]
fn raidd_arrays_assemble_in_kernel_md() {
    let dir = scratch();
    let geos = geometries();
    let mut members: Vec<Vec<Option<PathBuf>>> = Vec::new();
    for (i, g) in geos.iter().enumerate() {
        let imgs = images(dir.path(), i, g);
        let mut args: Vec<String> = vec![
            "create".into(),
            "--level".into(),
            g.level.into(),
            "--name".into(),
            format!("g{i}"),
        ];
        if let Some(l) = g.layout {
            args.extend(["--layout".into(), l.into()]);
        }
        if let Some(c) = g.chunk_k {
            args.extend(["--chunk".into(), format!("{c}K")]);
        }
        if g.bitmap {
            args.extend([
                "--bitmap".into(),
                "internal".into(),
                "--bitmap-chunk".into(),
                "1M".into(),
            ]);
        }
        if g.ppl {
            args.extend(["--consistency-policy".into(), "ppl".into()]);
        }
        if g.checksums {
            args.extend(["--checksums".into(), "crc32c".into()]);
        }
        args.push("--assume-clean".into());
        for m in &imgs {
            args.push(match m {
                Some(p) => p.display().to_string(),
                None => "missing".into(),
            });
        }
        raidd(&args).ok();
        let present: Vec<PathBuf> = imgs.iter().flatten().cloned().collect();
        let seed = seed_of(i).to_string();
        raidd(&args_with(&["pattern", "write", "--seed", &seed], &present)).ok();
        members.push(imgs);
    }
    run_kernel_checks(dir.path(), &geos, &members);
    for (i, g) in geos.iter().enumerate().filter(|(_, g)| g.checksums) {
        kernel_wrote_a_checksummed_array(g, i, &members[i]);
    }
}

/// The kernel wrote generation 2 over a checksummed array (`run_kernel_checks`), moving its
/// event count on past its tags: raidd reports no corruption, re-derives the tags when it
/// first assembles the array to write, and they then catch a block changed behind its back
/// (on RAID5, where that block is read for certain).
fn kernel_wrote_a_checksummed_array(g: &Geo, i: usize, members: &[Option<PathBuf>]) {
    let label = g.label();
    let present: Vec<PathBuf> = members.iter().flatten().cloned().collect();
    let seed = seed_of(i).to_string();
    let r = raidd(&args_with(
        &[
            "pattern",
            "verify",
            "-v",
            "--seed",
            &seed,
            "--generation",
            "2",
        ],
        &present,
    ));
    assert_eq!(r.code, 0, "{label}: {}{}", r.text(), r.stderr);
    assert!(
        !r.stderr.contains("checksum mismatch"),
        "{label}: {}",
        r.stderr
    );
    let w = raidd(&args_with(
        &[
            "pattern",
            "write",
            "-v",
            "--seed",
            &seed,
            "--generation",
            "3",
            "--length",
            "64K",
        ],
        &present,
    ));
    assert_eq!(w.code, 0, "{label}: {}", w.stderr);
    assert!(
        w.stderr.contains("checksum tags re-derived") && w.stderr.contains("events"),
        "{label}: {}",
        w.stderr
    );
    let ex = raidd(&args_with(&["examine", "--json"], &present[..1])).ok();
    let j: serde_json::Value = serde_json::from_slice(&ex.stdout).unwrap();
    let base = j["members"][0]["superblock"]["data_offset_sectors"]
        .as_u64()
        .unwrap()
        * 512;
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&present[0])
            .unwrap();
        let mut b = [0u8; 1];
        f.read_exact_at(&mut b, base + (1 << 20) + 77).unwrap();
        f.write_all_at(&[b[0] ^ 1], base + (1 << 20) + 77).unwrap();
    }
    let v = raidd(&args_with(
        &[
            "pattern",
            "verify",
            "-v",
            "--seed",
            &seed,
            "--since",
            "2",
            "--generation",
            "3",
        ],
        &present,
    ));
    assert_eq!(v.code, 0, "{label}: {}{}", v.text(), v.stderr);
    assert!(
        !v.stderr.contains("re-derived"),
        "{label}: trusted now: {}",
        v.stderr
    );
    // RAID5's data there is on member 0 alone (a mirror's read may go to the other copy).
    if g.level == "raid5" {
        assert!(
            v.stderr.contains("checksum mismatch"),
            "{label}: {}",
            v.stderr
        );
    }
}

/// Boots the guest over the arrays: mdadm assembles each, the pattern is verified through
/// /dev/mdX, and redundant whole arrays are scrubbed (mismatch_cnt must be 0).
fn run_kernel_checks(dir: &Path, geos: &[Geo], members: &[Vec<Option<PathBuf>>]) {
    in_guest(dir, geos, members, |i, g, devs| {
        let present: Vec<&str> = devs
            .iter()
            .map(String::as_str)
            .filter(|d| *d != "missing")
            .collect();
        let policy = if g.ppl {
            format!(
                "grep -qx ppl /sys/block/md{i}/md/consistency_policy || {{ echo 'NO PPL {}'; fail=1; }}\n",
                g.label()
            )
        } else {
            String::new()
        };
        format!(
            "mdadm --assemble /dev/md{i} --run {devs} || fail=1\n\
             cat /proc/mdstat\n\
             {policy}\
             ./raidd pattern verify --raw /dev/md{i} --seed {seed} || {{ echo 'BAD {label}'; fail=1; }}\n\
             {rewrite}",
            devs = present.join(" "),
            seed = seed_of(i),
            label = g.label(),
            rewrite = if g.checksums {
                format!(
                    "./raidd pattern write --raw /dev/md{i} --seed {} --generation 2 || fail=1\n",
                    seed_of(i)
                )
            } else {
                String::new()
            }
        )
    });
}

/// Runs the arrays through the guest in boots of at most DISKS_PER_BOOT disks: for each,
/// `step(index, geometry, devices)` gives the shell lines that bring up /dev/mdINDEX
/// (devices in slot order, `missing` for an absent member), then redundant whole arrays
/// are scrubbed and every array is stopped. Every scrub must leave mismatch_cnt at 0.
fn in_guest(
    dir: &Path,
    geos: &[Geo],
    members: &[Vec<Option<PathBuf>>],
    step: impl Fn(usize, &Geo, &[String]) -> String,
) {
    for batch in batches(geos) {
        let share = dir.join(format!("share-{}", batch[0]));
        std::fs::create_dir(&share).unwrap();
        let mut job = String::from("set -u\nfail=0\n");
        let mut disks = Vec::new();
        let mut scrubs = 0;
        for &i in &batch {
            let g = &geos[i];
            let mut devs = Vec::new();
            for m in &members[i] {
                match m {
                    Some(p) => {
                        devs.push(vd(disks.len()));
                        disks.push(p.clone());
                    }
                    None => devs.push("missing".to_string()),
                }
            }
            let _ = writeln!(job, "echo '== {}'", g.label());
            job.push_str(&step(i, g, &devs));
            if g.level != "linear" && g.level != "raid0" && g.missing.is_none() {
                scrubs += 1;
                let _ = write!(
                    job,
                    "echo check > /sys/block/md{i}/md/sync_action; mdadm --wait /dev/md{i}\n\
                     echo \"MISMATCH {label} $(cat /sys/block/md{i}/md/mismatch_cnt)\"\n",
                    label = g.label()
                );
            }
            let _ = writeln!(job, "mdadm --stop /dev/md{i} || fail=1");
        }
        job.push_str("exit $fail\n");
        let (ok, log) = boot(&share, &job, &disks, None);
        assert!(ok, "the guest job failed:\n{log}");
        let mismatches: Vec<&str> = log.lines().filter(|l| l.starts_with("MISMATCH ")).collect();
        assert_eq!(mismatches.len(), scrubs, "scrubs missing:\n{log}");
        for line in mismatches {
            assert!(line.ends_with(" 0"), "kernel check: {line}\n{log}");
        }
    }
}

/// A network namespace for one test, removed on drop.
struct Netns(String);

impl Netns {
    fn new(tag: &str) -> Netns {
        let name = format!("raidd-{tag}-{}", std::process::id());
        let ok = |c: &mut Command| {
            let s = c.status().unwrap();
            assert!(s.success(), "{c:?}");
        };
        ok(Command::new("ip").args(["netns", "add", &name]));
        ok(Command::new("ip").args(["netns", "exec", &name, "ip", "link", "set", "lo", "up"]));
        Netns(name)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// `raidd serve` inside a network namespace (listening on its 127.0.0.1:10809, which the
/// guest reaches as 10.0.2.2), stopped by SIGTERM to its PID.
struct NsDaemon {
    child: std::process::Child,
    control: PathBuf,
}

impl NsDaemon {
    fn start(ns: &Netns, dir: &Path, arrays: &str) -> NsDaemon {
        let control = dir.join("ctl.sock");
        let config = dir.join("raidd.toml");
        std::fs::write(
            &config,
            format!(
                "control_socket = {:?}\n[nbd]\nlisten = \"127.0.0.1:10809\"\n\
                 [iscsi]\nlisten = \"127.0.0.1:3260\"\nstate_dir = {:?}\n{arrays}",
                control.display().to_string(),
                dir.join("state").display().to_string()
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.join("serve.log")).unwrap();
        let child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &ns.0,
                env!("CARGO_BIN_EXE_raidd"),
                "serve",
                "-v",
                "--config",
            ])
            .arg(&config)
            .stderr(log)
            .spawn()
            .unwrap();
        let start = std::time::Instant::now();
        while !control.exists() {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(30),
                "raidd serve did not start: {}",
                std::fs::read_to_string(dir.join("serve.log")).unwrap_or_default()
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        NsDaemon { child, control }
    }

    fn ctl(&self) -> String {
        self.control.display().to_string()
    }

    fn stop(mut self) {
        // SAFETY: kill(2) on the PID of a child we started and have not reaped.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let status = self.child.wait().unwrap();
        assert!(status.success(), "raidd serve exited with {status}");
    }
}

impl Drop for NsDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The kernel's own NBD client against raidd's server: the guest attaches a RAID5 export
/// (the kernel client uses simple replies), makes ext4 on it, writes files, remounts, fsck
/// finds nothing, the files compare; then fio with crc32c verification runs on the device.
/// Afterwards raidd's check finds the array consistent.
#[test]
#[ignore = "needs the qemu guest: scripts/test.sh runs it"]
fn kernel_nbd_client_uses_raidd() {
    let dir = scratch();
    let members = common::daemon::create_array(dir.path(), "raid5", 4, &[]);
    let ns = Netns::new("nbd");
    let d = NsDaemon::start(
        &ns,
        dir.path(),
        &common::daemon::array_config("vol", &members),
    );
    let share = dir.path().join("share");
    std::fs::create_dir(&share).unwrap();
    let job = r#"set -u
modprobe nbd || exit 2
nbd-client 10.0.2.2 10809 /dev/nbd0 -N vol || exit 3
blockdev --getsize64 /dev/nbd0
mkfs.ext4 -q -F /dev/nbd0 || exit 4
mkdir -p /mnt/v && mount /dev/nbd0 /mnt/v || exit 5
cp -a /usr/lib/modules /mnt/v/modules
(cd /mnt/v && find modules -type f -exec md5sum {} + | sort -k2) > /tmp/sums
echo "files: $(wc -l < /tmp/sums)"
umount /mnt/v || exit 6
fsck.ext4 -fn /dev/nbd0 || exit 7
mount /dev/nbd0 /mnt/v || exit 8
(cd /mnt/v && md5sum -c --quiet /tmp/sums) || exit 9
umount /mnt/v
fio --name=verify --filename=/dev/nbd0 --direct=1 --ioengine=libaio --iodepth=8 \
    --rw=randwrite --bs=16k --size=32m --verify=crc32c --verify_fatal=1 \
    --output-format=terse >/dev/null || exit 10
nbd-client -d /dev/nbd0
echo NBD-OK
"#;
    let (ok, log) = boot(&share, job, &[], Some(&ns.0));
    assert!(ok && log.contains("NBD-OK"), "the guest job failed:\n{log}");
    let check = raidd(&["check", "vol", "--wait", "--control", &d.ctl()]).ok();
    assert!(check.text().contains(" 0 mismatched"), "{}", check.text());
    d.stop();
}

/// The kernel's iSCSI initiator (open-iscsi) against raidd's target: discovery, a login
/// with a wrong CHAP secret refused, then mutual CHAP; the LUN appears as a SCSI disk,
/// gets ext4, files, a remount, a clean fsck and compared files, then fio with crc32c
/// verification. While it is logged in, `raidd lun add` gives the target a second LUN (a
/// RAID1): the kernel logs the unit attention, a rescan finds the disk, fio verifies on it;
/// `raidd lun remove` takes it away and reads of it fail. After logout raidd's check finds
/// both arrays consistent.
#[test]
#[ignore = "needs the qemu guest: scripts/test.sh runs it"]
fn kernel_iscsi_initiator_uses_raidd() {
    let dir = scratch();
    let members = common::daemon::create_array(dir.path(), "raid6", 5, &["--chunk", "64K"]);
    let mirror: Vec<PathBuf> = ["m0.img", "m1.img"]
        .iter()
        .map(|n| dir.path().join(n))
        .collect();
    for m in &mirror {
        std::fs::File::create(m)
            .unwrap()
            .set_len(MEMBER_BYTES)
            .unwrap();
    }
    raidd(&common::args_with(
        &[
            "create",
            "--level",
            "raid1",
            "--name",
            "mirror",
            "--assume-clean",
        ],
        &mirror,
    ))
    .ok();
    let ns = Netns::new("iscsi");
    let target = "iqn.2026-11.org.raidd:kernel";
    let cfg = format!(
        "{}{}[[target]]\nname = \"{target}\"\ninitiators = [\"iqn.2026-11.org.raidd:guest\"]\n\
         chap = {{ user = \"guest\", secret = \"guest-secret-1\" }}\n\
         mutual_chap = {{ user = \"raidd\", secret = \"target-secret-2\" }}\n\
         [[target.lun]]\narray = \"vol\"\n",
        common::daemon::array_config("vol", &members),
        common::daemon::array_config("mirror", &mirror)
    );
    let d = NsDaemon::start(&ns, dir.path(), &cfg);
    let share = dir.path().join("share");
    std::fs::create_dir(&share).unwrap();
    let job = format!(
        r#"set -u
T={target}
P=10.0.2.2:3260
modprobe -a iscsi_tcp sd_mod || exit 2
mkdir -p /etc/iscsi /run/lock/iscsi /var/lib/iscsi
echo "InitiatorName=iqn.2026-11.org.raidd:guest" > /etc/iscsi/initiatorname.iscsi
iscsid || exit 3
sleep 1
# SendTargets names the target (its portal is the target's own loopback address, so the
# node is added by hand with the address the guest reaches).
iscsiadm -m discovery -t st -p $P | grep -q "$T" || exit 4
iscsiadm -m node -o new -T $T -p $P >/dev/null || exit 5
set_auth() {{
  for kv in "authmethod CHAP" "username guest" "password $1" "username_in raidd" "password_in target-secret-2"; do
    set -- $kv
    iscsiadm -m node -T $T -p $P -o update -n node.session.auth.$1 -v $2 || exit 6
  done
}}
set_auth wrong-secret-99
if iscsiadm -m node -T $T -p $P --login >/dev/null 2>&1; then echo "a wrong secret logged in"; exit 7; fi
echo "wrong secret refused"
set_auth guest-secret-1
iscsiadm -m node -T $T -p $P --login || exit 8
for i in $(seq 1 60); do [ -b /dev/sda ] && break; sleep 0.5; done
[ -b /dev/sda ] || exit 9
blockdev --getsize64 /dev/sda
mkfs.ext4 -q -F /dev/sda || exit 10
mkdir -p /mnt/v && mount /dev/sda /mnt/v || exit 11
cp -a /usr/lib/modules /mnt/v/modules
(cd /mnt/v && find modules -type f -exec md5sum {{}} + | sort -k2) > /tmp/sums
echo "files: $(wc -l < /tmp/sums)"
umount /mnt/v || exit 12
fsck.ext4 -fn /dev/sda || exit 13
mount /dev/sda /mnt/v || exit 14
(cd /mnt/v && md5sum -c --quiet /tmp/sums) || exit 15
umount /mnt/v
fio --name=verify --filename=/dev/sda --direct=1 --ioengine=libaio --iodepth=8 \
    --rw=randwrite --bs=16k --size=32m --verify=crc32c --verify_fatal=1 \
    --output-format=terse >/dev/null || exit 16
sync
# The host adds LUN 1 while the session runs (the files in /share are the hand-over).
await() {{
  for i in $(seq 1 600); do [ -e "$1" ] && return 0; sleep 0.1; done
  echo "the host did not answer $1"; exit 18
}}
touch want-add; await added
dd if=/dev/sda of=/dev/null bs=4k count=1 iflag=direct 2>/dev/null
dmesg | grep -q "LUN assignments on this target have changed" && echo "kernel told"
iscsiadm -m session --rescan >/dev/null || exit 19
for i in $(seq 1 60); do [ -b /dev/sdb ] && break; sleep 0.5; done
[ -b /dev/sdb ] || exit 20
echo "LUN 1: $(blockdev --getsize64 /dev/sdb) bytes"
fio --name=verify --filename=/dev/sdb --direct=1 --ioengine=libaio --iodepth=8 \
    --rw=randwrite --bs=16k --size=8m --verify=crc32c --verify_fatal=1 \
    --output-format=terse >/dev/null || exit 21
touch want-remove; await removed
if dd if=/dev/sdb of=/dev/null bs=4k count=1 iflag=direct 2>/dev/null; then
  echo "a removed LUN still reads"; exit 22
fi
echo "removed LUN refused"
iscsiadm -m node -T $T -p $P --logout || exit 17
echo ISCSI-OK
"#
    );
    // The host's half of the hand-over: each file the guest leaves is answered by a change
    // made through the control socket.
    let ctl = d.ctl();
    let host = {
        let (share, target) = (share.clone(), target.to_string());
        std::thread::spawn(move || {
            let steps: [(&str, Vec<&str>, &str); 2] = [
                (
                    "want-add",
                    vec!["lun", "add", &target, "--array", "mirror"],
                    "added",
                ),
                (
                    "want-remove",
                    vec!["lun", "remove", &target, "1"],
                    "removed",
                ),
            ];
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(900);
            for (wait, args, answer) in steps {
                while !share.join(wait).exists() {
                    if std::time::Instant::now() > deadline {
                        return;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                let mut a = args.clone();
                a.extend(["--control", &ctl]);
                raidd(&a).ok();
                std::fs::write(share.join(answer), b"").unwrap();
            }
        })
    };
    let (ok, log) = boot(&share, &job, &[], Some(&ns.0));
    host.join().unwrap();
    assert!(
        ok && log.contains("ISCSI-OK") && log.contains("wrong secret refused"),
        "the guest job failed:\n{log}"
    );
    for want in ["kernel told", "LUN 1: ", "removed LUN refused"] {
        assert!(log.contains(want), "no {want:?} in\n{log}");
    }
    for array in ["vol", "mirror"] {
        let check = raidd(&["check", array, "--wait", "--control", &d.ctl()]).ok();
        assert!(check.text().contains(" 0 mismatched"), "{}", check.text());
    }
    d.stop();
}

/// After raidd rebuilt a member onto a spare (RAID5) and after raidd resynced an array a
/// SIGKILL left unclean (RAID1 with and RAID6 without a bitmap), the kernel assembles each,
/// the pattern verifies through /dev/mdX and `check` finds mismatch_cnt 0.
#[test]
#[ignore = "needs the qemu guest: scripts/test.sh runs it"]
fn raidd_rebuilt_and_resynced_arrays_pass_the_kernel_check() {
    use common::daemon::{array_config, create_array, must, tool, Daemon};
    let dir = scratch();
    let geos = vec![
        Geo {
            level: "raid5",
            layout: None,
            chunk_k: None,
            members: 4,
            missing: None,
            bitmap: false,
            ppl: false,
            checksums: false,
        },
        Geo {
            level: "raid1",
            layout: None,
            chunk_k: None,
            members: 2,
            missing: None,
            bitmap: true,
            ppl: false,
            checksums: false,
        },
        Geo {
            level: "raid6",
            layout: None,
            chunk_k: None,
            members: 4,
            missing: None,
            bitmap: false,
            ppl: false,
            checksums: false,
        },
    ];
    let r5 = create_array(dir.path(), "raid5", 4, &[]);
    let r1 = create_array(
        dir.path(),
        "raid1",
        2,
        &["--bitmap", "internal", "--bitmap-chunk", "1M"],
    );
    let r6 = create_array(dir.path(), "raid6", 4, &[]);
    let spare = dir.path().join("spare.img");
    std::fs::File::create(&spare)
        .unwrap()
        .set_len(32 << 20)
        .unwrap();
    for (i, m) in [&r5, &r1, &r6].iter().enumerate() {
        let seed = seed_of(i).to_string();
        raidd(&args_with(&["pattern", "write", "--seed", &seed], m)).ok();
    }
    // Safe mode off: the arrays the kill is to leave unclean stay marked active while idle.
    let unclean =
        |name: &str, m: &[PathBuf]| format!("{}safe_mode_delay = \"off\"\n", array_config(name, m));
    let cfg = format!(
        "[sync]\nspeed_min = 1000000\nspeed_max = 1000000\n[[spare]]\npath = {:?}\n{}{}{}",
        spare.display().to_string(),
        array_config("r5", &r5),
        unclean("r1", &r1),
        unclean("r6", &r6)
    );
    // Rebuild: fail a RAID5 member; the pool spare takes its slot.
    let d = Daemon::start(dir.path(), &cfg);
    let ctl = d.control.display().to_string();
    raidd(&["fail", "r5", r5[1].to_str().unwrap(), "--control", &ctl]).ok();
    wait_for(&ctl, "r5", |a| {
        a["slots"][1]["member"] == spare.display().to_string() && a["slots"][1]["state"] == "insync"
    });
    // Unclean: rewrite the mirrors' and RAID6's pattern through NBD, then SIGKILL.
    for (i, name) in [(1usize, "r1"), (2, "r6")] {
        let file = dir.path().join(format!("pattern-{name}"));
        let size: u64 = must(tool("nbdinfo").args(["--size", &d.uri(name)]))
            .trim()
            .parse()
            .unwrap();
        std::fs::File::create(&file).unwrap().set_len(size).unwrap();
        let seed = seed_of(i).to_string();
        raidd(&[
            "pattern",
            "write",
            "--raw",
            "--seed",
            &seed,
            file.to_str().unwrap(),
        ])
        .ok();
        must(tool("nbdcopy").args([file.to_str().unwrap(), &d.uri(name)]));
    }
    d.kill();
    let d = Daemon::start(dir.path(), &cfg);
    let ctl = d.control.display().to_string();
    for name in ["r1", "r6"] {
        let a = wait_for(&ctl, name, |a| {
            a["needs_resync"] == false && a["sync"].is_null()
        });
        assert_eq!(a["last_sync"]["kind"], "resync", "{name}: {a}");
    }
    d.stop();
    let mut r5_now: Vec<Option<PathBuf>> = r5.iter().cloned().map(Some).collect();
    r5_now[1] = Some(spare.clone());
    let members = vec![
        r5_now,
        r1.iter().cloned().map(Some).collect(),
        r6.iter().cloned().map(Some).collect(),
    ];
    run_kernel_checks(dir.path(), &geos, &members);
}

/// A re-add by bitmap that the kernel starts and a stop interrupts (md's RECOVERY_BITMAP on
/// the member) assembles in raidd, whose daemon finishes it by the bitmap: afterwards the
/// re-added member alone holds every sector as last written, and so does the other.
#[test]
#[ignore = "needs the qemu guest: scripts/test.sh runs it"]
fn a_re_add_the_kernel_left_part_way_is_finished_by_raidd() {
    use common::daemon::{array_config, must, tool, Daemon};
    let dir = scratch();
    let (imgs, share) = common::guest::blank_images(dir.path(), "readd", 2, MEMBER_BYTES);
    let seed = seed_of(90);
    // The recovery crawls at 1 KiB/s over the chunks written while the member was away, so
    // the stop finds it part way.
    let job = format!(
        r#"set -u
mdadm --create /dev/md0 --run --metadata=1.2 --level=raid1 --raid-devices=2 \
    --bitmap=internal --bitmap-chunk=64K --assume-clean /dev/vdb /dev/vdc || exit 2
./raidd pattern write --raw /dev/md0 --seed {seed} || exit 3
mdadm /dev/md0 --fail /dev/vdc || exit 4
sleep 1
mdadm /dev/md0 --remove /dev/vdc || exit 5
./raidd pattern write --raw /dev/md0 --seed {seed} --generation 2 --offset 1M --length 4M || exit 6
echo 1 > /proc/sys/dev/raid/speed_limit_min
echo 1 > /proc/sys/dev/raid/speed_limit_max
mdadm /dev/md0 --re-add /dev/vdc || exit 7
sleep 3
cat /proc/mdstat
mdadm --stop /dev/md0 || exit 8
mdadm --examine /dev/vdc
echo READD-OK
"#
    );
    let (ok, log) = boot(&share, &job, &imgs, None);
    assert!(
        ok && log.contains("READD-OK"),
        "the guest job failed:\n{log}"
    );
    let map = feature_map(&imgs[1]);
    assert_eq!(
        map & 0x82,
        0x82,
        "the kernel left no re-add by bitmap part way ({map:#x}):\n{log}"
    );
    // Offline, raidd says how the rebuild will go.
    let d = raidd(&args_with(&["detail", "--json"], &imgs)).ok().json();
    let slot = &d["array"]["slots"][1];
    assert_eq!(slot["state"], "recovering", "{slot}");
    assert_eq!(slot["by_bitmap"], true, "{slot}");
    // The daemon finishes it.
    let daemon = Daemon::start(dir.path(), &array_config("r1", &imgs));
    let ctl = daemon.control.display().to_string();
    let a = wait_for(&ctl, "r1", |a| {
        a["slots"][1]["state"] == "insync" && a["sync"].is_null()
    });
    assert_eq!(a["last_sync"]["kind"], "recovery", "{a}");
    daemon.stop();
    let map = feature_map(&imgs[1]);
    assert_eq!(map & 0x82, 0, "recovery flags left: {map:#x}");
    let seed_s = seed.to_string();
    let ranges = [
        ("0", Some("1M"), "1"),
        ("1M", Some("4M"), "2"),
        ("5M", Some("1M"), "1"),
        ("6M", Some("2M"), "1"),
        ("8M", None, "1"),
    ];
    for (keep, name) in [(1, "the re-added member"), (0, "the other member")] {
        let one = [imgs[keep].clone()];
        for (offset, length, generation) in ranges {
            let mut args = vec![
                "pattern",
                "verify",
                "--seed",
                &seed_s,
                "--generation",
                generation,
                "--offset",
                offset,
            ];
            if let Some(l) = length {
                args.extend(["--length", l]);
            }
            let r = raidd(&args_with(&args, &one));
            assert_eq!(
                r.code,
                0,
                "{name} alone, from {offset}: {}{}",
                r.text(),
                r.stderr
            );
        }
    }
    // The other way: raidd re-adds the member by its bitmap, crawling, and stops part way;
    // the kernel assembles the array and finishes the recovery.
    let cfg = format!(
        "[sync]\nspeed_min = 1\nspeed_max = 1\n{}",
        array_config("r1", &imgs)
    );
    let daemon = Daemon::start(dir.path(), &cfg);
    let ctl = daemon.control.display().to_string();
    let member = imgs[1].display().to_string();
    raidd(&["fail", "r1", &member, "--control", &ctl]).ok();
    let third = dir.path().join("third");
    std::fs::File::create(&third)
        .unwrap()
        .set_len(MEMBER_BYTES)
        .unwrap();
    raidd(&[
        "pattern",
        "write",
        "--raw",
        "--seed",
        &seed_s,
        "--generation",
        "3",
        "--offset",
        "6M",
        "--length",
        "2M",
        third.to_str().unwrap(),
    ])
    .ok();
    let script = format!(
        "h.pwrite(open({:?}, 'rb').read()[6 << 20:8 << 20], 6 << 20)",
        third.display().to_string()
    );
    must(tool("nbdsh").args(["-u", &daemon.uri("r1"), "-c", &script]));
    raidd(&["remove", "r1", &member, "--control", &ctl]).ok();
    let added = raidd(&["add", "r1", &member, "--control", &ctl])
        .ok()
        .text();
    assert!(added.contains("re-added"), "{added}");
    daemon.stop();
    let map = feature_map(&imgs[1]);
    assert_eq!(map & 0x82, 0x82, "raidd left no re-add by bitmap: {map:#x}");
    let verify: String = [
        ("0", "1M", "1"),
        ("1M", "4M", "2"),
        ("5M", "1M", "1"),
        ("6M", "2M", "3"),
    ]
    .iter()
    .map(|(o, l, g)| {
        format!(
            "./raidd pattern verify --raw /dev/md0 --seed {seed} --generation {g} \
             --offset {o} --length {l} || exit 13\n"
        )
    })
    .collect();
    let job = format!(
        r#"set -u
mdadm --assemble /dev/md0 --run /dev/vdb /dev/vdc || exit 10
mdadm --readwrite /dev/md0 || exit 15
cat /proc/mdstat
mdadm --wait /dev/md0
cat /proc/mdstat
grep -q '\[UU\]' /proc/mdstat || exit 11
mdadm /dev/md0 --fail /dev/vdb || exit 12
{verify}./raidd pattern verify --raw /dev/md0 --seed {seed} --offset 8M || exit 14
mdadm --stop /dev/md0
echo KERNEL-OK
"#
    );
    let (ok, log) = boot(&share, &job, &imgs, None);
    assert!(
        ok && log.contains("KERNEL-OK"),
        "the guest job failed:\n{log}"
    );
}

/// Bad blocks the kernel records on a member (through md's `bad_blocks` sysfs file, as it
/// does when a write there fails; device sectors, as in its log) are read by raidd from the member's log: the member is not
/// used, the array runs without it and verifies (from the other, write-mostly member); `raidd add` rebuilds it whole and empties
/// its log, which mdadm then reads as empty.
#[test]
#[ignore = "needs the qemu guest: scripts/test.sh runs it"]
fn bad_blocks_the_kernel_recorded_keep_a_member_out_until_rebuilt() {
    use common::daemon::{array_config, must, tool, Daemon};
    let dir = scratch();
    let (imgs, share) = common::guest::blank_images(dir.path(), "bb", 2, MEMBER_BYTES);
    let seed = seed_of(91);
    let job = format!(
        r#"set -u
mdadm --create /dev/md0 --run --metadata=1.2 --level=raid1 --raid-devices=2 \
    --assume-clean /dev/vdb /dev/vdc || exit 2
echo writemostly > /sys/block/md0/md/dev-vdb/state || exit 9
./raidd pattern write --raw /dev/md0 --seed {seed} || exit 3
# Device sectors, as the log holds them: 4096 sectors into the data area. md writes the
# log with the next superblock update; a write of the same bytes marks md0 active, so the
# stop's clean mark carries it. Until it is on the member (the kernel has been seen to stop
# without writing it), the array is assembled again and the log set again: three tries.
bb="$(( $(cat /sys/block/md0/md/dev-vdc/offset) + 4096 )) 16"
for try in 1 2 3; do
    echo "$bb" > /sys/block/md0/md/dev-vdc/bad_blocks || exit 4
    cat /sys/block/md0/md/dev-vdc/bad_blocks
    dd if=/dev/md0 of=/tmp/first bs=4096 count=1 iflag=direct 2>/dev/null || exit 6
    dd if=/tmp/first of=/dev/md0 bs=4096 count=1 oflag=direct conv=notrunc 2>/dev/null || exit 7
    mdadm --stop /dev/md0 || exit 5
    mdadm --examine-badblocks /dev/vdc | grep -q 'for 16 sectors' && break
    echo "try $try: the log is not on the member"
    [ $try = 3 ] && exit 8
    mdadm --assemble /dev/md0 --run /dev/vdb /dev/vdc || exit 10
done
echo BB-OK
"#
    );
    let (ok, log) = boot(&share, &job, &imgs, None);
    assert!(ok && log.contains("BB-OK"), "the guest job failed:\n{log}");
    let ex = raidd(&args_with(&["examine", "--json"], &imgs)).ok().json();
    let data_offset = ex["members"][1]["superblock"]["data_offset_sectors"]
        .as_u64()
        .unwrap();
    let first = data_offset + 4096;
    let listed = must(tool("mdadm").args(["--examine-badblocks", imgs[1].to_str().unwrap()]));
    assert!(
        listed.contains(&format!("{first} for 16 sectors")),
        "mdadm lists: {listed}"
    );
    let text = raidd(&["examine", imgs[1].to_str().unwrap()]).ok().text();
    assert!(text.contains("bad blocks present"), "{text}");
    let d = raidd(&args_with(&["detail", "--json"], &imgs)).ok().json();
    let unused = &d["array"]["not_used"][0];
    assert_eq!(unused["reason"], "bad_blocks", "{d}");
    assert_eq!(unused["member"], imgs[1].display().to_string(), "{unused}");
    let why = unused["explanation"].as_str().unwrap();
    assert!(
        why.contains("16 sectors") && why.contains(&format!("device sector {first}")),
        "{why}"
    );
    assert_eq!(d["array"]["state"], "degraded", "{d}");
    // The member left is write-mostly (set through md's sysfs): with no other copy, it serves.
    assert_eq!(d["array"]["slots"][0]["write_mostly"], true, "{d}");
    let text = raidd(&["examine", imgs[0].to_str().unwrap()]).ok().text();
    assert!(text.contains("write-mostly"), "{text}");
    let seed = seed.to_string();
    let r = raidd(&args_with(&["pattern", "verify", "--seed", &seed], &imgs));
    assert_eq!(r.code, 0, "{}{}", r.text(), r.stderr);
    let daemon = Daemon::start(dir.path(), &array_config("r1", &imgs));
    let ctl = daemon.control.display().to_string();
    let member = imgs[1].display().to_string();
    raidd(&["add", "r1", &member, "--control", &ctl]).ok();
    let a = wait_for(&ctl, "r1", |a| {
        a["slots"][1]["state"] == "insync" && a["sync"].is_null()
    });
    assert_eq!(a["last_sync"]["kind"], "recovery", "{a}");
    daemon.stop();
    let listed = must(tool("mdadm").args(["--examine-badblocks", imgs[1].to_str().unwrap()]));
    assert!(listed.contains("list is empty"), "mdadm lists: {listed}");
    let text = raidd(&["examine", imgs[1].to_str().unwrap()]).ok().text();
    assert!(!text.contains("bad blocks present"), "{text}");
    let r = raidd(&args_with(
        &["pattern", "verify", "--seed", &seed],
        &imgs[1..],
    ));
    assert_eq!(
        r.code,
        0,
        "the rebuilt member alone: {}{}",
        r.text(),
        r.stderr
    );
}

/// A replacement the kernel was building (`mdadm --replace`, crawling) when it was stopped:
/// raidd assembles the array with the member being replaced and leaves the replacement out
/// (md's REPLACEMENT), where it used to refuse the whole array; without that member, the
/// replacement is the slot's recovering member, and raidd's daemon finishes it.
#[test]
#[ignore = "needs the qemu guest: scripts/test.sh runs it"]
fn a_replacement_the_kernel_left_part_way_assembles_in_raidd() {
    use common::daemon::{array_config, Daemon};
    let dir = scratch();
    let (imgs, share) = common::guest::blank_images(dir.path(), "rep", 3, MEMBER_BYTES);
    let seed = seed_of(92);
    let job = format!(
        r#"set -u
mdadm --create /dev/md0 --run --metadata=1.2 --level=raid1 --raid-devices=2 \
    --assume-clean /dev/vdb /dev/vdc || exit 2
./raidd pattern write --raw /dev/md0 --seed {seed} || exit 3
mdadm /dev/md0 --add /dev/vdd || exit 4
echo 1 > /proc/sys/dev/raid/speed_limit_min
echo 1 > /proc/sys/dev/raid/speed_limit_max
mdadm /dev/md0 --replace /dev/vdc --with /dev/vdd || exit 5
sleep 3
cat /proc/mdstat
mdadm --stop /dev/md0 || exit 6
mdadm --examine /dev/vdd
echo REPLACE-OK
"#
    );
    let (ok, log) = boot(&share, &job, &imgs, None);
    assert!(
        ok && log.contains("REPLACE-OK"),
        "the guest job failed:\n{log}"
    );
    let map = feature_map(&imgs[2]);
    assert_eq!(
        map & 0x10,
        0x10,
        "no replacement part way ({map:#x}):\n{log}"
    );
    let d = raidd(&args_with(&["detail", "--json"], &imgs)).ok().json();
    let a = &d["array"];
    assert_eq!(a["state"], "clean", "{a}");
    assert_eq!(
        a["slots"][1]["member"],
        imgs[1].display().to_string(),
        "{a}"
    );
    let unused = &a["not_used"][0];
    assert_eq!(unused["reason"], "replacement", "{a}");
    assert_eq!(unused["member"], imgs[2].display().to_string(), "{a}");
    let seed = seed.to_string();
    let r = raidd(&args_with(&["pattern", "verify", "--seed", &seed], &imgs));
    assert_eq!(r.code, 0, "{}{}", r.text(), r.stderr);
    // Without the member it was replacing, the replacement takes the slot and is rebuilt.
    let two = [imgs[0].clone(), imgs[2].clone()];
    let d = raidd(&args_with(&["detail", "--json"], &two)).ok().json();
    assert_eq!(d["array"]["slots"][1]["state"], "recovering", "{d}");
    let daemon = Daemon::start(dir.path(), &array_config("r1", &two));
    let ctl = daemon.control.display().to_string();
    let a = wait_for(&ctl, "r1", |a| {
        a["slots"][1]["state"] == "insync" && a["sync"].is_null()
    });
    assert_eq!(a["last_sync"]["kind"], "recovery", "{a}");
    daemon.stop();
    let map = feature_map(&imgs[2]);
    assert_eq!(map & 0x12, 0, "replacement flags left: {map:#x}");
    let r = raidd(&args_with(
        &["pattern", "verify", "--seed", &seed],
        &imgs[2..],
    ));
    assert_eq!(r.code, 0, "the replacement alone: {}{}", r.text(), r.stderr);
}

/// Polls `raidd status --json` until configured array `name`'s status satisfies `done`.
fn wait_for(ctl: &str, name: &str, done: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let start = std::time::Instant::now();
    loop {
        let st = raidd(&["status", "--json", "--control", ctl]).ok().json();
        let a = st["arrays"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["name"] == name)
            .unwrap()["status"]
            .clone();
        if done(&a) {
            return a;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "{name}: {a}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Seed 003's pool both ways: a RAID0 over two RAID5 groups made by `raidd create --group`
/// and filled with the pattern is assembled by kernel md (the groups, then the pool over
/// /dev/md0 and /dev/md1), read back sector by sector and its groups scrubbed; and a pool
/// mdadm makes the same way in the guest, filled there, is assembled and verified by raidd
/// from its six leaf images.
#[test]
#[ignore = "needs the qemu guest: scripts/test.sh runs it"]
fn pools_move_both_ways_between_raidd_and_the_kernel() {
    let dir = scratch();
    let (ours, share) = common::guest::blank_images(dir.path(), "ours", 6, MEMBER_BYTES);
    let theirs = common::guest::images(dir.path(), "theirs", 6, MEMBER_BYTES);
    let group = |imgs: &[PathBuf]| {
        let list: Vec<String> = imgs.iter().map(|p| p.display().to_string()).collect();
        format!("raid5:{}", list.join(","))
    };
    raidd(&[
        "create",
        "--level",
        "raid0",
        "--name",
        "rpool",
        "--chunk",
        "64K",
        "--group-chunk",
        "64K",
        "--group",
        &group(&ours[..3]),
        "--group",
        &group(&ours[3..]),
    ])
    .ok();
    let (s_ours, s_theirs) = (seed_of(70), seed_of(71));
    raidd(&args_with(
        &["pattern", "write", "--seed", &s_ours.to_string()],
        &ours,
    ))
    .ok();
    let mut disks = ours.clone();
    disks.extend(theirs.iter().cloned());
    let v: Vec<String> = (0..12).map(vd).collect();
    let job = format!(
        "set -u\nfail=0\n\
         mdadm --assemble /dev/md0 --run {a} || fail=1\n\
         mdadm --assemble /dev/md1 --run {b} || fail=1\n\
         mdadm --assemble /dev/md2 --run /dev/md0 /dev/md1 || fail=1\n\
         cat /proc/mdstat\n\
         ./raidd pattern verify --raw /dev/md2 --seed {s_ours} || {{ echo 'BAD raidd pool'; fail=1; }}\n\
         for g in 0 1; do echo check > /sys/block/md$g/md/sync_action; mdadm --wait /dev/md$g; \
         echo \"MISMATCH md$g $(cat /sys/block/md$g/md/mismatch_cnt)\"; done\n\
         mdadm --stop /dev/md2 || fail=1\n\
         mdadm --stop /dev/md1 /dev/md0 || fail=1\n\
         mdadm --create /dev/md10 --run --metadata=1.2 --level=raid5 --raid-devices=3 --chunk=64 --assume-clean {c} || fail=1\n\
         mdadm --create /dev/md11 --run --metadata=1.2 --level=raid5 --raid-devices=3 --chunk=64 --assume-clean {d} || fail=1\n\
         mdadm --create /dev/md12 --run --metadata=1.2 --level=raid0 --raid-devices=2 --chunk=64 /dev/md10 /dev/md11 || fail=1\n\
         ./raidd pattern write --raw /dev/md12 --seed {s_theirs} || fail=1\n\
         mdadm --stop /dev/md12 || fail=1\n\
         mdadm --stop /dev/md11 /dev/md10 || fail=1\n\
         exit $fail\n",
        a = v[..3].join(" "),
        b = v[3..6].join(" "),
        c = v[6..9].join(" "),
        d = v[9..].join(" "),
    );
    let (ok, log) = boot(&share, &job, &disks, None);
    assert!(ok, "the guest job failed:\n{log}");
    let mismatches: Vec<&str> = log.lines().filter(|l| l.starts_with("MISMATCH ")).collect();
    assert_eq!(mismatches.len(), 2, "{log}");
    assert!(mismatches.iter().all(|l| l.ends_with(" 0")), "{log}");
    // The kernel's pool, from its leaves in any order.
    let mut leaves = theirs.clone();
    leaves.reverse();
    let r = raidd(&args_with(
        &["pattern", "verify", "--seed", &s_theirs.to_string()],
        &leaves,
    ));
    assert_eq!(
        r.code,
        0,
        "raidd read the kernel's pool wrong: {}{}",
        r.text(),
        r.stderr
    );
    let d = raidd(&args_with(&["detail", "--json"], &leaves))
        .ok()
        .json();
    assert_eq!(d["array"]["level"], "raid0", "{d}");
    for k in 0..2 {
        assert_eq!(d["array"]["slots"][k]["array"]["level"], "raid5", "{d}");
    }
}

/// Volumes move both ways: the partitions raidd makes on an array are the kernel's
/// /dev/md0p1 and p2 with raidd's pattern in them; partitions sgdisk and parted make on a
/// kernel array (/dev/md1) are volumes raidd lists and serves, by name, by number and as an
/// iSCSI LUN, each with the guest's pattern.
#[test]
#[ignore = "needs the qemu guest: scripts/test.sh runs it"]
fn volumes_move_both_ways_between_raidd_and_the_kernel() {
    let dir = scratch();
    let (ours, share) = common::guest::blank_images(dir.path(), "ours", 4, MEMBER_BYTES);
    let theirs = common::guest::images(dir.path(), "theirs", 4, MEMBER_BYTES);
    raidd(&args_with(
        &[
            "create", "--level", "raid5", "--name", "vols", "--chunk", "64K",
        ],
        &ours,
    ))
    .ok();
    let (s_alpha, s_beta) = (seed_of(80), seed_of(81));
    for (name, size, seed) in [("alpha", "8M", s_alpha), ("beta", "12M", s_beta)] {
        raidd(&args_with(
            &["volume", "create", "--name", name, "--size", size],
            &ours,
        ))
        .ok();
        raidd(&args_with(
            &[
                "pattern",
                "write",
                "--volume",
                name,
                "--seed",
                &seed.to_string(),
            ],
            &ours,
        ))
        .ok();
    }
    let seeds: Vec<u64> = (82..85).map(seed_of).collect();
    let mut disks = ours.clone();
    disks.extend(theirs.iter().cloned());
    let v: Vec<String> = (0..8).map(vd).collect();
    let job = format!(
        "set -u\nfail=0\n\
         mdadm --assemble /dev/md0 --run {a} || fail=1\n\
         for p in 1 2; do [ -b /dev/md0p$p ] || {{ echo \"NO /dev/md0p$p\"; fail=1; }}; done\n\
         echo \"SIZES $(blockdev --getsize64 /dev/md0p1) $(blockdev --getsize64 /dev/md0p2)\"\n\
         sgdisk -v /dev/md0 | grep -q 'No problems found' || {{ sgdisk -v /dev/md0; fail=1; }}\n\
         sgdisk -i 2 /dev/md0 | grep -q \"Partition name: 'beta'\" || fail=1\n\
         ./raidd pattern verify --raw /dev/md0p1 --seed {s_alpha} || {{ echo 'BAD md0p1'; fail=1; }}\n\
         ./raidd pattern verify --raw /dev/md0p2 --seed {s_beta} || {{ echo 'BAD md0p2'; fail=1; }}\n\
         mdadm --stop /dev/md0 || fail=1\n\
         mdadm --create /dev/md1 --run --metadata=1.2 --level=raid5 --raid-devices=4 --chunk=64 --assume-clean {b} || fail=1\n\
         sgdisk -n 1:2048:+8M -c 1:first -n 2:0:+12M -c 2:second /dev/md1 || fail=1\n\
         parted -s /dev/md1 mkpart third 21MiB 29MiB || fail=1\n\
         sgdisk -p /dev/md1\n\
         ./raidd pattern write --raw /dev/md1p1 --seed {s1} || fail=1\n\
         ./raidd pattern write --raw /dev/md1p2 --seed {s2} || fail=1\n\
         ./raidd pattern write --raw /dev/md1p3 --seed {s3} || fail=1\n\
         mdadm --stop /dev/md1 || fail=1\n\
         exit $fail\n",
        a = v[..4].join(" "),
        b = v[4..].join(" "),
        s1 = seeds[0],
        s2 = seeds[1],
        s3 = seeds[2],
    );
    let (ok, log) = boot(&share, &job, &disks, None);
    assert!(ok, "the guest job failed:\n{log}");
    assert!(log.contains("SIZES 8388608 12582912"), "{log}");
    // The kernel's partitions are raidd's volumes, listed and served.
    let l = raidd(&args_with(&["volume", "list", "--json"], &theirs))
        .ok()
        .json();
    let names: Vec<&str> = l["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["first", "second", "third"], "{l}");
    assert_eq!(l["volumes"][2]["offset_bytes"], 21 << 20, "{l}");
    let iqn = "iqn.2026-11.org.raidd:kernel-volumes";
    let cfg = format!(
        "{}[[export]]\nname = \"one\"\narray = \"k\"\nvolume = \"first\"\n\
         [[export]]\nname = \"two\"\narray = \"k\"\nvolume = 2\n\
         [iscsi]\nlisten = \"127.0.0.1:0\"\nstate_dir = \"state\"\n\
         [[target]]\nname = \"{iqn}\"\n[[target.lun]]\narray = \"k\"\nvolume = \"third\"\n",
        common::daemon::array_config("k", &theirs)
    );
    let d = common::daemon::Daemon::start(dir.path(), &cfg);
    let got = |name: &str| dir.path().join(format!("{name}.bin"));
    for e in ["one", "two"] {
        common::daemon::must(
            common::daemon::tool("nbdcopy").args([&d.uri(e), got(e).to_str().unwrap()]),
        );
    }
    common::daemon::must(common::daemon::tool("qemu-img").args([
        "convert",
        "-f",
        "raw",
        "-O",
        "raw",
        &d.iscsi_url("", iqn, 0),
        got("three").to_str().unwrap(),
    ]));
    d.stop();
    for (name, seed, len) in [
        ("one", seeds[0], 8 << 20),
        ("two", seeds[1], 12 << 20),
        ("three", seeds[2], 8 << 20),
    ] {
        let p = got(name);
        assert_eq!(std::fs::metadata(&p).unwrap().len(), len, "{name}");
        common::sectors::verify_file(
            &p,
            1,
            seed,
            &format!("the guest's partition as raidd's {name}"),
        );
    }
}

/// A member's superblock state as `raidd examine` reads it ("clean" or "active").
fn sb_state(member: &Path) -> String {
    let ex = raidd(&args_with(&["examine", "--json"], &[member.to_path_buf()]))
        .ok()
        .json();
    ex["members"][0]["superblock"]["state"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Kills `raidd pattern write --generation 2` over `members` part way, until the kill
/// leaves the array dirty (a write in flight when it came); at most a few tries.
fn kill_while_writing(members: &[PathBuf], seed: u64) {
    kill_while_writing_until(members, seed, &[], || sb_state(&members[0]) == "active");
}

/// Kills `raidd pattern write --generation 2` over `members` part way, until `left()` says
/// the kill left what the test needs; at most a few tries.
fn kill_while_writing_until(
    members: &[PathBuf],
    seed: u64,
    extra: &[&str],
    left: impl Fn() -> bool,
) {
    let seed = seed.to_string();
    let mut args = vec!["pattern", "write", "--seed", &seed, "--generation", "2"];
    args.extend(extra);
    for attempt in 0..8u64 {
        let mut w = Command::new(env!("CARGO_BIN_EXE_raidd"))
            .args(args_with(&args, members))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(150 + 60 * attempt));
        let _ = w.kill();
        let _ = w.wait();
        if left() {
            return;
        }
    }
    panic!("no kill left what the test needs");
}

/// md's partial parity log left dirty, both ways, on a degraded RAID5. raidd is killed
/// while writing with one member away; the kernel starts the three dirty (recovering from
/// raidd's log), every sector reads back whole and its own (old or new generation) though a
/// quarter of them come from parity; the fourth member is added back and the kernel's
/// check finds nothing. Then the kernel is killed (sysrq b) while writing its own degraded
/// RAID5 with a log; raidd recovers from the kernel's log, the same holds, and after raidd
/// rebuilds the member its check finds nothing.
#[test]
#[ignore = "needs the qemu guest: scripts/test.sh runs it"]
fn dirty_partial_parity_logs_move_both_ways() {
    use common::daemon::{array_config, Daemon};
    let dir = scratch();
    let (imgs, share) = common::guest::blank_images(dir.path(), "dirty", 8, MEMBER_BYTES);
    let (a, b) = imgs.split_at(4);
    let (sa, sb) = (seed_of(91), seed_of(92));
    let create = [
        "create",
        "--level",
        "raid5",
        "--chunk",
        "64K",
        "--consistency-policy",
        "ppl",
        "--assume-clean",
        "--name",
        "dirty",
    ];
    raidd(&args_with(&create, a)).ok();
    raidd(&args_with(
        &["pattern", "write", "--seed", &sa.to_string()],
        a,
    ))
    .ok();
    kill_while_writing(&a[..3], sa);
    let job = format!(
        r#"set -u
mdadm --assemble /dev/md0 --run /dev/vdb /dev/vdc /dev/vdd || exit 2
grep -qx ppl /sys/block/md0/md/consistency_policy || exit 3
cat /proc/mdstat
./raidd pattern verify --raw /dev/md0 --seed {sa} --generation 2 --since 1 || exit 4
mdadm --zero-superblock /dev/vde || exit 5
mdadm /dev/md0 --add /dev/vde || exit 5
mdadm --wait /dev/md0
echo check > /sys/block/md0/md/sync_action; mdadm --wait /dev/md0
echo "MISMATCH-A $(cat /sys/block/md0/md/mismatch_cnt)"
./raidd pattern verify --raw /dev/md0 --seed {sa} --generation 2 --since 1 || exit 6
mdadm --stop /dev/md0 || exit 7
mdadm --create /dev/md1 --run --metadata=1.2 --level=5 --raid-devices=4 --chunk=64 \
    --consistency-policy=ppl --assume-clean /dev/vdf /dev/vdg /dev/vdh /dev/vdi || exit 8
./raidd pattern write --raw /dev/md1 --seed {sb} || exit 9
mdadm /dev/md1 --fail /dev/vdi || exit 10
echo 30 > /sys/block/md1/md/safe_mode_delay
(while :; do ./raidd pattern write --raw /dev/md1 --seed {sb} --generation 2; done) &
sleep 3
n=0
until grep -qx active /sys/block/md1/md/array_state; do
  n=$((n + 1)); [ $n -lt 1200 ] || exit 11
  sleep 0.05
done
echo DIRTY-OK
echo 0 > job.status
echo b > /proc/sysrq-trigger
"#
    );
    let (ok, log) = boot(&share, &job, &imgs, None);
    assert!(
        ok && log.contains("DIRTY-OK"),
        "the guest job failed:\n{log}"
    );
    assert!(
        log.contains("MISMATCH-A 0\n"),
        "kernel check after raidd's log:\n{log}"
    );
    assert_eq!(sb_state(&b[0]), "active", "the kernel left the array dirty");
    // raidd starts the kernel's dirty degraded array from its log, serves it, rebuilds the
    // failed member, and its check finds nothing.
    let daemon = Daemon::start(dir.path(), &array_config("k", b));
    let ctl = daemon.control.display().to_string();
    let st = wait_for(&ctl, "k", |_| true);
    assert_eq!(st["consistency_policy"], "ppl", "{st}");
    let r = &st["ppl_recovered"];
    assert!(
        r["entries"].as_u64().unwrap_or(0) > 0,
        "{st}\n{}",
        daemon.log()
    );
    assert_eq!(r["not_applied"], 0, "{st}");
    assert_eq!(st["state"], "degraded", "{st}");
    let seed = sb.to_string();
    let verify = ["pattern", "verify", "--seed", &seed, "--generation", "2"];
    let verify: Vec<&str> = verify.into_iter().chain(["--since", "1"]).collect();
    daemon.stop();
    raidd(&args_with(&verify, b)).ok();
    let daemon = Daemon::start(dir.path(), &array_config("k", b));
    let ctl = daemon.control.display().to_string();
    let member = b[3].display().to_string();
    let _ = raidd(&["remove", "k", &member, "--control", &ctl]);
    raidd(&["add", "k", &member, "--wait", "--control", &ctl]).ok();
    raidd(&["check", "k", "--wait", "--control", &ctl]).ok();
    daemon.stop();
    raidd(&args_with(&verify, b)).ok();
}

/// The units of the journal member `path` holds from its superblock's tail, as md's
/// recovery reads them, with their pages; and why the log ends.
fn journal_log(
    path: &Path,
) -> (
    Vec<raidd_md::journal::scan::Unit>,
    raidd_md::journal::scan::End,
) {
    use raidd_md::journal::{scan, uuid_checksum, BLOCK, BLOCK_SECTORS};
    use std::os::unix::fs::FileExt;
    let journal = std::fs::File::open(path).unwrap();
    let mut sb = vec![0u8; 4096];
    journal.read_exact_at(&mut sb, 4096).unwrap();
    let sb = raidd_md::Superblock::parse(&sb, 8).unwrap();
    assert_eq!(
        sb.feature_map & raidd_md::feature::JOURNAL,
        raidd_md::feature::JOURNAL
    );
    assert_eq!(
        sb.dev_roles[sb.dev_number as usize],
        raidd_md::DevRole::Journal.to_raw()
    );
    let ring = sb.data_size / BLOCK_SECTORS * BLOCK_SECTORS;
    let read = |position: u64| {
        let mut b = vec![0u8; BLOCK];
        journal
            .read_exact_at(&mut b, (sb.data_offset + position) * 512)
            .unwrap();
        b
    };
    scan::scan(ring, sb.recovery_offset, uuid_checksum(&sb.set_uuid), read)
}

/// md's write journal left with writes in flight, both ways, in one boot. raidd is killed
/// while writing a degraded RAID6 with a journal; the kernel starts it degraded from
/// raidd's log (md's journal recovery says how many stripes it replayed), every sector
/// reads back whole and its own, and once the missing member is back the kernel's check
/// finds parity right. Then the kernel is reset (sysrq b) while writing its own RAID5 with
/// a journal: on the host raidd-md reads the kernel's log from the superblock's
/// `journal_tail` as md's recovery would (whole units in sequence, every page matching its
/// checksum, the kernel's crc32c_le seeded with the UUID's, every data page holding the
/// pattern of the array sectors its payload names), and raidd starts the array from it,
/// replaying it, and every sector reads back. Both arrays stay clean in their superblocks,
/// as md keeps an array with a journal. The same again in write-back mode, each side's
/// cache holding pages its members never got: raidd's degraded RAID5 (the kernel reports
/// the data-only stripes it recovers) and the kernel's RAID5 (raidd writes the data pages
/// through the array).
#[test]
#[ignore = "needs the qemu guest: scripts/test.sh runs it"]
fn write_journals_move_both_ways() {
    use common::daemon::{array_config, Daemon};
    use raidd_md::journal::Payload;
    let dir = scratch();
    let (all, share) = common::guest::blank_images(dir.path(), "journal", 19, MEMBER_BYTES);
    // raidd's RAID6 (vdb-vdf, journal vdg), the kernel's RAID5 (vdh-vdk, journal vdl), and
    // in write-back mode raidd's RAID5 (vdm-vdo, journal vdp) and the kernel's (vdq-vds,
    // journal vdt).
    let (ours, rest) = all.split_at(6);
    let (imgs, rest) = rest.split_at(5);
    let (ours_wb, theirs_wb) = rest.split_at(4);
    let (sa, seed) = (seed_of(94), seed_of(93));
    let (sw, seed_wb) = (seed_of(95), seed_of(96));
    let journal = ours[5].display().to_string();
    let create = [
        "create",
        "--level",
        "raid6",
        "--chunk",
        "64K",
        "--assume-clean",
        "--name",
        "wj",
        "--write-journal",
        &journal,
    ];
    raidd(&args_with(&create, &ours[..5])).ok();
    raidd(&args_with(
        &["pattern", "write", "--seed", &sa.to_string()],
        ours,
    ))
    .ok();
    // Degraded: slot 4 (vdf) stays away from here on.
    let degraded: Vec<PathBuf> = ours[..4].iter().chain(&ours[5..]).cloned().collect();
    // md keeps an array with a journal clean: what the kill leaves is in the log.
    kill_while_writing_until(&degraded, sa, &[], || {
        journal_log(&ours[5])
            .0
            .iter()
            .any(|(m, _)| !m.payloads.is_empty())
    });
    assert_eq!(
        sb_state(&ours[0]),
        "clean",
        "md keeps a journal array clean"
    );
    // raidd's RAID5 in write-back mode, killed with one member away while its cache holds
    // pages the members never got: the log holds units of data alone.
    let journal_wb = ours_wb[3].display().to_string();
    let mut create_wb = create.to_vec();
    create_wb[2] = "raid5";
    create_wb[7] = "wb";
    create_wb[9] = &journal_wb;
    raidd(&args_with(&create_wb, &ours_wb[..3])).ok();
    raidd(&args_with(
        &["pattern", "write", "--seed", &sw.to_string()],
        ours_wb,
    ))
    .ok();
    let degraded_wb: Vec<PathBuf> = [&ours_wb[0], &ours_wb[1], &ours_wb[3]]
        .into_iter()
        .cloned()
        .collect();
    kill_while_writing_until(&degraded_wb, sw, &["--journal-mode", "write-back"], || {
        journal_log(&ours_wb[3]).0.iter().any(|(m, _)| {
            let data = m.payloads.iter().any(|p| matches!(p, Payload::Data { .. }));
            let parity = m
                .payloads
                .iter()
                .any(|p| matches!(p, Payload::Parity { .. }));
            data && !parity
        })
    });
    let job = format!(
        r#"set -u
mdadm --assemble /dev/md0 --run /dev/vdb /dev/vdc /dev/vdd /dev/vde /dev/vdg || exit 2
cat /proc/mdstat
grep -qx journal /sys/block/md0/md/consistency_policy || exit 3
dmesg | grep -E 'md/raid:md0: (recovering|starting from clean)' | sed 's/^[^]]*] /KERNEL /'
./raidd pattern verify --raw /dev/md0 --seed {sa} --generation 2 --since 1 || exit 4
mdadm --zero-superblock /dev/vdf || exit 5
mdadm /dev/md0 --add /dev/vdf || exit 5
mdadm --wait /dev/md0
echo check > /sys/block/md0/md/sync_action; mdadm --wait /dev/md0
echo "MISMATCH-J $(cat /sys/block/md0/md/mismatch_cnt)"
./raidd pattern verify --raw /dev/md0 --seed {sa} --generation 2 --since 1 || exit 4
mdadm --stop /dev/md0 || exit 5
mdadm --assemble /dev/md2 --run /dev/vdm /dev/vdn /dev/vdp || exit 12
dmesg | grep -E 'md/raid:md2: (recovering|starting from clean)' | sed 's/^[^]]*] /KERNEL /'
./raidd pattern verify --raw /dev/md2 --seed {sw} --generation 2 --since 1 || exit 13
mdadm --stop /dev/md2 || exit 14
mdadm --create /dev/md3 --run --metadata=1.2 --level=5 --raid-devices=3 --chunk=64 \
    --assume-clean --write-journal /dev/vdt /dev/vdq /dev/vdr /dev/vds || exit 15
echo write-back > /sys/block/md3/md/journal_mode || exit 16
echo "MODE3 $(cat /sys/block/md3/md/journal_mode)"
./raidd pattern write --raw /dev/md3 --seed {seed_wb} || exit 17
(while [ ! -e stop3 ]; do
  ./raidd pattern write --raw /dev/md3 --seed {seed_wb} --generation 2 & echo $! > wb.pid; wait $!
done) &
wb=$!
mdadm --create /dev/md1 --run --metadata=1.2 --level=5 --raid-devices=4 --chunk=64 \
    --assume-clean --write-journal /dev/vdl /dev/vdh /dev/vdi /dev/vdj /dev/vdk || exit 6
echo "MODE $(cat /sys/block/md1/md/journal_mode)"
./raidd pattern write --raw /dev/md1 --seed {seed} || exit 7
echo 30 > /sys/block/md1/md/safe_mode_delay
(while :; do ./raidd pattern write --raw /dev/md1 --seed {seed} --generation 2; done) &
sleep 3
n=0
until grep -qx active /sys/block/md1/md/array_state; do
  n=$((n + 1)); [ $n -lt 1200 ] || exit 8
  sleep 0.05
done
# Whole stripes leave md's write-back cache within seconds; partial ones stay in its log
# alone until it needs room, so the crash surely leaves data md acknowledged from the log.
touch stop3; kill $(cat wb.pid) 2>/dev/null; wait $wb
for k in 1 5 9 13; do
  ./raidd pattern write --raw /dev/md3 --seed {seed_wb} --generation 2 --offset "$k"00K \
    --length 4K || exit 18
done
echo JOURNAL-OK
echo 0 > job.status
echo b > /proc/sysrq-trigger
"#
    );
    let (ok, log) = boot(&share, &job, &all, None);
    assert!(
        ok && log.contains("JOURNAL-OK"),
        "the guest job failed:\n{log}"
    );
    assert!(
        log.contains("MISMATCH-J 0\n"),
        "kernel check after raidd's journal:\n{log}"
    );
    // md's journal recovery says what it replayed from raidd's log.
    let replayed: u64 = log
        .lines()
        .find_map(|l| l.strip_prefix("KERNEL md/raid:md0: recovering "))
        .and_then(|l| l.split(" data-parity").next())
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(replayed > 0, "the kernel replayed raidd's log:\n{log}");
    // And raidd's write-back log: pages logged alone, which md calls data-only stripes.
    let data_only: u64 = log
        .lines()
        .find_map(|l| l.strip_prefix("KERNEL md/raid:md2: recovering "))
        .and_then(|l| l.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(
        data_only > 0,
        "the kernel replayed raidd's write-back log:\n{log}"
    );
    assert!(
        log.contains("MODE3 write-through [write-back]"),
        "the kernel's array in write-back:\n{log}"
    );
    assert_eq!(
        sb_state(&imgs[0]),
        "clean",
        "md keeps a journal array clean"
    );
    let (units, end) = journal_log(&imgs[4]);
    let data: Vec<(u64, &Vec<u8>)> = units
        .iter()
        .flat_map(|(m, pages)| {
            let mut pages = pages.iter();
            m.payloads
                .iter()
                .filter_map(move |p| match p {
                    Payload::Data { location, .. } => pages.next().map(|pg| (*location, pg)),
                    Payload::Parity { checksums, .. } => {
                        for _ in checksums {
                            pages.next();
                        }
                        None
                    }
                    Payload::Flush { .. } => None,
                })
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        !data.is_empty(),
        "no data in the kernel's journal: {end:?}\n{log}"
    );
    for (location, page) in &data {
        for (k, sector) in page.chunks(512).enumerate() {
            let at = location + k as u64;
            let wrong = [1, 2]
                .iter()
                .all(|&g| raidd_engine::pattern::check_sector(sector, at, g, seed).is_some());
            assert!(
                !wrong,
                "journal page for array sector {location}: sector {at} is not its own"
            );
        }
    }
    eprintln!(
        "{} units, {} data pages, then {end:?}",
        units.len(),
        data.len()
    ); // raidd starts the kernel's array from its log (serving, so that it may write), and
       // every sector reads back.
    let daemon = Daemon::start(dir.path(), &array_config("k", imgs));
    let ctl = daemon.control.display().to_string();
    let st = wait_for(&ctl, "k", |_| true);
    assert_eq!(st["consistency_policy"], "journal", "{st}");
    let r = &st["journal"]["recovered"];
    assert!(
        r["rows"].as_u64().unwrap_or(0) > 0 && r["skipped"] == 0,
        "{st}\n{}",
        daemon.log()
    );
    daemon.stop();
    let seed = seed.to_string();
    let verify = ["pattern", "verify", "--seed", &seed, "--generation", "2"];
    let verify: Vec<&str> = verify.into_iter().chain(["--since", "1"]).collect();
    raidd(&args_with(&verify, imgs)).ok();
    // The kernel's write-back log: data md acknowledged from its cache is in the log alone,
    // and raidd's start writes it through the array.
    let daemon = Daemon::start(dir.path(), &array_config("k3", theirs_wb));
    let ctl = daemon.control.display().to_string();
    let st = wait_for(&ctl, "k3", |_| true);
    let r = &st["journal"]["recovered"];
    assert!(
        r["data_pages"].as_u64().unwrap_or(0) > 0 && r["skipped"] == 0,
        "{st}\n{}\nthe kernel's write-back log: {:?}",
        daemon.log(),
        {
            let (units, end) = journal_log(&theirs_wb[3]);
            let payloads: Vec<usize> = units.iter().map(|(m, _)| m.payloads.len()).collect();
            (payloads, end)
        }
    );
    daemon.stop();
    let seed_wb = seed_wb.to_string();
    let verify = ["pattern", "verify", "--seed", &seed_wb, "--generation", "2"];
    let verify: Vec<&str> = verify.into_iter().chain(["--since", "1"]).collect();
    raidd(&args_with(&verify, theirs_wb)).ok();
}
