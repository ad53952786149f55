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

"""FPGA reprogramming through the conductor-lite, only when unallocated."""

import time

from tempest.common import utils
from tempest import config
from tempest.lib import decorators
from tempest.lib import exceptions as lib_exc

from cyborg_nova_tempest_plugin.common import accelerators as acc
from cyborg_nova_tempest_plugin.tests import base

CONF = config.CONF

FUNCTION_TRAIT_PREFIX = 'CUSTOM_FPGA_FUNCTION_ID_'


@decorators.serial
class FpgaReprogramTest(base.ConductorMixin,
                        base.BaseAcceleratorScenarioTest):
    """``POST /programs`` swaps the function trait of a free FPGA only.

    Serial: a server booted meanwhile could take the FPGA being
    reprogrammed. A reprogrammed FPGA keeps ``[accelerators]
    fpga_image`` afterwards.
    """

    @classmethod
    def skip_checks(cls):
        super(FpgaReprogramTest, cls).skip_checks()
        if not CONF.accelerators.reprogramming:
            raise cls.skipException(base.NO_REPROGRAMMING)
        if not (CONF.accelerators.fpga_image
                and CONF.accelerators.fpga_image_function_trait):
            raise cls.skipException(
                'FPGA reprogramming needs [accelerators] fpga_image and '
                'fpga_image_function_trait')

    def function_traits(self, rp_uuid):
        """The function traits of provider ``rp_uuid``."""
        traits = self.admin_providers.list_resource_provider_traits(
            rp_uuid)['traits']
        return {t for t in traits if t.startswith(FUNCTION_TRAIT_PREFIX)}

    def wait_for_function(self, rp_uuid, trait):
        """Wait until ``trait`` is the provider's only function trait."""
        deadline = time.time() + CONF.compute.build_timeout
        while True:
            found = self.function_traits(rp_uuid)
            if found == {trait}:
                return
            if time.time() > deadline:
                raise lib_exc.TimeoutException(
                    'provider %s has function traits %s, not only %s, '
                    'after %d s' % (rp_uuid, sorted(found), trait,
                                    CONF.compute.build_timeout))
            time.sleep(CONF.compute.build_interval)

    def wait_for_program(self, program_id):
        """The programming job once it is no longer pending or running."""
        deadline = time.time() + CONF.compute.build_timeout
        while True:
            program = self.conductor.show_program(program_id)['program']
            if program['status'] not in ('pending', 'running'):
                return program
            if time.time() > deadline:
                raise lib_exc.TimeoutException(
                    'programming job %s still %s after %d s'
                    % (program_id, program['status'],
                       CONF.compute.build_timeout))
            time.sleep(CONF.compute.build_interval)

    @decorators.idempotent_id('8a1e5c9f-2d7b-4f30-a6c8-4e9b1d3f7a12')
    @utils.services('compute')
    def test_reprogram_free_fpga_swaps_function_trait(self):
        """A free FPGA is programmed; its function trait follows."""
        image_trait = CONF.accelerators.fpga_image_function_trait
        # The image is one vendor's (CUSTOM_FPGA_FUNCTION_ID_<VENDOR>_...):
        # only that vendor's FPGAs (CUSTOM_FPGA_<VENDOR>) can load it.
        vendor_trait = 'CUSTOM_FPGA_' + image_trait[
            len(FUNCTION_TRAIT_PREFIX):].split('_')[0]
        _, found = self.require_accelerator_providers()
        free = []
        for rp_uuid, rp in sorted(found.items()):
            if ('FPGA' not in rp['inventories']
                    or vendor_trait not in rp['traits']):
                continue
            usages = self.admin_providers.list_resource_provider_usages(
                rp_uuid)['usages']
            functions = {t for t in rp['traits']
                         if t.startswith(FUNCTION_TRAIT_PREFIX)}
            if not any(usages.values()) and image_trait not in functions:
                free.append(rp)
        if not free:
            self.skipTest('no free %s FPGA that does not already run '
                          '[accelerators] fpga_image' % vendor_trait)
        rp = free[0]
        host = rp['name'].split(acc.NAME_INFIX)[0]
        program = self.conductor.create_program(
            host, rp['uuid'], CONF.accelerators.fpga_image)['program']
        self.assertEqual(host, program['host'])
        self.wait_for_function(rp['uuid'], image_trait)
        after = self.provider_details(rp)
        others = {t for t in rp['traits']
                  if not t.startswith(FUNCTION_TRAIT_PREFIX)}
        self.assertEqual(set(), others - after['traits'],
                         'traits other than the function lost')
        self.assertIn(acc.OWNER_TRAIT, after['traits'])

    @decorators.idempotent_id('e7c3a9d1-5f2b-4e84-9b06-1d8f4a2c6e23')
    @utils.services('compute')
    def test_reprogram_allocated_fpga_is_refused(self):
        """An FPGA a server holds is not reprogrammed.

        The agent proves the device unallocated once it is fenced, in the
        background: the job is refused then (or at once, 409, when the
        device is already known to be held).
        """
        flavor, groups = self.accelerator_flavor('fpga_flavor')
        self.require_candidates(flavor, groups)
        server = self.create_server(flavor=flavor['id'],
                                    wait_until='ACTIVE')
        held = self.check_server_accelerators(server['id'], groups)
        rp_uuid = sorted(u for u, rp in held.items()
                         if 'FPGA' in rp['inventories'])[0]
        before = self.function_traits(rp_uuid)
        host = held[rp_uuid]['name'].split(acc.NAME_INFIX)[0]
        try:
            program = self.conductor.create_program(
                host, rp_uuid, CONF.accelerators.fpga_image)['program']
        except lib_exc.Conflict:
            pass
        else:
            program = self.wait_for_program(program['id'])
            self.assertEqual('refused', program['status'], program)
        self.assertEqual(before, self.function_traits(rp_uuid))
        server = self.servers_client.show_server(server['id'])['server']
        self.assertEqual('ACTIVE', server['status'])
