//! The io_uring driver with `RAIDD_RING_WAIT=poll`: a thread sleeps in poll(2) on an eventfd
//! the ring signals instead of in io_uring_enter. Every case of the ring's own tests runs
//! here too; a signal that did not come for some completion (deferred task work included)
//! would hang the case that waits for it.
#[path = "common/net.rs"]
mod cases;
mod common;

fn wait_in_poll() {
    std::env::set_var("RAIDD_RING_WAIT", "poll");
}

#[test]
fn uses_the_ring_and_waits_in_poll() {
    wait_in_poll();
    assert_eq!(raidd_rt::backend(), raidd_rt::Backend::IoUring);
    assert_eq!(raidd_rt::ring_wait(), raidd_rt::RingWait::Poll);
    // Each thread's driver registers its own eventfd.
    let other = std::thread::spawn(raidd_rt::ring_wait).join().unwrap();
    assert_eq!(other, raidd_rt::RingWait::Poll);
}

/// A thread that only sleeps is woken by its timer: nothing else completes meanwhile.
#[test]
fn a_lone_timer_wakes_a_thread_asleep_in_poll() {
    wait_in_poll();
    let t = std::time::Instant::now();
    raidd_rt::block_on(raidd_rt::time::sleep(std::time::Duration::from_millis(40)));
    let took = t.elapsed();
    assert!(
        took >= std::time::Duration::from_millis(40),
        "woke after {took:?}"
    );
    assert!(
        took < std::time::Duration::from_secs(5),
        "woke after {took:?}"
    );
}

macro_rules! cases {
    ($($module:ident :: $name:ident $(($arg:expr))?),* $(,)?) => {$(
        #[test]
        fn $name() {
            wait_in_poll();
            $module::$name($($arg)?);
        }
    )*};
}

cases! {
    common::block_on_returns_value,
    common::spawned_tasks_run_and_join,
    common::vectored_scatter_gather,
    common::many_concurrent_ops_exceed_ring,
    common::dropped_ops_are_safe,
    common::sleep_sleeps,
    common::cross_thread_wake,
    common::repeated_cross_thread_wakes,
    common::threads_have_independent_runtimes,
    common::unplugged_waits_for_an_idle_thread,
    cases::many_clients_read_exact_into_aligned_buffers_and_windows,
    cases::every_buffer_kind_reads_and_writes,
    cases::vectored_sends_arrive_as_the_exact_concatenation,
    cases::a_direct_send_takes_what_fits_and_the_rest_follows_in_order,
    cases::a_peer_that_closes_gives_eof_and_send_errors_not_sigpipe,
    cases::dropped_accepts_and_reads_leave_the_listener_usable,
    cases::a_stopped_accept_loop_frees_its_accept,
    cases::unix_sockets_round_trip,
    cases::two_runtimes_on_two_threads_exchange_over_tcp,
    cases::signals_arrive_as_a_future,
    cases::a_waiting_signal_recv_is_woken,
}

#[test]
fn file_roundtrip_direct() {
    wait_in_poll();
    common::file_roundtrip(true);
}

#[test]
fn file_roundtrip_buffered() {
    wait_in_poll();
    common::file_roundtrip(false);
}
