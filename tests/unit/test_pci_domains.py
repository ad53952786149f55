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

"""PCI domains wider than four digits: devices behind Intel VMD."""

import os

from oslo_config import cfg
import pytest

from cyborg_drivers import device as device_model
from cyborg_drivers import discovery
from cyborg_drivers import events
from cyborg_drivers.fake import hosttree
from cyborg_drivers import inventory
from cyborg_drivers import loader
from cyborg_drivers import sysfs

# A VMD controller in domain 0000 and, behind it, the root port and a QAT
# card it exposes in domain 10000 (how the kernel numbers VMD domains).
VMD_HOST = {'name': 'vmd', 'devices': [
    {'address': '0000:00:0e.0', 'vendor': 0x8086, 'device': 0x467f,
     'class': 0x010400, 'driver': 'vmd'},
    {'address': '10000:e0:06.0', 'vendor': 0x8086, 'device': 0x464d,
     'class': 0x060400, 'driver': 'pcieport'},
    {'address': '10000:e1:00.0', 'vendor': 0x8086, 'device': 0x4940,
     'class': 0x0b4000, 'driver': '4xxx', 'numa_node': 0,
     'parent': '10000:e0:06.0',
     'sriov': {'totalvfs': 16, 'numvfs': 10, 'vf_device': 0x4941,
               'vf_driver': 'vfio-pci'},
     'qat': {'cfg_services': 'sym;asym'}}]}


@pytest.mark.parametrize('address, valid', [
    ('0000:3b:00.0', True),
    ('10000:e1:00.0', True),
    ('ffffffff:00:1f.7', True),
    ('000:3b:00.0', False),
    ('100000000:3b:00.0', False),
    ('1000A:3b:00.0', False),
    ('10000:3b:00', False),
])
def test_is_pci_address(address, valid):
    assert device_model.is_pci_address(address) is valid


def test_vf_address_in_a_wide_domain():
    assert sysfs.vf_address('10000:e1:00.0', 1, 1, 0) == '10000:e1:00.1'
    # Crossing into the next slot and bus keeps the domain.
    assert sysfs.vf_address('10000:e1:00.0', 1, 1, 8) == '10000:e1:01.1'
    assert sysfs.vf_address('12345678:e1:1f.0', 8, 1, 0) == (
        '12345678:e2:00.0')
    assert sysfs.vf_address('0000:af:00.0', 16, 2, 3) == '0000:af:02.6'


def test_profile_accepts_wide_domains():
    assert hosttree.normalise_profile(VMD_HOST)['devices'][2][
        'address'] == '10000:e1:00.0'
    assert hosttree.vf_addresses('10000:e1:00.0', {'numvfs': 2}) == [
        '10000:e1:00.1', '10000:e1:00.2']
    bad = dict(VMD_HOST, devices=[{'address': '100000000:00:00.0',
                                   'vendor': 1, 'device': 2, 'class': 3}])
    with pytest.raises(hosttree.ProfileError,
                       match='4 to 8 domain digits'):
        hosttree.normalise_profile(bad)


def test_discovery_behind_vmd(host_tree):
    root = host_tree(VMD_HOST)
    assert os.path.isdir(os.path.join(root, 'devices', 'pci10000:e0',
                                      '10000:e0:06.0', '10000:e1:00.0'))
    conf = cfg.ConfigOpts()
    conf([])
    result = discovery.Discoverer(loader.load(conf, ['intel_qat']),
                                  root).discover()
    assert result.problems == {}
    (qat,) = result.accelerators
    assert qat.address == '10000:e1:00.0'
    # Ten VFs from offset 1: the last two in the next slot.
    assert qat.units == tuple('10000:e1:00.%d' % n for n in range(1, 8)) + (
        '10000:e1:01.0', '10000:e1:01.1', '10000:e1:01.2')
    assert qat.total == 10 and not qat.setup_required
    assert isinstance(qat.iommu_group, int)


def test_snapshot_of_only_a_vmd_function(host_tree):
    root = host_tree(VMD_HOST)
    snapshot = sysfs.PciSnapshot(root, only=['10000:e1:00.3'])
    assert list(snapshot.functions) == ['10000:e1:00.3']
    assert snapshot.physfn('10000:e1:00.3') == '10000:e1:00.0'
    assert snapshot.problems == {}


class UdevDevice:
    subsystem = 'pci'

    def __init__(self, sys_name):
        self.sys_name = sys_name
        self.properties = {}


def test_vf_event_behind_vmd_changes_its_pf(host_tree):
    root = host_tree(VMD_HOST)
    conf = cfg.ConfigOpts()
    conf([])
    inv = inventory.HostInventory(discovery.Discoverer(
        loader.load(conf, ['intel_qat']), root))
    inv.refresh()
    vf = '10000:e1:01.2'
    os.unlink(os.path.join(root, 'bus', 'pci', 'devices', vf))
    event = events.event_from_device('remove', UdevDevice(vf))
    change = inv.handle_event(event)
    assert [a.address for a in change.changed] == ['10000:e1:00.0']
    assert change.changed[0].total == 9
