//! `raidd serve`: the storage daemon. It assembles the configured arrays, serves their
//! exports over NBD from a pool of worker threads (each with its own executor and
//! io_uring), answers the control socket, and on SIGTERM/SIGINT stops accepting, drains
//! in-flight requests, flushes the members and marks the superblocks clean.
//!
//! Threads: the main thread runs the acceptor, the control socket and the signal wait;
//! accepted connections are handed round-robin to the workers, and a connection stays on
//! its worker for its whole life. Arrays are shared (`Arc<Array>`); nothing on the data path
//! takes a lock across threads except the engine's per-stripe locks.

pub mod config;
pub mod control;
mod iscsi;
mod lifecycle;
mod link;
mod nbd;
mod outq;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use futures::channel::{mpsc, oneshot};
use futures::future::{self, Either, FutureExt, Shared};
use futures::StreamExt;
use raidd_engine::{Array, ArrayState, Member, SlotState};
use raidd_rt::net::{Stream, TcpListener, UnixListener};
use raidd_rt::signal::Signals;

use crate::cmd::detail::Gathered;
use crate::exit::{CliError, CliResult, Exit};
use crate::members::Access;
use crate::session::{self, Session};
use crate::size;
use config::{ArrayConfig, Config};
use control::{Request, Response};
use lifecycle::{Lifecycle, PoolSpare, Watched};

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// The configuration file (TOML): arrays, exports, listening address.
    #[arg(short, long, value_name = "FILE")]
    pub config: PathBuf,
    /// The control socket (overrides the config's `control_socket`).
    #[arg(long, value_name = "PATH")]
    pub control: Option<PathBuf>,
}

/// Resolves when the daemon is stopping; cheap to clone into every task on every thread.
pub type Stop = Shared<oneshot::Receiver<()>>;

/// One export as the connections see it.
#[derive(Debug)]
pub struct Export {
    pub name: String,
    pub description: String,
    pub array: Arc<Array>,
    pub read_only: bool,
    /// Connections now open on it (for `status`).
    pub connections: AtomicUsize,
    /// Requests served (for `status`).
    pub requests: AtomicU64,
    /// WRITE payload bytes the server copied (out of a connection's receive-ahead buffer,
    /// when they arrived with their header); all others go from the socket straight into
    /// the buffer the members are written from (for `status`, beside the engine's own
    /// `counters.copied_bytes`).
    pub copied_bytes: AtomicU64,
}

/// What every worker shares.
#[derive(Debug)]
pub struct ServerState {
    pub exports: Vec<Export>,
    /// What the NBD handshake offers (the same exports, as the protocol sees them).
    pub offer: raidd_nbd::Offer,
    /// For STARTTLS, when configured.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    pub max_in_flight: usize,
    /// The iSCSI target, when configured.
    pub iscsi: Option<Arc<iscsi::IscsiState>>,
}

/// Which protocol an accepted connection speaks.
#[derive(Clone, Copy, Debug)]
enum Proto {
    Nbd,
    Iscsi,
}

pub type SharedState = Arc<ServerState>;

/// How long a stopping daemon waits for connections to finish their requests before it
/// closes them anyway.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

pub fn run(args: ServeArgs, _json: bool) -> CliResult {
    let mut config = Config::load(&args.config).map_err(CliError::usage)?;
    if let Some(c) = args.control {
        config.control_socket = c;
    }
    // Before any ring exists, so that every thread's ring registers it.
    if config.registered_buffers > 0 {
        if let Err(e) = raidd_rt::register_arena(config.registered_buffers) {
            tracing::warn!("registered_buffers: {e}; member I/O will not use fixed buffers");
        }
    }
    if raidd_rt::backend() != raidd_rt::Backend::IoUring {
        return Err(CliError::new(
            Exit::Unsupported,
            "raidd serve needs io_uring, which this system refuses (seccomp? RAIDD_NO_URING?)",
        ));
    }
    // Before any thread starts, so every thread inherits the blocked mask.
    let signals = Signals::new(&[libc::SIGTERM, libc::SIGINT])
        .map_err(|e| CliError::io("cannot set up signal handling", &e))?;
    raidd_rt::block_on(serve(config, signals))
}

struct Served {
    config: ArrayConfig,
    session: Session,
}

/// The array UUID the first readable superblock among `paths` names.
async fn uuid_of(paths: &[PathBuf]) -> Option<[u8; 16]> {
    for p in paths {
        let Ok(m) = crate::members::open(p, Access::Inspect) else {
            continue;
        };
        if let Ok(sb) = raidd_engine::assemble::examine(&*m).await {
            return Some(sb.set_uuid);
        }
    }
    None
}

