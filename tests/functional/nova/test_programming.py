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

"""FPGA reprogramming as Nova sees it: scheduling on the new function.

Inside Nova's functional harness (real API, conductor, scheduler and
Placement; the compute on the real LibvirtDriver over Nova's
fakelibvirt): the compute reports fpga-host's cards through the ``fake``
accelerator driver, whose programming writes the loaded function into
its sysfs tree as a card would show it. The bitstream library is real
files with GBS headers and a manifest. Moves are in
test_programming_moves.py.
"""

import json
import os

from nova.scheduler.client import report
from nova.tests.functional.api import client as api_client
from oslo_messaging.notify import _impl_test

from cyborg_drivers import discovery
from cyborg_drivers import loader
from cyborg_nova import programming
from cyborg_nova import store as state_store
from cyborg_nova.virt import extension
from tests.functional.nova import base
from tests.unit.programming import fakes

HOST = 'fpga1'
PAC0, PAC1 = '0000:5e:00.0', '0000:af:00.0'
REGION = 'CUSTOM_FPGA_REGION_INTEL_9346116DA52D5CA8B06AA9A389EF7C8D'


def function_trait(function_id):
    return 'CUSTOM_FPGA_FUNCTION_ID_INTEL_' + fakes.hexid(function_id).upper()


NLB0, DMA = function_trait(fakes.NLB0), function_trait(fakes.DMA_AFU)


class ProgrammingTestCase(base.LibvirtAcceleratorTestCase):

    enabled_drivers = ['fake']

    def setUp(self):
        super().setUp()
        self.library = os.path.join(self.workdir, 'bitstreams')
        os.makedirs(self.library)
        fakes.library(self.library)
        with open(os.path.join(self.library, 'manifest.json'), 'w') as f:
            json.dump({'bitstreams': {
                'dma': {'file': 'intel/dma.gbs',
                        'description': 'DMA test AFU'},
                'nlb3': {'file': 'intel/nlb3.gbs'},
                'otherfim': {'file': 'intel/other-fim.gbs'}}}, f)
        self.flags(bitstream_dir=self.library, group='cyborg_nova')
        self.build_host(HOST, {'name': 'no-pci-cards', 'devices': []})
        self.configure_host(HOST)
        self.fake_tree = os.path.join(self.workdir, HOST, 'fake-sys')
        self.flags(host_profile='fpga-host', tree_path=self.fake_tree,
                   group='cyborg_fake')
        self.compute = self.start_compute(hostname=HOST)
        self.rps = {a: rp['uuid']
                    for a, rp in self.accelerator_providers(HOST).items()}

    def loaded(self, address):
        """The function the fake card shows in its sysfs tree."""
        found = discovery.Discoverer(
            loader.load(base.CONF, ['intel_fpga', 'xilinx_fpga']),
            self.fake_tree).discover().by_address()
        return found[address].fpga_regions[0].function_id

    def traits(self, address):
        return set(self._get_provider_traits(self.rps[address]))

    def reserved(self, address):
        return self._get_provider_inventory(self.rps[address])[
            'FPGA']['reserved']


class TestScheduleAfterReprogramming(ProgrammingTestCase):

    def test_new_function_schedules_old_does_not(self):
        self.assertIn(NLB0, self.traits(PAC0))
        self.assertNotIn(DMA, self.traits(PAC0) | self.traits(PAC1))
        programmer = programming.Programmer(
            base.CONF, state_store.StateStore(
                base.CONF.cyborg_nova.state_path),
            extension.ReportClientAdapter(report.report_client_singleton()),
            loader.load(base.CONF, ['fake']),
            base.CONF.cyborg_nova.sysfs_root)
        self.addCleanup(programmer.close)
        job = programmer.program(HOST, PAC0, 'dma')
        self.assertEqual(programming.SUCCEEDED, job.status, job.error)
        self.assertEqual(fakes.hexid(fakes.DMA_AFU), self.loaded(PAC0))
        # Nova's own update agrees with what programming wrote.
        self._run_periodics()
        self.assertIn(DMA, self.traits(PAC0))
        self.assertNotIn(NLB0, self.traits(PAC0))
        self.assertEqual(0, self.reserved(PAC0))

        new = self.flavor({'resources:FPGA': '1',
                           'trait:%s' % DMA: 'required'}, name='dma')
        server = self._create_server(flavor_id=new, networks='none')
        self.assertEqual({'FPGA': 1},
                         self.server_allocations(server)[self.rps[PAC0]])

        old = self.flavor({'resources:FPGA': '1',
                           'trait:%s' % NLB0: 'required'}, name='nlb0')
        failed = self._create_server(flavor_id=old, networks='none',
                                     expected_state='ERROR')
        self.assertIn('No valid host', failed['fault']['message'])


