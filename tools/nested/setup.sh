#!/usr/bin/env bash
# Prepares the real-kernel test bed (tools/nested/README.rst), idempotently:
#   1. Debian packages (QEMU, busybox, nvme-cli, udev, libvirt...): L1's
#      userspace is this machine's / shared read-only, so what L1 runs is
#      what is installed here;
#   2. the kernel Debian's linux-image-amd64 points to, downloaded and
#      unpacked into $NESTED_WORK (never installed), and its uncompressed
#      vmlinux (QEMU boots it through its PVH entry, ~15 s faster under
#      TCG than the bzImage);
#   3. QEMU >= 8 from <codename>-backports, for the igb SR-IOV NIC (bookworm
#      has 7.2): downloaded with a private apt state and unpacked into
#      $NESTED_WORK/qemu-bpo, never installed, no apt source added;
#   4. the initramfs images of L1 and L2 (mk-initramfs.sh).
# Each step is skipped when its output exists. Every failure says which
# step failed and exits 1; nothing here waits for input.
#
# Usage: tools/nested/setup.sh
#   NESTED_WORK: the work directory (default: .nested at the top of the
#   tree); NESTED_KERNEL_PKG pins the kernel package.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
work=$(realpath -m "${NESTED_WORK:-$top/.nested}")
mkdir -p "$work"
log() { echo "[nested setup $(date +%T)] $*"; }
fail() { echo "nested setup: $*" >&2; exit 1; }
export DEBIAN_FRONTEND=noninteractive
# Downloads land in root-owned directories: no _apt sandbox user.
sandbox=(-o APT::Sandbox::User=root)
codename=$(. /etc/os-release && echo "$VERSION_CODENAME")

# 1. Debian packages
pkgs=(qemu-system-x86 qemu-utils busybox-static nvme-cli pciutils cpio kmod xz-utils
      iproute2 udev e2fsprogs libvirt-daemon-system libvirt-clients
      libvirt-daemon-driver-qemu)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null \
        | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    [ "$(id -u)" = 0 ] || fail "not root: cannot install ${missing[*]}"
    log "installing ${missing[*]}"
    apt-get update -qq || fail "apt-get update failed"
    apt-get install -y -qq --no-install-recommends "${missing[@]}" \
        >/dev/null || fail "cannot install ${missing[*]}"
fi

