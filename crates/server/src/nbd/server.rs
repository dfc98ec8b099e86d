//! What every NBD connection shares: the exports and what the handshake offers of them,
//! STARTTLS, the per-connection limits, and the server's budget and limits.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use raidd_engine::{Extent, Member};
use raidd_nbd::consts::*;

use super::config::{ExportConfig, NbdConfig};
use crate::frontend::Serving;
use crate::shared::SharedState;

/// Largest READ or WRITE payload (advertised as the maximum block size).
pub const MAX_PAYLOAD: u32 = 32 << 20;

/// Transmission flags for an export.
pub fn export_flags(read_only: bool, rotational: bool) -> u16 {
    let mut f = FLAG_HAS_FLAGS
        | FLAG_SEND_FLUSH
        | FLAG_SEND_FUA
        | FLAG_SEND_CACHE
        | FLAG_SEND_DF
        // Every connection writes through to the members before it replies, and a FLUSH
        // syncs every member: a flush on one connection covers writes acknowledged on all.
        | FLAG_CAN_MULTI_CONN;
    if rotational {
        f |= FLAG_ROTATIONAL;
    }
    if read_only {
        f |= FLAG_READ_ONLY;
    } else {
        f |= FLAG_SEND_TRIM | FLAG_SEND_WRITE_ZEROES | FLAG_SEND_FAST_ZERO;
    }
    f
}

/// One export as the connections see it.
#[derive(Debug)]
pub struct Export {
    pub name: String,
    pub description: String,
    /// What it serves: the array, or a volume of it.
    pub extent: Extent,
    /// The volume's name as configured (none: the whole array).
    pub volume: Option<String>,
    /// Configured read-only (the array may be read-only besides: [`Export::read_only`]).
    pub configured_read_only: bool,
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
    /// Set once it is removed while the daemon runs: its connections take no more requests
    /// (the watchdog shuts their read side).
    pub gone: Arc<AtomicBool>,
}

impl Export {
    fn new(e: &ExportConfig, s: Serving) -> Export {
        Export {
            name: e.name.clone(),
            description: e.description.clone(),
            configured_read_only: e.read_only,
            extent: s.extent,
            volume: s.volume.as_ref().map(|v| v.name.clone()),
            connections: AtomicUsize::new(0),
            requests: AtomicU64::new(0),
            copied_bytes: AtomicU64::new(0),
            latency: Default::default(),
            gone: Arc::new(AtomicBool::new(false)),
        }
    }

    /// What the handshake offers of it now.
    fn info(&self) -> raidd_nbd::ExportInfo {
        let block = self.extent.block_size();
        raidd_nbd::ExportInfo {
            name: self.name.clone(),
            description: self.description.clone(),
            size: self.extent.size_bytes(),
            flags: export_flags(self.read_only(), self.extent.array().info().rotational),
            min_block: block,
            preferred_block: block.max(4096),
            max_block: MAX_PAYLOAD,
        }
    }

    /// Whether it takes no writes now: configured so, or its array is read-only (which
    /// changes, e.g. when a new write journal is attached), as a new connection sees it.
    pub fn read_only(&self) -> bool {
        self.configured_read_only || self.extent.is_read_only()
    }
}

/// The NBD frontend as its connections share it.
#[derive(Debug)]
pub struct NbdServer {
    /// The budget, limits and connection count of every frontend.
    pub shared: SharedState,
    /// What it offers now: exports are added and removed while it runs (the control
    /// socket, a reload), so each handshake offers those of its moment.
    exports: RwLock<Vec<Arc<Export>>>,
    /// For STARTTLS, when configured.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    tls_required: bool,
    pub max_in_flight: usize,
    /// Bytes one connection's requests may hold.
    pub connection_memory: u64,
    /// A connection idle this long is closed; `None`: never.
    pub idle_timeout: Option<Duration>,
    pub listen: SocketAddr,
}

impl NbdServer {
    pub fn new(
        config: &NbdConfig,
        serving: Vec<Serving>,
        tls: Option<Arc<rustls::ServerConfig>>,
        shared: SharedState,
        listen: SocketAddr,
    ) -> NbdServer {
        assert_eq!(
            config.exports.len(),
            serving.len(),
            "one resolved extent per export"
        );
        let exports = config
            .exports
            .iter()
            .zip(serving)
            .map(|(e, s)| Arc::new(Export::new(e, s)))
            .collect();
        NbdServer {
            shared,
            exports: RwLock::new(exports),
            tls,
            tls_required: config.tls.as_ref().is_some_and(|t| t.require),
            max_in_flight: config.max_in_flight,
            connection_memory: config.connection_memory,
            idle_timeout: config.idle_timeout,
            listen,
        }
    }

    /// The exports offered now.
    pub fn exports(&self) -> Vec<Arc<Export>> {
        self.exports.read().expect(crate::POISONED).clone()
    }

    /// What a handshake offers now, each export's read-only flag as it stands, with the
    /// exports in the offer's order (the handshake's choice is an index into them).
    pub fn offer_now(&self) -> (raidd_nbd::Offer, Vec<Arc<Export>>) {
        let exports = self.exports();
        let offer = raidd_nbd::Offer {
            exports: exports.iter().map(|e| e.info()).collect(),
            default_export: (exports.len() == 1).then_some(0),
            tls: self.tls.is_some(),
            tls_required: self.tls_required,
        };
        debug_assert_eq!(offer.exports.len(), exports.len(), "an offer per export");
        (offer, exports)
    }

    /// Offers `e` (serving `s`) from the next handshake on; refused when an export of its
    /// name is offered.
    pub fn add(&self, e: &ExportConfig, s: Serving) -> Result<(), String> {
        let mut list = self.exports.write().expect(crate::POISONED);
        if list.iter().any(|x| x.name == e.name) {
            return Err(format!("export {:?} is already offered", e.name));
        }
        list.push(Arc::new(Export::new(e, s)));
        Ok(())
    }

    /// Stops offering export `name`; its connections take no more requests. The export, or
    /// `None` when none of that name is offered.
    pub fn remove(&self, name: &str) -> Option<Arc<Export>> {
        let mut list = self.exports.write().expect(crate::POISONED);
        let i = list.iter().position(|x| x.name == name)?;
        let e = list.remove(i);
        e.gone.store(true, Ordering::SeqCst);
        debug_assert!(list.iter().all(|x| x.name != name), "names are unique");
        Some(e)
    }
}