/// Pool spares that carry a configured array's superblock (claimed before a restart) go to
/// that array's assembly, which decides whether they are current; returns the extra
/// members per array.
async fn claimed_spares(config: &Config) -> Vec<Vec<PathBuf>> {
    let mut extra = vec![Vec::new(); config.arrays.len()];
    let mut uuids = Vec::new();
    for a in &config.arrays {
        uuids.push(uuid_of(&a.members).await);
    }
    for s in &config.spares {
        let Some(u) = uuid_of(std::slice::from_ref(&s.path)).await else {
            continue;
        };
        if let Some(i) = uuids.iter().position(|x| *x == Some(u)) {
            tracing::info!(
                array = %config.arrays[i].name,
                spare = %s.path.display(),
                "the spare holds a member of this array: assembling it with the array"
            );
            extra[i].push(s.path.clone());
        }
    }
    extra
}

/// The pool: configured spares that no array took at assembly.
fn open_pool(config: &Config, served: &[Served]) -> Vec<PoolSpare> {
    let used: std::collections::HashSet<String> = served
        .iter()
        .flat_map(|s| s.session.arrays.iter())
        .flat_map(|a| a.report.iter())
        .filter(|r| {
            matches!(
                r.decision,
                raidd_engine::assemble::Decision::Active { .. }
                    | raidd_engine::assemble::Decision::Recovering { .. }
                    | raidd_engine::assemble::Decision::Spare
            )
        })
        .map(|r| r.member.clone())
        .collect();
    let mut pool = Vec::new();
    for s in &config.spares {
        if used.contains(&s.path.display().to_string()) {
            continue;
        }
        match crate::members::open(&s.path, Access::ReadWrite) {
            Ok(member) => pool.push(PoolSpare {
                path: s.path.clone(),
                member,
                group: s.group.clone(),
            }),
            Err(e) => tracing::warn!(spare = %s.path.display(), "spare not usable: {}", e.message),
        }
    }
    pool
}

/// An array of the configuration that could not be started, and why.
struct NotStarted {
    name: String,
    error: String,
}

/// Assembles every configured array. One that cannot be started (refused as dirty and
/// degraded, too few members, bad metadata) is logged and left out with its exports, so
/// the others still serve; only when none starts is that an error (the first one's).
async fn assemble_all(config: &Config) -> CliResult<(Vec<Served>, Vec<NotStarted>)> {
    let extra = claimed_spares(config).await;
    let mut served = Vec::new();
    let mut refused: Vec<(NotStarted, CliError)> = Vec::new();
    for (a, extra) in config.arrays.iter().zip(extra) {
        let access = if a.read_only {
            Access::ReadOnly
        } else {
            Access::ReadWrite
        };
        let mut paths = a.members.clone();
        paths.extend(extra);
        let session = match session::assemble(&paths, access, true, a.start()).await {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(array = %a.name, "not started: {}", e.message);
                eprintln!("raidd: array {} not started: {}", a.name, e.message);
                let not = NotStarted {
                    name: a.name.clone(),
                    error: e.message.clone(),
                };
                let e = CliError::new(e.exit, format!("array {}: {}", a.name, e.message));
                refused.push((not, e));
                continue;
            }
        };
        for u in &session.unavailable {
            tracing::warn!(array = %a.name, member = %u.member, "member not used: {}", u.error);
        }
        for asm in &session.arrays {
            for r in &asm.report {
                tracing::info!(array = %a.name, member = %r.member, events = r.events, "{}", r.decision);
            }
        }
        for asm in &session.arrays {
            asm.array.set_stripe_cache(a.stripe_cache, a.gather);
            asm.array.set_write_alone(a.write_alone);
        }
        let root = session.root();
        if root.needs_resync() {
            tracing::warn!(
                array = %a.name,
                "the array was not shut down cleanly: parity/mirrors may disagree where writes were in flight; resyncing"
            );
        }
        if root.is_degraded() {
            let missing = root.slots_not_in_sync();
            tracing::warn!(array = %a.name, "running degraded: slots {missing:?} are not in sync");
        }
        tracing::info!(
            array = %a.name,
            level = %root.geometry().level(),
            size = root.size_bytes(),
            read_only = root.is_read_only(),
            "array assembled"
        );
        served.push(Served {
            config: a.clone(),
            session,
        });
    }
    if served.is_empty() {
        if let Some((_, first)) = refused.into_iter().next() {
            return Err(first);
        }
        return Ok((served, Vec::new()));
    }
    Ok((served, refused.into_iter().map(|(n, _)| n).collect()))
}

async fn close_all(served: &[Served]) -> bool {
    let mut ok = true;
    for s in served {
        match s.session.close().await {
            Ok(()) => tracing::info!(array = %s.config.name, "array closed cleanly"),
            Err(e) => {
                ok = false;
                tracing::error!(array = %s.config.name, "closing the array failed: {}", e.message);
            }
        }
    }
    ok
}

