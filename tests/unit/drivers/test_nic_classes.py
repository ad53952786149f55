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

"""nic_sriov: which PCI classes are NICs, and why a mapping finds none.

Mellanox VPI cards show their PFs as InfiniBand (0207) or "other network"
(0280) controllers rather than Ethernet ones; mlx5_core drives them all,
and their VFs are as assignable as an Ethernet PF's.
"""

import os
import re

from oslo_config import cfg
import pytest

from cyborg_drivers import discovery
from cyborg_drivers import loader
from cyborg_drivers.nic import driver as nic_sriov
from cyborg_drivers import sysfs

PF = '0000:5e:00.0'


def discover(root, mappings):
    conf = cfg.ConfigOpts()
    conf([])
    drivers = loader.load(conf, ['nic_sriov'])
    conf.set_override('physical_device_mappings', mappings,
                      group='cyborg_nic_sriov')
    return discovery.Discoverer(drivers, root).discover()


def nic(vendor, device, cls, vf_device, net=None, driver='mlx5_core'):
    return {'address': PF, 'vendor': vendor, 'device': device, 'class': cls,
            'numa_node': 1, 'driver': driver, 'net': net,
            'sriov': {'totalvfs': 8, 'numvfs': 4, 'vf_device': vf_device,
                      'vf_driver': driver, 'offset': 2}}


def host(*devices):
    return {'name': 'nic', 'devices': [
        {'address': '0000:00:00.0', 'vendor': 0x8086, 'device': 0x2020,
         'class': 0x060000, 'numa_node': 0},
        {'address': '0000:00:04.0', 'vendor': 0x1af4, 'device': 0x1000,
         'class': 0x020000, 'subsystem_vendor': 0x1af4, 'driver':
         'virtio-pci', 'net': ['eth0']}, *devices]}


@pytest.mark.parametrize('cls', [0x020000, 0x020700, 0x028000])
@pytest.mark.parametrize('by', ['address', 'name'])
def test_mellanox_pf_of_every_nic_class_reported(host_tree, cls, by):
    root = host_tree(host(nic(0x15b3, 0x101b, cls, 0x101c,
                              net=['ibp94s0f0'])))
    device = PF if by == 'address' else 'ibp94s0f0'
    result = discover(root, ['fabric:%s' % device])
    (found,) = result.accelerators
    assert result.problems == {}
    assert (found.address, found.driver, found.resource_class, found.total,
            found.numa_node, found.class_code) == (
        PF, 'nic_sriov', 'CUSTOM_NIC', 4, 1, '0x%06x' % cls)
    assert found.traits == ('CUSTOM_FABRIC', 'CUSTOM_VF', 'HW_NIC_SRIOV')
    assert found.units == ('0000:5e:00.2', '0000:5e:00.3', '0000:5e:00.4',
                           '0000:5e:00.5')


@pytest.mark.parametrize('vendor, cls, claimed', [
    (0x15b3, 0x020000, True),
    (0x15b3, 0x020700, True),
    (0x15b3, 0x028000, True),
    (0x8086, 0x020000, True),
    # Intel's "other network" controllers are Wi-Fi adapters.
    (0x8086, 0x028000, False),
    (0x8086, 0x020700, False),
    # Other classes and vendors.
    (0x15b3, 0x020800, False),
    (0x15b3, 0x060400, False),
    (0x1af4, 0x020000, False),
    (0x14e4, 0x020700, False),
])
def test_claims(vendor, cls, claimed):
    driver = nic_sriov.NicSriovDriver(cfg.ConfigOpts())
    function = sysfs.PciFunction(PF, vendor, 0x1234, cls, vendor, 0, None,
                                 '/nonexistent')
    assert driver.claims(function) is claimed


def test_intel_wifi_is_not_a_nic(host_tree):
    root = host_tree(host({'address': PF, 'vendor': 0x8086,
                           'device': 0x2725, 'class': 0x028000,
                           'driver': 'iwlwifi', 'net': ['wlp94s0']}))
    result = discover(root, ['wifi:wlp94s0'])
    assert result.accelerators == ()
    assert result.problems['wlp94s0'] == (
        'named in [cyborg_nic_sriov] physical_device_mappings but interface '
        'wlp94s0 is of 0000:5e:00.0 (8086:2725, class 0x028000, driver '
        'iwlwifi), which is not an Intel Ethernet or Mellanox Ethernet, '
        'InfiniBand or VPI PF')


