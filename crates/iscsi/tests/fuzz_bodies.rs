//! The cargo-fuzz properties (`fuzz/body.rs`) over 100k deterministic inputs each, so CI
//! checks them without a nightly compiler: random bytes, valid headers and logins, and
//! those mutated.
#![allow(clippy::unwrap_used)]

#[path = "../fuzz/body.rs"]
mod body;

use body::{flags, Outcome, Script, ALICE, DISCO, INITIATOR, OPEN, SECURE};
use raidd_iscsi::pdu::{build, op, pad, BHS_LEN};
use std::collections::BTreeMap;

/// Per body. In debug mode on a 2-core machine the login test takes about 3 s of CPU
/// (mostly the crate's own text parsing), the pdu test under 1 s.
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
    fn bool(&mut self) -> bool {
        self.next_u64() & 1 != 0
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

fn mutate(rng: &mut Rng, input: &mut Vec<u8>) {
    const INTERESTING: [u32; 8] = [0, 1, 3, 16, 0x4000, 0x2000, 0xff_ffff, u32::MAX];
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

// ---- pdu ----

/// An initiator header of `opcode` with random fields, and AHS for a SCSI command
/// (extended CDB, bidirectional read length), with TotalAHSLength set to match.
fn header(rng: &mut Rng, opcode: u8) -> Vec<u8> {
    let itt = rng.next_u64() as u32;
    let any = rng.next_u64();
    let lun = *rng.pick(&[0, 1 << 48, any]);
    let (cmdsn, expstatsn) = (rng.next_u64() as u32, rng.next_u64() as u32);
    let scale = rng.below(25);
    let data_len = rng.below(1 << scale) as usize;
    let mut h = match opcode {
        op::SCSI_COMMAND => {
            let cdb_len = rng.below(17) as usize;
            let cdb = rng.bytes(cdb_len);
            let (read, write) = (rng.bool(), rng.bool());
            let len = rng.next_u64() as u32;
            build::command(itt, lun, &cdb, read, write, len, cmdsn, expstatsn, data_len)
        }
        op::DATA_OUT => {
            let (ttt, datasn, offset) = (rng.next_u64(), rng.below(64), rng.below(1 << 24));
            let f = rng.bool();
            build::data_out(itt, ttt as u32, datasn as u32, offset as u32, f, data_len)
        }
        _ => {
            let mut h = [0u8; BHS_LEN];
            h[0] = opcode | if rng.bool() { 0x40 } else { 0 };
            h[1] = 0x80;
            h[5..8].copy_from_slice(&(data_len as u32).to_be_bytes()[1..]);
            h[8..16].copy_from_slice(&lun.to_be_bytes());
            h[16..20].copy_from_slice(&itt.to_be_bytes());
            h[20..24].copy_from_slice(&u32::MAX.to_be_bytes());
            h[24..28].copy_from_slice(&cmdsn.to_be_bytes());
            h[28..32].copy_from_slice(&expstatsn.to_be_bytes());
            match opcode {
                op::LOGOUT => h[1] |= rng.below(3) as u8,
                op::TASK_MGMT => h[1] |= 1 + rng.below(8) as u8,
                op::TEXT => h[1] |= if rng.bool() { 0x40 } else { 0 },
                op::LOGIN => {
                    h[0] = op::LOGIN | 0x40;
                    h[1] = flags(true, false, 1, 3);
                    h[8..14].copy_from_slice(&body::ISID);
                    h[20..22].copy_from_slice(&1u16.to_be_bytes());
                }
                _ => {}
            }
            h
        }
    };
    let mut v = h.to_vec();
    if opcode == op::SCSI_COMMAND && rng.below(3) == 0 {
        let extra = rng.below(32) as usize;
        v.extend_from_slice(&((extra + 1) as u16).to_be_bytes());
        v.extend_from_slice(&[1, 0]);
        v.extend(rng.bytes(extra));
        v.resize(v.len() + pad(4 + extra), 0);
        if rng.bool() {
            v.extend_from_slice(&[0, 5, 2, 0]);
            v.extend_from_slice(&(rng.next_u64() as u32).to_be_bytes());
        }
        h[4] = ((v.len() - BHS_LEN) / 4) as u8;
        v[..BHS_LEN].copy_from_slice(&h);
    }
    v
}

#[test]
fn pdu_body_holds_on_random_valid_and_mutated_headers() {
    const KINDS: [u8; 7] = [
        op::SCSI_COMMAND,
        op::DATA_OUT,
        op::NOP_OUT,
        op::TEXT,
        op::LOGOUT,
        op::TASK_MGMT,
        op::LOGIN,
    ];
    let mut rng = Rng::new(0x6953_4353_4950_4455);
    let mut parsed: BTreeMap<(u8, &str), usize> = BTreeMap::new();
    let mut refused: BTreeMap<&str, usize> = BTreeMap::new();
    for i in 0..INPUTS {
        let (kind, input) = match i % 10 {
            0..=2 => {
                let len = rng.below(BHS_LEN as u64 + 80) as usize;
                ("random", rng.bytes(len))
            }
            3..=5 => {
                let opcode = *rng.pick(&KINDS);
                ("valid", header(&mut rng, opcode))
            }
            _ => {
                let opcode = *rng.pick(&KINDS);
                let mut v = header(&mut rng, opcode);
                for _ in 0..1 + rng.below(3) {
                    mutate(&mut rng, &mut v);
                }
                ("mutated", v)
            }
        };
        match body::pdu(&input) {
            Some(opcode) => *parsed.entry((opcode, kind)).or_default() += 1,
            None => *refused.entry(kind).or_default() += 1,
        }
    }
    eprintln!("pdu parsed {parsed:?}; refused {refused:?}");
    for opcode in KINDS {
        for kind in ["valid", "mutated"] {
            let n = parsed.get(&(opcode, kind)).copied().unwrap_or(0);
            assert!(
                n > 1000,
                "{kind} opcode {opcode:#04x} parsed only {n} times"
            );
        }
    }
    // Valid headers always parse; mutated AHS and random commands sometimes do not.
    assert_eq!(refused.get("valid"), None);
    assert!(
        refused.get("mutated").copied().unwrap_or(0) > 100,
        "{refused:?}"
    );
    let random: usize = parsed
        .iter()
        .filter(|((_, k), _)| *k == "random")
        .map(|(_, n)| n)
        .sum();
    assert!(random > INPUTS / 5, "{random} random headers parsed");
}

// ---- login ----

/// A login as libiscsi sends it, to the open target, the CHAP target (optionally mutual,
/// optionally with the first text split over continuations) or a discovery session, or
/// in one operational request. Returns the script and the target it reaches.
fn valid_login(rng: &mut Rng) -> (Script, Option<usize>) {
    let challenge: [u8; 16] = rng.bytes(16).try_into().unwrap();
    let chap_id = rng.next_u64() as u8;
    let tsih = 1 + rng.below(0xffff) as u16;
    let config = rng.below(8) as u8;
    let mut s = Script::login(config, challenge, chap_id, tsih);
    let operational: &[(&str, &str)] = &[
        ("HeaderDigest", "None,CRC32C"),
        ("DataDigest", "None"),
        ("MaxRecvDataSegmentLength", "262144"),
        ("InitialR2T", "No"),
        ("ImmediateData", "Yes"),
        ("MaxBurstLength", "16776192"),
        ("FirstBurstLength", "262144"),
        ("MaxConnections", "1"),
        ("DataPDUInOrder", "Yes"),
        ("DataSequenceInOrder", "Yes"),
        ("DefaultTime2Wait", "2"),
        ("DefaultTime2Retain", "0"),
        ("IFMarker", "No"),
        ("OFMarker", "No"),
        ("MaxOutstandingR2T", "1"),
        ("ErrorRecoveryLevel", "0"),
    ];
    let discovery_ops: &[(&str, &str)] = &[
        ("HeaderDigest", "None"),
        ("DataDigest", "None"),
        ("MaxRecvDataSegmentLength", "262144"),
        ("DefaultTime2Wait", "2"),
        ("DefaultTime2Retain", "0"),
        ("ErrorRecoveryLevel", "0"),
    ];
    let to_ff = flags(true, false, 1, 3);
    let to_op = flags(true, false, 0, 1);
    let stay = flags(false, false, 0, 1);
    let target = match rng.below(5) {
        0 => {
            s.request(
                to_op,
                &[
                    ("InitiatorName", INITIATOR),
                    ("TargetName", OPEN),
                    ("SessionType", "Normal"),
                    ("AuthMethod", "None"),
                ],
            )
            .request(to_ff, operational)
            .text(&[("SendTargets", "")]);
            Some(0)
        }
        1 => {
            let mut ops = vec![
                ("InitiatorName", INITIATOR),
                ("InitiatorAlias", "host"),
                ("TargetName", OPEN),
                ("SessionType", "Normal"),
            ];
            ops.extend_from_slice(operational);
            s.request(to_ff, &ops).text(&[("SendTargets", OPEN)]);
            Some(0)
        }
        2 | 3 => {
            let first = [
                ("InitiatorName", INITIATOR),
                ("TargetName", SECURE),
                ("SessionType", "Normal"),
                ("AuthMethod", "CHAP,None"),
            ];
            if rng.bool() {
                s.request(stay, &first);
            } else {
                // Split over two continuation requests and an empty final one.
                let text = Script::text_of(&first, &challenge, chap_id);
                let cut = rng.below(text.len() as u64) as usize;
                s.raw(flags(false, true, 0, 0), &text[..cut])
                    .raw(flags(false, true, 0, 0), &text[cut..])
                    .raw(stay, b"");
            }
            s.request(stay, &[("CHAP_A", "5")]);
            let response = *rng.pick(&["@alice", "@ALICE", "@alice64"]);
            let mut answer = vec![("CHAP_N", ALICE.0), ("CHAP_R", response)];
            if rng.bool() {
                answer.extend_from_slice(&[("CHAP_I", "1"), ("CHAP_C", "0x0102030405060708")]);
            }
            s.request(to_op, &answer)
                .request(to_ff, operational)
                .text(&[("SendTargets", ""), ("MaxRecvDataSegmentLength", "65536")]);
            Some(1)
        }
        _ => {
            s.request(
                stay,
                &[
                    ("InitiatorName", INITIATOR),
                    ("SessionType", "Discovery"),
                    ("AuthMethod", "CHAP"),
                ],
            )
            .request(stay, &[("CHAP_A", "7,5")])
            .request(to_op, &[("CHAP_N", DISCO.0), ("CHAP_R", "@disco")])
            .request(to_ff, discovery_ops)
            .text(&[("SendTargets", "All")]);
            None
        }
    };
    (s, target)
}

/// Text mode: a session and a Text request that a full feature phase might see.
fn text_request(rng: &mut Rng) -> Script {
    let keys: [(&str, &str); 8] = [
        ("SendTargets", "All"),
        ("SendTargets", ""),
        ("SendTargets", SECURE),
        ("MaxRecvDataSegmentLength", "65536"),
        ("MaxRecvDataSegmentLength", "16777216"),
        ("InitiatorAlias", "host"),
        ("MaxBurstLength", "4096"),
        ("X-com.example.Thing", "1"),
    ];
    let mut pairs: Vec<(&str, &str)> = Vec::new();
    for _ in 0..1 + rng.below(3) {
        let p = *rng.pick(&keys);
        if pairs.iter().all(|(k, _)| *k != p.0) {
            pairs.push(p);
        }
    }
    Script::text_mode(rng.below(8) as u8, rng.next_u64() as u8, &pairs)
}

#[test]
fn login_body_holds_on_random_valid_and_mutated_logins() {
    let mut rng = Rng::new(0x6953_4353_494c_4f47);
    let mut outcomes: BTreeMap<(&str, Outcome), usize> = BTreeMap::new();
    for i in 0..INPUTS {
        let mut want = None;
        let (kind, input) = match i % 10 {
            0 | 1 => {
                let len = rng.below(300) as usize;
                ("random", rng.bytes(len))
            }
            2 => {
                let (s, target) = valid_login(&mut rng);
                want = Some(Outcome::Full(target));
                ("valid", s.bytes)
            }
            3 => {
                want = Some(Outcome::Text(true));
                ("text", text_request(&mut rng).bytes)
            }
            _ => {
                let mut v = if i % 10 == 4 {
                    text_request(&mut rng).bytes
                } else {
                    valid_login(&mut rng).0.bytes
                };
                for _ in 0..1 + rng.below(3) {
                    mutate(&mut rng, &mut v);
                }
                ("mutated", v)
            }
        };
        let outcome = body::login(&input);
        if let Some(want) = want {
            assert_eq!(outcome, want, "{kind} input {input:02x?}");
        }
        *outcomes.entry((kind, outcome)).or_default() += 1;
    }
    eprintln!("login outcomes: {outcomes:?}");
    let count = |kind: &str, f: &dyn Fn(Outcome) -> bool| -> usize {
        outcomes
            .iter()
            .filter(|((k, o), _)| *k == kind && f(*o))
            .map(|(_, n)| n)
            .sum()
    };
    // Mutated logins reach every end: each target, refusals of many kinds, starving.
    for target in [Some(0), Some(1), None] {
        let n = count("mutated", &|o| o == Outcome::Full(target));
        assert!(n > 500, "mutated logins reach {target:?} only {n} times");
    }
    let statuses = outcomes
        .keys()
        .filter(|(k, o)| *k == "mutated" && matches!(o, Outcome::Closed(_)))
        .count();
    assert!(
        statuses >= 6,
        "mutated logins closed with only {statuses} statuses"
    );
    assert!(count("mutated", &|o| o == Outcome::Starved) > 500);
    assert!(count("mutated", &|o| matches!(o, Outcome::Text(false))) > 100);
    assert!(count("random", &|o| matches!(o, Outcome::Closed(_))) > 1000);
    assert!(count("random", &|o| matches!(o, Outcome::Text(_))) > 1000);
}

#[test]
fn login_body_refuses_chap_target_without_the_secret() {
    // The CHAP target with each wrong answer closes with authentication failure (0x0201),
    // and the right one gets in: the body's CHAP bookkeeping is not vacuous.
    for (response, want) in [
        ("@alice", Outcome::Full(Some(1))),
        ("@alice-id", Outcome::Closed(0x0201)),
        ("@raidd", Outcome::Closed(0x0201)),
        ("@disco", Outcome::Closed(0x0201)),
        ("0x00", Outcome::Closed(0x0201)),
    ] {
        let mut s = Script::login(0, [3; 16], 9, 77);
        s.request(
            flags(false, false, 0, 1),
            &[
                ("InitiatorName", INITIATOR),
                ("TargetName", SECURE),
                ("AuthMethod", "CHAP"),
            ],
        )
        .request(flags(false, false, 0, 1), &[("CHAP_A", "5")])
        .request(
            flags(true, false, 0, 1),
            &[("CHAP_N", ALICE.0), ("CHAP_R", response)],
        )
        .request(flags(true, false, 1, 3), &[]);
        assert_eq!(body::login(&s.bytes), want, "CHAP_R {response}");
    }
}

#[test]
fn login_body_reaches_the_response_bound() {
    // 240 unknown keys are answered within the 8192-byte login bound; 480 are not, and
    // the login closes with an initiator error instead of sending more.
    for (count, want) in [
        (0xf0, Outcome::Full(Some(0))),
        (0xff, Outcome::Closed(0x0200)),
    ] {
        let mut s = Script::login(0, [5; 16], 1, 2);
        s.request(
            flags(false, false, 1, 0),
            &[("InitiatorName", INITIATOR), ("TargetName", OPEN)],
        )
        .unknown_keys(flags(true, false, 1, 3), count);
        assert_eq!(body::login(&s.bytes), want, "count byte {count:#x}");
    }
}
