#    Licensed under the Apache License, Version 2.0 (the "License"); you may
#    not use this file except in compliance with the License. You may obtain
#    a copy of the License at
#
#         http://www.apache.org/licenses/LICENSE-2.0
#
#    Unless required by applicable law or agreed to in writing, software
#    distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
#    WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
#    License for the specific language governing permissions and limitations
#    under the License.

"""Fake sysfs trees for the privileged modules, and what they lack.

A tree from :mod:`cyborg_drivers.fake.hosttree` has the device side of
sysfs; the privileged writes also need a few bus-level files the kernel
always has (``bus/pci/drivers_probe``, a loaded vfio-pci driver) and
mediated devices to remove. There is no kernel behind the files, so a
write only changes a file's content: tests assert that content.
"""

import hashlib
import os

from cyborg_drivers.fake import hosttree

GPU_HOST = 'gpu-host'
CRYPTO_NIC_HOST = 'crypto-nic-host'


def build(root, profile=GPU_HOST, vfio=True):
    """Build ``profile`` at ``root`` with the kernel's bus files."""
    hosttree.build_tree(hosttree.profile_path(profile), root)
    bus = os.path.join(root, 'bus', 'pci')
    open(os.path.join(bus, 'drivers_probe'), 'w').close()
    if vfio:
        driver = os.path.join(bus, 'drivers', 'vfio-pci')
        os.makedirs(driver)
        for name in ('bind', 'unbind', 'new_id', 'remove_id'):
            open(os.path.join(driver, name), 'w').close()
    return root


def device(root, address, *parts):
    return os.path.join(root, 'bus', 'pci', 'devices', address, *parts)


def read(path):
    with open(path) as f:
        return f.read()


def add_mdev(root, parent, mdev_uuid):
    """A mediated device under ``parent``, as the kernel would show it."""
    path = device(root, parent, mdev_uuid)
    os.makedirs(path)
    open(os.path.join(path, 'remove'), 'w').close()
    return path


def snapshot(root):
    """Every regular file of the tree and a digest of its content."""
    state = {}
    for top, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(top, name)
            if os.path.islink(path):
                continue
            with open(path, 'rb') as f:
                state[path] = hashlib.sha256(f.read()).hexdigest()
    return state


def sriov_manage(directory, root):
    """A stand-in for NVIDIA's ``sriov-manage`` over the tree at ``root``.

    As NVIDIA's script does on ``/sys``: ``-e <address>`` writes the
    GPU's ``sriov_totalvfs`` to its ``sriov_numvfs``, ``-d <address>``
    writes 0. Each call's arguments are appended to ``<tool>.calls``;
    an address listed in ``<tool>.fail`` makes it fail as the script
    does when the driver refuses. Returns the tool's path.
    """
    tool = os.path.join(str(directory), 'sriov-manage')
    with open(tool, 'w') as f:
        f.write('''#!/bin/sh
echo "$@" >> "$0.calls"
dev="%s/bus/pci/devices/$2"
if [ -e "$0.fail" ] && grep -qx "$2" "$0.fail"; then
    echo "Cannot enable VFs on $2" >&2; exit 1
fi
case "$1" in
  -e) cat "$dev/sriov_totalvfs" > "$dev/sriov_numvfs" ;;
  -d) echo 0 > "$dev/sriov_numvfs" ;;
  *) echo "usage: $0 -e|-d <address>" >&2; exit 2 ;;
esac
''' % root)
    os.chmod(tool, 0o755)
    return tool


def calls(tool):
    """The argument lines :func:`sriov_manage`'s tool was run with."""
    try:
        with open(tool + '.calls') as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return []
