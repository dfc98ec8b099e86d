#!/usr/bin/env python3
"""Seed 003's Tab. 3 with both halves: file I/O (NFS) against block I/O (NBD) from one pool,
1 KiB to 1 MiB. raidd runs inside the ublk guest (scripts/vm.sh build-ublk): a RAID5 of
four members with two volumes; volume "files" is /dev/ublkb0 with ext4 on it, exported by
the guest kernel's NFS server and mounted over loopback (NFS v4.2); volume "blocks" is an
NBD export the guest kernel's NBD client reads. For each size fio reads sequentially, four
in flight, O_DIRECT, from a 64 MiB file on the NFS mount and from /dev/nbd0, alternating.

Under qemu's software emulation every figure is far below a real machine's: only the
shape (how IO/s, MB/s and response time move with size, and file against block) counts.

    cargo build --release -p raidd
    scripts/vm.sh build-ublk
    bench/seed003_nas.py [--raidd target/release/raidd] [--seconds 2] [--out docs/reproduction]

Writes OUT/seed003_nas.csv (size, protocol, IO/s, MB/s, mean response ms) and prints the
table.
"""
import argparse
import csv
import os
import shutil
import subprocess
import sys
import tempfile

SIZES = [1 << k for k in range(0, 11)]  # KiB: 1 .. 1024

JOB = r"""#!/bin/sh
set -u
modprobe ublk_drv || exit 3
modprobe nbd || exit 3
M="/dev/vdb /dev/vdc /dev/vdd /dev/vde"
./raidd create --level raid5 --name pool --chunk 64K $M >/dev/null 2>&1 || exit 4
./raidd volume create --name files --size 160M $M >/dev/null || exit 4
./raidd volume create --name blocks --size 96M $M >/dev/null || exit 4
cat >/tmp/raidd.toml <<EOT
control_socket = "/tmp/raidd.sock"
[nbd]
listen = "127.0.0.1:10809"
[[array]]
name = "pool"
members = ["/dev/vdb", "/dev/vdc", "/dev/vdd", "/dev/vde"]
[[export]]
name = "blocks"
array = "pool"
volume = "blocks"
[[ublk]]
array = "pool"
volume = "files"
EOT
./raidd serve --config /tmp/raidd.toml >/tmp/serve.log 2>&1 &
n=0
until [ -b /dev/ublkb0 ]; do n=$((n + 1)); [ $n -lt 600 ] || exit 5; sleep 0.1; done
mkfs.ext4 -q -F /dev/ublkb0 && mkdir -p /srv/nas /mnt/nas && mount /dev/ublkb0 /srv/nas || exit 6
mount -t nfsd nfsd /proc/fs/nfsd && rpcbind || exit 7
echo '/srv/nas 127.0.0.1(rw,sync,no_root_squash,no_subtree_check,fsid=1)' >/etc/exports
exportfs -ra && rpc.mountd && rpc.nfsd 4 || exit 7
mount -t nfs -o vers=4.2 127.0.0.1:/srv/nas /mnt/nas || exit 8
nbd-client 127.0.0.1 10809 /dev/nbd0 -N blocks >/dev/null || exit 9
dd if=/dev/urandom of=/mnt/nas/data bs=1M count=64 conv=fsync 2>/dev/null || exit 10
dd if=/dev/urandom of=/dev/nbd0 bs=1M count=64 oflag=direct 2>/dev/null || exit 10
for kib in SIZES; do
  for target in file:/mnt/nas/data block:/dev/nbd0; do
    name=${target%%:*}; path=${target#*:}
    echo 3 >/proc/sys/vm/drop_caches
    out=$(fio --name=t --filename=$path --size=64M --rw=read --bs=${kib}k --iodepth=4 \
      --ioengine=libaio --direct=1 --time_based --runtime=SECONDS --output-format=terse)
    # terse v3: field 8 read IO/s, 7 read KB/s, 40 mean total latency (us)
    echo "ROW $kib $name $(echo "$out" | cut -d';' -f7,8,40)"
  done
done
exit 0
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--raidd", default="target/release/raidd")
    ap.add_argument("--seconds", default="2")
    ap.add_argument("--vm", default=os.environ.get("RAIDD_VM_UBLK", "/var/cache/raidd-vm-ublk"))
    ap.add_argument("--out", default="docs/reproduction")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="raidd-seed003-nas-", dir="/var/tmp")
    try:
        share = os.path.join(work, "share")
        os.makedirs(share)
        shutil.copy(args.raidd, os.path.join(share, "raidd"))
        job = JOB.replace("SIZES", " ".join(str(k) for k in SIZES)).replace("SECONDS", args.seconds)
        path = os.path.join(share, "job.sh")
        with open(path, "w") as f:
            f.write(job)
        os.chmod(path, 0o755)
        disks = []
        for i in range(4):
            d = os.path.join(work, f"m{i}.img")
            with open(d, "wb") as f:
                f.truncate(128 << 20)
            disks.append(d)
        vm_sh = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "vm.sh")
        r = subprocess.run([vm_sh, "run", args.vm, share, "-t", "1800", *disks])
        log = open(os.path.join(share, "job.log")).read()
        if r.returncode != 0:
            sys.exit(f"the guest job failed ({r.returncode}):\n{log}")
        rows = []
        for line in log.splitlines():
            if not line.startswith("ROW "):
                continue
            _, kib, proto, fields = line.split(" ", 3)
            kbs, iops, lat_us = fields.split(";")
            rows.append((int(kib), proto, float(iops), float(kbs) / 1000, float(lat_us) / 1000))
        os.makedirs(args.out, exist_ok=True)
        out = os.path.join(args.out, "seed003_nas.csv")
        with open(out, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["size_kib", "protocol", "iops", "mb_s", "mean_ms"])
            for row in rows:
                w.writerow([row[0], row[1], f"{row[2]:.0f}", f"{row[3]:.2f}", f"{row[4]:.3f}"])
        print("| size | file IO/s | file MB/s | file ms | block IO/s | block MB/s | block ms |")
        print("|---|---|---|---|---|---|---|")
        for kib in SIZES:
            got = {p: r for (k, p, *r) in rows if k == kib}
            if "file" in got and "block" in got:
                fi, bl = got["file"], got["block"]
                print(f"| {kib}K | {fi[0]:.0f} | {fi[1]:.2f} | {fi[2]:.2f} "
                      f"| {bl[0]:.0f} | {bl[1]:.2f} | {bl[2]:.2f} |")
        print(f"wrote {out}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
