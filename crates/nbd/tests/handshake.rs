//! The server handshake driven byte by byte as a client would, with every reply checked by
//! type and, where the spec fixes it, by content.
#![allow(clippy::unwrap_used)]

mod client;

use client::*;
use raidd_nbd::consts::*;
use raidd_nbd::handshake::{option_reply, MAX_OPTION, MAX_SKIP};
use raidd_nbd::{Handshake, Negotiated, Offer, Step};

#[test]
fn greeting_is_magic_ihaveopt_and_flags() {
    let g = Handshake::greeting();
    let mut expected = b"NBDMAGIC".to_vec();
    expected.extend_from_slice(b"IHAVEOPT");
    expected.extend_from_slice(&[0x00, 0x03]); // FIXED_NEWSTYLE | NO_ZEROES
    assert_eq!(g, expected);
    assert_eq!(g.len(), 18);
}

#[test]
fn first_want_is_the_client_flags() {
    let offer = offer();
    let hs = Handshake::new(&offer);
    assert_eq!(hs.want(), 4);
}

#[test]
fn unknown_client_flag_bits_close() {
    let offer = offer();
    for flags in [1 << 2, 1 << 31, 0xffff_ffff, FLAG_C_FIXED_NEWSTYLE | 1 << 7] {
        let mut s = Session::new(&offer);
        let steps = s.send(&flags.to_be_bytes());
        assert!(matches!(steps, Step::Close(_)), "{flags:#x}: {steps:?}");
        assert!(s.out.is_empty());
        assert_eq!(s.hs.want(), 0);
    }
}

#[test]
fn client_without_fixed_newstyle_is_closed() {
    let offer = offer();
    for flags in [0, FLAG_C_NO_ZEROES] {
        let mut s = Session::new(&offer);
        let steps = s.send(&flags.to_be_bytes());
        assert!(matches!(steps, Step::Close(_)), "{steps:?}");
        assert!(s.out.is_empty());
    }
}

#[test]
fn good_client_flags_continue_to_an_option_header() {
    let offer = offer();
    for flags in [
        FLAG_C_FIXED_NEWSTYLE,
        FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES,
    ] {
        let mut s = Session::new(&offer);
        assert_eq!(s.send(&flags.to_be_bytes()), Step::Continue);
        assert_eq!(s.hs.want(), 16);
        assert!(s.out.is_empty());
    }
}

fn export_data(e: &raidd_nbd::ExportInfo, zeroes: bool) -> Vec<u8> {
    let mut d = e.size.to_be_bytes().to_vec();
    d.extend_from_slice(&(e.flags | FLAG_HAS_FLAGS).to_be_bytes());
    if zeroes {
        d.extend_from_slice(&[0; 124]);
    }
    d
}

#[test]
fn export_name_known_sends_size_flags_and_zeroes() {
    let offer = offer();
    let mut s = Session::started(&offer);
    let steps = s.send(&opt(OPT_EXPORT_NAME, b"disk1"));
    assert_eq!(steps, done(1, false, None));
    assert_eq!(s.out, export_data(&offer.exports[1], true));
    assert_eq!(s.out.len(), 8 + 2 + 124);
    assert_eq!(s.hs.want(), 0);
}

#[test]
fn export_name_with_no_zeroes_sends_ten_bytes() {
    let offer = offer();
    let mut s = Session::with_flags(&offer, FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES);
    let steps = s.send(&opt(OPT_EXPORT_NAME, b"disk0"));
    assert_eq!(steps, done(0, false, None));
    assert_eq!(s.out, export_data(&offer.exports[0], false));
    assert_eq!(s.out.len(), 10);
    // Read-only and flush from the offer, plus HAS_FLAGS.
    assert_eq!(
        &s.out[8..10],
        &(FLAG_HAS_FLAGS | FLAG_READ_ONLY | FLAG_SEND_FLUSH).to_be_bytes()
    );
}

#[test]
fn export_name_unknown_closes_without_reply() {
    let offer = offer();
    let mut s = Session::started(&offer);
    let steps = s.send(&opt(OPT_EXPORT_NAME, b"nope"));
    assert!(matches!(steps, Step::Close(_)), "{steps:?}");
    assert!(s.out.is_empty());
    assert_eq!(s.hs.want(), 0);
}

#[test]
fn export_name_empty_selects_the_default() {
    let offer = offer();
    let mut s = Session::started(&offer);
    let steps = s.send(&opt(OPT_EXPORT_NAME, b""));
    assert_eq!(steps, done(0, false, None));
    assert_eq!(s.out, export_data(&offer.exports[0], true));

    let mut other = offer.clone();
    other.default_export = Some(1);
    let mut s = Session::started(&other);
    assert_eq!(s.send(&opt(OPT_EXPORT_NAME, b"")), done(1, false, None));
}

#[test]
fn export_name_empty_without_default_closes() {
    let mut offer = offer();
    offer.default_export = None;
    let mut s = Session::started(&offer);
    let steps = s.send(&opt(OPT_EXPORT_NAME, b""));
    assert!(matches!(steps, Step::Close(_)), "{steps:?}");
    assert!(s.out.is_empty());
}

