#!/usr/bin/env bash
# A Linux guest for kernel-interoperability tests: Debian 12 with its stock kernel (md, nbd,
# iSCSI), mdadm, nbd-client, open-iscsi, fio, sgdisk and parted, run under qemu's software emulation (this
# host's kernel has no md, nbd or iSCSI client). The guest boots straight into a job script from a shared directory and
# powers off; it is a test peer for correctness, never for speed.
#
#   scripts/vm.sh build [DIR]          build the guest into DIR (default $RAIDD_VM or
#                                      /var/cache/raidd-vm); reused while this script's guest
#                                      recipe is unchanged
#   scripts/vm.sh build-ublk [DIR]     the second recipe: the same guest on Debian 12's
#                                      linux-image-6.12-amd64 (ublk_drv; modules
#                                      xz-compressed), with the NFS server and client, for
#                                      raidd running inside the guest (default
#                                      $RAIDD_VM_UBLK or /var/cache/raidd-vm-ublk)
#   scripts/vm.sh run DIR SHARE [-n NETNS] [-t SECONDS] [DISK...]
#                                      boot once: SHARE/job.sh runs as root in the guest with
#                                      SHARE mounted at /share and the DISKs as /dev/vdb,
#                                      /dev/vdc, ...; its output goes to SHARE/job.log and the
#                                      exit status is this command's. With -n the guest's
#                                      network is qemu's user mode inside that network
#                                      namespace (the namespace's 127.0.0.1 is 10.0.2.2 in the
#                                      guest); without, the guest has no network.
set -euo pipefail

# Bump when the guest's contents change: a cached guest with another stamp is rebuilt.
RECIPE=3
TOOLS=mdadm,nbd-client,open-iscsi,fio,e2fsprogs,kmod,util-linux,gdisk,parted,busybox-static,cpio,iproute2,procps
PACKAGES=linux-image-amd64,$TOOLS
UBLK_RECIPE=1
UBLK_PACKAGES=xz-utils,nfs-kernel-server,nfs-common,rpcbind,$TOOLS
# 6.12 comes from bookworm-security, which debootstrap does not read: apt in the new root
# installs it.
UBLK_LATER=linux-image-6.12-amd64

die() { echo "vm.sh: $*" >&2; exit 1; }

