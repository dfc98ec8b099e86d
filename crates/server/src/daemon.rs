//! The daemon's life: start (certificates, arrays, listeners, workers), the main thread's
//! loop (acceptors, control socket, monitor, safe mode, signals) and the stop.

use std::cell::Cell;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

use futures::channel::{mpsc, oneshot};
use futures::future::{self, Either, FutureExt};
use raidd_admin::exit::{AdminError, AdminResult};
use raidd_admin::status::NotStarted;
use raidd_rt::net::{TcpListener, UnixListener};
use raidd_rt::signal::Signals;

use crate::accept;
use crate::accept::ToWorker;
use crate::arrays::{self, close_all, Served};
use crate::budget::Budget;
use crate::config::Config;
use crate::control;
use crate::ctx::ControlCtx;
use crate::frontend::{Running, StartCtx, Started};
use crate::lifecycle::{self, Lifecycle, Watched};
use crate::shared::{ServerState, SharedState, Stop};
use crate::{http, link, volumes, watch, worker};

/// Descriptors kept for everything but client connections (listeners, the control socket
/// and its clients, rings and eventfds) besides two per member.
const FD_RESERVE: u64 = 64;

/// The daemon's own listening sockets (each frontend binds its own).
struct Listeners {
    control: UnixListener,
    http: Option<TcpListener>,
    /// `[http.tls]`: the HTTP listener speaks HTTPS only.
    http_tls: Option<Arc<rustls::ServerConfig>>,
    /// Who may read and act over HTTP.
    http_auth: Option<Rc<crate::http_auth::Auth>>,
}

