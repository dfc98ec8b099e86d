//! Socket and signal cases, run by tests/net.rs (io_uring) and tests/net_sync.rs (synchronous
//! system calls). Each test file is its own process, so each backend is tested in full.
#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test
#![allow(dead_code)] // the synchronous runner skips the cases that need non-blocking waits

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::rc::Rc;
use std::time::Duration;

use raidd_rt::net::{Part, Stream, TcpListener, UnixListener};
use raidd_rt::signal::Signals;
use raidd_rt::{block_on, spawn_local, AlignedBuf, Backend, SharedBuf};

fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Runs `f` on a fresh thread (its own runtime, shut down at the end) and fails instead of
/// hanging if it, or the shutdown that waits for every in-flight operation, takes too long.
fn on_own_runtime(limit: Duration, f: impl FnOnce() + Send + 'static) {
    let (tx, rx) = std::sync::mpsc::channel();
    let t = std::thread::spawn(move || {
        f();
        raidd_rt::shutdown();
        let _ = tx.send(());
    });
    match rx.recv_timeout(limit) {
        Ok(()) => t.join().unwrap(),
        // The thread panicked (its sender dropped): surface its panic.
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => t.join().unwrap(),
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("runtime thread still busy after {limit:?} (an op was not cancelled?)")
        }
    }
}

pub fn many_clients_read_exact_into_aligned_buffers_and_windows() {
    let listener = TcpListener::bind(loopback()).unwrap();
    let addr = listener.local_addr();
    let clients: Vec<_> = (0..8u8)
        .map(|c| {
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(addr).unwrap();
                let data = pattern(1 << 20, c);
                // Dribble the first bytes to force short receives.
                for chunk in data[..100].chunks(7) {
                    s.write_all(chunk).unwrap();
                    std::thread::sleep(Duration::from_millis(1));
                }
                s.write_all(&data[100..]).unwrap();
                let mut back = vec![0u8; 16];
                s.read_exact(&mut back).unwrap();
                assert_eq!(back, data[..16]);
                // The server closes after its reply.
                let mut rest = Vec::new();
                assert_eq!(s.read_to_end(&mut rest).unwrap(), 0);
            })
        })
        .collect();
    block_on(async move {
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let (stream, peer) = listener.accept().await.unwrap();
            assert_eq!(stream.peer_addr().unwrap(), peer);
            tasks.push(spawn_local(async move {
                // First half into an AlignedBuf, second into a window of a SharedBuf.
                let (r, head) = stream.read_exact(AlignedBuf::zeroed(1 << 19)).await;
                r.unwrap();
                let shared = SharedBuf::new(AlignedBuf::zeroed(1 << 20));
                let w = shared.slice_mut(4096..4096 + (1 << 19)).unwrap();
                let (r, w) = stream.read_exact(w).await;
                r.unwrap();
                let seed = head[0];
                assert_eq!(&head[..], &pattern(1 << 20, seed)[..1 << 19]);
                assert_eq!(w.as_slice(), &pattern(1 << 20, seed)[1 << 19..]);
                drop(w);
                // The window's bytes are in the buffer, where O_DIRECT would take them.
                let whole = shared.try_into_inner().unwrap();
                assert_eq!(
                    &whole[4096..4096 + 16],
                    &pattern(1 << 20, seed)[1 << 19..][..16]
                );
                let (r, _) = stream.write_all(head[..16].to_vec()).await;
                r.unwrap();
                stream.shutdown(Shutdown::Write).unwrap();
            }));
        }
        for t in tasks {
            t.await;
        }
    });
    for c in clients {
        c.join().unwrap();
    }
}

