//! The iSCSI frontend (RFC 7143): targets and LUNs over the daemon's arrays. Its sections
//! are `config.rs`'s; what its connections share (targets, LUNs, reservations, nexuses) is
//! `target.rs`'s.
//!
//! A connection logs in through `raidd_iscsi`'s login state machine (`login.rs`) and then
//! runs the full
//! feature phase ([`conn`]): one reader takes PDUs off the socket (Data-Out payloads land
//! straight in the command's aligned buffer), a task per SCSI command runs it against the
//! array ([`task`]) and queues its PDUs, and one writer sends whatever is queued with a
//! single gathered `sendmsg` (Data-In straight from the buffer the array filled). SCSI
//! semantics (CDB checks, sense data, VPD and mode pages, persistent reservations) are
//! `raidd_scsi`'s pure functions; this module moves bytes and keeps the sequence numbers.
//!
//! Sessions have one connection (MaxConnections=1) and error recovery level 0: a broken
//! connection ends its session, and the initiator logs in again.

pub(crate) mod config;
mod conn;
mod ctl;
mod login;
mod pdu_io;
mod pr_store;
mod session;
mod target;
mod task;

use std::rc::Rc;
use std::sync::Arc;

use futures::future::LocalBoxFuture;
use raidd_admin::exit::{AdminError, AdminResult};
use raidd_admin::status::{IscsiStatus, LunStatus, StatusReport, TargetStatus};
use raidd_engine::Array;
use raidd_rt::net::TcpListener;

use config::{IscsiConfig, LunConfig, DEFAULT_CONNECTION_MEMORY};
use target::IscsiState;

use crate::config::arrays::ArrayConfig;
use crate::frontend::{
    keep_served, Frontend, ParseCtx, ReloadCtx, Resolver, Running, Sections, Serving, StartCtx,
    Started,
};
use crate::link::Link;
use crate::metrics::Sink;
use crate::shared::{SharedState, Stop};
use crate::watch::Watch;

/// The iSCSI frontend.
#[derive(Debug)]
pub struct Iscsi;

