#!/usr/bin/env bash
# The whole test suite: formatting, lints, and every test (unit, property, kernel fixtures,
# mdadm interop, loop devices, simulation, the real kernel in qemu guests: Debian 12's stock
# kernel for md, nbd and iSCSI, its 6.12 kernel for ublk). Installs what it
# needs on Debian 12.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy -D warnings"
cargo clippy --workspace --all-targets --quiet -- -D warnings
echo "== walls: no import circles, no function over 100 lines, Array a facade, invariants asserted"
python3 scripts/walls.py
echo "== cargo test"
cargo test --workspace --quiet 2>&1
echo "== unsafe code under AddressSanitizer"
./scripts/asan.sh 2>&1
echo "== the real Linux kernel in a qemu guest (md both ways, its NBD client and iSCSI initiator)"
export RAIDD_VM=${RAIDD_VM:-/var/cache/raidd-vm}
./scripts/vm.sh build "$RAIDD_VM"
cargo test -p raidd --test kernel --quiet -- --ignored 2>&1
echo "== raidd inside a guest on Debian 12's 6.12 kernel: arrays as ublk block devices"
export RAIDD_VM_UBLK=${RAIDD_VM_UBLK:-/var/cache/raidd-vm-ublk}
./scripts/vm.sh build-ublk "$RAIDD_VM_UBLK"
cargo test -p raidd --test ublk --quiet -- --ignored --test-threads 1 2>&1
echo "== all tests passed"