pub fn every_buffer_kind_reads_and_writes() {
    let listener = TcpListener::bind(loopback()).unwrap();
    let addr = listener.local_addr();
    let sent = pattern(4 + 4096 + 8192, 9);
    let to_send = sent.clone();
    let expect_tail = sent[4..].to_vec();
    let client = std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(&to_send).unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap();
        got
    });
    block_on(async move {
        let (stream, _) = listener.accept().await.unwrap();
        // read: a Vec is filled in its first n bytes.
        let (r, mut head) = stream.read(vec![0u8; 4]).await;
        let n = r.unwrap();
        assert!((1..=4).contains(&n));
        if n < 4 {
            let (r, rest) = stream.read_exact(vec![0u8; 4 - n]).await;
            r.unwrap();
            head[n..].copy_from_slice(&rest);
        }
        assert_eq!(head, sent[..4]);
        let (r, aligned) = stream.read_exact(AlignedBuf::zeroed(4096)).await;
        r.unwrap();
        assert_eq!(&aligned[..], &sent[4..4100]);
        let shared = SharedBuf::new(AlignedBuf::zeroed(16384));
        let (r, w) = stream
            .read_exact(shared.slice_mut(8192..16384).unwrap())
            .await;
        r.unwrap();
        assert_eq!(w.as_slice(), &sent[4100..]);
        drop(w);
        // write_all: Vec, AlignedBuf, BufSlice and static bytes, each handed back.
        let (r, v) = stream.write_all(b"vec:".to_vec()).await;
        r.unwrap();
        assert_eq!(v, b"vec:");
        let (r, a) = stream.write_all(aligned).await;
        r.unwrap();
        assert_eq!(a.len(), 4096);
        let (r, s) = stream.write_all(shared.slice(8192..16384).unwrap()).await;
        r.unwrap();
        assert_eq!(s.len(), 8192);
        let (r, _) = stream.write_all(&b":end"[..]).await;
        r.unwrap();
        // Empty writes and vectored sends of nothing are no-ops.
        let (r, _) = stream.write_all(Vec::new()).await;
        r.unwrap();
        let (r, back) = stream
            .write_all_vectored(vec![Part::Bytes(Vec::new())])
            .await;
        r.unwrap();
        assert_eq!(back.len(), 1);
    });
    let got = client.join().unwrap();
    let mut expect = b"vec:".to_vec();
    expect.extend_from_slice(&expect_tail);
    expect.extend_from_slice(b":end");
    assert!(got == expect, "client saw {} bytes", got.len());
}

pub fn vectored_sends_arrive_as_the_exact_concatenation() {
    // 1..=100 parts of mixed kinds, one larger than the socket buffer (partial sends), and
    // more parts than IOV_MAX in the last case.
    for count in [1usize, 2, 3, 37, 100, 1500] {
        let listener = TcpListener::bind(loopback()).unwrap();
        let addr = listener.local_addr();
        let big = SharedBuf::new(AlignedBuf::from_slice(&pattern(6 << 20, 3)));
        let mut expect = Vec::new();
        let mut parts = Vec::new();
        for i in 0..count {
            if i % 3 == 1 {
                let len = if i == 1 { 5 << 20 } else { 4096 };
                let start = i % 1000;
                let s = big.slice(start..start + len).unwrap();
                expect.extend_from_slice(s.as_slice());
                parts.push(Part::Slice(s));
            } else {
                let v = pattern(i % 50 + 1, i as u8);
                expect.extend_from_slice(&v);
                parts.push(Part::Bytes(v));
            }
        }
        let total = expect.len();
        let reader = std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            let mut got = Vec::new();
            // Read slowly at first so the sender sees the socket buffer fill.
            let mut first = vec![0u8; total.min(1000)];
            s.read_exact(&mut first).unwrap();
            got.extend_from_slice(&first);
            std::thread::sleep(Duration::from_millis(20));
            s.read_to_end(&mut got).unwrap();
            got
        });
        let parts_len = parts.len();
        block_on(async move {
            let (stream, _) = listener.accept().await.unwrap();
            let (r, back) = stream.write_all_vectored(parts).await;
            r.unwrap();
            assert_eq!(back.len(), parts_len, "parts are handed back");
            stream.shutdown(Shutdown::Both).unwrap();
        });
        let got = reader.join().unwrap();
        assert_eq!(got.len(), total);
        assert!(got == expect, "{count} parts: bytes differ");
    }
}

