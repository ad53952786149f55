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

"""Every driver on the shipped host profiles: exactly the accelerators.

Expected values are written out by hand from the profiles' hardware (not
derived from the profile data), so a driver that reports noise, misses a
device or miscounts units fails here.
"""

import json
import os

from oslo_config import cfg
import pytest

from cyborg_drivers import device as device_model
from cyborg_drivers import discovery
from cyborg_drivers import loader
from cyborg_drivers.nvidia import vgpu
from cyborg_drivers import sysfs

DEFAULT = ['nvidia_gpu', 'intel_fpga', 'xilinx_fpga', 'intel_qat']
A10_IFACE = 'CUSTOM_FPGA_REGION_INTEL_9346116DA52D5CA8B06AA9A389EF7C8D'
NLB0 = 'CUSTOM_FPGA_FUNCTION_ID_INTEL_D8424DC4A4A3C413F89E433683F9040B'
NLB3 = 'CUSTOM_FPGA_FUNCTION_ID_INTEL_F7DF405CBD7ACF7222F144B0B93ACD18'


def discover(root, names=DEFAULT, conf_text=''):
    conf = cfg.ConfigOpts()
    files = []
    if conf_text:
        path = os.path.join(os.path.dirname(root), 'test.conf')
        with open(path, 'w') as f:
            f.write(conf_text)
        files = [path]
    conf(['--config-file=%s' % p for p in files])
    return discovery.Discoverer(loader.load(conf, names), root).discover()


def table(result):
    return [(a.address, a.driver, a.resource_class, a.total)
            for a in result.accelerators]


def test_gpu_host(host_tree):
    result = discover(host_tree('gpu-host'))
    assert table(result) == [
        ('0000:3b:00.0', 'nvidia_gpu', 'PGPU', 1),
        ('0000:3c:00.0', 'nvidia_gpu', 'PGPU', 1),
        ('0000:5e:00.0', 'nvidia_gpu', 'PGPU', 1),
        ('0000:5f:00.0', 'nvidia_gpu', 'VGPU', 4),
        ('0000:86:00.0', 'nvidia_gpu', 'PGPU', 1),
        ('0000:87:00.0', 'nvidia_gpu', 'VGPU', 4),
        ('0000:af:00.0', 'nvidia_gpu', 'PGPU', 1),
        ('0000:d8:00.0', 'nvidia_gpu', 'PGPU', 1),
    ]
    by = result.by_address()
    assert by['0000:3b:00.0'].traits == ('CUSTOM_NVIDIA_1EB8',)
    assert by['0000:af:00.0'].traits == ('CUSTOM_NVIDIA_2236',)
    a100 = by['0000:5f:00.0']
    assert a100.traits == ('CUSTOM_NVIDIA_20B0', 'CUSTOM_VF')
    assert a100.sriov.total_vfs == 16
    assert a100.units == a100.sriov.vf_addresses
    assert len(set(a100.units)) == 4
    # No vGPU type enabled: its VFs are not usable yet.
    assert a100.setup_required
    # The BMC's VGA (ASPEED) and the T4's audio function are not GPUs.
    assert '0000:3b:00.1' not in by
    assert [a.numa_node for a in result.accelerators] == [0, 0, 0, 0,
                                                          1, 1, 1, 1]
    # The offered vGPU types are shown on the whole GPU, not enabled.
    assert {m.type_id for m in by['0000:3b:00.0'].mdev_types} == {
        'nvidia-222', 'nvidia-223'}
    assert result.problems == {}


def test_gpu_host_with_vgpu_type_enabled(host_tree):
    result = discover(host_tree('gpu-host'),
                      conf_text='[cyborg_nvidia_gpu]\n'
                                'enabled_vgpu_types = nvidia-223,nvidia-222\n')
    t4 = result.by_address()['0000:3b:00.0']
    assert t4.resource_class == 'VGPU'
    # First enabled type the GPU offers wins: nvidia-223 (GRID T4-2B).
    # Upstream Cyborg's trait, and the one built from the type id and
    # the whole name.
    assert t4.traits == ('CUSTOM_NVIDIA_1EB8_T4_2B',
                         'CUSTOM_NVIDIA_1EB8_VGPU_NVIDIA_223_GRID_T4_2B')
    assert t4.total == 8
    # The units are the mdevs the T4 can create, named stably.
    assert t4.units == tuple(vgpu.mdev_uuid('0000:3b:00.0', 'nvidia-223', i)
                             for i in range(8))
    assert t4.capabilities == (('vgpu_type', 'nvidia-223'),
                               ('vgpu_framework', 'mdev'))
    # GPUs without the type stay whole.
    assert result.by_address()['0000:3c:00.0'].resource_class == 'PGPU'


