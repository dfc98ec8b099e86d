//! O_DIRECT files for the tests of the ring's file I/O (each test binary uses a subset).
#![allow(dead_code, clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test

use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use raidd_rt::fs::File;

/// A fresh directory on a filesystem with O_DIRECT (not tmpfs), gone with the guard.
pub fn dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("raidd-rt-direct-")
        .tempdir_in("/var/tmp")
        .unwrap()
}

/// `path` opened with O_DIRECT, read-only or read-write (created if missing).
pub fn open(path: &Path, write: bool) -> File {
    let mut o = std::fs::OpenOptions::new();
    o.read(true).custom_flags(libc::O_DIRECT);
    if write {
        o.write(true).create(true).truncate(false);
    }
    File::from(o.open(path).unwrap())
}

/// A new, empty O_DIRECT file in a fresh directory.
pub fn file() -> (tempfile::TempDir, File) {
    let d = dir();
    let f = open(&d.path().join("f"), true);
    (d, f)
}
