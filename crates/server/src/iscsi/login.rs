//! One iSCSI connection's login phase (through `raidd_iscsi`'s login state machine), after
//! which it runs the full feature phase (`conn.rs`) until it logs out, fails, or the daemon
//! stops.

use super::conn::full_feature;
use super::pdu_io::{encode, read_pdu, End};
use super::session::Setup;
use super::target::{hex, lock, IscsiState, CMD_WINDOW};

use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use futures::future::{self, Either};
use raidd_iscsi::login::{self, Login, Step};
use raidd_iscsi::pdu::{self, Digests, LoginHeader, Seq};
use raidd_rt::net::Part;

use crate::budget::Account;
use crate::link::{Input, Link};
use crate::logtext::Escaped;
use crate::shared::{SharedState, Stop};
use crate::watch::Watch;

/// A client must log in within this time.
const LOGIN_TIMEOUT: Duration = Duration::from_secs(30);
/// The data segment a login PDU may carry (text keys; CHAP values are the longest).
const LOGIN_DATA_MAX: usize = 64 * 1024;
/// Serves one initiator connection until it logs out, fails, or the daemon stops.
pub async fn serve_connection(
    link: Link,
    watch: Rc<Watch>,
    state: Arc<IscsiState>,
    shared: &SharedState,
    connection_memory: u64,
    stop: Stop,
) {
    let peer = link
        .sock
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "?".into());
    let mut input = Input::new(watch.clone());
    let outcome = {
        let l = login_phase(&link, &mut input, &state);
        let timeout = raidd_rt::time::sleep(LOGIN_TIMEOUT);
        let stopping = stop.clone();
        futures::pin_mut!(l, timeout);
        match future::select(l, future::select(timeout, stopping)).await {
            Either::Left((r, _)) => Some(r),
            Either::Right(_) => None,
        }
    };
    let (negotiated, seq) = match outcome {
        Some(Ok(Some(n))) => n,
        Some(Ok(None)) => {
            tracing::info!(%peer, "iSCSI login refused");
            return;
        }
        Some(Err(why)) => {
            tracing::debug!(%peer, "iSCSI login ended: {}", Escaped(&why.to_string()));
            return;
        }
        None => {
            tracing::debug!(%peer, "iSCSI login timed out or the daemon is stopping");
            return;
        }
    };
    // The initiator's name came from the network: logged escaped.
    let initiator = Escaped(&negotiated.params.initiator_name).to_string();
    let target = negotiated.target;
    let isid = hex(&negotiated.isid);
    let nexus = format!("{},i,0x{isid}", negotiated.params.initiator_name);
    match target {
        Some(t) => {
            tracing::info!(%peer, %initiator, target = %state.targets[t].name, "iSCSI session started")
        }
        None => tracing::info!(%peer, %initiator, "iSCSI discovery session started"),
    }
    if let Some(t) = target {
        lock(&state.nexuses).push((t, nexus.clone()));
    }
    let account = Account::new(shared.budget.clone(), connection_memory);
    let why = full_feature(Setup {
        link,
        input,
        watch: watch.clone(),
        state: state.clone(),
        account,
        negotiated,
        seq,
        nexus: nexus.clone(),
        stop,
    })
    .await;
    let why = watch.closed_for().map_or(why, str::to_string);
    if let Some(t) = target {
        let mut n = lock(&state.nexuses);
        if let Some(i) = n.iter().position(|(x, s)| *x == t && *s == nexus) {
            n.swap_remove(i);
        }
    }
    tracing::info!(%peer, %initiator, "iSCSI session ended: {}", Escaped(&why));
}

/// Runs the login; `Ok(None)` when the target refused it (the refusal has been sent).
async fn login_phase(
    link: &Link,
    input: &mut Input,
    state: &IscsiState,
) -> Result<Option<(login::Negotiated, Seq)>, End> {
    let mut challenge = [0u8; 16];
    let mut id = [0u8; 1];
    getrandom::fill(&mut challenge)
        .and_then(|()| getrandom::fill(&mut id))
        .map_err(|e| End::Protocol(format!("no randomness for CHAP: {e}")))?;
    let mut machine = Login::new(&state.portal, challenge, id[0], state.tsih());
    let mut seq: Option<Seq> = None;
    loop {
        let Some(p) = read_pdu(link, input, Digests::default(), LOGIN_DATA_MAX).await? else {
            return Err(End::Protocol("login PDU with a bad digest".into()));
        };
        let Some(req) = login::LoginRequest::from_pdu(&p.request, p.data) else {
            return Err(End::Protocol(format!(
                "opcode {:#04x} before login completed",
                p.bhs.opcode()
            )));
        };
        let (itt, isid, cmdsn) = (req.itt, req.isid, req.cmdsn);
        // Login PDUs are immediate: CmdSN does not advance. The first response's StatSN
        // is ours to choose; the initiator's ExpStatSN guess is as good as any.
        let s = seq.get_or_insert(Seq {
            statsn: req.expstatsn,
            expcmdsn: cmdsn,
            maxcmdsn: cmdsn.wrapping_add(CMD_WINDOW - 1),
        });
        s.expcmdsn = cmdsn;
        s.maxcmdsn = cmdsn.wrapping_add(CMD_WINDOW - 1);
        let (resp, step) = machine.step(&state.portal, &req);
        let header = pdu::login_response(
            &LoginHeader {
                transit: resp.transit,
                cont: resp.cont,
                csg: resp.csg,
                nsg: resp.nsg,
                isid,
                tsih: resp.tsih,
                itt,
                status_class: resp.status_class,
                status_detail: resp.status_detail,
            },
            *s,
            resp.data.len(),
        );
        s.statsn = s.statsn.wrapping_add(1);
        link.send(vec![Part::Bytes(encode(
            header,
            &resp.data,
            Digests::default(),
        ))])
        .await?;
        match step {
            Step::Continue => {}
            Step::Close => return Ok(None),
            Step::FullFeature(n) => return Ok(Some((n, *s))),
        }
    }
}
