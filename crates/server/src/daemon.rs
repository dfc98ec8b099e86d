//! The daemon's life: start (certificates, arrays, listeners, workers), the main thread's
//! loop (acceptors, control socket, monitor, safe mode, signals) and the stop.

use std::rc::Rc;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::Arc;
use std::time::Duration;

use futures::channel::{mpsc, oneshot};
use futures::future::{self, Either, FutureExt};
use futures::StreamExt;
use raidd_admin::exit::{AdminError, AdminResult};
use raidd_engine::{Array, Member};
use raidd_rt::net::{Stream, TcpListener};
use raidd_rt::signal::Signals;

use crate::arrays::{self, close_all};
use crate::config::Config;
use crate::control::{self, ControlCtx};
use crate::lifecycle::{self, Lifecycle, Watched};
use crate::shared::{Export, ServerState, SharedState, Stop};
use crate::{iscsi, link, nbd};

/// Which protocol an accepted connection speaks.
#[derive(Clone, Copy, Debug)]
enum Proto {
    Nbd,
    Iscsi,
}

/// How long a stopping daemon waits for connections to finish their requests before it
/// closes them anyway.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves until a signal arrives, then stops.
pub async fn serve(config: Config, signals: Signals) -> AdminResult {
    // Certificates first: a bad one should fail before any array is touched.
    let tls = match &config.nbd.tls {
        Some(t) => Some(link::server_config(&t.certificate, &t.key).map_err(AdminError::usage)?),
        None => None,
    };
    let (served, not_started) = arrays::assemble_all(&config).await?;
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
    let pool = arrays::open_pool(&config, &served);
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
                return Err(AdminError::io(
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
            return Err(AdminError::io(
                format!("cannot listen for NBD on {}", config.nbd.listen),
                &e,
            ));
        }
    };
    let control = match control::bind(&config.control_socket) {
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
            .map_err(|e| AdminError::io("cannot start a worker thread", &e))?;
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
    let control_task = control::serve(control, ctx.clone());
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
        Err(AdminError::failure(
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
