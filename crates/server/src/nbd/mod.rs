//! The NBD frontend: `[nbd]` and `[[export]]` (`config.rs`), what its connections share
//! (`server.rs`), and one connection's handshake and transmission phase (`conn.rs`).

pub(crate) mod config;
mod conn;
mod server;

use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use futures::future::LocalBoxFuture;
use raidd_admin::exit::{AdminError, AdminResult};
use raidd_admin::status::{ExportStatus, StatusReport};
use raidd_engine::Array;
use raidd_rt::net::TcpListener;

use config::{ExportConfig, NbdConfig};
use server::NbdServer;

use crate::config::arrays::ArrayConfig;
use crate::frontend::{
    keep_served, Frontend, ParseCtx, ReloadCtx, Resolver, Running, Sections, Serving, StartCtx,
    Started,
};
use crate::link::{self, Link};
use crate::metrics::Sink;
use crate::shared::Stop;
use crate::watch::{self, Watch};

/// The NBD frontend.
#[derive(Debug)]
pub struct Nbd;

impl Frontend for Nbd {
    const SECTIONS: &'static [&'static str] = &["nbd", "export"];
    type Config = NbdConfig;

    fn parse(sections: Sections, ctx: &ParseCtx) -> Result<NbdConfig, String> {
        config::parse(sections, ctx)
    }

    /// A certificate that cannot be loaded stops the start before any array is touched.
    fn preflight(config: &NbdConfig) -> AdminResult<()> {
        if let Some(t) = &config.tls {
            link::server_config(&t.certificate, &t.key).map_err(AdminError::usage)?;
        }
        Ok(())
    }

    fn connection_memory(config: &NbdConfig) -> u64 {
        config.connection_memory
    }

    fn without_arrays(
        config: &NbdConfig,
        kept: &[Option<usize>],
        arrays: &[ArrayConfig],
        notes: &mut Vec<String>,
    ) -> NbdConfig {
        let mut c = config.clone();
        c.exports = Vec::new();
        for e in &config.exports {
            match kept[e.array] {
                Some(array) => c.exports.push(ExportConfig { array, ..e.clone() }),
                None => notes.push(format!(
                    "export {:?} is not offered: its array {:?} did not start",
                    e.name, arrays[e.array].name
                )),
            }
        }
        c
    }

    fn resolve(config: &mut NbdConfig, serve: &mut Resolver<'_>) -> Vec<Serving> {
        let mut out = Vec::new();
        keep_served(&mut config.exports, &mut out, serve, |e| {
            (e.array, e.volume.as_ref(), format!("export {}", e.name))
        });
        out
    }

    /// NBD always listens (a config with no export offers none, and says so).
    fn start(
        config: &NbdConfig,
        serving: Vec<Serving>,
        ctx: &StartCtx,
    ) -> AdminResult<Option<Started>> {
        let tls = match &config.tls {
            Some(t) => {
                Some(link::server_config(&t.certificate, &t.key).map_err(AdminError::usage)?)
            }
            None => None,
        };
        let listener = TcpListener::bind(config.listen).map_err(|e| {
            AdminError::io(format!("cannot listen for NBD on {}", config.listen), &e)
        })?;
        let server = NbdServer::new(
            config,
            serving,
            tls,
            ctx.shared.clone(),
            listener.local_addr(),
        );
        Ok(Some(Started {
            running: Arc::new(server),
            listener: Some(listener),
        }))
    }

    /// Exports are added and removed while it serves (one whose settings changed is
    /// removed and offered anew); `[nbd]` itself changes at the next start.
    fn reload<'a>(
        old: &'a NbdConfig,
        new: &'a NbdConfig,
        running: Option<&'a dyn Running>,
        rc: &'a mut ReloadCtx<'_, '_>,
    ) -> LocalBoxFuture<'a, NbdConfig> {
        Box::pin(std::future::ready(exports_changed(old, new, running, rc)))
    }

    fn metrics(report: &StatusReport, s: &mut Sink) {
        for a in &report.arrays {
            for e in &a.exports {
                let l = [
                    ("export", e.name.as_str()),
                    ("array", a.name.as_str()),
                    ("protocol", "nbd"),
                ];
                s.gauge(
                    "raidd_export_connections",
                    "Client connections to the export.",
                    &l,
                    e.connections as f64,
                );
                s.counter(
                    "raidd_export_requests",
                    "Requests the export's clients made.",
                    &l,
                    e.requests,
                );
                s.operations(&e.latency, &l);
            }
        }
    }
}