pub fn a_direct_send_takes_what_fits_and_the_rest_follows_in_order() {
    let listener = TcpListener::bind(loopback()).unwrap();
    let addr = listener.local_addr();
    // More than any socket buffer takes at once: the direct send stops short.
    let big = SharedBuf::new(AlignedBuf::from_slice(&pattern(48 << 20, 9)));
    let head = pattern(28, 1);
    let mut expect = head.clone();
    expect.extend_from_slice(big.slice(0..48 << 20).unwrap().as_slice());
    let total = expect.len();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let reader = std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        // Nothing is read until the sender has seen the socket full.
        go_rx.recv().unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap();
        got
    });
    block_on(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let parts = vec![
            Part::Bytes(head),
            Part::Slice(big.slice(0..48 << 20).unwrap()),
        ];
        let sent = stream.try_send_vectored(&parts).unwrap();
        assert!(
            sent > 0 && sent < total,
            "direct send took {sent} of {total}"
        );
        // The socket is full now: another direct send takes nothing and does not block.
        assert_eq!(stream.try_send_vectored(&parts[1..]).unwrap(), 0);
        go_tx.send(()).unwrap();
        let (r, back) = stream.write_all_vectored_from(parts, sent).await;
        r.unwrap();
        assert_eq!(back.len(), 2, "parts are handed back");
        stream.shutdown(Shutdown::Both).unwrap();
    });
    let got = reader.join().unwrap();
    assert_eq!(got.len(), total);
    assert!(got == expect, "bytes differ");
}

pub fn a_peer_that_closes_gives_eof_and_send_errors_not_sigpipe() {
    let listener = TcpListener::bind(loopback()).unwrap();
    let addr = listener.local_addr();
    let client = std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"abc").unwrap();
        // Close while the server's read_exact is waiting for the rest.
        std::thread::sleep(Duration::from_millis(30));
    });
    block_on(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let (r, buf) = stream.read_exact(vec![0u8; 10]).await;
        assert_eq!(r.unwrap_err().kind(), std::io::ErrorKind::UnexpectedEof);
        assert_eq!(&buf[..3], b"abc");
        // A plain read now sees the end.
        let (r, _) = stream.read(vec![0u8; 10]).await;
        assert_eq!(r.unwrap(), 0);
        // Keep sending until the reset surfaces; the process must not die of SIGPIPE.
        let mut failed = None;
        for _ in 0..100 {
            let (r, _) = stream.write_all(vec![0u8; 1 << 16]).await;
            if let Err(e) = r {
                failed = Some(e);
                break;
            }
        }
        let e = failed.expect("sending to a closed peer must fail");
        assert!(
            matches!(e.raw_os_error(), Some(libc::EPIPE) | Some(libc::ECONNRESET)),
            "{e}"
        );
        // Vectored sends fail the same way.
        let (r, _) = stream
            .write_all_vectored(vec![Part::Bytes(vec![1; 10])])
            .await;
        assert!(r.is_err());
    });
    client.join().unwrap();
}

/// io_uring only: with system calls an accept or receive blocks the thread, so there is no
/// in-flight operation to drop.
pub fn dropped_accepts_and_reads_leave_the_listener_usable() {
    on_own_runtime(Duration::from_secs(20), || {
        let listener = TcpListener::bind(loopback()).unwrap();
        let addr = listener.local_addr();
        block_on(async move {
            // An accept that never completes, dropped.
            {
                let a = listener.accept();
                let t = raidd_rt::time::sleep(Duration::from_millis(20));
                futures::pin_mut!(a, t);
                assert!(matches!(
                    futures::future::select(a, t).await,
                    futures::future::Either::Right(_)
                ));
            }
            let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
            let client = std::thread::spawn(move || {
                let mut s = TcpStream::connect(addr).unwrap();
                // Send only once the server's reads were dropped.
                go_rx.recv().unwrap();
                s.write_all(b"hello").unwrap();
                let mut b = [0u8; 5];
                s.read_exact(&mut b).unwrap();
                b
            });
            let (stream, _) = listener.accept().await.unwrap();
            // Reads dropped before data arrives, into each buffer kind: their buffers are
            // orphaned until the kernel confirms the cancellation, not reused.
            let shared = SharedBuf::new(AlignedBuf::zeroed(8192));
            {
                let r1 = stream.read(vec![0u8; 5]);
                let r2 = stream.read_exact(AlignedBuf::zeroed(4096));
                let r3 = stream.read_exact(shared.slice_mut(0..4096).unwrap());
                let t = raidd_rt::time::sleep(Duration::from_millis(5));
                futures::pin_mut!(r1, r2, r3, t);
                let reads = futures::future::select(r1, futures::future::select(r2, r3));
                assert!(matches!(
                    futures::future::select(reads, t).await,
                    futures::future::Either::Right(_)
                ));
            }
            // The window is released once the orphaned receive is done with it.
            for _ in 0..100 {
                if shared.slice_mut(0..4096).is_ok() {
                    break;
                }
                raidd_rt::time::sleep(Duration::from_millis(1)).await;
            }
            assert!(shared.slice_mut(0..4096).is_ok());
            go_tx.send(()).unwrap();
            let (r, buf) = stream.read_exact(vec![0u8; 5]).await;
            r.unwrap();
            assert_eq!(&buf, b"hello");
            let (r, _) = stream.write_all(&b"world"[..]).await;
            r.unwrap();
            assert_eq!(&client.join().unwrap(), b"world");
        });
    });
}

