//! One SCSI command: its Data-Out (immediate data, then R2T bursts), its execution
//! against the array, and its Data-In and status.

use std::cell::{Cell, RefCell};
use std::future::poll_fn;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::Poll;

use raidd_engine::{ErrorKind, Extent};
use raidd_iscsi::pdu::{self, Residual, ScsiCommand};
use raidd_rt::{AlignedBuf, IoVec, SharedBuf};
use raidd_scsi::{Op, PrError, RespondCtx, Sense, Status};

use super::ctl::{Collector, Immediate, Plan, TaskCtl};
use super::pr_store;
use super::session::{lun_number, Conn, Data};
use super::target::{lock, Lun};
use crate::budget::Credit;

/// Zeroes and WRITE SAME patterns are written in pieces of this size.
const PIECE: usize = 1 << 20;

/// Bytes of buffers a command holds besides its Data-Out: what it reads from the array
/// (its Data-In, or what it compares or merges with), or the piece WRITE SAME writes from.
fn buffer_cost(op: &Op, block_size: u32) -> u64 {
    let bytes = |blocks: u64| blocks * u64::from(block_size);
    match *op {
        Op::Read { blocks, .. } | Op::Verify { blocks, .. } | Op::WriteAndVerify { blocks, .. } => {
            bytes(u64::from(blocks))
        }
        Op::CompareAndWrite { blocks, .. } => bytes(u64::from(blocks)),
        Op::OrWrite { blocks, .. } => 2 * bytes(u64::from(blocks)),
        Op::WriteSame { .. } => PIECE as u64,
        _ => 0,
    }
}

/// Decodes the command, reserves its buffers and sets up its Data-Out collection. Runs in
/// the reader, before any later PDU is read, so Data-Out for it always finds it. A command
/// whose buffers do not fit the budgets (or whose immediate data did not) ends with TASK
/// SET FULL, and no Data-Out is asked for.
pub fn prepare(conn: &Conn, c: &ScsiCommand, imm: Immediate, first_burst: usize) -> Rc<TaskCtl> {
    let mut plan = plan(conn, c);
    let ctl = Rc::new(TaskCtl {
        itt: c.itt,
        lun: c.lun,
        collector: RefCell::new(None),
        waker: RefCell::new(None),
        aborted: Cell::new(false),
        plan: RefCell::new(None),
        credit: RefCell::new(None),
    });
    let (want, extra) = match &plan {
        Plan::Run { lun, op, .. } => {
            let info = &lun.info;
            (op.data_out_len(info), buffer_cost(op, info.block_size))
        }
        _ => (0, 0),
    };
    let edtl = u64::from(c.expected_len);
    // What raidd asks for: the Data-Out of the command as fitted to the expected length.
    let mut len = want.min(edtl) as usize;
    // The login always settles InitialR2T=Yes, so the only data sent unasked is immediate
    // data (up to FirstBurstLength); beyond `len` it is absorbed unused.
    let imm_len = imm.buf.as_ref().map_or(0, |b| b.len()).min(first_burst);
    let mut size = len.max(imm_len);
    let mut credit = imm.credit;
    let held = credit.as_ref().map_or(0, Credit::bytes);
    let need = (size as u64 + extra).saturating_sub(held);
    match conn.account.try_reserve(need) {
        Some(more) if !imm.refused => match credit.as_mut() {
            Some(c) => c.join(more),
            None => credit = Some(more),
        },
        _ => {
            plan = Plan::Fail(Status::TaskSetFull, None);
            len = 0;
            size = imm_len;
        }
    }
    debug_assert!(len <= size, "a command's Data-Out fits its buffer");
    debug_assert!(
        matches!(plan, Plan::Fail(..))
            || credit.as_ref().map_or(0, Credit::bytes) >= size as u64 + extra,
        "a command runs only with its buffers reserved"
    );
    *ctl.credit.borrow_mut() = credit;
    if size > 0 {
        let buf = match imm.buf {
            Some(b) if b.len() == size => b,
            imm => {
                let mut b = AlignedBuf::for_overwrite(size);
                if let Some(i) = imm {
                    let n = i.len().min(size);
                    b[..n].copy_from_slice(&i[..n]);
                }
                b
            }
        };
        *ctl.collector.borrow_mut() = Some(Collector {
            buf: Some(buf),
            len,
            size,
            received: imm_len,
            burst: None,
            next_datasn: 0,
            next_r2tsn: 0,
        });
    }
    *ctl.plan.borrow_mut() = Some(plan);
    ctl
}