impl Frontend for Iscsi {
    const SECTIONS: &'static [&'static str] = &["iscsi", "target"];
    /// `None`: iSCSI is off (the file has no `[iscsi]` and no `[[target]]`).
    type Config = Option<IscsiConfig>;

    fn parse(sections: Sections, ctx: &ParseCtx) -> Result<Option<IscsiConfig>, String> {
        config::parse(sections, ctx)
    }

    fn connection_memory(config: &Option<IscsiConfig>) -> u64 {
        config
            .as_ref()
            .map_or(DEFAULT_CONNECTION_MEMORY, |c| c.connection_memory)
    }

    fn without_arrays(
        config: &Option<IscsiConfig>,
        kept: &[Option<usize>],
        arrays: &[ArrayConfig],
        notes: &mut Vec<String>,
    ) -> Option<IscsiConfig> {
        let mut ic = config.clone()?;
        let mut targets = Vec::new();
        for t in &ic.targets {
            let mut t = t.clone();
            t.luns.retain_mut(|l| match kept[l.array] {
                Some(array) => {
                    l.array = array;
                    true
                }
                None => {
                    notes.push(format!(
                        "iSCSI target {} LUN {} is not offered: its array {:?} did not start",
                        t.name, l.lun, arrays[l.array].name
                    ));
                    false
                }
            });
            if t.luns.is_empty() {
                notes.push(format!(
                    "iSCSI target {} is not offered: it has no LUN left",
                    t.name
                ));
            } else {
                targets.push(t);
            }
        }
        ic.targets = targets;
        Some(ic)
    }

    fn resolve(config: &mut Option<IscsiConfig>, serve: &mut Resolver<'_>) -> Vec<Serving> {
        let mut out = Vec::new();
        let Some(ic) = config.as_mut() else {
            return out;
        };
        ic.targets.retain_mut(|t| {
            let name = t.name.clone();
            keep_served(&mut t.luns, &mut out, serve, |l| {
                (
                    l.array,
                    l.volume.as_ref(),
                    format!("LUN {} of {name}", l.lun),
                )
            });
            if t.luns.is_empty() {
                tracing::warn!("iSCSI target {} is not offered: it has no LUN left", t.name);
                return false;
            }
            true
        });
        out
    }

    fn start(
        config: &Option<IscsiConfig>,
        serving: Vec<Serving>,
        ctx: &StartCtx,
    ) -> AdminResult<Option<Started>> {
        let Some(ic) = config else {
            return Ok(None);
        };
        let listener = TcpListener::bind(ic.listen)
            .map_err(|e| AdminError::io(format!("cannot listen for iSCSI on {}", ic.listen), &e))?;
        // What each target's LUNs serve, in the targets' order.
        let mut serving = serving.into_iter();
        let luns: Vec<Vec<Serving>> = ic
            .targets
            .iter()
            .map(|t| serving.by_ref().take(t.luns.len()).collect())
            .collect();
        assert!(serving.next().is_none(), "a serving per LUN, no more");
        let state = target::state(ic, &luns, listener.local_addr())
            .map_err(|e| AdminError::io("cannot start the iSCSI target", &e))?;
        Ok(Some(Started {
            running: Arc::new(IscsiServer {
                state: Arc::new(state),
                shared: ctx.shared.clone(),
                connection_memory: ic.connection_memory,
                listen: listener.local_addr(),
            }),
            listener: Some(listener),
        }))
    }

    fn reload<'a>(
        old: &'a Option<IscsiConfig>,
        new: &'a Option<IscsiConfig>,
        running: Option<&'a dyn Running>,
        rc: &'a mut ReloadCtx<'_, '_>,
    ) -> LocalBoxFuture<'a, Option<IscsiConfig>> {
        Box::pin(std::future::ready(luns_changed(old, new, running, rc)))
    }

    fn metrics(report: &StatusReport, s: &mut Sink) {
        let Some(i) = &report.iscsi else { return };
        for t in &i.targets {
            s.gauge(
                "raidd_iscsi_target_sessions",
                "iSCSI sessions logged in to the target.",
                &[("target", t.name.as_str())],
                t.sessions as f64,
            );
            for l in &t.luns {
                let export = format!("{}/{}", t.name, l.lun);
                s.operations(
                    &l.latency,
                    &[
                        ("export", &export),
                        ("array", &l.array),
                        ("protocol", "iscsi"),
                    ],
                );
            }
        }
    }
}

/// The iSCSI configuration without its LUNs: what changes only with a restart.
fn settings(c: &Option<IscsiConfig>) -> Option<IscsiConfig> {
    let mut c = c.clone()?;
    for t in &mut c.targets {
        t.luns.clear();
    }
    Some(c)
}

/// One change to a running target's LUNs.
#[derive(Debug, Clone, PartialEq, Eq)]
enum LunStep {
    Add(LunConfig),
    /// The LUN of this number serves something else.
    Replace(LunConfig, LunConfig),
    Remove(u64),
}

/// The changes from `old` to `new`, in the order they are made: new numbers added first,
/// LUNs whose entry changed swapped in place, numbers gone removed last, so that a target
/// whose LUNs are all replaced keeps one throughout.
fn lun_steps(old: &[LunConfig], new: &[LunConfig]) -> Vec<LunStep> {
    let find = |list: &[LunConfig], n: u64| list.iter().find(|l| l.lun == n).cloned();
    let added = new.iter().filter(|l| find(old, l.lun).is_none());
    let mut steps: Vec<LunStep> = added.cloned().map(LunStep::Add).collect();
    for l in new {
        match find(old, l.lun) {
            Some(was) if was != *l => steps.push(LunStep::Replace(was, l.clone())),
            _ => {}
        }
    }
    let gone = old.iter().filter(|l| find(new, l.lun).is_none());
    steps.extend(gone.map(|l| LunStep::Remove(l.lun)));
    steps
}

/// One running target's LUNs changed from `luns` (the configuration in effect, updated as
/// each change is made) towards a new list.
struct LunChange<'a, 'b, 'r> {
    state: &'a IscsiState,
    t: usize,
    luns: &'a mut Vec<LunConfig>,
    rc: &'a mut ReloadCtx<'b, 'r>,
}