/// io_uring only: an accept loop in a spawned task, stopped from outside; its in-flight
/// accept is cancelled (the runtime's shutdown, which waits for every op, returns) and does
/// not steal the next connection.
pub fn a_stopped_accept_loop_frees_its_accept() {
    on_own_runtime(Duration::from_secs(20), || {
        let listener = Rc::new(TcpListener::bind(loopback()).unwrap());
        let addr = listener.local_addr();
        block_on(async move {
            let (stop_tx, mut stop_rx) = futures::channel::oneshot::channel::<()>();
            let l = listener.clone();
            let accept_loop = spawn_local(async move {
                let mut conns = Vec::new();
                loop {
                    let accept = Box::pin(l.accept());
                    match futures::future::select(accept, &mut stop_rx).await {
                        futures::future::Either::Left((r, _)) => conns.push(r.unwrap().0),
                        futures::future::Either::Right(_) => return conns.len(),
                    }
                }
            });
            let _c1 = TcpStream::connect(addr).unwrap();
            let _c2 = TcpStream::connect(addr).unwrap();
            raidd_rt::time::sleep(Duration::from_millis(30)).await;
            stop_tx.send(()).unwrap();
            assert_eq!(accept_loop.await, 2);
            raidd_rt::time::sleep(Duration::from_millis(10)).await;
            let c3 = TcpStream::connect(addr).unwrap();
            let (_s, peer) = listener.accept().await.unwrap();
            assert_eq!(peer, c3.local_addr().unwrap());
        });
    });
}

