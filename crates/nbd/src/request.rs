//! Transmission-phase requests: the 28-byte header ([`parse`], [`encode`]) and the checks
//! the spec asks of a server before it touches the disk ([`validate`]).

use crate::consts::*;

/// Bytes in a request header.
pub const REQUEST_LEN: usize = 28;

/// A request's type; [`Command::Unknown`] keeps the wire number of any other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    Read,
    Write,
    Disc,
    Flush,
    Trim,
    Cache,
    WriteZeroes,
    BlockStatus,
    Unknown(u16),
}

impl Command {
    /// The command for a wire number.
    pub fn from_wire(t: u16) -> Command {
        match t {
            CMD_READ => Command::Read,
            CMD_WRITE => Command::Write,
            CMD_DISC => Command::Disc,
            CMD_FLUSH => Command::Flush,
            CMD_TRIM => Command::Trim,
            CMD_CACHE => Command::Cache,
            CMD_WRITE_ZEROES => Command::WriteZeroes,
            CMD_BLOCK_STATUS => Command::BlockStatus,
            other => Command::Unknown(other),
        }
    }

    /// The wire number.
    pub fn to_wire(self) -> u16 {
        match self {
            Command::Read => CMD_READ,
            Command::Write => CMD_WRITE,
            Command::Disc => CMD_DISC,
            Command::Flush => CMD_FLUSH,
            Command::Trim => CMD_TRIM,
            Command::Cache => CMD_CACHE,
            Command::WriteZeroes => CMD_WRITE_ZEROES,
            Command::BlockStatus => CMD_BLOCK_STATUS,
            Command::Unknown(t) => t,
        }
    }
}

/// A request header. `cookie` is opaque (the spec's former "handle").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    pub flags: u16,
    pub command: Command,
    pub cookie: u64,
    pub offset: u64,
    pub length: u32,
}

impl Request {
    /// NBD_CMD_FLAG_FUA is set.
    pub fn fua(&self) -> bool {
        self.flags & CMD_FLAG_FUA != 0
    }

    /// Bytes of payload that follow the header on the wire.
    pub fn payload_len(&self) -> u32 {
        if self.command == Command::Write {
            self.length
        } else {
            0
        }
    }
}

/// Parses a request header; `None` for a bad magic (the connection cannot be trusted any
/// more and must be closed).
pub fn parse(h: &[u8; REQUEST_LEN]) -> Option<Request> {
    let u16_at = |i: usize| u16::from_be_bytes([h[i], h[i + 1]]);
    let u32_at = |i: usize| u32::from_be_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
    let u64_at = |i: usize| (u64::from(u32_at(i)) << 32) | u64::from(u32_at(i + 4));
    if u32_at(0) != REQUEST_MAGIC {
        return None;
    }
    Some(Request {
        flags: u16_at(4),
        command: Command::from_wire(u16_at(6)),
        cookie: u64_at(8),
        offset: u64_at(16),
        length: u32_at(24),
    })
}

/// Encodes a request header (the client side; tests and tools).
pub fn encode(r: &Request) -> [u8; REQUEST_LEN] {
    let t = r.command.to_wire();
    let mut h = [0u8; REQUEST_LEN];
    h[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
    h[4..6].copy_from_slice(&r.flags.to_be_bytes());
    h[6..8].copy_from_slice(&t.to_be_bytes());
    h[8..16].copy_from_slice(&r.cookie.to_be_bytes());
    h[16..24].copy_from_slice(&r.offset.to_be_bytes());
    h[24..28].copy_from_slice(&r.length.to_be_bytes());
    h
}

/// What the server knows about the export and the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub size: u64,
    pub read_only: bool,
    /// Offsets and lengths of data commands must be multiples of this.
    pub min_block: u32,
    /// Largest READ/WRITE payload (the advertised maximum block size).
    pub max_payload: u32,
    /// Structured replies were negotiated (DF is valid on READ).
    pub structured_replies: bool,
    /// A meta context was selected for this export (BLOCK_STATUS is valid).
    pub meta_context: bool,
}

/// Why a request is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Reply with this error. For a WRITE the shell first reads and drops its payload
    /// ([`Request::payload_len`] bytes), so the stream stays in step.
    Error(u32),
    /// Close the connection without a reply: a WRITE whose payload is larger than both the
    /// export's maximum and the 32 MiB the spec says never to treat as an attack, so the
    /// server does not read it.
    Disconnect(&'static str),
}