#[test]
fn list_with_data_is_invalid() {
    let offer = offer();
    let mut s = Session::started(&offer);
    assert_eq!(s.send(&opt(OPT_LIST, b"x")), Step::Continue);
    let r = s.replies();
    assert_eq!(kinds(&r), vec![(OPT_LIST, REP_ERR_INVALID)]);
    // The machine goes on.
    assert_eq!(s.hs.want(), 16);
}

#[test]
fn list_sends_every_export_then_ack() {
    let offer = offer();
    let mut s = Session::started(&offer);
    assert_eq!(s.send(&opt(OPT_LIST, b"")), Step::Continue);
    let r = s.replies();
    assert_eq!(
        kinds(&r),
        vec![
            (OPT_LIST, REP_SERVER),
            (OPT_LIST, REP_SERVER),
            (OPT_LIST, REP_ACK)
        ]
    );
    let mut first = 5u32.to_be_bytes().to_vec();
    first.extend_from_slice(b"disk0first disk");
    assert_eq!(r[0].data, first);
    let mut second = 5u32.to_be_bytes().to_vec();
    second.extend_from_slice(b"disk1");
    assert_eq!(r[1].data, second);
    assert!(r[2].data.is_empty());
}

#[test]
fn list_with_no_exports_is_just_ack() {
    let offer = Offer::default();
    let mut s = Session::started(&offer);
    s.send(&opt(OPT_LIST, b""));
    assert_eq!(kinds(&s.replies()), vec![(OPT_LIST, REP_ACK)]);
}

fn info_export(e: &raidd_nbd::ExportInfo) -> Vec<u8> {
    let mut d = INFO_EXPORT.to_be_bytes().to_vec();
    d.extend_from_slice(&e.size.to_be_bytes());
    d.extend_from_slice(&(e.flags | FLAG_HAS_FLAGS).to_be_bytes());
    d
}

#[test]
fn info_always_sends_info_export_then_ack() {
    let offer = offer();
    let mut s = Session::started(&offer);
    assert_eq!(
        s.send(&opt(OPT_INFO, &info_request(b"disk0", &[]))),
        Step::Continue
    );
    let r = s.replies();
    assert_eq!(
        kinds(&r),
        vec![
            (OPT_INFO, REP_INFO),
            (OPT_INFO, REP_INFO),
            (OPT_INFO, REP_ACK)
        ]
    );
    assert_eq!(r[0].data, info_export(&offer.exports[0]));
    assert_eq!(r[0].data.len(), 12);
    // BLOCK_SIZE goes out unasked.
    assert_eq!(r[1].data, block_size_info(512, 4096, 32 << 20));
    assert_eq!(s.hs.want(), 16);
}

fn block_size_info(min: u32, preferred: u32, max: u32) -> Vec<u8> {
    let mut bs = INFO_BLOCK_SIZE.to_be_bytes().to_vec();
    for v in [min, preferred, max] {
        bs.extend_from_slice(&v.to_be_bytes());
    }
    bs
}

/// The info types in a reply list, in order.
fn info_types(r: &[OptReply]) -> Vec<u16> {
    r.iter()
        .filter(|r| r.kind == REP_INFO)
        .map(|r| be16(&r.data))
        .collect()
}

#[test]
fn info_sends_requested_name_description_block_size() {
    let offer = offer();
    let mut s = Session::started(&offer);
    s.send(&opt(
        OPT_INFO,
        &info_request(b"disk0", &[INFO_NAME, INFO_DESCRIPTION, INFO_BLOCK_SIZE]),
    ));
    let r = s.replies();
    assert_eq!(
        kinds(&r),
        vec![
            (OPT_INFO, REP_INFO),
            (OPT_INFO, REP_INFO),
            (OPT_INFO, REP_INFO),
            (OPT_INFO, REP_INFO),
            (OPT_INFO, REP_ACK),
        ]
    );
    assert_eq!(r[0].data, info_export(&offer.exports[0]));
    assert_eq!(r[1].data, [&INFO_NAME.to_be_bytes()[..], b"disk0"].concat());
    assert_eq!(
        r[2].data,
        [&INFO_DESCRIPTION.to_be_bytes()[..], b"first disk"].concat()
    );
    let mut bs = INFO_BLOCK_SIZE.to_be_bytes().to_vec();
    for v in [512u32, 4096, 32 << 20] {
        bs.extend_from_slice(&v.to_be_bytes());
    }
    assert_eq!(r[3].data, bs);
    assert_eq!(r[3].data.len(), 14);
}

#[test]
fn info_without_requests_sends_export_and_block_size_only() {
    let offer = offer();
    let mut s = Session::started(&offer);
    s.send(&opt(OPT_INFO, &info_request(b"disk1", &[])));
    let r = s.replies();
    assert_eq!(info_types(&r), vec![INFO_EXPORT, INFO_BLOCK_SIZE]);
    assert_eq!(r[1].data, block_size_info(1, 4096, 1 << 20));
    // GO without asking for BLOCK_SIZE is still let in (no ERR_BLOCK_SIZE_REQD).
    let step = s.send(&opt(OPT_GO, &info_request(b"disk1", &[])));
    assert_eq!(step, done(1, false, None));
    assert_eq!(info_types(&s.replies()), vec![INFO_EXPORT, INFO_BLOCK_SIZE]);
}

