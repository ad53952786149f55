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

"""Upstream OpenStack Cyborg's drivers, pointed at a fake sysfs tree.

Runs INSIDE the separate venv that holds openstack-cyborg from PyPI
(``.venv-cyborg``, made by ``tools/setup-bench-venvs.sh``); it imports
nothing of this project. One *cycle* is what Cyborg's agent does each
resource-tracker period (``ResourceTracker.update_usage``): call
``discover()`` on every enabled driver, in order. The drivers are loaded
the way the agent loads them (stevedore, namespace
``cyborg.accelerator.driver``).

How the drivers are pointed at the tree without editing the package:

- ``cyborg.privsep.sys_admin_pctxt.set_client_mode(False)``: privileged
  calls (its ``lspci`` runs) happen in this process, no daemon;
- the module path constants ``PCI_DEVICES_PATH``/``_PATTERN`` and
  ``SYS_FPGA`` of the Intel FPGA, QAT and NIC drivers, and
  ``fpga.utils.SYS_FPGA_PATH``, are set to the tree;
- ``accelerator.common.utils._get_sysfs_netdev_path`` (the NIC driver's
  interface-name lookup, a hard-coded ``/sys`` path) is replaced by one
  that reads the tree;
- a ``lspci`` wrapper put first on ``PATH`` adds ``-A linux-sysfs -O
  sysfs.path=<tree>/bus/pci`` (the GPU and Xilinx drivers parse
  ``lspci -nn -D``), and ``-i`` a copy of the system's ``pci.ids`` without
  the names of Xilinx (10ee) devices: Cyborg's Xilinx driver only takes
  lines that read ``Xilinx Corporation Device``, i.e. cards ``pci.ids``
  does not name, and Debian's names every Alveo card (``--keep-pci-ids``
  keeps the system's file; the driver then finds no card).

Modes:

``--serve``
    Read one command a line from stdin: ``cycle`` runs one timed cycle
    and prints ``{"ms": total, "drivers": {name: ms}}``; ``quit`` ends.
    Lets a caller in another venv interleave Cyborg's cycles with its
    own measurements.
``--once`` (default)
    One untimed cycle, then prints what each driver found and the
    process's peak RSS (``VmHWM``) before and after it.

Usage: .venv-cyborg/bin/python benchmarks/upstream_cyborg.py --tree ROOT
           [--serve] [--drivers a,b,...]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import stat
import sys
import tempfile
import time
import warnings

#: The five drivers of an agent on an accelerator host like ours.
DEFAULT_DRIVERS = ('nvidia_gpu_driver', 'intel_fpga_driver',
                   'xilinx_fpga_driver', 'intel_qat_driver',
                   'intel_nic_driver')


def status_kib(key: str) -> int:
    with open('/proc/self/status') as f:
        for line in f:
            if line.startswith(key + ':'):
                return int(line.split()[1])
    return 0


PCI_IDS = ('/usr/share/misc/pci.ids', '/usr/share/hwdata/pci.ids')


def unnamed_xilinx_ids(dest: str) -> str | None:
    """Write the system's pci.ids without Xilinx device names to dest."""
    source = next((p for p in PCI_IDS if os.path.exists(p)), None)
    if source is None:
        return None
    with open(source, encoding='utf-8', errors='replace') as f, \
            open(dest, 'w', encoding='utf-8') as out:
        in_xilinx = False
        for line in f:
            if line[:1] not in ('\t', '#', '\n'):
                in_xilinx = line.startswith('10ee ')
            elif in_xilinx and line.startswith('\t'):
                continue
            out.write(line)
    return dest


