//! The request header codec, every rule of `validate`, and the exact bytes of the reply
//! encoders.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use raidd_nbd::consts::*;
use raidd_nbd::reply;
use raidd_nbd::request::{encode, parse, validate, REQUEST_LEN};
use raidd_nbd::{Command, Limits, Refusal, Request};

const MIB: u64 = 1 << 20;

fn limits() -> Limits {
    Limits {
        size: MIB,
        read_only: false,
        min_block: 512,
        max_payload: 64 * 1024,
        structured_replies: true,
        meta_context: true,
    }
}

fn req(command: Command, flags: u16, offset: u64, length: u32) -> Request {
    Request {
        flags,
        command,
        cookie: 0x1122_3344_5566_7788,
        offset,
        length,
    }
}

const EINVAL_: Result<(), Refusal> = Err(Refusal::Error(EINVAL));
const OK: Result<(), Refusal> = Ok(());

const ALL: [Command; 8] = [
    Command::Read,
    Command::Write,
    Command::Disc,
    Command::Flush,
    Command::Trim,
    Command::Cache,
    Command::WriteZeroes,
    Command::BlockStatus,
];

fn command_strategy() -> impl Strategy<Value = Command> {
    any::<u16>().prop_map(Command::from_wire)
}

fn request_strategy() -> impl Strategy<Value = Request> {
    (
        any::<u16>(),
        command_strategy(),
        any::<u64>(),
        any::<u64>(),
        any::<u32>(),
    )
        .prop_map(|(flags, command, cookie, offset, length)| Request {
            flags,
            command,
            cookie,
            offset,
            length,
        })
}

