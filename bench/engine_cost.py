#!/usr/bin/python3
"""Engine instructions per write of any size, by function, counted by callgrind: what the
RAID layer itself costs, with data work left out. (Reads: bench/instructions.py, 4 KiB.)

`raidd bench io` runs under callgrind collecting only inside `Array::read` and
`Array::write` (--toggle-collect), so set-up and the load generator are not counted. Data
copies (memcpy/memmove/memset) and the parity kernels are left out of the total as well:
they are the bytes' work, which memory members turn into copies that real members do not
make. Requests are counted as calls of the array's write gate, once per write (a read has
no call that every path makes once and that is never inlined).

valgrind dies on AVX-512 code, so the binary must be an x86-64-v3 build:
  RUSTFLAGS="-C target-cpu=x86-64-v3" cargo build --release -p raidd --target-dir target/v3

Usage: bench/engine_cost.py RAIDD TARGET MEMBERS BS RW [TOP]      (RW: write or randwrite)
  e.g. bench/engine_cost.py target/v3/release/raidd raid6 6 1M write 10
"""
import os
import re
import subprocess
import sys
import tempfile

LEFT_OUT = re.compile(r"memcpy|memmove|memset|kernels::")


def calls_into(tree, fn):
    """Calls into functions whose name contains `fn`, from callgrind_annotate's caller tree."""
    total, pending = 0, []
    for line in tree.splitlines():
        m = re.match(r"\s*[\d,]+ \([^)]*\)\s+([<*])\s+(.*)", line)
        if not m:
            pending = []
            continue
        if m.group(1) == "<":
            c = re.search(r"\(([\d,]+)x\)", m.group(2))
            pending.append(int(c.group(1).replace(",", "")) if c else 0)
        else:
            if m.group(2).endswith("]") and fn in m.group(2):
                total += sum(pending)
            pending = []
    return total


def self_costs(ann):
    """Self instructions per function (data work left out)."""
    d = {}
    for line in ann.splitlines():
        m = re.match(r"\s*([\d,]+) \([^)]*\)\s+(.*)", line)
        if not m or "PROGRAM TOTALS" in line:
            continue
        name = re.sub(r" \[.*\]$", "", m.group(2))
        name = re.sub(r"^[^:]*:(?=[^:])", "", name, count=1)
        if LEFT_OUT.search(name):
            continue
        d[name] = d.get(name, 0) + int(m.group(1).replace(",", ""))
    return d


def main():
    if len(sys.argv) < 6:
        sys.exit(__doc__)
    raidd, target, members, bs, rw = sys.argv[1:6]
    top = int(sys.argv[6]) if len(sys.argv) > 6 else 25
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cg")
        run = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
             "--toggle-collect=*Array::write::{{closure}}",
             "--toggle-collect=*Array::read::{{closure}}",
             raidd, "bench", "io", "--target", target, "--members", members,
             "--member-size", "32M", "--chunk", "64K", "--rw", rw, "--bs", bs, "--qd", "8",
             "--seconds", "2"], capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit(f"raidd bench io under callgrind failed:\n{run.stderr[-2000:]}")
        ann = subprocess.run(["callgrind_annotate", "--threshold=100", "--auto=no", out],
                             capture_output=True, text=True, check=True).stdout
        tree = subprocess.run(["callgrind_annotate", "--tree=caller", "--threshold=100",
                               "--auto=no", out], capture_output=True, text=True,
                              check=True).stdout
    if "read" in rw:
        sys.exit("writes only: write or randwrite")
    counter = "Array::enter_gate::{{closure}}"
    reqs = calls_into(tree, counter)
    if reqs == 0:
        sys.exit(f"no requests counted (no calls into {counter})")
    costs = self_costs(ann)
    total = sum(costs.values())
    print(f"{target} over {members}, {bs} {rw}: {reqs} requests, "
          f"{total / reqs:,.0f} engine instructions per request")
    for name, n in sorted(costs.items(), key=lambda x: -x[1])[:top]:
        print(f"{n / reqs:9,.0f}  {name[:150]}")


if __name__ == "__main__":
    main()
