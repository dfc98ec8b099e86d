//! Arrays as local block devices through ublk. This host's kernel has no ublk_drv: here the
//! daemon says so, names the module, points to NBD, and serves on. The rest runs raidd
//! inside a guest on Debian 12's 6.12 kernel (scripts/vm.sh build-ublk; `#[ignore]`d in a
//! plain `cargo test`, run by scripts/test.sh with RAIDD_VM_UBLK): a filesystem on
//! /dev/ublkb0, fio's verified writes, a kill -9 of raidd under load that the next raidd
//! takes over with no request lost, and a member failing under load while a spare rebuilds.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};

use common::daemon::{array_config, create_array, Daemon};
use common::scratch;

/// `raidd serve` with a `[[ublk]]` entry on a kernel without ublk: the device is not made,
/// the reason names ublk_drv and NBD, and the array is still served; `raidd ublk add` is
/// refused with the same reason (and bad requests with theirs), changing nothing.
#[test]
fn without_ublk_drv_the_device_is_refused_clearly_and_nbd_serves_on() {
    if Path::new("/dev/ublk-control").exists() {
        eprintln!("this kernel has ublk: the guest tests cover it");
        return;
    }
    let dir = scratch();
    let m = create_array(dir.path(), "raid1", 2, &[]);
    let cfg = format!("{}[[ublk]]\narray = \"raid1\"\n", array_config("raid1", &m));
    let d = Daemon::start(dir.path(), &cfg);
    let log = d.log();
    assert!(
        log.contains("/dev/ublkb0 (raid1) is not made: ublk is not available")
            && log.contains("ublk_drv")
            && log.contains("NBD"),
        "{log}"
    );
    let st = d.status();
    let u = &st["ublk"][0];
    assert_eq!(u["device"], "/dev/ublkb0", "{st}");
    assert!(
        u["error"].as_str().unwrap().contains("modprobe ublk_drv"),
        "{st}"
    );
    let text = common::raidd(&["status", "--control", d.control.to_str().unwrap()])
        .ok()
        .text();
    assert!(
        text.contains("/dev/ublkb0 : raid1 not made: ublk is not available"),
        "{text}"
    );
    assert!(d.export_size("raid1") > 20 << 20);
    // Asked of the running daemon: refused the same way, nothing changed.
    let ctl = d.control.to_str().unwrap();
    let add = |args: &[&str]| {
        let mut a = vec!["ublk", "add", "--control", ctl];
        a.extend_from_slice(args);
        common::raidd(&a)
    };
    let e = add(&["--array", "raid1", "--id", "4"]).expect(1);
    assert!(e.error().contains("modprobe ublk_drv"), "{}", e.error());
    let e = add(&["--array", "nosuch"]).expect(3);
    assert!(e.error().contains("no array named"), "{}", e.error());
    let e = add(&["--array", "raid1", "--max-io", "3K"]).expect(2);
    assert!(e.error().contains("4K to 4M"), "{}", e.error());
    let e = common::raidd(&["ublk", "remove", "4", "--control", ctl]).expect(3);
    assert!(e.error().contains("not served"), "{}", e.error());
    let st = d.status();
    assert_eq!(st["ublk"].as_array().map(Vec::len), Some(1), "{st}");
    d.stop();
    let e = common::raidd(&["ublk", "list"]).expect(3);
    assert!(e.error().contains("ublk_drv"), "{}", e.error());
}

const MEMBER_BYTES: u64 = 64 << 20;

fn boot(share: &Path, job: &str, disks: &[PathBuf]) -> (bool, String) {
    let vm = common::guest::vm_dir("RAIDD_VM_UBLK", "build-ublk");
    common::guest::boot(&vm, share, job, disks, None)
}

/// The whole array as /dev/ublkb0, as most jobs serve it.
const WHOLE: &str = "[[ublk]]\narray = \"vol\"\n";

