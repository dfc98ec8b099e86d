//! A single-threaded executor per thread (thread-per-core): tasks are `!Send` futures that
//! stay on the thread that spawned them, next to that thread's io_uring. Nothing here is
//! shared between threads except the queue through which another thread may wake a task.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::os::fd::{AsRawFd, OwnedFd};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use crate::driver::{Backend, Driver, RingWait};
use crate::pooled::PooledFuture;
use crate::slab::{Key, Slab};

/// A task's future, in a block from the thread's pool: spawning a task per request
/// allocates nothing once the pool is warm.
type LocalTask = PooledFuture<'static, ()>;

/// Wakers of finished tasks kept for new ones, per runtime.
const WAKERS_KEPT: usize = 1024;

/// The part of a runtime other threads may touch: the queue of tasks they woke.
struct Remote {
    queue: Mutex<Vec<Key>>,
    /// Set when the eventfd has been written and not yet drained, so a burst of remote wakes
    /// costs one write.
    signalled: AtomicBool,
    /// Shared with the driver, so the descriptor stays open while any waker can still write.
    eventfd: Arc<OwnedFd>,
    /// Cleared when the runtime is dropped; late wakes become no-ops.
    alive: AtomicBool,
}

impl Remote {
    fn wake(&self, key: Key) {
        if !self.alive.load(Ordering::Acquire) {
            return;
        }
        self.queue.lock().expect(crate::POISONED).push(key);
        if !self.signalled.swap(true, Ordering::AcqRel) {
            let one = 1u64;
            // SAFETY: writes 8 bytes from `one` to an eventfd kept open by our Arc.
            unsafe { libc::write(self.eventfd.as_raw_fd(), (&one as *const u64).cast(), 8) };
        }
    }
}

/// What a task's waker carries: which task, on which runtime.
struct TaskWaker {
    key: Key,
    remote: Arc<Remote>,
    /// Already in a ready queue: further wakes are redundant.
    queued: AtomicBool,
}

impl Wake for TaskWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.queued.swap(true, Ordering::AcqRel) {
            return;
        }
        // During thread-local destruction (a future dropped at thread exit may wake others)
        // the current runtime is unreachable; the remote path is always safe.
        let local = CURRENT.try_with(|c| {
            let c = c.try_borrow().ok()?;
            let rt = c.as_ref()?;
            if !Arc::ptr_eq(&rt.remote, &self.remote) {
                return None;
            }
            rt.ready.try_borrow_mut().ok()?.push_back(self.key);
            Some(())
        });
        if !matches!(local, Ok(Some(()))) {
            self.remote.wake(self.key);
        }
    }
}

struct TaskSlot {
    future: Option<LocalTask>,
    waker: Arc<TaskWaker>,
}

/// One thread's runtime.
pub(crate) struct Runtime {
    tasks: RefCell<Slab<TaskSlot>>,
    ready: RefCell<VecDeque<Key>>,
    remote: Arc<Remote>,
    pub(crate) driver: Rc<Driver>,
    in_block_on: Cell<bool>,
    /// Wakers of tasks waiting in [`unplugged`] for this thread to run out of work, and
    /// the Vec the last release emptied (swapped in, so waiting allocates nothing).
    plugged: RefCell<Vec<Waker>>,
    plugged_spare: RefCell<Vec<Waker>>,
    /// Releases so far: a task waiting in [`unplugged`] since an earlier value is released.
    unplug_epoch: Cell<u64>,
    /// Wakers of tasks waiting in [`idle`], released after the plugs, and their epoch.
    idlers: RefCell<Vec<Waker>>,
    idlers_spare: RefCell<Vec<Waker>>,
    idle_epoch: Cell<u64>,
    /// Wakers of finished tasks that nothing else holds, for the next tasks.
    free_wakers: RefCell<Vec<Arc<TaskWaker>>>,
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runtime")
            .field("tasks", &self.tasks.borrow().len())
            .finish()
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Rc<Runtime>>> = const { RefCell::new(None) };
}

impl Runtime {
    fn new() -> std::io::Result<Runtime> {
        let driver = Rc::new(Driver::new()?);
        let remote = Arc::new(Remote {
            queue: Mutex::new(Vec::new()),
            signalled: AtomicBool::new(false),
            eventfd: driver.eventfd_handle(),
            alive: AtomicBool::new(true),
        });
        Ok(Runtime {
            tasks: RefCell::new(Slab::default()),
            ready: RefCell::new(VecDeque::new()),
            remote,
            driver,
            in_block_on: Cell::new(false),
            plugged: RefCell::new(Vec::new()),
            plugged_spare: RefCell::new(Vec::new()),
            unplug_epoch: Cell::new(0),
            idlers: RefCell::new(Vec::new()),
            idlers_spare: RefCell::new(Vec::new()),
            idle_epoch: Cell::new(0),
            free_wakers: RefCell::new(Vec::new()),
        })
    }

