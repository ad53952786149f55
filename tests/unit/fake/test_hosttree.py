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

"""Tests of the fake sysfs builder and its host profiles."""

import copy
import os
import re
import shutil
import struct
import subprocess
import sys

import pytest

from cyborg_drivers.fake import hosttree

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
LSPCI = shutil.which('lspci') or (
    '/usr/bin/lspci' if os.access('/usr/bin/lspci', os.X_OK) else None)
LSPCI_LINE = re.compile(
    r'^(?P<address>[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]) '
    r'(?P<class_name>.+?) \[(?P<class>[0-9a-f]{4})\]: '
    r'.*\[(?P<vendor>[0-9a-f]{4}):(?P<device>[0-9a-f]{4})\]'
    r'(?: \(rev (?P<rev>[0-9a-f]{2})\))?$')

PAC_INTERFACE = '9346116d-a52d-5ca8-b06a-a9a389ef7c8d'
NLB0 = 'd8424dc4-a4a3-c413-f89e-433683f9040b'
NLB3 = 'f7df405c-bd7a-cf72-22f1-44b0b93acd18'

# Functions (VFs included) of each shipped profile, counted by hand.
SHIPPED_COUNTS = {'gpu-host': 33, 'fpga-host': 15, 'crypto-nic-host': 191,
                  'mixed-host': 32, 'vgpu-vfio-host': 26,
                  'mdev-vf-host': 17, 'qat-gen4-host': 86,
                  'ofs-fpga-host': 26}


def small_profile():
    """A host exercising every feature of the builder."""
    return {
        'name': 'small',
        'description': 'unit test host',
        'devices': [
            {'address': '0000:00:00.0', 'vendor': 0x8086, 'device': 0x2020,
             'class': 0x060000, 'revision': 4, 'numa_node': 0},
            {'address': '0000:17:00.0', 'vendor': 0x8086, 'device': 0x2030,
             'class': 0x060400, 'driver': 'pcieport', 'numa_node': 0,
             'iommu_group': 40},
            {'address': '0000:18:00.0', 'vendor': 0x144d, 'device': 0xa808,
             'class': 0x010802, 'subsystem_device': 0xa801,
             'driver': 'nvme', 'parent': '0000:17:00.0', 'numa_node': 0,
             'iommu_group': 40},
            # Listed before its bridge on purpose: order is resolved.
            {'address': '0000:3b:00.0', 'vendor': 0x8086, 'device': 0x09c4,
             'class': 0x120000, 'revision': 1, 'numa_node': 0,
             'driver': 'intel-fpga-pci', 'parent': '0000:3a:00.0',
             'sriov': {'totalvfs': 1, 'numvfs': 1, 'vf_device': 0x09c5,
                       'vf_driver': 'intel-fpga-pci'},
             'fpga': {'layout': 'opae', 'interface_id': PAC_INTERFACE,
                      'afu_id': NLB0}},
            {'address': '0000:3a:00.0', 'vendor': 0x8086, 'device': 0x2030,
             'class': 0x060400, 'driver': 'pcieport', 'numa_node': 0},
            {'address': '0000:5e:00.0', 'vendor': 0x10de, 'device': 0x1eb8,
             'class': 0x030200, 'subsystem_device': 0x12a2,
             'revision': 0xa1, 'numa_node': 0, 'driver': 'nvidia',
             'mdev_types': {
                 'nvidia-222': {'name': 'GRID T4-1B',
                                'available_instances': 16,
                                'description': 'num_heads=4'},
                 'nvidia-223': {'name': 'GRID T4-2B',
                                'available_instances': 8}}},
            {'address': '0000:5e:00.1', 'vendor': 0x10de, 'device': 0x10f0,
             'class': 0x040300, 'revision': 0xa1, 'numa_node': 0,
             'driver': 'snd_hda_intel'},
            {'address': '0000:5f:00.0', 'vendor': 0x15b3, 'device': 0x1017,
             'class': 0x020000, 'subsystem_device': 7, 'numa_node': 0,
             'driver': 'mlx5_core', 'net': ['enp95s0f0']},
            {'address': '0000:86:00.0', 'vendor': 0x8086, 'device': 0x0b30,
             'class': 0x120000, 'numa_node': 1, 'driver': 'dfl-pci',
             'fpga': {'layout': 'dfl',
                      'interface_id': PAC_INTERFACE.upper(),
                      'afu_id': NLB3.replace('-', '')}},
            {'address': '0000:af:00.0', 'vendor': '0x8086',
             'device': '0x4940', 'class': 0x0b4000, 'revision': 0x40,
             'numa_node': 1, 'driver': '4xxx',
             'sriov': {'totalvfs': 64, 'numvfs': 64, 'vf_device': 0x4941,
                       'vf_driver': 'qat_vfio_pci', 'offset': 16},
             'qat': {'cfg_services': 'sym;asym'}},
            {'address': '0000:d8:00.0', 'vendor': 0x10ee, 'device': 0x5004,
             'class': 0x120000, 'subsystem_device': 0x000e,
             'numa_node': 1, 'driver': 'xclmgmt',
             'xilinx': {'interface_uuids': [PAC_INTERFACE],
                        'logic_uuids': [NLB0, NLB3]}},
            {'address': '0000:d8:00.1', 'vendor': 0x10ee, 'device': 0x5005,
             'class': 0x120000, 'subsystem_device': 0x000e,
             'numa_node': 1, 'driver': 'xocl'},
            {'address': '0000:d9:00.0', 'vendor': 0x1af4, 'device': 0x1000,
             'class': 0x020000, 'subsystem_vendor': 0x1af4,
             'subsystem_device': 1, 'label': 'no NUMA node, no driver'},
        ]}


SMALL_FUNCTIONS = 13 + 1 + 64


@pytest.fixture(scope='module')
def small(tmp_path_factory):
    root = str(tmp_path_factory.mktemp('small') / 'sys')
    hosttree.build_tree(small_profile(), root)
    return root


def read(*parts):
    with open(os.path.join(*parts)) as f:
        return f.read()


def dev(root, address, *parts):
    return os.path.join(root, 'bus', 'pci', 'devices', address, *parts)


def config(root, address):
    with open(dev(root, address, 'config'), 'rb') as f:
        return f.read()


def run_lspci(root):
    if not LSPCI:
        pytest.skip('lspci (pciutils) is not installed')
    out = subprocess.run(
        [LSPCI, '-nnn', '-D', '-A', 'linux-sysfs', '-O',
         'sysfs.path=%s' % os.path.join(root, 'bus', 'pci')],
        check=True, capture_output=True, text=True).stdout
    return out.splitlines()


def all_links(root):
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            if os.path.islink(path):
                yield path


# -- shipped profiles ---------------------------------------------------------


def test_profile_names_match_shipped_files():
    shipped = sorted(name[:-5] for name in os.listdir(os.path.dirname(
        hosttree.profile_path('gpu-host'))) if name.endswith('.yaml'))
    assert shipped == sorted(hosttree.PROFILE_NAMES)
    assert hosttree.PROFILE_NAMES == ('gpu-host', 'fpga-host',
                                      'crypto-nic-host', 'mixed-host',
                                      'vgpu-vfio-host', 'mdev-vf-host',
                                      'qat-gen4-host', 'ofs-fpga-host')
    with pytest.raises(hosttree.ProfileError, match='no-such-host'):
        hosttree.profile_path('no-such-host')


