#!/usr/bin/python3
"""Memory of idle NBD connections: the daemon's resident memory before and after N clients
finish the handshake and sit idle in the transmission phase, per connection.

Usage: bench/idle_memory.py [--connections N] [--raidd target/release/raidd]
"""
import argparse
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def connect(port, export):
    s = socket.create_connection(("127.0.0.1", port))
    greet = s.recv(18, socket.MSG_WAITALL)
    assert greet[:16] == b"NBDMAGICIHAVEOPT", greet
    s.sendall(struct.pack(">I", 3))  # FIXED_NEWSTYLE | NO_ZEROES
    name = export.encode()
    s.sendall(b"IHAVEOPT" + struct.pack(">II", 1, len(name)) + name)
    info = s.recv(10, socket.MSG_WAITALL)
    assert len(info) == 10, info
    return s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--connections", type=int, default=1000)
    ap.add_argument("--raidd", default="target/release/raidd")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="raidd-idle-", dir="/dev/shm")
    proc = None
    try:
        img = os.path.join(tmp, "m.img")
        subprocess.run([args.raidd, "create", "--level", "linear", "--name", "idle",
                        "--size", "64M", img], check=True, stdout=subprocess.DEVNULL)
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        conf = os.path.join(tmp, "r.toml")
        with open(conf, "w") as f:
            f.write(f'control_socket = "{tmp}/c.sock"\nthreads = 2\n[nbd]\n'
                    f'listen = "127.0.0.1:{port}"\n[[array]]\nname = "idle"\nmembers = ["{img}"]\n')
        proc = subprocess.Popen([args.raidd, "serve", "--config", conf], stderr=subprocess.DEVNULL)
        for _ in range(300):
            try:
                connect(port, "idle").close()
                break
            except OSError:
                time.sleep(0.05)
        # Warm up: one connection's worth of one-time allocations.
        warm = [connect(port, "idle") for _ in range(8)]
        time.sleep(0.5)
        before = rss_kib(proc.pid)
        conns = [connect(port, "idle") for _ in range(args.connections)]
        time.sleep(1.0)
        after = rss_kib(proc.pid)
        per = (after - before) * 1024 / args.connections
        print(f"{args.connections} idle connections: RSS {before} KiB -> {after} KiB, "
              f"{per / 1024:.1f} KiB per connection")
        for c in conns + warm:
            c.close()
    finally:
        if proc and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
