//! Changing what is served while the daemon runs: NBD exports added and removed through the
//! control socket (`raidd export add|remove`), and the edited config file applied on
//! SIGHUP. Each change goes through the frontends' `reload` (`frontends.rs`), which changes
//! what a running frontend can change and names what waits for the next start; the
//! frontends' configuration in effect is kept here for the next change to start from.

use raidd_admin::exit::{AdminError, AdminResult, Exit};
use raidd_admin::volume::VolumeRef;

use crate::config::Config;
use crate::ctx::ControlCtx;
use crate::frontends::Frontends;
use crate::nbd::config::{export_config, RawExport};

/// Applies `new` in place of the frontends' configuration in effect; the lines saying what
/// changed and what waits for the next start.
fn apply(ctx: &ControlCtx, new: &Frontends) -> Vec<String> {
    let old = ctx.live.frontends.borrow().clone();
    let mut serve = |array: usize, volume: Option<&VolumeRef>, what: String| {
        ctx.volumes.serve(&ctx.served, array, volume, what)
    };
    let mut release = |what: &str| ctx.volumes.release(what);
    let (applied, notes) = old.reload(new, &ctx.frontends, &mut serve, &mut release);
    debug_assert!(
        applied
            .nbd
            .exports
            .iter()
            .enumerate()
            .all(|(i, e)| applied.nbd.exports[..i].iter().all(|x| x.name != e.name)),
        "export names stay unique"
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
    let notes = apply(ctx, &new);
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
pub fn export_remove(ctx: &ControlCtx, name: &str) -> AdminResult<(String, serde_json::Value)> {
    let mut new = ctx.live.frontends.borrow().clone();
    let before = new.nbd.exports.len();
    new.nbd.exports.retain(|e| e.name != name);
    if new.nbd.exports.len() == before {
        return Err(AdminError::new(
            Exit::NotFound,
            format!("no export named {name:?} is offered"),
        ));
    }
    let notes = apply(ctx, &new);
    Ok((
        format!("export {name} is no longer offered; its clients are disconnected\n"),
        serde_json::json!({ "export": name, "notes": notes }),
    ))
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
    let notes = apply(ctx, &frontends);
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
