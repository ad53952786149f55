#!/usr/bin/env bash
# Builds $NESTED_WORK/initramfs-l1.gz and initramfs-l2.gz: busybox-static
# and a few modules of the kernel setup.sh unpacked. setup.sh calls it.
#
# L1's init mounts this machine's / read-only over 9p (tag hostroot) under
#   a tmpfs overlay, the work directory (tag nested) read-write at
#   /nested, the unpacked modules on /lib/modules, and switch_roots into
#   /nested/<run dir>/l1-init.sh (the run dir comes from nested.run= on
#   the kernel command line).
# L2's init loads nvme and igbvf and then, for as long as it runs, prints
#   the PCI functions it sees with their drivers on its serial console
#   whenever that list changes (at boot, after a hot-plug or an unplug):
#       L2: pci-set begin <uptime>
#       L2: pci <address> <vendor>:<device> driver=<name|none>
#       L2: pci-set end
#   L1's tests read the last complete set.
set -euo pipefail
work=${NESTED_WORK:?NESTED_WORK names the work directory}
work=$(cd "$work" && pwd)
kver=$(ls "$work/kernel/lib/modules" | head -1)

# Module files, dependencies first, of the named modules (built-ins have
# none to copy).
mods() {
    local m
    for m; do
        modprobe -d "$work/kernel" -S "$kver" --show-depends "$m"
    done | awk '$1 == "insmod" && !seen[$2]++ {print $2}'
}

# skel DIR MODULES...: busybox, the directories and the modules (in load
# order, listed in /mods/order).
skel() {
    local dir=$1 f
    shift
    mkdir -p "$dir"/{bin,mods,proc,sys,dev,ro,rw,newroot}
    cp /bin/busybox "$dir/bin/busybox"
    for f in $(mods "$@"); do
        cp "$f" "$dir/mods/"
        basename "$f" >> "$dir/mods/order"
    done
}

pack() {
    (cd "$1" && find . | cpio -o -H newc --quiet | gzip -1) > "$2"
    rm -rf "$1"
    echo "mk-initramfs: $2 ($(du -k "$2" | cut -f1) KB)"
}

dir=$(mktemp -d)
skel "$dir" 9p 9pnet_virtio virtio_pci overlay
cat > "$dir/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in $(cat /mods/order); do
    insmod /mods/$m || echo "initramfs: insmod $m failed"
done
opts=trans=virtio,version=9p2000.L,msize=262144
mount -t 9p -o $opts,ro,cache=loose hostroot /ro || {
    echo "initramfs: 9p mount of hostroot failed"; exec sh; }
mount -t tmpfs -o size=1G tmpfs /rw
mkdir -p /rw/upper /rw/work
mount -t overlay overlay \
    -o lowerdir=/ro,upperdir=/rw/upper,workdir=/rw/work /newroot || {
    echo "initramfs: overlay failed"; exec sh; }
mkdir -p /newroot/nested /newroot/lib/modules
mount -t 9p -o $opts nested /newroot/nested || {
    echo "initramfs: 9p mount of nested failed"; exec sh; }
mount --bind /newroot/nested/kernel/lib/modules /newroot/lib/modules
run=$(sed -n 's/.*nested\.run=\([^ ]*\).*/\1/p' /proc/cmdline)
for f in proc sys dev; do mount --move /$f /newroot/$f; done
echo "initramfs: done at $(cut -d' ' -f1 /newroot/proc/uptime)s"
exec switch_root /newroot /bin/bash /nested/$run/l1-init.sh
EOF
chmod +x "$dir/init"
pack "$dir" "$work/initramfs-l1.gz"

dir=$(mktemp -d)
skel "$dir" nvme igbvf
cat > "$dir/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
echo "L2: up at $(cut -d' ' -f1 /proc/uptime)s, kernel $(uname -r)"
for m in $(cat /mods/order); do insmod /mods/$m 2>/dev/null; done
listing() {
    for d in /sys/bus/pci/devices/*; do
        drv=none
        [ -e $d/driver ] && drv=$(basename $(readlink $d/driver))
        echo "L2: pci $(basename $d) $(cat $d/vendor):$(cat $d/device)" \
            "driver=$drv"
    done
}
last=
while :; do
    now=$(listing)
    if [ "$now" != "$last" ]; then
        echo "L2: pci-set begin $(cut -d' ' -f1 /proc/uptime)"
        echo "$now"
        echo "L2: pci-set end"
        last=$now
    fi
    sleep 1
done
EOF
chmod +x "$dir/init"
pack "$dir" "$work/initramfs-l2.gz"
