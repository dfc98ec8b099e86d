//! The qemu guests of scripts/vm.sh for tests that need a real kernel: booted with disks
//! and a job script in a shared directory, with the raidd binary beside it.
#![allow(clippy::unwrap_used, dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// A guest's directory, named by `var` (RAIDD_VM, RAIDD_VM_UBLK), built by `recipe` (the
/// vm.sh command that builds it).
pub fn vm_dir(var: &str, recipe: &str) -> PathBuf {
    let dir = std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| {
        panic!("{var} is not set: run these tests through scripts/test.sh (or scripts/vm.sh {recipe} and {var}=DIR)")
    });
    assert!(
        dir.join("root.img").exists(),
        "no guest in {}: run scripts/vm.sh {recipe} {}",
        dir.display(),
        dir.display()
    );
    dir
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .to_path_buf()
}

/// Boots the guest in `vm` with `disks` and `job` (a shell script body) in `share`; returns
/// whether the job succeeded, and its log. The raidd binary is in the share as ./raidd.
pub fn boot(
    vm: &Path,
    share: &Path,
    job: &str,
    disks: &[PathBuf],
    netns: Option<&str>,
) -> (bool, String) {
    place_binary(&share.join("raidd"));
    let script = share.join("job.sh");
    std::fs::write(&script, format!("#!/bin/sh\nmodprobe md_mod\n{job}")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut cmd = Command::new(repo_root().join("scripts/vm.sh"));
    cmd.arg("run").arg(vm).arg(share);
    if let Some(ns) = netns {
        cmd.args(["-n", ns]);
    }
    cmd.args(["-t", "900"]).args(disks);
    let status = cmd.status().unwrap();
    let log = std::fs::read_to_string(share.join("job.log")).unwrap_or_default();
    (status.success(), log)
}

/// Puts the raidd binary at `to`: a hard link where the share is on the build's file system
/// (several guests at a time would otherwise each hold a copy of a large debug binary), a
/// copy where it is not.
fn place_binary(to: &Path) {
    let bin = Path::new(env!("CARGO_BIN_EXE_raidd"));
    let _ = std::fs::remove_file(to);
    if std::fs::hard_link(bin, to).is_err() {
        std::fs::copy(bin, to).unwrap();
    }
}

/// `n` empty member images of `bytes` named after `prefix` in `dir`, and an empty share for
/// the guest.
pub fn blank_images(dir: &Path, prefix: &str, n: usize, bytes: u64) -> (Vec<PathBuf>, PathBuf) {
    let imgs = images(dir, prefix, n, bytes);
    let share = dir.join("share");
    std::fs::create_dir(&share).unwrap();
    (imgs, share)
}

/// `n` empty member images of `bytes` named after `prefix` in `dir`.
pub fn images(dir: &Path, prefix: &str, n: usize, bytes: u64) -> Vec<PathBuf> {
    (0..n)
        .map(|k| {
            let p = dir.join(format!("{prefix}-{k}.img"));
            std::fs::File::create(&p).unwrap().set_len(bytes).unwrap();
            p
        })
        .collect()
}
