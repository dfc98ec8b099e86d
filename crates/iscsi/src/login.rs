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

impl LoginRequest {
    /// The login fields of a parsed PDU with its data segment; None for any other PDU.
    pub fn from_pdu(request: &crate::pdu::Request, data: Vec<u8>) -> Option<LoginRequest> {
        match *request {
            crate::pdu::Request::Login {
                transit,
                cont,
                csg,
                nsg,
                version_max,
                version_min,
                isid,
                tsih,
                itt,
                cid,
                cmdsn,
                expstatsn,
            } => Some(LoginRequest {
                transit,
                cont,
                csg,
                nsg,
                version_max,
                version_min,
                isid,
                tsih,
                itt,
                cid,
                cmdsn,
                expstatsn,
                data,
            }),
            _ => None,
        }
    }
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
        let ids = self.admit(req)?;
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

    /// Checks a request's header against the login so far and records the session's
    /// identifiers with the first one: the stage must be the one we are in (the first
    /// request may start in either login stage), T and C are exclusive, a transit must go
    /// to a later, defined stage, and every request carries the first one's identifiers.
    fn admit(&mut self, req: &LoginRequest) -> Result<Ids, u16> {
        self.pdus += 1;
        if self.pdus > MAX_LOGIN_PDUS {
            return Err(INITIATOR_ERROR);
        }
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
        Ok(ids)
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

#[cfg(test)]
mod tests {
    use super::*;
    use md5::{Digest, Md5};

    const INIT: &str = "iqn.2024-01.org.example:init";
    const OPEN: &str = "iqn.2024-01.org.raidd:open";
    const SECURE: &str = "iqn.2024-01.org.raidd:secure";
    const ACL: &str = "iqn.2024-01.org.raidd:acl";
    const CHALLENGE: [u8; 16] = [7; 16];
    const CHAP_ID: u8 = 42;
    const TSIH: u16 = 0x1234;
    const ISID: [u8; 6] = [0x80, 1, 2, 3, 4, 5];

    fn secret(user: &str, secret: &str) -> Secret {
        Secret {
            user: user.into(),
            secret: secret.into(),
        }
    }

    fn portal() -> Portal {
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
                    chap: Some(secret("alice", "alicesecret1")),
                    mutual: Some(secret("raidd", "targetsecret")),
                    initiators: vec![],
                },
                TargetEntry {
                    name: ACL.into(),
                    alias: None,
                    chap: None,
                    mutual: None,
                    initiators: vec!["iqn.2024-01.org.example:other".into(), INIT.into()],
                },
            ],
            limits: TargetLimits::default(),
            address: "127.0.0.1:3260".into(),
            tpgt: 1,
            discovery_chap: None,
        }
    }

    fn text_of(pairs: &[(&str, &str)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (k, v) in pairs {
            text::encode_pair(k, v, &mut out);
        }
        out
    }

    fn req(csg: u8, nsg: u8, transit: bool, pairs: &[(&str, &str)]) -> LoginRequest {
        LoginRequest {
            transit,
            cont: false,
            csg,
            nsg,
            version_max: 0,
            version_min: 0,
            isid: ISID,
            tsih: 0,
            itt: 9,
            cid: 1,
            cmdsn: 5,
            expstatsn: 0,
            data: text_of(pairs),
        }
    }

    fn keys(rsp: &LoginResponse) -> Vec<(String, String)> {
        text::parse(&rsp.data).expect("our response parses")
    }

    fn value(rsp: &LoginResponse, key: &str) -> Option<String> {
        keys(rsp)
            .into_iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }

    fn status(rsp: &LoginResponse) -> u16 {
        u16::from_be_bytes([rsp.status_class, rsp.status_detail])
    }

    fn login() -> Login {
        Login::new(&portal(), CHALLENGE, CHAP_ID, TSIH)
    }

    /// Runs `r` through a fresh login and expects it to close with `want`.
    fn closes_with(portal: &Portal, requests: &[LoginRequest], want: u16) {
        let mut l = Login::new(portal, CHALLENGE, CHAP_ID, TSIH);
        for (i, r) in requests.iter().enumerate() {
            let (rsp, step) = l.step(portal, r);
            if i + 1 < requests.len() {
                assert_eq!(step, Step::Continue, "request {i} continues: {rsp:?}");
            } else {
                assert_eq!(step, Step::Close, "last request closes");
                assert_eq!(status(&rsp), want, "status");
                assert_eq!(rsp.status_class, 2);
                assert!(!rsp.transit && rsp.data.is_empty() && rsp.tsih == 0);
            }
        }
    }

    fn md5_hex(id: u8, secret: &str, challenge: &[u8]) -> String {
        let mut buf = vec![id];
        buf.extend_from_slice(secret.as_bytes());
        buf.extend_from_slice(challenge);
        let d: [u8; 16] = Md5::digest(&buf).into();
        d.iter()
            .fold(String::from("0x"), |s, b| s + &format!("{b:02X}"))
    }

    fn full(step: Step) -> Negotiated {
        match step {
            Step::FullFeature(n) => n,
            other => panic!("expected full feature, got {other:?}"),
        }
    }

    #[test]
    fn single_pdu_operational_login() {
        // libiscsi without CHAP: everything in one request starting at stage 1.
        let p = portal();
        let mut l = login();
        let (rsp, step) = l.step(
            &p,
            &req(
                1,
                3,
                true,
                &[
                    ("InitiatorName", INIT),
                    ("InitiatorAlias", "host"),
                    ("TargetName", OPEN),
                    ("SessionType", "Normal"),
                    ("HeaderDigest", "None,CRC32C"),
                    ("DataDigest", "CRC32C,None"),
                    ("InitialR2T", "No"),
                    ("ImmediateData", "Yes"),
                    ("MaxBurstLength", "262144"),
                    ("FirstBurstLength", "131072"),
                    ("MaxRecvDataSegmentLength", "65536"),
                    ("ErrorRecoveryLevel", "0"),
                    ("IFMarker", "No"),
                    ("OFMarker", "No"),
                    ("MaxConnections", "1"),
                    ("MaxOutstandingR2T", "1"),
                    ("X-com.example.Thing", "1"),
                ],
            ),
        );
        assert_eq!(status(&rsp), 0);
        assert!(rsp.transit && !rsp.cont);
        assert_eq!((rsp.csg, rsp.nsg, rsp.tsih), (1, 3, TSIH));
        assert_eq!(value(&rsp, "TargetPortalGroupTag").as_deref(), Some("1"));
        assert_eq!(value(&rsp, "TargetAlias").as_deref(), Some("open disk"));
        assert_eq!(value(&rsp, "HeaderDigest").as_deref(), Some("None"));
        assert_eq!(value(&rsp, "DataDigest").as_deref(), Some("CRC32C"));
        assert_eq!(value(&rsp, "InitialR2T").as_deref(), Some("Yes"));
        assert_eq!(value(&rsp, "FirstBurstLength").as_deref(), Some("65536"));
        assert_eq!(
            value(&rsp, "MaxRecvDataSegmentLength").as_deref(),
            Some("262144")
        );
        assert_eq!(
            value(&rsp, "X-com.example.Thing").as_deref(),
            Some("NotUnderstood")
        );
        // Declarations get no answer.
        assert_eq!(value(&rsp, "InitiatorName"), None);
        assert_eq!(value(&rsp, "TargetName"), None);
        let n = full(step);
        assert_eq!((n.target, n.isid, n.tsih, n.cid), (Some(0), ISID, TSIH, 1));
        assert_eq!(n.params.initiator_name, INIT);
        assert_eq!(n.params.initiator_alias.as_deref(), Some("host"));
        assert_eq!(n.params.target_name.as_deref(), Some(OPEN));
        assert!(!n.params.discovery && !n.params.header_digest && n.params.data_digest);
        assert_eq!(n.params.initiator_mrdsl, 65536);
        assert_eq!(n.params.target_mrdsl, 262144);
        assert_eq!(n.params.first_burst_length, 65536);
        // The login is over: anything more closes.
        let (rsp, step) = l.step(&p, &req(1, 3, true, &[]));
        assert_eq!((step, status(&rsp)), (Step::Close, INITIATOR_ERROR));
    }

    #[test]
    fn security_none_then_operational() {
        // open-iscsi without CHAP: AuthMethod=None in stage 0, then the operational keys.
        let p = portal();
        let mut l = login();
        let (rsp, step) = l.step(
            &p,
            &req(
                0,
                1,
                true,
                &[
                    ("InitiatorName", INIT),
                    ("TargetName", OPEN),
                    ("AuthMethod", "None"),
                ],
            ),
        );
        assert_eq!(step, Step::Continue);
        assert!(rsp.transit);
        assert_eq!((rsp.csg, rsp.nsg, rsp.tsih), (0, 1, 0));
        assert_eq!(value(&rsp, "AuthMethod").as_deref(), Some("None"));
        assert_eq!(value(&rsp, "TargetPortalGroupTag").as_deref(), Some("1"));
        // Our MaxRecvDataSegmentLength is operational: not declared in stage 0.
        assert_eq!(value(&rsp, "MaxRecvDataSegmentLength"), None);
        let (rsp, step) = l.step(&p, &req(1, 3, true, &[("MaxBurstLength", "4096")]));
        assert_eq!(
            value(&rsp, "MaxRecvDataSegmentLength").as_deref(),
            Some("262144")
        );
        assert_eq!(
            value(&rsp, "TargetPortalGroupTag"),
            None,
            "only in the first response"
        );
        let n = full(step);
        assert_eq!(n.params.max_burst_length, 4096);
        assert_eq!(
            n.params.first_burst_length, 4096,
            "FirstBurstLength <= MaxBurstLength"
        );
    }

    #[test]
    fn security_to_full_feature_goes_through_operational() {
        let p = portal();
        let mut l = login();
        let (rsp, step) = l.step(
            &p,
            &req(0, 3, true, &[("InitiatorName", INIT), ("TargetName", OPEN)]),
        );
        assert_eq!(step, Step::Continue);
        assert!(rsp.transit);
        assert_eq!(rsp.nsg, 1);
        // The initiator must now be in stage 1.
        let (rsp, step) = l.step(&p, &req(0, 1, true, &[]));
        assert_eq!((step, status(&rsp)), (Step::Close, INITIATOR_ERROR));
    }

    #[test]
    fn operational_stage_without_transit_waits() {
        let p = portal();
        let mut l = login();
        let (rsp, step) = l.step(
            &p,
            &req(
                1,
                0,
                false,
                &[("InitiatorName", INIT), ("TargetName", OPEN)],
            ),
        );
        assert_eq!(step, Step::Continue);
        assert!(!rsp.transit);
        assert_eq!(rsp.csg, 1);
        let (rsp, step) = l.step(&p, &req(1, 3, true, &[("ImmediateData", "No")]));
        assert_eq!(value(&rsp, "ImmediateData").as_deref(), Some("No"));
        assert_eq!(
            value(&rsp, "MaxRecvDataSegmentLength"),
            None,
            "declared once"
        );
        assert!(!full(step).params.immediate_data);
    }

    #[test]
    fn leading_request_checks() {
        let p = portal();
        closes_with(
            &p,
            &[req(1, 3, true, &[("TargetName", OPEN)])],
            MISSING_PARAMETER,
        );
        closes_with(
            &p,
            &[req(1, 3, true, &[("InitiatorName", INIT)])],
            MISSING_PARAMETER,
        );
        closes_with(
            &p,
            &[req(
                1,
                3,
                true,
                &[("InitiatorName", INIT), ("TargetName", "iqn.x:none")],
            )],
            NOT_FOUND,
        );
        closes_with(
            &p,
            &[req(
                1,
                3,
                true,
                &[
                    ("InitiatorName", "iqn.2024-01.org.example:stranger"),
                    ("TargetName", ACL),
                ],
            )],
            AUTHORIZATION_FAILURE,
        );
        closes_with(
            &p,
            &[req(
                1,
                3,
                true,
                &[("InitiatorName", INIT), ("SessionType", "Weird")],
            )],
            SESSION_TYPE_UNSUPPORTED,
        );
        closes_with(
            &p,
            &[req(
                1,
                3,
                true,
                &[("InitiatorName", ""), ("TargetName", OPEN)],
            )],
            INITIATOR_ERROR,
        );
        // Allowed by the ACL, compared case-insensitively.
        let mut l = login();
        let upper = INIT.to_ascii_uppercase();
        let (_, step) = l.step(
            &p,
            &req(
                1,
                3,
                true,
                &[("InitiatorName", &upper), ("TargetName", ACL)],
            ),
        );
        assert_eq!(full(step).target, Some(2));
    }

    #[test]
    fn header_checks() {
        let p = portal();
        let ok = || req(1, 3, true, &[("InitiatorName", INIT), ("TargetName", OPEN)]);
        closes_with(
            &p,
            &[LoginRequest {
                version_min: 1,
                ..ok()
            }],
            UNSUPPORTED_VERSION,
        );
        closes_with(
            &p,
            &[LoginRequest { tsih: 5, ..ok() }],
            SESSION_DOES_NOT_EXIST,
        );
        closes_with(&p, &[LoginRequest { cont: true, ..ok() }], INITIATOR_ERROR);
        closes_with(&p, &[LoginRequest { nsg: 1, ..ok() }], INITIATOR_ERROR);
        closes_with(&p, &[LoginRequest { nsg: 2, ..ok() }], INITIATOR_ERROR);
        closes_with(&p, &[LoginRequest { csg: 3, ..ok() }], INITIATOR_ERROR);
        closes_with(&p, &[LoginRequest { csg: 2, ..ok() }], INITIATOR_ERROR);
        closes_with(
            &p,
            &[LoginRequest {
                data: b"junk".to_vec(),
                ..ok()
            }],
            INITIATOR_ERROR,
        );
        // An unsupported version is refused whatever the stage.
        let stage0 = req(
            0,
            1,
            false,
            &[("InitiatorName", INIT), ("TargetName", OPEN)],
        );
        closes_with(
            &p,
            &[
                stage0.clone(),
                LoginRequest {
                    version_min: 2,
                    ..stage0.clone()
                },
            ],
            UNSUPPORTED_VERSION,
        );
    }

    #[test]
    fn identifiers_must_not_change() {
        let p = portal();
        let first = req(
            0,
            1,
            false,
            &[("InitiatorName", INIT), ("TargetName", OPEN)],
        );
        let next = req(0, 1, true, &[("AuthMethod", "None")]);
        let changes = [
            LoginRequest {
                isid: [0; 6],
                ..next.clone()
            },
            LoginRequest {
                itt: 10,
                ..next.clone()
            },
            LoginRequest {
                cid: 2,
                ..next.clone()
            },
            LoginRequest {
                tsih: TSIH,
                ..next.clone()
            },
        ];
        for changed in changes {
            closes_with(&p, &[first.clone(), changed], INITIATOR_ERROR);
        }
        // Unchanged, it goes on.
        let mut l = login();
        l.step(&p, &first);
        assert_eq!(l.step(&p, &next).1, Step::Continue);
    }

    #[test]
    fn continuation_accumulates_text() {
        let p = portal();
        let mut l = login();
        let whole = text_of(&[
            ("InitiatorName", INIT),
            ("TargetName", OPEN),
            ("MaxBurstLength", "8192"),
        ]);
        // Split inside a key and inside a value.
        let cuts = [0, 7, 30, whole.len()];
        for w in 0..3 {
            let last = w == 2;
            let r = LoginRequest {
                transit: last,
                cont: !last,
                data: whole[cuts[w]..cuts[w + 1]].to_vec(),
                ..req(1, 3, false, &[])
            };
            let (rsp, step) = l.step(&p, &r);
            if last {
                assert_eq!(value(&rsp, "MaxBurstLength").as_deref(), Some("8192"));
                assert_eq!(full(step).params.max_burst_length, 8192);
            } else {
                assert_eq!(step, Step::Continue);
                assert_eq!(
                    rsp,
                    LoginResponse {
                        csg: 1,
                        ..LoginResponse::default()
                    }
                );
            }
        }
    }

    #[test]
    fn continuation_is_bounded() {
        let p = portal();
        let chunk = LoginRequest {
            cont: true,
            data: vec![b'a'; 16384],
            ..req(1, 0, false, &[])
        };
        let mut l = login();
        for _ in 0..4 {
            assert_eq!(l.step(&p, &chunk).1, Step::Continue);
        }
        let (rsp, step) = l.step(&p, &chunk);
        assert_eq!((step, status(&rsp)), (Step::Close, INITIATOR_ERROR));
        // Empty continuations cannot go on for ever either.
        let empty = LoginRequest {
            cont: true,
            data: vec![],
            ..chunk
        };
        let mut l = login();
        let mut closed = false;
        for _ in 0..=MAX_LOGIN_PDUS {
            closed = l.step(&p, &empty).1 == Step::Close;
        }
        assert!(closed);
    }

    #[test]
    fn keys_in_the_wrong_stage_or_repeated() {
        let p = portal();
        let lead = |extra: (&'static str, &'static str), csg: u8| {
            req(
                csg,
                csg + 1,
                false,
                &[("InitiatorName", INIT), ("TargetName", OPEN), extra],
            )
        };
        closes_with(&p, &[lead(("MaxBurstLength", "8192"), 0)], INITIATOR_ERROR);
        closes_with(&p, &[lead(("AuthMethod", "None"), 1)], INITIATOR_ERROR);
        closes_with(&p, &[lead(("SendTargets", "All"), 1)], INITIATOR_ERROR);
        closes_with(&p, &[lead(("TargetAlias", "x"), 1)], INITIATOR_ERROR);
        closes_with(
            &p,
            &[
                lead(("MaxBurstLength", "8192"), 1),
                req(1, 3, true, &[("MaxBurstLength", "8192")]),
            ],
            INITIATOR_ERROR,
        );
        closes_with(
            &p,
            &[
                lead(("X-a", "1"), 1),
                req(1, 3, true, &[("InitiatorName", INIT)]),
            ],
            INITIATOR_ERROR,
        );
        // A bad MaxRecvDataSegmentLength declaration cannot be answered: initiator error.
        closes_with(
            &p,
            &[lead(("MaxRecvDataSegmentLength", "100"), 1)],
            INITIATOR_ERROR,
        );
        // InitiatorAlias may come later.
        let mut l = login();
        l.step(&p, &lead(("X-a", "1"), 1));
        let (_, step) = l.step(&p, &req(1, 3, true, &[("InitiatorAlias", "late")]));
        assert_eq!(full(step).params.initiator_alias.as_deref(), Some("late"));
    }

    #[test]
    fn unknown_keys_in_security_stage_not_understood() {
        let p = portal();
        let mut l = login();
        let (rsp, _) = l.step(
            &p,
            &req(
                0,
                1,
                true,
                &[
                    ("InitiatorName", INIT),
                    ("TargetName", OPEN),
                    ("X#org.x.Y", "1"),
                ],
            ),
        );
        assert_eq!(value(&rsp, "X#org.x.Y").as_deref(), Some("NotUnderstood"));
        assert!(
            rsp.transit,
            "no AuthMethod and none required: treated as None"
        );
    }

    #[test]
    fn oversized_response_is_refused() {
        // Thousands of unknown keys would need a response over 8192 bytes.
        let p = portal();
        let mut data = text_of(&[("InitiatorName", INIT), ("TargetName", OPEN)]);
        for i in 0..1000 {
            text::encode_pair(&format!("X-{i}"), "1", &mut data);
        }
        closes_with(
            &p,
            &[LoginRequest {
                data,
                ..req(1, 3, true, &[])
            }],
            INITIATOR_ERROR,
        );
    }

    fn chap_login(p: &Portal, target: &str) -> (Login, LoginResponse) {
        let mut l = Login::new(p, CHALLENGE, CHAP_ID, TSIH);
        let mut lead = vec![("InitiatorName", INIT), ("AuthMethod", "CHAP,None")];
        if target.is_empty() {
            lead.push(("SessionType", "Discovery"));
        } else {
            lead.push(("TargetName", target));
        }
        let (rsp, step) = l.step(p, &req(0, 1, true, &lead));
        assert_eq!(step, Step::Continue);
        assert!(!rsp.transit, "no transit before authentication");
        assert_eq!(value(&rsp, "AuthMethod").as_deref(), Some("CHAP"));
        let (rsp, step) = l.step(p, &req(0, 1, false, &[("CHAP_A", "7,5")]));
        assert_eq!(step, Step::Continue);
        assert!(!rsp.transit);
        (l, rsp)
    }

    #[test]
    fn chap_login_succeeds() {
        let p = portal();
        let (mut l, rsp) = chap_login(&p, SECURE);
        assert_eq!(value(&rsp, "CHAP_A").as_deref(), Some("5"));
        assert_eq!(value(&rsp, "CHAP_I").as_deref(), Some("42"));
        assert_eq!(
            value(&rsp, "CHAP_C").as_deref(),
            Some("0x07070707070707070707070707070707")
        );
        let r = md5_hex(CHAP_ID, "alicesecret1", &CHALLENGE);
        let (rsp, step) = l.step(&p, &req(0, 1, true, &[("CHAP_N", "alice"), ("CHAP_R", &r)]));
        assert_eq!(step, Step::Continue);
        assert_eq!(status(&rsp), 0);
        assert!(rsp.transit);
        assert_eq!((rsp.csg, rsp.nsg), (0, 1));
        assert_eq!(value(&rsp, "CHAP_N"), None, "no mutual CHAP asked");
        let (_, step) = l.step(&p, &req(1, 3, true, &[]));
        assert_eq!(full(step).target, Some(1));
    }

    #[test]
    fn chap_answer_without_transit_then_transit() {
        let p = portal();
        let (mut l, _) = chap_login(&p, SECURE);
        let r = md5_hex(CHAP_ID, "alicesecret1", &CHALLENGE);
        let (rsp, _) = l.step(
            &p,
            &req(0, 1, false, &[("CHAP_N", "alice"), ("CHAP_R", &r)]),
        );
        assert!(!rsp.transit);
        let (rsp, _) = l.step(&p, &req(0, 1, true, &[]));
        assert!(rsp.transit);
    }

    #[test]
    fn chap_failures() {
        let p = portal();
        let bad = md5_hex(CHAP_ID, "wrong", &CHALLENGE);
        let good = md5_hex(CHAP_ID, "alicesecret1", &CHALLENGE);
        for answer in [
            vec![("CHAP_N", "alice"), ("CHAP_R", bad.as_str())],
            vec![("CHAP_N", "mallory"), ("CHAP_R", good.as_str())],
            vec![("CHAP_N", "alice")],
            vec![("CHAP_N", "alice"), ("CHAP_R", "0xzz")],
        ] {
            let (mut l, _) = chap_login(&p, SECURE);
            let (rsp, step) = l.step(&p, &req(0, 1, true, &answer));
            assert_eq!((step, status(&rsp)), (Step::Close, AUTHENTICATION_FAILURE));
        }
        let lead = |auth: &'static str| {
            req(
                0,
                1,
                true,
                &[
                    ("InitiatorName", INIT),
                    ("TargetName", SECURE),
                    ("AuthMethod", auth),
                ],
            )
        };
        // The target requires CHAP: None is refused, and so is skipping security.
        closes_with(&p, &[lead("None")], AUTHENTICATION_FAILURE);
        closes_with(
            &p,
            &[req(
                1,
                3,
                true,
                &[("InitiatorName", INIT), ("TargetName", SECURE)],
            )],
            AUTHENTICATION_FAILURE,
        );
        closes_with(
            &p,
            &[req(
                0,
                1,
                true,
                &[("InitiatorName", INIT), ("TargetName", SECURE)],
            )],
            AUTHENTICATION_FAILURE,
        );
        // No MD5 among the algorithms.
        closes_with(
            &p,
            &[lead("CHAP"), req(0, 1, false, &[("CHAP_A", "7")])],
            AUTHENTICATION_FAILURE,
        );
        // CHAP keys out of sequence.
        closes_with(
            &p,
            &[
                lead("CHAP"),
                req(0, 1, true, &[("CHAP_N", "alice"), ("CHAP_R", &good)]),
            ],
            INITIATOR_ERROR,
        );
        // A target without a secret cannot do CHAP.
        closes_with(
            &p,
            &[req(
                0,
                1,
                true,
                &[
                    ("InitiatorName", INIT),
                    ("TargetName", OPEN),
                    ("AuthMethod", "CHAP"),
                ],
            )],
            AUTHENTICATION_FAILURE,
        );
    }

    #[test]
    fn chap_algorithm_in_the_leading_request() {
        let p = portal();
        let mut l = login();
        let (rsp, _) = l.step(
            &p,
            &req(
                0,
                1,
                true,
                &[
                    ("InitiatorName", INIT),
                    ("TargetName", SECURE),
                    ("AuthMethod", "CHAP"),
                    ("CHAP_A", "5"),
                ],
            ),
        );
        assert_eq!(value(&rsp, "AuthMethod").as_deref(), Some("CHAP"));
        assert_eq!(value(&rsp, "CHAP_I").as_deref(), Some("42"));
        assert!(!rsp.transit);
    }

    #[test]
    fn mutual_chap() {
        let p = portal();
        let (mut l, _) = chap_login(&p, SECURE);
        let r = md5_hex(CHAP_ID, "alicesecret1", &CHALLENGE);
        let their_c = [0xa5u8; 16];
        let c_hex = their_c
            .iter()
            .fold(String::from("0x"), |s, b| s + &format!("{b:02x}"));
        let (rsp, step) = l.step(
            &p,
            &req(
                0,
                1,
                true,
                &[
                    ("CHAP_N", "alice"),
                    ("CHAP_R", &r),
                    ("CHAP_I", "3"),
                    ("CHAP_C", &c_hex),
                ],
            ),
        );
        assert_eq!(step, Step::Continue);
        assert!(rsp.transit);
        assert_eq!(value(&rsp, "CHAP_N").as_deref(), Some("raidd"));
        // md5_hex writes upper case (as libiscsi does); we send lower case.
        let want = md5_hex(3, "targetsecret", &their_c).to_ascii_lowercase();
        assert_eq!(value(&rsp, "CHAP_R"), Some(want));
        // Reflection: the initiator hands our own challenge back.
        let (mut l, _) = chap_login(&p, SECURE);
        let ours = CHALLENGE
            .iter()
            .fold(String::from("0x"), |s, b| s + &format!("{b:02x}"));
        let (rsp, step) = l.step(
            &p,
            &req(
                0,
                1,
                true,
                &[
                    ("CHAP_N", "alice"),
                    ("CHAP_R", &r),
                    ("CHAP_I", "3"),
                    ("CHAP_C", &ours),
                ],
            ),
        );
        assert_eq!((step, status(&rsp)), (Step::Close, AUTHENTICATION_FAILURE));
    }

    #[test]
    fn mutual_chap_needs_a_distinct_configured_secret() {
        let mut p = portal();
        let r = md5_hex(CHAP_ID, "alicesecret1", &CHALLENGE);
        let mutual = [
            ("CHAP_N", "alice"),
            ("CHAP_R", r.as_str()),
            ("CHAP_I", "3"),
            ("CHAP_C", "0x0102"),
        ];
        p.targets[1].mutual = Some(secret("raidd", "alicesecret1"));
        let (mut l, _) = chap_login(&p, SECURE);
        let (rsp, _) = l.step(&p, &req(0, 1, true, &mutual));
        assert_eq!(status(&rsp), AUTHENTICATION_FAILURE);
        p.targets[1].mutual = None;
        let (mut l, _) = chap_login(&p, SECURE);
        let (rsp, _) = l.step(&p, &req(0, 1, true, &mutual));
        assert_eq!(status(&rsp), AUTHENTICATION_FAILURE);
    }

    #[test]
    fn discovery_session() {
        let p = portal();
        let mut l = login();
        let (rsp, step) = l.step(
            &p,
            &req(
                1,
                3,
                true,
                &[
                    ("InitiatorName", INIT),
                    ("SessionType", "Discovery"),
                    ("MaxBurstLength", "8192"),
                    ("HeaderDigest", "None"),
                ],
            ),
        );
        assert_eq!(value(&rsp, "MaxBurstLength").as_deref(), Some("Irrelevant"));
        assert_eq!(value(&rsp, "TargetPortalGroupTag"), None);
        let n = full(step);
        assert_eq!(n.target, None);
        assert!(n.params.discovery);
        assert_eq!(n.params.target_name, None);
    }

    #[test]
    fn discovery_chap() {
        let mut p = portal();
        p.discovery_chap = Some(secret("disco", "discosecret1"));
        closes_with(
            &p,
            &[req(
                1,
                3,
                true,
                &[("InitiatorName", INIT), ("SessionType", "Discovery")],
            )],
            AUTHENTICATION_FAILURE,
        );
        let (mut l, _) = chap_login(&p, "");
        let r = md5_hex(CHAP_ID, "discosecret1", &CHALLENGE);
        let (rsp, _) = l.step(&p, &req(0, 1, true, &[("CHAP_N", "disco"), ("CHAP_R", &r)]));
        assert!(rsp.transit);
        // No mutual CHAP for discovery.
        let (mut l, _) = chap_login(&p, "");
        let (rsp, _) = l.step(
            &p,
            &req(
                0,
                1,
                true,
                &[
                    ("CHAP_N", "disco"),
                    ("CHAP_R", &r),
                    ("CHAP_I", "1"),
                    ("CHAP_C", "0x0102"),
                ],
            ),
        );
        assert_eq!(status(&rsp), AUTHENTICATION_FAILURE);
    }

    fn discovery_params(initiator: &str) -> Params {
        Params {
            discovery: true,
            initiator_name: initiator.into(),
            ..Params::default()
        }
    }

    #[test]
    fn send_targets_all_lists_allowed_targets() {
        let p = portal();
        let mut params = discovery_params(INIT);
        let out = text_answer(&p, &mut params, None, b"SendTargets=All\0").expect("answers");
        let want = format!(
            "TargetName={OPEN}\0TargetAddress=127.0.0.1:3260,1\0\
             TargetName={SECURE}\0TargetAddress=127.0.0.1:3260,1\0\
             TargetName={ACL}\0TargetAddress=127.0.0.1:3260,1\0"
        );
        assert_eq!(String::from_utf8(out).expect("utf8"), want);
        // Another initiator does not see the ACL-protected target.
        let mut params = discovery_params("iqn.2024-01.org.example:stranger");
        let out = text_answer(&p, &mut params, None, b"SendTargets=All\0").expect("answers");
        let s = String::from_utf8(out).expect("utf8");
        assert!(s.contains(OPEN) && !s.contains(ACL));
        let out = text_answer(
            &p,
            &mut params,
            None,
            format!("SendTargets={ACL}\0").as_bytes(),
        )
        .expect("answers");
        assert!(out.is_empty());
    }

    #[test]
    fn send_targets_in_a_normal_session() {
        let p = portal();
        let mut params = Params {
            initiator_name: INIT.into(),
            target_name: Some(ACL.into()),
            ..Params::default()
        };
        let out = text_answer(&p, &mut params, Some(2), b"SendTargets=\0").expect("answers");
        assert_eq!(
            out,
            format!("TargetName={ACL}\0TargetAddress=127.0.0.1:3260,1\0").into_bytes()
        );
        let out = text_answer(&p, &mut params, Some(2), b"SendTargets=All\0").expect("answers");
        assert_eq!(out, b"SendTargets=Reject\0");
        let out = text_answer(
            &p,
            &mut params,
            Some(2),
            format!("SendTargets={OPEN}\0").as_bytes(),
        )
        .expect("answers");
        assert_eq!(
            out,
            format!("TargetName={OPEN}\0TargetAddress=127.0.0.1:3260,1\0").into_bytes()
        );
    }

    #[test]
    fn full_feature_renegotiation() {
        let p = portal();
        let mut params = Params::default();
        let out = text_answer(
            &p,
            &mut params,
            Some(0),
            b"MaxRecvDataSegmentLength=131072\0HeaderDigest=CRC32C\0X-foo=1\0",
        )
        .expect("answers");
        assert_eq!(params.initiator_mrdsl, 131072);
        assert_eq!(out, b"HeaderDigest=Reject\0X-foo=NotUnderstood\0");
        let out = text_answer(&p, &mut params, Some(0), b"MaxRecvDataSegmentLength=1\0")
            .expect("answers");
        assert_eq!(out, b"MaxRecvDataSegmentLength=Reject\0");
        assert_eq!(params.initiator_mrdsl, 131072);
        let mut d = discovery_params(INIT);
        let out = text_answer(&p, &mut d, None, b"MaxBurstLength=512\0").expect("answers");
        assert_eq!(out, b"MaxBurstLength=Reject\0");
        assert_eq!(
            text_answer(&p, &mut d, None, b"A=1\0A=2\0"),
            Err(TextError::Duplicate("A".into()))
        );
        assert!(text_answer(&p, &mut d, None, b"nonsense\0").is_err());
    }

    mod prop {
        use super::*;
        use proptest::prelude::*;

        fn arb_request() -> impl Strategy<Value = LoginRequest> {
            let keys = proptest::sample::select(vec![
                "InitiatorName",
                "TargetName",
                "SessionType",
                "AuthMethod",
                "CHAP_A",
                "CHAP_N",
                "CHAP_R",
                "CHAP_I",
                "CHAP_C",
                "MaxBurstLength",
                "FirstBurstLength",
                "HeaderDigest",
                "MaxRecvDataSegmentLength",
                "ImmediateData",
                "X-a",
            ]);
            let values = proptest::sample::select(vec![
                INIT,
                OPEN,
                SECURE,
                ACL,
                "Normal",
                "Discovery",
                "CHAP,None",
                "None",
                "5",
                "alice",
                "0x00",
                "512",
                "Yes",
                "No",
                "CRC32C",
                "",
            ]);
            let text = proptest::collection::vec((keys, values), 0..6).prop_map(|pairs| {
                let mut out = Vec::new();
                for (k, v) in pairs {
                    text::encode_pair(k, v, &mut out);
                }
                out
            });
            let data = prop_oneof![text, proptest::collection::vec(any::<u8>(), 0..64)];
            (
                any::<bool>(),
                any::<bool>(),
                0u8..4,
                0u8..4,
                0u8..2,
                0u8..2,
                any::<bool>(),
                data,
            )
                .prop_map(|(transit, cont, csg, nsg, vmin, tsih, same, data)| {
                    LoginRequest {
                        transit,
                        cont,
                        csg,
                        nsg,
                        version_min: vmin,
                        tsih: u16::from(tsih),
                        itt: if same { 9 } else { 10 },
                        isid: ISID,
                        cid: 1,
                        data,
                        ..LoginRequest::default()
                    }
                })
        }

        proptest! {
            #[test]
            fn login_never_panics_and_keeps_its_invariants(reqs in proptest::collection::vec(arb_request(), 1..12)) {
                let p = portal();
                let mut l = login();
                let mut over = false;
                for r in &reqs {
                    let (rsp, step) = l.step(&p, r);
                    prop_assert!(!rsp.cont);
                    prop_assert!(rsp.data.len() <= MAX_LOGIN_RESPONSE);
                    if over {
                        prop_assert_eq!(&step, &Step::Close);
                    }
                    match &step {
                        Step::Close => {
                            prop_assert!(rsp.status_class != 0);
                            prop_assert!(!rsp.transit && rsp.tsih == 0);
                            over = true;
                        }
                        Step::Continue => {
                            prop_assert_eq!(rsp.status_class, 0);
                            prop_assert_eq!(rsp.tsih, 0);
                            prop_assert!(!rsp.transit || (rsp.nsg == 1 && r.transit));
                        }
                        Step::FullFeature(n) => {
                            prop_assert!(rsp.transit && r.transit && rsp.nsg == 3 && rsp.csg == 1);
                            prop_assert_eq!(rsp.tsih, TSIH);
                            prop_assert!(n.params.first_burst_length <= n.params.max_burst_length);
                            // The secure target is reached only through CHAP, which these
                            // random requests cannot answer correctly.
                            prop_assert!(n.target != Some(1));
                            over = true;
                        }
                    }
                    if let Ok(pairs) = text::parse(&rsp.data) {
                        prop_assert!(rsp.data.is_empty() || !pairs.is_empty());
                    } else {
                        prop_assert!(false, "our response must parse");
                    }
                }
            }

            #[test]
            fn valid_logins_complete_within_limits(
                mbl in 512u32..=16_777_215, fbl in 512u32..=16_777_215, r2t in 1u32..100,
                imm: bool, init_r2t: bool, mrdsl in 512u32..16_777_216,
                digests in proptest::sample::select(vec!["None", "CRC32C", "None,CRC32C", "CRC32C,None"]),
            ) {
                let p = portal();
                let (mbl, fbl, r2t, mrdsl) = (mbl.to_string(), fbl.to_string(), r2t.to_string(), mrdsl.to_string());
                let mut l = login();
                let (rsp, step) = l.step(&p, &req(1, 3, true, &[
                    ("InitiatorName", INIT), ("TargetName", OPEN),
                    ("MaxBurstLength", &mbl), ("FirstBurstLength", &fbl),
                    ("MaxOutstandingR2T", &r2t), ("MaxRecvDataSegmentLength", &mrdsl),
                    ("ImmediateData", if imm { "Yes" } else { "No" }),
                    ("InitialR2T", if init_r2t { "Yes" } else { "No" }),
                    ("HeaderDigest", digests), ("DataDigest", digests),
                ]));
                let Step::FullFeature(n) = step else {
                    return Err(TestCaseError::fail(format!("login did not complete: {rsp:?}")));
                };
                let limits = p.limits;
                prop_assert!(n.params.max_burst_length <= limits.max_burst_length);
                prop_assert!(n.params.first_burst_length <= limits.first_burst_length);
                prop_assert!(n.params.first_burst_length <= n.params.max_burst_length);
                prop_assert!(n.params.max_outstanding_r2t <= limits.max_outstanding_r2t);
                prop_assert_eq!(n.params.initiator_mrdsl.to_string(), mrdsl);
                prop_assert_eq!(n.params.target_mrdsl, limits.max_recv_data_segment_length);
                prop_assert_eq!(n.params.immediate_data, imm);
                prop_assert!(n.params.initial_r2t);
                prop_assert_eq!(n.params.header_digest, digests.starts_with("CRC32C"));
                // Every negotiated key was answered with a value the initiator can use.
                for (k, v) in keys(&rsp) {
                    prop_assert!(v != "Reject" && v != "NotUnderstood", "{}={}", k, v);
                }
            }

            #[test]
            fn text_answer_never_panics(data in proptest::collection::vec(any::<u8>(), 0..512), disc: bool, t in 0usize..4) {
                let p = portal();
                let mut params = Params { discovery: disc, initiator_name: INIT.into(), ..Params::default() };
                let _ = text_answer(&p, &mut params, Some(t), &data);
                prop_assert!((params::MIN_DATA_LEN..=params::MAX_DATA_LEN).contains(&params.initiator_mrdsl));
            }
        }
    }
}
