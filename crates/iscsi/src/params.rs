//! Operational parameters and their negotiation (RFC 7143 sections 6.2, 13).
//!
//! The target is always the responder here: the initiator offers, we answer. We never
//! originate a negotiation ourselves (an offer of ours would need an answer before we
//! could agree to leave the stage, and common initiators resend every key when the target
//! does not transit). The consequence: a key the initiator does not send keeps its RFC
//! default even where [`TargetLimits`] is stricter (see [`TargetLimits`]).
//!
//! Results follow the RFC result functions: numerical keys take the minimum or maximum of
//! the offer and our own value, booleans AND or OR, lists the first offered value we
//! support. An offer outside the key's RFC range, or not a valid value at all, is
//! answered `Reject` and the key keeps its default. Keys that do not apply to a discovery
//! session, and `FirstBurstLength` when `InitialR2T=Yes` and `ImmediateData=No`, are
//! answered `Irrelevant`. Unknown keys (including `X-` and `X#` vendor keys) are answered
//! `NotUnderstood`.

/// Smallest MaxRecvDataSegmentLength, MaxBurstLength and FirstBurstLength (RFC 7143 13).
pub const MIN_DATA_LEN: u32 = 512;
/// Largest MaxRecvDataSegmentLength, MaxBurstLength and FirstBurstLength (2^24 - 1).
pub const MAX_DATA_LEN: u32 = 16_777_215;
/// RFC default MaxRecvDataSegmentLength, in each direction, until declared.
pub const DEFAULT_MRDSL: u32 = 8192;
/// RFC default MaxBurstLength.
pub const DEFAULT_MAX_BURST: u32 = 262_144;
/// RFC default FirstBurstLength.
pub const DEFAULT_FIRST_BURST: u32 = 65_536;
/// Our DefaultTime2Wait (the RFC default); the result is the larger of both sides'.
pub const OUR_TIME2WAIT: u32 = 2;
/// Our DefaultTime2Retain (the RFC default); the result is the smaller of both sides'.
pub const OUR_TIME2RETAIN: u32 = 20;

/// Constant answer for a key we do not know.
pub const NOT_UNDERSTOOD: &str = "NotUnderstood";
/// Constant answer for an offer we cannot accept.
pub const REJECT: &str = "Reject";
/// Constant answer for a key that does not apply.
pub const IRRELEVANT: &str = "Irrelevant";

/// What this target is willing to do. Bounds the negotiation results.
///
/// These bound what the initiator *proposes*. A key the initiator leaves out takes its
/// RFC default (for example ImmediateData=Yes, FirstBurstLength=65536) whatever these
/// say, so the shell must read the outcome from [`Params`], not from here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TargetLimits {
    /// Largest data segment we accept; declared to the initiator as our
    /// MaxRecvDataSegmentLength (clamped to 512..=2^24-1).
    pub max_recv_data_segment_length: u32,
    /// Largest MaxBurstLength we agree to.
    pub max_burst_length: u32,
    /// Largest FirstBurstLength we agree to.
    pub first_burst_length: u32,
    /// Largest MaxOutstandingR2T we agree to.
    pub max_outstanding_r2t: u32,
    /// Largest MaxConnections we agree to.
    pub max_connections: u16,
    /// Whether we agree to ImmediateData=Yes.
    pub allow_immediate_data: bool,
    /// Whether we agree to CRC32C header and data digests.
    pub allow_digests: bool,
}

impl Default for TargetLimits {
    fn default() -> Self {
        TargetLimits {
            max_recv_data_segment_length: 262_144,
            max_burst_length: 1 << 20,
            first_burst_length: 65_536,
            max_outstanding_r2t: 1,
            max_connections: 1,
            allow_immediate_data: true,
            allow_digests: true,
        }
    }
}