/// The start of every guest job: ublk_drv loaded, a RAID5 named vol over /dev/vdb to
/// /dev/vde made with raidd, a config serving it (`sections`: its `[[ublk]]`, `[[export]]`
/// and `[[spare]]` tables; NBD on 127.0.0.1:10809), and shell functions: `serve` starts
/// raidd in the background and waits until `raidd status` shows `device` (a line start
/// such as `/dev/ublkb0 : vol`), `writes` prints the array's write count and `wait_writes
/// N` waits until it passes N, `fio_verify
/// ARGS` runs fio's verified writes on /dev/ublkb0.
fn prelude(sections: &str, device: &str) -> String {
    format!(
        r#"set -u
fail=0
modprobe ublk_drv || exit 3
./raidd create --level raid5 --name vol --chunk 64K /dev/vdb /dev/vdc /dev/vdd /dev/vde >/dev/null 2>&1 || exit 4
cat >/tmp/raidd.toml <<EOT
control_socket = "/tmp/raidd.sock"
[sync]
speed_min = 1000000
speed_max = 1000000
[nbd]
listen = "127.0.0.1:10809"
[[array]]
name = "vol"
members = ["/dev/vdb", "/dev/vdc", "/dev/vdd", "/dev/vde"]
{sections}
EOT
serve() {{
  ./raidd serve -v --config /tmp/raidd.toml >>/tmp/serve.log 2>&1 &
  pid=$!
  n=0
  until ./raidd status --control /tmp/raidd.sock 2>/dev/null | grep -q '^{device}'; do
    n=$((n + 1)); [ $n -lt 600 ] || {{ echo 'NOT SERVED'; cat /tmp/serve.log; exit 5; }}
    kill -0 $pid 2>/dev/null || {{ echo 'SERVE DIED'; cat /tmp/serve.log; exit 5; }}
    sleep 0.1
  done
}}
writes() {{
  ./raidd status --json --control /tmp/raidd.sock | grep -Eo '"writes": ?[0-9]+' | head -1 | grep -Eo '[0-9]+$'
}}
wait_writes() {{
  n=0
  until [ "$(writes)" -gt "$1" ] 2>/dev/null; do
    n=$((n + 1)); [ $n -lt 1200 ] || {{ echo 'NO WRITES'; exit 6; }}
    sleep 0.1
  done
}}
fio_verify() {{
  fio --name=v --filename=/dev/ublkb0 --direct=1 --ioengine=libaio --verify=crc32c \
    --verify_fatal=1 --randrepeat=1 --output-format=terse "$@" >/tmp/fio.out 2>&1
}}
# Waits for the fio started in the background ($fpid), at most 180 s: a request that never
# ends fails the job with what raidd and the kernel say, not the guest's whole timeout.
wait_fio() {{
  n=0
  # Running and not a zombie (sh may not reap a background job before it is waited for).
  while s=$(cut -d' ' -f3 /proc/$fpid/stat 2>/dev/null) && [ -n "$s" ] && [ "$s" != Z ]; do
    n=$((n + 1))
    [ $n -lt 1800 ] || {{
      echo 'FIO HUNG: no end in 180 s'
      ./raidd status --control /tmp/raidd.sock
      echo "in flight (reads writes): $(cat /sys/block/ublkb0/inflight 2>/dev/null)"
      tail -40 /tmp/serve.log
      kill -9 $(cat /proc/$fpid/task/$fpid/children 2>/dev/null) $fpid
      return 1
    }}
    sleep 0.1
  done
  wait $fpid
}}
"#
    )
}

