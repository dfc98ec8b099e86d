//! Text key=value pairs (RFC 7143 section 6.1), the payload of Login and Text PDUs.
//!
//! A text is a sequence of `key=value` strings, each followed by one NUL byte. Keys are
//! at most 63 bytes of letters, digits and `.-+@_` (plus the `X#` prefix of registered
//! extension keys); values are UTF-8 without NUL. Values are bounded by
//! [`MAX_VALUE_LEN`] (the long-value bound RFC 7143 allows for keys such as `CHAP_C` and
//! `TargetAddress` lists); a caller that wants the 255-byte bound of ordinary keys checks
//! it per key. A key may appear only once in one text: a repeat is a protocol error.

use std::collections::HashSet;

/// Longest key name, in bytes (RFC 7143 section 6.1).
pub const MAX_KEY_LEN: usize = 63;
/// Longest value accepted, in bytes (the bound for long values such as `CHAP_C`).
pub const MAX_VALUE_LEN: usize = 8192;
/// Most text accepted in one exchange, in bytes, including text accumulated across
/// continuation (C bit) PDUs. Keeps what a peer can make us hold bounded.
pub const MAX_TEXT_LEN: usize = 65536;

/// Why a text could not be parsed. Every variant is a protocol error of the sender.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TextError {
    /// The text is longer than [`MAX_TEXT_LEN`].
    #[error("text of {0} bytes exceeds the {MAX_TEXT_LEN}-byte bound")]
    TooLong(usize),
    /// A NUL-delimited item has no `=`.
    #[error("a text item has no '=' separating key and value")]
    MissingEquals,
    /// A key is empty (`=value`).
    #[error("empty key")]
    EmptyKey,
    /// A key is longer than [`MAX_KEY_LEN`].
    #[error("key of {0} bytes exceeds {MAX_KEY_LEN}")]
    KeyTooLong(usize),
    /// A key contains a byte not allowed in key names.
    #[error("key contains a character not allowed in key names")]
    BadKey,
    /// A value is longer than [`MAX_VALUE_LEN`].
    #[error("value of key {key} is {len} bytes, over {MAX_VALUE_LEN}")]
    ValueTooLong {
        /// The key whose value is too long.
        key: String,
        /// The value's length in bytes.
        len: usize,
    },
    /// A value is not UTF-8.
    #[error("value of key {0} is not UTF-8")]
    NotUtf8(String),
    /// A key appears more than once in one text.
    #[error("key {0} appears more than once")]
    Duplicate(String),
}

/// Whether `key` is a syntactically valid key name.
pub fn valid_key(key: &[u8]) -> bool {
    // Registered extension keys start with "X#"; '#' is allowed only there.
    let rest = key.strip_prefix(b"X#").unwrap_or(key);
    !key.is_empty()
        && key.len() <= MAX_KEY_LEN
        && rest
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'+' | b'@' | b'_'))
}

/// Parses a text into its pairs, in order.
///
/// Empty items (runs of NUL bytes, as left by padding) are skipped, and a final pair
/// without its NUL is accepted: the RFC requires the NUL, but initiators that omit it
/// are otherwise unambiguous and the data segment length delimits the text.
pub fn parse(data: &[u8]) -> Result<Vec<(String, String)>, TextError> {
    if data.len() > MAX_TEXT_LEN {
        return Err(TextError::TooLong(data.len()));
    }
    let mut pairs = Vec::new();
    let mut seen: HashSet<&[u8]> = HashSet::new();
    for item in data.split(|&b| b == 0) {
        if item.is_empty() {
            continue;
        }
        let eq = item
            .iter()
            .position(|&b| b == b'=')
            .ok_or(TextError::MissingEquals)?;
        let (key, value) = (&item[..eq], &item[eq + 1..]);
        if key.is_empty() {
            return Err(TextError::EmptyKey);
        }
        if key.len() > MAX_KEY_LEN {
            return Err(TextError::KeyTooLong(key.len()));
        }
        if !valid_key(key) {
            return Err(TextError::BadKey);
        }
        // valid_key admits ASCII only, so this conversion cannot lose anything.
        let key_str = String::from_utf8_lossy(key).into_owned();
        if value.len() > MAX_VALUE_LEN {
            return Err(TextError::ValueTooLong {
                key: key_str,
                len: value.len(),
            });
        }
        let value = std::str::from_utf8(value).map_err(|_| TextError::NotUtf8(key_str.clone()))?;
        if !seen.insert(key) {
            return Err(TextError::Duplicate(key_str));
        }
        pairs.push((key_str, value.to_owned()));
    }
    Ok(pairs)
}

/// Appends `key=value\0` to `out`.
pub fn encode_pair(key: &str, value: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(key.as_bytes());
    out.push(b'=');
    out.extend_from_slice(value.as_bytes());
    out.push(0);
}

