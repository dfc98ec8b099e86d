//! The full feature phase of one connection: the reader loop, CmdSN ordering, Data-Out
//! collection, the send queue with StatSN assignment, NOP, Text, Logout and task
//! management.
//!
//! The initiator's window: a command it sends takes one of [`CMD_WINDOW`] places, and
//! MaxCmdSN moves on only when a command ends, so no more than that many run or wait at
//! once. Each command's buffers (immediate data, Data-Out, what it reads) are reserved
//! against the connection's and the server's budgets before they exist; a command that
//! finds no room ends with TASK SET FULL, and its reads' credits go out with their Data-In.

use std::rc::Rc;
use std::time::{Duration, Instant};

use raidd_iscsi::login::{self};
use raidd_iscsi::pdu::{self, reject, tmf, Bhs, Request, ScsiCommand, RESERVED_TAG};

use super::ctl::Immediate;
use super::pdu_io::{read_data_tail, read_header, End};
use super::session::{lun_number, Conn, Data, Held, Setup, TextState};
use super::target::{lock, CMD_WINDOW, MAX_RECV_SEGMENT};
use super::task;
use crate::link::Input;
use crate::shared::Stop;
use crate::watch::Wait;

/// Text exchanges accumulate at most this much.
const TEXT_MAX: usize = 64 * 1024;

async fn writer(conn: Rc<Conn>) {
    // The reader may be waiting for the queue to have room: a failed send ends that wait.
    conn.out.run(&conn.link, || {}).await;
}

/// Pings an idle initiator with NOP-In and drops a connection that stays silent.
async fn pinger(conn: Rc<Conn>, every: Duration) {
    loop {
        raidd_rt::time::sleep(every).await;
        if conn.out.is_closing() || conn.out.is_broken() {
            return;
        }
        let silent = conn.last_heard.get().elapsed();
        if silent >= every * 3 {
            tracing::warn!(nexus = %crate::logtext::Escaped(&conn.nexus), "no answer to NOP-In pings for {silent:?}; closing");
            let _ = conn.link.sock.shutdown(std::net::Shutdown::Both);
            return;
        }
        if silent >= every && conn.tasks.borrow().is_empty() {
            let ttt = conn.ttt();
            // A ping does not advance StatSN (RFC 7143 11.19).
            conn.send(
                false,
                |s| pdu::nop_in(RESERVED_TAG, ttt, 0, s, 0),
                Data::None,
            );
        }
    }
}

/// Runs the full feature phase until logout, an error, or the daemon stopping.
pub async fn full_feature(setup: Setup) -> String {
    let nop = setup.state.nop_interval;
    let stop = setup.stop.clone();
    let (conn, input) = Conn::new(setup);
    let conn = Rc::new(conn);
    let writer_task = raidd_rt::spawn_local(writer(conn.clone()));
    let pinger_task = nop.map(|every| raidd_rt::spawn_local(pinger(conn.clone(), every)));
    let why = match reader(&conn, input, &stop).await {
        Ok(why) => why,
        Err(e) if stop.peek().is_some() => format!("the daemon is stopping ({e})"),
        Err(e) => e.to_string(),
    };
    if let Some(t) = conn.target {
        conn.state.nexus_gone(t, &conn.nexus);
    }
    // Every task already taken finishes and its status goes out before the close; those
    // still owed data cannot finish.
    conn.abort_collecting();
    conn.wait_tasks(None).await;
    conn.out.close();
    writer_task.await;
    let _ = conn.link.sock.shutdown(std::net::Shutdown::Both);
    // The pinger sees `closing` at its next tick and ends on its own.
    drop(pinger_task);
    why
}

/// Waits until the send queue has room for more replies.
async fn room(conn: &Conn) {
    std::future::poll_fn(|cx| conn.out.poll_room(cx)).await
}

