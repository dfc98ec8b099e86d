//! The client side, sans-io and small: enough to drive a server in tests, a benchmark or a
//! proxy. Builders append to a caller's buffer; parsers take what has been received so far
//! and return `Ok(None)` while more bytes are needed, never allocating by a length the
//! server sent before those bytes are there.

use crate::consts::*;
use crate::request::{self, Request};

/// Bytes the server greets with: NBDMAGIC, IHAVEOPT, handshake flags.
pub const GREETING_LEN: usize = 18;
/// Bytes in an option reply header.
pub const OPTION_REPLY_HEADER_LEN: usize = 20;
/// Bytes the server answers `NBD_OPT_EXPORT_NAME` with (size, flags), plus 124 zeroes
/// unless NO_ZEROES was negotiated.
pub const EXPORT_NAME_REPLY_LEN: usize = 10;

/// What a client found wrong in what the server sent.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    #[error("bad magic {0:#x}")]
    BadMagic(u64),
    #[error("the server does not speak fixed newstyle")]
    NotFixedNewstyle,
    #[error("malformed {0}")]
    Malformed(&'static str),
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn be64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_be_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

fn malformed<T>(what: &'static str) -> impl FnOnce() -> Result<T, ClientError> {
    move || Err(ClientError::Malformed(what))
}

/// Checks the server's greeting; returns its handshake flags.
pub fn parse_greeting(g: &[u8; GREETING_LEN]) -> Result<u16, ClientError> {
    for (at, magic) in [(0, NBDMAGIC), (8, IHAVEOPT)] {
        let got = be64(g, at).unwrap_or(0);
        if got != magic {
            return Err(ClientError::BadMagic(got));
        }
    }
    let flags = be16(g, 16).unwrap_or(0);
    if flags & FLAG_FIXED_NEWSTYLE == 0 {
        return Err(ClientError::NotFixedNewstyle);
    }
    Ok(flags)
}

/// The client flags to answer a greeting with: fixed newstyle, and NO_ZEROES if wanted and
/// offered. Send them as 4 big-endian bytes.
pub fn client_flags(server_flags: u16, no_zeroes: bool) -> u32 {
    let mut f = FLAG_C_FIXED_NEWSTYLE;
    if no_zeroes && server_flags & FLAG_NO_ZEROES != 0 {
        f |= FLAG_C_NO_ZEROES;
    }
    f
}

/// Appends an option request header claiming `len` bytes of data (the data is the
/// caller's to send; a header may claim more than will be sent, to test servers).
pub fn option_header(out: &mut Vec<u8>, option: u32, len: u32) {
    out.extend_from_slice(&IHAVEOPT.to_be_bytes());
    out.extend_from_slice(&option.to_be_bytes());
    out.extend_from_slice(&len.to_be_bytes());
}

/// Appends a whole option request. Data longer than 4 GiB is cut (no option is that long).
pub fn option(out: &mut Vec<u8>, option: u32, data: &[u8]) {
    let len = u32::try_from(data.len()).unwrap_or(u32::MAX);
    option_header(out, option, len);
    out.extend_from_slice(data.get(..len as usize).unwrap_or(data));
}

fn len32(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(&u32::try_from(s.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(s);
}

/// The data of an `NBD_OPT_INFO` or `NBD_OPT_GO`: export name and information requests.
pub fn info_data(name: &[u8], infos: &[u16]) -> Vec<u8> {
    let mut v = Vec::with_capacity(6 + name.len() + 2 * infos.len());
    len32(&mut v, name);
    let n = u16::try_from(infos.len()).unwrap_or(u16::MAX);
    v.extend_from_slice(&n.to_be_bytes());
    for i in infos.iter().take(usize::from(n)) {
        v.extend_from_slice(&i.to_be_bytes());
    }
    v
}

/// The data of an `NBD_OPT_LIST_META_CONTEXT` or `NBD_OPT_SET_META_CONTEXT`.
pub fn meta_context_data(name: &[u8], queries: &[&[u8]]) -> Vec<u8> {
    let mut v = Vec::new();
    len32(&mut v, name);
    v.extend_from_slice(
        &u32::try_from(queries.len())
            .unwrap_or(u32::MAX)
            .to_be_bytes(),
    );
    for q in queries {
        len32(&mut v, q);
    }
    v
}

/// One option reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OptionReply {
    /// The option answered.
    pub option: u32,
    /// The reply type (`REP_*`).
    pub kind: u32,
    pub data: Vec<u8>,
}

impl OptionReply {
    /// An error reply (bit 31).
    pub fn is_error(&self) -> bool {
        self.kind & (1 << 31) != 0
    }

    /// The last reply to an option: ACK or an error.
    pub fn is_final(&self) -> bool {
        self.kind == REP_ACK || self.is_error()
    }
}

/// Parses one option reply from the front of `b`: `Ok(None)` until all of it is there,
/// then the reply and the bytes it took.
pub fn parse_option_reply(b: &[u8]) -> Result<Option<(OptionReply, usize)>, ClientError> {
    let (Some(magic), Some(option), Some(kind), Some(len)) =
        (be64(b, 0), be32(b, 8), be32(b, 12), be32(b, 16))
    else {
        return Ok(None);
    };
    if magic != OPTION_REPLY_MAGIC {
        return Err(ClientError::BadMagic(magic));
    }
    let end = OPTION_REPLY_HEADER_LEN.saturating_add(len as usize);
    let Some(data) = b.get(OPTION_REPLY_HEADER_LEN..end) else {
        return Ok(None);
    };
    let reply = OptionReply {
        option,
        kind,
        data: data.to_vec(),
    };
    Ok(Some((reply, end)))
}

/// The (size, transmission flags) that answer `NBD_OPT_EXPORT_NAME`; `b` is the first
/// [`EXPORT_NAME_REPLY_LEN`] bytes (the zeroes, if any, follow).
pub fn parse_export_name_reply(b: &[u8]) -> Result<(u64, u16), ClientError> {
    match (be64(b, 0), be16(b, 8)) {
        (Some(size), Some(flags)) if b.len() == EXPORT_NAME_REPLY_LEN => Ok((size, flags)),
        _ => Err(ClientError::Malformed("export name reply")),
    }
}

/// An `NBD_REP_INFO` payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Info {
    Export {
        size: u64,
        flags: u16,
    },
    Name(String),
    Description(String),
    BlockSize {
        min: u32,
        preferred: u32,
        max: u32,
    },
    /// An information type this client does not know (the spec says to ignore it).
    Unknown(u16),
}

fn utf8(b: &[u8], what: &'static str) -> Result<String, ClientError> {
    String::from_utf8(b.to_vec()).map_err(|_| ClientError::Malformed(what))
}

/// Parses the data of an `NBD_REP_INFO`, checking the lengths the spec fixes.
pub fn parse_info(d: &[u8]) -> Result<Info, ClientError> {
    let Some(t) = be16(d, 0) else {
        return malformed("info")();
    };
    let rest = d.get(2..).unwrap_or_default();
    match t {
        INFO_EXPORT => match (be64(d, 2), be16(d, 10)) {
            (Some(size), Some(flags)) if d.len() == 12 => Ok(Info::Export { size, flags }),
            _ => malformed("INFO_EXPORT")(),
        },
        INFO_NAME => Ok(Info::Name(utf8(rest, "INFO_NAME")?)),
        INFO_DESCRIPTION => Ok(Info::Description(utf8(rest, "INFO_DESCRIPTION")?)),
        INFO_BLOCK_SIZE => match (be32(d, 2), be32(d, 6), be32(d, 10)) {
            (Some(min), Some(preferred), Some(max)) if d.len() == 14 => Ok(Info::BlockSize {
                min,
                preferred,
                max,
            }),
            _ => malformed("INFO_BLOCK_SIZE")(),
        },
        other => Ok(Info::Unknown(other)),
    }
}

/// Parses the data of an `NBD_REP_SERVER`: the export name and the details after it.
pub fn parse_server(d: &[u8]) -> Result<(String, String), ClientError> {
    let n = be32(d, 0).ok_or(ClientError::Malformed("REP_SERVER"))? as usize;
    let name = d
        .get(4..4usize.saturating_add(n))
        .ok_or(ClientError::Malformed("REP_SERVER name length"))?;
    let details = d.get(4 + n..).unwrap_or_default();
    Ok((utf8(name, "REP_SERVER")?, utf8(details, "REP_SERVER")?))
}

/// Parses the data of an `NBD_REP_META_CONTEXT`: the context id and name.
pub fn parse_meta_context(d: &[u8]) -> Result<(u32, String), ClientError> {
    let id = be32(d, 0).ok_or(ClientError::Malformed("REP_META_CONTEXT"))?;
    Ok((
        id,
        utf8(d.get(4..).unwrap_or_default(), "REP_META_CONTEXT")?,
    ))
}

/// Appends a request header and its payload (a WRITE's data; empty otherwise).
pub fn request(out: &mut Vec<u8>, r: &Request, payload: &[u8]) {
    out.extend_from_slice(&request::encode(r));
    out.extend_from_slice(payload);
}

/// A transmission reply header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyHeader {
    /// A simple reply; a successful READ's data follows (the client knows its length).
    Simple { error: u32, cookie: u64 },
    /// A structured reply chunk; `length` bytes of payload follow.
    Chunk {
        flags: u16,
        kind: u16,
        cookie: u64,
        length: u32,
    },
}