@pytest.mark.parametrize('name', hosttree.PROFILE_NAMES)
def test_shipped_profile_builds(name, tmp_path):
    path = hosttree.profile_path(name)
    with open(path) as f:
        assert f.readline().startswith('# %s: ' % name)
    profile = hosttree.load_profile(path)
    assert profile['name'] == name
    # Normalising is idempotent, so build_tree may re-validate.
    assert hosttree.normalise_profile(copy.deepcopy(profile)) == profile
    root = str(tmp_path / 'sys')
    hosttree.build_tree(path, root)
    entries = os.listdir(os.path.join(root, 'bus', 'pci', 'devices'))
    assert len(entries) == SHIPPED_COUNTS[name]
    assert sorted(entries) == [
        f['address'] for f in hosttree.expand_functions(profile)]
    for link in all_links(root):
        assert os.path.exists(link), 'dangling link %s' % link
        assert not os.path.isabs(os.readlink(link))


@pytest.mark.parametrize('name', hosttree.PROFILE_NAMES)
def test_shipped_profile_has_noise(name):
    devices = hosttree.load_profile(hosttree.profile_path(name))['devices']
    ids = {(d['vendor'], d['device'], d['class'], d['driver'])
           for d in devices}
    assert (0x144d, 0xa808, 0x010802, 'nvme') in ids
    assert (0x8086, 0xa182, 0x010601, 'ahci') in ids
    assert (0x1af4, 0x1000, 0x020000, 'virtio-pci') in ids
    assert (0x8086, 0x2020, 0x060000, None) in ids
    assert (0x1a03, 0x2000, 0x030000, 'ast') in ids
    root_ports = {d['address'] for d in devices
                  if (d['vendor'], d['device'], d['class'])
                  == (0x8086, 0x2030, 0x060400)}
    assert root_ports & {d['parent'] for d in devices}


def test_gpu_host_contents():
    profile = hosttree.load_profile(hosttree.profile_path('gpu-host'))
    gpus = [d for d in profile['devices'] if d['vendor'] == 0x10de
            and d['class'] == 0x030200]
    assert sorted(d['device'] for d in gpus) == [0x1eb8] * 4 + [
        0x20b0] * 2 + [0x2236] * 2
    assert {d['numa_node'] for d in gpus} == {0, 1}
    mdev = [d for d in gpus if d['mdev_types']]
    assert len(mdev) == 1
    assert mdev[0]['mdev_types']['nvidia-222']['name'] == 'GRID T4-1B'
    assert mdev[0]['mdev_types']['nvidia-223']['available_instances'] == 8
    a100 = [d for d in gpus if d['device'] == 0x20b0]
    assert all(d['sriov']['totalvfs'] == 16 and d['sriov']['numvfs'] == 4
               for d in a100)
    audio = [d for d in profile['devices'] if d['class'] == 0x040300]
    assert [(d['device'], d['driver']) for d in audio] == [
        (0x10f0, 'snd_hda_intel')]


# -- tree layout --------------------------------------------------------------


def test_bus_links_resolve_to_nested_device_dirs(small):
    link = dev(small, '0000:3b:00.0')
    assert os.readlink(link) == (
        '../../../devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0')
    assert os.path.realpath(link) == os.path.join(
        os.path.realpath(small), 'devices', 'pci0000:3a', '0000:3a:00.0',
        '0000:3b:00.0')
    assert os.readlink(dev(small, '0000:af:00.0')) == (
        '../../../devices/pci0000:af/0000:af:00.0')
    assert os.readlink(dev(small, '0000:00:00.0')) == (
        '../../../devices/pci0000:00/0000:00:00.0')
    assert len(os.listdir(os.path.join(small, 'bus', 'pci', 'devices'))) \
        == SMALL_FUNCTIONS
    for link in all_links(small):
        assert os.path.exists(link), 'dangling link %s' % link


def test_attribute_formats(small):
    address = '0000:3b:00.0'
    expected = {'vendor': '0x8086\n', 'device': '0x09c4\n',
                'subsystem_vendor': '0x8086\n',
                'subsystem_device': '0x0000\n', 'class': '0x120000\n',
                'revision': '0x01\n', 'numa_node': '0\n', 'enable': '1\n',
                'local_cpulist': '0-19,40-59\n',
                'local_cpus': '0000,0fffff00,000fffff\n',
                'modalias': 'pci:v00008086d000009C4sv00008086sd00000000'
                            'bc12sc00i00\n'}
    for name, text in expected.items():
        assert read(dev(small, address, name)) == text, name
    assert read(dev(small, '0000:af:00.0', 'local_cpulist')) == (
        '20-39,60-79\n')
    assert read(dev(small, '0000:d9:00.0', 'numa_node')) == '-1\n'
    assert read(dev(small, '0000:d9:00.0', 'local_cpulist')) == '0-79\n'
    assert read(dev(small, '0000:d9:00.0', 'enable')) == '0\n'
    assert read(dev(small, '0000:d9:00.0', 'subsystem_vendor')) == (
        '0x1af4\n')
    resource = read(dev(small, address, 'resource')).splitlines()
    assert len(resource) == 13
    assert len(read(dev(small, '0000:3a:00.0', 'resource')).splitlines()) \
        == 17


def test_uevent_is_the_kernels(small):
    assert read(dev(small, '0000:18:00.0', 'uevent')) == (
        'DRIVER=nvme\n'
        'PCI_CLASS=10802\n'
        'PCI_ID=144D:A808\n'
        'PCI_SUBSYS_ID=144D:A801\n'
        'PCI_SLOT_NAME=0000:18:00.0\n'
        'MODALIAS=pci:v0000144Dd0000A808sv0000144Dsd0000A801bc01sc08i02\n')
    # Unbound: no DRIVER line.
    assert read(dev(small, '0000:d9:00.0', 'uevent')) == (
        'PCI_CLASS=20000\n'
        'PCI_ID=1AF4:1000\n'
        'PCI_SUBSYS_ID=1AF4:0001\n'
        'PCI_SLOT_NAME=0000:d9:00.0\n'
        'MODALIAS=pci:v00001AF4d00001000sv00001AF4sd00000001bc02sc00i00\n')
    assert read(dev(small, '0000:3b:00.0', 'uevent')).splitlines()[:2] == [
        'DRIVER=intel-fpga-pci', 'PCI_CLASS=120000']


