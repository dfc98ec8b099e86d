//! The cargo-fuzz properties (`fuzz/body.rs`) over 100k deterministic inputs each, so CI
//! checks them without a nightly compiler: random bytes, inputs framed by the body, and
//! valid conversations and headers mutated.
#![allow(clippy::unwrap_used)]

mod client;

#[path = "../fuzz/body.rs"]
mod body;

use body::Outcome;
use client::{info_request, meta_request, opt};
use raidd_nbd::consts::*;
use raidd_nbd::request::REQUEST_LEN;
use std::collections::BTreeMap;

const INPUTS: usize = 100_000;

/// xorshift64*, as crates/md's tests use.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }
    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(len + 8);
        while out.len() < len {
            out.extend_from_slice(&self.next_u64().to_le_bytes());
        }
        out.truncate(len);
        out
    }
    fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len() as u64) as usize]
    }
}

/// One option a client might send, valid or nearly.
fn some_option(rng: &mut Rng) -> Vec<u8> {
    let names: [&[u8]; 4] = [b"a", b"disk", b"", b"nope"];
    let name = *rng.pick(&names);
    let infos: Vec<u16> = (0..rng.below(4)).map(|_| rng.below(5) as u16).collect();
    let queries: [&[u8]; 4] = [BASE_ALLOCATION.as_bytes(), b"base:", b"x:y", b""];
    let q: Vec<&[u8]> = (0..rng.below(3)).map(|_| *rng.pick(&queries)).collect();
    match rng.below(14) {
        0 => opt(OPT_EXPORT_NAME, name),
        1 => opt(OPT_ABORT, b""),
        2 => opt(OPT_LIST, b""),
        3 => opt(OPT_STARTTLS, b""),
        4 | 5 => opt(OPT_INFO, &info_request(name, &infos)),
        6 | 7 => opt(OPT_GO, &info_request(name, &infos)),
        8 | 9 => opt(OPT_STRUCTURED_REPLY, b""),
        10 => opt(OPT_LIST_META_CONTEXT, &meta_request(name, &q)),
        11 | 12 => opt(OPT_SET_META_CONTEXT, &meta_request(name, &q)),
        _ => {
            let len = rng.below(40) as usize;
            opt(rng.below(20) as u32, &rng.bytes(len))
        }
    }
}

/// A conversation: config byte (raw mode), client flags, a few options.
fn conversation(rng: &mut Rng) -> Vec<u8> {
    let config = (rng.next_u64() as u8) & !0x10;
    let mut v = vec![config];
    let flags = FLAG_C_FIXED_NEWSTYLE | (rng.below(2) as u32 * FLAG_C_NO_ZEROES);
    v.extend_from_slice(&flags.to_be_bytes());
    for _ in 0..1 + rng.below(6) {
        v.extend(some_option(rng));
    }
    v
}

fn mutate(rng: &mut Rng, input: &mut Vec<u8>) {
    const INTERESTING: [u32; 8] = [0, 1, 3, 16, 0x4000, 0x4001, 0x10_0001, u32::MAX];
    if input.is_empty() {
        return;
    }
    let at = rng.below(input.len() as u64) as usize;
    match rng.below(6) {
        0 => input[at] ^= 1 << rng.below(8),
        1 => input[at] = rng.next_u64() as u8,
        2 => {
            let v = *rng.pick(&INTERESTING);
            if let Some(dst) = input.get_mut(at..at + 4) {
                dst.copy_from_slice(&v.to_be_bytes());
            }
        }
        3 => input.truncate(at.max(1)),
        4 => {
            let extra = rng.below(32) as usize;
            let bytes = rng.bytes(extra);
            input.splice(at..at, bytes);
        }
        _ => {
            let len = rng.below(8) as usize;
            input.drain(at.max(1)..(at + len).min(input.len()).max(at.max(1)));
        }
    }
}

#[test]
fn handshake_body_holds_on_random_framed_and_mutated_inputs() {
    let mut rng = Rng::new(0x4e42_4448_5348_4b21);
    let mut outcomes: BTreeMap<(Outcome, &str), usize> = BTreeMap::new();
    for i in 0..INPUTS {
        let (kind, input) = match i % 10 {
            0..=2 => {
                let len = rng.below(200) as usize;
                ("random", rng.bytes(len))
            }
            3..=5 => {
                let len = rng.below(300) as usize;
                let mut v = rng.bytes(len);
                if let Some(c) = v.first_mut() {
                    *c |= 0x10;
                }
                ("framed", v)
            }
            6 => ("valid", conversation(&mut rng)),
            _ => {
                let mut v = conversation(&mut rng);
                for _ in 0..1 + rng.below(3) {
                    mutate(&mut rng, &mut v);
                }
                ("mutated", v)
            }
        };
        *outcomes.entry((body::handshake(&input), kind)).or_default() += 1;
    }
    eprintln!("handshake outcomes: {outcomes:?}");
    for kind in ["framed", "valid", "mutated"] {
        for o in [
            Outcome::Starved,
            Outcome::Closed,
            Outcome::DoneExportName,
            Outcome::DoneGo,
        ] {
            if (kind, o) == ("framed", Outcome::DoneGo) {
                // Random data is rarely a well-formed GO request.
                continue;
            }
            let least = if kind == "framed" { 5 } else { 50 };
            assert!(
                outcomes.get(&(o, kind)).copied().unwrap_or(0) > least,
                "{kind} inputs rarely end {o:?}: {outcomes:?}"
            );
        }
    }
}

