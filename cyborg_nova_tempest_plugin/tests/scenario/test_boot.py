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

"""Servers booted with accelerator flavors hold accelerator providers."""

from tempest.common import utils
from tempest.common import waiters
from tempest import config
from tempest.lib import decorators

from cyborg_nova_tempest_plugin.tests import base

CONF = config.CONF


class AcceleratorBootTest(base.BaseAcceleratorScenarioTest):
    """Boot with each configured accelerator flavor; read the allocation.

    A flavor no accelerator in the cloud can satisfy (Placement has no
    allocation candidate for it) skips its test: a cloud without Xilinx
    cards cannot boot ``accel.fpga.xilinx``.
    """

    def boot_and_check(self, option):
        """Boot with ``[accelerators] <option>``; check what it holds.

        :return: the server and the accelerator providers it holds.
        """
        flavor, groups = self.accelerator_flavor(option)
        self.require_candidates(flavor, groups)
        server = self.create_server(flavor=flavor['id'],
                                    wait_until='ACTIVE')
        held = self.check_server_accelerators(server['id'], groups)
        return server, held

    @decorators.idempotent_id('f0a3c6e9-1b4d-4e72-8a5f-9c2e7b0d3a56')
    @utils.services('compute')
    def test_boot_with_fpga_flavor(self):
        """An Intel FPGA flavor gets an FPGA provider of its node."""
        self.boot_and_check('fpga_flavor')

    @decorators.idempotent_id('27b9e4d1-6c0a-4f38-b2e5-8d1a4c7f0e67')
    @utils.services('compute')
    def test_boot_with_xilinx_flavor(self):
        """A Xilinx FPGA flavor gets a Xilinx FPGA provider."""
        self.boot_and_check('xilinx_flavor')

    @decorators.idempotent_id('b6d1f8a3-0e5c-4a94-9f27-3a8c5e1d6b78')
    @utils.services('compute')
    def test_boot_with_gpu_flavor(self):
        """A GPU flavor gets a GPU provider with the product's trait."""
        self.boot_and_check('gpu_flavor')

    @decorators.idempotent_id('4e8a2c5f-9d1b-4b06-a3f8-6e0c2d9a1f89')
    @utils.services('compute')
    def test_boot_with_qat_flavor(self):
        """A QAT flavor gets its units of a QAT provider."""
        self.boot_and_check('qat_flavor')

    @decorators.idempotent_id('c9f5b1e7-3a6d-4c19-8e40-2b7f0a4d8c90')
    @utils.services('compute')
    def test_delete_server_frees_accelerator(self):
        """Deleting the server removes its accelerator allocations."""
        server, held = self.boot_and_check('fpga_flavor')
        self.servers_client.delete_server(server['id'])
        waiters.wait_for_server_termination(self.servers_client,
                                            server['id'])
        allocations = self.admin_placement.list_allocations(
            server['id'])['allocations']
        self.assertEqual({}, allocations)
