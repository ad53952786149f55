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

"""Flavors naming a bitstream through every move, on the libvirt driver.

Two computes on Nova's real ``LibvirtDriver`` (fakelibvirt), each with
the ``fake`` accelerator driver over a tree of its own built from
``fpga-host`` (two PACs at ``5e:00.0`` and ``af:00.0``, an Alveo U250 at
``d8:00.0``): the same addresses on both hosts, so programming the wrong
host's provider shows as a neighbour's card reprogrammed. The libvirt
driver does not call ``spawn`` for a cold migration or a resize (Nova's
FakeDriver does, which is why these tests are not on it).
"""

import json
import os

from cyborg_drivers import discovery
from cyborg_drivers import loader
from cyborg_nova import programming
from cyborg_nova import store as state_store
from tests.functional.nova import base
from tests.functional.nova import moves
from tests.unit.programming import fakes

PAC0, PAC1, ALVEO = '0000:5e:00.0', '0000:af:00.0', '0000:d8:00.0'
REGION = 'CUSTOM_FPGA_REGION_INTEL_9346116DA52D5CA8B06AA9A389EF7C8D'
NLB0 = 'CUSTOM_FPGA_FUNCTION_ID_INTEL_' + fakes.hexid(fakes.NLB0).upper()
NLB3 = 'CUSTOM_FPGA_FUNCTION_ID_INTEL_' + fakes.hexid(fakes.NLB3).upper()


class ProgrammingMovesTestCase(moves.MovesTestCase):

    hosts = ('fpga1', 'fpga2')
    enabled_drivers = ['fake']
    # The host's own bus has no cards: the fake driver reports fpga-host.
    profile = {'name': 'no-pci-cards', 'devices': []}

    def setUp(self):
        self.library = None
        super().setUp()

    def configure_host(self, host):
        super().configure_host(host)
        if self.library is None:
            self.library = os.path.join(self.workdir, 'bitstreams')
            os.makedirs(self.library)
            fakes.library(self.library)
            with open(os.path.join(self.library, 'manifest.json'),
                      'w') as f:
                json.dump({'bitstreams': {
                    'dma': {'file': 'intel/dma.gbs'},
                    'nlb3': {'file': 'intel/nlb3.gbs'}}}, f)
            self.flags(bitstream_dir=self.library, group='cyborg_nova')
        # Each compute's fake driver binds the tree it first reads.
        self.flags(host_profile='fpga-host',
                   tree_path=self.fake_tree(host), group='cyborg_fake')

    def fake_tree(self, host):
        return os.path.join(self.workdir, host, 'fake-sys')

    # -- what the hosts show --------------------------------------------------

    def loaded(self, host, address):
        """The function id the card at ``address`` of ``host`` shows."""
        found = discovery.Discoverer(
            loader.load(base.CONF, ['intel_fpga', 'xilinx_fpga']),
            self.fake_tree(host)).discover().by_address()
        return found[address].fpga_regions[0].function_id

    def jobs(self, host):
        """(address, status, consumer) of every programming job of host."""
        journal = programming.Journal(state_store.StateStore(
            os.path.join(self.workdir, host, 'state.sqlite')))
        return sorted((j.address, j.status, j.consumer)
                      for address in (PAC0, PAC1, ALVEO)
                      for j in journal.jobs(host, address, 10))

    def rp(self, host, address):
        return self.accelerator_providers(host)[address]['uuid']

    def holds(self, server, host):
        """The addresses of ``host`` whose providers ``server`` holds."""
        allocations = self.server_allocations(server)
        return sorted(a for a, rp in self.accelerator_providers(
            host).items() if rp['uuid'] in allocations)

    # -- flavors and servers -------------------------------------------------

    def set_specs(self, flavor_id, specs):
        # Nova validates extra specs from microversion 2.86 on.
        before, self.admin_api.microversion = (self.admin_api.microversion,
                                               '2.86')
        try:
            self.admin_api.post_extra_spec(flavor_id,
                                           {'extra_specs': specs})
        finally:
            self.admin_api.microversion = before
        return flavor_id

    def bitstream_flavor(self, name, bitstream, region=True):
        specs = {'resources:FPGA': '1', 'cyborg_nova:bitstream': bitstream}
        if region:
            specs['trait:%s' % REGION] = 'required'
        return self.set_specs(self.flavor({}, name=name), specs)

    def card_flavor(self, function_trait):
        """A flavor landing on the PAC that has ``function_trait``."""
        return self.flavor({'resources:FPGA': '1',
                            'trait:%s' % function_trait: 'required'},
                           name=function_trait[-8:].lower())

    def move(self, server, host, flavor=None):
        """Cold migrate (or resize to ``flavor``) ``server`` to ``host``."""
        others = [h for h in self.hosts if h != host]
        for name in others:
            self.api.put_service(self.computes[name].service_ref.uuid,
                                 {'status': 'disabled'})
        try:
            if flavor is None:
                server = self._migrate_server(server)
            else:
                server = self._resize_server(server, flavor)
        finally:
            for name in others:
                self.api.put_service(self.computes[name].service_ref.uuid,
                                     {'status': 'enabled'})
        self.assertEqual(host, server['OS-EXT-SRV-ATTR:host'])
        return server