/// Appends every pair as `key=value\0` to `out`, in order. Repeated keys are written as
/// given: SendTargets answers legitimately repeat `TargetName` and `TargetAddress`.
pub fn encode(pairs: &[(String, String)], out: &mut Vec<u8>) {
    for (key, value) in pairs {
        encode_pair(key, value, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn parses_pairs_in_order() {
        let got = parse(b"InitiatorName=iqn.2024-01.org:a\0SessionType=Normal\0");
        assert_eq!(
            got,
            Ok(pairs(&[
                ("InitiatorName", "iqn.2024-01.org:a"),
                ("SessionType", "Normal")
            ]))
        );
    }

    #[test]
    fn value_may_contain_equals_and_be_empty() {
        assert_eq!(
            parse(b"A=b=c\0SendTargets=\0"),
            Ok(pairs(&[("A", "b=c"), ("SendTargets", "")]))
        );
    }

    #[test]
    fn tolerates_padding_and_missing_final_nul() {
        assert_eq!(parse(b"A=1\0\0\0\0"), Ok(pairs(&[("A", "1")])));
        assert_eq!(parse(b"A=1\0B=2"), Ok(pairs(&[("A", "1"), ("B", "2")])));
        assert_eq!(parse(b""), Ok(vec![]));
    }

    #[test]
    fn rejects_item_without_equals() {
        assert_eq!(parse(b"A=1\0junk\0"), Err(TextError::MissingEquals));
    }

    #[test]
    fn rejects_empty_key() {
        assert_eq!(parse(b"=1\0"), Err(TextError::EmptyKey));
    }

    #[test]
    fn key_length_bound() {
        let ok = format!("{}=v\0", "K".repeat(63));
        assert!(parse(ok.as_bytes()).is_ok());
        let long = format!("{}=v\0", "K".repeat(64));
        assert_eq!(parse(long.as_bytes()), Err(TextError::KeyTooLong(64)));
    }

    #[test]
    fn key_characters() {
        assert!(parse(b"X-com.example_a+b@c=1\0").is_ok());
        assert!(parse(b"X#org.example=1\0").is_ok());
        assert_eq!(parse(b"A#B=1\0"), Err(TextError::BadKey));
        assert_eq!(parse(b"A B=1\0"), Err(TextError::BadKey));
        assert_eq!(parse("Ké=1\0".as_bytes()), Err(TextError::BadKey));
    }

    #[test]
    fn value_length_bound() {
        let ok = format!("CHAP_C=0x{}\0", "a".repeat(MAX_VALUE_LEN - 2));
        assert!(parse(ok.as_bytes()).is_ok());
        let long = format!("CHAP_C=0x{}\0", "a".repeat(MAX_VALUE_LEN - 1));
        assert_eq!(
            parse(long.as_bytes()),
            Err(TextError::ValueTooLong {
                key: "CHAP_C".into(),
                len: MAX_VALUE_LEN + 1
            })
        );
    }

    #[test]
    fn value_must_be_utf8() {
        assert_eq!(parse(b"A=\xff\xfe\0"), Err(TextError::NotUtf8("A".into())));
        assert_eq!(
            parse("TargetAlias=disque dür\0".as_bytes()),
            Ok(pairs(&[("TargetAlias", "disque dür")]))
        );
    }

    #[test]
    fn duplicate_key_is_an_error() {
        assert_eq!(
            parse(b"A=1\0B=2\0A=1\0"),
            Err(TextError::Duplicate("A".into()))
        );
    }

    #[test]
    fn keys_are_case_sensitive() {
        // Key names are case sensitive (RFC 7143 6.1): "a" and "A" are different keys.
        assert_eq!(parse(b"a=1\0A=2\0"), Ok(pairs(&[("a", "1"), ("A", "2")])));
    }

    #[test]
    fn total_length_bound() {
        let data = vec![0u8; MAX_TEXT_LEN + 1];
        assert_eq!(parse(&data), Err(TextError::TooLong(MAX_TEXT_LEN + 1)));
        assert_eq!(parse(&data[..MAX_TEXT_LEN]), Ok(vec![]));
    }

    #[test]
    fn encode_writes_nul_terminated_pairs() {
        let mut out = Vec::new();
        encode(
            &pairs(&[
                ("TargetName", "iqn.x:t"),
                ("TargetAddress", "1.2.3.4:3260,1"),
            ]),
            &mut out,
        );
        assert_eq!(out, b"TargetName=iqn.x:t\0TargetAddress=1.2.3.4:3260,1\0");
    }

    mod prop {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn parse_never_panics(data in proptest::collection::vec(any::<u8>(), 0..2048)) {
                let _ = parse(&data);
            }

            #[test]
            fn encode_then_parse_round_trips(
                map in proptest::collection::btree_map("[A-Za-z0-9._+@-]{1,63}", "[^\u{0}]{0,40}", 0..20)
            ) {
                let list: Vec<(String, String)> = map.into_iter().collect();
                let mut out = Vec::new();
                encode(&list, &mut out);
                prop_assert_eq!(parse(&out), Ok(list));
            }
        }
    }
}
