//! Transfer rate against offset: seed 001's background tool. At evenly spaced points across
//! a device, read a stretch sequentially and time it; the curve shows a drive's zones, and
//! the dips and plateaus show where a channel, a controller or a bus holds the drives back.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;

use raidd_lab::SimWorld;
use raidd_rt::{AlignedBuf, SharedBuf};
use serde::Serialize;

use super::load::{Clock, Session, Target};

/// How a scan reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScanPlan {
    /// Points across the device (the first at its start, the last at its end).
    pub points: u32,
    /// Bytes read at each point (at least two requests: the first is not timed).
    pub span: u64,
    /// Bytes per request.
    pub bs: u64,
    /// Requests in flight.
    pub qd: u32,
}

/// One point of a scan.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct ScanPoint {
    pub offset: u64,
    /// Where the point lies, as a percentage of the device.
    pub position_pct: f64,
    pub mb_per_s: f64,
}

/// Where each point's stretch starts: evenly spaced, request-aligned, the last ending at
/// the device's end. `None` when the device cannot hold one stretch.
pub fn offsets(size: u64, plan: &ScanPlan) -> Option<Vec<u64>> {
    if plan.bs == 0 || plan.span < 2 * plan.bs || size < plan.span || plan.points == 0 {
        return None;
    }
    let room = (size - plan.span) / plan.bs;
    let n = u64::from(plan.points);
    Some(
        (0..n)
            .map(|i| {
                if n == 1 {
                    0
                } else {
                    room * i / (n - 1) * plan.bs
                }
            })
            .collect(),
    )
}

/// Reads `[offset, offset + span)` with `qd` requests in flight: the bytes timed and the
/// nanoseconds they took. The first request is read alone and not timed: it moves the heads
/// there, and a rate against position is the rate once they are there.
async fn stretch(
    session: Rc<Session>,
    clock: &Clock,
    offset: u64,
    plan: ScanPlan,
) -> Result<(u64, u64), String> {
    let first = SharedBuf::new(AlignedBuf::for_overwrite(plan.bs as usize));
    session
        .io(false, offset, &first, plan.bs as usize, 1)
        .await?;
    let next = Rc::new(Cell::new(offset + plan.bs));
    let end = offset + plan.span / plan.bs * plan.bs;
    let t0 = clock.now_ns();
    let slots: Vec<_> = (0..plan.qd)
        .map(|_| {
            let (session, next) = (session.clone(), next.clone());
            let len = plan.bs as usize;
            raidd_rt::spawn_local(async move {
                let buf = SharedBuf::new(AlignedBuf::for_overwrite(len));
                loop {
                    let at = next.get();
                    if at >= end {
                        return Ok::<(), String>(());
                    }
                    next.set(at + plan.bs);
                    session.io(false, at, &buf, len, 1).await?;
                }
            })
        })
        .collect();
    for s in slots {
        s.await?;
    }
    Ok((end - offset - plan.bs, clock.now_ns() - t0))
}

/// Scans `target`: its rate at each point. Runs on this thread, in simulated time when
/// `sim` is given.
pub fn scan(
    target: &Target,
    sim: Option<&Arc<SimWorld>>,
    plan: ScanPlan,
) -> Result<Vec<ScanPoint>, String> {
    let size = target.size();
    let offs = offsets(size, &plan).ok_or_else(|| {
        format!(
            "the device ({size} bytes) cannot hold a stretch of {} bytes in requests of {}",
            plan.span, plan.bs
        )
    })?;
    let clock = match sim {
        Some(w) => Clock::Sim(w.clone()),
        None => Clock::Real(std::time::Instant::now()),
    };
    let target = target.clone();
    let run = async move {
        let session = Rc::new(Session::open(&target)?);
        let mut out = Vec::with_capacity(offs.len());
        for &offset in &offs {
            let (bytes, ns) = stretch(session.clone(), &clock, offset, plan).await?;
            let ns = ns.max(1);
            out.push(ScanPoint {
                offset,
                position_pct: offset as f64 * 100.0 / size as f64,
                mb_per_s: bytes as f64 * 1e3 / ns as f64,
            });
        }
        Ok(out)
    };
    match sim {
        Some(w) => {
            let w = w.clone();
            raidd_rt::block_on(async move { w.run(run).await })
        }
        None => raidd_rt::block_on(run),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_spread_evenly_aligned_and_inside() {
        let plan = ScanPlan {
            points: 5,
            span: 1 << 20,
            bs: 64 << 10,
            qd: 1,
        };
        let size = 100 << 20;
        let o = offsets(size, &plan).unwrap();
        assert_eq!(o.len(), 5);
        assert_eq!(o[0], 0);
        assert!(o.iter().all(|x| x % (64 << 10) == 0));
        assert!(o.windows(2).all(|w| w[1] > w[0]));
        assert!(o[4] + plan.span <= size && o[4] + plan.span + (64 << 10) > size);
        assert!(offsets(1 << 19, &plan).is_none());
        assert_eq!(offsets(size, &ScanPlan { points: 1, ..plan }).unwrap(), [0]);
    }
}
