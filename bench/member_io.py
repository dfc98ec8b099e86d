#!/usr/bin/python3
"""How raidd's member I/O reaches the kernel, over NBD: one server setting on and off.

raidd serves an array over file members on a real filesystem (O_DIRECT, default /var/tmp:
tmpfs members run as plain system calls and never reach the ring). fio's nbd engine runs
each job against a fresh `raidd serve` with the setting on (the default) and off, in
alternating order per round; both servers are pinned to the same CPU and fio to another.
The script prints, per job, the median IOPS of each, their ratio (on / off), the server's
CPU time per request, and how many kernel operations each member I/O took (from the
worker's exit line).

--compare gather: adjacent requests gathered at the member (off: RAIDD_NO_GATHER=1). A
client's sequential small requests reach a member as separate reads or writes (RAID0 with
64 KiB chunks sends 16 consecutive 4 KiB requests to one member, end to end); gathered,
those queued together leave as one vectored operation. Random jobs are the control.

--compare registered: buffer memory registered with io_uring, so member I/O goes out as
fixed-buffer operations (off: registered_buffers = "0").

--compare binary: this build (--raidd, "on") against another (--base, "off"), same
settings; for changes with no switch of their own.

Usage: bench/member_io.py [--compare gather|registered|binary] [--base RAIDD]
                          [--rounds N (5)] [--seconds S (4)]
                          [--level raid0] [--members 4] [--dir /var/tmp]
                          [--jobs 4k-seqwrite-qd32,...] [--json OUT]
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

from benchlib import cpu_seconds, fio_nbd, free_port, parse_size, stop, wait_port

JOBS = [
    # name, rw, bs, iodepth
    ("4k-seqwrite-qd32", "write", "4k", 32),
    ("4k-seqread-qd32", "read", "4k", 32),
    ("16k-seqwrite-qd16", "write", "16k", 16),
    ("4k-randwrite-qd32", "randwrite", "4k", 32),
    ("4k-randread-qd32", "randread", "4k", 32),
    ("1m-write-qd8", "write", "1m", 8),
    ("1m-read-qd8", "read", "1m", 8),
    ("4k-randread-qd1", "randread", "4k", 1),
    ("4k-randwrite-qd1", "randwrite", "4k", 1),
]
MODES = ["on", "off"]


def worker_ops(log_path):
    """Member reads and writes, and kernel operations, from the worker's exit line."""
    pat = re.compile(r"(\d+) member reads and writes went to the kernel as (\d+) operations")
    member = kernel = 0
    with open(log_path) as f:
        for line in f:
            m = pat.search(line)
            if m:
                member += int(m.group(1))
                kernel += int(m.group(2))
    return member, kernel


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--compare", choices=["gather", "registered", "binary"], default="gather")
    ap.add_argument("--base", help="--compare binary: the raidd build to compare against")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=4)
    ap.add_argument("--level", default="raid0")
    ap.add_argument("--members", type=int, default=4)
    ap.add_argument("--member-size", default="1G")
    ap.add_argument("--dir", default="/var/tmp")
    ap.add_argument("--server-cpus", default="0")
    ap.add_argument("--client-cpus", default="1")
    ap.add_argument("--raidd", default="target/release/raidd")
    ap.add_argument("--jobs", help="comma-separated job names (default: all)")
    ap.add_argument("--json", help="write the raw results here")
    args = ap.parse_args()
    jobs = [j for j in JOBS if not args.jobs or j[0] in args.jobs.split(",")]
    if not jobs:
        sys.exit(f"no such job; jobs: {', '.join(j[0] for j in JOBS)}")
    if (args.compare == "binary") != (args.base is not None):
        sys.exit("--base goes with --compare binary, and --compare binary needs it")

    work = tempfile.mkdtemp(prefix="raidd-member-io-", dir=args.dir)
    proc = None
    try:
        members = [os.path.join(work, f"m{i}.img") for i in range(args.members)]
        # Written through once: O_DIRECT writes into holes or unwritten extents pay the
        # filesystem's allocation, which would swamp what is measured.
        for m in members:
            subprocess.run(["dd", "if=/dev/zero", f"of={m}", "bs=1M", "oflag=direct",
                            f"count={parse_size(args.member_size) >> 20}", "status=none"],
                           check=True)
        subprocess.run([args.raidd, "create", "--level", args.level, "--name", "bench",
                        "--force", *members], check=True, stdout=subprocess.DEVNULL)
        conf = os.path.join(work, "raidd.toml")
        sock = os.path.join(work, "raidd.sock")
        quoted = ", ".join(f'"{m}"' for m in members)
        # fio covers the first half of the array: both directions stay inside written data.
        size = "1g"

        results = {m: {j[0]: [] for j in jobs} for m in MODES}
        for r in range(args.rounds):
            order = MODES if r % 2 == 0 else MODES[::-1]
            for job in jobs:
                for mode in order:
                    port = free_port()
                    off = mode == "off"
                    registered = "0" if off and args.compare == "registered" else "64M"
                    with open(conf, "w") as f:
                        f.write(f'control_socket = "{sock}"\nthreads = 1\n'
                                f'registered_buffers = "{registered}"\n'
                                f'[nbd]\nlisten = "127.0.0.1:{port}"\n'
                                f'[[array]]\nname = "bench"\nmembers = [{quoted}]\n')
                    no_gather = off and args.compare == "gather"
                    env = {**os.environ, "RAIDD_NO_GATHER": "1" if no_gather else "0"}
                    log_path = os.path.join(work, "serve.log")
                    log = open(log_path, "w")
                    binary = args.base if off and args.compare == "binary" else args.raidd
                    proc = subprocess.Popen(
                        ["taskset", "-c", args.server_cpus, binary, "serve", "-v",
                         "--config", conf], stderr=log, env=env)
                    wait_port(port, proc, "raidd")
                    c0 = cpu_seconds(proc.pid)
                    side = fio_nbd(f"nbd://127.0.0.1:{port}/bench", job, args.seconds, size,
                                   args.client_cpus)
                    iops, ios = side["iops"], side["total_ios"]
                    cpu = cpu_seconds(proc.pid) - c0
                    stop(proc)
                    proc = None
                    log.close()
                    member, kernel = worker_ops(log_path)
                    results[mode][job[0]].append(
                        {"iops": iops, "cpu_us_per_io": cpu * 1e6 / max(ios, 1),
                         "kernel_per_member_io": kernel / max(member, 1)})
                    print(f"round {r + 1} {job[0]:<18} {mode:<3} {iops:>9.0f} IOPS "
                          f"cpu {cpu * 1e6 / max(ios, 1):5.2f} us/io, "
                          f"{member} member I/Os as {kernel} kernel operations", file=sys.stderr)

        print(f"\n{args.level} over {args.members} file members in {args.dir}, fio nbd, "
              f"{args.compare} on and off, medians of {args.rounds} rounds")
        print(f"{'job':<18} {'on IOPS':>9} {'off IOPS':>9} {'ratio':>6} "
              f"{'on cpu/io':>10} {'off cpu/io':>10} {'kernel ops/member I/O (on)':>27}")
        for job in jobs:
            n = job[0]
            med = {m: {k: statistics.median(x[k] for x in results[m][n])
                       for k in ("iops", "cpu_us_per_io", "kernel_per_member_io")}
                   for m in MODES}
            g, o = med["on"], med["off"]
            print(f"{n:<18} {g['iops']:>9.0f} {o['iops']:>9.0f} "
                  f"{g['iops'] / o['iops']:>6.2f} {g['cpu_us_per_io']:>8.2f}us "
                  f"{o['cpu_us_per_io']:>8.2f}us {g['kernel_per_member_io']:>27.2f}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)
    finally:
        if proc is not None:
            stop(proc)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
