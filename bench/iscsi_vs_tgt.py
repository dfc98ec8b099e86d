#!/usr/bin/python3
"""raidd's iSCSI target against tgt (tgtd, bs=rdwr) on the same kind of backing file, with
the same fio jobs.

raidd serves a one-member linear array over a file on tmpfs (/dev/shm) as LUN 0 of one
target (`threads = 1`); tgtd serves a second file of exactly the array's size on the same
tmpfs as LUN 1 of its target, with its default backing store (bs=rdwr, pread/pwrite from
its worker threads). Both files are fully allocated before the run, so neither server reads
holes. Both servers are pinned to the same CPUs (tgtd with all its threads), fio to others;
each job runs on both targets in alternating order for several rounds, and the script prints
medians and the raidd/tgt ratio (higher is better for raidd on every row) plus server CPU
time per I/O, read from /proc/PID/stat (all threads) around each run. The server's CPU time
covers the whole fio run (login, ramp and the measured seconds) while the I/O count covers
the measured seconds only, so it overstates the cost per I/O by about (seconds + 1.2) /
seconds, alike for both servers. Each round's line on stderr also shows fio's own CPU time
per I/O (from fio's usr_cpu/sys_cpu), to tell a client-bound row from a server-bound one.

The client is fio's libiscsi engine (`--ioengine=libiscsi`, one job, one iSCSI session per
run, `--filename=iscsi\\://127.0.0.1\\:PORT/IQN/LUN`). Debian's fio is built without it, so
the script needs a fio built from source; by default /var/cache/raidd-fio/fio, which was
built like this (libiscsi 1.19.0 from Debian's libiscsi-dev; fio's source from GitHub,
tag fio-3.33, the same version as Debian's fio):

    git --git-dir=FIO.git archive fio-3.33 | tar -x -C /var/cache/raidd-fio-src
    bench/build_fio_libiscsi.sh /var/cache/raidd-fio-src   # apt-get install libiscsi-dev,
                                                          # ./configure --enable-libiscsi,
                                                          # make, install to /var/cache/raidd-fio/fio

fio's engine offers HeaderDigest=None,CRC32C and DataDigest=None; both targets take None.

Usage: bench/iscsi_vs_tgt.py [--rounds N] [--seconds S] [--size BYTES] [--json OUT]
                             [--fio PATH] [--jobs 4k-randread-qd1,1m-read-qd8,...]
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

from benchlib import Tgt, cpu_seconds, free_port, parse_size, stop, wait_port

JOBS = [
    # name, rw, bs, iodepth
    ("4k-randread-qd1", "randread", "4k", 1),
    ("4k-randwrite-qd1", "randwrite", "4k", 1),
    ("4k-randread-qd32", "randread", "4k", 32),
    ("4k-randwrite-qd32", "randwrite", "4k", 32),
    ("1m-read-qd8", "read", "1m", 8),
    ("1m-write-qd8", "write", "1m", 8),
]

TARGET = "iqn.2026-11.org.raidd:bench"
TGT_TARGET = "iqn.2026-11.org.raidd:tgt-bench"









def fio_escape(url):
    return url.replace(":", "\\:")


def fio(fio_bin, url, job, seconds, size, cpus):
    name, rw, bs, qd = job
    cmd = [
        "taskset", "-c", cpus, fio_bin, "--output-format=json", f"--name={name}",
        "--ioengine=libiscsi", f"--filename={fio_escape(url)}", f"--rw={rw}", f"--bs={bs}",
        f"--iodepth={qd}", f"--size={size}", "--time_based", f"--runtime={seconds}",
        "--ramp_time=1", "--randrepeat=0", "--norandommap",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"fio failed: {' '.join(cmd)}\n{out.stdout}\n{out.stderr}")
    j = json.loads(out.stdout[out.stdout.index("{"):])["jobs"][0]
    if j.get("error"):
        sys.exit(f"fio job error {j['error']}: {' '.join(cmd)}\n{out.stderr}")
    side = j["read"] if "read" in rw else j["write"]
    # fio's own CPU time (usr_cpu/sys_cpu are percentages of the job's runtime), per I/O:
    # the client is the same program on both sides, but not the same work per I/O.
    client_us = (j["usr_cpu"] + j["sys_cpu"]) / 100.0 * j["job_runtime"] * 1000.0
    return (side["iops"], side["bw_bytes"], side["total_ios"], side["clat_ns"]["mean"] / 1000.0,
            client_us / max(side["total_ios"], 1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--size", default=str(1 << 30), help="LUN size (bytes, or 256M, 1G)")
    ap.add_argument("--server-cpus", default="0")
    ap.add_argument("--client-cpus", default="1")
    ap.add_argument("--raidd", default="target/release/raidd")
    ap.add_argument("--poll-us", type=int, default=0,
                    help="raidd's poll_us: how long its worker polls before sleeping")
    ap.add_argument("--fio", default="/var/cache/raidd-fio/fio",
                    help="fio built with --enable-libiscsi (bench/build_fio_libiscsi.sh)")
    ap.add_argument("--json", help="write the raw results here")
    ap.add_argument("--keep", action="store_true", help="keep the work directory and logs")
    ap.add_argument("--jobs", help="comma-separated job names to run (default: all)")
    args = ap.parse_args()
    jobs = [j for j in JOBS if not args.jobs or j[0] in args.jobs.split(",")]
    if not jobs:
        sys.exit(f"no such job; jobs: {', '.join(j[0] for j in JOBS)}")
    for tool in ("tgtd", "tgtadm", "taskset", "fallocate"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is missing (apt-get install tgt util-linux)")
    if not os.access(args.fio, os.X_OK):
        sys.exit(f"{args.fio}: no fio with libiscsi there; build one with "
                 "bench/build_fio_libiscsi.sh (see this script's docstring)")
    engines = subprocess.run([args.fio, "--enghelp"], capture_output=True, text=True).stdout
    if "libiscsi" not in engines:
        sys.exit(f"{args.fio} has no libiscsi engine")
    size = parse_size(args.size)
    raidd_bin = os.path.abspath(args.raidd)

    shm = tempfile.mkdtemp(prefix="raidd-ibench-", dir="/dev/shm")
    procs = []
    tgt = None
    try:
        backing = os.path.join(shm, "backing.img")
        # One linear member: the array's data starts after md's data offset, so the member
        # is that much larger than the exported size.
        subprocess.run(
            [raidd_bin, "create", "--level", "linear", "--name", "bench", "--size",
             str(size + (64 << 20)), "--force", backing],
            check=True, stdout=subprocess.DEVNULL)
        tgt_file = os.path.join(shm, "tgt.img")
        with open(tgt_file, "wb") as f:
            f.truncate(size)
        # Allocate every page of both files (keeping raidd's metadata), so reads on both
        # sides copy real tmpfs pages rather than the zero page of a hole.
        for path in (backing, tgt_file):
            subprocess.run(["fallocate", "-l", str(os.path.getsize(path)), path], check=True)

        rport = free_port()
        conf = os.path.join(shm, "raidd.toml")
        with open(conf, "w") as f:
            f.write(f'control_socket = "{shm}/raidd.sock"\nthreads = 1\npoll_us = {args.poll_us}\n'
                    f'[nbd]\nlisten = "127.0.0.1:0"\n'
                    f'[iscsi]\nlisten = "127.0.0.1:{rport}"\nstate_dir = "{shm}/state"\n'
                    f'nop_interval = 0\n'
                    f'[[array]]\nname = "bench"\nmembers = ["{backing}"]\n'
                    f'[[target]]\nname = "{TARGET}"\n'
                    f'[[target.lun]]\nlun = 0\narray = "bench"\n')
        rlog_path = os.path.join(shm, "raidd.log")
        rlog = open(rlog_path, "w")
        raidd = subprocess.Popen(
            ["taskset", "-c", args.server_cpus, raidd_bin, "serve", "--config", conf],
            stdout=rlog, stderr=rlog)
        procs.append(raidd)
        wait_port(rport, raidd, "raidd")
        tgt = Tgt(tgt_file, TGT_TARGET, os.path.join(shm, "tgtd.log"), args.server_cpus)
        servers = {
            "raidd": (raidd.pid, f"iscsi://127.0.0.1:{rport}/{TARGET}/0"),
            "tgt": (tgt.proc.pid, tgt.url),
        }
        print(f"client: {args.fio} --ioengine=libiscsi (all rows); servers on CPU "
              f"{args.server_cpus}, fio on CPU {args.client_cpus}; LUN {size} bytes",
              file=sys.stderr)
        results = {s: {j[0]: [] for j in jobs} for s in servers}
        for r in range(args.rounds):
            order = ["raidd", "tgt"] if r % 2 == 0 else ["tgt", "raidd"]
            for job in jobs:
                for s in order:
                    pid, url = servers[s]
                    c0 = cpu_seconds(pid)
                    iops, bw, ios, lat, client = fio(args.fio, url, job, args.seconds, size,
                                             args.client_cpus)
                    cpu = cpu_seconds(pid) - c0
                    results[s][job[0]].append(
                        {"iops": iops, "bw": bw, "ios": ios, "lat_us": lat,
                         "cpu_us_per_io": cpu * 1e6 / max(ios, 1), "fio_cpu_us_per_io": client})
                    print(f"round {r + 1} {job[0]:<18} {s:<6} {iops:>10.0f} IOPS "
                          f"{bw / 1e6:>8.1f} MB/s lat {lat:>7.1f} us server "
                          f"{cpu * 1e6 / max(ios, 1):>6.1f} us/io fio {client:>6.1f} us/io",
                          file=sys.stderr)
                    if raidd.poll() is not None:
                        sys.exit(f"raidd exited with {raidd.returncode}; log: {rlog_path}")
        print(f"\n{'job':<18} {'raidd IOPS':>11} {'tgt IOPS':>10} {'ratio':>6} "
              f"{'raidd MB/s':>10} {'tgt MB/s':>9} {'raidd cpu/io':>12} {'tgt cpu/io':>11}")
        for job in jobs:
            n = job[0]
            med = {s: {k: statistics.median(x[k] for x in results[s][n])
                       for k in ("iops", "bw", "cpu_us_per_io")} for s in servers}
            ratio = med["raidd"]["iops"] / med["tgt"]["iops"]
            print(f"{n:<18} {med['raidd']['iops']:>11.0f} {med['tgt']['iops']:>10.0f} "
                  f"{ratio:>6.2f} {med['raidd']['bw'] / 1e6:>10.1f} {med['tgt']['bw'] / 1e6:>9.1f} "
                  f"{med['raidd']['cpu_us_per_io']:>10.1f}us {med['tgt']['cpu_us_per_io']:>9.1f}us")
        rlog.flush()
        with open(rlog_path) as f:
            noise = [l.rstrip() for l in f
                     if re.search(r"warn|error|panic", l, re.I)]
        if noise:
            print(f"\nraidd log ({len(noise)} warning/error lines):", file=sys.stderr)
            for l in noise[:20]:
                print("   ", l, file=sys.stderr)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)
    finally:
        if tgt is not None:
            tgt.stop()
        for p in reversed(procs):
            stop(p)
        if args.keep:
            print(f"work directory (logs, images): {shm}", file=sys.stderr)
        else:
            shutil.rmtree(shm, ignore_errors=True)


if __name__ == "__main__":
    main()
