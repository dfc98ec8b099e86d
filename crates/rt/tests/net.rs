//! Sockets and signals through the io_uring driver.
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::Duration;

use raidd_rt::net::{Part, TcpListener, UnixListener};
use raidd_rt::signal::Signals;
use raidd_rt::{block_on, spawn_local, AlignedBuf, SharedBuf};

fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn read_exact_into_aligned_buffers_and_windows_from_many_clients() {
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
            })
        })
        .collect();
    block_on(async move {
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let (stream, _peer) = listener.accept().await.unwrap();
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
                let (r, _) = stream.write_all(head[..16].to_vec()).await;
                r.unwrap();
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

#[test]
fn vectored_sends_arrive_as_the_exact_concatenation() {
    // 1..=100 parts of mixed kinds, one larger than the socket buffer (partial sends), and
    // more parts than IOV_MAX in the last case.
    for count in [1usize, 2, 37, 100, 1500] {
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

#[test]
fn a_peer_that_closes_gives_eof_and_send_errors_not_sigpipe() {
    let listener = TcpListener::bind(loopback()).unwrap();
    let addr = listener.local_addr();
    let client = std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"abc").unwrap();
        // Closing with unread data makes the kernel reset the connection.
    });
    block_on(async move {
        let (stream, _) = listener.accept().await.unwrap();
        client.join().unwrap();
        let (r, _) = stream.read_exact(vec![0u8; 10]).await;
        assert_eq!(r.unwrap_err().kind(), std::io::ErrorKind::UnexpectedEof);
        // Keep sending until the reset surfaces; the process must not die of SIGPIPE.
        let mut failed = false;
        for _ in 0..100 {
            let (r, _) = stream.write_all(vec![0u8; 1 << 16]).await;
            if r.is_err() {
                failed = true;
                break;
            }
        }
        assert!(failed, "sending to a closed peer must fail");
    });
}

#[test]
fn dropped_accepts_and_reads_leave_the_listener_usable() {
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
        let client = std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            std::thread::sleep(Duration::from_millis(50));
            s.write_all(b"hello").unwrap();
            let mut b = [0u8; 5];
            s.read_exact(&mut b).unwrap();
            b
        });
        let (stream, _) = listener.accept().await.unwrap();
        // A read dropped before data arrives: its buffer is orphaned, not reused.
        {
            let r = stream.read(vec![0u8; 5]);
            let t = raidd_rt::time::sleep(Duration::from_millis(5));
            futures::pin_mut!(r, t);
            let _ = futures::future::select(r, t).await;
        }
        let (r, buf) = stream.read_exact(vec![0u8; 5]).await;
        // The cancelled read may or may not have taken the bytes first; if it did, the
        // connection lost them, which is why callers drop reads only when closing.
        if r.is_ok() {
            assert_eq!(&buf, b"hello");
        }
        let (r, _) = stream.write_all(&b"world"[..]).await;
        r.unwrap();
        client.join().unwrap()
    });
}

#[test]
fn unix_sockets_round_trip() {
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
        let (r, _) = stream.write_all(b"pong".to_vec()).await;
        r.unwrap();
    });
    assert_eq!(client.join().unwrap(), "pong");
}

#[test]
fn signals_arrive_as_a_future() {
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
