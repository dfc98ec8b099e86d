//! What every worker thread shares: the exports, the NBD offer, TLS, the iSCSI target, the
//! buffer budget and the limits, and the signal that the daemon is stopping.

use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::Arc;

use futures::channel::oneshot;
use futures::future::Shared;
use raidd_engine::Extent;

use crate::budget::Budget;
use crate::iscsi::target::IscsiState;
use crate::watch;

/// Resolves when the daemon is stopping; cheap to clone into every task on every thread.
pub type Stop = Shared<oneshot::Receiver<()>>;

/// One export as the connections see it.
#[derive(Debug)]
pub struct Export {
    pub name: String,
    pub description: String,
    /// What it serves: the array, or a volume of it.
    pub extent: Extent,
    /// The volume's name as configured (none: the whole array).
    pub volume: Option<String>,
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
    /// Reads, writes and flushes: counts, bytes, latency.
    pub latency: crate::latency::Latency,
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
    pub iscsi: Option<Arc<IscsiState>>,
    /// The buffer memory all connections share, and each one's share.
    pub budget: Arc<Budget>,
    pub nbd_connection_memory: u64,
    pub iscsi_connection_memory: u64,
    /// How long the server waits for a client.
    pub limits: watch::Limits,
    /// Client connections open now (a place each, held by its accept loop), and the most allowed.
    pub connections: AtomicUsize,
    pub max_connections: usize,
}

pub type SharedState = Arc<ServerState>;
