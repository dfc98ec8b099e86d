//! The fuzz properties, shared by the cargo-fuzz targets (`fuzz_targets/pdu.rs`,
//! `fuzz_targets/login.rs`) and the plain test that runs them without a nightly compiler
//! (`tests/fuzz_bodies.rs`).
//!
//! `pdu`: any 48-byte header with any AHS bytes frames, parses and reports its sequence
//! numbers without panicking, and parses to what its bytes say; the request builders
//! round-trip through the parser; CRC32C over split parts is the CRC of the whole.
//! `login`: the login state machine driven with requests built from the input never
//! panics, answers within the login bounds, closes only with an error status, hands out
//! the TSIH only on the final response, and lets nobody into a CHAP target or a discovery
//! session without the right CHAP response, or past a target's ACL; full-feature Text
//! answers (SendTargets) never panic and list only targets the initiator may see.
// Each fuzz target uses one of the two bodies; the test also uses the input writers.
#![allow(dead_code)]

use raidd_iscsi::chap::{self, Secret};
use raidd_iscsi::digest;
use raidd_iscsi::login::{self, Login, LoginRequest, LoginResponse, Portal, Step, TargetEntry};
use raidd_iscsi::params::{Params, TargetLimits, MAX_DATA_LEN, MIN_DATA_LEN, REJECT};
use raidd_iscsi::pdu::{self, build, op, Bhs, Digests, Request, ScsiCommand, BHS_LEN};
use raidd_iscsi::text;

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn be64(b: &[u8], at: usize) -> u64 {
    (u64::from(be32(b, at)) << 32) | u64::from(be32(b, at + 4))
}

/// The opcodes `Request::parse` knows.
const KNOWN_OPCODES: [u8; 8] = [
    op::NOP_OUT,
    op::SCSI_COMMAND,
    op::TASK_MGMT,
    op::LOGIN,
    op::TEXT,
    op::DATA_OUT,
    op::LOGOUT,
    op::SNACK,
];

/// The first 48 bytes are a BHS (missing bytes read as zero), the rest its AHS. Checks
/// framing with every digest setting, parsing, `cmdsn()`/`expstatsn()`, the builders
/// (with field values taken from the header) and CRC32C over parts split where the
/// input says. Returns the opcode when the header parsed.
pub fn pdu(data: &[u8]) -> Option<u8> {
    let mut h = [0u8; BHS_LEN];
    let n = data.len().min(BHS_LEN);
    h[..n].copy_from_slice(&data[..n]);
    let ahs = data.get(BHS_LEN..).unwrap_or(&[]);
    framing(&h);
    builders(&h, ahs);
    crc_parts(data);
    parse(&h, ahs)
}

fn framing(h: &[u8; BHS_LEN]) {
    let bhs = Bhs(*h);
    let ahs = usize::from(h[4]) * 4;
    let data = (usize::from(h[5]) << 16) | (usize::from(h[6]) << 8) | usize::from(h[7]);
    assert_eq!(bhs.ahs_len(), ahs);
    assert!(ahs <= pdu::MAX_AHS_LEN);
    assert_eq!(bhs.data_len(), data);
    for (header, data_digest) in [(false, false), (false, true), (true, false), (true, true)] {
        let f = bhs.framing(Digests {
            header,
            data: data_digest,
        });
        assert_eq!(f.ahs, ahs);
        assert_eq!(f.data, data);
        assert_eq!(f.header_digest, header);
        assert_eq!(f.data_digest, data_digest && data > 0, "{f:?}");
        assert_eq!(f.header_tail(), ahs + if header { 4 } else { 0 });
        let pad = f.pad();
        assert!(
            pad < 4 && (data + pad).is_multiple_of(4),
            "pad {pad} after {data}"
        );
        assert_eq!(pad, pdu::pad(data));
    }
    assert!(!format!("{bhs:?}").is_empty());
}

