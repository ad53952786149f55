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

"""NVIDIA vGPUs: vendor-specific VFIO VFs and mdev types, on ABI trees."""

import dataclasses
import json
import os

from oslo_config import cfg
import pytest

from cyborg_drivers import base
from cyborg_drivers import device as device_model
from cyborg_drivers import discovery
from cyborg_drivers import loader
from cyborg_drivers.nvidia import driver as nvidia_gpu
from cyborg_drivers.nvidia import vgpu
from cyborg_nova.agent import remote

H200 = '0000:41:00.0'
H200_VFS = ['0000:41:00.%d' % f for f in range(4, 8)] + [
    '0000:41:01.%d' % f for f in range(4)]
RTX = '0000:c1:00.0'
H100 = '0000:c2:00.0'
A100 = '0000:3b:00.0'
T4 = '0000:b0:00.0'
T4_ADOPTED = '8f6b3a52-0a55-4c9e-9d0f-5c1e6f2f6a10'


def discover(root, conf_text=''):
    conf = cfg.ConfigOpts()
    path = os.path.join(os.path.dirname(root), 'test.conf')
    with open(path, 'w') as f:
        f.write('[cyborg_nvidia_gpu]\n' + conf_text)
    conf(['--config-file=%s' % path])
    return discovery.Discoverer(loader.load(conf, ['nvidia_gpu']),
                                root).discover()


def vf_file(root, vf, name):
    return os.path.join(root, 'bus', 'pci', 'devices', vf, 'nvidia', name)


def write(path, text):
    with open(path, 'w') as f:
        f.write(text)


def test_vfio_gpus_without_a_type_are_held_back_with_advice(host_tree):
    found = discover(host_tree('vgpu-vfio-host')).by_address()
    h200 = found[H200]
    assert (h200.resource_class, h200.total, h200.setup_required) == (
        'VGPU', 8, True)
    assert list(h200.units) == H200_VFS
    assert h200.problems == (
        'VFs with NVIDIA vendor-specific VFIO vGPU and no type for this '
        'GPU: set [cyborg_nvidia_gpu] vfio_vgpu_types = 0000:41:00.0=<type '
        'id> (creatable: 1414 (NVIDIA H200X-1-18C), 1428 (NVIDIA '
        'H200X-141C)); VFs already hold 1414',)
    assert found[RTX].setup_required and found[RTX].total == 4
    # SR-IOV off: the whole GPU.
    assert (found[H100].resource_class, found[H100].total) == ('PGPU', 1)


def test_vfio_type_by_address_and_by_product(host_tree):
    found = discover(host_tree('vgpu-vfio-host'),
                     'vfio_vgpu_types = 0000:41:00.0=1414, 10de:2bb5=1520\n'
                     ).by_address()
    h200 = found[H200]
    # VF 0 held 1414 when the compute started: adopted, not reset; the
    # other seven can create it.
    assert (h200.resource_class, h200.total, h200.setup_required,
            h200.problems) == ('VGPU', 8, False, ())
    assert list(h200.units) == H200_VFS
    assert h200.traits == ('CUSTOM_NVIDIA_2335',
                           'CUSTOM_NVIDIA_2335_VGPU_1414',
                           'CUSTOM_NVIDIA_2335_VGPU_1414_NVIDIA_H200X_1_18C')
    assert h200.numa_node == 0
    assert dict(h200.capabilities) == {'vgpu_type': '1414',
                                       'vgpu_framework': 'vfio'}
    rtx = found[RTX]
    assert (rtx.total, rtx.numa_node) == (4, 1)
    assert rtx.traits == (
        'CUSTOM_NVIDIA_2BB5', 'CUSTOM_NVIDIA_2BB5_VGPU_1520',
        'CUSTOM_NVIDIA_2BB5_VGPU_1520_NVIDIA_RTX_PRO_6000_BLACKWELL_DC_1_3Q')


def test_an_address_wins_over_a_product(host_tree):
    found = discover(host_tree('vgpu-vfio-host'),
                     'vfio_vgpu_types = 10de:2335=1428,0000:41:00.0=1414\n'
                     ).by_address()
    assert dict(found[H200].capabilities)['vgpu_type'] == '1414'