    fn spawn(&self, future: LocalTask) {
        let mut tasks = self.tasks.borrow_mut();
        let key = tasks.next_key();
        let waker = self.waker_for(key);
        let inserted = tasks.insert(TaskSlot {
            future: Some(future),
            waker,
        });
        debug_assert_eq!(inserted, key);
        self.ready.borrow_mut().push_back(key);
    }

    /// A waker for the task `key`, queued: a finished task's, when nothing else holds it.
    fn waker_for(&self, key: Key) -> Arc<TaskWaker> {
        let reused = self.free_wakers.borrow_mut().pop();
        if let Some(mut w) = reused {
            debug_assert!(
                Arc::ptr_eq(&w.remote, &self.remote),
                "a kept waker wakes this runtime"
            );
            if let Some(tw) = Arc::get_mut(&mut w) {
                tw.key = key;
                *tw.queued.get_mut() = true;
                return w;
            }
        }
        Arc::new(TaskWaker {
            key,
            remote: self.remote.clone(),
            queued: AtomicBool::new(true),
        })
    }

    /// Keeps a finished task's waker for a later task if nothing else holds a clone (a
    /// clone held elsewhere could still wake whichever task came to own it).
    fn recycle_waker(&self, waker: Arc<TaskWaker>) {
        if Arc::strong_count(&waker) == 1 && Arc::weak_count(&waker) == 0 {
            let mut free = self.free_wakers.borrow_mut();
            if free.len() < WAKERS_KEPT {
                free.push(waker);
            }
            debug_assert!(free.len() <= WAKERS_KEPT, "the kept wakers are bounded");
        }
    }

    /// Polls one task. The future is taken out of the slab while it runs so that it may
    /// spawn tasks (which borrows the slab) or wake itself.
    fn poll_task(&self, key: Key) {
        let (mut future, waker) = {
            let mut tasks = self.tasks.borrow_mut();
            let Some(slot) = tasks.get_mut(key) else {
                return;
            };
            let Some(future) = slot.future.take() else {
                return;
            };
            debug_assert_eq!(slot.waker.key, key, "a task's waker names the task");
            slot.waker.queued.store(false, Ordering::Release);
            (future, slot.waker.clone())
        };
        let waker = Waker::from(waker);
        let mut cx = Context::from_waker(&waker);
        let done = Pin::new(&mut future).poll(&mut cx).is_ready();
        drop(waker);
        let mut tasks = self.tasks.borrow_mut();
        if done {
            let slot = tasks.remove(key);
            drop(tasks);
            drop(future);
            if let Some(slot) = slot {
                self.recycle_waker(slot.waker);
            }
        } else if let Some(slot) = tasks.get_mut(key) {
            debug_assert!(
                slot.future.is_none(),
                "a task is polled by one poll at a time"
            );
            slot.future = Some(future);
        }
    }

    fn drain_remote(&self) {
        self.remote.signalled.store(false, Ordering::Release);
        let woken = std::mem::take(&mut *self.remote.queue.lock().expect(crate::POISONED));
        let tasks = self.tasks.borrow();
        let mut ready = self.ready.borrow_mut();
        for key in woken {
            if tasks.get(key).is_some() {
                ready.push_back(key);
            }
        }
    }