def test_gpu_vfs_without_vgpu_type_are_held_back(host_tree):
    root = host_tree('gpu-host')
    a100 = discover(root).by_address()['0000:5f:00.0']
    assert (a100.resource_class, a100.total) == ('VGPU', 4)
    assert a100.setup_required
    assert a100.problems == (
        'SR-IOV VFs without a vGPU type: a VF is unusable until a type is '
        'enabled in [cyborg_nvidia_gpu] enabled_vgpu_types',)
    # The VFs offer a type (written as the NVIDIA driver would): the
    # problem names it, and enabling it makes the VFs usable.
    for vf in a100.units:
        type_dir = os.path.join(root, 'bus', 'pci', 'devices', vf,
                                'mdev_supported_types', 'nvidia-471')
        os.makedirs(os.path.join(type_dir, 'devices'))
        for name, text in (('name', 'GRID A100-4C'),
                           ('available_instances', '1')):
            with open(os.path.join(type_dir, name), 'w') as f:
                f.write(text + '\n')
    a100 = discover(root).by_address()['0000:5f:00.0']
    assert a100.setup_required
    assert a100.problems[0].endswith(
        'enabled_vgpu_types (its VFs offer nvidia-471)')
    # A type the VFs do not offer changes nothing.
    a100 = discover(root, conf_text='[cyborg_nvidia_gpu]\n'
                    'enabled_vgpu_types = nvidia-999\n').by_address()[
        '0000:5f:00.0']
    assert a100.setup_required and 'nvidia-471' in a100.problems[0]
    a100 = discover(root, conf_text='[cyborg_nvidia_gpu]\n'
                    'enabled_vgpu_types = nvidia-471\n').by_address()[
        '0000:5f:00.0']
    assert (a100.total, a100.setup_required, a100.problems) == (4, False,
                                                                ())
    assert a100.traits == ('CUSTOM_NVIDIA_20B0_A100_4C',
                           'CUSTOM_NVIDIA_20B0_VGPU_NVIDIA_471_GRID_A100_4C')
    # One mdev per VF, each named after its VF.
    assert [u.parent for u in a100.mdev_units] == list(
        discover(root).by_address()['0000:5f:00.0'].units)


def test_fpga_host(host_tree):
    result = discover(host_tree('fpga-host'))
    assert table(result) == [
        ('0000:5e:00.0', 'intel_fpga', 'FPGA', 1),
        ('0000:af:00.0', 'intel_fpga', 'FPGA', 1),
        ('0000:d8:00.0', 'xilinx_fpga', 'FPGA', 1),
    ]
    by = result.by_address()
    assert by['0000:5e:00.0'].traits == tuple(sorted((
        'CUSTOM_FPGA_INTEL', 'CUSTOM_FPGA_INTEL_PAC_ARRIA10', A10_IFACE,
        NLB0)))
    assert NLB3 in by['0000:af:00.0'].traits
    region = by['0000:5e:00.0'].fpga_regions[0]
    assert region.layout == 'opae'
    assert region.interface_id == '9346116da52d5ca8b06aa9a389ef7c8d'
    # Keyed by the management function; the user function is the unit.
    alveo = by['0000:d8:00.0']
    assert alveo.functions == ('0000:d8:00.0', '0000:d8:00.1')
    assert alveo.units == ('0000:d8:00.1',)
    assert not alveo.setup_required and alveo.problems == ()
    assert 'CUSTOM_FPGA_XILINX' in alveo.traits
    assert 'CUSTOM_FPGA_PRODUCT_ID_5005' in alveo.traits
    assert alveo.capabilities == (('management_function', '0000:d8:00.0'),)
    assert any(t.startswith('CUSTOM_FPGA_REGION_XILINX_')
               for t in alveo.traits)