/// The parameters of a session and its connection, as negotiated (RFC defaults where a
/// key was not negotiated).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Params {
    /// CRC32C header digests on this connection.
    pub header_digest: bool,
    /// CRC32C data digests on this connection.
    pub data_digest: bool,
    /// Largest data segment we may send: the initiator's declared
    /// MaxRecvDataSegmentLength (default 8192).
    pub initiator_mrdsl: u32,
    /// Largest data segment the initiator may send us: our declaration (8192 until we
    /// declare it, which we do in the operational stage).
    pub target_mrdsl: u32,
    /// MaxBurstLength.
    pub max_burst_length: u32,
    /// FirstBurstLength (never above `max_burst_length`).
    pub first_burst_length: u32,
    /// ImmediateData.
    pub immediate_data: bool,
    /// InitialR2T. We always answer Yes, so this is always true after a login: the
    /// initiator sends no unsolicited Data-Out PDUs, only immediate data.
    pub initial_r2t: bool,
    /// MaxOutstandingR2T.
    pub max_outstanding_r2t: u32,
    /// DataPDUInOrder (we always answer Yes).
    pub data_pdu_in_order: bool,
    /// DataSequenceInOrder (we always answer Yes).
    pub data_sequence_in_order: bool,
    /// DefaultTime2Wait, seconds.
    pub default_time2wait: u32,
    /// DefaultTime2Retain, seconds.
    pub default_time2retain: u32,
    /// ErrorRecoveryLevel; we support 0 only.
    pub error_recovery_level: u8,
    /// MaxConnections.
    pub max_connections: u16,
    /// The initiator's InitiatorName.
    pub initiator_name: String,
    /// The initiator's InitiatorAlias, if it sent one.
    pub initiator_alias: Option<String>,
    /// The TargetName of a normal session.
    pub target_name: Option<String>,
    /// SessionType=Discovery.
    pub discovery: bool,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            header_digest: false,
            data_digest: false,
            initiator_mrdsl: DEFAULT_MRDSL,
            target_mrdsl: DEFAULT_MRDSL,
            max_burst_length: DEFAULT_MAX_BURST,
            first_burst_length: DEFAULT_FIRST_BURST,
            immediate_data: true,
            initial_r2t: true,
            max_outstanding_r2t: 1,
            data_pdu_in_order: true,
            data_sequence_in_order: true,
            default_time2wait: 2,
            default_time2retain: 20,
            error_recovery_level: 0,
            max_connections: 1,
            initiator_name: String::new(),
            initiator_alias: None,
            target_name: None,
            discovery: false,
        }
    }
}

impl Params {
    /// Restores the invariants that span keys once a negotiation is over: the RFC
    /// requires FirstBurstLength <= MaxBurstLength, and an initiator could have lowered
    /// MaxBurstLength in a later exchange than its FirstBurstLength.
    pub fn finish(&mut self) {
        self.first_burst_length = self.first_burst_length.min(self.max_burst_length);
    }
}

/// Where a key may be sent, from the target's point of view of an initiator's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    /// AuthMethod and CHAP keys: security negotiation stage only.
    Security,
    /// InitiatorName, TargetName, SessionType: first login request only.
    LoginDeclarative,
    /// InitiatorAlias: declarative, any phase.
    InitiatorAlias,
    /// MaxRecvDataSegmentLength: declarative, operational stage or full feature phase.
    MaxRecvDataSegmentLength,
    /// Operational keys negotiated in the operational stage only.
    Operational,
    /// Keys only a target sends (TargetAlias, TargetAddress, TargetPortalGroupTag).
    TargetOnly,
    /// SendTargets: full feature phase only.
    SendTargets,
    /// Anything else, answered NotUnderstood.
    Unknown,
}

/// Classifies a key name.
pub fn key_kind(key: &str) -> KeyKind {
    match key {
        "AuthMethod" | "CHAP_A" | "CHAP_I" | "CHAP_C" | "CHAP_N" | "CHAP_R" => KeyKind::Security,
        "InitiatorName" | "TargetName" | "SessionType" => KeyKind::LoginDeclarative,
        "InitiatorAlias" => KeyKind::InitiatorAlias,
        "MaxRecvDataSegmentLength" => KeyKind::MaxRecvDataSegmentLength,
        "HeaderDigest"
        | "DataDigest"
        | "MaxConnections"
        | "InitialR2T"
        | "ImmediateData"
        | "MaxBurstLength"
        | "FirstBurstLength"
        | "DefaultTime2Wait"
        | "DefaultTime2Retain"
        | "MaxOutstandingR2T"
        | "DataPDUInOrder"
        | "DataSequenceInOrder"
        | "ErrorRecoveryLevel"
        | "IFMarker"
        | "OFMarker"
        | "IFMarkInt"
        | "OFMarkInt" => KeyKind::Operational,
        "TargetAlias" | "TargetAddress" | "TargetPortalGroupTag" => KeyKind::TargetOnly,
        "SendTargets" => KeyKind::SendTargets,
        _ => KeyKind::Unknown,
    }
}

