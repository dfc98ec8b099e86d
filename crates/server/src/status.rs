//! `raidd status`: the daemon's arrays, exports, iSCSI target and spare pool, gathered into
//! `raidd-admin`'s report (which writes it as text and JSON).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use raidd_admin::status::{
    ExportStatus, IscsiStatus, LunStatus, PoolSpare, ServedArray, StatusReport, TargetStatus,
};

use crate::arrays::Served;
use crate::ctx::ControlCtx;

/// The report as of now.
pub async fn report(ctx: &ControlCtx) -> StatusReport {
    let mut arrays = Vec::with_capacity(ctx.served.len());
    for (i, s) in ctx.served.iter().enumerate() {
        arrays.push(served_array(ctx, i, s).await);
    }
    StatusReport {
        version: env!("CARGO_PKG_VERSION").to_string(),
        nbd_listen: ctx.listen.clone(),
        iscsi: iscsi(ctx),
        threads: ctx.threads,
        connections: ctx.shared.connections.load(Ordering::Relaxed),
        max_connections: ctx.shared.max_connections,
        buffer_memory_used_bytes: ctx.shared.budget.used(),
        buffer_memory_bytes: ctx.shared.budget.limit(),
        arrays,
        not_started: ctx.not_started.clone(),
        ublk: ctx.ublk.borrow().clone(),
        spare_pool: ctx
            .life
            .pool_names()
            .into_iter()
            .map(|(member, group)| PoolSpare { member, group })
            .collect(),
    }
}

async fn served_array(ctx: &ControlCtx, i: usize, s: &Served) -> ServedArray {
    let status = s.session.root().status().await;
    let mut inner = Vec::new();
    for (k, a) in s.session.arrays.iter().enumerate() {
        if k != s.session.root {
            inner.push(a.array.status().await);
        }
    }
    let exports = ctx
        .shared
        .exports
        .iter()
        .filter(|e| Arc::ptr_eq(e.extent.array(), s.session.root()))
        .map(|e| ExportStatus {
            name: e.name.clone(),
            volume: e.volume.clone(),
            size_bytes: e.extent.size_bytes(),
            read_only: e.read_only,
            connections: e.connections.load(Ordering::Relaxed),
            requests: e.requests.load(Ordering::Relaxed),
            copied_bytes: e.copied_bytes.load(Ordering::Relaxed),
            latency: e.latency.snapshot(),
        })
        .collect();
    ServedArray {
        name: s.config.name.clone(),
        status,
        inner,
        exports,
        volumes: ctx.volumes.table(i),
    }
}

fn iscsi(ctx: &ControlCtx) -> Option<IscsiStatus> {
    let st = ctx.shared.iscsi.as_ref()?;
    let targets = st
        .targets
        .iter()
        .enumerate()
        .map(|(i, t)| TargetStatus {
            name: t.name.clone(),
            sessions: st.nexuses_of(i).len(),
            luns: t
                .luns
                .iter()
                .map(|l| LunStatus {
                    lun: l.number,
                    array: l.extent.array().name().to_string(),
                    volume: l.volume.clone(),
                    read_only: l.info.read_only,
                    latency: l.latency.snapshot(),
                })
                .collect(),
        })
        .collect();
    Some(IscsiStatus {
        listen: st.portal.address.clone(),
        targets,
    })
}