def test_why_a_mapping_finds_nothing(host_tree):
    root = host_tree(host(
        nic(0x15b3, 0x1017, 0x020700, 0x1018),
        {'address': '0000:18:00.0', 'vendor': 0x144d, 'device': 0xa808,
         'class': 0x010802, 'driver': 'nvme'}))
    result = discover(root, ['a:0000:18:00.0', 'b:0000:5e:00.3',
                             'c:0000:99:00.0', 'd:eth0', 'e:ib9',
                             'f:%s' % PF])
    # The VPI PF the mapping names by address is found...
    assert [a.address for a in result.accelerators] == [PF]
    prefix = 'named in [cyborg_nic_sriov] physical_device_mappings but '
    # ... and each other mapping says what is there instead.
    assert result.problems == {
        '0000:18:00.0': prefix + '0000:18:00.0 (144d:a808, class 0x010802, '
        'driver nvme) is not an Intel Ethernet or Mellanox Ethernet, '
        'InfiniBand or VPI PF',
        '0000:5e:00.3': prefix + '0000:5e:00.3 (15b3:1018, class 0x020700, '
        'driver mlx5_core) is an SR-IOV VF (of 0000:5e:00.0), not a PF: '
        'name its PF',
        '0000:99:00.0': prefix + 'there is no PCI function 0000:99:00.0 on '
        'this host',
        'eth0': prefix + 'interface eth0 is of 0000:00:04.0 (1af4:1000, '
        'class 0x020000, driver virtio-pci), which is not an Intel Ethernet '
        'or Mellanox Ethernet, InfiniBand or VPI PF',
        'ib9': prefix + 'no Intel or Mellanox NIC PF (an Intel Ethernet or '
        'Mellanox Ethernet, InfiniBand or VPI PF) has that name or address',
    }


def test_qat_gen4_host_connectx6_in_infiniband_mode(host_tree):
    root = host_tree('qat-gen4-host')
    result = discover(root, ['ib0:ibp175s0f0', 'ib1:0000:af:00.1'])
    assert result.problems == {}
    assert [(a.address, a.class_code, a.traits, a.total, a.numa_node,
             a.setup_required) for a in result.accelerators] == [
        ('0000:af:00.0', '0x020700', ('CUSTOM_IB0', 'CUSTOM_VF',
                                      'HW_NIC_SRIOV'), 4, 1, False),
        ('0000:af:00.1', '0x020700', ('CUSTOM_IB1', 'CUSTOM_VF',
                                      'HW_NIC_SRIOV'), 0, 1, True),
    ]
    # IPoIB interfaces: a 20-byte address ending in the port GUID, and
    # the InfiniBand ARP type.
    netdev = os.path.join(root, 'class', 'net', 'ibp175s0f0')
    with open(os.path.join(netdev, 'address')) as f:
        address = f.read().strip().split(':')
    assert len(address) == 20
    assert address[4:12] == ['fe', '80', '00', '00', '00', '00', '00', '00']
    with open(os.path.join(netdev, 'type')) as f:
        assert f.read() == '32\n'


def test_the_nic_doc_lists_every_class_claimed():
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))
    with open(os.path.join(repo, 'doc', 'source', 'admin',
                           'device-ids.rst')) as f:
        text = f.read()
    section = text[text.index('.. _device-ids-nic:'):]
    documented = set()
    for row in section.split('   * - ')[2:]:
        cells = [c.strip() for c in row.split('\n\n')[0].split('\n     - ')]
        vendor = re.fullmatch(r'``([0-9a-f]{4}):\*``', cells[0]).group(1)
        cls = re.match(r'``([0-9a-f]{4})``', cells[2]).group(1)
        documented.add((int(vendor, 16), int(cls, 16)))
    assert documented == {(vendor, cls)
                          for cls, vendors in nic_sriov.CLASSES.items()
                          for vendor in vendors}