#[test]
fn info_duplicate_and_unknown_requests() {
    let offer = offer();
    let mut s = Session::started(&offer);
    s.send(&opt(
        OPT_INFO,
        &info_request(b"disk0", &[INFO_NAME, INFO_NAME, 0x7777, INFO_EXPORT]),
    ));
    let r = s.replies();
    // INFO_EXPORT, one NAME (duplicates and unknown types dropped), ACK; never a reply
    // whose info type is unknown to the client.
    assert_eq!(r.last().map(|r| r.kind), Some(REP_ACK));
    let names = r
        .iter()
        .filter(|r| r.kind == REP_INFO && r.data[..2] == INFO_NAME.to_be_bytes())
        .count();
    assert_eq!(names, 1);
    assert!(r
        .iter()
        .filter(|r| r.kind == REP_INFO)
        .all(|r| be16(&r.data) <= INFO_BLOCK_SIZE));
}

#[test]
fn info_empty_description_is_omitted() {
    let offer = offer();
    let mut s = Session::started(&offer);
    s.send(&opt(OPT_INFO, &info_request(b"disk1", &[INFO_DESCRIPTION])));
    let r = s.replies();
    assert_eq!(info_types(&r), vec![INFO_EXPORT, INFO_BLOCK_SIZE]);
    assert_eq!(r.last().map(|r| r.kind), Some(REP_ACK));
}

#[test]
fn info_and_go_malformed_lengths_are_invalid() {
    let offer = offer();
    let good = info_request(b"disk0", &[INFO_NAME]);
    let mut bad: Vec<Vec<u8>> = vec![
        // Name length past the end.
        [&100u32.to_be_bytes()[..], b"disk0", &[0, 0]].concat(),
        // No request count.
        [&5u32.to_be_bytes()[..], b"disk0"].concat(),
        // Count says two, one present.
        [&5u32.to_be_bytes()[..], b"disk0", &[0, 2, 0, 1]].concat(),
        // Trailing byte.
        [&good[..], &[0]].concat(),
        // Truncated.
        good[..good.len() - 1].to_vec(),
        // Three bytes: not even a name length.
        vec![0, 0, 0],
        // Name longer than MAX_STRING.
        [
            &(MAX_STRING as u32 + 1).to_be_bytes()[..],
            &vec![b'a'; MAX_STRING + 1],
            &[0, 0],
        ]
        .concat(),
    ];
    bad.push(vec![]);
    for option in [OPT_INFO, OPT_GO] {
        for data in &bad {
            let mut s = Session::started(&offer);
            assert_eq!(s.send(&opt(option, data)), Step::Continue, "{data:?}");
            assert_eq!(kinds(&s.replies()), vec![(option, REP_ERR_INVALID)]);
            assert_eq!(s.hs.want(), 16);
        }
    }
}

#[test]
fn info_and_go_unknown_export() {
    let offer = offer();
    for option in [OPT_INFO, OPT_GO] {
        let mut s = Session::started(&offer);
        assert_eq!(
            s.send(&opt(option, &info_request(b"nope", &[]))),
            Step::Continue
        );
        assert_eq!(kinds(&s.replies()), vec![(option, REP_ERR_UNKNOWN)]);
    }
    let mut no_default = offer.clone();
    no_default.default_export = None;
    let mut s = Session::started(&no_default);
    s.send(&opt(OPT_GO, &info_request(b"", &[])));
    assert_eq!(kinds(&s.replies()), vec![(OPT_GO, REP_ERR_UNKNOWN)]);
}

#[test]
fn go_finishes_with_the_right_export() {
    let offer = offer();
    for (name, index) in [(&b"disk0"[..], 0), (b"disk1", 1), (b"", 0)] {
        let mut s = Session::started(&offer);
        let steps = s.send(&opt(OPT_GO, &info_request(name, &[INFO_BLOCK_SIZE])));
        assert_eq!(steps, done(index, false, None));
        let r = s.replies();
        assert_eq!(
            kinds(&r),
            vec![(OPT_GO, REP_INFO), (OPT_GO, REP_INFO), (OPT_GO, REP_ACK)]
        );
        assert_eq!(r[0].data, info_export(&offer.exports[index]));
        assert_eq!(s.hs.want(), 0);
    }
}

#[test]
fn info_then_go_in_one_conversation() {
    let offer = offer();
    let mut s = Session::started(&offer);
    let mut input = opt(OPT_INFO, &info_request(b"disk1", &[]));
    input.extend(opt(OPT_GO, &info_request(b"disk1", &[])));
    let steps = s.send_all(&input);
    // Header, data, header, data.
    assert_eq!(
        steps,
        vec![
            Step::Continue,
            Step::Continue,
            Step::Continue,
            done(1, false, None)
        ]
    );
}

#[test]
fn structured_reply_ack_and_data_invalid() {
    let offer = offer();
    let mut s = Session::started(&offer);
    s.send(&opt(OPT_STRUCTURED_REPLY, b"x"));
    assert_eq!(
        kinds(&s.replies()),
        vec![(OPT_STRUCTURED_REPLY, REP_ERR_INVALID)]
    );
    // The refused one did not turn structured replies on.
    let steps = s.send(&opt(OPT_GO, &info_request(b"disk0", &[])));
    assert_eq!(steps, done(0, false, None));

    let mut s = Session::started(&offer);
    s.send(&opt(OPT_STRUCTURED_REPLY, b""));
    let r = s.replies();
    assert_eq!(kinds(&r), vec![(OPT_STRUCTURED_REPLY, REP_ACK)]);
    assert!(r[0].data.is_empty());
    let steps = s.send(&opt(OPT_GO, &info_request(b"disk0", &[])));
    assert_eq!(steps, done(0, true, None));
}

