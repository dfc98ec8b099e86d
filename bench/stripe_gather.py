#!/usr/bin/python3
"""RAID5 write gathering: raidd's `gather` policies (none, plug, limit:N) side by side.

One RAID5 over files on tmpfs is served by `raidd serve` once per policy (the array is
reassembled each time; same members, same data); fio's nbd engine runs the same write jobs
against each, in alternating order per round. For each run the script reads the array's
counters (`raidd detail --json`) before and after, and prints per policy: IOPS, member
pre-reads per write (the cost gathering saves), full-stripe batches, and shares that joined
another request's batch. Medians over rounds.

Usage: bench/stripe_gather.py [--rounds N] [--seconds S] [--members N] [--chunk 64K]
                              [--policies none,plug,limit:8,limit:64] [--dir /dev/shm]
                              [--json OUT]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from benchlib import fio_nbd, free_port, stop, wait_port

JOBS = [
    # name, rw, bs, iodepth
    ("4k-seqwrite-qd32", "write", "4k", 32),
    ("4k-randwrite-qd32", "randwrite", "4k", 32),
    ("64k-seqwrite-qd8", "write", "64k", 8),
    ("4k-seqwrite-qd1", "write", "4k", 1),
]


def counters(raidd, sock, name):
    out = subprocess.run([raidd, "--json", "detail", name, "--control", sock],
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"raidd detail failed: {out.stderr}")
    # Builds from before the stripe cache print no counters: count nothing for them.
    c = json.loads(out.stdout)["array"].get("counters") or {}
    for k in ("full_stripe_writes", "rmw_writes", "rcw_writes", "reconstruct_writes"):
        c.setdefault(k, 0)
    return c


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=3)
    ap.add_argument("--members", type=int, default=4)
    ap.add_argument("--chunk", default="64K")
    ap.add_argument("--member-size", default=str(256 << 20))
    ap.add_argument("--policies", default="none,plug,limit:8,limit:64")
    ap.add_argument("--server-cpus", default="0")
    ap.add_argument("--client-cpus", default="1")
    ap.add_argument("--raidd", default="target/release/raidd")
    ap.add_argument("--jobs", help="comma-separated job names (default: all)")
    ap.add_argument("--dir", default="/dev/shm",
                    help="where the member files live (tmpfs by default; a disk for O_DIRECT)")
    ap.add_argument("--json", help="write the raw results here")
    args = ap.parse_args()
    jobs = [j for j in JOBS if not args.jobs or j[0] in args.jobs.split(",")]
    policies = args.policies.split(",")
    shm = tempfile.mkdtemp(prefix="raidd-gather-", dir=args.dir)
    try:
        members = [os.path.join(shm, f"m{i}.img") for i in range(args.members)]
        subprocess.run([args.raidd, "create", "--level", "raid5", "--name", "g", "--chunk",
                        args.chunk, "--size", args.member_size, "--assume-clean", "--force",
                        *members], check=True, stdout=subprocess.DEVNULL)
        size = f"{(int(args.member_size) - (16 << 20)) * (args.members - 1) // (1 << 20)}M"
        results = {p: {j[0]: [] for j in jobs} for p in policies}
        for r in range(args.rounds):
            order = policies if r % 2 == 0 else list(reversed(policies))
            for policy in order:
                port = free_port()
                sock = os.path.join(shm, "raidd.sock")
                conf = os.path.join(shm, "raidd.toml")
                with open(conf, "w") as f:
                    f.write(f'control_socket = "{sock}"\nthreads = 1\n[nbd]\n'
                            f'listen = "127.0.0.1:{port}"\n[[array]]\nname = "g"\n'
                            f'members = {json.dumps(members)}\n')
                    if policy != "default":  # "default": leave the config key out
                        f.write(f'gather = "{policy}"\n')
                proc = subprocess.Popen(["taskset", "-c", args.server_cpus, args.raidd, "serve",
                                         "--config", conf], stderr=subprocess.DEVNULL)
                try:
                    wait_port(port, proc, "raidd")
                    for job in jobs:
                        c0 = counters(args.raidd, sock, "g")
                        side = fio_nbd(f"nbd://127.0.0.1:{port}/g", job, args.seconds, size,
                                       args.client_cpus, ramp=False)
                        iops, ios = side["iops"], side["total_ios"]
                        c1 = counters(args.raidd, sock, "g")
                        d = {k: c1[k] - c0[k] for k in ("full_stripe_writes", "rmw_writes",
                                                        "rcw_writes", "reconstruct_writes")}
                        empty = {"batches": 0, "gathered": 0, "hits": 0}
                        sc0 = c0.get("stripe_cache") or empty
                        sc1 = c1.get("stripe_cache") or empty
                        row = {"iops": iops, "ios": ios,
                               "batches": sc1["batches"] - sc0["batches"],
                               "gathered": sc1["gathered"] - sc0["gathered"],
                               "hits": sc1["hits"] - sc0["hits"], **d}
                        results[policy][job[0]].append(row)
                        print(f"round {r + 1} {policy:<9} {job[0]:<18} {iops:>9.0f} IOPS "
                              f"batches {row['batches']} full {d['full_stripe_writes']} "
                              f"gathered {row['gathered']} hits {row['hits']}", file=sys.stderr)
                finally:
                    stop(proc)
        print(f"\n{'job':<18} {'policy':<9} {'IOPS':>9} {'vs none':>7} {'full-stripe %':>13} "
              f"{'joined %':>8} {'known %':>8}")
        for job in jobs:
            n = job[0]
            base = statistics.median(x["iops"] for x in results[policies[0]][n])
            for p in policies:
                rows = results[p][n]
                iops = statistics.median(x["iops"] for x in rows)
                b = sum(x["batches"] for x in rows) or 1
                full = 100.0 * sum(x["full_stripe_writes"] for x in rows) / b
                ios = sum(x["ios"] for x in rows) or 1
                joined = 100.0 * sum(x["gathered"] for x in rows) / ios
                hits = 100.0 * sum(x["hits"] for x in rows) / b
                print(f"{n:<18} {p:<9} {iops:>9.0f} {iops / base:>7.2f} {full:>13.1f} "
                      f"{joined:>8.1f} {hits:>8.1f}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)
    finally:
        shutil.rmtree(shm, ignore_errors=True)


if __name__ == "__main__":
    main()