/// Why an operational text could not be answered at all (rather than with `Reject`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParamError {
    /// A MaxRecvDataSegmentLength declaration outside 512..=2^24-1 or not a number. A
    /// declaration cannot be answered `Reject` in login: our own declaration of the same
    /// key goes in the same response.
    #[error("invalid MaxRecvDataSegmentLength declaration {0:?}")]
    BadDeclaration(String),
    /// A key that may not be sent in the operational stage.
    #[error("key {0} may not be sent in this stage")]
    WrongStage(String),
}

/// Parses an RFC 7143 numerical value: decimal, or hex with a `0x`/`0X` prefix.
pub fn parse_number(value: &str) -> Option<u64> {
    let (digits, radix) = match value
        .strip_prefix("0x")
        .or_else(|| value.strip_prefix("0X"))
    {
        Some(hex) => (hex, 16),
        None => (value, 10),
    };
    // from_str_radix accepts a leading '+', which the RFC grammar does not.
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    u64::from_str_radix(digits, radix).ok()
}

/// Parses a number within `min..=max`.
fn number_in(value: &str, min: u64, max: u64) -> Option<u64> {
    parse_number(value).filter(|v| (min..=max).contains(v))
}

/// Parses an RFC boolean.
fn parse_bool(value: &str) -> Option<bool> {
    match value {
        "Yes" => Some(true),
        "No" => Some(false),
        _ => None,
    }
}

fn yes_no(b: bool) -> String {
    if b { "Yes" } else { "No" }.to_owned()
}

/// Our MaxRecvDataSegmentLength declaration for `limits`, within the RFC range.
pub fn declared_mrdsl(limits: &TargetLimits) -> u32 {
    limits
        .max_recv_data_segment_length
        .clamp(MIN_DATA_LEN, MAX_DATA_LEN)
}

/// Negotiates a digest list: the first offered value we support.
fn digest(value: &str, allow: bool) -> Option<bool> {
    value.split(',').find_map(|v| match v {
        "None" => Some(false),
        "CRC32C" if allow => Some(true),
        _ => None,
    })
}

/// Answers the initiator's operational keys of one login request (operational stage)
/// and updates `params`. Returns the response pairs in request order; declarative keys
/// (MaxRecvDataSegmentLength) get no answer. The caller adds our own
/// MaxRecvDataSegmentLength declaration (see [`declared_mrdsl`]) and filters out keys
/// of other kinds beforehand; an unexpected one is [`ParamError::WrongStage`].
pub fn negotiate(
    params: &mut Params,
    limits: &TargetLimits,
    pairs: &[(String, String)],
) -> Result<Vec<(String, String)>, ParamError> {
    let mut out: Vec<(String, String)> = Vec::with_capacity(pairs.len());
    // FirstBurstLength depends on InitialR2T, ImmediateData and MaxBurstLength, which may
    // come later in the same text: answer it after every other key.
    let mut first_burst: Option<(usize, &str)> = None;
    let max_len = u64::from(MAX_DATA_LEN);
    let min_len = u64::from(MIN_DATA_LEN);
    for (key, value) in pairs {
        let answer: Option<String> = match key_kind(key) {
            KeyKind::Unknown => Some(NOT_UNDERSTOOD.to_owned()),
            KeyKind::MaxRecvDataSegmentLength => {
                let v = number_in(value, min_len, max_len)
                    .ok_or_else(|| ParamError::BadDeclaration(value.clone()))?;
                params.initiator_mrdsl = u32::try_from(v).unwrap_or(MAX_DATA_LEN);
                None
            }
            KeyKind::Operational if key == "FirstBurstLength" => {
                first_burst = Some((out.len(), value.as_str()));
                Some(String::new())
            }
            KeyKind::Operational => Some(answer(params, limits, key, value)),
            _ => return Err(ParamError::WrongStage(key.clone())),
        };
        if let Some(answer) = answer {
            out.push((key.clone(), answer));
        }
    }
    if let Some((at, value)) = first_burst {
        let answer = first_burst_answer(params, limits, value);
        if let Some(slot) = out.get_mut(at) {
            slot.1 = answer;
        }
    }
    Ok(out)
}

