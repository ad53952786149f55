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

"""vGPU servers: mdev types and NVIDIA's vendor-specific VFIO VFs.

The real LibvirtDriver on Nova's fakelibvirt, its sysfs writes made by a
real privsep daemon (started from the virtualenv's ``privsep-helper`` with
a config naming the host's tree), the kernel's answer to them played by
:class:`tests.vgpu_kernel.VgpuKernel`. Every XML Nova defines is captured
and its ``<hostdev>`` elements compared with what Placement allocated.
"""

import os
import sys
from xml.etree import ElementTree as ET

import fixtures
import nova.conf
from nova import context as nova_context
from nova import objects
from oslo_privsep import daemon as privsep_daemon

from cyborg_drivers.nvidia import vgpu
from cyborg_nova import assignments
from cyborg_nova import store as state_store
from cyborg_nova import unit_work
import privsep
from tests.functional.nova import base
from tests.functional.nova.moves import capture_xmls
from tests import vgpu_kernel

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
HELPER = os.path.join(os.path.dirname(sys.executable), 'privsep-helper')
# Before Nova's harness replaces it with a channel that refuses to start
# any helper: these tests start a real one on purpose.
REAL_CHANNEL = privsep_daemon.RootwrapClientChannel
T4 = '0000:b0:00.0'
T4_1B = 'CUSTOM_NVIDIA_1EB8_VGPU_NVIDIA_222_GRID_T4_1B'
H200 = '0000:41:00.0'
# The id trait: reported whether or not some VF still names the type.
H200_1414 = 'CUSTOM_NVIDIA_2335_VGPU_1414'
RTX = '0000:c1:00.0'


def devices(xml):
    """(kind, what, managed) of each ``<hostdev>`` of a domain XML."""
    found = []
    for dev in ET.fromstring(xml).iter('hostdev'):
        addr = dev.find('source/address')
        if dev.get('type') == 'mdev':
            found.append(('mdev', addr.get('uuid'), dev.get('model')))
        else:
            found.append(('pci', '%04x:%02x:%02x.%x' % tuple(
                int(addr.get(k), 16)
                for k in ('domain', 'bus', 'slot', 'function')),
                dev.get('managed')))
    return found


class VgpuTestCase(base.LibvirtAcceleratorTestCase):

    host = 'gpu1'
    profile = None

    def setUp(self):
        super().setUp()
        self.xmls = capture_xmls(self)

    def start_host(self, root=None, **gpu_options):
        self.flags(group='cyborg_nvidia_gpu', **gpu_options)
        if root is None:
            root = self.build_host(self.host, self.profile)
        self.start_privsep(root)
        self.configure_host(self.host)
        self.start_compute(hostname=self.host)
        self.compute = self.computes[self.host]
        self.kernel = vgpu_kernel.VgpuKernel(root, unit_work.PrivsepOps())
        self.compute.driver._unit_ops = self.kernel
        self.root = root
        return self.accelerator_providers(self.host)

    def start_privsep(self, root):
        """A real sysfs_admin daemon whose own config names ``root``."""
        conf = os.path.join(self.workdir, 'privsep.conf')
        with open(conf, 'w') as f:
            f.write('[cyborg_nova_privsep]\nsysfs_root = %s\n' % root)
            if os.geteuid() != 0:
                f.write('[%s]\ncapabilities =\n'
                        % privsep.sysfs_admin.cfg_section)
        self.flags(helper_command='env PYTHONPATH=%s %s --config-file %s'
                   % (TOP, HELPER, conf),
                   group=privsep.sysfs_admin.cfg_section)
        # The helper's stderr goes to a file: oslo.privsep reads it in a
        # thread whose blocking read, in this harness's eventlet, would
        # hold every greenthread until the daemon writes a line.
        log = open(os.path.join(self.workdir, 'privsep.log'), 'ab')
        self.addCleanup(log.close)
        self.useFixture(fixtures.MonkeyPatch(
            'oslo_privsep.daemon._fd_logger', lambda *args, **kw: log))
        self.useFixture(fixtures.MonkeyPatch(
            'oslo_privsep.daemon.RootwrapClientChannel', REAL_CHANNEL))
        self.addCleanup(privsep.sysfs_admin.stop)

    def store(self):
        return assignments.Assignments(state_store.StateStore(
            os.path.join(self.workdir, self.host, 'state.sqlite')))

    def read(self, *parts):
        with open(os.path.join(self.root, 'bus', 'pci', 'devices',
                               *parts)) as f:
            return f.read().strip()


