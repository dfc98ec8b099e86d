//! The ublk frontend, `[[ublk]]` (`config.rs`): arrays and volumes as local block devices
//! (/dev/ublkbN) while the daemon runs, through Linux's ublk driver. The ABI and the decisions on it are `raidd-ublk`'s;
//! this is the shell: the control device (`raidd_admin::ublk`, shared with `raidd ublk`),
//! and the queues (`queue`), one per worker
//! thread, whose tags fetch and complete requests on the worker's own ring beside its
//! member I/O (the ublksrv and SPDK pattern).
//!
//! A device's life: prepared on the main thread before the workers start (added, or taken
//! over from a raidd that died, its parameters set, its descriptors mapped); its queues run
//! on the workers; it is started (or its recovery ended) once every tag has fetched; at a
//! clean stop it is stopped (its requests drain, the fetches end), and once the queues have
//! ended and closed /dev/ublkcN it is deleted (the kernel waits for that close). Devices are
//! made with user recovery: if raidd dies, the kernel keeps /dev/ublkbN and holds its
//! requests, and the next `raidd serve` with the same entry takes it over and reissues them.

pub(crate) mod config;
pub mod queue;

use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use futures::channel::oneshot;

use raidd_admin::status::{StatusReport, UblkStatus};
use raidd_engine::{Extent, Member};
use raidd_ublk::abi::{self, flags, DevInfo, DevState};
use raidd_ublk::params::{self, Device as Params};
use raidd_ublk::request::Limits;

pub use config::UblkConfig;

use crate::budget::{Budget, Held};
use crate::config::arrays::ArrayConfig;
use crate::frontend::{
    keep_served, Frontend, ParseCtx, ReloadCtx, Resolver, Running, Sections, Serving, StartCtx,
    Started, WorkerTask,
};
use queue::{Descs, Queue};
use raidd_admin::ublk::{pid_alive, Control};

/// How long START_DEV, STOP_DEV and the recovery may take before the daemon gives up on
/// the device (they wait for the queues, and for I/O in flight).
const CONTROL_WAIT: Duration = Duration::from_secs(60);

/// A device made (or taken over), with its queues.
#[derive(Debug)]
pub struct Device {
    pub id: u32,
    /// What it serves: the array's name, or `array/volume`.
    pub name: String,
    pub size_bytes: u64,
    /// Taken over from a raidd that died: its recovery is ended rather than the device
    /// started.
    pub recovered: bool,
    /// One per worker thread, queue `q` on worker `q`.
    pub queues: Vec<Arc<Queue>>,
    /// Each queue's task says here that it ended (its sender dropped unsent: it was
    /// dropped, which ends it too): the device is deleted only after, since the kernel
    /// waits for /dev/ublkcN to be closed.
    ended: Vec<oneshot::Receiver<()>>,
    /// Its tags' buffers, for a device added while serving (those of the start were taken
    /// off the budget's limit).
    held: Option<Held>,
}

impl Device {
    /// Queue `w`'s task for its worker thread; its end is noted in `ended`.
    fn queue_task(&mut self, w: usize) -> Option<WorkerTask> {
        let q = self.queues.get(w)?.clone();
        let (tx, rx) = oneshot::channel();
        self.ended.push(rx);
        Some(Box::new(move || {
            Box::pin(async move {
                queue::run(q).await;
                let _ = tx.send(());
            })
        }))
    }
}

/// A configured device that could not be made, and why.
#[derive(Clone, Debug)]
pub struct NotMade {
    pub id: u32,
    pub name: String,
    pub error: String,
}

/// raidd's mark on a device (the kernel keeps it for the server): the high half says raidd
/// (`raidd_admin::ublk::made_by_raidd`),
/// the low half which array range it serves, so a device is taken over only by the raidd
/// serving the same thing.
fn mark(extent: &Extent) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in extent
        .id()
        .iter()
        .chain(&extent.offset().to_le_bytes())
        .chain(&extent.size_bytes().to_le_bytes())
    {
        h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
    }
    let mark = 0x7261_6964_0000_0000 | (h & 0xffff_ffff);
    debug_assert!(
        raidd_admin::ublk::made_by_raidd(&DevInfo {
            ublksrv_flags: mark,
            ..DevInfo::default()
        }),
        "the mark says raidd"
    );
    mark
}