#[test]
fn handshake_body_skips_and_tls_paths_are_reached() {
    // Oversized options (skipped then refused) and STARTTLS on every offer.
    for config in 0..64u8 {
        let mut v = vec![config & !0x10];
        v.extend_from_slice(&(FLAG_C_FIXED_NEWSTYLE).to_be_bytes());
        v.extend(opt(OPT_LIST, &vec![0; 40_000]));
        v.extend(opt(OPT_STARTTLS, b""));
        v.extend(opt(OPT_STRUCTURED_REPLY, b""));
        v.extend(opt(
            OPT_SET_META_CONTEXT,
            &meta_request(b"a", &[BASE_ALLOCATION.as_bytes()]),
        ));
        v.extend(opt(OPT_GO, &info_request(b"a", &[0, 1, 2, 3])));
        let o = body::handshake(&v);
        let tls_ok = config & 1 != 0 || config & 2 == 0;
        if config & 8 == 0 && tls_ok {
            assert_eq!(o, Outcome::DoneGo, "config {config:#x}");
        }
    }
}

/// A header and limits laid out as `body::request` reads them, with values chosen so a
/// fair share is accepted.
fn request_input(rng: &mut Rng) -> Vec<u8> {
    let mut v = vec![0u8; REQUEST_LEN + 18];
    v[..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
    let flags = if rng.below(2) == 0 {
        0
    } else {
        1 << rng.below(16)
    };
    v[4..6].copy_from_slice(&(flags as u16).to_be_bytes());
    let command = rng.below(10) as u16;
    v[6..8].copy_from_slice(&command.to_be_bytes());
    v[8..16].copy_from_slice(&rng.next_u64().to_be_bytes());
    let any = rng.next_u64();
    let size = *rng.pick(&[0u64, 4096, 1 << 20, 1 << 40, u64::MAX, any]);
    let block = *rng.pick(&[0u32, 1, 512, 4096]);
    let blocks = |rng: &mut Rng| {
        let scale = rng.below(20);
        rng.below(1 << scale) * u64::from(block.max(1))
    };
    let offset = match rng.below(4) {
        0 => rng.next_u64(),
        1 => u64::MAX - rng.below(8192),
        _ => blocks(rng),
    };
    let length = match rng.below(4) {
        0 => rng.next_u64() as u32,
        _ => blocks(rng) as u32,
    };
    // FLUSH (and DISC) must carry offset and length 0: mostly give them that.
    let (offset, length) = if matches!(command, CMD_FLUSH | CMD_DISC) && rng.below(4) != 0 {
        (0, 0)
    } else {
        (offset, length)
    };
    v[16..24].copy_from_slice(&offset.to_be_bytes());
    v[24..28].copy_from_slice(&length.to_be_bytes());
    let l = REQUEST_LEN;
    v[l..l + 8].copy_from_slice(&size.to_be_bytes());
    v[l + 8..l + 12].copy_from_slice(&block.to_be_bytes());
    let max = *rng.pick(&[0u32, 65536, 1 << 25, u32::MAX]);
    v[l + 12..l + 16].copy_from_slice(&max.to_be_bytes());
    v[l + 16] = (rng.next_u64() as u8) & 0xe0;
    v[l + 17] = rng.next_u64() as u8;
    v
}

#[test]
fn request_body_holds_on_random_and_chosen_inputs() {
    let mut rng = Rng::new(0x4e42_4452_4551_5521);
    let mut accepted = 0;
    let mut per_command = [0usize; 8];
    for i in 0..INPUTS {
        let input = if i % 4 == 0 {
            let len = rng.below(60) as usize;
            rng.bytes(len)
        } else {
            let mut v = request_input(&mut rng);
            if i % 4 == 1 {
                let at = rng.below(v.len() as u64) as usize;
                v[at] ^= 1 << rng.below(8);
            }
            v
        };
        if body::request(&input) {
            accepted += 1;
            let t = u16::from_be_bytes([input[6], input[7]]) as usize;
            per_command[t] += 1;
        }
    }
    eprintln!("{accepted} of {INPUTS} requests accepted; per command {per_command:?}");
    assert!(accepted > INPUTS / 20, "only {accepted} accepted");
    assert!(accepted < INPUTS / 2, "{accepted} accepted");
    for (t, n) in per_command.iter().enumerate() {
        assert!(*n > 100, "command {t} accepted only {n} times");
    }
}
