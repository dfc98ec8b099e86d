//! One NBD connection: the handshake through `raidd_nbd`'s state machine, then the
//! transmission phase. A reader loop takes requests off the socket (a WRITE payload lands
//! straight in an aligned buffer that goes to the array without a copy) and spawns a task per
//! request; tasks finish in any order and queue their replies; one writer sends whatever is
//! queued with a gathered `sendmsg` per batch (READ data as windows of the buffer the array
//! filled).
//!
//! In-flight requests are bounded per connection (`max_in_flight`), and their bytes against
//! the connection's and the server's budgets ([`crate::budget`]): a READ's until its reply
//! has been sent, a WRITE's (reserved before its payload is received) until it is done,
//! WRITE_ZEROES' and TRIM's as the one piece they hold at a time. The waits for the client
//! are limited in time ([`crate::watch`]).

use std::cell::{Cell, RefCell};
use std::future::poll_fn;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use futures::future::{self, Either};
use raidd_engine::{ErrorKind, Extent};
use raidd_nbd::consts::*;
use raidd_nbd::request::{self, Command, Limits, Refusal, Request, REQUEST_LEN};
use raidd_nbd::{reply, Handshake, Negotiated, Step};
use raidd_rt::net::Part;
use raidd_rt::{AlignedBuf, IoVec, SharedBuf};

use super::server::{Export, NbdServer, MAX_PAYLOAD};
use crate::budget::{Account, Credit};
use crate::latency::Op;
use crate::link::{Input, Link};
use crate::logtext::Escaped;
use crate::outq::OutQueue;
use crate::shared::Stop;
use crate::watch::{Wait, Watch};

/// A client must finish the handshake within this time.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);
/// WRITE_ZEROES and TRIM go to the array in pieces of this size: what one holds at a time
/// (and what it counts as against the budgets), and how often it looks whether the daemon
/// is stopping.
const ZERO_PIECE: usize = 1 << 20;
/// Read replies at least this large are sent by their own task when the send queue is idle
/// (`OutQueue::push_direct`); smaller ones gather into the writer's batches.
const DIRECT_SEND_MIN: usize = 128 << 10;

/// Serves one client until it disconnects, misbehaves, or the daemon stops.
pub async fn serve_connection(link: Link, watch: Rc<Watch>, shared: Arc<NbdServer>, stop: Stop) {
    let peer = link
        .sock
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "?".into());
    let mut link = link;
    let mut input = Input::new(watch.clone());
    let outcome = {
        let hs = handshake(&mut link, &mut input, &shared);
        let timeout = raidd_rt::time::sleep(HANDSHAKE_TIMEOUT);
        let stopping = stop.clone();
        futures::pin_mut!(hs, timeout);
        match future::select(hs, future::select(timeout, stopping)).await {
            Either::Left((r, _)) => Some(r),
            Either::Right(_) => None,
        }
    };
    let (negotiated, export) = match outcome {
        Some(Ok(n)) => n,
        Some(Err(why)) => {
            tracing::debug!(%peer, "handshake ended: {}", Escaped(&why));
            return;
        }
        None => {
            tracing::debug!(%peer, "handshake timed out or the daemon is stopping");
            return;
        }
    };
    if export.gone.load(Ordering::SeqCst) {
        tracing::info!(%peer, export = %export.name, "the export was removed during the handshake");
        return;
    }
    tracing::info!(
        %peer,
        export = %export.name,
        structured = negotiated.structured_replies,
        "client connected"
    );
    export.connections.fetch_add(1, Ordering::Relaxed);
    watch.serves(export.gone.clone());
    let conn = Rc::new(Conn::new(
        link,
        shared.clone(),
        export.clone(),
        &negotiated,
        watch.clone(),
        stop,
    ));
    let why = transmission(&conn, input).await;
    export.connections.fetch_sub(1, Ordering::Relaxed);
    let why = watch.closed_for().map_or(why, str::to_string);
    tracing::info!(%peer, export = %export.name, "client disconnected: {}", Escaped(&why));
}