/// RAID5 over four members as /dev/ublkb0 in the guest: ext4 made, a file tree copied,
/// unmounted, mounted again, `fsck -fn` clean and every checksum equal; fio's verified 4K
/// random writes at QD32 and 1 MiB sequential writes; WRITE_ZEROES zeroes its range and no
/// more. While it serves, `raidd ublk add` makes a read-only /dev/ublkb1 of the same array
/// (same bytes, writes refused) and `raidd ublk remove` takes it away (both refused when
/// repeated); a SIGHUP with an edited config makes /dev/ublkb2 and the next one removes
/// it, the filesystem staying clean. A clean stop leaves no ublk device.
#[test]
#[ignore = "needs the ublk guest: scripts/test.sh runs it"]
fn a_raid5_is_a_local_disk_with_a_filesystem_on_it() {
    let dir = scratch();
    let (disks, share) = common::guest::blank_images(dir.path(), "m", 4, MEMBER_BYTES);
    let job = prelude(WHOLE, "/dev/ublkb0 : vol")
        + r#"
serve
size=$(blockdev --getsize64 /dev/ublkb0)
echo "SIZE $size OPT $(cat /sys/block/ublkb0/queue/optimal_io_size) CACHE $(cat /sys/block/ublkb0/queue/write_cache)"
fio_verify --rw=randwrite --bs=4k --iodepth=32 --size=64M || { echo 'FIO RANDOM FAILED'; cat /tmp/fio.out; fail=1; }
fio_verify --rw=write --bs=1M --iodepth=4 || { echo 'FIO SEQUENTIAL FAILED'; cat /tmp/fio.out; fail=1; }
# WRITE_ZEROES: a range of pattern bytes reads back as zeros, and only that range.
dd if=/dev/urandom of=/tmp/rand bs=1M count=2 2>/dev/null
dd if=/tmp/rand of=/dev/ublkb0 bs=1M count=2 oflag=direct 2>/dev/null || fail=1
blkdiscard -z -o 524288 -l 1048576 /dev/ublkb0 || { echo 'WRITE ZEROES FAILED'; fail=1; }
cmp -n 1048576 -i 524288 /dev/ublkb0 /dev/zero || { echo 'NOT ZEROED'; fail=1; }
cmp -n 524288 /dev/ublkb0 /tmp/rand || { echo 'ZEROED TOO MUCH'; fail=1; }
cmp -n 524288 -i 1572864 /dev/ublkb0 /tmp/rand || { echo 'ZEROED TOO MUCH'; fail=1; }
echo "DISCARD MAX $(cat /sys/block/ublkb0/queue/discard_max_bytes) ZEROES MAX $(cat /sys/block/ublkb0/queue/write_zeroes_max_bytes)"
mkfs.ext4 -q -F /dev/ublkb0 || fail=1
mkdir -p /mnt/x
mount /dev/ublkb0 /mnt/x || fail=1
cp -a /etc /usr/share/perl5 /usr/lib/x86_64-linux-gnu/perl-base /mnt/x/ 2>/dev/null
(cd /mnt/x && find . -type f -exec md5sum {} + | sort -k2) >/tmp/sums
echo "FILES $(wc -l </tmp/sums)"
umount /mnt/x || fail=1
mount /dev/ublkb0 /mnt/x || fail=1
(cd /mnt/x && md5sum --quiet -c /tmp/sums) || { echo 'CHECKSUMS DIFFER'; fail=1; }
umount /mnt/x || fail=1
fsck.ext4 -fn /dev/ublkb0 >/tmp/fsck.out 2>&1 || { echo 'FSCK FAILED'; cat /tmp/fsck.out; fail=1; }
# Devices come and go while it serves: one added and removed over the control socket, one
# from the edited config on SIGHUP and gone with the next.
wait_dev() {
  n=0
  while [ "$([ -b "$1" ] && echo present || echo absent)" != "$2" ]; do
    n=$((n + 1)); [ $n -lt 300 ] || { echo "$1 NOT $2"; fail=1; return; }
    sleep 0.1
  done
}
./raidd ublk add --array vol --id 1 --read-only --control /tmp/raidd.sock || { echo 'UBLK ADD FAILED'; fail=1; }
wait_dev /dev/ublkb1 present
cmp -n 16777216 /dev/ublkb0 /dev/ublkb1 && echo 'ADDED SERVES THE ARRAY'
echo "ADDED RO $(blockdev --getro /dev/ublkb1)"
dd if=/dev/zero of=/dev/ublkb1 bs=4k count=1 oflag=direct 2>/dev/null && { echo 'READ-ONLY WRITTEN'; fail=1; }
./raidd ublk add --array vol --id 1 --control /tmp/raidd.sock 2>/dev/null; echo "ADD AGAIN RC $?"
./raidd ublk remove 1 --control /tmp/raidd.sock || { echo 'UBLK REMOVE FAILED'; fail=1; }
wait_dev /dev/ublkb1 absent
./raidd ublk remove 1 --control /tmp/raidd.sock 2>/dev/null; echo "REMOVE AGAIN RC $?"
cp /tmp/raidd.toml /tmp/raidd.orig
printf '[[ublk]]\narray = "vol"\nid = 2\n' >>/tmp/raidd.toml
kill -HUP $pid
wait_dev /dev/ublkb2 present
cmp -n 16777216 /dev/ublkb0 /dev/ublkb2 && echo 'RELOADED SERVES THE ARRAY'
cp /tmp/raidd.orig /tmp/raidd.toml
kill -HUP $pid
wait_dev /dev/ublkb2 absent
fsck.ext4 -fn /dev/ublkb0 >/tmp/fsck.out 2>&1 || { echo 'FSCK AFTER FAILED'; cat /tmp/fsck.out; fail=1; }
grep 'reload: /dev/ublkb2' /tmp/serve.log | sed 's/.*reload: /RELOAD /'
kill $pid
wait $pid
echo "SERVE RC $?"
ls /dev/ublkb* /dev/ublkc* 2>/dev/null && { echo 'DEVICE LEFT'; fail=1; }
grep -q 'array closed cleanly' /tmp/serve.log || { echo 'NOT CLOSED CLEANLY'; fail=1; }
tail -5 /tmp/serve.log
exit $fail
"#;
    let (ok, log) = boot(&share, &job, &disks);
    assert!(ok, "the guest job failed:\n{log}");
    assert!(log.contains("SERVE RC 0"), "{log}");
    for want in [
        "ADDED SERVES THE ARRAY",
        "ADDED RO 1",
        "ADD AGAIN RC 4",
        "REMOVE AGAIN RC 3",
        "RELOADED SERVES THE ARRAY",
        "RELOAD /dev/ublkb2 added",
        "RELOAD /dev/ublkb2 removed",
    ] {
        assert!(log.contains(want), "no {want:?} in\n{log}");
    }
    assert!(log.contains("CACHE write back"), "{log}");
    // RAID5 does not discard (a chunk would no longer match its parity); it writes zeros.
    assert!(log.contains("DISCARD MAX 0 ZEROES MAX 524288"), "{log}");
    let files: usize = log
        .lines()
        .find_map(|l| l.strip_prefix("FILES "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    assert!(files > 100, "a file tree was copied: {log}");
}

/// raidd killed with SIGKILL while fio writes through /dev/ublkb0, after the array was
/// switched to md's partial parity log and a member failed under that load: the kernel
/// keeps the device and holds its requests; the next `raidd serve` starts the dirty
/// degraded array from the log first (no `--start-dirty-degraded`), then takes the device
/// over, the requests go on (those in flight at the kill are issued again), and fio
/// verifies every block.
#[test]
#[ignore = "needs the ublk guest: scripts/test.sh runs it"]
fn raidd_killed_under_load_is_taken_over_and_no_write_is_lost() {
    let dir = scratch();
    let (disks, share) = common::guest::blank_images(dir.path(), "m", 4, MEMBER_BYTES);
    let job = prelude(WHOLE, "/dev/ublkb0 : vol")
        + r#"
serve
fio_verify --rw=randwrite --bs=4k --iodepth=32 --size=48M --rate=6m &
fpid=$!
wait_writes 1000
./raidd grow --array vol --consistency-policy ppl --control /tmp/raidd.sock || { echo 'GROW FAILED'; fail=1; }
./raidd fail vol /dev/vde --control /tmp/raidd.sock || { echo 'FAIL FAILED'; fail=1; }
wait_writes 2000
kill -9 $pid
wait $pid 2>/dev/null
echo "KILLED with $(ls /dev/ublkb0) still there"
./raidd ublk list
serve
grep -q 'taken over' /tmp/serve.log || { echo 'NOT TAKEN OVER'; fail=1; }
r=$(grep -n 'recovered from the partial parity log' /tmp/serve.log | head -1 | cut -d: -f1)
t=$(grep -n 'taken over' /tmp/serve.log | tail -1 | cut -d: -f1)
[ -n "$r" ] && [ "$r" -lt "$t" ] || { echo 'NOT RECOVERED BEFORE THE TAKEOVER'; fail=1; }
./raidd status --control /tmp/raidd.sock | grep -i 'ppl\|parity log\|degraded' | head -5
wait_fio || { echo 'FIO FAILED'; cat /tmp/fio.out; fail=1; }
echo "FIO $(cut -d';' -f1-8 /tmp/fio.out | tail -1)"
kill $pid
wait $pid
echo "SERVE RC $?"
ls /dev/ublkb0 2>/dev/null && { echo 'DEVICE LEFT'; fail=1; }
# A device whose raidd dies and does not come back is removed by hand.
serve
kill -9 $pid
wait $pid 2>/dev/null
./raidd ublk delete 0 || fail=1
ls /dev/ublkb0 2>/dev/null && { echo 'NOT DELETED'; fail=1; }
./raidd ublk list
exit $fail
"#;
    let (ok, log) = boot(&share, &job, &disks);
    assert!(ok, "the guest job failed:\n{log}");
    assert!(log.contains("KILLED with /dev/ublkb0 still there"), "{log}");
    assert!(
        log.contains("/dev/ublkb0: quiesced, raidd pid") && log.contains("(gone)"),
        "raidd ublk list shows the device waiting: {log}"
    );
    assert!(
        log.contains("/dev/ublkb0 deleted") && log.contains("no ublk devices"),
        "{log}"
    );
    assert!(log.contains("SERVE RC 0"), "{log}");
}

/// A member failed while fio writes through /dev/ublkb0: the pool's spare rebuilds under
/// the load, fio verifies every block, and a check afterwards finds no mismatch.
#[test]
#[ignore = "needs the ublk guest: scripts/test.sh runs it"]
fn a_member_fails_under_load_and_a_spare_rebuilds_it() {
    let dir = scratch();
    let (disks, share) = common::guest::blank_images(dir.path(), "m", 5, MEMBER_BYTES);
    let sections = format!("{WHOLE}[[spare]]\npath = \"/dev/vdf\"\n");
    let job = prelude(&sections, "/dev/ublkb0 : vol")
        + r#"
serve
fio_verify --rw=randwrite --bs=4k --iodepth=32 --size=48M --rate=6m &
fpid=$!
wait_writes 1000
./raidd fail vol /dev/vdc --control /tmp/raidd.sock || fail=1
n=0
until ./raidd detail vol --json --control /tmp/raidd.sock | grep -q '"member": "/dev/vdf"' &&
      ./raidd detail vol --json --control /tmp/raidd.sock | grep -q '"sync": null'; do
  n=$((n + 1)); [ $n -lt 3000 ] || { echo 'NOT REBUILT'; fail=1; break; }
  sleep 0.1
done
echo "REBUILT while fio ran: $(kill -0 $fpid 2>/dev/null && echo yes || echo no)"
wait_fio || { echo 'FIO FAILED'; cat /tmp/fio.out; fail=1; }
./raidd check vol --wait --control /tmp/raidd.sock || fail=1
kill $pid
wait $pid
echo "SERVE RC $?"
exit $fail
"#;
    let (ok, log) = boot(&share, &job, &disks);
    assert!(ok, "the guest job failed:\n{log}");
    assert!(log.contains("REBUILT while fio ran: yes"), "{log}");
    assert!(
        log.contains("check finished") && log.contains(" 0 mismatched sectors"),
        "{log}"
    );
    assert!(log.contains("SERVE RC 0"), "{log}");
}

/// Seed 003's iNAS in the guest: a RAID5 with two volumes; volume 1 is /dev/ublkb0 with
/// ext4 on it, exported by the guest kernel's NFS server and mounted by NFS clients (v4.2
/// and v3) that write file trees and read each other's back; volume 2 is an NBD export the
/// kernel's NBD client verifies with fio at the same time. Afterwards the checksums are
/// equal, the filesystem is clean and `raidd check` finds 0 mismatches.
#[test]
#[ignore = "needs the ublk guest: scripts/test.sh runs it"]
fn block_and_file_service_from_one_pool() {
    let dir = scratch();
    let (disks, share) = common::guest::blank_images(dir.path(), "m", 4, MEMBER_BYTES);
    let sections = "[[export]]\nname = \"blk\"\narray = \"vol\"\nvolume = \"blocks\"\n\
                    [[ublk]]\narray = \"vol\"\nvolume = \"files\"\nid = 1\n";
    let job = prelude(sections, "/dev/ublkb1 : vol/files")
        + r#"
modprobe nbd || exit 3
M="/dev/vdb /dev/vdc /dev/vdd /dev/vde"
./raidd volume create --name files --size 112M $M || exit 7
./raidd volume create --name blocks --size 64M $M || exit 7
serve
mkfs.ext4 -q -F /dev/ublkb1 || exit 8
mkdir -p /srv/nas /mnt/v4 /mnt/v3
mount /dev/ublkb1 /srv/nas || exit 8
mount -t nfsd nfsd /proc/fs/nfsd || exit 9
rpcbind || exit 9
echo '/srv/nas 127.0.0.1(rw,sync,no_root_squash,no_subtree_check,fsid=1)' >/etc/exports
exportfs -ra || exit 9
rpc.mountd || exit 9
rpc.nfsd 4 || exit 9
mount -t nfs -o vers=4.2 127.0.0.1:/srv/nas /mnt/v4 || exit 10
mount -t nfs -o vers=3,nolock 127.0.0.1:/srv/nas /mnt/v3 || exit 10
echo "NFS $(grep -cE ' nfs4? ' /proc/mounts) mounts"
nbd-client 127.0.0.1 10809 /dev/nbd0 -N blk || exit 11
echo "BLOCK $(blockdev --getsize64 /dev/nbd0)"
fio --name=b --filename=/dev/nbd0 --direct=1 --ioengine=libaio --iodepth=16 --rw=randwrite \
  --bs=16k --verify=crc32c --verify_fatal=1 --randrepeat=1 --output-format=terse >/tmp/fio.out 2>&1 &
fpid=$!
(mkdir /mnt/v4/a && cp -a /etc /usr/share/perl5 /mnt/v4/a/ && sync) &
c4=$!
(mkdir /mnt/v3/b && cp -a /usr/lib/x86_64-linux-gnu/perl-base /usr/share/zoneinfo /mnt/v3/b/ && sync) &
c3=$!
wait $c4 || { echo 'NFS v4.2 COPY FAILED'; fail=1; }
wait $c3 || { echo 'NFS v3 COPY FAILED'; fail=1; }
(cd /etc && find . -type f -exec md5sum {} + | sort -k2) >/tmp/etc.sums
(cd /usr/share/zoneinfo && find . -type f -exec md5sum {} + | sort -k2) >/tmp/zone.sums
(cd /mnt/v3/a/etc && md5sum --quiet -c /tmp/etc.sums) || { echo 'v4 FILES DIFFER THROUGH v3'; fail=1; }
(cd /mnt/v4/b/zoneinfo && md5sum --quiet -c /tmp/zone.sums) || { echo 'v3 FILES DIFFER THROUGH v4'; fail=1; }
echo "FILES $(wc -l </tmp/etc.sums) $(wc -l </tmp/zone.sums)"
wait_fio || { echo 'BLOCK FIO FAILED'; cat /tmp/fio.out; fail=1; }
umount /mnt/v3 /mnt/v4 || fail=1
rpc.nfsd 0
exportfs -ua
umount /srv/nas || fail=1
fsck.ext4 -fn /dev/ublkb1 >/tmp/fsck.out 2>&1 || { echo 'FSCK FAILED'; cat /tmp/fsck.out; fail=1; }
nbd-client -d /dev/nbd0
./raidd check vol --wait --control /tmp/raidd.sock || fail=1
kill $pid
wait $pid
echo "SERVE RC $?"
exit $fail
"#;
    let (ok, log) = boot(&share, &job, &disks);
    assert!(ok, "the guest job failed:\n{log}");
    assert!(log.contains("NFS 2 mounts"), "{log}");
    assert!(log.contains("BLOCK 67108864"), "{log}");
    assert!(log.contains(" 0 mismatched sectors"), "{log}");
    assert!(log.contains("SERVE RC 0"), "{log}");
}
