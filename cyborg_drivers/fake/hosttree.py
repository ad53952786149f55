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

"""Build a fake Linux sysfs tree from a declarative host profile.

The tree follows the kernel's layout and file formats closely enough that
code reading ``/sys`` works on it unchanged when pointed at the tree's
root, and so does ``lspci -A linux-sysfs -O sysfs.path=ROOT/bus/pci``:

- ``devices/pci<domain>:<bus>/[<bridge>/...]<address>/`` per function,
  with ``vendor``, ``device``, ``class``, ``uevent``, ``modalias``, a
  256-byte ``config`` and the other attributes in the kernel's formats;
  SR-IOV VFs are siblings of their PF, linked by ``virtfnN``/``physfn``;
- ``bus/pci/devices/<address>``, ``bus/pci/drivers/<driver>/<address>``
  and ``kernel/iommu_groups/<n>/devices/<address>`` links, and the
  ``driver``, ``subsystem`` and ``iommu_group`` links back;
- what accelerator drivers add: Intel FPGA (OPAE ``fpga/intel-fpga-dev.N``
  or kernel DFL ``fpga_region/regionN``), Xilinx ``interface_uuids``,
  mdev types, net devices, ``qat/`` of QAT 4xxx, 420xx and 6xxx PFs,
  and the ``class/*`` links to them.

Every link is relative, so a finished tree can be moved or copied.

Usage: ``python -m cyborg_drivers.fake.hosttree PROFILE DEST``.
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
import zlib

from cyborg_drivers.fake import profile as profile_lib
from cyborg_drivers.fake import staging

PROFILE_NAMES = profile_lib.PROFILE_NAMES
ProfileError = profile_lib.ProfileError
expand_functions = profile_lib.expand_functions
load_profile = profile_lib.load_profile
normalise_profile = profile_lib.normalise_profile
profile_path = profile_lib.profile_path
synthetic_profile = profile_lib.synthetic_profile
vf_addresses = profile_lib.vf_addresses

__all__ = ['PROFILE_NAMES', 'ProfileError', 'build_tree', 'expand_functions',
           'load_profile', 'main', 'normalise_profile', 'profile_path',
           'synthetic_profile', 'vf_addresses']

# Each NUMA node gets this many hyperthreaded cores, numbered the way
# Linux numbers a two-socket Xeon: first threads of all nodes, then the
# siblings.
_CORES_PER_NODE = 20
# Resource lines in the ``resource`` file: BARs, ROM, IOV BARs (13), plus
# the four bridge windows on bridges.
_RESOURCES, _BRIDGE_RESOURCES = 13, 17
_EMPTY_RESOURCE = '0x%016x 0x%016x 0x%016x\n' % (0, 0, 0)
_MAC_OUIS = {0x8086: (0xb4, 0x96, 0x91), 0x15b3: (0x0c, 0x42, 0xa1),
             0x1af4: (0x52, 0x54, 0x00)}
# Platform drivers of the DFL devices: the FME, the port (the AFU driver
# is named after it) and the FME's PR region (drivers/fpga/dfl.h).
_DFL_PLATFORM_DRIVERS = ('dfl-fme', 'dfl-port', 'dfl-fme-region')
_PLATFORM_DRIVER_FILES = ('bind', 'unbind', 'uevent')
_DRIVER_FILES = ('bind', 'unbind', 'new_id', 'remove_id', 'uevent')
# Ring pairs (banks) of every QAT 4xxx, 420xx and 6xxx PF: the kernel's
# ADF_GEN4_ETR_MAX_BANKS and ADF_GEN6_ETR_MAX_BANKS, shown in qat/num_rps.
_QAT_NUM_RPS = 64
# Network interfaces' type (include/uapi/linux/if_arp.h), and the PCI
# class of the InfiniBand controllers whose interfaces are IPoIB ones.
_ARPHRD_ETHER, _ARPHRD_INFINIBAND = 1, 32
# The nvme driver's character devices: a major the kernel allocates at
# load time (alloc_chrdev_region), one minor per controller.
_NVME_MAJOR = 240
_INFINIBAND_SUBCLASS = 0x0207


def build_tree(profile: dict | str, root: str) -> None:
    """Create a fake sysfs tree for ``profile`` at ``root``.

    ``profile`` is a profile dict (validated here), a YAML file path or
    the name of a shipped profile (see :data:`PROFILE_NAMES`).
    ``root`` must be absent or an empty directory. The tree is built in a
    temporary sibling directory and renamed into place, so ``root`` is
    either complete or untouched.

    :raises ProfileError: the profile is invalid.
    :raises FileExistsError: ``root`` exists and is not an empty directory.
    """
    if isinstance(profile, str):
        if profile in PROFILE_NAMES and not os.path.exists(profile):
            profile = profile_path(profile)
        profile = load_profile(profile)
    else:
        profile = normalise_profile(profile)
    with staging.staged(os.path.realpath(root)) as tmp:
        _Builder(profile, tmp).build()


def _write(path: str, text: str) -> None:
    with open(path, 'w', encoding='ascii') as f:
        f.write(text)


def _cpulist(cpus: list[int]) -> str:
    """Kernel ``%*pbl`` format: ``0-19,40-59``."""
    ranges = []
    for cpu in sorted(cpus):
        if ranges and ranges[-1][1] == cpu - 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ','.join('%d' % a if a == b else '%d-%d' % (a, b)
                    for a, b in ranges)


def _cpumask(cpus: list[int], ncpus: int) -> str:
    """Kernel ``%*pb`` format: 32-bit hex words, most significant first."""
    value = sum(1 << cpu for cpu in cpus)
    nwords = (ncpus + 31) // 32
    words = ['%08x' % (value >> (32 * i) & 0xffffffff)
             for i in reversed(range(nwords))]
    first_bits = ncpus - 32 * (nwords - 1)
    words[0] = words[0][-((first_bits + 3) // 4):]
    return ','.join(words)


def _fpga_has_fme(f: dict) -> bool:
    # The FME is a PF's; an OFS board's other PFs have a port only.
    return not f['physfn'] and f['fpga']['role'] != 'ofs-port'


def _fpga_port_shown(f: dict) -> bool:
    """Whether the function shows its FPGA port.

    A PAC's PF releases its port before SR-IOV is enabled (the kernel
    requires one released port per VF), and the port reappears on the
    VF. An OFS board's PFs keep theirs; its VFs have ports of their own.
    """
    if f['physfn'] or f['fpga']['role'] != 'pac':
        return True
    return not (f['sriov'] and f['sriov']['numvfs'])


def fpga_device_names(functions: list[dict]) -> dict[str, dict[str, int]]:
    """The numbers of each FPGA function's devices, by address.

    Numbered as the kernel numbers them with the drivers loaded before
    the cards are probed: the PFs in bus order at boot, then the VFs,
    which exist only once SR-IOV is enabled. DFL (drivers/fpga/dfl.c,
    dfl-fme-pr.c, fpga-region.c): ``region`` the card's FPGA region, from
    the one counter of every FPGA region; ``fme`` and ``port`` from their
    own counters, a port keeping its number when released to a VF; the
    FME's PR region, probed with the FME before the port is parsed:
    ``pr_region`` from the region counter and ``bridge``, the number of
    its ``dfl-fme-region`` platform device, which is its FPGA bridge's
    automatic platform device id. OPAE (intel-fpga-pci): ``dev``, ``fme``
    and ``port`` from counters of their own.

    :param functions: :func:`expand_functions`'s list, sorted by address.
    """
    count = dict.fromkeys(('region', 'fme', 'port', 'auto', 'dev',
                           'opae_fme', 'opae_port'), 0)

    def take(key: str) -> int:
        count[key] += 1
        return count[key] - 1

    names = {}
    fpgas = [f for f in functions if f['fpga']]
    for f in ([f for f in fpgas if not f['physfn']]
              + [f for f in fpgas if f['physfn']]):
        fme = _fpga_has_fme(f)
        if f['fpga']['layout'] == 'opae':
            entry = {'dev': take('dev')}
            if fme:
                entry['fme'] = take('opae_fme')
            entry['port'] = take('opae_port')
        else:
            entry = {'region': take('region')}
            if fme:
                entry.update(fme=take('fme'), bridge=take('auto'),
                             pr_region=take('region'))
            entry['port'] = take('port')
        names[f['address']] = entry
    return names


class _Builder:
    """Writes one normalised profile into an existing empty directory."""

    def __init__(self, profile: dict, root: str) -> None:
        self.root = root
        self.functions = expand_functions(profile)
        self.by_address = {f['address']: f for f in self.functions}
        self.dirs = {}
        for function in self.functions:
            self._device_dir(function)
        self.bus_pci = os.path.join(root, 'bus', 'pci')
        nodes = max([f['numa_node'] for f in self.functions] + [0]) + 1
        self.ncpus = nodes * _CORES_PER_NODE * 2
        self.node_cpus = {
            n: [c for c in range(self.ncpus)
                if c // _CORES_PER_NODE % nodes == n]
            for n in range(nodes)}
        self.node_cpus[-1] = list(range(self.ncpus))
        self.counters = {'ifindex': 2, 'irq': 24}
        self.fpga_names = fpga_device_names(self.functions)

    # -- layout decisions ----------------------------------------------------

    def _device_dir(self, function: dict) -> str:
        address = function['address']
        if address not in self.dirs:
            if function['physfn']:
                # The kernel gives VFs their PF's parent device.
                pf_dir = self._device_dir(self.by_address[function['physfn']])
                path = os.path.join(os.path.dirname(pf_dir), address)
            elif function['parent']:
                path = os.path.join(
                    self._device_dir(self.by_address[function['parent']]),
                    address)
            else:
                domain, bus, _, _ = profile_lib.parse_address(address)
                path = os.path.join(self.root, 'devices',
                                    'pci%04x:%02x' % (domain, bus), address)
            self.dirs[address] = path
        return self.dirs[address]

    def _iommu_groups(self) -> dict:
        groups = {}
        taken = {f['iommu_group'] for f in self.functions
                 if isinstance(f['iommu_group'], int)}
        next_group = 0
        for function in self.functions:
            group = function['iommu_group']
            if group is None:
                while next_group in taken:
                    next_group += 1
                group = next_group
                taken.add(group)
            groups[function['address']] = group
        return groups

    def _multifunction_slots(self) -> set:
        # The header's multi-function bit is about physical functions; VFs
        # packed into a slot do not make it one.
        count = {}
        for function in self.functions:
            if not function['physfn']:
                slot = function['address'].rpartition('.')[0]
                count[slot] = count.get(slot, 0) + 1
        return {slot for slot, n in count.items() if n > 1}

    def _bridge_buses(self, function: dict) -> tuple[int, int]:
        """Secondary and subordinate bus of a bridge, from what is below."""
        bus = profile_lib.parse_address(function['address'])[1]
        prefix = self.dirs[function['address']] + os.sep
        below = [f for f in self.functions
                 if self.dirs[f['address']].startswith(prefix)]
        if not below:
            return min(bus + 1, 0xff), min(bus + 1, 0xff)
        buses = [profile_lib.parse_address(f['address'])[1] for f in below]
        return min(buses), max(buses)

    # -- writing -------------------------------------------------------------

    def build(self) -> None:
        for path in (os.path.join(self.bus_pci, 'devices'),
                     os.path.join(self.bus_pci, 'drivers'),
                     os.path.join(self.root, 'kernel', 'iommu_groups'),
                     os.path.join(self.root, 'class')):
            os.makedirs(path)
        groups = self._iommu_groups()
        # Mediated devices get groups after every function's.
        self._free_group = max([g for g in groups.values()
                                if g != 'none'] + [-1]) + 1
        multifunction = self._multifunction_slots()
        for function in self.functions:
            address = function['address']
            self._function(function, groups[address],
                           address.rpartition('.')[0] in multifunction)

    def _link(self, target: str, link: str) -> None:
        os.symlink(os.path.relpath(target, os.path.dirname(link)), link)

    def _class_link(self, cls: str, name: str, target: str) -> None:
        class_dir = os.path.join(self.root, 'class', cls)
        os.makedirs(class_dir, exist_ok=True)
        self._link(target, os.path.join(class_dir, name))
        self._link(class_dir, os.path.join(target, 'subsystem'))

    def _function(self, f: dict, group: int, multifunction: bool) -> None:
        address, path = f['address'], self.dirs[f['address']]
        os.makedirs(path, exist_ok=True)
        cls, bound = f['class'], f['driver'] is not None
        irq = 0
        if not f['physfn']:
            # VFs have no INTx pin; PFs show their legacy interrupt.
            irq = self.counters['irq']
            self.counters['irq'] += 1
        modalias = ('pci:v%08Xd%08Xsv%08Xsd%08Xbc%02Xsc%02Xi%02X'
                    % (f['vendor'], f['device'], f['subsystem_vendor'],
                       f['subsystem_device'], cls >> 16, cls >> 8 & 0xff,
                       cls & 0xff))
        uevent = ['DRIVER=%s' % f['driver']] if bound else []
        uevent += ['PCI_CLASS=%04X' % cls,
                   'PCI_ID=%04X:%04X' % (f['vendor'], f['device']),
                   'PCI_SUBSYS_ID=%04X:%04X' % (f['subsystem_vendor'],
                                                f['subsystem_device']),
                   'PCI_SLOT_NAME=%s' % address,
                   'MODALIAS=%s' % modalias]
        bridge = profile_lib.is_bridge(f)
        cpus = self.node_cpus[f['numa_node']]
        attrs = {
            'vendor': '0x%04x\n' % f['vendor'],
            'device': '0x%04x\n' % f['device'],
            'subsystem_vendor': '0x%04x\n' % f['subsystem_vendor'],
            'subsystem_device': '0x%04x\n' % f['subsystem_device'],
            'class': '0x%06x\n' % cls,
            'revision': '0x%02x\n' % f['revision'],
            'numa_node': '%d\n' % f['numa_node'],
            'local_cpulist': _cpulist(cpus) + '\n',
            'local_cpus': _cpumask(cpus, self.ncpus) + '\n',
            'enable': '%d\n' % bound,
            'irq': '%d\n' % irq,
            'modalias': modalias + '\n',
            'uevent': '\n'.join(uevent) + '\n',
            'driver_override': '(null)\n',
            'resource': _EMPTY_RESOURCE * (_BRIDGE_RESOURCES if bridge
                                           else _RESOURCES),
        }
        # The kernel shows reset_method (5.15+) and the write-only reset
        # only on a function it can reset: an endpoint with FLR by
        # default, none where the profile says so (reset_method '').
        methods = '' if bridge else f.get('reset_method', 'flr')
        if methods:
            attrs['reset_method'] = methods + '\n'
        for name, text in attrs.items():
            _write(os.path.join(path, name), text)
        if methods:
            reset = os.path.join(path, 'reset')
            _write(reset, '')
            os.chmod(reset, 0o200)
        with open(os.path.join(path, 'config'), 'wb') as fp:
            fp.write(self._config(f, irq, bridge, multifunction))

        self._link(self.bus_pci, os.path.join(path, 'subsystem'))
        self._link(path, os.path.join(self.bus_pci, 'devices', address))
        if bound:
            self._bind(f['driver'], address, path)
        if group != 'none':
            # Without an IOMMU (or with it off) the kernel makes no group
            # and the function has no iommu_group link at all.
            self._iommu_link(path, address, group)

        if f['physfn']:
            self._link(self.dirs[f['physfn']], os.path.join(path, 'physfn'))
        if f['sriov']:
            self._sriov(f, path)
        if f['fpga']:
            self._fpga(f, path)
        if f['xilinx']:
            for key in ('interface_uuids', 'logic_uuids'):
                _write(os.path.join(path, key),
                       ''.join(u + '\n' for u in f['xilinx'][key]))
        if f['mdev_types']:
            self._mdev(f, path)
        if f['nvidia_vgpu'] and f['physfn']:
            # Only VFs carry nvidia/; the PF has no such directory.
            self._nvidia_vgpu(f['nvidia_vgpu'], path)
        for ifname in f['net'] or ():
            self._net(f, path, ifname)
        if f['qat']:
            self._qat(f['qat'], path)
        if f['driver'] == 'nvme':
            self._nvme(f, path)

    def _iommu_link(self, path: str, name: str, group: int) -> None:
        group_dir = os.path.join(self.root, 'kernel', 'iommu_groups',
                                 str(group))
        if not os.path.isdir(group_dir):
            os.makedirs(os.path.join(group_dir, 'devices'))
            _write(os.path.join(group_dir, 'type'), 'DMA\n')
        self._link(group_dir, os.path.join(path, 'iommu_group'))
        self._link(path, os.path.join(group_dir, 'devices', name))

    def _qat(self, qat: dict, path: str) -> None:
        """``qat/`` as the 4xxx, 420xx and 6xxx drivers make it.

        The attributes of Documentation/ABI/testing/sysfs-driver-qat, in
        their show() formats (qat_common/adf_sysfs.c). ``rp2srv`` is
        empty: the kernel fails its read until a ring pair number was
        written to it, which a file cannot do.
        """
        qat_dir = os.path.join(path, 'qat')
        os.mkdir(qat_dir)
        attrs = {'state': qat['state'],
                 'cfg_services': qat['cfg_services'],
                 'pm_idle_enabled': '%d' % qat['pm_idle_enabled'],
                 'num_rps': '%d' % _QAT_NUM_RPS,
                 'auto_reset': 'on' if qat['auto_reset'] else 'off'}
        for name, text in attrs.items():
            _write(os.path.join(qat_dir, name), text + '\n')
        _write(os.path.join(qat_dir, 'rp2srv'), '')

    def _config(self, f: dict, irq: int, bridge: bool,
                multifunction: bool) -> bytes:
        config = bytearray(256)
        cls = f['class']
        struct.pack_into('<HH', config, 0, f['vendor'], f['device'])
        # Command: memory space and bus master once a driver enabled it.
        struct.pack_into('<H', config, 4, 0x0006 if f['driver'] else 0)
        struct.pack_into('<BBBB', config, 8, f['revision'], cls & 0xff,
                         cls >> 8 & 0xff, cls >> 16)
        config[0x0e] = (1 if bridge else 0) | (0x80 if multifunction else 0)
        if bridge:
            bus = profile_lib.parse_address(f['address'])[1]
            secondary, subordinate = self._bridge_buses(f)
            struct.pack_into('<BBB', config, 0x18, bus, secondary,
                             subordinate)
        else:
            struct.pack_into('<HH', config, 0x2c, f['subsystem_vendor'],
                             f['subsystem_device'])
        if irq:
            config[0x3c], config[0x3d] = irq & 0xff, 1
        return bytes(config)

    def _bind(self, driver: str, address: str, path: str) -> None:
        driver_dir = os.path.join(self.bus_pci, 'drivers', driver)
        if not os.path.isdir(driver_dir):
            os.mkdir(driver_dir)
            for name in _DRIVER_FILES:
                _write(os.path.join(driver_dir, name), '')
        self._link(driver_dir, os.path.join(path, 'driver'))
        self._link(path, os.path.join(driver_dir, address))

    def _sriov(self, f: dict, path: str) -> None:
        sriov = f['sriov']
        attrs = {'sriov_totalvfs': '%d\n' % sriov['totalvfs'],
                 'sriov_numvfs': '%d\n' % sriov['numvfs'],
                 'sriov_offset': '%d\n' % sriov['offset'],
                 'sriov_stride': '%d\n' % sriov['stride'],
                 'sriov_vf_device': '%x\n' % sriov['vf_device'],
                 'sriov_drivers_autoprobe': '1\n'}
        for name, text in attrs.items():
            _write(os.path.join(path, name), text)
        for n, vf in enumerate(vf_addresses(f['address'], sriov)):
            self._link(self.dirs[vf], os.path.join(path, 'virtfn%d' % n))

    def _fpga(self, f: dict, path: str) -> None:
        names = self.fpga_names[f['address']]
        if f['fpga']['layout'] == 'opae':
            self._fpga_opae(f, path, names)
        else:
            self._fpga_dfl(f, path, names)

    def _fpga_opae(self, f: dict, path: str, names: dict) -> None:
        """``fpga/intel-fpga-dev.N/{intel-fpga-fme.N,intel-fpga-port.N}``."""
        fpga = f['fpga']
        name = 'intel-fpga-dev.%d' % names['dev']
        dev_dir = os.path.join(path, 'fpga', name)
        os.makedirs(dev_dir)
        self._link(path, os.path.join(dev_dir, 'device'))
        if 'fme' in names:
            pr = os.path.join(dev_dir, 'intel-fpga-fme.%d' % names['fme'],
                              'pr')
            os.makedirs(pr)
            _write(os.path.join(pr, 'interface_id'),
                   fpga['interface_id'] + '\n')
        if _fpga_port_shown(f):
            port = os.path.join(dev_dir, 'intel-fpga-port.%d' % names['port'])
            os.makedirs(port)
            _write(os.path.join(port, 'afu_id'), fpga['afu_id'] + '\n')
            # Older OPAE releases had no error reporting: the files are
            # there only when the profile gives the port's errors.
            if fpga['port_errors'] is not None:
                os.mkdir(os.path.join(port, 'errors'))
                _write(os.path.join(port, 'errors', 'errors'),
                       '0x%x\n' % fpga['port_errors'])
                _write(os.path.join(port, 'errors', 'clear'), '')
        self._class_link('fpga', name, dev_dir)

    def _fpga_dfl(self, f: dict, path: str, names: dict) -> None:
        """The kernel's DFL devices of one PCI function.

        ``fpga_region/regionN/`` (the card's region, whose ``compat_id``
        the kernel cannot read: it fails with ENOENT, an empty file here)
        holding ``dfl-fme.N/`` with its PR region
        ``dfl-fme-region.B/fpga_region/regionP/compat_id`` and
        ``dfl-port.N/``: Documentation/ABI/testing/sysfs-class-fpga-region,
        sysfs-platform-dfl-fme and sysfs-platform-dfl-port.
        """
        fpga = f['fpga']
        region_name = 'region%d' % names['region']
        region = os.path.join(path, 'fpga_region', region_name)
        os.makedirs(region)
        self._link(path, os.path.join(region, 'device'))
        _write(os.path.join(region, 'compat_id'), '')
        self._class_link('fpga_region', region_name, region)
        if 'fme' in names:
            fme = self._platform_device(region, 'dfl-fme', names['fme'])
            attrs = {'ports_num': '1\n',
                     'bitstream_id': '0x%x\n' % (fpga['bitstream_id'] or 0),
                     'bitstream_metadata': '0x0\n', 'cache_size': '0\n',
                     'fabric_version': '0\n', 'socket_id': '0\n'}
            for key, text in attrs.items():
                _write(os.path.join(fme, key), text)
            pr_dev = self._platform_device(fme, 'dfl-fme-region',
                                           names['bridge'])
            pr_name = 'region%d' % names['pr_region']
            pr_region = os.path.join(pr_dev, 'fpga_region', pr_name)
            os.makedirs(pr_region)
            # The FME manager's compat_id: two u64 halves, 32 hex digits.
            _write(os.path.join(pr_region, 'compat_id'),
                   fpga['interface_id'] + '\n')
            self._link(pr_dev, os.path.join(pr_region, 'device'))
            self._class_link('fpga_region', pr_name, pr_region)
        if _fpga_port_shown(f):
            port = self._platform_device(region, 'dfl-port', names['port'])
            attrs = {'id': '0\n', 'afu_id': fpga['afu_id'] + '\n',
                     'power_state': '0x0\n', 'ap1_event': '0\n',
                     'ap2_event': '0\n', 'ltr': '0\n'}
            for key, text in attrs.items():
                _write(os.path.join(port, key), text)
            errors = os.path.join(port, 'errors')
            os.mkdir(errors)
            attrs = {'errors': '0x%x\n' % (fpga['port_errors'] or 0),
                     'first_error': '0x0\n',
                     'first_malformed_req': '0x%032x\n' % 0}
            for key, text in attrs.items():
                _write(os.path.join(errors, key), text)

    def _platform_device(self, parent: str, name: str, number: int) -> str:
        """Platform device ``<name>.<number>`` under ``parent``.

        Bound to the platform driver ``name``, as with the DFL drivers'
        modules loaded.
        """
        platform = os.path.join(self.root, 'bus', 'platform')
        driver_dir = os.path.join(platform, 'drivers', name)
        if not os.path.isdir(driver_dir):
            os.makedirs(driver_dir)
            for key in _PLATFORM_DRIVER_FILES:
                _write(os.path.join(driver_dir, key), '')
        os.makedirs(os.path.join(platform, 'devices'), exist_ok=True)
        dev_name = '%s.%d' % (name, number)
        path = os.path.join(parent, dev_name)
        os.makedirs(path)
        _write(os.path.join(path, 'uevent'),
               'DRIVER=%s\nMODALIAS=platform:%s\n' % (name, name))
        _write(os.path.join(path, 'modalias'), 'platform:%s\n' % name)
        self._link(platform, os.path.join(path, 'subsystem'))
        self._link(driver_dir, os.path.join(path, 'driver'))
        self._link(path, os.path.join(driver_dir, dev_name))
        self._link(path, os.path.join(platform, 'devices', dev_name))
        return path

    def _mdev(self, f: dict, path: str) -> None:
        for type_id, attrs in f['mdev_types'].items():
            type_dir = os.path.join(path, 'mdev_supported_types', type_id)
            os.makedirs(os.path.join(type_dir, 'devices'))
            for key in ('name', 'available_instances', 'device_api',
                        'description'):
                _write(os.path.join(type_dir, key), '%s\n' % attrs[key])
            _write(os.path.join(type_dir, 'create'), '')
            for mdev_uuid in attrs['devices']:
                self._mdev_device(path, type_id, mdev_uuid)
        class_dir = os.path.join(self.root, 'class', 'mdev_bus')
        os.makedirs(class_dir, exist_ok=True)
        self._link(path, os.path.join(class_dir, f['address']))

    def _mdev_device(self, parent: str, type_id: str,
                     mdev_uuid: str) -> None:
        """A mediated device that exists, as ``create`` makes it.

        Documentation/ABI/testing/sysfs-bus-vfio-mdev and the mdev core:
        ``<parent>/<uuid>/`` with ``mdev_type`` (a link to its type),
        ``remove``, its own IOMMU group, the ``devices/<uuid>`` link of
        its type and ``bus/mdev/devices/<uuid>``.
        """
        write_mdev_device(self.root, parent, type_id, mdev_uuid,
                          self._next_group())

    def _next_group(self) -> int:
        self._free_group += 1
        return self._free_group - 1

    def _nvidia_vgpu(self, vgpu: dict, path: str) -> None:
        """NVIDIA's vendor-specific VFIO files of one VF (vGPU 17+).

        ``nvidia/creatable_vgpu_types`` lists ``<id> : <name>`` under a
        header, only what can be created on the VF now (nothing once it
        holds a type); ``nvidia/current_vgpu_type`` is the type id it
        holds, 0 for none.
        """
        nvidia = os.path.join(path, 'nvidia')
        os.mkdir(nvidia)
        creatable = {} if vgpu['current'] else vgpu['types']
        _write(os.path.join(nvidia, 'creatable_vgpu_types'),
               creatable_vgpu_types_text(creatable))
        _write(os.path.join(nvidia, 'current_vgpu_type'),
               '%d\n' % vgpu['current'])

    def _nvme(self, f: dict, path: str) -> None:
        # The nvme driver's controller, as drivers/nvme/host/core.c shows
        # it: a class device with the character device's number and the
        # controller's state (namespaces are block devices, not made).
        number = self.counters.setdefault('nvme', 0)
        self.counters['nvme'] += 1
        name = 'nvme%d' % number
        ctrl = os.path.join(path, 'nvme', name)
        os.makedirs(ctrl)
        for attr, text in (('dev', '%d:%d' % (_NVME_MAJOR, number)),
                           ('state', 'live'), ('transport', 'pcie'),
                           ('address', f['address'])):
            _write(os.path.join(ctrl, attr), text + '\n')
        self._link(path, os.path.join(ctrl, 'device'))
        self._class_link('nvme', name, ctrl)

    def _net(self, f: dict, path: str, ifname: str) -> None:
        net_dir = os.path.join(path, 'net', ifname)
        os.makedirs(net_dir)
        oui = _MAC_OUIS.get(f['vendor'], (0x02, 0x00, 0x00))
        tail = zlib.crc32(('%s/%s' % (f['address'], ifname)).encode())
        mac = oui + (tail >> 16 & 0xff, tail >> 8 & 0xff, tail & 0xff)
        arp_type = _ARPHRD_ETHER
        if f['class'] >> 8 == _INFINIBAND_SUBCLASS:
            # IPoIB: the 20-byte hardware address is the queue pair
            # number and the port's GID (link-local prefix, then a GUID
            # made from the OUI), and the type ARPHRD_INFINIBAND.
            mac = (0x00, 0x00, 0x10, 0x49, 0xfe, 0x80, 0, 0, 0, 0, 0, 0,
                   *mac[:3], 0x03, 0x00, *mac[3:])
            arp_type = _ARPHRD_INFINIBAND
        _write(os.path.join(net_dir, 'address'),
               ':'.join('%02x' % b for b in mac) + '\n')
        _write(os.path.join(net_dir, 'addr_len'), '%d\n' % len(mac))
        _write(os.path.join(net_dir, 'type'), '%d\n' % arp_type)
        _write(os.path.join(net_dir, 'ifindex'),
               '%d\n' % self.counters['ifindex'])
        self.counters['ifindex'] += 1
        _write(os.path.join(net_dir, 'operstate'), 'up\n')
        self._link(path, os.path.join(net_dir, 'device'))
        self._class_link('net', ifname, net_dir)


def creatable_vgpu_types_text(types: dict[int, str]) -> str:
    """``nvidia/creatable_vgpu_types`` as NVIDIA's driver prints it."""
    return 'ID    : vGPU Name\n' + ''.join(
        '%-5d : %s\n' % (type_id, name)
        for type_id, name in sorted(types.items()))