def test_subsystem_driver_and_iommu_links(small):
    real = os.path.realpath(small)
    nested = dev(small, '0000:3b:00.0')
    assert os.readlink(os.path.join(nested, 'subsystem')) == (
        '../../../../bus/pci')
    assert os.readlink(dev(small, '0000:af:00.0', 'subsystem')) == (
        '../../../bus/pci')
    assert os.path.realpath(os.path.join(nested, 'subsystem')) == (
        os.path.join(real, 'bus', 'pci'))
    driver_dir = os.path.join(real, 'bus', 'pci', 'drivers', 'nvme')
    assert os.path.realpath(dev(small, '0000:18:00.0', 'driver')) == (
        driver_dir)
    assert os.path.realpath(os.path.join(driver_dir, '0000:18:00.0')) == (
        os.path.realpath(dev(small, '0000:18:00.0')))
    assert not os.path.lexists(dev(small, '0000:d9:00.0', 'driver'))
    assert os.path.isdir(os.path.join(small, 'bus', 'pci', 'drivers'))
    assert sorted(os.listdir(os.path.join(
        small, 'bus', 'pci', 'drivers', 'qat_vfio_pci'))) == sorted(
        hosttree.vf_addresses('0000:af:00.0', {'numvfs': 64, 'offset': 16})
        + ['bind', 'new_id', 'remove_id', 'unbind', 'uevent'])
    # Explicit group 40 is shared by the root port and the NVMe behind it.
    group_dir = os.path.join(real, 'kernel', 'iommu_groups', '40')
    for address in ('0000:17:00.0', '0000:18:00.0'):
        assert os.path.realpath(dev(small, address, 'iommu_group')) == (
            group_dir)
    assert sorted(os.listdir(os.path.join(group_dir, 'devices'))) == [
        '0000:17:00.0', '0000:18:00.0']
    # Everyone else, VFs included, has a group of their own.
    groups = {}
    for address in os.listdir(os.path.join(small, 'bus', 'pci', 'devices')):
        group = os.path.basename(os.readlink(dev(small, address,
                                                 'iommu_group')))
        groups.setdefault(group, []).append(address)
        back = os.path.join(real, 'kernel', 'iommu_groups', group,
                            'devices', address)
        assert os.path.realpath(back) == os.path.realpath(dev(small,
                                                              address))
    assert len(groups) == SMALL_FUNCTIONS - 1


def test_config_space(small):
    cfg = config(small, '0000:3b:00.0')
    assert len(cfg) == 256
    assert struct.unpack_from('<HH', cfg, 0) == (0x8086, 0x09c4)
    assert cfg[8:12] == bytes([0x01, 0x00, 0x00, 0x12])
    assert cfg[0x0e] == 0
    assert struct.unpack_from('<HH', cfg, 0x2c) == (0x8086, 0x0000)
    # NVMe: prog-if 02, subclass 08, class 01.
    cfg = config(small, '0000:18:00.0')
    assert cfg[9:12] == bytes([0x02, 0x08, 0x01])
    assert struct.unpack_from('<HH', cfg, 0x2c) == (0x144d, 0xa801)
    # Two physical functions in slot 5e:00: multi-function bit.
    assert config(small, '0000:5e:00.0')[0x0e] == 0x80
    assert config(small, '0000:5e:00.1')[0x0e] == 0x80
    # Bridges: type 1 header with the bus range behind them.
    cfg = config(small, '0000:3a:00.0')
    assert cfg[0x0e] == 1
    assert tuple(cfg[0x18:0x1b]) == (0x3a, 0x3b, 0x3b)
    assert tuple(config(small, '0000:17:00.0')[0x18:0x1b]) == (
        0x17, 0x18, 0x18)


def test_vf_addresses_cross_slot_and_bus_boundaries():
    vfs = hosttree.vf_addresses('0000:af:00.0', {
        'numvfs': 64, 'offset': 16, 'stride': 1})
    assert len(vfs) == 64
    assert vfs[:9] == ['0000:af:02.%d' % f for f in range(8)] + [
        '0000:af:03.0']
    assert vfs[-1] == '0000:af:09.7'
    # rid 0x3bf0 + 8 + 2n: slot 1f of bus 3b, then on to bus 3c.
    assert hosttree.vf_addresses('0001:3b:1e.0', {
        'numvfs': 6, 'offset': 8, 'stride': 2}) == [
        '0001:3b:1f.0', '0001:3b:1f.2', '0001:3b:1f.4', '0001:3b:1f.6',
        '0001:3c:00.0', '0001:3c:00.2']
    assert hosttree.vf_addresses('0000:3b:00.0', None) == []


def test_sriov_pf_and_vfs(small):
    pf = dev(small, '0000:af:00.0')
    expected = {'sriov_totalvfs': '64\n', 'sriov_numvfs': '64\n',
                'sriov_offset': '16\n', 'sriov_stride': '1\n',
                'sriov_vf_device': '4941\n',
                'sriov_drivers_autoprobe': '1\n'}
    for name, text in expected.items():
        assert read(pf, name) == text, name
    virtfns = sorted((n for n in os.listdir(pf) if n.startswith('virtfn')),
                     key=lambda n: int(n[6:]))
    assert len(virtfns) == 64
    assert os.readlink(os.path.join(pf, 'virtfn0')) == '../0000:af:02.0'
    assert os.readlink(os.path.join(pf, 'virtfn63')) == '../0000:af:09.7'
    pf_real = os.path.realpath(pf)
    for name in virtfns:
        vf_real = os.path.realpath(os.path.join(pf, name))
        address = os.path.basename(vf_real)
        assert os.path.dirname(vf_real) == os.path.dirname(pf_real)
        assert os.readlink(os.path.join(vf_real, 'physfn')) == (
            '../0000:af:00.0')
        assert os.path.realpath(os.path.join(vf_real, 'physfn')) == pf_real
        assert os.path.realpath(dev(small, address)) == vf_real
    vf = dev(small, '0000:af:09.7')
    assert read(vf, 'vendor') == '0x8086\n'
    assert read(vf, 'device') == '0x4941\n'
    assert read(vf, 'class') == '0x0b4000\n'
    assert read(vf, 'numa_node') == '1\n'
    assert read(vf, 'uevent').splitlines()[0] == 'DRIVER=qat_vfio_pci'
    assert os.path.basename(os.readlink(os.path.join(vf, 'driver'))) == (
        'qat_vfio_pci')
    assert not os.path.exists(os.path.join(vf, 'sriov_totalvfs'))
    assert config(small, '0000:af:02.0')[0x0e] == 0
    # A PF behind a bridge has its VFs behind the same bridge.
    assert os.readlink(dev(small, '0000:3b:00.1')) == (
        '../../../devices/pci0000:3a/0000:3a:00.0/0000:3b:00.1')


def test_fpga_opae_layout(small):
    real = os.path.realpath(small)
    pf = os.path.realpath(dev(small, '0000:3b:00.0'))
    # SR-IOV is on: the FME stays on the PF, the port moved to the VF.
    pf_fpga = os.path.join(pf, 'fpga', 'intel-fpga-dev.0')
    assert read(pf_fpga, 'intel-fpga-fme.0', 'pr', 'interface_id') == (
        PAC_INTERFACE.replace('-', '') + '\n')
    assert not os.path.exists(os.path.join(pf_fpga, 'intel-fpga-port.0'))
    vf_fpga = os.path.join(os.path.realpath(dev(small, '0000:3b:00.1')),
                           'fpga', 'intel-fpga-dev.1')
    assert read(vf_fpga, 'intel-fpga-port.1', 'afu_id') == (
        'd8424dc4a4a3c413f89e433683f9040b\n')
    assert os.path.realpath(os.path.join(
        small, 'class', 'fpga', 'intel-fpga-dev.0')) == pf_fpga
    assert os.path.realpath(os.path.join(pf_fpga, 'device')) == pf
    assert os.path.realpath(os.path.join(
        small, 'class', 'fpga', 'intel-fpga-dev.1', 'device', 'physfn')) \
        == pf
    assert sorted(os.listdir(os.path.join(real, 'class', 'fpga'))) == [
        'intel-fpga-dev.0', 'intel-fpga-dev.1']


