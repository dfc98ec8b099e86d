//! The configured arrays: assembled at start (pool spares that carry an array's superblock
//! go to that array's assembly; an array that cannot start is left out, not fatal), the
//! spare pool from what no array took, and the close at the end.

use std::path::PathBuf;
use std::time::Duration;

use raidd_admin::exit::{AdminError, AdminResult};
use raidd_admin::members::{self, Access};
use raidd_admin::session::{self, Session};
use raidd_admin::status::NotStarted;
use raidd_engine::Closed;

use raidd_admin::scan;

use crate::config::{ArrayConfig, Config, Find};
use crate::lifecycle::PoolSpare;

/// A configured array that runs: its configuration and the arrays assembled for it.
pub struct Served {
    pub config: ArrayConfig,
    pub session: Session,
}

/// The array UUID the first readable superblock among `paths` names.
async fn uuid_of(paths: &[PathBuf], timeout: Option<Duration>) -> Option<[u8; 16]> {
    for p in paths {
        let Ok(m) = members::open_timed(p, Access::Inspect, timeout) else {
            continue;
        };
        if let Ok(sb) = raidd_engine::assemble::examine(&*m).await {
            return Some(sb.set_uuid);
        }
    }
    None
}

/// Pool spares that carry a configured array's superblock (claimed before a restart) go to
/// that array's assembly, which decides whether they are current; adds them to each
/// array's member paths.
async fn claimed_spares(config: &Config, paths: &mut [Result<Vec<PathBuf>, String>]) {
    let mut uuids: Vec<Vec<[u8; 16]>> = Vec::new();
    for (a, p) in config.arrays.iter().zip(paths.iter()) {
        uuids.push(match (&a.find, p) {
            (Find::Uuid { uuid, inner }, _) => {
                std::iter::once(*uuid).chain(inner.clone()).collect()
            }
            (Find::Paths(_), Ok(p)) => uuid_of(p, config.limits.member_timeout)
                .await
                .into_iter()
                .collect(),
            (Find::Paths(_), Err(_)) => Vec::new(),
        });
    }
    for s in &config.spares {
        let Some(u) = uuid_of(std::slice::from_ref(&s.path), config.limits.member_timeout).await
        else {
            continue;
        };
        let Some(i) = uuids.iter().position(|x| x.contains(&u)) else {
            continue;
        };
        if let Ok(p) = &mut paths[i] {
            tracing::info!(
                array = %config.arrays[i].name,
                spare = %s.path.display(),
                "the spare holds a member of this array: assembling it with the array"
            );
            p.push(s.path.clone());
        }
    }
}

/// Each configured array's member paths: those the config lists, or those the scan finds
/// carrying its UUID (an error for an array of which none is found), with the pool spares
/// it claimed; each file once.
async fn member_paths(config: &Config) -> Vec<Result<Vec<PathBuf>, String>> {
    let by_uuid = config
        .arrays
        .iter()
        .any(|a| matches!(a.find, Find::Uuid { .. }));
    let found = if by_uuid {
        let (candidates, warnings) = scan::expand(&config.scan);
        for w in warnings {
            tracing::warn!("{w}");
        }
        let found = scan::examine_all(&candidates, config.limits.member_timeout).await;
        tracing::info!(
            candidates = candidates.len(),
            superblocks = found.len(),
            patterns = ?config.scan,
            "scanned for arrays named by UUID"
        );
        found
    } else {
        Vec::new()
    };
    let mut paths: Vec<Result<Vec<PathBuf>, String>> = config
        .arrays
        .iter()
        .map(|a| match &a.find {
            Find::Paths(p) => Ok(p.clone()),
            Find::Uuid { uuid, inner } => {
                let p = scan::members_of(&found, uuid, inner);
                if p.is_empty() {
                    return Err(format!(
                        "no member carrying its uuid {} was found under the scan patterns {:?}",
                        raidd_engine::array::uuid_string(uuid),
                        config.scan
                    ));
                }
                let names: Vec<String> = p.iter().map(|p| p.display().to_string()).collect();
                tracing::info!(array = %a.name, members = ?names, "found by its UUID");
                Ok(p)
            }
        })
        .collect();
    claimed_spares(config, &mut paths).await;
    debug_assert_eq!(paths.len(), config.arrays.len(), "one answer per array");
    for p in paths.iter_mut().flatten() {
        *p = members::distinct(std::mem::take(p));
    }
    paths
}