/// The answer to one operational key (other than FirstBurstLength), updating `params`: a
/// table of RFC 7143's negotiation rules, key by key.
fn answer(params: &mut Params, limits: &TargetLimits, key: &str, value: &str) -> String {
    let max_len = u64::from(MAX_DATA_LEN);
    let min_len = u64::from(MIN_DATA_LEN);
    match key {
        "HeaderDigest" | "DataDigest" => match digest(value, limits.allow_digests) {
            Some(on) => {
                if key == "HeaderDigest" {
                    params.header_digest = on;
                } else {
                    params.data_digest = on;
                }
                if on { "CRC32C" } else { "None" }.to_owned()
            }
            None => REJECT.to_owned(),
        },
        // Session-wide data-transfer keys do not apply to discovery sessions.
        "MaxConnections"
        | "InitialR2T"
        | "ImmediateData"
        | "MaxBurstLength"
        | "MaxOutstandingR2T"
        | "DataPDUInOrder"
        | "DataSequenceInOrder"
            if params.discovery =>
        {
            IRRELEVANT.to_owned()
        }
        "MaxConnections" => match number_in(value, 1, 65_535) {
            Some(v) => {
                let ours = limits.max_connections.max(1);
                let r = u16::try_from(v).unwrap_or(ours).min(ours);
                params.max_connections = r;
                r.to_string()
            }
            None => REJECT.to_owned(),
        },
        // OR with our Yes: always Yes (see Params::initial_r2t).
        "InitialR2T" => match parse_bool(value) {
            Some(_) => {
                params.initial_r2t = true;
                yes_no(true)
            }
            None => REJECT.to_owned(),
        },
        "ImmediateData" => match parse_bool(value) {
            Some(v) => {
                params.immediate_data = v && limits.allow_immediate_data;
                yes_no(params.immediate_data)
            }
            None => REJECT.to_owned(),
        },
        "MaxBurstLength" => match number_in(value, min_len, max_len) {
            Some(v) => {
                let ours = limits.max_burst_length.clamp(MIN_DATA_LEN, MAX_DATA_LEN);
                let r = u32::try_from(v).unwrap_or(ours).min(ours);
                params.max_burst_length = r;
                r.to_string()
            }
            None => REJECT.to_owned(),
        },
        "MaxOutstandingR2T" => match number_in(value, 1, 65_535) {
            Some(v) => {
                let ours = limits.max_outstanding_r2t.clamp(1, 65_535);
                let r = u32::try_from(v).unwrap_or(ours).min(ours);
                params.max_outstanding_r2t = r;
                r.to_string()
            }
            None => REJECT.to_owned(),
        },
        // OR with our Yes: in-order data keeps the shell simple.
        "DataPDUInOrder" | "DataSequenceInOrder" => match parse_bool(value) {
            Some(_) => {
                if key == "DataPDUInOrder" {
                    params.data_pdu_in_order = true;
                } else {
                    params.data_sequence_in_order = true;
                }
                yes_no(true)
            }
            None => REJECT.to_owned(),
        },
        _ => answer_recovery(params, key, value),
    }
}

