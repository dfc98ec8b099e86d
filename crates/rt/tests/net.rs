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
