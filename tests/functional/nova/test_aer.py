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
"""PCIe AER counts in nova-compute's own update, on the real libvirt driver.

One compute of the ``crypto-nic-host`` profile, real Placement: a fatal
error counted by the kernel on one of a QAT PF's VFs fences the PF's
provider at nova-compute's next update, and the operator's clear
(``device-set-state <device> ready``, the library calls it makes) gives
it back.
"""

from cyborg_nova import health
from cyborg_nova import store as state_store
from tests import aer_sysfs
from tests.functional.nova import base

DC_PF = '0000:70:00.0'


class TestAerInTheUpdateCycle(base.LibvirtAcceleratorTestCase):

    def setUp(self):
        super().setUp()
        self.start_accelerator_compute('host1', 'crypto-nic-host')
        self.rp = self.accelerator_providers('host1')[DC_PF]['uuid']
        self.root = self.trees['host1']
        self.store = state_store.StateStore(self.workdir + '/host1/'
                                            'state.sqlite')

    def inventory(self):
        return self._get_provider_inventory(self.rp)['CUSTOM_QAT']

    def cycle(self):
        self._run_periodics()

    def test_a_fatal_error_fences_until_cleared(self):
        vf = '0000:70:00.3'
        for address in (DC_PF, vf):
            aer_sysfs.write(self.root, address)
        self.cycle()
        self.assertEqual(0, self.inventory()['reserved'])
        # The kernel counted a fatal error on a VF of the PF.
        aer_sysfs.write(self.root, vf, fatal=1)
        self.cycle()
        inv = self.inventory()
        self.assertEqual(inv['total'], inv['reserved'])
        row = self.store.devices('host1')[DC_PF]
        self.assertEqual(state_store.UNHEALTHY, row.state)
        self.assertIn('1 fatal', row.reason)
        self.assertIn(vf, row.reason)
        # No server lands on it.
        qat = self.flavor({'resources:CUSTOM_QAT': '1',
                           'trait:CUSTOM_QAT_DC': 'required'})
        server = self._create_server(flavor_id=qat, networks='none',
                                     expected_state='ERROR')
        self.assertIn('No valid host', server['fault']['message'])
        # The operator's clear: the counts now are the baseline.
        health.acknowledge(self.store, 'host1', DC_PF, self.root)
        self.store.set_state('host1', DC_PF, state_store.READY, None)
        self.cycle()
        self.assertEqual(0, self.inventory()['reserved'])
        self._create_server(flavor_id=qat, networks='none')
