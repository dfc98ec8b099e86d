//! The NBD protocol (NetworkBlockDevice/nbd `doc/proto.md`) as pure functions on bytes, for
//! raidd's NBD server:
//!
//! - [`consts`]: the protocol's numbers;
//! - [`handshake`]: the server side of the fixed newstyle handshake as a state machine
//!   ([`Handshake`]), with STARTTLS, INFO/GO, structured replies and `base:allocation`;
//! - [`request`]: the transmission request header and the checks a server makes before
//!   serving one ([`request::validate`]);
//! - [`reply`]: simple replies and structured reply chunks, appended to a caller's buffer;
//! - [`client`]: the client side, for tests, benchmarks and proxies.
//!
//! # The sans-io contract
//!
//! Nothing here reads, writes, blocks, sleeps or spawns. The server shell reads from its
//! socket exactly the bytes a machine asks for ([`Handshake::want`], [`request::REQUEST_LEN`],
//! [`Request::payload_len`]), passes them in, writes out the bytes produced, and acts on the
//! returned value (carry on, start TLS, enter transmission, close). Every function takes any
//! input without panicking, and nothing allocates by a length read from the network beyond a
//! fixed bound, so every branch is testable and fuzzable without sockets.

pub mod client;
pub mod consts;
pub mod handshake;
pub mod reply;
pub mod request;

pub use handshake::{ExportInfo, Handshake, Negotiated, Offer, Step};
pub use request::{Command, Limits, Refusal, Request};

/// A string as the spec bounds them: cut to [`consts::MAX_STRING`] bytes at a character
/// boundary.
pub(crate) fn spec_string(s: &str) -> &[u8] {
    let mut end = s.len().min(consts::MAX_STRING);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.as_bytes().get(..end).unwrap_or_default()
}
