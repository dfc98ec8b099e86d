//! The runtime with synchronous system calls (RAIDD_NO_URING=1).
mod common;

fn force_sync() {
    std::env::set_var("RAIDD_NO_URING", "1");
}

#[test]
fn uses_expected_backend() {
    force_sync();
    assert_eq!(raidd_rt::backend(), raidd_rt::Backend::Sync);
}
#[test]
fn block_on_returns_value() {
    force_sync();
    common::block_on_returns_value();
}
#[test]
fn spawned_tasks_run_and_join() {
    force_sync();
    common::spawned_tasks_run_and_join();
}
#[test]
fn file_roundtrip_direct() {
    force_sync();
    common::file_roundtrip(true);
}
#[test]
fn file_roundtrip_buffered() {
    force_sync();
    common::file_roundtrip(false);
}
#[test]
fn vectored_scatter_gather() {
    force_sync();
    common::vectored_scatter_gather();
}
#[test]
fn many_concurrent_ops_exceed_ring() {
    force_sync();
    common::many_concurrent_ops_exceed_ring();
}
#[test]
fn dropped_ops_are_safe() {
    force_sync();
    common::dropped_ops_are_safe();
}
#[test]
fn sleep_sleeps() {
    force_sync();
    common::sleep_sleeps();
}
#[test]
fn cross_thread_wake() {
    force_sync();
    common::cross_thread_wake();
}
#[test]
fn threads_have_independent_runtimes() {
    force_sync();
    common::threads_have_independent_runtimes();
}
#[test]
fn unplugged_waits_for_an_idle_thread() {
    force_sync();
    common::unplugged_waits_for_an_idle_thread();
}
#[test]
fn repeated_cross_thread_wakes() {
    force_sync();
    common::repeated_cross_thread_wakes();
}
