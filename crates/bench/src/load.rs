//! Runs one point of a sweep: workers, each with its own stream of requests and `qd` of them
//! in flight, against a device, for a ramp and then a measured window (a time, or a count of
//! requests). Each request's response time goes into a histogram.
//!
//! Time is the simulated clock's when the members are simulated: every worker then runs on
//! this thread, in simulated time, so a point is deterministic and its length is the
//! simulation's, not the host's. Otherwise each worker is a thread with its own executor
//! and ring, as the server's are, and time is the host's.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use raidd_lab::SimWorld;
use raidd_rt::{AlignedBuf, IoVec, IoVecMut, SharedBuf};

use super::iscsi::{self, IscsiUrl};
use super::nbd::{Conn, NbdUrl};
use super::spec::{Access, Stream};
use super::target::{cpu_seconds, process_cpu_seconds, Device};

/// What a point drives: a device in this process, an NBD export or an iSCSI LUN (a
/// connection per worker).
#[derive(Clone)]
pub enum Target {
    Local(Arc<Device>),
    Nbd {
        url: NbdUrl,
        size: u64,
    },
    Iscsi {
        url: IscsiUrl,
        size: u64,
        block: u32,
    },
}

impl Target {
    pub fn size(&self) -> u64 {
        match self {
            Target::Local(d) => d.size(),
            Target::Nbd { size, .. } | Target::Iscsi { size, .. } => *size,
        }
    }
}

/// A worker's way to its target.
pub enum Session {
    Local(Arc<Device>),
    Nbd(Rc<Conn>),
    Iscsi(Rc<iscsi::Session>),
}

impl Session {
    pub fn open(t: &Target) -> Result<Session, String> {
        Ok(match t {
            Target::Local(d) => Session::Local(d.clone()),
            Target::Nbd { url, .. } => Session::Nbd(Conn::open(url)?),
            Target::Iscsi { url, block, .. } => Session::Iscsi(iscsi::Session::open(url, *block)?),
        })
    }

    /// One request of `len` bytes at `offset`, from or into `buf`, in `pieces` windows of
    /// equal length (a vectored request, seed 002's readv; one in-process, where the
    /// engine sees the vector; the network carries one buffer whatever it is).
    pub async fn io(
        &self,
        write: bool,
        offset: u64,
        buf: &SharedBuf,
        len: usize,
        pieces: usize,
    ) -> Result<(), String> {
        let lent = "the last request gave the buffer back";
        let step = len / pieces.max(1);
        let windows = (0..pieces.max(1)).map(|i| i * step..(i + 1) * step);
        match self {
            Session::Local(dev) if write => {
                let mut iov = IoVec::new();
                for w in windows {
                    iov.push(buf.slice(w).expect(lent));
                }
                dev.write(offset, iov).await
            }
            Session::Local(dev) => {
                let mut iov = IoVecMut::new();
                for w in windows {
                    iov.push(buf.slice_mut(w).expect(lent));
                }
                dev.read(offset, iov).await
            }
            Session::Nbd(c) if write => {
                let data = buf.slice(0..len).expect(lent);
                c.write(offset, data.as_slice()).await
            }
            Session::Nbd(c) => {
                let n = u32::try_from(len).map_err(|_| "a read over 4 GiB".to_string())?;
                c.read(offset, n).await.map(|_| ())
            }
            Session::Iscsi(c) if write => {
                let data = buf.slice(0..len).expect(lent);
                c.write(offset, data.as_slice()).await
            }
            Session::Iscsi(c) => c.read(offset, len).await.map(|_| ()),
        }
    }
}

/// What a point's clock reads: simulated or real nanoseconds.
#[derive(Clone, Debug)]
pub enum Clock {
    Real(Instant),
    Sim(Arc<SimWorld>),
}

impl Clock {
    pub fn now_ns(&self) -> u64 {
        match self {
            Clock::Real(t0) => t0.elapsed().as_nanos() as u64,
            Clock::Sim(w) => w.now_ns(),
        }
    }