fn lun_of(conn: &Conn, ctl: &TaskCtl) -> Option<Arc<Lun>> {
    let t = conn.target?;
    conn.state.targets[t].lun(lun_number(ctl.lun)?)
}

fn plan(conn: &Conn, c: &ScsiCommand) -> Plan {
    let Some(t) = conn.target else {
        return Plan::Fail(Status::CheckCondition, Some(Sense::invalid_lun()));
    };
    let target = &conn.state.targets[t];
    let Some(lun) = lun_number(c.lun).and_then(|n| target.lun(n)) else {
        // REPORT LUNS works through any LUN; INQUIRY says "no unit here"; the rest fail.
        let any = target.any();
        return match raidd_scsi::decode(&c.cdb, &any.info) {
            Ok(op @ Op::ReportLuns { .. }) => Plan::Run {
                lun: any,
                op,
                residual: None,
            },
            Ok(Op::Inquiry { alloc, .. }) => Plan::NoLunInquiry { alloc },
            _ => Plan::Fail(Status::CheckCondition, Some(Sense::invalid_lun())),
        };
    };
    let info = &lun.info_now();
    match raidd_scsi::decode(&c.cdb, info) {
        // COMPARE AND WRITE's verify and write halves must both be there: an initiator
        // that sends another amount has the NUMBER OF LOGICAL BLOCKS wrong.
        Ok(Op::CompareAndWrite { blocks, .. })
            if u64::from(c.expected_len) != 2 * u64::from(blocks) * u64::from(info.block_size) =>
        {
            Plan::Fail(
                Status::CheckCondition,
                Some(Sense::invalid_field_in_cdb(13, None)),
            )
        }
        Ok(op) => match fit_to_expected(op, info, c.expected_len) {
            Ok((op, residual)) => Plan::Run { lun, op, residual },
            Err(r) => Plan::Refuse(r),
        },
        Err(sense) => Plan::Fail(Status::CheckCondition, Some(sense)),
    }
}

/// Fits a command's Data-Out to the initiator's expected length (FCP-4's rule, which
/// iSCSI follows): with more expected than needed, the command runs and reports an
/// underflow; with less, a write of whole blocks runs on the blocks that were offered and
/// reports an overflow, and anything else is refused (Err, with the overflow).
fn fit_to_expected(
    op: Op,
    info: &raidd_scsi::LunInfo,
    expected: u32,
) -> Result<(Op, Option<Residual>), Residual> {
    let want = op.data_out_len(info);
    let edtl = u64::from(expected);
    if want == 0 {
        return Ok((op, None));
    }
    if want <= edtl {
        let r = (want < edtl).then(|| Residual::of(expected, want));
        return Ok((op, r));
    }
    let over = Residual::of(expected, want);
    let bs = u64::from(info.block_size);
    if edtl % bs != 0 {
        return Err(over);
    }
    let blocks = (edtl / bs) as u32;
    debug_assert!(
        u64::from(blocks) * bs <= edtl && edtl < want,
        "an overflow runs fewer blocks"
    );
    match op {
        Op::Write { lba, fua, .. } => Ok((Op::Write { lba, blocks, fua }, Some(over))),
        Op::WriteAndVerify { lba, bytchk, .. } => Ok((
            Op::WriteAndVerify {
                lba,
                blocks,
                bytchk,
            },
            Some(over),
        )),
        _ => Err(over),
    }
}

