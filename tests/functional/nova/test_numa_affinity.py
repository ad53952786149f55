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

"""Pinned guests and their accelerators' NUMA nodes, end to end.

The real LibvirtDriver on Nova's fakelibvirt host of two cells (CPUs 0-3
on cell 0, 4-7 on cell 1), the ``fpga-host`` tree (Intel PACs on nodes 0
and 1, the Alveo on node 1), real Placement, and the scheduler with
``AcceleratorNUMATopologyFilter`` in the place of NUMATopologyFilter.
What is checked is where the guest's cell and its accelerator end up,
as the compute claimed them.
"""

from nova import context as nova_context
from nova import objects
from nova.tests.functional.api import client

from tests.functional.nova import base

ALVEO = '0000:d8:00.0'      # node 1
PAC0 = '0000:5e:00.0'       # node 0
PAC1 = '0000:af:00.0'       # node 1
FILTER = 'AcceleratorNUMATopologyFilter'


class TestAcceleratorNUMAAffinity(base.LibvirtAcceleratorTestCase):

    #: Host CPUs that pinned guests may use (all: both cells).
    dedicated = '0-7'

    def _setup_scheduler_service(self):
        import nova.conf
        enabled = [name for name in
                   nova.conf.CONF.filter_scheduler.enabled_filters
                   if name != 'NUMATopologyFilter']
        self.flags(available_filters=[
            'nova.scheduler.filters.all_filters',
            'cyborg_nova.virt.numa_filter.' + FILTER],
            enabled_filters=enabled + [FILTER], group='filter_scheduler')
        return self.start_service('scheduler')

    def setUp(self):
        super().setUp()
        self.flags(cpu_dedicated_set=self.dedicated,
                   cpu_shared_set=None, group='compute')
        self.flags(vcpu_pin_set=None)
        self.start_accelerator_compute('fpga1', 'fpga-host')
        self.rps = self.accelerator_providers('fpga1')

    def pinned_flavor(self, vendor, policy=None):
        spec = {'resources:FPGA': '1',
                'trait:CUSTOM_FPGA_%s' % vendor: 'required',
                'hw:cpu_policy': 'dedicated'}
        if policy:
            spec['hw:pci_numa_affinity_policy'] = policy
        return self.flavor(spec)

    def placed(self, server):
        """(the guest's host cell, the device its FPGA unit is on)."""
        topology = objects.InstanceNUMATopology.get_by_instance_uuid(
            nova_context.get_admin_context(), server['id'])
        (cell,) = topology.cells
        devices = [address for address, rp in self.rps.items()
                   if rp['uuid'] in self.server_allocations(server)]
        return cell.id, devices

    def test_required_puts_the_guest_on_the_devices_cell(self):
        server = self._create_server(
            flavor_id=self.pinned_flavor('XILINX', 'required'),
            networks='none')
        # Without the filter's pin the claim takes cell 0, the emptier
        # first; the Alveo is on node 1.
        self.assertEqual((1, [ALVEO]), self.placed(server))

    def test_a_stats_key_names_each_provider_and_node(self):
        from cyborg_nova.virt import numa_filter
        node = objects.ComputeNode.get_by_nodename(
            nova_context.get_admin_context(), 'fpga1')
        self.assertEqual(
            {self.rps[PAC0]['uuid']: 0, self.rps[PAC1]['uuid']: 1,
             self.rps[ALVEO]['uuid']: 1},
            numa_filter.accelerator_nodes(node.stats))


class TestOnlyCellZeroHasDedicatedCPUs(TestAcceleratorNUMAAffinity):

    dedicated = '0-3'

    def test_required_takes_the_pac_on_node_0(self):
        server = self._create_server(
            flavor_id=self.pinned_flavor('INTEL', 'required'),
            networks='none')
        self.assertEqual((0, [PAC0]), self.placed(server))

    def test_required_with_no_device_on_the_cell_is_no_valid_host(self):
        server = self._create_server(
            flavor_id=self.pinned_flavor('XILINX', 'required'),
            networks='none', expected_state='ERROR')
        self.assertIn('No valid host', server['fault']['message'])
        self.assertEqual({}, self._get_allocations_by_server_uuid(
            server['id']))

    def test_legacy_refuses_a_device_on_another_node(self):
        # Nova's default for a device with a NUMA node: its cells only.
        server = self._create_server(
            flavor_id=self.pinned_flavor('XILINX'), networks='none',
            expected_state='ERROR')
        self.assertIn('No valid host', server['fault']['message'])

    def test_preferred_takes_the_device_on_another_node(self):
        server = self._create_server(
            flavor_id=self.pinned_flavor('XILINX', 'preferred'),
            networks='none')
        self.assertEqual((0, [ALVEO]), self.placed(server))

    def test_socket_takes_a_device_on_the_guests_socket(self):
        # Both cells are on socket 0 (fakelibvirt's default host): the
        # Alveo on node 1 shares the guest's socket, not its cell.
        server = self._create_server(
            flavor_id=self.pinned_flavor('XILINX', 'socket'),
            networks='none')
        self.assertEqual((0, [ALVEO]), self.placed(server))

    def test_an_unknown_policy_is_refused_by_novas_validator(self):
        exc = self.assertRaises(
            client.OpenStackApiException, self.pinned_flavor, 'XILINX',
            'nearby')
        self.assertEqual(400, exc.response.status_code)
        self.assertIn("'nearby' is not one of: required, preferred, "
                      'legacy, socket', str(exc))

    # The base class's test asks for cell 1, which has no dedicated CPU.
    test_required_puts_the_guest_on_the_devices_cell = None
