# Sourced by demo.sh and test.sh: installs what raidd needs on Debian 12 and puts cargo on PATH.
# Idempotent: does nothing when everything is already there.

raidd_need_apt=()
# command:package. The NBD and iSCSI clients and peers are what the tests drive raidd with.
# qemu, debootstrap and cpio build the Linux guest of the kernel-interoperability tests;
# dpkg-dev, binutils and lintian build and check the Debian package.
for tool in mdadm:mdadm xz:xz-utils losetup:mount cc:gcc pkg-config:pkg-config \
    qemu-img:qemu-utils nbdinfo:libnbd-bin nbdkit:nbdkit fio:fio \
    iscsi-test-cu:libiscsi-bin tgtd:tgt \
    qemu-system-x86_64:qemu-system-x86 debootstrap:debootstrap cpio:cpio ip:iproute2 \
    sgdisk:gdisk lintian:lintian dpkg-shlibdeps:dpkg-dev strip:binutils; do
    command -v "${tool%%:*}" >/dev/null 2>&1 || raidd_need_apt+=("${tool#*:}")
done
# qemu-img reaches iscsi:// URLs through this module.
ls /usr/lib/*/qemu/block-iscsi.so >/dev/null 2>&1 || raidd_need_apt+=(qemu-block-extra)
# nbdsh runs on the system Python with Debian's nbd module.
/usr/bin/python3 -c 'import nbd' >/dev/null 2>&1 || raidd_need_apt+=(python3-libnbd)
# The hostile-member tests serve images from a FUSE filesystem they can make hang.
/usr/bin/python3 -c 'import fusepy' >/dev/null 2>&1 || raidd_need_apt+=(python3-fusepy)
if [ ${#raidd_need_apt[@]} -gt 0 ]; then
    # The qemu packages go in as one set, from the release itself. A qemu-utils of another
    # version (this machine image carries 10.0 from bookworm-backports) cannot sit beside
    # the release's qemu-block-extra: asked for both, apt refuses; asked for
    # qemu-block-extra alone, it removes qemu-utils and qemu-img vanishes.
    raidd_apt=() raidd_qemu=""
    for pkg in "${raidd_need_apt[@]}"; do
        case "$pkg" in qemu-*) raidd_qemu=1 ;; *) raidd_apt+=("$pkg") ;; esac
    done
    raidd_flags=()
    if [ -n "$raidd_qemu" ]; then
        raidd_rel=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
        [ -n "$raidd_rel" ] || { echo "setup: /etc/os-release names no release" >&2; exit 1; }
        raidd_apt+=("qemu-utils/$raidd_rel" "qemu-block-extra/$raidd_rel" "qemu-system-x86/$raidd_rel")
        raidd_flags+=(--allow-downgrades)
    fi
    echo "setup: installing ${raidd_apt[*]} with apt-get" >&2
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${raidd_flags[@]}" "${raidd_apt[@]}" curl ca-certificates >/dev/null
    for tool in qemu-img nbdinfo nbdkit fio iscsi-test-cu mdadm; do
        command -v "$tool" >/dev/null 2>&1 || { echo "setup: $tool is still missing after apt-get" >&2; exit 1; }
    done
fi

# The HTTP tests check /metrics with promtool, scrape it with a real Prometheus server and
# render the dashboard in headless Chromium (each started by the tests on loopback, stopped
# by PID). Without recommended packages (Prometheus' node exporter): only these are wanted.
raidd_need_web=()
command -v promtool >/dev/null 2>&1 || raidd_need_web+=(prometheus)
command -v chromium >/dev/null 2>&1 || raidd_need_web+=(chromium)
if [ ${#raidd_need_web[@]} -gt 0 ]; then
    echo "setup: installing ${raidd_need_web[*]} with apt-get" >&2
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${raidd_need_web[@]}" >/dev/null
    for tool in promtool prometheus chromium; do
        command -v "$tool" >/dev/null 2>&1 || { echo "setup: $tool is still missing after apt-get" >&2; exit 1; }
    done
fi

# Rust: rustup's stable toolchain (Debian 12's rustc is too old for the workspace).
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
if ! command -v cargo >/dev/null 2>&1; then
    echo "setup: installing the Rust toolchain with rustup" >&2
    curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal --component rustfmt,clippy >&2
    . "$HOME/.cargo/env"
fi
for comp in rustfmt clippy; do
    if ! cargo "${comp/rustfmt/fmt}" --version >/dev/null 2>&1 && command -v rustup >/dev/null 2>&1; then
        rustup component add "$comp" >&2
    fi
done
