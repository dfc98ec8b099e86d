#!/usr/bin/env bash
# Runs raidd-parity's tests (every SIMD path included) under AddressSanitizer.
#
# Sanitizers are a nightly flag; RUSTC_BOOTSTRAP=1 unlocks it on the stable toolchain, whose
# rust-std ships the ASan runtime for x86_64-unknown-linux-gnu. --target keeps the flag off build
# scripts and proc macros. A separate target dir keeps instrumented artifacts apart.
#
# Checked to catch a one-byte over-read in the AVX2 load and in the scalar word loop.
set -euo pipefail
cd "$(dirname "$0")/../.."
export RUSTC_BOOTSTRAP=1
export RUSTFLAGS="-Zsanitizer=address"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/tmp/target-parity-asan}"
exec cargo test -p raidd-parity --target x86_64-unknown-linux-gnu "$@"
