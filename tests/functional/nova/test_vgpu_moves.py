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

"""vGPU servers through every move, on the libvirt driver.

Two computes on Nova's real ``LibvirtDriver`` (fakelibvirt), each with a
tree of its own: ``mdev-vf-host`` (a T4 whose vGPUs are mdevs) or
``vgpu-vfio-host`` (an H200 whose vGPUs are VFs holding a type through
NVIDIA's vendor-specific VFIO). After every step :meth:`check_vgpus`
compares, on both hosts, the units Placement's allocations map to with
the guest's ``<hostdev>`` elements and with the host's vGPU state: every
unit a guest holds is made (its mdev exists, its VF holds the type) and
every unit a guest gave up is undone.

The privileged writes are the privsep entrypoints' own code, run in this
process against each host's tree (:class:`tests.vgpu_kernel.HostOps`: one
privsep daemon serves one sysfs, and these computes share a process; the
daemon's path is in ``test_vgpu``); :class:`tests.vgpu_kernel.VgpuKernel`
plays the kernel.
With ``remote = True`` the GPU is served by ``cyborg-nova-driver``'s
service (out of process in production), recorded as the agent records
it, and the same moves run on the units of its devices.
"""

import os
from unittest import mock

from oslo_config import cfg

from cyborg_drivers.nvidia import vgpu
from cyborg_nova.agent import remote
from cyborg_nova.agent import remote_sync
from cyborg_nova import audit
from cyborg_nova import conf as cn_conf
from cyborg_nova import remote_devices
from cyborg_nova.remote_driver import service
from cyborg_nova import store as state_store
from cyborg_nova import unit_work
from tests.functional.nova import moves
from tests import vgpu_kernel

T4 = '0000:b0:00.0'
T4_1B = 'CUSTOM_NVIDIA_1EB8_VGPU_NVIDIA_222_GRID_T4_1B'
H200 = '0000:41:00.0'
H200_1414 = 'CUSTOM_NVIDIA_2335_VGPU_1414'
# A VF of the H200 no guest of these tests gets.
FREE_VF = '0000:41:01.3'
ENDPOINT = 'http://127.0.0.1:7070'


class VgpuMovesTestCase(moves.MovesTestCase):

    hosts = ('gpu1', 'gpu2')
    enabled_drivers = ['nvidia_gpu']
    remote = False
    gpu_options: dict = {}
    gpu = None
    trait = None

    def setUp(self):
        if self.remote:
            # The compute runs no in-process driver for the GPU.
            self.enabled_drivers = []
        super().setUp()
        if self.remote:
            for host in self.hosts:
                for address, uuid in self.remote_providers(host).items():
                    self.providers[uuid] = (host, address)
        self.vgpu_flavor = self.flavor({'resources:VGPU': '1',
                                        'trait:%s' % self.trait: 'required'},
                                       name='vgpu1')

    def configure_host(self, host):
        super().configure_host(host)
        self.flags(group='cyborg_nvidia_gpu', **self.gpu_options)

    def start_accelerator_compute(self, host, profile):
        self.build_host(host, profile)
        self.configure_host(host)
        if self.remote:
            self.record_remote(host)
        with self.host_ops(host):
            return self.start_compute(hostname=host)

    def restart_host(self, host):
        # A restarted compute undoes the vGPUs of the guests evacuated
        # away while it was down, in its init_host.
        with self.host_ops(host):
            super().restart_host(host)

    def host_ops(self, host):
        """While the compute of ``host`` is made: its privileged writes."""
        kernel = vgpu_kernel.VgpuKernel(
            self.trees[host], vgpu_kernel.HostOps(self.trees[host]))
        return mock.patch.object(unit_work, 'PrivsepOps', lambda: kernel)

    def record_remote(self, host):
        """What the agent records after a poll of the GPU's driver."""
        conf = cfg.ConfigOpts()
        conf([])
        cn_conf.register_opts(conf)
        driver = service.DriverService(conf, service.Settings(
            driver='nvidia_gpu', agent_url='http://127.0.0.1:6666',
            agent_token='unused', nodename=host,
            sysfs_root=self.trees[host]))
        for name, value in self.gpu_options.items():
            driver.conf.set_override(name, value, group='cyborg_nvidia_gpu')
        driver.discover()
        entries, problems = remote.parse_hardware(
            {'hardware': driver.hardware()})
        self.assertEqual([], problems)
        self.assertTrue(entries)
        store = state_store.StateStore(
            os.path.join(self.workdir, host, 'state.sqlite'))
        remote_sync.RemoteRecorder(store, host, None, list)(
            ENDPOINT, 'GPU', 'UP', entries)

    # -- what the hosts show --------------------------------------------------

    def xml_units(self, server, host=None):
        host = host or server['OS-EXT-SRV-ATTR:host']
        return sorted(audit.hostdev_addresses(self.guest_xml(server, host)))

    def remote_providers(self, host):
        """{PCI address: provider uuid} of the out-of-process devices."""
        root = self.placement.get(
            '/resource_providers?name=%s' % host).body[
            'resource_providers'][0]['uuid']
        prefix = host + remote_devices.NAME_INFIX
        return {rp['name'][len(prefix):]: rp['uuid']
                for rp in self.placement.get(
                    '/resource_providers?in_tree=%s' % root,
                    version='1.14').body['resource_providers']
                if rp['name'].startswith(prefix)}

    def gpu_provider(self, host):
        if self.remote:
            return self.remote_providers(host)[self.gpu]
        return self.accelerator_providers(host)[self.gpu]['uuid']

    def made(self, host):
        """The vGPU units that exist on ``host`` now."""
        root = self.trees[host]
        if self.framework == vgpu.MDEV:
            bus = os.path.join(root, 'bus', 'mdev', 'devices')
            return set(os.listdir(bus)) if os.path.isdir(bus) else set()
        vfs = os.listdir(os.path.join(root, 'bus', 'pci', 'devices'))
        return {vf for vf in vfs if vf != self.gpu
                and vgpu.held_type(root, vf)}

    def check_vgpus(self, skip_hosts=(), **gone):
        """The invariants, and each host's vGPU state against its units.

        :param skip_hosts: computes that are down.
        :param gone: host name -> units a guest gave up there: undone
            (unit names repeat across hosts: the same GPU at the same
            address makes the same names).
        """
        self.check(skip_hosts=skip_hosts)
        for host in self.hosts:
            held = {r.unit for r in self.store(host).all()}
            made = self.made(host)
            self.assertEqual(set(), held - made,
                             'units held on %s but not made' % host)
            self.assertEqual(set(), set(gone.get(host, ())) & made,
                             'freed units still made on %s' % host)


