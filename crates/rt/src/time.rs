//! Timers on the driver (io_uring timeouts).

use std::time::{Duration, Instant};

use io_uring::types::Timespec;

use crate::driver::{Op, OpKind};
use crate::executor::driver;

/// Completes after `duration`.
pub async fn sleep(duration: Duration) {
    let ts = Box::new(Timespec::from(duration));
    let kind = OpKind::Timeout { ts: &*ts, duration };
    // SAFETY: the timespec is heap-allocated and owned by the op until completion.
    let op = unsafe { Op::start(&driver(), kind, ts) };
    // -ETIME is the normal expiry result; anything else (cancellation) also ends the sleep.
    let _ = op.await;
}

/// Completes at `deadline` (immediately if it has passed).
pub async fn sleep_until(deadline: Instant) {
    let now = Instant::now();
    if deadline > now {
        sleep(deadline - now).await;
    }
}
