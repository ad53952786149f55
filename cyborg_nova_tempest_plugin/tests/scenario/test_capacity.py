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

"""No accelerator left: the scheduler says so, and nothing is held."""

from tempest.common import utils
from tempest.common import waiters
from tempest import config
from tempest.lib import decorators

from cyborg_nova_tempest_plugin.common import accelerators as acc
from cyborg_nova_tempest_plugin.tests import base

CONF = config.CONF


@decorators.serial
class AcceleratorCapacityTest(base.BaseAcceleratorScenarioTest):
    """Use up every free accelerator of a flavor, then ask for one more.

    Serial: other tests booting with accelerators at the same time would
    change what is free.
    """

    @decorators.idempotent_id('5d2a8f0c-7e3b-4d61-b9a4-0c6e8f2b5d01')
    @utils.services('compute')
    def test_boot_beyond_capacity_fails_with_no_valid_host(self):
        """The server past the last free accelerator: ERROR, NoValidHost.

        Placement's allocation candidates say how many servers of
        ``[accelerators] capacity_flavor`` still fit; that many boot
        ACTIVE, each holding its accelerator, and the next one goes to
        ERROR with a "No valid host" fault and no allocation.
        """
        flavor, groups = self.accelerator_flavor('capacity_flavor')
        if len(groups) != 1 or len(list(groups.values())[0]
                                   ['resources']) != 1:
            self.skipTest('flavor %s asks for more than one kind of '
                          'accelerator: capacity is counted for one'
                          % flavor['name'])
        group = list(groups.values())[0]
        (rc, amount), = group['resources'].items()
        candidates = self.allocation_candidates(groups)
        slots = acc.free_slots(candidates, rc, amount)
        if not slots and not [
                rp for rp in self.accelerator_providers().values()
                if rc in rp['inventories']
                and group['required'] <= rp['traits']
                and not group['forbidden'] & rp['traits']]:
            self.skipTest('no accelerator in this cloud matches flavor %s, '
                          'used or not' % flavor['name'])
        limit = CONF.accelerators.max_capacity_servers
        if slots > limit:
            self.skipTest('%d servers of flavor %s still fit, more than '
                          '[accelerators] max_capacity_servers = %d'
                          % (slots, flavor['name'], limit))

        servers = [self.create_server(flavor=flavor['id'], wait_until=None)
                   for _ in range(slots)]
        for server in servers:
            waiters.wait_for_server_status(self.servers_client,
                                           server['id'], 'ACTIVE')
        for server in servers:
            self.check_server_accelerators(server['id'], groups)
        self.assertEqual(
            [], self.allocation_candidates(groups)['allocation_requests'],
            'accelerators of flavor %s still free after %d servers'
            % (flavor['name'], slots))

        extra = self.create_server(flavor=flavor['id'], wait_until=None)
        fault = self.wait_for_fault(extra['id'])
        self.assertIn('No valid host', fault.get('message', ''),
                      'fault of the server past capacity: %s' % fault)
        self.assertEqual({}, self.admin_placement.list_allocations(
            extra['id'])['allocations'])