/// A command's immediate data: received into an aligned buffer (it becomes array writes)
/// once its bytes are reserved, or dropped unread when there is no room (the command then
/// ends with TASK SET FULL). `None`: a data digest mismatch (rejected).
async fn immediate(
    conn: &Conn,
    input: &mut Input,
    bhs: &Bhs,
    framing: &pdu::Framing,
) -> Result<Option<Immediate>, End> {
    let Some(credit) = conn.account.try_reserve(framing.data as u64) else {
        let skip = framing.data + framing.pad() + if framing.data_digest { 4 } else { 0 };
        input.skip(&conn.link, skip).await?;
        return Ok(Some(Immediate {
            refused: true,
            ..Immediate::default()
        }));
    };
    let b = input.payload(&conn.link, framing.data).await?;
    debug_assert_eq!(
        b.len() as u64,
        credit.bytes(),
        "immediate data is what was reserved"
    );
    if !read_data_tail(&conn.link, input, framing, &b).await? {
        conn.reject(reject::DATA_DIGEST, bhs);
        return Ok(None);
    }
    Ok(Some(Immediate {
        buf: Some(b),
        credit: Some(credit),
        refused: false,
    }))
}

/// Holds a request that came ahead of its CmdSN turn. Its data is reserved against the
/// budgets (a command's immediate data already is); a connection whose held requests do
/// not fit is ended.
fn hold(conn: &Conn, cmdsn: u32, mut h: Held) -> Result<(), End> {
    if !h.data.is_empty() {
        let Some(c) = conn.account.try_reserve(h.data.len() as u64) else {
            return Err(End::Protocol(
                "requests held for their CmdSN turn exceed the connection's memory".into(),
            ));
        };
        h.imm.credit = Some(c);
    }
    // A second request with the same CmdSN (an initiator's bug) replaces the first.
    conn.held.borrow_mut().insert(cmdsn, h);
    Ok(())
}

/// Takes PDUs until logout or failure; Ok carries why the session ended normally.
async fn reader(conn: &Rc<Conn>, mut input: Input, stop: &Stop) -> Result<String, End> {
    loop {
        room(conn).await;
        if conn.out.is_broken() {
            return Ok("the initiator stopped reading".into());
        }
        let before = if conn.tasks.borrow().is_empty() {
            Wait::Idle
        } else {
            Wait::Nothing
        };
        let (bhs, request, framing) =
            read_header(&conn.link, &mut input, conn.digests, before).await?;
        conn.last_heard.set(Instant::now());
        if stop.peek().is_some() {
            return Ok("the daemon is stopping".into());
        }
        let max = conn.params().target_mrdsl as usize;
        if framing.data > max.max(MAX_RECV_SEGMENT as usize) {
            return Err(End::Protocol(format!(
                "data segment of {} bytes exceeds MaxRecvDataSegmentLength {max}",
                framing.data
            )));
        }
        if let Request::DataOut { .. } = request {
            data_out(conn, &mut input, &bhs, &request, &framing).await?;
            continue;
        }
        let (imm, data) = match &request {
            Request::Command(_) if framing.data > 0 => {
                match immediate(conn, &mut input, &bhs, &framing).await? {
                    Some(imm) => (imm, Vec::new()),
                    None => continue,
                }
            }
            // Other data segments are small (at most MaxRecvDataSegmentLength).
            _ => {
                let d = input.exact(&conn.link, framing.data).await?;
                if !read_data_tail(&conn.link, &mut input, &framing, &d).await? {
                    conn.reject(reject::DATA_DIGEST, &bhs);
                    continue;
                }
                (Immediate::default(), d)
            }
        };
        let mut placed = false;
        if let Some((cmdsn, immediate)) = request.cmdsn() {
            if !immediate {
                match conn.admit(cmdsn) {
                    None => {
                        tracing::debug!(cmdsn, "PDU outside the CmdSN window ignored");
                        continue;
                    }
                    Some(false) => {
                        let h = Held {
                            bhs,
                            request,
                            data,
                            imm,
                        };
                        hold(conn, cmdsn, h)?;
                        continue;
                    }
                    Some(true) => placed = true,
                }
            }
        }
        if let Some(end) = dispatch(conn, bhs, request, data, imm, placed).await? {
            return Ok(end);
        }
        // Requests held for this gap can go now, in CmdSN order.
        loop {
            let next = conn.seq.get().expcmdsn;
            let Some(h) = conn.held.borrow_mut().remove(&next) else {
                break;
            };
            let _ = conn.admit(next);
            if let Some(end) = dispatch(conn, h.bhs, h.request, h.data, h.imm, true).await? {
                return Ok(end);
            }
        }
    }
}