fn parse(h: &[u8; BHS_LEN], ahs: &[u8]) -> Option<u8> {
    let bhs = Bhs(*h);
    let opcode = h[0] & 0x3f;
    let immediate = h[0] & 0x40 != 0;
    assert_eq!(bhs.opcode(), opcode);
    assert_eq!(bhs.immediate(), immediate);
    let parsed = Request::parse(&bhs, ahs);
    assert_eq!(Request::parse(&bhs, ahs), parsed, "parse is not a function");
    let r = match parsed {
        Err(e) => {
            // Only a SCSI Command reads its AHS; without one, every header parses.
            assert_eq!(opcode, op::SCSI_COMMAND, "{e} for opcode {opcode:#04x}");
            assert!(!ahs.is_empty(), "{e} without an AHS");
            assert!(Request::parse(&bhs, &[]).is_ok());
            return None;
        }
        Ok(r) => r,
    };
    let (lun, itt) = (be64(h, 8), be32(h, 16));
    let (ttt, cmdsn, expstatsn) = (be32(h, 20), be32(h, 24), be32(h, 28));
    let final_bit = h[1] & 0x80 != 0;
    let bit6 = h[1] & 0x40 != 0;
    // Whether the PDU carries a CmdSN, and an ExpStatSN.
    let (ordered, acked) = match &r {
        Request::NopOut {
            immediate: i,
            lun: l,
            itt: t,
            ttt: tt,
            ..
        } => {
            assert_eq!(opcode, op::NOP_OUT);
            assert_eq!((*i, *l, *t, *tt), (immediate, lun, itt, ttt));
            (true, true)
        }
        Request::Command(c) => {
            assert_eq!(opcode, op::SCSI_COMMAND);
            assert!(
                c.cdb.len() >= 16 && c.cdb.len() <= 16 + ahs.len(),
                "CDB of {} bytes from {} AHS bytes",
                c.cdb.len(),
                ahs.len()
            );
            assert_eq!(c.cdb[..16], h[32..48]);
            if ahs.is_empty() {
                assert_eq!((c.cdb.len(), c.bidi_read_len), (16, None));
            }
            if c.bidi_read_len.is_some() {
                assert!(ahs.len() >= 8);
            }
            assert_eq!(
                (c.immediate, c.final_bit, c.read, c.write, c.attr),
                (immediate, final_bit, bit6, h[1] & 0x20 != 0, h[1] & 7)
            );
            assert_eq!((c.lun, c.itt, c.expected_len), (lun, itt, ttt));
            (true, true)
        }
        Request::TaskMgmt {
            immediate: i,
            function,
            lun: l,
            itt: t,
            referenced_tag,
            ref_cmdsn,
            exp_datasn,
            ..
        } => {
            assert_eq!(opcode, op::TASK_MGMT);
            assert_eq!((*i, *function, *l, *t), (immediate, h[1] & 0x7f, lun, itt));
            assert_eq!(
                (*referenced_tag, *ref_cmdsn, *exp_datasn),
                (ttt, be32(h, 32), be32(h, 36))
            );
            (true, true)
        }
        Request::Login {
            transit,
            cont,
            csg,
            nsg,
            version_max,
            version_min,
            isid,
            tsih,
            itt: t,
            cid,
            ..
        } => {
            assert_eq!(opcode, op::LOGIN);
            assert_eq!(
                (*transit, *cont, *csg, *nsg),
                (final_bit, bit6, (h[1] >> 2) & 3, h[1] & 3)
            );
            assert_eq!((*version_max, *version_min), (h[2], h[3]));
            assert_eq!(
                (&isid[..], *tsih, *t, *cid),
                (&h[8..14], be16(h, 14), itt, be16(h, 20))
            );
            (true, true)
        }
        Request::Text {
            immediate: i,
            final_bit: f,
            cont,
            lun: l,
            itt: t,
            ttt: tt,
            ..
        } => {
            assert_eq!(opcode, op::TEXT);
            assert_eq!((*i, *f, *cont), (immediate, final_bit, bit6));
            assert_eq!((*l, *t, *tt), (lun, itt, ttt));
            (true, true)
        }
        Request::DataOut {
            final_bit: f,
            lun: l,
            itt: t,
            ttt: tt,
            datasn,
            offset,
            ..
        } => {
            assert_eq!(opcode, op::DATA_OUT);
            assert_eq!((*f, *l, *t, *tt), (final_bit, lun, itt, ttt));
            assert_eq!((*datasn, *offset), (be32(h, 36), be32(h, 40)));
            (false, true)
        }
        Request::Logout {
            immediate: i,
            reason,
            itt: t,
            cid,
            ..
        } => {
            assert_eq!(opcode, op::LOGOUT);
            assert_eq!(
                (*i, *reason, *t, *cid),
                (immediate, h[1] & 0x7f, itt, be16(h, 20))
            );
            (true, true)
        }
        Request::Snack { itt: t } => {
            assert_eq!((opcode, *t), (op::SNACK, itt));
            (false, false)
        }
        Request::Unknown(o) => {
            assert_eq!(*o, opcode);
            assert!(!KNOWN_OPCODES.contains(o), "opcode {o:#04x} not parsed");
            (false, false)
        }
    };
    // A Login request is always immediate.
    let want = ordered.then_some((cmdsn, immediate || opcode == op::LOGIN));
    assert_eq!(r.cmdsn(), want, "cmdsn() of {r:?}");
    assert_eq!(
        r.expstatsn(),
        acked.then_some(expstatsn),
        "expstatsn() of {r:?}"
    );
    Some(opcode)
}

