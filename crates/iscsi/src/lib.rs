//! The iSCSI protocol (RFC 7143) as pure functions on bytes, for raidd's iSCSI target.
//!
//! Nothing here touches a socket, a clock or a random number generator, and nothing
//! allocates by a length read from the network: the shell (`raidd serve`) reads exactly what
//! [`pdu::Framing`] says follows a header, calls these functions and writes what they return.
//!
//! - [`pdu`]: the Basic Header Segment of every initiator PDU parsed into a
//!   [`pdu::Request`], framing (AHS, digests, padding), and the target's PDU headers.
//! - [`digest`]: CRC32C header and data digests.
//! - [`text`]: key=value text of Login and Text PDUs (parse and encode, bounded).
//! - [`params`]: the operational parameters ([`params::Params`]) and their negotiation
//!   within [`params::TargetLimits`].
//! - [`chap`]: CHAP with MD5 (RFC 1994), one-way and mutual, and the binary value
//!   encodings it uses.
//! - [`login`]: the target's login state machine for one connection ([`login::Login`])
//!   and full-feature Text Request answers ([`login::text_answer`], SendTargets).

pub mod chap;
pub mod digest;
pub mod login;
pub mod params;
pub mod pdu;
pub mod text;

pub use chap::Secret;
pub use login::{
    text_answer, Login, LoginRequest, LoginResponse, Negotiated, Portal, Step, TargetEntry,
};
pub use params::{Params, TargetLimits};
pub use text::TextError;