def test_distinct_types_get_distinct_traits(host_tree):
    root = host_tree('vgpu-vfio-host')
    traits = set()
    for type_id in (1519, 1520, 1536):
        rtx = discover(root, 'vfio_vgpu_types = %s=%d\n' % (RTX, type_id)
                       ).by_address()[RTX]
        assert not rtx.setup_required
        traits.update(t for t in rtx.traits if '_VGPU_' in t)
    assert traits == {
        'CUSTOM_NVIDIA_2BB5_VGPU_1519', 'CUSTOM_NVIDIA_2BB5_VGPU_1520',
        'CUSTOM_NVIDIA_2BB5_VGPU_1536',
        'CUSTOM_NVIDIA_2BB5_VGPU_1519_NVIDIA_RTX_PRO_6000_BLACKWELL_DC_3Q',
        'CUSTOM_NVIDIA_2BB5_VGPU_1520_NVIDIA_RTX_PRO_6000_BLACKWELL_DC_1_3Q',
        'CUSTOM_NVIDIA_2BB5_VGPU_1536_NVIDIA_RTX_PRO_6000_BLACKWELL_DC_2_48C'}
    # Upstream Cyborg's second-word rule would have named all three the
    # same; it is kept only for two-word names.
    assert vgpu.cyborg_type_trait('2bb5', 'NVIDIA RTX Pro 6000 Blackwell '
                                  'DC-1-3Q') is None
    assert vgpu.cyborg_type_trait('1eb8', 'GRID T4-2B') == (
        'CUSTOM_NVIDIA_1EB8_T4_2B')


def test_a_vf_holding_another_type_is_left_out(host_tree):
    result = discover(host_tree('vgpu-vfio-host'),
                      'vfio_vgpu_types = 0000:41:00.0=1428\n')
    h200 = result.by_address()[H200]
    assert list(h200.units) == H200_VFS[1:]
    # Said of the VF; the GPU's other VFs stay usable (no problem on
    # the GPU would fence them all).
    assert h200.problems == () and not h200.setup_required
    assert result.problems['0000:41:00.4'] == (
        'VF of 0000:41:00.0 left out: it holds vGPU type 1414, not 1428 (a '
        'type this project did not set is never reset)')


def test_a_type_no_vf_can_create_holds_the_gpu_back(host_tree):
    h200 = discover(host_tree('vgpu-vfio-host'),
                    'vfio_vgpu_types = 0000:41:00.0=777\n').by_address()[H200]
    assert h200.setup_required and h200.total == 8
    assert h200.problems == (
        'vGPU type 777 (from [cyborg_nvidia_gpu] vfio_vgpu_types) cannot be '
        'created on any VF of 0000:41:00.0 (creatable: 1414 (NVIDIA '
        'H200X-1-18C), 1428 (NVIDIA H200X-141C))',)


@pytest.mark.parametrize('entry', [
    'abc', '0000:41:00.0=', '0000:41:00.0=x', '0000:41:00.0=0',
    '0000:41:00.0=4294967296', '41:00.0=1414', '10de=1414',
    '0000:41:00.0:1414'])
def test_malformed_vfio_types_are_refused_naming_the_option(host_tree,
                                                            entry):
    result = discover(host_tree('vgpu-vfio-host'),
                      'vfio_vgpu_types = %s\n' % entry)
    assert result.accelerators == ()
    assert result.driver_errors['nvidia_gpu'].startswith(
        '[cyborg_nvidia_gpu] vfio_vgpu_types: %r is not <PF address or '
        '10de:<device id>>=<type id>' % entry)
    with pytest.raises(base.DriverError):
        nvidia_gpu.parse_vfio_types([entry], 'cyborg_nvidia_gpu')


def test_the_type_name_outlives_a_full_gpu(host_tree):
    root = host_tree('vgpu-vfio-host')
    conf = cfg.ConfigOpts()
    conf([])
    driver = loader.load(conf, ['nvidia_gpu'])
    conf.set_override('vfio_vgpu_types', ['%s=1414' % H200],
                      'cyborg_nvidia_gpu')
    first = discovery.Discoverer(driver, root).discover().by_address()[H200]
    # Every VF now holds the type: no creatable list names it any more.
    for vf in H200_VFS:
        write(vf_file(root, vf, vgpu.CURRENT), '1414\n')
        write(vf_file(root, vf, vgpu.CREATABLE), 'ID    : vGPU Name\n')
    again = discovery.Discoverer(driver, root).discover().by_address()[H200]
    assert again.traits == first.traits and again.total == 8
    # A driver that never saw the name still reports the type by id, and
    # the GPU stays usable.
    fresh = discover(root, 'vfio_vgpu_types = %s=1414\n' % H200
                     ).by_address()[H200]
    assert fresh.traits == ('CUSTOM_NVIDIA_2335',
                            'CUSTOM_NVIDIA_2335_VGPU_1414')
    assert (fresh.total, fresh.problems, fresh.setup_required) == (8, (),
                                                                   False)