def test_fpga_dfl_layout(small):
    pf = os.path.realpath(dev(small, '0000:86:00.0'))
    region = os.path.join(pf, 'fpga_region', 'region0')
    assert read(region, 'dfl-port.0', 'afu_id') == (
        'f7df405cbd7acf7222f144b0b93acd18\n')
    # The FME's PR region is numbered by the same counter as the card's
    # region, right after it (fpga-region.c's one ida).
    pr = os.path.join(region, 'dfl-fme.0', 'dfl-fme-region.0',
                      'fpga_region', 'region1')
    assert read(pr, 'compat_id') == '9346116da52d5ca8b06aa9a389ef7c8d\n'
    assert os.path.realpath(os.path.join(
        small, 'class', 'fpga_region', 'region0')) == region
    assert os.path.realpath(os.path.join(
        small, 'class', 'fpga_region', 'region1')) == pr
    assert os.path.realpath(os.path.join(region, 'device')) == pf


# -- FPGA layouts of the kernel's DFL driver ---------------------------------

HE_MEM = '8568ab4e6ba54616bb652a578330a8eb'
HE_HSSI = '823c334c98bf11eabb370242ac130002'
HE_LB = '56e203e9864f49a7b94b12284c31e02b'


def fpga_device(address, device, driver='dfl-pci', fpga=None, **extra):
    dev = {'address': address, 'vendor': 0x8086, 'device': device,
           'class': 0x120000, 'numa_node': 0, 'driver': driver}
    if fpga is not None:
        dev['fpga'] = dict({'layout': 'dfl'}, **fpga)
    dev.update(extra)
    return dev


def dfl_profile():
    """Two PACs (one with its VF on dfl-pci) and an OFS board."""
    return {'name': 'dfl', 'devices': [
        fpga_device('0000:3b:00.0', 0x09c4, fpga={
            'interface_id': PAC_INTERFACE, 'afu_id': NLB0,
            'port_errors': 0x10, 'bitstream_id': 0x123456789abcdef},
            sriov={'totalvfs': 1, 'numvfs': 1, 'vf_device': 0x09c5,
                   'vf_driver': 'dfl-pci'}),
        fpga_device('0000:5e:00.0', 0x0b30, fpga={
            'interface_id': PAC_INTERFACE, 'afu_id': NLB3}),
        fpga_device('0000:b1:00.0', 0xbcce, fpga={
            'role': 'ofs-fme', 'interface_id': PAC_INTERFACE,
            'afu_id': NLB0, 'vf_afu_ids': [HE_MEM, HE_HSSI]},
            subsystem_device=0x1771,
            sriov={'totalvfs': 3, 'numvfs': 3, 'vf_device': 0xbccf,
                   'vf_driver': 'dfl-pci', 'offset': 5}),
        fpga_device('0000:b1:00.1', 0xbcce, fpga={
            'role': 'ofs-port', 'afu_id': HE_LB},
            subsystem_device=0x1771),
    ]}


@pytest.fixture(scope='module')
def dfl_tree(tmp_path_factory):
    root = str(tmp_path_factory.mktemp('dfl') / 'sys')
    hosttree.build_tree(dfl_profile(), root)
    return root


def region_dir(root, address, number):
    return os.path.join(os.path.realpath(dev(root, address)), 'fpga_region',
                        'region%d' % number)


def test_fpga_dfl_numbering_follows_the_kernel(dfl_tree):
    # One counter for every FPGA region (card regions and the FMEs' PR
    # regions, each PR region right after its card's), one for FMEs, one
    # for ports (a released port keeps its number); the PFs at boot in
    # bus order, then the VFs, which only SR-IOV creates.
    layout = {}
    for address in os.listdir(os.path.join(dfl_tree, 'bus', 'pci',
                                           'devices')):
        regions = os.path.join(dev(dfl_tree, address), 'fpga_region')
        for region in (os.listdir(regions) if os.path.isdir(regions)
                       else ()):
            layout[address] = (region, sorted(
                n for n in os.listdir(os.path.join(regions, region))
                if n.startswith('dfl-')))
    assert layout == {
        '0000:3b:00.0': ('region0', ['dfl-fme.0']),
        '0000:5e:00.0': ('region2', ['dfl-fme.1', 'dfl-port.1']),
        '0000:b1:00.0': ('region4', ['dfl-fme.2', 'dfl-port.2']),
        '0000:b1:00.1': ('region6', ['dfl-port.3']),
        '0000:3b:00.1': ('region7', ['dfl-port.4']),
        '0000:b1:00.5': ('region8', ['dfl-port.5']),
        '0000:b1:00.6': ('region9', ['dfl-port.6']),
        '0000:b1:00.7': ('region10', ['dfl-port.7']),
    }
    pr = {}
    for address, number in (('0000:3b:00.0', 0), ('0000:5e:00.0', 2),
                            ('0000:b1:00.0', 4)):
        fme = one_entry(region_dir(dfl_tree, address, number), 'dfl-fme.')
        pr_dev = one_entry(fme, 'dfl-fme-region.')
        pr[address] = (os.path.basename(pr_dev),
                       os.listdir(os.path.join(pr_dev, 'fpga_region')))
    assert pr == {'0000:3b:00.0': ('dfl-fme-region.0', ['region1']),
                  '0000:5e:00.0': ('dfl-fme-region.1', ['region3']),
                  '0000:b1:00.0': ('dfl-fme-region.2', ['region5'])}
    assert sorted(os.listdir(os.path.join(dfl_tree, 'class',
                                          'fpga_region'))) == sorted(
        'region%d' % n for n in range(11))
    assert sorted(os.listdir(os.path.join(
        dfl_tree, 'bus', 'platform', 'devices'))) == sorted(
        ['dfl-fme.%d' % n for n in range(3)]
        + ['dfl-fme-region.%d' % n for n in range(3)]
        + ['dfl-port.%d' % n for n in range(1, 8)])


def one_entry(directory, prefix):
    (name,) = [n for n in os.listdir(directory) if n.startswith(prefix)]
    return os.path.join(directory, name)


