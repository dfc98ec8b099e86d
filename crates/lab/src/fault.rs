//! A fault-injecting member for tests and simulations: wraps any member and injects I/O
//! errors, silent corruption, latency, disappearance and hangs, on a schedule derived from a
//! seed and the operation's sequence number, so a failing run replays exactly.
//!
//! A hung device answers nothing: its operations never complete, and what they were lent
//! stays lent (a read's windows are kept by the member, as a kernel keeps the buffers of an
//! operation it never finishes). With a `timeout` the member gives up on each operation as
//! a disk's driver does, and the array then fails it.

use std::fmt;
use std::io;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use raidd_rt::{AlignedBuf, IoVec, IoVecMut, SharedBuf};

use raidd_engine::member::{within, Member, MemberFuture, MemberInfo};

/// What to inject. Probabilities are in parts per million per operation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FaultPlan {
    pub seed: u64,
    pub read_error_ppm: u32,
    pub write_error_ppm: u32,
    /// Reads succeed but one byte of the data is flipped (what checksums and scrubs catch).
    pub corrupt_read_ppm: u32,
    /// Each operation waits a uniform time in this range (microseconds) before running.
    pub delay_us: Option<(u64, u64)>,
    /// Each operation first yields to the executor a uniform number of times in this range:
    /// reorders concurrent I/O like latency does, but deterministically (no clock), so a
    /// simulation with memory members replays exactly from its seed.
    pub delay_yields: Option<(u32, u32)>,
    /// After this many operations the device is gone: every later operation fails ENODEV.
    pub disappear_after_ops: Option<u64>,
    /// After this many operations the device hangs: no later operation completes.
    pub hang_after_ops: Option<u64>,
    /// An operation that does not complete in this time fails with
    /// `io::ErrorKind::TimedOut` (what `FileMember`'s timeout does).
    pub timeout: Option<Duration>,
}

/// Counters and switches shared between a [`FaultMember`] and the test driving it.
#[derive(Debug, Default)]
pub struct FaultControl {
    plan: Mutex<FaultPlan>,
    ops: AtomicU64,
    reads: AtomicU64,
    writes: AtomicU64,
    failing: AtomicBool,
    gone: AtomicBool,
    hung: AtomicBool,
    injected_errors: AtomicU64,
    injected_corruptions: AtomicU64,
    /// Operations started while hung (they never complete).
    hung_ops: AtomicU64,
    /// Read windows that hung operations were lent: kept for good.
    stuck: Mutex<Vec<IoVecMut>>,
    /// Latent sector errors: byte ranges of the device that fail every read touching them
    /// until they are written (a disk remaps a pending sector when it is written), sorted
    /// and apart.
    latent: Mutex<Vec<Range<u64>>>,
    /// Reads that failed on a latent sector error.
    latent_hits: AtomicU64,
}