#[test]
fn set_meta_context_before_structured_replies_is_invalid() {
    let offer = offer();
    let mut s = Session::started(&offer);
    s.send(&opt(
        OPT_SET_META_CONTEXT,
        &meta_request(b"disk0", &[BASE_ALLOCATION.as_bytes()]),
    ));
    assert_eq!(
        kinds(&s.replies()),
        vec![(OPT_SET_META_CONTEXT, REP_ERR_INVALID)]
    );
    // And nothing was selected: structured replies now, GO, no context.
    s.send(&opt(OPT_STRUCTURED_REPLY, b""));
    let steps = s.send(&opt(OPT_GO, &info_request(b"disk0", &[])));
    assert_eq!(steps, done(0, true, None));
}

fn base_allocation_reply(id: u32) -> Vec<u8> {
    [&id.to_be_bytes()[..], BASE_ALLOCATION.as_bytes()].concat()
}

#[test]
fn list_meta_context_with_no_queries_lists_base_allocation() {
    let offer = offer();
    // LIST works with or without structured replies.
    for structured in [false, true] {
        let mut s = Session::started(&offer);
        if structured {
            s.send(&opt(OPT_STRUCTURED_REPLY, b""));
            s.replies();
        }
        s.send(&opt(OPT_LIST_META_CONTEXT, &meta_request(b"disk0", &[])));
        let r = s.replies();
        assert_eq!(
            kinds(&r),
            vec![
                (OPT_LIST_META_CONTEXT, REP_META_CONTEXT),
                (OPT_LIST_META_CONTEXT, REP_ACK)
            ]
        );
        assert_eq!(r[0].data[4..], *BASE_ALLOCATION.as_bytes());
    }
}

#[test]
fn list_meta_context_with_base_prefix_query() {
    let offer = offer();
    for q in [&b"base:"[..], BASE_ALLOCATION.as_bytes()] {
        let mut s = Session::started(&offer);
        s.send(&opt(OPT_LIST_META_CONTEXT, &meta_request(b"disk0", &[q])));
        let r = s.replies();
        assert_eq!(
            kinds(&r),
            vec![
                (OPT_LIST_META_CONTEXT, REP_META_CONTEXT),
                (OPT_LIST_META_CONTEXT, REP_ACK)
            ]
        );
        assert_eq!(r[0].data, base_allocation_reply(0));
    }
    // A query for another namespace matches nothing.
    let mut s = Session::started(&offer);
    s.send(&opt(
        OPT_LIST_META_CONTEXT,
        &meta_request(b"disk0", &[b"qemu:dirty-bitmap:x"]),
    ));
    assert_eq!(kinds(&s.replies()), vec![(OPT_LIST_META_CONTEXT, REP_ACK)]);
}

#[test]
fn meta_context_malformed_and_unknown_export() {
    let offer = offer();
    let good = meta_request(b"disk0", &[b"base:"]);
    for option in [OPT_LIST_META_CONTEXT, OPT_SET_META_CONTEXT] {
        for data in [
            vec![],
            good[..good.len() - 1].to_vec(),
            [&good[..], &[0]].concat(),
            [&5u32.to_be_bytes()[..], b"disk0", &9u32.to_be_bytes()].concat(),
        ] {
            let mut s = Session::started(&offer);
            s.send(&opt(OPT_STRUCTURED_REPLY, b""));
            s.replies();
            s.send(&opt(option, &data));
            assert_eq!(kinds(&s.replies()), vec![(option, REP_ERR_INVALID)]);
        }
        let mut s = Session::started(&offer);
        s.send(&opt(OPT_STRUCTURED_REPLY, b""));
        s.replies();
        s.send(&opt(option, &meta_request(b"nope", &[])));
        assert_eq!(kinds(&s.replies()), vec![(option, REP_ERR_UNKNOWN)]);
    }
}

#[test]
fn set_base_allocation_then_go_selects_context_one() {
    let offer = offer();
    let mut s = Session::started(&offer);
    s.send(&opt(OPT_STRUCTURED_REPLY, b""));
    s.replies();
    s.send(&opt(
        OPT_SET_META_CONTEXT,
        &meta_request(b"disk0", &[BASE_ALLOCATION.as_bytes()]),
    ));
    let r = s.replies();
    assert_eq!(
        kinds(&r),
        vec![
            (OPT_SET_META_CONTEXT, REP_META_CONTEXT),
            (OPT_SET_META_CONTEXT, REP_ACK)
        ]
    );
    assert_eq!(r[0].data, base_allocation_reply(BASE_ALLOCATION_ID));
    let steps = s.send(&opt(OPT_GO, &info_request(b"disk0", &[])));
    assert_eq!(steps, done(0, true, Some(1)));
}

#[test]
fn set_for_default_export_then_go_by_name() {
    let offer = offer();
    let mut s = Session::started(&offer);
    s.send(&opt(OPT_STRUCTURED_REPLY, b""));
    s.send(&opt(
        OPT_SET_META_CONTEXT,
        &meta_request(b"", &[BASE_ALLOCATION.as_bytes()]),
    ));
    let steps = s.send(&opt(OPT_GO, &info_request(b"disk0", &[])));
    assert_eq!(steps, done(0, true, Some(1)));
}