/// `build::command` and `build::data_out` with field values from `h`, an extended-CDB
/// and a bidirectional AHS from the first bytes of `ahs`, parsed back field for field.
fn builders(h: &[u8; BHS_LEN], ahs: &[u8]) {
    let (lun, itt) = (be64(h, 8), be32(h, 16));
    let (expected_len, cmdsn, expstatsn) = (be32(h, 20), be32(h, 24), be32(h, 28));
    let read = h[1] & 0x40 != 0;
    let write = h[1] & 0x20 != 0;
    let data_len = (be32(h, 4) & 0xff_ffff) as usize;
    // 0 to 20 bytes: the builder keeps the first 16 and zero-fills the rest.
    let cdb = &h[28..28 + usize::from(h[2]) % 21];
    let mut want_cdb = cdb[..cdb.len().min(16)].to_vec();
    want_cdb.resize(16, 0);
    let mut segments = Vec::new();
    let mut want_bidi = None;
    if let Some((&x, rest)) = ahs.split_first() {
        let extra = (usize::from(x) % 32).min(rest.len());
        // AHSLength counts the reserved byte and the CDB bytes after it.
        segments.extend_from_slice(&((extra + 1) as u16).to_be_bytes());
        segments.extend_from_slice(&[1, 0]);
        segments.extend_from_slice(&rest[..extra]);
        segments.resize(segments.len() + pdu::pad(4 + extra), 0);
        want_cdb.extend_from_slice(&rest[..extra]);
        if x & 0x80 != 0 {
            let len = itt ^ cmdsn;
            segments.extend_from_slice(&[0, 5, 2, 0]);
            segments.extend_from_slice(&len.to_be_bytes());
            want_bidi = Some(len);
        }
    }
    let built = build::command(
        itt,
        lun,
        cdb,
        read,
        write,
        expected_len,
        cmdsn,
        expstatsn,
        data_len,
    );
    let b = Bhs(built);
    assert_eq!(
        (b.opcode(), b.immediate(), b.ahs_len()),
        (op::SCSI_COMMAND, false, 0)
    );
    assert_eq!(b.data_len(), data_len);
    let want = ScsiCommand {
        immediate: false,
        final_bit: true,
        read,
        write,
        attr: 1,
        lun,
        itt,
        expected_len,
        cmdsn,
        expstatsn,
        cdb: want_cdb,
        bidi_read_len: want_bidi,
    };
    assert_eq!(
        Request::parse(&b, &segments),
        Ok(Request::Command(want)),
        "AHS {segments:02x?}"
    );

    let (ttt, datasn, offset) = (be32(h, 20), be32(h, 36), be32(h, 40));
    let final_bit = h[1] & 0x80 != 0;
    let built = build::data_out(itt, ttt, datasn, offset, final_bit, data_len);
    let b = Bhs(built);
    assert_eq!((b.opcode(), b.data_len()), (op::DATA_OUT, data_len));
    let want = Request::DataOut {
        final_bit,
        lun: 0,
        itt,
        ttt,
        expstatsn: 0,
        datasn,
        offset,
    };
    assert_eq!(Request::parse(&b, &[]), Ok(want.clone()));
    // Only a SCSI Command reads an AHS.
    assert_eq!(Request::parse(&b, ahs), Ok(want));
}

/// CRC32C of `data` split in three where its first and last bytes say.
fn crc_parts(data: &[u8]) {
    let whole = digest::crc32c(&[data]);
    let (first, last) = match data {
        [] => (0, 0),
        [a, .., b] => (usize::from(*a), usize::from(*b)),
        [a] => (usize::from(*a), 0),
    };
    let (x, rest) = data.split_at(first % (data.len() + 1));
    let (y, z) = rest.split_at(last % (rest.len() + 1));
    assert_eq!(
        digest::crc32c(&[x, y, z]),
        whole,
        "split {}/{}",
        x.len(),
        y.len()
    );
    assert_eq!(digest::crc32c(&[x, &[], y, z, &[]]), whole);
    assert!(digest::matches(&[x, y, z], digest::wire(whole)));
    if !data.is_empty() {
        // CRC32C catches every single-bit error.
        let mut flipped = data.to_vec();
        let at = first % data.len();
        flipped[at] ^= 1 << (last % 8);
        assert_ne!(digest::crc32c(&[&flipped]), whole);
        assert!(!digest::matches(&[&flipped], digest::wire(whole)));
    }
}

// ---- login ----

pub const INITIATOR: &str = "iqn.2024-01.org.example:init";
pub const OTHER: &str = "iqn.2024-01.org.example:other";
pub const STRANGER: &str = "iqn.2024-01.org.example:stranger";
/// Target 0: no CHAP, no ACL.
pub const OPEN: &str = "iqn.2024-01.org.raidd:open";
/// Target 1: CHAP as [`ALICE`], mutual CHAP as [`TARGET`], ACL of [`INITIATOR`], [`OTHER`].
pub const SECURE: &str = "iqn.2024-01.org.raidd:secure";
pub const ALICE: (&str, &str) = ("alice", "alicesecret1");
pub const TARGET: (&str, &str) = ("raidd", "targetsecret");
/// The portal's discovery CHAP user and secret.
pub const DISCO: (&str, &str) = ("disco", "discosecret1");
pub const ISID: [u8; 6] = [0x80, 0x12, 0x34, 0x56, 0x78, 0x9a];

fn secret((user, secret): (&str, &str)) -> Secret {
    Secret {
        user: user.into(),
        secret: secret.into(),
    }
}