impl FaultControl {
    /// Every later operation fails with EIO until [`FaultControl::heal`].
    pub fn fail(&self) {
        self.failing.store(true, Ordering::SeqCst);
    }
    /// The device disappears: every later operation fails with ENODEV.
    pub fn vanish(&self) {
        self.gone.store(true, Ordering::SeqCst);
    }
    /// The device hangs: every later operation waits for ever.
    pub fn hang(&self) {
        self.hung.store(true, Ordering::SeqCst);
    }
    /// Operations that started while the device hung.
    pub fn hung_ops(&self) -> u64 {
        self.hung_ops.load(Ordering::SeqCst)
    }
    /// Later operations work again (those that hung stay hung).
    pub fn heal(&self) {
        self.failing.store(false, Ordering::SeqCst);
        self.gone.store(false, Ordering::SeqCst);
        self.hung.store(false, Ordering::SeqCst);
    }
    pub fn set_plan(&self, plan: FaultPlan) {
        *self.plan.lock().expect(crate::POISONED) = plan;
    }
    pub fn ops(&self) -> u64 {
        self.ops.load(Ordering::SeqCst)
    }
    /// Read and write operations asked of the member so far (failed ones included).
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::SeqCst)
    }
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::SeqCst)
    }
    pub fn injected_errors(&self) -> u64 {
        self.injected_errors.load(Ordering::SeqCst)
    }
    pub fn injected_corruptions(&self) -> u64 {
        self.injected_corruptions.load(Ordering::SeqCst)
    }
    /// Bytes `range` of the device fail every read that touches them until they are
    /// written: a latent sector error, as a disk reports an unreadable sector it will
    /// remap on the next write there.
    pub fn add_latent_error(&self, range: Range<u64>) {
        assert!(range.start < range.end, "an empty latent error range");
        let mut l = self.latent.lock().expect(crate::POISONED);
        l.push(range);
        *l = merged(std::mem::take(&mut *l));
    }
    /// The byte ranges whose latent errors no write has cleared yet.
    pub fn latent_errors(&self) -> Vec<Range<u64>> {
        self.latent.lock().expect(crate::POISONED).clone()
    }
    /// Reads that failed on a latent sector error.
    pub fn latent_hits(&self) -> u64 {
        self.latent_hits.load(Ordering::SeqCst)
    }

    /// Whether a read of `range` touches a latent error (and counts it if so).
    fn reads_latent(&self, range: Range<u64>) -> bool {
        let hit = self
            .latent
            .lock()
            .expect(crate::POISONED)
            .iter()
            .any(|l| l.start < range.end && range.start < l.end);
        if hit {
            self.latent_hits.fetch_add(1, Ordering::SeqCst);
        }
        hit
    }

    /// A write of `range` landed: the latent errors under it are gone.
    fn wrote(&self, range: Range<u64>) {
        let mut l = self.latent.lock().expect(crate::POISONED);
        if l.is_empty() {
            return;
        }
        *l = l
            .iter()
            .flat_map(|e| {
                let before = e.start..e.end.min(range.start);
                let after = e.start.max(range.end)..e.end;
                [before, after]
            })
            .filter(|r| r.start < r.end)
            .collect();
    }
}