/// What a command ends with.
struct Outcome {
    status: Status,
    sense: Option<Sense>,
    /// Data-In: the buffer and how many bytes of it the command produced.
    data: Option<(SharedBuf, usize)>,
    /// Set where the residual is not the Data-In's against the expected length.
    residual: Option<Residual>,
}

impl Outcome {
    fn good() -> Outcome {
        Outcome {
            status: Status::Good,
            sense: None,
            data: None,
            residual: None,
        }
    }

    fn check(sense: Sense) -> Outcome {
        Outcome {
            status: Status::CheckCondition,
            sense: Some(sense),
            data: None,
            residual: None,
        }
    }

    fn status(status: Status) -> Outcome {
        Outcome {
            status,
            sense: None,
            data: None,
            residual: None,
        }
    }

    fn bytes(v: Vec<u8>) -> Outcome {
        let n = v.len();
        Outcome {
            status: Status::Good,
            sense: None,
            data: Some((SharedBuf::new(AlignedBuf::from_slice(&v)), n)),
            residual: None,
        }
    }
}

/// Waits for the command's Data-Out, asking for it with R2Ts; false if aborted.
async fn collect(conn: &Conn, ctl: &TaskCtl) -> bool {
    let max_burst = (conn.params.borrow().max_burst_length as usize).max(512);
    poll_fn(|cx| {
        if ctl.aborted.get() {
            return Poll::Ready(false);
        }
        let mut col = ctl.collector.borrow_mut();
        let Some(c) = col.as_mut() else {
            return Poll::Ready(true);
        };
        if c.received >= c.len && c.buf.is_some() {
            return Poll::Ready(true);
        }
        if c.burst.is_none() && c.received < c.len {
            let ttt = conn.ttt();
            let end = c.len.min(c.received + max_burst);
            debug_assert!(
                end > c.received && end - c.received <= max_burst,
                "an R2T asks for a burst"
            );
            c.burst = Some((ttt, end));
            c.next_datasn = 0;
            let r2tsn = c.next_r2tsn;
            c.next_r2tsn = c.next_r2tsn.wrapping_add(1);
            let (offset, len) = (c.received as u32, (end - c.received) as u32);
            let (itt, lun) = (ctl.itt, ctl.lun);
            drop(col);
            conn.send(
                false,
                |s| pdu::r2t(itt, lun, ttt, r2tsn, offset, len, s),
                Data::None,
            );
        }
        *ctl.waker.borrow_mut() = Some(cx.waker().clone());
        Poll::Pending
    })
    .await
}

/// Runs the command to its status (none for an aborted one).
pub async fn run(conn: &Conn, ctl: &TaskCtl, c: ScsiCommand) {
    let arrived = std::time::Instant::now();
    if !collect(conn, ctl).await {
        return;
    }
    let data_out = ctl
        .collector
        .borrow_mut()
        .take()
        .and_then(|c| c.buf)
        .unwrap_or_else(|| AlignedBuf::for_overwrite(0));
    let plan = ctl.plan.borrow_mut().take();
    let outcome = match plan {
        None => Outcome::check(Sense::invalid_opcode()),
        Some(Plan::Fail(status, sense)) => Outcome {
            status,
            sense,
            data: None,
            residual: None,
        },
        Some(Plan::NoLunInquiry { alloc }) => {
            // Peripheral qualifier 3: no logical unit can be here.
            let mut v = vec![0u8; 36];
            v[0] = 0x7f;
            v[2] = 0x06;
            v[3] = 0x02;
            v[4] = 31;
            v.truncate(usize::from(alloc));
            Outcome::bytes(v)
        }
        Some(Plan::Refuse(residual)) => {
            // INVALID FIELD IN COMMAND INFORMATION UNIT.
            let mut o = Outcome::check(Sense {
                key: 0x05,
                asc: 0x0e,
                ascq: 0x03,
                information: None,
                field_pointer: None,
            });
            o.residual = Some(residual);
            o
        }
        Some(Plan::Run { lun, op, residual }) => {
            let l = &*lun;
            let timed = timed_as(&op, l.info.block_size);
            let mut o = execute(conn, l, op, data_out).await;
            if let Some((kind, bytes)) = timed {
                l.latency.record(kind, arrived.elapsed(), bytes);
            }
            if o.residual.is_none() {
                o.residual = residual;
            }
            o
        }
    };
    if ctl.aborted.get() {
        return;
    }
    respond(conn, ctl, &c, outcome);
}

