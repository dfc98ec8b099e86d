//! Frontends: the ways clients reach the arrays (NBD, iSCSI, ublk). Each is a folder of its
//! own with its config sections, its start, how it serves a connection or a queue, and its
//! part of the status report and of the metrics; it implements [`Frontend`], and one line in
//! `frontends.rs` registers it. The daemon holds the started ones as a list of [`Running`]
//! and treats them alike: their connections are accepted within the one `max_connections`,
//! run on the same worker threads, reserve their buffers in the one budget, are watched by
//! the same time limits and drained by the same stop.
//!
//! A frontend's life: [`Frontend::parse`] checks its sections when the config is read;
//! [`Frontend::without_arrays`] and [`Frontend::resolve`] drop what it cannot serve (arrays
//! that did not start, volumes that are not there) before [`Frontend::start`] binds its
//! listener and builds what its connections share; then [`Running`] serves until the stop.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;

use futures::future::LocalBoxFuture;
use raidd_admin::exit::AdminResult;
use raidd_admin::status::StatusReport;
use raidd_admin::volume::{Volume, VolumeRef};
use raidd_engine::{Array, Extent};
use raidd_rt::net::TcpListener;
use serde::de::DeserializeOwned;

use crate::config::arrays::ArrayConfig;
use crate::link::Link;
use crate::metrics::Sink;
use crate::shared::{SharedState, Stop};
use crate::watch::{self, Watch};

/// What an entry of a frontend (an export, a LUN, a device) serves: an array, or a volume
/// of it.
#[derive(Clone, Debug)]
pub struct Serving {
    pub extent: Extent,
    pub volume: Option<Volume>,
}

/// What a frontend's config sections are checked against.
#[allow(missing_debug_implementations)] // holds a closure
pub struct ParseCtx<'a> {
    /// The configured arrays (entries name them; their index is what the config keeps).
    pub arrays: &'a [ArrayConfig],
    /// Makes a relative path relative to the config file's directory.
    pub resolve: &'a dyn Fn(PathBuf) -> PathBuf,
}

impl ParseCtx<'_> {
    /// The index of the array called `name`.
    pub fn array(&self, name: &str) -> Option<usize> {
        self.arrays.iter().position(|a| a.name == name)
    }
}

/// A frontend's sections of the config file, as written: each taken once, by its key.
#[derive(Debug, Default)]
pub struct Sections(toml::Table);

impl Sections {
    /// Takes `keys` out of the file's top-level table.
    pub(crate) fn take(table: &mut toml::Table, keys: &[&str]) -> Sections {
        Sections(
            keys.iter()
                .filter_map(|k| table.remove(*k).map(|v| (k.to_string(), v)))
                .collect(),
        )
    }

    /// Section `key` as `T` (the frontend's raw, serde form), or `None` where the file has
    /// none.
    pub fn get<T: DeserializeOwned>(&mut self, key: &str) -> Result<Option<T>, String> {
        match self.0.remove(key) {
            None => Ok(None),
            Some(v) => v
                .try_into()
                .map(Some)
                .map_err(|e: toml::de::Error| format!("[{key}]: {}", e.message())),
        }
    }
}

/// What a frontend starts with.
#[derive(Debug)]
pub struct StartCtx<'a> {
    /// The budget, limits and connection count all frontends share.
    pub shared: &'a SharedState,
    /// Worker threads (one ublk queue each).
    pub threads: usize,
}

/// A frontend started: what the daemon holds of it, and its listening socket (taken by an
/// acceptor on the main thread) if it takes connections.
#[derive(Debug)]
pub struct Started {
    pub running: Arc<dyn Running>,
    pub listener: Option<TcpListener>,
}

/// A kind of frontend: its configuration and how it starts.
pub trait Frontend {
    /// Its keys of the config file (`[nbd]`, `[[export]]`, ...).
    const SECTIONS: &'static [&'static str];
    /// Its checked configuration.
    type Config: Clone + fmt::Debug + PartialEq;

    /// Checks its sections (an absent one is its defaults).
    fn parse(sections: Sections, ctx: &ParseCtx) -> Result<Self::Config, String>;

    /// Checks what can be checked before any array is touched (certificates).
    fn preflight(_config: &Self::Config) -> AdminResult<()> {
        Ok(())
    }

    /// Bytes of buffer memory one of its connections may hold (0: it takes none).
    fn connection_memory(_config: &Self::Config) -> u64 {
        0
    }

    /// Bytes of buffer memory it holds for its whole life, with `threads` workers (ublk's
    /// tag buffers): taken from the budget before any connection's.
    fn held_memory(_config: &Self::Config, _threads: usize) -> u64 {
        0
    }

    /// When what the frontends hold for their life leaves no room for `one` connection in
    /// `buffer_memory`: the error that says what this frontend holds, if it holds any.
    fn refuse_held_memory(
        _config: &Self::Config,
        _threads: usize,
        _one: u64,
        _buffer_memory: u64,
    ) -> Result<(), String> {
        Ok(())
    }

    /// The configuration without what serves the arrays not `kept` (`kept[i]`: array i's
    /// index among those that started), renumbered; a note for each thing left out.
    fn without_arrays(
        config: &Self::Config,
        kept: &[Option<usize>],
        arrays: &[ArrayConfig],
        notes: &mut Vec<String>,
    ) -> Self::Config;

    /// Resolves what each entry serves through `serve(array, volume, what)` (which logs
    /// what cannot be served and returns `None`), leaving out those entries; what the
    /// entries left serve, in order.
    fn resolve(config: &mut Self::Config, serve: &mut Resolver<'_>) -> Vec<Serving>;

    /// Starts it (before the worker threads): binds its listener and builds what its
    /// connections or queues share. `None`: it has nothing to serve.
    fn start(
        config: &Self::Config,
        serving: Vec<Serving>,
        ctx: &StartCtx,
    ) -> AdminResult<Option<Started>>;

    /// Its metrics, from the status report (which [`Running::report`] filled).
    fn metrics(_report: &StatusReport, _sink: &mut Sink) {}

    /// Applies `new` in place of `old` while it runs (`running`; `None`: it did not start,
    /// having had nothing to serve), as far as a running frontend can change, through `rc`
    /// (entries added are resolved through its `serve`, and each one taken away is named to
    /// its `release` as it was to `serve`). Returns the configuration now in effect, with a
    /// line in `rc.notes` for each change made and each one left for the next start. By
    /// default nothing changes while it runs.
    fn reload<'a>(
        old: &'a Self::Config,
        new: &'a Self::Config,
        _running: Option<&'a dyn Running>,
        rc: &'a mut ReloadCtx<'_, '_>,
    ) -> LocalBoxFuture<'a, Self::Config> {
        if old != new {
            rc.notes.push(format!(
                "[{}]: changed, applied at the next start (it cannot change while it serves)",
                Self::SECTIONS.join("], [")
            ));
        }
        Box::pin(std::future::ready(old.clone()))
    }
}