/// The portal: [`OPEN`] and [`SECURE`], discovery CHAP as [`DISCO`]. `config` bit 0: no
/// digests, bit 1: no immediate data, bit 2: limits out of range (clamped by the crate).
pub fn portal(config: u8) -> Portal {
    let mut limits = TargetLimits::default();
    if config & 1 != 0 {
        limits.allow_digests = false;
    }
    if config & 2 != 0 {
        limits.allow_immediate_data = false;
    }
    if config & 4 != 0 {
        limits.max_recv_data_segment_length = u32::MAX;
        limits.max_burst_length = 0;
        limits.first_burst_length = u32::MAX;
        limits.max_outstanding_r2t = 0;
        limits.max_connections = 0;
    }
    Portal {
        targets: vec![
            TargetEntry {
                name: OPEN.into(),
                alias: Some("open disk".into()),
                chap: None,
                mutual: None,
                initiators: vec![],
            },
            TargetEntry {
                name: SECURE.into(),
                alias: None,
                chap: Some(secret(ALICE)),
                mutual: Some(secret(TARGET)),
                initiators: vec![INITIATOR.into(), OTHER.into()],
            },
        ],
        limits,
        address: "192.0.2.1:3260".into(),
        tpgt: 1,
        discovery_chap: Some(secret(DISCO)),
    }
}

/// Keys a text is built from: index `k % 64` of a key byte; beyond the list, a raw key.
pub const KEYS: &[&str] = &[
    "InitiatorName",
    "TargetName",
    "SessionType",
    "InitiatorAlias",
    "AuthMethod",
    "CHAP_A",
    "CHAP_I",
    "CHAP_C",
    "CHAP_N",
    "CHAP_R",
    "HeaderDigest",
    "DataDigest",
    "MaxRecvDataSegmentLength",
    "MaxBurstLength",
    "FirstBurstLength",
    "InitialR2T",
    "ImmediateData",
    "MaxOutstandingR2T",
    "MaxConnections",
    "DataPDUInOrder",
    "DataSequenceInOrder",
    "DefaultTime2Wait",
    "DefaultTime2Retain",
    "ErrorRecoveryLevel",
    "IFMarker",
    "OFMarker",
    "IFMarkInt",
    "OFMarkInt",
    "TargetAlias",
    "TargetAddress",
    "TargetPortalGroupTag",
    "SendTargets",
    "X-com.example.Thing",
    "X#org.example.ext",
];

/// The key byte [`Script`] writes for a raw key.
const RAW_KEY: u8 = 63;
/// Value bytes from here on: a raw value (0xf0..=0xfe) or a filler (0xff).
const RAW_VALUE: u8 = 0xf0;
const FILLER: u8 = 0xff;

/// Values a key's value byte picks from (below [`RAW_VALUE`], modulo the length).
/// `@` names a value computed from the login's challenge ([`resolve`]).
pub fn values(key: &str) -> &'static [&'static str] {
    match key {
        "InitiatorName" => &[
            INITIATOR,
            "IQN.2024-01.ORG.EXAMPLE:INIT",
            OTHER,
            STRANGER,
            "",
            "@long-name",
        ],
        "TargetName" => &[
            OPEN,
            SECURE,
            "IQN.2024-01.ORG.RAIDD:SECURE",
            "iqn.2024-01.org.raidd:none",
            "",
        ],
        "SessionType" => &["Normal", "Discovery", "discovery", ""],
        "InitiatorAlias" => &["host", ""],
        "AuthMethod" => &["None", "CHAP", "CHAP,None", "None,CHAP", "SRP,KRB5", ""],
        "CHAP_A" => &["5", "7,5", "0x5", "7", ""],
        "CHAP_I" => &["0", "1", "255", "256", "0x10", "x"],
        "CHAP_C" => &[
            "0x0102030405060708",
            "0bAQIDBA==",
            "@ours",
            "@long",
            "0x",
            "0xzz",
        ],
        "CHAP_N" => &["alice", "disco", "raidd", "bob", ""],
        "CHAP_R" => &[
            "@alice",
            "@ALICE",
            "@alice64",
            "@alice-id",
            "@disco",
            "@raidd",
            "0x00",
            "0b",
        ],
        "HeaderDigest" | "DataDigest" => {
            &["None", "CRC32C", "None,CRC32C", "CRC32C,None", "MD5", ""]
        }
        "MaxRecvDataSegmentLength" => &[
            "262144", "8192", "512", "511", "16777215", "16777216", "0x40000", "+512", "",
        ],
        "MaxBurstLength" | "FirstBurstLength" => &[
            "262144", "65536", "4096", "512", "511", "16777216", "0x10000",
        ],
        "InitialR2T"
        | "ImmediateData"
        | "DataPDUInOrder"
        | "DataSequenceInOrder"
        | "IFMarker"
        | "OFMarker" => &["Yes", "No", "yes", ""],
        "MaxOutstandingR2T" | "MaxConnections" => &["1", "2", "0", "65535", "65536"],
        "DefaultTime2Wait" | "DefaultTime2Retain" => &["0", "2", "20", "3600", "3601"],
        "ErrorRecoveryLevel" => &["0", "1", "2", "3"],
        "IFMarkInt" | "OFMarkInt" => &["1~65535", "2048"],
        "SendTargets" => &["All", "", OPEN, SECURE, "iqn.2024-01.org.raidd:none"],
        _ => &["1", "x", ""],
    }
}

