//! What every worker thread shares, whatever the frontend: the buffer budget, the time
//! limits, the count of connections against `max_connections`, and the signal that the
//! daemon is stopping. What a frontend's connections share besides is the frontend's own.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
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
    /// Each worker's watchdog ticks, for systemd's watchdog.
    pub beats: Beats,
}

pub type SharedState = Arc<ServerState>;

/// Each worker's watchdog ticks: counted by the worker, read by the main thread.
#[derive(Debug)]
pub struct Beats(Box<[AtomicU64]>);

impl Beats {
    pub fn new(workers: usize) -> Beats {
        Beats((0..workers).map(|_| AtomicU64::new(0)).collect())
    }

    /// Worker `i`'s watchdog ticked.
    pub fn beat(&self, i: usize) {
        debug_assert!(i < self.0.len(), "a beat per worker");
        if let Some(b) = self.0.get(i) {
            b.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn snapshot(&self) -> Vec<u64> {
        self.0.iter().map(|b| b.load(Ordering::Relaxed)).collect()
    }
}
