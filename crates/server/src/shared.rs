//! What every worker thread shares, whatever the frontend: the buffer budget, the time
//! limits, the count of connections against `max_connections`, and the signal that the
//! daemon is stopping. What a frontend's connections share besides is the frontend's own.

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use futures::channel::oneshot;
use futures::future::Shared;

use crate::budget::Budget;
use crate::watch;

/// Resolves when the daemon is stopping; cheap to clone into every task on every thread.
pub type Stop = Shared<oneshot::Receiver<()>>;

/// What every worker shares.
#[derive(Debug)]
pub struct ServerState {
    /// The buffer memory all connections share (each frontend gives each of its
    /// connections a share of it).
    pub budget: Arc<Budget>,
    /// How long the server waits for a client.
    pub limits: watch::Limits,
    /// Client connections open now (a place each, held by its accept loop), and the most allowed.
    pub connections: AtomicUsize,
    pub max_connections: usize,
    /// Each worker's watchdog ticks, for systemd's watchdog (`crate::service`).
    pub beats: crate::service::Beats,
}

pub type SharedState = Arc<ServerState>;
