//! Keeping the served arrays redundant: a monitor that notices failures, claims spares (the
//! array's own, then the shared pool, respecting spare groups), starts recovery, resyncs an
//! array that was not shut down cleanly, and runs check/repair on request. Events go to the
//! log and to the configured program, as `mdadm --monitor` does with PROGRAM.
//!
//! Everything here runs on the daemon's main thread; the arrays are shared with the workers
//! and need no lock (their state is atomics; the engine serialises what must be).

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use raidd_engine::array::rederive;
use raidd_engine::{Added, Array, ErrorKind, Member, SlotState, SyncKind, SyncLimits};

use raidd_admin::exit::{AdminError, AdminResult, Exit};
use raidd_admin::members::{self, Access};

/// How often the monitor looks at every array.
pub const TICK: Duration = Duration::from_millis(500);

/// How long a rebuild that failed waits before it is started again: what stopped it (a
/// block with no good copy) does not go away by itself, and a restart every tick would
/// fail the same way and run the event program each time.
const REBUILD_RETRY: Duration = Duration::from_secs(600);

/// A rebuild: the array (its [`key`]), the slot, the member it writes.
type RebuildOf = (usize, usize, String);

/// A member waiting in the shared hot-spare pool.
#[derive(Debug)]
pub struct PoolSpare {
    pub path: PathBuf,
    pub member: Arc<dyn Member>,
    pub group: Option<String>,
}

/// An array the monitor looks after.
#[derive(Debug, Clone)]
pub struct Watched {
    pub array: Arc<Array>,
    /// The spare group of the configured array it belongs to.
    pub group: Option<String>,
    /// Idle time after which it is marked clean (md's safe mode); `None`: never.
    pub safe_mode: Option<Duration>,
}

#[derive(Debug)]
pub struct Lifecycle {
    limits: SyncLimits,
    program: Option<PathBuf>,
    /// How long members put into the pool may take to answer an I/O.
    member_timeout: Option<Duration>,
    pool: RefCell<Vec<PoolSpare>>,
    tasks: RefCell<Vec<raidd_rt::JoinHandle<()>>>,
    /// Slot states last seen, per array (by name), to turn changes into events.
    seen: RefCell<HashMap<usize, Vec<SlotState>>>,
    /// Arrays with a background task of ours (started, maybe not yet registered its pass).
    busy: Rc<RefCell<HashSet<usize>>>,
    /// Arrays whose checksum tags are being re-derived (beside any pass).
    rederiving: Rc<RefCell<HashSet<usize>>>,
    /// Set at shutdown: background work that is not a pass stops at its next step.
    stopping: Rc<std::cell::Cell<bool>>,
    /// Rebuilds that failed (array, slot, member), and when: not started again before
    /// [`REBUILD_RETRY`] has passed (another member in the slot starts at once).
    failed_rebuilds: Rc<RefCell<HashMap<RebuildOf, std::time::Instant>>>,
}

/// Identifies an array for as long as it runs (names need not be unique across configs).
fn key(a: &Array) -> usize {
    a as *const Array as usize
}

fn name_of(m: &Arc<dyn Member>) -> String {
    m.info().name.clone()
}

impl Lifecycle {
    pub fn new(
        limits: SyncLimits,
        program: Option<PathBuf>,
        pool: Vec<PoolSpare>,
        member_timeout: Option<Duration>,
    ) -> Lifecycle {
        Lifecycle {
            limits,
            program,
            member_timeout,
            pool: RefCell::new(pool),
            tasks: RefCell::new(Vec::new()),
            seen: RefCell::new(HashMap::new()),
            busy: Rc::new(RefCell::new(HashSet::new())),
            rederiving: Rc::new(RefCell::new(HashSet::new())),
            stopping: Rc::new(std::cell::Cell::new(false)),
            failed_rebuilds: Rc::new(RefCell::new(HashMap::new())),
        }
    }