    /// Runs tasks until `done()` says so, parking on the driver when nothing is ready.
    fn run_until(&self, mut done: impl FnMut() -> bool) {
        loop {
            // Run what is ready now; tasks woken meanwhile wait for the next round, so that
            // completions are reaped between rounds and nothing starves.
            let round = self.ready.borrow().len();
            for _ in 0..round {
                let Some(key) = self.ready.borrow_mut().pop_front() else {
                    break;
                };
                self.poll_task(key);
            }
            if done() {
                return;
            }
            self.drain_remote();
            let idle = self.ready.borrow().is_empty();
            if idle && !self.plugged.borrow().is_empty() {
                // The unplug point: before sleeping, take in what the kernel has finished
                // (more requests may join the plugged work), and release the plugs only
                // when that brought nothing new to run.
                self.driver.poll_nowait();
                self.drain_remote();
                if self.ready.borrow().is_empty() {
                    let mut wakers = std::mem::take(&mut *self.plugged_spare.borrow_mut());
                    std::mem::swap(&mut wakers, &mut *self.plugged.borrow_mut());
                    self.unplug_epoch.set(self.unplug_epoch.get() + 1);
                    debug_assert!(self.plugged.borrow().is_empty(), "every plug is released");
                    for w in wakers.drain(..) {
                        w.wake();
                    }
                    *self.plugged_spare.borrow_mut() = wakers;
                }
                continue;
            }
            if idle && !self.idlers.borrow().is_empty() {
                // Nothing plugged either: the moment simulated time may move on. Finished
                // real I/O comes first, as for the plugs.
                self.driver.poll_nowait();
                self.drain_remote();
                if self.ready.borrow().is_empty() {
                    let mut wakers = std::mem::take(&mut *self.idlers_spare.borrow_mut());
                    std::mem::swap(&mut wakers, &mut *self.idlers.borrow_mut());
                    self.idle_epoch.set(self.idle_epoch.get() + 1);
                    debug_assert!(self.idlers.borrow().is_empty(), "every idler is released");
                    for w in wakers.drain(..) {
                        w.wake();
                    }
                    *self.idlers_spare.borrow_mut() = wakers;
                }
                continue;
            }
            self.driver.park(idle);
        }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.remote.alive.store(false, Ordering::Release);
        // Drop task futures (and with them their ops, which become orphans) before the
        // driver waits for the kernel to hand back every buffer.
        let keys = self.tasks.borrow().keys();
        for key in keys {
            let slot = self.tasks.borrow_mut().remove(key);
            drop(slot);
        }
        debug_assert_eq!(self.tasks.borrow().len(), 0, "no task outlives its runtime");
    }
}

fn with_runtime<R>(f: impl FnOnce(&Rc<Runtime>) -> R) -> R {
    let rt = CURRENT.with(|c| {
        let mut c = c.borrow_mut();
        if c.is_none() {
            let rt = Runtime::new().unwrap_or_else(|e| panic!("cannot start the runtime: {e}"));
            *c = Some(Rc::new(rt));
        }
        c.as_ref().cloned().expect("runtime was just set")
    });
    f(&rt)
}

/// The current thread's driver (starting the runtime if needed).
pub(crate) fn driver() -> Rc<Driver> {
    with_runtime(|rt| rt.driver.clone())
}

/// Which I/O backend this thread uses.
pub fn backend() -> Backend {
    with_runtime(|rt| rt.driver.backend())
}

/// How this thread waits for completions (see [`RingWait`]).
pub fn ring_wait() -> RingWait {
    with_runtime(|rt| rt.driver.ring_wait())
}

/// Runs `future` to completion on this thread, together with every task spawned meanwhile.
/// Tasks still pending when it returns stay queued for the next `block_on` on this thread.
/// Panics if called from inside `block_on` on the same thread.
pub fn block_on<F: Future + 'static>(future: F) -> F::Output
where
    F::Output: 'static,
{
    with_runtime(|rt| {
        assert!(
            !rt.in_block_on.replace(true),
            "block_on called from within block_on"
        );
        let handle = spawn_on(rt, future);
        let result = Rc::clone(&handle.state);
        rt.run_until(|| result.borrow().output.is_some());
        rt.in_block_on.set(false);
        let output = result
            .borrow_mut()
            .output
            .take()
            .expect("checked by run_until");
        output
    })
}

/// Drops this thread's runtime after waiting for in-flight I/O (useful in tests and before a
/// thread exits on purpose; it also happens automatically at thread exit).
pub fn shutdown() {
    let rt = CURRENT.with(|c| c.borrow_mut().take());
    if let Some(rt) = &rt {
        assert!(!rt.in_block_on.get(), "shutdown from within block_on");
    }
    drop(rt);
}

struct JoinState<T> {
    output: Option<T>,
    waiter: Option<Waker>,
}

/// Awaits a spawned task's output. Dropping it detaches the task (it keeps running).
pub struct JoinHandle<T> {
    state: Rc<RefCell<JoinState<T>>>,
}

impl<T> fmt::Debug for JoinHandle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinHandle")
            .field("done", &self.state.borrow().output.is_some())
            .finish()
    }
}

impl<T> JoinHandle<T> {
    pub fn is_finished(&self) -> bool {
        self.state.borrow().output.is_some()
    }
}