pub fn unix_sockets_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let p = path.clone();
    let client = std::thread::spawn(move || {
        let mut s = std::os::unix::net::UnixStream::connect(p).unwrap();
        s.write_all(b"ping\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    });
    block_on(async move {
        let stream = listener.accept().await.unwrap();
        let (r, buf) = stream.read_exact(vec![0u8; 5]).await;
        r.unwrap();
        assert_eq!(&buf, b"ping\n");
        let (r, _) = stream
            .write_all_vectored(vec![
                Part::Bytes(b"po".to_vec()),
                Part::Bytes(b"ng".to_vec()),
            ])
            .await;
        r.unwrap();
    });
    assert_eq!(client.join().unwrap(), "pong");
    // A listener from std works the same.
    let path2 = dir.path().join("t.sock");
    let listener = UnixListener::from_std(std::os::unix::net::UnixListener::bind(&path2).unwrap());
    let client = std::thread::spawn(move || {
        let mut s = std::os::unix::net::UnixStream::connect(path2).unwrap();
        s.write_all(b"x").unwrap();
    });
    block_on(async move {
        let stream = listener.accept().await.unwrap();
        let (r, buf) = stream.read_exact(vec![0u8; 1]).await;
        r.unwrap();
        assert_eq!(buf, b"x");
    });
    client.join().unwrap();
}

/// Two threads, each with its own runtime, talk over one TCP connection on loopback; the
/// server's runtime also wakes the client's through a channel when it is done.
pub fn two_runtimes_on_two_threads_exchange_over_tcp() {
    const CHUNK: usize = 256 << 10;
    const CHUNKS: usize = 32;
    let std_listener = std::net::TcpListener::bind(loopback()).unwrap();
    let listener = TcpListener::from_std(std_listener).unwrap();
    let addr = listener.local_addr();
    let (done_tx, done_rx) = futures::channel::oneshot::channel::<usize>();
    let server = std::thread::spawn(move || {
        block_on(async move {
            let (stream, _) = listener.accept().await.unwrap();
            let mut buf = AlignedBuf::zeroed(CHUNK);
            let mut echoed = 0;
            loop {
                let (r, b) = stream.read_exact(buf).await;
                if let Err(e) = r {
                    assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
                    break;
                }
                let (r, b) = stream.write_all(b).await;
                r.unwrap();
                buf = b;
                echoed += CHUNK;
            }
            done_tx.send(echoed).unwrap();
        });
        raidd_rt::shutdown();
    });
    let client = std::thread::spawn(move || {
        let concurrent = raidd_rt::backend() == Backend::IoUring;
        let expected = pattern(CHUNK * CHUNKS, 5);
        let data = SharedBuf::new(AlignedBuf::from_slice(&expected));
        let echoed = block_on(async move {
            let stream = Stream::from(TcpStream::connect(addr).unwrap());
            let check = |i: usize, got: &[u8]| {
                assert!(got == &expected[i * CHUNK..(i + 1) * CHUNK], "chunk {i}");
            };
            if concurrent {
                // A writer task and a reader task share the connection.
                let w = stream.clone();
                let d = data.clone();
                let writer = spawn_local(async move {
                    for i in (0..CHUNKS).step_by(4) {
                        let parts = (i..i + 4)
                            .map(|j| Part::Slice(d.slice(j * CHUNK..(j + 1) * CHUNK).unwrap()))
                            .collect();
                        let (r, _) = w.write_all_vectored(parts).await;
                        r.unwrap();
                    }
                    w.shutdown(Shutdown::Write).unwrap();
                });
                let mut buf = vec![0u8; CHUNK];
                for i in 0..CHUNKS {
                    let (r, b) = stream.read_exact(buf).await;
                    r.unwrap();
                    check(i, &b);
                    buf = b;
                }
                writer.await;
            } else {
                // Blocking calls: one chunk at a time, so neither side waits on the other.
                let mut buf = vec![0u8; CHUNK];
                for i in 0..CHUNKS {
                    let (r, _) = stream
                        .write_all(data.slice(i * CHUNK..(i + 1) * CHUNK).unwrap())
                        .await;
                    r.unwrap();
                    let (r, b) = stream.read_exact(buf).await;
                    r.unwrap();
                    check(i, &b);
                    buf = b;
                }
                stream.shutdown(Shutdown::Write).unwrap();
            }
            // Woken from the server's thread.
            done_rx.await.unwrap()
        });
        raidd_rt::shutdown();
        echoed
    });
    assert_eq!(client.join().unwrap(), CHUNK * CHUNKS);
    server.join().unwrap();
}

pub fn signals_arrive_as_a_future() {
    let signals = Signals::new(&[libc::SIGUSR1]).unwrap();
    let got = block_on(async move {
        // SAFETY: raising a signal this thread has blocked and reads from the signalfd.
        let r = unsafe { libc::raise(libc::SIGUSR1) };
        assert_eq!(r, 0);
        signals.recv().await.unwrap()
    });
    assert_eq!(got, libc::SIGUSR1);
    assert!(Signals::new(&[9999]).is_err());
}

/// A `recv` already waiting (its thread parked in the driver) when the signal comes from
/// another thread. io_uring only: the synchronous backend would block in read(2) the same
/// way, but the case is about the driver's wake-up.
pub fn a_waiting_signal_recv_is_woken() {
    let signals = Signals::new(&[libc::SIGUSR2]).unwrap();
    let got = block_on(async move {
        let pid = std::process::id() as libc::pid_t;
        // SAFETY: plain syscall.
        let tid = unsafe { libc::gettid() };
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            // SAFETY: directed at the test thread, which has SIGUSR2 blocked (a signal for
            // the process could go to a thread that has not, and kill it).
            let r = unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, libc::SIGUSR2) };
            assert_eq!(r, 0);
        });
        let sig = signals.recv().await.unwrap();
        t.join().unwrap();
        sig
    });
    assert_eq!(got, libc::SIGUSR2);
}
