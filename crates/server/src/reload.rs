//! Changing what is served while the daemon runs: NBD exports, iSCSI LUNs and ublk devices
//! added and removed through the control socket (`raidd export|lun|ublk add|remove`), and
//! the edited config file applied on
//! SIGHUP. Each change goes through the frontends' `reload` (`frontends.rs`), which changes
//! what a running frontend can change and names what waits for the next start; the
//! frontends' configuration in effect is kept here for the next change to start from.

use raidd_admin::control::Request;
use raidd_admin::exit::{AdminError, AdminResult, Exit};
use raidd_admin::volume::VolumeRef;

use crate::accept::ToWorker;
use crate::config::Config;
use crate::ctx::ControlCtx;
use crate::frontend::{ReloadCtx, WorkerTask};
use crate::frontends::Frontends;
use crate::iscsi::config::{lun_config, RawLun, TargetConfig};
use crate::nbd::config::{export_config, RawExport};
use crate::ublk::config::{ublk_entry, RawUblk};

/// Applies `new` in place of the frontends' configuration in effect; the lines saying what
/// changed and what waits for the next start. One change at a time: a device's start waits,
/// and another change meanwhile would start from what this one replaces.
async fn apply(ctx: &ControlCtx, new: &Frontends) -> Vec<String> {
    let _one = ctx.live.changing.lock().await;
    let old = ctx.live.frontends.borrow().clone();
    let mut serve = |array: usize, volume: Option<&VolumeRef>, what: String| {
        ctx.volumes.serve(&ctx.served, array, volume, what)
    };
    let mut release = |what: &str| ctx.volumes.release(what);
    let spawn = |w: usize, task: WorkerTask| {
        let to = ctx.to_workers.get(w).ok_or("no such worker thread")?;
        to.unbounded_send(ToWorker::Task(task))
            .map_err(|_| "the worker threads are stopping".to_string())
    };
    let mut rc = ReloadCtx {
        serve: &mut serve,
        release: &mut release,
        spawn: &spawn,
        threads: ctx.threads,
        notes: Vec::new(),
    };
    let applied = old.reload(new, &ctx.frontends, &mut rc).await;
    let notes = rc.notes;
    debug_assert!(
        applied
            .nbd
            .exports
            .iter()
            .enumerate()
            .all(|(i, e)| applied.nbd.exports[..i].iter().all(|x| x.name != e.name)),
        "export names stay unique"
    );
    debug_assert!(
        applied
            .ublk
            .iter()
            .enumerate()
            .all(|(i, u)| applied.ublk[..i].iter().all(|x| x.id != u.id)),
        "ublk device numbers stay unique"
    );
    debug_assert!(
        applied.iscsi.iter().flat_map(|c| &c.targets).all(|t| t
            .luns
            .iter()
            .enumerate()
            .all(|(i, l)| t.luns[..i].iter().all(|x| x.lun != l.lun))),
        "a target's LUN numbers stay unique"
    );
    *ctx.live.frontends.borrow_mut() = applied;
    for n in &notes {
        tracing::info!("reload: {n}");
    }
    notes
}

/// The served array called `name`'s index, after its volume table is read again (so a
/// volume made by a client of the whole array can be served).
async fn array_index(ctx: &ControlCtx, name: &str) -> AdminResult<usize> {
    let (i, served) = ctx.served_at(name)?;
    ctx.volumes.rescan(i, served).await.map(|_| i)
}

/// A request that changes what the frontends serve, answered.
pub async fn answer(ctx: &ControlCtx, req: Request) -> AdminResult<(String, serde_json::Value)> {
    match req {
        Request::ExportAdd {
            name,
            array,
            volume,
            read_only,
            description,
        } => {
            let raw = RawExport {
                name,
                array,
                volume,
                read_only,
                description,
            };
            export_add(ctx, raw).await
        }
        Request::ExportRemove { name } => export_remove(ctx, &name).await,
        Request::LunAdd {
            target,
            lun,
            array,
            volume,
            read_only,
        } => {
            let raw = RawLun {
                lun,
                array,
                volume,
                read_only,
            };
            lun_add(ctx, &target, raw).await
        }
        Request::UblkAdd {
            array,
            id,
            volume,
            read_only,
            queue_depth,
            max_io,
        } => {
            let raw = RawUblk {
                array,
                volume,
                id,
                read_only,
                queue_depth,
                max_io,
            };
            ublk_add(ctx, raw).await
        }
        Request::UblkRemove { id } => ublk_remove(ctx, id).await,
        Request::LunRemove { target, lun } => lun_remove(ctx, &target, lun).await,
        other => Err(AdminError::usage(format!(
            "{other:?} does not change what is served"
        ))),
    }
}