/// The handshake: what was negotiated, and the export the client chose.
async fn handshake(
    link: &mut Link,
    input: &mut Input,
    shared: &NbdServer,
) -> Result<(Negotiated, Arc<Export>), String> {
    let err = |e: std::io::Error| e.to_string();
    link.send(vec![Part::Bytes(Handshake::greeting())])
        .await
        .map_err(err)?;
    let (offer, exports) = shared.offer_now();
    let mut hs = Handshake::new(&offer);
    let mut out = Vec::new();
    loop {
        let data = input.exact(link, hs.want()).await.map_err(err)?;
        let step = hs.feed(&data, &mut out);
        if !out.is_empty() {
            link.send(vec![Part::Bytes(std::mem::take(&mut out))])
                .await
                .map_err(err)?;
        }
        match step {
            Step::Continue => {}
            Step::Done(n) => {
                let Some(e) = exports.get(n.export) else {
                    return Err("the handshake chose an export it was not offered".into());
                };
                return Ok((n, e.clone()));
            }
            Step::Close(why) => return Err(why.to_string()),
            Step::StartTls => {
                let Some(config) = shared.tls.clone() else {
                    return Err("STARTTLS accepted without a TLS configuration".into());
                };
                link.start_tls(config, input).await.map_err(err)?;
            }
        }
    }
}

/// State shared by a connection's reader, writer and request tasks (one thread).
struct Conn {
    link: Link,
    shared: Arc<NbdServer>,
    export: Arc<Export>,
    structured: bool,
    limits: Limits,
    /// Replies ready to send.
    out: OutQueue,
    /// The connection's share of the buffer budget.
    account: Rc<Account>,
    stop: Stop,
    /// The reader waits here for a free request slot, and the drain for zero.
    reader: RefCell<Option<Waker>>,
    in_flight: Cell<usize>,
}

impl Conn {
    fn new(
        link: Link,
        shared: Arc<NbdServer>,
        e: Arc<Export>,
        n: &Negotiated,
        watch: Rc<Watch>,
        stop: Stop,
    ) -> Conn {
        let limits = Limits {
            size: e.extent.size_bytes(),
            read_only: e.read_only(),
            min_block: e.extent.block_size(),
            max_payload: MAX_PAYLOAD,
            structured_replies: n.structured_replies,
            meta_context: n.meta_context.is_some(),
        };
        let account = Account::new(shared.shared.budget.clone(), shared.connection_memory);
        Conn {
            link,
            export: e,
            structured: n.structured_replies,
            limits,
            shared,
            out: OutQueue::new(watch),
            account,
            stop,
            reader: RefCell::new(None),
            in_flight: Cell::new(0),
        }
    }

    /// What the export serves: the array, or a volume of it.
    fn extent(&self) -> &Extent {
        &self.export.extent
    }

    /// Queues a reply for the writer; the connection's only request in flight sends its
    /// own when the queue is idle (nothing could gather with it, and the writer task's
    /// wake and turn are saved).
    fn queue<const N: usize>(&self, parts: [Part; N], credit: Option<Credit>) {
        if self.in_flight.get() == 1 {
            self.out.push_direct(&self.link, parts, credit);
        } else {
            self.out.push(parts, credit);
        }
    }

    /// Queues the reply header that `build` writes.
    fn queue_header(&self, build: impl FnOnce(&mut Vec<u8>)) {
        self.queue([header_part(build)], None);
    }

    fn fail(&self, cookie: u64, errno: u32, message: &str) {
        let structured = self.structured;
        self.queue_header(|h| reply::failure(h, structured, cookie, errno, message));
    }

    fn succeed(&self, cookie: u64) {
        self.queue_header(|h| reply::success(h, cookie));
    }

    fn wake_reader(&self) {
        if let Some(w) = self.reader.borrow_mut().take() {
            w.wake();
        }
    }

    fn finished(&self) {
        debug_assert!(self.in_flight.get() > 0, "a request finishes once");
        self.in_flight.set(self.in_flight.get() - 1);
        self.wake_reader();
    }

