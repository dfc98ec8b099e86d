//! The daemon's life: start (certificates, arrays, listeners, workers), the main thread's
//! loop (acceptors, control socket, monitor, safe mode, signals) and the stop.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::Arc;
use std::time::Duration;

use futures::channel::{mpsc, oneshot};
use futures::future::{self, Either, FutureExt};
use raidd_admin::exit::{AdminError, AdminResult};
use raidd_admin::status::{NotStarted, UblkStatus};
use raidd_engine::Member;
use raidd_rt::net::{TcpListener, UnixListener};
use raidd_rt::signal::Signals;

use crate::accept::{self, Accepted, Proto};
use crate::arrays::{self, close_all, Served};
use crate::budget::Budget;
use crate::config::Config;
use crate::control;
use crate::ctx::ControlCtx;
use crate::lifecycle::{self, Lifecycle, Watched};
use crate::shared::{Export, ServerState, SharedState, Stop};
use crate::{http, iscsi, link, nbd, ublk, volumes, watch, worker};

/// Descriptors kept for everything but client connections (listeners, the control socket
/// and its clients, rings and eventfds) besides two per member.
const FD_RESERVE: u64 = 64;

/// The listening sockets.
struct Listeners {
    nbd: TcpListener,
    iscsi: Option<TcpListener>,
    control: UnixListener,
    http: Option<TcpListener>,
    /// `[http.tls]`: the HTTP listener speaks HTTPS only.
    http_tls: Option<Arc<rustls::ServerConfig>>,
}

/// Serves until a signal arrives, then stops.
pub async fn serve(config: Config, signals: Signals) -> AdminResult {
    // Certificates first: a bad one should fail before any array is touched.
    let tls = match &config.nbd.tls {
        Some(t) => Some(link::server_config(&t.certificate, &t.key).map_err(AdminError::usage)?),
        None => None,
    };
    let http_tls = match config.http.as_ref().and_then(|h| h.tls.as_ref()) {
        Some(t) => Some(link::server_config(&t.certificate, &t.key).map_err(AdminError::usage)?),
        None => None,
    };
    let (served, not_started) = arrays::assemble_all(&config).await?;
    let config = without_not_started(config, &not_started);
    let resolved = volumes::resolve(config, &served).await;
    let config = resolved.config;
    let ublk_serving = resolved.ublk;
    let mut listeners = match bind(&config) {
        Ok(l) => l,
        Err(e) => {
            close_all(&served).await;
            return Err(e);
        }
    };
    listeners.http_tls = http_tls;
    let max_connections = connection_limit(&config);
    let serving = Serving {
        exports: resolved.exports,
        luns: resolved.luns,
    };
    let shared = match shared_state(&config, &serving, &listeners, tls, max_connections) {
        Ok(s) => s,
        Err(e) => {
            close_all(&served).await;
            return Err(e);
        }
    };
    let pool = arrays::open_pool(&config, &served);
    let life = Rc::new(Lifecycle::new(
        config.sync,
        config.program.clone(),
        pool,
        config.limits.member_timeout,
    ));
    let watched = watched(&served);
    let (devices, mut not_made) = ublk::prepare(&config.ublk, &ublk_serving, config.threads);
    let ctx = Rc::new(ControlCtx {
        served,
        not_started,
        shared: shared.clone(),
        listen: listeners.nbd.local_addr().to_string(),
        threads: config.threads,
        life,
        watched,
        member_timeout: config.limits.member_timeout,
        http_node_md_compat: config.http.as_ref().is_some_and(|h| h.node_md_compat),
        volumes: resolved.volumes,
        ublk: RefCell::new(Vec::new()),
    });
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let stop: Stop = stop_rx.shared();
    let (workers, to_workers) = match start_workers(&config, &shared, &stop, &devices) {
        Ok(w) => w,
        Err(e) => {
            close_all(&ctx.served).await;
            return Err(e);
        }
    };
    not_made.extend(ublk::start(&devices).await);
    *ctx.ublk.borrow_mut() = ublk_status(&devices, &not_made);
    announce(&config, &shared, &listeners);
    run_until_signal(&ctx, listeners, to_workers, signals, stop_tx).await;
    // ublk devices first: their requests in flight finish while the workers still serve.
    ublk::stop(&devices).await;
    ctx.life.stop(&ctx.watched).await;
    drain(workers, config.limits.drain_timeout).await;
    let ids: Vec<u32> = devices.iter().map(|d| d.id).collect();
    drop(devices);
    ublk::delete(ids).await;
    let _ = std::fs::remove_file(&config.control_socket);
    if close_all(&ctx.served).await {
        tracing::info!("stopped");
        Ok(())
    } else {
        Err(AdminError::failure(
            "stopped, but not every array closed cleanly (see the log)",
        ))
    }
}