/// Acts on one admitted PDU; Some(why) ends the session. `placed`: it took a place in the
/// initiator's window, which is freed when it ends (a command's task) or at once.
async fn dispatch(
    conn: &Rc<Conn>,
    bhs: Bhs,
    request: Request,
    data: Vec<u8>,
    imm: Immediate,
    placed: bool,
) -> Result<Option<String>, End> {
    let mut started = false;
    let end = match request {
        Request::Command(c) => {
            started = command(conn, &bhs, c, imm, placed);
            None
        }
        Request::NopOut { itt, lun, .. } => {
            if itt != RESERVED_TAG {
                let n = data.len();
                conn.send(
                    true,
                    |s| pdu::nop_in(itt, RESERVED_TAG, lun, s, n),
                    Data::Bytes(data),
                );
            }
            None
        }
        Request::Text {
            itt,
            ttt,
            cont,
            lun,
            final_bit,
            ..
        } => {
            text(conn, &bhs, itt, ttt, cont || !final_bit, lun, data);
            None
        }
        Request::Logout { itt, reason, .. } => logout(conn, itt, reason).await,
        Request::TaskMgmt {
            function,
            lun,
            itt,
            referenced_tag,
            ..
        } => {
            task_management(conn, function, lun, itt, referenced_tag);
            None
        }
        Request::Snack { .. } => {
            conn.reject(reject::SNACK, &bhs);
            None
        }
        Request::Login { .. } | Request::DataOut { .. } => {
            conn.reject(reject::PROTOCOL_ERROR, &bhs);
            None
        }
        Request::Unknown(_) => {
            conn.reject(reject::NOT_SUPPORTED, &bhs);
            None
        }
    };
    if placed && !started {
        conn.free_place();
    }
    Ok(end)
}

/// Logout: reason 0 closes the session, 1 this connection (the same thing here); 2 (remove
/// for recovery) needs error recovery level 2. Some(why) ends the session.
async fn logout(conn: &Rc<Conn>, itt: u32, reason: u8) -> Option<String> {
    if reason == 2 {
        conn.send(true, |s| pdu::logout_response(itt, 2, s), Data::None);
        return None;
    }
    conn.abort_collecting();
    conn.wait_tasks(None).await;
    // Before the response: once the initiator has it, another may take the unit.
    if let Some(t) = conn.target {
        conn.state.nexus_gone(t, &conn.nexus);
    }
    conn.send(true, |s| pdu::logout_response(itt, 0, s), Data::None);
    Some("logged out".into())
}

/// A SCSI command: refused with a Reject, or started as a task (true).
fn command(conn: &Rc<Conn>, bhs: &Bhs, c: ScsiCommand, imm: Immediate, placed: bool) -> bool {
    if conn.target.is_none() {
        // Discovery sessions carry text and logout only.
        conn.reject(reject::PROTOCOL_ERROR, bhs);
        return false;
    }
    if c.immediate && conn.tasks.borrow().len() >= 2 * CMD_WINDOW as usize {
        conn.reject(reject::IMMEDIATE_REJECT, bhs);
        return false;
    }
    if conn.tasks.borrow().contains_key(&c.itt) {
        // A tag still in use: RFC 7143 says reject with "task in progress".
        conn.reject(reject::TASK_IN_PROGRESS, bhs);
        return false;
    }
    let first_burst = conn.params().first_burst_length as usize;
    let ctl = task::prepare(conn, &c, imm, first_burst);
    let before = conn.tasks.borrow_mut().insert(c.itt, ctl.clone());
    debug_assert!(before.is_none(), "a task tag is live once");
    let conn2 = conn.clone();
    raidd_rt::spawn_detached(async move {
        task::run(&conn2, &ctl, c).await;
        conn2.finished(ctl.itt, placed);
    });
    true
}

