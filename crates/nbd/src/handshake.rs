//! The server side of the fixed newstyle handshake as a state machine on bytes.
//!
//! The shell sends [`Handshake::greeting`], then repeatedly reads exactly
//! [`Handshake::want`] bytes and passes them to [`Handshake::feed`], writing whatever the
//! machine appended to `out` before acting on the returned [`Step`]. Nothing here allocates
//! by a length the client chose beyond [`MAX_OPTION`]: longer option payloads are skipped in
//! bounded pieces.
//!
//! Where the spec leaves a choice, this machine:
//! - closes when the client flags lack `FIXED_NEWSTYLE` or carry unknown bits;
//! - reads option payloads up to [`MAX_OPTION`] whole; skips longer ones up to [`MAX_SKIP`]
//!   and answers `ERR_TOO_BIG` (`EXPORT_NAME` closes, since it cannot be refused; `ABORT`
//!   is acknowledged, its data ignored); closes on anything longer (the spec's
//!   denial-of-service clause);
//! - with `tls_required` runs FORCEDTLS: before STARTTLS every option but STARTTLS and ABORT
//!   gets `ERR_TLS_REQD` and `EXPORT_NAME` closes; a successful STARTTLS forgets structured
//!   replies and the meta context selection;
//! - answers INFO/GO with `INFO_EXPORT`, `INFO_BLOCK_SIZE` always (asked for or not; a client
//!   that did not ask is still let in, never `ERR_BLOCK_SIZE_REQD`), and `INFO_NAME` /
//!   `INFO_DESCRIPTION` when asked (an empty description is omitted);
//! - offers the one context `base:allocation`: LIST with no queries or with `base:` or
//!   `base:allocation` lists it (id 0), other queries match nothing; SET needs structured
//!   replies (else `ERR_INVALID`), selects it for `base:allocation` only, with id
//!   [`BASE_ALLOCATION_ID`], and replaces the earlier selection even when it fails; the
//!   selection counts only if GO/EXPORT_NAME then picks the same export;
//! - accepts repeated stateful options (STRUCTURED_REPLY twice is acknowledged twice);
//! - answers unknown options, `EXTENDED_HEADERS` included, with `ERR_UNSUP`.

use crate::consts::*;
use crate::spec_string;

/// Longest option payload read whole; longer ones are skipped and refused.
pub const MAX_OPTION: usize = 16 * 1024;
/// Longest option payload skipped; a client sending more is disconnected.
pub const MAX_SKIP: u64 = 1 << 20;
/// Piece size when skipping.
const SKIP_PIECE: usize = 16 * 1024;

/// One export as offered in the handshake.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportInfo {
    pub name: String,
    pub description: String,
    pub size: u64,
    /// Transmission flags (FLAG_HAS_FLAGS is added by the machine).
    pub flags: u16,
    pub min_block: u32,
    pub preferred_block: u32,
    pub max_block: u32,
}

/// What the server offers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Offer {
    pub exports: Vec<ExportInfo>,
    /// The export an empty name selects.
    pub default_export: Option<usize>,
    /// STARTTLS is possible.
    pub tls: bool,
    /// Refuse everything but STARTTLS and ABORT before TLS.
    pub tls_required: bool,
}

/// The outcome of a successful handshake.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Negotiated {
    pub export: usize,
    pub structured_replies: bool,
    /// The id of base:allocation if the client selected it for this export.
    pub meta_context: Option<u32>,
}

/// What the shell does after a `feed`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Write `out`, then read `want()` bytes.
    Continue,
    /// Write `out` (the ACK) in plain text, then run TLS as the server; read on over TLS.
    StartTls,
    /// Write `out`; transmission starts.
    Done(Negotiated),
    /// Write `out` if anything, then close the connection.
    Close(&'static str),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    ClientFlags,
    OptionHeader,
    OptionData { option: u32, len: usize },
    Skip { option: u32, left: u64 },
    Finished,
}

/// The handshake of one connection.
#[derive(Debug)]
pub struct Handshake<'a> {
    offer: &'a Offer,
    state: State,
    no_zeroes: bool,
    tls_active: bool,
    structured: bool,
    /// base:allocation selected for this export name.
    meta_for: Option<String>,
}

