#!/bin/bash
# A/B of NBD sequential-write throughput between two raidd binaries: RAID0 over four
# tmpfs images, one worker pinned to CPU 0, fio's nbd engine pinned to CPU 1, the two
# binaries alternating with a fresh process each round. Prints MiB/s per run.
# Usage: bench/nbd_write_ab.sh OLD_RAIDD NEW_RAIDD [ROUNDS]
set -euo pipefail
old=$1 new=$2 rounds=${3:-3}
dir=$(mktemp -d /dev/shm/raidd-ab.XXXXXX)
trap 'rm -rf "$dir"' EXIT
cd "$dir"
"$new" create --level raid0 --name ab --size 128M a.img b.img c.img d.img >/dev/null
printf 'control_socket = "%s/s"\nthreads = 1\n[[array]]\nname = "ab"\nmembers = ["a.img", "b.img", "c.img", "d.img"]\n[nbd]\nlisten = "127.0.0.1:10999"\n' "$dir" > c.toml
for round in $(seq "$rounds"); do
  for which in old new; do
    if [ "$which" = old ]; then bin=$old; else bin=$new; fi
    taskset -c 0 "$bin" serve --config c.toml 2>/dev/null & pid=$!
    for i in $(seq 100); do nbdinfo --size nbd://127.0.0.1:10999/ab >/dev/null 2>&1 && break; sleep 0.1; done
    for bs in 1M 8M; do
      taskset -c 1 fio --name=w --ioengine=nbd --uri=nbd://127.0.0.1:10999/ab --rw=write \
        --bs=$bs --iodepth=4 --size=256M --time_based --runtime=5 \
        --output-format=json --output=f.json >/dev/null 2>&1
      bw=$(python3 -c "import json; print(int(json.load(open('f.json'))['jobs'][0]['write']['bw']/1024))")
      echo "$which $bs $bw MiB/s"
    done
    kill -INT $pid; wait $pid || true
  done
done