/// Ranges sorted by start, with overlapping and touching ones merged.
fn merged(mut v: Vec<Range<u64>>) -> Vec<Range<u64>> {
    v.sort_by_key(|r| r.start);
    let mut out: Vec<Range<u64>> = Vec::with_capacity(v.len());
    for r in v {
        match out.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    out
}

/// splitmix64: a well-mixed u64 from (seed, op number, purpose).
fn mix(seed: u64, n: u64, purpose: u64) -> u64 {
    let mut z = seed
        .wrapping_add(n.wrapping_mul(0x9e37_79b9_7f4a_7c15))
        .wrapping_add(purpose.wrapping_mul(0xd1b5_4a32_d192_ed03));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn hit(seed: u64, n: u64, purpose: u64, ppm: u32) -> bool {
    ppm > 0 && mix(seed, n, purpose) % 1_000_000 < u64::from(ppm)
}

/// Decision for one operation, made up front from the plan and the op number.
struct Verdict {
    delay: Option<Duration>,
    yields: u32,
    /// The device hangs: the operation never completes.
    hang: bool,
    error: Option<io::Error>,
    corrupt_at: Option<u64>,
    timeout: Option<Duration>,
}

pub struct FaultMember {
    inner: Arc<dyn Member>,
    control: Arc<FaultControl>,
}

impl fmt::Debug for FaultMember {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultMember")
            .field("inner", &self.inner)
            .finish()
    }
}

#[derive(Clone, Copy)]
enum OpClass {
    Read,
    Write,
    Other,
}

impl FaultMember {
    pub fn new(inner: Arc<dyn Member>, plan: FaultPlan) -> FaultMember {
        let control = Arc::new(FaultControl::default());
        control.set_plan(plan);
        FaultMember { inner, control }
    }

    pub fn control(&self) -> Arc<FaultControl> {
        self.control.clone()
    }

    fn verdict(&self, class: OpClass, len: u64) -> Verdict {
        let n = self.control.ops.fetch_add(1, Ordering::SeqCst);
        match class {
            OpClass::Read => self.control.reads.fetch_add(1, Ordering::SeqCst),
            OpClass::Write => self.control.writes.fetch_add(1, Ordering::SeqCst),
            OpClass::Other => 0,
        };
        let plan = self.control.plan.lock().expect(crate::POISONED).clone();
        if plan.disappear_after_ops.is_some_and(|limit| n >= limit) {
            self.control.gone.store(true, Ordering::SeqCst);
        }
        if plan.hang_after_ops.is_some_and(|limit| n >= limit) {
            self.control.hung.store(true, Ordering::SeqCst);
        }
        let hang = self.control.hung.load(Ordering::SeqCst);
        if hang {
            self.control.hung_ops.fetch_add(1, Ordering::SeqCst);
        }
        let delay = plan.delay_us.map(|(lo, hi)| {
            let span = hi.saturating_sub(lo) + 1;
            Duration::from_micros(lo + mix(plan.seed, n, 1) % span)
        });
        let yields = plan.delay_yields.map_or(0, |(lo, hi)| {
            let span = u64::from(hi.saturating_sub(lo)) + 1;
            lo + (mix(plan.seed, n, 6) % span) as u32
        });
        let error = if self.control.gone.load(Ordering::SeqCst) {
            Some(io::Error::from_raw_os_error(libc::ENODEV))
        } else if self.control.failing.load(Ordering::SeqCst)
            || matches!(class, OpClass::Read) && hit(plan.seed, n, 2, plan.read_error_ppm)
            || matches!(class, OpClass::Write) && hit(plan.seed, n, 3, plan.write_error_ppm)
        {
            Some(io::Error::from_raw_os_error(libc::EIO))
        } else {
            None
        };
        if error.is_some() {
            self.control.injected_errors.fetch_add(1, Ordering::SeqCst);
        }
        let corrupt_at = (matches!(class, OpClass::Read)
            && error.is_none()
            && len > 0
            && hit(plan.seed, n, 4, plan.corrupt_read_ppm))
        .then(|| mix(plan.seed, n, 5) % len);
        Verdict {
            delay,
            yields,
            hang,
            error,
            corrupt_at,
            timeout: plan.timeout,
        }
    }
}

async fn pause(v: &Verdict) {
    if let Some(d) = v.delay {
        raidd_rt::time::sleep(d).await;
    }
    for _ in 0..v.yields {
        raidd_rt::yield_now().await;
    }
}

/// What a hung read holds: its windows, handed to the control when it is given up on, so
/// nobody reads or reuses that memory again.
struct Stuck<'a> {
    control: &'a FaultControl,
    iov: Option<IoVecMut>,
}

impl Drop for Stuck<'_> {
    fn drop(&mut self) {
        if let Some(iov) = self.iov.take() {
            self.control.stuck.lock().expect(crate::POISONED).push(iov);
        }
    }
}

/// An operation of a hung device: never completes.
async fn hang() -> ! {
    std::future::pending::<()>().await;
    unreachable!("a pending future never completes")
}

impl Member for FaultMember {
    fn info(&self) -> &MemberInfo {
        self.inner.info()
    }

