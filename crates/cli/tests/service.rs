//! raidd as a system service: the systemd notify protocol as `Type=notify` and
//! `WatchdogSec=` use it (READY=1 once serving, watchdog pings, RELOADING=1 around a
//! SIGHUP, STOPPING=1 at the stop), heard on a notify socket of the test's own.
#![allow(clippy::unwrap_used)]

mod common;

use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use common::daemon::{array_config, create_array, Daemon};
use common::scratch;

/// The next datagram's lines, within `limit`.
fn next(sock: &UnixDatagram, limit: Duration) -> Vec<String> {
    sock.set_read_timeout(Some(limit)).unwrap();
    let mut buf = [0u8; 4096];
    let n = sock.recv(&mut buf).expect("a notification in time");
    String::from_utf8_lossy(&buf[..n])
        .lines()
        .map(str::to_string)
        .collect()
}

/// Waits for a datagram holding `line`, skipping others (watchdog pings come any time).
fn expect(sock: &UnixDatagram, line: &str, limit: Duration) -> Vec<String> {
    let start = Instant::now();
    loop {
        let left = limit.saturating_sub(start.elapsed());
        assert!(!left.is_zero(), "no {line} within {limit:?}");
        let got = next(sock, left);
        if got.iter().any(|l| l == line) {
            return got;
        }
    }
}

#[test]
fn systemd_hears_ready_watchdog_pings_reload_and_stopping() {
    let dir = scratch();
    let m = create_array(dir.path(), "raid5", 3, &[]);
    let path = dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&path).unwrap();
    let d = Daemon::start_with_env(
        dir.path(),
        &array_config("raid5", &m),
        &[
            ("NOTIFY_SOCKET", path.to_str().unwrap()),
            ("WATCHDOG_USEC", "4000000"),
        ],
    );
    let ready = expect(&sock, "READY=1", Duration::from_secs(10));
    assert!(
        ready
            .iter()
            .any(|l| l.starts_with("STATUS=serving 1 arrays")),
        "{ready:?}"
    );
    // Pings every 2 s while the worker ticks.
    let t = Instant::now();
    expect(&sock, "WATCHDOG=1", Duration::from_secs(5));
    expect(&sock, "WATCHDOG=1", Duration::from_secs(5));
    assert!(t.elapsed() >= Duration::from_secs(2), "{:?}", t.elapsed());
    // SAFETY: kill signals the daemon this test started.
    assert_eq!(unsafe { libc::kill(d.pid() as i32, libc::SIGHUP) }, 0);
    expect(&sock, "RELOADING=1", Duration::from_secs(10));
    expect(&sock, "READY=1", Duration::from_secs(10));
    let log = d.stop();
    assert!(log.contains("pinging systemd's watchdog"), "{log}");
    expect(&sock, "STOPPING=1", Duration::from_secs(5));
}
