//! The NBD protocol (NetworkBlockDevice/nbd `doc/proto.md`) as pure functions on bytes: the
//! fixed newstyle handshake as a state machine ([`handshake`]), the request header and the
//! server's checks ([`request`]), and reply encoders ([`reply`]). No I/O happens here: the
//! server shell reads the bytes the machine asks for, feeds them in, and writes out what it
//! produces, so every branch is testable and fuzzable without sockets.

pub mod consts;
pub mod handshake;
pub mod reply;
pub mod request;

pub use handshake::{ExportInfo, Handshake, Negotiated, Offer, Step};
pub use request::{Command, Limits, Refusal, Request};