    fn read(&self, offset: u64, iov: IoVecMut) -> MemberFuture<'_, (io::Result<()>, IoVecMut)> {
        let len: u64 = iov.iter().map(|w| w.len() as u64).sum();
        let v = self.verdict(OpClass::Read, len);
        let timeout = v.timeout;
        let name = &self.inner.info().name;
        MemberFuture::new(within(timeout, name, self.read_now(offset, iov, v), |e| {
            (Err(e), IoVecMut::new())
        }))
    }

    fn write(&self, offset: u64, iov: IoVec) -> MemberFuture<'_, io::Result<()>> {
        let len: u64 = iov.iter().map(|w| w.len() as u64).sum();
        let v = self.verdict(OpClass::Write, len);
        let (timeout, name) = (v.timeout, &self.inner.info().name);
        MemberFuture::new(within(
            timeout,
            name,
            async move {
                pause(&v).await;
                if v.hang {
                    let _held = iov;
                    hang().await;
                }
                if let Some(e) = v.error {
                    return Err(e);
                }
                let r = self.inner.write(offset, iov).await;
                if r.is_ok() {
                    self.control.wrote(offset..offset + len);
                }
                r
            },
            Err,
        ))
    }

    fn flush(&self) -> MemberFuture<'_, io::Result<()>> {
        let v = self.verdict(OpClass::Other, 0);
        let (timeout, name) = (v.timeout, &self.inner.info().name);
        MemberFuture::new(within(
            timeout,
            name,
            async move {
                pause(&v).await;
                if v.hang {
                    hang().await;
                }
                if let Some(e) = v.error {
                    return Err(e);
                }
                self.inner.flush().await
            },
            Err,
        ))
    }

    fn discard(&self, offset: u64, len: u64) -> MemberFuture<'_, io::Result<()>> {
        let v = self.verdict(OpClass::Other, 0);
        let (timeout, name) = (v.timeout, &self.inner.info().name);
        MemberFuture::new(within(
            timeout,
            name,
            async move {
                pause(&v).await;
                if v.hang {
                    hang().await;
                }
                if let Some(e) = v.error {
                    return Err(e);
                }
                self.inner.discard(offset, len).await
            },
            Err,
        ))
    }
}

impl FaultMember {
    /// A read after its verdict: a hang, an error, a corruption, or the inner read.
    async fn read_now(
        &self,
        offset: u64,
        mut iov: IoVecMut,
        v: Verdict,
    ) -> (io::Result<()>, IoVecMut) {
        let len: u64 = iov.iter().map(|w| w.len() as u64).sum();
        pause(&v).await;
        if v.hang {
            let _held = Stuck {
                control: &self.control,
                iov: Some(iov),
            };
            hang().await;
        }
        if let Some(e) = v.error {
            return (Err(e), iov);
        }
        if self.control.reads_latent(offset..offset + len) {
            return (Err(io::Error::from_raw_os_error(libc::EIO)), iov);
        }
        let Some(at) = v.corrupt_at else {
            return self.inner.read(offset, iov).await;
        };
        // The rare corrupting read goes through a bounce buffer: the caller's windows are
        // moved into the inner read and could not be touched afterwards.
        let bounce = SharedBuf::new(AlignedBuf::zeroed(len as usize));
        let mut whole: IoVecMut = smallvec::SmallVec::new();
        whole.push(bounce.slice_mut(0..len as usize).expect("fresh buffer"));
        let (r, whole) = self.inner.read(offset, whole).await;
        drop(whole);
        if let Err(e) = r {
            return (Err(e), iov);
        }
        let mut data = bounce
            .try_into_inner()
            .expect("inner read released the buffer");
        data[at as usize] ^= 0xff;
        let mut pos = 0;
        for w in iov.iter_mut() {
            let n = w.len();
            w.as_mut_slice().copy_from_slice(&data[pos..pos + n]);
            pos += n;
        }
        self.control
            .injected_corruptions
            .fetch_add(1, Ordering::SeqCst);
        (Ok(()), iov)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latent_errors_merge_and_are_cleared_by_writes_under_them() {
        let c = FaultControl::default();
        c.add_latent_error(4096..8192);
        c.add_latent_error(8192..12288);
        c.add_latent_error(0..512);
        assert_eq!(c.latent_errors(), vec![0..512, 4096..12288]);
        assert!(!c.reads_latent(512..4096));
        assert!(c.reads_latent(4000..4100));
        assert_eq!(c.latent_hits(), 1);
        c.wrote(6144..7168);
        assert_eq!(c.latent_errors(), vec![0..512, 4096..6144, 7168..12288]);
        assert!(!c.reads_latent(6144..7168));
        c.wrote(0..16384);
        assert!(c.latent_errors().is_empty());
    }
}
