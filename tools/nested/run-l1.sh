#!/usr/bin/env bash
# Boots L1 (Debian's stock kernel, with emulated SR-IOV devices behind an
# emulated Intel IOMMU), runs SCRIPT inside it and exits with SCRIPT's
# exit code (125: L1 gave none: a crash, a panic or the timeout).
#
#   tools/nested/run-l1.sh [-d nvme-sriov|igb|both] [-t SECONDS] SCRIPT \
#       [-- EXTRA QEMU ARGUMENTS]
#
# Devices, each behind a PCIe root port of its own:
#   nvme-sriov  an NVMe PF 1b36:0010 with 2 VFs (this machine's QEMU), a
#               namespace for the PF and one for each VF
#   igb         an 82576 NIC PF 8086:10c9 with up to 7 VFs 8086:10ca
#               (QEMU >= 8: the backports QEMU of setup.sh)
#   both        both (the default)
# L1 also gets a virtio NIC on QEMU's user-mode network: from L1,
# 10.0.2.2 is this machine's loopback (a Placement listening on
# 127.0.0.1:PORT is http://10.0.2.2:PORT there).
#
# L1's root is this machine's / read-only over 9p, under a tmpfs overlay;
# $NESTED_WORK is read-write at /nested. Each run gets a directory
# $NESTED_WORK/runs/<id> with console.log (L1's serial console), qemu.log,
# rc and what SCRIPT writes to $RUN. SCRIPT is sourced in L1 with the
# helpers of l1-lib.sh; every L1_* variable of this environment is
# exported into it. The run directory is printed last, on stderr, as
# "run-l1: run dir <path>".
#
# Environment: NESTED_WORK (default .nested at the top of the tree),
# NESTED_ACCEL=auto|tcg|kvm (auto: KVM where /dev/kvm can boot a stock
# kernel, which a PVM /dev/kvm cannot), NESTED_MEM (2G), NESTED_SMP (2),
# NESTED_QUIET=1 (do not echo L1's console).
#
# L1 is killed at the timeout (-t, default 1800 s), 20 s after it wrote
# its exit code if it has not powered off by then (a kernel left with a
# device it could not recover may never finish that), and when this
# script is interrupted or terminated: no QEMU outlives it.
#
# A test in L1 may have a PCIe AER error injected into the emulated
# hardware by writing its name to $RUN/aer-inject (aer_inject.py, which
# runs beside QEMU on its QMP socket, lists the names).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
work=${NESTED_WORK:-$top/.nested}
die() { echo "run-l1: $*" >&2; exit 2; }
[ -s "$work/initramfs-l1.gz" ] || die "no $work/initramfs-l1.gz: run \
tools/nested/setup.sh with the same NESTED_WORK first"
work=$(cd "$work" && pwd)
devices=both
timeout=1800
while getopts d:t:h opt; do
    case $opt in
        d) devices=$OPTARG ;;
        t) timeout=$OPTARG ;;
        *) sed -n '2,38p' "$0"; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
script=${1:-}
[ -f "$script" ] || die "usage: run-l1.sh [-d nvme-sriov|igb|both] \
[-t SECONDS] SCRIPT [-- QEMU ARGUMENTS]"
shift
[ "${1:-}" = -- ] && shift
case $devices in
    nvme-sriov|igb|both) ;;
    *) die "unknown device set '$devices' (nvme-sriov, igb or both)" ;;
esac

# KVM only where it can run a stock kernel: a PVM /dev/kvm (module
# kvm_pvm, no vmx/svm flags) runs only PVM-enlightened guests, and a stock
# kernel crawls through KVM's instruction emulator there.
accel=${NESTED_ACCEL:-auto}
if [ "$accel" = auto ]; then
    if [ -w /dev/kvm ] && grep -qwE 'vmx|svm' /proc/cpuinfo \
            && [ ! -d /sys/module/kvm_pvm ]; then
        accel=kvm
    else
        accel=tcg
    fi
fi
case $accel in
    kvm) acc=(-accel kvm -machine q35,kernel-irqchip=split -cpu host) ;;
    # 'max' has SVM with nested paging: L1 gets a /dev/kvm for L2.
    tcg) acc=(-accel tcg,thread=multi,tb-size=512 -machine q35 -cpu max) ;;
    *) die "NESTED_ACCEL must be auto, tcg or kvm" ;;
esac

id=$(date +%Y%m%d-%H%M%S)-$devices-$(basename "$script" .sh \
    | tr -c 'A-Za-z0-9_.\n-' _)-$$
run=$work/runs/$id
mkdir -p "$run"
cp "$here/l1-init.sh" "$here/l1-lib.sh" "$run/"
cp "$script" "$run/script.sh"
{
    for v in $(compgen -v L1_); do printf 'export %s=%q\n' "$v" "${!v}"; done
    printf 'export NESTED_DEVICES=%q\n' "$devices"
} > "$run/env"

qemu=qemu-system-x86_64
firmware=()
if [ "$devices" != nvme-sriov ]; then
    bpo=$work/qemu-bpo
    [ -x "$bpo/usr/bin/qemu-system-x86_64" ] || die "igb needs QEMU >= 8; \
tools/nested/setup.sh puts one from backports into $bpo"
    qemu=$bpo/usr/bin/qemu-system-x86_64
    firmware=(-L "$bpo/usr/share/qemu")
    export QEMU_MODULE_DIR=$bpo/usr/lib/x86_64-linux-gnu/qemu
