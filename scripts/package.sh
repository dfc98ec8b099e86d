#!/usr/bin/env bash
# Builds the Debian package: target/debian/raidd_VERSION-1_ARCH.deb, with the binary
# (/usr/sbin/raidd, stripped), the systemd unit (Type=notify, watchdog, hardening), the
# configuration as a conffile (/etc/raidd/raidd.toml), man pages and shell completions made
# from the CLI's own definitions (`raidd generate-docs`), and the docs. dpkg-deb builds it
# from a staged tree, so no debhelper or cargo-deb is needed; the maintainer scripts are what
# dh_installsystemd --no-enable --no-start would write: the service is not enabled or
# started on install (it serves nothing until the config names an array).
#
#   scripts/package.sh            build (cargo build --release first)
#   RAIDD_BIN=path scripts/package.sh   package that binary instead
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "package.sh: $*" >&2; exit 1; }
for t in dpkg-deb dpkg-shlibdeps strip gzip; do
  command -v "$t" >/dev/null || die "$t is missing (apt-get install dpkg-dev binutils gzip)"
done

bin=${RAIDD_BIN:-}
if [ -z "$bin" ]; then
  cargo build --release -p raidd
  bin=target/release/raidd
fi
[ -x "$bin" ] || die "no binary at $bin"

upstream=$(awk -F'"' '/^\[workspace.package\]/ { p = 1 } p && /^version/ { print $2; exit }' Cargo.toml)
[ -n "$upstream" ] || die "no version in Cargo.toml"
version="$upstream-1"
maintainer=${RAIDD_MAINTAINER:-raidd developers <raidd@localhost>}
arch=$(dpkg --print-architecture)
out=target/debian
root=$out/root
rm -rf "$root" "$out/gen" "$out/shlibs"
mkdir -p "$root/DEBIAN" "$out/gen"

install -D -m 0755 "$bin" "$root/usr/sbin/raidd"
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$root/usr/sbin/raidd"

"$bin" generate-docs "$out/gen"
install -d "$root/usr/share/man/man8"
for m in "$out"/gen/man8/*.8; do
  gzip -9n -c "$m" > "$root/usr/share/man/man8/$(basename "$m").gz"
done
install -D -m 0644 "$out/gen/completions/raidd.bash" "$root/usr/share/bash-completion/completions/raidd"
install -D -m 0644 "$out/gen/completions/_raidd" "$root/usr/share/zsh/vendor-completions/_raidd"
install -D -m 0644 "$out/gen/completions/raidd.fish" "$root/usr/share/fish/vendor_completions.d/raidd.fish"

install -D -m 0644 packaging/raidd.service "$root/lib/systemd/system/raidd.service"
install -D -m 0644 packaging/raidd.toml "$root/etc/raidd/raidd.toml"

doc="$root/usr/share/doc/raidd"
install -D -m 0644 packaging/copyright "$doc/copyright"
for f in README.md docs/ADMIN.md docs/COMPATIBILITY.md docs/METRICS.md; do
  if [ -f "$f" ]; then gzip -9n -c "$f" > "$doc/$(basename "$f").gz"; fi
done
date=$(date -R -d "@$(git log -1 --format=%ct 2>/dev/null || date +%s)")
printf 'raidd (%s) unstable; urgency=medium\n\n  * Built from the raidd repository (%s).\n\n -- %s  %s\n' \
  "$version" "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" "$maintainer" "$date" \
  | gzip -9n > "$doc/changelog.Debian.gz"
install -D -m 0644 packaging/lintian-overrides "$root/usr/share/lintian/overrides/raidd"

# Shared-library dependencies as dpkg computes them for any package.
mkdir -p "$out/shlibs/debian"
printf 'Source: raidd\n\nPackage: raidd\nArchitecture: any\n' > "$out/shlibs/debian/control"
depends=$(cd "$out/shlibs" && dpkg-shlibdeps -O -e "../../../$root/usr/sbin/raidd" 2>/dev/null \
  | sed -n 's/^shlibs:Depends=//p')
[ -n "$depends" ] || die "dpkg-shlibdeps found no dependencies"

size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat > "$root/DEBIAN/control" <<CONTROL
Package: raidd
Version: $version
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $size
Depends: $depends
Recommends: man-db
Suggests: mdadm, nbd-client, open-iscsi
Section: admin
Priority: optional
Description: user-space software RAID storage server, compatible with Linux md
 raidd assembles and creates arrays with md's v1.2 metadata (every md level
 and layout, the write-intent bitmap, the partial parity log, the write
 journal) from image files or block devices, keeps them redundant while they
 serve (spares, rebuilds, scrubs), and serves them over NBD, iSCSI and ublk,
 with Prometheus metrics and a dashboard. Arrays move both ways between raidd
 and the kernel's md.
CONTROL
echo /etc/raidd/raidd.toml > "$root/DEBIAN/conffiles"
for s in postinst prerm postrm; do
  install -m 0755 "packaging/$s" "$root/DEBIAN/$s"
done
(cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z \
  | xargs -0 md5sum) > "$root/DEBIAN/md5sums"
chmod 0644 "$root/DEBIAN/md5sums" "$root/DEBIAN/control" "$root/DEBIAN/conffiles"

deb="$out/raidd_${version}_${arch}.deb"
rm -f "$out"/raidd_*.deb
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "$deb"