def test_fpga_dfl_files_are_the_kernels(dfl_tree):
    region = region_dir(dfl_tree, '0000:5e:00.0', 2)
    # The card's region has a compat_id the kernel cannot read (ENOENT):
    # it is there, with nothing in it.
    assert read(region, 'compat_id') == ''
    assert os.path.realpath(os.path.join(region, 'device')) == (
        os.path.realpath(dev(dfl_tree, '0000:5e:00.0')))
    fme = os.path.join(region, 'dfl-fme.1')
    assert {k: read(fme, k) for k in (
        'ports_num', 'bitstream_id', 'bitstream_metadata', 'cache_size',
        'fabric_version', 'socket_id')} == {
        'ports_num': '1\n', 'bitstream_id': '0x0\n',
        'bitstream_metadata': '0x0\n', 'cache_size': '0\n',
        'fabric_version': '0\n', 'socket_id': '0\n'}
    pr = os.path.join(fme, 'dfl-fme-region.1', 'fpga_region', 'region3')
    # fpga-region.c prints the manager's id as two u64: 32 hex digits.
    assert read(pr, 'compat_id') == PAC_INTERFACE.replace('-', '') + '\n'
    assert os.path.realpath(os.path.join(pr, 'device')) == os.path.join(
        fme, 'dfl-fme-region.1')
    port = os.path.join(region, 'dfl-port.1')
    assert {k: read(port, *k.split('/')) for k in (
        'id', 'afu_id', 'power_state', 'ltr', 'ap1_event', 'ap2_event',
        'errors/errors', 'errors/first_error',
        'errors/first_malformed_req')} == {
        'id': '0\n', 'afu_id': NLB3.replace('-', '') + '\n',
        'power_state': '0x0\n', 'ltr': '0\n', 'ap1_event': '0\n',
        'ap2_event': '0\n', 'errors/errors': '0x0\n',
        'errors/first_error': '0x0\n',
        'errors/first_malformed_req': '0x' + '0' * 32 + '\n'}
    # DFL ports have no errors/clear: errors are cleared by writing them.
    assert not os.path.exists(os.path.join(port, 'errors', 'clear'))
    platform = os.path.realpath(os.path.join(dfl_tree, 'bus', 'platform'))
    for name, path in (('dfl-port', port), ('dfl-fme', fme),
                       ('dfl-fme-region',
                        os.path.join(fme, 'dfl-fme-region.1'))):
        assert read(path, 'uevent') == (
            'DRIVER=%s\nMODALIAS=platform:%s\n' % (name, name))
        assert read(path, 'modalias') == 'platform:%s\n' % name
        assert os.path.realpath(os.path.join(path, 'subsystem')) == platform
        assert os.path.realpath(os.path.join(path, 'driver')) == (
            os.path.join(platform, 'drivers', name))
        assert os.path.realpath(os.path.join(
            platform, 'drivers', name, os.path.basename(path))) == path
        assert os.path.realpath(os.path.join(
            platform, 'devices', os.path.basename(path))) == path


def test_fpga_dfl_pac_port_moves_to_its_vf(dfl_tree):
    pf_region = region_dir(dfl_tree, '0000:3b:00.0', 0)
    fme = os.path.join(pf_region, 'dfl-fme.0')
    assert read(fme, 'bitstream_id') == '0x123456789abcdef\n'
    # The PF released its port (dfl-port.0) before SR-IOV was enabled.
    assert not any(n.startswith('dfl-port.')
                   for n in os.listdir(pf_region))
    vf_region = region_dir(dfl_tree, '0000:3b:00.1', 7)
    assert read(vf_region, 'dfl-port.4', 'afu_id') == (
        NLB0.replace('-', '') + '\n')
    # The port's errors went with it.
    assert read(vf_region, 'dfl-port.4', 'errors', 'errors') == '0x10\n'
    assert os.path.realpath(os.path.join(vf_region, 'device')) == (
        os.path.realpath(dev(dfl_tree, '0000:3b:00.1')))


def test_fpga_ofs_board(dfl_tree):
    # PF0 keeps its port with SR-IOV on; each VF has a port of its own,
    # with its AFU; another PF has a port and no FME.
    pf0 = region_dir(dfl_tree, '0000:b1:00.0', 4)
    assert read(pf0, 'dfl-port.2', 'afu_id') == (
        NLB0.replace('-', '') + '\n')
    afus = [read(region_dir(dfl_tree, address, number),
                 'dfl-port.%d' % port, 'afu_id').strip()
            for address, number, port in (('0000:b1:00.5', 8, 5),
                                          ('0000:b1:00.6', 9, 6),
                                          ('0000:b1:00.7', 10, 7))]
    # VF 2 has no AFU id of its own in the profile: the PF's.
    assert afus == [HE_MEM, HE_HSSI, NLB0.replace('-', '')]
    pf1 = region_dir(dfl_tree, '0000:b1:00.1', 6)
    assert sorted(os.listdir(pf1)) == ['compat_id', 'device', 'dfl-port.3',
                                       'subsystem']
    assert read(pf1, 'dfl-port.3', 'afu_id') == HE_LB + '\n'


def test_fpga_vf_without_the_fpga_driver_has_no_port(tmp_path):
    profile = dfl_profile()
    profile['devices'][0]['sriov']['vf_driver'] = 'vfio-pci'
    root = str(tmp_path / 'sys')
    hosttree.build_tree(profile, root)
    assert not os.path.exists(dev(root, '0000:3b:00.1', 'fpga_region'))
    assert not any(n.startswith('dfl-port.') for n in os.listdir(
        region_dir(root, '0000:3b:00.0', 0)))


def test_fpga_opae_port_errors(tmp_path):
    root = str(tmp_path / 'sys')
    hosttree.build_tree({'name': 'opae', 'devices': [
        fpga_device('0000:3b:00.0', 0x09c4, driver='intel-fpga-pci',
                    fpga={'layout': 'opae', 'interface_id': PAC_INTERFACE,
                          'afu_id': NLB0, 'port_errors': 0x2}),
        fpga_device('0000:5e:00.0', 0x09c4, driver='intel-fpga-pci',
                    fpga={'layout': 'opae', 'interface_id': PAC_INTERFACE,
                          'afu_id': NLB0})]}, root)
    port = dev(root, '0000:3b:00.0', 'fpga', 'intel-fpga-dev.0',
               'intel-fpga-port.0')
    assert read(port, 'errors', 'errors') == '0x2\n'
    # Without port_errors, no error files (older OPAE releases).
    assert not os.path.exists(dev(root, '0000:5e:00.0', 'fpga',
                                  'intel-fpga-dev.1', 'intel-fpga-port.1',
                                  'errors'))


def test_fpga_section_normalises_once():
    once = hosttree.normalise_profile(dfl_profile())
    assert hosttree.normalise_profile(once) == once
    ofs = once['devices'][2]['fpga']
    assert ofs == {'layout': 'dfl', 'role': 'ofs-fme',
                   'interface_id': PAC_INTERFACE.replace('-', ''),
                   'afu_id': NLB0.replace('-', ''),
                   'vf_afu_ids': [HE_MEM, HE_HSSI], 'port_errors': None,
                   'bitstream_id': None}
    assert once['devices'][3]['fpga']['interface_id'] is None


def _fpga_edit(index, **changes):
    def edit(devices):
        devices[index]['fpga'].update(changes)
    return edit


def _drop_interface(devices):
    del devices[2]['fpga']['interface_id']


BAD_FPGA = {
    'unknown role': (_fpga_edit(1, role='afu'), 'role'),
    'OFS role on OPAE': (
        _fpga_edit(2, layout='opae'), 'role ofs-fme needs layout dfl'),
    'layout of another driver': (
        _fpga_edit(1, layout='opae'),
        'layout opae is what driver intel-fpga-pci creates'),
    'interface id without FME': (
        _fpga_edit(3, interface_id=PAC_INTERFACE), 'no FME'),
    'FME without interface id': (_drop_interface, 'interface_id'),
    'VF AFU ids on a PAC': (_fpga_edit(0, vf_afu_ids=[HE_MEM]),
                            'vf_afu_ids is for OFS roles'),
    'more VF AFU ids than VFs': (
        _fpga_edit(2, vf_afu_ids=[HE_MEM] * 4), 'lists 4 VFs'),
    'bad VF AFU id': (_fpga_edit(2, vf_afu_ids=['xyz']), 'vf_afu_ids'),
    'negative port errors': (_fpga_edit(1, port_errors=-1), 'port_errors'),
}


