//! Sockets and signals through the io_uring driver.
#[path = "common/net.rs"]
mod cases;

#[test]
fn uses_expected_backend() {
    assert_eq!(raidd_rt::backend(), raidd_rt::Backend::IoUring);
}
#[test]
fn many_clients_read_exact_into_aligned_buffers_and_windows() {
    cases::many_clients_read_exact_into_aligned_buffers_and_windows();
}
#[test]
fn every_buffer_kind_reads_and_writes() {
    cases::every_buffer_kind_reads_and_writes();
}
#[test]
fn vectored_sends_arrive_as_the_exact_concatenation() {
    cases::vectored_sends_arrive_as_the_exact_concatenation();
}
#[test]
fn a_direct_send_takes_what_fits_and_the_rest_follows_in_order() {
    cases::a_direct_send_takes_what_fits_and_the_rest_follows_in_order();
}
#[test]
fn a_peer_that_closes_gives_eof_and_send_errors_not_sigpipe() {
    cases::a_peer_that_closes_gives_eof_and_send_errors_not_sigpipe();
}
#[test]
fn dropped_accepts_and_reads_leave_the_listener_usable() {
    cases::dropped_accepts_and_reads_leave_the_listener_usable();
}
#[test]
fn a_stopped_accept_loop_frees_its_accept() {
    cases::a_stopped_accept_loop_frees_its_accept();
}
#[test]
fn unix_sockets_round_trip() {
    cases::unix_sockets_round_trip();
}
#[test]
fn two_runtimes_on_two_threads_exchange_over_tcp() {
    cases::two_runtimes_on_two_threads_exchange_over_tcp();
}
#[test]
fn signals_arrive_as_a_future() {
    cases::signals_arrive_as_a_future();
}
#[test]
fn a_waiting_signal_recv_is_woken() {
    cases::a_waiting_signal_recv_is_woken();
}

/// With polling on, parks spin on the ring before sleeping: socket completions, timers and
/// wakes from another thread must all still arrive (a poll that missed deferred task work
/// would hang here).
#[test]
fn polling_parks_still_see_sockets_timers_and_remote_wakes() {
    use std::io::{Read, Write};
    use std::time::{Duration, Instant};
    let listener = raidd_rt::net::TcpListener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = listener.local_addr();
    let client = std::thread::spawn(move || {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        for i in 0..200u32 {
            s.write_all(&i.to_be_bytes()).unwrap();
            let mut b = [0u8; 4];
            s.read_exact(&mut b).unwrap();
            assert_eq!(u32::from_be_bytes(b), i + 1);
            if i % 50 == 0 {
                // Longer than the poll window: the park falls back to sleeping.
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    });
    let (tx, rx) = futures::channel::oneshot::channel::<u32>();
    let waker = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        tx.send(7).unwrap();
    });
    raidd_rt::set_poll(Duration::from_micros(200));
    raidd_rt::block_on(async move {
        let (s, _) = listener.accept().await.unwrap();
        for i in 0..200u32 {
            let (r, b) = s.read_exact(vec![0u8; 4]).await;
            r.unwrap();
            let n = u32::from_be_bytes(b[..4].try_into().unwrap());
            assert_eq!(n, i);
            let (r, _) = s.write_all((n + 1).to_be_bytes().to_vec()).await;
            r.unwrap();
        }
        let start = Instant::now();
        raidd_rt::time::sleep(Duration::from_millis(5)).await;
        assert!(start.elapsed() >= Duration::from_millis(5));
        assert_eq!(rx.await.unwrap(), 7, "a wake from another thread");
    });
    raidd_rt::set_poll(Duration::ZERO);
    client.join().unwrap();
    waker.join().unwrap();
}