    /// Re-derives the suspect checksum tags of `a` in the background (after an unclean
    /// stop, writes by the kernel, a member that joined), unless that is running already.
    /// It runs beside the array's passes: a rebuild must not wait for it.
    fn start_rederive(&self, a: &Arc<Array>) {
        if self.stopping.get()
            || rederive::unverified_tags(a) == 0
            || !self.rederiving.borrow_mut().insert(key(a))
        {
            return;
        }
        let (set, array, stopping) = (self.rederiving.clone(), a.clone(), self.stopping.clone());
        let limits = self.limits;
        let mut tasks = self.tasks.borrow_mut();
        tasks.retain(|t| !t.is_finished());
        tasks.push(raidd_rt::spawn_local(async move {
            let going = || !stopping.get();
            if let Err(e) = rederive::rederive_checksums(&array, limits, &going).await {
                tracing::warn!(array = %array.name(), "re-deriving checksum tags: {e}");
            }
            set.borrow_mut().remove(&key(&array));
        }));
    }

    /// Logs an event and runs the configured program with EVENT ARRAY [DETAIL].
    pub fn event(&self, event: &str, array: &str, detail: Option<&str>) {
        match detail {
            Some(d) => tracing::warn!(event, array, "{d}"),
            None => tracing::warn!(event, array, "event"),
        }
        let Some(program) = &self.program else { return };
        let mut cmd = std::process::Command::new(program);
        cmd.arg(event).arg(array);
        if let Some(d) = detail {
            cmd.arg(d);
        }
        cmd.stdin(std::process::Stdio::null());
        match cmd.spawn() {
            // Reaped off the main thread: a slow program must not hold the monitor up.
            Ok(mut child) => {
                std::thread::spawn(move || {
                    let _ = child.wait();
                });
            }
            Err(e) => tracing::error!("cannot run the event program {}: {e}", program.display()),
        }
    }

    pub fn pool_names(&self) -> Vec<(String, Option<String>)> {
        self.pool
            .borrow()
            .iter()
            .map(|s| (s.path.display().to_string(), s.group.clone()))
            .collect()
    }

    /// Adds a member to the shared pool (`raidd spare add`).
    pub fn pool_add(&self, path: &Path, group: Option<String>) -> AdminResult<()> {
        if self.pool.borrow().iter().any(|s| s.path == path) {
            return Err(AdminError::new(
                Exit::Conflict,
                format!("{} is already in the spare pool", path.display()),
            ));
        }
        let member = members::open_timed(path, Access::ReadWrite, self.member_timeout)?;
        self.pool.borrow_mut().push(PoolSpare {
            path: path.to_path_buf(),
            member,
            group,
        });
        Ok(())
    }

    /// Takes a member out of the shared pool (`raidd spare remove`); its file is released.
    pub fn pool_remove(&self, path: &Path) -> AdminResult<()> {
        let mut pool = self.pool.borrow_mut();
        let Some(i) = pool.iter().position(|s| s.path == path) else {
            return Err(AdminError::new(
                Exit::NotFound,
                format!("{} is not in the spare pool", path.display()),
            ));
        };
        pool.remove(i);
        Ok(())
    }

    /// Runs `job` for `array` on this thread and keeps its handle, so shutdown can wait for
    /// it. The array counts as busy from now until the job ends (the job registers its pass
    /// with the engine only when it first runs).
    fn spawn(&self, array: &Array, job: impl std::future::Future<Output = ()> + 'static) {
        let busy = self.busy.clone();
        let key = key(array);
        busy.borrow_mut().insert(key);
        let mut tasks = self.tasks.borrow_mut();
        tasks.retain(|t| !t.is_finished());
        tasks.push(raidd_rt::spawn_local(async move {
            job.await;
            busy.borrow_mut().remove(&key);
        }));
    }