    /// Waits for a free request slot and for the send queue to have room; false when the
    /// replies can no longer be sent.
    async fn slot(&self) -> bool {
        poll_fn(|cx| {
            if self.out.is_broken() {
                return Poll::Ready(false);
            }
            if self.in_flight.get() >= self.shared.max_in_flight {
                *self.reader.borrow_mut() = Some(cx.waker().clone());
                return Poll::Pending;
            }
            self.out.poll_room(cx).map(|()| !self.out.is_broken())
        })
        .await
    }

    /// Polls `room` until it is ready; `None` once the replies can no longer be sent (a
    /// wait for the budgets must not outlive the connection).
    async fn room<T>(&self, mut room: impl FnMut(&mut Context<'_>) -> Poll<T>) -> Option<T> {
        poll_fn(|cx| {
            if self.out.is_broken() {
                return Poll::Ready(None);
            }
            room(cx).map(Some)
        })
        .await
    }

    /// Waits until `bytes` fit the connection's and the server's budgets.
    async fn reserve(&self, bytes: u64) -> Option<Credit> {
        debug_assert!(
            bytes <= self.shared.connection_memory,
            "a request fits its connection"
        );
        self.room(|cx| self.account.poll_reserve(bytes, cx)).await
    }

    /// As `reserve`, for a WRITE payload of `bytes`: the server's budget is taken only as
    /// the payload arrives ([`receive_payload`]).
    async fn reserve_payload(&self, bytes: u64) -> Option<Credit> {
        debug_assert!(
            bytes <= self.shared.connection_memory,
            "a request fits its connection"
        );
        let first = if bytes <= WHOLE_UP_TO { bytes } else { 0 };
        self.room(|cx| self.account.poll_reserve_payload(bytes, first, cx))
            .await
    }

    /// Grows `credit` to cover `to` bytes; false when the replies can no longer be sent.
    async fn grow(&self, credit: &mut Credit, to: u64) -> bool {
        self.room(|cx| credit.poll_grow(to, cx)).await.is_some()
    }
}

/// A WRITE's payload, a piece at a time, each covered by the server's budget before it is
/// received; the first only once its bytes begin to arrive, so a client that sends a large
/// write's header and stalls holds none of the budget (and one that stalls later, at most a
/// piece more than it sent).
async fn receive_payload(
    conn: &Conn,
    input: &mut Input,
    len: usize,
    credit: &mut Credit,
) -> std::io::Result<AlignedBuf> {
    let mut buf = AlignedBuf::for_overwrite(len);
    let mut have = 0;
    while have < len {
        let to = len.min(have + GROW_PIECE);
        if credit.covered() < to as u64 && have == 0 {
            input.arriving(&conn.link).await?;
        }
        if !conn.grow(credit, to as u64).await {
            return Err(std::io::Error::other("the client stopped reading replies"));
        }
        let (r, b) = input.fill_range(&conn.link, buf, have, to).await;
        buf = b;
        r?;
        have = to;
    }
    debug_assert_eq!(
        credit.covered(),
        credit.bytes(),
        "the whole payload is covered"
    );
    Ok(buf)
}

/// How much of a WRITE payload the budget covers at a time as it arrives.
const GROW_PIECE: usize = 1 << 20;
/// WRITE payloads up to this size are reserved whole at their header, as other requests
/// are: what a stalled one holds is small, and they cost no wait for their first bytes.
const WHOLE_UP_TO: u64 = 128 << 10;

async fn writer(conn: Rc<Conn>) {
    // The reader may be waiting for the next request or for room: a failed send ends
    // those waits too.
    conn.out
        .run(&conn.link, || {
            conn.wake_reader();
            conn.account.wake();
        })
        .await;
}

fn errno_of(e: &raidd_engine::Error, write: bool) -> u32 {
    match e.kind() {
        ErrorKind::ReadOnly => EPERM,
        ErrorKind::OutOfRange if write => ENOSPC,
        ErrorKind::OutOfRange | ErrorKind::Unaligned | ErrorKind::InvalidInput => EINVAL,
        ErrorKind::Interrupted => ESHUTDOWN,
        _ => EIO,
    }
}

async fn transmission(conn: &Rc<Conn>, input: Input) -> String {
    let writer_task = raidd_rt::spawn_local(writer(conn.clone()));
    let why = reader(conn, input).await;
    // Drain: every request already taken gets its reply before the connection closes.
    poll_fn(|cx| {
        if conn.in_flight.get() == 0 {
            return Poll::Ready(());
        }
        *conn.reader.borrow_mut() = Some(cx.waker().clone());
        Poll::Pending
    })
    .await;
    debug_assert_eq!(conn.in_flight.get(), 0, "drained before the close");
    conn.out.close();
    writer_task.await;
    let _ = conn.link.sock.shutdown(std::net::Shutdown::Both);
    why
}

/// Bytes a request holds while it runs: its payload or its reply's data, or the piece of
/// WRITE_ZEROES and TRIM that goes to the array at a time.
fn cost(req: &Request) -> u64 {
    let c = match req.command {
        Command::Read | Command::Write => u64::from(req.length),
        Command::WriteZeroes | Command::Trim => u64::from(req.length).min(ZERO_PIECE as u64),
        _ => 0,
    };
    debug_assert!(
        !matches!(req.command, Command::Read | Command::Write) || c <= u64::from(MAX_PAYLOAD),
        "validated requests carry at most the largest payload"
    );
    c
}

/// Takes requests until the client leaves or misbehaves. A stopping daemon shuts the read
/// side of the socket (see `crate::watch::Registry::stop_reading`), which ends the wait for
/// the next header without any per-request check of a shared stop signal.
async fn reader(conn: &Rc<Conn>, mut input: Input) -> String {
    loop {
        if !conn.slot().await {
            return "the client stopped reading replies".into();
        }
        let before = if conn.in_flight.get() == 0 {
            Wait::Idle
        } else {
            Wait::Nothing
        };
        let r = input.header::<REQUEST_LEN>(&conn.link, before).await;
        if r.is_err() && conn.stop.peek().is_some() {
            return "the daemon is stopping".into();
        }
        let raw = match r {
            Ok(h) => h,
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return "closed by the client".into()
            }
            Err(e) => return format!("read failed: {e}"),
        };
        let Some(req) = request::parse(&raw) else {
            return "bad request magic".into();
        };
        // Latency counts from the header's arrival: a write's payload time is the client's.
        let arrived = std::time::Instant::now();
        conn.export.requests.fetch_add(1, Ordering::Relaxed);
        match request::validate(&req, &conn.limits) {
            Ok(()) => {}
            Err(Refusal::Disconnect(why)) => return why.into(),
            Err(Refusal::Error(errno)) => {
                if req.command == Command::Write {
                    if let Err(e) = input.skip(&conn.link, req.length as usize).await {
                        return format!("read failed: {e}");
                    }
                }
                conn.fail(req.cookie, errno, "request refused");
                continue;
            }
        }
        if req.command == Command::Disc {
            return "the client disconnected (NBD_CMD_DISC)".into();
        }
        // Room in the budgets before any buffer exists: the server's own back-pressure, so
        // the reader waits for nothing from the client meanwhile.
        let reserved = if req.command == Command::Write {
            conn.reserve_payload(cost(&req)).await
        } else {
            conn.reserve(cost(&req)).await
        };
        let Some(mut credit) = reserved else {
            return "the client stopped reading replies".into();
        };
        let payload = if req.command == Command::Write {
            let copied = input.copied;
            match receive_payload(conn, &mut input, req.length as usize, &mut credit).await {
                Ok(buf) => {
                    debug_assert_eq!(buf.len(), req.length as usize, "a payload whole");
                    conn.export
                        .copied_bytes
                        .fetch_add(input.copied - copied, Ordering::Relaxed);
                    Some(buf)
                }
                Err(e) => return format!("reading a write payload failed: {e}"),
            }
        } else {
            None
        };
        conn.in_flight.set(conn.in_flight.get() + 1);
        debug_assert!(
            conn.in_flight.get() <= conn.shared.max_in_flight,
            "requests in flight within max_in_flight"
        );
        let c = conn.clone();
        // A task per request, from the thread's pool. Reads get a task of their own: a
        // task's block is as large as its largest state, and a read's is a sixth of a
        // RAID5 write's (about 0.9 KiB against 5.2).
        if req.command == Command::Read {
            raidd_rt::spawn_detached(async move {
                read(&c, &req, credit).await;
                c.timed(Op::Read, arrived, req.length);
                c.finished();
            });
        } else {
            raidd_rt::spawn_detached(async move {
                let (command, length) = (req.command, req.length);
                run_request(&c, req, payload).await;
                drop(credit);
                match command {
                    Command::Write => c.timed(Op::Write, arrived, length),
                    Command::Flush => c.timed(Op::Flush, arrived, 0),
                    _ => {}
                }
                c.finished();
            });
        }
    }
}