def test_crypto_nic_host_qat(host_tree):
    result = discover(host_tree('crypto-nic-host'))
    assert table(result) == [
        ('0000:6b:00.0', 'intel_qat', 'CUSTOM_QAT', 16),
        ('0000:70:00.0', 'intel_qat', 'CUSTOM_QAT', 16),
        ('0000:e8:00.0', 'intel_qat', 'CUSTOM_QAT', 16),
    ]
    by = result.by_address()
    assert by['0000:6b:00.0'].traits == ('CUSTOM_QAT', 'CUSTOM_QAT_ASYM',
                                         'CUSTOM_QAT_SYM')
    assert by['0000:70:00.0'].traits == ('CUSTOM_QAT', 'CUSTOM_QAT_DC')
    units = [u for a in result.accelerators for u in a.units]
    assert len(units) == len(set(units)) == 48


NIC_CONF = """[cyborg_nic_sriov]
physical_device_mappings = physnet1:ens1f0,physnet2:0000:af:00.0
function_device_mappings = ipsec:ens2f0
"""


def test_crypto_nic_host_nics(host_tree):
    result = discover(host_tree('crypto-nic-host'), ['nic_sriov'],
                      NIC_CONF)
    assert table(result) == [
        ('0000:3b:00.0', 'nic_sriov', 'CUSTOM_NIC', 64),
        ('0000:af:00.0', 'nic_sriov', 'CUSTOM_NIC', 64),
    ]
    by = result.by_address()
    assert by['0000:3b:00.0'].traits == ('CUSTOM_PHYSNET1', 'CUSTOM_VF',
                                         'HW_NIC_SRIOV')
    assert by['0000:af:00.0'].traits == ('CUSTOM_IPSEC', 'CUSTOM_PHYSNET2',
                                         'CUSTOM_VF', 'HW_NIC_SRIOV')
    # 64 VFs from 0000:3b:00.0 cross into the next slots and bus.
    assert len(set(by['0000:3b:00.0'].units)) == 64


def test_nic_driver_unconfigured_reports_nothing(host_tree):
    result = discover(host_tree('crypto-nic-host'), ['nic_sriov'])
    assert result.accelerators == ()


def test_nic_mapping_to_unknown_device(host_tree):
    result = discover(host_tree('crypto-nic-host'), ['nic_sriov'],
                      '[cyborg_nic_sriov]\n'
                      'physical_device_mappings = physnet1:ens9f9\n')
    assert result.accelerators == ()
    assert 'no Intel or Mellanox' in result.problems['ens9f9']


def test_nic_partial_discovery_reports_no_missing_mapping(host_tree):
    # An event re-discovers only some functions: the configured PFs it
    # did not read are not missing.
    root = host_tree('crypto-nic-host')
    conf = cfg.ConfigOpts()
    conf([])
    discoverer = discovery.Discoverer(loader.load(conf, ['nic_sriov']), root)
    conf.set_override('physical_device_mappings',
                      ['physnet1:ens1f0', 'physnet2:0000:af:00.0',
                       'physnet3:ens9f9'], group='cyborg_nic_sriov')
    partial = discoverer.discover(only=['0000:af:00.0'])
    assert table(partial) == [('0000:af:00.0', 'nic_sriov', 'CUSTOM_NIC',
                               64)]
    assert partial.problems == {}
    # A full discovery still names the mapping nothing matches, and only
    # that one.
    full = discoverer.discover()
    assert len(full.accelerators) == 2
    assert list(full.problems) == ['ens9f9']


def test_snapshot_is_full(host_tree):
    root = host_tree('crypto-nic-host')
    assert sysfs.PciSnapshot(root).is_full
    assert not sysfs.PciSnapshot(root, only=['0000:af:00.0']).is_full
    assert not sysfs.PciSnapshot(root, only=()).is_full


def test_nic_mapping_malformed(host_tree):
    result = discover(host_tree('crypto-nic-host'), ['nic_sriov'],
                      '[cyborg_nic_sriov]\n'
                      'physical_device_mappings = ens1f0\n')
    assert 'is not <name>:<device>' in result.driver_errors['nic_sriov']


