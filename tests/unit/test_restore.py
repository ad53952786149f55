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

"""restore_vfs: the recorded VF counts back after a reboot, or a fence."""

import errno
import os
import shutil

from oslo_config import cfg
import pytest

from cyborg_drivers import discovery
from cyborg_drivers import loader
from cyborg_nova import providers
from cyborg_nova import restore
from cyborg_nova import store as state_store
from privsep import pci
from tests import sriov_kernel

NODE = 'cn1'
QAT = '0000:70:00.0'        # QAT 4xxx, 16 of 16 VFs in the profile
OTHER = '0000:6b:00.0'      # another one, nothing recorded for it


class Host:
    """A crypto-nic-host tree, its store, its kernel and Placement."""

    def __init__(self, root, store):
        self.root = root
        self.store = store
        self.kernel = sriov_kernel.FakeSriovKernel(root)
        conf = cfg.ConfigOpts()
        conf([])
        self.discoverer = discovery.Discoverer(
            loader.load(conf, ['intel_qat']), root)
        store.sync(NODE, self.discoverer.discover().accelerators,
                   state_store.READY)
        #: consumers by provider uuid; asked for only when VFs would go
        self.consumers = {}
        self.asked = []

    def allocations_for(self, rp_uuid):
        self.asked.append(rp_uuid)
        return self.consumers.get(rp_uuid, {})

    def restore(self, set_num_vfs=None):
        return restore.restore_vfs(
            self.store, NODE, self.root,
            set_num_vfs or self.kernel.set_num_vfs, self.allocations_for)

    def units(self, address):
        return len(self.discoverer.discover().by_address()[address].units)

    def row(self, address):
        return self.store.devices(NODE)[address]

    def attr(self, address, name, value=None):
        path = os.path.join(self.root, 'bus', 'pci', 'devices', address,
                            name)
        if value is not None:
            with open(path, 'w') as f:
                f.write(value)
        with open(path) as f:
            return f.read().strip()


@pytest.fixture
def host(host_tree, tmp_path):
    return Host(host_tree('crypto-nic-host'),
                state_store.StateStore(str(tmp_path / 'state.sqlite')))


def test_pf_reset_to_zero_gets_its_vfs_back(host):
    host.store.set_vf_count(NODE, QAT, 16)
    host.kernel.reboot()
    assert host.units(QAT) == 0
    outcomes = host.restore()
    assert outcomes == [restore.Outcome(QAT, restore.RESTORED, 16, 0)]
    assert host.kernel.calls == [(QAT, 16)]
    assert host.attr(QAT, 'sriov_numvfs') == '16'
    assert host.units(QAT) == 16
    assert host.row(QAT).state == state_store.READY
    # Nothing recorded for the other PF: it stays as the boot left it.
    assert host.units(OTHER) == 0
    # From 0 no VF can be lost, so Placement was not asked.
    assert host.asked == []


def test_matching_pf_is_left_alone(host):
    host.store.set_vf_count(NODE, QAT, 16)
    assert host.restore() == [
        restore.Outcome(QAT, restore.UNCHANGED, 16, 16)]
    assert host.kernel.calls == [] and host.asked == []
    assert host.row(QAT).state == state_store.READY


def test_failed_write_fences_with_the_error(host):
    host.store.set_vf_count(NODE, QAT, 16)
    host.kernel.reboot()
    host.kernel.failures[QAT] = OSError(errno.ENOMEM,
                                        os.strerror(errno.ENOMEM))
    (outcome,) = host.restore()
    reason = ('VFs not restored at start: recorded 16 VFs, the kernel '
              'shows 0; setting 16 failed: [Errno 12] Cannot allocate '
              'memory')
    assert outcome == restore.Outcome(QAT, restore.FENCED, 16, 0, reason)
    assert (host.row(QAT).state, host.row(QAT).reason) == (
        state_store.FAILED, reason)
    assert host.units(QAT) == 0


def test_vanished_pf_is_fenced_without_a_write(host):
    host.store.set_vf_count(NODE, QAT, 16)
    link = os.path.join(host.root, 'bus', 'pci', 'devices', QAT)
    target = os.path.realpath(link)
    os.unlink(link)
    shutil.rmtree(target)
    (outcome,) = host.restore()
    assert outcome.action == restore.FENCED and outcome.found is None
    assert host.row(QAT).reason == (
        'VFs not restored at start: recorded 16 VFs but the PF is not on '
        'the bus')
    assert host.row(QAT).state == state_store.FAILED
    assert host.kernel.calls == []