fn be_u16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

fn be_u32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn be_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

/// Appends one option reply.
pub fn option_reply(out: &mut Vec<u8>, option: u32, reply: u32, data: &[u8]) {
    out.extend_from_slice(&OPTION_REPLY_MAGIC.to_be_bytes());
    out.extend_from_slice(&option.to_be_bytes());
    out.extend_from_slice(&reply.to_be_bytes());
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
}

/// A reader over an option payload that fails instead of panicking.
struct Cursor<'b> {
    b: &'b [u8],
}

impl<'b> Cursor<'b> {
    fn take(&mut self, n: usize) -> Option<&'b [u8]> {
        if self.b.len() < n {
            return None;
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Some(h)
    }
    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(be_u16)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4).map(be_u32)
    }
    /// A u32-length-prefixed string of at most MAX_STRING bytes.
    fn string(&mut self) -> Option<&'b [u8]> {
        let n = self.u32()? as usize;
        if n > MAX_STRING {
            return None;
        }
        self.take(n)
    }
}

impl<'a> Handshake<'a> {
    pub fn new(offer: &'a Offer) -> Handshake<'a> {
        Handshake {
            offer,
            state: State::ClientFlags,
            no_zeroes: false,
            tls_active: false,
            structured: false,
            meta_for: None,
        }
    }

    /// The server's first 18 bytes.
    pub fn greeting() -> Vec<u8> {
        let mut g = Vec::with_capacity(18);
        g.extend_from_slice(&NBDMAGIC.to_be_bytes());
        g.extend_from_slice(&IHAVEOPT.to_be_bytes());
        g.extend_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
        g
    }

    /// Bytes to read before the next `feed` (0 once finished).
    pub fn want(&self) -> usize {
        match self.state {
            State::ClientFlags => 4,
            State::OptionHeader => 16,
            State::OptionData { len, .. } => len,
            State::Skip { left, .. } => left.min(SKIP_PIECE as u64) as usize,
            State::Finished => 0,
        }
    }

    /// Feeds exactly `want()` bytes; replies are appended to `out`.
    pub fn feed(&mut self, data: &[u8], out: &mut Vec<u8>) -> Step {
        if data.len() != self.want() || self.state == State::Finished {
            self.state = State::Finished;
            return Step::Close("internal: fed the wrong number of bytes");
        }
        match self.state {
            State::ClientFlags => {
                let flags = be_u32(data);
                if flags & !(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES) != 0 {
                    return self.close("unknown client flags");
                }
                if flags & FLAG_C_FIXED_NEWSTYLE == 0 {
                    return self.close("client does not speak fixed newstyle");
                }
                self.no_zeroes = flags & FLAG_C_NO_ZEROES != 0;
                self.state = State::OptionHeader;
                Step::Continue
            }
            State::OptionHeader => {
                if be_u64(data) != IHAVEOPT {
                    return self.close("bad option magic");
                }
                let option = be_u32(&data[8..]);
                let len = u64::from(be_u32(&data[12..]));
                if len as usize > MAX_OPTION {
                    if len > MAX_SKIP {
                        return self.close("option payload too large");
                    }
                    self.state = State::Skip { option, left: len };
                } else if len == 0 {
                    self.state = State::OptionHeader;
                    return self.option(option, &[], out);
                } else {
                    self.state = State::OptionData {
                        option,
                        len: len as usize,
                    };
                }
                Step::Continue
            }
            State::OptionData { option, .. } => {
                self.state = State::OptionHeader;
                self.option(option, data, out)
            }
            State::Skip { option, left } => {
                let left = left - data.len() as u64;
                if left > 0 {
                    self.state = State::Skip { option, left };
                    return Step::Continue;
                }
                self.state = State::OptionHeader;
                match option {
                    OPT_EXPORT_NAME => return self.close("export name too long"),
                    // ABORT's data is to be ignored, however long.
                    OPT_ABORT => return self.option(option, &[], out),
                    _ => {}
                }
                option_reply(out, option, REP_ERR_TOO_BIG, b"option payload too large");
                Step::Continue
            }
            State::Finished => Step::Close("handshake already finished"),
        }
    }

    fn close(&mut self, why: &'static str) -> Step {
        self.state = State::Finished;
        Step::Close(why)
    }

    /// The export a name selects (the empty name: the default, if it exists).
    fn find_export(&self, name: &[u8]) -> Option<(usize, &'a ExportInfo)> {
        let exports = &self.offer.exports;
        let i = if name.is_empty() {
            self.offer.default_export?
        } else {
            exports.iter().position(|e| e.name.as_bytes() == name)?
        };
        exports.get(i).map(|e| (i, e))
    }

    fn err(out: &mut Vec<u8>, option: u32, reply: u32, msg: &str) -> Step {
        option_reply(out, option, reply, msg.as_bytes());
        Step::Continue
    }

    fn option(&mut self, option: u32, data: &[u8], out: &mut Vec<u8>) -> Step {
        let tls_blocked = self.offer.tls_required && !self.tls_active;
        match option {
            OPT_ABORT => {
                option_reply(out, option, REP_ACK, &[]);
                self.close("client aborted")
            }
            OPT_STARTTLS => {
                if !data.is_empty() {
                    Self::err(out, option, REP_ERR_INVALID, "STARTTLS takes no data")
                } else if self.tls_active {
                    Self::err(out, option, REP_ERR_INVALID, "TLS is already on")
                } else if !self.offer.tls {
                    Self::err(out, option, REP_ERR_UNSUP, "TLS is not configured")
                } else {
                    option_reply(out, option, REP_ACK, &[]);
                    // Anything negotiated in plain text does not carry over.
                    self.tls_active = true;
                    self.structured = false;
                    self.meta_for = None;
                    Step::StartTls
                }
            }
            OPT_EXPORT_NAME => {
                if tls_blocked {
                    return self.close("TLS required before choosing an export");
                }
                let Some((i, e)) = self.find_export(data) else {
                    return self.close("unknown export");
                };
                out.extend_from_slice(&e.size.to_be_bytes());
                out.extend_from_slice(&(e.flags | FLAG_HAS_FLAGS).to_be_bytes());
                if !self.no_zeroes {
                    out.extend_from_slice(&[0u8; 124]);
                }
                self.finish(i, e)
            }
            _ if tls_blocked => Self::err(out, option, REP_ERR_TLS_REQD, "TLS is required"),
            OPT_LIST => {
                if !data.is_empty() {
                    return Self::err(out, option, REP_ERR_INVALID, "LIST takes no data");
                }
                for e in &self.offer.exports {
                    let mut d = Vec::with_capacity(4 + e.name.len());
                    d.extend_from_slice(&(e.name.len() as u32).to_be_bytes());
                    d.extend_from_slice(e.name.as_bytes());
                    d.extend_from_slice(spec_string(&e.description));
                    option_reply(out, option, REP_SERVER, &d);
                }
                option_reply(out, option, REP_ACK, &[]);
                Step::Continue
            }
            OPT_INFO | OPT_GO => self.info_or_go(option, data, out),
            OPT_STRUCTURED_REPLY => {
                if !data.is_empty() {
                    return Self::err(out, option, REP_ERR_INVALID, "takes no data");
                }
                self.structured = true;
                option_reply(out, option, REP_ACK, &[]);
                Step::Continue
            }
            OPT_LIST_META_CONTEXT | OPT_SET_META_CONTEXT => self.meta_context(option, data, out),
            _ => Self::err(out, option, REP_ERR_UNSUP, "option not supported"),
        }
    }

    fn finish(&mut self, export: usize, e: &ExportInfo) -> Step {
        let name = &e.name;
        let meta = (self.structured && self.meta_for.as_deref() == Some(name.as_str()))
            .then_some(BASE_ALLOCATION_ID);
        self.state = State::Finished;
        Step::Done(Negotiated {
            export,
            structured_replies: self.structured,
            meta_context: meta,
        })
    }

    fn info_or_go(&mut self, option: u32, data: &[u8], out: &mut Vec<u8>) -> Step {
        let mut c = Cursor { b: data };
        let parsed = (|| {
            let name = c.string()?;
            let n = c.u16()? as usize;
            let mut infos = Vec::with_capacity(n.min(16));
            for _ in 0..n {
                infos.push(c.u16()?);
            }
            c.b.is_empty().then_some((name, infos))
        })();
        let Some((name, infos)) = parsed else {
            return Self::err(out, option, REP_ERR_INVALID, "malformed INFO/GO request");
        };
        let Some((i, e)) = self.find_export(name) else {
            return Self::err(out, option, REP_ERR_UNKNOWN, "no such export");
        };
        let mut d = Vec::with_capacity(12);
        d.extend_from_slice(&INFO_EXPORT.to_be_bytes());
        d.extend_from_slice(&e.size.to_be_bytes());
        d.extend_from_slice(&(e.flags | FLAG_HAS_FLAGS).to_be_bytes());
        option_reply(out, option, REP_INFO, &d);
        // BLOCK_SIZE goes out whether asked for or not (the spec lets a server send
        // information it was not asked for, and wants non-default constraints advertised);
        // a client that did not ask is still accepted (no ERR_BLOCK_SIZE_REQD).
        let mut sent = [false; 4];
        for t in infos.iter().copied().chain([INFO_BLOCK_SIZE]) {
            match sent.get_mut(usize::from(t)) {
                Some(s) if *s => continue,
                Some(s) => *s = true,
                None => {}
            }
            let mut d = t.to_be_bytes().to_vec();
            match t {
                INFO_NAME => d.extend_from_slice(e.name.as_bytes()),
                INFO_DESCRIPTION if !e.description.is_empty() => {
                    d.extend_from_slice(spec_string(&e.description))
                }
                INFO_BLOCK_SIZE => {
                    for v in [e.min_block, e.preferred_block, e.max_block] {
                        d.extend_from_slice(&v.to_be_bytes());
                    }
                }
                _ => continue,
            }
            option_reply(out, option, REP_INFO, &d);
        }
        option_reply(out, option, REP_ACK, &[]);
        if option == OPT_GO {
            return self.finish(i, e);
        }
        Step::Continue
    }

    fn meta_context(&mut self, option: u32, data: &[u8], out: &mut Vec<u8>) -> Step {
        if option == OPT_SET_META_CONTEXT {
            // A SET replaces the earlier selection even when it fails.
            self.meta_for = None;
        }
        let mut c = Cursor { b: data };
        let parsed = (|| {
            let name = c.string()?;
            let n = c.u32()? as usize;
            let mut queries = Vec::with_capacity(n.min(16));
            for _ in 0..n {
                queries.push(c.string()?);
            }
            c.b.is_empty().then_some((name, queries))
        })();
        let Some((name, queries)) = parsed else {
            return Self::err(
                out,
                option,
                REP_ERR_INVALID,
                "malformed meta context request",
            );
        };
        if option == OPT_SET_META_CONTEXT && !self.structured {
            return Self::err(
                out,
                option,
                REP_ERR_INVALID,
                "structured replies must be negotiated first",
            );
        }
        let Some((_, e)) = self.find_export(name) else {
            return Self::err(out, option, REP_ERR_UNKNOWN, "no such export");
        };
        let matches = |q: &[u8]| -> bool {
            if option == OPT_LIST_META_CONTEXT {
                q == b"base:" || q == BASE_ALLOCATION.as_bytes()
            } else {
                q == BASE_ALLOCATION.as_bytes()
            }
        };
        let selected = if queries.is_empty() {
            option == OPT_LIST_META_CONTEXT
        } else {
            queries.iter().any(|q| matches(q))
        };
        if selected {
            let mut d = Vec::with_capacity(4 + BASE_ALLOCATION.len());
            let id = if option == OPT_SET_META_CONTEXT {
                BASE_ALLOCATION_ID
            } else {
                0
            };
            d.extend_from_slice(&id.to_be_bytes());
            d.extend_from_slice(BASE_ALLOCATION.as_bytes());
            option_reply(out, option, REP_META_CONTEXT, &d);
        }
        if option == OPT_SET_META_CONTEXT {
            self.meta_for = selected.then(|| e.name.clone());
        }
        option_reply(out, option, REP_ACK, &[]);
        Step::Continue
    }
}
