//! Simulated disks as members: the drives and buses of `raidd-sim`, in simulated time, with
//! their data kept in memory (sparse: only what was written takes room).
//!
//! A request is timed by the simulated machine when it is submitted and completes when the
//! simulated clock reaches its time. The clock moves only when the thread's executor has
//! nothing else to do ([`raidd_rt::idle`]): every task is waiting for a simulated disk, so
//! the next event is the next thing that can happen. A run on one thread is therefore
//! deterministic (the same requests in the same order give the same times) and takes the
//! host's time only for the work the engine does, never for the disks' waiting.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::fmt;
use std::future::Future;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Poll, Waker};

use raidd_rt::{IoVec, IoVecMut};
use raidd_sim::{DriveStats, Op, Topology, World};

use raidd_engine::member::{assert_request, Member, MemberFuture, MemberInfo};

/// The simulated machine and its clock, shared by its members.
pub struct SimWorld {
    state: Mutex<Clocked>,
}

struct Clocked {
    world: World,
    /// Simulated nanoseconds.
    now: u64,
    /// Requests not yet complete: their time and number, earliest first.
    events: BinaryHeap<Reverse<(u64, u64)>>,
    /// The waker of each request still awaited, by number.
    waiting: HashMap<u64, Option<Waker>>,
    next: u64,
    /// The clock, waiting for a first event.
    clock: Option<Waker>,
}

impl Clocked {
    /// An event at `at`: its number, to wait on.
    fn event(&mut self, at: u64) -> u64 {
        let n = self.next;
        self.next += 1;
        self.events.push(Reverse((at, n)));
        self.waiting.insert(n, None);
        if let Some(w) = self.clock.take() {
            w.wake();
        }
        n
    }
}

impl fmt::Debug for SimWorld {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.lock();
        f.debug_struct("SimWorld")
            .field("drives", &s.world.drives())
            .field("now", &s.now)
            .finish()
    }
}

