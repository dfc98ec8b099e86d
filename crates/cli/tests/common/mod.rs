//! Helpers for the CLI tests: run the built `raidd` binary, make image files in a tempdir
//! under /var/tmp (a real filesystem: O_DIRECT works there, unlike tmpfs).
#![allow(clippy::unwrap_used, dead_code)] // test helpers: a failed unwrap is a failed test

pub mod daemon;
pub mod fuse;
pub mod guest;
pub mod iscsi_raw;
pub mod nbd_raw;
pub mod sectors;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

pub const MIB: u64 = 1 << 20;

/// The result of one `raidd` run.
pub struct Run {
    pub code: i32,
    pub stdout: Vec<u8>,
    pub stderr: String,
    pub args: Vec<String>,
}

impl std::fmt::Debug for Run {
    // stdout as text, so a failed assertion shows what raidd printed, not a byte list.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Run")
            .field("args", &self.args)
            .field("code", &self.code)
            .field("stdout", &self.text())
            .field("stderr", &self.stderr)
            .finish()
    }
}

impl Run {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "raidd {:?}: stdout is not JSON ({e}):\n{}\nstderr:\n{}",
                self.args,
                self.text(),
                self.stderr
            )
        })
    }

    /// Asserts the exit code; returns self for more checks.
    pub fn expect(self, code: i32) -> Run {
        assert_eq!(
            self.code,
            code,
            "raidd {:?}: exit code\nstdout:\n{}\nstderr:\n{}",
            self.args,
            self.text(),
            self.stderr
        );
        if code != 0 {
            // Errors are one clear line on stderr, prefixed "raidd: ".
            let last = self.stderr.lines().last().unwrap_or("");
            assert!(
                last.starts_with("raidd: "),
                "raidd {:?}: no error line on stderr:\n{}",
                self.args,
                self.stderr
            );
            assert!(!self.stderr.contains("panicked"), "{}", self.stderr);
        }
        self
    }

    pub fn ok(self) -> Run {
        self.expect(0)
    }

    /// The error line (without the "raidd: " prefix).
    pub fn error(&self) -> String {
        let last = self.stderr.lines().last().unwrap_or("");
        last.strip_prefix("raidd: ").unwrap_or(last).to_string()
    }
}

fn finish(args: &[String], out: Output) -> Run {
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: out.stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        args: args.to_vec(),
    }
}

fn command(args: &[String]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_raidd"));
    c.args(args).env_remove("RUST_LOG").env("TZ", "UTC");
    c
}

fn strings<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Vec<String> {
    args.iter()
        .map(|a| a.as_ref().to_string_lossy().into_owned())
        .collect()
}

/// Runs `raidd ARGS...` with no stdin.
pub fn raidd<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Run {
    let args = strings(args);
    let out = command(&args).stdin(Stdio::null()).output().unwrap();
    finish(&args, out)
}

/// Runs `raidd ARGS...` with `input` on stdin.
pub fn raidd_stdin<S: AsRef<std::ffi::OsStr>>(args: &[S], input: &[u8]) -> Run {
    let args = strings(args);
    let mut child = command(&args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // A refusal may close stdin early; that is not the test's failure.
    let _ = stdin.write_all(input);
    drop(stdin);
    finish(&args, child.wait_with_output().unwrap())
}

/// A scratch directory under /var/tmp.
pub fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("raidd-cli-")
        .tempdir_in("/var/tmp")
        .unwrap()
}

/// Paths `dir/prefixN.img` for N in 0..n.
pub fn images(dir: &Path, prefix: &str, n: usize) -> Vec<PathBuf> {
    (0..n)
        .map(|i| dir.join(format!("{prefix}{i}.img")))
        .collect()
}

/// Arguments: fixed ones, then paths.
pub fn args_with(fixed: &[&str], paths: &[PathBuf]) -> Vec<String> {
    fixed
        .iter()
        .map(|s| s.to_string())
        .chain(paths.iter().map(|p| p.display().to_string()))
        .collect()
}

/// Deterministic bytes.
pub fn bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}