/// The configuration without the arrays that did not start: their exports and LUNs go
/// with them, and indices into the configuration's arrays match the served ones.
fn without_not_started(config: Config, not_started: &[NotStarted]) -> Config {
    let gone: Vec<usize> = not_started
        .iter()
        .filter_map(|n| config.arrays.iter().position(|a| a.name == n.name))
        .collect();
    let (config, notes) = config.without_arrays(&gone);
    for n in notes {
        tracing::warn!("{n}");
    }
    config
}

fn bind(config: &Config) -> AdminResult<Listeners> {
    let nbd = TcpListener::bind(config.nbd.listen).map_err(|e| {
        AdminError::io(
            format!("cannot listen for NBD on {}", config.nbd.listen),
            &e,
        )
    })?;
    let iscsi = match &config.iscsi {
        None => None,
        Some(ic) => Some(TcpListener::bind(ic.listen).map_err(|e| {
            AdminError::io(format!("cannot listen for iSCSI on {}", ic.listen), &e)
        })?),
    };
    let http = config.http.as_ref().map(http::bind).transpose()?;
    let control = control::bind(&config.control_socket)?;
    Ok(Listeners {
        nbd,
        iscsi,
        control,
        http,
        http_tls: None,
    })
}

/// `max_connections`, lowered to what the descriptor limit leaves room for. The soft limit
/// is raised to the hard one first.
fn connection_limit(config: &Config) -> usize {
    let wanted = config.limits.max_connections;
    let Some(fds) = raise_fd_limit() else {
        return wanted;
    };
    let members: usize =
        config.arrays.iter().map(|a| a.members.len()).sum::<usize>() + config.spares.len();
    let others = FD_RESERVE + 2 * members as u64 + 4 * config.threads as u64;
    let room = usize::try_from(fds.saturating_sub(others)).unwrap_or(usize::MAX);
    if room >= wanted {
        return wanted;
    }
    let limit = room.max(1);
    tracing::warn!(
        "max_connections = {wanted}, but the descriptor limit ({fds}) leaves room for {limit}: \
         serving at most {limit} connections (raise the limit, e.g. LimitNOFILE=)"
    );
    limit
}

/// Raises this process's soft descriptor limit to its hard limit; the limit now.
fn raise_fd_limit() -> Option<u64> {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) } != 0 {
        return None;
    }
    if l.rlim_cur < l.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: l.rlim_max,
            rlim_max: l.rlim_max,
        };
        // SAFETY: setrlimit reads the struct we own.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            l = raised;
        }
    }
    Some(l.rlim_cur)
}

/// What the exports and the LUNs serve, in the order of the config's.
struct Serving {
    exports: Vec<volumes::Serving>,
    luns: Vec<Vec<volumes::Serving>>,
}

fn exports(config: &Config, serving: &[volumes::Serving]) -> Vec<Export> {
    config
        .exports
        .iter()
        .zip(serving)
        .map(|(e, s)| Export {
            name: e.name.clone(),
            description: e.description.clone(),
            extent: s.extent.clone(),
            volume: s.volume.as_ref().map(|v| v.name.clone()),
            read_only: e.read_only || s.extent.is_read_only(),
            connections: AtomicUsize::new(0),
            requests: AtomicU64::new(0),
            copied_bytes: AtomicU64::new(0),
            latency: Default::default(),
        })
        .collect()
}

/// What the NBD handshake offers.
fn offer(config: &Config, exports: &[Export], tls: bool) -> raidd_nbd::Offer {
    raidd_nbd::Offer {
        exports: exports
            .iter()
            .map(|e| {
                let block = e.extent.block_size();
                raidd_nbd::ExportInfo {
                    name: e.name.clone(),
                    description: e.description.clone(),
                    size: e.extent.size_bytes(),
                    flags: nbd::export_flags(e.read_only, e.extent.array().info().rotational),
                    min_block: block,
                    preferred_block: block.max(4096),
                    max_block: nbd::MAX_PAYLOAD,
                }
            })
            .collect(),
        default_export: (exports.len() == 1).then_some(0),
        tls,
        tls_required: config.nbd.tls.as_ref().is_some_and(|t| t.require),
    }
}