impl<T> Future for JoinHandle<T> {
    type Output = T;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let mut st = self.state.borrow_mut();
        match st.output.take() {
            Some(v) => Poll::Ready(v),
            None => {
                st.waiter = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

fn spawn_on<F: Future + 'static>(rt: &Runtime, future: F) -> JoinHandle<F::Output>
where
    F::Output: 'static,
{
    let state = Rc::new(RefCell::new(JoinState {
        output: None,
        waiter: None,
    }));
    let st = state.clone();
    rt.spawn(PooledFuture::new(async move {
        let out = future.await;
        let waiter = {
            let mut s = st.borrow_mut();
            debug_assert!(s.output.is_none(), "a task completes once");
            s.output = Some(out);
            s.waiter.take()
        };
        if let Some(w) = waiter {
            w.wake();
        }
    }));
    JoinHandle { state }
}

/// Spawns a task on this thread's runtime whose output nobody awaits: unlike
/// [`spawn_local`], no join state, and the future is moved once, into its pooled block
/// (a task per request spawns this way).
pub fn spawn_detached<F: Future<Output = ()> + 'static>(future: F) {
    // Into its block before the runtime is looked up: a closure that captured the future
    // would copy it once more.
    let task = PooledFuture::new(future);
    with_runtime(move |rt| rt.spawn(task))
}

/// Spawns a task on this thread's runtime.
pub fn spawn_local<F: Future + 'static>(future: F) -> JoinHandle<F::Output>
where
    F::Output: 'static,
{
    with_runtime(|rt| spawn_on(rt, future))
}

/// Makes this thread's executor poll for completions for up to `window` before it sleeps
/// (zero, the default: sleep at once). Polling trades CPU time for wake-up latency: a
/// request that arrives within the window is picked up without a sleep and a wake-up,
/// which on virtual machines costs tens of microseconds.
pub fn set_poll(window: std::time::Duration) {
    driver().set_poll(window);
}

/// Whether this thread's positioned file reads and writes that meet end to end are
/// gathered into one vectored operation each time the thread enters the kernel (on by
/// default; `RAIDD_NO_GATHER=1` turns it off for the whole process).
pub fn set_gather(on: bool) {
    driver().set_gather(on);
}

/// What this thread's driver did with positioned file reads and writes so far.
pub fn io_stats() -> crate::IoStats {
    driver().stats()
}

/// Waits until this thread's executor has nothing else to run and no finished I/O to take
/// in: the moment a plugged queue is unplugged. Work that benefits from company (a partial
/// RAID5 stripe write that later requests may complete) waits here so the requests that
/// are already arriving can join it, without a timer and without delaying a lone request
/// by more than one turn of the executor.
pub async fn unplugged() {
    released(|rt| (&rt.plugged, &rt.unplug_epoch)).await
}

/// Waits until this thread's executor has nothing at all to do: no task ready, none waiting
/// in [`unplugged`], no finished I/O to take in. A simulated clock waits here to move time
/// on to its next event, so simulated time passes only when every task waits for it.
pub async fn idle() {
    released(|rt| (&rt.idlers, &rt.idle_epoch)).await
}

/// Waits in the list of wakers `list` picks out until the list's epoch moves on.
async fn released(list: impl Fn(&Runtime) -> (&RefCell<Vec<Waker>>, &Cell<u64>)) {
    // The release epoch the task registered in, and its place in the list of wakers.
    let mut registered: Option<(u64, usize)> = None;
    std::future::poll_fn(|cx| {
        with_runtime(|rt| {
            let (list, epoch) = list(rt);
            let epoch = epoch.get();
            let mut wakers = list.borrow_mut();
            match registered {
                Some((e, _)) if e != epoch => Poll::Ready(()),
                Some((_, i)) => {
                    debug_assert!(i < wakers.len(), "a registered waker stays listed");
                    // Polled again before the release, maybe with another waker: the
                    // release wakes the latest.
                    if !wakers[i].will_wake(cx.waker()) {
                        wakers[i] = cx.waker().clone();
                    }
                    Poll::Pending
                }
                None => {
                    registered = Some((epoch, wakers.len()));
                    wakers.push(cx.waker().clone());
                    Poll::Pending
                }
            }
        })
    })
    .await
}

/// Yields once to let other ready tasks (and completions) run.
pub async fn yield_now() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded {
            Poll::Ready(())
        } else {
            yielded = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    })
    .await
}
