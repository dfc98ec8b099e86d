//! CHAP authentication (RFC 1994 as used by RFC 7143 section 12.1.3), MD5 only.
//!
//! The target challenges with `CHAP_A=5`, `CHAP_I=<id>`, `CHAP_C=<challenge>`; the
//! initiator answers `CHAP_N=<user>`, `CHAP_R=MD5(id || secret || challenge)`, and for
//! mutual CHAP adds its own `CHAP_I`/`CHAP_C`, which the target answers with its
//! `CHAP_N`/`CHAP_R`. Binary values are hex (`0x...`) or base64 (`0b...`); we send hex,
//! which every initiator accepts (libiscsi accepts nothing else).

use md5::{Digest, Md5};

/// The CHAP algorithm identifier of MD5 (the only one we offer).
pub const CHAP_MD5: u8 = 5;
/// Shortest challenge accepted from an initiator, in bytes.
pub const MIN_CHALLENGE: usize = 1;
/// Longest challenge accepted from an initiator, in bytes.
pub const MAX_CHALLENGE: usize = 1024;
/// Length of an MD5 CHAP response, in bytes.
pub const RESPONSE_LEN: usize = 16;

/// A CHAP user name and secret.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret {
    /// The CHAP name (`CHAP_N`).
    pub user: String,
    /// The shared secret.
    pub secret: String,
}

impl std::fmt::Debug for Secret {
    // Secrets must not end up in logs through a stray {:?}.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secret")
            .field("user", &self.user)
            .field("secret", &"<redacted>")
            .finish()
    }
}

/// Why a CHAP exchange failed. The login answers every one of these with status 0x0201
/// (authentication failure).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChapError {
    /// A binary value is not valid `0x` hex or `0b` base64.
    #[error("invalid binary value encoding")]
    BadEncoding,
    /// `CHAP_I` is not a number in 0..=255.
    #[error("invalid CHAP identifier")]
    BadId,
    /// The initiator's CHAP_A list does not include MD5.
    #[error("no supported CHAP algorithm offered")]
    NoAlgorithm,
    /// `CHAP_N` or `CHAP_R` is missing.
    #[error("CHAP_N and CHAP_R are both required")]
    Incomplete,
    /// `CHAP_N` is not the configured user.
    #[error("unknown CHAP name")]
    WrongUser,
    /// `CHAP_R` does not match.
    #[error("CHAP response does not match")]
    WrongResponse,
    /// Only one of `CHAP_I` and `CHAP_C` was sent.
    #[error("CHAP_I and CHAP_C must come together")]
    HalfMutual,
    /// The initiator asked for mutual CHAP but the target has no secret for it.
    #[error("mutual CHAP requested but not configured")]
    MutualNotConfigured,
    /// The mutual secret equals the initiator's secret (RFC 7143 12.1.3 forbids it).
    #[error("mutual CHAP secret equals the initiator's secret")]
    SameSecret,
    /// The initiator's challenge is shorter than 1 or longer than 1024 bytes.
    #[error("challenge of {0} bytes out of bounds")]
    ChallengeLength(usize),
    /// The initiator's challenge equals ours (a reflection attack).
    #[error("initiator reflected our challenge")]
    Reflection,
}

/// The MD5 CHAP response: MD5(id || secret || challenge).
pub fn response(id: u8, secret: &[u8], challenge: &[u8]) -> [u8; RESPONSE_LEN] {
    let mut h = Md5::new();
    h.update([id]);
    h.update(secret);
    h.update(challenge);
    h.finalize().into()
}

/// Encodes bytes as an RFC 7143 hex constant, `0x` then lowercase digits.
pub fn encode_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(2 + 2 * bytes.len());
    s.push_str("0x");
    for &b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    s
}

fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

fn base64_digit(c: u8) -> Option<u8> {
    match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    }
}