class TestEvacuate(ProgrammingMovesTestCase):

    def test_the_evacuees_new_fpga_is_programmed_never_a_neighbours(self):
        # fpga2: server A holds PAC0 (NLB0 loaded). fpga1: C holds PAC1,
        # so B, whose flavor names bitstream dma, gets PAC0 there: the
        # same address as A's card on fpga2.
        a = self.start_on('fpga2', self.card_flavor(NLB0))
        self.assertEqual([PAC0], self.holds(a, 'fpga2'))
        c = self.start_on('fpga1', self.card_flavor(NLB3))
        self.assertEqual([PAC1], self.holds(c, 'fpga1'))
        b = self.start_on('fpga1', self.bitstream_flavor('dma', 'dma'))
        self.assertEqual([PAC0], self.holds(b, 'fpga1'))
        self.assertEqual(fakes.hexid(fakes.DMA_AFU),
                         self.loaded('fpga1', PAC0))
        self.check()
        # fpga1 goes down; B is evacuated to fpga2, where PAC1 is free.
        self.stop_host('fpga1')
        b = self._evacuate_server(b, expected_host='fpga2')
        self.assertEqual([PAC1], self.holds(b, 'fpga2'))
        # B's new card has its function; A's card is as it was.
        self.assertEqual(fakes.hexid(fakes.DMA_AFU),
                         self.loaded('fpga2', PAC1))
        self.assertEqual(fakes.hexid(fakes.NLB0),
                         self.loaded('fpga2', PAC0))
        # fpga2's journal names fpga2's PAC1, programmed for B only.
        self.assertEqual([(PAC1, programming.SUCCEEDED, b['id'])],
                         self.jobs('fpga2'))
        self.assertEqual(0, self._get_provider_inventory(
            self.rp('fpga2', PAC1))['FPGA']['reserved'])
        self.assertEqual([PAC1], self.units(b, 'fpga2'))
        self.assertEqual([PAC0], self.units(a, 'fpga2'))
        self.check(skip_hosts=('fpga1',))
        self.restart_host('fpga1')
        self.assertEqual([], self.units(b, 'fpga1'))
        self.check()