proptest! {
    #[test]
    fn encode_then_parse_is_identity(r in request_strategy()) {
        let h = encode(&r);
        prop_assert_eq!(parse(&h), Some(r));
    }

    #[test]
    fn parse_then_encode_is_identity(tail in prop::array::uniform24(any::<u8>())) {
        let mut h = [0u8; REQUEST_LEN];
        h[..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
        h[4..].copy_from_slice(&tail);
        let r = parse(&h).unwrap();
        prop_assert_eq!(encode(&r), h);
    }

    #[test]
    fn bad_magic_never_parses(h in prop::array::uniform28(any::<u8>())) {
        prop_assume!(h[..4] != REQUEST_MAGIC.to_be_bytes());
        prop_assert_eq!(parse(&h), None);
    }
}

#[test]
fn encode_layout_is_big_endian() {
    let r = Request {
        flags: 0x0102,
        command: Command::WriteZeroes,
        cookie: 0x0a0b_0c0d_0e0f_1011,
        offset: 0x2122_2324_2526_2728,
        length: 0x3132_3334,
    };
    let h = encode(&r);
    assert_eq!(
        h,
        [
            0x25, 0x60, 0x95, 0x13, 0x01, 0x02, 0x00, 0x06, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
            0x10, 0x11, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x31, 0x32, 0x33, 0x34
        ]
    );
}

#[test]
fn every_command_round_trips_its_wire_number() {
    for t in 0..=u16::MAX {
        let c = Command::from_wire(t);
        if t <= CMD_BLOCK_STATUS {
            assert_eq!(c, ALL[t as usize]);
        } else {
            assert_eq!(c, Command::Unknown(t));
        }
        let h = encode(&req(c, 0, 0, 0));
        assert_eq!(u16::from_be_bytes([h[6], h[7]]), t);
    }
}

#[test]
fn bad_magic_single_bit_flips() {
    let good = encode(&req(Command::Read, 0, 0, 512));
    assert!(parse(&good).is_some());
    for bit in 0..32 {
        let mut h = good;
        h[bit / 8] ^= 1 << (bit % 8);
        assert_eq!(parse(&h), None, "bit {bit}");
    }
    // Other magics of the protocol are not requests.
    let mut h = good;
    h[..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    assert_eq!(parse(&h), None);
}

#[test]
fn payload_len_only_for_write() {
    for c in ALL {
        let r = req(c, 0, 0, 4096);
        assert_eq!(r.payload_len(), if c == Command::Write { 4096 } else { 0 });
    }
    assert!(req(Command::Write, CMD_FLAG_FUA, 0, 1).fua());
    assert!(!req(Command::Write, CMD_FLAG_DF, 0, 1).fua());
}

#[test]
fn unknown_commands_are_einval() {
    let l = limits();
    for t in [8u16, 9, 0x100, u16::MAX] {
        assert_eq!(validate(&req(Command::Unknown(t), 0, 0, 512), &l), EINVAL_);
        // Even a huge length on an unknown command is an error, not a disconnect.
        assert_eq!(
            validate(&req(Command::Unknown(t), 0, 0, u32::MAX), &l),
            EINVAL_
        );
    }
}

#[test]
fn df_only_on_read_with_structured_replies() {
    let mut l = limits();
    assert_eq!(validate(&req(Command::Read, CMD_FLAG_DF, 0, 512), &l), OK);
    assert_eq!(
        validate(&req(Command::Read, CMD_FLAG_DF | CMD_FLAG_FUA, 0, 512), &l),
        OK
    );
    l.structured_replies = false;
    assert_eq!(
        validate(&req(Command::Read, CMD_FLAG_DF, 0, 512), &l),
        EINVAL_
    );
    let l = limits();
    for c in ALL {
        if c != Command::Read {
            assert_eq!(validate(&req(c, CMD_FLAG_DF, 0, 512), &l), EINVAL_, "{c:?}");
        }
    }
}

#[test]
fn req_one_only_on_block_status() {
    let l = limits();
    assert_eq!(
        validate(&req(Command::BlockStatus, CMD_FLAG_REQ_ONE, 0, 512), &l),
        OK
    );
    for c in ALL {
        if c != Command::BlockStatus {
            assert_eq!(
                validate(&req(c, CMD_FLAG_REQ_ONE, 0, 512), &l),
                EINVAL_,
                "{c:?}"
            );
        }
    }
}

#[test]
fn fast_zero_and_no_hole_only_on_write_zeroes() {
    let l = limits();
    for f in [
        CMD_FLAG_FAST_ZERO,
        CMD_FLAG_NO_HOLE,
        CMD_FLAG_NO_HOLE | CMD_FLAG_FAST_ZERO | CMD_FLAG_FUA,
    ] {
        assert_eq!(validate(&req(Command::WriteZeroes, f, 0, 512), &l), OK);
        for c in ALL {
            if c != Command::WriteZeroes {
                assert_eq!(validate(&req(c, f, 0, 512), &l), EINVAL_, "{c:?} {f:#x}");
            }
        }
    }
}

#[test]
fn fua_is_allowed_on_data_commands() {
    let l = limits();
    for c in [
        Command::Read,
        Command::Write,
        Command::Trim,
        Command::Cache,
        Command::WriteZeroes,
    ] {
        assert_eq!(validate(&req(c, CMD_FLAG_FUA, 0, 512), &l), OK, "{c:?}");
    }
    let flush = req(Command::Flush, CMD_FLAG_FUA, 0, 0);
    assert_eq!(validate(&flush, &l), OK);
}

/// proto.md, "Command flags": `NBD_CMD_FLAG_FUA` "is valid for all commands, provided
/// `NBD_FLAG_SEND_FUA` has been negotiated, in which case the server MUST accept all
/// commands with this bit set (even by ignoring the bit)", noting that "existing clients
/// are known to set this bit on other commands". `validate` refuses it on BLOCK_STATUS and
/// DISC with EINVAL (and `Limits` cannot tell whether SEND_FUA was advertised).
#[test]
fn fua_is_accepted_on_every_command() {
    let l = limits();
    for c in [Command::Disc, Command::BlockStatus] {
        assert_eq!(validate(&req(c, CMD_FLAG_FUA, 0, 512), &l), OK, "{c:?}");
    }
}

/// proto.md, "Error values": the server "SHOULD return `NBD_EINVAL` if it receives a read
/// or trim request including one or more sectors beyond the size of the device" (ENOSPC is
/// for writes and write zeroes). `validate` answers a TRIM past the end with ENOSPC.
#[test]
fn trim_past_the_end_is_einval() {
    let l = limits();
    assert_eq!(validate(&req(Command::Trim, 0, MIB, 512), &l), EINVAL_);
}

#[test]
fn unknown_flag_bits_are_einval() {
    let l = limits();
    for bit in 5..16 {
        for c in ALL {
            assert_eq!(
                validate(&req(c, 1 << bit, 0, 512), &l),
                EINVAL_,
                "{c:?} bit {bit}"
            );
        }
    }
}

#[test]
fn read_rules() {
    let l = limits();
    let read = |offset, length| validate(&req(Command::Read, 0, offset, length), &l);
    assert_eq!(read(0, 512), OK);
    assert_eq!(read(MIB - 512, 512), OK);
    assert_eq!(read(0, 64 * 1024), OK);
    // Zero length.
    assert_eq!(read(0, 0), EINVAL_);
    // Misaligned offset or length.
    assert_eq!(read(1, 512), EINVAL_);
    assert_eq!(read(0, 511), EINVAL_);
    assert_eq!(read(256, 512), EINVAL_);
    // Past the end.
    assert_eq!(read(MIB, 512), EINVAL_);
    assert_eq!(read(MIB - 512, 1024), EINVAL_);
    assert_eq!(read(u64::MAX - 511, 512), EINVAL_);
    // Larger than the largest payload: EOVERFLOW with structured replies (the spec lets a
    // server refuse large reads up front with it), EINVAL with simple ones.
    assert_eq!(read(0, 64 * 1024 + 512), Err(Refusal::Error(EOVERFLOW)));
    let simple = Limits {
        structured_replies: false,
        ..l
    };
    assert_eq!(
        validate(&req(Command::Read, 0, 0, 64 * 1024 + 512), &simple),
        EINVAL_
    );
    // Read-only does not matter for reads.
    let ro = Limits {
        read_only: true,
        ..l
    };
    assert_eq!(validate(&req(Command::Read, 0, 0, 512), &ro), OK);
}

#[test]
fn min_block_zero_or_one_means_byte_granular() {
    for min_block in [0, 1] {
        let l = Limits {
            min_block,
            ..limits()
        };
        assert_eq!(validate(&req(Command::Read, 0, 3, 7), &l), OK);
        assert_eq!(validate(&req(Command::Write, 0, 3, 7), &l), OK);
    }
}

#[test]
fn write_on_read_only_is_eperm() {
    let l = Limits {
        read_only: true,
        ..limits()
    };
    for c in [Command::Write, Command::Trim, Command::WriteZeroes] {
        assert_eq!(
            validate(&req(c, 0, 0, 512), &l),
            Err(Refusal::Error(EPERM)),
            "{c:?}"
        );
        // EPERM wins over range errors.
        assert_eq!(
            validate(&req(c, 0, 2 * MIB, 512), &l),
            Err(Refusal::Error(EPERM)),
            "{c:?}"
        );
    }
    // Non-writing commands go on working.
    for c in [Command::Read, Command::Cache, Command::Disc] {
        assert_eq!(validate(&req(c, 0, 0, 512), &l), OK, "{c:?}");
    }
    assert_eq!(validate(&req(Command::Flush, 0, 0, 0), &l), OK);
}

#[test]
fn write_rules() {
    let l = limits();
    for c in [Command::Write, Command::Trim, Command::WriteZeroes] {
        let v = |offset, length| validate(&req(c, 0, offset, length), &l);
        assert_eq!(v(0, 512), OK, "{c:?}");
        assert_eq!(v(MIB - 512, 512), OK, "{c:?}");
        if c != Command::Trim {
            assert_eq!(v(MIB, 512), Err(Refusal::Error(ENOSPC)), "{c:?}");
            assert_eq!(v(MIB - 512, 1024), Err(Refusal::Error(ENOSPC)), "{c:?}");
        } else {
            assert!(v(MIB, 512).is_err());
            assert!(v(MIB - 512, 1024).is_err());
        }
        assert_eq!(v(0, 0), EINVAL_, "{c:?}");
        assert_eq!(v(1, 512), EINVAL_, "{c:?}");
        assert_eq!(v(0, 100), EINVAL_, "{c:?}");
    }
    // TRIM and WRITE_ZEROES carry no payload: larger than max_payload is fine.
    let big = Limits {
        size: 1 << 40,
        ..limits()
    };
    for c in [Command::Trim, Command::WriteZeroes] {
        assert_eq!(validate(&req(c, 0, 0, 1 << 30), &big), OK, "{c:?}");
    }
}

#[test]
fn write_larger_than_max_payload_disconnects() {
    let l = limits();
    // Over max_payload but within the 32 MiB the spec says is never an attack: the payload
    // is read and dropped, and the reply is EINVAL.
    let r = validate(&req(Command::Write, 0, 0, 64 * 1024 + 512), &l);
    assert_eq!(r, EINVAL_);
    let r = validate(&req(Command::Write, 0, 0, DEFAULT_MAX_PAYLOAD), &l);
    assert_eq!(r, EINVAL_);
    let r = validate(&req(Command::Write, 0, 0, DEFAULT_MAX_PAYLOAD + 512), &l);
    assert!(matches!(r, Err(Refusal::Disconnect(_))), "{r:?}");
    // With a larger advertised maximum, up to it is fine and only beyond it disconnects.
    let big = Limits {
        size: u64::MAX,
        max_payload: 64 << 20,
        ..l
    };
    assert_eq!(validate(&req(Command::Write, 0, 0, 64 << 20), &big), OK);
    let r = validate(&req(Command::Write, 0, 0, (64 << 20) + 512), &big);
    assert!(matches!(r, Err(Refusal::Disconnect(_))), "{r:?}");
    let r = validate(&req(Command::Write, 0, 0, u32::MAX), &l);
    assert!(matches!(r, Err(Refusal::Disconnect(_))), "{r:?}");
    // Even when the request is refused for another reason too: the payload cannot be read.
    let ro = Limits {
        read_only: true,
        ..l
    };
    let r = validate(&req(Command::Write, 0xffff, 0, u32::MAX), &ro);
    assert!(matches!(r, Err(Refusal::Disconnect(_))), "{r:?}");
    // Exactly max_payload is fine.
    assert_eq!(validate(&req(Command::Write, 0, 0, 64 * 1024), &l), OK);
}

#[test]
fn offset_plus_length_overflow_is_an_error_not_a_panic() {
    // A size of u64::MAX so that only the overflow can refuse these.
    let l = Limits {
        size: u64::MAX,
        ..limits()
    };
    let offset = u64::MAX - 511; // aligned to 512
    for c in ALL {
        let r = validate(&req(c, 0, offset, 1024), &l);
        match c {
            Command::Disc => assert_eq!(r, OK),
            Command::Write | Command::WriteZeroes => {
                assert_eq!(r, Err(Refusal::Error(ENOSPC)), "{c:?}")
            }
            // ENOSPC today; EINVAL per the spec (see `trim_past_the_end_is_einval`).
            Command::Trim => assert!(matches!(r, Err(Refusal::Error(_)))),
            _ => assert_eq!(r, EINVAL_, "{c:?}"),
        }
    }
    // The largest range that does not overflow.
    assert_eq!(
        validate(&req(Command::Read, 0, u64::MAX - 1023, 512), &l),
        OK
    );
    let r = validate(&req(Command::Cache, 0, u64::MAX, u32::MAX), &l);
    assert_eq!(r, EINVAL_);
}

#[test]
fn block_status_needs_a_meta_context() {
    let l = Limits {
        meta_context: false,
        ..limits()
    };
    assert_eq!(validate(&req(Command::BlockStatus, 0, 0, 512), &l), EINVAL_);
    let l = limits();
    assert_eq!(validate(&req(Command::BlockStatus, 0, 0, 512), &l), OK);
    // Unaligned and longer than max_payload are fine for BLOCK_STATUS; zero length and
    // past the end are not.
    assert_eq!(validate(&req(Command::BlockStatus, 0, 3, 5), &l), OK);
    assert_eq!(
        validate(&req(Command::BlockStatus, 0, 0, MIB as u32), &l),
        OK
    );
    assert_eq!(validate(&req(Command::BlockStatus, 0, 0, 0), &l), EINVAL_);
    assert_eq!(
        validate(&req(Command::BlockStatus, 0, MIB - 1, 2), &l),
        EINVAL_
    );
}

#[test]
fn cache_rules() {
    let l = limits();
    assert_eq!(validate(&req(Command::Cache, 0, 0, MIB as u32), &l), OK);
    assert_eq!(validate(&req(Command::Cache, 0, 0, 0), &l), EINVAL_);
    assert_eq!(validate(&req(Command::Cache, 0, MIB, 512), &l), EINVAL_);
}

#[test]
fn flush_needs_zero_offset_and_length_and_disc_is_always_ok() {
    let l = Limits {
        size: 0,
        read_only: true,
        min_block: 4096,
        max_payload: 0,
        structured_replies: false,
        meta_context: false,
    };
    for (offset, length) in [(0, 0), (1, 1), (u64::MAX, u32::MAX), (MIB, 3), (0, 512)] {
        assert_eq!(validate(&req(Command::Disc, 0, offset, length), &l), OK);
        // proto.md, NBD_CMD_FLUSH: "*length* and *offset* are reserved, and MUST be set to
        // all-zero".
        let want = if (offset, length) == (0, 0) {
            OK
        } else {
            EINVAL_
        };
        assert_eq!(validate(&req(Command::Flush, 0, offset, length), &l), want);
        assert_eq!(
            validate(&req(Command::Flush, CMD_FLAG_FUA, offset, length), &l),
            want
        );
    }
    // Other flags on FLUSH are still invalid.
    let r = validate(&req(Command::Flush, CMD_FLAG_DF, 0, 0), &l);
    assert_eq!(r, EINVAL_);
}

/// TRIM and WRITE_ZEROES carry no payload: the spec says a server should not refuse them
/// for exceeding the maximum payload.
#[test]
fn trim_and_write_zeroes_are_not_limited_by_max_payload() {
    let l = Limits {
        size: u64::MAX,
        ..limits()
    };
    for c in [Command::Trim, Command::WriteZeroes] {
        let r = validate(&req(c, 0, 0, u32::MAX - 511), &l);
        assert_eq!(r, OK, "{c:?}");
    }
}

proptest! {
    /// Whatever validate accepts is safe to serve: in range, aligned where it must be,
    /// flags allowed, within the payload limit.
    #[test]
    fn validate_accepts_only_safe_requests(
        r in request_strategy(),
        size in prop_oneof![Just(0u64), Just(MIB), any::<u64>()],
        read_only: bool,
        min_block in prop_oneof![Just(0u32), Just(1), Just(512), Just(4096), any::<u32>()],
        max_payload in prop_oneof![Just(0u32), Just(65536), any::<u32>()],
        structured_replies: bool,
        meta_context: bool,
    ) {
        let l = Limits { size, read_only, min_block, max_payload, structured_replies, meta_context };
        let v = validate(&r, &l);
        let end = r.offset.checked_add(u64::from(r.length));
        if v.is_ok() {
            match r.command {
                Command::Disc => {}
                Command::Flush => prop_assert!(r.offset == 0 && r.length == 0),
                Command::Unknown(_) => prop_assert!(false, "unknown command accepted"),
                c => {
                    prop_assert!(r.length > 0);
                    prop_assert!(end.is_some_and(|e| e <= size));
                    if matches!(c, Command::Write | Command::Trim | Command::WriteZeroes) {
                        prop_assert!(!read_only);
                    }
                    if matches!(c, Command::Read | Command::Write) {
                        prop_assert!(r.length <= max_payload);
                    }
                    if c == Command::BlockStatus {
                        prop_assert!(meta_context);
                    }
                    let b = u64::from(min_block.max(1));
                    if !matches!(c, Command::Cache | Command::BlockStatus) {
                        prop_assert!(r.offset % b == 0 && u64::from(r.length) % b == 0);
                    }
                }
            }
            let known = CMD_FLAG_FUA | CMD_FLAG_NO_HOLE | CMD_FLAG_DF | CMD_FLAG_REQ_ONE
                | CMD_FLAG_FAST_ZERO;
            prop_assert_eq!(r.flags & !known, 0);
        }
        if let Err(Refusal::Disconnect(_)) = v {
            prop_assert_eq!(r.command, Command::Write);
            prop_assert!(r.length > max_payload && r.length > DEFAULT_MAX_PAYLOAD);
        }
        if let Err(Refusal::Error(e)) = v {
            prop_assert!([EINVAL, EPERM, ENOSPC, EOVERFLOW].contains(&e), "errno {}", e);
        }
    }
}

// ---- Reply encoders ----

const COOKIE: u64 = 0x0102_0304_0506_0708;

#[test]
fn simple_reply_bytes() {
    let mut out = Vec::new();
    reply::simple(&mut out, COOKIE, EIO);
    assert_eq!(
        out,
        [0x67, 0x44, 0x66, 0x98, 0, 0, 0, 5, 1, 2, 3, 4, 5, 6, 7, 8]
    );
    // Appends.
    reply::simple(&mut out, 0, 0);
    assert_eq!(out.len(), 32);
    assert_eq!(
        out[16..],
        [0x67, 0x44, 0x66, 0x98, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    );
}

#[test]
fn chunk_header_bytes() {
    let mut out = Vec::new();
    reply::chunk(&mut out, COOKIE, 0x0001, 0x8002, 0x0a0b_0c0d);
    assert_eq!(
        out,
        [
            0x66, 0x8e, 0x33, 0xef, 0x00, 0x01, 0x80, 0x02, 1, 2, 3, 4, 5, 6, 7, 8, 0x0a, 0x0b,
            0x0c, 0x0d
        ]
    );
}

#[test]
fn offset_data_bytes() {
    for (done, flags) in [(true, 1u8), (false, 0)] {
        let mut out = Vec::new();
        reply::offset_data(&mut out, COOKIE, done, 0x1000, 4096);
        let mut expected = vec![
            0x66, 0x8e, 0x33, 0xef, 0, flags, 0, 1, 1, 2, 3, 4, 5, 6, 7, 8,
        ];
        expected.extend_from_slice(&(4096u32 + 8).to_be_bytes());
        expected.extend_from_slice(&0x1000u64.to_be_bytes());
        assert_eq!(out, expected);
        assert_eq!(out.len(), 28);
    }
    // The length saturates instead of wrapping.
    let mut out = Vec::new();
    reply::offset_data(&mut out, COOKIE, true, 0, u32::MAX - 3);
    assert_eq!(out[16..20], u32::MAX.to_be_bytes());
}

#[test]
fn done_bytes() {
    let mut out = Vec::new();
    reply::done(&mut out, COOKIE);
    assert_eq!(
        out,
        [0x66, 0x8e, 0x33, 0xef, 0, 1, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0]
    );
}

#[test]
fn error_bytes() {
    let mut out = Vec::new();
    reply::error(&mut out, COOKIE, ENOSPC, "full");
    let mut expected = vec![
        0x66, 0x8e, 0x33, 0xef, 0, 1, 0x80, 1, 1, 2, 3, 4, 5, 6, 7, 8,
    ];
    expected.extend_from_slice(&(6u32 + 4).to_be_bytes());
    expected.extend_from_slice(&ENOSPC.to_be_bytes());
    expected.extend_from_slice(&4u16.to_be_bytes());
    expected.extend_from_slice(b"full");
    assert_eq!(out, expected);

    let mut out = Vec::new();
    reply::error(&mut out, COOKIE, EIO, "");
    assert_eq!(out[16..], [0, 0, 0, 6, 0, 0, 0, 5, 0, 0]);
}

#[test]
fn error_message_is_cut_to_4096() {
    let long = "x".repeat(5000);
    let mut out = Vec::new();
    reply::error(&mut out, COOKIE, EIO, &long);
    assert_eq!(out[16..20], (6u32 + 4096).to_be_bytes());
    assert_eq!(out[24..26], 4096u16.to_be_bytes());
    assert_eq!(out.len(), 20 + 6 + 4096);
}

#[test]
fn block_status_bytes() {
    let mut out = Vec::new();
    reply::block_status(
        &mut out,
        COOKIE,
        BASE_ALLOCATION_ID,
        &[(4096, 0), (8192, STATE_HOLE | STATE_ZERO)],
    );
    let mut expected = vec![0x66, 0x8e, 0x33, 0xef, 0, 1, 0, 5, 1, 2, 3, 4, 5, 6, 7, 8];
    expected.extend_from_slice(&(4u32 + 16).to_be_bytes());
    expected.extend_from_slice(&1u32.to_be_bytes());
    expected.extend_from_slice(&[0, 0, 0x10, 0, 0, 0, 0, 0]);
    expected.extend_from_slice(&[0, 0, 0x20, 0, 0, 0, 0, 3]);
    assert_eq!(out, expected);

    let mut out = Vec::new();
    reply::block_status(&mut out, COOKIE, 7, &[]);
    assert_eq!(out[16..], [0, 0, 0, 4, 0, 0, 0, 7]);
}

#[test]
fn failure_and_success_pick_simple_or_structured() {
    let mut a = Vec::new();
    let mut b = Vec::new();
    reply::failure(&mut a, false, COOKIE, EINVAL, "bad");
    reply::simple(&mut b, COOKIE, EINVAL);
    assert_eq!(a, b);

    let (mut a, mut b) = (Vec::new(), Vec::new());
    reply::failure(&mut a, true, COOKIE, EINVAL, "bad");
    reply::error(&mut b, COOKIE, EINVAL, "bad");
    assert_eq!(a, b);

    // Success without data is a simple reply either way (allowed for all but READ).
    let (mut a, mut b) = (Vec::new(), Vec::new());
    reply::success(&mut a, COOKIE);
    reply::simple(&mut b, COOKIE, 0);
    assert_eq!(a, b);
    assert_eq!(a.len(), 16);
}
