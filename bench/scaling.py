#!/usr/bin/python3
"""How throughput grows with threads (issue 6, item 1), measured with `raidd bench io`.

Every row runs with 1, 2, 4, ... threads (up to --threads, at most the CPUs there are), each
thread with its own executor and io_uring and its own share of the device, all of them on one
array (or, for `raw`, the same members driven directly). The run with T threads is pinned to
CPUs 0..T-1, so two threads never share a CPU; runs of a round go in the order of the rows,
and each round repeats them all, so a noisy moment touches every thread count alike. The
table shows the median IOPS per thread count, the speedup over one thread, and the
efficiency (speedup / threads): what a lock or a cache line shared by all threads costs
shows as efficiency falling with threads, where the raw members keep theirs.

Members are in memory (they are what a CPU-bound path is measured on; file members on one
disk measure the disk). The issue's own check, two threads >= 1.8 x one thread on 4K random
reads of RAID0 over 4, is printed at the end.

With --baseline OLD, every run is made twice, by OLD and then by --raidd, and the table
puts the two side by side with their ratio (a change measured on one machine in one run).

Usage: bench/scaling.py [--threads 16 | --counts 1,2,4,16] [--rounds 3] [--seconds 1.5]
                        [--member-size 256M] [--rows raw4-randread,raid0x4-randread,...]
                        [--raidd target/release/raidd] [--baseline OLD] [--json OUT]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# key: (target, members, rw, bs, qd per thread)
ROWS = {
    "raw4-randread": ("raw", 4, "randread", 4096, 32),
    "raid0x4-randread": ("raid0", 4, "randread", 4096, 32),
    "raid5x4-randread": ("raid5", 4, "randread", 4096, 32),
    "raw4-randwrite": ("raw", 4, "randwrite", 4096, 32),
    "raid1x2-randwrite": ("raid1", 2, "randwrite", 4096, 32),
    "raid5x4-randwrite": ("raid5", 4, "randwrite", 4096, 32),
    "raid6x6-randwrite": ("raid6", 6, "randwrite", 4096, 32),
    "raid5x4-write": ("raid5", 4, "write", 3 * 4 * 64 << 10, 8),
}
DEFAULT_ROWS = "raw4-randread,raid0x4-randread,raid5x4-randwrite,raid6x6-randwrite"


def thread_counts(most):
    out, t = [], 1
    while t < most:
        out.append(t)
        t *= 2
    return out + [most]


def run_one(a, raidd, key, threads):
    target, n, rw, bs, qd = ROWS[key]
    cpus = f"0-{threads - 1}"
    cmd = ["taskset", "-c", cpus, raidd, "--json", "bench", "io", "--target", target,
           "--members", str(n), "--member-size", a.member_size, "--chunk", "64K", "--rw", rw,
           "--bs", str(bs), "--qd", str(qd), "--threads", str(threads),
           "--seconds", str(a.seconds)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{out.stderr}")
    return json.loads(out.stdout)


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def medians(runs):
    return (statistics.median(x["iops"] for x in runs),
            statistics.median(x["cpu_us_per_io"] or 0 for x in runs))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=16, help="most threads (capped at the CPUs)")
    p.add_argument("--counts", help="thread counts to run, instead of 1, 2, 4, ... --threads")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=1.5)
    p.add_argument("--member-size", default="256M")
    p.add_argument("--rows", default=DEFAULT_ROWS, help=f"of: {','.join(ROWS)}")
    p.add_argument("--raidd", default=os.path.join(HERE, "..", "target", "release", "raidd"))
    p.add_argument("--baseline", help="another raidd binary, run beside --raidd")
    p.add_argument("--json", help="write every run and the summary here")
    a = p.parse_args()
    binaries = {"raidd": a.raidd}
    if a.baseline:
        binaries = {"baseline": a.baseline, "raidd": a.raidd}
    for b in binaries.values():
        if not os.access(b, os.X_OK):
            sys.exit(f"{b} not found: cargo build --release first")
    keys = [k for k in a.rows.split(",") if k]
    for k in keys:
        if k not in ROWS:
            sys.exit(f"unknown row {k!r}: rows are {', '.join(ROWS)}")
    cpus = len(os.sched_getaffinity(0))
    if a.counts:
        try:
            counts = sorted({int(c) for c in a.counts.split(",")})
        except ValueError:
            sys.exit(f"--counts {a.counts!r}: thread counts separated by commas")
        if counts[0] < 1 or counts[-1] > cpus:
            sys.exit(f"--counts {a.counts!r}: each from 1 to the {cpus} CPUs there are")
        if counts[0] != 1:
            sys.exit("--counts must include 1: speedups are over one thread")
    elif a.threads < 1:
        sys.exit("--threads must be at least 1")
    else:
        counts = thread_counts(min(a.threads, cpus))
    runs = {b: {} for b in binaries}
    for r in range(a.rounds):
        for key in keys:
            for t in counts:
                for b, path in binaries.items():
                    j = run_one(a, path, key, t)
                    runs[b].setdefault(key, {}).setdefault(t, []).append(j)
                    print(f"[round {r + 1}] {b} {key} {t} thread(s): {j['iops']:.0f} IOPS, "
                          f"{j['cpu_us_per_io']:.2f} CPU us/IO", file=sys.stderr, flush=True)
    print(f"\n== {cpu_model()}, {cpus} CPUs; memory members of {a.member_size}, chunk 64K; "
          f"medians of {a.rounds}")
    summary = {b: {} for b in binaries}
    for key in keys:
        target, n, rw, bs, qd = ROWS[key]
        print(f"\n{key} ({target} over {n}, {rw} {bs // 1024}K, QD{qd} per thread)")
        head = f"{'threads':>8} {'IOPS':>12} {'MiB/s':>9} {'CPU us/IO':>10} {'speedup':>8} " \
               f"{'efficiency':>11}"
        if a.baseline:
            head += f" {'baseline IOPS':>14} {'b. speedup':>11} {'new/baseline':>13}"
        print(head)
        for b in binaries:
            one = medians(runs[b][key][1])[0]
            summary[b][key] = []
            for t in counts:
                iops, cpu = medians(runs[b][key][t])
                summary[b][key].append({
                    "threads": t, "iops": iops, "mib_per_s": iops * bs / (1 << 20),
                    "cpu_us_per_io": cpu, "speedup": iops / one, "efficiency": iops / one / t})
        for i, row in enumerate(summary["raidd"][key]):
            line = f"{row['threads']:>8} {row['iops']:>12.0f} {row['mib_per_s']:>9.0f} " \
                   f"{row['cpu_us_per_io']:>10.2f} {row['speedup']:>8.2f} {row['efficiency']:>11.2f}"
            if a.baseline:
                base = summary["baseline"][key][i]
                line += f" {base['iops']:>14.0f} {base['speedup']:>11.2f} " \
                        f"{row['iops'] / base['iops']:>13.2f}"
            print(line)
    verdict = None
    if "raid0x4-randread" in summary["raidd"] and 2 in counts:
        two = next(r for r in summary["raidd"]["raid0x4-randread"] if r["threads"] == 2)
        verdict = {"check": "2 threads / 1 thread, 4K rand read", "ratio": two["speedup"],
                   "target": 1.8, "met": two["speedup"] >= 1.8}
        print(f"\n{verdict['check']}: {verdict['ratio']:.2f} (target 1.80) "
              f"{'ok' if verdict['met'] else 'BELOW'}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"cpu": cpu_model(), "cpus": cpus, "binaries": binaries,
                       "summary": summary, "check": verdict,
                       "runs": {b: {k: {str(t): v for t, v in x.items()}
                                    for k, x in r.items()} for b, r in runs.items()}},
                      f, indent=1)


if __name__ == "__main__":
    main()
