#!/usr/bin/python3
"""libiscsi's conformance suite (iscsi-test-cu) against raidd and tgt in the same run.

raidd serves an array (RAID5 over four image files by default) as an iSCSI LUN; tgt serves
a file of exactly the same size. Each family of tests (ALL and iSCSI by default) runs
against both, and the script prints every test's result for both targets (pass, FAIL, skip:
a test that passed because it skipped itself), the totals, and the tests tgt passes that
raidd does not. Exit status 1 when there are any of those.

Usage: bench/iscsi_conformance.py [--raidd target/release/raidd] [--level raid5]
           [--members 4] [--member-size 96M] [--families ALL,iSCSI] [--json OUT] [--keep]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

from benchlib import Tgt, free_port, stop, wait_port

TARGET = "iqn.2026-11.org.raidd:conformance"
TGT_TARGET = "iqn.2026-11.org.raidd:tgt-peer"






def parse_cunit(text):
    """{suite.test: 'pass' | 'FAIL' | 'skip'} from iscsi-test-cu's verbose output."""
    results = {}
    suite = None
    current = None
    skipped = False
    for line in text.splitlines():
        m = re.match(r"^Suite: (\S+)", line)
        if m:
            suite = m.group(1)
            continue
        m = re.match(r"^  Test: (\S+) \.\.\.(.*)$", line)
        if m:
            current = f"{suite}.{m.group(1)}"
            skipped = "[SKIPPED]" in m.group(2)
            rest = m.group(2)
            # CUnit prints the verdict right after "...", but a test's own messages can
            # follow it on the same line.
            if rest.endswith("passed") or rest.startswith("passed"):
                results[current] = "skip" if skipped else "pass"
                current = None
            elif rest.endswith("FAILED"):
                results[current] = "FAIL"
                current = None
            continue
        if current is None:
            continue
        if "[SKIPPED]" in line:
            skipped = True
        if line.strip() == "passed" or line.endswith("...passed"):
            results[current] = "skip" if skipped else "pass"
            current = None
        elif line.strip() == "FAILED" or line.endswith("FAILED"):
            results[current] = "FAIL"
            current = None
    return results


def run_suite(url, family, log):
    cmd = ["iscsi-test-cu", "--dataloss", f"--test={family}", url]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    with open(log, "w") as f:
        f.write(" ".join(cmd) + "\n" + p.stdout + p.stderr)
    return parse_cunit(p.stdout + p.stderr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--raidd", default="target/release/raidd")
    ap.add_argument("--level", default="raid5")
    ap.add_argument("--members", type=int, default=4)
    ap.add_argument("--member-size", default="96M")
    ap.add_argument("--families", default="ALL,iSCSI")
    ap.add_argument("--json")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()
    for tool in ("iscsi-test-cu", "tgtd", "tgtadm", "iscsi-readcapacity16"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is missing (apt-get install libiscsi-bin tgt)")
    raidd = os.path.abspath(args.raidd)
    work = tempfile.mkdtemp(prefix="raidd-conformance-", dir="/var/tmp")
    procs = []
    tgt = None
    try:
        members = [os.path.join(work, f"d{i}.img") for i in range(args.members)]
        subprocess.run([raidd, "create", "--level", args.level, "--name", "conf",
                        "--size", args.member_size, "--assume-clean", *members], check=True,
                       stdout=subprocess.DEVNULL)
        port = free_port()
        conf = os.path.join(work, "raidd.toml")
        with open(conf, "w") as f:
            f.write(f"""control_socket = "raidd.sock"
[nbd]
listen = "127.0.0.1:0"
[iscsi]
listen = "127.0.0.1:{port}"
state_dir = "state"
[[array]]
name = "conf"
members = [{", ".join(json.dumps(m) for m in members)}]
[[target]]
name = "{TARGET}"
[[target.lun]]
lun = 0
array = "conf"
""")
        rlog = open(os.path.join(work, "raidd.log"), "w")
        rd = subprocess.Popen([raidd, "serve", "--config", conf], stdout=rlog, stderr=rlog)
        procs.append(rd)
        wait_port(port, rd, "raidd")
        url = f"iscsi://127.0.0.1:{port}/{TARGET}/0"
        cap = subprocess.run(["iscsi-readcapacity16", url], capture_output=True, text=True,
                             check=True).stdout
        size = int(re.search(r"Total size:(\d+)", cap).group(1))

        lun = os.path.join(work, "tgt.img")
        with open(lun, "wb") as f:
            f.truncate(size)
        tgt = Tgt(lun, TGT_TARGET, os.path.join(work, "tgtd.log"))
        turl = tgt.url

        results = {}
        for fam in args.families.split(","):
            t = run_suite(turl, fam, os.path.join(work, f"cu-tgt-{fam}.txt"))
            r = run_suite(url, fam, os.path.join(work, f"cu-raidd-{fam}.txt"))
            for name in sorted(set(t) | set(r)):
                results[f"{fam}:{name}"] = (t.get(name, "-"), r.get(name, "-"))
        print(f"{'test':58} {'tgt':>5} {'raidd':>6}")
        for name, (t, r) in results.items():
            mark = "  <-- regression" if t == "pass" and r != "pass" else ""
            print(f"{name:58} {t:>5} {r:>6}{mark}")
        for fam in args.families.split(","):
            rows = [v for k, v in results.items() if k.startswith(fam + ":")]
            for i, who in ((0, "tgt"), (1, "raidd")):
                c = {s: sum(1 for v in rows if v[i] == s) for s in ("pass", "FAIL", "skip")}
                print(f"{fam:6} {who:6} run {len(rows)}: {c['pass']} passed, {c['FAIL']} failed,"
                      f" {c['skip']} passed-as-skipped")
        worse = [k for k, (t, r) in results.items() if t == "pass" and r != "pass"]
        better = [k for k, (t, r) in results.items() if t != "pass" and r == "pass"]
        print(f"raidd runs for real {len(better)} tests tgt fails or skips")
        print(f"tests tgt passes that raidd does not: {len(worse)}")
        for k in worse:
            print("   ", k)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({k: {"tgt": t, "raidd": r} for k, (t, r) in results.items()}, f,
                          indent=1)
        print(f"logs in {work}" if args.keep else "")
        return 1 if worse else 0
    finally:
        if tgt is not None:
            tgt.stop()
        for p in reversed(procs):
            stop(p)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