/// The device's parameters from what it serves.
fn params_of(u: &UblkConfig, extent: &Extent) -> Params {
    let array = extent.array();
    let g = array.geometry();
    let chunk = u64::from(g.chunk_sectors()) * 512;
    let data = g.members().saturating_sub(g.redundancy()).max(1) as u64;
    debug_assert!(extent
        .size_bytes()
        .is_multiple_of(u64::from(extent.block_size().max(512))));
    Params {
        size_bytes: extent.size_bytes(),
        logical_block: extent.block_size().max(512),
        physical_block: extent.block_size().max(512),
        io_min: u32::try_from(chunk).unwrap_or(0),
        io_opt: u32::try_from(chunk * data).unwrap_or(0),
        max_io_bytes: u.max_io,
        rotational: array.info().rotational,
        read_only: u.read_only || extent.is_read_only(),
        discard: !g.level().has_parity(),
        write_zeroes: true,
    }
}

/// Opens /dev/ublkcN, which appears once the device is added (devtmpfs makes it; udev may
/// still be setting it up for a moment).
fn open_char(id: u32) -> Result<OwnedFd, String> {
    let path = abi::char_path(id);
    let mut last = None;
    for _ in 0..100 {
        match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
        {
            Ok(f) => return Ok(OwnedFd::from(f)),
            Err(e) => last = Some(e),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(format!(
        "{path} cannot be opened: {}",
        last.map_or_else(|| "unknown error".into(), |e| e.to_string())
    ))
}

/// Adds device `u.id`, or finds the one a raidd that died left for it; whether it is a
/// takeover.
fn add_or_take_over(
    ctl: &mut Control,
    u: &UblkConfig,
    want: &DevInfo,
) -> Result<(DevInfo, bool), String> {
    let path = abi::block_path(u.id);
    match ctl.info(u.id) {
        Err(e) if e.raw_os_error() == Some(libc::ENODEV) => {}
        Err(e) => return Err(format!("asking the kernel about {path}: {e}")),
        Ok(have) => {
            if have.ublksrv_flags != want.ublksrv_flags {
                return Err(format!(
                    "{path} exists and is not this entry's (another program's, or raidd's for \
                     another array): give the entry another id, or delete it with `raidd \
                     ublk delete {}` if nothing uses it",
                    u.id
                ));
            }
            if have.state() == DevState::Live && pid_alive(have.ublksrv_pid) {
                return Err(format!(
                    "{path} is served by process {} already",
                    have.ublksrv_pid
                ));
            }
            if (have.nr_hw_queues, have.queue_depth, have.max_io_buf_bytes)
                != (want.nr_hw_queues, want.queue_depth, want.max_io_buf_bytes)
            {
                return Err(format!(
                    "{path} was left by a raidd with {} threads, queue_depth {} and max_io {}: \
                     start with those to take it over, or delete it (`raidd ublk delete {}`)",
                    have.nr_hw_queues, have.queue_depth, have.max_io_buf_bytes, u.id
                ));
            }
            ctl.start_recovery(u.id)
                .map_err(|e| format!("taking over {path} from the raidd that left it: {e}"))?;
            return Ok((have, true));
        }
    }
    let got = ctl.add(want).map_err(|e| format!("adding {path}: {e}"))?;
    Ok((got, false))
}

/// Prepares one device; on failure after it was added, it is deleted again.
fn prepare_one(
    ctl: &mut Control,
    u: &UblkConfig,
    s: &Serving,
    threads: usize,
) -> Result<Device, String> {
    let extent = s.extent.clone();
    let p = params_of(u, &extent);
    let bytes = params::encode(&p)?;
    let want = DevInfo {
        nr_hw_queues: u16::try_from(threads).map_err(|_| "too many worker threads for ublk")?,
        queue_depth: u.queue_depth,
        max_io_buf_bytes: u.max_io,
        dev_id: u.id,
        ublksrv_pid: std::process::id() as i32,
        flags: flags::USER_RECOVERY | flags::USER_RECOVERY_REISSUE | flags::CMD_IOCTL_ENCODE,
        ublksrv_flags: mark(&extent),
        ..DevInfo::default()
    };
    let (info, recovered) = add_or_take_over(ctl, u, &want)?;
    let made = (|| {
        if !recovered {
            ctl.set_params(info.dev_id, &bytes).map_err(|e| {
                format!("setting {}'s parameters: {e}", abi::block_path(info.dev_id))
            })?;
        }
        let cdev = Arc::new(open_char(info.dev_id)?);
        let limits = Limits {
            size_bytes: p.size_bytes,
            block: p.logical_block,
            max_io_bytes: u.max_io,
            read_only: p.read_only,
        };
        let mut queues = Vec::with_capacity(threads);
        for q in 0..want.nr_hw_queues {
            let descs = Descs::map(&cdev, q, u.queue_depth).map_err(|e| {
                format!("mapping queue {q} of {}: {e}", abi::char_path(info.dev_id))
            })?;
            queues.push(Arc::new(Queue {
                id: info.dev_id,
                q,
                depth: u.queue_depth,
                max_io: u.max_io,
                cdev: cdev.clone(),
                descs,
                extent: extent.clone(),
                limits,
            }));
        }
        debug_assert_eq!(queues.len(), threads, "a queue per worker");
        Ok(queues)
    })();
    match made {
        Ok(queues) => Ok(Device {
            id: info.dev_id,
            name: extent.name().to_string(),
            size_bytes: p.size_bytes,
            recovered,
            queues,
            ended: Vec::new(),
            held: None,
        }),
        Err(e) => {
            if !recovered {
                let _ = ctl.delete(info.dev_id);
            }
            Err(e)
        }
    }
}

/// Prepares every configured device (`serving[i]` is what entry i serves). One that cannot
/// be made is logged and left out (the arrays are still served over the network).
fn prepare(
    entries: &[UblkConfig],
    serving: &[Serving],
    threads: usize,
) -> (Vec<Device>, Vec<NotMade>) {
    let mut made = Vec::new();
    let mut not = Vec::new();
    if entries.is_empty() {
        return (made, not);
    }
    let mut ctl = match Control::open() {
        Ok(c) => Some(c),
        Err(e) => {
            for (u, s) in entries.iter().zip(serving) {
                not.push(NotMade {
                    id: u.id,
                    name: s.extent.name().to_string(),
                    error: e.clone(),
                });
            }
            None
        }
    };
    if let Some(ctl) = ctl.as_mut() {
        for (u, s) in entries.iter().zip(serving) {
            match prepare_one(ctl, u, s, threads) {
                Ok(d) => made.push(d),
                Err(error) => not.push(NotMade {
                    id: u.id,
                    name: s.extent.name().to_string(),
                    error,
                }),
            }
        }
    }
    for n in &not {
        tracing::error!(
            "{} ({}) is not made: {}",
            abi::block_path(n.id),
            n.name,
            n.error
        );
        eprintln!(
            "raidd: {} ({}) is not made: {}",
            abi::block_path(n.id),
            n.name,
            n.error
        );
    }
    debug_assert_eq!(
        made.len() + not.len(),
        entries.len(),
        "every entry made or reported"
    );
    (made, not)
}

/// Runs `f` on a helper thread (control commands block) and waits for it on this thread's
/// executor, at most [`CONTROL_WAIT`].
async fn on_helper<T: Send + 'static>(
    what: String,
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    let (tx, rx) = futures::channel::oneshot::channel();
    std::thread::Builder::new()
        .name("raidd-ublk-ctl".into())
        .spawn(move || {
            let _ = tx.send(f());
        })
        .map_err(|e| format!("{what}: no helper thread: {e}"))?;
    let wait = raidd_rt::time::sleep(CONTROL_WAIT);
    futures::pin_mut!(wait);
    match futures::future::select(rx, wait).await {
        futures::future::Either::Left((Ok(r), _)) => r,
        futures::future::Either::Left((Err(_), _)) => {
            Err(format!("{what}: the helper thread died"))
        }
        futures::future::Either::Right(_) => Err(format!("{what}: no answer in {CONTROL_WAIT:?}")),
    }
}

/// Starts the devices whose queues run (or ends their recovery): `(id, taken over, what it
/// serves, size)` each. Those that do not start are reported (they are stopped and deleted
/// with the others at the end).
async fn start(devices: &[(u32, bool, String, u64)]) -> Vec<NotMade> {
    let mut failed = Vec::new();
    for (id, recovered, name, size) in devices {
        let (id, recovered) = (*id, *recovered);
        let what = abi::block_path(id);
        let r = on_helper(what.clone(), move || {
            let mut ctl = Control::open()?;
            if recovered {
                ctl.end_recovery(id)
                    .map_err(|e| format!("ending the recovery of {what}: {e}"))
            } else {
                ctl.start(id).map_err(|e| format!("starting {what}: {e}"))
            }
        })
        .await;
        match r {
            Ok(()) => {
                let how = if recovered {
                    "taken over (its waiting requests go on)"
                } else {
                    "started"
                };
                tracing::info!(device = %abi::block_path(id), serves = %name, size, "ublk device {how}");
            }
            Err(error) => {
                tracing::error!("{error}");
                failed.push(NotMade {
                    id,
                    name: name.clone(),
                    error,
                });
            }
        }
    }
    failed
}

/// Stops every device: its requests in flight finish (the workers still serve them), its
/// block device goes, and its queues' fetches end.
async fn stop(ids: &[u32]) {
    for &id in ids {
        let what = abi::block_path(id);
        let r = on_helper(what.clone(), move || {
            Control::open()?
                .stop(id)
                .map_err(|e| format!("stopping {what}: {e}"))
        })
        .await;
        if let Err(e) = r {
            tracing::error!("{e}");
        }
    }
}

/// Deletes the devices `ids`, once nothing of this process holds their /dev/ublkcN.
async fn delete(ids: Vec<u32>) {
    for id in ids {
        let what = abi::block_path(id);
        let r = on_helper(what.clone(), move || {
            Control::open()?
                .delete(id)
                .map_err(|e| format!("deleting {what}: {e}"))
        })
        .await;
        match r {
            Ok(()) => tracing::info!(device = %abi::block_path(id), "ublk device removed"),
            Err(e) => tracing::error!("{e}"),
        }
    }
}

/// The ublk frontend.
#[derive(Debug)]
pub struct Ublk;

impl Frontend for Ublk {
    const SECTIONS: &'static [&'static str] = &["ublk"];
    type Config = Vec<UblkConfig>;

    fn parse(sections: Sections, ctx: &ParseCtx) -> Result<Vec<UblkConfig>, String> {
        config::parse(sections, ctx)
    }

    fn held_memory(config: &Vec<UblkConfig>, threads: usize) -> u64 {
        config::buffer_bytes(config, threads)
    }

    fn refuse_held_memory(
        config: &Vec<UblkConfig>,
        threads: usize,
        one: u64,
        buffer_memory: u64,
    ) -> Result<(), String> {
        config::refuse_held(config, threads, one, buffer_memory)
    }

    fn without_arrays(
        config: &Vec<UblkConfig>,
        kept: &[Option<usize>],
        arrays: &[ArrayConfig],
        notes: &mut Vec<String>,
    ) -> Vec<UblkConfig> {
        let mut out = Vec::new();
        for u in config {
            match kept[u.array] {
                Some(array) => out.push(UblkConfig { array, ..u.clone() }),
                None => notes.push(format!(
                    "/dev/ublkb{} is not made: its array {:?} did not start",
                    u.id, arrays[u.array].name
                )),
            }
        }
        out
    }

    fn resolve(config: &mut Vec<UblkConfig>, serve: &mut Resolver<'_>) -> Vec<Serving> {
        let mut out = Vec::new();
        keep_served(config, &mut out, serve, |u| {
            (u.array, u.volume.as_ref(), format!("/dev/ublkb{}", u.id))
        });
        out
    }

    /// Prepares the devices on the main thread, before the workers start: their queues
    /// go to the workers. One that cannot be made is reported and left out. It runs with
    /// no device too, so that devices can be added while serving.
    fn start(
        config: &Vec<UblkConfig>,
        serving: Vec<Serving>,
        ctx: &StartCtx,
    ) -> raidd_admin::exit::AdminResult<Option<Started>> {
        assert_eq!(config.len(), serving.len(), "a serving per device");
        let (devices, not_made) = prepare(config, &serving, ctx.threads);
        Ok(Some(Started {
            running: Arc::new(UblkServer {
                devices: std::sync::Mutex::new(devices),
                not_made: std::sync::Mutex::new(not_made),
                budget: ctx.shared.budget.clone(),
            }),
            listener: None,
        }))
    }

    /// Devices are added and removed while it serves (one whose entry changed is removed
    /// and made anew).
    fn reload<'a>(
        old: &'a Vec<UblkConfig>,
        new: &'a Vec<UblkConfig>,
        running: Option<&'a dyn Running>,
        rc: &'a mut ReloadCtx<'_, '_>,
    ) -> futures::future::LocalBoxFuture<'a, Vec<UblkConfig>> {
        Box::pin(async move {
            let server = running.and_then(|r| r.as_any().downcast_ref::<UblkServer>());
            let Some(server) = server else {
                debug_assert!(false, "the ublk frontend always runs");
                return old.clone();
            };
            let mut applied = old.clone();
            for u in old.iter().filter(|u| !new.contains(u)) {
                let what = abi::block_path(u.id);
                match server.remove(u.id).await {
                    Ok(()) => {
                        (rc.release)(&what);
                        applied.retain(|x| x.id != u.id);
                        rc.notes.push(format!("{what} removed"));
                    }
                    Err(m) => rc.notes.push(m),
                }
            }
            for u in new.iter().filter(|u| !old.contains(u)) {
                let what = abi::block_path(u.id);
                if applied.iter().any(|x| x.id == u.id) {
                    rc.notes
                        .push(format!("{what}: its old entry is still served"));
                    continue;
                }
                let Some(s) = (rc.serve)(u.array, u.volume.as_ref(), what.clone()) else {
                    rc.notes
                        .push(format!("{what} not made: what it serves cannot be served"));
                    continue;
                };
                match server.add(u, s, rc).await {
                    Ok(()) => {
                        applied.push(u.clone());
                        rc.notes.push(format!("{what} added"));
                    }
                    Err(m) => {
                        (rc.release)(&what);
                        rc.notes.push(m);
                    }
                }
            }
            applied
        })
    }
}