class TestMdevVgpu(VgpuTestCase):

    profile = 'mdev-vf-host'

    def test_spawn_reboot_and_delete_of_an_mdev_vgpu_server(self):
        rps = self.start_host(enabled_vgpu_types=['nvidia-222'])
        t4 = rps[T4]['uuid']
        flavor = self.flavor({'resources:VGPU': '1',
                              'trait:%s' % T4_1B: 'required'})
        server = self._create_server(flavor_id=flavor, networks='none')
        self.assertEqual({'VGPU': 1}, self.server_allocations(server)[t4])
        mdev = vgpu.mdev_uuid(T4, 'nvidia-222', 0)
        # The mdev of the allocated type, created through the daemon on
        # the allocated parent, is the guest's one vGPU.
        self.assertEqual([('mdev', mdev, 'vfio-pci')],
                         devices(self.xmls[-1]))
        self.assertEqual([('devices/pci0000:af/0000:af:00.0/0000:b0:00.0/'
                           'mdev_supported_types/nvidia-222/create', mdev)],
                         self.kernel.writes)
        self.assertEqual((T4, 'nvidia-222'),
                         vgpu.mdev_parent(self.root, mdev))
        self.assertEqual({t4: [mdev]},
                         self.store().of_consumer(server['id']))

        # Hard reboot: the same mdev, once (Nova hands the old
        # definition's mdevs back in), nothing created.
        self._reboot_server(server, hard=True)
        self.assertEqual([('mdev', mdev, 'vfio-pci')],
                         devices(self.xmls[-1]))
        self.assertEqual(1, len(self.kernel.writes))

        # The host rebooted: its mdevs are gone; resuming the guest makes
        # it again under the name the guest has.
        # The mdev made before the compute started is a unit, never
        # given first and never touched.
        self.assertEqual((T4, 'nvidia-222'), vgpu.mdev_parent(
            self.root, '8f6b3a52-0a55-4c9e-9d0f-5c1e6f2f6a10'))
        ctxt = nova_context.get_admin_context()
        instance = objects.Instance.get_by_uuid(ctxt, server['id'])
        self.compute.driver._host.get_guest(instance)._domain.destroy()
        self.kernel.reboot()
        self.assertIsNone(vgpu.mdev_parent(self.root, mdev))
        self.compute.driver.resume_state_on_host_boot(ctxt, instance, [],
                                                      None)
        self.assertEqual([('mdev', mdev, 'vfio-pci')],
                         devices(self.xmls[-1]))
        self.assertEqual((T4, 'nvidia-222'),
                         vgpu.mdev_parent(self.root, mdev))

        # A second server gets another mdev, never the same one.
        other = self._create_server(flavor_id=flavor, networks='none')
        second = vgpu.mdev_uuid(T4, 'nvidia-222', 1)
        self.assertEqual([('mdev', second, 'vfio-pci')],
                         devices(self.xmls[-1]))

        # Deleting the server removes its mdev (the daemon wrote 1 to its
        # remove) and frees its unit.
        del self.kernel.writes[:]
        self._delete_server(server)
        self.assertEqual([('%s/remove' % mdev, '1')],
                         [(p.rsplit('/', 2)[1] + '/remove', v)
                          for p, v in self.kernel.writes])
        self.assertIsNone(vgpu.mdev_parent(self.root, mdev))
        self.assertEqual({}, self.store().of_consumer(server['id']))
        self.assertEqual((T4, 'nvidia-222'),
                         vgpu.mdev_parent(self.root, second))
        self._delete_server(other)
        self.assertIsNone(vgpu.mdev_parent(self.root, second))

    def test_mdev_on_a_vf(self):
        rps = self.start_host(enabled_vgpu_types=['nvidia-474'])
        flavor = self.flavor({
            'resources:VGPU': '2',
            'trait:CUSTOM_NVIDIA_20F1_VGPU_NVIDIA_474_GRID_A100_10C':
                'required'})
        server = self._create_server(flavor_id=flavor, networks='none')
        a100 = rps['0000:3b:00.0']['uuid']
        self.assertEqual({'VGPU': 2}, self.server_allocations(server)[a100])
        # One mdev on each of the first two VFs.
        expected = [vgpu.mdev_uuid('0000:3b:00.%d' % f, 'nvidia-474', 0)
                    for f in (4, 5)]
        self.assertEqual(sorted(expected),
                         sorted(u for _, u, _ in devices(self.xmls[-1])))
        self.assertEqual(['0000:3b:00.4', '0000:3b:00.5'],
                         sorted(vgpu.mdev_parent(self.root, m)[0]
                                for m in expected))
        self._delete_server(server)
        self.assertEqual([None, None], [vgpu.mdev_parent(self.root, m)
                                        for m in expected])

    def test_a_gpu_nova_takes_too_is_held_back(self):
        # Nova's own vGPU support is given the T4's type as well: Nova's
        # libvirt driver registers and reads these options itself.
        self.flags(enabled_mdev_types=['nvidia-222', 'nvidia-474'],
                   group='devices')
        nova.conf.devices.register_dynamic_opts(nova.conf.CONF)
        self.flags(device_addresses=['0000:3b:00.6'],
                   group='mdev_nvidia-474')
        rps = self.start_host(enabled_vgpu_types=['nvidia-222'])
        inventory = self._get_provider_inventory(rps[T4]['uuid'])['VGPU']
        self.assertEqual((16, 16), (inventory['total'],
                                    inventory['reserved']))
        self.assertIn('Accelerator 0000:b0:00.0 is held back (fully '
                      "reserved): Nova's own vGPU support uses this GPU "
                      'too: [devices] enabled_mdev_types = nvidia-222 (no '
                      'device_addresses) gives 0000:b0:00.0 mdev type '
                      'nvidia-222.', self.stdlog.logger.output)
        # The A100 has a VF Nova makes vGPUs on: said too.
        self.assertIn("Nova's own vGPU support uses this GPU too: "
                      '[mdev_nvidia-474] device_addresses gives '
                      '0000:3b:00.6 mdev type nvidia-474.',
                      self.stdlog.logger.output)
        # No guest gets the T4's vGPUs from cyborg-nova meanwhile.
        flavor = self.flavor({'resources:VGPU': '1',
                              'trait:%s' % T4_1B: 'required'})
        server = self._create_server(flavor_id=flavor, networks='none',
                                     expected_state='ERROR')
        self.assertIn('No valid host', server['fault']['message'])
        self.assertEqual([], self.kernel.writes)


