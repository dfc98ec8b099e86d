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
mod link;
mod nbd;

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

async fn assemble_all(config: &Config) -> CliResult<Vec<Served>> {
    let mut served = Vec::new();
    for a in &config.arrays {
        let access = if a.read_only {
            Access::ReadOnly
        } else {
            Access::ReadWrite
        };
        let session = match session::assemble(&a.members, access, true).await {
            Ok(s) => s,
            Err(e) => {
                close_all(&served).await;
                return Err(CliError::new(
                    e.exit,
                    format!("array {}: {}", a.name, e.message),
                ));
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
        let root = session.root();
        if root.needs_resync() {
            tracing::warn!(
                array = %a.name,
                "the array was not shut down cleanly: parity/mirrors may disagree where writes were in flight; run a resync"
            );
        }
        if root.is_degraded() {
            let missing: Vec<usize> = (0..root.geometry().members())
                .filter(|&r| root.slot_state(r) != SlotState::InSync)
                .collect();
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
    Ok(served)
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
    let served = assemble_all(&config).await?;
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
    let shared: SharedState = Arc::new(ServerState {
        exports,
        offer,
        tls,
        max_in_flight: config.nbd.max_in_flight,
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
    for i in 0..config.threads {
        let (tx, rx) = mpsc::unbounded::<Stream>();
        to_workers.push(tx);
        let shared = shared.clone();
        let stop = stop.clone();
        let handle = std::thread::Builder::new()
            .name(format!("raidd-worker-{i}"))
            .spawn(move || raidd_rt::block_on(worker(rx, shared, stop)))
            .map_err(|e| CliError::io("cannot start a worker thread", &e))?;
        workers.push(handle);
    }
    tracing::info!(
        "serving NBD on {listen_addr} ({} exports, {} worker threads); control socket {}",
        shared.exports.len(),
        config.threads,
        config.control_socket.display()
    );
    // Test harnesses wait for this line on stderr before connecting.
    eprintln!("raidd: ready, NBD on {listen_addr}");

    let ctx = Rc::new(ControlCtx {
        served,
        shared: shared.clone(),
        listen: listen_addr.to_string(),
        threads: config.threads,
    });
    let accept = accept_loop(listener, to_workers);
    let control_task = control_loop(control, ctx.clone());
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

async fn accept_loop(listener: TcpListener, workers: Vec<mpsc::UnboundedSender<Stream>>) {
    let mut next = 0usize;
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                tracing::debug!(%peer, "connection");
                if workers[next % workers.len()]
                    .unbounded_send(stream)
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

async fn worker(mut rx: mpsc::UnboundedReceiver<Stream>, shared: SharedState, stop: Stop) {
    let mut conns: Vec<(raidd_rt::JoinHandle<()>, Stream)> = Vec::new();
    loop {
        let next = rx.next();
        let stopping = stop.clone();
        futures::pin_mut!(next);
        match future::select(next, stopping).await {
            Either::Left((Some(stream), _)) => {
                conns.retain(|(h, _)| !h.is_finished());
                let task = nbd::serve_connection(stream.clone(), shared.clone(), stop.clone());
                conns.push((raidd_rt::spawn_local(task), stream));
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
    shared: SharedState,
    listen: String,
    threads: usize,
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
    match req {
        Request::Status => status(ctx).await,
        Request::Detail { array } => {
            let Some(s) = ctx.served.iter().find(|s| s.config.name == array) else {
                let names: Vec<&str> = ctx.served.iter().map(|s| s.config.name.as_str()).collect();
                return Response::err(
                    Exit::NotFound,
                    format!("no array named {array:?} (arrays: {})", names.join(", ")),
                );
            };
            let g = Gathered::new(&s.session.arrays, s.session.root).await;
            let json = serde_json::to_value(g.json(&s.session.unavailable))
                .unwrap_or(serde_json::Value::Null);
            Response::ok(g.text(&s.session.unavailable), json)
        }
    }
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
        "raidd {}: NBD on {}, {} worker threads\n\n",
        env!("CARGO_PKG_VERSION"),
        ctx.listen,
        ctx.threads
    );
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
        let exports: Vec<serde_json::Value> = ctx
            .shared
            .exports
            .iter()
            .filter(|e| Arc::ptr_eq(&e.array, s.session.root()))
            .map(|e| {
                let conns = e.connections.load(Ordering::Relaxed);
                let reqs = e.requests.load(Ordering::Relaxed);
                let _ = writeln!(
                    text,
                    "      export {} ({}): {conns} connection{}, {reqs} requests",
                    e.name,
                    if e.read_only {
                        "read-only"
                    } else {
                        "read-write"
                    },
                    if conns == 1 { "" } else { "s" }
                );
                serde_json::json!({
                    "name": e.name,
                    "read_only": e.read_only,
                    "connections": conns,
                    "requests": reqs,
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
    let json = serde_json::json!({
        "version": env!("CARGO_PKG_VERSION"),
        "nbd_listen": ctx.listen,
        "threads": ctx.threads,
        "arrays": arrays,
    });
    Response::ok(text, json)
}