impl ReplyHeader {
    pub fn cookie(&self) -> u64 {
        match *self {
            ReplyHeader::Simple { cookie, .. } | ReplyHeader::Chunk { cookie, .. } => cookie,
        }
    }
}

/// Parses a reply header from the front of `b`: `Ok(None)` until all of it is there, then
/// the header and the bytes it took (16 or 20).
pub fn parse_reply_header(b: &[u8]) -> Result<Option<(ReplyHeader, usize)>, ClientError> {
    let Some(magic) = be32(b, 0) else {
        return Ok(None);
    };
    match magic {
        SIMPLE_REPLY_MAGIC => match (be32(b, 4), be64(b, 8)) {
            (Some(error), Some(cookie)) => Ok(Some((ReplyHeader::Simple { error, cookie }, 16))),
            _ => Ok(None),
        },
        STRUCTURED_REPLY_MAGIC => match (be16(b, 4), be16(b, 6), be64(b, 8), be32(b, 16)) {
            (Some(flags), Some(kind), Some(cookie), Some(length)) => Ok(Some((
                ReplyHeader::Chunk {
                    flags,
                    kind,
                    cookie,
                    length,
                },
                20,
            ))),
            _ => Ok(None),
        },
        other => Err(ClientError::BadMagic(u64::from(other))),
    }
}

