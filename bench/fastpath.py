#!/usr/bin/python3
"""The fast path's targets (issue 6), measured in one run with `raidd bench io`.

`raidd bench io` drives an array, or the same members directly (`--target raw`), with the
same requests from the same in-process load generator, so each ratio below is the cost of
the RAID layer alone. Every row runs once per round, in the same order (raw and arrays
interleaved), for --rounds rounds; the table shows medians and the ratios the issue sets:

  RAID0 over 4: sequential read and write >= 0.9 x raw, 4K random read >= 0.8 x raw
  RAID5 over N (4, 6): sequential read >= (N-1)/N x RAID0 over N, full-stripe sequential
      write >= 0.9 x (N-1)/N x RAID0 write, 4K random write >= 0.9 x raw IOPS / 4
  RAID6 over 6: the same with (N-2)/N and raw IOPS / 6
  two threads >= 1.8 x one thread, 4K random read of in-memory members (RAID0 over 4)

Members are in memory, and again files on one disk (--dir, O_DIRECT). Single-thread rows are
pinned to one CPU and the two-thread row to two, raw and array alike.

Usage: bench/fastpath.py [--rounds 3] [--seconds 2] [--member-size 256M]
                         [--dir /var/tmp/raidd-fastpath] [--media mem,files] [--json OUT]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CHUNK = 64 << 10


def stripe_bs(level, n):
    """Four whole stripes: a sequential request that every level writes as full stripes."""
    data = {"raid0": n, "raid5": n - 1, "raid6": n - 2}[level]
    return 4 * data * CHUNK


# (key, target, members, rw, bs, qd, threads)
def rows():
    out = []
    for n in (4, 6):
        out += [
            (f"raw{n}-randwrite", "raw", n, "randwrite", 4096, 32, 1),
            (f"raid0x{n}-write", "raid0", n, "write", stripe_bs("raid0", n), 8, 1),
            (f"raid0x{n}-read", "raid0", n, "read", stripe_bs("raid0", n), 8, 1),
        ]
    out += [
        ("raw4-write", "raw", 4, "write", stripe_bs("raid0", 4), 8, 1),
        ("raw4-read", "raw", 4, "read", stripe_bs("raid0", 4), 8, 1),
        ("raw4-randread", "raw", 4, "randread", 4096, 32, 1),
        ("raid0x4-randread", "raid0", 4, "randread", 4096, 32, 1),
        ("raid0x4-randread-2t", "raid0", 4, "randread", 4096, 32, 2),
    ]
    for level, n in (("raid5", 4), ("raid5", 6), ("raid6", 6)):
        bs = stripe_bs(level, n)
        out += [
            (f"{level}x{n}-write", level, n, "write", bs, 8, 1),
            (f"{level}x{n}-read", level, n, "read", bs, 8, 1),
            (f"{level}x{n}-randwrite", level, n, "randwrite", 4096, 32, 1),
        ]
    return out


def checks(media):
    """(what, numerator key, denominator key, scale of the denominator, target)."""
    c = [
        ("RAID0x4 seq write / raw", "raid0x4-write", "raw4-write", 1, 0.9),
        ("RAID0x4 seq read / raw", "raid0x4-read", "raw4-read", 1, 0.9),
        ("RAID0x4 4K rand read / raw", "raid0x4-randread", "raw4-randread", 1, 0.8),
    ]
    for level, n in (("raid5", 4), ("raid5", 6), ("raid6", 6)):
        k = n - (1 if level == "raid5" else 2)
        ios = 4 if level == "raid5" else 6
        L = level.upper()
        c += [
            (f"{L}x{n} seq read / RAID0x{n}", f"{level}x{n}-read", f"raid0x{n}-read", 1, k / n),
            (f"{L}x{n} seq write / RAID0x{n}", f"{level}x{n}-write", f"raid0x{n}-write", 1,
             0.9 * k / n),
            (f"{L}x{n} 4K rand write / (raw/{ios})", f"{level}x{n}-randwrite",
             f"raw{n}-randwrite", 1 / ios, 0.9),
        ]
    if media == "mem":
        c.append(("2 threads / 1 thread, 4K rand read", "raid0x4-randread-2t",
                  "raid0x4-randread", 1, 1.8))
    return c


def run_one(raidd, row, media, a):
    key, target, n, rw, bs, qd, threads = row
    cpus = "0" if threads == 1 else ",".join(str(i) for i in range(threads))
    cmd = ["taskset", "-c", cpus, raidd, "--json", "bench", "io", "--target", target,
           "--members", str(n), "--member-size", a.member_size, "--chunk", "64K", "--rw", rw,
           "--bs", str(bs), "--qd", str(qd), "--threads", str(threads),
           "--seconds", str(a.seconds)]
    if media == "files":
        cmd += ["--dir", a.dir]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{out.stderr}")
    return json.loads(out.stdout)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--member-size", default="256M")
    p.add_argument("--dir", default="/var/tmp/raidd-fastpath")
    p.add_argument("--media", default="mem,files")
    p.add_argument("--raidd", default=os.path.join(HERE, "..", "target", "release", "raidd"))
    p.add_argument("--json", help="write every run and the summary here")
    a = p.parse_args()
    if not os.access(a.raidd, os.X_OK):
        sys.exit(f"{a.raidd} not found: cargo build --release first")
    results = {}
    failed = 0
    for media in a.media.split(","):
        runs = {}
        for r in range(a.rounds):
            for row in rows():
                j = run_one(a.raidd, row, media, a)
                runs.setdefault(row[0], []).append(j)
                print(f"[{media} round {r + 1}] {row[0]}: {j['iops']:.0f} IOPS "
                      f"{j['mib_per_s']:.0f} MiB/s", file=sys.stderr)
        med = {k: {
            "iops": statistics.median(x["iops"] for x in v),
            "mib_per_s": statistics.median(x["mib_per_s"] for x in v),
            "cpu_us_per_io": statistics.median(x["cpu_us_per_io"] or 0 for x in v),
            "copied_bytes_per_io": statistics.median(x["copied_bytes_per_io"] or 0 for x in v),
            "direct": v[0]["direct"],
        } for k, v in runs.items()}
        print(f"\n== {media} members ({a.member_size} each, chunk 64K, medians of {a.rounds})")
        print(f"{'row':<24} {'IOPS':>10} {'MiB/s':>9} {'CPU us/IO':>10} {'copied B/IO':>12}")
        for row in rows():
            m = med[row[0]]
            print(f"{row[0]:<24} {m['iops']:>10.0f} {m['mib_per_s']:>9.0f} "
                  f"{m['cpu_us_per_io']:>10.2f} {m['copied_bytes_per_io']:>12.0f}")
        print(f"\n{'check':<40} {'ratio':>7} {'target':>7}")
        verdicts = []
        for what, num, den, scale, target in checks(media):
            # Throughput rows compare bytes per second, IOPS rows requests per second.
            unit = "iops" if "rand" in num else "mib_per_s"
            ratio = med[num][unit] / (med[den][unit] * scale)
            ok = ratio >= target
            failed += not ok
            verdicts.append({"check": what, "ratio": ratio, "target": target, "met": ok})
            print(f"{what:<40} {ratio:>7.2f} {target:>7.2f} {'ok' if ok else 'BELOW'}")
        results[media] = {"medians": med, "checks": verdicts, "runs": runs}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    print(f"\n{failed} check(s) below target", file=sys.stderr)


if __name__ == "__main__":
    main()
