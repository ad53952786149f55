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

"""Nova loads cyborg-nova's drivers exactly as nova.conf names them."""

import os

import nova.virt
from nova.virt import driver as nova_driver
from nova.virt import fake as nova_fake
from nova.virt.libvirt import driver as libvirt_driver

from cyborg_nova.virt import extension
from tests.functional.nova import base


class TestLoadComputeDriver(base.LibvirtAcceleratorTestCase):
    """Through nova.virt.driver.load_compute_driver, from the install."""

    def test_shim_is_installed_inside_nova(self):
        import nova.virt.cyborg_nova as shim
        # A real install puts the one module into Nova's own package
        # (an editable install would not).
        self.assertEqual(os.path.dirname(nova.virt.__file__),
                         os.path.dirname(shim.__file__))

    def test_fake_driver(self):
        drv = nova_driver.load_compute_driver(nova_fake.FakeVirtAPI(),
                                              'cyborg_nova.FakeDriver')
        self.assertIsInstance(drv, extension.AcceleratorProviderMixin)
        self.assertIsInstance(drv, nova_fake.FakeDriver)

    def test_fake_driver_without_fake_nodes(self):
        # The restartable one: its node's uuid is the host's identity, as
        # a real driver's is.
        drv = nova_driver.load_compute_driver(
            nova_fake.FakeVirtAPI(), 'cyborg_nova.FakeDriverWithoutFakeNodes')
        self.assertIsInstance(drv, extension.AcceleratorProviderMixin)
        self.assertIsInstance(drv, nova_fake.FakeDriverWithoutFakeNodes)

    def test_libvirt_driver(self):
        drv = nova_driver.load_compute_driver(nova_fake.FakeVirtAPI(),
                                              'cyborg_nova.LibvirtDriver')
        self.assertIsInstance(drv, extension.AcceleratorProviderMixin)
        self.assertIsInstance(drv, libvirt_driver.LibvirtDriver)

    def test_unknown_driver_name(self):
        import nova.virt.cyborg_nova as shim
        self.assertRaises(AttributeError, getattr, shim, 'HyperVDriver')


class TestLibvirtCompute(base.LibvirtAcceleratorTestCase):
    """The production driver on Nova's fakelibvirt reports accelerators."""

    def test_accelerators_beside_libvirt_resources(self):
        self.start_accelerator_compute('fpga1', 'fpga-host')
        rps = self.accelerator_providers('fpga1')
        self.assertEqual(['0000:5e:00.0', '0000:af:00.0', '0000:d8:00.0'],
                         sorted(rps))
        root = self.compute_rp_uuids['fpga1']
        self.assertIn('VCPU', self._get_provider_inventory(root))
        self.assertIn('COMPUTE_NODE', self._get_provider_traits(root))
        flavor = self.flavor({'resources:FPGA': '1',
                              'trait:CUSTOM_FPGA_XILINX': 'required'})
        server = self._create_server(flavor_id=flavor, networks='none')
        self.assertEqual({'FPGA': 1}, self.server_allocations(server)[
            rps['0000:d8:00.0']['uuid']])
