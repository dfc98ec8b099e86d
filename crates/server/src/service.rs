//! Running under systemd (`Type=notify`, `WatchdogSec=`): READY=1 once the arrays are
//! assembled and every frontend listens, RELOADING=1 around a SIGHUP, STOPPING=1 at the
//! stop, and watchdog pings from the main thread only while every worker thread's own
//! watchdog keeps ticking, so a wedged worker or main thread gets the service restarted.
//! Without `$NOTIFY_SOCKET` (not started by systemd) every call is a no-op.

use std::time::Duration;

use sd_notify::NotifyState;

use crate::shared::SharedState;

/// Tells systemd `states`; a failure is logged, never fatal (the daemon serves anyway).
fn notify(states: &[NotifyState]) {
    if let Err(e) = sd_notify::notify(states) {
        tracing::warn!("cannot notify systemd: {e}");
    }
}

pub fn ready(status: &str) {
    notify(&[NotifyState::Ready, NotifyState::Status(status)]);
}

pub fn reloading() {
    notify(&[NotifyState::Reloading]);
}

pub fn stopping() {
    notify(&[NotifyState::Stopping]);
}

/// The workers whose beat did not move between `before` and `now`.
fn stalled(before: &[u64], now: &[u64]) -> Vec<usize> {
    debug_assert_eq!(before.len(), now.len(), "the same workers");
    before
        .iter()
        .zip(now)
        .enumerate()
        .filter(|(_, (b, n))| b == n)
        .map(|(i, _)| i)
        .collect()
}

/// Systemd's watchdog interval, when it asked for pings.
pub fn watchdog_interval() -> Option<Duration> {
    sd_notify::watchdog_enabled()
}

/// Pings systemd's watchdog every half interval while every worker's watchdog ticked since
/// the last ping (a ping period shorter than two ticks cannot tell, and pings anyway); runs
/// until dropped.
pub async fn watchdog(interval: Duration, shared: SharedState) {
    let period = interval / 2;
    let judge = period >= 2 * crate::watch::TICK;
    let mut last = shared.beats.snapshot();
    loop {
        raidd_rt::time::sleep(period).await;
        let now = shared.beats.snapshot();
        let stuck = stalled(&last, &now);
        if judge && !stuck.is_empty() {
            tracing::error!(
                workers = ?stuck,
                "worker threads stopped ticking: withholding systemd's watchdog ping"
            );
            continue;
        }
        last = now;
        notify(&[NotifyState::Watchdog]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::Beats;

    #[test]
    fn a_worker_that_did_not_tick_is_named() {
        let b = Beats::new(3);
        let t0 = b.snapshot();
        b.beat(0);
        b.beat(2);
        assert_eq!(stalled(&t0, &b.snapshot()), [1]);
        b.beat(1);
        assert!(stalled(&t0, &b.snapshot()).is_empty());
    }
}