def test_unreadable_current_type_is_reported(host_tree):
    root = host_tree('vgpu-vfio-host')
    write(vf_file(root, H200_VFS[3], vgpu.CURRENT), 'garbage\n')
    result = discover(root, 'vfio_vgpu_types = %s=1414\n' % H200)
    h200 = result.by_address()[H200]
    assert H200_VFS[3] not in h200.units and h200.total == 7
    assert result.problems[H200_VFS[3]] == (
        'VF of 0000:41:00.0 left out: unreadable nvidia/current_vgpu_type')


@pytest.mark.parametrize('text, expected', [
    ('ID    : vGPU Name\n1414  : NVIDIA H200X-1-18C\n'
     '1428  : NVIDIA H200X-141C\n',
     {1414: 'NVIDIA H200X-1-18C', 1428: 'NVIDIA H200X-141C'}),
    ('ID  : VGPU Name\n694 : NVIDIA A16-2Q\n', {694: 'NVIDIA A16-2Q'}),
    ('', {}), (None, {}), ('0 : none\nx : y\n', {})])
def test_parse_creatable(text, expected):
    assert vgpu.parse_creatable(text) == expected


def test_mdev_types_on_vfs(host_tree):
    root = host_tree('mdev-vf-host')
    a100 = discover(root, 'enabled_vgpu_types = nvidia-474\n'
                    ).by_address()[A100]
    vfs = ['0000:3b:00.%d' % f for f in range(4, 8)]
    assert (a100.resource_class, a100.total, a100.numa_node) == (
        'VGPU', 4, 0)
    # One mdev per VF: each unit's parent is its VF.
    assert [u.parent for u in a100.mdev_units] == vfs
    assert list(a100.units) == [vgpu.mdev_uuid(vf, 'nvidia-474', 0)
                                for vf in vfs]
    assert a100.traits == ('CUSTOM_NVIDIA_20F1_A100_10C',
                           'CUSTOM_NVIDIA_20F1_VGPU_NVIDIA_474_GRID_A100_10C')


def test_existing_mdevs_are_adopted(host_tree):
    root = host_tree('mdev-vf-host')
    t4 = discover(root, 'enabled_vgpu_types = nvidia-222\n').by_address()[T4]
    # 15 more can be created, one exists: 16 units, the existing one kept
    # under its own name.
    assert (t4.total, t4.numa_node, t4.iommu_group) == (16, 1, 90)
    assert T4_ADOPTED in t4.units
    assert [u.exists for u in t4.mdev_units].count(True) == 1
    assert t4.units[:15] == tuple(vgpu.mdev_uuid(T4, 'nvidia-222', i)
                                  for i in range(15))
    assert vgpu.mdev_parent(root, T4_ADOPTED) == (T4, 'nvidia-222')
    assert vgpu.mdev_parent(root, t4.units[0]) is None


def test_mdev_unit_names_are_stable_as_mdevs_come_and_go():
    before = vgpu.mdev_units(T4, 'nvidia-222', [], 3)
    first = before[0].uuid
    # The first one was created: the kernel shows it, one fewer free.
    after = vgpu.mdev_units(T4, 'nvidia-222', [first], 2)
    assert [u.uuid for u in after] == [u.uuid for u in before]
    assert [u.exists for u in after] == [True, False, False]


# -- a GPU Nova's own vGPU support takes as well ------------------------------

def discover_with_nova(root, ours, nova):
    """Discovery with ``ours`` and ``nova`` in one nova.conf.

    As the agent and the commands read it: Nova's own options are not
    registered on their configuration.
    """
    return discover(root, ours + nova)


def test_nova_default_mdev_type_holds_back_the_gpu_that_offers_it(
        host_tree):
    root = host_tree('mdev-vf-host')
    found = discover_with_nova(
        root, 'enabled_vgpu_types = nvidia-222\n',
        '[devices]\nenabled_mdev_types = nvidia-222\n').by_address()
    t4 = found[T4]
    # Still reported with its units (a guest given one keeps it), but a
    # problem: the provider is fully reserved.
    assert (t4.resource_class, t4.total) == ('VGPU', 16)
    assert t4.problems == (
        "Nova's own vGPU support uses this GPU too: [devices] "
        'enabled_mdev_types = nvidia-222 (no device_addresses) gives '
        '0000:b0:00.0 mdev type nvidia-222. One GPU takes one manager, or '
        'a device could serve two guests: take it out of that option, or '
        'leave nvidia_gpu out of [cyborg_nova] enabled_drivers. Held back '
        'until then.',)
    # The A100's VFs do not offer nvidia-222: Nova leaves it alone (it
    # is held back only for want of a type of ours).
    assert [p for p in found[A100].problems if 'Nova' in p] == []