@pytest.mark.parametrize('case', sorted(BAD_FPGA))
def test_bad_fpga_section_is_rejected(case):
    edit, reason = BAD_FPGA[case]
    profile = dfl_profile()
    edit(profile['devices'])
    with pytest.raises(hosttree.ProfileError) as info:
        hosttree.normalise_profile(profile)
    assert ': fpga' in str(info.value)
    assert re.search(reason, str(info.value)), str(info.value)


def test_fpga_on_an_unbound_function_is_rejected():
    profile = dfl_profile()
    del profile['devices'][1]['driver']
    with pytest.raises(hosttree.ProfileError,
                       match="0000:5e:00.0: fpga: .*driver is none"):
        hosttree.normalise_profile(profile)


def test_xilinx_mdev_net_and_qat(small):
    mgmt = dev(small, '0000:d8:00.0')
    assert read(mgmt, 'interface_uuids') == (
        '9346116da52d5ca8b06aa9a389ef7c8d\n')
    assert read(mgmt, 'logic_uuids') == (
        'd8424dc4a4a3c413f89e433683f9040b\n'
        'f7df405cbd7acf7222f144b0b93acd18\n')
    assert not os.path.exists(dev(small, '0000:d8:00.1', 'logic_uuids'))

    gpu = dev(small, '0000:5e:00.0')
    types = os.path.join(gpu, 'mdev_supported_types')
    assert sorted(os.listdir(types)) == ['nvidia-222', 'nvidia-223']
    assert read(types, 'nvidia-222', 'name') == 'GRID T4-1B\n'
    assert read(types, 'nvidia-222', 'available_instances') == '16\n'
    assert read(types, 'nvidia-222', 'device_api') == 'vfio-pci\n'
    assert read(types, 'nvidia-222', 'description') == 'num_heads=4\n'
    assert read(types, 'nvidia-223', 'description') == '\n'
    assert os.listdir(os.path.join(types, 'nvidia-223', 'devices')) == []
    assert os.path.realpath(os.path.join(
        small, 'class', 'mdev_bus', '0000:5e:00.0')) == os.path.realpath(gpu)

    netdev = os.path.realpath(os.path.join(small, 'class', 'net',
                                           'enp95s0f0'))
    assert netdev == os.path.join(os.path.realpath(dev(
        small, '0000:5f:00.0')), 'net', 'enp95s0f0')
    assert re.match(r'^0c:42:a1(:[0-9a-f]{2}){3}\n$',
                    read(netdev, 'address'))
    assert read(netdev, 'ifindex') == '2\n'
    assert read(netdev, 'operstate') == 'up\n'

    qat = dev(small, '0000:af:00.0', 'qat')
    assert read(qat, 'cfg_services') == 'sym;asym\n'
    assert read(qat, 'state') == 'up\n'


QAT_HOST = {'name': 'qat', 'devices': [
    # Bound, no qat section: what the kernel's probe leaves.
    {'address': '0000:6b:00.0', 'vendor': 0x8086, 'device': 0x4940,
     'class': 0x0b4000, 'driver': '4xxx', 'numa_node': 0},
    {'address': '0000:70:00.0', 'vendor': 0x8086, 'device': 0x4942,
     'class': 0x0b4000, 'driver': 'vfio-pci', 'numa_node': 0},
    {'address': '0000:75:00.0', 'vendor': 0x8086, 'device': 0x4944,
     'class': 0x0b4000, 'numa_node': 0},
    {'address': '0000:e8:00.0', 'vendor': 0x8086, 'device': 0x4946,
     'class': 0x0b4000, 'driver': '420xx', 'numa_node': 1,
     'qat': {'cfg_services': 'asym;dc', 'auto_reset': True}},
    {'address': '0000:f2:00.0', 'vendor': 0x8086, 'device': 0x4948,
     'class': 0x0b4000, 'driver': '6xxx', 'numa_node': 1,
     'qat': {'cfg_services': 'dc;decomp;sym', 'state': 'down',
             'pm_idle_enabled': 0}},
    {'address': '0000:3d:00.0', 'vendor': 0x8086, 'device': 0x37c8,
     'class': 0x0b4000, 'driver': 'c6xx', 'numa_node': 0},
    {'address': '0000:3e:00.0', 'vendor': 0x8086, 'device': 0x0435,
     'class': 0x0b4000, 'driver': 'dh895xcc', 'numa_node': 0},
    {'address': '0000:3f:00.0', 'vendor': 0x8086, 'device': 0x19e2,
     'class': 0x0b4000, 'driver': 'c3xxx', 'numa_node': 0},
]}


def test_qat_directory_only_where_the_kernel_makes_one(tmp_path):
    root = str(tmp_path / 'sys')
    hosttree.build_tree(QAT_HOST, root)
    files = {}
    for address in ('0000:6b:00.0', '0000:e8:00.0', '0000:f2:00.0'):
        qat = dev(root, address, 'qat')
        files[address] = {name: read(qat, name)
                          for name in sorted(os.listdir(qat))}
    # Documentation/ABI/testing/sysfs-driver-qat, in adf_sysfs.c's formats.
    assert files == {
        '0000:6b:00.0': {'auto_reset': 'off\n', 'cfg_services': 'sym;asym\n',
                         'num_rps': '64\n', 'pm_idle_enabled': '1\n',
                         'rp2srv': '', 'state': 'up\n'},
        '0000:e8:00.0': {'auto_reset': 'on\n', 'cfg_services': 'asym;dc\n',
                         'num_rps': '64\n', 'pm_idle_enabled': '1\n',
                         'rp2srv': '', 'state': 'up\n'},
        '0000:f2:00.0': {'auto_reset': 'off\n',
                         'cfg_services': 'dc;decomp;sym\n',
                         'num_rps': '64\n', 'pm_idle_enabled': '0\n',
                         'rp2srv': '', 'state': 'down\n'},
    }
    # Not bound to its QAT driver (vfio-pci, none), or a generation whose
    # driver makes no qat/ (C62x, DH895xCC, C3xxx): no qat/ at all.
    for address in ('0000:70:00.0', '0000:75:00.0', '0000:3d:00.0',
                    '0000:3e:00.0', '0000:3f:00.0'):
        assert os.path.isdir(dev(root, address))
        assert not os.path.exists(dev(root, address, 'qat')), address


def test_netdev_type_and_address_length(tmp_path):
    root = str(tmp_path / 'sys')
    hosttree.build_tree(hosttree.profile_path('qat-gen4-host'), root)
    ipoib = os.path.join(root, 'class', 'net', 'ibp175s0f1')
    assert read(ipoib, 'type') == '32\n'
    assert read(ipoib, 'addr_len') == '20\n'
    assert re.match(r'^00:00:10:49:fe:80(:00){6}:0c:42:a1:03:00'
                    r'(:[0-9a-f]{2}){3}\n$', read(ipoib, 'address'))
    root = str(tmp_path / 'crypto')
    hosttree.build_tree(hosttree.profile_path('crypto-nic-host'), root)
    ens = os.path.join(root, 'class', 'net', 'ens1f0')
    assert read(ens, 'type') == '1\n'
    assert read(ens, 'addr_len') == '6\n'
    assert re.match(r'^b4:96:91(:[0-9a-f]{2}){3}\n$', read(ens, 'address'))