/// A structured reply chunk's payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Chunk<'a> {
    None,
    OffsetData {
        offset: u64,
        data: &'a [u8],
    },
    OffsetHole {
        offset: u64,
        size: u32,
    },
    BlockStatus {
        id: u32,
        extents: Vec<(u32, u32)>,
    },
    /// `NBD_REPLY_TYPE_ERROR`, or an unknown error type (bit 15) read as one.
    Error {
        kind: u16,
        error: u32,
        message: &'a [u8],
    },
    ErrorOffset {
        error: u32,
        message: &'a [u8],
        offset: u64,
    },
    /// A non-error type this client does not know: the spec says to hang up.
    Unknown(u16),
}

/// Parses a chunk's payload of type `kind`, checking the lengths the spec fixes.
pub fn parse_chunk(kind: u16, p: &[u8]) -> Result<Chunk<'_>, ClientError> {
    let error_head = || -> Result<(u32, &[u8]), ClientError> {
        let (Some(error), Some(n)) = (be32(p, 0), be16(p, 4)) else {
            return malformed("error chunk")();
        };
        let message = p
            .get(6..6 + usize::from(n))
            .ok_or(ClientError::Malformed("error chunk message length"))?;
        Ok((error, message))
    };
    match kind {
        REPLY_TYPE_NONE if p.is_empty() => Ok(Chunk::None),
        REPLY_TYPE_NONE => malformed("NONE chunk with payload")(),
        REPLY_TYPE_OFFSET_DATA => match (be64(p, 0), p.get(8..)) {
            (Some(offset), Some(data)) if !data.is_empty() => {
                Ok(Chunk::OffsetData { offset, data })
            }
            _ => malformed("OFFSET_DATA chunk")(),
        },
        REPLY_TYPE_OFFSET_HOLE => match (be64(p, 0), be32(p, 8)) {
            (Some(offset), Some(size)) if p.len() == 12 && size != 0 => {
                Ok(Chunk::OffsetHole { offset, size })
            }
            _ => malformed("OFFSET_HOLE chunk")(),
        },
        REPLY_TYPE_BLOCK_STATUS => {
            let id = be32(p, 0).ok_or(ClientError::Malformed("BLOCK_STATUS chunk"))?;
            let descriptors = p.get(4..).unwrap_or_default();
            if descriptors.is_empty() || descriptors.len() % 8 != 0 {
                return malformed("BLOCK_STATUS chunk length")();
            }
            let extents = descriptors
                .chunks_exact(8)
                .map(|d| (be32(d, 0).unwrap_or(0), be32(d, 4).unwrap_or(0)))
                .collect();
            Ok(Chunk::BlockStatus { id, extents })
        }
        REPLY_TYPE_ERROR_OFFSET => {
            let (error, message) = error_head()?;
            match be64(p, 6 + message.len()) {
                Some(offset) if p.len() == 14 + message.len() => Ok(Chunk::ErrorOffset {
                    error,
                    message,
                    offset,
                }),
                _ => malformed("ERROR_OFFSET chunk")(),
            }
        }
        k if k & (1 << 15) != 0 => {
            let (error, message) = error_head()?;
            if k == REPLY_TYPE_ERROR && p.len() != 6 + message.len() {
                return malformed("ERROR chunk length")();
            }
            Ok(Chunk::Error {
                kind: k,
                error,
                message,
            })
        }
        k => Ok(Chunk::Unknown(k)),
    }
}
