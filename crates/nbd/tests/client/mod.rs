//! The client side of the handshake, as much as the tests need: option requests out, option
//! replies in, and a session that feeds the server machine exactly what it asks for.
#![allow(dead_code)]

use raidd_nbd::client;
use raidd_nbd::consts::*;
use raidd_nbd::{ExportInfo, Handshake, Negotiated, Offer, Step};

/// Two exports; the first is the default, read-only, with a description.
pub fn offer() -> Offer {
    Offer {
        exports: vec![
            ExportInfo {
                name: "disk0".into(),
                description: "first disk".into(),
                size: 1 << 30,
                flags: FLAG_READ_ONLY | FLAG_SEND_FLUSH,
                min_block: 512,
                preferred_block: 4096,
                max_block: 32 << 20,
            },
            ExportInfo {
                name: "disk1".into(),
                description: String::new(),
                size: 12345 * 512,
                flags: FLAG_SEND_FLUSH | FLAG_SEND_FUA | FLAG_SEND_TRIM,
                min_block: 1,
                preferred_block: 4096,
                max_block: 1 << 20,
            },
        ],
        default_export: Some(0),
        tls: false,
        tls_required: false,
    }
}

pub fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

pub fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

pub fn be64(b: &[u8]) -> u64 {
    (u64::from(be32(b)) << 32) | u64::from(be32(&b[4..]))
}

/// An option header claiming `len` bytes of data.
pub fn opt_header(option: u32, len: u32) -> Vec<u8> {
    let mut v = Vec::new();
    client::option_header(&mut v, option, len);
    v
}

/// A whole option request.
pub fn opt(option: u32, data: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    client::option(&mut v, option, data);
    v
}

/// The data of an INFO or GO request.
pub fn info_request(name: &[u8], infos: &[u16]) -> Vec<u8> {
    client::info_data(name, infos)
}

/// The data of a LIST_META_CONTEXT or SET_META_CONTEXT request.
pub fn meta_request(name: &[u8], queries: &[&[u8]]) -> Vec<u8> {
    client::meta_context_data(name, queries)
}

pub type OptReply = client::OptionReply;

/// Splits server output into option replies; `Err` says where it is not well formed.
pub fn try_parse_replies(mut b: &[u8]) -> Result<Vec<OptReply>, String> {
    let mut replies = Vec::new();
    while !b.is_empty() {
        match client::parse_option_reply(b) {
            Ok(Some((r, used))) => {
                replies.push(r);
                b = &b[used..];
            }
            Ok(None) => return Err(format!("{} trailing bytes", b.len())),
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(replies)
}

pub fn parse_replies(b: &[u8]) -> Vec<OptReply> {
    match try_parse_replies(b) {
        Ok(r) => r,
        Err(e) => panic!("malformed server output: {e}: {b:02x?}"),
    }
}

/// Checks what the spec says of each reply type's data (beyond framing).
pub fn check_reply(r: &OptReply) -> Result<(), String> {
    let ok = match r.kind {
        REP_ACK => r.data.is_empty(),
        REP_SERVER => client::parse_server(&r.data).is_ok(),
        REP_INFO => !matches!(
            client::parse_info(&r.data),
            Err(_) | Ok(client::Info::Unknown(_))
        ),
        REP_META_CONTEXT => r.data.len() > 4 && client::parse_meta_context(&r.data).is_ok(),
        k if k & (1 << 31) != 0 => std::str::from_utf8(&r.data).is_ok(),
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(format!("bad reply {r:?}"))
    }
}

pub fn kinds(r: &[OptReply]) -> Vec<(u32, u32)> {
    r.iter().map(|r| (r.option, r.kind)).collect()
}

pub fn done(export: usize, structured: bool, meta: Option<u32>) -> Step {
    Step::Done(Negotiated {
        export,
        structured_replies: structured,
        meta_context: meta,
    })
}

/// A server machine with an input buffer: `send` feeds it whole `want()`-sized pieces as
/// they become available and returns the steps it took.
pub struct Session<'a> {
    pub hs: Handshake<'a>,
    pub out: Vec<u8>,
    pending: Vec<u8>,
}

impl<'a> Session<'a> {
    pub fn new(offer: &'a Offer) -> Session<'a> {
        Session {
            hs: Handshake::new(offer),
            out: Vec::new(),
            pending: Vec::new(),
        }
    }

    /// Past the client flags (fixed newstyle, zeroes wanted).
    pub fn started(offer: &'a Offer) -> Session<'a> {
        Session::with_flags(offer, FLAG_C_FIXED_NEWSTYLE)
    }

    pub fn with_flags(offer: &'a Offer, flags: u32) -> Session<'a> {
        let mut s = Session::new(offer);
        assert_eq!(s.send(&flags.to_be_bytes()), Step::Continue);
        s
    }

    /// Sends bytes and returns the last step they caused (the machine must take at least
    /// one).
    pub fn send(&mut self, bytes: &[u8]) -> Step {
        match self.send_all(bytes).pop() {
            Some(step) => step,
            None => panic!("{} bytes caused no step", bytes.len()),
        }
    }

    /// Sends bytes and returns every step they caused.
    pub fn send_all(&mut self, bytes: &[u8]) -> Vec<Step> {
        self.pending.extend_from_slice(bytes);
        let mut steps = Vec::new();
        loop {
            let w = self.hs.want();
            if w == 0 || self.pending.len() < w {
                // A zero-length option is handled in the header feed; want() is never 0
                // until the machine is finished.
                return steps;
            }
            let piece: Vec<u8> = self.pending.drain(..w).collect();
            let step = self.hs.feed(&piece, &mut self.out);
            let end = matches!(step, Step::Close(_) | Step::Done(_));
            steps.push(step);
            if end {
                return steps;
            }
        }
    }

    /// Takes the output so far as option replies.
    pub fn replies(&mut self) -> Vec<OptReply> {
        let r = parse_replies(&self.out);
        for reply in &r {
            if let Err(e) = check_reply(reply) {
                panic!("{e}");
            }
        }
        self.out.clear();
        r
    }
}