mirror() {
  local m
  m=$(awk '/^URIs:/ { print $2; exit }' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
  [ -n "$m" ] || m=$(awk '$1 == "deb" { print $2; exit }' /etc/apt/sources.list 2>/dev/null || true)
  echo "${m:-http://deb.debian.org/debian}"
}

# The guest's PID 1: mount what a job needs, run it, record its status, power off.
guest_init() {
  cat <<'EOF'
#!/bin/sh
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc 2>/dev/null
mount -t sysfs sysfs /sys 2>/dev/null
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mkdir -p /run/mdadm /share
modprobe -a 9pnet_virtio 9p virtio_net 2>/dev/null
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,cache=none share /share
ip link set lo up
if ip link show eth0 >/dev/null 2>&1; then
  ip link set eth0 up && ip addr add 10.0.2.15/24 dev eth0
fi
status=97
if [ -x /share/job.sh ]; then
  (cd /share && ./job.sh </dev/null >/share/job.log 2>&1; echo $? >/tmp/status)
  status=$(cat /tmp/status)
fi
echo "$status" >/share/job.status
mdadm --stop --scan >/dev/null 2>&1
sync
umount /share
echo "raidd-vm: job exited $status"
echo o >/proc/sysrq-trigger
sleep 5
EOF
}

# A minimal initramfs: load the virtio disk and ext4 modules, mount the root, switch to it.
initrd_init() {
  cat <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
while read -r m; do insmod "$m"; done </modules
n=0
until [ -b /dev/vda ] || [ $n -ge 400 ]; do sleep 0.05; n=$((n + 1)); done
mkdir -p /root
mount -t ext4 /dev/vda /root || exec sh
mount --move /dev /root/dev
mount --move /proc /root/proc
mount --move /sys /root/sys
exec switch_root /root /sbin/raidd-vm-init
EOF
}

build() {
  local dir=$1 packages=$2 stamp=$3 later=${4:-}
  if [ -f "$dir/stamp" ] && [ "$(cat "$dir/stamp")" = "$stamp" ] &&
     [ -f "$dir/root.img" ] && [ -f "$dir/vmlinuz" ] && [ -f "$dir/initrd" ]; then
    echo "vm.sh: guest in $dir is current"
    return
  fi
  local need=()
  command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
  command -v debootstrap >/dev/null || need+=(debootstrap)
  command -v mkfs.ext4 >/dev/null || need+=(e2fsprogs)
  command -v cpio >/dev/null || need+=(cpio)
  command -v xz >/dev/null || need+=(xz-utils)
  if [ ${#need[@]} -gt 0 ]; then
    echo "vm.sh: installing ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  fi
  rm -rf "$dir"
  mkdir -p "$dir"
  local root=$dir/rootfs
  local t0=$SECONDS
  echo "vm.sh: debootstrap (a few minutes)"
  debootstrap --variant=minbase --include="$packages" bookworm "$root" "$(mirror)" \
    >"$dir/debootstrap.log" 2>&1 || { tail -20 "$dir/debootstrap.log"; die "debootstrap failed"; }
  if [ -n "$later" ]; then
    local m sec
    m=$(mirror)
    sec=$(awk '($1 == "URIs:" || $1 == "deb") && /debian-security/ {
      for (i = 2; i <= NF; i++) if ($i ~ /^http/) { print $i; exit } }' \
      /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null | head -1 || true)
    printf 'deb %s bookworm main\ndeb %s bookworm-security main\n' "$m" "${sec:-$m-security}" \
      >"$root/etc/apt/sources.list"
    mount -t proc proc "$root/proc"
    { chroot "$root" apt-get update -qq &&
      DEBIAN_FRONTEND=noninteractive chroot "$root" apt-get install -y -qq \
        --no-install-recommends "$later"; } >>"$dir/debootstrap.log" 2>&1 ||
      { umount "$root/proc"; tail -20 "$dir/debootstrap.log"; die "installing $later failed"; }
    umount "$root/proc"
  fi
  rm -rf "$root"/usr/share/{doc,man,info,locale} "$root"/var/cache/apt/archives/*.deb
  guest_init >"$root/sbin/raidd-vm-init"
  chmod 755 "$root/sbin/raidd-vm-init"
  local kver
  kver=$(ls "$root/lib/modules" | sort -V | tail -1)
  cp "$root/boot/vmlinuz-$kver" "$dir/vmlinuz"
  # initramfs: busybox, the init above, and the modules to reach the root disk.
  local rd=$dir/initrd.d
  mkdir -p "$rd/bin"
  cp "$root/bin/busybox" "$rd/bin/busybox"
  initrd_init >"$rd/init"
  chmod 755 "$rd/init"
  chroot "$root" modprobe --show-depends -S "$kver" -a virtio_pci virtio_blk ext4 crc32c_generic |
    awk '$1 == "insmod" && !seen[$2]++ { print $2 }' >"$rd/modules"
  # busybox's insmod takes plain modules: compressed ones (6.12's are .ko.xz) are unpacked.
  local plain=$rd/modules.plain
  : >"$plain"
  while read -r m; do
    mkdir -p "$rd$(dirname "$m")"
    case $m in
      *.xz) xz -dc "$root$m" >"$rd${m%.xz}"; echo "${m%.xz}" >>"$plain" ;;
      *) cp "$root$m" "$rd$m"; echo "$m" >>"$plain" ;;
    esac
  done <"$rd/modules"
  mv "$plain" "$rd/modules"
  (cd "$rd" && find . | cpio -o -H newc --quiet | gzip -1) >"$dir/initrd"
  rm -rf "$rd"
  mkfs.ext4 -q -F -L raidd-vm -d "$root" "$dir/root.img" 1536M
  rm -rf "$root"
  echo "$stamp" >"$dir/stamp"
  echo "vm.sh: guest built in $((SECONDS - t0)) s ($dir)"
}

run() {
  local dir=$1 share=$2
  shift 2
  local netns="" limit=900
  while [ $# -gt 0 ]; do
    case $1 in
      -n) netns=$2; shift 2 ;;
      -t) limit=$2; shift 2 ;;
      *) break ;;
    esac
  done
  [ -f "$dir/root.img" ] || die "no guest in $dir: run scripts/vm.sh build first"
  [ -x "$share/job.sh" ] || die "$share/job.sh is missing or not executable"
  rm -f "$share/job.status" "$share/job.log"
  local args=(
    -accel tcg,thread=multi -cpu max -smp 2 -m 1536 -machine q35
    -nodefaults -no-user-config -display none -serial "file:$share/console.log" -no-reboot
    -kernel "$dir/vmlinuz" -initrd "$dir/initrd"
    -append "console=ttyS0 panic=-1 quiet ipv6.disable=1"
    -drive "file=$dir/root.img,format=raw,if=none,id=root,snapshot=on"
    -device virtio-blk-pci,drive=root
    -virtfs "local,path=$share,mount_tag=share,security_model=none,id=share"
    -device virtio-rng-pci
  )
  local restrict=on
  [ -n "$netns" ] && restrict=off
  args+=(-netdev "user,id=net,net=10.0.2.0/24,host=10.0.2.2,ipv6=off,restrict=$restrict"
         -device virtio-net-pci,netdev=net)
  local i=0 d cache
  for d in "$@"; do
    cache=cache=none,aio=threads
    [ "$(findmnt -no FSTYPE -T "$d")" = tmpfs ] && cache=cache=writeback,aio=threads
    args+=(-drive "file=$d,format=raw,if=none,id=d$i,$cache"
           -device "virtio-blk-pci,drive=d$i,serial=d$i")
    i=$((i + 1))
  done
  local prefix=()
  [ -n "$netns" ] && prefix=(ip netns exec "$netns")
  # A guest that dies before its job starts (no job.log: the 6.12 kernel under qemu's
  # multi-threaded emulation now and then panics while patching its own code at boot) is
  # booted again, at most twice; the job has touched nothing yet.
  local try
  for try in 1 2 3; do
    timeout -k 10 "$limit" "${prefix[@]}" qemu-system-x86_64 "${args[@]}" </dev/null || true
    [ -f "$share/job.status" ] || [ -f "$share/job.log" ] && break
    grep -q 'Kernel panic' "$share/console.log" || break
    echo "vm.sh: the guest's kernel panicked before the job started (try $try); booting again" >&2
    cp "$share/console.log" "$share/console.panic-$try.log"
  done
  [ -f "$share/job.status" ] || { tail -30 "$share/console.log" >&2; die "the guest reported no job status"; }
  return "$(cat "$share/job.status")"
}

case ${1:-} in
  build) build "${2:-${RAIDD_VM:-/var/cache/raidd-vm}}" "$PACKAGES" "$RECIPE" ;;
  build-ublk) build "${2:-${RAIDD_VM_UBLK:-/var/cache/raidd-vm-ublk}}" "$UBLK_PACKAGES" "ublk-$UBLK_RECIPE" "$UBLK_LATER" ;;
  run) shift; run "$@" ;;
  *) die "usage: vm.sh build|build-ublk [DIR] | vm.sh run DIR SHARE [-n NETNS] [-t SECONDS] [DISK...]" ;;
esac
