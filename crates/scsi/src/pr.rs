//! Persistent reservations (SPC-4 5.12, 6.15, 6.16): one registration set and at most one
//! reservation per LUN, shared by every session of the target.
//!
//! Registrations are per I_T nexus (initiator port + target port), or per initiator port on
//! all target ports when registered with ALL_TG_PT. Service actions that would need
//! TransportIDs from the initiator (SPEC_I_PT, REGISTER AND MOVE) are refused.

use crate::bytes::{be16, be32, be64, byte, put};
use crate::{Op, Sense};

/// An I_T nexus as persistent reservations see it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Nexus {
    /// iSCSI initiator port name: `"<iqn>,i,0x<isid as 12 hex digits>"`.
    pub initiator: String,
    /// Relative target port identifier.
    pub target_port: u16,
}

/// Why a PERSISTENT RESERVE OUT failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrError {
    /// Status RESERVATION CONFLICT, no sense data.
    #[error("reservation conflict")]
    Conflict,
    /// CHECK CONDITION with this sense.
    #[error("check condition: {0}")]
    Check(Sense),
}

impl From<Sense> for PrError {
    fn from(s: Sense) -> Self {
        PrError::Check(s)
    }
}

/// Side effects of a successful PERSISTENT RESERVE OUT for the shell to carry out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PrOutcome {
    /// Unit attentions to queue for other nexuses.
    pub unit_attentions: Vec<(Nexus, Sense)>,
    /// Nexuses whose tasks PREEMPT AND ABORT aborts (with COMMANDS CLEARED BY ANOTHER
    /// INITIATOR where the control page asks for it; TAS is 0 here, so silently).
    pub abort_tasks_of: Vec<Nexus>,
    /// The state changed: persist [`Reservations::encode`] if [`Reservations::aptpl`].
    pub changed: bool,
}

/// Reservation types (SPC-4 table 178).
pub mod kind {
    /// Write Exclusive.
    pub const WRITE_EXCLUSIVE: u8 = 1;
    /// Exclusive Access.
    pub const EXCLUSIVE_ACCESS: u8 = 3;
    /// Write Exclusive – Registrants Only.
    pub const WRITE_EXCLUSIVE_RO: u8 = 5;
    /// Exclusive Access – Registrants Only.
    pub const EXCLUSIVE_ACCESS_RO: u8 = 6;
    /// Write Exclusive – All Registrants.
    pub const WRITE_EXCLUSIVE_AR: u8 = 7;
    /// Exclusive Access – All Registrants.
    pub const EXCLUSIVE_ACCESS_AR: u8 = 8;
}

/// PERSISTENT RESERVE OUT service actions.
pub mod action {
    #![allow(missing_docs)]
    pub const REGISTER: u8 = 0;
    pub const RESERVE: u8 = 1;
    pub const RELEASE: u8 = 2;
    pub const CLEAR: u8 = 3;
    pub const PREEMPT: u8 = 4;
    pub const PREEMPT_AND_ABORT: u8 = 5;
    pub const REGISTER_AND_IGNORE: u8 = 6;
    pub const READ_KEYS: u8 = 0;
    pub const READ_RESERVATION: u8 = 1;
    pub const REPORT_CAPABILITIES: u8 = 2;
    pub const READ_FULL_STATUS: u8 = 3;
}

/// Most registrations a LUN holds; beyond it REGISTER fails with INSUFFICIENT REGISTRATION
/// RESOURCES, so neither memory nor PR IN data can grow without bound.
pub const MAX_REGISTRATIONS: usize = 512;

fn all_registrants(kind: u8) -> bool {
    matches!(kind, kind::WRITE_EXCLUSIVE_AR | kind::EXCLUSIVE_ACCESS_AR)
}

fn registrants_only(kind: u8) -> bool {
    matches!(kind, kind::WRITE_EXCLUSIVE_RO | kind::EXCLUSIVE_ACCESS_RO)
}

fn exclusive_access(kind: u8) -> bool {
    matches!(
        kind,
        kind::EXCLUSIVE_ACCESS | kind::EXCLUSIVE_ACCESS_RO | kind::EXCLUSIVE_ACCESS_AR
    )
}

