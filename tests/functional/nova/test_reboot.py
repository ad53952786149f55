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

"""VFs a host reboot took away, written back when nova-compute starts.

The operator's count goes in through driver-update's library call
(:func:`cyborg_nova.lifecycle.update_vfs`, which records it); the host
reboot is a fake kernel resetting every PF of the tree to 0 VFs; the
restart is Nova's own (a new ComputeManager, whose init_host calls the
driver's). Only the hardware is fake: the driver's privileged write goes
to :class:`tests.sriov_kernel.FakeSriovKernel`, which runs privsep's
write on the tree and makes the VFs appear as the kernel would.
"""

import errno
import os

import nova.conf

from cyborg_nova import lifecycle
from cyborg_nova import state as state_store
from tests.functional.nova import base
from tests import sriov_kernel

CONF = nova.conf.CONF
HOST = 'crypto1'
QAT = '0000:70:00.0'           # QAT 4xxx offering dc, 16 VFs at build
NOT_RECORDED = '0000:e8:00.0'  # another QAT, its count never set


class TestVfsAfterReboot(base.AcceleratorTestCase):

    def setUp(self):
        super().setUp()
        self.compute = self.start_accelerator_compute(HOST,
                                                      'crypto-nic-host')
        self.kernel = sriov_kernel.FakeSriovKernel(self.trees[HOST])
        self.store = state_store.StateStore(
            os.path.join(self.workdir, HOST, 'state.sqlite'))
        # Kept across restarts: Nova's harness hands the same driver
        # object to the new ComputeManager.
        self.compute.manager.driver._set_num_vfs = self.kernel_write
        self.placement_at_write = None
        self.qat = self.accelerator_providers(HOST)[QAT]['uuid']

    def kernel_write(self, address, count):
        # What had reached Placement since the restart when the VFs
        # came back.
        self.placement_at_write = list(self.counter.requests)
        return self.kernel.set_num_vfs(address, count)

    def update_driver(self, count):
        """``driver-update intel_qat --num-vfs COUNT --device QAT``."""
        def allocations_for(rp_uuid):
            return self.placement.get('/resource_providers/%s/allocations'
                                      % rp_uuid).body['allocations']
        lifecycle.update_vfs(CONF, self.store, HOST, 'intel_qat', count,
                             allocations_for, self.kernel.set_num_vfs, QAT)
        self._run_periodics()
        del self.kernel.calls[:]

    def qat_inventory(self):
        return self._get_provider_inventory(self.qat).get('CUSTOM_QAT')

    def test_vfs_back_before_the_first_report(self):
        self.update_driver(8)
        before = self.qat_inventory()
        self.assertEqual((8, 0), (before['total'], before['reserved']))
        self.assertEqual({QAT: 8}, self.store.vf_counts(HOST))

        self.kernel.reboot()
        self.counter.reset()
        self.compute = self.restart_compute_service(self.compute)

        # Only the recorded PF was written, once, before the compute
        # had said anything to Placement.
        self.assertEqual([(QAT, 8)], self.kernel.calls)
        self.assertEqual([], self.placement_at_write)
        # So its first report already found the 8 VFs: the provider's
        # inventory was never written, and is what it was.
        self.assertEqual([], [w for w in self.counter.writes()
                              if self.qat in w[1]])
        self.assertEqual(before, self.qat_inventory())
        self.assertEqual('ready', self.store.devices(HOST)[QAT].state)
        # The PF nobody set a count on stays as the boot left it.
        other = self.accelerator_providers(HOST)[NOT_RECORDED]['uuid']
        self.assertEqual({}, self._get_provider_inventory(other))

        # And the VFs serve an instance.
        flavor = self.flavor({'resources:CUSTOM_QAT': '2',
                              'trait:CUSTOM_QAT_DC': 'required'})
        server = self._create_server(flavor_id=flavor, networks='none')
        self.assertEqual({'CUSTOM_QAT': 2},
                         self.server_allocations(server)[self.qat])

    def test_failed_recreation_fences_the_provider(self):
        self.update_driver(8)
        self.kernel.reboot()
        # At boot the QAT service enabled every VF, and the PF driver
        # refuses to take them down again.
        self.kernel.set_num_vfs(QAT, 16)
        del self.kernel.calls[:]
        self.kernel.failures[QAT] = OSError(errno.EBUSY,
                                            os.strerror(errno.EBUSY))

        self.compute = self.restart_compute_service(self.compute)

        self.assertEqual([(QAT, 8)], self.kernel.calls)
        row = self.store.devices(HOST)[QAT]
        self.assertEqual('failed', row.state)
        self.assertEqual(
            'VFs not restored at start: recorded 8 VFs, the kernel shows '
            '16; setting 8 failed: [Errno 16] Device or resource busy',
            row.reason)
        # Fenced: the 16 VFs the boot left are reported, none handed out.
        inventory = self.qat_inventory()
        self.assertEqual((16, 16), (inventory['total'],
                                    inventory['reserved']))
        flavor = self.flavor({'resources:CUSTOM_QAT': '1',
                              'trait:CUSTOM_QAT_DC': 'required'})
        self._create_server(flavor_id=flavor, networks='none',
                            expected_state='ERROR')

    def test_a_broken_store_does_not_stop_the_compute(self):
        self.update_driver(8)
        self.kernel.reboot()
        for suffix in ('-wal', '-shm'):
            if os.path.exists(self.store.path + suffix):
                os.unlink(self.store.path + suffix)
        with open(self.store.path, 'wb') as f:
            f.write(b'not a database\n' * 512)

        self.compute = self.restart_compute_service(self.compute)

        self.assertEqual([], self.kernel.calls)
        self.assertIn('VF counts not restored; starting without them',
                      self.stdlog.logger.output)
        server = self._create_server(
            flavor_id=self.flavor({}, name='plain'), networks='none')
        self.assertEqual('ACTIVE', server['status'])


class TestLibvirtNodename(base.LibvirtAcceleratorTestCase):
    """The libvirt driver knows its node after its own init_host.

    This harness's restart builds a new driver, whose write would go to
    a real privsep daemon; so the running driver's write is pointed at
    the fake kernel and its init_host called, as Nova's start calls it.
    """

    def test_init_host_restores_under_the_hypervisor_hostname(self):
        self.start_accelerator_compute(HOST, 'crypto-nic-host')
        driver = self.computes[HOST].driver
        kernel = sriov_kernel.FakeSriovKernel(self.trees[HOST])
        driver._set_num_vfs = kernel.set_num_vfs
        store = state_store.StateStore(
            os.path.join(self.workdir, HOST, 'state.sqlite'))
        store.set_vf_count(HOST, QAT, 16)
        kernel.reboot()

        driver.init_host(HOST)

        # Found under the name the updates use: the hypervisor hostname.
        self.assertEqual([HOST], driver.get_available_nodes())
        self.assertEqual([(QAT, 16)], kernel.calls)
        self._run_periodics()
        qat = self.accelerator_providers(HOST)[QAT]['uuid']
        self.assertEqual(16, self._get_provider_inventory(qat)[
            'CUSTOM_QAT']['total'])
        self.assertEqual('ready', store.devices(HOST)[QAT].state)
