# A nova-compute with the libvirt driver of cyborg-nova, inside L1
# (run-l1.sh -d igb l1-nova-compute.sh; tools/mini_cloud_l1.py starts it
# for "tools/mini-cloud.sh --nova-in-l1").
#
# SR-IOV up (two igb VFs bound to igbvf), the management network, the
# host's service ports forwarded from L1's loopback (forward.py),
# libvirtd, then nova-compute with compute_driver = cyborg_nova.
# LibvirtDriver, the nic_sriov driver reporting the igb PF (physnet1),
# registered with the cloud on the host. It then answers the host's
# checks until the host asks it to stop:
#   $L1_CONTROL/check-N   -> writes $L1_CONTROL/result-N (JSON: the
#                            libvirt domains with their hostdevs and what
#                            the L2 guest last said it sees, the VFs with
#                            their drivers)
#   $L1_CONTROL/stop      -> stops nova-compute and powers L1 off
# Progress goes to $L1_CONTROL/status (one word a line: up, compute).
#
# L1_NOVA_CONF: the compute's nova.conf (the cloud's, host nested-l1);
# L1_VENV: the venv with Nova and cyborg-nova; L1_REPO: this tree;
# L1_FORWARD: the ports; L1_CONTROL: the control directory, under $NESTED
# (shared with the host).
for v in L1_NOVA_CONF L1_VENV L1_REPO L1_FORWARD L1_CONTROL; do
    [ -n "${!v:-}" ] || { t "$v is not set"; exit 2; }
done
status() { echo "$1" >> "$L1_CONTROL/status"; t "status: $1"; }
udev_start
sriov_up 2 || exit 1
mgmt_net_up || exit 1
"$L1_VENV/bin/python" "$L1_REPO/tools/nested/forward.py" --to 10.0.2.2 \
    $L1_FORWARD > "$RUN/forward.log" 2>&1 &
libvirtd_start || exit 1
pf=$(awk '$1 == "igb" {print $2; exit}' /run/nested-vfs)
mkdir -p /var/lib/nova/instances /var/lib/nova/locks
helper="$L1_VENV/bin/privsep-helper --config-file $L1_NOVA_CONF \
--config-file /run/l1-compute.conf"
# What differs from a compute on the host: the libvirt driver, this
# machine's own sysfs and state, and Nova's privsep daemons started
# without sudo (there is none).
# The operations the host drives: a guest that ignores ACPI (L2's init)
# is stopped, or soft-rebooted, after a few seconds rather than minutes;
# a shelved server is offloaded at once; a resize may stay on this host,
# where the old and the new guest's 1 GB disks must both fit L1's small
# root (L2 never writes its disk).
cat > /run/l1-compute.conf <<EOF
[DEFAULT]
compute_driver = cyborg_nova.LibvirtDriver
debug = True
state_path = /var/lib/nova
instances_path = /var/lib/nova/instances
shutdown_timeout = 5
shelved_offload_time = 0
allow_resize_to_same_host = True
disk_allocation_ratio = 16.0
[oslo_concurrency]
lock_path = /var/lib/nova/locks
[libvirt]
wait_soft_reboot_seconds = 10
virt_type = $([ -c /dev/kvm ] && echo kvm || echo qemu)
cpu_mode = $([ -c /dev/kvm ] && echo host-passthrough || echo none)
[cyborg_nova]
sysfs_root = /sys
state_path = /var/lib/nova/accelerators.sqlite
enabled_drivers = nic_sriov
auto_ready = True
[cyborg_nic_sriov]
physical_device_mappings = physnet1:$pf
[cyborg_nova_privsep]
sysfs_root = /sys
[cyborg_nova_privsep_sysfs]
helper_command = $helper
[cyborg_nova_privsep_net]
helper_command = $helper
[nova_sys_admin]
helper_command = $helper
[privsep_osbrick]
helper_command = $helper
[vif_plug_linux_bridge_privileged]
helper_command = $helper
[vif_plug_ovs_privileged]
helper_command = $helper
EOF
cp /run/l1-compute.conf "$RUN/"
t "guests in L1's libvirt: $(virsh -c qemu:///system list --all --uuid \
    | tr '\n' ' ')"