/// Decodes an RFC 7143 binary value: `0x`/`0X` hex (an odd digit count implies a leading
/// zero nibble, per RFC 7143 6.1) or `0b`/`0B` base64 (RFC 4648, padding optional). The
/// output is at most half the input's length, so bounded by the text value bound.
pub fn decode_binary(value: &str) -> Result<Vec<u8>, ChapError> {
    let bytes = value.as_bytes();
    if bytes.len() < 3 || bytes[0] != b'0' {
        return Err(ChapError::BadEncoding);
    }
    let body = &bytes[2..];
    match bytes[1] {
        b'x' | b'X' => {
            let mut out = Vec::with_capacity(body.len().div_ceil(2));
            let (head, rest) = if body.len() % 2 == 1 {
                body.split_at(1)
            } else {
                body.split_at(0)
            };
            if let Some(&c) = head.first() {
                out.push(hex_digit(c).ok_or(ChapError::BadEncoding)?);
            }
            for pair in rest.chunks_exact(2) {
                let hi = hex_digit(pair[0]).ok_or(ChapError::BadEncoding)?;
                let lo = hex_digit(pair[1]).ok_or(ChapError::BadEncoding)?;
                out.push(hi << 4 | lo);
            }
            Ok(out)
        }
        b'b' | b'B' => {
            let data = body.strip_suffix(b"==").or_else(|| body.strip_suffix(b"="));
            let padded = data.is_some();
            let data = data.unwrap_or(body);
            // Padding, when present, must complete the last quantum; a lone trailing
            // sextet never encodes a whole byte.
            if (padded && !body.len().is_multiple_of(4)) || data.len() % 4 == 1 || data.is_empty() {
                return Err(ChapError::BadEncoding);
            }
            let mut out = Vec::with_capacity(data.len() / 4 * 3 + 2);
            for chunk in data.chunks(4) {
                let mut acc: u32 = 0;
                for &c in chunk {
                    acc = acc << 6 | u32::from(base64_digit(c).ok_or(ChapError::BadEncoding)?);
                }
                // chunk.len() is 2, 3 or 4 here: shift to 24 bits and take whole bytes.
                acc <<= 6 * (4 - chunk.len() as u32);
                let [_, b0, b1, b2] = acc.to_be_bytes();
                out.extend_from_slice(&[b0, b1, b2][..chunk.len() - 1]);
            }
            Ok(out)
        }
        _ => Err(ChapError::BadEncoding),
    }
}

/// Parses `CHAP_I`: a number 0..=255, decimal or `0x` hex.
pub fn parse_id(value: &str) -> Result<u8, ChapError> {
    crate::params::parse_number(value)
        .and_then(|v| u8::try_from(v).ok())
        .ok_or(ChapError::BadId)
}

/// Whether a `CHAP_A` list offers MD5.
pub fn offers_md5(list: &str) -> bool {
    list.split(',')
        .any(|a| crate::params::parse_number(a) == Some(u64::from(CHAP_MD5)))
}

/// Compares without an early exit, so the time taken does not reveal how many leading
/// bytes of a guessed response were right.
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The initiator's answer to our challenge, as received.
#[derive(Debug, Clone, Copy, Default)]
pub struct Answer<'a> {
    /// `CHAP_N`.
    pub name: Option<&'a str>,
    /// `CHAP_R`.
    pub response: Option<&'a str>,
    /// `CHAP_I` (mutual CHAP).
    pub id: Option<&'a str>,
    /// `CHAP_C` (mutual CHAP).
    pub challenge: Option<&'a str>,
}

