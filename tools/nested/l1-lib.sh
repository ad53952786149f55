# Helpers for scripts run inside L1 (l1-init.sh sources it before the
# script). A script also gets $NESTED (the work directory, /nested in L1),
# $RUN (this run's directory, shared with the host: results go there),
# $NESTED_DEVICES and every L1_* variable of run-l1.sh's environment.

t() { echo "[L1 $(cut -d' ' -f1 /proc/uptime)s] $*"; }
drv() {
    local link
    link=$(readlink "/sys/bus/pci/devices/$1/driver" 2>/dev/null) \
        && basename "$link" || echo none
}
pci_id() {
    echo "$(cat "/sys/bus/pci/devices/$1/vendor"):$(cat \
        "/sys/bus/pci/devices/$1/device")"
}
kernel_image() {
    if [ -s "$NESTED/vmlinux.elf" ]; then
        echo "$NESTED/vmlinux.elf"
    else
        ls "$NESTED"/kernel/boot/vmlinuz-* | head -1
    fi
}

# udevd and a coldplug of the subsystems used here (a full coldplug costs
# ~35 s under TCG).
udev_start() {
    mkdir -p /run/udev
    /lib/systemd/systemd-udevd --daemon
    udevadm trigger --action=add --subsystem-match=pci \
        --subsystem-match=net --subsystem-match=nvme \
        --subsystem-match=block --subsystem-match=misc \
        --subsystem-match=vfio
    udevadm settle -t 120
    t "udev settled"
}

# L1's CPU under TCG is 'max' (SVM with nested paging): kvm_amd gives L1 a
# /dev/kvm, so L2 runs under KVM inside L1.
kvm_load() {
    modprobe kvm_amd 2>/dev/null || modprobe kvm_intel 2>/dev/null
    [ -c /dev/kvm ]
}

# The virtio NIC on QEMU's user-mode network: 10.0.2.2 is the host's
# loopback.
mgmt_net_up() {
    local dev n
    modprobe virtio_net 2>/dev/null
    # udev renames it (eth0 to enp0s1): wait for the name to settle.
    udevadm settle -t 60
    for n in /sys/bus/virtio/drivers/virtio_net/virtio*/net/*; do
        [ -e "$n" ] && dev=$(basename "$n")
    done
    [ -n "${dev:-}" ] || { t "no virtio NIC"; return 1; }
    ip link set lo up
    ip link set "$dev" up
    ip addr add 10.0.2.15/24 dev "$dev"
    ip route add default via 10.0.2.2
    t "management network on $dev: 10.0.2.15, host loopback at 10.0.2.2"
}

# sriov_up [NUM_VFS]: NUM_VFS (default 2) VFs on every SR-IOV PF, bound to
# their L1 driver (igbvf / nvme) as on a compute host. One line per PF in
# /run/nested-vfs: <kind> <pf> <vf0> <vf1>... (kind: nvme, igb or other).
sriov_up() {
    local n=${1:-2} pf a kind i vfs
    modprobe -a nvme igb igbvf vfio-pci 2>/dev/null
    : > /run/nested-vfs
    for pf in /sys/bus/pci/devices/*; do
        [ "$(cat "$pf/sriov_totalvfs" 2>/dev/null || echo 0)" -gt 0 ] \
            || continue
        a=$(basename "$pf")
        case $(pci_id "$a") in
            0x1b36:0x0010) kind=nvme ;;
            0x8086:0x10c9) kind=igb ;;
            *) kind=other ;;
        esac
        t "PF $a $(pci_id "$a") $kind driver=$(drv "$a")" \
            "sriov_totalvfs=$(cat "$pf/sriov_totalvfs")"
        # libvirt wants the PF's link up.
        for i in "$pf"/net/*; do
            [ -e "$i" ] && ip link set "$(basename "$i")" up
        done
        if [ $kind = nvme ]; then
            nvme_vfs_up "$pf" "$n"
        else
            echo "$n" > "$pf/sriov_numvfs"
        fi
        udevadm settle -t 120
        vfs=
        for i in $(seq 0 $((n - 1))); do
            [ -e "$pf/virtfn$i" ] || { t "PF $a: no virtfn$i"; return 1; }
            vfs="$vfs $(basename "$(readlink "$pf/virtfn$i")")"
        done
        for i in $vfs; do t "  VF $i $(pci_id "$i") driver=$(drv "$i")"; done
        echo "$kind $a$vfs" >> /run/nested-vfs
    done
    [ -s /run/nested-vfs ] || { t "no SR-IOV PF found"; return 1; }
}

# nvme_vfs_up PF N: QEMU's NVMe SR-IOV (QEMU's docs/system/devices/
# nvme.rst): the primary controller's flexible queue and interrupt
# resources go to the secondary controllers, which are then brought
# online; VFs have none until then. Each VF's controller gets the
# private namespace run-l1.sh made for it.
nvme_vfs_up() {
    local pf=$1 n=$2 ctrl i v
    ctrl=/dev/$(ls "$pf/nvme" | head -1)
    nvme virt-mgmt "$ctrl" -c 0 -r 1 -a 1 -n 0 > /dev/null
    nvme virt-mgmt "$ctrl" -c 0 -r 0 -a 1 -n 0 > /dev/null
    # The primary restarts without them.
    echo 1 > "$pf/reset"
    sleep 2
    echo 0 > "$pf/sriov_drivers_autoprobe"
    echo "$n" > "$pf/sriov_numvfs"
    for i in $(seq 1 "$n"); do
        nvme virt-mgmt "$ctrl" -c "$i" -r 1 -a 8 -n 1 > /dev/null
        nvme virt-mgmt "$ctrl" -c "$i" -r 0 -a 8 -n 2 > /dev/null
        nvme virt-mgmt "$ctrl" -c "$i" -r 0 -a 9 -n 0 > /dev/null
        # Secondary controller i (VF i-1) gets namespace i+1 to itself,
        # where run-l1.sh made one.
        nvme attach-ns "$ctrl" -n $((i + 1)) -c "$i" > /dev/null 2>&1 \
            && t "  namespace $((i + 1)) attached to controller $i"
    done
    echo 1 > "$pf/sriov_drivers_autoprobe"
    for v in "$pf"/virtfn*; do
        basename "$(readlink "$v")" > /sys/bus/pci/drivers_probe 2>/dev/null
    done
}

# libvirtd without systemd, as root, without cgroups, namespaces or a
# security driver (L1 has none of them set up). Edits only L1's overlay
# copy of /etc/libvirt.
libvirtd_start() {
    local i
    kvm_load
    mkdir -p /run/libvirt /var/log/libvirt/qemu /var/lib/libvirt/qemu \
        /var/cache/libvirt/qemu
    cat >> /etc/libvirt/qemu.conf <<'EOC'
user = "root"
group = "root"
dynamic_ownership = 0
remember_owner = 0
security_driver = "none"
cgroup_controllers = [ ]
namespaces = [ ]
EOC
    rm -f /etc/libvirt/qemu/networks/autostart/default.xml
    # L1's /etc is the host's, under L1's overlay: domains the host's
    # libvirtd has defined are no guests of L1's (removed in the overlay
    # only).
    rm -f /etc/libvirt/qemu/*.xml /etc/libvirt/qemu/autostart/*.xml
    virtlogd -d && libvirtd -d || return 1
    for i in $(seq 1 300); do
        virsh -c qemu:///system version > /dev/null 2>&1 && break
        sleep 1
    done
    t "libvirtd up: $(virsh -c qemu:///system version 2>&1 \
        | grep -i hypervisor)"
}