#[test]
fn set_then_go_to_another_export_has_no_context() {
    let offer = offer();
    let mut s = Session::started(&offer);
    s.send(&opt(OPT_STRUCTURED_REPLY, b""));
    s.send(&opt(
        OPT_SET_META_CONTEXT,
        &meta_request(b"disk0", &[BASE_ALLOCATION.as_bytes()]),
    ));
    let steps = s.send(&opt(OPT_GO, &info_request(b"disk1", &[])));
    assert_eq!(steps, done(1, true, None));
}

#[test]
fn set_with_base_prefix_only_or_no_queries_selects_nothing() {
    let offer = offer();
    for queries in [vec![], vec![&b"base:"[..]]] {
        let mut s = Session::started(&offer);
        s.send(&opt(OPT_STRUCTURED_REPLY, b""));
        s.replies();
        s.send(&opt(
            OPT_SET_META_CONTEXT,
            &meta_request(b"disk0", &queries),
        ));
        assert_eq!(kinds(&s.replies()), vec![(OPT_SET_META_CONTEXT, REP_ACK)]);
        let steps = s.send(&opt(OPT_GO, &info_request(b"disk0", &[])));
        assert_eq!(steps, done(0, true, None));
    }
}

#[test]
fn a_later_empty_set_clears_the_selection() {
    let offer = offer();
    let mut s = Session::started(&offer);
    s.send(&opt(OPT_STRUCTURED_REPLY, b""));
    s.send(&opt(
        OPT_SET_META_CONTEXT,
        &meta_request(b"disk0", &[BASE_ALLOCATION.as_bytes()]),
    ));
    s.send(&opt(OPT_SET_META_CONTEXT, &meta_request(b"disk0", &[])));
    let steps = s.send(&opt(OPT_GO, &info_request(b"disk0", &[])));
    assert_eq!(steps, done(0, true, None));
}

#[test]
fn export_name_after_set_carries_the_context() {
    let offer = offer();
    let mut s = Session::with_flags(&offer, FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES);
    s.send(&opt(OPT_STRUCTURED_REPLY, b""));
    s.send(&opt(
        OPT_SET_META_CONTEXT,
        &meta_request(b"disk1", &[BASE_ALLOCATION.as_bytes()]),
    ));
    s.replies();
    let steps = s.send(&opt(OPT_EXPORT_NAME, b"disk1"));
    assert_eq!(steps, done(1, true, Some(1)));
    assert_eq!(s.out, export_data(&offer.exports[1], false));
}

#[test]
fn unknown_options_are_unsupported_and_the_machine_continues() {
    let offer = offer();
    let mut s = Session::started(&offer);
    for option in [0, 4, OPT_EXTENDED_HEADERS, 12, 0x8000_0000, u32::MAX] {
        assert_eq!(s.send(&opt(option, b"some data")), Step::Continue);
        let r = s.replies();
        assert_eq!(kinds(&r), vec![(option, REP_ERR_UNSUP)]);
        assert_eq!(s.hs.want(), 16);
    }
    let steps = s.send(&opt(OPT_GO, &info_request(b"disk0", &[])));
    assert_eq!(steps, done(0, false, None));
}

#[test]
fn abort_acks_then_closes() {
    let offer = offer();
    let mut s = Session::started(&offer);
    let steps = s.send(&opt(OPT_ABORT, b""));
    assert!(matches!(steps, Step::Close(_)), "{steps:?}");
    let r = s.replies();
    assert_eq!(kinds(&r), vec![(OPT_ABORT, REP_ACK)]);
    assert!(r[0].data.is_empty());
    assert_eq!(s.hs.want(), 0);
}

#[test]
fn abort_is_honoured_when_tls_is_required() {
    let mut offer = offer();
    offer.tls = true;
    offer.tls_required = true;
    let mut s = Session::started(&offer);
    let steps = s.send(&opt(OPT_ABORT, b""));
    assert!(matches!(steps, Step::Close(_)));
    assert_eq!(kinds(&s.replies()), vec![(OPT_ABORT, REP_ACK)]);
}

#[test]
fn starttls_without_tls_is_unsupported() {
    let offer = offer();
    let mut s = Session::started(&offer);
    assert_eq!(s.send(&opt(OPT_STARTTLS, b"")), Step::Continue);
    assert_eq!(kinds(&s.replies()), vec![(OPT_STARTTLS, REP_ERR_UNSUP)]);
    assert_eq!(s.hs.want(), 16);
}

#[test]
fn starttls_acks_and_resets_structured_replies() {
    let mut offer = offer();
    offer.tls = true;
    let mut s = Session::started(&offer);
    s.send(&opt(OPT_STRUCTURED_REPLY, b""));
    s.send(&opt(
        OPT_SET_META_CONTEXT,
        &meta_request(b"disk0", &[BASE_ALLOCATION.as_bytes()]),
    ));
    s.replies();
    assert_eq!(s.send(&opt(OPT_STARTTLS, b"")), Step::StartTls);
    let r = s.replies();
    assert_eq!(kinds(&r), vec![(OPT_STARTTLS, REP_ACK)]);
    assert!(r[0].data.is_empty());
    assert_eq!(s.hs.want(), 16);
    // Structured replies and the context are gone.
    let steps = s.send(&opt(OPT_GO, &info_request(b"disk0", &[])));
    assert_eq!(steps, done(0, false, None));
}