    /// Starts rebuilding `role` of `w` in the background.
    pub fn start_recovery(self: &Rc<Self>, w: &Watched, role: usize) {
        debug_assert!(role < w.array.slots().len(), "slot {role} exists");
        let (life, array) = (self.clone(), w.array.clone());
        let onto = w.array.slots().member(role).map(|m| name_of(&m));
        let failed = (key(&w.array), role, onto.unwrap_or_default());
        if let Some(at) = self.failed_rebuilds.borrow().get(&failed) {
            if at.elapsed() < REBUILD_RETRY {
                return;
            }
        }
        self.spawn(&w.array, async move {
            let name = array.name().to_string();
            let member = array
                .slots()
                .member(role)
                .map(|m| name_of(&m))
                .unwrap_or_default();
            life.event("RebuildStarted", &name, Some(&member));
            let r = array.recover(role, life.limits).await;
            match &r {
                Err(e) if e.kind() != ErrorKind::Interrupted => {
                    tracing::warn!(array = %name, role, "the rebuild is started again in {} s", REBUILD_RETRY.as_secs());
                    life.failed_rebuilds
                        .borrow_mut()
                        .insert(failed, std::time::Instant::now());
                }
                _ => {
                    life.failed_rebuilds.borrow_mut().remove(&failed);
                }
            }
            match r {
                Ok(()) => {
                    life.event("RebuildFinished", &name, Some(&member));
                    life.event("SpareActive", &name, Some(&member));
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {
                    tracing::info!(array = %name, "{e}");
                }
                Err(e) => life.event("RebuildFailed", &name, Some(&e.to_string())),
            }
        });
    }

    /// Starts replacing `role` of `w` with `new` in the background.
    pub fn start_replace(self: &Rc<Self>, w: &Watched, role: usize, new: Arc<dyn Member>) {
        debug_assert!(role < w.array.slots().len(), "slot {role} exists");
        let (life, array) = (self.clone(), w.array.clone());
        self.spawn(&w.array, async move {
            let name = array.name().to_string();
            let what = format!(
                "replace of {} with {}",
                array
                    .slots()
                    .member(role)
                    .map(|m| name_of(&m))
                    .unwrap_or_default(),
                name_of(&new)
            );
            life.event("RebuildStarted", &name, Some(&what));
            match array.replace(role, new, life.limits).await {
                Ok(()) => life.event("RebuildFinished", &name, Some(&what)),
                Err(e) if e.kind() == ErrorKind::Interrupted => {
                    tracing::info!(array = %name, "{e}");
                }
                Err(e) => life.event("RebuildFailed", &name, Some(&e.to_string())),
            }
        });
    }

    /// Starts a check, repair or resync of `w` in the background.
    pub fn start_scrub(self: &Rc<Self>, w: &Watched, kind: SyncKind) -> AdminResult<()> {
        let a = &w.array;
        if !a.can_scrub() {
            return Err(AdminError::usage(format!(
                "{} is {}: it has no redundancy to {kind}",
                a.name(),
                a.geometry().level()
            )));
        }
        if !a.can_scrub_now() {
            return Err(AdminError::usage(format!(
                "{} is degraded: a {kind} of parity needs every member",
                a.name()
            )));
        }
        if let Some(p) = a.passes().progress() {
            return Err(AdminError::new(
                Exit::Conflict,
                format!("{}: a {} is already running", a.name(), p.kind),
            ));
        }
        if self.running_for(a) {
            return Err(AdminError::new(
                Exit::Conflict,
                format!("{}: another pass is starting", a.name()),
            ));
        }
        if kind != SyncKind::Check && a.is_read_only() {
            return Err(AdminError::new(
                Exit::Failure,
                format!("{} is read-only", a.name()),
            ));
        }
        let (life, array) = (self.clone(), a.clone());
        self.spawn(a, async move {
            let name = array.name().to_string();
            life.event("RebuildStarted", &name, Some(&kind.to_string()));
            match array.scrub(kind, life.limits, |_, _| {}).await {
                Ok(n) => {
                    let what = format!("{kind}: mismatches found: {n} sectors");
                    life.event("RebuildFinished", &name, Some(&what));
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {
                    tracing::info!(array = %name, "{e}");
                }
                Err(e) => life.event("RebuildFailed", &name, Some(&e.to_string())),
            }
        });
        Ok(())
    }

    /// One look at every array: events for what changed, then spares, recovery and resync.
    pub async fn tick(self: &Rc<Self>, arrays: &[Watched]) {
        for w in arrays {
            let a = &w.array;
            self.note_changes(a);
            // md's bitmap daemon: clear write-intent bits of regions idle for a period.
            a.write_intent_tick().await;
            if !a.is_read_only() && !a.is_failed() {
                self.start_rederive(a);
            }
            if a.is_read_only()
                || a.is_failed()
                || a.passes().progress().is_some()
                || self.running_for(a)
            {
                continue;
            }
            let n = a.geometry().members();
            if let Some(role) = (0..n).find(|&r| a.slots().state(r) == SlotState::Recovering) {
                self.start_recovery(w, role);
                continue;
            }
            let free = (0..n)
                .any(|r| matches!(a.slots().state(r), SlotState::Missing | SlotState::Faulty));
            if free && a.can_scrub() {
                match a.claim_own_spare().await {
                    Ok(Some(role)) => {
                        self.start_recovery(w, role);
                        continue;
                    }
                    Ok(None) => {}
                    Err(e) => tracing::warn!(array = %a.name(), "claiming its spare failed: {e}"),
                }
                if let Some(role) = self.claim_pool_spare(w).await {
                    self.start_recovery(w, role);
                    continue;
                }
                // No spare: a mirror resyncs the copies it has left meanwhile.
            }
            if a.needs_resync() && a.can_scrub_now() {
                let _ = self.start_scrub(w, SyncKind::Resync);
            }
        }
    }

    /// Whether a background task of ours is working on `a`.
    fn running_for(&self, a: &Array) -> bool {
        self.busy.borrow().contains(&key(a))
    }

    fn note_changes(&self, a: &Array) {
        let n = a.geometry().members();
        debug_assert_eq!(n, a.slots().len(), "a slot per member");
        let now: Vec<SlotState> = (0..n).map(|r| a.slots().state(r)).collect();
        let working = |s: SlotState| matches!(s, SlotState::InSync | SlotState::Recovering);
        let degraded_now = now.iter().any(|&s| s != SlotState::InSync);
        let mut seen = self.seen.borrow_mut();
        match seen.get(&key(a)) {
            Some(prev) => {
                for r in 0..n {
                    if working(prev[r]) && now[r] == SlotState::Faulty {
                        let m = a.slots().member(r).map(|m| name_of(&m)).unwrap_or_default();
                        self.event("Fail", a.name(), Some(&m));
                    }
                }
                let degraded_before = prev.iter().any(|&s| s != SlotState::InSync);
                let lost_before = prev.iter().any(|&s| !working(s));
                let lost_now = now.iter().any(|&s| !working(s));
                if degraded_now && !degraded_before || lost_now && !lost_before {
                    self.event("DegradedArray", a.name(), None);
                }
            }
            None if degraded_now => self.event("DegradedArray", a.name(), None),
            None => {}
        }
        seen.insert(key(a), now);
    }

    /// Offers pool spares of the right group to `w` until one fits.
    async fn claim_pool_spare(&self, w: &Watched) -> Option<usize> {
        let mut tried = 0;
        loop {
            let spare = {
                let mut pool = self.pool.borrow_mut();
                let i = pool
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| s.group.is_none() || s.group == w.group)
                    .nth(tried)
                    .map(|(i, _)| i)?;
                pool.remove(i)
            };
            match w.array.add_member(spare.member.clone()).await {
                Ok(Added::Recovering(role)) => {
                    self.event(
                        "MoveSpare",
                        w.array.name(),
                        Some(&spare.path.display().to_string()),
                    );
                    return Some(role);
                }
                Ok(Added::Spare) => return None,
                Err(e) => {
                    tracing::warn!(
                        array = %w.array.name(),
                        spare = %spare.path.display(),
                        "spare not usable: {e}"
                    );
                    let mut pool = self.pool.borrow_mut();
                    let at = tried.min(pool.len());
                    pool.insert(at, spare);
                    tried += 1;
                }
            }
        }
    }

    /// Stops every pass and waits for the background tasks (shutdown).
    pub async fn stop(&self, arrays: &[Watched]) {
        self.stopping.set(true);
        for w in arrays {
            w.array.passes().cancel();
        }
        let tasks: Vec<_> = self.tasks.borrow_mut().drain(..).collect();
        for t in tasks {
            t.await;
        }
        debug_assert!(
            arrays.iter().all(|w| w.array.passes().progress().is_none()),
            "every pass has ended once its task has"
        );
    }
}

/// How often safe mode looks at the arrays: an idle array is marked clean between its
/// delay and this much later.
pub const SAFE_MODE_TICK: Duration = Duration::from_millis(50);

/// md's safe mode, for every array that has it: marks clean those idle for their delay,
/// until `on` is cleared (it returns between markings, never in the middle of one).
pub async fn safe_mode(arrays: &[Watched], on: &std::cell::Cell<bool>) {
    while on.get() {
        raidd_rt::time::sleep(SAFE_MODE_TICK).await;
        for w in arrays.iter().take_while(|_| on.get()) {
            if let Some(delay) = w.safe_mode {
                w.array.mark_clean_if_idle(delay).await;
            }
        }
    }
}
