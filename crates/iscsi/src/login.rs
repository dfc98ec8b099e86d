//! The target side of the login phase for one connection (RFC 7143 sections 6, 11.12,
//! 11.13, 13), and full-feature Text Request answers (SendTargets).
//!
//! The shell decodes each Login Request PDU into a [`LoginRequest`], calls
//! [`Login::step`], and encodes the returned [`LoginResponse`]; the [`Step`] says whether
//! to wait for the next request, enter the full feature phase, or send the response and
//! close the connection.
//!
//! Stages: SecurityNegotiation (0), LoginOperationalNegotiation (1), FullFeaturePhase
//! (3). Choices made here that the shell should know:
//! - A request asking to go from stage 0 straight to 3 is answered with T=1 and NSG=1:
//!   the operational stage is where we declare our MaxRecvDataSegmentLength (tgt does
//!   the same; initiators follow the NSG of the response).
//! - We set T in a response only when the request set it and we agree: in stage 0 once
//!   authentication is complete, in stage 1 always (we never originate keys, so nothing
//!   is left pending).
//! - Continuation (C=1) requests are accumulated and answered with an empty response
//!   (C=0, T=0, same stage); the text is processed at the request with C=0. A text over
//!   [`text::MAX_TEXT_LEN`] is refused, and so is a login of more than
//!   [`MAX_LOGIN_PDUS`] requests or [`MAX_LOGIN_TEXT`] bytes in all.
//! - Our responses are never split with C=1: they are small, and a response that would
//!   exceed the 8192-byte login data segment bound (only possible if the initiator sends
//!   thousands of unknown keys) ends the login with an initiator error.
//! - A key may be sent once per login; a repeat is an initiator error.
//! - Names (TargetName lookup, the ACL) compare ASCII case-insensitively: iSCSI names
//!   are case-insensitive and normalised to lower case (RFC 7143 4.2.7.1).

use std::collections::HashSet;

use crate::chap::{self, Secret};
use crate::params::{self, KeyKind, Params, TargetLimits, NOT_UNDERSTOOD, REJECT};
use crate::text::{self, TextError};

/// Status 0x0200: initiator error (malformed or out-of-sequence request).
pub const INITIATOR_ERROR: u16 = 0x0200;
/// Status 0x0201: authentication failed.
pub const AUTHENTICATION_FAILURE: u16 = 0x0201;
/// Status 0x0202: the initiator may not access the target.
pub const AUTHORIZATION_FAILURE: u16 = 0x0202;
/// Status 0x0203: no such target.
pub const NOT_FOUND: u16 = 0x0203;
/// Status 0x0205: no common protocol version.
pub const UNSUPPORTED_VERSION: u16 = 0x0205;
/// Status 0x0207: a required key is missing.
pub const MISSING_PARAMETER: u16 = 0x0207;
/// Status 0x0209: SessionType not supported.
pub const SESSION_TYPE_UNSUPPORTED: u16 = 0x0209;
/// Status 0x020a: the session to join or reinstate does not exist.
pub const SESSION_DOES_NOT_EXIST: u16 = 0x020a;

/// Most Login Request PDUs accepted in one login (continuations included).
pub const MAX_LOGIN_PDUS: u32 = 128;
/// Most text bytes accepted across all the requests of one login.
pub const MAX_LOGIN_TEXT: usize = 4 * text::MAX_TEXT_LEN;
/// Largest login response data segment: the initiator's MaxRecvDataSegmentLength does
/// not apply until the full feature phase, so the default 8192 bounds login PDUs.
pub const MAX_LOGIN_RESPONSE: usize = params::DEFAULT_MRDSL as usize;
/// Longest iSCSI name accepted (RFC 7143 4.2.7.1: 223 bytes).
pub const MAX_NAME_LEN: usize = 223;

/// One target offered by the portal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetEntry {
    /// The target's iSCSI name (IQN).
    pub name: String,
    /// TargetAlias sent in the first login response, if set.
    pub alias: Option<String>,
    /// When set, the initiator must authenticate with CHAP as this user and secret;
    /// AuthMethod=None is refused.
    pub chap: Option<Secret>,
    /// The target's own CHAP name and secret, used when the initiator asks for mutual
    /// CHAP (allowed, not required). Without it, mutual CHAP is refused.
    pub mutual: Option<Secret>,
    /// Initiator names allowed to log in; empty means everyone.
    pub initiators: Vec<String>,
}

