#!/usr/bin/env bash
# Runs the tests of the crates with unsafe code (raidd-rt: io_uring ops, buffers; raidd-parity:
# SIMD) and of the engine built on them under AddressSanitizer, leak checks included.
#
# Sanitizers are a nightly flag; RUSTC_BOOTSTRAP=1 unlocks it on the stable toolchain, whose
# rust-std ships the ASan runtime for x86_64-unknown-linux-gnu. --target keeps the flag off build
# scripts and proc macros; a separate target dir keeps instrumented artifacts apart.
# (Checked to catch a one-byte over-read in the AVX2 load and in the scalar word loop.)
set -euo pipefail
cd "$(dirname "$0")/.."
export RUSTC_BOOTSTRAP=1
export RUSTFLAGS="-Zsanitizer=address"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR_ASAN:-target/asan}"
exec cargo test --quiet -p raidd-rt -p raidd-parity -p raidd-engine --target x86_64-unknown-linux-gnu "$@"
