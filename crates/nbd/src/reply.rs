//! Transmission-phase replies, appended to a caller's buffer so replies can be batched. Read
//! data is not copied here: the shell sends it right after the header this writes.

use crate::consts::*;

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

/// OFFSET_DATA chunk header and offset; `data_len` bytes of data must follow.
pub fn offset_data(out: &mut Vec<u8>, cookie: u64, done: bool, offset: u64, data_len: u32) {
    let flags = if done { REPLY_FLAG_DONE } else { 0 };
    chunk(
        out,
        cookie,
        flags,
        REPLY_TYPE_OFFSET_DATA,
        data_len.saturating_add(8),
    );
    out.extend_from_slice(&offset.to_be_bytes());
}

/// The final NONE chunk of a structured reply that has nothing more to say.
pub fn done(out: &mut Vec<u8>, cookie: u64) {
    chunk(out, cookie, REPLY_FLAG_DONE, REPLY_TYPE_NONE, 0);
}

/// A final ERROR chunk with a message (cut to what fits the 16-bit length).
pub fn error(out: &mut Vec<u8>, cookie: u64, error: u32, message: &str) {
    let mut m = message.as_bytes();
    m = &m[..m.len().min(4096)];
    chunk(
        out,
        cookie,
        REPLY_FLAG_DONE,
        REPLY_TYPE_ERROR,
        6 + m.len() as u32,
    );
    out.extend_from_slice(&error.to_be_bytes());
    out.extend_from_slice(&(m.len() as u16).to_be_bytes());
    out.extend_from_slice(m);
}

/// A final BLOCK_STATUS chunk: (length, flags) extents for context `id`.
pub fn block_status(out: &mut Vec<u8>, cookie: u64, id: u32, extents: &[(u32, u32)]) {
    chunk(
        out,
        cookie,
        REPLY_FLAG_DONE,
        REPLY_TYPE_BLOCK_STATUS,
        4 + 8 * extents.len() as u32,
    );
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

/// The success of a reply without data (WRITE, FLUSH, TRIM, ...).
pub fn success(out: &mut Vec<u8>, structured: bool, cookie: u64) {
    if structured {
        done(out, cookie);
    } else {
        simple(out, cookie, 0);
    }
}
