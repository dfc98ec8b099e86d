//! The client module against the server side: option requests built by `client` and
//! answered by the handshake machine, reply chunks encoded by `reply` and parsed back by
//! `client`, request headers with payload through `request::parse`; plus the exact bytes of
//! the reply encoders the shell does not use yet (OFFSET_HOLE, ERROR_OFFSET, non-final
//! chunks).
#![allow(clippy::unwrap_used)]

mod client;

use proptest::prelude::*;
use raidd_nbd::client::{
    self as c, Chunk, ClientError, Info, OptionReply, ReplyHeader, GREETING_LEN,
};
use raidd_nbd::consts::*;
use raidd_nbd::request::{self, REQUEST_LEN};
use raidd_nbd::{reply, Command, Handshake, Negotiated, Request, Step};

const COOKIE: u64 = 0x0102_0304_0506_0708;

/// Drives the server with client-built bytes; returns the replies to one option.
fn ask(hs: &mut Handshake<'_>, option: u32, data: &[u8]) -> (Step, Vec<OptionReply>) {
    let mut wire = Vec::new();
    c::option(&mut wire, option, data);
    let mut out = Vec::new();
    let mut step = Step::Continue;
    let mut at = 0;
    while at < wire.len() {
        let want = hs.want();
        step = hs.feed(&wire[at..at + want], &mut out);
        at += want;
    }
    let mut replies = Vec::new();
    let mut b = &out[..];
    while let Some((r, used)) = c::parse_option_reply(b).unwrap() {
        replies.push(r);
        b = &b[used..];
    }
    assert!(b.is_empty());
    (step, replies)
}

#[test]
fn a_whole_client_conversation_through_the_server() {
    let offer = client::offer();
    let mut hs = Handshake::new(&offer);
    let greeting: [u8; GREETING_LEN] = Handshake::greeting().try_into().unwrap();
    let flags = c::parse_greeting(&greeting).unwrap();
    assert_eq!(flags, FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES);
    let cf = c::client_flags(flags, true);
    assert_eq!(cf, FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES);
    assert_eq!(
        c::client_flags(FLAG_FIXED_NEWSTYLE, true),
        FLAG_C_FIXED_NEWSTYLE
    );
    assert_eq!(hs.feed(&cf.to_be_bytes(), &mut Vec::new()), Step::Continue);

    let (_, r) = ask(&mut hs, OPT_LIST, b"");
    let servers: Vec<(String, String)> = r
        .iter()
        .filter(|r| r.kind == REP_SERVER)
        .map(|r| c::parse_server(&r.data).unwrap())
        .collect();
    assert_eq!(
        servers,
        [
            ("disk0".to_string(), "first disk".to_string()),
            ("disk1".to_string(), String::new())
        ]
    );
    assert!(r.last().unwrap().is_final() && !r.last().unwrap().is_error());

    let (_, r) = ask(&mut hs, OPT_STRUCTURED_REPLY, b"");
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].kind, REP_ACK);

    let meta = c::meta_context_data(b"disk1", &[b"base:allocation", b"qemu:dirty-bitmap:x"]);
    let (_, r) = ask(&mut hs, OPT_SET_META_CONTEXT, &meta);
    assert_eq!(r.len(), 2);
    assert_eq!(
        c::parse_meta_context(&r[0].data).unwrap(),
        (BASE_ALLOCATION_ID, BASE_ALLOCATION.to_string())
    );

    let infos = [INFO_NAME, INFO_DESCRIPTION, INFO_BLOCK_SIZE];
    let (step, r) = ask(&mut hs, OPT_GO, &c::info_data(b"disk1", &infos));
    let parsed: Vec<Info> = r
        .iter()
        .filter(|r| r.kind == REP_INFO)
        .map(|r| c::parse_info(&r.data).unwrap())
        .collect();
    let e = &offer.exports[1];
    assert_eq!(
        parsed,
        [
            Info::Export {
                size: e.size,
                flags: e.flags | FLAG_HAS_FLAGS
            },
            Info::Name("disk1".into()),
            Info::BlockSize {
                min: 1,
                preferred: 4096,
                max: 1 << 20
            },
        ]
    );
    assert_eq!(r.last().unwrap().kind, REP_ACK);
    assert_eq!(
        step,
        Step::Done(Negotiated {
            export: 1,
            structured_replies: true,
            meta_context: Some(BASE_ALLOCATION_ID),
        })
    );
}