/// `raidd export add`: offers the export from the next handshake on.
pub async fn export_add(
    ctx: &ControlCtx,
    raw: RawExport,
) -> AdminResult<(String, serde_json::Value)> {
    let name = raw.name.clone();
    array_index(ctx, &raw.array).await?;
    let arrays: Vec<_> = ctx.served.iter().map(|s| s.config.clone()).collect();
    let entry = export_config(raw, &arrays).map_err(AdminError::usage)?;
    let mut new = ctx.live.frontends.borrow().clone();
    if new.nbd.exports.iter().any(|e| e.name == name) {
        return Err(AdminError::new(
            Exit::Conflict,
            format!("export {name:?} is already offered"),
        ));
    }
    new.nbd.exports.push(entry);
    let notes = apply(ctx, &new).await;
    if !ctx
        .live
        .frontends
        .borrow()
        .nbd
        .exports
        .iter()
        .any(|e| e.name == name)
    {
        return Err(AdminError::new(Exit::NotFound, notes.join("; ")));
    }
    Ok((
        format!(
            "export {name} is offered (not in the config file: a SIGHUP or a restart follows the file)\n"
        ),
        serde_json::json!({ "export": name, "notes": notes }),
    ))
}

/// `raidd export remove`: stops offering it; its connections take no more requests.
pub async fn export_remove(
    ctx: &ControlCtx,
    name: &str,
) -> AdminResult<(String, serde_json::Value)> {
    let mut new = ctx.live.frontends.borrow().clone();
    let before = new.nbd.exports.len();
    new.nbd.exports.retain(|e| e.name != name);
    if new.nbd.exports.len() == before {
        return Err(AdminError::new(
            Exit::NotFound,
            format!("no export named {name:?} is offered"),
        ));
    }
    let notes = apply(ctx, &new).await;
    Ok((
        format!("export {name} is no longer offered; its clients are disconnected\n"),
        serde_json::json!({ "export": name, "notes": notes }),
    ))
}

/// `raidd lun add`: a LUN of a served target from now on; the target's initiators are told
/// (REPORTED LUNS DATA HAS CHANGED) and find it when they scan again.
pub async fn lun_add(
    ctx: &ControlCtx,
    target: &str,
    raw: RawLun,
) -> AdminResult<(String, serde_json::Value)> {
    array_index(ctx, &raw.array).await?;
    let arrays: Vec<_> = ctx.served.iter().map(|s| s.config.clone()).collect();
    let mut new = ctx.live.frontends.borrow().clone();
    let t = served_target(&mut new, target)?;
    // Where no number is given: the lowest one free.
    let free = (0..)
        .find(|n| t.luns.iter().all(|l| l.lun != *n))
        .unwrap_or(0);
    let entry = lun_config(raw, free, &arrays).map_err(AdminError::usage)?;
    let number = entry.lun;
    if t.luns.iter().any(|l| l.lun == number) {
        return Err(AdminError::new(
            Exit::Conflict,
            format!("target {target} has a LUN {number} already"),
        ));
    }
    t.luns.push(entry);
    let notes = apply(ctx, &new).await;
    let live = ctx.live.frontends.borrow();
    let added = live
        .iscsi
        .iter()
        .flat_map(|c| &c.targets)
        .any(|t| t.name == target && t.luns.iter().any(|l| l.lun == number));
    if !added {
        return Err(AdminError::new(Exit::NotFound, notes.join("; ")));
    }
    Ok((
        format!(
            "LUN {number} of {target} is offered (not in the config file: a SIGHUP or a restart \
             follows the file)\n"
        ),
        serde_json::json!({ "target": target, "lun": number, "notes": notes }),
    ))
}

/// `raidd lun remove`: commands sent to the LUN from now on find no unit there; those it
/// runs finish. A target's only LUN stays.
pub async fn lun_remove(
    ctx: &ControlCtx,
    target: &str,
    number: u64,
) -> AdminResult<(String, serde_json::Value)> {
    let mut new = ctx.live.frontends.borrow().clone();
    let t = served_target(&mut new, target)?;
    if !t.luns.iter().any(|l| l.lun == number) {
        return Err(AdminError::new(
            Exit::NotFound,
            format!("target {target} has no LUN {number}"),
        ));
    }
    if t.luns.len() == 1 {
        return Err(AdminError::new(
            Exit::Conflict,
            format!(
                "LUN {number} is target {target}'s only LUN: a target keeps one while it serves \
                 (take the target out of the config and restart to end it)"
            ),
        ));
    }
    t.luns.retain(|l| l.lun != number);
    let notes = apply(ctx, &new).await;
    Ok((
        format!("LUN {number} of {target} is no longer offered\n"),
        serde_json::json!({ "target": target, "lun": number, "notes": notes }),
    ))
}

