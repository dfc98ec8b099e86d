//! The control socket's server side: the listener (a Unix socket, mode 0600), one request
//! line per connection, and the handlers: `detail`, member management (`fail`, `remove`,
//! `add`, `replace`, the spare pool), scrubbing (`check`, `repair`, `idle`) and volumes
//! (`volume-list|create|resize|delete`, through [`crate::volumes`]). `status` is gathered in
//! [`crate::status`]. The protocol and the reports are `raidd-admin`'s.

use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use futures::future::{self, Either};
use raidd_admin::control::{self, Request, Response};
use raidd_admin::detail::Gathered;
use raidd_admin::exit::{AdminError, AdminResult, Exit};
use raidd_admin::members::{self, Access};
use raidd_engine::{Array, ConsistencyPolicy, SlotState};
use raidd_rt::net::{Stream, UnixListener};

use crate::arrays::Served;
use crate::config::{self, Find};
use crate::ctx::ControlCtx;
use crate::lifecycle::Watched;
use raidd_admin::status::volume_line;
use raidd_admin::volume::Change;

/// Binds the control socket at `path`: its directory made root-only if new, a socket left
/// by a dead daemon removed (one that answers is a conflict), the socket itself mode 0600.
pub fn bind(path: &Path) -> AdminResult<UnixListener> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| AdminError::io(format!("cannot create {}", dir.display()), &e))?;
        }
    }
    // A socket file left by a daemon that died: remove it only if nobody answers on it.
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(AdminError::new(
                Exit::Conflict,
                format!("another daemon answers on {}", path.display()),
            ));
        }
        std::fs::remove_file(path)
            .map_err(|e| AdminError::io(format!("cannot remove stale {}", path.display()), &e))?;
    }
    // Created with a umask that keeps others out from the first moment, then set exactly.
    // SAFETY: umask only changes this process's file-creation mask.
    let old = unsafe { libc::umask(0o077) };
    let listener = UnixListener::bind(path);
    // SAFETY: as above, restoring the previous mask.
    unsafe { libc::umask(old) };
    let listener =
        listener.map_err(|e| AdminError::io(format!("cannot listen on {}", path.display()), &e))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| AdminError::io(format!("cannot restrict {}", path.display()), &e))?;
    Ok(listener)
}