/// The answer to the recovery and marker keys (and to keys raidd does not know), updating
/// `params`: the rest of [`answer`]'s table.
fn answer_recovery(params: &mut Params, key: &str, value: &str) -> String {
    match key {
        "DefaultTime2Wait" => match number_in(value, 0, 3600) {
            Some(v) => {
                let r = u32::try_from(v).unwrap_or(OUR_TIME2WAIT).max(OUR_TIME2WAIT);
                params.default_time2wait = r;
                r.to_string()
            }
            None => REJECT.to_owned(),
        },
        "DefaultTime2Retain" => match number_in(value, 0, 3600) {
            Some(v) => {
                let r = u32::try_from(v)
                    .unwrap_or(OUR_TIME2RETAIN)
                    .min(OUR_TIME2RETAIN);
                params.default_time2retain = r;
                r.to_string()
            }
            None => REJECT.to_owned(),
        },
        // Minimum with our 0: we implement error recovery level 0 only.
        "ErrorRecoveryLevel" => match number_in(value, 0, 2) {
            Some(_) => {
                params.error_recovery_level = 0;
                "0".to_owned()
            }
            None => REJECT.to_owned(),
        },
        // Obsolete markers (RFC 7143 13.25): answering No to the boolean is
        // allowed and what RFC 3720 initiators expect from an AND key; the
        // interval keys MUST be answered Reject.
        "IFMarker" | "OFMarker" => match parse_bool(value) {
            Some(_) => yes_no(false),
            None => REJECT.to_owned(),
        },
        "IFMarkInt" | "OFMarkInt" => REJECT.to_owned(),
        _ => NOT_UNDERSTOOD.to_owned(),
    }
}

