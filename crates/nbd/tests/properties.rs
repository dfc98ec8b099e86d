//! Properties of the handshake machine over arbitrary input and arbitrary ways of cutting
//! it into reads.
#![allow(clippy::unwrap_used)]

mod client;

use client::*;
use proptest::prelude::*;
use raidd_nbd::consts::*;
use raidd_nbd::handshake::MAX_OPTION;
use raidd_nbd::{Handshake, Offer, Step};

const MAX_WANT: usize = if MAX_OPTION > 16 * 1024 {
    MAX_OPTION
} else {
    16 * 1024
};

/// Everything a driver saw: each feed's step and output.
#[derive(Debug, PartialEq, Eq)]
struct Trace {
    feeds: Vec<(Step, Vec<u8>)>,
    /// Bytes of input left unread when the driver stopped.
    unread: usize,
}

/// The shell's loop: input arrives in `chunks` (sizes, cycled; 0 is read as 1); the
/// driver buffers it and feeds exactly `want()` bytes whenever it has them, until the input
/// runs out or the machine closes or finishes.
fn drive(offer: &Offer, input: &[u8], chunks: &[usize]) -> Trace {
    let mut hs = Handshake::new(offer);
    let mut feeds = Vec::new();
    let mut buffered: Vec<u8> = Vec::new();
    let mut pos = 0;
    let mut chunk = chunks.iter().cycle();
    loop {
        let want = hs.want();
        assert!(want <= MAX_WANT, "want() {want}");
        assert!(want > 0, "want() 0 before the end");
        while buffered.len() < want && pos < input.len() {
            let n = chunk.next().copied().unwrap_or(usize::MAX).max(1);
            let end = pos.saturating_add(n).min(input.len());
            buffered.extend_from_slice(&input[pos..end]);
            pos = end;
        }
        if buffered.len() < want {
            return Trace {
                feeds,
                unread: buffered.len() + input.len() - pos,
            };
        }
        let piece: Vec<u8> = buffered.drain(..want).collect();
        let mut out = Vec::new();
        let step = hs.feed(&piece, &mut out);
        let end = matches!(step, Step::Close(_) | Step::Done(_));
        feeds.push((step, out));
        if end {
            assert_eq!(hs.want(), 0);
            return Trace {
                feeds,
                unread: buffered.len() + input.len() - pos,
            };
        }
    }
}

/// Every feed's output is whole option replies, except the export data that ends an
/// EXPORT_NAME.
fn check_outputs(offer: &Offer, trace: &Trace) {
    for (step, out) in &trace.feeds {
        match try_parse_replies(out) {
            Ok(replies) => {
                for r in &replies {
                    check_reply(r).unwrap();
                }
                if let Some(last) = replies.last() {
                    // Every answer ends in ACK or an error, all for the same option.
                    assert!(last.kind == REP_ACK || last.kind & (1 << 31) != 0);
                    assert!(replies.iter().all(|r| r.option == last.option));
                } else if let Step::Done(_) = step {
                    panic!("Done without output");
                }
            }
            Err(e) => {
                let Step::Done(n) = step else {
                    panic!("malformed output {e}: {out:02x?}");
                };
                let x = &offer.exports[n.export];
                assert!(out.len() == 10 || out.len() == 134, "{out:02x?}");
                assert_eq!(be64(out), x.size);
                assert_eq!(be16(&out[8..]), x.flags | FLAG_HAS_FLAGS);
                assert!(out[10..].iter().all(|&b| b == 0));
            }
        }
    }
}

fn any_offer() -> impl Strategy<Value = Offer> {
    (any::<bool>(), any::<bool>(), any::<bool>()).prop_map(|(tls, tls_required, default)| {
        let mut o = offer();
        o.tls = tls;
        o.tls_required = tls_required;
        if !default {
            o.default_export = None;
        }
        o
    })
}

/// One option, valid or nearly.
fn any_option() -> impl Strategy<Value = Vec<u8>> {
    let name = prop_oneof![
        Just(b"disk0".to_vec()),
        Just(b"disk1".to_vec()),
        Just(Vec::new()),
        proptest::collection::vec(any::<u8>(), 0..8),
    ];
    let infos = proptest::collection::vec(0u16..6, 0..5);
    let query = prop_oneof![
        Just(BASE_ALLOCATION.as_bytes().to_vec()),
        Just(b"base:".to_vec()),
        proptest::collection::vec(any::<u8>(), 0..6),
    ];
    let queries = proptest::collection::vec(query, 0..3);
    (
        0u32..16,
        name,
        infos,
        queries,
        proptest::collection::vec(any::<u8>(), 0..24),
    )
        .prop_map(|(o, name, infos, queries, junk)| {
            let q: Vec<&[u8]> = queries.iter().map(|q| q.as_slice()).collect();
            match o {
                OPT_INFO | OPT_GO => opt(o, &info_request(&name, &infos)),
                OPT_LIST_META_CONTEXT | OPT_SET_META_CONTEXT => opt(o, &meta_request(&name, &q)),
                OPT_EXPORT_NAME => opt(o, &name),
                OPT_LIST | OPT_STARTTLS | OPT_STRUCTURED_REPLY | OPT_ABORT => opt(o, b""),
                _ => opt(o, &junk),
            }
        })
}

