//! The iSCSI protocol (RFC 7143) as pure functions on bytes, for raidd's iSCSI target:
//!
//! - [`pdu`]: the Basic Header Segment of every initiator PDU parsed into a [`pdu::Request`],
//!   framing (AHS, digests, padding), and the target's PDU headers;
//! - [`digest`]: CRC32C header and data digests.
//!
//! Nothing here reads, writes, blocks or allocates by a length read from the network; the
//! target's shell (`raidd serve`) reads exactly what [`pdu::Framing`] says follows a header.

pub mod digest;
pub mod pdu;