fn valid_kind(kind: u8) -> bool {
    matches!(kind, 1 | 3 | 5..=8)
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Registration {
    nexus: Nexus,
    all_tg_pt: bool,
    key: u64,
}

impl Registration {
    fn matches(&self, n: &Nexus) -> bool {
        self.nexus.initiator == n.initiator
            && (self.all_tg_pt || self.nexus.target_port == n.target_port)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Reservation {
    /// The registration that holds it (meaningless for the all-registrants types).
    holder: Nexus,
    holder_all_tg_pt: bool,
    scope: u8,
    kind: u8,
}

/// The persistent reservation state of one LUN.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reservations {
    generation: u32,
    registrations: Vec<Registration>,
    reservation: Option<Reservation>,
    aptpl: bool,
    /// SPC-2 RESERVE(6) holder. Never persisted: it ends with its I_T nexus, a reset or
    /// a restart.
    scsi2: Option<Nexus>,
}

/// The 24-byte PERSISTENT RESERVE OUT parameter list.
struct Params {
    key: u64,
    sa_key: u64,
    all_tg_pt: bool,
    aptpl: bool,
}

fn parse_params(p: &[u8]) -> Result<Params, Sense> {
    if p.len() != 24 {
        return Err(Sense::parameter_list_length_error());
    }
    let flags = byte(p, 20);
    if flags & 0x08 != 0 {
        return Err(Sense::invalid_field_in_parameter_list(20, Some(3)));
    }
    if flags & 0xf2 != 0 {
        return Err(Sense::invalid_field_in_parameter_list(
            20,
            Some(7 - (flags & 0xf2).leading_zeros() as u8),
        ));
    }
    Ok(Params {
        key: be64(p, 0),
        sa_key: be64(p, 8),
        all_tg_pt: flags & 0x04 != 0,
        aptpl: flags & 0x01 != 0,
    })
}

impl Reservations {
    /// No registrations, no reservation.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the last REGISTER asked for persistence through power loss.
    pub fn aptpl(&self) -> bool {
        self.aptpl
    }

    /// The PRgeneration counter.
    pub fn generation(&self) -> u32 {
        self.generation
    }

    fn registration(&self, n: &Nexus) -> Option<&Registration> {
        self.registrations.iter().find(|r| r.matches(n))
    }

    fn is_holder(&self, n: &Nexus) -> bool {
        match &self.reservation {
            None => false,
            Some(r) if all_registrants(r.kind) => self.registration(n).is_some(),
            Some(r) => {
                r.holder.initiator == n.initiator
                    && (r.holder_all_tg_pt || r.holder.target_port == n.target_port)
            }
        }
    }

    /// SPC-4 5.12.1 table 37 / SBC-3 table 13: whether `op` from `nexus` may run under the
    /// current reservation. PR, INQUIRY, REPORT LUNS, REQUEST SENSE, TEST UNIT READY, READ
    /// CAPACITY and REPORT SUPPORTED OPERATION CODES are always allowed.
    pub fn allows(&self, nexus: &Nexus, op: &Op) -> bool {
        if let Some(holder) = &self.scsi2 {
            // SPC-2 5.5.1: a reserved unit answers other nexuses only for the commands
            // that find out what is there and who holds it.
            if holder != nexus
                && !matches!(
                    op,
                    Op::Inquiry { .. }
                        | Op::RequestSense { .. }
                        | Op::ReportLuns { .. }
                        | Op::Release6
                        | Op::ReportSupportedOpcodes { .. }
                )
            {
                return false;
            }
        }
        let Some(res) = &self.reservation else {
            return true;
        };
        let writes = op.is_write()
            || matches!(op, Op::SynchronizeCache { .. } | Op::ModeSelect { .. })
            || matches!(
                op,
                Op::StartStopUnit { start, power_condition, .. }
                    if !(*start && *power_condition == 0)
            );
        let reads = op.is_read() || matches!(op, Op::ModeSense { .. });
        if !writes && !reads {
            return true;
        }
        if self.is_holder(nexus) {
            return true;
        }
        let registered = self.registration(nexus).is_some();
        if (registrants_only(res.kind) || all_registrants(res.kind)) && registered {
            return true;
        }
        // Non-holders may still read under the write-exclusive types.
        !writes && !exclusive_access(res.kind)
    }

    /// PERSISTENT RESERVE IN data for `action`, cut to `alloc`.
    pub fn pr_in(&self, action: u8, alloc: u16, _nexus: &Nexus) -> Result<Vec<u8>, Sense> {
        let mut out = self.generation.to_be_bytes().to_vec();
        match action {
            action::READ_KEYS => {
                out.extend_from_slice(&((self.registrations.len() * 8) as u32).to_be_bytes());
                for r in &self.registrations {
                    out.extend_from_slice(&r.key.to_be_bytes());
                }
            }
            action::READ_RESERVATION => match &self.reservation {
                None => out.extend_from_slice(&[0; 4]),
                Some(res) => {
                    out.extend_from_slice(&16u32.to_be_bytes());
                    // All-registrants reservations report key 0 (SPC-4 6.15.3).
                    let key = if all_registrants(res.kind) {
                        0
                    } else {
                        self.registrations
                            .iter()
                            .find(|r| r.nexus == res.holder)
                            .map_or(0, |r| r.key)
                    };
                    let mut d = [0u8; 16];
                    put(&mut d, 0, key.to_be_bytes());
                    d[13] = (res.scope << 4) | res.kind;
                    out.extend_from_slice(&d);
                }
            },
            action::REPORT_CAPABILITIES => {
                // Length 8; CRH 0, SIP_C 0, ATP_C 1, PTPL_C 1; TMV 1, ALLOW COMMANDS 0,
                // PTPL_A; every type in the mask.
                out = vec![
                    0,
                    8,
                    0x04 | 0x01,
                    0x80 | u8::from(self.aptpl),
                    0x80 | 0x40 | 0x20 | 0x08 | 0x02,
                    0x01,
                    0,
                    0,
                ];
            }
            action::READ_FULL_STATUS => {
                out.extend_from_slice(&[0; 4]);
                for r in &self.registrations {
                    let tid = transport_id(&r.nexus.initiator);
                    let mut d = [0u8; 24];
                    put(&mut d, 0, r.key.to_be_bytes());
                    let holder = match &self.reservation {
                        Some(res) if all_registrants(res.kind) => Some(res),
                        Some(res) if res.holder == r.nexus => Some(res),
                        _ => None,
                    };
                    d[12] = if r.all_tg_pt { 0x02 } else { 0 } | u8::from(holder.is_some());
                    if let Some(res) = holder {
                        d[13] = (res.scope << 4) | res.kind;
                    }
                    put(&mut d, 18, r.nexus.target_port.to_be_bytes());
                    put(&mut d, 20, (tid.len() as u32).to_be_bytes());
                    out.extend_from_slice(&d);
                    out.extend_from_slice(&tid);
                }
                let n = (out.len() - 8) as u32;
                put(&mut out, 4, n.to_be_bytes());
            }
            _ => return Err(Sense::invalid_field_in_cdb(1, Some(4))),
        }
        out.truncate(usize::from(alloc));
        Ok(out)
    }

    /// Carries out a PERSISTENT RESERVE OUT. `params` is the whole parameter list.
    pub fn pr_out(
        &mut self,
        action: u8,
        scope: u8,
        kind: u8,
        params: &[u8],
        nexus: &Nexus,
    ) -> Result<PrOutcome, PrError> {
        let p = parse_params(params)?;
        if p.all_tg_pt && !matches!(action, action::REGISTER | action::REGISTER_AND_IGNORE) {
            return Err(Sense::invalid_field_in_parameter_list(20, Some(2)).into());
        }
        match action {
            action::REGISTER | action::REGISTER_AND_IGNORE => {
                self.register(action == action::REGISTER_AND_IGNORE, &p, nexus)
            }
            action::RESERVE => {
                check_scope_type(scope, kind)?;
                self.check_key(&p, nexus)?;
                self.reserve(scope, kind, nexus)
            }
            action::RELEASE => {
                check_scope_type(scope, kind)?;
                self.check_key(&p, nexus)?;
                self.release(scope, kind, nexus)
            }
            action::CLEAR => {
                self.check_key(&p, nexus)?;
                Ok(self.clear(nexus))
            }
            action::PREEMPT | action::PREEMPT_AND_ABORT => {
                check_scope_type(scope, kind)?;
                self.check_key(&p, nexus)?;
                self.preempt(
                    action == action::PREEMPT_AND_ABORT,
                    scope,
                    kind,
                    p.sa_key,
                    nexus,
                )
            }
            _ => Err(Sense::invalid_field_in_cdb(1, Some(4)).into()),
        }
    }

    /// The nexus must be registered and quote its own key.
    fn check_key(&self, p: &Params, nexus: &Nexus) -> Result<(), PrError> {
        match self.registration(nexus) {
            Some(r) if r.key == p.key => Ok(()),
            _ => Err(PrError::Conflict),
        }
    }

    fn register(&mut self, ignore: bool, p: &Params, nexus: &Nexus) -> Result<PrOutcome, PrError> {
        let mut outcome = PrOutcome::default();
        let existing = self.registrations.iter().position(|r| r.matches(nexus));
        match existing {
            None => {
                if !ignore && p.key != 0 {
                    return Err(PrError::Conflict);
                }
                if p.sa_key == 0 {
                    return Ok(outcome);
                }
                if self.registrations.len() >= MAX_REGISTRATIONS {
                    return Err(Sense::insufficient_registration_resources().into());
                }
                self.registrations.push(Registration {
                    nexus: nexus.clone(),
                    all_tg_pt: p.all_tg_pt,
                    key: p.sa_key,
                });
            }
            Some(i) => {
                let Some(reg) = self.registrations.get_mut(i) else {
                    return Err(PrError::Conflict);
                };
                if !ignore && reg.key != p.key {
                    return Err(PrError::Conflict);
                }
                if p.sa_key != 0 {
                    reg.key = p.sa_key;
                } else {
                    let gone = self.registrations.remove(i);
                    self.drop_reservation_of(&gone, &mut outcome);
                }
            }
        }
        self.aptpl = p.aptpl;
        self.generation = self.generation.wrapping_add(1);
        outcome.changed = true;
        Ok(outcome)
    }

    /// What unregistering `gone` does to the reservation (SPC-4 5.12.11.2.3).
    fn drop_reservation_of(&mut self, gone: &Registration, outcome: &mut PrOutcome) {
        let Some(res) = &self.reservation else {
            return;
        };
        if all_registrants(res.kind) {
            // The reservation lives while any registrant does.
            if self.registrations.is_empty() {
                self.reservation = None;
            }
        } else if res.holder == gone.nexus {
            let kind = res.kind;
            self.reservation = None;
            if registrants_only(kind) {
                for r in &self.registrations {
                    outcome
                        .unit_attentions
                        .push((r.nexus.clone(), Sense::reservations_released()));
                }
            }
        }
    }

    fn reserve(&mut self, scope: u8, kind: u8, nexus: &Nexus) -> Result<PrOutcome, PrError> {
        if let Some(res) = &self.reservation {
            // Re-reserving what one already holds is a no-op; anything else conflicts.
            if self.is_holder(nexus) && res.kind == kind && res.scope == scope {
                return Ok(PrOutcome::default());
            }
            return Err(PrError::Conflict);
        }
        let all = self.registration(nexus).is_some_and(|r| r.all_tg_pt);
        self.reservation = Some(Reservation {
            holder: self
                .registration(nexus)
                .map_or_else(|| nexus.clone(), |r| r.nexus.clone()),
            holder_all_tg_pt: all,
            scope,
            kind,
        });
        Ok(PrOutcome {
            changed: true,
            ..PrOutcome::default()
        })
    }

    fn release(&mut self, scope: u8, kind: u8, nexus: &Nexus) -> Result<PrOutcome, PrError> {
        let mut outcome = PrOutcome::default();
        let Some(res) = &self.reservation else {
            return Ok(outcome);
        };
        if !self.is_holder(nexus) {
            return Ok(outcome);
        }
        if res.scope != scope || res.kind != kind {
            return Err(Sense::invalid_release().into());
        }
        let released_kind = res.kind;
        self.reservation = None;
        if registrants_only(released_kind) || all_registrants(released_kind) {
            for r in self.registrations.iter().filter(|r| !r.matches(nexus)) {
                outcome
                    .unit_attentions
                    .push((r.nexus.clone(), Sense::reservations_released()));
            }
        }
        outcome.changed = true;
        Ok(outcome)
    }

    fn clear(&mut self, nexus: &Nexus) -> PrOutcome {
        let mut outcome = PrOutcome::default();
        for r in self.registrations.iter().filter(|r| !r.matches(nexus)) {
            outcome
                .unit_attentions
                .push((r.nexus.clone(), Sense::reservations_preempted()));
        }
        self.registrations.clear();
        self.reservation = None;
        self.generation = self.generation.wrapping_add(1);
        outcome.changed = true;
        outcome
    }

    /// Removes every registration with `key` except the caller's, reporting them preempted.
    fn remove_key(
        &mut self,
        key: u64,
        nexus: &Nexus,
        abort: bool,
        outcome: &mut PrOutcome,
    ) -> usize {
        let mut removed = 0;
        self.registrations.retain(|r| {
            if r.key == key && !r.matches(nexus) {
                outcome
                    .unit_attentions
                    .push((r.nexus.clone(), Sense::registrations_preempted()));
                if abort {
                    outcome.abort_tasks_of.push(r.nexus.clone());
                }
                removed += 1;
                false
            } else {
                true
            }
        });
        removed
    }

    fn new_reservation_for(&mut self, scope: u8, kind: u8, nexus: &Nexus) {
        let (holder, all) = self
            .registration(nexus)
            .map_or((nexus.clone(), false), |r| (r.nexus.clone(), r.all_tg_pt));
        self.reservation = Some(Reservation {
            holder,
            holder_all_tg_pt: all,
            scope,
            kind,
        });
    }

    /// SPC-4 5.12.11.4.
    fn preempt(
        &mut self,
        abort: bool,
        scope: u8,
        kind: u8,
        sa_key: u64,
        nexus: &Nexus,
    ) -> Result<PrOutcome, PrError> {
        let mut outcome = PrOutcome::default();
        let current = self.reservation.clone();
        match current {
            Some(res) if all_registrants(res.kind) => {
                if sa_key == 0 {
                    // Everyone else loses their registration; the caller takes a new
                    // reservation.
                    let keys: Vec<u64> = self
                        .registrations
                        .iter()
                        .filter(|r| !r.matches(nexus))
                        .map(|r| r.key)
                        .collect();
                    for k in keys {
                        self.remove_key(k, nexus, abort, &mut outcome);
                    }
                    self.new_reservation_for(scope, kind, nexus);
                } else if self.remove_key(sa_key, nexus, abort, &mut outcome) == 0 {
                    return Err(PrError::Conflict);
                }
            }
            Some(res) => {
                let holder_key = self
                    .registrations
                    .iter()
                    .find(|r| r.nexus == res.holder)
                    .map(|r| r.key);
                if sa_key == 0 {
                    return Err(Sense::invalid_field_in_parameter_list(8, None).into());
                }
                if holder_key == Some(sa_key) {
                    self.remove_key(sa_key, nexus, abort, &mut outcome);
                    self.new_reservation_for(scope, kind, nexus);
                    if res.kind != kind || res.scope != scope {
                        for r in self.registrations.iter().filter(|r| !r.matches(nexus)) {
                            outcome
                                .unit_attentions
                                .push((r.nexus.clone(), Sense::reservations_released()));
                        }
                    }
                } else if self.remove_key(sa_key, nexus, abort, &mut outcome) == 0 {
                    return Err(PrError::Conflict);
                }
            }
            None => {
                if sa_key == 0 {
                    return Err(Sense::invalid_field_in_parameter_list(8, None).into());
                }
                if self.remove_key(sa_key, nexus, abort, &mut outcome) == 0 {
                    return Err(PrError::Conflict);
                }
            }
        }
        self.generation = self.generation.wrapping_add(1);
        outcome.changed = true;
        Ok(outcome)
    }

    /// RESERVE(6): the unit becomes this nexus's alone. Conflicts with another holder and
    /// with any persistent reservation state (SPC-3 5.6.3).
    pub fn reserve6(&mut self, nexus: &Nexus) -> Result<(), PrError> {
        if !self.registrations.is_empty() || self.reservation.is_some() {
            return Err(PrError::Conflict);
        }
        match &self.scsi2 {
            Some(h) if h != nexus => Err(PrError::Conflict),
            _ => {
                self.scsi2 = Some(nexus.clone());
                Ok(())
            }
        }
    }

    /// RELEASE(6): ends the nexus's own RESERVE(6); from anyone else it is a no-op.
    pub fn release6(&mut self, nexus: &Nexus) -> Result<(), PrError> {
        if !self.registrations.is_empty() || self.reservation.is_some() {
            return Err(PrError::Conflict);
        }
        if self.scsi2.as_ref() == Some(nexus) {
            self.scsi2 = None;
        }
        Ok(())
    }

    /// The I_T nexus is gone (logout, dropped connection): its RESERVE(6) ends.
    pub fn nexus_lost(&mut self, nexus: &Nexus) {
        if self.scsi2.as_ref() == Some(nexus) {
            self.scsi2 = None;
        }
    }

    /// A logical unit or target reset ends any RESERVE(6); persistent reservations stay.
    pub fn reset(&mut self) {
        self.scsi2 = None;
    }

    /// Whether anything restricts access (a shell may skip `allows` while not).
    pub fn is_empty(&self) -> bool {
        self.scsi2.is_none() && self.reservation.is_none() && self.registrations.is_empty()
    }

    /// Serialises the state for persistence across restarts (APTPL).
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(MAGIC);
        b.push(u8::from(self.aptpl));
        b.extend_from_slice(&self.generation.to_be_bytes());
        match &self.reservation {
            None => b.push(0),
            Some(r) => {
                b.push(1);
                put_nexus(&mut b, &r.holder);
                b.push(u8::from(r.holder_all_tg_pt));
                b.push(r.scope);
                b.push(r.kind);
            }
        }
        b.extend_from_slice(&(self.registrations.len() as u32).to_be_bytes());
        for r in &self.registrations {
            put_nexus(&mut b, &r.nexus);
            b.push(u8::from(r.all_tg_pt));
            b.extend_from_slice(&r.key.to_be_bytes());
        }
        b
    }

    /// Reads what [`Reservations::encode`] wrote; any corruption is an error, never a panic.
    pub fn decode(bytes: &[u8]) -> Result<Reservations, String> {
        let mut c = Cursor { b: bytes };
        if c.take(MAGIC.len())? != MAGIC {
            return Err("not a raidd reservation record".into());
        }
        let aptpl = c.flag()?;
        let generation = c.u32()?;
        let reservation = if c.flag()? {
            let holder = c.nexus()?;
            let holder_all_tg_pt = c.flag()?;
            let scope = c.u8()?;
            let kind = c.u8()?;
            if scope != 0 || !valid_kind(kind) {
                return Err(format!("bad reservation scope {scope} type {kind}"));
            }
            Some(Reservation {
                holder,
                holder_all_tg_pt,
                scope,
                kind,
            })
        } else {
            None
        };
        let n = c.u32()? as usize;
        if n > MAX_REGISTRATIONS {
            return Err(format!(
                "{n} registrations is more than {MAX_REGISTRATIONS}"
            ));
        }
        let mut registrations = Vec::with_capacity(n);
        for _ in 0..n {
            let nexus = c.nexus()?;
            let all_tg_pt = c.flag()?;
            let key = c.u64()?;
            if key == 0 {
                return Err("registration with key 0".into());
            }
            registrations.push(Registration {
                nexus,
                all_tg_pt,
                key,
            });
        }
        if !c.b.is_empty() {
            return Err("trailing bytes after reservation record".into());
        }
        Ok(Reservations {
            generation,
            registrations,
            reservation,
            aptpl,
            scsi2: None,
        })
    }
}

fn check_scope_type(scope: u8, kind: u8) -> Result<(), Sense> {
    if scope != 0 {
        return Err(Sense::invalid_field_in_cdb(2, Some(7)));
    }
    if !valid_kind(kind) {
        return Err(Sense::invalid_field_in_cdb(2, Some(3)));
    }
    Ok(())
}

/// iSCSI TransportID, format 01b (initiator port name with ",i,0x" and ISID): the name,
/// NUL-terminated, padded to a multiple of 4 and at least 20 bytes (SPC-4 7.6.4.6).
fn transport_id(initiator: &str) -> Vec<u8> {
    let name: Vec<u8> = initiator.bytes().take(220).filter(|&b| b != 0).collect();
    let len = (name.len() + 1).next_multiple_of(4).max(20);
    let mut t = Vec::with_capacity(len + 4);
    t.extend_from_slice(&[0x40 | 0x05, 0]);
    t.extend_from_slice(&(len as u16).to_be_bytes());
    t.extend_from_slice(&name);
    t.resize(len + 4, 0);
    t
}

const MAGIC: &[u8] = b"RAIDDPR1";

fn put_nexus(b: &mut Vec<u8>, n: &Nexus) {
    let name = n.initiator.as_bytes();
    let len = name.len().min(usize::from(u16::MAX));
    b.extend_from_slice(&(len as u16).to_be_bytes());
    b.extend_from_slice(name.get(..len).unwrap_or(&[]));
    b.extend_from_slice(&n.target_port.to_be_bytes());
}

struct Cursor<'a> {
    b: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.b.len() < n {
            return Err("truncated reservation record".into());
        }
        let (head, tail) = self.b.split_at(n);
        self.b = tail;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(byte(self.take(1)?, 0))
    }
    fn flag(&mut self) -> Result<bool, String> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(format!("bad flag byte {v}")),
        }
    }
    fn u16(&mut self) -> Result<u16, String> {
        Ok(be16(self.take(2)?, 0))
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(be32(self.take(4)?, 0))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(be64(self.take(8)?, 0))
    }
    fn nexus(&mut self) -> Result<Nexus, String> {
        let len = usize::from(self.u16()?);
        let name = std::str::from_utf8(self.take(len)?)
            .map_err(|e| format!("initiator name: {e}"))?
            .to_owned();
        let target_port = self.u16()?;
        Ok(Nexus {
            initiator: name,
            target_port,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nexus(i: u8, port: u16) -> Nexus {
        Nexus {
            initiator: format!("iqn.2024-01.org.example:host{i},i,0x00023d00000{i}"),
            target_port: port,
        }
    }

    fn params(key: u64, sa_key: u64, flags: u8) -> Vec<u8> {
        let mut p = vec![0u8; 24];
        p[0..8].copy_from_slice(&key.to_be_bytes());
        p[8..16].copy_from_slice(&sa_key.to_be_bytes());
        p[20] = flags;
        p
    }

    fn register(r: &mut Reservations, n: &Nexus, key: u64) {
        r.pr_out(action::REGISTER, 0, 0, &params(0, key, 0), n)
            .expect("register");
    }

    fn keys(r: &Reservations, n: &Nexus) -> Vec<u64> {
        let d = r.pr_in(action::READ_KEYS, 1024, n).expect("read keys");
        let len = be32(&d, 4) as usize;
        d[8..8 + len].chunks(8).map(|c| be64(c, 0)).collect()
    }

    fn read_reservation(r: &Reservations, n: &Nexus) -> Option<(u64, u8)> {
        let d = r
            .pr_in(action::READ_RESERVATION, 1024, n)
            .expect("read res");
        (be32(&d, 4) == 16).then(|| (be64(&d, 8), d[21]))
    }

    fn write10() -> Op {
        Op::Write {
            lba: 0,
            blocks: 1,
            fua: false,
        }
    }
    fn read10() -> Op {
        Op::Read {
            lba: 0,
            blocks: 1,
            fua: false,
        }
    }

    #[test]
    fn register_unregister_and_generation() {
        let mut r = Reservations::new();
        let a = nexus(1, 1);
        register(&mut r, &a, 0xabc);
        assert_eq!(keys(&r, &a), vec![0xabc]);
        assert_eq!(r.generation(), 1);
        // wrong key
        assert_eq!(
            r.pr_out(action::REGISTER, 0, 0, &params(0x1, 0x2, 0), &a),
            Err(PrError::Conflict)
        );
        // unregistered nexus with nonzero key
        let b = nexus(2, 1);
        assert_eq!(
            r.pr_out(action::REGISTER, 0, 0, &params(0x1, 0x2, 0), &b),
            Err(PrError::Conflict)
        );
        // register and ignore replaces the key
        r.pr_out(
            action::REGISTER_AND_IGNORE,
            0,
            0,
            &params(0x77, 0xdef, 1),
            &a,
        )
        .expect("ignore");
        assert!(r.aptpl());
        assert_eq!(keys(&r, &a), vec![0xdef]);
        // unregister
        r.pr_out(action::REGISTER, 0, 0, &params(0xdef, 0, 0), &a)
            .expect("unregister");
        assert!(keys(&r, &a).is_empty());
        assert_eq!(r.generation(), 3);
        // same initiator through another port is a different nexus
        register(&mut r, &a, 5);
        assert!(r.registration(&nexus(1, 2)).is_none());
    }

    #[test]
    fn reserve_release_and_access() {
        let mut r = Reservations::new();
        let (a, b, c) = (nexus(1, 1), nexus(2, 1), nexus(3, 1));
        register(&mut r, &a, 0xa);
        register(&mut r, &b, 0xb);
        // reserve requires the right key
        assert_eq!(
            r.pr_out(action::RESERVE, 0, 1, &params(0xb, 0, 0), &a),
            Err(PrError::Conflict)
        );
        r.pr_out(
            action::RESERVE,
            0,
            kind::WRITE_EXCLUSIVE,
            &params(0xa, 0, 0),
            &a,
        )
        .expect("reserve");
        assert_eq!(read_reservation(&r, &c), Some((0xa, 1)));
        // idempotent for the holder, conflict for others
        assert!(r
            .pr_out(action::RESERVE, 0, 1, &params(0xa, 0, 0), &a)
            .is_ok());
        assert_eq!(
            r.pr_out(action::RESERVE, 0, 1, &params(0xb, 0, 0), &b),
            Err(PrError::Conflict)
        );
        assert!(r.allows(&a, &write10()));
        assert!(!r.allows(&b, &write10()));
        assert!(r.allows(&b, &read10()));
        assert!(r.allows(&c, &Op::TestUnitReady));
        // release with the wrong type
        assert_eq!(
            r.pr_out(action::RELEASE, 0, 3, &params(0xa, 0, 0), &a),
            Err(PrError::Check(Sense::invalid_release()))
        );
        // release by a non-holder is a no-op
        assert!(r
            .pr_out(action::RELEASE, 0, 1, &params(0xb, 0, 0), &b)
            .is_ok());
        assert!(read_reservation(&r, &c).is_some());
        let out = r
            .pr_out(action::RELEASE, 0, 1, &params(0xa, 0, 0), &a)
            .expect("release");
        assert!(out.unit_attentions.is_empty());
        assert_eq!(read_reservation(&r, &c), None);
    }

    #[test]
    fn access_table() {
        let (a, b, c) = (nexus(1, 1), nexus(2, 1), nexus(3, 1));
        // (type, holder write, registered read, registered write, unregistered read, unregistered write)
        let table = [
            (1, true, true, false, true, false),
            (3, true, false, false, false, false),
            (5, true, true, true, true, false),
            (6, true, true, true, false, false),
            (7, true, true, true, true, false),
            (8, true, true, true, false, false),
        ];
        for (t, hw, rr, rw, ur, uw) in table {
            let mut r = Reservations::new();
            register(&mut r, &a, 0xa);
            register(&mut r, &b, 0xb);
            r.pr_out(action::RESERVE, 0, t, &params(0xa, 0, 0), &a)
                .expect("reserve");
            assert_eq!(r.allows(&a, &write10()), hw, "type {t}");
            assert_eq!(r.allows(&b, &read10()), rr, "type {t}");
            assert_eq!(r.allows(&b, &write10()), rw, "type {t}");
            assert_eq!(r.allows(&c, &read10()), ur, "type {t}");
            assert_eq!(r.allows(&c, &write10()), uw, "type {t}");
            let inq = Op::Inquiry {
                evpd: false,
                page: 0,
                alloc: 96,
            };
            assert!(r.allows(&c, &inq));
            let rk = Op::PersistentReserveIn {
                action: 0,
                alloc: 8,
            };
            assert!(r.allows(&c, &rk));
        }
    }

    #[test]
    fn all_registrants_reservation() {
        let mut r = Reservations::new();
        let (a, b) = (nexus(1, 1), nexus(2, 1));
        register(&mut r, &a, 0xa);
        register(&mut r, &b, 0xb);
        r.pr_out(action::RESERVE, 0, 7, &params(0xa, 0, 0), &a)
            .expect("reserve");
        assert_eq!(read_reservation(&r, &a), Some((0, 7)));
        // a unregisters: b still holds it
        r.pr_out(action::REGISTER, 0, 0, &params(0xa, 0, 0), &a)
            .expect("unregister");
        assert_eq!(read_reservation(&r, &a), Some((0, 7)));
        r.pr_out(action::REGISTER, 0, 0, &params(0xb, 0, 0), &b)
            .expect("unregister");
        assert_eq!(read_reservation(&r, &a), None);
    }

    #[test]
    fn holder_unregister_releases_registrants_only() {
        let mut r = Reservations::new();
        let (a, b) = (nexus(1, 1), nexus(2, 1));
        register(&mut r, &a, 0xa);
        register(&mut r, &b, 0xb);
        r.pr_out(action::RESERVE, 0, 5, &params(0xa, 0, 0), &a)
            .expect("reserve");
        let out = r
            .pr_out(action::REGISTER, 0, 0, &params(0xa, 0, 0), &a)
            .expect("unregister");
        assert_eq!(read_reservation(&r, &b), None);
        assert_eq!(
            out.unit_attentions,
            vec![(b.clone(), Sense::reservations_released())]
        );
    }

    #[test]
    fn preempt_and_clear() {
        let mut r = Reservations::new();
        let (a, b, c) = (nexus(1, 1), nexus(2, 1), nexus(3, 1));
        register(&mut r, &a, 0xa);
        register(&mut r, &b, 0xb);
        register(&mut r, &c, 0xc);
        r.pr_out(action::RESERVE, 0, 1, &params(0xa, 0, 0), &a)
            .expect("reserve");
        // b preempts a's reservation, taking EA
        let out = r
            .pr_out(action::PREEMPT_AND_ABORT, 0, 3, &params(0xb, 0xa, 0), &b)
            .expect("preempt");
        assert_eq!(read_reservation(&r, &c), Some((0xb, 3)));
        assert_eq!(keys(&r, &c), vec![0xb, 0xc]);
        assert!(out
            .unit_attentions
            .contains(&(a.clone(), Sense::registrations_preempted())));
        assert!(out
            .unit_attentions
            .contains(&(c.clone(), Sense::reservations_released())));
        assert_eq!(out.abort_tasks_of, vec![a.clone()]);
        // preempting an unknown key conflicts
        assert_eq!(
            r.pr_out(action::PREEMPT, 0, 3, &params(0xb, 0x99, 0), &b),
            Err(PrError::Conflict)
        );
        // sa key 0 without all-registrants is an invalid field
        assert!(matches!(
            r.pr_out(action::PREEMPT, 0, 3, &params(0xb, 0, 0), &b),
            Err(PrError::Check(_))
        ));
        // preempting a non-holder key removes the registration only
        r.pr_out(action::PREEMPT, 0, 3, &params(0xb, 0xc, 0), &b)
            .expect("preempt c");
        assert_eq!(keys(&r, &b), vec![0xb]);
        assert_eq!(read_reservation(&r, &b), Some((0xb, 3)));
        // clear
        register(&mut r, &a, 0xa);
        let out = r
            .pr_out(action::CLEAR, 0, 0, &params(0xb, 0, 0), &b)
            .expect("clear");
        assert_eq!(
            out.unit_attentions,
            vec![(a.clone(), Sense::reservations_preempted())]
        );
        assert!(keys(&r, &a).is_empty());
        assert_eq!(read_reservation(&r, &a), None);
    }

    #[test]
    fn preempt_all_registrants_with_zero_key() {
        let mut r = Reservations::new();
        let (a, b) = (nexus(1, 1), nexus(2, 1));
        register(&mut r, &a, 0xa);
        register(&mut r, &b, 0xb);
        r.pr_out(action::RESERVE, 0, 8, &params(0xa, 0, 0), &a)
            .expect("reserve");
        r.pr_out(action::PREEMPT, 0, 1, &params(0xb, 0, 0), &b)
            .expect("preempt");
        assert_eq!(keys(&r, &a), vec![0xb]);
        assert_eq!(read_reservation(&r, &a), Some((0xb, 1)));
    }

    #[test]
    fn parameter_checks() {
        let mut r = Reservations::new();
        let a = nexus(1, 1);
        assert_eq!(
            r.pr_out(action::REGISTER, 0, 0, &[0; 23], &a),
            Err(PrError::Check(Sense::parameter_list_length_error()))
        );
        let e = r
            .pr_out(action::REGISTER, 0, 0, &params(0, 1, 0x08), &a)
            .expect_err("spec_i_pt");
        assert_eq!(
            e,
            PrError::Check(Sense::invalid_field_in_parameter_list(20, Some(3)))
        );
        register(&mut r, &a, 1);
        assert!(matches!(
            r.pr_out(action::RESERVE, 1, 1, &params(1, 0, 0), &a),
            Err(PrError::Check(_))
        ));
        assert!(matches!(
            r.pr_out(action::RESERVE, 0, 2, &params(1, 0, 0), &a),
            Err(PrError::Check(_))
        ));
        assert!(matches!(
            r.pr_out(7, 0, 1, &params(1, 0, 0), &a),
            Err(PrError::Check(_))
        ));
        assert!(r.pr_in(4, 100, &a).is_err());
    }

    #[test]
    fn all_target_ports() {
        let mut r = Reservations::new();
        let a1 = nexus(1, 1);
        let a2 = nexus(1, 2);
        r.pr_out(action::REGISTER, 0, 0, &params(0, 0xa, 0x04), &a1)
            .expect("all_tg_pt");
        r.pr_out(action::RESERVE, 0, 1, &params(0xa, 0, 0), &a2)
            .expect("reserve through the other port");
        assert!(r.allows(&a1, &write10()));
        let d = r.pr_in(action::READ_FULL_STATUS, 4096, &a1).expect("full");
        assert_eq!(d[8 + 12], 0x03);
    }

    #[test]
    fn registration_limit() {
        let mut r = Reservations::new();
        for i in 0..MAX_REGISTRATIONS {
            register(&mut r, &nexus(1, i as u16), 1 + i as u64);
        }
        assert_eq!(
            r.pr_out(action::REGISTER, 0, 0, &params(0, 9, 0), &nexus(2, 0)),
            Err(PrError::Check(Sense::insufficient_registration_resources()))
        );
    }

    #[test]
    fn report_capabilities() {
        let r = Reservations::new();
        let d = r
            .pr_in(action::REPORT_CAPABILITIES, 100, &nexus(1, 1))
            .expect("caps");
        assert_eq!(d.len(), 8);
        assert_eq!(be16(&d, 0), 8);
        assert!((d[3] >> 4) & 7 <= 5);
        assert_eq!(d[3] & 0x80, 0x80);
        assert_eq!(be16(&d, 4), 0xea01);
    }

    #[test]
    fn read_full_status_and_truncation() {
        let mut r = Reservations::new();
        let a = nexus(1, 3);
        register(&mut r, &a, 0x1234);
        r.pr_out(action::RESERVE, 0, 3, &params(0x1234, 0, 0), &a)
            .expect("reserve");
        let d = r.pr_in(action::READ_FULL_STATUS, 4096, &a).expect("full");
        assert_eq!(be32(&d, 4) as usize, d.len() - 8);
        let desc = &d[8..];
        assert_eq!(be64(desc, 0), 0x1234);
        assert_eq!(desc[12], 0x01);
        assert_eq!(desc[13], 0x03);
        assert_eq!(be16(desc, 18), 3);
        let tid_len = be32(desc, 20) as usize;
        let tid = &desc[24..24 + tid_len];
        assert_eq!(tid[0], 0x45);
        assert_eq!(be16(tid, 2) as usize, tid_len - 4);
        assert_eq!(tid_len % 4, 0);
        assert!(tid[4..].starts_with(a.initiator.as_bytes()));
        assert_eq!(tid[4 + a.initiator.len()], 0);
        // truncation keeps the header
        let d = r.pr_in(action::READ_KEYS, 4, &a).expect("keys");
        assert_eq!(d, r.generation().to_be_bytes().to_vec());
    }

    #[test]
    fn persistence_roundtrip() {
        let mut r = Reservations::new();
        let (a, b) = (nexus(1, 1), nexus(2, 1));
        r.pr_out(action::REGISTER, 0, 0, &params(0, 0xa, 0x01), &a)
            .expect("reg");
        r.pr_out(action::REGISTER, 0, 0, &params(0, 0xb, 0x05), &b)
            .expect("reg");
        r.pr_out(action::RESERVE, 0, 6, &params(0xa, 0, 0), &a)
            .expect("reserve");
        let bytes = r.encode();
        let back = Reservations::decode(&bytes).expect("decode");
        assert_eq!(back, r);
        assert!(Reservations::decode(&bytes[..bytes.len() - 1]).is_err());
        let mut extra = bytes.clone();
        extra.push(0);
        assert!(Reservations::decode(&extra).is_err());
        assert!(Reservations::decode(b"junk").is_err());
        assert_eq!(
            Reservations::decode(&Reservations::new().encode()),
            Ok(Reservations::new())
        );
    }

    #[test]
    fn spc2_reserve_release() {
        let a = Nexus {
            initiator: "iqn.a,i,0x1".into(),
            target_port: 1,
        };
        let b = Nexus {
            initiator: "iqn.b,i,0x1".into(),
            target_port: 1,
        };
        let read = Op::Read {
            lba: 0,
            blocks: 1,
            fua: false,
        };
        let mut r = Reservations::new();
        assert!(r.is_empty());
        r.reserve6(&a).expect("free unit");
        r.reserve6(&a).expect("the holder may reserve again");
        assert_eq!(r.reserve6(&b), Err(PrError::Conflict));
        assert!(r.allows(&a, &read));
        assert!(!r.allows(&b, &read));
        assert!(!r.allows(&b, &Op::TestUnitReady));
        assert!(r.allows(&b, &Op::Release6));
        r.release6(&b).expect("a no-op for a non-holder");
        assert!(!r.allows(&b, &read));
        r.nexus_lost(&a);
        assert!(r.allows(&b, &read));
        r.reserve6(&b).expect("free again");
        r.reset();
        assert!(r.is_empty());
        assert_eq!(
            Reservations::decode(&r.encode()).expect("round trip"),
            Reservations::new()
        );
        // Persistent reservation state refuses SPC-2 reservations.
        let mut p = [0u8; 24];
        p[8..16].copy_from_slice(&7u64.to_be_bytes());
        r.pr_out(action::REGISTER, 0, 0, &p, &a).expect("register");
        assert_eq!(r.reserve6(&a), Err(PrError::Conflict));
    }
}
