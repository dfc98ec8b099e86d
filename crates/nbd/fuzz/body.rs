//! The fuzz properties, shared by the cargo-fuzz targets (`fuzz_targets/handshake.rs`,
//! `fuzz_targets/request.rs`) and the plain test that runs them without a nightly compiler
//! (`tests/fuzz_bodies.rs`).
//!
//! `handshake`: the server machine driven with arbitrary client bytes never panics, never
//! asks for more than it may, and everything it writes is well formed for the option being
//! answered. `request`: parsing and validating any header against any limits never panics,
//! round-trips, and accepts only requests that are safe to serve.
// Each fuzz target uses one of the two bodies.
#![allow(dead_code)]

use raidd_nbd::consts::*;
use raidd_nbd::handshake::{MAX_OPTION, MAX_SKIP};
use raidd_nbd::request::{encode, parse, validate, REQUEST_LEN};
use raidd_nbd::{Command, ExportInfo, Handshake, Limits, Offer, Refusal, Step};

/// The most the machine may ask for in one read.
const MAX_WANT: usize = if MAX_OPTION > 16 * 1024 {
    MAX_OPTION
} else {
    16 * 1024
};

/// How a handshake run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    /// The input ran out before the machine finished.
    Starved,
    Closed,
    DoneExportName,
    DoneGo,
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn be64(b: &[u8]) -> u64 {
    (u64::from(be32(b)) << 32) | u64::from(be32(&b[4..]))
}

/// The offer a run uses; `config` bit 0: TLS possible, bit 1: TLS required, bit 2: no
/// default export, bit 3: no exports at all.
pub fn offer(config: u8) -> Offer {
    let export = |name: &str, size: u64, flags: u16| ExportInfo {
        name: name.into(),
        description: format!("{name} export"),
        size,
        flags,
        min_block: 512,
        preferred_block: 4096,
        max_block: 1 << 25,
    };
    let exports = if config & 8 != 0 {
        Vec::new()
    } else {
        vec![
            export("a", 1 << 30, FLAG_READ_ONLY),
            export("disk", 4096, FLAG_SEND_FLUSH | FLAG_SEND_TRIM),
        ]
    };
    Offer {
        default_export: (config & 4 == 0 && !exports.is_empty()).then_some(0),
        exports,
        tls: config & 1 != 0,
        tls_required: config & 2 != 0,
    }
}

/// Option replies in `out`, each checked for framing, for answering `option`, and for the
/// shape of its data. Returns (reply type, data) pairs.
fn replies(mut out: &[u8], option: u32) -> Vec<(u32, &[u8])> {
    let mut r = Vec::new();
    while !out.is_empty() {
        assert!(out.len() >= 20, "truncated option reply: {out:02x?}");
        assert_eq!(be64(out), OPTION_REPLY_MAGIC, "bad option reply magic");
        assert_eq!(be32(&out[8..]), option, "reply for another option");
        let kind = be32(&out[12..]);
        let len = be32(&out[16..]) as usize;
        assert!(out.len() >= 20 + len, "reply data past the output");
        let data = &out[20..20 + len];
        match kind {
            REP_ACK => assert!(data.is_empty(), "ACK with data"),
            REP_SERVER => {
                assert_eq!(option, OPT_LIST);
                assert!(data.len() >= 4 && be32(data) as usize <= data.len() - 4);
            }
            REP_INFO => {
                assert!(option == OPT_INFO || option == OPT_GO);
                assert!(data.len() >= 2);
                let t = u16::from_be_bytes([data[0], data[1]]);
                match t {
                    INFO_EXPORT => assert_eq!(data.len(), 12),
                    INFO_NAME | INFO_DESCRIPTION => {}
                    INFO_BLOCK_SIZE => assert_eq!(data.len(), 14),
                    _ => panic!("INFO reply of unknown type {t}"),
                }
            }
            REP_META_CONTEXT => {
                assert!(option == OPT_LIST_META_CONTEXT || option == OPT_SET_META_CONTEXT);
                assert_eq!(&data[4..], BASE_ALLOCATION.as_bytes());
                if option == OPT_SET_META_CONTEXT {
                    assert_eq!(be32(data), BASE_ALLOCATION_ID);
                }
            }
            k if k & (1 << 31) != 0 => {
                assert!(std::str::from_utf8(data).is_ok(), "error message not UTF-8");
            }
            k => panic!("unknown reply type {k:#x}"),
        }
        r.push((kind, data));
        out = &out[20 + len..];
    }
    r
}