impl Conn {
    /// Records a request of `op` for `length` bytes that arrived at `arrived` and has its
    /// reply queued now.
    fn timed(&self, op: Op, arrived: std::time::Instant, length: u32) {
        self.export
            .latency
            .record(op, arrived.elapsed(), u64::from(length));
    }
}

async fn run_request(conn: &Conn, req: Request, payload: Option<AlignedBuf>) {
    let array = conn.extent();
    let cookie = req.cookie;
    let fua = req.fua();
    let result = match req.command {
        Command::Write => {
            let Some(buf) = payload else {
                return conn.fail(cookie, EIO, "internal: write without payload");
            };
            write_buf(array, req.offset, buf).await
        }
        Command::Flush => array.flush().await,
        Command::Trim => zero_or_trim(conn, req.offset, u64::from(req.length), true).await,
        Command::WriteZeroes => {
            if req.flags & CMD_FLAG_FAST_ZERO != 0 {
                // Zeroing costs as much as writing here: say so at once, as FAST_ZERO asks.
                return conn.fail(cookie, ENOTSUP, "zeroing is not faster than writing");
            }
            zero_or_trim(conn, req.offset, u64::from(req.length), false).await
        }
        Command::Cache => {
            crate::debug_panic("nbd-cache");
            Ok(())
        }
        Command::BlockStatus => {
            // No allocation tracking: the whole range is data.
            let len = (conn.limits.size - req.offset).min(u64::from(req.length)) as u32;
            return conn.queue_header(|h| {
                reply::block_status(h, cookie, BASE_ALLOCATION_ID, &[(len, 0)]);
            });
        }
        // Reads run in tasks of their own (`read`).
        Command::Read | Command::Disc | Command::Unknown(_) => {
            return conn.fail(cookie, EINVAL, "bad command")
        }
    };
    // FUA: durable on its own, before the reply; only the members it went to are flushed.
    let result = match result {
        Ok(())
            if fua
                && matches!(
                    req.command,
                    Command::Write | Command::Trim | Command::WriteZeroes
                ) =>
        {
            array.flush_range(req.offset, u64::from(req.length)).await
        }
        r => r,
    };
    match result {
        Ok(()) => conn.succeed(cookie),
        Err(e) => {
            tracing::warn!(
                offset = req.offset,
                length = req.length,
                "request failed: {e}"
            );
            conn.fail(
                cookie,
                errno_of(&e, req.command != Command::Read),
                e.message(),
            );
        }
    }
}

