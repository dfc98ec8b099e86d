//! A `raidd serve` process for tests: started with a config in a scratch directory, ready
//! once it prints its address, stopped by SIGTERM to its PID (and killed if a test fails
//! before that). Its stderr is collected for assertions on log lines.
#![allow(clippy::unwrap_used, dead_code)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct Daemon {
    child: Option<Child>,
    pub addr: SocketAddr,
    /// Where the iSCSI target listens, when the config turned it on.
    pub iscsi: Option<SocketAddr>,
    /// Where the HTTP listener (metrics, API, dashboard) is, when the config turned it on.
    pub http: Option<SocketAddr>,
    pub control: PathBuf,
    log: Arc<Mutex<String>>,
}

impl Daemon {
    /// Writes `config` (TOML; `listen` and `control_socket` are added) to `dir/raidd.toml`
    /// and starts the daemon on an ephemeral loopback port.
    pub fn start(dir: &Path, config: &str) -> Daemon {
        Daemon::try_start(dir, config)
            .unwrap_or_else(|log| panic!("raidd serve did not start:\n{log}"))
    }

    /// Like `start`, with these environment variables set for the daemon.
    pub fn start_with_env(dir: &Path, config: &str, env: &[(&str, &str)]) -> Daemon {
        Daemon::try_start_with_env(dir, config, env)
            .unwrap_or_else(|log| panic!("raidd serve did not start:\n{log}"))
    }

    /// Like `start`, but returns the log when the daemon exits instead of becoming ready.
    pub fn try_start(dir: &Path, config: &str) -> Result<Daemon, String> {
        Daemon::try_start_with_env(dir, config, &[])
    }

    /// Like `start`, with at most `nofile` open file descriptors (soft and hard limit).
    pub fn start_with_nofile(dir: &Path, config: &str, nofile: u64) -> Daemon {
        Daemon::launch(dir, config, &[], Some(nofile))
            .unwrap_or_else(|log| panic!("raidd serve did not start:\n{log}"))
    }

    fn try_start_with_env(
        dir: &Path,
        config: &str,
        env: &[(&str, &str)],
    ) -> Result<Daemon, String> {
        Daemon::launch(dir, config, env, None)
    }