#[test]
fn starttls_twice_or_with_data_is_invalid() {
    let mut offer = offer();
    offer.tls = true;
    let mut s = Session::started(&offer);
    s.send(&opt(OPT_STARTTLS, b"x"));
    assert_eq!(kinds(&s.replies()), vec![(OPT_STARTTLS, REP_ERR_INVALID)]);
    assert_eq!(s.send(&opt(OPT_STARTTLS, b"")), Step::StartTls);
    s.replies();
    assert_eq!(s.send(&opt(OPT_STARTTLS, b"")), Step::Continue);
    assert_eq!(kinds(&s.replies()), vec![(OPT_STARTTLS, REP_ERR_INVALID)]);
}

#[test]
fn structured_replies_after_starttls_count() {
    let mut offer = offer();
    offer.tls = true;
    let mut s = Session::started(&offer);
    s.send(&opt(OPT_STARTTLS, b""));
    s.send(&opt(OPT_STRUCTURED_REPLY, b""));
    s.send(&opt(
        OPT_SET_META_CONTEXT,
        &meta_request(b"disk0", &[BASE_ALLOCATION.as_bytes()]),
    ));
    let steps = s.send(&opt(OPT_GO, &info_request(b"disk0", &[])));
    assert_eq!(steps, done(0, true, Some(1)));
}

#[test]
fn tls_required_refuses_options_before_tls() {
    let mut offer = offer();
    offer.tls = true;
    offer.tls_required = true;
    let mut s = Session::started(&offer);
    let options: Vec<(u32, Vec<u8>)> = vec![
        (OPT_LIST, vec![]),
        (OPT_INFO, info_request(b"disk0", &[])),
        (OPT_GO, info_request(b"disk0", &[])),
        (OPT_STRUCTURED_REPLY, vec![]),
        (OPT_LIST_META_CONTEXT, meta_request(b"disk0", &[])),
        (OPT_SET_META_CONTEXT, meta_request(b"disk0", &[])),
        (77, vec![]),
    ];
    for (option, data) in &options {
        assert_eq!(s.send(&opt(*option, data)), Step::Continue);
        assert_eq!(kinds(&s.replies()), vec![(*option, REP_ERR_TLS_REQD)]);
    }
    // After STARTTLS they work.
    assert_eq!(s.send(&opt(OPT_STARTTLS, b"")), Step::StartTls);
    s.replies();
    s.send(&opt(OPT_LIST, b""));
    assert_eq!(
        kinds(&s.replies()).last(),
        Some(&(OPT_LIST, REP_ACK)),
        "LIST after TLS"
    );
    s.send(&opt(OPT_INFO, &info_request(b"disk0", &[])));
    let r = s.replies();
    assert_eq!(info_types(&r), vec![INFO_EXPORT, INFO_BLOCK_SIZE]);
    assert_eq!(r.last().map(|r| r.kind), Some(REP_ACK));
    let steps = s.send(&opt(OPT_GO, &info_request(b"disk1", &[])));
    assert_eq!(steps, done(1, false, None));
}

#[test]
fn tls_required_export_name_closes_before_tls_and_works_after() {
    let mut offer = offer();
    offer.tls = true;
    offer.tls_required = true;
    let mut s = Session::started(&offer);
    let steps = s.send(&opt(OPT_EXPORT_NAME, b"disk0"));
    assert!(matches!(steps, Step::Close(_)), "{steps:?}");
    assert!(s.out.is_empty());

    let mut s = Session::started(&offer);
    s.send(&opt(OPT_STARTTLS, b""));
    s.replies();
    let steps = s.send(&opt(OPT_EXPORT_NAME, b"disk0"));
    assert_eq!(steps, done(0, false, None));
    assert_eq!(s.out, export_data(&offer.exports[0], true));
}

#[test]
fn oversized_option_is_skipped_in_pieces_then_too_big() {
    let offer = offer();
    for len in [MAX_OPTION + 1, 3 * MAX_OPTION + 17, MAX_SKIP as usize] {
        let mut s = Session::started(&offer);
        assert_eq!(s.send(&opt_header(OPT_INFO, len as u32)), Step::Continue);
        let mut pieces = 0;
        let mut left = len;
        while left > 0 {
            let w = s.hs.want();
            assert!(
                w > 0 && w <= 16 * 1024 && w <= left,
                "want {w}, {left} left"
            );
            let mut out = Vec::new();
            let step = s.hs.feed(&vec![0xa5; w], &mut out);
            assert_eq!(step, Step::Continue);
            left -= w;
            pieces += 1;
            if left > 0 {
                assert!(out.is_empty());
            } else {
                s.out.extend(out);
            }
        }
        assert!(pieces >= 2);
        let r = s.replies();
        assert_eq!(kinds(&r), vec![(OPT_INFO, REP_ERR_TOO_BIG)]);
        // The machine carries on.
        assert_eq!(s.hs.want(), 16);
        let steps = s.send(&opt(OPT_GO, &info_request(b"disk0", &[])));
        assert_eq!(steps, done(0, false, None));
    }
}