/// The portal: the targets it offers and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Portal {
    /// The targets.
    pub targets: Vec<TargetEntry>,
    /// What we accept in negotiation.
    pub limits: TargetLimits,
    /// `host:port` sent in SendTargets' TargetAddress (`[v6]:port` for IPv6).
    pub address: String,
    /// Target portal group tag of this portal.
    pub tpgt: u16,
    /// When set, discovery sessions must authenticate with CHAP as this user and secret
    /// (there is no mutual CHAP for discovery sessions).
    pub discovery_chap: Option<Secret>,
}

/// The fields of a Login Request PDU the state machine needs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LoginRequest {
    /// T bit.
    pub transit: bool,
    /// C bit.
    pub cont: bool,
    /// Current stage.
    pub csg: u8,
    /// Next stage (meaningful when `transit`).
    pub nsg: u8,
    /// Version-max.
    pub version_max: u8,
    /// Version-min.
    pub version_min: u8,
    /// ISID.
    pub isid: [u8; 6],
    /// TSIH.
    pub tsih: u16,
    /// Initiator task tag.
    pub itt: u32,
    /// Connection ID.
    pub cid: u16,
    /// CmdSN.
    pub cmdsn: u32,
    /// ExpStatSN.
    pub expstatsn: u32,
    /// The data segment (text), without padding.
    pub data: Vec<u8>,
}

/// The fields of the Login Response PDU to send. The shell fills in the rest: opcode,
/// Version-max/Version-active 0, the request's ISID and ITT, StatSN, ExpCmdSN, MaxCmdSN.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LoginResponse {
    /// T bit.
    pub transit: bool,
    /// C bit (always false: responses are never split).
    pub cont: bool,
    /// Current stage.
    pub csg: u8,
    /// Next stage (0 unless `transit`).
    pub nsg: u8,
    /// Status-Class (0 success, 2 initiator error).
    pub status_class: u8,
    /// Status-Detail.
    pub status_detail: u8,
    /// TSIH: the new session's on the final response, 0 otherwise.
    pub tsih: u16,
    /// Text for the data segment.
    pub data: Vec<u8>,
}

/// The outcome of a successful login.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiated {
    /// The negotiated parameters.
    pub params: Params,
    /// Index into `portal.targets`; `None` for a discovery session.
    pub target: Option<usize>,
    /// The initiator's ISID.
    pub isid: [u8; 6],
    /// The TSIH given to the session.
    pub tsih: u16,
    /// The connection ID.
    pub cid: u16,
}

/// What the shell does after sending the response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Wait for the next Login Request.
    Continue,
    /// The login is complete: enter the full feature phase.
    FullFeature(Negotiated),
    /// The response carries a non-zero status class: send it, then close the connection.
    Close,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Security,
    Operational,
    /// Login finished (full feature or closed): every further request is an error.
    Over,
}

