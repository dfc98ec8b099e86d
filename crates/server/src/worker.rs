//! A worker thread: serves the connections the acceptors hand it (each on a task of its
//! own, for its whole life) and its queue of each ublk device, watches the connections'
//! time limits, and at the stop stops them reading and waits for their requests to finish
//! (and for its ublk queues to end, which they do once their devices are stopped).

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;

use futures::channel::mpsc;
use futures::future::{self, Either};
use futures::StreamExt;

use crate::accept::{Accepted, Proto};
use crate::link::Link;
use crate::shared::{SharedState, Stop};
use crate::watch::{self, Registry, Watch};
use crate::{iscsi, nbd};

/// Runs until the daemon stops and this thread's connections have drained.
pub async fn run(
    mut rx: mpsc::UnboundedReceiver<Accepted>,
    shared: SharedState,
    stop: Stop,
    ublk: Vec<Arc<crate::ublk::queue::Queue>>,
) {
    let queues: Vec<_> = ublk
        .into_iter()
        .map(|q| raidd_rt::spawn_local(crate::ublk::queue::run(q)))
        .collect();
    let registry = Rc::new(Registry::default());
    let done = Rc::new(Cell::new(false));
    let watchdog = {
        let (registry, done, limits) = (registry.clone(), done.clone(), shared.limits);
        raidd_rt::spawn_local(async move {
            while !done.get() {
                raidd_rt::time::sleep(watch::TICK).await;
                registry.check(&limits);
            }
        })
    };
    loop {
        let next = rx.next();
        let stopping = stop.clone();
        futures::pin_mut!(next);
        match future::select(next, stopping).await {
            Either::Left((Some(a), _)) => serve(a, &registry, &shared, &stop),
            Either::Left((None, _)) | Either::Right(_) => break,
        }
    }
    // Stopping: no connection takes another request; those taken finish (the watchdog
    // still limits how long a client may keep their replies waiting).
    registry.stop_reading();
    registry.drained().await;
    for q in queues {
        q.await;
    }
    done.set(true);
    drop(watchdog);
}

/// Starts serving one accepted connection.
fn serve(a: Accepted, registry: &Registry, shared: &SharedState, stop: &Stop) {
    let Accepted {
        proto,
        stream,
        place,
    } = a;
    let watch = Watch::new(stream.clone());
    let link = Link::plain(stream);
    let (w, shared, stop) = (watch.clone(), shared.clone(), stop.clone());
    let task = raidd_rt::spawn_local(async move {
        // The connection's place among `max_connections` is held until it ends.
        let _place = place;
        match (proto, shared.iscsi.clone()) {
            (Proto::Iscsi, Some(st)) => iscsi::serve_connection(link, w, st, &shared, stop).await,
            _ => nbd::serve_connection(link, w, shared.clone(), stop).await,
        }
    });
    registry.add(&watch, task);
}