impl LunChange<'_, '_, '_> {
    /// Makes the changes [`lun_steps`] plans, in its order.
    fn to(&mut self, new: &[LunConfig]) {
        for step in lun_steps(self.luns, new) {
            match step {
                LunStep::Add(l) => self.add(&l),
                LunStep::Replace(was, l) => self.replace(&was, &l),
                LunStep::Remove(n) => self.remove(n),
            }
        }
        debug_assert_eq!(
            self.luns.len(),
            self.state.targets[self.t].luns().len(),
            "the config in effect is what is served"
        );
    }

    fn what(&self, lun: u64) -> String {
        format!("LUN {lun} of {}", self.state.targets[self.t].name)
    }

    fn add(&mut self, l: &LunConfig) {
        let what = self.what(l.lun);
        let Some(s) = (self.rc.serve)(l.array, l.volume.as_ref(), what.clone()) else {
            self.rc.notes.push(format!(
                "{what} not offered: what it serves cannot be served (see the log)"
            ));
            return;
        };
        let lun = self.state.build_lun(self.t, l, &s);
        match self.state.add_lun(self.t, lun) {
            Ok(()) => {
                self.luns.push(l.clone());
                self.rc.notes.push(format!("{what} added"));
            }
            Err(m) => {
                (self.rc.release)(&what);
                self.rc.notes.push(m);
            }
        }
    }

    /// LUN `was.lun` serves what `l` says from now on; where that cannot be served, it
    /// stays as it was.
    fn replace(&mut self, was: &LunConfig, l: &LunConfig) {
        debug_assert_eq!(was.lun, l.lun, "a LUN is replaced by one of its number");
        let what = self.what(l.lun);
        // Both are known by one name to the volumes' users: the old one's goes first.
        (self.rc.release)(&what);
        let Some(s) = (self.rc.serve)(l.array, l.volume.as_ref(), what.clone()) else {
            let _ = (self.rc.serve)(was.array, was.volume.as_ref(), what.clone());
            self.rc.notes.push(format!(
                "{what} kept as it was: what it is to serve cannot be served (see the log)"
            ));
            return;
        };
        let lun = self.state.build_lun(self.t, l, &s);
        match self.state.replace_lun(self.t, lun) {
            Ok(_) => {
                for x in self.luns.iter_mut().filter(|x| x.lun == l.lun) {
                    *x = l.clone();
                }
                self.rc.notes.push(format!("{what} changed"));
            }
            Err(m) => self.rc.notes.push(m),
        }
    }

    fn remove(&mut self, lun: u64) {
        let what = self.what(lun);
        match self.state.remove_lun(self.t, lun) {
            Ok(_) => {
                (self.rc.release)(&what);
                self.luns.retain(|l| l.lun != lun);
                self.rc.notes.push(format!("{what} removed"));
            }
            Err(m) => self.rc.notes.push(m),
        }
    }
}

/// The iSCSI frontend as its connections share it.
#[derive(Debug)]
struct IscsiServer {
    state: Arc<IscsiState>,
    /// The budget, limits and connection count of every frontend.
    shared: SharedState,
    connection_memory: u64,
    listen: std::net::SocketAddr,
}

impl Running for IscsiServer {
    fn name(&self) -> &'static str {
        "iscsi"
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn listen(&self) -> Option<std::net::SocketAddr> {
        Some(self.listen)
    }

