#!/usr/bin/env bash
# Checks the Debian package the way an admin meets it: lintian (anything it reports that the
# package does not override and explain fails), then installs into fresh Debian 12 roots
# made from the test guest's root image (an overlay over it, so nothing is copied and
# nothing stays): one with `dpkg -i`, one with `apt-get install ./raidd_*.deb`, which also
# brings its Recommends (man-db). In both, `raidd --version` runs and the files are where
# the package says; in the second, `man raidd` shows the page and `systemd-analyze verify`
# passes the installed unit (systemd is installed there for it). Needs root, loop devices,
# overlayfs and the package mirror.
#
#   scripts/package_check.sh DEB [GUEST_DIR]     (GUEST_DIR: $RAIDD_VM or /var/cache/raidd-vm)
set -euo pipefail
deb=$(realpath "$1")
guest=${2:-${RAIDD_VM:-/var/cache/raidd-vm}}
die() { echo "package_check.sh: $*" >&2; exit 1; }
[ -f "$deb" ] || die "no package at $1"
[ -f "$guest/root.img" ] || die "no guest root at $guest/root.img (scripts/vm.sh build)"

echo "== lintian"
lintian --fail-on error,warning "$deb"

work=$(mktemp -d /var/tmp/raidd-pkg.XXXXXX)
mounts=()
cleanup() {
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount -l "${mounts[i]}" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
mkdir "$work/lower"
mount -o loop,ro "$guest/root.img" "$work/lower"
mounts+=("$work/lower")

# A fresh writable root NAME over the guest's, left in $r: the overlay, /proc, /dev, the
# host's resolver and apt sources (the same mirror), and the package at /tmp. (Not called in
# a subshell: the mounts are recorded for the cleanup.)
fresh() {
  r=$work/$1
  mkdir -p "$r/upper" "$r/work" "$r/root"
  mount -t overlay overlay -o "lowerdir=$work/lower,upperdir=$r/upper,workdir=$r/work" "$r/root"
  mounts+=("$r/root")
  mount -t proc proc "$r/root/proc"; mounts+=("$r/root/proc")
  mount --bind /dev "$r/root/dev"; mounts+=("$r/root/dev")
  mount -t devpts devpts "$r/root/dev/pts" 2>/dev/null && mounts+=("$r/root/dev/pts") || true
  cp /etc/resolv.conf "$r/root/etc/resolv.conf"
  rm -f "$r/root/etc/apt/sources.list"
  cp -r /etc/apt/sources.list.d/. "$r/root/etc/apt/sources.list.d/"
  cp /etc/apt/apt.conf.d/99artifact-registry "$r/root/etc/apt/apt.conf.d/" 2>/dev/null || true
  cp "$deb" "$r/root/tmp/"
  r=$r/root
}
in_root() { local r=$1; shift; chroot "$r" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "$@"; }

echo "== dpkg -i in a fresh root"
fresh dpkg
in_root "$r" dpkg -i "/tmp/$(basename "$deb")"
in_root "$r" raidd --version
for f in /usr/sbin/raidd /lib/systemd/system/raidd.service /etc/raidd/raidd.toml \
  /usr/share/man/man8/raidd.8.gz /usr/share/man/man8/raidd-serve.8.gz \
  /usr/share/bash-completion/completions/raidd /usr/share/doc/raidd/copyright; do
  [ -e "$r$f" ] || die "dpkg -i: $f is missing"
done
grep -qx /etc/raidd/raidd.toml "$r/var/lib/dpkg/info/raidd.conffiles" || die "the config is not a conffile"
in_root "$r" dpkg --purge raidd
[ ! -e "$r/usr/sbin/raidd" ] || die "purge left the binary"

echo "== apt-get install ./deb in a fresh root"
fresh apt
in_root "$r" apt-get -qq update
in_root "$r" env DEBIAN_FRONTEND=noninteractive apt-get -y -qq install "/tmp/$(basename "$deb")" >/dev/null
in_root "$r" raidd --version
page=$(in_root "$r" env MANPAGER=cat COLUMNS=80 man raidd)
grep -q "^ *raidd .*software RAID" <<<"$page" || die "man raidd: $(head -5 <<<"$page")"
in_root "$r" env DEBIAN_FRONTEND=noninteractive apt-get -y -qq install --no-install-recommends systemd >/dev/null
in_root "$r" systemd-analyze verify /lib/systemd/system/raidd.service
echo "package_check.sh: ok"