def test_build_is_deterministic_and_relocatable(small, tmp_path):
    again = str(tmp_path / 'again')
    hosttree.build_tree(small_profile(), again)

    def snapshot(root):
        result = {}
        for dirpath, dirnames, filenames in os.walk(root):
            for name in dirnames + filenames:
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                if os.path.islink(path):
                    result[rel] = 'link:' + os.readlink(path)
                elif os.path.isfile(path):
                    with open(path, 'rb') as f:
                        result[rel] = f.read()
        return result

    assert snapshot(again) == snapshot(small)
    moved = str(tmp_path / 'moved')
    shutil.copytree(again, moved, symlinks=True)
    shutil.rmtree(again)
    assert os.path.realpath(dev(moved, '0000:af:02.0', 'physfn')) == (
        os.path.realpath(dev(moved, '0000:af:00.0')))


def test_build_tree_destination_rules(tmp_path):
    profile = small_profile()
    empty = tmp_path / 'empty'
    empty.mkdir()
    hosttree.build_tree(profile, str(empty))
    assert os.path.isdir(str(empty / 'bus' / 'pci' / 'devices'))
    with pytest.raises(FileExistsError):
        hosttree.build_tree(profile, str(empty))
    bad = copy.deepcopy(profile)
    bad['devices'][0]['vendor'] = 0x10000
    with pytest.raises(hosttree.ProfileError):
        hosttree.build_tree(bad, str(tmp_path / 'never'))
    # A shipped profile can be named instead of given by path.
    hosttree.build_tree('fpga-host', str(tmp_path / 'named'))
    assert read(dev(str(tmp_path / 'named'), '0000:d8:00.1', 'device')) == (
        '0x5005\n')
    # Nothing is left behind by the failed build.
    assert sorted(os.listdir(str(tmp_path))) == ['empty', 'named']


# -- lspci --------------------------------------------------------------------


def check_lspci(root, profile):
    lines = run_lspci(root)
    listed = {}
    for line in lines:
        m = LSPCI_LINE.match(line)
        assert m, 'unexpected lspci line %r' % line
        listed[m.group('address')] = m
    functions = hosttree.expand_functions(profile)
    assert sorted(listed) == [f['address'] for f in functions]
    for f in functions:
        m = listed[f['address']]
        assert m.group('vendor') == '%04x' % f['vendor'], f['address']
        assert m.group('device') == '%04x' % f['device'], f['address']
        assert m.group('class') == '%04x' % (f['class'] >> 8), f['address']
        assert m.group('rev') == ('%02x' % f['revision']
                                  if f['revision'] else None)
    return lines


@pytest.mark.parametrize('name', hosttree.PROFILE_NAMES)
def test_lspci_lists_shipped_profile(name, tmp_path):
    root = str(tmp_path / 'sys')
    profile = hosttree.load_profile(hosttree.profile_path(name))
    hosttree.build_tree(profile, root)
    lines = check_lspci(root, profile)
    assert len(lines) == SHIPPED_COUNTS[name]
    if name == 'fpga-host':
        assert ('0000:5e:00.0 Processing accelerators [1200]: Intel '
                'Corporation PAC with Intel Arria 10 GX FPGA [8086:09c4] '
                '(rev 01)') in lines
    if name == 'gpu-host':
        assert ('0000:3b:00.0 3D controller [0302]: NVIDIA Corporation '
                'TU104GL [Tesla T4] [10de:1eb8] (rev a1)') in lines


def test_lspci_lists_small_host(small):
    lines = check_lspci(small, hosttree.normalise_profile(small_profile()))
    assert len(lines) == SMALL_FUNCTIONS
    assert ('0000:18:00.0 Non-Volatile memory controller [0108]: Samsung '
            'Electronics Co Ltd NVMe SSD Controller SM981/PM981/PM983 '
            '[144d:a808]') in lines


# -- synthetic hosts ----------------------------------------------------------


def test_synthetic_profile_counts_and_determinism():
    profile = hosttree.synthetic_profile(8, 72, 40)
    assert profile == hosttree.synthetic_profile(8, 72, 40)
    functions = hosttree.expand_functions(profile)
    assert len(functions) == 8 * 73 + 40
    assert sum(1 for f in functions if f['physfn']) == 8 * 72
    pfs = [d for d in profile['devices'] if d['sriov']]
    assert {(d['vendor'], d['device']) for d in pfs} == {
        (0x8086, 0x4940), (0x8086, 0x1592), (0x10de, 0x20b0),
        (0x8086, 0x09c4)}
    assert len(hosttree.expand_functions(hosttree.synthetic_profile(
        accelerator_pfs=3, vfs_per_pf=0, noise=0))) == 3
    # More VFs than one bus holds, and more PFs than one domain holds.
    big = hosttree.synthetic_profile(250, 300, 1)
    assert big['devices'][-1]['address'].startswith('0002:')
    with pytest.raises(ValueError):
        hosttree.synthetic_profile(noise=-1)


def test_synthetic_host_builds_and_lspci_counts_it(tmp_path):
    profile = hosttree.synthetic_profile(8, 72, 40, name='bench')
    root = str(tmp_path / 'sys')
    hosttree.build_tree(profile, root)
    devices = os.listdir(os.path.join(root, 'bus', 'pci', 'devices'))
    assert len(devices) == 624
    lines = check_lspci(root, profile)
    assert len(lines) == 624


# -- bad profiles -------------------------------------------------------------


def bad(edit):
    profile = small_profile()
    edit(profile['devices'])
    return profile


def _set(index, key, value):
    def edit(devices):
        devices[index][key] = value
    return edit


def _set_sriov(key, value):
    def edit(devices):
        devices[9]['sriov'][key] = value
    return edit


_MDEV = '8f6b3a52-0a55-4c9e-9d0f-5c1e6f2f6a10'


def _mdev_twice(devices):
    for attrs in devices[5]['mdev_types'].values():
        attrs['devices'] = [_MDEV]


def _vgpu_on(index, current):
    def edit(devices):
        devices[index]['nvidia_vgpu'] = {'types': {1414: 'NVIDIA H200X-1-18C'},
                                         'current': current}
    return edit


