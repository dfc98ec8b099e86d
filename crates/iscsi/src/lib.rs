//! The iSCSI protocol (RFC 7143) as pure functions on bytes, for raidd's iSCSI target.