def test_nova_types_by_address_reach_vfs_and_whole_gpus(host_tree):
    root = host_tree('mdev-vf-host')
    nova = ('[devices]\nenabled_mdev_types = nvidia-474, nvidia-223\n'
            '[mdev_nvidia-474]\ndevice_addresses = 0000:3b:00.5, '
            '0000:3b:00.6\n'
            '[vgpu_nvidia-223]\ndevice_addresses = 0000:b0:00.0\n')
    # The A100 reported as a whole GPU (no type enabled here): Nova makes
    # mdevs on two of its VFs all the same.
    found = discover_with_nova(root, '', nova).by_address()
    assert found[A100].problems[-1].startswith(
        "Nova's own vGPU support uses this GPU too: [mdev_nvidia-474] "
        'device_addresses gives 0000:3b:00.5 and 1 more of its VFs mdev '
        'type nvidia-474.')
    # Nova's deprecated [vgpu_<type>] group names the T4.
    assert found[T4].resource_class == 'PGPU'
    assert "[mdev_nvidia-223] device_addresses gives 0000:b0:00.0 mdev " \
        "type nvidia-223" in found[T4].problems[-1]


def test_nova_types_the_gpu_does_not_offer_leave_it_alone(host_tree):
    root = host_tree('mdev-vf-host')
    nova = ('[devices]\nenabled_mdev_types = nvidia-999, nvidia-474\n'
            '[mdev_nvidia-474]\ndevice_addresses = 0000:b0:00.0\n')
    found = discover_with_nova(root, 'enabled_vgpu_types = nvidia-474\n',
                               nova).by_address()
    # nvidia-999 (the default) is offered nowhere; nvidia-474 is given to
    # the T4, which does not offer it.
    assert found[A100].problems == () and found[T4].problems == ()
    assert found[A100].total == 4


def test_nova_options_registered_by_nova_are_read_there(host_tree):
    # nova-compute: Nova registered its options on the configuration (as
    # nova.conf.devices does) and set them; nothing is registered twice.
    root = host_tree('mdev-vf-host')
    conf = cfg.ConfigOpts()
    conf.register_opts([cfg.ListOpt('enabled_mdev_types', default=[])],
                       group='devices')
    conf.register_opt(cfg.ListOpt('device_addresses', default=[]),
                      group='mdev_nvidia-474')
    conf([])
    conf.set_override('enabled_mdev_types', ['nvidia-474'], 'devices')
    conf.set_override('device_addresses', ['0000:3b:00.4'],
                      'mdev_nvidia-474')
    found = discovery.Discoverer(loader.load(conf, ['nvidia_gpu']),
                                 root).discover().by_address()
    assert 'gives 0000:3b:00.4 mdev type nvidia-474' in \
        found[A100].problems[-1]
    assert found[T4].problems == ()


def test_without_nova_mdev_types_nothing_is_held_back(host_tree):
    found = discover(host_tree('mdev-vf-host'),
                     'enabled_vgpu_types = nvidia-474\n'
                     '[devices]\nenabled_mdev_types =\n').by_address()
    assert all(not acc.problems for acc in found.values())


@pytest.mark.parametrize('profile, conf_text', [
    ('vgpu-vfio-host', 'vfio_vgpu_types = 0000:41:00.0=1414, '
                       '10de:2bb5=1520\n'),
    ('mdev-vf-host', 'enabled_vgpu_types = nvidia-471\n'),
    ('gpu-host', 'enabled_vgpu_types = nvidia-223,nvidia-222\n'),
])
def test_every_field_survives_the_driver_api(host_tree, profile, conf_text):
    # What an out-of-process driver serves over the internal API
    # (to_hardware, as JSON) comes back as the very device the driver
    # found, vGPU type, framework, mdev types and mdev units included.
    found = discover(host_tree(profile), conf_text).accelerators
    vgpus = [a for a in found if dict(a.capabilities).get(vgpu.FRAMEWORK)]
    assert vgpus, 'no vGPU accelerator on %s to carry' % profile
    served = {'hardware': [json.loads(json.dumps(a.to_hardware('cn1')))
                           for a in found]}
    # As the agent takes them from the driver's GET /hardware.
    entries, problems = remote.parse_hardware(served)
    assert problems == []
    assert len(entries) == len(found)
    for acc, entry in zip(found, entries):
        assert device_model.from_hardware(entry) == dataclasses.replace(
            acc, remote=True)
    hardware = device_model.Accelerator.HARDWARE_EXTENSION_KEYS
    assert set(served['hardware'][0]) == {'uuid', 'acc_specs',
                                          'acc_status', *hardware}