/// Which latency histogram a command counts in, with its bytes: reads, writes (every kind
/// that writes data) and SYNCHRONIZE CACHE; the rest are not timed.
fn timed_as(op: &Op, block_size: u32) -> Option<(crate::latency::Op, u64)> {
    use crate::latency::Op as T;
    let bytes = |blocks: u32| u64::from(blocks) * u64::from(block_size);
    match *op {
        Op::Read { blocks, .. } => Some((T::Read, bytes(blocks))),
        Op::Write { blocks, .. }
        | Op::WriteAndVerify { blocks, .. }
        | Op::OrWrite { blocks, .. } => Some((T::Write, bytes(blocks))),
        Op::CompareAndWrite { blocks, .. } => Some((T::Write, bytes(u32::from(blocks)))),
        Op::SynchronizeCache { .. } => Some((T::Flush, 0)),
        _ => None,
    }
}

fn respond(conn: &Conn, ctl: &TaskCtl, c: &ScsiCommand, o: Outcome) {
    let expected = c.expected_len;
    let (itt, lun) = (ctl.itt, ctl.lun);
    let status = o.status.code();
    let produced_len = o.data.as_ref().map(|(_, n)| *n as u64);
    if let Some((buf, produced)) = o.data {
        if o.status == Status::Good && o.sense.is_none() && expected > 0 && produced > 0 {
            let send = produced.min(expected as usize);
            let residual = Residual::of(expected, produced as u64);
            let Ok(slice) = buf.slice(0..send) else {
                return respond(conn, ctl, c, Outcome::check(Sense::invalid_opcode()));
            };
            let (mrdsl, burst) = {
                let p = conn.params.borrow();
                (
                    (p.initiator_mrdsl as usize).max(512),
                    (p.max_burst_length as usize).max(512),
                )
            };
            let mut offset = 0usize;
            let mut datasn = 0u32;
            while offset < send {
                let burst_end = (offset / burst + 1) * burst;
                let n = mrdsl.min(send - offset).min(burst_end - offset);
                debug_assert!(
                    n > 0 && n <= mrdsl,
                    "a Data-In PDU within MaxRecvDataSegmentLength"
                );
                let last = offset + n == send;
                let final_bit = last || offset + n == burst_end;
                let st = last.then_some((status, residual));
                let piece = slice.sub(offset..offset + n);
                let (o2, d2) = (offset as u32, datasn);
                // The buffers' credit goes with the last PDU: back once all have been sent.
                let credit = if last { ctl.credit.take() } else { None };
                conn.send_with(
                    last,
                    |s| pdu::data_in(itt, lun, d2, o2, n, final_bit, st, s),
                    Data::Slice(piece),
                    credit,
                );
                offset += n;
                datasn = datasn.wrapping_add(1);
            }
            debug_assert_eq!(offset, send, "every byte of the Data-In is sent");
            return;
        }
    }
    let residual = match (o.residual, produced_len) {
        (Some(r), _) => r,
        (None, Some(produced)) if o.status == Status::Good => Residual::of(expected, produced),
        (None, _) => Residual::None,
    };
    // The control mode page's D_SENSE picks the format (one flag shared by all sessions).
    let sense = o.sense.map(|s| {
        let bytes = match lun_of(conn, ctl) {
            Some(l) => lock(&l.mode).sense_bytes(&s),
            None => s.fixed(),
        };
        pdu::sense_segment(&bytes)
    });
    let len = sense.as_ref().map_or(0, |s| s.len());
    conn.send_with(
        true,
        |s| pdu::scsi_response(itt, status, residual, 0, s, len),
        sense.map_or(Data::None, Data::Bytes),
        ctl.credit.take(),
    );
}