/// The ublk devices while the daemon runs.
#[derive(Debug)]
struct UblkServer {
    /// Dropped after the workers ended, before the devices are deleted (the kernel waits
    /// for /dev/ublkcN to be closed).
    devices: std::sync::Mutex<Vec<Device>>,
    not_made: std::sync::Mutex<Vec<NotMade>>,
    /// Where a device added while serving takes its buffers from.
    budget: Arc<Budget>,
}

impl UblkServer {
    fn devices(&self) -> std::sync::MutexGuard<'_, Vec<Device>> {
        self.devices.lock().expect(crate::POISONED)
    }

    fn not_made(&self) -> std::sync::MutexGuard<'_, Vec<NotMade>> {
        self.not_made.lock().expect(crate::POISONED)
    }

    /// Makes device `u.id` serving `s` while the workers run (or takes it over from a
    /// raidd that died): its buffers from the budget, the control commands on a helper
    /// thread, a queue handed to each worker, then started.
    async fn add(&self, u: &UblkConfig, s: Serving, rc: &ReloadCtx<'_, '_>) -> Result<(), String> {
        let what = abi::block_path(u.id);
        if self.devices().iter().any(|d| d.id == u.id) {
            return Err(format!("{what} is served already"));
        }
        let bytes = config::buffer_bytes(std::slice::from_ref(u), rc.threads);
        let held = Held::take(&self.budget, bytes).ok_or_else(|| {
            format!(
                "{what} not made: its buffers ({}) do not fit the buffer memory left now",
                raidd_admin::size::human(bytes)
            )
        })?;
        let (entry, threads) = (u.clone(), rc.threads);
        let mut device = on_helper(what.clone(), move || {
            prepare_one(&mut Control::open()?, &entry, &s, threads)
        })
        .await?;
        device.held = Some(held);
        let made = (
            device.id,
            device.recovered,
            device.name.clone(),
            device.size_bytes,
        );
        let tasks: Vec<_> = (0..threads).filter_map(|w| device.queue_task(w)).collect();
        debug_assert_eq!(tasks.len(), threads, "a queue per worker");
        // Kept from here on, so whatever happens next the stop ends and deletes it.
        {
            let mut devices = self.devices();
            devices.push(device);
            debug_assert_eq!(
                devices.iter().filter(|d| d.id == u.id).count(),
                1,
                "a device number is served once"
            );
        }
        for (w, task) in tasks.into_iter().enumerate() {
            if let Err(e) = (rc.spawn)(w, task) {
                self.remove(u.id).await?;
                return Err(format!("{what} not made: {e}"));
            }
        }
        if let Some(failed) = start(std::slice::from_ref(&made)).await.pop() {
            let removed = self.remove(u.id).await;
            return Err(match removed {
                Ok(()) => failed.error,
                Err(m) => format!("{}; {m}", failed.error),
            });
        }
        Ok(())
    }

    /// Stops device `id` (its requests in flight finish), waits for its queues to end and
    /// deletes it; one that was not made is forgotten.
    async fn remove(&self, id: u32) -> Result<(), String> {
        let what = abi::block_path(id);
        let ended = {
            let mut devices = self.devices();
            match devices.iter_mut().find(|d| d.id == id) {
                Some(d) => std::mem::take(&mut d.ended),
                None => {
                    let mut not_made = self.not_made();
                    let before = not_made.len();
                    not_made.retain(|n| n.id != id);
                    return if not_made.len() < before {
                        Ok(())
                    } else {
                        Err(format!("{what} is not served"))
                    };
                }
            }
        };
        stop(&[id]).await;
        let all = futures::future::join_all(ended);
        let wait = raidd_rt::time::sleep(CONTROL_WAIT);
        futures::pin_mut!(all, wait);
        if let futures::future::Either::Right(_) = futures::future::select(all, wait).await {
            return Err(format!(
                "{what} did not stop in {CONTROL_WAIT:?}: it is deleted when the daemon stops"
            ));
        }
        // Its queues have ended: dropping it closes /dev/ublkcN, which the deletion waits
        // for.
        self.devices().retain(|d| d.id != id);
        self.not_made().retain(|n| n.id != id);
        delete(vec![id]).await;
        Ok(())
    }
}

