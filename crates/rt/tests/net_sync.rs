//! Sockets and signals with synchronous system calls (RAIDD_NO_URING=1). Cases that drop
//! in-flight accepts or receives are io_uring only: here those calls block the thread.
#[path = "common/net.rs"]
mod cases;

fn force_sync() {
    std::env::set_var("RAIDD_NO_URING", "1");
}

#[test]
fn uses_expected_backend() {
    force_sync();
    assert_eq!(raidd_rt::backend(), raidd_rt::Backend::Sync);
}
#[test]
fn many_clients_read_exact_into_aligned_buffers_and_windows() {
    force_sync();
    cases::many_clients_read_exact_into_aligned_buffers_and_windows();
}
#[test]
fn every_buffer_kind_reads_and_writes() {
    force_sync();
    cases::every_buffer_kind_reads_and_writes();
}
#[test]
fn vectored_sends_arrive_as_the_exact_concatenation() {
    force_sync();
    cases::vectored_sends_arrive_as_the_exact_concatenation();
}
#[test]
fn a_direct_send_takes_what_fits_and_the_rest_follows_in_order() {
    cases::a_direct_send_takes_what_fits_and_the_rest_follows_in_order();
}
#[test]
fn a_peer_that_closes_gives_eof_and_send_errors_not_sigpipe() {
    force_sync();
    cases::a_peer_that_closes_gives_eof_and_send_errors_not_sigpipe();
}
#[test]
fn unix_sockets_round_trip() {
    force_sync();
    cases::unix_sockets_round_trip();
}
#[test]
fn two_runtimes_on_two_threads_exchange_over_tcp() {
    force_sync();
    cases::two_runtimes_on_two_threads_exchange_over_tcp();
}
#[test]
fn signals_arrive_as_a_future() {
    force_sync();
    cases::signals_arrive_as_a_future();
}
