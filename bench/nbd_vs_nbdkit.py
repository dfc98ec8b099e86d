#!/usr/bin/python3
"""raidd's NBD export against nbdkit on the same backing file, with the same fio jobs.

raidd serves a one-member linear array over a file on tmpfs; nbdkit's file plugin serves
the same file's data area (the offset filter). Both servers are pinned to the same CPUs,
fio to others; each job runs on both servers in alternating order for several rounds, and
the script prints medians and the raidd/nbdkit ratio (higher is better for raidd on every
row) plus server CPU time per I/O, read from /proc/PID/stat around each run.

Every round starts both servers afresh (new processes, new connections). On this VM a
process runs in one of two speeds for its whole life, for nbdkit and raidd alike (4 KiB
random writes at QD32: about 108 K or about 130 K IOPS, decided at start-up and unrelated
to the server); with one process per server for the whole run, a run's ratio was mostly
the luck of those two draws (0.86 to 1.16 in back-to-back runs). Medians over rounds of
fresh processes sample both speeds for both servers.

--scrape adds a third server to every round: raidd with its [http] listener on, whose
/metrics this script fetches every second for as long as the process lives (the same
pinning), and prints its IOPS against the plain raidd's: what serving Prometheus costs the
data path. Two raidd processes cannot share a member, so the second one serves a copy of
the backing file; which of the two has the listener alternates from round to round (the
one started second ran about 2 % slower at QD1 here, listener or not).

Usage: bench/nbd_vs_nbdkit.py [--rounds N (9)] [--seconds S] [--size BYTES] [--json OUT]
                              [--jobs 4k-randread-qd1,1m-read-qd8,...] [--scrape]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import urllib.request

from benchlib import cpu_seconds, fio_nbd, free_port, stop, wait_port

JOBS = [
    # name, rw, bs, iodepth
    ("4k-randread-qd1", "randread", "4k", 1),
    ("4k-randwrite-qd1", "randwrite", "4k", 1),
    ("4k-randread-qd32", "randread", "4k", 32),
    ("4k-randwrite-qd32", "randwrite", "4k", 32),
    ("1m-read-qd8", "read", "1m", 8),
    ("1m-write-qd8", "write", "1m", 8),
]









def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--size", default=str(1 << 30))
    ap.add_argument("--server-cpus", default="0")
    ap.add_argument("--client-cpus", default="1")
    ap.add_argument("--raidd", default="target/release/raidd")
    ap.add_argument("--poll-us", type=int, default=0,
                    help="raidd's poll_us: how long its worker polls before sleeping")
    ap.add_argument("--json", help="write the raw results here")
    ap.add_argument("--jobs", help="comma-separated job names to run (default: all)")
    ap.add_argument("--scrape", action="store_true",
                    help="also run raidd with [http] on, /metrics fetched every second")
    args = ap.parse_args()
    jobs = [j for j in JOBS if not args.jobs or j[0] in args.jobs.split(",")]
    if not jobs:
        sys.exit(f"no such job; jobs: {', '.join(j[0] for j in JOBS)}")

    shm = tempfile.mkdtemp(prefix="raidd-bench-", dir="/dev/shm")
    procs = []
    try:
        backing = os.path.join(shm, "backing.img")
        # One linear member: the array's data starts after md's data offset, so the member
        # is that much larger than the exported size. nbdkit serves the same bytes, the
        # data area (its offset filter): served whole, the file's superblock is what a
        # random write job overwrites first, and the next round's raidd finds no array.
        subprocess.run(
            [args.raidd, "create", "--level", "linear", "--name", "bench", "--size",
             str(int(args.size) + (64 << 20)), "--force", backing],
            check=True, stdout=subprocess.DEVNULL)
        examined = json.loads(subprocess.run(
            [args.raidd, "examine", "--json", backing],
            check=True, capture_output=True, text=True).stdout)
        data_offset = examined["members"][0]["superblock"]["data_offset_sectors"] * 512
        scraped_backing = os.path.join(shm, "scraped.img")
        if args.scrape:
            shutil.copyfile(backing, scraped_backing)
        stop_scraping = threading.Event()

        def raidd_server(name, member, http_port=None):
            """A fresh raidd over `member`: (process, NBD port)."""
            port = free_port()
            conf = os.path.join(shm, f"{name}.toml")
            with open(conf, "w") as f:
                f.write(f'control_socket = "{shm}/{name}.sock"\nthreads = 1\n'
                        f'poll_us = {args.poll_us}\n'
                        f'[nbd]\nlisten = "127.0.0.1:{port}"\n'
                        f'[[array]]\nname = "bench"\nmembers = ["{member}"]\n')
                if http_port:
                    f.write(f'[http]\nlisten = "127.0.0.1:{http_port}"\n')
            p = subprocess.Popen(
                ["taskset", "-c", args.server_cpus, args.raidd, "serve", "--config", conf],
                stderr=subprocess.DEVNULL)
            procs.append(p)
            return p, port

        def scrape(port):
            """Fetches /metrics every second until told to stop; counts the scrapes."""
            while not stop_scraping.wait(1.0):
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                                timeout=5) as r:
                        r.read()
                    scrapes[0] += 1
                except OSError:
                    pass

        scrapes = [0]

        def start(r):
            """Fresh processes of every server: {name: (pid, uri)}."""
            kport = free_port()
            # With --scrape, the listener goes to each of the two raidd processes in turn.
            first_scraped = args.scrape and r % 2 == 1
            hport = free_port() if args.scrape else None
            raidd, rport = raidd_server("raidd", backing, hport if first_scraped else None)
            nbdkit = subprocess.Popen(
                ["taskset", "-c", args.server_cpus, "nbdkit", "-f", "-p", str(kport),
                 "-i", "127.0.0.1", "--filter=offset", "file", backing,
                 f"offset={data_offset}", f"range={args.size}"])
            procs.append(nbdkit)
            wait_port(rport, raidd, "raidd")
            wait_port(kport, nbdkit, "nbdkit")
            servers = {
                "raidd": (raidd.pid, f"nbd://127.0.0.1:{rport}/bench"),
                "nbdkit": (nbdkit.pid, f"nbd://127.0.0.1:{kport}/"),
            }
            if args.scrape:
                other, oport = raidd_server(
                    "other", scraped_backing, None if first_scraped else hport)
                wait_port(oport, other, "the second raidd")
                wait_port(hport, raidd if first_scraped else other, "raidd's HTTP listener")
                stop_scraping.clear()
                t = threading.Thread(target=scrape, args=(hport,), daemon=True)
                t.start()
                scrapers.append(t)
                second = (other.pid, f"nbd://127.0.0.1:{oport}/bench")
                if first_scraped:
                    servers["scraped"] = servers["raidd"]
                    servers["raidd"] = second
                else:
                    servers["scraped"] = second
            return servers

        scrapers = []
        names = ["raidd", "nbdkit"] + (["scraped"] if args.scrape else [])
        results = {s: {j[0]: [] for j in jobs} for s in names}
        for r in range(args.rounds):
            servers = start(r)
            order = names[r % len(names):] + names[:r % len(names)]
            for job in jobs:
                for s in order:
                    pid, uri = servers[s]
                    c0 = cpu_seconds(pid)
                    side = fio_nbd(uri, job, args.seconds, args.size, args.client_cpus)
                    iops, bw, ios = side["iops"], side["bw_bytes"], side["total_ios"]
                    lat = side["clat_ns"]["mean"] / 1000.0
                    cpu = cpu_seconds(pid) - c0
                    results[s][job[0]].append(
                        {"iops": iops, "bw": bw, "ios": ios, "lat_us": lat,
                         "cpu_us_per_io": cpu * 1e6 / max(ios, 1)})
                    print(f"round {r + 1} {job[0]:<18} {s:<6} {iops:>10.0f} IOPS "
                          f"{bw / 1e6:>8.1f} MB/s lat {lat:>7.1f} us", file=sys.stderr)
            stop_scraping.set()
            for t in scrapers:
                t.join()
            scrapers.clear()
            for p in procs:
                stop(p)
            procs.clear()
        print(f"\n{'job':<18} {'raidd IOPS':>11} {'nbdkit IOPS':>12} {'ratio':>6} "
              f"{'raidd MB/s':>10} {'nbdkit MB/s':>11} {'raidd cpu/io':>12} {'nbdkit cpu/io':>13}")
        for job in jobs:
            n = job[0]
            med = {s: {k: statistics.median(x[k] for x in results[s][n])
                       for k in ("iops", "bw", "cpu_us_per_io")} for s in names}
            ratio = med["raidd"]["iops"] / med["nbdkit"]["iops"]
            print(f"{n:<18} {med['raidd']['iops']:>11.0f} {med['nbdkit']['iops']:>12.0f} "
                  f"{ratio:>6.2f} {med['raidd']['bw'] / 1e6:>10.1f} {med['nbdkit']['bw'] / 1e6:>11.1f} "
                  f"{med['raidd']['cpu_us_per_io']:>10.1f}us {med['nbdkit']['cpu_us_per_io']:>11.1f}us")
        if args.scrape:
            print(f"\n{'job':<18} {'raidd IOPS':>11} {'scraped IOPS':>13} {'scraped/raidd':>14} "
                  f"(/metrics fetched {scrapes[0]} times)")
            for job in jobs:
                n = job[0]
                r = statistics.median(x["iops"] for x in results["raidd"][n])
                s = statistics.median(x["iops"] for x in results["scraped"][n])
                print(f"{n:<18} {r:>11.0f} {s:>13.0f} {s / r:>14.3f}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)
    finally:
        for p in procs:
            stop(p)
        shutil.rmtree(shm, ignore_errors=True)


if __name__ == "__main__":
    main()
