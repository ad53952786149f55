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

"""cyborg_nova.unit_work: units made and undone, privsep's checks included.

The privileged writes run in-process (privsep's unprivileged halves,
on the tree) and :class:`tests.vgpu_kernel.VgpuKernel` plays the kernel.
"""

import logging

from oslo_config import cfg
import pytest

from cyborg_drivers import discovery
from cyborg_drivers import loader
from cyborg_drivers.nvidia import vgpu
from cyborg_nova import unit_work
from privsep import mdev as privsep_mdev
from privsep import nvidia as privsep_nvidia
from tests import vgpu_kernel

T4 = '0000:b0:00.0'
H200 = '0000:41:00.0'


class TreeOps:
    """The privileged writes on ``root``, without a daemon."""

    def __init__(self, root):
        self.root = root

    def create_mdev(self, parent, type_id, mdev):
        privsep_mdev._create(self.root, parent, type_id, mdev)

    def remove_mdev(self, parent, mdev):
        privsep_mdev._remove(self.root, parent, mdev)

    def set_vgpu_type(self, vf, type_id):
        privsep_nvidia._set_vgpu_type(self.root, vf, type_id)

    def clear_vgpu_type(self, vf, type_id):
        privsep_nvidia._clear_vgpu_type(self.root, vf, type_id)


def accelerator(root, address, **options):
    conf = cfg.ConfigOpts()
    conf([])
    drivers = loader.load(conf, ['nvidia_gpu'])
    for key, value in options.items():
        conf.set_override(key, value, 'cyborg_nvidia_gpu')
    return discovery.Discoverer(drivers, root).discover().by_address()[
        address]


@pytest.fixture
def mdev_host(host_tree):
    root = host_tree('mdev-vf-host')
    return root, vgpu_kernel.VgpuKernel(root, TreeOps(root))


def test_mdevs_made_once_and_undone(mdev_host):
    root, kernel = mdev_host
    t4 = accelerator(root, T4, enabled_vgpu_types=['nvidia-222'])
    units = list(t4.units[:2])
    assert unit_work.prepare(root, t4, units, kernel) == units
    assert [vgpu.mdev_parent(root, u) for u in units] == [
        (T4, 'nvidia-222')] * 2
    # Ready already: nothing made the second time.
    assert unit_work.prepare(root, t4, units, kernel) == []
    assert unit_work.retire(root, units, kernel) == units
    assert [vgpu.mdev_parent(root, u) for u in units] == [None, None]
    # Gone already: nothing to undo.
    assert unit_work.retire(root, units, kernel) == []


def test_an_mdev_that_cannot_be_made_again(mdev_host):
    root, kernel = mdev_host
    t4 = accelerator(root, T4, enabled_vgpu_types=['nvidia-222'])
    stranger = '00000000-0000-4000-8000-000000000001'
    with pytest.raises(unit_work.UnitWorkError,
                       match='mediated device %s is gone and is not one '
                             '0000:b0:00.0 can create again' % stranger):
        unit_work.prepare(root, t4, [stranger], kernel)


def test_vfio_types_written_and_cleared(host_tree):
    root = host_tree('vgpu-vfio-host')
    kernel = vgpu_kernel.VgpuKernel(root, TreeOps(root))
    h200 = accelerator(root, H200, vfio_vgpu_types=['%s=1414' % H200])
    held, free = h200.units[0], h200.units[1]
    # The VF holding the type is used as it is; the free one gets it.
    assert unit_work.prepare(root, h200, [held, free], kernel) == [free]
    assert [v for _, v in kernel.writes] == ['1414']
    assert unit_work.retire(root, [held, free, '0000:18:00.0'], kernel) == [
        held, free]
    assert [v for _, v in kernel.writes] == ['1414', '0', '0']


def test_a_refused_type_is_an_error_naming_the_vf(host_tree):
    root = host_tree('vgpu-vfio-host')
    ops = TreeOps(root)
    h200 = accelerator(root, H200, vfio_vgpu_types=['%s=1414' % H200])
    ops.set_vgpu_type(h200.units[1], 1428)   # someone else took it
    with pytest.raises(unit_work.UnitWorkError,
                       match='vGPU type 1414 on VF 0000:41:00.5: VF '
                             '0000:41:00.5 holds vGPU type 1428'):
        unit_work.prepare(root, h200, [h200.units[1]], ops)


def test_retire_never_raises(mdev_host, caplog):
    root, kernel = mdev_host
    t4 = accelerator(root, T4, enabled_vgpu_types=['nvidia-222'])
    unit_work.prepare(root, t4, [t4.units[0]], kernel)

    class Broken(TreeOps):
        def remove_mdev(self, parent, mdev):
            raise OSError(16, 'Device or resource busy')
    caplog.set_level(logging.WARNING)
    assert unit_work.retire(root, [t4.units[0]], Broken(root)) == []
    assert 'is free but was left as it is' in caplog.text
    assert vgpu.mdev_parent(root, t4.units[0]) == (T4, 'nvidia-222')
