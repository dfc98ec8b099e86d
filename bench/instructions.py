#!/usr/bin/python3
"""Instructions per 4 KiB request, counted by callgrind, through the engine or through the
NBD server.

Each count runs twice, once short and once longer; set-up (members written, array created,
server started, client connected) costs the same in both, so the instructions per request
are (I(long) - I(short)) / (requests(long) - requests(short)).

--path engine (the default): `raidd bench io` under callgrind, in-process load, memory
members. The raw target is the same load generator reading the members directly; the
difference between an array and raw is what the RAID layer adds per request.

--path nbd: `raidd serve` under callgrind, every thread counted, with fio's nbd engine as
the client (not counted) sending a fixed number of QD1 requests; members are O_DIRECT files
in --dir, so member I/O goes through the ring as it does in service. The server runs with
RAIDD_RING_WAIT=poll: valgrind 3.19 (Debian 12) does not treat io_uring_enter as a call
that may block, so a thread sleeping in it would keep valgrind's lock and the other threads
would never run; with poll the threads sleep in poll(2), which valgrind knows. Target
`nbdkit` is the peer: nbdkit's file plugin over one file of the same size, under callgrind
the same way.

valgrind dies on AVX-512 code, so the binary must be an x86-64-v3 build:
  RUSTFLAGS="-C target-cpu=x86-64-v3" cargo build --release -p raidd --target-dir target/v3

--dab SIZE (engine path) counts each target twice more, its members behind a DMA-aligned
buffer of SIZE: with --rw read every request after a block's first is a hit, so the
difference from the same target without it is what a hit costs over a member read.

Usage: bench/instructions.py [--raidd target/v3/release/raidd] [--rw randread] [--keep DIR]
                             [--path engine --targets raw,raid0,raid5 [--dab 64M]]
                             [--path nbd --targets raid0,raid5,nbdkit --dir /var/tmp]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

from benchlib import fio_nbd, free_port, stop, wait_port

MEMBERS = 4
MEMBER_SIZE = 64 << 20


def totals(out):
    """The instruction total of a callgrind output file (every thread together)."""
    with open(out) as f:
        for line in f:
            m = re.match(r"(?:summary|totals): (\d+)", line)
            if m:
                return int(m.group(1))
    sys.exit(f"no totals in {out}")


def count_engine(raidd, target, rw, seconds, tmp, extra=()):
    out = os.path.join(tmp, f"cg.{target}.{seconds}")
    run = subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", raidd, "--json",
         "bench", "io", "--target", target, "--rw", rw, "--member-size", "16M", "--qd", "1",
         "--seconds", str(seconds), *extra], capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"raidd bench io under callgrind failed:\n{run.stderr[-2000:]}")
    return totals(out), json.loads(run.stdout)["ops_total"]


class NbdTarget:
    """What a server needs to serve one target from `tmp`: an array of file members for
    raidd, one file for nbdkit. `command(port)` is the server's command line."""

    def __init__(self, raidd, target, tmp):
        self.raidd, self.target = raidd, target
        self.dir = os.path.join(tmp, target)
        os.mkdir(self.dir)
        if target == "nbdkit":
            self.file = os.path.join(self.dir, "lun.img")
            with open(self.file, "wb") as f:
                f.truncate(MEMBERS * MEMBER_SIZE)
            self.size = MEMBERS * MEMBER_SIZE
            return
        if target not in ("raid0", "raid1", "raid5", "raid6", "raid10"):
            sys.exit(f"unknown target {target!r} for --path nbd")
        members = [os.path.join(self.dir, f"d{i}.img") for i in range(MEMBERS)]
        run = subprocess.run([raidd, "create", "--level", target, "--name", "cg", "--size",
                              f"{MEMBER_SIZE >> 20}M", *members], capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit(f"raidd create failed:\n{run.stderr[-2000:]}")
        self.conf = os.path.join(self.dir, "raidd.toml")
        self.members = members
        # Reads go to the first 32 MiB, which every level holds.
        self.size = 32 << 20

    def command(self, port):
        if self.target == "nbdkit":
            return ["nbdkit", "-f", "-p", str(port), "-i", "127.0.0.1", "file", self.file]
        with open(self.conf, "w") as f:
            f.write(f'control_socket = "raidd.sock"\n[nbd]\nlisten = "127.0.0.1:{port}"\n'
                    f'[[array]]\nname = "cg"\nmembers = {json.dumps(self.members)}\n')
        return [self.raidd, "serve", "--config", self.conf]

    def uri(self, port):
        return f"nbd://127.0.0.1:{port}/" + ("" if self.target == "nbdkit" else "cg")


def count_nbd(t, rw, requests, tmp):
    """The server of target `t` under callgrind for `requests` QD1 4K requests from fio."""
    out = os.path.join(tmp, f"cg.{t.target}.{requests}")
    port = free_port()
    log = open(os.path.join(tmp, f"server.{t.target}.{requests}.log"), "w")
    server = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *t.command(port)],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "RAIDD_RING_WAIT": "poll"})
    try:
        wait_port(port, server, f"{t.target} under callgrind", timeout=180)
        done = fio_nbd(t.uri(port), ("cg", rw, "4k", 1), None, t.size, None,
                       ios=requests)["total_ios"]
    finally:
        stop(server)
        log.close()
    if server.returncode != 0:
        sys.exit(f"{t.target} under callgrind exited with {server.returncode}; see {log.name}")
    return totals(out), done


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--raidd", default="target/v3/release/raidd")
    ap.add_argument("--path", choices=["engine", "nbd"], default="engine")
    ap.add_argument("--targets")
    ap.add_argument("--rw", default="randread")
    ap.add_argument("--dir", default="/var/tmp",
                    help="where --path nbd puts its member files (O_DIRECT: not tmpfs)")
    ap.add_argument("--requests", default="2000,10000",
                    help="--path nbd: requests of the short and the long run")
    ap.add_argument("--dab", metavar="SIZE",
                    help="--path engine: also count each target behind a DMA-aligned buffer")
    ap.add_argument("--keep", metavar="DIR",
                    help="keep the callgrind output files in DIR (for callgrind_annotate: the "
                         "difference of a function's counts over the difference of requests "
                         "is its cost per request)")
    a = ap.parse_args()
    if not shutil.which("valgrind"):
        sys.exit("valgrind is not installed (apt-get install valgrind)")
    targets = a.targets or ("raw,raid0,raid5" if a.path == "engine" else "raid0,raid5,nbdkit")
    short, long_ = (int(n) for n in a.requests.split(","))
    tmp = tempfile.mkdtemp(prefix="raidd-callgrind-", dir=a.dir if a.path == "nbd" else None)
    try:
        per = {}
        for t in targets.split(","):
            if a.path == "engine":
                (i1, n1), (i2, n2) = (count_engine(a.raidd, t, a.rw, s, tmp) for s in (1, 4))
            else:
                nt = NbdTarget(a.raidd, t, tmp)
                (i1, n1), (i2, n2) = (count_nbd(nt, a.rw, n, tmp) for n in (short, long_))
            if n2 == n1:
                sys.exit(f"{t}: both runs completed {n1} requests; cannot tell them apart")
            per[t] = (i2 - i1) / (n2 - n1)
            base = "raw" if a.path == "engine" else "nbdkit"
            extra = (f", {per[t] - per[base]:+,.0f} over {base}"
                     if base in per and t != base else "")
            print(f"{t:<6} 4K {a.rw} ({a.path}): {per[t]:,.0f} instructions per request{extra} "
                  f"(I = {i1:,} for {n1:,} requests, {i2:,} for {n2:,})", flush=True)
            if a.dab and a.path == "engine":
                dab = ("--dab", a.dab)
                (j1, m1), (j2, m2) = (count_engine(a.raidd, t, a.rw, s, tmp, dab)
                                      for s in (1, 4))
                if m2 == m1:
                    sys.exit(f"{t} --dab: both runs completed {m1} requests")
                d = (j2 - j1) / (m2 - m1)
                print(f"{t:<6} 4K {a.rw} behind --dab {a.dab}: {d:,.0f} instructions per "
                      f"request, {d - per[t]:+,.0f} over the members read directly", flush=True)
        if a.path == "nbd" and "nbdkit" in per:
            for t in per:
                if t != "nbdkit":
                    print(f"{t} / nbdkit: {per[t] / per['nbdkit']:.2f}")
    finally:
        if a.keep:
            os.makedirs(a.keep, exist_ok=True)
            for f in os.listdir(tmp):
                if f.startswith("cg."):
                    shutil.copy(os.path.join(tmp, f), a.keep)
            print(f"callgrind outputs kept in {a.keep}")
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