fn io_sense(e: &raidd_engine::Error, lba: u64, write: bool) -> Sense {
    match e.kind() {
        ErrorKind::OutOfRange => Sense::lba_out_of_range(),
        ErrorKind::ReadOnly => Sense::write_protected(),
        _ if write => Sense::write_error(lba),
        _ => Sense::unrecovered_read_error(lba),
    }
}

async fn write(
    array: &Extent,
    offset: u64,
    buf: &SharedBuf,
    range: std::ops::Range<usize>,
) -> raidd_engine::Result<()> {
    if range.is_empty() {
        return Ok(());
    }
    let mut iov = IoVec::new();
    iov.push(buf.slice(range).map_err(|e| {
        raidd_engine::Error::new(ErrorKind::Io, format!("internal buffer error: {e}"))
    })?);
    array.write(offset, iov).await
}

/// Writes `buf[range]` at block `lba` (flushing after it for FUA) and says how that went.
async fn write_status(
    array: &Extent,
    lba: u64,
    block: u64,
    buf: &SharedBuf,
    range: std::ops::Range<usize>,
    fua: bool,
) -> Outcome {
    let len = range.len() as u64;
    let mut r = write(array, lba * block, buf, range).await;
    if r.is_ok() && fua {
        r = array.flush_range(lba * block, len).await;
    }
    match r {
        Ok(()) => Outcome::good(),
        Err(e) => Outcome::check(io_sense(&e, lba, true)),
    }
}

/// Commands that run even while a unit attention waits (SPC-4 5.14).
fn ignores_attention(op: &Op) -> bool {
    matches!(
        op,
        Op::Inquiry { .. } | Op::ReportLuns { .. } | Op::RequestSense { .. }
    )
}

async fn execute(conn: &Conn, l: &Lun, op: Op, data_out: AlignedBuf) -> Outcome {
    if !ignores_attention(&op) {
        if let Some(s) = l.take_attention(&conn.nexus) {
            return Outcome::check(s);
        }
    }
    if l.reservations_used.load(Ordering::Acquire)
        && !lock(&l.reservations).allows(&nexus(conn, l), &op)
    {
        return Outcome::status(Status::ReservationConflict);
    }
    let bs = u64::from(l.info.block_size);
    let array = &l.extent;
    match op {
        Op::Read { lba, blocks, .. } => {
            let len = (u64::from(blocks) * bs) as usize;
            match array.read_new(lba * bs, len).await {
                Ok(buf) => Outcome {
                    status: Status::Good,
                    sense: None,
                    data: Some((buf, len)),
                    residual: None,
                },
                Err(e) => Outcome::check(io_sense(&e, lba, false)),
            }
        }
        Op::Write { lba, blocks, fua } => {
            let len = (u64::from(blocks) * bs) as usize;
            debug_assert!(
                data_out.len() >= len,
                "a WRITE's Data-Out was collected whole"
            );
            let buf = SharedBuf::new(data_out);
            let _w = l.atomic.shared().await;
            write_status(array, lba, bs, &buf, 0..len, fua).await
        }
        Op::Verify {
            lba,
            blocks,
            bytchk,
        } => verify(l, lba, blocks, bytchk, None, data_out).await,
        Op::WriteAndVerify { lba, blocks, .. } => {
            verify(l, lba, blocks, true, Some(data_out.clone()), data_out).await
        }
        Op::SynchronizeCache { .. } => match array.flush().await {
            Ok(()) => Outcome::good(),
            Err(e) => Outcome::check(io_sense(&e, 0, true)),
        },
        Op::WriteSame {
            lba,
            blocks,
            unmap,
            ndob,
            ..
        } => {
            let block = if ndob {
                vec![0u8; bs as usize]
            } else {
                data_out[..bs as usize].to_vec()
            };
            write_same(conn, l, lba, blocks, unmap, &block).await
        }
        Op::Unmap { anchor, .. } => unmap(l, anchor, &data_out).await,
        Op::CompareAndWrite { lba, blocks, fua } => {
            compare_and_write(l, lba, blocks, fua, data_out).await
        }
        Op::OrWrite { lba, blocks, fua } => or_write(l, lba, blocks, fua, &data_out).await,
        Op::Reserve6 | Op::Release6 => reserve6(conn, l, op == Op::Reserve6),
        Op::ModeSelect { ten, pf, sp, .. } => mode_select(conn, l, &data_out, ten, pf, sp),
        Op::PersistentReserveIn { action, alloc } => {
            match lock(&l.reservations).pr_in(action, alloc, &nexus(conn, l)) {
                Ok(v) => Outcome::bytes(v),
                Err(s) => Outcome::check(s),
            }
        }
        Op::PersistentReserveOut {
            action,
            scope,
            kind,
            ..
        } => pr_out(conn, l, action, scope, kind, &data_out).await,
        Op::RequestSense { .. } => {
            let pending = l.take_attention(&conn.nexus);
            describe(conn, l, &op, pending.as_ref(), true)
        }
        other => describe(conn, l, &other, None, false),
    }
}

