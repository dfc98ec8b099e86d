//! The runtime on io_uring.
mod common;

#[test]
fn uses_expected_backend() {
    assert_eq!(raidd_rt::backend(), raidd_rt::Backend::IoUring);
}
#[test]
fn block_on_returns_value() {
    common::block_on_returns_value();
}
#[test]
fn spawned_tasks_run_and_join() {
    common::spawned_tasks_run_and_join();
}
#[test]
fn file_roundtrip_direct() {
    common::file_roundtrip(true);
}
#[test]
fn file_roundtrip_buffered() {
    common::file_roundtrip(false);
}
#[test]
fn vectored_scatter_gather() {
    common::vectored_scatter_gather();
}
#[test]
fn many_concurrent_ops_exceed_ring() {
    common::many_concurrent_ops_exceed_ring();
}
#[test]
fn dropped_ops_are_safe() {
    common::dropped_ops_are_safe();
}
#[test]
fn sleep_sleeps() {
    common::sleep_sleeps();
}
#[test]
fn cross_thread_wake() {
    common::cross_thread_wake();
}
#[test]
fn threads_have_independent_runtimes() {
    common::threads_have_independent_runtimes();
}
#[test]
fn unplugged_waits_for_an_idle_thread() {
    common::unplugged_waits_for_an_idle_thread();
}
#[test]
fn repeated_cross_thread_wakes() {
    common::repeated_cross_thread_wakes();
}
