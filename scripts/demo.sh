#!/usr/bin/env bash
# The main job: create a RAID5 from four image files in ./demo, write self-verifying data
# through raidd, read it back and check every sector, show the array's details, then serve
# it over NBD on 127.0.0.1:10809 and iSCSI on 127.0.0.1:3260 until Ctrl-C (which stops it
# cleanly).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh

cargo build --release --quiet -p raidd
raidd=target/release/raidd
dir=${RAIDD_DEMO_DIR:-demo}
mkdir -p "$dir"
members=("$dir"/disk{0,1,2,3}.img)
if [ ! -e "${members[0]}" ]; then
    echo "== creating a RAID5 over four 256 MiB image files in $dir/"
    "$raidd" create --level raid5 --name demo --size 256M "${members[@]}"
else
    echo "== using the existing array in $dir/ (delete the directory to start over)"
fi
echo "== writing 64 MiB of self-verifying data through raidd"
"$raidd" pattern write --offset 0 --length 64M --seed 2026 --generation 1 "${members[@]}"
echo "== reading it back and checking every sector"
"$raidd" pattern verify --offset 0 --length 64M --seed 2026 --generation 1 "${members[@]}"
echo "== the same data read with one member missing (degraded read through parity)"
"$raidd" pattern verify --offset 0 --length 64M --seed 2026 --generation 1 "${members[@]:1}"
echo "== raidd detail"
"$raidd" detail "${members[@]}"
echo "== what Linux md sees (mdadm --examine on one member)"
if command -v mdadm >/dev/null 2>&1; then mdadm --examine "${members[0]}"; fi

port=${RAIDD_DEMO_PORT:-10809}
iport=${RAIDD_DEMO_ISCSI_PORT:-3260}
cat > "$dir/raidd.toml" <<EOF
# Written by scripts/demo.sh. Paths are relative to this file.
control_socket = "raidd.sock"
[nbd]
listen = "127.0.0.1:$port"
[iscsi]
listen = "127.0.0.1:$iport"
state_dir = "state"
[[array]]
name = "demo"
members = ["disk0.img", "disk1.img", "disk2.img", "disk3.img"]
EOF
cat <<EOF
== serving the array over NBD on 127.0.0.1:$port and iSCSI on 127.0.0.1:$iport
   (Ctrl-C stops it cleanly); connect from another shell:
     nbdinfo nbd://127.0.0.1:$port/demo
     qemu-img info nbd://127.0.0.1:$port/demo
     nbdcopy nbd://127.0.0.1:$port/demo copy.img
     iscsi-ls iscsi://127.0.0.1:$iport
     iscsi-inq iscsi://127.0.0.1:$iport/iqn.2026-11.org.raidd:demo/0
     qemu-img info iscsi://127.0.0.1:$iport/iqn.2026-11.org.raidd:demo/0
     $raidd status --control $dir/raidd.sock
EOF
exec "$raidd" serve -v --config "$dir/raidd.toml"
