//! `raidd status`: the daemon's arrays, each frontend's part (exports, targets, devices)
//! and the spare pool, gathered into `raidd-admin`'s report (which writes it as text and
//! JSON).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use raidd_admin::status::{PoolSpare, ServedArray, StatusReport};

use crate::arrays::Served;
use crate::ctx::ControlCtx;

/// The report as of now.
pub async fn report(ctx: &ControlCtx) -> StatusReport {
    let mut arrays = Vec::with_capacity(ctx.served.len());
    for (i, s) in ctx.served.iter().enumerate() {
        arrays.push(served_array(ctx, i, s).await);
    }
    let mut report = StatusReport {
        version: env!("CARGO_PKG_VERSION").to_string(),
        nbd_listen: String::new(),
        iscsi: None,
        threads: ctx.threads,
        connections: ctx.shared.connections.load(Ordering::Relaxed),
        max_connections: ctx.shared.max_connections,
        buffer_memory_used_bytes: ctx.shared.budget.used(),
        buffer_memory_bytes: ctx.shared.budget.limit(),
        arrays,
        not_started: ctx.not_started.clone(),
        ublk: Vec::new(),
        spare_pool: ctx
            .life
            .pool_names()
            .into_iter()
            .map(|(member, group)| PoolSpare { member, group })
            .collect(),
    };
    let roots: Vec<Arc<raidd_engine::Array>> = ctx
        .served
        .iter()
        .map(|s| s.session.root().clone())
        .collect();
    for f in &ctx.frontends {
        f.report(&mut report, &roots);
    }
    debug_assert!(
        report.connections <= report.max_connections,
        "a connection holds one of the places"
    );
    report
}

async fn served_array(ctx: &ControlCtx, i: usize, s: &Served) -> ServedArray {
    let status = s.session.root().status().await;
    let mut inner = Vec::new();
    for (k, a) in s.session.arrays.iter().enumerate() {
        if k != s.session.root {
            inner.push(a.array.status().await);
        }
    }
    debug_assert_eq!(
        inner.len() + 1,
        s.session.arrays.len(),
        "the root and the inner ones"
    );
    ServedArray {
        name: s.config.name.clone(),
        status,
        inner,
        // Filled by the frontend that offers them.
        exports: Vec::new(),
        volumes: ctx.volumes.table(i),
    }
}