/// `0b` base64 (RFC 4648, padded), as an initiator may send binary values.
fn base64(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::from("0b");
    for c in bytes.chunks(3) {
        let v = (u32::from(c[0]) << 16)
            | (u32::from(c.get(1).copied().unwrap_or(0)) << 8)
            | u32::from(c.get(2).copied().unwrap_or(0));
        for i in 0..4 {
            if i <= c.len() {
                s.push(char::from(DIGITS[(v >> (18 - 6 * i)) as usize & 63]));
            } else {
                s.push('=');
            }
        }
    }
    s
}

/// A value from [`values`], with the computed ones filled in for this login.
fn resolve(value: &str, challenge: &[u8; 16], id: u8) -> String {
    let r = |id: u8, (_, secret): (&str, &str)| chap::response(id, secret.as_bytes(), challenge);
    match value {
        "@alice" => chap::encode_hex(&r(id, ALICE)),
        "@ALICE" => format!("0X{}", chap::encode_hex(&r(id, ALICE))[2..].to_uppercase()),
        "@alice64" => base64(&r(id, ALICE)),
        "@alice-id" => chap::encode_hex(&r(id.wrapping_add(1), ALICE)),
        "@disco" => chap::encode_hex(&r(id, DISCO)),
        "@raidd" => chap::encode_hex(&r(id, TARGET)),
        "@ours" => chap::encode_hex(challenge),
        "@long" => chap::encode_hex(&[0xab; chap::MAX_CHALLENGE + 1]),
        "@long-name" => format!("{INITIATOR}.{}", "x".repeat(login::MAX_NAME_LEN)),
        v => v.to_owned(),
    }
}

/// Reads the input; missing bytes read as zero.
struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    fn next(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
    fn byte(&mut self) -> u8 {
        self.next().unwrap_or(0)
    }
    fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.byte(), self.byte()])
    }
    fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut a = [0; N];
        for b in &mut a {
            *b = self.byte();
        }
        a
    }
    fn take(&mut self, n: usize) -> &'a [u8] {
        let (a, b) = self.0.split_at(n.min(self.0.len()));
        self.0 = b;
        a
    }
}

/// A data segment: `mode` bits 0-1 say how it is given. 1: a two-byte length and the
/// bytes. 2: unknown keys, as many as a count byte says: below 0xf0, modulo 16; from
/// 0xf0, 240 to 480 (enough for an answer over the 8192-byte login bound). 0 and 3: a count byte
/// (modulo 32) of pairs, each a key byte ([`KEYS`], or [`RAW_KEY`] and up: a length byte
/// and the key) and a value byte ([`values`], or [`RAW_VALUE`] and up: a length byte and
/// the value; [`FILLER`]: a two-byte length modulo 10000 and the byte to repeat).
fn data_segment(input: &mut Input<'_>, mode: u8, challenge: &[u8; 16], id: u8) -> Vec<u8> {
    let mut out = Vec::new();
    match mode & 3 {
        1 => {
            let len = usize::from(input.u16());
            out.extend_from_slice(input.take(len));
        }
        2 => {
            let c = input.byte();
            let n = if c >= 0xf0 {
                240 + u16::from(c & 15) * 16
            } else {
                u16::from(c % 16)
            };
            for i in 0..n {
                text::encode_pair(&format!("X-org.example.k{i}"), "v", &mut out);
            }
        }
        _ => {
            for _ in 0..input.byte() % 32 {
                let k = usize::from(input.byte() % 64);
                let list = match KEYS.get(k) {
                    Some(key) => {
                        out.extend_from_slice(key.as_bytes());
                        values(key)
                    }
                    None => {
                        let len = usize::from(input.byte());
                        out.extend_from_slice(input.take(len));
                        values("")
                    }
                };
                out.push(b'=');
                match input.byte() {
                    v @ ..RAW_VALUE => {
                        let value = list[usize::from(v) % list.len()];
                        out.extend_from_slice(resolve(value, challenge, id).as_bytes());
                    }
                    FILLER => {
                        let len = usize::from(input.u16()) % 10_000;
                        let fill = input.byte();
                        out.resize(out.len() + len, fill);
                    }
                    _ => {
                        let len = usize::from(input.byte());
                        out.extend_from_slice(input.take(len));
                    }
                }
                out.push(0);
            }
        }
    }
    out
}

/// How a login run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    /// The input ran out before the login ended.
    Starved,
    /// Closed with this status.
    Closed(u16),
    /// Full feature phase with this target (`None`: discovery).
    Full(Option<usize>),
    /// Text mode: whether `text_answer` accepted the text.
    Text(bool),
}

fn value<'a>(pairs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

fn allowed(entry: &TargetEntry, initiator: &str) -> bool {
    entry.initiators.is_empty()
        || entry
            .initiators
            .iter()
            .any(|i| i.eq_ignore_ascii_case(initiator))
}