/// Data-Out: checked against the command's collector, received straight into its buffer.
async fn data_out(
    conn: &Rc<Conn>,
    input: &mut Input,
    bhs: &Bhs,
    request: &Request,
    framing: &pdu::Framing,
) -> Result<(), End> {
    let Request::DataOut {
        final_bit,
        itt,
        ttt,
        datasn,
        offset,
        ..
    } = *request
    else {
        return Ok(());
    };
    let len = framing.data;
    let ctl = conn.tasks.borrow().get(&itt).cloned();
    let skip_len = len + framing.pad() + if framing.data_digest { 4 } else { 0 };
    let Some(ctl) = ctl else {
        // Data for a command that ended (refused, aborted) or never was: dropped.
        return input.skip(&conn.link, skip_len).await.map_err(End::Io);
    };
    let offset = offset as usize;
    let verdict = {
        let col = ctl.collector.borrow();
        match col.as_ref() {
            None => Err(reject::PROTOCOL_ERROR),
            Some(col) => {
                let limit = match col.burst {
                    Some((t, end)) if t == ttt => Some(end.min(col.size)),
                    _ => None,
                };
                match limit {
                    None => Err(reject::PROTOCOL_ERROR),
                    Some(end) if offset != col.received || offset + len > end => {
                        Err(reject::PROTOCOL_ERROR)
                    }
                    Some(_) if datasn != col.next_datasn => Err(reject::PROTOCOL_ERROR),
                    Some(_) => Ok(()),
                }
            }
        }
    };
    if let Err(reason) = verdict {
        tracing::debug!(itt, ttt, offset, len, datasn, "Data-Out out of sequence");
        conn.reject(reason, bhs);
        return input.skip(&conn.link, skip_len).await.map_err(End::Io);
    }
    let Some(buf) = ctl
        .collector
        .borrow_mut()
        .as_mut()
        .and_then(|c| c.buf.take())
    else {
        return input.skip(&conn.link, skip_len).await.map_err(End::Io);
    };
    let (r, buf) = input
        .fill_range(&conn.link, buf, offset, offset + len)
        .await;
    let digest_ok = match r {
        Ok(()) => read_data_tail(&conn.link, input, framing, &buf[offset..offset + len]).await,
        Err(e) => Err(End::Io(e)),
    };
    let mut col_ref = ctl.collector.borrow_mut();
    let Some(col) = col_ref.as_mut() else {
        return digest_ok.map(|_| ());
    };
    debug_assert!(offset + len <= col.size, "Data-Out lands inside the buffer");
    col.buf = Some(buf);
    if !digest_ok? {
        drop(col_ref);
        conn.reject(reject::DATA_DIGEST, bhs);
        return Ok(());
    }
    col.received += len;
    debug_assert!(
        col.received <= col.size,
        "never more received than the buffer holds"
    );
    col.next_datasn = col.next_datasn.wrapping_add(1);
    if final_bit {
        col.burst = None;
        col.next_datasn = 0;
    }
    drop(col_ref);
    ctl.wake();
    Ok(())
}

fn text(conn: &Rc<Conn>, bhs: &Bhs, itt: u32, ttt: u32, more: bool, lun: u64, data: Vec<u8>) {
    let mrdsl = conn.params().initiator_mrdsl.max(512) as usize;
    let mut st = conn.text.borrow_mut();
    if ttt != RESERVED_TAG {
        drop(st);
        text_continue(conn, bhs, itt, ttt, lun, mrdsl);
        return;
    }
    let entry = st.get_or_insert_with(|| TextState {
        itt,
        request: Vec::new(),
        pending: None,
    });
    if entry.itt != itt {
        // A new exchange replaces an abandoned one.
        *entry = TextState {
            itt,
            request: Vec::new(),
            pending: None,
        };
    }
    if entry.request.len() + data.len() > TEXT_MAX {
        *st = None;
        drop(st);
        conn.reject(reject::OUT_OF_RESOURCES, bhs);
        return;
    }
    entry.request.extend_from_slice(&data);
    if more {
        // More request text follows: acknowledge with an empty response.
        let t = conn.ttt();
        drop(st);
        conn.send(
            true,
            |s| pdu::text_response(itt, t, lun, false, false, s, 0),
            Data::None,
        );
        return;
    }
    let request = std::mem::take(&mut entry.request);
    let answer = {
        let mut p = conn.params.borrow_mut();
        login::text_answer(&conn.state.portal, &mut p, conn.target, &request)
    };
    let answer = match answer {
        Ok(a) => a,
        Err(e) => {
            tracing::debug!(
                "text request refused: {}",
                crate::logtext::Escaped(&e.to_string())
            );
            *st = None;
            drop(st);
            conn.reject(reject::PROTOCOL_ERROR, bhs);
            return;
        }
    };
    if answer.len() <= mrdsl {
        *st = None;
        drop(st);
        let n = answer.len();
        conn.send(
            true,
            |s| pdu::text_response(itt, RESERVED_TAG, lun, true, false, s, n),
            Data::Bytes(answer),
        );
        return;
    }
    let mut rest = answer;
    let piece: Vec<u8> = rest.drain(..mrdsl).collect();
    let t = conn.ttt();
    entry.pending = Some((rest, t));
    drop(st);
    let n = piece.len();
    conn.send(
        true,
        |s| pdu::text_response(itt, t, lun, false, true, s, n),
        Data::Bytes(piece),
    );
}