#[test]
fn export_name_reply_parses() {
    let offer = client::offer();
    for no_zeroes in [false, true] {
        let mut hs = Handshake::new(&offer);
        let cf = c::client_flags(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES, no_zeroes);
        hs.feed(&cf.to_be_bytes(), &mut Vec::new());
        let mut wire = Vec::new();
        c::option(&mut wire, OPT_EXPORT_NAME, b"disk0");
        let mut out = Vec::new();
        hs.feed(&wire[..16], &mut out);
        let step = hs.feed(&wire[16..], &mut out);
        assert!(matches!(step, Step::Done(_)));
        assert_eq!(out.len(), if no_zeroes { 10 } else { 134 });
        let (size, flags) = c::parse_export_name_reply(&out[..10]).unwrap();
        assert_eq!(size, offer.exports[0].size);
        assert_eq!(flags, offer.exports[0].flags | FLAG_HAS_FLAGS);
        assert!(c::parse_export_name_reply(&out[..9]).is_err());
    }
}

#[test]
fn greeting_and_option_reply_errors() {
    let mut g: [u8; GREETING_LEN] = Handshake::greeting().try_into().unwrap();
    g[17] = 0;
    assert_eq!(c::parse_greeting(&g), Err(ClientError::NotFixedNewstyle));
    g[0] ^= 1;
    assert!(matches!(
        c::parse_greeting(&g),
        Err(ClientError::BadMagic(_))
    ));

    let mut out = Vec::new();
    raidd_nbd::handshake::option_reply(&mut out, OPT_LIST, REP_ERR_POLICY, b"no");
    for cut in 0..out.len() {
        assert_eq!(c::parse_option_reply(&out[..cut]), Ok(None), "cut {cut}");
    }
    let (r, used) = c::parse_option_reply(&out).unwrap().unwrap();
    assert_eq!(used, out.len());
    assert!(r.is_error() && r.is_final());
    assert_eq!(r.data, b"no");
    out[0] ^= 1;
    assert!(c::parse_option_reply(&out).is_err());
    // A reply claiming 4 GiB of data is waited for, not allocated.
    let mut huge = Vec::new();
    raidd_nbd::handshake::option_reply(&mut huge, OPT_LIST, REP_SERVER, b"");
    huge[16..20].copy_from_slice(&u32::MAX.to_be_bytes());
    assert_eq!(c::parse_option_reply(&huge), Ok(None));
}

#[test]
fn info_and_server_data_checked() {
    assert!(c::parse_info(&[0]).is_err());
    assert!(c::parse_info(&[0, 0, 1]).is_err());
    assert!(c::parse_info(&[0, 3, 0, 0, 0, 1]).is_err());
    assert_eq!(c::parse_info(&[0, 9, 1, 2]), Ok(Info::Unknown(9)));
    assert_eq!(
        c::parse_info(&[0, 2, b'h', b'i']),
        Ok(Info::Description("hi".into()))
    );
    assert!(c::parse_info(&[0, 1, 0xff]).is_err());
    assert!(c::parse_server(&[0, 0, 0, 5, b'a']).is_err());
    assert!(c::parse_server(&[0, 0]).is_err());
    assert_eq!(
        c::parse_server(&[0, 0, 0, 1, b'a', b'b']),
        Ok(("a".into(), "b".into()))
    );
    assert!(c::parse_meta_context(&[0, 0, 1]).is_err());
}

#[test]
fn request_with_payload_round_trips() {
    let r = Request {
        flags: CMD_FLAG_FUA,
        command: Command::Write,
        cookie: COOKIE,
        offset: 4096,
        length: 3,
    };
    let mut out = Vec::new();
    c::request(&mut out, &r, b"abc");
    assert_eq!(out.len(), REQUEST_LEN + 3);
    let h: [u8; REQUEST_LEN] = out[..REQUEST_LEN].try_into().unwrap();
    let back = request::parse(&h).unwrap();
    assert_eq!(back, r);
    assert_eq!(&out[REQUEST_LEN..], b"abc");
    assert_eq!(back.payload_len(), 3);
    for t in 0..20u16 {
        assert_eq!(Command::from_wire(t).to_wire(), t);
    }
}

/// Parses one reply header and its chunk payload from the front of `b`.
fn next_chunk(b: &[u8]) -> (ReplyHeader, Chunk<'_>, usize) {
    let (h, used) = c::parse_reply_header(b).unwrap().unwrap();
    let ReplyHeader::Chunk { kind, length, .. } = h else {
        panic!("simple reply {h:?}");
    };
    let payload = &b[used..used + length as usize];
    (
        h,
        c::parse_chunk(kind, payload).unwrap(),
        used + length as usize,
    )
}