status up
"$L1_VENV/bin/nova-compute" --config-file "$L1_NOVA_CONF" \
    --config-file /run/l1-compute.conf --log-file "$RUN/nova-compute.log" \
    > "$RUN/nova-compute.out" 2>&1 &
compute=$!
status compute

# One JSON document: what L1 shows of the guests and the VFs, and the
# units the state store holds back for their scrub.
report() {
    "$L1_VENV/bin/python" - "$pf" <<'PY'
import json
import os
import re
import sys
import xml.etree.ElementTree as ET

import libvirt

pf = sys.argv[1]
dev = '/sys/bus/pci/devices/'
vfs = sorted(os.path.basename(os.readlink(dev + pf + '/' + n))
             for n in os.listdir(dev + pf) if n.startswith('virtfn'))


def driver(address):
    try:
        return os.path.basename(os.readlink(dev + address + '/driver'))
    except OSError:
        return None


IGB_VF = '0x8086:0x10ca'


def l2_sees(uuid):
    """What L2 printed last on its console (Nova's console.log).

    The last complete pci-set: the guest's functions, as L2's own kernel
    shows them; the log starts anew at each start of the domain.
    """
    path = '/var/lib/nova/instances/%s/console.log' % uuid
    try:
        with open(path, errors='replace') as f:
            text = f.read()
    except OSError:
        return None
    found, current = None, None
    for line in text.splitlines():
        if line.startswith('L2: pci-set begin'):
            current = []
        elif line.startswith('L2: pci-set end') and current is not None:
            found, current = current, None
        elif current is not None:
            current.append(line)
    if found is None:
        return None
    # The kernel's messages share the console: the pairs are read from
    # the set's whole text.
    pairs = re.findall(r'\b(0x[0-9a-f]{4}:0x[0-9a-f]{4}) +driver=(\S+)',
                       ' '.join(found))
    return {'igb_vfs': sum(1 for ids, _ in pairs if ids == IGB_VF),
            'boots': text.count('L2: up at')}


conn = libvirt.open('qemu:///system')
domains = {}
for dom in conn.listAllDomains(0):
    root = ET.fromstring(dom.XMLDesc(0))
    found = []
    for hostdev in root.iter('hostdev'):
        a = hostdev.find('source/address')
        found.append('%04x:%02x:%02x.%x' % tuple(
            int(a.get(k), 16) for k in ('domain', 'bus', 'slot',
                                        'function')))
    uuid = dom.UUIDString()
    domains[uuid] = {'active': bool(dom.isActive()),
                     'hostdevs': sorted(found),
                     'l2': l2_sees(uuid.lower())}

def held():
    import sqlite3
    try:
        db = sqlite3.connect('file:/var/lib/nova/accelerators.sqlite'
                             '?mode=ro', uri=True)
        try:
            return sorted(db.execute('SELECT unit, state FROM unit_holds'))
        finally:
            db.close()
    except sqlite3.Error as exc:
        return str(exc)


print(json.dumps({'pf': pf, 'vfs': {v: driver(v) for v in vfs},
                  'domains': domains, 'held': held()}))
PY
}

# A child that exited stays a zombie until waited for: kill -0 is no test.
running() {
    local state
    state=$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null) && [ "$state" != Z ]
}

rc=0
while :; do
    if ! running $compute; then
        t "nova-compute exited"
        rc=1
        break
    fi
    [ -e "$L1_CONTROL/stop" ] && break
    for check in "$L1_CONTROL"/check-*; do
        [ -e "$check" ] || continue
        n=${check##*/check-}
        [ -e "$L1_CONTROL/result-$n" ] && continue
        report > "$L1_CONTROL/result-$n.tmp" 2>> "$RUN/report.err" \
            && mv "$L1_CONTROL/result-$n.tmp" "$L1_CONTROL/result-$n"
    done
    sleep 1
done
kill $compute 2>/dev/null
for _ in $(seq 30); do running $compute || break; sleep 1; done
kill -9 $compute 2>/dev/null
wait $compute 2>/dev/null
exit $rc