/// Drives a login with requests from `data`.
///
/// Byte 0: bit 7 picks text mode (below); bits 0-2 the portal's limits ([`portal`]).
/// Then 16 challenge bytes, the CHAP identifier and two TSIH bytes (0 reads as 1: the
/// shell never passes 0). Then per request: a flags byte laid out as on the wire (T, C,
/// CSG, NSG), a mode byte (bit 7: a byte follows choosing header fields to change, bit 0
/// version max and min, 1 ISID, 2 TSIH, 3 ITT, 4 CID, 5 CmdSN and ExpStatSN; changes
/// last for later requests), and a data segment ([`data_segment`] with the mode byte).
/// After the full feature phase is reached, the rest is a mode byte and a data segment
/// for `text_answer` with the negotiated parameters.
///
/// Text mode: a byte choosing the session (bit 0 discovery, bits 1-2 the initiator name,
/// bits 3-4 the session's target, possibly out of range; an initiator the target's ACL
/// refuses is replaced by one it allows), a mode byte and a data segment for
/// `text_answer`.
pub fn login(data: &[u8]) -> Outcome {
    let mut input = Input(data);
    let Some(config) = input.next() else {
        return Outcome::Starved;
    };
    let portal = portal(config);
    if config & 0x80 != 0 {
        let session = input.byte();
        let initiators = [INITIATOR, STRANGER, OTHER, ""];
        let mut params = Params {
            discovery: session & 1 != 0,
            initiator_name: initiators[usize::from(session >> 1) & 3].into(),
            ..Params::default()
        };
        let target = [None, Some(0), Some(1), Some(5)][usize::from(session >> 3) & 3];
        // A session exists only with a target its initiator may use.
        if let Some(entry) = target.and_then(|t| portal.targets.get(t)) {
            if !allowed(entry, &params.initiator_name) {
                params.initiator_name = INITIATOR.into();
            }
        }
        let mode = input.byte();
        let text = data_segment(&mut input, mode, &[0; 16], 0);
        return Outcome::Text(text_phase(&portal, &mut params, target, &text));
    }
    let challenge: [u8; 16] = input.array();
    let chap_id = input.byte();
    let tsih = input.u16().max(1);
    let mut l = Login::new(&portal, challenge, chap_id, tsih);
    let mut req = LoginRequest {
        isid: ISID,
        itt: 1,
        cid: 1,
        ..LoginRequest::default()
    };
    // The text of the exchange under way (continuations included), and whether a correct
    // CHAP answer for the CHAP target's user, or the discovery user, was accepted.
    let mut exchange = Vec::new();
    let mut proved_alice = false;
    let mut proved_disco = false;
    loop {
        let Some(flags) = input.next() else {
            return Outcome::Starved;
        };
        req.transit = flags & 0x80 != 0;
        req.cont = flags & 0x40 != 0;
        req.csg = (flags >> 2) & 3;
        req.nsg = flags & 3;
        let mode = input.byte();
        if mode & 0x80 != 0 {
            let which = input.byte();
            if which & 1 != 0 {
                req.version_max = input.byte();
                req.version_min = input.byte();
            }
            if which & 2 != 0 {
                req.isid = input.array();
            }
            if which & 4 != 0 {
                req.tsih = input.u16();
            }
            if which & 8 != 0 {
                req.itt = u32::from_be_bytes(input.array());
            }
            if which & 16 != 0 {
                req.cid = input.u16();
            }
            if which & 32 != 0 {
                req.cmdsn = u32::from_be_bytes(input.array());
                req.expstatsn = u32::from_be_bytes(input.array());
            }
        }
        req.data = data_segment(&mut input, mode, &challenge, chap_id);
        exchange.extend_from_slice(&req.data);

        let (rsp, step) = l.step(&portal, &req);
        let status = u16::from_be_bytes([rsp.status_class, rsp.status_detail]);
        assert!(
            rsp.data.len() <= login::MAX_LOGIN_RESPONSE,
            "login response of {} bytes",
            rsp.data.len()
        );
        assert!(!rsp.cont, "login responses are never split");
        if rsp.tsih != 0 {
            assert!(rsp.transit && rsp.nsg == 3, "TSIH before the end: {rsp:?}");
        }
        if rsp.transit {
            assert!(req.transit, "T in a response to a request without T");
            assert!(
                (rsp.csg, rsp.nsg) == (0, 1) || (rsp.csg, rsp.nsg) == (1, 3),
                "{rsp:?}"
            );
        } else {
            assert_eq!(rsp.nsg, 0);
        }
        if step == Step::Close {
            assert_ne!(rsp.status_class, 0, "Close with status 0");
            assert!(
                rsp.data.is_empty() && !rsp.transit && rsp.tsih == 0,
                "{rsp:?}"
            );
            refuses_more(&mut l, &portal, &req);
            return Outcome::Closed(status);
        }
        assert_eq!(status, 0, "{step:?} with status {status:#06x}");
        assert!(rsp.csg <= 1);
        if req.cont {
            assert_eq!(
                rsp.data,
                Vec::<u8>::new(),
                "continuation answered with text"
            );
            assert!(!rsp.transit && step == Step::Continue);
            continue;
        }
        let answer = text::parse(&rsp.data).expect("login response does not parse");
        // CHAP keys are accepted in the security stage only: look for them there.
        let sent = if req.csg == 0 {
            text::parse(&exchange).expect("the login accepted text that does not parse")
        } else {
            Vec::new()
        };
        exchange.clear();
        check_chap(&sent, &answer, &challenge, chap_id);
        let proves = |(user, secret): (&str, &str)| {
            value(&sent, "CHAP_N") == Some(user)
                && value(&sent, "CHAP_R").map(chap::decode_binary)
                    == Some(Ok(
                        chap::response(chap_id, secret.as_bytes(), &challenge).to_vec()
                    ))
        };
        proved_alice |= proves(ALICE);
        proved_disco |= proves(DISCO);
        let Step::FullFeature(mut n) = step else {
            assert!(!(rsp.transit && rsp.nsg == 3));
            continue;
        };
        assert!(rsp.transit && rsp.nsg == 3 && rsp.csg == 1, "{rsp:?}");
        assert!(req.transit && req.nsg == 3 && req.csg == 1, "{req:?}");
        assert_eq!((rsp.tsih, n.tsih), (tsih, tsih));
        assert_eq!((n.isid, n.cid), (req.isid, req.cid));
        match n.target {
            Some(t) => {
                let entry = &portal.targets[t];
                assert!(!n.params.discovery);
                assert_eq!(n.params.target_name.as_deref(), Some(entry.name.as_str()));
                if entry.chap.is_some() {
                    assert!(proved_alice, "into {} without its CHAP", entry.name);
                }
                assert!(
                    allowed(entry, &n.params.initiator_name),
                    "{} let in past the ACL of {}",
                    n.params.initiator_name,
                    entry.name
                );
            }
            None => {
                assert!(n.params.discovery);
                assert!(proved_disco, "discovery session without its CHAP");
            }
        }
        let p = &n.params;
        assert!(!p.initiator_name.is_empty() && p.initiator_name.len() <= login::MAX_NAME_LEN);
        assert!(p.first_burst_length <= p.max_burst_length, "{p:?}");
        for len in [p.initiator_mrdsl, p.target_mrdsl, p.max_burst_length] {
            assert!((MIN_DATA_LEN..=MAX_DATA_LEN).contains(&len), "{p:?}");
        }
        assert_eq!(p.error_recovery_level, 0);
        assert!(p.initial_r2t && p.data_pdu_in_order && p.data_sequence_in_order);
        if !portal.limits.allow_digests {
            assert!(!p.header_digest && !p.data_digest);
        }
        refuses_more(&mut l, &portal, &req);
        let target = n.target;
        let mode = input.byte();
        let text = data_segment(&mut input, mode, &challenge, chap_id);
        text_phase(&portal, &mut n.params, target, &text);
        return Outcome::Full(target);
    }
}