def test_pf_offering_fewer_vfs_is_fenced_without_a_write(host):
    host.store.set_vf_count(NODE, QAT, 16)
    host.kernel.reboot()
    # New firmware (or BIOS settings) give the PF fewer VFs.
    host.attr(QAT, 'sriov_totalvfs', '8\n')
    (outcome,) = host.restore()
    assert outcome.action == restore.FENCED
    assert host.row(QAT).reason == (
        'VFs not restored at start: recorded 16 VFs but the PF offers '
        'only 8 (sriov_totalvfs); the kernel shows 0')
    assert host.row(QAT).state == state_store.FAILED
    assert host.kernel.calls == []


def test_other_nonzero_count_goes_through_zero_when_nothing_holds_it(host):
    # The operator set 8; at boot something else (qat_service) enabled
    # all 16.
    host.kernel.set_num_vfs(QAT, 8)
    host.store.set_vf_count(NODE, QAT, 8)
    host.kernel.reboot()
    host.kernel.set_num_vfs(QAT, 16)
    del host.kernel.calls[:]
    assert host.restore() == [
        restore.Outcome(QAT, restore.RESTORED, 8, 16)]
    assert host.kernel.calls == [(QAT, 8)]
    assert host.asked == [providers.provider_uuid(NODE, QAT)]
    assert host.units(QAT) == 8


@pytest.mark.parametrize('consumers, why', [
    ({'inst-b': {}, 'inst-a': {}}, 'instance(s) inst-a, inst-b hold it'),
    (None, 'Placement cannot say whether instances hold it'),
])
def test_other_nonzero_count_is_not_taken_from_instances(host, consumers,
                                                         why):
    host.store.set_vf_count(NODE, QAT, 8)
    host.consumers[providers.provider_uuid(NODE, QAT)] = consumers
    (outcome,) = host.restore()
    assert outcome.action == restore.FENCED
    assert host.row(QAT).reason == (
        'VFs not restored at start: recorded 8 VFs, the kernel shows 16; '
        'not changed: %s' % why)
    assert host.kernel.calls == []
    assert host.units(QAT) == 16


def test_write_without_vfs_appearing_is_fenced(host):
    host.store.set_vf_count(NODE, QAT, 16)
    host.kernel.reboot()

    def numvfs_only(address, count):
        # The count is taken but no VF shows up on the bus.
        return pci._set_num_vfs(host.root, address, count)
    (outcome,) = host.restore(numvfs_only)
    assert outcome.action == restore.FENCED
    assert host.row(QAT).reason == (
        'VFs not restored at start: recorded 16 VFs, the kernel shows 0; '
        'after setting 16: sriov_numvfs 16, 0 VFs on the bus')


def test_each_pf_on_its_own(host):
    host.store.set_vf_count(NODE, OTHER, 16)
    host.store.set_vf_count(NODE, QAT, 16)
    host.kernel.reboot()
    host.kernel.failures[OTHER] = OSError(errno.EBUSY, 'busy')
    outcomes = {o.address: o.action for o in host.restore()}
    assert outcomes == {OTHER: restore.FENCED, QAT: restore.RESTORED}
    assert host.units(QAT) == 16


def test_device_unknown_to_the_store_cannot_be_fenced(host, tmp_path):
    store = state_store.StateStore(str(tmp_path / 'empty.sqlite'))
    store.set_vf_count(NODE, QAT, 16)
    host.kernel.reboot()
    host.kernel.failures[QAT] = OSError(errno.EIO, 'I/O error')
    (outcome,) = restore.restore_vfs(store, NODE, host.root,
                                     host.kernel.set_num_vfs,
                                     host.allocations_for)
    assert outcome.action == restore.FAILED
    assert 'setting 16 failed: [Errno 5] I/O error' in outcome.reason
    assert store.devices(NODE) == {}


def test_nothing_recorded_nothing_done(host):
    host.kernel.reboot()
    assert host.restore() == []
    assert host.kernel.calls == []