    fn serve(
        self: Arc<Self>,
        link: Link,
        watch: Rc<Watch>,
        stop: Stop,
    ) -> LocalBoxFuture<'static, ()> {
        Box::pin(async move {
            let state = self.state.clone();
            login::serve_connection(
                link,
                watch,
                state,
                &self.shared,
                self.connection_memory,
                stop,
            )
            .await
        })
    }

    fn report(&self, report: &mut StatusReport, _arrays: &[Arc<Array>]) {
        let st = &self.state;
        let targets = st
            .targets
            .iter()
            .enumerate()
            .map(|(i, t)| TargetStatus {
                name: t.name.clone(),
                sessions: st.nexuses_of(i).len(),
                luns: t
                    .luns()
                    .iter()
                    .map(|l| LunStatus {
                        lun: l.number,
                        array: l.extent.array().name().to_string(),
                        volume: l.volume.clone(),
                        read_only: l.read_only(),
                        latency: l.latency.snapshot(),
                    })
                    .collect(),
            })
            .collect();
        report.iscsi = Some(IscsiStatus {
            listen: st.portal.address.clone(),
            targets,
        });
    }

    fn announce(&self) {
        tracing::info!(
            "serving iSCSI on {} ({} targets)",
            self.listen,
            self.state.targets.len()
        );
    }

    fn ready_line(&self) -> Option<String> {
        Some(format!("iSCSI on {}", self.listen))
    }
}

/// [`Iscsi::reload`]'s work: a running target's LUNs change (nothing in it waits); the
/// rest of the section waits for the next start.
fn luns_changed(
    old: &Option<IscsiConfig>,
    new: &Option<IscsiConfig>,
    running: Option<&dyn Running>,
    rc: &mut ReloadCtx<'_, '_>,
) -> Option<IscsiConfig> {
    if settings(old) != settings(new) {
        rc.notes.push(
            "[iscsi], [[target]]: changed, applied at the next start (the listener and the \
             targets, their names, CHAP and initiators, are set when it starts; their LUNs \
             change while it serves)"
                .into(),
        );
    }
    let server = running.and_then(|r| r.as_any().downcast_ref::<IscsiServer>());
    let (Some(server), Some(old_c), Some(new_c)) = (server, old, new) else {
        if old.as_ref().map(|c| &c.targets) != new.as_ref().map(|c| &c.targets) {
            rc.notes
                .push("[[target.lun]]: changed, but iSCSI is not running".into());
        }
        return old.clone();
    };
    let mut applied = old_c.clone();
    for t in &mut applied.targets {
        let (Some(nt), Some(ti)) = (
            new_c.targets.iter().find(|x| x.name == t.name),
            server.state.target_index(&t.name),
        ) else {
            continue;
        };
        let mut change = LunChange {
            state: &server.state,
            t: ti,
            luns: &mut t.luns,
            rc: &mut *rc,
        };
        change.to(&nt.luns);
    }
    Some(applied)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lun(lun: u64, array: usize) -> LunConfig {
        LunConfig {
            lun,
            array,
            volume: None,
            read_only: false,
        }
    }

    /// Every pair of LUN lists over numbers 0..3 and arrays 0..2 (each number at most
    /// once): the steps turn old into new, and a target that had LUNs and keeps some is
    /// never left without one on the way.
    #[test]
    fn lun_changes_end_where_asked_and_never_empty_a_target() {
        let lists: Vec<Vec<LunConfig>> = (0..27u32)
            .map(|code| {
                (0..3u64)
                    .filter_map(|n| match code / 3u32.pow(n as u32) % 3 {
                        0 => None,
                        a => Some(lun(n, a as usize - 1)),
                    })
                    .collect()
            })
            .collect();
        for old in &lists {
            for new in &lists {
                let mut now = old.clone();
                for step in lun_steps(old, new) {
                    match step {
                        LunStep::Add(l) => {
                            assert!(now.iter().all(|x| x.lun != l.lun), "{old:?} -> {new:?}");
                            now.push(l);
                        }
                        LunStep::Replace(was, l) => {
                            let at = now.iter().position(|x| *x == was).unwrap();
                            now[at] = l;
                        }
                        LunStep::Remove(n) => {
                            now.retain(|x| x.lun != n);
                            assert!(
                                !now.is_empty() || new.is_empty(),
                                "{old:?} -> {new:?} emptied the target"
                            );
                        }
                    }
                }
                now.sort_by_key(|l| l.lun);
                let mut want = new.clone();
                want.sort_by_key(|l| l.lun);
                assert_eq!(now, want, "{old:?} -> {new:?}");
            }
        }
    }
}