# 2. the kernel
if [ ! -d "$work/kernel/lib/modules" ]; then
    kernel_pkg() {
        apt-cache depends linux-image-amd64 2>/dev/null \
            | awk '/Depends: linux-image-/ {print $2; exit}'
    }
    pkg=${NESTED_KERNEL_PKG:-$(kernel_pkg)}
    if [ -z "$pkg" ]; then
        apt-get update -qq || fail "apt-get update failed"
        pkg=$(kernel_pkg)
    fi
    [ -n "$pkg" ] || fail "no kernel package: linux-image-amd64 depends \
on none in this machine's apt sources"
    log "kernel package $pkg"
    tmp=$(mktemp -d "$work/.kdeb.XXXX")
    (cd "$tmp" && apt-get "${sandbox[@]}" download -q "$pkg") \
        || fail "cannot download $pkg"
    rm -rf "$work/kernel.tmp"
    dpkg -x "$tmp"/*.deb "$work/kernel.tmp"
    rm -rf "$tmp"
    kver=$(ls "$work/kernel.tmp/lib/modules" | head -1)
    depmod -b "$work/kernel.tmp" "$kver"
    mv "$work/kernel.tmp" "$work/kernel"
fi
kver=$(ls "$work/kernel/lib/modules" | head -1)
if [ ! -s "$work/vmlinux.elf" ]; then
    # The bzImage's payload is xz; the ELF inside boots through PVH.
    image=$work/kernel/boot/vmlinuz-$kver
    offset=$(python3 -c 'import sys; print(open(sys.argv[1], "rb").read()
        .find(b"\xfd7zXZ\x00"))' "$image")
    if [ "$offset" -ge 0 ]; then
        tail -c +$((offset + 1)) "$image" | xz -dc > "$work/vmlinux.tmp" \
            2>/dev/null || true
    fi
    if [ "$(head -c 4 "$work/vmlinux.tmp" 2>/dev/null | od -An -tx1 \
            | tr -d ' ')" = 7f454c46 ]; then
        mv "$work/vmlinux.tmp" "$work/vmlinux.elf"
    else
        rm -f "$work/vmlinux.tmp"
        log "no vmlinux in the bzImage: L1 and L2 boot the bzImage (slower)"
    fi
fi
log "kernel $kver"

# 3. QEMU from backports. The mirror is the one this machine's apt uses for
# $codename; only the suite changes.
mirror() {
    local f
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        awk -v c="$codename" 'BEGIN {RS = ""; FS = "\n"} {
            uri = ""; key = ""; ok = 0; deb = 0
            for (i = 1; i <= NF; i++) {
                if ($i ~ /^Types:/ && $i ~ /[ \t]deb([ \t]|$)/) deb = 1
                if ($i ~ /^URIs:/) { split($i, a, /[ \t]+/); uri = a[2] }
                if ($i ~ /^Signed-By:/) { split($i, a, /[ \t]+/); key = a[2] }
                if ($i ~ /^Suites:/) {
                    n = split($i, s, /[ \t]+/)
                    for (j = 2; j <= n; j++) if (s[j] == c) ok = 1
                }
            }
            if (deb && ok && uri != "") {
                print uri, (key ~ /^\// ? "signed-by=" key : ""); exit
            }
        }' "$f" | grep . && return 0
    done
    cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
        | awk -v c="$codename" '$1 == "deb" {
            i = 2; opt = ""
            if ($2 ~ /^\[/) {
                while ($i !~ /\]$/) { opt = opt " " $i; i++ }
                opt = opt " " $i; i++
                gsub(/[\[\]]/, "", opt); sub(/^ /, "", opt)
            }
            if ($(i + 1) == c) { print $i, opt; exit }
        }' | grep .
}
bpo=$work/qemu-bpo
if [ ! -x "$bpo/usr/bin/qemu-system-x86_64" ]; then
    read -r uri opt < <(mirror) || true
    [ -n "${uri:-}" ] || fail "no apt source for $codename: cannot fetch \
QEMU from $codename-backports (the igb SR-IOV NIC needs QEMU >= 8)"
    log "QEMU from $codename-backports ($uri)"
    apt=$(mktemp -d "$work/.apt.XXXX")
    mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" \
        "$apt/parts" "$apt/debs"
    echo "deb ${opt:+[$opt] }$uri $codename-backports main" \
        > "$apt/sources.list"
    private=("${sandbox[@]}" -o Dir::Etc::sourcelist="$apt/sources.list"
             -o Dir::Etc::sourceparts="$apt/parts"
             -o Dir::State::Lists="$apt/lists" -o Dir::Cache="$apt/cache")
    apt-get "${private[@]}" update -qq \
        || fail "cannot read $codename-backports from $uri"
    (cd "$apt/debs" && apt-get "${private[@]}" download -q \
        qemu-system-x86/"$codename-backports" \
        qemu-system-common/"$codename-backports" \
        qemu-system-data/"$codename-backports") \
        || fail "cannot download QEMU from $codename-backports"
    rm -rf "$bpo.tmp"
    for deb in "$apt"/debs/*.deb; do dpkg -x "$deb" "$bpo.tmp"; done
    rm -rf "$apt"
    mv "$bpo.tmp" "$bpo"
fi
version=$(QEMU_MODULE_DIR=$bpo/usr/lib/x86_64-linux-gnu/qemu \
    "$bpo/usr/bin/qemu-system-x86_64" --version | head -1)
log "$version (for igb)"

# 4. the initramfs images, rebuilt when their recipe is newer
if [ ! -s "$work/initramfs-l1.gz" ] || [ ! -s "$work/initramfs-l2.gz" ] \
        || [ "$here/mk-initramfs.sh" -nt "$work/initramfs-l1.gz" ]; then
    NESTED_WORK=$work "$here/mk-initramfs.sh" \
        || fail "cannot build the initramfs images"
fi
log "ready: $(du -sh "$work" | cut -f1) in $work"
