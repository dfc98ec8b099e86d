"""Helpers the benchmark scripts share: loopback ports, waiting for a server, CPU time."""
import os
import socket
import sys
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """User + system CPU seconds of a process, every thread (live and exited) included."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # utime and stime are fields 14 and 15 (1-based) of the whole line: 12 and 13 here.
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def parse_size(s):
    """Bytes in a size like 4096, 64K, 1G or 256MiB."""
    import re
    m = re.fullmatch(r"(\d+)([KMGT]?)i?B?", s.strip(), re.I)
    if not m:
        sys.exit(f"bad size {s!r}")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30, "T": 40}[m.group(2).upper()]


def fio_nbd(uri, job, seconds, size, cpus, ramp=True, ios=None):
    """Runs one fio job (name, rw, bs, iodepth) with the nbd engine against `uri`, pinned to
    `cpus` (None: not pinned), for `seconds`, or for `ios` requests (at most one pass over
    `size`) when given; returns fio's figures for the job's direction (iops, bw_bytes,
    total_ios, clat_ns, ...)."""
    import json
    import subprocess
    name, rw, bs, qd = job
    run = ([f"--number_ios={ios}"] if ios is not None
           else ["--time_based", f"--runtime={seconds}"] + (["--ramp_time=1"] if ramp else []))
    cmd = (["taskset", "-c", cpus] if cpus is not None else []) + [
        "fio", "--output-format=json", f"--name={name}", "--ioengine=nbd", f"--uri={uri}",
        f"--rw={rw}", f"--bs={bs}", f"--iodepth={qd}", f"--size={size}", "--randrepeat=0",
        "--norandommap"] + run
    out = subprocess.run(cmd, capture_output=True, text=True,
                         env={**os.environ, "PATH": "/usr/bin:/bin"})
    if out.returncode != 0:
        sys.exit(f"fio failed: {' '.join(cmd)}\n{out.stderr}")
    j = json.loads(out.stdout[out.stdout.index("{"):])["jobs"][0]
    return j["read"] if "read" in rw else j["write"]


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port, proc, what, timeout=60):
    """Waits until something listens on 127.0.0.1:port; exits if `proc` ends first."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"{what} exited early with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"{what} did not listen on port {port}")


def stop(proc):
    """SIGTERM, then SIGKILL if the process has not ended within 30 s."""
    import signal
    import subprocess
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Tgt:
    """tgtd serving one file as LUN 1 of target `iqn` on 127.0.0.1 (pinned to `cpus`)."""

    def __init__(self, lun_file, iqn, log_path, cpus=None):
        import subprocess
        self.port = free_port()
        self.control = str(self.port % 30000 + 100)
        self.log = open(log_path, "w")
        pin = ["taskset", "-c", cpus] if cpus else []
        self.proc = subprocess.Popen(
            pin + ["tgtd", "-f", "--iscsi", f"portal=127.0.0.1:{self.port}", "-C", self.control],
            stdout=self.log, stderr=self.log)
        wait_port(self.port, self.proc, "tgtd")
        adm = ["tgtadm", "-C", self.control, "--lld", "iscsi"]
        subprocess.run(adm + ["--op", "new", "--mode", "target", "--tid", "1", "-T", iqn],
                       check=True)
        subprocess.run(adm + ["--op", "new", "--mode", "logicalunit", "--tid", "1", "--lun",
                              "1", "-b", lun_file], check=True)
        subprocess.run(adm + ["--op", "bind", "--mode", "target", "--tid", "1", "-I", "ALL"],
                       check=True)
        self.url = f"iscsi://127.0.0.1:{self.port}/{iqn}/1"

    def stop(self):
        """tgtd ignores SIGTERM while it has targets: its own shutdown first, then `stop`."""
        import subprocess
        if self.proc.poll() is None:
            subprocess.run(["tgtadm", "-C", self.control, "--op", "delete", "--mode", "system",
                            "--force"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        stop(self.proc)