def point_at(tree: str, keep_pci_ids: bool = False) -> str:
    """Aim Cyborg's drivers at ``tree``; returns the wrapper directory."""
    from cyborg.accelerator.common import utils
    from cyborg.accelerator.drivers.fpga.intel import sysinfo as fpga_intel
    from cyborg.accelerator.drivers.fpga import utils as fpga_utils
    from cyborg.accelerator.drivers.nic.intel import sysinfo as nic_intel
    from cyborg.accelerator.drivers.qat.intel import sysinfo as qat_intel
    import cyborg.privsep

    cyborg.privsep.sys_admin_pctxt.set_client_mode(False)
    devices = os.path.join(tree, 'bus', 'pci', 'devices')
    fpga_intel.PCI_DEVICES_PATH = devices
    fpga_intel.PCI_DEVICES_PATH_PATTERN = os.path.join(devices, '*')
    fpga_intel.SYS_FPGA = os.path.join(tree, 'class', 'fpga')
    fpga_utils.SYS_FPGA_PATH = os.path.join(tree, 'class', 'fpga')
    qat_intel.PCI_DEVICES_PATH = devices
    nic_intel.PCI_DEVICES_PATH_PATTERN = os.path.join(devices, '*')

    def netdev_path(pci_addr, vf_interface=False):
        if vf_interface:
            return os.path.join(devices, pci_addr, 'physfn', 'net')
        return os.path.join(devices, pci_addr, 'net')
    utils._get_sysfs_netdev_path = netdev_path

    bindir = tempfile.mkdtemp(prefix='cyborg-lspci-')
    wrapper = os.path.join(bindir, 'lspci')
    ids = None if keep_pci_ids else unnamed_xilinx_ids(
        os.path.join(bindir, 'pci.ids'))
    with open(wrapper, 'w') as f:
        f.write('#!/bin/sh\nexec /usr/bin/lspci %s-A linux-sysfs -O '
                'sysfs.path=%s/bus/pci "$@"\n'
                % ('-i %s ' % ids if ids else '', tree))
    os.chmod(wrapper, stat.S_IRWXU)
    os.environ['PATH'] = bindir + os.pathsep + os.environ.get('PATH', '')
    return bindir


def load_drivers(names):
    import cyborg.conf
    from stevedore import driver
    cyborg.conf.CONF([], project='cyborg')
    return [(name, driver.DriverManager(
        namespace='cyborg.accelerator.driver', name=name,
        invoke_on_load=True).driver) for name in names]


def cycle(drivers) -> tuple[float, dict, dict]:
    """One agent cycle: (total ms, {driver: ms}, {driver: devices})."""
    times, found = {}, {}
    start = time.perf_counter()
    for name, drv in drivers:
        t0 = time.perf_counter()
        found[name] = drv.discover()
        times[name] = (time.perf_counter() - t0) * 1000.0
    return (time.perf_counter() - start) * 1000.0, times, found


def describe(devices: list) -> dict:
    """What one driver reported: devices, deployables, resource classes.

    A deployable becomes one resource provider in Placement (Cyborg's
    conductor makes one per deployable, as a child of the compute node).
    """
    deployables = [dep for dev in devices for dep in dev.deployable_list]
    classes = {}
    for dep in deployables:
        rc = next((a.value for a in dep.attribute_list if a.key == 'rc'),
                  '?')
        classes[rc] = classes.get(rc, 0) + dep.num_accelerators
    return {'devices': len(devices), 'deployables': len(deployables),
            'attach_handles': sum(len(d.attach_handle_list)
                                  for d in deployables),
            'units_by_rc': classes}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--tree', required=True, help='fake sysfs root')
    parser.add_argument('--drivers', default=','.join(DEFAULT_DRIVERS))
    parser.add_argument('--serve', action='store_true')
    parser.add_argument('--keep-pci-ids', action='store_true')
    args = parser.parse_args(argv)
    # Cyborg's drivers log a warning per GPU each cycle without
    # [gpu_devices] enabled_vgpu_types: not what is measured.
    logging.disable(logging.WARNING)
    warnings.filterwarnings('ignore')
    tree = os.path.abspath(args.tree)
    bindir = point_at(tree, args.keep_pci_ids)
    drivers = load_drivers(args.drivers.split(','))
    if args.serve:
        print(json.dumps({'ready': True}), flush=True)
        for line in sys.stdin:
            if line.strip() != 'cycle':
                break
            total, times, _ = cycle(drivers)
            print(json.dumps({'ms': total, 'drivers': times}), flush=True)
        shutil.rmtree(bindir, ignore_errors=True)
        return 0
    before = status_kib('VmHWM')
    rss_before = status_kib('VmRSS')
    total, times, found = cycle(drivers)
    import importlib.metadata as md
    print(json.dumps({
        'version': md.version('openstack-cyborg'),
        'ms': total, 'drivers': times,
        'found': {name: describe(devs) for name, devs in found.items()},
        'rss_before_kib': rss_before, 'hwm_before_kib': before,
        'hwm_after_kib': status_kib('VmHWM'),
        'pci_ids': 'system' if args.keep_pci_ids else
                   'system, Xilinx device names removed'}))
    shutil.rmtree(bindir, ignore_errors=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