fn bind_control(path: &std::path::Path) -> CliResult<UnixListener> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| CliError::io(format!("cannot create {}", dir.display()), &e))?;
        }
    }
    // A socket file left by a daemon that died: remove it only if nobody answers on it.
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(CliError::new(
                Exit::Conflict,
                format!("another daemon answers on {}", path.display()),
            ));
        }
        std::fs::remove_file(path)
            .map_err(|e| CliError::io(format!("cannot remove stale {}", path.display()), &e))?;
    }
    // Created with a umask that keeps others out from the first moment, then set exactly.
    // SAFETY: umask only changes this process's file-creation mask.
    let old = unsafe { libc::umask(0o077) };
    let listener = UnixListener::bind(path);
    // SAFETY: as above, restoring the previous mask.
    unsafe { libc::umask(old) };
    let listener =
        listener.map_err(|e| CliError::io(format!("cannot listen on {}", path.display()), &e))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| CliError::io(format!("cannot restrict {}", path.display()), &e))?;
    Ok(listener)
}

async fn serve(config: Config, signals: Signals) -> CliResult {
    // Certificates first: a bad one should fail before any array is touched.
    let tls = match &config.nbd.tls {
        Some(t) => Some(link::server_config(&t.certificate, &t.key).map_err(CliError::usage)?),
        None => None,
    };
    let (served, not_started) = assemble_all(&config).await?;
    // The arrays that did not start leave with their exports and LUNs; indices into the
    // configuration's arrays now match `served`.
    let config = {
        let gone: Vec<usize> = not_started
            .iter()
            .filter_map(|n| config.arrays.iter().position(|a| a.name == n.name))
            .collect();
        let (config, notes) = config.without_arrays(&gone);
        for n in notes {
            tracing::warn!("{n}");
        }
        config
    };
    let pool = open_pool(&config, &served);
    let life = Rc::new(Lifecycle::new(config.sync, config.program.clone(), pool));
    let watched: Vec<Watched> = served
        .iter()
        .flat_map(|s| {
            s.session.arrays.iter().map(|a| Watched {
                array: a.array.clone(),
                group: s.config.spare_group.clone(),
                safe_mode: s.config.safe_mode_delay,
            })
        })
        .collect();
    let exports: Vec<Export> = config
        .exports
        .iter()
        .map(|e| Export {
            name: e.name.clone(),
            description: e.description.clone(),
            array: served[e.array].session.root().clone(),
            read_only: e.read_only || served[e.array].session.root().is_read_only(),
            connections: AtomicUsize::new(0),
            requests: AtomicU64::new(0),
            copied_bytes: AtomicU64::new(0),
        })
        .collect();
    let offer = raidd_nbd::Offer {
        exports: exports
            .iter()
            .map(|e| {
                let block = e.array.block_size();
                raidd_nbd::ExportInfo {
                    name: e.name.clone(),
                    description: e.description.clone(),
                    size: e.array.size_bytes(),
                    flags: nbd::export_flags(e.read_only, e.array.info().rotational),
                    min_block: block,
                    preferred_block: block.max(4096),
                    max_block: nbd::MAX_PAYLOAD,
                }
            })
            .collect(),
        default_export: (exports.len() == 1).then_some(0),
        tls: tls.is_some(),
        tls_required: config.nbd.tls.as_ref().is_some_and(|t| t.require),
    };
    let iscsi_listener = match &config.iscsi {
        None => None,
        Some(ic) => match TcpListener::bind(ic.listen) {
            Ok(l) => Some(l),
            Err(e) => {
                close_all(&served).await;
                return Err(CliError::io(
                    format!("cannot listen for iSCSI on {}", ic.listen),
                    &e,
                ));
            }
        },
    };
    let iscsi_state = match (&config.iscsi, &iscsi_listener) {
        (Some(ic), Some(l)) => {
            let roots: Vec<Arc<Array>> = served.iter().map(|s| s.session.root().clone()).collect();
            Some(Arc::new(iscsi::state(ic, &roots, l.local_addr())))
        }
        _ => None,
    };
    let shared: SharedState = Arc::new(ServerState {
        exports,
        offer,
        tls,
        max_in_flight: config.nbd.max_in_flight,
        iscsi: iscsi_state,
    });

    let listener = match TcpListener::bind(config.nbd.listen) {
        Ok(l) => l,
        Err(e) => {
            close_all(&served).await;
            return Err(CliError::io(
                format!("cannot listen for NBD on {}", config.nbd.listen),
                &e,
            ));
        }
    };
    let control = match bind_control(&config.control_socket) {
        Ok(c) => c,
        Err(e) => {
            close_all(&served).await;
            return Err(e);
        }
    };
    let listen_addr = listener.local_addr();

    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let stop: Stop = stop_rx.shared();
    let mut to_workers = Vec::new();
    let mut workers = Vec::new();
    let poll = config.poll;
    for i in 0..config.threads {
        let (tx, rx) = mpsc::unbounded::<(Proto, Stream)>();
        to_workers.push(tx);
        let shared = shared.clone();
        let stop = stop.clone();
        let handle = std::thread::Builder::new()
            .name(format!("raidd-worker-{i}"))
            .spawn(move || {
                raidd_rt::set_poll(poll);
                raidd_rt::block_on(worker(rx, shared, stop));
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
            .map_err(|e| CliError::io("cannot start a worker thread", &e))?;
        workers.push(handle);
    }
    tracing::info!(
        "serving NBD on {listen_addr} ({} exports, {} worker threads); control socket {}",
        shared.exports.len(),
        config.threads,
        config.control_socket.display()
    );
    if let Some(l) = &iscsi_listener {
        let st = shared.iscsi.as_ref().map_or(0, |s| s.targets.len());
        tracing::info!("serving iSCSI on {} ({st} targets)", l.local_addr());
        eprintln!("raidd: ready, iSCSI on {}", l.local_addr());
    }
    // Test harnesses wait for this line on stderr before connecting.
    eprintln!("raidd: ready, NBD on {listen_addr}");

    let ctx = Rc::new(ControlCtx {
        served,
        not_started,
        shared: shared.clone(),
        listen: listen_addr.to_string(),
        threads: config.threads,
        life,
        watched,
    });
    let accept = {
        let nbd = accept_loop(listener, Proto::Nbd, to_workers.clone());
        let iscsi = async move {
            match iscsi_listener {
                Some(l) => accept_loop(l, Proto::Iscsi, to_workers).await,
                None => future::pending().await,
            }
        };
        future::join(nbd, iscsi)
    };
    let control_task = control_loop(control, ctx.clone());
    // The monitor and safe mode run as tasks of their own that stop between rounds: dropped
    // in the middle of one, a superblock or bitmap write they started would still be in
    // flight when the arrays close.
    let running = Rc::new(std::cell::Cell::new(true));
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
    // The acceptor and the control loop run until a signal arrives; dropping them stops
    // accepting and closes the channels to the workers.
    let _ = future::select(future::select(accept, control_task), signal).await;
    let _ = stop_tx.send(());
    running.set(false);
    monitor.await;
    safe_mode.await;
    // Background passes stop (a recovery checkpoints where it is) before the arrays close.
    ctx.life.stop(&ctx.watched).await;

    // The workers end once their connections have drained.
    let (done_tx, done_rx) = oneshot::channel::<()>();
    std::thread::spawn(move || {
        for w in workers {
            let _ = w.join();
        }
        let _ = done_tx.send(());
    });
    match future::select(done_rx, Box::pin(raidd_rt::time::sleep(DRAIN_TIMEOUT))).await {
        Either::Left(_) => tracing::info!("all connections drained"),
        Either::Right(_) => tracing::warn!(
            "connections still busy after {DRAIN_TIMEOUT:?}; closing the arrays anyway"
        ),
    }
    let _ = std::fs::remove_file(&config.control_socket);
    let ok = close_all(&ctx.served).await;
    if ok {
        tracing::info!("stopped");
        Ok(())
    } else {
        Err(CliError::failure(
            "stopped, but not every array closed cleanly (see the log)",
        ))
    }
}

async fn accept_loop(
    listener: TcpListener,
    proto: Proto,
    workers: Vec<mpsc::UnboundedSender<(Proto, Stream)>>,
) {
    let mut next = 0usize;
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                tracing::debug!(%peer, ?proto, "connection");
                if workers[next % workers.len()]
                    .unbounded_send((proto, stream))
                    .is_err()
                {
                    tracing::error!("a worker thread has gone; connection dropped");
                }
                next = next.wrapping_add(1);
            }
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!("accept failed: {e}");
                raidd_rt::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn worker(mut rx: mpsc::UnboundedReceiver<(Proto, Stream)>, shared: SharedState, stop: Stop) {
    let mut conns: Vec<(raidd_rt::JoinHandle<()>, Stream)> = Vec::new();
    loop {
        let next = rx.next();
        let stopping = stop.clone();
        futures::pin_mut!(next);
        match future::select(next, stopping).await {
            Either::Left((Some((proto, stream)), _)) => {
                conns.retain(|(h, _)| !h.is_finished());
                let handle = match (proto, &shared.iscsi) {
                    (Proto::Iscsi, Some(st)) => raidd_rt::spawn_local(iscsi::serve_connection(
                        stream.clone(),
                        st.clone(),
                        stop.clone(),
                    )),
                    _ => raidd_rt::spawn_local(nbd::serve_connection(
                        stream.clone(),
                        shared.clone(),
                        stop.clone(),
                    )),
                };
                conns.push((handle, stream));
            }
            Either::Left((None, _)) | Either::Right(_) => break,
        }
    }
    // Stopping: no new requests. Shutting the read side ends each connection's wait for its
    // next request; requests already taken finish and their replies still go out.
    for (h, s) in &conns {
        if !h.is_finished() {
            let _ = s.shutdown(std::net::Shutdown::Read);
        }
    }
    for (h, _) in conns {
        h.await;
    }
}

struct ControlCtx {
    served: Vec<Served>,
    /// Configured arrays that could not be started, and why.
    not_started: Vec<NotStarted>,
    shared: SharedState,
    listen: String,
    threads: usize,
    life: Rc<Lifecycle>,
    /// Every array of every configured array (inner ones of nested arrays too).
    watched: Vec<Watched>,
}

async fn control_loop(listener: UnixListener, ctx: Rc<ControlCtx>) {
    loop {
        match listener.accept().await {
            Ok(stream) => {
                let ctx = ctx.clone();
                raidd_rt::spawn_local(async move {
                    if let Err(e) = control_connection(stream, &ctx).await {
                        tracing::debug!("control connection: {e}");
                    }
                });
            }
            Err(e) => {
                tracing::warn!("control socket accept failed: {e}");
                raidd_rt::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn control_connection(stream: Stream, ctx: &ControlCtx) -> std::io::Result<()> {
    // One request line, bounded; a client that sends more or never ends its line is cut off.
    let read_line = async {
        let mut line = Vec::new();
        let mut buf = vec![0u8; 4096];
        loop {
            let (r, b) = stream.read(buf).await;
            buf = b;
            let n = r?;
            if n == 0 {
                break;
            }
            line.extend_from_slice(&buf[..n]);
            if line.contains(&b'\n') || line.len() > control::MAX_REQUEST {
                break;
            }
        }
        Ok::<Vec<u8>, std::io::Error>(line)
    };
    let timeout = raidd_rt::time::sleep(Duration::from_secs(10));
    futures::pin_mut!(read_line, timeout);
    let line = match future::select(read_line, timeout).await {
        Either::Left((r, _)) => r?,
        Either::Right(_) => return Ok(()),
    };
    let resp = if line.len() > control::MAX_REQUEST {
        Response::err(Exit::Usage, "control request too long")
    } else {
        let end = line.iter().position(|&b| b == b'\n').unwrap_or(line.len());
        match control::parse_request(&line[..end]) {
            Ok(req) => answer(ctx, req).await,
            Err(e) => Response::err(Exit::Usage, e),
        }
    };
    let (r, _) = stream.write_all(control::encode_response(&resp)).await;
    r
}

async fn answer(ctx: &ControlCtx, req: Request) -> Response {
    let r = match req {
        Request::Status => return status(ctx).await,
        Request::Detail { array } => detail(ctx, &array).await,
        Request::Fail { array, member } => fail(ctx, &array, &member).await,
        Request::Remove { array, member } => remove(ctx, &array, &member).await,
        Request::Add { array, member } => add(ctx, &array, &member).await,
        Request::Replace {
            array,
            member,
            with,
        } => replace(ctx, &array, &member, &with).await,
        Request::Check { array } => scrub(ctx, &array, raidd_engine::SyncKind::Check),
        Request::Repair { array } => scrub(ctx, &array, raidd_engine::SyncKind::Repair),
        Request::Idle { array } => idle(ctx, &array),
        Request::SpareAdd { member, group } => {
            if let Some(g) = &group {
                if let Err(e) = config::check_spare_group(g) {
                    return Response::err(Exit::Usage, e);
                }
            }
            if let Some(owner) = owner_of(ctx, &member.display().to_string()) {
                return Response::err(
                    Exit::Conflict,
                    format!("{} is a member of {owner}", member.display()),
                );
            }
            ctx.life.pool_add(&member, group).map(|()| {
                (
                    format!("{} is in the spare pool\n", member.display()),
                    serde_json::json!({ "spare": member }),
                )
            })
        }
        Request::SpareRemove { member } => ctx.life.pool_remove(&member).map(|()| {
            (
                format!("{} left the spare pool\n", member.display()),
                serde_json::json!({ "spare": member }),
            )
        }),
    };
    match r {
        Ok((text, json)) => Response::ok(text, json),
        Err(e) => Response::err(e.exit, e.message),
    }
}

type Answer = CliResult<(String, serde_json::Value)>;

fn served<'a>(ctx: &'a ControlCtx, array: &str) -> CliResult<&'a Served> {
    ctx.served
        .iter()
        .find(|s| s.config.name == array)
        .ok_or_else(|| {
            if let Some(n) = ctx.not_started.iter().find(|n| n.name == array) {
                return CliError::new(
                    Exit::Conflict,
                    format!("array {array:?} was not started: {}", n.error),
                );
            }
            let names: Vec<&str> = ctx.served.iter().map(|s| s.config.name.as_str()).collect();
            CliError::new(
                Exit::NotFound,
                format!("no array named {array:?} (arrays: {})", names.join(", ")),
            )
        })
}

async fn detail(ctx: &ControlCtx, array: &str) -> Answer {
    let s = served(ctx, array)?;
    let g = Gathered::new(&s.session.arrays, s.session.root).await;
    let json =
        serde_json::to_value(g.json(&s.session.unavailable)).unwrap_or(serde_json::Value::Null);
    Ok((g.text(&s.session.unavailable), json))
}

/// Whether two member names denote the same file (names are paths as given at opening).
fn same_member(name: &str, given: &str) -> bool {
    if name == given {
        return true;
    }
    match (std::fs::canonicalize(name), std::fs::canonicalize(given)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// The array (of a configured array's arrays, inner ones included) that holds `member` in
/// a slot, as a failed member out of its slot, or as its spare; with the engine's name.
fn holder(s: &Served, member: &str) -> Option<(Arc<Array>, String)> {
    s.session.arrays.iter().find_map(|a| {
        let name = a
            .array
            .member_names()
            .into_iter()
            .find(|n| same_member(n, member))?;
        Some((a.array.clone(), name))
    })
}

/// The configured array or the pool that uses `member`, if any.
fn owner_of(ctx: &ControlCtx, member: &str) -> Option<String> {
    for s in &ctx.served {
        if holder(s, member).is_some() {
            return Some(format!("array {}", s.config.name));
        }
    }
    ctx.life
        .pool_names()
        .into_iter()
        .any(|(p, _)| same_member(&p, member))
        .then(|| "the spare pool".to_string())
}

/// Whether the configured array lists `member` (so the next start assembles it).
fn in_config(s: &Served, member: &str) -> bool {
    s.config
        .members
        .iter()
        .any(|p| same_member(&p.display().to_string(), member))
}

fn not_a_member(array: &str, member: &str) -> CliError {
    CliError::new(
        Exit::NotFound,
        format!("{member} is not a member of {array}"),
    )
}

async fn fail(ctx: &ControlCtx, array: &str, member: &str) -> Answer {
    let s = served(ctx, array)?;
    let (a, name) = holder(s, member).ok_or_else(|| not_a_member(array, member))?;
    let role = a.role_of(&name).ok_or_else(|| {
        CliError::new(
            Exit::Conflict,
            format!("{name} is not working in {array} (already failed, or a spare)"),
        )
    })?;
    a.fail_member(role).await?;
    Ok((
        format!("{name} failed in {array}; the array runs degraded\n"),
        serde_json::json!({ "array": array, "member": name, "role": role }),
    ))
}

async fn remove(ctx: &ControlCtx, array: &str, member: &str) -> Answer {
    let s = served(ctx, array)?;
    let (a, name) = holder(s, member).ok_or_else(|| not_a_member(array, member))?;
    a.remove_member(&name).await?;
    Ok((
        format!("{name} removed from {array}\n"),
        serde_json::json!({ "array": array, "member": name }),
    ))
}

async fn add(ctx: &ControlCtx, array: &str, member: &std::path::Path) -> Answer {
    let s = served(ctx, array)?;
    let text = member.display().to_string();
    if let Some(owner) = owner_of(ctx, &text) {
        return Err(CliError::new(
            Exit::Conflict,
            format!("{text} is already used by {owner}"),
        ));
    }
    // The array that needs it most: an inner one with a free slot first (nested arrays),
    // else the first with redundancy, where it waits as a spare.
    let redundant: Vec<&raidd_engine::assemble::Assembled> = s
        .session
        .arrays
        .iter()
        .filter(|a| a.array.can_scrub() && !a.array.is_read_only())
        .collect();
    let target = redundant
        .iter()
        .find(|a| {
            (0..a.array.geometry().members()).any(|r| {
                matches!(
                    a.array.slot_state(r),
                    SlotState::Missing | SlotState::Faulty
                )
            })
        })
        .or(redundant.first())
        .ok_or_else(|| {
            CliError::usage(format!(
                "{array} has no redundancy (or is read-only): there is nothing to add a member to"
            ))
        })?;
    let m = crate::members::open(member, Access::ReadWrite)?;
    let added = target.array.add_member(m).await?;
    let by_bitmap = match added {
        raidd_engine::Added::Recovering(r) => target.array.recovering_by_bitmap(r),
        raidd_engine::Added::Spare => false,
    };
    let mut out = match added {
        raidd_engine::Added::Recovering(role) => {
            if let Some(w) = ctx
                .watched
                .iter()
                .find(|w| Arc::ptr_eq(&w.array, &target.array))
            {
                ctx.life.start_recovery(w, role);
            }
            let how = if by_bitmap {
                " (re-added: only the chunks its write-intent bitmap marks)"
            } else {
                ""
            };
            format!(
                "{text} added to {} in slot {role}; recovery started{how}\n",
                target.array.name()
            )
        }
        raidd_engine::Added::Spare => {
            format!("{text} added to {} as a spare\n", target.array.name())
        }
    };
    if !in_config(s, &text) {
        out.push_str(&format!(
            "note: add {text} to the members of array {array} in the config, or the next start will not assemble it\n"
        ));
    }
    let json = serde_json::json!({
        "array": array,
        "member": text,
        "role": match added {
            raidd_engine::Added::Recovering(r) => Some(r),
            raidd_engine::Added::Spare => None,
        },
        "by_bitmap": by_bitmap,
    });
    Ok((out, json))
}

async fn replace(ctx: &ControlCtx, array: &str, member: &str, with: &std::path::Path) -> Answer {
    let s = served(ctx, array)?;
    let (a, name) = holder(s, member).ok_or_else(|| not_a_member(array, member))?;
    let role = a
        .role_of(&name)
        .filter(|&r| a.slot_state(r) == SlotState::InSync)
        .ok_or_else(|| {
            CliError::new(
                Exit::Conflict,
                format!("{name} is not working in {array}: only a working member can be replaced"),
            )
        })?;
    let text = with.display().to_string();
    if let Some(owner) = owner_of(ctx, &text) {
        return Err(CliError::new(
            Exit::Conflict,
            format!("{text} is already used by {owner}"),
        ));
    }
    if let Some(p) = a.sync_progress() {
        return Err(CliError::new(
            Exit::Conflict,
            format!(
                "{}: a {} is running; try again when it ends",
                a.name(),
                p.kind
            ),
        ));
    }
    let new = crate::members::open(with, Access::ReadWrite)?;
    let w = ctx
        .watched
        .iter()
        .find(|w| Arc::ptr_eq(&w.array, &a))
        .ok_or_else(|| CliError::failure("the array is not watched"))?;
    ctx.life.start_replace(w, role, new);
    let mut out = format!("replacing {name} with {text} in {}\n", a.name());
    if !in_config(s, &text) {
        out.push_str(&format!(
            "note: put {text} in place of {name} in the members of array {array} in the config\n"
        ));
    }
    Ok((
        out,
        serde_json::json!({ "array": array, "member": name, "with": text, "role": role }),
    ))
}

fn scrub(ctx: &ControlCtx, array: &str, kind: raidd_engine::SyncKind) -> Answer {
    let s = served(ctx, array)?;
    let targets: Vec<&Watched> = ctx
        .watched
        .iter()
        .filter(|w| {
            w.array.can_scrub()
                && s.session
                    .arrays
                    .iter()
                    .any(|a| Arc::ptr_eq(&a.array, &w.array))
        })
        .collect();
    if targets.is_empty() {
        return Err(CliError::usage(format!(
            "{array} has no redundancy: there is nothing to {kind}"
        )));
    }
    let mut names = Vec::new();
    for w in targets {
        ctx.life.start_scrub(w, kind)?;
        names.push(w.array.name().to_string());
    }
    Ok((
        format!("{kind} started on {}\n", names.join(", ")),
        serde_json::json!({ "array": array, "started": names, "kind": kind }),
    ))
}

fn idle(ctx: &ControlCtx, array: &str) -> Answer {
    let s = served(ctx, array)?;
    let stopped: Vec<String> = s
        .session
        .arrays
        .iter()
        .filter(|a| a.array.cancel_sync())
        .map(|a| a.array.name().to_string())
        .collect();
    let text = if stopped.is_empty() {
        format!("nothing runs on {array}\n")
    } else {
        format!(
            "stopping the pass on {} (a recovery resumes from its checkpoint)\n",
            stopped.join(", ")
        )
    };
    Ok((
        text,
        serde_json::json!({ "array": array, "stopped": stopped }),
    ))
}

fn state_word(s: ArrayState) -> &'static str {
    match s {
        ArrayState::Clean => "clean",
        ArrayState::Active => "active",
        ArrayState::Degraded => "degraded",
        ArrayState::Failed => "FAILED",
    }
}

/// The mdstat-like summary of every array and export.
async fn status(ctx: &ControlCtx) -> Response {
    let mut text = format!(
        "raidd {}: NBD on {}, {} worker threads\n",
        env!("CARGO_PKG_VERSION"),
        ctx.listen,
        ctx.threads
    );
    let iscsi = ctx.shared.iscsi.as_ref().map(|st| {
        let targets: Vec<serde_json::Value> = st
            .targets
            .iter()
            .enumerate()
            .map(|(i, t)| {
                serde_json::json!({
                    "name": t.name,
                    "sessions": st.nexuses_of(i).len(),
                    "luns": t.luns.iter().map(|l| serde_json::json!({
                        "lun": l.number,
                        "array": l.array.name(),
                        "read_only": l.info.read_only,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        let _ = writeln!(
            text,
            "iSCSI on {}, {} targets, {} sessions",
            st.portal.address,
            st.targets.len(),
            iscsi::lock(&st.nexuses).len()
        );
        serde_json::json!({ "listen": st.portal.address, "targets": targets })
    });
    text.push('\n');
    let mut arrays = Vec::new();
    for (i, s) in ctx.served.iter().enumerate() {
        let st = s.session.root().status().await;
        let members: Vec<String> = st
            .slots
            .iter()
            .filter_map(|sl| sl.member.as_ref().map(|m| format!("{m}[{}]", sl.role)))
            .collect();
        let map: String = st
            .slots
            .iter()
            .map(|sl| {
                if sl.state == SlotState::InSync {
                    'U'
                } else {
                    '_'
                }
            })
            .collect();
        let in_sync = map.chars().filter(|&c| c == 'U').count();
        let _ = writeln!(
            text,
            "{} : {} {} {}",
            s.config.name,
            if st.read_only {
                "active (read-only)"
            } else {
                "active"
            },
            st.level,
            members.join(" ")
        );
        let mut geo = format!("      {}", size::kib_text(st.size_bytes));
        if st.chunk_bytes != 0 {
            let _ = write!(geo, ", chunk {}", size::chunk_text(st.chunk_bytes));
        }
        if let Some(l) = &st.layout {
            let _ = write!(geo, ", {l}");
        }
        let _ = writeln!(
            text,
            "{geo} [{}/{in_sync}] [{map}], {}{}",
            st.raid_devices,
            state_word(st.state),
            if st.needs_resync {
                ", needs resync"
            } else {
                ""
            }
        );
        if let Some(b) = &st.bitmap {
            let _ = writeln!(text, "      bitmap: {}/{} chunks dirty", b.dirty, b.chunks);
        }
        // Passes and loose members of the array and of its inner arrays.
        for (k, a) in s.session.arrays.iter().enumerate() {
            let inner;
            let st = if k == s.session.root {
                &st
            } else {
                inner = a.array.status().await;
                &inner
            };
            let who = if k == s.session.root {
                String::new()
            } else {
                format!("{}: ", st.name)
            };
            if let Some(sync) = &st.sync {
                let _ = writeln!(text, "      {who}{}", crate::progress::sync_line(sync));
            }
            if !st.faulty.is_empty() {
                let _ = writeln!(
                    text,
                    "      {who}failed, not yet removed: {}",
                    st.faulty.join(" ")
                );
            }
            if !st.spares.is_empty() {
                let _ = writeln!(text, "      {who}spares: {}", st.spares.join(" "));
            }
        }
        let exports: Vec<serde_json::Value> = ctx
            .shared
            .exports
            .iter()
            .filter(|e| Arc::ptr_eq(&e.array, s.session.root()))
            .map(|e| {
                let conns = e.connections.load(Ordering::Relaxed);
                let reqs = e.requests.load(Ordering::Relaxed);
                let copied = e.copied_bytes.load(Ordering::Relaxed);
                let _ = writeln!(
                    text,
                    "      export {} ({}): {conns} connection{}, {reqs} requests, {} of \
                     payload copied",
                    e.name,
                    if e.read_only {
                        "read-only"
                    } else {
                        "read-write"
                    },
                    if conns == 1 { "" } else { "s" },
                    size::short(copied)
                );
                serde_json::json!({
                    "name": e.name,
                    "read_only": e.read_only,
                    "connections": conns,
                    "requests": reqs,
                    "copied_bytes": copied,
                })
            })
            .collect();
        if i + 1 < ctx.served.len() {
            text.push('\n');
        }
        arrays.push(serde_json::json!({
            "name": s.config.name,
            "status": st,
            "exports": exports,
        }));
    }
    for n in &ctx.not_started {
        let _ = writeln!(text, "\n{} : not started: {}", n.name, n.error);
    }
    let pool = ctx.life.pool_names();
    if !pool.is_empty() {
        let names: Vec<String> = pool
            .iter()
            .map(|(p, g)| match g {
                Some(g) => format!("{p} (group {g})"),
                None => p.clone(),
            })
            .collect();
        let _ = writeln!(text, "\nspare pool: {}", names.join(", "));
    }
    let json = serde_json::json!({
        "version": env!("CARGO_PKG_VERSION"),
        "nbd_listen": ctx.listen,
        "iscsi": iscsi,
        "threads": ctx.threads,
        "arrays": arrays,
        "not_started": ctx
            .not_started
            .iter()
            .map(|n| serde_json::json!({ "name": n.name, "error": n.error }))
            .collect::<Vec<_>>(),
        "spare_pool": pool
            .iter()
            .map(|(p, g)| serde_json::json!({ "member": p, "group": g }))
            .collect::<Vec<_>>(),
    });
    Response::ok(text, json)
}