impl Stage {
    fn number(self) -> u8 {
        match self {
            Stage::Security => 0,
            Stage::Operational => 1,
            Stage::Over => 3,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Auth {
    /// No AuthMethod agreed yet.
    Start,
    /// AuthMethod=None agreed, or security skipped where allowed.
    NotNeeded,
    /// AuthMethod=CHAP agreed; waiting for CHAP_A.
    ChapChosen,
    /// Challenge sent; waiting for CHAP_N/CHAP_R.
    Challenged,
    /// CHAP succeeded.
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ids {
    isid: [u8; 6],
    tsih: u16,
    cid: u16,
    itt: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Session {
    discovery: bool,
    target: Option<usize>,
}

/// The login state machine of one connection.
#[derive(Debug)]
pub struct Login {
    challenge: [u8; 16],
    chap_id: u8,
    tsih: u16,
    limits: TargetLimits,
    stage: Stage,
    ids: Option<Ids>,
    pending: Vec<u8>,
    total_text: usize,
    pdus: u32,
    session: Option<Session>,
    auth: Auth,
    params: Params,
    seen: HashSet<String>,
    declared: bool,
}

/// Text pairs, in order.
type Pairs = Vec<(String, String)>;

fn same_name(a: &str, b: &str) -> bool {
    a.eq_ignore_ascii_case(b)
}

fn pair(key: &str, value: impl Into<String>) -> (String, String) {
    (key.to_owned(), value.into())
}

impl Login {
    /// Starts the login of one connection. `challenge`: random bytes for a CHAP
    /// challenge; `chap_id`: a random CHAP identifier; `tsih`: the non-zero TSIH the
    /// session gets if the login completes. The portal's limits are copied so that they
    /// cannot change halfway through a negotiation.
    pub fn new(portal: &Portal, challenge: [u8; 16], chap_id: u8, tsih: u16) -> Login {
        Login {
            challenge,
            chap_id,
            tsih,
            limits: portal.limits,
            stage: Stage::Security,
            ids: None,
            pending: Vec::new(),
            total_text: 0,
            pdus: 0,
            session: None,
            auth: Auth::Start,
            params: Params::default(),
            seen: HashSet::new(),
            declared: false,
        }
    }

    /// Processes one Login Request and returns the response to send and what to do next.
    pub fn step(&mut self, portal: &Portal, req: &LoginRequest) -> (LoginResponse, Step) {
        match self.try_step(portal, req) {
            Ok(r) => r,
            Err(status) => {
                let csg = if self.stage == Stage::Over {
                    req.csg & 3
                } else {
                    self.stage.number()
                };
                self.stage = Stage::Over;
                self.pending = Vec::new();
                let [class, detail] = status.to_be_bytes();
                (
                    LoginResponse {
                        csg,
                        status_class: class,
                        status_detail: detail,
                        ..LoginResponse::default()
                    },
                    Step::Close,
                )
            }
        }
    }

    fn try_step(
        &mut self,
        portal: &Portal,
        req: &LoginRequest,
    ) -> Result<(LoginResponse, Step), u16> {
        if self.stage == Stage::Over {
            return Err(INITIATOR_ERROR);
        }
        self.pdus += 1;
        if self.pdus > MAX_LOGIN_PDUS {
            return Err(INITIATOR_ERROR);
        }
        // Header checks: the stage must be the one we are in (the first request may
        // start in either login stage), T and C are exclusive, and a transit must go to
        // a later, defined stage.
        let first_pdu = self.ids.is_none();
        let csg_ok = if first_pdu {
            req.csg <= 1
        } else {
            req.csg == self.stage.number()
        };
        if !csg_ok || (req.transit && req.cont) {
            return Err(INITIATOR_ERROR);
        }
        if req.transit && !(req.nsg == 1 || req.nsg == 3) || (req.transit && req.nsg <= req.csg) {
            return Err(INITIATOR_ERROR);
        }
        if req.version_min > 0 {
            return Err(UNSUPPORTED_VERSION);
        }
        let ids = Ids {
            isid: req.isid,
            tsih: req.tsih,
            cid: req.cid,
            itt: req.itt,
        };
        match self.ids {
            None => {
                // A non-zero TSIH asks to add a connection to, or reinstate, an existing
                // session; with MaxConnections=1 and ERL 0 there is none to join.
                if req.tsih != 0 {
                    return Err(SESSION_DOES_NOT_EXIST);
                }
                self.stage = if req.csg == 0 {
                    Stage::Security
                } else {
                    Stage::Operational
                };
                self.ids = Some(ids);
            }
            Some(first) if first != ids => return Err(INITIATOR_ERROR),
            Some(_) => {}
        }
        self.total_text = self.total_text.saturating_add(req.data.len());
        if self.pending.len().saturating_add(req.data.len()) > text::MAX_TEXT_LEN
            || self.total_text > MAX_LOGIN_TEXT
        {
            return Err(INITIATOR_ERROR);
        }
        self.pending.extend_from_slice(&req.data);
        let csg = self.stage.number();
        if req.cont {
            return Ok((
                LoginResponse {
                    csg,
                    ..LoginResponse::default()
                },
                Step::Continue,
            ));
        }
        let data = std::mem::take(&mut self.pending);
        let pairs = text::parse(&data).map_err(|_| INITIATOR_ERROR)?;
        let (out, next) = self.process(portal, req, &pairs)?;
        let mut body = Vec::new();
        text::encode(&out, &mut body);
        if body.len() > MAX_LOGIN_RESPONSE {
            return Err(INITIATOR_ERROR);
        }
        let mut rsp = LoginResponse {
            csg,
            data: body,
            ..LoginResponse::default()
        };
        match next {
            None => Ok((rsp, Step::Continue)),
            Some(1) => {
                rsp.transit = true;
                rsp.nsg = 1;
                self.stage = Stage::Operational;
                Ok((rsp, Step::Continue))
            }
            Some(_) => {
                rsp.transit = true;
                rsp.nsg = 3;
                rsp.tsih = self.tsih;
                self.stage = Stage::Over;
                let mut params = self.params.clone();
                params.finish();
                let session = self.session.ok_or(INITIATOR_ERROR)?;
                Ok((
                    rsp,
                    Step::FullFeature(Negotiated {
                        params,
                        target: session.target,
                        isid: ids.isid,
                        tsih: self.tsih,
                        cid: ids.cid,
                    }),
                ))
            }
        }
    }

    /// The CHAP secret the initiator must prove, and the target's mutual secret.
    fn secrets<'p>(&self, portal: &'p Portal) -> (Option<&'p Secret>, Option<&'p Secret>) {
        match self.session {
            Some(Session {
                target: Some(t), ..
            }) => match portal.targets.get(t) {
                Some(entry) => (entry.chap.as_ref(), entry.mutual.as_ref()),
                None => (None, None),
            },
            Some(Session {
                discovery: true, ..
            }) => (portal.discovery_chap.as_ref(), None),
            _ => (None, None),
        }
    }

    /// Handles the leading request's declarations: who is logging in, to what.
    fn open_session(
        &mut self,
        portal: &Portal,
        pairs: &[(String, String)],
        out: &mut Vec<(String, String)>,
    ) -> Result<(), u16> {
        let get = |key: &str| {
            pairs
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
        };
        let initiator = get("InitiatorName").ok_or(MISSING_PARAMETER)?;
        if initiator.is_empty() || initiator.len() > MAX_NAME_LEN {
            return Err(INITIATOR_ERROR);
        }
        let discovery = match get("SessionType") {
            None | Some("Normal") => false,
            Some("Discovery") => true,
            Some(_) => return Err(SESSION_TYPE_UNSUPPORTED),
        };
        let target = if discovery {
            None
        } else {
            let name = get("TargetName").ok_or(MISSING_PARAMETER)?;
            let index = portal
                .targets
                .iter()
                .position(|t| same_name(&t.name, name))
                .ok_or(NOT_FOUND)?;
            let entry = &portal.targets[index];
            if !entry.initiators.is_empty()
                && !entry.initiators.iter().any(|i| same_name(i, initiator))
            {
                return Err(AUTHORIZATION_FAILURE);
            }
            Some(index)
        };
        self.params.initiator_name = initiator.to_owned();
        self.params.initiator_alias = get("InitiatorAlias").map(str::to_owned);
        self.params.discovery = discovery;
        self.params.target_name = target
            .and_then(|t| portal.targets.get(t))
            .map(|t| t.name.clone());
        self.session = Some(Session { discovery, target });
        // These keys are sent once, in the leading request; a repeat later is an error.
        for (key, _) in pairs {
            if matches!(
                params::key_kind(key),
                KeyKind::LoginDeclarative | KeyKind::InitiatorAlias
            ) {
                self.seen.insert(key.clone());
            }
        }
        // RFC 7143 13.9: TargetPortalGroupTag goes in the first response of a session
        // that named its target.
        if let Some(entry) = target.and_then(|t| portal.targets.get(t)) {
            out.push(pair("TargetPortalGroupTag", portal.tpgt.to_string()));
            if let Some(alias) = &entry.alias {
                out.push(pair("TargetAlias", alias.clone()));
            }
        }
        Ok(())
    }

    /// Processes one complete request text. Returns the response pairs and the stage to
    /// transit to, if we agree to transit.
    fn process(
        &mut self,
        portal: &Portal,
        req: &LoginRequest,
        pairs: &[(String, String)],
    ) -> Result<(Pairs, Option<u8>), u16> {
        let mut out = Vec::new();
        let leading = self.session.is_none();
        if leading {
            self.open_session(portal, pairs, &mut out)?;
            if self.stage == Stage::Operational {
                // Skipping security is allowed only when no authentication is required.
                if self.secrets(portal).0.is_some() {
                    return Err(AUTHENTICATION_FAILURE);
                }
                self.auth = Auth::NotNeeded;
            }
        }
        let mut security: Vec<(&str, &str)> = Vec::new();
        let mut operational: Vec<(String, String)> = Vec::new();
        let mut unknown: Vec<(String, String)> = Vec::new();
        for (key, value) in pairs {
            let kind = params::key_kind(key);
            if leading && matches!(kind, KeyKind::LoginDeclarative | KeyKind::InitiatorAlias) {
                continue; // handled by open_session
            }
            if !self.seen.insert(key.clone()) {
                return Err(INITIATOR_ERROR);
            }
            match (kind, self.stage) {
                (KeyKind::Security, Stage::Security) => security.push((key, value)),
                (KeyKind::Operational | KeyKind::MaxRecvDataSegmentLength, Stage::Operational) => {
                    operational.push((key.clone(), value.clone()));
                }
                (KeyKind::InitiatorAlias, _) => {
                    self.params.initiator_alias = Some(value.clone());
                }
                (KeyKind::Unknown, _) => unknown.push(pair(key, NOT_UNDERSTOOD)),
                _ => return Err(INITIATOR_ERROR),
            }
        }
        let next = match self.stage {
            Stage::Security => {
                self.security(portal, &security, &mut out)?;
                if !req.transit {
                    None
                } else {
                    match self.auth {
                        Auth::NotNeeded | Auth::Done => Some(1),
                        Auth::Start if self.secrets(portal).0.is_none() => {
                            // No AuthMethod offered and none required: as if None.
                            self.auth = Auth::NotNeeded;
                            Some(1)
                        }
                        // Trying to leave security without authenticating.
                        Auth::Start => return Err(AUTHENTICATION_FAILURE),
                        // CHAP under way: stay until it completes.
                        Auth::ChapChosen | Auth::Challenged => None,
                    }
                }
            }
            Stage::Operational => {
                let answers = params::negotiate(&mut self.params, &self.limits, &operational)
                    .map_err(|_| INITIATOR_ERROR)?;
                out.extend(answers);
                if !self.declared {
                    // Declarative in each direction: we declare ours whether or not the
                    // initiator declared its own.
                    let ours = params::declared_mrdsl(&self.limits);
                    self.params.target_mrdsl = ours;
                    out.push(pair("MaxRecvDataSegmentLength", ours.to_string()));
                    self.declared = true;
                }
                req.transit.then_some(3)
            }
            Stage::Over => return Err(INITIATOR_ERROR),
        };
        out.extend(unknown);
        Ok((out, next))
    }

    /// The security stage's keys: AuthMethod, then the CHAP exchange.
    fn security(
        &mut self,
        portal: &Portal,
        keys: &[(&str, &str)],
        out: &mut Vec<(String, String)>,
    ) -> Result<(), u16> {
        let get = |key: &str| keys.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
        let (required, mutual) = self.secrets(portal);
        if let Some(list) = get("AuthMethod") {
            if self.auth != Auth::Start {
                return Err(INITIATOR_ERROR);
            }
            let offered = |m: &str| list.split(',').any(|v| v == m);
            if required.is_some() {
                if !offered("CHAP") {
                    return Err(AUTHENTICATION_FAILURE);
                }
                self.auth = Auth::ChapChosen;
                out.push(pair("AuthMethod", "CHAP"));
            } else {
                // Without a configured secret there is nothing to check a CHAP answer
                // against: None is the only method we can agree to.
                if !offered("None") {
                    return Err(AUTHENTICATION_FAILURE);
                }
                self.auth = Auth::NotNeeded;
                out.push(pair("AuthMethod", "None"));
            }
        }
        if let Some(list) = get("CHAP_A") {
            if self.auth != Auth::ChapChosen {
                return Err(INITIATOR_ERROR);
            }
            if !chap::offers_md5(list) {
                return Err(AUTHENTICATION_FAILURE);
            }
            out.push(pair("CHAP_A", chap::CHAP_MD5.to_string()));
            out.push(pair("CHAP_I", self.chap_id.to_string()));
            out.push(pair("CHAP_C", chap::encode_hex(&self.challenge)));
            self.auth = Auth::Challenged;
        }
        let answer = chap::Answer {
            name: get("CHAP_N"),
            response: get("CHAP_R"),
            id: get("CHAP_I"),
            challenge: get("CHAP_C"),
        };
        if answer.name.is_some()
            || answer.response.is_some()
            || answer.id.is_some()
            || answer.challenge.is_some()
        {
            if self.auth != Auth::Challenged {
                return Err(INITIATOR_ERROR);
            }
            let secret = required.ok_or(AUTHENTICATION_FAILURE)?;
            let reply = chap::verify(self.chap_id, &self.challenge, secret, mutual, &answer)
                .map_err(|_| AUTHENTICATION_FAILURE)?;
            out.extend(reply);
            self.auth = Auth::Done;
        }
        Ok(())
    }
}

/// Whether `initiator` may see or use `entry`.
fn allowed(entry: &TargetEntry, initiator: &str) -> bool {
    entry.initiators.is_empty() || entry.initiators.iter().any(|i| same_name(i, initiator))
}

/// Answers a full-feature Text Request's (already concatenated) data.
///
/// - `SendTargets=All` (discovery sessions only; `Reject` in a normal session): every
///   target the initiator's ACL allows. `SendTargets=<name>`: that target if it exists
///   and is allowed (nothing otherwise). `SendTargets=` (empty, normal sessions): the
///   session's target. Each target is `TargetName=<name>` then
///   `TargetAddress=<portal.address>,<tpgt>`.
/// - `MaxRecvDataSegmentLength` declarations update `params.initiator_mrdsl` (an invalid
///   one is answered `Reject` and ignored); `InitiatorAlias` updates the alias.
/// - Keys that may only be negotiated during login are answered `Reject`; unknown keys
///   `NotUnderstood`. A discovery session may send only SendTargets and these two
///   declarations; anything else it sends is answered `Reject`.
///
/// Errors are protocol errors of the initiator (malformed text, a repeated key, text
/// over [`text::MAX_TEXT_LEN`]): the shell answers with a Reject PDU. The answer may be
/// longer than the initiator's MaxRecvDataSegmentLength; the shell splits it across Text
/// Responses with the C bit.
pub fn text_answer(
    portal: &Portal,
    params: &mut Params,
    session_target: Option<usize>,
    data: &[u8],
) -> Result<Vec<u8>, TextError> {
    let pairs = text::parse(data)?;
    let mut out = Vec::new();
    let list_target = |entry: &TargetEntry, out: &mut Vec<u8>| {
        text::encode_pair("TargetName", &entry.name, out);
        let address = format!("{},{}", portal.address, portal.tpgt);
        text::encode_pair("TargetAddress", &address, out);
    };
    for (key, value) in &pairs {
        match params::key_kind(key) {
            KeyKind::SendTargets => {
                match value.as_str() {
                    "All" if params.discovery => {
                        for entry in &portal.targets {
                            if allowed(entry, &params.initiator_name) {
                                list_target(entry, &mut out);
                            }
                        }
                    }
                    "All" => text::encode_pair(key, REJECT, &mut out),
                    "" => {
                        if let Some(entry) = session_target.and_then(|t| portal.targets.get(t)) {
                            if !params.discovery {
                                list_target(entry, &mut out);
                            }
                        }
                    }
                    name => {
                        if let Some(entry) = portal.targets.iter().find(|t| {
                            same_name(&t.name, name) && allowed(t, &params.initiator_name)
                        }) {
                            list_target(entry, &mut out);
                        }
                    }
                }
            }
            KeyKind::MaxRecvDataSegmentLength => {
                match params::parse_number(value).and_then(|v| u32::try_from(v).ok()) {
                    Some(v) if (params::MIN_DATA_LEN..=params::MAX_DATA_LEN).contains(&v) => {
                        params.initiator_mrdsl = v;
                    }
                    _ => text::encode_pair(key, REJECT, &mut out),
                }
            }
            KeyKind::InitiatorAlias => params.initiator_alias = Some(value.clone()),
            KeyKind::Unknown => text::encode_pair(key, NOT_UNDERSTOOD, &mut out),
            _ => text::encode_pair(key, REJECT, &mut out),
        }
    }
    Ok(out)
}
