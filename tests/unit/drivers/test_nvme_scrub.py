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

"""The generic driver's NVMe VFs: their namespaces erased before reuse.

An SR-IOV NVMe drive described to the real generic driver, its VFs
recorded in a real store and scrubbed by the real scrubber; the erase is
privsep.nvme's own code on the tree, with the controllers' answers given
(tests/nvmehost).
"""

import os

from cyborg_drivers import base
from cyborg_drivers.generic import nvme as generic_nvme
from cyborg_drivers import loader
from cyborg_nova import scrub
from cyborg_nova import store as state_store
from cyborg_nova import unit_work
from privsep import nvme as privsep_nvme
from tests import nvmehost
from tests import scrubhost


class NvmeTreeOps(scrubhost.TreeOps):
    """Resets on the tree; erases by privsep.nvme's code."""

    def __init__(self, root, kernel):
        super().__init__(root)
        self.kernel = kernel

    def format_namespaces(self, address):
        return privsep_nvme._format_namespaces(self.root, address,
                                               opener=self.kernel)


def nvme_host(tmp_path, **scrub_flags):
    return scrubhost.Host(
        str(tmp_path), profile=nvmehost.PROFILE, drivers=('generic',),
        address=nvmehost.PF,
        options={'cyborg_generic': {'device_spec': [nvmehost.DEVICE_SPEC]}},
        **scrub_flags)


def controller(host, unit):
    return os.listdir(os.path.join(host.root, 'bus', 'pci', 'devices', unit,
                                   'nvme'))[0]


def test_a_freed_vf_is_erased_then_reset(tmp_path):
    host = nvme_host(tmp_path)
    assert sorted(host.dc.accelerator.units) == list(nvmehost.VFS)
    (unit,) = host.give_and_free('tenant-a', 1)
    other = [u for u in nvmehost.VFS if u != unit][0]
    name, other_name = controller(host, unit), controller(host, other)
    kernel = nvmehost.Controllers({
        name: {1: nvmehost.Namespace()},
        other_name: {2: nvmehost.Namespace()}})
    ops = NvmeTreeOps(host.root, kernel)
    (outcome,) = host.scrubber(ops).run()
    assert outcome.result == scrub.FREE, outcome.reason
    assert outcome.done == (
        'nvme_format: erased namespace 1 of %s (Format NVM, user data '
        'erase)' % unit,
        'flr: reset %s (flr)' % unit)
    assert ops.resets == [unit]
    assert kernel.formats() == [(name, 1, 1 << 9)]
    # The other VF's tenant keeps its data.
    assert kernel.namespaces[other_name][2].data == b'tenant data'
    assert host.store.units.holds() == []


def test_a_shared_namespace_keeps_the_vf_held_and_fences_the_drive(
        tmp_path):
    host = nvme_host(tmp_path)
    (unit,) = host.give_and_free('tenant-a', 1)
    kernel = nvmehost.Controllers(
        {controller(host, unit): {1: nvmehost.Namespace(nmic=1)}})
    ops = NvmeTreeOps(host.root, kernel)
    (outcome,) = host.scrubber(ops).run()
    assert outcome.result == scrub.FAILED
    assert 'step nvme_format: ' in outcome.reason
    assert 'is shared with other controllers' in outcome.reason
    # Not reset, not handed on: the tenant's data is there still.
    assert ops.resets == []
    (hold,) = host.store.units.holds()
    assert (hold.unit, hold.state) == (unit, 'failed')
    assert host.store.devices(scrubhost.NODE)[
        nvmehost.PF].state == state_store.FAILED
    assert host.fenced == [(nvmehost.PF, 'failed')]


def test_the_step_can_be_left_out(tmp_path):
    host = nvme_host(tmp_path, steps={'generic': 'flr'})
    (unit,) = host.give_and_free('tenant-a', 1)
    kernel = nvmehost.Controllers(
        {controller(host, unit): {1: nvmehost.Namespace()}})
    (outcome,) = host.scrubber(NvmeTreeOps(host.root, kernel)).run()
    assert outcome.result == scrub.FREE
    assert outcome.done == ('flr: reset %s (flr)' % unit,)
    assert kernel.commands == []


class Recorder:
    def __init__(self):
        self.asked = []

    def format_namespaces(self, address):
        self.asked.append(address)
        return []


def test_units_that_are_not_nvme_vfs_are_not_formatted(tmp_path):
    host = nvme_host(tmp_path)
    driver = host.drivers[0]
    ops = Recorder()
    accelerator = host.dc.accelerator
    assert driver.scrub(host.root, accelerator, nvmehost.PF,
                        generic_nvme.SCRUB_NVME_FORMAT, ops).startswith(
        'not formatted: %s is a whole NVMe drive' % nvmehost.PF)
    assert driver.scrub(host.root, accelerator, '0000:3a:00.0',
                        generic_nvme.SCRUB_NVME_FORMAT, ops) == (
        'nothing to format: 0000:3a:00.0 is not an NVMe controller')
    assert driver.scrub(host.root, accelerator, 'mdev-uuid',
                        generic_nvme.SCRUB_NVME_FORMAT, ops).startswith(
        'nothing to format')
    assert ops.asked == []
    assert driver.scrub(host.root, accelerator, nvmehost.VFS[0],
                        generic_nvme.SCRUB_NVME_FORMAT, ops) == (
        'nothing to format: no namespace is attached to %s'
        % nvmehost.VFS[0])
    assert ops.asked == [nvmehost.VFS[0]]


def test_the_steps_and_the_privileged_write_resolve():
    generic = loader.installed()['generic']
    assert generic.SCRUB_STEPS == ('nvme_format', base.SCRUB_FLR)
    # nova-compute's one object for every family's writes finds it.
    found = unit_work.PrivsepOps().format_namespaces
    assert found.__func__ is generic_nvme.NvmeOps.format_namespaces