BAD_PROFILES = {
    'mdev uuid twice': (
        _mdev_twice, _MDEV, 'is also on 0000:5e:00.0'),
    'mdev uuid not a uuid': (
        _set(5, 'mdev_types', {'nvidia-222': {
            'name': 'GRID T4-1B', 'available_instances': 1,
            'devices': ['not-a-uuid']}}), 'not-a-uuid', 'not a uuid'),
    'nvidia_vgpu without sriov': (
        _vgpu_on(5, {}), '0000:5e:00.0', 'needs sriov'),
    'nvidia_vgpu current on a missing VF': (
        _vgpu_on(9, {64: 1414}), '0000:af:00.0', 'VF 64 does not exist'),
    'nvidia_vgpu type id not a number': (
        _vgpu_on(9, {0: 'x'}), '0000:af:00.0', 'not a number'),
    'duplicate address': (
        lambda d: d.append(dict(d[5])), '0000:5e:00.0',
        'duplicate address'),
    'short address': (
        _set(5, 'address', '0000:5e:00'), "'0000:5e:00'",
        'domain:bus:slot.func'),
    'uppercase address': (
        _set(5, 'address', '0000:5E:00.0'), "'0000:5E:00.0'", 'lowercase'),
    'slot out of range': (
        _set(5, 'address', '0000:5e:20.0'), "'0000:5e:20.0'", 'slot'),
    'numvfs over totalvfs': (
        _set_sriov('numvfs', 65), '0000:af:00.0',
        r'numvfs \(65\) exceeds totalvfs \(64\)'),
    'VF collision': (
        lambda d: d.append({'address': '0000:af:09.7', 'vendor': 1,
                            'device': 2, 'class': 3}),
        '0000:af:00.0', 'VF 63 address 0000:af:09.7 collides'),
    'VF past last bus': (
        _set(9, 'address', '0000:ff:1f.0'), '0000:ff:1f.0', 'past bus ff'),
    'unknown device key': (
        _set(5, 'venodr', 0x10de), '0000:5e:00.0', 'unknown key.*venodr'),
    'unknown sriov key': (
        _set_sriov('numfvs', 1), '0000:af:00.0', 'unknown key.*numfvs'),
    'unknown parent': (
        _set(5, 'parent', '0000:5d:00.0'), '0000:5e:00.0',
        'parent 0000:5d:00.0 is not a device'),
    'parent not a bridge': (
        _set(7, 'parent', '0000:5e:00.1'), '0000:5f:00.0',
        'not a PCI bridge'),
    'child on a lower bus': (
        _set(1, 'parent', '0000:3a:00.0'), '0000:17:00.0', 'higher bus'),
    'vendor out of range': (
        _set(5, 'vendor', 0x10000), '0000:5e:00.0', 'vendor 0x10000'),
    'missing class': (
        lambda d: d[5].pop('class'), '0000:5e:00.0', "'class'"),
    'bad uuid': (
        lambda d: d[8]['fpga'].update(afu_id='xyz'), '0000:86:00.0',
        'afu_id'),
    'bad fpga layout': (
        lambda d: d[8]['fpga'].update(layout='xrt'), '0000:86:00.0',
        'layout'),
    'duplicate netdev': (
        _set(12, 'net', ['enp95s0f0']), '0000:d9:00.0', 'enp95s0f0'),
    'qat on a device without qat/': (
        _set(5, 'qat', {'state': 'up'}), '0000:5e:00.0',
        'qat: 10de:1eb8 has no qat/ in sysfs'),
    'qat on a QAT PF its driver does not hold': (
        _set(9, 'driver', 'vfio-pci'), '0000:af:00.0',
        'qat/ exists only while the kernel driver 4xxx is bound'),
    'qat services a 4xxx does not take': (
        lambda d: d[9]['qat'].update(cfg_services='decomp'),
        '0000:af:00.0', "cfg_services 'decomp' is not what a 4xxx"),
    'qat three services on a 4xxx': (
        lambda d: d[9]['qat'].update(cfg_services='sym;asym;dc'),
        '0000:af:00.0', 'up to 2'),
    'qat dcc combined': (
        lambda d: d[9]['qat'].update(cfg_services='dcc;dc'),
        '0000:af:00.0', 'dcc alone'),
    'qat down with VFs': (
        lambda d: d[9]['qat'].update(state='down'), '0000:af:00.0',
        'state is down but VFs are enabled'),
    'qat state': (
        lambda d: d[9]['qat'].update(state='sleeping'), '0000:af:00.0',
        "state 'sleeping'"),
    'qat auto_reset': (
        lambda d: d[9]['qat'].update(auto_reset='on'), '0000:af:00.0',
        'auto_reset must be true or false'),
    'qat unknown key': (
        lambda d: d[9]['qat'].update(num_rps=32), '0000:af:00.0',
        'unknown key.*num_rps'),
}


@pytest.mark.parametrize('case', sorted(BAD_PROFILES))
def test_bad_profile_is_rejected(case):
    edit, names, reason = BAD_PROFILES[case]
    with pytest.raises(hosttree.ProfileError) as info:
        hosttree.normalise_profile(bad(edit))
    message = str(info.value)
    assert isinstance(info.value, ValueError)
    assert names in message
    assert re.search(reason, message), message
    assert '\n' not in message


def test_unknown_top_level_key():
    profile = small_profile()
    profile['device'] = []
    with pytest.raises(hosttree.ProfileError, match='unknown key.*device'):
        hosttree.normalise_profile(profile)


def test_load_profile_errors_name_file_and_device(tmp_path):
    path = tmp_path / 'host.yaml'
    path.write_text('name: t\ndevices:\n'
                    '  - {address: 0000:00:17.0, vendor: 1, device: 2,'
                    ' class: 3}\n')
    with pytest.raises(hosttree.ProfileError,
                       match='host.yaml: device #0: .*quoted'):
        hosttree.load_profile(str(path))
    path.write_text('name: t\ndevices: [\n')
    with pytest.raises(hosttree.ProfileError, match='invalid YAML'):
        hosttree.load_profile(str(path))
    path.write_text('name: t\ndevices:\n'
                    '  - {address: "0000:3b:00.0", vendor: "0x8086",'
                    ' device: 0x09c4, class: 0x120000, driver: x}\n')
    profile = hosttree.load_profile(str(path))
    assert profile['devices'][0]['vendor'] == 0x8086
    assert profile['devices'][0]['subsystem_vendor'] == 0x8086
    assert profile['devices'][0]['numa_node'] == -1
    with pytest.raises(hosttree.ProfileError, match='cannot read'):
        hosttree.load_profile(str(tmp_path / 'missing.yaml'))


# -- command line -------------------------------------------------------------


def run_cli(*args):
    env = dict(os.environ, PYTHONPATH=REPO)
    return subprocess.run(
        [sys.executable, '-m', 'cyborg_drivers.fake.hosttree'] + list(args),
        cwd=REPO, env=env, capture_output=True, text=True)


def test_cli_builds_a_shipped_profile(tmp_path):
    dest = str(tmp_path / 'sys')
    result = run_cli('fpga-host', dest)
    assert result.returncode == 0, result.stderr
    assert '15 PCI functions' in result.stdout
    assert read(dev(dest, '0000:5e:00.0', 'device')) == '0x09c4\n'
    result = run_cli(hosttree.profile_path('mixed-host'),
                     str(tmp_path / 'other'))
    assert result.returncode == 0, result.stderr


def test_cli_help():
    result = run_cli('--help')
    assert result.returncode == 0
    assert 'PROFILE' in result.stdout and 'DEST' in result.stdout


def test_cli_rejects_bad_profile(tmp_path):
    path = tmp_path / 'bad.yaml'
    path.write_text('name: t\ndevices:\n'
                    '  - {address: "0000:3b:00.0", vendor: 1, device: 2,'
                    ' class: 3, numvfs: 4}\n')
    result = run_cli(str(path), str(tmp_path / 'sys'))
    assert result.returncode == 2
    assert 'Traceback' not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1
    assert '0000:3b:00.0' in lines[0] and 'numvfs' in lines[0]
    assert not os.path.exists(str(tmp_path / 'sys'))


def test_cli_rejects_non_empty_destination(tmp_path):
    dest = tmp_path / 'sys'
    dest.mkdir()
    (dest / 'keep').write_text('x')
    result = run_cli('gpu-host', str(dest))
    assert result.returncode == 2
    assert 'Traceback' not in result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert 'not an empty directory' in result.stderr
    assert os.listdir(str(dest)) == ['keep']