#[test]
fn option_of_exactly_max_option_is_read_whole() {
    let offer = offer();
    let mut s = Session::started(&offer);
    s.send(&opt_header(OPT_LIST, MAX_OPTION as u32));
    assert_eq!(s.hs.want(), MAX_OPTION);
    s.send(&vec![0; MAX_OPTION]);
    assert_eq!(kinds(&s.replies()), vec![(OPT_LIST, REP_ERR_INVALID)]);
}

#[test]
fn oversized_export_name_closes_after_skipping() {
    let offer = offer();
    let mut s = Session::started(&offer);
    s.send(&opt_header(OPT_EXPORT_NAME, MAX_OPTION as u32 + 1));
    let steps = s.send(&vec![b'a'; MAX_OPTION + 1]);
    assert!(matches!(steps, Step::Close(_)), "{steps:?}");
    assert!(s.out.is_empty());
}

#[test]
fn option_longer_than_max_skip_closes() {
    let offer = offer();
    for len in [MAX_SKIP as u32 + 1, u32::MAX] {
        let mut s = Session::started(&offer);
        let steps = s.send(&opt_header(OPT_INFO, len));
        assert!(matches!(steps, Step::Close(_)), "{steps:?}");
        assert_eq!(s.hs.want(), 0);
        assert!(s.out.is_empty());
    }
}

#[test]
fn bad_option_magic_closes() {
    let offer = offer();
    let mut s = Session::started(&offer);
    let mut o = opt(OPT_LIST, b"");
    o[0] ^= 1;
    let steps = s.send(&o);
    assert!(matches!(steps, Step::Close(_)), "{steps:?}");
    assert!(s.out.is_empty());
    assert_eq!(s.hs.want(), 0);
}

#[test]
fn wrong_byte_count_closes_without_panic() {
    let offer = offer();
    // In every state: flags, header, option data, skip, finished.
    let mut hs = Handshake::new(&offer);
    let mut out = Vec::new();
    assert!(matches!(hs.feed(&[0; 3], &mut out), Step::Close(_)));
    assert_eq!(hs.want(), 0);
    assert!(matches!(hs.feed(&[], &mut out), Step::Close(_)));

    let mut hs = Handshake::new(&offer);
    assert!(matches!(hs.feed(&[0; 5], &mut out), Step::Close(_)));

    let mut hs = Handshake::new(&offer);
    hs.feed(&FLAG_C_FIXED_NEWSTYLE.to_be_bytes(), &mut out);
    assert!(matches!(hs.feed(&[0; 15], &mut out), Step::Close(_)));

    let mut hs = Handshake::new(&offer);
    hs.feed(&FLAG_C_FIXED_NEWSTYLE.to_be_bytes(), &mut out);
    hs.feed(&opt_header(OPT_LIST, 10), &mut out);
    assert!(matches!(hs.feed(&[0; 11], &mut out), Step::Close(_)));

    let mut hs = Handshake::new(&offer);
    hs.feed(&FLAG_C_FIXED_NEWSTYLE.to_be_bytes(), &mut out);
    hs.feed(&opt_header(OPT_LIST, MAX_OPTION as u32 + 5), &mut out);
    assert!(matches!(hs.feed(&[0; 1], &mut out), Step::Close(_)));

    // After Done, feeding anything (even zero bytes, which is what want() says) closes.
    let mut hs = Handshake::new(&offer);
    hs.feed(&FLAG_C_FIXED_NEWSTYLE.to_be_bytes(), &mut out);
    let step = hs.feed(&opt(OPT_EXPORT_NAME, b"disk0")[..16], &mut out);
    assert_eq!(step, Step::Continue);
    let step = hs.feed(b"disk0", &mut out);
    assert!(matches!(step, Step::Done(_)));
    out.clear();
    assert!(matches!(hs.feed(&[], &mut out), Step::Close(_)));
    assert!(matches!(hs.feed(&[0; 4], &mut out), Step::Close(_)));
    assert!(out.is_empty());
}

#[test]
fn zero_length_option_is_answered_without_a_data_read() {
    let offer = offer();
    let mut s = Session::started(&offer);
    let mut out = Vec::new();
    let step = s.hs.feed(&opt_header(OPT_LIST, 0), &mut out);
    assert_eq!(step, Step::Continue);
    assert_eq!(s.hs.want(), 16);
    assert_eq!(
        kinds(&parse_replies(&out)),
        vec![
            (OPT_LIST, REP_SERVER),
            (OPT_LIST, REP_SERVER),
            (OPT_LIST, REP_ACK)
        ]
    );
}

#[test]
fn option_reply_encoding() {
    let mut out = Vec::new();
    option_reply(&mut out, 7, REP_ERR_UNKNOWN, b"hi");
    let mut expected = OPTION_REPLY_MAGIC.to_be_bytes().to_vec();
    expected.extend_from_slice(&[0, 0, 0, 7, 0x80, 0, 0, 6, 0, 0, 0, 2, b'h', b'i']);
    assert_eq!(out, expected);
    assert_eq!(&out[..8], &[0x00, 0x03, 0xe8, 0x89, 0x04, 0x55, 0x65, 0xa9]);
}

#[test]
fn error_replies_carry_a_readable_message() {
    let offer = offer();
    let mut s = Session::started(&offer);
    s.send(&opt(99, b""));
    let r = s.replies();
    assert!(!r[0].data.is_empty());
    assert!(std::str::from_utf8(&r[0].data).is_ok());
}

