#!/usr/bin/env bash
# The whole test suite: formatting, lints, and every test (unit, property, kernel fixtures,
# mdadm interop, loop devices, simulation, the real kernel in a qemu guest). Installs what it
# needs on Debian 12.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy -D warnings"
cargo clippy --workspace --all-targets --quiet -- -D warnings
echo "== walls: no import circles in the engine and the server, no function over 100 lines"
python3 scripts/walls.py
echo "== cargo test"
cargo test --workspace --quiet 2>&1
echo "== unsafe code under AddressSanitizer"
./scripts/asan.sh 2>&1
echo "== the real Linux kernel in a qemu guest (md both ways, its NBD client and iSCSI initiator)"
export RAIDD_VM=${RAIDD_VM:-/var/cache/raidd-vm}
./scripts/vm.sh build "$RAIDD_VM"
cargo test -p raidd --test kernel --quiet -- --ignored 2>&1
echo "== all tests passed"