#[test]
fn offset_hole_bytes_and_round_trip() {
    let mut out = Vec::new();
    reply::offset_hole(&mut out, COOKIE, false, 0x1000, 0x200);
    let mut expected = vec![0x66, 0x8e, 0x33, 0xef, 0, 0, 0, 2, 1, 2, 3, 4, 5, 6, 7, 8];
    expected.extend_from_slice(&12u32.to_be_bytes());
    expected.extend_from_slice(&0x1000u64.to_be_bytes());
    expected.extend_from_slice(&0x200u32.to_be_bytes());
    assert_eq!(out, expected);
    let (h, chunk, used) = next_chunk(&out);
    assert_eq!(used, out.len());
    assert_eq!(h.cookie(), COOKIE);
    assert_eq!(
        chunk,
        Chunk::OffsetHole {
            offset: 0x1000,
            size: 0x200
        }
    );
}

#[test]
fn error_offset_bytes_and_round_trip() {
    let mut out = Vec::new();
    reply::error_offset(&mut out, COOKIE, true, EIO, "bad", 0x4000);
    let mut expected = vec![
        0x66, 0x8e, 0x33, 0xef, 0, 1, 0x80, 2, 1, 2, 3, 4, 5, 6, 7, 8,
    ];
    expected.extend_from_slice(&(14u32 + 3).to_be_bytes());
    expected.extend_from_slice(&EIO.to_be_bytes());
    expected.extend_from_slice(&3u16.to_be_bytes());
    expected.extend_from_slice(b"bad");
    expected.extend_from_slice(&0x4000u64.to_be_bytes());
    assert_eq!(out, expected);
    let (_, chunk, _) = next_chunk(&out);
    assert_eq!(
        chunk,
        Chunk::ErrorOffset {
            error: EIO,
            message: b"bad",
            offset: 0x4000
        }
    );
}

#[test]
fn error_messages_are_cut_at_a_character_boundary() {
    // 4095 ASCII bytes then a 3-byte character: it does not fit, so 4095 bytes go out.
    let m = format!("{}€", "x".repeat(4095));
    let mut out = Vec::new();
    reply::error(&mut out, COOKIE, EIO, &m);
    assert_eq!(out[24..26], 4095u16.to_be_bytes());
    let (_, chunk, used) = next_chunk(&out);
    assert_eq!(used, out.len());
    let Chunk::Error { message, .. } = chunk else {
        panic!("{chunk:?}")
    };
    assert!(std::str::from_utf8(message).is_ok());
    let mut out = Vec::new();
    reply::error_offset(&mut out, COOKIE, false, EIO, &m, 7);
    assert_eq!(out[16..20], (14u32 + 4095).to_be_bytes());
}

#[test]
fn non_final_chunks_then_done() {
    let mut out = Vec::new();
    reply::offset_data(&mut out, COOKIE, false, 0, 4);
    out.extend_from_slice(b"data");
    reply::block_status_chunk(&mut out, COOKIE, false, 9, &[(512, STATE_ZERO)]);
    reply::error_chunk(&mut out, COOKIE, false, ENOSPC, "");
    reply::done(&mut out, COOKIE);
    let mut b = &out[..];
    let mut seen = Vec::new();
    while !b.is_empty() {
        let (h, chunk, used) = next_chunk(b);
        let ReplyHeader::Chunk { flags, .. } = h else {
            unreachable!()
        };
        seen.push((flags, chunk));
        b = &b[used..];
    }
    assert_eq!(
        seen,
        [
            (
                0,
                Chunk::OffsetData {
                    offset: 0,
                    data: b"data"
                }
            ),
            (
                0,
                Chunk::BlockStatus {
                    id: 9,
                    extents: vec![(512, STATE_ZERO)]
                }
            ),
            (
                0,
                Chunk::Error {
                    kind: REPLY_TYPE_ERROR,
                    error: ENOSPC,
                    message: b""
                }
            ),
            (REPLY_FLAG_DONE, Chunk::None),
        ]
    );
}

#[test]
fn reply_headers_wait_for_their_bytes() {
    let mut out = Vec::new();
    reply::simple(&mut out, COOKIE, EPERM);
    for cut in 0..out.len() {
        assert_eq!(c::parse_reply_header(&out[..cut]), Ok(None));
    }
    assert_eq!(
        c::parse_reply_header(&out),
        Ok(Some((
            ReplyHeader::Simple {
                error: EPERM,
                cookie: COOKIE
            },
            16
        )))
    );
    let mut out = Vec::new();
    reply::done(&mut out, COOKIE);
    for cut in 0..out.len() {
        assert_eq!(c::parse_reply_header(&out[..cut]), Ok(None));
    }
    assert!(c::parse_reply_header(&[0xde, 0xad, 0xbe, 0xef]).is_err());
}