/// The driver stops at Close and FullFeature; this one further request checks that the
/// machine would refuse anything more.
fn refuses_more(l: &mut Login, portal: &Portal, req: &LoginRequest) {
    let (rsp, step) = l.step(portal, req);
    assert_eq!(step, Step::Close, "a request after the login ended");
    assert_eq!(
        u16::from_be_bytes([rsp.status_class, rsp.status_detail]),
        login::INITIATOR_ERROR
    );
    assert_eq!(
        rsp,
        LoginResponse {
            csg: req.csg & 3,
            status_class: rsp.status_class,
            status_detail: rsp.status_detail,
            ..LoginResponse::default()
        }
    );
}

/// CHAP keys in a response: our challenge as given to `Login::new`, and a mutual answer
/// computed with the target's secret from the initiator's CHAP_I and CHAP_C.
fn check_chap(
    sent: &[(String, String)],
    answer: &[(String, String)],
    challenge: &[u8; 16],
    id: u8,
) {
    if let Some(c) = value(answer, "CHAP_C") {
        assert_eq!(c, chap::encode_hex(challenge));
        assert_eq!(value(answer, "CHAP_I"), Some(id.to_string().as_str()));
        assert_eq!(value(answer, "CHAP_A"), Some("5"));
    }
    if let Some(r) = value(answer, "CHAP_R") {
        assert_eq!(value(answer, "CHAP_N"), Some(TARGET.0));
        let their_id = value(sent, "CHAP_I").map(chap::parse_id);
        let their_challenge = value(sent, "CHAP_C").map(chap::decode_binary);
        let (Some(Ok(i)), Some(Ok(c))) = (their_id, their_challenge) else {
            panic!("mutual CHAP answer without a valid CHAP_I and CHAP_C: {sent:?}");
        };
        assert_ne!(c, challenge, "answered a reflected challenge");
        let want = chap::response(i, TARGET.1.as_bytes(), &c);
        assert_eq!(r, chap::encode_hex(&want));
    }
}