/// A client conversation: flags and options, maybe with an oversized option among them.
fn conversation() -> impl Strategy<Value = Vec<u8>> {
    (
        prop_oneof![
            Just(FLAG_C_FIXED_NEWSTYLE),
            Just(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES)
        ],
        proptest::collection::vec(any_option(), 0..8),
        proptest::option::of((0usize..8, MAX_OPTION + 1..MAX_OPTION * 3)),
    )
        .prop_map(|(flags, mut options, big)| {
            if let Some((at, len)) = big {
                let at = at.min(options.len());
                options.insert(at, opt(OPT_LIST, &vec![7; len]));
            }
            let mut v = flags.to_be_bytes().to_vec();
            for o in options {
                v.extend(o);
            }
            v
        })
}

fn chunk_sizes() -> impl Strategy<Value = Vec<usize>> {
    proptest::collection::vec(prop_oneof![1usize..4, 1usize..40, 1usize..70_000], 1..16)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes_never_break_the_machine(
        offer in any_offer(),
        input in proptest::collection::vec(any::<u8>(), 0..600),
        chunks in chunk_sizes(),
    ) {
        let trace = drive(&offer, &input, &chunks);
        check_outputs(&offer, &trace);
    }

    #[test]
    fn arbitrary_bytes_after_good_flags(
        offer in any_offer(),
        no_zeroes: bool,
        input in proptest::collection::vec(any::<u8>(), 0..600),
        chunks in chunk_sizes(),
    ) {
        let flags = FLAG_C_FIXED_NEWSTYLE | if no_zeroes { FLAG_C_NO_ZEROES } else { 0 };
        let mut v = flags.to_be_bytes().to_vec();
        // Stamp the option magic at the start so the first option header gets parsed.
        v.extend_from_slice(&IHAVEOPT.to_be_bytes());
        v.extend_from_slice(&input);
        let trace = drive(&offer, &v, &chunks);
        check_outputs(&offer, &trace);
    }

    #[test]
    fn mutated_conversations_never_break_the_machine(
        offer in any_offer(),
        mut input in conversation(),
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4),
        chunks in chunk_sizes(),
    ) {
        for (at, x) in flips {
            if !input.is_empty() {
                let at = at % input.len();
                input[at] ^= x;
            }
        }
        let trace = drive(&offer, &input, &chunks);
        check_outputs(&offer, &trace);
    }

    #[test]
    fn conversations_do_not_depend_on_how_reads_are_split(
        offer in any_offer(),
        input in conversation(),
        chunks in chunk_sizes(),
    ) {
        let whole = drive(&offer, &input, &[usize::MAX]);
        check_outputs(&offer, &whole);
        let split = drive(&offer, &input, &chunks);
        prop_assert_eq!(&split, &whole);
        let bytewise = drive(&offer, &input, &[1]);
        prop_assert_eq!(&bytewise, &whole);
    }
}

#[test]
fn a_full_conversation_is_split_independent() {
    // LIST, INFO, oversized, structured replies, SET, GO: every feed kind.
    let offer = offer();
    let mut input = FLAG_C_FIXED_NEWSTYLE.to_be_bytes().to_vec();
    input.extend(opt(OPT_LIST, b""));
    input.extend(opt(OPT_INFO, &info_request(b"disk1", &[INFO_NAME])));
    input.extend(opt(9999, &vec![1; MAX_OPTION * 2 + 3]));
    input.extend(opt(OPT_STRUCTURED_REPLY, b""));
    input.extend(opt(
        OPT_SET_META_CONTEXT,
        &meta_request(b"disk0", &[BASE_ALLOCATION.as_bytes()]),
    ));
    input.extend(opt(OPT_GO, &info_request(b"disk0", &[INFO_BLOCK_SIZE])));
    let whole = drive(&offer, &input, &[usize::MAX]);
    check_outputs(&offer, &whole);
    assert_eq!(
        whole.feeds.last().map(|f| &f.0),
        Some(&done(0, true, Some(1)))
    );
    assert_eq!(whole.unread, 0);
    for chunks in [&[1][..], &[2, 3], &[16], &[17, 1], &[4095, 1, 16384]] {
        assert_eq!(drive(&offer, &input, chunks), whole, "{chunks:?}");
    }
}