impl Running for NbdServer {
    fn name(&self) -> &'static str {
        "nbd"
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn listen(&self) -> Option<std::net::SocketAddr> {
        Some(self.listen)
    }

    fn watch_limits(&self, base: watch::Limits) -> watch::Limits {
        watch::Limits {
            idle: self.idle_timeout,
            ..base
        }
    }

    fn serve(
        self: Arc<Self>,
        link: Link,
        watch: Rc<Watch>,
        stop: Stop,
    ) -> LocalBoxFuture<'static, ()> {
        Box::pin(conn::serve_connection(link, watch, self, stop))
    }

    fn report(&self, report: &mut StatusReport, arrays: &[Arc<Array>]) {
        report.nbd_listen = self.listen.to_string();
        debug_assert_eq!(report.arrays.len(), arrays.len(), "a served array each");
        for (served, array) in report.arrays.iter_mut().zip(arrays) {
            served.exports = self
                .exports()
                .iter()
                .filter(|e| Arc::ptr_eq(e.extent.array(), array))
                .map(|e| ExportStatus {
                    name: e.name.clone(),
                    volume: e.volume.clone(),
                    size_bytes: e.extent.size_bytes(),
                    read_only: e.read_only(),
                    connections: e.connections.load(Ordering::Relaxed),
                    requests: e.requests.load(Ordering::Relaxed),
                    copied_bytes: e.copied_bytes.load(Ordering::Relaxed),
                    latency: e.latency.snapshot(),
                })
                .collect();
        }
    }

    fn ready_line(&self) -> Option<String> {
        Some(format!("NBD on {}", self.listen))
    }

    fn announce(&self) {
        tracing::info!(
            "serving NBD on {} ({} exports, at most {} connections, {} of buffer memory)",
            self.listen,
            self.exports().len(),
            self.shared.max_connections,
            raidd_admin::size::human(self.shared.budget.limit()),
        );
    }
}

/// [`Nbd::reload`]'s work: nothing in it waits.
fn exports_changed(
    old: &NbdConfig,
    new: &NbdConfig,
    running: Option<&dyn Running>,
    rc: &mut ReloadCtx<'_, '_>,
) -> NbdConfig {
    let settings = |c: &NbdConfig| NbdConfig {
        exports: Vec::new(),
        ..c.clone()
    };
    if settings(old) != settings(new) {
        rc.notes.push(
            "[nbd]: changed, applied at the next start (its listener, limits and TLS are \
             set when it starts)"
                .into(),
        );
    }
    let mut applied = old.clone();
    let Some(server) = running.and_then(|r| r.as_any().downcast_ref::<NbdServer>()) else {
        if old.exports != new.exports {
            rc.notes
                .push("[[export]]: changed, but NBD is not running".into());
        }
        return applied;
    };
    for e in old.exports.iter().filter(|e| !new.exports.contains(e)) {
        if server.remove(&e.name).is_some() {
            (rc.release)(&format!("export {}", e.name));
            rc.notes.push(format!("export {:?} removed", e.name));
        }
        applied.exports.retain(|x| x.name != e.name);
    }
    for e in new.exports.iter().filter(|e| !old.exports.contains(e)) {
        let Some(s) = (rc.serve)(e.array, e.volume.as_ref(), format!("export {}", e.name)) else {
            rc.notes.push(format!(
                "export {:?} not offered: its volume cannot be served (see the log)",
                e.name
            ));
            continue;
        };
        match server.add(e, s) {
            Ok(()) => {
                applied.exports.push(e.clone());
                rc.notes.push(format!("export {:?} added", e.name));
            }
            Err(m) => {
                (rc.release)(&format!("export {}", e.name));
                rc.notes.push(m);
            }
        }
    }
    debug_assert_eq!(
        applied.exports.len(),
        server.exports().len(),
        "the config in effect is what is offered"
    );
    applied
}
