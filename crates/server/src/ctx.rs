//! What the control handlers and the status report work on: the daemon's arrays, exports
//! and monitor, as the daemon started them.

use std::rc::Rc;

use raidd_admin::exit::{AdminError, AdminResult, Exit};
use raidd_admin::status::NotStarted;

use crate::arrays::Served;
use crate::lifecycle::{Lifecycle, Watched};
use crate::shared::SharedState;

/// What the handlers work on: the daemon's arrays, exports and monitor.
pub struct ControlCtx {
    pub served: Vec<Served>,
    /// Configured arrays that could not be started, and why.
    pub not_started: Vec<NotStarted>,
    pub shared: SharedState,
    /// The frontends started (what they serve, for `status`).
    pub frontends: Vec<std::sync::Arc<dyn crate::frontend::Running>>,
    pub threads: usize,
    /// The worker threads' channels (a device added while serving hands them its queues).
    pub to_workers: Vec<futures::channel::mpsc::UnboundedSender<crate::accept::ToWorker>>,
    pub life: Rc<Lifecycle>,
    /// Every array of every configured array (inner ones of nested arrays too).
    pub watched: Vec<Watched>,
    /// The config's scan patterns (where arrays named by UUID are found at start).
    pub scan: Vec<String>,
    /// How long members added at run time may take to answer an I/O.
    pub member_timeout: Option<std::time::Duration>,
    /// `[http] node_md_compat`: `/metrics` also speaks node_exporter's `node_md_*`.
    pub http_node_md_compat: bool,
    /// The arrays' volumes: what serves each, and changes through the control socket.
    pub volumes: crate::volumes::Volumes,
    /// The configuration as started and as changed since (exports added and removed).
    pub live: Live,
}

impl ControlCtx {
    /// The served array named `array`, and its index.
    pub fn served_at(&self, array: &str) -> AdminResult<(usize, &Served)> {
        debug_assert!(
            self.not_started
                .iter()
                .all(|n| self.served.iter().all(|s| s.config.name != n.name)),
            "an array is served or not started, not both"
        );
        self.served
            .iter()
            .enumerate()
            .find(|(_, s)| s.config.name == array)
            .ok_or_else(|| {
                if let Some(n) = self.not_started.iter().find(|n| n.name == array) {
                    return AdminError::new(
                        Exit::Conflict,
                        format!("array {array:?} was not started: {}", n.error),
                    );
                }
                let names: Vec<&str> = self.served.iter().map(|s| s.config.name.as_str()).collect();
                AdminError::new(
                    Exit::NotFound,
                    format!("no array named {array:?} (arrays: {})", names.join(", ")),
                )
            })
    }
}

/// The daemon's configuration as it started and as changed since: the file it came from,
/// the settings it started with, and the frontends' entries in effect.
#[derive(Debug)]
pub struct Live {
    pub path: Option<std::path::PathBuf>,
    /// The configuration it started with (every array named, before those that did not
    /// start were left out): SIGHUP names what else changed in the file.
    pub started: crate::config::Config,
    /// The frontends' configuration in effect, indices as the served arrays'.
    pub frontends: std::cell::RefCell<crate::frontends::Frontends>,
    /// Held while a change is applied.
    pub changing: futures::lock::Mutex<()>,
}