class MoveScenarios:
    """The moves, for any vGPU kind (mixed into a VgpuMovesTestCase)."""

    def test_cold_migrate_confirm_and_revert(self):
        server = self.start_on('gpu1', self.vgpu_flavor)
        source = self.units(server, 'gpu1')
        self.assertEqual(1, len(source))
        self.check_vgpus()
        server = self._migrate_server(server)
        self.assertEqual('gpu2', server['OS-EXT-SRV-ATTR:host'])
        dest = self.units(server, 'gpu2')
        self.assertEqual(1, len(dest))
        self.assertEqual(dest, self.xml_units(server, 'gpu2'))
        # Both exist while the move can still be reverted.
        self.check_vgpus()
        server = self._revert_resize(server)
        self.assertEqual(source, self.units(server, 'gpu1'))
        self.assertEqual(source, self.xml_units(server, 'gpu1'))
        self.assertEqual([], self.units(server, 'gpu2'))
        self.check_vgpus(gpu2=dest)
        server = self._migrate_server(server)
        dest = self.units(server, 'gpu2')
        server = self._confirm_resize(server)
        self.assertEqual([], self.units(server, 'gpu1'))
        self.check_vgpus(gpu1=source)
        self.assertEqual({self.gpu_provider('gpu2'): {'VGPU': 1}},
                         {rp: r for rp, r in
                          self.server_allocations(server).items()
                          if 'VGPU' in r})
        self.delete(server)
        self.check_vgpus(gpu2=dest)

    def test_resize_to_two_vgpus(self):
        server = self.start_on('gpu1', self.vgpu_flavor)
        source = self.units(server, 'gpu1')
        two = self.flavor({'resources:VGPU': '2',
                           'trait:%s' % self.trait: 'required'},
                          name='vgpu2')
        for name in ('gpu1',):
            self.api.put_service(self.computes[name].service_ref.uuid,
                                 {'status': 'disabled'})
        server = self._resize_server(server, two)
        for name in ('gpu1',):
            self.api.put_service(self.computes[name].service_ref.uuid,
                                 {'status': 'enabled'})
        dest = self.units(server, 'gpu2')
        self.assertEqual(2, len(dest))
        self.assertEqual(dest, self.xml_units(server, 'gpu2'))
        self.check_vgpus()
        server = self._confirm_resize(server)
        self.check_vgpus(gpu1=source)
        self.delete(server)
        self.check_vgpus(gpu2=dest)

    def test_evacuate_and_the_source_coming_back(self):
        server = self.start_on('gpu1', self.vgpu_flavor)
        source = self.units(server, 'gpu1')
        self.stop_host('gpu1')
        server = self._evacuate_server(server, expected_host='gpu2')
        dest = self.units(server, 'gpu2')
        self.assertEqual(1, len(dest))
        self.assertEqual(dest, self.xml_units(server, 'gpu2'))
        # The source, down, still has its units; they are undone when
        # it comes back and destroys the evacuated guest.
        self.check_vgpus(skip_hosts=('gpu1',))
        self.restart_host('gpu1')
        self.assertEqual([], self.units(server, 'gpu1'))
        self.check_vgpus()
        self.assertEqual(set(), set(source) & self.made('gpu1'))

    def test_shelve_offload_and_unshelve(self):
        server = self.start_on('gpu1', self.vgpu_flavor)
        before = self.units(server, 'gpu1')
        server = self._shelve_server(server)
        self.assertEqual([], self.units(server))
        self.check_vgpus(gpu1=before)
        server = self._unshelve_server(server)
        host = server['OS-EXT-SRV-ATTR:host']
        after = self.units(server, host)
        self.assertEqual(1, len(after))
        self.assertEqual(after, self.xml_units(server, host))
        self.check_vgpus()
        self.delete(server)
        self.check_vgpus(**{host: after})

    def test_hard_reboot_after_a_host_reboot(self):
        server = self.start_on('gpu1', self.vgpu_flavor)
        units = self.units(server, 'gpu1')
        kernel = self.computes['gpu1'].driver._unit_ops
        # The host rebooted: its vGPUs are gone.
        if self.framework == vgpu.MDEV:
            kernel.reboot()
        else:
            # Every VF comes back without a type, offering every one.
            devices = os.path.join(self.trees['gpu1'], 'bus', 'pci',
                                   'devices')
            with open(os.path.join(devices, FREE_VF, 'nvidia',
                                   'creatable_vgpu_types')) as f:
                creatable = f.read()
            for vf in units:
                nvidia = os.path.join(devices, vf, 'nvidia')
                with open(os.path.join(nvidia, 'current_vgpu_type'),
                          'w') as f:
                    f.write('0\n')
                with open(os.path.join(nvidia, 'creatable_vgpu_types'),
                          'w') as f:
                    f.write(creatable)
        self.assertEqual(set(), set(units) & self.made('gpu1'))
        self._reboot_server(server, hard=True)
        self.assertEqual(units, self.units(server, 'gpu1'))
        self.assertEqual(units, self.xml_units(server, 'gpu1'))
        self.check_vgpus()

    def test_a_running_guests_vgpu_is_not_undone_when_its_allocation_goes(
            self):
        server = self.start_on('gpu1', self.vgpu_flavor)
        units = self.units(server, 'gpu1')
        self.placement.delete('/allocations/%s' % server['id'])
        self.cycle()
        # Kept for the domain, still made, and reserved.
        self.assertEqual(dict.fromkeys(units, server['id']),
                         self.kept('gpu1'))
        self.assertEqual(set(units), set(units) & self.made('gpu1'))
        self.assertEqual(1, self._get_provider_inventory(
            self.gpu_provider('gpu1'))['VGPU']['reserved'])
        # Gone with the domain.
        dom = self.domain('gpu1', server)
        dom.destroy()
        dom.undefine()
        self.cycle()
        self.assertEqual({}, self.kept('gpu1'))
        self.assertEqual(set(), set(units) & self.made('gpu1'))


class TestMdevMoves(MoveScenarios, VgpuMovesTestCase):

    profile = 'mdev-vf-host'
    gpu_options = {'enabled_vgpu_types': ['nvidia-222']}
    gpu = T4
    trait = T4_1B
    framework = vgpu.MDEV


class TestVendorVfioMoves(MoveScenarios, VgpuMovesTestCase):

    profile = 'vgpu-vfio-host'
    gpu_options = {'vfio_vgpu_types': ['%s=1414' % H200]}
    gpu = H200
    trait = H200_1414
    framework = vgpu.VFIO


class TestRemoteMdevMoves(TestMdevMoves):

    remote = True


class TestRemoteVendorVfioMoves(TestVendorVfioMoves):

    remote = True