def test_mixed_host(host_tree):
    result = discover(host_tree('mixed-host'), DEFAULT + ['nic_sriov'],
                      '[cyborg_nic_sriov]\n'
                      'physical_device_mappings = physnet1:enp94s0f0\n')
    assert table(result) == [
        ('0000:3b:00.0', 'nvidia_gpu', 'PGPU', 1),
        ('0000:3c:00.0', 'intel_fpga', 'FPGA', 1),
        ('0000:5e:00.0', 'nic_sriov', 'CUSTOM_NIC', 4),
        ('0000:86:00.0', 'intel_fpga', 'FPGA', 1),
        ('0000:af:00.0', 'nvidia_gpu', 'PGPU', 1),
        ('0000:d8:00.0', 'intel_qat', 'CUSTOM_QAT', 8),
    ]
    by = result.by_address()
    n3000 = by['0000:86:00.0']
    assert 'CUSTOM_FPGA_INTEL_PAC_N3000' in n3000.traits
    assert n3000.fpga_regions[0].layout == 'dfl'
    assert n3000.fpga_regions[0].interface_id
    assert any(t.startswith('CUSTOM_FPGA_FUNCTION_ID_INTEL_')
               for t in n3000.traits)
    assert by['0000:3c:00.0'].traits == tuple(sorted((
        'CUSTOM_FPGA_INTEL', 'CUSTOM_FPGA_INTEL_PAC_ARRIA10', A10_IFACE,
        NLB0)))


@pytest.mark.parametrize('profile', ['gpu-host', 'fpga-host',
                                     'crypto-nic-host', 'mixed-host',
                                     'qat-gen4-host'])
def test_iommu_groups_and_drivers_read(host_tree, profile):
    for accelerator in discover(host_tree(profile)).accelerators:
        assert isinstance(accelerator.iommu_group, int)
        assert accelerator.kernel_driver


def test_fpga_without_driver_bound(host_tree):
    result = discover(host_tree({'name': 'unbound', 'devices': [
        {'address': '0000:5e:00.0', 'vendor': 0x8086, 'device': 0x09c4,
         'class': 0x120000}]}))
    (pac,) = result.accelerators
    assert pac.setup_required
    assert 'bound' in pac.problems[0]
    assert pac.traits == ('CUSTOM_FPGA_INTEL',
                          'CUSTOM_FPGA_INTEL_PAC_ARRIA10')


def _pac_with_vf(vf_driver):
    return {'name': 'pac-vf', 'devices': [
        {'address': '0000:5e:00.0', 'vendor': 0x8086, 'device': 0x09c4,
         'class': 0x120000, 'driver': 'intel-fpga-pci',
         'sriov': {'totalvfs': 1, 'numvfs': 1, 'vf_device': 0x09c5,
                   'vf_driver': vf_driver},
         'fpga': {'layout': 'opae',
                  'interface_id': '9346116d-a52d-5ca8-b06a-a9a389ef7c8d',
                  'afu_id': 'd8424dc4-a4a3-c413-f89e-433683f9040b'}}]}


def test_fpga_port_on_vf(host_tree):
    # With SR-IOV on, the OPAE driver hands the port to the VF: the
    # function id is read there and the VF is the unit.
    (pac,) = discover(host_tree(_pac_with_vf('intel-fpga-pci'))).accelerators
    assert pac.units == ('0000:5e:00.1',)
    assert NLB0 in pac.traits and A10_IFACE in pac.traits


def test_fpga_port_on_a_vf_bound_elsewhere(host_tree):
    # A VF bound to vfio-pci has no port in the host's sysfs (only the
    # FPGA driver creates it): the loaded function cannot be read.
    (pac,) = discover(host_tree(_pac_with_vf('vfio-pci'))).accelerators
    assert pac.units == ('0000:5e:00.1',)
    assert A10_IFACE in pac.traits
    assert not any(t.startswith('CUSTOM_FPGA_FUNCTION_ID_')
                   for t in pac.traits)


def test_hardware_json_matches_internal_api(host_tree):
    (pac, *_) = discover(host_tree('fpga-host')).accelerators
    hw = json.loads(json.dumps(pac.to_hardware('compute-1')))
    assert hw['uuid'] == device_model.device_uuid('compute-1',
                                                  '0000:5e:00.0')
    assert hw['acc_specs'] == {
        'remote': 0, 'num': 1, 'device_type': 'FPGA',
        'acc_capability': {'num': 1}}
    assert hw['acc_status'] == {'setup_required': False,
                                'reboot_required': False}
    assert hw['placement']['resource_class'] == 'FPGA'
    assert hw['pci']['address'] == '0000:5e:00.0'
    # Stable: same host and address, same uuid; another host, another.
    assert pac.to_hardware('compute-1')['uuid'] == hw['uuid']
    assert pac.to_hardware('compute-2')['uuid'] != hw['uuid']
