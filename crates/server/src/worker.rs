//! A worker thread: serves the connections the acceptors hand it (each on a task of its
//! own, for its whole life, by the frontend that took it) and what the frontends run on
//! every worker (ublk's queues: those of the devices made at the start, and those of
//! devices added while serving, handed over like connections), watches the connections'
//! time limits, and at the stop stops them reading and waits for their requests to finish
//! (and for the frontends' tasks to end, which they do once the frontends have stopped).

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;

use futures::channel::mpsc;
use futures::future::{self, Either};
use futures::StreamExt;

use crate::accept::{Accepted, ToWorker};
use crate::frontend::Running;
use crate::link::Link;
use crate::shared::{SharedState, Stop};
use crate::watch::{self, Registry, Watch};

/// Watch ticks between looks at whether the worker's buffer pool sat idle: a pool not
/// used over one such period is given back, so the memory a burst of large requests left
/// pooled returns within two periods of the burst's end.
const TRIM_EVERY: u32 = 10;

/// Runs worker `index` until the daemon stops and its connections have drained.
pub async fn run(
    index: usize,
    mut rx: mpsc::UnboundedReceiver<ToWorker>,
    shared: SharedState,
    stop: Stop,
    frontends: Vec<Arc<dyn Running>>,
) {
    let mut tasks: Vec<_> = frontends
        .iter()
        .flat_map(|f| f.worker_tasks(index))
        .map(raidd_rt::spawn_local)
        .collect();
    let registry = Rc::new(Registry::default());
    let done = Rc::new(Cell::new(false));
    let watchdog = {
        let (registry, done, shared) = (registry.clone(), done.clone(), shared.clone());
        raidd_rt::spawn_local(async move {
            let mut ticks = 0u32;
            while !done.get() {
                raidd_rt::time::sleep(watch::TICK).await;
                registry.check();
                shared.beats.beat(index);
                ticks = ticks.wrapping_add(1);
                if ticks.is_multiple_of(TRIM_EVERY) {
                    let freed = raidd_rt::buf::trim_idle_pool();
                    if freed > 0 {
                        tracing::debug!(
                            worker = index,
                            bytes = freed,
                            "idle buffer pool given back"
                        );
                    }
                }
            }
        })
    };
    loop {
        let next = rx.next();
        let stopping = stop.clone();
        futures::pin_mut!(next);
        match future::select(next, stopping).await {
            Either::Left((Some(ToWorker::Connection(a)), _)) => serve(a, &registry, &shared, &stop),
            Either::Left((Some(ToWorker::Task(t)), _)) => {
                // Tasks of devices removed since are done with: not kept.
                tasks.retain(|t| !t.is_finished());
                tasks.push(raidd_rt::spawn_local(t()));
            }
            Either::Left((None, _)) | Either::Right(_) => break,
        }
    }
    // Stopping: no connection takes another request; those taken finish (the watchdog
    // still limits how long a client may keep their replies waiting).
    registry.stop_reading();
    registry.drained().await;
    for t in tasks {
        t.await;
    }
    done.set(true);
    drop(watchdog);
}

/// Starts serving one accepted connection, by the frontend that took it.
fn serve(a: Accepted, registry: &Registry, shared: &SharedState, stop: &Stop) {
    let Accepted {
        frontend,
        stream,
        place,
    } = a;
    let watch = Watch::new(stream.clone(), frontend.watch_limits(shared.limits));
    let link = Link::plain(stream);
    let serving = frontend.serve(link, watch.clone(), stop.clone());
    let task = raidd_rt::spawn_local(async move {
        // The connection's place among `max_connections` is held until it ends.
        let _place = place;
        serving.await
    });
    registry.add(&watch, task);
}