impl Running for UblkServer {
    fn name(&self) -> &'static str {
        "ublk"
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn worker_tasks(&self, worker: usize) -> Vec<futures::future::LocalBoxFuture<'static, ()>> {
        self.devices()
            .iter_mut()
            .filter_map(|d| d.queue_task(worker))
            .map(|t| t())
            .collect()
    }

    fn started(&self) -> futures::future::LocalBoxFuture<'_, ()> {
        Box::pin(async move {
            let made: Vec<(u32, bool, String, u64)> = self
                .devices()
                .iter()
                .map(|d| (d.id, d.recovered, d.name.clone(), d.size_bytes))
                .collect();
            let failed = start(&made).await;
            self.not_made.lock().expect(crate::POISONED).extend(failed);
        })
    }

    fn stopping(&self) -> futures::future::LocalBoxFuture<'_, ()> {
        Box::pin(async move {
            let ids: Vec<u32> = self.devices().iter().map(|d| d.id).collect();
            stop(&ids).await;
        })
    }

    fn stopped(&self) -> futures::future::LocalBoxFuture<'_, ()> {
        Box::pin(async move {
            let ids: Vec<u32> = self.devices().drain(..).map(|d| d.id).collect();
            delete(ids).await;
        })
    }

    fn report(&self, report: &mut StatusReport, _arrays: &[Arc<raidd_engine::Array>]) {
        let not_made = self.not_made();
        let mut out: Vec<UblkStatus> = self
            .devices()
            .iter()
            .filter(|d| !not_made.iter().any(|n| n.id == d.id))
            .map(|d| UblkStatus {
                device: abi::block_path(d.id),
                serves: d.name.clone(),
                size_bytes: d.size_bytes,
                taken_over: d.recovered,
                error: None,
            })
            .collect();
        out.extend(not_made.iter().map(|n| UblkStatus {
            device: abi::block_path(n.id),
            serves: n.name.clone(),
            size_bytes: 0,
            taken_over: false,
            error: Some(n.error.clone()),
        }));
        report.ublk = out;
    }
}
