#!/usr/bin/python3
"""Instructions per 4 KiB read through the engine, counted by callgrind.

`raidd bench io` runs under `valgrind --tool=callgrind` twice per target, for a short and a
longer time; set-up (members written, array created) costs the same in both, so the
instructions per request are (I(long) - I(short)) / (requests(long) - requests(short)).
The raw target is the same load generator reading the members directly; the difference
between an array and raw is what the RAID layer adds per request.

Why not through the NBD server: valgrind 3.19 (Debian 12) does not treat io_uring_enter as
a call that may block, so a server thread waiting in it holds valgrind's lock and the other
threads never run; `raidd serve` under callgrind stops at its first accept. The in-process
load needs no network and never waits in the kernel.

valgrind dies on AVX-512 code, so the binary must be an x86-64-v3 build:
  RUSTFLAGS="-C target-cpu=x86-64-v3" cargo build --release -p raidd --target-dir target/v3

Usage: bench/instructions.py [--raidd target/v3/release/raidd] [--targets raw,raid0,raid5]
                             [--rw randread]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile


def count(raidd, target, rw, seconds, tmp):
    out = os.path.join(tmp, f"cg.{target}.{seconds}")
    run = subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", raidd, "--json",
         "bench", "io", "--target", target, "--rw", rw, "--member-size", "16M", "--qd", "1",
         "--seconds", str(seconds)], capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"raidd bench io under callgrind failed:\n{run.stderr[-2000:]}")
    ops = json.loads(run.stdout)["ops_total"]
    with open(out) as f:
        for line in f:
            m = re.match(r"(?:summary|totals): (\d+)", line)
            if m:
                return int(m.group(1)), ops
    sys.exit(f"no totals in {out}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--raidd", default="target/v3/release/raidd")
    ap.add_argument("--targets", default="raw,raid0,raid5")
    ap.add_argument("--rw", default="randread")
    a = ap.parse_args()
    if not shutil.which("valgrind"):
        sys.exit("valgrind is not installed (apt-get install valgrind)")
    tmp = tempfile.mkdtemp(prefix="raidd-callgrind-")
    try:
        per = {}
        for t in a.targets.split(","):
            (i1, n1), (i2, n2) = (count(a.raidd, t, a.rw, s, tmp) for s in (1, 4))
            if n2 == n1:
                sys.exit(f"{t}: both runs completed {n1} requests; cannot tell them apart")
            per[t] = (i2 - i1) / (n2 - n1)
            extra = f", {per[t] - per['raw']:+,.0f} over raw" if "raw" in per and t != "raw" else ""
            print(f"{t:<6} 4K {a.rw}: {per[t]:,.0f} instructions per request{extra} "
                  f"(I = {i1:,} for {n1:,} requests, {i2:,} for {n2:,})")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