    async fn pause(&self, ns: u64) {
        match self {
            Clock::Real(_) => raidd_rt::time::sleep(Duration::from_nanos(ns)).await,
            Clock::Sim(w) => w.sleep(ns).await,
        }
    }
}

/// How long a point measures.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Measure {
    Seconds(f64),
    /// Requests started in the measured window, over all workers.
    Count(u64),
}

#[derive(Clone, Copy, Debug)]
pub struct Plan {
    pub access: Access,
    pub workers: u32,
    pub qd: u32,
    pub ramp_s: f64,
    pub measure: Measure,
    pub seed: u64,
    /// Windows per request (1: one buffer); divides the request into equal whole sectors.
    pub iovecs: u32,
    /// A server process whose CPU time the point also measures.
    pub server_pid: Option<u32>,
}

/// What a point measured.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub reads: Histogram<u64>,
    pub writes: Histogram<u64>,
    /// Length of the measured window, seconds.
    pub seconds: f64,
    /// Every request completed, the ramp's included (CPU time is divided by these).
    pub all: u64,
    /// Process CPU seconds over the point.
    pub cpu_s: Option<f64>,
    /// The server's CPU seconds over the point, when its PID was given.
    pub server_cpu_s: Option<f64>,
}

impl Outcome {
    pub fn ios(&self) -> u64 {
        self.reads.len() + self.writes.len()
    }
}

fn histogram() -> Histogram<u64> {
    // 1 ns to an hour at 3 significant digits.
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid bounds")
}

/// The window every slot of a point shares.
#[derive(Clone, Debug)]
struct Window {
    clock: Clock,
    from: u64,
    end: u64,
    /// Count mode: measured requests still to start.
    left: Option<Arc<AtomicU64>>,
}

impl Window {
    /// Whether a request starting at `now` may go, and whether it is measured.
    fn admit(&self, now: u64) -> Option<bool> {
        if now >= self.end {
            return None;
        }
        if now < self.from {
            return Some(false);
        }
        match &self.left {
            None => Some(true),
            Some(left) => left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .ok()
                .map(|_| true),
        }
    }
}

/// One slot's results.
struct SlotTally {
    reads: Histogram<u64>,
    writes: Histogram<u64>,
    all: u64,
    /// When its last measured request completed.
    last_end: u64,
}

async fn slot(
    session: Rc<Session>,
    stream: Rc<RefCell<Stream>>,
    w: Window,
    plan: Plan,
    seed: u64,
) -> Result<SlotTally, String> {
    let (access, iovecs) = (plan.access, plan.iovecs as usize);
    let len = access.bs as usize;
    let mut data = AlignedBuf::for_overwrite(len);
    // Non-zero data, different per slot, so nothing can shortcut zero blocks.
    let mut x = seed;
    super::target::fill_block(&mut data, &mut x);
    let buf = SharedBuf::new(data);
    let mut t = SlotTally {
        reads: histogram(),
        writes: histogram(),
        all: 0,
        last_end: 0,
    };
    let mut in_burst = 0u32;
    loop {
        let start = w.clock.now_ns();
        let Some(measured) = w.admit(start) else {
            break;
        };
        let req = stream.borrow_mut().next_req();
        session.io(req.write, req.offset, &buf, len, iovecs).await?;
        let end = w.clock.now_ns();
        t.all += 1;
        if measured {
            let h = if req.write {
                &mut t.writes
            } else {
                &mut t.reads
            };
            h.saturating_record((end - start).max(1));
            t.last_end = t.last_end.max(end);
        }
        in_burst += 1;
        if in_burst >= access.burst && access.delay_ns > 0 {
            in_burst = 0;
            w.clock.pause(access.delay_ns).await;
        }
    }
    Ok(t)
}

