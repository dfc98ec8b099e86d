//! What every NBD connection shares: the exports and what the handshake offers of them,
//! STARTTLS, the per-connection limits, and the server's budget and limits.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::Arc;
use std::time::Duration;

use raidd_engine::{Extent, Member};
use raidd_nbd::consts::*;

use super::config::NbdConfig;
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
}

impl Export {
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
    pub exports: Vec<Export>,
    /// What the handshake offers (the same exports, as the protocol sees them); each
    /// connection's handshake offers the read-only flags of the moment ([`NbdServer::offer_now`]).
    pub offer: raidd_nbd::Offer,
    /// For STARTTLS, when configured.
    pub tls: Option<Arc<rustls::ServerConfig>>,
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
        let exports: Vec<Export> = config
            .exports
            .iter()
            .zip(serving)
            .map(|(e, s)| Export {
                name: e.name.clone(),
                description: e.description.clone(),
                configured_read_only: e.read_only,
                extent: s.extent,
                volume: s.volume.as_ref().map(|v| v.name.clone()),
                connections: AtomicUsize::new(0),
                requests: AtomicU64::new(0),
                copied_bytes: AtomicU64::new(0),
                latency: Default::default(),
            })
            .collect();
        let offer = offer(config, &exports, tls.is_some());
        NbdServer {
            shared,
            exports,
            offer,
            tls,
            max_in_flight: config.max_in_flight,
            connection_memory: config.connection_memory,
            idle_timeout: config.idle_timeout,
            listen,
        }
    }
}

impl NbdServer {
    /// The offer with each export's read-only flag as it stands now.
    pub fn offer_now(&self) -> raidd_nbd::Offer {
        let mut offer = self.offer.clone();
        debug_assert_eq!(
            offer.exports.len(),
            self.exports.len(),
            "an offer per export"
        );
        for (o, e) in offer.exports.iter_mut().zip(&self.exports) {
            o.flags = export_flags(e.read_only(), e.extent.array().info().rotational);
        }
        offer
    }
}

/// What the NBD handshake offers.
fn offer(config: &NbdConfig, exports: &[Export], tls: bool) -> raidd_nbd::Offer {
    raidd_nbd::Offer {
        exports: exports
            .iter()
            .map(|e| {
                let block = e.extent.block_size();
                raidd_nbd::ExportInfo {
                    name: e.name.clone(),
                    description: e.description.clone(),
                    size: e.extent.size_bytes(),
                    flags: export_flags(e.read_only(), e.extent.array().info().rotational),
                    min_block: block,
                    preferred_block: block.max(4096),
                    max_block: MAX_PAYLOAD,
                }
            })
            .collect(),
        default_export: (exports.len() == 1).then_some(0),
        tls,
        tls_required: config.tls.as_ref().is_some_and(|t| t.require),
    }
}
