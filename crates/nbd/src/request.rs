//! Transmission-phase requests: the 28-byte header and the checks the spec asks of a
//! server before it touches the disk.

use crate::consts::*;

pub const REQUEST_LEN: usize = 28;

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
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    pub flags: u16,
    pub command: Command,
    pub cookie: u64,
    pub offset: u64,
    pub length: u32,
}

impl Request {
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
    let t = match r.command {
        Command::Read => CMD_READ,
        Command::Write => CMD_WRITE,
        Command::Disc => CMD_DISC,
        Command::Flush => CMD_FLUSH,
        Command::Trim => CMD_TRIM,
        Command::Cache => CMD_CACHE,
        Command::WriteZeroes => CMD_WRITE_ZEROES,
        Command::BlockStatus => CMD_BLOCK_STATUS,
        Command::Unknown(t) => t,
    };
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
    /// Largest READ/WRITE payload.
    pub max_payload: u32,
    pub structured_replies: bool,
    pub meta_context: bool,
}

/// Why a request is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Reply with this error (after reading and dropping a WRITE's payload).
    Error(u32),
    /// Close the connection: a WRITE payload too large to read, or one the server will not
    /// skip.
    Disconnect(&'static str),
}

/// The spec's checks, in the order a server applies them.
pub fn validate(r: &Request, l: &Limits) -> Result<(), Refusal> {
    use Refusal::{Disconnect, Error};
    // FUA is valid on every command (the spec: a server must accept it where it means
    // nothing).
    let allowed = CMD_FLAG_FUA
        | match r.command {
            Command::Read if l.structured_replies => CMD_FLAG_DF,
            Command::WriteZeroes => CMD_FLAG_NO_HOLE | CMD_FLAG_FAST_ZERO,
            Command::BlockStatus => CMD_FLAG_REQ_ONE,
            Command::Unknown(_) => return Err(Error(EINVAL)),
            _ => 0,
        };
    if r.command == Command::Write && r.length > l.max_payload {
        return Err(Disconnect("write payload larger than the server accepts"));
    }
    if r.flags & !allowed != 0 {
        return Err(Error(EINVAL));
    }
    let end = r.offset.checked_add(u64::from(r.length));
    let block = u64::from(l.min_block.max(1));
    let aligned = r.offset.is_multiple_of(block) && u64::from(r.length).is_multiple_of(block);
    match r.command {
        Command::Disc | Command::Flush => Ok(()),
        Command::Read => {
            if r.length == 0 || r.length > l.max_payload || !aligned {
                return Err(Error(EINVAL));
            }
            if end.is_none_or(|e| e > l.size) {
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
            if end.is_none_or(|e| e > l.size) {
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
            if r.length == 0 || end.is_none_or(|e| e > l.size) {
                return Err(Error(EINVAL));
            }
            Ok(())
        }
        Command::Unknown(_) => Err(Error(EINVAL)),
    }
}