class TestProgramOnSpawn(ProgrammingTestCase):

    def set_specs(self, flavor_id, specs):
        # Nova validates extra specs from microversion 2.86 on.
        before, self.admin_api.microversion = (self.admin_api.microversion,
                                               '2.86')
        try:
            return self.admin_api.post_extra_spec(
                flavor_id, {'extra_specs': specs})
        finally:
            self.admin_api.microversion = before

    def test_boots_on_a_free_fpga_programmed_with_the_bitstream(self):
        _impl_test.reset()
        flavor_id = self.flavor({}, name='fpga-dma')
        self.set_specs(flavor_id, {
            'resources:FPGA': '1', 'trait:%s' % REGION: 'required',
            'cyborg_nova:bitstream': 'dma'})
        server = self._create_server(flavor_id=flavor_id, networks='none')
        held = [a for a, rp in self.rps.items()
                if rp in self.server_allocations(server)]
        self.assertEqual(1, len(held))
        address = held[0]
        self.assertIn(address, (PAC0, PAC1))
        self.assertEqual(fakes.hexid(fakes.DMA_AFU), self.loaded(address))
        self.assertIn(DMA, self.traits(address))
        # Unfenced, held by the instance only.
        self.assertEqual(0, self.reserved(address))
        jobs = programming.Journal(state_store.StateStore(
            base.CONF.cyborg_nova.state_path)).jobs(HOST, address, 5)
        self.assertEqual([(programming.SUCCEEDED, server['id'])],
                         [(j.status, j.consumer) for j in jobs])
        # nova-compute announced it (the harness's oslo.messaging driver
        # is "test").
        programmed = [m for _, m, _, _ in _impl_test.NOTIFICATIONS
                      if m['event_type'] == 'accelerator.programmed']
        self.assertEqual(['cyborg-nova-compute.%s' % HOST],
                         [m['publisher_id'] for m in programmed])
        data = programmed[0]['payload']['cyborg_nova_object.data']
        self.assertEqual((address, jobs[0].id),
                         (data['address'], data['programming']['job']))
        # A second server with the same flavor takes the other PAC,
        # programmed too; a third finds no free FPGA of the region.
        second = self._create_server(flavor_id=flavor_id, networks='none')
        other = ({PAC0, PAC1} - {address}).pop()
        self.assertIn(self.rps[other], self.server_allocations(second))
        self.assertEqual(fakes.hexid(fakes.DMA_AFU), self.loaded(other))
        self._create_server(flavor_id=flavor_id, networks='none',
                            expected_state='ERROR')

    def test_a_bitstream_that_does_not_fit_fails_the_build(self):
        # Built for another FIM: refused before any FPGA is touched, so
        # the build fails (and is rescheduled, here to nowhere).
        flavor_id = self.flavor({}, name='fpga-other-fim')
        self.set_specs(flavor_id, {
            'resources:FPGA': '1', 'trait:%s' % REGION: 'required',
            'cyborg_nova:bitstream': 'otherfim'})
        self._create_server(flavor_id=flavor_id, networks='none',
                            expected_state='ERROR')
        for address in (PAC0, PAC1):
            self.assertEqual(0, self.reserved(address))
            self.assertNotIn(programming.FAILED_TRAIT, self.traits(address))
        self.assertEqual(fakes.hexid(fakes.NLB0), self.loaded(PAC0))
        self.assertEqual(fakes.hexid(fakes.NLB3), self.loaded(PAC1))
        # Nothing is left allocated once the build has failed.
        for address in (PAC0, PAC1):
            self.assertEqual({}, self.placement.get(
                '/resource_providers/%s/allocations' % self.rps[address]
            ).body['allocations'])

    def test_nova_api_rejects_a_misspelled_key(self):
        flavor_id = self.flavor({}, name='typo')
        exc = self.assertRaises(
            api_client.OpenStackApiException, self.set_specs, flavor_id,
            {'cyborg_nova:bitstrem': 'dma'})
        self.assertEqual(400, exc.response.status_code)
        self.assertIn("extra spec 'cyborg_nova:bitstrem' does not appear "
                      "to be a valid extra spec", exc.response.text)

    def test_nova_api_rejects_an_unknown_bitstream(self):
        flavor_id = self.flavor({}, name='unknown')
        exc = self.assertRaises(
            api_client.OpenStackApiException, self.set_specs, flavor_id,
            {'cyborg_nova:bitstream': 'nlb9'})
        self.assertEqual(400, exc.response.status_code)
        self.assertIn("'nlb9' is not a bitstream of the library",
                      exc.response.text)
        self.assertIn('entries: dma, nlb3, otherfim', exc.response.text)
        # A value that is not even a name.
        exc = self.assertRaises(
            api_client.OpenStackApiException, self.set_specs, flavor_id,
            {'cyborg_nova:bitstream': '../etc/passwd'})
        self.assertEqual(400, exc.response.status_code)
        # The flavor kept no bad spec.
        self.assertEqual({}, self.admin_api.api_get(
            '/flavors/%s/os-extra_specs' % flavor_id).body['extra_specs'])