/// FirstBurstLength, answered after every other key of the request (it depends on
/// InitialR2T, ImmediateData and MaxBurstLength).
fn first_burst_answer(params: &mut Params, limits: &TargetLimits, value: &str) -> String {
    if params.discovery || (params.initial_r2t && !params.immediate_data) {
        return IRRELEVANT.to_owned();
    }
    match number_in(value, u64::from(MIN_DATA_LEN), u64::from(MAX_DATA_LEN)) {
        Some(v) => {
            let ours = limits
                .first_burst_length
                .clamp(MIN_DATA_LEN, MAX_DATA_LEN)
                .min(params.max_burst_length);
            let r = u32::try_from(v).unwrap_or(ours).min(ours);
            params.first_burst_length = r;
            r.to_string()
        }
        None => REJECT.to_owned(),
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

    fn answer(params: &mut Params, limits: &TargetLimits, key: &str, value: &str) -> String {
        let out = negotiate(params, limits, &pairs(&[(key, value)])).expect("negotiates");
        assert_eq!(out.len(), 1, "{key} answered once");
        assert_eq!(out[0].0, key);
        out[0].1.clone()
    }

    #[test]
    fn defaults_are_the_rfc_defaults() {
        let p = Params::default();
        assert!(p.initial_r2t && p.immediate_data);
        assert_eq!(p.max_burst_length, 262_144);
        assert_eq!(p.first_burst_length, 65_536);
        assert!(!p.header_digest && !p.data_digest);
        assert_eq!(p.max_outstanding_r2t, 1);
        assert!(p.data_pdu_in_order && p.data_sequence_in_order);
        assert_eq!(p.error_recovery_level, 0);
        assert_eq!(p.max_connections, 1);
        assert_eq!(p.initiator_mrdsl, 8192);
        assert_eq!(p.target_mrdsl, 8192);
        assert_eq!((p.default_time2wait, p.default_time2retain), (2, 20));
    }

    #[test]
    fn numbers_decimal_and_hex() {
        assert_eq!(parse_number("8192"), Some(8192));
        assert_eq!(parse_number("0x2000"), Some(8192));
        assert_eq!(parse_number("0X2000"), Some(8192));
        assert_eq!(parse_number(""), None);
        assert_eq!(parse_number("0x"), None);
        assert_eq!(parse_number("+5"), None);
        assert_eq!(parse_number("5k"), None);
        assert_eq!(parse_number("99999999999999999999999"), None);
    }

    #[test]
    fn digests_first_supported_in_list() {
        let limits = TargetLimits::default();
        let mut p = Params::default();
        assert_eq!(
            answer(&mut p, &limits, "HeaderDigest", "CRC32C,None"),
            "CRC32C"
        );
        assert!(p.header_digest);
        assert_eq!(answer(&mut p, &limits, "DataDigest", "None,CRC32C"), "None");
        assert!(!p.data_digest);
        // Unknown list values are skipped, not fatal.
        let mut p = Params::default();
        assert_eq!(
            answer(&mut p, &limits, "DataDigest", "MD5,CRC32C"),
            "CRC32C"
        );
        assert!(p.data_digest);
    }

    #[test]
    fn digests_refused_when_not_allowed() {
        let limits = TargetLimits {
            allow_digests: false,
            ..TargetLimits::default()
        };
        let mut p = Params::default();
        assert_eq!(
            answer(&mut p, &limits, "HeaderDigest", "CRC32C,None"),
            "None"
        );
        assert_eq!(answer(&mut p, &limits, "DataDigest", "CRC32C"), "Reject");
        assert!(!p.header_digest && !p.data_digest);
    }

    #[test]
    fn max_burst_is_minimum_and_range_checked() {
        let limits = TargetLimits::default();
        let mut p = Params::default();
        assert_eq!(
            answer(&mut p, &limits, "MaxBurstLength", "16776192"),
            "1048576"
        );
        assert_eq!(p.max_burst_length, 1 << 20);
        assert_eq!(answer(&mut p, &limits, "MaxBurstLength", "4096"), "4096");
        assert_eq!(p.max_burst_length, 4096);
        let mut p = Params::default();
        assert_eq!(answer(&mut p, &limits, "MaxBurstLength", "511"), "Reject");
        assert_eq!(
            answer(&mut p, &limits, "MaxBurstLength", "16777216"),
            "Reject"
        );
        assert_eq!(answer(&mut p, &limits, "MaxBurstLength", "lots"), "Reject");
        assert_eq!(p.max_burst_length, DEFAULT_MAX_BURST);
    }

    #[test]
    fn first_burst_bounded_by_limit_and_max_burst() {
        let limits = TargetLimits::default();
        let mut p = Params::default();
        let out = negotiate(
            &mut p,
            &limits,
            &pairs(&[
                ("InitialR2T", "No"),
                ("FirstBurstLength", "262144"),
                ("MaxBurstLength", "16384"),
            ]),
        )
        .expect("negotiates");
        // Answered in request order even though computed last.
        assert_eq!(out[1], ("FirstBurstLength".into(), "16384".into()));
        assert_eq!(out[2], ("MaxBurstLength".into(), "16384".into()));
        assert_eq!(p.first_burst_length, 16384);
        let mut p = Params::default();
        assert_eq!(
            answer(&mut p, &limits, "FirstBurstLength", "262144"),
            "65536"
        );
        assert_eq!(
            answer(&mut Params::default(), &limits, "FirstBurstLength", "256"),
            "Reject"
        );
    }

    #[test]
    fn first_burst_irrelevant_without_unsolicited_data() {
        let limits = TargetLimits::default();
        let mut p = Params::default();
        let out = negotiate(
            &mut p,
            &limits,
            &pairs(&[("FirstBurstLength", "4096"), ("ImmediateData", "No")]),
        )
        .expect("negotiates");
        assert_eq!(out[0], ("FirstBurstLength".into(), "Irrelevant".into()));
        assert_eq!(p.first_burst_length, DEFAULT_FIRST_BURST);
        // Our ImmediateData=No (AND) has the same effect.
        let strict = TargetLimits {
            allow_immediate_data: false,
            ..limits
        };
        let mut p = Params::default();
        let out = negotiate(
            &mut p,
            &strict,
            &pairs(&[("ImmediateData", "Yes"), ("FirstBurstLength", "4096")]),
        )
        .expect("negotiates");
        assert_eq!(out[0].1, "No");
        assert_eq!(out[1].1, "Irrelevant");
    }

    #[test]
    fn finish_keeps_first_burst_within_max_burst() {
        let limits = TargetLimits::default();
        let mut p = Params::default();
        negotiate(&mut p, &limits, &pairs(&[("FirstBurstLength", "65536")])).expect("ok");
        negotiate(&mut p, &limits, &pairs(&[("MaxBurstLength", "8192")])).expect("ok");
        p.finish();
        assert_eq!(p.first_burst_length, 8192);
    }

    #[test]
    fn boolean_result_functions() {
        let limits = TargetLimits::default();
        let mut p = Params::default();
        // InitialR2T is OR with our Yes.
        assert_eq!(answer(&mut p, &limits, "InitialR2T", "No"), "Yes");
        assert!(p.initial_r2t);
        // ImmediateData is AND.
        assert_eq!(answer(&mut p, &limits, "ImmediateData", "No"), "No");
        assert!(!p.immediate_data);
        let mut p = Params::default();
        assert_eq!(answer(&mut p, &limits, "ImmediateData", "Yes"), "Yes");
        assert!(p.immediate_data);
        assert_eq!(answer(&mut p, &limits, "DataPDUInOrder", "No"), "Yes");
        assert_eq!(answer(&mut p, &limits, "DataSequenceInOrder", "No"), "Yes");
        assert_eq!(answer(&mut p, &limits, "ImmediateData", "yes"), "Reject");
    }

    #[test]
    fn numeric_result_functions() {
        let limits = TargetLimits {
            max_outstanding_r2t: 4,
            ..TargetLimits::default()
        };
        let mut p = Params::default();
        assert_eq!(answer(&mut p, &limits, "MaxOutstandingR2T", "16"), "4");
        assert_eq!(p.max_outstanding_r2t, 4);
        assert_eq!(answer(&mut p, &limits, "MaxOutstandingR2T", "0"), "Reject");
        assert_eq!(answer(&mut p, &limits, "MaxConnections", "8"), "1");
        assert_eq!(answer(&mut p, &limits, "MaxConnections", "0"), "Reject");
        assert_eq!(answer(&mut p, &limits, "ErrorRecoveryLevel", "2"), "0");
        assert_eq!(answer(&mut p, &limits, "ErrorRecoveryLevel", "3"), "Reject");
        assert_eq!(answer(&mut p, &limits, "DefaultTime2Wait", "0"), "2");
        assert_eq!(answer(&mut p, &limits, "DefaultTime2Wait", "10"), "10");
        assert_eq!(p.default_time2wait, 10);
        assert_eq!(answer(&mut p, &limits, "DefaultTime2Retain", "0"), "0");
        assert_eq!(answer(&mut p, &limits, "DefaultTime2Retain", "3600"), "20");
        assert_eq!(
            answer(&mut p, &limits, "DefaultTime2Retain", "3601"),
            "Reject"
        );
    }

    #[test]
    fn mrdsl_is_declarative() {
        let limits = TargetLimits::default();
        let mut p = Params::default();
        let out = negotiate(
            &mut p,
            &limits,
            &pairs(&[("MaxRecvDataSegmentLength", "65536")]),
        )
        .expect("ok");
        assert!(out.is_empty(), "a declaration gets no answer");
        assert_eq!(p.initiator_mrdsl, 65536);
        for bad in ["511", "16777216", "Reject", ""] {
            assert_eq!(
                negotiate(
                    &mut p,
                    &limits,
                    &pairs(&[("MaxRecvDataSegmentLength", bad)])
                ),
                Err(ParamError::BadDeclaration(bad.into()))
            );
        }
        assert_eq!(declared_mrdsl(&limits), 262_144);
        let tiny = TargetLimits {
            max_recv_data_segment_length: 1,
            ..limits
        };
        assert_eq!(declared_mrdsl(&tiny), 512);
    }

    #[test]
    fn markers_and_unknown_keys() {
        let limits = TargetLimits::default();
        let mut p = Params::default();
        assert_eq!(answer(&mut p, &limits, "OFMarker", "Yes"), "No");
        assert_eq!(answer(&mut p, &limits, "IFMarker", "No"), "No");
        assert_eq!(answer(&mut p, &limits, "OFMarkInt", "2048~8192"), "Reject");
        assert_eq!(
            answer(&mut p, &limits, "X-com.example.Foo", "1"),
            "NotUnderstood"
        );
        assert_eq!(
            answer(&mut p, &limits, "X#org.example.Bar", "1"),
            "NotUnderstood"
        );
        assert_eq!(
            answer(&mut p, &limits, "iSCSIProtocolLevel", "2"),
            "NotUnderstood"
        );
    }

    #[test]
    fn discovery_session_keys_irrelevant() {
        let limits = TargetLimits::default();
        let mut p = Params {
            discovery: true,
            ..Params::default()
        };
        for key in [
            "MaxConnections",
            "InitialR2T",
            "ImmediateData",
            "MaxBurstLength",
            "FirstBurstLength",
            "MaxOutstandingR2T",
            "DataPDUInOrder",
            "DataSequenceInOrder",
        ] {
            let boolean = matches!(
                key,
                "InitialR2T" | "ImmediateData" | "DataPDUInOrder" | "DataSequenceInOrder"
            );
            let value = if boolean { "Yes" } else { "1" };
            assert_eq!(answer(&mut p, &limits, key, value), "Irrelevant", "{key}");
        }
        assert_eq!(answer(&mut p, &limits, "HeaderDigest", "None"), "None");
        assert_eq!(answer(&mut p, &limits, "ErrorRecoveryLevel", "0"), "0");
    }

    #[test]
    fn other_kinds_are_wrong_stage() {
        let limits = TargetLimits::default();
        for key in [
            "AuthMethod",
            "CHAP_R",
            "SendTargets",
            "TargetAlias",
            "InitiatorName",
        ] {
            assert_eq!(
                negotiate(&mut Params::default(), &limits, &pairs(&[(key, "x")])),
                Err(ParamError::WrongStage(key.into()))
            );
        }
    }

    mod prop {
        use super::*;
        use proptest::prelude::*;

        const KEYS: &[&str] = &[
            "HeaderDigest",
            "DataDigest",
            "MaxConnections",
            "InitialR2T",
            "ImmediateData",
            "MaxBurstLength",
            "FirstBurstLength",
            "DefaultTime2Wait",
            "DefaultTime2Retain",
            "MaxOutstandingR2T",
            "DataPDUInOrder",
            "DataSequenceInOrder",
            "ErrorRecoveryLevel",
            "IFMarker",
            "OFMarker",
            "IFMarkInt",
            "OFMarkInt",
            "MaxRecvDataSegmentLength",
            "X-foo",
        ];

        proptest! {
            #[test]
            fn results_stay_within_limits(
                picks in proptest::collection::vec((0..KEYS.len(), "[0-9]{1,9}|Yes|No|None|CRC32C|0x[0-9a-f]{1,7}"), 0..24),
                mbl in 0u32..20_000_000, fbl in 0u32..20_000_000, r2t in 0u32..100,
                imm: bool, dig: bool, disc: bool,
            ) {
                let limits = TargetLimits {
                    max_recv_data_segment_length: 8192,
                    max_burst_length: mbl,
                    first_burst_length: fbl,
                    max_outstanding_r2t: r2t,
                    max_connections: 1,
                    allow_immediate_data: imm,
                    allow_digests: dig,
                };
                let mut seen = std::collections::HashSet::new();
                let list: Vec<(String, String)> = picks
                    .into_iter()
                    .filter(|(k, _)| seen.insert(*k))
                    .map(|(k, v)| (KEYS[k].to_string(), v))
                    .collect();
                let mut p = Params { discovery: disc, ..Params::default() };
                if let Ok(out) = negotiate(&mut p, &limits, &list) {
                    p.finish();
                    prop_assert!(out.len() <= list.len());
                    prop_assert!(p.first_burst_length <= p.max_burst_length);
                    prop_assert!(p.max_burst_length <= DEFAULT_MAX_BURST.max(mbl.clamp(MIN_DATA_LEN, MAX_DATA_LEN)));
                    prop_assert!(p.max_outstanding_r2t >= 1);
                    prop_assert!(p.max_outstanding_r2t <= 1.max(r2t));
                    let imm_offered = list
                        .iter()
                        .any(|(k, v)| k == "ImmediateData" && (v == "Yes" || v == "No"));
                    prop_assert!(disc || imm || !imm_offered || !p.immediate_data);
                    prop_assert!(dig || (!p.header_digest && !p.data_digest));
                    prop_assert!((MIN_DATA_LEN..=MAX_DATA_LEN).contains(&p.initiator_mrdsl));
                    prop_assert_eq!(p.error_recovery_level, 0);
                    prop_assert_eq!(p.max_connections, 1);
                }
            }
        }
    }
}