/// `raidd ublk add`: /dev/ublkbN made (or taken over from a raidd that died) and started.
pub async fn ublk_add(ctx: &ControlCtx, raw: RawUblk) -> AdminResult<(String, serde_json::Value)> {
    array_index(ctx, &raw.array).await?;
    let arrays: Vec<_> = ctx.served.iter().map(|s| s.config.clone()).collect();
    let mut new = ctx.live.frontends.borrow().clone();
    let free = (0..)
        .find(|n| new.ublk.iter().all(|u| u.id != *n))
        .unwrap_or(0);
    let entry = ublk_entry(raw, free, &arrays).map_err(AdminError::usage)?;
    let (id, device) = (entry.id, raidd_ublk::abi::block_path(entry.id));
    if new.ublk.iter().any(|u| u.id == id) {
        return Err(AdminError::new(
            Exit::Conflict,
            format!("{device} is served already"),
        ));
    }
    new.ublk.push(entry);
    let notes = apply(ctx, &new).await;
    if !ctx.live.frontends.borrow().ublk.iter().any(|u| u.id == id) {
        return Err(AdminError::new(Exit::Failure, notes.join("; ")));
    }
    Ok((
        format!(
            "{device} is served (not in the config file: a SIGHUP or a restart follows the file)\n"
        ),
        serde_json::json!({ "device": device, "id": id, "notes": notes }),
    ))
}

/// `raidd ublk remove`: the device stops (its requests in flight finish) and is deleted.
pub async fn ublk_remove(ctx: &ControlCtx, id: u32) -> AdminResult<(String, serde_json::Value)> {
    let device = raidd_ublk::abi::block_path(id);
    let mut new = ctx.live.frontends.borrow().clone();
    let before = new.ublk.len();
    new.ublk.retain(|u| u.id != id);
    if new.ublk.len() == before {
        return Err(AdminError::new(
            Exit::NotFound,
            format!("{device} is not served by this daemon"),
        ));
    }
    let notes = apply(ctx, &new).await;
    if ctx.live.frontends.borrow().ublk.iter().any(|u| u.id == id) {
        return Err(AdminError::new(Exit::Failure, notes.join("; ")));
    }
    Ok((
        format!("{device} is removed\n"),
        serde_json::json!({ "device": device, "id": id, "notes": notes }),
    ))
}

/// The served target called `name` in `frontends`.
fn served_target<'a>(
    frontends: &'a mut Frontends,
    name: &str,
) -> AdminResult<&'a mut TargetConfig> {
    let Some(ic) = frontends.iscsi.as_mut() else {
        return Err(AdminError::new(
            Exit::NotFound,
            "iSCSI is not served (the config has no [iscsi] or [[target]])",
        ));
    };
    ic.targets
        .iter_mut()
        .find(|t| t.name == name)
        .ok_or_else(|| {
            AdminError::new(
                Exit::NotFound,
                format!(
                "no target named {name:?} is served (a new target needs the config and a restart)"
            ),
            )
        })
}

/// SIGHUP: reads the config file again and applies what can change while serving (exports
/// added, removed, changed); logs each change and what waits for the next start.
pub async fn sighup(ctx: &ControlCtx) {
    let Some(path) = &ctx.live.path else {
        tracing::warn!("SIGHUP: the daemon was not started from a config file");
        return;
    };
    let mut new = match Config::load(path) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("SIGHUP: the config is not applied: {e}");
            return;
        }
    };
    new.control_socket = ctx.live.started.control_socket.clone();
    for n in unchanged_settings(&ctx.live.started, &new) {
        tracing::warn!("reload: {n}");
    }
    // Indices of the new file's arrays among those served.
    let kept: Vec<Option<usize>> = new
        .arrays
        .iter()
        .map(|a| ctx.served.iter().position(|s| s.config.name == a.name))
        .collect();
    let mut notes = Vec::new();
    let frontends = new.frontends.without_arrays(&kept, &new.arrays, &mut notes);
    for n in notes {
        tracing::warn!("reload: {n}");
    }
    for i in 0..ctx.served.len() {
        if let Err(e) = ctx.volumes.rescan(i, &ctx.served[i]).await {
            tracing::warn!(array = %ctx.served[i].config.name, "volumes not read again: {}", e.message);
        }
    }
    let notes = apply(ctx, &frontends).await;
    tracing::info!(changes = notes.len(), "SIGHUP: the config is applied");
}

/// What changed in the file besides the frontends' entries: applied at the next start.
fn unchanged_settings(started: &Config, new: &Config) -> Vec<String> {
    let mut notes = Vec::new();
    let arrays = |c: &Config| c.arrays.clone();
    if arrays(started) != arrays(new) {
        notes.push(
            "[[array]]: changed, applied at the next start (arrays are assembled when it starts)"
                .to_string(),
        );
    }
    let rest = |c: &Config| Config {
        arrays: Vec::new(),
        frontends: started.frontends.clone(),
        ..c.clone()
    };
    if rest(started) != rest(new) {
        notes.push(
            "settings other than [[array]] and the frontends' sections changed: applied at the \
             next start"
                .to_string(),
        );
    }
    notes
}
