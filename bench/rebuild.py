#!/usr/bin/python3
"""Rebuild speed and foreground throughput during a rebuild.

In one run, on image files in one directory (one disk):
 1. a member's sequential write bandwidth, measured directly with fio (O_DIRECT, 1 MiB,
    io_uring, QD8) on a file the size of a member;
 2. the rebuild rate of an idle array: `raidd serve` with the speed cap lifted, a member
    failed, a pool spare rebuilt; rate = member bytes / rebuild seconds (from the daemon);
 3. foreground throughput through NBD (fio's nbd engine) without a rebuild and during one at
    md's default limits (min 1000 KiB/s, max 200000 KiB/s), with the rebuild's own rate.
Prints the ratios: rebuild / member write (target >= 0.8), foreground during a rebuild /
healthy, and foreground degraded with no rebuild / healthy (a rebuild runs on a degraded
array; below its recovery point writes go to every member again, so "during" sits between
degraded and healthy when the rebuild itself costs nothing).

Usage: bench/rebuild.py [--level raid5] [--members 4] [--size 1G] [--dir /var/tmp]
                        [--rounds 3] [--json OUT]
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import free_port, parse_size

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RAIDD = os.path.join(ROOT, "target", "release", "raidd")
ENV = dict(os.environ, PATH="/usr/sbin:/usr/bin:/sbin:/bin")


def run(args, **kw):
    return subprocess.run(args, check=True, capture_output=True, text=True, env=ENV, **kw)




def fio_json(args):
    out = run(["fio", "--output-format=json"] + args).stdout
    # Engines may print notes before the JSON document.
    return json.loads(out[out.index("{"):])["jobs"][0]


def member_write_bw(path, size):
    j = fio_json([
        "--name=member", f"--filename={path}", "--rw=write", "--bs=1M", "--iodepth=8",
        "--direct=1", "--ioengine=io_uring", f"--size={size}", "--end_fsync=1",
    ])
    return j["write"]["bw_bytes"]


RUNNING = []


class Daemon:
    def __init__(self, workdir, config):
        self.workdir = workdir
        path = os.path.join(workdir, "raidd.toml")
        with open(path, "w") as f:
            f.write(config)
        self.ctl = os.path.join(workdir, "ctl.sock")
        self.log = open(os.path.join(workdir, "serve.log"), "w")
        self.proc = subprocess.Popen([RAIDD, "serve", "-v", "--config", path],
                                     stderr=self.log, env=ENV)
        RUNNING.append(self.proc)
        deadline = time.time() + 60
        while not os.path.exists(self.ctl):
            if self.proc.poll() is not None or time.time() > deadline:
                with open(self.log.name) as f:
                    sys.exit("raidd serve did not start:\n" + f.read())
            time.sleep(0.05)

    def cli(self, *args):
        return run([RAIDD] + list(args) + ["--control", self.ctl])

    def status(self, name):
        j = json.loads(self.cli("status", "--json").stdout)
        return next(a["status"] for a in j["arrays"] if a["name"] == name)

    def wait_rebuilt(self, name):
        while True:
            st = self.status(name)
            if st["sync"] is None and all(s["state"] == "insync" for s in st["slots"]):
                return st
            time.sleep(0.05)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=120)
        self.log.close()


def config(workdir, members, spares, speed_max, port):
    text = f'control_socket = "{workdir}/ctl.sock"\n[nbd]\nlisten = "127.0.0.1:{port}"\n'
    if speed_max:
        text += f"[sync]\nspeed_min = 1000\nspeed_max = {speed_max}\n"
    for s in spares:
        text += f'[[spare]]\npath = "{s}"\n'
    text += "[[array]]\nname = \"vol\"\nmembers = [" + ", ".join(f'"{m}"' for m in members) + "]\n"
    return text


def fresh_array(workdir, level, n, size):
    for f in os.listdir(workdir):
        os.unlink(os.path.join(workdir, f))
    members = [os.path.join(workdir, f"m{i}.img") for i in range(n)]
    run([RAIDD, "create", "--level", level, "--name", "vol", "--size", size, "--force"] + members)
    spare = os.path.join(workdir, "spare.img")
    with open(spare, "wb") as f:
        f.truncate(parse_size(size) + (64 << 20))
    return members, [spare]


def foreground(port, seconds):
    j = fio_json([
        "--name=fg", "--ioengine=nbd", f"--uri=nbd://127.0.0.1:{port}/vol", "--rw=randrw",
        "--bs=64k", "--iodepth=8", "--time_based", f"--runtime={seconds}", "--size=512m",
    ])
    return j["read"]["bw_bytes"] + j["write"]["bw_bytes"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--level", default="raid5")
    ap.add_argument("--members", type=int, default=4)
    ap.add_argument("--size", default="1G")
    ap.add_argument("--dir", default="/var/tmp")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--json")
    a = ap.parse_args()
    if not os.path.exists(RAIDD):
        sys.exit("build first: cargo build --release")
    workdir = tempfile.mkdtemp(prefix="raidd-rebuild-", dir=a.dir)
    port = free_port()
    rows = {"member_write": [], "rebuild_idle": [], "fg_alone": [], "fg_during": [],
            "rebuild_during": [], "fg_degraded": []}
    try:
        for r in range(a.rounds):
            # 1. The member's own sequential write bandwidth, on this disk.
            probe = os.path.join(workdir, "probe.img")
            rows["member_write"].append(member_write_bw(probe, a.size))
            os.unlink(probe)
            # 2. Rebuild of an idle array, speed cap lifted.
            members, spares = fresh_array(workdir, a.level, a.members, a.size)
            d = Daemon(workdir, config(workdir, members, spares, 10_000_000, port))
            d.cli("fail", "vol", members[1])
            st = d.wait_rebuilt("vol")
            secs = st["last_sync"]["seconds"]
            used = parse_size(a.size)
            rows["rebuild_idle"].append(used / secs)
            d.stop()
            # 3. Foreground without and during a rebuild at md's default limits.
            members, spares = fresh_array(workdir, a.level, a.members, a.size)
            d = Daemon(workdir, config(workdir, members, spares, None, port))
            rows["fg_alone"].append(foreground(port, a.seconds))
            d.cli("fail", "vol", members[1])
            time.sleep(0.5)
            rows["fg_during"].append(foreground(port, a.seconds))
            st = d.wait_rebuilt("vol")
            rows["rebuild_during"].append(used / st["last_sync"]["seconds"])
            d.stop()
            # 4. The same degraded, with no spare to rebuild onto: what degraded service
            # costs by itself.
            members, _ = fresh_array(workdir, a.level, a.members, a.size)
            d = Daemon(workdir, config(workdir, members, [], None, port))
            d.cli("fail", "vol", members[1])
            time.sleep(0.5)
            rows["fg_degraded"].append(foreground(port, a.seconds))
            d.stop()
            print(f"round {r + 1}: " + ", ".join(
                f"{k} {v[-1] / 2**20:.0f} MiB/s" for k, v in rows.items()), flush=True)
    finally:
        for p in RUNNING:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(workdir, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in rows.items()}
    print(f"\n{a.level}, {a.members} members of {a.size}, {a.rounds} rounds (medians):")
    print(f"  member sequential write (fio, O_DIRECT 1M QD8): {med['member_write'] / 2**20:8.0f} MiB/s")
    print(f"  rebuild of an idle array (cap lifted):          {med['rebuild_idle'] / 2**20:8.0f} MiB/s"
          f"   ratio {med['rebuild_idle'] / med['member_write']:.2f} (target >= 0.8)")
    print(f"  foreground 64k randrw QD8 without rebuild:      {med['fg_alone'] / 2**20:8.0f} MiB/s")
    print(f"  foreground during rebuild (default limits):     {med['fg_during'] / 2**20:8.0f} MiB/s"
          f"   ratio {med['fg_during'] / med['fg_alone']:.2f}")
    print(f"  rebuild rate meanwhile:                         {med['rebuild_during'] / 2**20:8.0f} MiB/s")
    print(f"  foreground degraded, no rebuild:                {med['fg_degraded'] / 2**20:8.0f} MiB/s"
          f"   ratio {med['fg_degraded'] / med['fg_alone']:.2f}")
    print(f"  during rebuild / degraded without rebuild:      "
          f"{med['fg_during'] / med['fg_degraded']:8.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "rounds": rows, "medians": med}, f, indent=1)


if __name__ == "__main__":
    main()