/// Checks the initiator's CHAP answer to our challenge (`id`, `challenge`) against
/// `secret`, and answers a mutual challenge with `mutual`. Returns the pairs to send
/// (`CHAP_N`, `CHAP_R` for mutual CHAP; none otherwise).
pub fn verify(
    id: u8,
    challenge: &[u8],
    secret: &Secret,
    mutual: Option<&Secret>,
    answer: &Answer<'_>,
) -> Result<Vec<(String, String)>, ChapError> {
    let (Some(name), Some(resp)) = (answer.name, answer.response) else {
        return Err(ChapError::Incomplete);
    };
    // Check the mutual request's shape before the response, so that a malformed request
    // is reported as such; the response is still checked before anything is answered.
    let mutual_challenge = match (answer.id, answer.challenge) {
        (None, None) => None,
        (Some(i), Some(c)) => Some((parse_id(i)?, decode_binary(c)?)),
        _ => return Err(ChapError::HalfMutual),
    };
    if name != secret.user {
        return Err(ChapError::WrongUser);
    }
    let got = decode_binary(resp)?;
    let want = response(id, secret.secret.as_bytes(), challenge);
    if !same_bytes(&got, &want) {
        return Err(ChapError::WrongResponse);
    }
    let Some((their_id, their_challenge)) = mutual_challenge else {
        return Ok(Vec::new());
    };
    let mutual = mutual.ok_or(ChapError::MutualNotConfigured)?;
    if mutual.secret == secret.secret {
        return Err(ChapError::SameSecret);
    }
    if !(MIN_CHALLENGE..=MAX_CHALLENGE).contains(&their_challenge.len()) {
        return Err(ChapError::ChallengeLength(their_challenge.len()));
    }
    if their_challenge == challenge {
        return Err(ChapError::Reflection);
    }
    let ours = response(their_id, mutual.secret.as_bytes(), &their_challenge);
    Ok(vec![
        ("CHAP_N".to_owned(), mutual.user.clone()),
        ("CHAP_R".to_owned(), encode_hex(&ours)),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(user: &str, secret: &str) -> Secret {
        Secret {
            user: user.into(),
            secret: secret.into(),
        }
    }

    /// MD5 of id || secret || challenge, concatenated by hand so the test does not
    /// share `response`'s incremental hashing.
    fn md5_of(id: u8, secret: &str, challenge: &[u8]) -> [u8; 16] {
        let mut buf = vec![id];
        buf.extend_from_slice(secret.as_bytes());
        buf.extend_from_slice(challenge);
        Md5::digest(&buf).into()
    }

    #[test]
    fn md5_known_vectors() {
        // RFC 1321 test suite: MD5("abc").
        assert_eq!(
            encode_hex(&Md5::digest(b"abc")),
            "0x900150983cd24fb0d6963f7d28e17f72"
        );
        // id 'a' (0x61), secret "b", challenge "c" is MD5("abc") again.
        assert_eq!(
            encode_hex(&response(0x61, b"b", b"c")),
            "0x900150983cd24fb0d6963f7d28e17f72"
        );
        assert_eq!(
            response(7, b"secretsecret", &[1, 2, 3]),
            md5_of(7, "secretsecret", &[1, 2, 3])
        );
    }

    #[test]
    fn hex_decoding() {
        assert_eq!(decode_binary("0x00ff10"), Ok(vec![0, 0xff, 0x10]));
        assert_eq!(decode_binary("0XABcd"), Ok(vec![0xab, 0xcd]));
        // Odd digit count: implicit leading zero nibble.
        assert_eq!(decode_binary("0xabc"), Ok(vec![0x0a, 0xbc]));
        assert_eq!(decode_binary("0x"), Err(ChapError::BadEncoding));
        assert_eq!(decode_binary("0xzz"), Err(ChapError::BadEncoding));
        assert_eq!(decode_binary("abcd"), Err(ChapError::BadEncoding));
        assert_eq!(decode_binary("1xab"), Err(ChapError::BadEncoding));
    }

    #[test]
    fn base64_decoding() {
        assert_eq!(decode_binary("0bAAEC"), Ok(vec![0, 1, 2]));
        assert_eq!(decode_binary("0BTWFu"), Ok(b"Man".to_vec()));
        assert_eq!(decode_binary("0bTWE="), Ok(b"Ma".to_vec()));
        assert_eq!(decode_binary("0bTQ=="), Ok(b"M".to_vec()));
        assert_eq!(decode_binary("0bTWE"), Ok(b"Ma".to_vec()));
        assert_eq!(decode_binary("0bTQ"), Ok(b"M".to_vec()));
        assert_eq!(decode_binary("0bT"), Err(ChapError::BadEncoding));
        assert_eq!(decode_binary("0bTW=="), Ok(vec![0x4d]));
        assert_eq!(decode_binary("0bTWE=="), Err(ChapError::BadEncoding));
        assert_eq!(decode_binary("0bT*=="), Err(ChapError::BadEncoding));
        assert_eq!(decode_binary("0b=="), Err(ChapError::BadEncoding));
    }

    #[test]
    fn ids_and_algorithms() {
        assert_eq!(parse_id("0"), Ok(0));
        assert_eq!(parse_id("255"), Ok(255));
        assert_eq!(parse_id("0x1f"), Ok(31));
        assert_eq!(parse_id("256"), Err(ChapError::BadId));
        assert_eq!(parse_id("-1"), Err(ChapError::BadId));
        assert!(offers_md5("5"));
        assert!(offers_md5("7,5"));
        assert!(offers_md5("0x5"));
        assert!(!offers_md5("7,6"));
        assert!(!offers_md5("55"));
    }

    #[test]
    fn secret_debug_is_redacted() {
        let s = format!("{:?}", secret("alice", "hunter2hunter2"));
        assert!(s.contains("alice") && !s.contains("hunter2"));
    }

    const CH: [u8; 16] = *b"0123456789abcdef";

    fn answer_for(id: u8, s: &Secret) -> (String, String) {
        (s.user.clone(), encode_hex(&md5_of(id, &s.secret, &CH)))
    }

    #[test]
    fn one_way_chap() {
        let s = secret("alice", "alicesecret1");
        let (n, r) = answer_for(9, &s);
        let a = Answer {
            name: Some(&n),
            response: Some(&r),
            ..Answer::default()
        };
        assert_eq!(verify(9, &CH, &s, None, &a), Ok(vec![]));
        // Wrong identifier, wrong user, wrong secret.
        assert_eq!(verify(10, &CH, &s, None, &a), Err(ChapError::WrongResponse));
        let bob = Answer {
            name: Some("bob"),
            ..a
        };
        assert_eq!(verify(9, &CH, &s, None, &bob), Err(ChapError::WrongUser));
        let wrong = encode_hex(&md5_of(9, "guess", &CH));
        let guess = Answer {
            response: Some(&wrong),
            ..a
        };
        assert_eq!(
            verify(9, &CH, &s, None, &guess),
            Err(ChapError::WrongResponse)
        );
        let no_r = Answer {
            response: None,
            ..a
        };
        assert_eq!(verify(9, &CH, &s, None, &no_r), Err(ChapError::Incomplete));
    }

    #[test]
    fn base64_response_accepted() {
        let s = secret("alice", "alicesecret1");
        let digest = md5_of(3, &s.secret, &CH);
        // Standard base64 of the 16-byte digest, encoded by hand.
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut b64 = String::from("0b");
        for chunk in digest.chunks(3) {
            let mut n = 0u32;
            for (i, &b) in chunk.iter().enumerate() {
                n |= u32::from(b) << (16 - 8 * i);
            }
            for i in 0..4 {
                if i <= chunk.len() {
                    b64.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
                } else {
                    b64.push('=');
                }
            }
        }
        let a = Answer {
            name: Some("alice"),
            response: Some(&b64),
            ..Answer::default()
        };
        assert_eq!(verify(3, &CH, &s, None, &a), Ok(vec![]));
    }

    #[test]
    fn mutual_chap() {
        let s = secret("alice", "alicesecret1");
        let t = secret("iqn.target", "targetsecret");
        let (n, r) = answer_for(1, &s);
        let their_c = [0x55u8; 20];
        let c_hex = encode_hex(&their_c);
        let a = Answer {
            name: Some(&n),
            response: Some(&r),
            id: Some("77"),
            challenge: Some(&c_hex),
        };
        let out = verify(1, &CH, &s, Some(&t), &a).expect("mutual succeeds");
        assert_eq!(
            out,
            vec![
                ("CHAP_N".to_string(), "iqn.target".to_string()),
                (
                    "CHAP_R".to_string(),
                    encode_hex(&md5_of(77, "targetsecret", &their_c))
                ),
            ]
        );
        assert_eq!(
            verify(1, &CH, &s, None, &a),
            Err(ChapError::MutualNotConfigured)
        );
        let same = secret("iqn.target", "alicesecret1");
        assert_eq!(
            verify(1, &CH, &s, Some(&same), &a),
            Err(ChapError::SameSecret)
        );
        let half = Answer { id: None, ..a };
        assert_eq!(
            verify(1, &CH, &s, Some(&t), &half),
            Err(ChapError::HalfMutual)
        );
    }

    #[test]
    fn mutual_challenge_checks() {
        let s = secret("alice", "alicesecret1");
        let t = secret("iqn.target", "targetsecret");
        let (n, r) = answer_for(1, &s);
        let check = |c: &str| {
            verify(
                1,
                &CH,
                &s,
                Some(&t),
                &Answer {
                    name: Some(&n),
                    response: Some(&r),
                    id: Some("2"),
                    challenge: Some(c),
                },
            )
        };
        assert_eq!(check(&encode_hex(&CH)), Err(ChapError::Reflection));
        assert_eq!(
            check(&encode_hex(&[1u8; 1025])),
            Err(ChapError::ChallengeLength(1025))
        );
        assert!(check(&encode_hex(&[1u8; 1024])).is_ok());
        assert!(check("0x01").is_ok());
        assert_eq!(check("0xqq"), Err(ChapError::BadEncoding));
    }

    mod prop {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn decode_never_panics(s in "\\PC{0,64}", t in "0[xXbB][0-9a-zA-Z+/=]{0,64}") {
                let _ = decode_binary(&s);
                let _ = decode_binary(&t);
                let _ = parse_id(&s);
            }

            #[test]
            fn hex_round_trips(bytes in proptest::collection::vec(any::<u8>(), 1..64)) {
                prop_assert_eq!(decode_binary(&encode_hex(&bytes)), Ok(bytes));
            }
        }
    }
}