/// The spec's checks, in the order a server applies them:
/// 1. unknown command: `EINVAL`;
/// 2. a WRITE over `max_payload`: `EINVAL` up to [`DEFAULT_MAX_PAYLOAD`] (payload dropped),
///    [`Refusal::Disconnect`] beyond;
/// 3. a flag not documented for the command: `EINVAL` (FUA is accepted on every command, as
///    the spec requires; DF only on READ with structured replies; NO_HOLE and FAST_ZERO only
///    on WRITE_ZEROES; REQ_ONE only on BLOCK_STATUS);
/// 4. per command: FLUSH needs offset and length 0 (`EINVAL`); DISC is always accepted;
///    WRITE, WRITE_ZEROES and TRIM on a read-only export: `EPERM`; READ, WRITE,
///    WRITE_ZEROES, TRIM: length 0 or offset/length not multiples of `min_block`: `EINVAL`;
///    a READ over `max_payload`: `EOVERFLOW` with structured replies (the spec allows
///    refusing large reads up front), else `EINVAL`; past the end of the export (or
///    `offset + length` overflowing): `ENOSPC` for WRITE and WRITE_ZEROES, `EINVAL` for
///    READ, TRIM, CACHE and BLOCK_STATUS; CACHE and BLOCK_STATUS need a nonzero length but
///    no alignment (they are hints); BLOCK_STATUS without a selected meta context: `EINVAL`.
///
/// TRIM and WRITE_ZEROES are not limited by `max_payload` (the spec says a server should not
/// refuse them for that).
pub fn validate(r: &Request, l: &Limits) -> Result<(), Refusal> {
    use Refusal::{Disconnect, Error};
    let allowed = CMD_FLAG_FUA
        | match r.command {
            Command::Read if l.structured_replies => CMD_FLAG_DF,
            Command::WriteZeroes => CMD_FLAG_NO_HOLE | CMD_FLAG_FAST_ZERO,
            Command::BlockStatus => CMD_FLAG_REQ_ONE,
            Command::Unknown(_) => return Err(Error(EINVAL)),
            _ => 0,
        };
    if r.command == Command::Write && r.length > l.max_payload {
        if r.length > l.max_payload.max(DEFAULT_MAX_PAYLOAD) {
            return Err(Disconnect("write payload larger than the server accepts"));
        }
        return Err(Error(EINVAL));
    }
    if r.flags & !allowed != 0 {
        return Err(Error(EINVAL));
    }
    let end = r.offset.checked_add(u64::from(r.length));
    let past_end = end.is_none_or(|e| e > l.size);
    let block = u64::from(l.min_block.max(1));
    let aligned = r.offset.is_multiple_of(block) && u64::from(r.length).is_multiple_of(block);
    match r.command {
        Command::Disc => Ok(()),
        Command::Flush => {
            if r.offset != 0 || r.length != 0 {
                return Err(Error(EINVAL));
            }
            Ok(())
        }
        Command::Read => {
            if r.length == 0 || !aligned {
                return Err(Error(EINVAL));
            }
            if r.length > l.max_payload {
                return Err(Error(if l.structured_replies {
                    EOVERFLOW
                } else {
                    EINVAL
                }));
            }
            if past_end {
                return Err(Error(EINVAL));
            }
            Ok(())
        }
        Command::Write | Command::WriteZeroes | Command::Trim => {
            if l.read_only {
                return Err(Error(EPERM));
            }
            if r.length == 0 || !aligned {
                return Err(Error(EINVAL));
            }
            if past_end {
                // Writing past the end is out of space; trimming there is just invalid.
                let errno = if r.command == Command::Trim {
                    EINVAL
                } else {
                    ENOSPC
                };
                return Err(Error(errno));
            }
            Ok(())
        }
        Command::Cache | Command::BlockStatus => {
            if r.command == Command::BlockStatus && !l.meta_context {
                return Err(Error(EINVAL));
            }
            if r.length == 0 || past_end {
                return Err(Error(EINVAL));
            }
            Ok(())
        }
        Command::Unknown(_) => Err(Error(EINVAL)),
    }
}
