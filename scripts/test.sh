#!/usr/bin/env bash
# The whole test suite: formatting, lints, and every test (unit, property, kernel fixtures,
# mdadm interop, loop devices, simulation, the real kernel in qemu guests: Debian 12's stock
# kernel for md, nbd and iSCSI, its 6.12 kernel for ublk). Installs what it
# needs on Debian 12.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
# One build from scratch gains nothing from incremental caches, which would take gigabytes of
# a CI machine's disk next to the guests' images.
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}

# The two guests are built (when their recipes changed) while the host compiles and tests:
# debootstrap waits on the network and the disk much of its time.
export RAIDD_VM=${RAIDD_VM:-/var/cache/raidd-vm}
export RAIDD_VM_UBLK=${RAIDD_VM_UBLK:-/var/cache/raidd-vm-ublk}
guest_log=$(mktemp)
(./scripts/vm.sh build "$RAIDD_VM" && ./scripts/vm.sh build-ublk "$RAIDD_VM_UBLK") >"$guest_log" 2>&1 &
guest_pid=$!

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy -D warnings"
cargo clippy --workspace --all-targets --quiet -- -D warnings
echo "== walls: no import circles, no function over 100 lines, Array a facade, invariants asserted"
python3 scripts/walls.py
echo "== cargo test"
# cargo-nextest (on this project's machines) runs the test binaries side by side, each test
# in a process of its own; plain cargo test runs them one binary after another.
if cargo nextest --version >/dev/null 2>&1; then
    cargo nextest run --workspace --no-fail-fast --status-level fail --final-status-level slow 2>&1
    cargo test --workspace --doc --quiet 2>&1
else
    cargo test --workspace --quiet 2>&1
fi
echo "== unsafe code under AddressSanitizer"
./scripts/asan.sh 2>&1
echo "== the guests"
wait "$guest_pid" || { cat "$guest_log"; echo "the guests could not be built" >&2; exit 1; }
cat "$guest_log"
rm -f "$guest_log"
echo "== the real Linux kernel in a qemu guest (md both ways, its NBD client and iSCSI initiator)"
# Three guests at a time: much of each job waits on the guest's own I/O and timers.
cargo test -p raidd --test kernel --quiet -- --ignored --test-threads 3 2>&1
echo "== raidd inside a guest on Debian 12's 6.12 kernel: arrays as ublk block devices"
# Two guests at a time: their jobs wait on rate-limited fio much of the time.
cargo test -p raidd --test ublk --quiet -- --ignored --test-threads 2 2>&1
echo "== the Debian package: built, lintian, installed with dpkg -i and apt-get in fresh roots"
deb=$(./scripts/package.sh | tail -1)
./scripts/package_check.sh "$deb" "$RAIDD_VM" 2>&1
echo "== all tests passed"
