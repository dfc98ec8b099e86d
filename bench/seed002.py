#!/usr/bin/env python3
"""Seed 002's disk I/O microbenchmark (DM), in process and over NBD: 32 workers, each
issuing 4096 sequential reads of 64 KiB to its own region (in the paper, its own raw
device), and the same with each read a vector of 16 x 4 KiB (readv); MB/s and CPU per read.
Also a sweep of the same load over request sizes, in process and over NBD, for the plot.

Writes docs/reproduction/seed002.csv (Iometer's columns; the DM rows first) and
seed002.svg:

    cargo build --release -p raidd
    bench/seed002.py [--raidd target/release/raidd] [--out docs/reproduction]

The array is a RAID0 of four 256 MiB files on /dev/shm (the paper's 32 disks on 4 RAID
controllers become what this machine has); raidd serve runs with its default threads.
Over NBD each worker has its own connection, and the server's CPU per read is measured
beside the client's (--server-pid); a vector does not exist on the wire, so the NBD row of
the readv test is the read test's.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import free_port, stop, wait_port  # noqa: E402

DM = ["--workers", "32", "--qd", "1", "--rw", "read", "--ramp", "0"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--raidd", default="target/release/raidd")
    ap.add_argument("--out", default="docs/reproduction")
    args = ap.parse_args()
    shm = tempfile.mkdtemp(prefix="raidd-seed002-", dir="/dev/shm")
    proc = None
    try:
        members = [os.path.join(shm, f"m{i}.img") for i in range(4)]
        subprocess.run([args.raidd, "create", "--level", "raid0", "--name", "dm",
                        "--size", "256M", "--force", *members],
                       check=True, stdout=subprocess.DEVNULL)
        os.makedirs(args.out, exist_ok=True)
        parts = []

        def sweep(name, targets, extra):
            csv = os.path.join(shm, f"{name}.csv")
            cmd = [args.raidd, "bench", "sweep", *targets, *extra, "--csv", csv]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            with open(csv) as f:
                lines = f.read().splitlines()
            parts.append(lines)

        # In process, bench sweep makes its RAID0 over four 256 MiB files of its own in
        # the same directory; the daemon below serves the same shape over m0-m3.img.
        local = ["--target", "raid0", "--members", "4", "--member", "file", "--dir", shm,
                 "--member-size", "256M"]
        sweep("dm-read", local, [*DM, "--sizes", "64K", "--count", "131072"])
        sweep("dm-readv", local, [*DM, "--sizes", "64K", "--count", "131072",
                                  "--iovecs", "16"])
        port = free_port()
        conf = os.path.join(shm, "raidd.toml")
        with open(conf, "w") as f:
            listed = ", ".join(f'"{m}"' for m in members)
            f.write(f'control_socket = "{shm}/raidd.sock"\n'
                    f'[nbd]\nlisten = "127.0.0.1:{port}"\n'
                    f'[[array]]\nname = "dm"\nmembers = [{listed}]\n')
        proc = subprocess.Popen([args.raidd, "serve", "--config", conf],
                                stderr=subprocess.DEVNULL)
        wait_port(port, proc, "raidd")
        nbd = ["--target", f"nbd://127.0.0.1:{port}/dm"]
        sweep("dm-nbd", nbd, [*DM, "--sizes", "64K", "--count", "131072",
                               "--server-pid", str(proc.pid)])
        svg = os.path.join(args.out, "seed002.svg")
        sweep("sizes", [*local, *nbd], [*DM, "--sizes", "4K..256K", "--count", "32768",
                                        "--plot", svg, "--title",
                                        "Seed 002's DM load (32 workers, sequential reads) "
                                        "in process and over NBD, RAID0 of 4 files"])
        csv = os.path.join(args.out, "seed002.csv")
        with open(csv, "w") as f:
            f.write(parts[0][0] + "\r\n")
            for lines in parts:
                for line in lines[1:]:
                    f.write(line + "\r\n")
        print(f"wrote {csv} and {svg}")
    finally:
        if proc:
            stop(proc)
        shutil.rmtree(shm, ignore_errors=True)


if __name__ == "__main__":
    main()
