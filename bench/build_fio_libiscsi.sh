#!/bin/sh
# Build fio with its libiscsi engine, for bench/iscsi_vs_tgt.py.
#
# Debian's fio (3.33) is built without libiscsi, so the iSCSI benchmark needs its own fio.
# Given fio's source tree (ideally tag fio-3.33, the same version as Debian's fio, e.g.
# `git --git-dir=FIO.git archive fio-3.33 | tar -x -C /var/cache/raidd-fio-src`), this
# installs libiscsi's headers, configures fio with --enable-libiscsi, builds it and copies
# the binary to DEST (default /var/cache/raidd-fio/fio).
#
# Usage: bench/build_fio_libiscsi.sh SRC_DIR [DEST]
set -eu
src=${1:?usage: $0 SRC_DIR [DEST]}
dest=${2:-/var/cache/raidd-fio/fio}
if ! dpkg -s libiscsi-dev >/dev/null 2>&1; then
    apt-get install -y libiscsi-dev
fi
cd "$src"
./configure --enable-libiscsi
grep -q '^CONFIG_LIBISCSI=y' config-host.mak || {
    echo "configure did not enable libiscsi" >&2
    exit 1
}
make -j"$(nproc)"
mkdir -p "$(dirname "$dest")"
install -m 0755 fio "$dest"
"$dest" --version
"$dest" --enghelp | grep -q libiscsi || {
    echo "$dest has no libiscsi engine" >&2
    exit 1
}
echo "installed $dest"