#[test]
fn negotiated_struct_fields() {
    let n = Negotiated {
        export: 3,
        structured_replies: true,
        meta_context: Some(BASE_ALLOCATION_ID),
    };
    assert_eq!(done(3, true, Some(1)), Step::Done(n));
}

/// proto.md, NBD_OPT_SET_META_CONTEXT: "Issuing this command replaces all previously-set
/// metadata contexts (including when this command fails)". The machine keeps the earlier
/// selection when a later SET is refused (malformed, unknown export).
#[test]
fn a_failed_set_clears_the_selection() {
    let offer = offer();
    let failing: [Vec<u8>; 2] = [vec![0, 0, 0], meta_request(b"nope", &[])];
    for bad in failing {
        let mut s = Session::started(&offer);
        s.send(&opt(OPT_STRUCTURED_REPLY, b""));
        s.send(&opt(
            OPT_SET_META_CONTEXT,
            &meta_request(b"disk0", &[BASE_ALLOCATION.as_bytes()]),
        ));
        s.replies();
        s.send(&opt(OPT_SET_META_CONTEXT, &bad));
        let r = s.replies();
        assert!(r[0].kind & (1 << 31) != 0, "{r:?}");
        let steps = s.send(&opt(OPT_GO, &info_request(b"disk0", &[])));
        assert_eq!(steps, done(0, true, None), "after {bad:?}");
    }
}

/// proto.md, NBD_OPT_ABORT: "a server SHOULD ignore any data sent by the client rather than
/// rejecting the request as invalid" — also data long enough to be skipped.
#[test]
fn abort_with_oversized_data_is_skipped_then_acked() {
    let offer = offer();
    let mut s = Session::started(&offer);
    let len = 2 * MAX_OPTION + 5;
    assert_eq!(s.send(&opt_header(OPT_ABORT, len as u32)), Step::Continue);
    let steps = s.send_all(&vec![0; len]);
    assert!(matches!(steps.last(), Some(Step::Close(_))), "{steps:?}");
    assert_eq!(kinds(&s.replies()), vec![(OPT_ABORT, REP_ACK)]);
    // ABORT with a little data is acknowledged the same way.
    let mut s = Session::started(&offer);
    assert!(matches!(s.send(&opt(OPT_ABORT, b"bye")), Step::Close(_)));
    assert_eq!(kinds(&s.replies()), vec![(OPT_ABORT, REP_ACK)]);
}

/// A default export index past the end of the list is treated as no default: no panic.
#[test]
fn default_export_out_of_range_is_no_default() {
    let mut offer = offer();
    offer.default_export = Some(7);
    let mut s = Session::started(&offer);
    s.send(&opt(OPT_INFO, &info_request(b"", &[])));
    assert_eq!(kinds(&s.replies()), vec![(OPT_INFO, REP_ERR_UNKNOWN)]);
    s.send(&opt(OPT_LIST_META_CONTEXT, &meta_request(b"", &[])));
    assert_eq!(
        kinds(&s.replies()),
        vec![(OPT_LIST_META_CONTEXT, REP_ERR_UNKNOWN)]
    );
    assert!(matches!(s.send(&opt(OPT_EXPORT_NAME, b"")), Step::Close(_)));
}

/// Descriptions longer than the spec's 4096-byte string limit are cut at a character
/// boundary in LIST and INFO.
#[test]
fn long_descriptions_are_cut_to_a_spec_string() {
    let mut offer = offer();
    offer.exports[0].description = format!("{}é{}", "d".repeat(4095), "z".repeat(100));
    let mut s = Session::started(&offer);
    s.send(&opt(OPT_LIST, b""));
    let r = s.replies();
    let (_, details) = raidd_nbd::client::parse_server(&r[0].data).unwrap();
    assert_eq!(details, "d".repeat(4095));
    s.send(&opt(OPT_INFO, &info_request(b"disk0", &[INFO_DESCRIPTION])));
    let r = s.replies();
    let desc = r
        .iter()
        .find(|r| r.kind == REP_INFO && be16(&r.data) == INFO_DESCRIPTION)
        .unwrap();
    assert_eq!(desc.data.len(), 2 + 4095);
}

/// proto.md, FORCEDTLS: "If the server receives any other option, including `NBD_OPT_INFO`
/// and unsupported options, it MUST reply with `NBD_REP_ERR_TLS_REQD`"; after TLS the same
/// unknown option is `ERR_UNSUP`, and `ERR_TLS_REQD` is never sent again.
#[test]
fn extended_headers_is_tls_reqd_before_tls_and_unsupported_after() {
    let mut offer = offer();
    offer.tls = true;
    offer.tls_required = true;
    let mut s = Session::started(&offer);
    s.send(&opt(OPT_EXTENDED_HEADERS, b""));
    assert_eq!(
        kinds(&s.replies()),
        vec![(OPT_EXTENDED_HEADERS, REP_ERR_TLS_REQD)]
    );
    assert_eq!(s.send(&opt(OPT_STARTTLS, b"")), Step::StartTls);
    s.replies();
    for option in [OPT_EXTENDED_HEADERS, OPT_STARTTLS, 99] {
        s.send(&opt(option, b""));
        let r = s.replies();
        assert!(r.iter().all(|r| r.kind != REP_ERR_TLS_REQD), "{r:?}");
    }
}