/// A READ: its reply goes out with `credit`, which the send queue gives back once the
/// data has been sent.
async fn read(conn: &Conn, req: &Request, credit: Credit) {
    let len = req.length as usize;
    // The extent's range check, then the array's own read, awaited directly: a read's state
    // stays as small as without volumes.
    let at = match conn.extent().array_offset(req.offset, req.length.into()) {
        Ok(at) => at,
        Err(e) => return conn.fail(req.cookie, errno_of(&e, false), e.message()),
    };
    let buf = match conn.extent().array().read_new(at, len).await {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!(offset = req.offset, length = req.length, "read failed: {e}");
            return conn.fail(req.cookie, errno_of(&e, false), e.message());
        }
    };
    let data = match buf.slice(0..len) {
        Ok(d) => d,
        Err(e) => return conn.fail(req.cookie, EIO, &format!("internal: {e}")),
    };
    let h = header_part(|h| {
        if conn.structured {
            reply::offset_data(h, req.cookie, true, req.offset, req.length);
        } else {
            reply::simple(h, req.cookie, 0);
        }
    });
    let parts = [h, Part::Slice(data)];
    if len >= DIRECT_SEND_MIN {
        conn.out.push_direct(&conn.link, parts, Some(credit));
    } else {
        conn.queue(parts, Some(credit));
    }
}