/// What the client side knows of where the machine is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Expect {
    Flags,
    Header,
    Data { option: u32, left: u64 },
}

/// Drives the handshake with `data`. Byte 0 picks the offer ([`offer`]) and the mode: bit
/// 4 set frames the options here (the input gives a flags byte, then per option one option
/// byte and two length bytes, and the data), so inputs reach past the magic; bit 5 feeds a
/// short last piece when the input runs out, which must close.
pub fn handshake(data: &[u8]) -> Outcome {
    let Some((&config, mut input)) = data.split_first() else {
        return Outcome::Starved;
    };
    let offer = offer(config);
    let framed = config & 0x10 != 0;
    let short_tail = config & 0x20 != 0;
    let mut hs = Handshake::new(&offer);
    let mut expect = Expect::Flags;
    let mut no_zeroes = false;
    let mut tls = false;
    let mut structured = false;
    let mut out = Vec::new();
    let mut piece = Vec::new();
    loop {
        let want = hs.want();
        assert!(want > 0, "want() is 0 before the handshake ended");
        assert!(want <= MAX_WANT, "want() {want} too large");
        piece.clear();
        match expect {
            Expect::Flags => assert_eq!(want, 4),
            Expect::Header => assert_eq!(want, 16),
            Expect::Data { left, .. } => {
                assert!(want as u64 <= left);
                if left > MAX_OPTION as u64 {
                    assert!(want <= 16 * 1024);
                } else {
                    assert_eq!(want as u64, left);
                }
            }
        }
        // Build the piece the machine asked for.
        match (framed, expect) {
            (true, Expect::Flags) => {
                let Some((&b, rest)) = input.split_first() else {
                    return Outcome::Starved;
                };
                input = rest;
                let flags = if b & 0xe0 == 0xe0 {
                    u32::from(b) << (b % 24)
                } else {
                    FLAG_C_FIXED_NEWSTYLE | u32::from(b & 2)
                };
                piece.extend_from_slice(&flags.to_be_bytes());
            }
            (true, Expect::Header) => {
                if input.len() < 3 {
                    return Outcome::Starved;
                }
                let b = input[0];
                let option = if b < 0xc0 {
                    u32::from(b % 13)
                } else {
                    u32::from(b) * 0x0101_0101
                };
                // Mostly short; sometimes long enough to be skipped, or past the skip
                // limit.
                let x = u32::from(u16::from_be_bytes([input[1], input[2]]));
                let len = match x {
                    0..0xc000 => x % 64,
                    0xc000..0xf000 => x - 0xc000 + (x & 1) * MAX_OPTION as u32,
                    _ => (x - 0xf000) << 8,
                };
                input = &input[3..];
                piece.extend_from_slice(&IHAVEOPT.to_be_bytes());
                piece.extend_from_slice(&option.to_be_bytes());
                piece.extend_from_slice(&len.to_be_bytes());
            }
            _ => {
                if input.len() < want {
                    if short_tail {
                        let mut out = Vec::new();
                        let step = hs.feed(input, &mut out);
                        assert!(matches!(step, Step::Close(_)), "short feed: {step:?}");
                        assert!(out.is_empty());
                        assert_eq!(hs.want(), 0);
                        return Outcome::Closed;
                    }
                    return Outcome::Starved;
                }
                piece.extend_from_slice(&input[..want]);
                input = &input[want..];
            }
        }
        out.clear();
        let step = hs.feed(&piece, &mut out);
        let finished = matches!(step, Step::Close(_) | Step::Done(_));
        assert_eq!(hs.want() == 0, finished, "want() after {step:?}");

        // What the client expects next, and which option (if any) was just answered.
        let mut answered = None;
        match expect {
            Expect::Flags => {
                let flags = be32(&piece);
                let good = flags & !3 == 0 && flags & 1 != 0;
                assert_eq!(matches!(step, Step::Continue), good, "flags {flags:#x}");
                assert!(out.is_empty());
                no_zeroes = flags & 2 != 0;
                expect = Expect::Header;
            }
            Expect::Header => {
                let option = be32(&piece[8..]);
                let len = u64::from(be32(&piece[12..]));
                if be64(&piece) != IHAVEOPT || len > MAX_SKIP {
                    assert!(matches!(step, Step::Close(_)), "{step:?}");
                    assert!(out.is_empty());
                } else if len == 0 {
                    answered = Some(option);
                } else {
                    assert_eq!(step, Step::Continue);
                    assert!(out.is_empty());
                    expect = Expect::Data { option, left: len };
                }
            }
            Expect::Data { option, left } => {
                let left = left - piece.len() as u64;
                if left == 0 {
                    answered = Some(option);
                    expect = Expect::Header;
                } else {
                    assert_eq!(step, Step::Continue);
                    assert!(out.is_empty(), "output in the middle of an option");
                    expect = Expect::Data { option, left };
                }
            }
        }
        if let Some(option) = answered {
            expect = Expect::Header;
            let done_export_name = option == OPT_EXPORT_NAME && matches!(step, Step::Done(_));
            if done_export_name {
                let Step::Done(n) = &step else { unreachable!() };
                let e = &offer.exports[n.export];
                assert_eq!(out.len(), if no_zeroes { 10 } else { 134 });
                assert_eq!(be64(&out), e.size);
                assert_eq!(
                    u16::from_be_bytes([out[8], out[9]]),
                    e.flags | FLAG_HAS_FLAGS
                );
                assert!(out[10..].iter().all(|&b| b == 0));
            } else {
                let r = replies(&out, option);
                match &step {
                    Step::Continue => {
                        assert!(!r.is_empty(), "option {option} not answered");
                        let last = r[r.len() - 1].0;
                        assert!(last == REP_ACK || last & (1 << 31) != 0);
                        if option == OPT_STRUCTURED_REPLY && last == REP_ACK {
                            structured = true;
                        }
                    }
                    Step::StartTls => {
                        assert_eq!(option, OPT_STARTTLS);
                        assert!(offer.tls && !tls);
                        assert_eq!(r.len(), 1);
                        assert_eq!(r[0].0, REP_ACK);
                        tls = true;
                        structured = false;
                    }
                    Step::Done(_) => {
                        assert_eq!(option, OPT_GO);
                        assert!(r.len() >= 2);
                        assert_eq!(r[0].0, REP_INFO);
                        assert_eq!(&r[0].1[..2], &INFO_EXPORT.to_be_bytes());
                        assert_eq!(r[r.len() - 1].0, REP_ACK);
                    }
                    Step::Close(_) => {
                        if option == OPT_ABORT {
                            assert_eq!(r.len(), 1);
                            assert_eq!(r[0].0, REP_ACK);
                        } else {
                            // EXPORT_NAME refused (unknown, TLS required, too long).
                            assert_eq!(option, OPT_EXPORT_NAME);
                            assert!(r.is_empty());
                        }
                    }
                }
            }
        } else if !matches!(step, Step::Close(_)) {
            assert!(
                !matches!(step, Step::Done(_) | Step::StartTls),
                "{step:?} without an option"
            );
        }
        match step {
            Step::Done(n) => {
                assert!(n.export < offer.exports.len());
                assert!(!offer.tls_required || tls, "export chosen before TLS");
                assert_eq!(n.structured_replies, structured);
                if n.meta_context.is_some() {
                    assert!(n.structured_replies);
                    assert_eq!(n.meta_context, Some(BASE_ALLOCATION_ID));
                }
                // Nothing more is accepted.
                let mut more = Vec::new();
                assert!(matches!(hs.feed(&[], &mut more), Step::Close(_)));
                assert!(more.is_empty());
                return if answered == Some(OPT_EXPORT_NAME) {
                    Outcome::DoneExportName
                } else {
                    Outcome::DoneGo
                };
            }
            Step::Close(_) => return Outcome::Closed,
            Step::Continue | Step::StartTls => {}
        }
    }
}

