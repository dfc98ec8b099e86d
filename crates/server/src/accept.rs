//! Accepting client connections (on the main thread): at most `max_connections` open at
//! once, and a descriptor kept in reserve so that running out of descriptors never wedges
//! the listener. Accepted connections go round-robin to the worker threads.

use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use std::sync::Arc;

use futures::channel::mpsc;
use raidd_rt::net::{Stream, TcpListener};

use crate::frontend::Running;
use crate::frontend::WorkerTask;
use crate::shared::SharedState;

/// A connection on its way to a worker, holding its place among `max_connections`, with
/// the frontend whose listener took it.
#[derive(Debug)]
pub struct Accepted {
    pub frontend: Arc<dyn Running>,
    pub stream: Stream,
    pub place: Place,
}

/// What the main thread hands a worker.
#[allow(missing_debug_implementations)] // holds a closure
pub enum ToWorker {
    /// A connection to serve.
    Connection(Accepted),
    /// A task to run beside the connections; the stop waits for it as for the frontends'
    /// own.
    Task(WorkerTask),
}

/// One of the `max_connections` places; given back when dropped (the connection's task
/// ends, or the connection is dropped on its way).
#[derive(Debug)]
pub struct Place(SharedState);

impl Place {
    /// Takes a place if one is free.
    fn take(shared: &SharedState) -> Option<Place> {
        shared
            .connections
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < shared.max_connections).then_some(n + 1)
            })
            .ok()
            .map(|_| Place(shared.clone()))
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let was = self.0.connections.fetch_sub(1, Ordering::AcqRel);
        debug_assert!(was > 0, "a place given back was taken");
    }
}

/// A log line at most once a second, saying how many it stood for.
#[derive(Debug, Default)]
struct Throttled {
    last: Cell<Option<Instant>>,
    quiet: Cell<u64>,
}

impl Throttled {
    /// Runs `log` with the count of events since the last line, if a second has passed.
    fn note(&self, log: impl FnOnce(u64)) {
        let now = Instant::now();
        if self
            .last
            .get()
            .is_some_and(|l| now.duration_since(l) < Duration::from_secs(1))
        {
            self.quiet.set(self.quiet.get() + 1);
            return;
        }
        self.last.set(Some(now));
        log(self.quiet.replace(0) + 1);
    }
}

/// A descriptor held back for the moment the process has none left: freed, it lets the
/// listener take the waiting connection and close it at once, so the client hears a close
/// instead of hanging in the backlog, and the listener does not spin on EMFILE.
fn reserve_fd() -> Option<std::fs::File> {
    std::fs::File::open("/dev/null").ok()
}

/// Accepts `frontend`'s connections until dropped.
pub async fn run(
    listener: TcpListener,
    frontend: Arc<dyn Running>,
    shared: SharedState,
    workers: Vec<mpsc::UnboundedSender<ToWorker>>,
) {
    assert!(!workers.is_empty(), "connections go to at least one worker");
    let proto = frontend.name();
    let mut next = 0usize;
    let mut reserve = reserve_fd();
    let refused = Throttled::default();
    let exhausted = Throttled::default();
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                let Some(place) = Place::take(&shared) else {
                    refused.note(|n| {
                        tracing::warn!(
                            %peer,
                            %proto,
                            "refused {n} connection(s): max_connections ({}) are open",
                            shared.max_connections
                        )
                    });
                    continue;
                };
                tracing::debug!(%peer, %proto, "connection");
                let a = Accepted {
                    frontend: frontend.clone(),
                    stream,
                    place,
                };
                let to = &workers[next % workers.len()];
                if to.unbounded_send(ToWorker::Connection(a)).is_err() {
                    tracing::error!("a worker thread has gone; connection dropped");
                }
                next = next.wrapping_add(1);
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                exhausted.note(|n| {
                    tracing::warn!(
                        %proto,
                        "out of file descriptors ({e}): closed {n} connection(s) at once"
                    )
                });
                drop(reserve.take());
                if let Ok((s, _)) = listener.accept().await {
                    drop(s);
                }
                reserve = reserve_fd();
                if reserve.is_none() {
                    // Still none: give the connections that hold them time to end.
                    raidd_rt::time::sleep(Duration::from_millis(100)).await;
                }
            }
            Err(e) => {
                tracing::warn!(%proto, "accept failed: {e}");
                raidd_rt::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}