impl SimWorld {
    pub fn new(topology: &Topology) -> Arc<SimWorld> {
        Arc::new(SimWorld {
            state: Mutex::new(Clocked {
                world: World::new(topology),
                now: 0,
                events: BinaryHeap::new(),
                waiting: HashMap::new(),
                next: 0,
                clock: None,
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Clocked> {
        self.state.lock().expect(crate::POISONED)
    }

    /// One member per drive, in the topology's order, named `sim:MODEL#N`.
    pub fn members(self: &Arc<SimWorld>) -> Vec<SimMember> {
        let s = self.lock();
        (0..s.world.drives())
            .map(|i| {
                let d = s.world.drive_model(i);
                SimMember {
                    info: MemberInfo {
                        name: format!("sim:{}#{i}", d.spec().name),
                        size_bytes: d.bytes(),
                        block_size: 512,
                        rotational: true,
                        max_transfer: Some(d.max_transfer_sectors() * 512),
                    },
                    world: self.clone(),
                    drive: i,
                    data: Sparse::default(),
                }
            })
            .collect()
    }

    /// Simulated time now, nanoseconds.
    pub fn now_ns(&self) -> u64 {
        self.lock().now
    }

    pub fn stats(&self, drive: usize) -> DriveStats {
        self.lock().world.stats(drive)
    }

    /// Runs `f` on this thread with the clock beside it: simulated time passes whenever
    /// everything waits. Returns `f`'s output once it is done.
    pub async fn run<F: Future>(self: &Arc<SimWorld>, f: F) -> F::Output {
        let clock = std::pin::pin!(self.clone().tick());
        let f = std::pin::pin!(f);
        match futures::future::select(f, clock).await {
            futures::future::Either::Left((out, _)) => out,
            futures::future::Either::Right((never, _)) => match never {},
        }
    }

    /// Moves the clock to each next event when nothing else can run.
    async fn tick(self: Arc<SimWorld>) -> std::convert::Infallible {
        loop {
            std::future::poll_fn(|cx| {
                let mut s = self.lock();
                if s.events.is_empty() {
                    s.clock = Some(cx.waker().clone());
                    Poll::Pending
                } else {
                    Poll::Ready(())
                }
            })
            .await;
            raidd_rt::idle().await;
            let woken = {
                let mut s = self.lock();
                let Some(&Reverse((t, _))) = s.events.peek() else {
                    continue;
                };
                assert!(t >= s.now, "simulated time runs backwards");
                s.now = t;
                let mut woken = Vec::new();
                while let Some(&Reverse((t, n))) = s.events.peek() {
                    if t > s.now {
                        break;
                    }
                    s.events.pop();
                    if let Some(w) = s.waiting.get_mut(&n).and_then(Option::take) {
                        woken.push(w);
                    }
                }
                woken
            };
            for w in woken {
                w.wake();
            }
        }
    }

    /// Waits `ns` simulated nanoseconds (a benchmark's pause between bursts).
    pub async fn sleep(&self, ns: u64) {
        let (n, at) = {
            let mut s = self.lock();
            let at = s.now + ns;
            (s.event(at), at)
        };
        self.wait(n, at).await;
    }

    /// Times a request on drive `drive` now: its number, to wait on.
    fn submit(&self, drive: usize, op: Op, offset: u64, len: u64) -> (u64, u64) {
        let mut s = self.lock();
        let now = s.now;
        let done = s.world.submit(drive, op, offset, len, now);
        (s.event(done), done)
    }

    /// Completes when the clock reaches `done`.
    async fn wait(&self, n: u64, done: u64) {
        let guard = Forget { world: self, n };
        std::future::poll_fn(|cx| {
            let mut s = self.lock();
            if s.now >= done {
                return Poll::Ready(());
            }
            s.waiting.insert(n, Some(cx.waker().clone()));
            Poll::Pending
        })
        .await;
        drop(guard);
    }
}

/// Forgets a request's waker when its wait ends or is dropped.
struct Forget<'a> {
    world: &'a SimWorld,
    n: u64,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.world.lock().waiting.remove(&self.n);
    }
}

/// A member's data: 64 KiB pages, made when first written.
#[derive(Default)]
struct Sparse {
    pages: Mutex<BTreeMap<u64, Box<[u8]>>>,
}

const PAGE: u64 = 64 << 10;

impl Sparse {
    /// Calls `f(page, offset in page, range of the request)` for each page-bounded piece.
    fn pieces(offset: u64, len: u64, mut f: impl FnMut(u64, usize, std::ops::Range<usize>)) {
        let (mut pos, end) = (offset, offset + len);
        while pos < end {
            let n = (PAGE - pos % PAGE).min(end - pos);
            let rel = (pos - offset) as usize;
            f(pos / PAGE, (pos % PAGE) as usize, rel..rel + n as usize);
            pos += n;
        }
    }

    fn read(&self, offset: u64, out: &mut [u8]) {
        let pages = self.pages.lock().expect(crate::POISONED);
        Sparse::pieces(offset, out.len() as u64, |p, at, r| match pages.get(&p) {
            Some(page) => out[r.clone()].copy_from_slice(&page[at..at + r.len()]),
            None => out[r].fill(0),
        });
    }

    fn write(&self, offset: u64, data: &[u8]) {
        let mut pages = self.pages.lock().expect(crate::POISONED);
        Sparse::pieces(offset, data.len() as u64, |p, at, r| {
            let page = pages
                .entry(p)
                .or_insert_with(|| vec![0u8; PAGE as usize].into_boxed_slice());
            page[at..at + r.len()].copy_from_slice(&data[r]);
        });
    }

    fn zero(&self, offset: u64, len: u64) {
        let mut pages = self.pages.lock().expect(crate::POISONED);
        Sparse::pieces(offset, len, |p, at, r| {
            if r.len() as u64 == PAGE {
                pages.remove(&p);
            } else if let Some(page) = pages.get_mut(&p) {
                page[at..at + r.len()].fill(0);
            }
        });
    }
}

/// One simulated drive of a [`SimWorld`].
pub struct SimMember {
    info: MemberInfo,
    world: Arc<SimWorld>,
    drive: usize,
    data: Sparse,
}

impl fmt::Debug for SimMember {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimMember")
            .field("info", &self.info)
            .finish()
    }
}

impl SimMember {
    /// Which drive of its world this is.
    pub fn drive(&self) -> usize {
        self.drive
    }
}

impl Member for SimMember {
    fn info(&self) -> &MemberInfo {
        &self.info
    }

    fn read(&self, offset: u64, mut iov: IoVecMut) -> MemberFuture<'_, (io::Result<()>, IoVecMut)> {
        let total: u64 = iov.iter().map(|w| w.len() as u64).sum();
        assert_request(&self.info, offset, total);
        // The data as it stands when the request is submitted: requests are ordered by
        // submission, as a drive without command queueing orders them.
        let mut pos = offset;
        for w in iov.iter_mut() {
            let out = w.as_mut_slice();
            self.data.read(pos, out);
            pos += out.len() as u64;
        }
        if total == 0 {
            return MemberFuture::new(std::future::ready((Ok(()), iov)));
        }
        let (n, done) = self.world.submit(self.drive, Op::Read, offset, total);
        MemberFuture::new(async move {
            self.world.wait(n, done).await;
            (Ok(()), iov)
        })
    }

    fn write(&self, offset: u64, iov: IoVec) -> MemberFuture<'_, io::Result<()>> {
        let total: u64 = iov.iter().map(|w| w.len() as u64).sum();
        assert_request(&self.info, offset, total);
        let mut pos = offset;
        for w in iov.iter() {
            self.data.write(pos, w.as_slice());
            pos += w.len() as u64;
        }
        raidd_rt::buf::give_iov(iov);
        if total == 0 {
            return MemberFuture::new(std::future::ready(Ok(())));
        }
        let (n, done) = self.world.submit(self.drive, Op::Write, offset, total);
        MemberFuture::new(async move {
            self.world.wait(n, done).await;
            Ok(())
        })
    }