def write_mdev_device(root: str, parent: str, type_id: str,
                      mdev_uuid: str, group: int) -> str:
    """Make mediated device ``mdev_uuid`` exist under ``parent``.

    What the mdev core does on a write to ``create`` (also used by the
    tests' stand-in for the kernel); returns the device's directory.
    """
    def link(target, name):
        os.symlink(os.path.relpath(target, os.path.dirname(name)), name)

    type_dir = os.path.join(parent, 'mdev_supported_types', type_id)
    dev = os.path.join(parent, mdev_uuid)
    os.mkdir(dev)
    link(type_dir, os.path.join(dev, 'mdev_type'))
    _write(os.path.join(dev, 'remove'), '')
    _write(os.path.join(dev, 'uevent'), 'MDEV_TYPE=%s\n' % type_id)
    link(dev, os.path.join(type_dir, 'devices', mdev_uuid))
    bus = os.path.join(root, 'bus', 'mdev')
    os.makedirs(os.path.join(bus, 'devices'), exist_ok=True)
    link(bus, os.path.join(dev, 'subsystem'))
    link(dev, os.path.join(bus, 'devices', mdev_uuid))
    group_dir = os.path.join(root, 'kernel', 'iommu_groups', str(group))
    os.makedirs(os.path.join(group_dir, 'devices'))
    _write(os.path.join(group_dir, 'type'), 'DMA\n')
    link(group_dir, os.path.join(dev, 'iommu_group'))
    link(dev, os.path.join(group_dir, 'devices', mdev_uuid))
    return dev


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; returns the exit status."""
    prog = 'python -m cyborg_drivers.fake.hosttree'
    parser = argparse.ArgumentParser(
        prog=prog,
        description='Build a fake Linux sysfs tree (a stand-in for /sys) '
                    'from a host profile.')
    parser.add_argument(
        'profile', metavar='PROFILE',
        help='host profile YAML file, or the name of a shipped profile '
             '(%s)' % ', '.join(PROFILE_NAMES))
    parser.add_argument(
        'dest', metavar='DEST',
        help='directory to create the tree in; must be absent or empty')
    args = parser.parse_args(argv)
    path = args.profile
    if path in PROFILE_NAMES and not os.path.exists(path):
        path = profile_path(path)
    try:
        profile = load_profile(path)
        build_tree(profile, args.dest)
    except ProfileError as exc:
        print('%s: error: %s' % (prog, exc), file=sys.stderr)
        return 2
    except OSError as exc:
        print('%s: error: %s: %s' % (prog, exc.filename or args.dest,
                                     exc.strerror or exc), file=sys.stderr)
        return 2
    print('built %s: %d PCI functions in %s'
          % (profile['name'], len(expand_functions(profile)), args.dest))
    return 0


if __name__ == '__main__':
    sys.exit(main())