/// Parses and validates a request header from the first 28 bytes against limits from the
/// next 17 (missing bytes read as zero). Byte 45 bit 0 stamps the request magic, bit 1
/// brings the offset near the export size. Returns whether the request was accepted.
pub fn request(data: &[u8]) -> bool {
    let mut b = [0u8; REQUEST_LEN + 18];
    let n = data.len().min(b.len());
    b[..n].copy_from_slice(&data[..n]);
    let tweak = b[REQUEST_LEN + 17];
    if tweak & 1 != 0 {
        b[..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
    }
    let l = &b[REQUEST_LEN..];
    let size = be64(l);
    let limits = Limits {
        size,
        min_block: be32(&l[8..]) >> (l[16] & 31),
        max_payload: be32(&l[12..]),
        read_only: l[16] & 0x20 != 0,
        structured_replies: l[16] & 0x40 != 0,
        meta_context: l[16] & 0x80 != 0,
    };
    if tweak & 2 != 0 && size > 0 {
        let offset = be64(&b[16..]) % size.saturating_add(1);
        b[16..24].copy_from_slice(&offset.to_be_bytes());
    }
    let mut header = [0u8; REQUEST_LEN];
    header.copy_from_slice(&b[..REQUEST_LEN]);
    let Some(r) = parse(&header) else {
        assert_ne!(header[..4], REQUEST_MAGIC.to_be_bytes());
        return false;
    };
    assert_eq!(encode(&r), header, "encode(parse(h)) != h");
    assert_eq!(parse(&encode(&r)), Some(r));
    let v = validate(&r, &limits);
    let end = r.offset.checked_add(u64::from(r.length));
    match v {
        Ok(()) => {
            let known = CMD_FLAG_FUA
                | CMD_FLAG_NO_HOLE
                | CMD_FLAG_DF
                | CMD_FLAG_REQ_ONE
                | CMD_FLAG_FAST_ZERO;
            assert_eq!(r.flags & !known, 0);
            match r.command {
                Command::Disc => {}
                Command::Flush => assert!(r.offset == 0 && r.length == 0),
                Command::Unknown(t) => panic!("unknown command {t} accepted"),
                c => {
                    assert!(r.length > 0);
                    assert!(end.is_some_and(|e| e <= limits.size), "out of range");
                    let writes = matches!(c, Command::Write | Command::Trim | Command::WriteZeroes);
                    assert!(!(writes && limits.read_only));
                    if matches!(c, Command::Read | Command::Write) {
                        assert!(r.length <= limits.max_payload);
                    }
                    if c == Command::BlockStatus {
                        assert!(limits.meta_context);
                    }
                    if r.flags & CMD_FLAG_DF != 0 {
                        assert!(c == Command::Read && limits.structured_replies);
                    }
                    if !matches!(c, Command::Cache | Command::BlockStatus) {
                        let blk = u64::from(limits.min_block.max(1));
                        assert!(r.offset % blk == 0 && u64::from(r.length) % blk == 0);
                    }
                }
            }
            true
        }
        Err(Refusal::Disconnect(_)) => {
            // Only a WRITE too large to read, and never one the spec says is no attack.
            assert_eq!(r.command, Command::Write);
            assert!(r.length > limits.max_payload && r.length > DEFAULT_MAX_PAYLOAD);
            false
        }
        Err(Refusal::Error(e)) => {
            assert!([EINVAL, EPERM, ENOSPC, EOVERFLOW].contains(&e), "errno {e}");
            if e == EPERM {
                assert!(limits.read_only);
                assert!(matches!(
                    r.command,
                    Command::Write | Command::Trim | Command::WriteZeroes
                ));
            }
            if e == ENOSPC {
                assert!(matches!(r.command, Command::Write | Command::WriteZeroes));
                assert!(end.is_none_or(|e| e > limits.size));
            }
            if e == EOVERFLOW {
                assert_eq!(r.command, Command::Read);
                assert!(limits.structured_replies && r.length > limits.max_payload);
            }
            false
        }
    }
}
