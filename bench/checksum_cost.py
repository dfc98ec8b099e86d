#!/usr/bin/python3
"""What checksum tags (`raidd create --checksums crc32c`) cost: the same array with and
without them, side by side.

Each run is a fresh `raidd bench io` process over a fresh array (the engine in process: the
cost is the engine's and the members', no frontend), checksums off and on in alternating
order per round, the same pinning for both. Jobs: 4 KiB random reads and writes at QD32, 1
MiB sequential reads and writes at QD4, on RAID5 (four members) and RAID1 (two), over memory
members and files. The tag cache (16 MiB) holds every tag of these members, so after the
ramp it is warm. Prints the median IOPS with and without, and their ratio (the issue's
goals: at least 0.85 on 4 KiB random I/O and 0.95 on 1 MiB sequential).

--via nbd measures what a client sees instead: each run is a fresh `raidd serve` (one
worker thread, pinned to --cpus) over an array made by `raidd create --assume-clean` on
image files (memory: in /dev/shm; file: in --dir, opened O_DIRECT), and fio's nbd engine,
pinned to --client-cpus, runs the job against it; the member and the frontend's costs are
then in both figures.

Usage: bench/checksum_cost.py [--raidd target/release/raidd] [--rounds 3] [--seconds 3]
                              [--media mem,file] [--dir /var/tmp] [--cpus 0] [--json OUT]
                              [--via engine|nbd] [--client-cpus 1]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import fio_nbd, free_port, parse_size, stop, wait_port  # noqa: E402

JOBS = [
    # name, rw, bs, qd
    ("4k-randread-qd32", "randread", "4K", 32),
    ("4k-randwrite-qd32", "randwrite", "4K", 32),
    ("1m-read-qd4", "read", "1M", 4),
    ("1m-write-qd4", "write", "1M", 4),
]
LEVELS = {"raid5": 4, "raid1": 2}


def run_nbd(args, level, members, checksums, media, job, scratch):
    """IOPS of `job` through NBD: a fresh array, a fresh daemon, fio as the client."""
    d = tempfile.mkdtemp(prefix="raidd-cksum-", dir="/dev/shm" if media == "mem" else scratch)
    proc = None
    try:
        imgs = [os.path.join(d, f"m{k}.img") for k in range(members)]
        cmd = [args.raidd, "create", "--level", level, "--name", "ck", "--chunk", "64K",
               "--size", args.member_size, "--assume-clean"]
        if checksums:
            cmd += ["--checksums", "crc32c"]
        subprocess.run(cmd + imgs, check=True, capture_output=True)
        port = free_port()
        conf = os.path.join(d, "raidd.toml")
        listed = ", ".join(f'"{m}"' for m in imgs)
        with open(conf, "w") as f:
            f.write(f'control_socket = "{d}/ctl"\nthreads = 1\n'
                    f'[[array]]\nname = "ck"\nmembers = [{listed}]\n'
                    f'[nbd]\nlisten = "127.0.0.1:{port}"\n')
        proc = subprocess.Popen(["taskset", "-c", args.cpus, args.raidd, "serve",
                                 "--config", conf], stderr=subprocess.DEVNULL)
        wait_port(port, proc, "raidd serve")
        # The data area a client may use: the array's size less a little, as fio wants a
        # multiple of the block size.
        size = parse_size(args.member_size) * (members - 1 if level == "raid5" else 1) // 2
        got = fio_nbd(f"nbd://127.0.0.1:{port}/ck", job, args.seconds, size, args.client_cpus)
        return got["iops"]
    finally:
        if proc:
            stop(proc)
        shutil.rmtree(d, ignore_errors=True)


def run_one(args, level, members, checksums, media, job, scratch):
    if args.via == "nbd":
        return run_nbd(args, level, members, checksums, media, job, scratch)
    _, rw, bs, qd = job
    cmd = ["taskset", "-c", args.cpus, args.raidd, "--json", "bench", "io",
           "--target", level, "--members", str(members), "--member-size", args.member_size,
           "--chunk", "64K", "--rw", rw, "--bs", bs, "--qd", str(qd),
           "--seconds", str(args.seconds)]
    if checksums:
        cmd.append("--checksums")
    d = None
    if media == "file":
        d = tempfile.mkdtemp(prefix="raidd-cksum-", dir=scratch)
        cmd += ["--dir", d]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed:\n{out.stderr}")
        return json.loads(out.stdout)["iops"]
    finally:
        if d:
            shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--raidd", default="target/release/raidd")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=3)
    ap.add_argument("--member-size", default="256M")
    ap.add_argument("--media", default="mem,file")
    ap.add_argument("--levels", default="raid5,raid1")
    ap.add_argument("--dir", default="/var/tmp", help="where file members live")
    ap.add_argument("--cpus", default="0")
    ap.add_argument("--json", help="write the raw results here")
    ap.add_argument("--via", choices=["engine", "nbd"], default="engine")
    ap.add_argument("--client-cpus", default="1", help="fio's CPUs (--via nbd)")
    args = ap.parse_args()
    results = {}
    print("| members, level, job | off | on | on/off |")
    print("|---|---|---|---|")
    for media in args.media.split(","):
        for level in args.levels.split(","):
            for job in JOBS:
                runs = {False: [], True: []}
                for r in range(args.rounds):
                    for c in ([False, True] if r % 2 == 0 else [True, False]):
                        runs[c].append(run_one(args, level, LEVELS[level], c, media, job,
                                               args.dir))
                off, on = statistics.median(runs[False]), statistics.median(runs[True])
                key = f"{media} {level} {job[0]}"
                results[key] = {"off": runs[False], "on": runs[True]}
                print(f"| {key} | {off:,.0f} | {on:,.0f} | {on / off:.2f} |", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