/// Answers control connections, each on a task of its own, until dropped.
pub async fn serve(listener: UnixListener, ctx: Rc<ControlCtx>) {
    loop {
        match listener.accept().await {
            Ok(stream) => {
                let ctx = ctx.clone();
                raidd_rt::spawn_local(async move {
                    if let Err(e) = control_connection(stream, &ctx).await {
                        tracing::debug!("control connection: {e}");
                    }
                });
            }
            Err(e) => {
                tracing::warn!("control socket accept failed: {e}");
                raidd_rt::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn control_connection(stream: Stream, ctx: &ControlCtx) -> std::io::Result<()> {
    // One request line, bounded; a client that sends more or never ends its line is cut off.
    let read_line = async {
        let mut line = Vec::new();
        let mut buf = vec![0u8; 4096];
        loop {
            let (r, b) = stream.read(buf).await;
            buf = b;
            let n = r?;
            if n == 0 {
                break;
            }
            line.extend_from_slice(&buf[..n]);
            if line.contains(&b'\n') || line.len() > control::MAX_REQUEST {
                break;
            }
        }
        Ok::<Vec<u8>, std::io::Error>(line)
    };
    let timeout = raidd_rt::time::sleep(Duration::from_secs(10));
    futures::pin_mut!(read_line, timeout);
    let line = match future::select(read_line, timeout).await {
        Either::Left((r, _)) => r?,
        Either::Right(_) => return Ok(()),
    };
    let resp = if line.len() > control::MAX_REQUEST {
        Response::err(Exit::Usage, "control request too long")
    } else {
        let end = line.iter().position(|&b| b == b'\n').unwrap_or(line.len());
        match control::parse_request(&line[..end]) {
            Ok(req) => answer(ctx, req).await,
            Err(e) => Response::err(Exit::Usage, e),
        }
    };
    let (r, _) = stream.write_all(control::encode_response(&resp)).await;
    r
}

pub(crate) async fn answer(ctx: &ControlCtx, req: Request) -> Response {
    let r = match req {
        Request::Status => {
            let report = crate::status::report(ctx).await;
            let json = serde_json::to_value(&report).unwrap_or(serde_json::Value::Null);
            return Response::ok(report.text(), json);
        }
        Request::Detail { array } => detail(ctx, &array).await,
        Request::Fail { array, member } => fail(ctx, &array, &member).await,
        Request::Remove { array, member } => remove(ctx, &array, &member).await,
        Request::Add {
            array,
            member,
            journal: false,
        } => add(ctx, &array, &member).await,
        Request::Add {
            array,
            member,
            journal: true,
        } => add_journal(ctx, &array, &member).await,
        Request::Replace {
            array,
            member,
            with,
        } => replace(ctx, &array, &member, &with).await,
        Request::Check { array } => scrub(ctx, &array, raidd_engine::SyncKind::Check),
        Request::Repair { array } => scrub(ctx, &array, raidd_engine::SyncKind::Repair),
        Request::Idle { array } => idle(ctx, &array),
        Request::SpareAdd { member, group } => spare_add(ctx, &member, group),
        Request::SpareRemove { member } => ctx.life.pool_remove(&member).map(|()| {
            (
                format!("{} left the spare pool\n", member.display()),
                serde_json::json!({ "spare": member }),
            )
        }),
        Request::VolumeList { array } => volume_list(ctx, &array).await,
        Request::VolumeCreate { array, name, size } => {
            volume_change(ctx, &array, Change::Create { name, size }).await
        }
        Request::VolumeResize {
            array,
            name,
            size,
            shrink,
        } => volume_change(ctx, &array, Change::Resize { name, size, shrink }).await,
        Request::VolumeDelete { array, name } => {
            volume_change(ctx, &array, Change::Delete { name }).await
        }
        req @ (Request::ExportAdd { .. }
        | Request::ExportRemove { .. }
        | Request::LunAdd { .. }
        | Request::LunRemove { .. }
        | Request::UblkAdd { .. }
        | Request::UblkRemove { .. }) => crate::reload::answer(ctx, req).await,
        Request::Grow {
            array,
            consistency_policy,
            bitmap_chunk,
            journal_mode,
        } => match journal_mode {
            Some(mode) if consistency_policy.is_none() => journal_mode_to(ctx, &array, mode).await,
            Some(_) => Err(AdminError::usage(
                "--journal-mode and --consistency-policy are separate changes: give one",
            )),
            None => grow(ctx, &array, consistency_policy, bitmap_chunk).await,
        },
    };
    match r {
        Ok((text, json)) => Response::ok(text, json),
        Err(e) => Response::err(e.exit, e.message),
    }
}

type Answer = AdminResult<(String, serde_json::Value)>;

/// Puts `member` in the spare pool, unless it serves somewhere already.
fn spare_add(ctx: &ControlCtx, member: &Path, group: Option<String>) -> Answer {
    if let Some(g) = &group {
        config::check_spare_group(g).map_err(AdminError::usage)?;
    }
    if let Some(owner) = owner_of(ctx, &member.display().to_string()) {
        return Err(AdminError::new(
            Exit::Conflict,
            format!("{} is a member of {owner}", member.display()),
        ));
    }
    ctx.life.pool_add(member, group).map(|()| {
        (
            format!("{} is in the spare pool\n", member.display()),
            serde_json::json!({ "spare": member }),
        )
    })
}

fn served<'a>(ctx: &'a ControlCtx, array: &str) -> AdminResult<&'a Served> {
    ctx.served_at(array).map(|(_, s)| s)
}

async fn detail(ctx: &ControlCtx, array: &str) -> Answer {
    let (i, s) = ctx.served_at(array)?;
    debug_assert!(
        s.session.root < s.session.arrays.len(),
        "a served array has its root"
    );
    let g = Gathered::new(&s.session.arrays, s.session.root).await;
    let volumes = ctx.volumes.table(i);
    let mut text = g.text(&s.session.unavailable);
    volumes.write_detail(&mut text);
    let mut json = g.json(&s.session.unavailable);
    json.volumes = Some(volumes);
    Ok((
        text,
        serde_json::to_value(json).unwrap_or(serde_json::Value::Null),
    ))
}

/// `volume list` through the daemon: the table read again.
async fn volume_list(ctx: &ControlCtx, array: &str) -> Answer {
    let (i, s) = ctx.served_at(array)?;
    let t = ctx.volumes.rescan(i, s).await?;
    let mut json = serde_json::to_value(&t).unwrap_or(serde_json::Value::Null);
    json["array"] = serde_json::Value::String(array.to_string());
    Ok((t.listing(array), json))
}

/// `volume create|resize|delete` through the daemon.
async fn volume_change(ctx: &ControlCtx, array: &str, change: Change) -> Answer {
    let (i, s) = ctx.served_at(array)?;
    let done = change.done();
    let v = ctx.volumes.change(i, s, change).await?;
    let text = format!("{done}: {}", volume_line(&v).trim_start());
    Ok((
        text,
        serde_json::to_value(&v).unwrap_or(serde_json::Value::Null),
    ))
}

/// `raidd detail NAME --json`'s document, for the HTTP API.
pub async fn detail_json(ctx: &ControlCtx, array: &str) -> AdminResult<serde_json::Value> {
    detail(ctx, array).await.map(|(_, json)| json)
}

/// Whether two member names denote the same file (names are paths as given at opening).
fn same_member(name: &str, given: &str) -> bool {
    if name == given {
        return true;
    }
    match (std::fs::canonicalize(name), std::fs::canonicalize(given)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// The array (of a configured array's arrays, inner ones included) that holds `member` in
/// a slot, as a failed member out of its slot, or as its spare; with the engine's name.
fn holder(s: &Served, member: &str) -> Option<(Arc<Array>, String)> {
    s.session.arrays.iter().find_map(|a| {
        let name = a
            .array
            .slots()
            .names()
            .into_iter()
            .find(|n| same_member(n, member))?;
        Some((a.array.clone(), name))
    })
}

/// The configured array or the pool that uses `member`, if any.
fn owner_of(ctx: &ControlCtx, member: &str) -> Option<String> {
    for s in &ctx.served {
        if holder(s, member).is_some() {
            return Some(format!("array {}", s.config.name));
        }
    }
    ctx.life
        .pool_names()
        .into_iter()
        .any(|(p, _)| same_member(&p, member))
        .then(|| "the spare pool".to_string())
}

/// Whether the next start finds `member` for the configured array: the config lists it,
/// or the array is named by UUID and the scan patterns name it.
fn in_config(ctx: &ControlCtx, s: &Served, member: &str) -> bool {
    match &s.config.find {
        Find::Paths(paths) => paths
            .iter()
            .any(|p| same_member(&p.display().to_string(), member)),
        Find::Uuid { .. } => {
            debug_assert!(!ctx.scan.is_empty(), "an array by UUID comes with patterns");
            raidd_admin::scan::matches_any(&ctx.scan, Path::new(member))
        }
    }
}

/// What to tell the admin when the next start would not find `member` for `array`.
fn config_note(s: &Served, array: &str, member: &str, instead: Option<&str>) -> String {
    match (&s.config.find, instead) {
        (Find::Uuid { .. }, _) => format!(
            "note: {member} is not under the config's scan patterns: add one that names it, or the next start will not find it\n"
        ),
        (Find::Paths(_), None) => format!(
            "note: add {member} to the members of array {array} in the config, or the next start will not assemble it\n"
        ),
        (Find::Paths(_), Some(old)) => format!(
            "note: put {member} in place of {old} in the members of array {array} in the config\n"
        ),
    }
}

fn not_a_member(array: &str, member: &str) -> AdminError {
    AdminError::new(
        Exit::NotFound,
        format!("{member} is not a member of {array}"),
    )
}

async fn fail(ctx: &ControlCtx, array: &str, member: &str) -> Answer {
    let s = served(ctx, array)?;
    let (a, name) = holder(s, member).ok_or_else(|| not_a_member(array, member))?;
    let role = a.slots().role_of(&name).ok_or_else(|| {
        AdminError::new(
            Exit::Conflict,
            format!("{name} is not working in {array} (already failed, or a spare)"),
        )
    })?;
    a.fail_member(role).await?;
    Ok((
        format!("{name} failed in {array}; the array runs degraded\n"),
        serde_json::json!({ "array": array, "member": name, "role": role }),
    ))
}

async fn remove(ctx: &ControlCtx, array: &str, member: &str) -> Answer {
    let s = served(ctx, array)?;
    let (a, name) = holder(s, member).ok_or_else(|| not_a_member(array, member))?;
    a.remove_member(&name).await?;
    Ok((
        format!("{name} removed from {array}\n"),
        serde_json::json!({ "array": array, "member": name }),
    ))
}

/// `member`'s path as text, where no served array uses it.
fn unused(ctx: &ControlCtx, member: &std::path::Path) -> AdminResult<String> {
    let text = member.display().to_string();
    match owner_of(ctx, &text) {
        Some(owner) => Err(AdminError::new(
            Exit::Conflict,
            format!("{text} is already used by {owner}"),
        )),
        None => Ok(text),
    }
}

/// A new write journal for the array with a failed or missing one (the outer array, or an
/// inner one of a nested pool).
async fn add_journal(ctx: &ControlCtx, array: &str, member: &std::path::Path) -> Answer {
    let s = served(ctx, array)?;
    let text = unused(ctx, member)?;
    let target = s
        .session
        .arrays
        .iter()
        .find(|a| a.array.slots().journal_state().is_some())
        .ok_or_else(|| AdminError::usage(format!("{array} has no write journal")))?;
    let m = members::open_timed(member, Access::ReadWrite, ctx.member_timeout)?;
    target.array.consistency().add_journal(m).await?;
    let name = target.array.name();
    Ok((
        format!("{text} is the write journal of {name}; it takes writes again\n"),
        serde_json::json!({ "array": name, "journal": text }),
    ))
}

async fn add(ctx: &ControlCtx, array: &str, member: &std::path::Path) -> Answer {
    let s = served(ctx, array)?;
    let text = unused(ctx, member)?;
    // The array that needs it most: an inner one with a free slot first (nested arrays),
    // else the first with redundancy, where it waits as a spare.
    let redundant: Vec<&raidd_engine::assemble::Assembled> = s
        .session
        .arrays
        .iter()
        .filter(|a| a.array.can_scrub() && !a.array.is_read_only())
        .collect();
    let target = redundant
        .iter()
        .find(|a| {
            (0..a.array.geometry().members()).any(|r| {
                matches!(
                    a.array.slots().state(r),
                    SlotState::Missing | SlotState::Faulty
                )
            })
        })
        .or(redundant.first())
        .ok_or_else(|| {
            AdminError::usage(format!(
                "{array} has no redundancy (or is read-only): there is nothing to add a member to"
            ))
        })?;
    let m = members::open_timed(member, Access::ReadWrite, ctx.member_timeout)?;
    let added = target.array.add_member(m).await?;
    let by_bitmap = match added {
        raidd_engine::Added::Recovering(r) => target.array.slots().recovering_by_bitmap(r),
        raidd_engine::Added::Spare => false,
    };
    let mut out = match added {
        raidd_engine::Added::Recovering(role) => {
            if let Some(w) = ctx
                .watched
                .iter()
                .find(|w| Arc::ptr_eq(&w.array, &target.array))
            {
                ctx.life.start_recovery(w, role);
            }
            let how = if by_bitmap {
                " (re-added: only the chunks its write-intent bitmap marks)"
            } else {
                ""
            };
            format!(
                "{text} added to {} in slot {role}; recovery started{how}\n",
                target.array.name()
            )
        }
        raidd_engine::Added::Spare => {
            format!("{text} added to {} as a spare\n", target.array.name())
        }
    };
    if !in_config(ctx, s, &text) {
        out.push_str(&config_note(s, array, &text, None));
    }
    let json = serde_json::json!({
        "array": array,
        "member": text,
        "role": match added {
            raidd_engine::Added::Recovering(r) => Some(r),
            raidd_engine::Added::Spare => None,
        },
        "by_bitmap": by_bitmap,
    });
    Ok((out, json))
}

async fn replace(ctx: &ControlCtx, array: &str, member: &str, with: &std::path::Path) -> Answer {
    let s = served(ctx, array)?;
    let (a, name) = holder(s, member).ok_or_else(|| not_a_member(array, member))?;
    let role = a
        .slots()
        .role_of(&name)
        .filter(|&r| a.slots().state(r) == SlotState::InSync)
        .ok_or_else(|| {
            AdminError::new(
                Exit::Conflict,
                format!("{name} is not working in {array}: only a working member can be replaced"),
            )
        })?;
    let text = unused(ctx, with)?;
    if let Some(p) = a.passes().progress() {
        return Err(AdminError::new(
            Exit::Conflict,
            format!(
                "{}: a {} is running; try again when it ends",
                a.name(),
                p.kind
            ),
        ));
    }
    let new = members::open_timed(with, Access::ReadWrite, ctx.member_timeout)?;
    let w = ctx
        .watched
        .iter()
        .find(|w| Arc::ptr_eq(&w.array, &a))
        .ok_or_else(|| AdminError::failure("the array is not watched"))?;
    ctx.life.start_replace(w, role, new);
    let mut out = format!("replacing {name} with {text} in {}\n", a.name());
    if !in_config(ctx, s, &text) {
        out.push_str(&config_note(s, array, &text, Some(&name)));
    }
    Ok((
        out,
        serde_json::json!({ "array": array, "member": name, "with": text, "role": role }),
    ))
}

fn scrub(ctx: &ControlCtx, array: &str, kind: raidd_engine::SyncKind) -> Answer {
    let s = served(ctx, array)?;
    let targets: Vec<&Watched> = ctx
        .watched
        .iter()
        .filter(|w| {
            w.array.can_scrub()
                && s.session
                    .arrays
                    .iter()
                    .any(|a| Arc::ptr_eq(&a.array, &w.array))
        })
        .collect();
    if targets.is_empty() {
        return Err(AdminError::usage(format!(
            "{array} has no redundancy: there is nothing to {kind}"
        )));
    }
    let mut names = Vec::new();
    for w in targets {
        ctx.life.start_scrub(w, kind)?;
        names.push(w.array.name().to_string());
    }
    Ok((
        format!("{kind} started on {}\n", names.join(", ")),
        serde_json::json!({ "array": array, "started": names, "kind": kind }),
    ))
}

/// Switches the served array's consistency policy (mdadm's `--grow --consistency-policy`):
/// the outermost array's, where arrays nest.
async fn grow(
    ctx: &ControlCtx,
    array: &str,
    policy: Option<ConsistencyPolicy>,
    bitmap_chunk: Option<u32>,
) -> Answer {
    let s = served(ctx, array)?;
    let a = s.session.root();
    let to =
        policy.ok_or_else(|| AdminError::usage("nothing to change: give --consistency-policy"))?;
    let from = a.consistency().policy();
    a.consistency().set(to, bitmap_chunk).await?;
    Ok((
        format!("{array}: consistency policy {from} -> {to}\n"),
        serde_json::json!({ "array": array, "consistency_policy": { "from": from, "to": to } }),
    ))
}

/// Switches the write journal's mode (md's `journal_mode` in sysfs): write-back
/// acknowledges writes once logged; back to write-through, the cache's pages go to the
/// members first.
async fn journal_mode_to(ctx: &ControlCtx, array: &str, to: raidd_engine::JournalMode) -> Answer {
    let s = served(ctx, array)?;
    let a = s.session.root();
    let from = a.consistency().journal_mode();
    a.consistency().set_journal_mode(to).await?;
    let from = from.map_or_else(|| "none".to_string(), |m| m.to_string());
    Ok((
        format!("{array}: write journal mode {from} -> {to}\n"),
        serde_json::json!({ "array": array, "journal_mode": { "from": from, "to": to } }),
    ))
}

fn idle(ctx: &ControlCtx, array: &str) -> Answer {
    let s = served(ctx, array)?;
    let stopped: Vec<String> = s
        .session
        .arrays
        .iter()
        .filter(|a| a.array.passes().cancel())
        .map(|a| a.array.name().to_string())
        .collect();
    let text = if stopped.is_empty() {
        format!("nothing runs on {array}\n")
    } else {
        format!(
            "stopping the pass on {} (a recovery resumes from its checkpoint)\n",
            stopped.join(", ")
        )
    };
    Ok((
        text,
        serde_json::json!({ "array": array, "stopped": stopped }),
    ))
}