    fn launch(
        dir: &Path,
        config: &str,
        env: &[(&str, &str)],
        nofile: Option<u64>,
    ) -> Result<Daemon, String> {
        let control = dir.join("raidd.sock");
        let path = dir.join("raidd.toml");
        let text = if config.contains("control_socket") {
            config.to_string()
        } else {
            format!(
                "control_socket = {:?}\n{config}",
                control.display().to_string()
            )
        };
        let text = if text.contains("[nbd]") {
            text
        } else {
            format!("{text}\n[nbd]\nlisten = \"127.0.0.1:0\"\n")
        };
        std::fs::write(&path, text).unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_raidd"));
        command
            .args(["serve", "-v", "--config"])
            .arg(&path)
            .env_remove("RUST_LOG")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(n) = nofile {
            use std::os::unix::process::CommandExt;
            let limit = libc::rlimit {
                rlim_cur: n,
                rlim_max: n,
            };
            // SAFETY: setrlimit is async-signal-safe and touches only the child's limits.
            unsafe {
                command.pre_exec(move || {
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                });
            }
        }
        let mut child = command.spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let iscsi = Arc::new(Mutex::new(None));
        let http = Arc::new(Mutex::new(None));
        {
            let (iscsi, http) = (iscsi.clone(), http.clone());
            let log = log.clone();
            std::thread::spawn(move || {
                let mut tx = Some(tx);
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    // Printed before the NBD line, so it is known once the daemon is ready.
                    if let Some(rest) = line.strip_prefix("raidd: ready, iSCSI on ") {
                        *iscsi.lock().unwrap() = rest.trim().parse::<SocketAddr>().ok();
                    }
                    if let Some(rest) = line.strip_prefix("raidd: ready, HTTP on ") {
                        *http.lock().unwrap() = rest.trim().parse::<SocketAddr>().ok();
                    }
                    if let Some(rest) = line.strip_prefix("raidd: ready, NBD on ") {
                        if let Some(tx) = tx.take() {
                            let _ = tx.send(rest.trim().to_string());
                        }
                    }
                    let mut l = log.lock().unwrap();
                    l.push_str(&line);
                    l.push('\n');
                }
            });
        }
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(addr) => Ok(Daemon {
                child: Some(child),
                addr: addr.parse().unwrap(),
                iscsi: *iscsi.lock().unwrap(),
                http: *http.lock().unwrap(),
                control,
                log,
            }),
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                std::thread::sleep(Duration::from_millis(100));
                let l = log.lock().unwrap().clone();
                Err(l)
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// The daemon's resident memory, in bytes (VmRSS).
    pub fn rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap();
        kib * 1024
    }

    /// The daemon's open file descriptors.
    pub fn fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .unwrap()
            .count()
    }

    /// `raidd status --json` through the control socket.
    pub fn status(&self) -> serde_json::Value {
        let out = super::raidd(&[
            "status",
            "--json",
            "--control",
            self.control.to_str().unwrap(),
        ])
        .ok();
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// Whether the process is still running (not exited, not a zombie).
    pub fn alive(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    /// `nbd://127.0.0.1:PORT/EXPORT`
    pub fn uri(&self, export: &str) -> String {
        format!("nbd://{}/{export}", self.addr)
    }

    /// `iscsi://[CREDENTIALS@]127.0.0.1:PORT/TARGET/LUN`
    pub fn iscsi_url(&self, credentials: &str, target: &str, lun: u64) -> String {
        let addr = self.iscsi.expect("the daemon serves iSCSI");
        format!("iscsi://{credentials}{addr}/{target}/{lun}")
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// SIGHUP, and waits until the daemon says it applied the config file.
    pub fn reload(&self) {
        const APPLIED: &str = "SIGHUP: the config is applied";
        let before = self.log().matches(APPLIED).count();
        self.signal(libc::SIGHUP);
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.log().matches(APPLIED).count() == before {
            assert!(Instant::now() < deadline, "no reload:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on the PID of a child we started and have not reaped.
        let r = unsafe { libc::kill(self.pid() as i32, sig) };
        assert_eq!(r, 0, "kill({}, {sig})", self.pid());
    }

    fn wait(&mut self, timeout: Duration) -> ExitStatus {
        let child = self.child.as_mut().unwrap();
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                self.child = None;
                // Let the log reader catch the last lines.
                std::thread::sleep(Duration::from_millis(50));
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!(
                    "raidd serve did not exit within {timeout:?}:\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM and wait; asserts a clean exit. Returns the whole log.
    pub fn stop(self) -> String {
        let (ok, log) = self.stop_status();
        assert!(ok, "raidd serve did not exit cleanly:\n{log}");
        log
    }

    /// SIGTERM and wait: whether it exited with success, and the whole log.
    pub fn stop_status(mut self) -> (bool, String) {
        self.signal(libc::SIGTERM);
        let status = self.wait(Duration::from_secs(60));
        (status.success(), self.log())
    }

    /// The size of an export, as nbdinfo reports it.
    pub fn export_size(&self, export: &str) -> u64 {
        must(tool("nbdinfo").args(["--size", &self.uri(export)]))
            .trim()
            .parse()
            .unwrap()
    }

    /// Writes `len` bytes of pattern sectors of `generation` through the export named
    /// after the array's level (nbdcopy from a file).
    pub fn write_pattern(&self, export: &str, dir: &Path, len: u64, generation: u64, seed: u64) {
        let input = super::sectors::pattern_file(dir, len, generation, seed);
        must(tool("nbdcopy").args([input.to_str().unwrap(), &self.uri(export)]));
    }

    /// SIGKILL: an unclean end, as a crash or power loss would leave it.
    pub fn kill(mut self) {
        self.signal(libc::SIGKILL);
        let _ = self.wait(Duration::from_secs(30));
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            // Not for ever: a process with I/O in a hung FUSE filesystem ends only once that
            // filesystem's process has (the test drops that after this).
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(10) {
                if !matches!(c.try_wait(), Ok(None)) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// `raidd create` of a LEVEL array named LEVEL over `n` new 24 MiB images `dir/LEVELk.img`.
pub fn create_array(dir: &Path, level: &str, n: usize, extra: &[&str]) -> Vec<PathBuf> {
    let members = super::images(dir, level, n);
    let mut fixed = vec!["create", "--level", level, "--name", level, "--size", "24M"];
    fixed.extend_from_slice(extra);
    super::raidd(&super::args_with(&fixed, &members)).ok();
    members
}

/// An `[[array]]` table for the config.
pub fn array_config(name: &str, members: &[PathBuf]) -> String {
    let list: Vec<String> = members
        .iter()
        .map(|m| format!("{:?}", m.display().to_string()))
        .collect();
    format!(
        "[[array]]\nname = {name:?}\nmembers = [{}]\n",
        list.join(", ")
    )
}

/// A client program run with the system's Python first on PATH (nbdsh needs the python3
/// that has Debian's `nbd` module).
pub fn tool(program: &str) -> Command {
    let mut c = Command::new(program);
    c.env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
    c.env("LIBNBD_DEBUG", "0");
    c
}

/// Runs a client program; returns (success, stdout, stderr).
pub fn run_tool(c: &mut Command) -> (bool, String, String) {
    let out = c
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{c:?}: {e}"));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs a client program and insists it succeeds; returns stdout.
pub fn must(c: &mut Command) -> String {
    let desc = format!("{c:?}");
    let (ok, out, err) = run_tool(c);
    assert!(ok, "{desc} failed:\nstdout:\n{out}\nstderr:\n{err}");
    out
}

/// A self-signed certificate for 127.0.0.1 and localhost (its own CA) and its key, made by
/// openssl in `dir`: (certificate, key).
pub fn make_certificate(dir: &Path) -> (PathBuf, PathBuf) {
    let cert = dir.join("cert.pem");
    let key = dir.join("key.pem");
    must(tool("openssl").args([
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=localhost",
        "-addext",
        "subjectAltName=IP:127.0.0.1,DNS:localhost",
        "-keyout",
        key.to_str().unwrap(),
        "-out",
        cert.to_str().unwrap(),
    ]));
    (cert, key)
}

/// fio started in `dir` with `args`, its output collected.
pub fn spawn_fio(dir: &Path, args: &[String]) -> Child {
    tool("fio")
        .current_dir(dir)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for a fio started by [`spawn_fio`]; fails with its output unless it succeeded.
pub fn fio_ok(child: Child, what: &str) {
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{what}: fio failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
