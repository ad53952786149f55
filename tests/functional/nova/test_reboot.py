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

import fixtures
import nova.conf

from cyborg_nova import assignments
from cyborg_nova import lifecycle
from cyborg_nova import store as state_store
from tests.functional.nova import base
from tests import sriov_kernel
from tests.unit.privsep import fakesysfs
from tests import vgpu_kernel

CONF = nova.conf.CONF
HOST = 'crypto1'
QAT = '0000:70:00.0'           # QAT 4xxx offering dc, 16 VFs at build
NOT_RECORDED = '0000:e8:00.0'  # another QAT, its count never set
GPU_HOST = 'gpu1'
H200 = '0000:41:00.0'          # vgpu-vfio-host: H200, 8 VFs, nvidia


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


class TestNvidiaVfsAfterReboot(base.LibvirtAcceleratorTestCase):
    """An H200's VFs, enabled by NVIDIA's sriov-manage after a reboot.

    The real LibvirtDriver; the VF count written back by nova-compute's
    init_host goes through privsep's own code, which runs (a stand-in of)
    ``sriov-manage -e`` for an NVIDIA GPU on the nvidia driver.
    """

    enabled_drivers = ['nvidia_gpu']

    def setUp(self):
        super().setUp()
        self.flags(vfio_vgpu_types=['%s=1414' % H200],
                   group='cyborg_nvidia_gpu')
        root = self.build_host(GPU_HOST, 'vgpu-vfio-host')
        self.tool = fakesysfs.sriov_manage(self.workdir, root)
        self.kernel = sriov_kernel.FakeSriovKernel(root, self.tool)
        self.vgpus = vgpu_kernel.VgpuKernel(root, vgpu_kernel.HostOps(root))
        self.useFixture(fixtures.MonkeyPatch(
            'cyborg_nova.virt.extension._privileged_set_num_vfs',
            self.kernel.set_num_vfs))
        self.useFixture(fixtures.MonkeyPatch(
            'cyborg_nova.unit_work.PrivsepOps', lambda: self.vgpus))
        self.configure_host(GPU_HOST)
        self.start_compute(hostname=GPU_HOST)
        self.store = state_store.StateStore(
            os.path.join(self.workdir, GPU_HOST, 'state.sqlite'))
        self.h200 = self.accelerator_providers(GPU_HOST)[H200]['uuid']

    def test_vfs_back_through_sriov_manage_and_free(self):
        def allocations_for(rp_uuid):
            return self.placement.get('/resource_providers/%s/allocations'
                                      % rp_uuid).body['allocations']
        # driver-update nvidia_gpu --num-vfs 8 --device H200: every VF
        # is on already, so the script is not run; the count is recorded.
        lifecycle.update_vfs(CONF, self.store, GPU_HOST, 'nvidia_gpu', 8,
                             allocations_for, self.kernel.set_num_vfs,
                             H200)
        self.assertEqual({H200: 8}, self.store.vf_counts(GPU_HOST))
        self.assertEqual([], fakesysfs.calls(self.tool))
        # A partial count is refused for an NVIDIA GPU.
        self.assertRaises(lifecycle.LifecycleError, lifecycle.update_vfs,
                          CONF, self.store, GPU_HOST, 'nvidia_gpu', 4,
                          allocations_for, self.kernel.set_num_vfs, H200)
        self.assertEqual({H200: 8}, self.store.vf_counts(GPU_HOST))

        # The host reboots: no VFs, and no VF holds a type any more.
        self.kernel.reboot()
        self.assertEqual(0, int(self.read(H200, 'sriov_numvfs')))
        self.restart_compute_service(GPU_HOST)
        # nova-compute's start enabled them the way NVIDIA documents.
        self.assertEqual(['-e %s' % H200], fakesysfs.calls(self.tool))
        self.assertEqual(8, int(self.read(H200, 'sriov_numvfs')))
        self.assertIn('VFs of %s on %s restored: 0 -> 8' % (H200, GPU_HOST),
                      self.stdlog.logger.output)
        inventory = self._get_provider_inventory(self.h200)['VGPU']
        self.assertEqual((8, 0), (inventory['total'], inventory['reserved']))
        # The VFs came back free; a guest gets one with the type written.
        flavor = self.flavor({'resources:VGPU': '1',
                              'trait:CUSTOM_NVIDIA_2335_VGPU_1414':
                                  'required'})
        server = self._create_server(flavor_id=flavor, networks='none')
        (vf,) = [u for us in assignments.Assignments(self.store).of_consumer(
            server['id']).values() for u in us]
        self.assertEqual('1414', self.read(vf, 'nvidia', 'current_vgpu_type'))

    def read(self, address, *parts):
        with open(os.path.join(self.trees[GPU_HOST], 'bus', 'pci', 'devices',
                               address, *parts)) as f:
            return f.read().strip()