fn shared_state(
    config: &Config,
    serving: &Serving,
    listeners: &Listeners,
    tls: Option<Arc<rustls::ServerConfig>>,
    max_connections: usize,
) -> AdminResult<SharedState> {
    let exports = exports(config, &serving.exports);
    let offer = offer(config, &exports, tls.is_some());
    let iscsi = match (&config.iscsi, &listeners.iscsi) {
        (Some(ic), Some(l)) => {
            let st = iscsi::state(ic, &serving.luns, l.local_addr())
                .map_err(|e| AdminError::io("cannot start the iSCSI target", &e))?;
            Some(Arc::new(st))
        }
        _ => None,
    };
    let l = &config.limits;
    Ok(Arc::new(ServerState {
        exports,
        offer,
        tls,
        max_in_flight: config.nbd.max_in_flight,
        iscsi,
        budget: Arc::new(Budget::new(config.connection_buffer_memory())),
        nbd_connection_memory: l.nbd_connection_memory,
        iscsi_connection_memory: l.iscsi_connection_memory,
        limits: watch::Limits {
            request: l.request_timeout,
            send: l.send_timeout,
            idle: l.nbd_idle_timeout,
        },
        connections: AtomicUsize::new(0),
        max_connections,
    }))
}

/// Every array of every configured array (inner ones of nested arrays too), as the monitor
/// looks after them.
fn watched(served: &[Served]) -> Vec<Watched> {
    served
        .iter()
        .flat_map(|s| {
            s.session.arrays.iter().map(|a| Watched {
                array: a.array.clone(),
                group: s.config.spare_group.clone(),
                safe_mode: s.config.safe_mode_delay,
            })
        })
        .collect()
}

type Workers = (
    Vec<std::thread::JoinHandle<()>>,
    Vec<mpsc::UnboundedSender<Accepted>>,
);

fn start_workers(
    config: &Config,
    shared: &SharedState,
    stop: &Stop,
    devices: &[ublk::Device],
) -> AdminResult<Workers> {
    let mut to_workers = Vec::new();
    let mut workers = Vec::new();
    let poll = config.poll;
    for i in 0..config.threads {
        let (tx, rx) = mpsc::unbounded::<Accepted>();
        to_workers.push(tx);
        let (shared, stop) = (shared.clone(), stop.clone());
        let queues = ublk::queues_of(devices, i);
        let handle = std::thread::Builder::new()
            .name(format!("raidd-worker-{i}"))
            .spawn(move || {
                raidd_rt::set_poll(poll);
                raidd_rt::block_on(worker::run(rx, shared, stop, queues));
                let io = raidd_rt::io_stats();
                tracing::info!(
                    "worker {i}: {} member reads and writes went to the kernel as {} \
                     operations ({} gathered ones carried {}; {} used registered buffers)",
                    io.file_ops,
                    io.kernel_ops(),
                    io.gathered,
                    io.gathered_parts,
                    io.fixed
                );
            })
            .map_err(|e| AdminError::io("cannot start a worker thread", &e))?;
        workers.push(handle);
    }
    Ok((workers, to_workers))
}

fn announce(config: &Config, shared: &SharedState, listeners: &Listeners) {
    let nbd = listeners.nbd.local_addr();
    tracing::info!(
        "serving NBD on {nbd} ({} exports, {} worker threads, at most {} connections, {} of \
         buffer memory); control socket {}",
        shared.exports.len(),
        config.threads,
        shared.max_connections,
        raidd_admin::size::human(shared.budget.limit()),
        config.control_socket.display()
    );
    if let Some(l) = &listeners.iscsi {
        let st = shared.iscsi.as_ref().map_or(0, |s| s.targets.len());
        tracing::info!("serving iSCSI on {} ({st} targets)", l.local_addr());
        eprintln!("raidd: ready, iSCSI on {}", l.local_addr());
    }
    if let Some(l) = &listeners.http {
        let scheme = if listeners.http_tls.is_some() {
            "https"
        } else {
            "http"
        };
        tracing::info!(
            "serving the dashboard, metrics and the API on {scheme}://{}",
            l.local_addr()
        );
        eprintln!("raidd: ready, HTTP on {}", l.local_addr());
    }
    // Test harnesses wait for this line on stderr before connecting.
    eprintln!("raidd: ready, NBD on {nbd}");
}

