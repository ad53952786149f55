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

"""An out-of-process driver's devices in Nova: scheduled, in the guest.

The real LibvirtDriver on Nova's fakelibvirt, with real Placement. The
host runs no in-process QAT driver; ``cyborg-nova-driver``'s service
(in-process here: :class:`~cyborg_nova.remote_driver.service.
DriverService`, the code the console script runs) discovers the QAT
cards of the host's sysfs tree, and the agent's code records what it
serves in the host's state store, as the agent does at each poll
(parsed as the registry parses ``GET /hardware``). Only the hardware is
fake. The real processes are in tests/functional/agent/
test_remote_driver_service.py.
"""

import os

from oslo_config import cfg

from cyborg_nova.agent import remote
from cyborg_nova.agent import remote_sync
from cyborg_nova import assignments
from cyborg_nova import conf as cn_conf
from cyborg_nova import remote_devices
from cyborg_nova.remote_driver import service
from cyborg_nova import store as state_store
from tests.functional.nova import base
from tests.functional.nova.moves import capture_xmls
from tests.functional.nova.moves import hostdevs

HOST = 'remote1'
ENDPOINT = 'http://127.0.0.1:7070'
QAT_PFS = ('0000:6b:00.0', '0000:70:00.0', '0000:e8:00.0')


class TestRemoteDriverDevices(base.LibvirtAcceleratorTestCase):

    # No in-process driver finds the QAT cards: the remote one does.
    enabled_drivers = ['nvidia_gpu']

    def setUp(self):
        super().setUp()
        self.xmls = capture_xmls(self)
        tree = self.build_host(HOST, 'crypto-nic-host')
        self.configure_host(HOST)
        conf = cfg.ConfigOpts()
        conf([])
        cn_conf.register_opts(conf)
        self.driver = service.DriverService(conf, service.Settings(
            driver='intel_qat', agent_url='http://127.0.0.1:6666',
            agent_token='unused', nodename=HOST, sysfs_root=tree))
        self.driver.discover()
        self.store = state_store.StateStore(
            os.path.join(self.workdir, HOST, 'state.sqlite'))
        self.recorder = remote_sync.RemoteRecorder(self.store, HOST, None,
                                                   list)
        self.record('UP')
        self.start_compute(hostname=HOST)
        self.flavor_id = self.flavor({'resources:CUSTOM_QAT': '1'})

    def record(self, driver_state):
        """What the agent records after a poll of the driver."""
        entries, problems = remote.parse_hardware(
            {'hardware': self.driver.hardware()})
        self.assertEqual([], problems)
        self.recorder(ENDPOINT, 'CRYPTO', driver_state, entries)

    def remote_providers(self):
        return {a: remote_devices.provider_uuid(HOST, a) for a in QAT_PFS}

    def test_scheduled_onto_the_remote_device_and_in_the_guest(self):
        rps = self.remote_providers()
        for address, uuid in rps.items():
            inv = self._get_provider_inventory(uuid)['CUSTOM_QAT']
            self.assertEqual((16, 0), (inv['total'], inv['reserved']))
            self.assertIn('OWNER_CYBORG', self._get_provider_traits(uuid))
        # No local provider of the same device.
        self.assertEqual({}, self.accelerator_providers(HOST))

        server = self._create_server(flavor_id=self.flavor_id,
                                     networks='none')
        allocations = self.server_allocations(server)
        held = [a for a, uuid in rps.items() if uuid in allocations]
        self.assertEqual(1, len(held))
        # The first VF of the allocated card is the guest's hostdev.
        pf = held[0]
        first_vf = pf[:-1] + '1'
        self.assertEqual([first_vf], hostdevs(self.xmls[-1]))
        self.assertEqual(
            {rps[pf]: [first_vf]},
            assignments.Assignments(self.store).of_consumer(server['id']))

    def test_fenced_while_the_driver_is_down(self):
        rps = self.remote_providers()
        self.record('DOWN')
        # nova-compute's update computes reserved from the record.
        self._run_periodics()
        for uuid in rps.values():
            inv = self._get_provider_inventory(uuid)['CUSTOM_QAT']
            self.assertEqual(inv['total'], inv['reserved'])
        server = self._create_server(flavor_id=self.flavor_id,
                                     networks='none',
                                     expected_state='ERROR')
        self.assertIn('No valid host', server['fault']['message'])

        self.record('UP')
        self._run_periodics()
        for uuid in rps.values():
            inv = self._get_provider_inventory(uuid)['CUSTOM_QAT']
            self.assertEqual(0, inv['reserved'])
        self._create_server(flavor_id=self.flavor_id, networks='none')