/// The I_T nexus a command comes from, as reservations see it: built only where
/// reservations are involved, so READ and WRITE allocate nothing for it.
fn nexus(conn: &Conn, l: &Lun) -> raidd_scsi::Nexus {
    raidd_scsi::Nexus {
        initiator: conn.nexus.clone(),
        target_port: l.info.target_port_id,
    }
}

/// VERIFY (`written` None: compared only with BYTCHK) and WRITE AND VERIFY (`written`:
/// the Data-Out, written first, then always compared).
async fn verify(
    l: &Lun,
    lba: u64,
    blocks: u32,
    bytchk: bool,
    written: Option<AlignedBuf>,
    data_out: AlignedBuf,
) -> Outcome {
    let bs = u64::from(l.info.block_size);
    let len = (u64::from(blocks) * bs) as usize;
    let array = &l.extent;
    let writes = written.is_some();
    debug_assert!(
        !(bytchk || writes) || data_out.len() >= len,
        "what is compared was sent"
    );
    if let Some(w) = written {
        let buf = SharedBuf::new(w);
        let _w = l.atomic.shared().await;
        if let Err(e) = write(array, lba * bs, &buf, 0..len).await {
            return Outcome::check(io_sense(&e, lba, true));
        }
    }
    match array.read_new(lba * bs, len).await {
        Err(e) => Outcome::check(io_sense(&e, lba, false)),
        Ok(got) => {
            if bytchk || writes {
                let diff = got.with(|g| raidd_scsi::miscompare_offset(&data_out[..len], g));
                if let Some(at) = diff {
                    return Outcome::check(Sense::miscompare(at as u64));
                }
            }
            Outcome::good()
        }
    }
}