    fn flush(&self) -> MemberFuture<'_, io::Result<()>> {
        // Writes complete on the platter unless the model has a write cache, whose flush
        // the model does not time.
        MemberFuture::new(std::future::ready(Ok(())))
    }

    fn discard(&self, offset: u64, len: u64) -> MemberFuture<'_, io::Result<()>> {
        assert_request(&self.info, offset, len);
        self.data.zero(offset, len);
        MemberFuture::new(std::future::ready(Ok(())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use raidd_engine::member::{read_bytes, write_bytes};
    use raidd_rt::AlignedBuf;
    use std::path::Path;

    fn world(n: usize) -> Arc<SimWorld> {
        let d = raidd_sim::load_model("djna-371350", Path::new(".")).expect("built in");
        SimWorld::new(&Topology::separate(d, n))
    }

    #[test]
    fn data_comes_back_and_unwritten_sectors_read_zero() {
        let w = world(1);
        let m = Arc::new(w.members().remove(0));
        let out = raidd_rt::block_on({
            let (w, m) = (w.clone(), m.clone());
            async move {
                w.run(async {
                    // Across a page boundary: each sector carries its number.
                    let at = PAGE - 1024;
                    let mut data = AlignedBuf::zeroed(4096);
                    for (i, s) in data.chunks_exact_mut(512).enumerate() {
                        s.fill(i as u8 + 1);
                    }
                    write_bytes(&*m, at, data).await.expect("write");
                    let back = read_bytes(&*m, at - 512, 5120).await.expect("read");
                    m.discard(0, PAGE).await.expect("discard");
                    let after = read_bytes(&*m, at - 512, 1024).await.expect("read");
                    (back.to_vec(), after.to_vec())
                })
                .await
            }
        });
        let (back, after) = out;
        assert!(back[..512].iter().all(|&b| b == 0), "never written");
        for i in 0..8 {
            let s = &back[512 * (i + 1)..512 * (i + 2)];
            assert!(s.iter().all(|&b| b == i as u8 + 1), "sector {i}");
        }
        assert!(after[..512].iter().all(|&b| b == 0));
        assert!(after[512..].iter().all(|&b| b == 0), "discarded");
        assert!(w.now_ns() > 0, "the requests took simulated time");
    }

    #[test]
    fn simulated_time_is_the_models_and_runs_faster_than_real_time() {
        let run = || {
            let w = world(2);
            let ms: Vec<Arc<SimMember>> = w.members().into_iter().map(Arc::new).collect();
            let started = std::time::Instant::now();
            let times = raidd_rt::block_on({
                let w = w.clone();
                async move {
                    let w2 = w.clone();
                    w.run(async move {
                        // Two drives read 64 MiB each, 128 KiB at a time, at once.
                        let tasks: Vec<_> = ms
                            .iter()
                            .map(|m| {
                                let (m, w) = (m.clone(), w2.clone());
                                raidd_rt::spawn_local(async move {
                                    for i in 0..512u64 {
                                        read_bytes(&*m, i << 17, 128 << 10).await.expect("read");
                                    }
                                    w.now_ns()
                                })
                            })
                            .collect();
                        let mut t = Vec::new();
                        for task in tasks {
                            t.push(task.await);
                        }
                        t
                    })
                    .await
                }
            });
            (times, started.elapsed())
        };
        let (a, wall) = run();
        let (b, _) = run();
        assert_eq!(a, b, "the same requests, the same times");
        // 64 MiB at the outer zone's ~15.2 MB/s is about 4.4 s for each drive, at once.
        let secs = a[0] as f64 / 1e9;
        assert!((4.0..5.0).contains(&secs), "{secs} s");
        assert!(wall.as_secs_f64() < secs / 4.0, "{wall:?} of real time");
    }

    /// A RAID5 over four simulated drives keeps what is written, sector for sector, and
    /// reads it back degraded once a drive is failed: data on simulated disks verifies like
    /// data anywhere.
    #[test]
    fn an_array_over_simulated_drives_verifies_healthy_and_degraded() {
        use raidd_engine::create::{create, CreateSpec};
        use raidd_engine::pattern;
        let w = world(4);
        let members: Vec<Arc<dyn Member>> = w
            .members()
            .into_iter()
            .map(|m| Arc::new(m) as Arc<dyn Member>)
            .collect();
        let spec = CreateSpec {
            name: "sim".into(),
            homehost: "test".into(),
            level: raidd_layout::Level::Raid5,
            layout: None,
            chunk_sectors: Some(128),
            members: members.into_iter().map(Some).collect(),
            size_sectors: Some(64 << 11),
            assume_clean: true,
            force: true,
            bitmap_chunk: None,
            ppl: false,
            journal: None,
            checksums: None,
        };
        let bad = raidd_rt::block_on({
            let w = w.clone();
            async move {
                w.run(async move {
                    let a = create(spec).await.expect("create").array;
                    // 8 MiB written in requests of 1 MiB at an odd sector offset.
                    let (first, sectors) = (7u64, 16_384u64);
                    for i in 0..8u64 {
                        let s = first + i * 2048;
                        let mut b = AlignedBuf::zeroed(2048 * 512);
                        pattern::fill(&mut b, s, 1, 99);
                        a.write_buf(s * 512, b).await.expect("write");
                    }
                    let check = |a: Arc<raidd_engine::Array>| async move {
                        let b = a
                            .read_to_buf(first * 512, (sectors * 512) as usize)
                            .await
                            .expect("read");
                        pattern::verify(&b, first, 99, |_| 1).len()
                    };
                    let healthy = check(a.clone()).await;
                    a.fail_member(2).await.expect("fail");
                    let degraded = check(a.clone()).await;
                    (healthy, degraded, a.status().await.counters.degraded_reads)
                })
                .await
            }
        });
        assert_eq!((bad.0, bad.1), (0, 0), "bad sectors healthy, degraded");
        assert!(bad.2 > 0, "the degraded read reconstructed");
    }
}