/// Serves until a signal arrives, then stops.
/// `path`: the file the configuration came from (read again on SIGHUP).
pub async fn serve(config: Config, path: Option<PathBuf>, signals: Signals) -> AdminResult {
    let (http_tls, http_auth) = http_security(&config)?;
    config.frontends.preflight()?;
    let (served, not_started) = arrays::assemble_all(&config).await?;
    let started_config = config.clone();
    let config = without_not_started(config, &not_started);
    let resolved = volumes::resolve(config, &served).await;
    let config = resolved.config;
    let shared = shared_state(&config, members_open(&served, &config));
    let ctx = StartCtx {
        shared: &shared,
        threads: config.threads,
    };
    let mut listeners = match bind(&config) {
        Ok(l) => l,
        Err(e) => {
            close_all(&served).await;
            return Err(e);
        }
    };
    listeners.http_tls = http_tls;
    listeners.http_auth = http_auth;
    let started = match config.frontends.start(resolved.serving, &ctx) {
        Ok(s) => s,
        Err(e) => {
            close_all(&served).await;
            return Err(e);
        }
    };
    let frontends: Vec<Arc<dyn Running>> = started.iter().map(|s| s.running.clone()).collect();
    let life = lifecycle(&config, &served);
    let watched = watched(&served);
    // The channels to the workers, made before them: the control context hands devices
    // added while serving to the workers through them.
    let (to_workers, from_main): (Vec<_>, Vec<_>) = (0..config.threads)
        .map(|_| mpsc::unbounded::<ToWorker>())
        .unzip();
    let ctx = Rc::new(ControlCtx {
        served,
        not_started,
        shared: shared.clone(),
        frontends: frontends.clone(),
        threads: config.threads,
        to_workers,
        life,
        watched,
        scan: config.scan.clone(),
        member_timeout: config.limits.member_timeout,
        http_node_md_compat: config.http.as_ref().is_some_and(|h| h.node_md_compat),
        volumes: resolved.volumes,
        live: crate::ctx::Live {
            path,
            started: started_config,
            frontends: std::cell::RefCell::new(config.frontends.clone()),
            changing: futures::lock::Mutex::new(()),
        },
    });
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let stop: Stop = stop_rx.shared();
    let workers = match start_workers(&config, from_main, &shared, &stop, &frontends) {
        Ok(w) => w,
        Err(e) => {
            close_all(&ctx.served).await;
            return Err(e);
        }
    };
    for f in &frontends {
        f.started().await;
    }
    announce(&config, &shared, &listeners, &frontends);
    crate::service::ready(&format!(
        "serving {} arrays, {} not started",
        ctx.served.len(),
        ctx.not_started.len()
    ));
    run_until_signal(&ctx, listeners, started, signals, stop_tx).await;
    crate::service::stopping();
    // The frontends first: what they serve finishes its requests while the workers still
    // serve (ublk's devices).
    for f in &frontends {
        f.stopping().await;
    }
    ctx.life.stop(&ctx.watched).await;
    drain(workers, config.limits.drain_timeout).await;
    for f in &frontends {
        f.stopped().await;
    }
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

/// The members open (those found by UUID are known only once assembled) and the pool's
/// spares: descriptors the connections cannot have.
fn members_open(served: &[Served], config: &Config) -> usize {
    served
        .iter()
        .flat_map(|s| s.session.arrays.iter())
        .map(|a| a.report.len())
        .sum::<usize>()
        + config.spares.len()
}

/// `[http]`'s certificate and token, loaded before any array is touched: one that cannot be
/// used stops the start there.
type HttpSecurity = (
    Option<Arc<rustls::ServerConfig>>,
    Option<Rc<crate::http_auth::Auth>>,
);

fn http_security(config: &Config) -> AdminResult<HttpSecurity> {
    let Some(h) = &config.http else {
        return Ok((None, None));
    };
    let tls = match &h.tls {
        Some(t) => Some(link::server_config(&t.certificate, &t.key).map_err(AdminError::usage)?),
        None => None,
    };
    let token = h
        .token_file
        .as_deref()
        .map(crate::http_auth::load_token)
        .transpose()
        .map_err(AdminError::usage)?;
    Ok((
        tls,
        Some(Rc::new(crate::http_auth::Auth::new(token, h.open_reads))),
    ))
}

/// The configuration without the arrays that did not start: their exports and LUNs go
/// with them, and indices into the configuration's arrays match the served ones.
fn without_not_started(config: Config, not_started: &[NotStarted]) -> Config {
    let gone: Vec<usize> = not_started
        .iter()
        .filter_map(|n| config.arrays.iter().position(|a| a.name == n.name))
        .collect();
    debug_assert_eq!(
        gone.len(),
        not_started.len(),
        "each array not started is configured"
    );
    let before = config.arrays.len();
    let (config, notes) = config.without_arrays(&gone);
    debug_assert_eq!(
        config.arrays.len() + gone.len(),
        before,
        "the started arrays stay"
    );
    for n in notes {
        tracing::warn!("{n}");
    }
    config
}

fn bind(config: &Config) -> AdminResult<Listeners> {
    let http = config.http.as_ref().map(http::bind).transpose()?;
    let control = control::bind(&config.control_socket)?;
    Ok(Listeners {
        control,
        http,
        http_tls: None,
        http_auth: None,
    })
}

/// `max_connections`, lowered to what the descriptor limit leaves room for besides the
/// `members` open. The soft limit is raised to the hard one first.
fn connection_limit(config: &Config, members: usize) -> usize {
    let wanted = config.limits.max_connections;
    let Some(fds) = raise_fd_limit() else {
        return wanted;
    };
    let others = FD_RESERVE + 2 * members as u64 + 4 * config.threads as u64;
    let room = usize::try_from(fds.saturating_sub(others)).unwrap_or(usize::MAX);
    if room >= wanted {
        return wanted;
    }
    let limit = room.max(1);
    debug_assert!(limit <= wanted, "only ever lowered");
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

/// What every frontend's connections share: the budget (less what the frontends hold for
/// their life), the time limits and the connection count.
fn shared_state(config: &Config, members: usize) -> SharedState {
    let l = &config.limits;
    Arc::new(ServerState {
        budget: Arc::new(Budget::new(
            config.connection_buffer_memory(),
            crate::config::MAX_REQUEST,
        )),
        limits: watch::Limits {
            request: l.request_timeout,
            send: l.send_timeout,
            idle: None,
        },
        connections: AtomicUsize::new(0),
        max_connections: connection_limit(config, members),
        beats: crate::shared::Beats::new(config.threads),
    })
}

/// The monitor, rebuilds and spare pool of the served arrays.
fn lifecycle(config: &Config, served: &[Served]) -> Rc<Lifecycle> {
    Rc::new(Lifecycle::new(
        config.sync,
        config.program.clone(),
        arrays::open_pool(config, served),
        config.limits.member_timeout,
    ))
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

/// Starts a worker thread per channel in `from_main`.
fn start_workers(
    config: &Config,
    from_main: Vec<mpsc::UnboundedReceiver<ToWorker>>,
    shared: &SharedState,
    stop: &Stop,
    frontends: &[Arc<dyn Running>],
) -> AdminResult<Vec<std::thread::JoinHandle<()>>> {
    let mut workers = Vec::new();
    let poll = config.poll;
    debug_assert!(
        config.threads > 0 && from_main.len() == config.threads,
        "a channel per worker, at least one"
    );
    for (i, rx) in from_main.into_iter().enumerate() {
        let (shared, stop, frontends) = (shared.clone(), stop.clone(), frontends.to_vec());
        let handle = std::thread::Builder::new()
            .name(format!("raidd-worker-{i}"))
            .spawn(move || {
                raidd_rt::set_poll(poll);
                raidd_rt::block_on(worker::run(i, rx, shared, stop, frontends));
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
    Ok(workers)
}

fn announce(
    config: &Config,
    shared: &SharedState,
    listeners: &Listeners,
    frontends: &[Arc<dyn Running>],
) {
    tracing::info!(
        "{} worker threads, at most {} connections, {} of buffer memory; control socket {}",
        config.threads,
        shared.max_connections,
        raidd_admin::size::human(shared.budget.limit()),
        config.control_socket.display()
    );
    for f in frontends {
        f.announce();
    }
    let mut ready: Vec<String> = frontends.iter().filter_map(|f| f.ready_line()).collect();
    // The first frontend's line comes last: scripts and test harnesses wait for "raidd:
    // ready, NBD on" as the sign that everything listens, and read the others' addresses
    // from the lines before it.
    if !ready.is_empty() {
        ready.rotate_left(1);
    }
    let (last, others) = ready
        .split_last()
        .map_or((None, &[][..]), |(l, o)| (Some(l), o));
    for line in others {
        eprintln!("raidd: ready, {line}");
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
    if let Some(line) = last {
        eprintln!("raidd: ready, {line}");
    }
}

/// The main thread's work until SIGTERM or SIGINT: the acceptors, the control socket, the
/// monitor and safe mode. Then tells the workers to stop (`stop`), and returns with all of
/// them stopped: the acceptors and the control loop dropped (the workers leave their
/// channels at the stop), the monitor and safe mode at the end of a round (dropped in the
/// middle of one, a superblock or bitmap write they started would still be in flight when
/// the arrays close).
async fn run_until_signal(
    ctx: &Rc<ControlCtx>,
    listeners: Listeners,
    started: Vec<Started>,
    signals: Signals,
    stop: oneshot::Sender<()>,
) {
    let shared = ctx.shared.clone();
    // An acceptor per frontend that listens; they never end by themselves.
    let accept = future::join_all(started.into_iter().filter_map(|s| {
        let l = s.listener?;
        Some(accept::run(
            l,
            s.running,
            shared.clone(),
            ctx.to_workers.clone(),
        ))
    }))
    .then(|_| future::pending::<()>());
    let control_task = {
        let http_tls = listeners.http_tls;
        let http_auth = listeners.http_auth;
        let http = listeners.http.map(|l| {
            let compat = ctx.http_node_md_compat;
            let auth =
                http_auth.unwrap_or_else(|| Rc::new(crate::http_auth::Auth::new(None, true)));
            http::serve(l, ctx.clone(), compat, http_tls, auth)
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
        loop {
            match signals.recv().await {
                Ok(libc::SIGHUP) => {
                    tracing::info!("SIGHUP: reading the config again");
                    crate::service::reloading();
                    crate::reload::sighup(ctx).await;
                    crate::service::ready("serving; the config was read again");
                }
                Ok(sig) => {
                    tracing::info!(
                        signal = sig,
                        "stopping: no new connections, draining requests"
                    );
                    break;
                }
                Err(e) => {
                    tracing::error!("waiting for signals failed ({e}); stopping");
                    break;
                }
            }
        }
    };
    let watchdog = crate::service::watchdog_interval().map(|i| {
        tracing::info!(interval = ?i, "pinging systemd's watchdog");
        raidd_rt::spawn_local(crate::service::watchdog(i, shared.clone()))
    });
    futures::pin_mut!(accept, control_task, signal);
    let _ = future::select(future::select(accept, control_task), signal).await;
    drop(watchdog);
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