/// WRITE SAME: `block` over `blocks` blocks from `lba`, in pieces of [`PIECE`] bytes, or a
/// discard where the LUN is thin, the block is zeroes and the level can discard.
async fn write_same(
    conn: &Conn,
    l: &Lun,
    lba: u64,
    blocks: u32,
    unmap: bool,
    block: &[u8],
) -> Outcome {
    let bs = u64::from(l.info.block_size);
    let array = &l.extent;
    let len = u64::from(blocks) * bs;
    let _w = l.atomic.shared().await;
    if unmap && l.info.thin && block.iter().all(|&b| b == 0) {
        // Discards are advisory (LBPRZ 0): the zeroes are written where the level
        // cannot discard, so a read after this sees zeroes either way.
        if !array.array().geometry().level().has_parity() {
            return match array.discard(lba * bs, len).await {
                Ok(()) => Outcome::good(),
                Err(e) => Outcome::check(io_sense(&e, lba, true)),
            };
        }
    }
    let piece_blocks = (PIECE as u64 / bs).min(u64::from(blocks)).max(1);
    debug_assert_eq!(block.len() as u64, bs, "WRITE SAME repeats one block");
    let mut pattern = AlignedBuf::for_overwrite((piece_blocks * bs) as usize);
    for chunk in pattern.chunks_mut(bs as usize) {
        chunk.copy_from_slice(block);
    }
    let pattern = SharedBuf::new(pattern);
    let mut done = 0u64;
    while done < len {
        // A stop waits for commands in flight: one over a whole LUN would outlast it.
        if conn.stop.peek().is_some() {
            return Outcome::check(Sense::not_ready());
        }
        let n = (len - done).min(piece_blocks * bs) as usize;
        if let Err(e) = write(array, lba * bs + done, &pattern, 0..n).await {
            return Outcome::check(io_sense(&e, lba + done / bs, true));
        }
        done += n as u64;
    }
    debug_assert_eq!(done, len, "every block written");
    Outcome::good()
}

/// UNMAP: each range of the parameter list discarded.
async fn unmap(l: &Lun, anchor: bool, data_out: &[u8]) -> Outcome {
    let bs = u64::from(l.info.block_size);
    let ranges = match raidd_scsi::parse_unmap(data_out, anchor, &l.info) {
        Ok(r) => r,
        Err(s) => return Outcome::check(s),
    };
    let _w = l.atomic.shared().await;
    for (lba, n) in ranges {
        if let Err(e) = l.extent.discard(lba * bs, u64::from(n) * bs).await {
            return Outcome::check(io_sense(&e, lba, true));
        }
    }
    Outcome::good()
}

/// COMPARE AND WRITE: the first half of the Data-Out compared, the second written, with
/// nothing else writing the LUN in between.
async fn compare_and_write(
    l: &Lun,
    lba: u64,
    blocks: u8,
    fua: bool,
    data_out: AlignedBuf,
) -> Outcome {
    let bs = u64::from(l.info.block_size);
    let len = usize::from(blocks) * bs as usize;
    debug_assert!(
        data_out.len() >= 2 * len,
        "COMPARE AND WRITE carries both halves"
    );
    let _x = l.atomic.exclusive().await;
    let got = match l.extent.read_new(lba * bs, len).await {
        Ok(g) => g,
        Err(e) => return Outcome::check(io_sense(&e, lba, false)),
    };
    if let Some(at) = got.with(|g| raidd_scsi::miscompare_offset(&data_out[..len], g)) {
        return Outcome::check(Sense::miscompare(at as u64));
    }
    let buf = SharedBuf::new(data_out);
    write_status(&l.extent, lba, bs, &buf, len..2 * len, fua).await
}

/// ORWRITE: read, OR, write, with no other write in between (as COMPARE AND WRITE).
async fn or_write(l: &Lun, lba: u64, blocks: u32, fua: bool, data_out: &[u8]) -> Outcome {
    let bs = u64::from(l.info.block_size);
    let len = (u64::from(blocks) * bs) as usize;
    if len == 0 {
        return Outcome::good();
    }
    debug_assert!(
        data_out.len() >= len,
        "ORWRITE's Data-Out was collected whole"
    );
    let _x = l.atomic.exclusive().await;
    let got = match l.extent.read_new(lba * bs, len).await {
        Ok(g) => g,
        Err(e) => return Outcome::check(io_sense(&e, lba, false)),
    };
    let mut merged = AlignedBuf::for_overwrite(len);
    got.with(|g| {
        for ((m, a), b) in merged.iter_mut().zip(g).zip(&data_out[..len]) {
            *m = a | b;
        }
    });
    let merged = SharedBuf::new(merged);
    write_status(&l.extent, lba, bs, &merged, 0..len, fua).await
}

