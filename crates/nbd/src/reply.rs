//! Transmission-phase replies, appended to a caller's buffer so replies can be batched. Read
//! data is not copied here: the shell sends it right after the header this writes, and the
//! header's length already counts it.
//!
//! Callers keep to what the spec asks of the values: error numbers nonzero, hole sizes and
//! extent lengths nonzero, at least one extent, data lengths at most `u32::MAX - 8`.
//! Nothing here panics when they do not; lengths saturate and messages are cut.

use crate::consts::*;
use crate::spec_string;

/// Bytes in a simple reply header.
pub const SIMPLE_REPLY_LEN: usize = 16;
/// Bytes in a structured reply chunk header.
pub const CHUNK_HEADER_LEN: usize = 20;

/// Simple reply header (16 bytes); for a successful READ the data follows.
pub fn simple(out: &mut Vec<u8>, cookie: u64, error: u32) {
    out.extend_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    out.extend_from_slice(&error.to_be_bytes());
    out.extend_from_slice(&cookie.to_be_bytes());
}

/// A structured reply chunk header (20 bytes) for a payload of `len` bytes.
pub fn chunk(out: &mut Vec<u8>, cookie: u64, flags: u16, kind: u16, len: u32) {
    out.extend_from_slice(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&kind.to_be_bytes());
    out.extend_from_slice(&cookie.to_be_bytes());
    out.extend_from_slice(&len.to_be_bytes());
}

fn done_flag(done: bool) -> u16 {
    if done {
        REPLY_FLAG_DONE
    } else {
        0
    }
}

/// OFFSET_DATA chunk header and offset; `data_len` bytes of data must follow.
pub fn offset_data(out: &mut Vec<u8>, cookie: u64, done: bool, offset: u64, data_len: u32) {
    chunk(
        out,
        cookie,
        done_flag(done),
        REPLY_TYPE_OFFSET_DATA,
        data_len.saturating_add(8),
    );
    out.extend_from_slice(&offset.to_be_bytes());
}

/// An OFFSET_HOLE chunk: `size` bytes at `offset` read as zeroes.
pub fn offset_hole(out: &mut Vec<u8>, cookie: u64, done: bool, offset: u64, size: u32) {
    chunk(out, cookie, done_flag(done), REPLY_TYPE_OFFSET_HOLE, 12);
    out.extend_from_slice(&offset.to_be_bytes());
    out.extend_from_slice(&size.to_be_bytes());
}

/// The final NONE chunk of a structured reply that has nothing more to say.
pub fn done(out: &mut Vec<u8>, cookie: u64) {
    chunk(out, cookie, REPLY_FLAG_DONE, REPLY_TYPE_NONE, 0);
}

/// The fields every error chunk starts with: error, message length, message.
fn error_fields(out: &mut Vec<u8>, error: u32, m: &[u8]) {
    out.extend_from_slice(&error.to_be_bytes());
    // m is at most MAX_STRING (4096) bytes.
    out.extend_from_slice(&(m.len() as u16).to_be_bytes());
    out.extend_from_slice(m);
}

/// A final ERROR chunk with a message (cut to 4096 bytes at a character boundary).
pub fn error(out: &mut Vec<u8>, cookie: u64, error: u32, message: &str) {
    error_chunk(out, cookie, true, error, message);
}

/// An ERROR chunk, final or not.
pub fn error_chunk(out: &mut Vec<u8>, cookie: u64, done: bool, error: u32, message: &str) {
    let m = spec_string(message);
    chunk(
        out,
        cookie,
        done_flag(done),
        REPLY_TYPE_ERROR,
        6 + m.len() as u32,
    );
    error_fields(out, error, m);
}

/// An ERROR_OFFSET chunk: the error happened at `offset` (within the request).
pub fn error_offset(
    out: &mut Vec<u8>,
    cookie: u64,
    done: bool,
    error: u32,
    message: &str,
    offset: u64,
) {
    let m = spec_string(message);
    chunk(
        out,
        cookie,
        done_flag(done),
        REPLY_TYPE_ERROR_OFFSET,
        14 + m.len() as u32,
    );
    error_fields(out, error, m);
    out.extend_from_slice(&offset.to_be_bytes());
}

/// A final BLOCK_STATUS chunk: (length, flags) extents for context `id`.
pub fn block_status(out: &mut Vec<u8>, cookie: u64, id: u32, extents: &[(u32, u32)]) {
    block_status_chunk(out, cookie, true, id, extents);
}

/// A BLOCK_STATUS chunk, final or not (one per selected context). The spec says at most
/// 2^20 extents per chunk; that is the caller's to keep.
pub fn block_status_chunk(
    out: &mut Vec<u8>,
    cookie: u64,
    done: bool,
    id: u32,
    extents: &[(u32, u32)],
) {
    let len = u32::try_from(extents.len())
        .ok()
        .and_then(|n| n.checked_mul(8))
        .and_then(|n| n.checked_add(4))
        .unwrap_or(u32::MAX);
    chunk(out, cookie, done_flag(done), REPLY_TYPE_BLOCK_STATUS, len);
    out.extend_from_slice(&id.to_be_bytes());
    for &(len, flags) in extents {
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&flags.to_be_bytes());
    }
}

/// The error of a reply to a request: simple or structured as negotiated.
pub fn failure(out: &mut Vec<u8>, structured: bool, cookie: u64, errno: u32, message: &str) {
    if structured {
        error(out, cookie, errno, message);
    } else {
        simple(out, cookie, errno);
    }
}

/// The success of a reply without data (WRITE, FLUSH, TRIM, ...): a simple reply, whether
/// or not structured replies were negotiated. The protocol allows either for every command
/// but READ, and the simple one is 16 bytes that a client reads in one receive, where
/// libnbd reads a structured chunk's header in two (BENCHMARKS.md has what that costs
/// small writes).
pub fn success(out: &mut Vec<u8>, cookie: u64) {
    simple(out, cookie, 0);
}