#[test]
fn chunk_payloads_are_checked() {
    assert!(c::parse_chunk(REPLY_TYPE_NONE, &[0]).is_err());
    assert!(c::parse_chunk(REPLY_TYPE_OFFSET_DATA, &[0; 8]).is_err());
    assert!(c::parse_chunk(REPLY_TYPE_OFFSET_HOLE, &[0; 12]).is_err()); // size 0
    assert!(c::parse_chunk(REPLY_TYPE_OFFSET_HOLE, &[0; 13]).is_err());
    assert!(c::parse_chunk(REPLY_TYPE_BLOCK_STATUS, &[0; 4]).is_err());
    assert!(c::parse_chunk(REPLY_TYPE_BLOCK_STATUS, &[0; 11]).is_err());
    assert!(c::parse_chunk(REPLY_TYPE_ERROR, &[0, 0, 0, 5, 0, 1]).is_err());
    assert!(c::parse_chunk(REPLY_TYPE_ERROR, &[0, 0, 0, 5, 0, 0, 9]).is_err());
    assert!(c::parse_chunk(REPLY_TYPE_ERROR_OFFSET, &[0, 0, 0, 5, 0, 0]).is_err());
    // An unknown error type is read as an error; an unknown other type is reported.
    let unknown_err = c::parse_chunk(0x8077, &[0, 0, 0, 5, 0, 1, b'x', 1, 2]).unwrap();
    assert_eq!(
        unknown_err,
        Chunk::Error {
            kind: 0x8077,
            error: EIO,
            message: b"x"
        }
    );
    assert_eq!(c::parse_chunk(77, &[1, 2, 3]), Ok(Chunk::Unknown(77)));
}

proptest! {
    /// Whatever the encoders write, the client parses back to the same values.
    #[test]
    fn encoded_chunks_parse_back(
        cookie: u64,
        done: bool,
        offset: u64,
        error in 1u32..,
        message in "\\PC{0,40}",
        extents in prop::collection::vec((1u32.., any::<u32>()), 1..20),
        size in 1u32..,
        data in prop::collection::vec(any::<u8>(), 1..64),
    ) {
        let mut out = Vec::new();
        reply::offset_data(&mut out, cookie, done, offset, data.len() as u32);
        out.extend_from_slice(&data);
        reply::offset_hole(&mut out, cookie, done, offset, size);
        reply::block_status_chunk(&mut out, cookie, done, 3, &extents);
        reply::error_chunk(&mut out, cookie, done, error, &message);
        reply::error_offset(&mut out, cookie, done, error, &message, offset);
        let want = [
            Chunk::OffsetData { offset, data: &data },
            Chunk::OffsetHole { offset, size },
            Chunk::BlockStatus { id: 3, extents: extents.clone() },
            Chunk::Error { kind: REPLY_TYPE_ERROR, error, message: message.as_bytes() },
            Chunk::ErrorOffset { error, message: message.as_bytes(), offset },
        ];
        let mut b = &out[..];
        for w in want {
            let (h, chunk, used) = next_chunk(b);
            prop_assert_eq!(h.cookie(), cookie);
            let ReplyHeader::Chunk { flags, .. } = h else { unreachable!() };
            prop_assert_eq!(flags == REPLY_FLAG_DONE, done);
            prop_assert_eq!(chunk, w);
            b = &b[used..];
        }
        prop_assert!(b.is_empty());
    }

    /// Client-built requests parse back on the server side.
    #[test]
    fn client_requests_parse_back(
        flags: u16,
        t: u16,
        cookie: u64,
        offset: u64,
        length: u32,
    ) {
        let r = Request { flags, command: Command::from_wire(t), cookie, offset, length };
        let mut out = Vec::new();
        c::request(&mut out, &r, &[]);
        let h: [u8; REQUEST_LEN] = out[..].try_into().unwrap();
        prop_assert_eq!(request::parse(&h), Some(r));
    }

    /// The client's reply parsers never panic on arbitrary bytes.
    #[test]
    fn client_parsers_take_any_bytes(b in prop::collection::vec(any::<u8>(), 0..64), kind: u16) {
        let _ = c::parse_option_reply(&b);
        let _ = c::parse_reply_header(&b);
        let _ = c::parse_chunk(kind, &b);
        let _ = c::parse_info(&b);
        let _ = c::parse_server(&b);
        let _ = c::parse_meta_context(&b);
        let _ = c::parse_export_name_reply(&b);
    }
}