/// RESERVE(6) (`reserve`) and RELEASE(6).
fn reserve6(conn: &Conn, l: &Lun, reserve: bool) -> Outcome {
    let r = {
        let mut pr = lock(&l.reservations);
        if reserve {
            pr.reserve6(&nexus(conn, l))
        } else {
            pr.release6(&nexus(conn, l))
        }
    };
    l.reservations_used.store(true, Ordering::Release);
    match r {
        Ok(()) => Outcome::good(),
        Err(PrError::Conflict) => Outcome::status(Status::ReservationConflict),
        Err(PrError::Check(s)) => Outcome::check(s),
    }
}

/// MODE SELECT: a change of the LUN's mode pages leaves a unit attention (parameters
/// changed) for every other nexus of the target.
fn mode_select(conn: &Conn, l: &Lun, data_out: &[u8], ten: bool, pf: bool, sp: bool) -> Outcome {
    let r = {
        let mut m = lock(&l.mode);
        let before = m.clone();
        raidd_scsi::mode_select(data_out, ten, pf, sp, &mut m, &l.info).map(|()| *m != before)
    };
    match r {
        Ok(false) => Outcome::good(),
        Ok(true) => {
            if let Some(t) = conn.target {
                let nexuses = conn.state.nexuses_of(t);
                l.attention_for(&nexuses, Some(&conn.nexus), &Sense::parameters_changed());
            }
            Outcome::good()
        }
        Err(s) => Outcome::check(s),
    }
}

/// PERSISTENT RESERVE OUT: the change is made, its unit attentions left, and (APTPL) it
/// is saved before the command succeeds.
async fn pr_out(conn: &Conn, l: &Lun, action: u8, scope: u8, kind: u8, data_out: &[u8]) -> Outcome {
    // A change is queued for saving under the lock, so saves keep its order.
    let (r, saving) = {
        let mut pr = lock(&l.reservations);
        let r = pr.pr_out(action, scope, kind, data_out, &nexus(conn, l));
        let saving = match &r {
            Ok(o) if o.changed => {
                let bytes = pr.aptpl().then(|| pr.encode());
                Some(conn.state.pr_store.queue(&l.reservations_file, bytes))
            }
            _ => None,
        };
        (r, saving)
    };
    l.reservations_used.store(true, Ordering::Release);
    match r {
        Ok(outcome) => {
            for (n, s) in &outcome.unit_attentions {
                l.attention_for(std::slice::from_ref(&n.initiator), None, s);
            }
            let saved = match saving {
                Some(s) => pr_store::saved(s).await,
                None => Ok(()),
            };
            match saved {
                Ok(()) => Outcome::good(),
                Err(_) => Outcome::check(Sense::internal_target_failure()),
            }
        }
        Err(PrError::Conflict) => Outcome::status(Status::ReservationConflict),
        Err(PrError::Check(s)) => Outcome::check(s),
    }
}

/// Commands `raidd_scsi` answers from the LUN's description alone (INQUIRY, READ
/// CAPACITY, MODE SENSE, REPORT LUNS, REQUEST SENSE with `pending`, ...). `keep_empty`:
/// an empty answer is sent as data (REQUEST SENSE), not as plain GOOD.
fn describe(conn: &Conn, l: &Lun, op: &Op, pending: Option<&Sense>, keep_empty: bool) -> Outcome {
    let mode = lock(&l.mode);
    let luns = luns_of(conn);
    let info = l.info_now();
    let ctx = RespondCtx {
        lun: &info,
        mode: &mode,
        luns: &luns,
        pending_sense: pending,
    };
    match raidd_scsi::respond(op, &ctx) {
        Ok(v) if v.is_empty() && !keep_empty => Outcome::good(),
        Ok(v) => Outcome::bytes(v),
        Err(s) => Outcome::check(s),
    }
}

fn luns_of(conn: &Conn) -> Vec<u64> {
    conn.target
        .map(|t| conn.state.targets[t].numbers())
        .unwrap_or_default()
}
