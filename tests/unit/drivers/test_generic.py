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

"""The generic driver: operator matchers to resource classes and traits."""

import json

from oslo_config import cfg
import pytest

from cyborg_drivers import base
from cyborg_drivers import discovery
from cyborg_drivers import loader


def load(*specs):
    conf = cfg.ConfigOpts()
    conf([])
    loader.register_opts(conf, [loader.installed()['generic']])
    conf.set_override('device_spec', [s if isinstance(s, str)
                                      else json.dumps(s) for s in specs],
                      group='cyborg_generic')
    return loader.load(conf, ['generic'])


def run(root, *specs):
    return discovery.Discoverer(load(*specs), root).discover()


def test_vendor_and_product(host_tree):
    root = host_tree('fpga-host')
    result = run(root, {'vendor_id': '8086', 'product_id': '09c4',
                        'resource_class': 'CUSTOM_MY_FPGA',
                        'traits': ['fast', 'CUSTOM_BLUE'],
                        'device_type': 'FPGA'})
    assert [a.address for a in result.accelerators] == ['0000:5e:00.0',
                                                        '0000:af:00.0']
    pac = result.accelerators[0]
    assert pac.resource_class == 'CUSTOM_MY_FPGA'
    assert pac.traits == ('CUSTOM_BLUE', 'CUSTOM_FAST',
                          'CUSTOM_PCI_PRODUCT_ID_09C4')
    assert pac.driver == 'generic'
    assert pac.total == 1


def test_class_prefix_and_address_glob(host_tree):
    root = host_tree('fpga-host')
    result = run(root, {'class': '12', 'address': '0000:d8:*'})
    assert [a.address for a in result.accelerators] == ['0000:d8:00.0',
                                                        '0000:d8:00.1']
    assert result.accelerators[0].resource_class == 'CUSTOM_PCI'


def test_vfs_are_units(host_tree):
    root = host_tree('crypto-nic-host')
    result = run(root, {'vendor_id': '8086', 'product_id': '4940',
                        'resource_class': 'CUSTOM_QAT'})
    assert [a.total for a in result.accelerators] == [16, 16, 16]
    device = run(root, {'vendor_id': '8086', 'product_id': '4940',
                        'units': 'device'})
    assert [a.total for a in device.accelerators] == [1, 1, 1]


def test_first_matching_entry_wins(host_tree):
    root = host_tree('fpga-host')
    result = run(root, {'product_id': '09c4', 'resource_class': 'CUSTOM_A'},
                 {'vendor_id': '8086', 'resource_class': 'CUSTOM_B'})
    assert {a.resource_class for a in result.accelerators
            if a.product_id == '09c4'} == {'CUSTOM_A'}


@pytest.mark.parametrize('spec, message', [
    ('not json', 'Expecting value'),
    ('[1, 2]', 'not a JSON object'),
    ({'vendor': '8086'}, 'unknown key(s) vendor'),
    ({'resource_class': 'CUSTOM_X'}, 'matches every device'),
    ({'vendor_id': '80866'}, 'vendor_id must be up to 4 hex digits'),
    ({'vendor_id': 'zz'}, 'vendor_id must be hexadecimal'),
    ({'class': '123'}, 'class must be 2, 4 or 6 hex digits'),
    ({'class': '12', 'device_type': 'TOASTER'}, 'device_type must be'),
    ({'class': '12', 'units': 'all'}, 'units must be'),
    ({'class': '12', 'traits': 'CUSTOM_X'}, 'traits must be a list'),
])
def test_bad_spec_is_a_clear_error(spec, message):
    with pytest.raises(base.DriverError) as exc:
        load(spec)
    assert str(exc.value).startswith('[cyborg_generic] device_spec')
    assert message in str(exc.value)


EFA_HOST = {'name': 'efa', 'devices': [
    {'address': '0000:3b:00.0', 'vendor': 0x1d0f, 'device': 0xefa0,
     'class': 0x020000, 'driver': 'efa',
     'sriov': {'totalvfs': 4, 'numvfs': 2, 'vf_device': 0xefa1,
               'vf_driver': 'vfio-pci'}}]}


def test_spec_naming_a_vf_id_is_a_problem_naming_the_pf(host_tree):
    # Nova operators name VF ids in [pci] device_spec; here VFs are units
    # of their PF, so a VF-only matcher finds nothing: say why.
    root = host_tree(EFA_HOST)
    result = run(root, {'vendor_id': '1d0f', 'product_id': 'efa1'})
    assert result.accelerators == ()
    assert result.problems == {
        vf: 'matches VF 1d0f:efa1 of PF 0000:3b:00.0 (1d0f:efa0), which '
            'the generic driver does not claim; name the PF\'s ids: VFs '
            'are reported as units of their PF'
        for vf in ('0000:3b:00.1', '0000:3b:00.2')}
    # Also when only the VF is re-discovered (an event).
    partial = discovery.Discoverer(
        load({'product_id': 'efa1'}), root).discover(only=['0000:3b:00.1'])
    assert 'of PF 0000:3b:00.0 (1d0f:efa0)' in partial.problems[
        '0000:3b:00.1']


def test_spec_naming_pf_and_vf_ids(host_tree):
    root = host_tree(EFA_HOST)
    result = run(root, {'vendor_id': '1d0f'})
    (efa,) = result.accelerators
    assert efa.units == ('0000:3b:00.1', '0000:3b:00.2')
    assert result.problems == {}