/// `text_answer` on `data`: fails exactly when the text does not parse (then changing
/// nothing), answers well-formed text, lists only the portal's targets that the
/// initiator may see with the portal's address, and refuses SendTargets=All outside
/// discovery. Returns whether the text was answered.
pub fn text_phase(
    portal: &Portal,
    params: &mut Params,
    target: Option<usize>,
    data: &[u8],
) -> bool {
    let before = params.clone();
    let parsed = text::parse(data);
    let Ok(out) = login::text_answer(portal, params, target, data) else {
        assert!(parsed.is_err(), "text_answer refused a text that parses");
        assert_eq!(*params, before);
        return false;
    };
    let pairs = parsed.expect("text_answer accepted a text that does not parse");
    assert!(out.is_empty() || out.last() == Some(&0));
    let address = format!("{},{}", portal.address, portal.tpgt);
    for item in out.split(|&b| b == 0).filter(|i| !i.is_empty()) {
        let item = std::str::from_utf8(item).expect("answer not UTF-8");
        let (k, v) = item.split_once('=').expect("answer item without '='");
        assert!(text::valid_key(k.as_bytes()), "answer key {k:?}");
        // Sent by the initiator, these keys are answered Reject.
        let refused = v == REJECT && value(&pairs, k).is_some();
        match k {
            "TargetName" if !refused => {
                let entry = portal.targets.iter().find(|t| t.name == v);
                let entry = entry.unwrap_or_else(|| panic!("lists {v:?}, not the portal's"));
                assert!(
                    allowed(entry, &params.initiator_name),
                    "lists {v} past its ACL"
                );
            }
            "TargetAddress" if !refused => assert_eq!(v, address),
            _ => {}
        }
    }
    if !params.discovery && value(&pairs, "SendTargets") == Some("All") {
        assert!(out.windows(19).any(|w| w == b"SendTargets=Reject\0"));
    }
    let mrdsl = MIN_DATA_LEN..=MAX_DATA_LEN;
    assert!(
        mrdsl.contains(&params.initiator_mrdsl) || params.initiator_mrdsl == before.initiator_mrdsl
    );
    assert_eq!(params.initiator_name, before.initiator_name);
    assert_eq!(params.discovery, before.discovery);
    true
}

/// Writes inputs for [`login`], for tests that build valid logins to mutate.
#[derive(Debug, Clone)]
pub struct Script {
    pub bytes: Vec<u8>,
}

/// A flags byte as on the wire.
pub fn flags(transit: bool, cont: bool, csg: u8, nsg: u8) -> u8 {
    (u8::from(transit) << 7) | (u8::from(cont) << 6) | ((csg & 3) << 2) | (nsg & 3)
}

impl Script {
    /// A login; `config` as [`login`]'s byte 0 (bit 7 cleared).
    pub fn login(config: u8, challenge: [u8; 16], chap_id: u8, tsih: u16) -> Script {
        let mut bytes = vec![config & 0x7f];
        bytes.extend_from_slice(&challenge);
        bytes.push(chap_id);
        bytes.extend_from_slice(&tsih.to_be_bytes());
        Script { bytes }
    }

    /// Text mode with the session byte `session`, and the pairs.
    pub fn text_mode(config: u8, session: u8, pairs: &[(&str, &str)]) -> Script {
        let mut s = Script {
            bytes: vec![config | 0x80, session],
        };
        s.pairs(pairs);
        s
    }

    fn pairs(&mut self, pairs: &[(&str, &str)]) {
        assert!(pairs.len() < 32);
        self.bytes.extend_from_slice(&[0, pairs.len() as u8]);
        for (k, v) in pairs {
            let list = match KEYS.iter().position(|x| x == k) {
                Some(i) => {
                    self.bytes.push(i as u8);
                    values(k)
                }
                None => {
                    self.bytes.extend_from_slice(&[RAW_KEY, k.len() as u8]);
                    self.bytes.extend_from_slice(k.as_bytes());
                    values("")
                }
            };
            match list.iter().position(|x| x == v) {
                Some(i) => self.bytes.push(i as u8),
                None => {
                    assert!(v.len() < 256, "value too long for a script");
                    self.bytes.extend_from_slice(&[RAW_VALUE, v.len() as u8]);
                    self.bytes.extend_from_slice(v.as_bytes());
                }
            }
        }
    }

    /// A request with these flags and pairs (values from [`values`] by name, `@` ones
    /// computed, or raw).
    pub fn request(&mut self, flags: u8, pairs: &[(&str, &str)]) -> &mut Script {
        self.bytes.push(flags);
        self.pairs(pairs);
        self
    }

    /// A request with these flags and data bytes.
    pub fn raw(&mut self, flags: u8, data: &[u8]) -> &mut Script {
        self.bytes.extend_from_slice(&[flags, 1]);
        self.bytes
            .extend_from_slice(&(data.len() as u16).to_be_bytes());
        self.bytes.extend_from_slice(data);
        self
    }

    /// A request of unknown keys, as many as [`data_segment`] makes of `count`.
    pub fn unknown_keys(&mut self, flags: u8, count: u8) -> &mut Script {
        self.bytes.extend_from_slice(&[flags, 2, count]);
        self
    }

    /// The full-feature Text request after the login.
    pub fn text(&mut self, pairs: &[(&str, &str)]) -> &mut Script {
        self.pairs(pairs);
        self
    }

    /// The bytes [`login`] builds for `pairs` in a login with this challenge and id.
    pub fn text_of(pairs: &[(&str, &str)], challenge: &[u8; 16], id: u8) -> Vec<u8> {
        let mut out = Vec::new();
        for (k, v) in pairs {
            text::encode_pair(k, &resolve(v, challenge, id), &mut out);
        }
        out
    }
}