/// One worker's slots, on this thread.
async fn worker(
    target: Target,
    plan: Plan,
    w: Window,
    index: u32,
) -> Result<Vec<SlotTally>, String> {
    let session = Rc::new(Session::open(&target)?);
    let stream = Stream::new(
        plan.access,
        target.size(),
        u64::from(index),
        u64::from(plan.workers),
        plan.seed,
    )
    .ok_or("the device holds fewer requests than there are workers")?;
    let stream = Rc::new(RefCell::new(stream));
    let slots: Vec<_> = (0..u64::from(plan.qd))
        .map(|i| {
            raidd_rt::spawn_local(slot(
                session.clone(),
                stream.clone(),
                w.clone(),
                plan,
                (u64::from(index) << 32) + i + 1,
            ))
        })
        .collect();
    let mut out = Vec::new();
    for s in slots {
        out.push(s.await?);
    }
    Ok(out)
}

/// Runs one point against `dev`.
pub fn run_point(
    dev: &Target,
    plan: &Plan,
    sim: Option<&Arc<SimWorld>>,
) -> Result<Outcome, String> {
    let clock = match sim {
        Some(world) => Clock::Sim(world.clone()),
        None => Clock::Real(Instant::now()),
    };
    let from = clock.now_ns() + (plan.ramp_s * 1e9) as u64;
    let (end, left) = match plan.measure {
        Measure::Seconds(s) => (from + (s * 1e9) as u64, None),
        Measure::Count(n) => (u64::MAX, Some(Arc::new(AtomicU64::new(n)))),
    };
    let w = Window {
        clock: clock.clone(),
        from,
        end,
        left,
    };
    let cpu0 = cpu_seconds();
    let server = plan.server_pid.map(|p| p.to_string());
    let server0 = server.as_deref().and_then(process_cpu_seconds);
    let slots = match sim {
        Some(world) => {
            let (dev, plan, world) = (dev.clone(), *plan, world.clone());
            raidd_rt::block_on(async move {
                let all = async {
                    let workers: Vec<_> = (0..plan.workers)
                        .map(|i| raidd_rt::spawn_local(worker(dev.clone(), plan, w.clone(), i)))
                        .collect();
                    let mut slots = Vec::new();
                    for wk in workers {
                        slots.extend(wk.await?);
                    }
                    Ok::<_, String>(slots)
                };
                world.run(all).await
            })?
        }
        None => {
            let threads: Vec<_> = (0..plan.workers)
                .map(|i| {
                    let (dev, plan, w) = (dev.clone(), *plan, w.clone());
                    std::thread::Builder::new()
                        .name(format!("raidd-sweep-{i}"))
                        .spawn(move || raidd_rt::block_on(worker(dev, plan, w, i)))
                        .map_err(|e| format!("cannot start a worker thread: {e}"))
                })
                .collect::<Result<_, _>>()?;
            let mut slots = Vec::new();
            for t in threads {
                slots.extend(
                    t.join()
                        .map_err(|_| "a worker thread panicked".to_string())??,
                );
            }
            slots
        }
    };
    let cpu_s = cpu0.zip(cpu_seconds()).map(|(a, b)| b - a);
    let server_cpu_s = server0
        .zip(server.as_deref().and_then(process_cpu_seconds))
        .map(|(a, b)| b - a);
    let mut out = Outcome {
        reads: histogram(),
        writes: histogram(),
        seconds: 0.0,
        all: 0,
        cpu_s,
        server_cpu_s,
    };
    let mut last_end = from;
    for s in slots {
        out.reads.add(&s.reads).map_err(|e| e.to_string())?;
        out.writes.add(&s.writes).map_err(|e| e.to_string())?;
        out.all += s.all;
        last_end = last_end.max(s.last_end);
    }
    out.seconds = match plan.measure {
        Measure::Seconds(s) => s,
        Measure::Count(_) => (last_end - from) as f64 / 1e9,
    };
    Ok(out)
}