class TestVendorVfioVgpu(VgpuTestCase):

    profile = 'vgpu-vfio-host'

    def test_spawn_and_delete_of_vendor_vfio_vgpu_servers(self):
        rps = self.start_host(vfio_vgpu_types=['%s=1414' % H200])
        h200 = rps[H200]['uuid']
        self.assertEqual(8, self._get_provider_inventory(h200)['VGPU'][
            'total'])
        flavor = self.flavor({'resources:VGPU': '1',
                              'trait:%s' % H200_1414: 'required'})
        first = self._create_server(flavor_id=flavor, networks='none')
        # VF 0 held 1414 when the compute started: it is given as it is,
        # unmanaged (it keeps NVIDIA's driver, its VFIO driver).
        self.assertEqual([('pci', '0000:41:00.4', 'no')],
                         devices(self.xmls[-1]))
        self.assertEqual([], self.kernel.writes)

        second = self._create_server(flavor_id=flavor, networks='none')
        self.assertEqual([('pci', '0000:41:00.5', 'no')],
                         devices(self.xmls[-1]))
        # The daemon wrote the type to the free VF.
        self.assertEqual(['1414'], [v for _, v in self.kernel.writes])
        self.assertEqual('1414', self.read('0000:41:00.5', 'nvidia',
                                           'current_vgpu_type'))
        self.assertEqual({h200: ['0000:41:00.5']},
                         self.store().of_consumer(second['id']))

        # Deleting a server clears its VF's type once the VF is free.
        self._delete_server(second)
        self.assertEqual('0', self.read('0000:41:00.5', 'nvidia',
                                        'current_vgpu_type'))
        self.assertEqual('1414', self.read('0000:41:00.4', 'nvidia',
                                           'current_vgpu_type'))
        self._delete_server(first)
        self.assertEqual('0', self.read('0000:41:00.4', 'nvidia',
                                        'current_vgpu_type'))
        self.assertEqual({}, self.store().of_consumer(first['id']))

    def test_types_are_told_apart_by_their_traits(self):
        rps = self.start_host(vfio_vgpu_types=['%s=1520' % RTX])
        traits = self._get_provider_traits(rps[RTX]['uuid'])
        self.assertIn('CUSTOM_NVIDIA_2BB5_VGPU_1520', traits)
        self.assertIn('CUSTOM_NVIDIA_2BB5_VGPU_1520_NVIDIA_RTX_PRO_6000_'
                      'BLACKWELL_DC_1_3Q', traits)
        # A flavor for another type of the same GPU finds no host.
        other = self.flavor({
            'resources:VGPU': '1',
            'trait:CUSTOM_NVIDIA_2BB5_VGPU_1536_NVIDIA_RTX_PRO_6000_'
            'BLACKWELL_DC_2_48C': 'required'})
        self._create_server(flavor_id=other, networks='none',
                            expected_state='ERROR')
        other = self.flavor({'resources:VGPU': '1',
                             'trait:CUSTOM_NVIDIA_2BB5_VGPU_1536': 'required'})
        server = self._create_server(flavor_id=other, networks='none',
                                     expected_state='ERROR')
        self.assertIn('No valid host', server['fault']['message'])
        self.assertEqual([], self.kernel.writes)

    def test_a_type_the_vf_cannot_create_fails_the_build_cleanly(self):
        rps = self.start_host(vfio_vgpu_types=['%s=1414' % H200])
        h200 = rps[H200]['uuid']
        flavor = self.flavor({'resources:VGPU': '1',
                              'trait:%s' % H200_1414: 'required'})
        first = self._create_server(flavor_id=flavor, networks='none')
        path = os.path.join(self.root, 'bus', 'pci', 'devices',
                            '0000:41:00.5', 'nvidia', 'creatable_vgpu_types')

        def capacity_gone(vf, type_id):
            # Between the build's read and its write the VF stopped
            # offering the type (its capacity went to another use).
            with open(path, 'w') as f:
                f.write('ID    : vGPU Name\n1428  : NVIDIA H200X-141C\n')
        self.kernel.before_set = capacity_gone
        server = self._create_server(flavor_id=flavor, networks='none',
                                     expected_state='ERROR')
        # Refused by the daemon, nothing written; the build failed and
        # gave back its allocation and its unit.
        self.assertEqual('0', self.read('0000:41:00.5', 'nvidia',
                                        'current_vgpu_type'))
        self.assertEqual([], self.kernel.writes)
        self.assertEqual({}, self.server_allocations(server))
        self.assertEqual({}, self.store().of_consumer(server['id']))
        self.assertIn('vGPU type 1414 cannot be created on VF 0000:41:00.5 '
                      'now (creatable: 1428)', self.stdlog.logger.output)
        # The first server kept its VF and its type.
        self.assertEqual({h200: ['0000:41:00.4']},
                         self.store().of_consumer(first['id']))
        self.assertEqual('1414', self.read('0000:41:00.4', 'nvidia',
                                           'current_vgpu_type'))

    def test_a_unit_not_made_at_hard_reboot_stays_in_the_guest(self):
        self.start_host(vfio_vgpu_types=['%s=1414' % H200])
        flavor = self.flavor({'resources:VGPU': '1',
                              'trait:%s' % H200_1414: 'required'})
        server = self._create_server(flavor_id=flavor, networks='none')
        vf = '0000:41:00.4'
        # The VF lost its type (as across a host reboot) and, between
        # the reboot's read and its write, its capacity to another use.
        nvidia = os.path.join(self.root, 'bus', 'pci', 'devices', vf,
                              'nvidia')
        with open(os.path.join(nvidia, 'current_vgpu_type'), 'w') as f:
            f.write('0\n')
        creatable = os.path.join(nvidia, 'creatable_vgpu_types')
        with open(creatable, 'w') as f:
            f.write('ID    : vGPU Name\n1414  : NVIDIA H200X-1-18C\n')

        def capacity_gone(vf, type_id):
            with open(creatable, 'w') as f:
                f.write('ID    : vGPU Name\n1428  : NVIDIA H200X-141C\n')
        self.kernel.before_set = capacity_gone
        self._reboot_server(server, hard=True)
        # Logged, and the guest is defined with its recorded unit all
        # the same: not without it.
        self.assertIn('cyborg-nova: instance %s: accelerator units could '
                      'not be given: accelerator %s: vGPU type 1414 on VF '
                      '%s' % (server['id'], H200, vf),
                      self.stdlog.logger.output)
        self.assertIn('the guest is defined with the units recorded for '
                      'it here, as they are', self.stdlog.logger.output)
        self.assertEqual([('pci', vf, 'no')], devices(self.xmls[-1]))
        self.assertEqual([], self.kernel.writes)
        self.assertEqual({self.accelerator_providers(self.host)[H200][
            'uuid']: [vf]}, self.store().of_consumer(server['id']))

    def test_a_gpu_whose_every_vf_holds_the_type(self):
        # As NVIDIA's vGPU device manager leaves a GPU: every VF made a
        # vGPU beforehand, so no creatable list names the type any more.
        root = self.build_host(self.host, self.profile)
        for n in range(8):
            vf = '0000:41:%02x.%d' % ((4 + n) // 8, (4 + n) % 8)
            nvidia = os.path.join(root, 'bus', 'pci', 'devices', vf,
                                  'nvidia')
            with open(os.path.join(nvidia, 'current_vgpu_type'), 'w') as f:
                f.write('1414\n')
            with open(os.path.join(nvidia, 'creatable_vgpu_types'),
                      'w') as f:
                f.write('ID    : vGPU Name\n')
        rps = self.start_host(vfio_vgpu_types=['%s=1414' % H200],
                              root=root)
        h200 = rps[H200]['uuid']
        self.assertIn(H200_1414, self._get_provider_traits(h200))
        inventory = self._get_provider_inventory(h200)['VGPU']
        self.assertEqual((8, 0), (inventory['total'], inventory['reserved']))
        flavor = self.flavor({'resources:VGPU': '1',
                              'trait:%s' % H200_1414: 'required'})
        server = self._create_server(flavor_id=flavor, networks='none')
        # Adopted as they are: nothing written.
        self.assertEqual([('pci', '0000:41:00.4', 'no')],
                         devices(self.xmls[-1]))
        self.assertEqual([], self.kernel.writes)
        self._delete_server(server)
        self.assertEqual('0', self.read('0000:41:00.4', 'nvidia',
                                        'current_vgpu_type'))