fi
command -v "$qemu" > /dev/null || die "no $qemu: run tools/nested/setup.sh"
devs=()
case $devices in nvme-sriov|both)
    # Namespace 1 is the PF's; 2 and 3 are private to nobody until L1
    # attaches one to each VF's controller (l1-lib.sh's nvme_vfs_up), as
    # an operator gives each VF a namespace of its own.
    truncate -s 64M "$run/nvme-ns.img"
    truncate -s 16M "$run/nvme-ns2.img" "$run/nvme-ns3.img"
    devs+=(-device pcie-root-port,id=rp1,bus=pcie.0,chassis=1,slot=1
           -device nvme-subsys,id=nvmesubsys0,nqn=nested-sriov
           -device "nvme,id=nvme0,serial=nested0,subsys=nvmesubsys0,bus=rp1,\
sriov_max_vfs=2,sriov_vq_flexible=4,sriov_vi_flexible=2"
           -drive "file=$run/nvme-ns.img,if=none,id=nvm,format=raw"
           -device nvme-ns,drive=nvm,bus=nvme0,nsid=1,shared=false)
    for i in 2 3; do
        devs+=(-drive "file=$run/nvme-ns$i.img,if=none,id=nvm$i,format=raw"
               -device "nvme-ns,drive=nvm$i,bus=nvme0,nsid=$i,shared=false,\
detached=true")
    done ;;
esac
case $devices in igb|both)
    devs+=(-device pcie-root-port,id=rp2,bus=pcie.0,chassis=2,slot=2
           -netdev user,id=n0,restrict=on
           -device igb,bus=rp2,netdev=n0,romfile=) ;;
esac
kernel=$work/vmlinux.elf
[ -s "$kernel" ] || kernel=$(ls "$work"/kernel/boot/vmlinuz-* | head -1)

# QEMU's QMP socket: in a short directory of its own, since a Unix
# socket's path may not exceed 107 bytes and the run directory's can.
qmp=$(mktemp -d /tmp/run-l1.XXXXXX)
echo "run-l1: $id: accel=$accel devices=$devices timeout=${timeout}s" >&2
start=$(date +%s)
"$qemu" "${firmware[@]}" "${acc[@]}" -m "${NESTED_MEM:-2G}" \
    -smp "${NESTED_SMP:-2}" \
    -device intel-iommu,intremap=on,caching-mode=on \
    -bios qboot.rom -vga none -display none -monitor none \
    -qmp "unix:$qmp/qmp.sock,server=on,wait=off" \
    -serial "file:$run/console.log" -no-reboot \
    -netdev user,id=mgmt -device virtio-net-pci,netdev=mgmt,romfile= \
    -kernel "$kernel" -initrd "$work/initramfs-l1.gz" \
    -append "console=ttyS0 intel_iommu=on iommu=pt panic=-1 loglevel=4 \
nested.run=runs/$id" \
    -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
    -virtfs "local,path=$work,mount_tag=nested,security_model=none" \
    "${devs[@]}" "$@" > "$run/qemu.log" 2>&1 &
qpid=$!
echo $qpid > "$run/qemu.pid"
# PCIe AER errors L1's tests ask for, injected through QMP.
python3 "$here/aer_inject.py" "$run" "$qmp/qmp.sock" \
    > "$run/aer_inject.log" 2>&1 &
ipid=$!
tpid=
if [ -z "${NESTED_QUIET:-}" ]; then
    touch "$run/console.log"
    tail -n +1 -f --pid=$qpid "$run/console.log" &
    tpid=$!
fi
stop_l1() {
    kill $ipid $qpid 2>/dev/null
    sleep 2
    kill -9 $qpid 2>/dev/null
}
trap 'stop_l1; rm -rf "$qmp"; exit 130' INT TERM HUP
peak=0
done_at=
while kill -0 $qpid 2>/dev/null; do
    rss=$(ps -o rss= -p $qpid 2>/dev/null | tr -d ' ')
    [ -n "$rss" ] && [ "$rss" -gt $peak ] && peak=$rss
    if [ $(( $(date +%s) - start )) -gt "$timeout" ]; then
        echo "run-l1: timeout after ${timeout}s: L1 stopped" >&2
        stop_l1
    fi
    # L1 wrote its exit code and powers off; a kernel left with a device
    # it could not recover (the AER test's) may never finish that.
    if [ -z "$done_at" ] && [ -s "$run/rc" ]; then
        done_at=$(date +%s)
    fi
    if [ -n "$done_at" ] && [ $(( $(date +%s) - done_at )) -gt 20 ]; then
        echo "run-l1: L1 wrote its exit code but did not power off \
within 20 s: L1 stopped" >&2
        stop_l1
        break
    fi
    sleep 1
done
wait $qpid
qrc=$?
kill $ipid 2>/dev/null
wait $ipid 2>/dev/null
rm -rf "$qmp"
if [ -n "$tpid" ]; then
    sleep 1
    kill $tpid 2>/dev/null
    wait $tpid 2>/dev/null
fi
rm -f "$run"/nvme-ns*.img
rc=$(cat "$run/rc" 2>/dev/null || echo 125)
echo "run-l1: $id: rc=$rc (qemu exit $qrc) wall=$(( $(date +%s) - start ))s \
peak_L1_rss=$((peak / 1024))MB" | tee "$run/summary" >&2
if [ "$rc" = 125 ]; then
    echo "run-l1: L1 gave no exit code (crash, panic or timeout): see \
$run/console.log and $run/qemu.log" >&2
fi
echo "run-l1: run dir $run" >&2
exit "$rc"