/// The pool: configured spares that no array took at assembly.
pub fn open_pool(config: &Config, served: &[Served]) -> Vec<PoolSpare> {
    let used: std::collections::HashSet<String> = served
        .iter()
        .flat_map(|s| s.session.arrays.iter())
        .flat_map(|a| a.report.iter())
        .filter(|r| {
            matches!(
                r.decision,
                raidd_engine::assemble::Decision::Active { .. }
                    | raidd_engine::assemble::Decision::Recovering { .. }
                    | raidd_engine::assemble::Decision::Spare
            )
        })
        .map(|r| r.member.clone())
        .collect();
    let mut pool = Vec::new();
    for s in &config.spares {
        if used.contains(&s.path.display().to_string()) {
            continue;
        }
        match members::open_timed(&s.path, Access::ReadWrite, config.limits.member_timeout) {
            Ok(member) => pool.push(PoolSpare {
                path: s.path.clone(),
                member,
                group: s.group.clone(),
            }),
            Err(e) => tracing::warn!(spare = %s.path.display(), "spare not usable: {}", e.message),
        }
    }
    pool
}

/// Assembles every configured array. One that cannot be started (refused as dirty and
/// degraded, too few members, bad metadata) is logged and left out with its exports, so
/// the others still serve; only when none starts is that an error (the first one's).
pub async fn assemble_all(config: &Config) -> AdminResult<(Vec<Served>, Vec<NotStarted>)> {
    let all_paths = member_paths(config).await;
    let mut served = Vec::new();
    let mut refused: Vec<(NotStarted, AdminError)> = Vec::new();
    for (a, paths) in config.arrays.iter().zip(all_paths) {
        let access = if a.read_only {
            Access::ReadOnly
        } else {
            Access::ReadWrite
        };
        let start = a.start(config.limits.member_timeout);
        let assembled = match paths {
            Ok(paths) => session::assemble(&paths, access, true, start).await,
            Err(e) => Err(AdminError::new(raidd_admin::exit::Exit::NotFound, e)),
        };
        let session = match assembled {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(array = %a.name, "not started: {}", e.message);
                eprintln!("raidd: array {} not started: {}", a.name, e.message);
                let not = NotStarted {
                    name: a.name.clone(),
                    error: e.message.clone(),
                };
                let e = AdminError::new(e.exit, format!("array {}: {}", a.name, e.message));
                refused.push((not, e));
                continue;
            }
        };
        for u in &session.unavailable {
            tracing::warn!(array = %a.name, member = %u.member, "member not used: {}", u.error);
        }
        for asm in &session.arrays {
            for r in &asm.report {
                tracing::info!(array = %a.name, member = %r.member, events = r.events, "{}", r.decision);
            }
        }
        for asm in &session.arrays {
            asm.array.set_stripe_cache(a.stripe_cache, a.gather);
            asm.array.set_write_alone(a.write_alone);
        }
        if a.journal_mode != raidd_engine::JournalMode::WriteThrough {
            // Not a reason to leave the array out: write-through loses nothing.
            if let Err(e) = session
                .root()
                .consistency()
                .set_journal_mode(a.journal_mode)
                .await
            {
                tracing::error!(array = %a.name, "journal_mode {} not set, serving write-through: {e}", a.journal_mode);
            }
        }
        let root = session.root();
        debug_assert!(
            session.arrays.iter().all(|asm| asm.array.size_bytes() > 0),
            "an assembled array has room"
        );
        if root.needs_resync() {
            tracing::warn!(
                array = %a.name,
                "the array was not shut down cleanly: parity/mirrors may disagree where writes were in flight; resyncing"
            );
        }
        if root.is_degraded() {
            let missing = root.slots().not_in_sync();
            tracing::warn!(array = %a.name, "running degraded: slots {missing:?} are not in sync");
        }
        tracing::info!(
            array = %a.name,
            level = %root.geometry().level(),
            size = root.size_bytes(),
            read_only = root.is_read_only(),
            "array assembled"
        );
        served.push(Served {
            config: a.clone(),
            session,
        });
    }
    debug_assert_eq!(
        served.len() + refused.len(),
        config.arrays.len(),
        "each array decided"
    );
    if served.is_empty() {
        if let Some((_, first)) = refused.into_iter().next() {
            return Err(first);
        }
        return Ok((served, Vec::new()));
    }
    Ok((served, refused.into_iter().map(|(n, _)| n).collect()))
}

/// Closes every array; whether each was marked clean (one closed while a resync it needs
/// was unfinished counts as clean: it stays marked for that resync, as it should).
pub async fn close_all(served: &[Served]) -> bool {
    let mut ok = true;
    for s in served {
        match s.session.close().await {
            Ok(Closed::Clean) => tracing::info!(array = %s.config.name, "array closed cleanly"),
            Ok(Closed::NeedsResync) => {
                tracing::info!(array = %s.config.name, "array closed; its resync is still due")
            }
            Ok(Closed::LeftDirty) => {
                ok = false;
                tracing::warn!(
                    array = %s.config.name,
                    "array closed with writes in flight: left marked unclean, the next start resyncs it"
                );
            }
            Err(e) => {
                ok = false;
                tracing::error!(array = %s.config.name, "closing the array failed: {}", e.message);
            }
        }
    }
    ok
}