/// The initiator asks, with the tag it was given, for the next part of a long response.
fn text_continue(conn: &Rc<Conn>, bhs: &Bhs, itt: u32, ttt: u32, lun: u64, mrdsl: usize) {
    let mut st = conn.text.borrow_mut();
    let Some(TextState {
        pending: Some((rest, t)),
        ..
    }) = st.as_mut()
    else {
        drop(st);
        conn.reject(reject::PROTOCOL_ERROR, bhs);
        return;
    };
    if *t != ttt {
        drop(st);
        conn.reject(reject::PROTOCOL_ERROR, bhs);
        return;
    }
    let n = rest.len().min(mrdsl);
    let piece: Vec<u8> = rest.drain(..n).collect();
    let last = rest.is_empty();
    let tag = if last { RESERVED_TAG } else { *t };
    if last {
        *st = None;
    }
    drop(st);
    let n = piece.len();
    conn.send(
        true,
        |s| pdu::text_response(itt, tag, lun, last, !last, s, n),
        Data::Bytes(piece),
    );
}

fn task_management(conn: &Rc<Conn>, function: u8, lun: u64, itt: u32, referenced: u32) {
    let lun_no = lun_number(lun);
    let target = conn.target.map(|t| &conn.state.targets[t]);
    let lun_exists = |n: Option<u64>| n.is_some_and(|n| target.is_some_and(|t| t.lun(n).is_some()));
    let victims: Vec<u32> = match function {
        tmf::ABORT_TASK => {
            let tasks = conn.tasks.borrow();
            match tasks.get(&referenced) {
                Some(t) if t.lun == lun => vec![referenced],
                Some(_) => {
                    drop(tasks);
                    return conn.send(
                        true,
                        |s| pdu::tmf_response(itt, tmf::NO_TASK, s),
                        Data::None,
                    );
                }
                // Not here: done already, or never arrived. Either way nothing runs.
                None => Vec::new(),
            }
        }
        tmf::ABORT_TASK_SET | tmf::CLEAR_TASK_SET | tmf::LOGICAL_UNIT_RESET => {
            if !lun_exists(lun_no) {
                return conn.send(true, |s| pdu::tmf_response(itt, tmf::NO_LUN, s), Data::None);
            }
            conn.tasks
                .borrow()
                .values()
                .filter(|t| t.lun == lun)
                .map(|t| t.itt)
                .collect()
        }
        tmf::TARGET_WARM_RESET => conn.tasks.borrow().keys().copied().collect(),
        tmf::TASK_REASSIGN => {
            return conn.send(
                true,
                |s| pdu::tmf_response(itt, tmf::NO_REASSIGN, s),
                Data::None,
            )
        }
        _ => {
            return conn.send(
                true,
                |s| pdu::tmf_response(itt, tmf::NOT_SUPPORTED, s),
                Data::None,
            )
        }
    };
    for v in &victims {
        if let Some(t) = conn.tasks.borrow().get(v) {
            t.abort();
        }
    }
    // Resets leave unit attentions on the affected units (SAM-5): a LOGICAL UNIT RESET for
    // every I_T nexus, the one it came on included; a warm target reset for every other.
    if matches!(function, tmf::LOGICAL_UNIT_RESET | tmf::TARGET_WARM_RESET) {
        if let (Some(ti), Some(t)) = (conn.target, target) {
            let nexuses = conn.state.nexuses_of(ti);
            let (sense, except) = if function == tmf::LOGICAL_UNIT_RESET {
                (raidd_scsi::Sense::lun_reset(), None)
            } else {
                (
                    raidd_scsi::Sense::power_on_reset(),
                    Some(conn.nexus.as_str()),
                )
            };
            for l in t.luns() {
                if function == tmf::TARGET_WARM_RESET || Some(l.number) == lun_no {
                    l.attention_for(&nexuses, except, &sense);
                    lock(&l.reservations).reset();
                }
            }
        }
    }
    let conn2 = conn.clone();
    raidd_rt::spawn_detached(async move {
        // The response goes out only once no aborted task can answer any more.
        conn2.wait_tasks(Some(&victims)).await;
        conn2.send(
            true,
            |s| pdu::tmf_response(itt, tmf::COMPLETE, s),
            Data::None,
        );
    });
}
