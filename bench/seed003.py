#!/usr/bin/env python3
"""Seed 003's Tab. 3, block half: throughput (IO/s and MB/s) and mean response time against
request size, 1 KiB to 1 MiB, over NBD and over iSCSI to the same RAID5 served by one
`raidd serve`. The file half (NFS over the same pool) is bench/seed003_nas.py.

Writes docs/reproduction/seed003.csv (Iometer's columns) and seed003.svg:

    cargo build --release -p raidd
    bench/seed003.py [--raidd target/release/raidd] [--seconds 2] [--out docs/reproduction]

The array is four 256 MiB members on /dev/shm; Iometer-like load: sequential reads, 4 in
flight from one worker (the paper does not give its access specification).
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import free_port, stop, wait_port  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--raidd", default="target/release/raidd")
    ap.add_argument("--seconds", default="2")
    ap.add_argument("--out", default="docs/reproduction")
    args = ap.parse_args()
    shm = tempfile.mkdtemp(prefix="raidd-seed003-", dir="/dev/shm")
    proc = None
    try:
        members = [os.path.join(shm, f"m{i}.img") for i in range(4)]
        subprocess.run([args.raidd, "create", "--level", "raid5", "--name", "tab3",
                        "--size", "256M", "--force", *members],
                       check=True, stdout=subprocess.DEVNULL)
        nport, iport = free_port(), free_port()
        conf = os.path.join(shm, "raidd.toml")
        with open(conf, "w") as f:
            listed = ", ".join(f'"{m}"' for m in members)
            f.write(f'control_socket = "{shm}/raidd.sock"\n'
                    f'[nbd]\nlisten = "127.0.0.1:{nport}"\n'
                    f'[iscsi]\nlisten = "127.0.0.1:{iport}"\nstate_dir = "{shm}/state"\n'
                    f'[[array]]\nname = "tab3"\nmembers = [{listed}]\n')
        log = open(os.path.join(shm, "raidd.log"), "w")
        proc = subprocess.Popen([args.raidd, "serve", "--config", conf], stderr=log)
        wait_port(nport, proc, "raidd (NBD)")
        wait_port(iport, proc, "raidd (iSCSI)")
        os.makedirs(args.out, exist_ok=True)
        csv = os.path.join(args.out, "seed003.csv")
        svg = os.path.join(args.out, "seed003.svg")
        subprocess.run([args.raidd, "bench", "sweep",
                        "--target", f"nbd://127.0.0.1:{nport}/tab3",
                        "--target", f"iscsi://127.0.0.1:{iport}/iqn.2026-11.org.raidd:tab3/0",
                        "--sizes", "1K..1M", "--rw", "read", "--qd", "4",
                        "--server-pid", str(proc.pid),
                        "--seconds", args.seconds, "--csv", csv, "--plot", svg,
                        "--title", "Seed 003 Tab. 3, block half: one RAID5 (4 x 256 MiB on "
                        "/dev/shm), sequential reads, QD4, over NBD and over iSCSI"],
                       check=True)
        print(f"wrote {csv} and {svg}")
    except subprocess.CalledProcessError:
        with open(os.path.join(shm, "raidd.log")) as f:
            sys.stderr.write(f.read()[-3000:])
        raise
    finally:
        if proc:
            stop(proc)
        shutil.rmtree(shm, ignore_errors=True)


if __name__ == "__main__":
    main()
