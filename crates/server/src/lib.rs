//! raidd-server: everything `raidd serve` runs. It assembles the configured arrays, serves
//! their exports over NBD and iSCSI from a pool of worker threads (each with its own
//! executor and io_uring), keeps them redundant (the monitor: spares, recovery, resync,
//! safe mode), answers the control socket, applies an edited config on SIGHUP (`reload`),
//! and on SIGTERM/SIGINT stops accepting, drains in-flight requests, flushes the members and
//! marks the superblocks clean.
//!
//! Threads: the main thread runs the acceptors, the control socket, the monitor and the
//! signal wait; accepted connections are handed round-robin to the workers, and a connection
//! stays on its worker for its whole life. Arrays are shared (`Arc<Array>`); nothing on the
//! data path takes a lock across threads except the engine's per-stripe locks.
//!
//! Modules, from the outside in:
//! - [`config`]: the configuration file, parsed and checked (pure);
//! - `daemon`: start, the main thread's loop, and the stop; `reload`: exports changed while
//!   it runs (the control socket, SIGHUP);
//! - `accept` and `worker`: taking connections (within `max_connections`) and serving them
//!   on the worker threads;
//! - `budget` and `watch`: the memory and the time clients may make the server hold;
//! - `arrays`: assembling the configured arrays and the spare pool, and closing them;
//! - `control` and `status`: the control socket's handlers (the protocol and the reports
//!   are `raidd-admin`'s);
//! - `http`, `metrics` and `dashboard`: the `[http]` listener (on the main thread, beside
//!   the control socket), the Prometheus metrics and the HTML page it builds from the
//!   status report; `latency`: the per-thread request histograms behind both;
//! - `volumes`: what each export, LUN and ublk device serves (an array, or a volume of
//!   it), and volume changes through the control socket;
//! - `ublk`: arrays and volumes as local block devices (/dev/ublkbN), a queue per worker;
//! - `lifecycle`: the monitor;
//! - `shared`: what every worker shares (exports, limits, the stop signal);
//! - `nbd` and `iscsi`: one connection of each protocol; `link` (plain or TLS bytes) and
//!   `outq` (the send queue) serve both.

mod accept;
mod arrays;
mod budget;
pub mod config;
mod control;
mod ctx;
mod daemon;
mod dashboard;
mod frontend;
mod frontends;
mod http;
mod http_auth;
mod iscsi;
mod latency;
mod lifecycle;
mod link;
mod logtext;
mod metrics;
mod nbd;
mod outq;
mod reload;
mod service;
mod shared;
mod status;
mod ublk;
mod volumes;
mod watch;
mod worker;

use std::path::PathBuf;

use raidd_admin::exit::{AdminError, AdminResult, Exit};
use raidd_rt::signal::Signals;

use config::Config;

/// How `raidd serve` was started.
#[derive(Clone, Debug)]
pub struct Options {
    /// The configuration file (TOML).
    pub config: PathBuf,
    /// The control socket, overriding the config's `control_socket`.
    pub control: Option<PathBuf>,
}

/// Runs the daemon until SIGTERM or SIGINT; the error says why it could not start or did not
/// stop cleanly.
pub fn run(options: Options) -> AdminResult {
    abort_on_panic();
    let mut config = Config::load(&options.config).map_err(AdminError::usage)?;
    if let Some(c) = options.control {
        config.control_socket = c;
    }
    // Before any ring exists, so that every thread's ring registers it.
    if config.registered_buffers > 0 {
        if let Err(e) = raidd_rt::register_arena(config.registered_buffers) {
            tracing::warn!("registered_buffers: {e}; member I/O will not use fixed buffers");
        }
    }
    if raidd_rt::backend() != raidd_rt::Backend::IoUring {
        return Err(AdminError::new(
            Exit::Unsupported,
            "raidd serve needs io_uring, which this system refuses (seccomp? RAIDD_NO_URING?)",
        ));
    }
    // Before any thread starts, so every thread inherits the blocked mask.
    let signals = Signals::new(&[libc::SIGTERM, libc::SIGINT, libc::SIGHUP])
        .map_err(|e| AdminError::io("cannot set up signal handling", &e))?;
    raidd_rt::block_on(daemon::serve(config, Some(options.config), signals))
}

/// A panic anywhere ends the process at once, after its message: a daemon with one worker
/// gone would serve some clients and drop others, and its arrays, left as they are, stay
/// marked dirty (the next start resyncs). Release builds abort on panic anyway (the
/// workspace's profile); this makes it so in every build.
fn abort_on_panic() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        tracing::error!("panic: {info}; aborting");
        std::process::abort();
    }));
}

/// Debug builds only: `RAIDD_DEBUG_PANIC=POINT` makes the code at `POINT` panic, so the
/// tests can show what a panic does to the daemon (it ends at once; its arrays stay marked
/// unclean). Release builds have no such point.
#[cfg(debug_assertions)]
pub(crate) fn debug_panic(point: &str) {
    if std::env::var("RAIDD_DEBUG_PANIC").is_ok_and(|v| v == point) {
        panic!("RAIDD_DEBUG_PANIC={point}: panicking as asked");
    }
}

#[cfg(not(debug_assertions))]
pub(crate) fn debug_panic(_point: &str) {}

/// What a lock that a panicking thread held says: `raidd serve` aborts on panic, so a
/// poisoned lock is a bug to stop at, never state to go on with.
pub(crate) const POISONED: &str = "a thread panicked while holding this lock";