/// The main thread's work until SIGTERM or SIGINT: the acceptors, the control socket, the
/// monitor and safe mode. Then tells the workers to stop (`stop`), and returns with all of
/// them stopped: the acceptors and the control loop dropped (which closes the channels to
/// the workers), the monitor and safe mode at the end of a round (dropped in the middle of
/// one, a superblock or bitmap write they started would still be in flight when the arrays
/// close).
async fn run_until_signal(
    ctx: &Rc<ControlCtx>,
    listeners: Listeners,
    to_workers: Vec<mpsc::UnboundedSender<Accepted>>,
    signals: Signals,
    stop: oneshot::Sender<()>,
) {
    let shared = ctx.shared.clone();
    let accept = {
        let nbd = accept::run(
            listeners.nbd,
            Proto::Nbd,
            shared.clone(),
            to_workers.clone(),
        );
        let iscsi_listener = listeners.iscsi;
        let iscsi = async move {
            match iscsi_listener {
                Some(l) => accept::run(l, Proto::Iscsi, shared, to_workers).await,
                None => future::pending().await,
            }
        };
        future::join(nbd, iscsi)
    };
    let control_task = {
        let http_tls = listeners.http_tls;
        let http = listeners.http.map(|l| {
            let compat = ctx.http_node_md_compat;
            http::serve(l, ctx.clone(), compat, http_tls)
        });
        let http = async move {
            match http {
                Some(h) => h.await,
                None => future::pending().await,
            }
        };
        future::join(control::serve(listeners.control, ctx.clone()), http)
    };
    let running = Rc::new(Cell::new(true));
    let monitor = {
        let (ctx, on) = (ctx.clone(), running.clone());
        raidd_rt::spawn_local(async move {
            while on.get() {
                ctx.life.tick(&ctx.watched).await;
                raidd_rt::time::sleep(lifecycle::TICK).await;
            }
        })
    };
    let safe_mode = {
        let (ctx, on) = (ctx.clone(), running.clone());
        raidd_rt::spawn_local(async move { lifecycle::safe_mode(&ctx.watched, &on).await })
    };
    let signal = async {
        match signals.recv().await {
            Ok(sig) => tracing::info!(
                signal = sig,
                "stopping: no new connections, draining requests"
            ),
            Err(e) => tracing::error!("waiting for signals failed ({e}); stopping"),
        }
    };
    futures::pin_mut!(accept, control_task, signal);
    let _ = future::select(future::select(accept, control_task), signal).await;
    let _ = stop.send(());
    running.set(false);
    monitor.await;
    safe_mode.await;
}

/// Waits for the workers to end (once their connections have drained), at most `limit`.
async fn drain(workers: Vec<std::thread::JoinHandle<()>>, limit: Duration) {
    let (done_tx, done_rx) = oneshot::channel::<()>();
    std::thread::spawn(move || {
        for w in workers {
            let _ = w.join();
        }
        let _ = done_tx.send(());
    });
    match future::select(done_rx, Box::pin(raidd_rt::time::sleep(limit))).await {
        Either::Left(_) => tracing::info!("all connections drained"),
        Either::Right(_) => tracing::warn!(
            "connections still busy after drain_timeout ({limit:?}): closing the arrays \
             anyway; those with writes in flight stay marked unclean"
        ),
    }
}

/// The ublk devices as `status` reports them.
fn ublk_status(devices: &[ublk::Device], not_made: &[ublk::NotMade]) -> Vec<UblkStatus> {
    let mut out: Vec<UblkStatus> = devices
        .iter()
        .filter(|d| !not_made.iter().any(|n| n.id == d.id))
        .map(|d| UblkStatus {
            device: raidd_ublk::abi::block_path(d.id),
            serves: d.name.clone(),
            size_bytes: d.size_bytes,
            taken_over: d.recovered,
            error: None,
        })
        .collect();
    out.extend(not_made.iter().map(|n| UblkStatus {
        device: raidd_ublk::abi::block_path(n.id),
        serves: n.name.clone(),
        size_bytes: 0,
        taken_over: false,
        error: Some(n.error.clone()),
    }));
    out
}