class TestColdMoves(ProgrammingMovesTestCase):

    def test_cold_migrate_programs_the_destination_revert_keeps_source(
            self):
        b = self.start_on('fpga1', self.bitstream_flavor('dma', 'dma'))
        [source] = self.holds(b, 'fpga1')
        self.assertEqual(fakes.hexid(fakes.DMA_AFU),
                         self.loaded('fpga1', source))
        b = self.move(b, 'fpga2')
        [dest] = self.holds(b, 'fpga2')
        self.assertEqual(fakes.hexid(fakes.DMA_AFU),
                         self.loaded('fpga2', dest))
        self.assertEqual([(dest, programming.SUCCEEDED, b['id'])],
                         self.jobs('fpga2'))
        self.assertEqual([dest], self.xml_units(b, 'fpga2'))
        self.check()
        # Revert: back on the source card, which was never touched again.
        b = self._revert_resize(b)
        self.assertEqual('fpga1', b['OS-EXT-SRV-ATTR:host'])
        self.assertEqual([source], self.holds(b, 'fpga1'))
        self.assertEqual(fakes.hexid(fakes.DMA_AFU),
                         self.loaded('fpga1', source))
        self.assertEqual([(source, programming.SUCCEEDED, b['id'])],
                         self.jobs('fpga1'))
        self.check()

    def test_resize_programs_the_new_flavors_bitstream_on_the_destination(
            self):
        b = self.start_on('fpga1', self.bitstream_flavor('dma', 'dma'))
        [source] = self.holds(b, 'fpga1')
        b = self.move(b, 'fpga2', self.bitstream_flavor('nlb3', 'nlb3'))
        [dest] = self.holds(b, 'fpga2')
        self.assertEqual(fakes.hexid(fakes.NLB3), self.loaded('fpga2', dest))
        b = self._confirm_resize(b)
        # The source card keeps what B loaded and is free again.
        self.assertEqual(fakes.hexid(fakes.DMA_AFU),
                         self.loaded('fpga1', source))
        self.assertEqual({}, self.placement.get(
            '/resource_providers/%s/allocations' % self.rp('fpga1', source)
        ).body['allocations'])
        self.check()

    def test_a_bitstream_that_does_not_fit_the_destination_fails_cleanly(
            self):
        # B holds a PAC on fpga1; on fpga2 both PACs are taken, so a
        # resize to a flavor without the PAC region lands on the Alveo,
        # which cannot load a GBS.
        b = self.start_on('fpga1', self.bitstream_flavor('dma', 'dma'))
        [source] = self.holds(b, 'fpga1')
        self.start_on('fpga2', self.card_flavor(NLB0))
        self.start_on('fpga2', self.card_flavor(NLB3))
        anyfpga = self.bitstream_flavor('dma-any', 'dma', region=False)
        others = [h for h in self.hosts if h != 'fpga2']
        for name in others:
            self.api.put_service(self.computes[name].service_ref.uuid,
                                 {'status': 'disabled'})
        # The harness turns casts into calls, so the finish's failure
        # reaches the API (a real cloud answers 202 and records it).
        self.api.api_post('/servers/%s/action' % b['id'],
                          {'resize': {'flavorRef': anyfpga}},
                          check_response_status=[202, 409])
        b = self._wait_for_state_change(b, 'ERROR')
        # As Nova does for a finish it cannot do: the instance is in
        # ERROR on the destination, holding its allocation there (a hard
        # reboot recovers it).
        self.assertEqual('fpga2', b['OS-EXT-SRV-ATTR:host'])
        self.assertEqual([ALVEO], self.holds(b, 'fpga2'))
        self.assertIn('cannot program %s with dma' % ALVEO,
                      self.stdlog.logger.output)
        # Nothing was programmed or fenced on either host.
        alveo = self.rp('fpga2', ALVEO)
        self.assertEqual(0, self._get_provider_inventory(alveo)['FPGA'][
            'reserved'])
        self.assertNotIn(programming.FAILED_TRAIT,
                         self._get_provider_traits(alveo))
        self.assertEqual([], self.jobs('fpga2'))
        self.assertEqual(fakes.hexid(fakes.NLB0), self.loaded('fpga2', PAC0))
        self.assertEqual(fakes.hexid(fakes.NLB3), self.loaded('fpga2', PAC1))
        self.assertEqual(fakes.hexid(fakes.DMA_AFU),
                         self.loaded('fpga1', source))