/// What a frontend's [`Frontend::reload`] works with besides its configurations.
#[allow(missing_debug_implementations)] // holds closures
pub struct ReloadCtx<'a, 'r> {
    /// Resolves what an entry added serves, as at the start (`None`: logged, left out).
    pub serve: &'a mut Resolver<'r>,
    /// Names an entry taken away, as it was named to `serve`.
    pub release: &'a mut dyn FnMut(&str),
    /// Runs a task on worker thread `w` beside its connections (a ublk queue); an error
    /// when the worker has stopped.
    pub spawn: &'a dyn Fn(usize, WorkerTask) -> Result<(), String>,
    /// Worker threads (a ublk device has a queue on each).
    pub threads: usize,
    /// A line for each change made and each one left for the next start.
    pub notes: Vec<String>,
}

/// What [`Frontend::resolve`] asks for each entry: array index, volume, and what the entry
/// is called in log lines and reports ("export vol", "LUN 0 of iqn...", "/dev/ublkb0").
pub type Resolver<'a> = dyn FnMut(usize, Option<&VolumeRef>, String) -> Option<Serving> + 'a;

/// Keeps the `entries` whose array or volume `serve` resolves (`of` names an entry's array,
/// volume and what it is called), appending what each kept one serves to `out`.
pub fn keep_served<T>(
    entries: &mut Vec<T>,
    out: &mut Vec<Serving>,
    serve: &mut Resolver<'_>,
    of: impl Fn(&T) -> (usize, Option<&VolumeRef>, String),
) {
    let before = out.len();
    entries.retain(|e| {
        let (array, volume, what) = of(e);
        serve(array, volume, what).map(|s| out.push(s)).is_some()
    });
    debug_assert_eq!(
        out.len() - before,
        entries.len(),
        "a serving per entry kept"
    );
}

/// A task a frontend hands a worker thread while serving (a ublk queue of a device added):
/// made there, run there beside the connections.
pub type WorkerTask = Box<dyn FnOnce() -> LocalBoxFuture<'static, ()> + Send>;

/// A started frontend, shared by the main thread and the workers.
pub trait Running: Send + Sync + fmt::Debug {
    /// Its name in log lines ("nbd", "iscsi", "ublk").
    fn name(&self) -> &'static str;

    /// Itself, for its own [`Frontend::reload`] to reach its type.
    fn as_any(&self) -> &dyn std::any::Any;

    /// Where it listens, if it takes connections.
    fn listen(&self) -> Option<SocketAddr> {
        None
    }

    /// The time limits its connections are held to (the server's; a frontend may add its
    /// own idle limit).
    fn watch_limits(&self, base: watch::Limits) -> watch::Limits {
        base
    }

    /// Serves one connection accepted on its listener, on the worker thread it was handed
    /// to, until the client leaves or the daemon stops.
    fn serve(
        self: Arc<Self>,
        _link: Link,
        _watch: Rc<Watch>,
        _stop: Stop,
    ) -> LocalBoxFuture<'static, ()> {
        unreachable!("{} takes no connections", self.name())
    }

    /// What it runs on worker thread `worker` beside the connections (ublk's queues); they
    /// end by themselves once the frontend has stopped.
    fn worker_tasks(&self, _worker: usize) -> Vec<LocalBoxFuture<'static, ()>> {
        Vec::new()
    }

    /// Once the workers run.
    fn started(&self) -> LocalBoxFuture<'_, ()> {
        Box::pin(std::future::ready(()))
    }

    /// At the stop, before the workers drain: what it serves finishes its requests.
    fn stopping(&self) -> LocalBoxFuture<'_, ()> {
        Box::pin(std::future::ready(()))
    }

    /// After the workers ended.
    fn stopped(&self) -> LocalBoxFuture<'_, ()> {
        Box::pin(std::future::ready(()))
    }

    /// Its part of `raidd status` (exports, targets, devices); `arrays[i]` is the array of
    /// `report.arrays[i]`.
    fn report(&self, report: &mut StatusReport, arrays: &[Arc<Array>]);

    /// Logs what it serves, once everything has started.
    fn announce(&self) {}

    /// What it tells stderr once it serves ("NBD on 127.0.0.1:10809"): scripts and test
    /// harnesses wait for these lines, and read its address from them.
    fn ready_line(&self) -> Option<String> {
        None
    }
}