/// The reply header `build` writes, as an inline part: built in a per-thread scratch Vec,
/// so a reply header allocates nothing (an error message too long to fit inline is the
/// exception, and rare).
fn header_part(build: impl FnOnce(&mut Vec<u8>)) -> Part {
    thread_local!(static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) });
    SCRATCH.with(|s| {
        let mut s = s.borrow_mut();
        s.clear();
        build(&mut s);
        Part::header(&s)
    })
}

/// One read-only window over the first `len` bytes of `buf`.
fn window(buf: &SharedBuf, len: usize) -> raidd_engine::Result<IoVec> {
    let mut iov = IoVec::new();
    let w = buf.slice(0..len).map_err(|e| {
        raidd_engine::Error::new(ErrorKind::Io, format!("internal buffer error: {e}"))
    })?;
    iov.push(w);
    Ok(iov)
}

async fn write_buf(array: &Extent, offset: u64, buf: AlignedBuf) -> raidd_engine::Result<()> {
    let len = buf.len();
    let shared = SharedBuf::new(buf);
    array.write(offset, window(&shared, len)?).await
}

/// This thread's piece of zeroes, shared read-only by every WRITE_ZEROES on it.
fn zeroes() -> SharedBuf {
    thread_local!(static ZEROES: SharedBuf = SharedBuf::new(AlignedBuf::zeroed(ZERO_PIECE)));
    ZEROES.with(SharedBuf::clone)
}

/// WRITE_ZEROES (`trim` false) or TRIM over a range, a piece at a time, each after a look at
/// whether the daemon is stopping: a stop waits for the requests in flight, and one over a
/// whole large array would outlast it.
async fn zero_or_trim(conn: &Conn, offset: u64, len: u64, trim: bool) -> raidd_engine::Result<()> {
    let array = conn.extent();
    let zeroes = (!trim).then(zeroes);
    let mut done = 0u64;
    while done < len {
        if conn.stop.peek().is_some() {
            return Err(raidd_engine::Error::new(
                ErrorKind::Interrupted,
                "the server is shutting down",
            ));
        }
        let n = (len - done).min(ZERO_PIECE as u64);
        match &zeroes {
            Some(z) => array.write(offset + done, window(z, n as usize)?).await?,
            None => array.discard(offset + done, n).await?,
        }
        done += n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of the future a function returns, without calling it.
    fn future_size<'a, A: 'a, B: 'a, C: 'a, F: std::future::Future + 'a>(
        _: fn(&'a A, B, C) -> F,
    ) -> usize {
        std::mem::size_of::<F>()
    }

    /// The state a request in flight holds, besides its buffers: what its task's pooled
    /// block must fit (docs/BENCHMARKS.md, "Bytes per request in flight"). A read's task
    /// is its own so that reads do not carry a write's state.
    #[test]
    fn a_request_in_flight_holds_a_bounded_state() {
        let read_state = future_size::<Conn, &Request, Credit, _>(read);
        let any_state = future_size::<Conn, Request, Option<AlignedBuf>, _>(run_request);
        eprintln!("request state: read {read_state} B, any command {any_state} B");
        assert!(read_state <= 1024, "a read's state grew to {read_state} B");
        assert!(any_state <= 8192, "a write's state grew to {any_state} B");
        assert!(
            read_state * 4 < any_state,
            "reads would not gain from a task of their own"
        );
    }
}
