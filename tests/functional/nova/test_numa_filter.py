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

"""The accelerator NUMA filter against Nova's own PCI NUMA decisions.

For each policy, one host (two cells on one socket, Nova's scheduler
test topology) and one pinned single-cell guest that only cell 1 can
hold: the filter's verdict on a candidate taking an accelerator on node
0, node 1 or no node is compared with Nova's NUMATopologyFilter's verdict
on the same candidate taking a PCI device in Placement on that node,
through Nova's own PciDeviceStats. Same host, same flavor, same outcome.
"""

import copy
import json

from nova import objects
from nova.objects import fields
from nova.pci import stats as pci_stats
from nova.scheduler.filters import numa_topology_filter
from nova.tests.unit.scheduler import fakes
from oslo_utils.fixture import uuidsentinel as uuids
import testtools

from cyborg_nova.virt import numa_filter

ACCEL_RC = 'CUSTOM_GPU'


def host_topology():
    topology = copy.deepcopy(fakes.NUMA_TOPOLOGY)
    # Cell 0's dedicated CPUs are taken: a pinned guest fits cell 1 only.
    topology.cells[0].pinned_cpus = set(topology.cells[0].pcpuset)
    return topology


def spec(policy):
    topology = objects.InstanceNUMATopology(cells=[
        objects.InstanceNUMACell(id=0, cpuset=set(), pcpuset={0, 1},
                                 memory=256,
                                 cpu_policy=fields.CPUAllocationPolicy.
                                 DEDICATED)])
    extra = {'hw:cpu_policy': 'dedicated'}
    if policy:
        extra['hw:pci_numa_affinity_policy'] = policy
    return objects.RequestSpec(
        numa_topology=topology, pci_requests=None, instance_uuid=uuids.fake,
        flavor=objects.Flavor(extra_specs=extra),
        image=objects.ImageMeta(properties=objects.ImageMetaProps()))


def candidate(rp):
    return {'allocations': {uuids.compute: {'resources': {'PCPU': 2}},
                            rp: {'resources': {ACCEL_RC: 1}}},
            'mappings': {'': [uuids.compute, rp]}}


def accelerator_host(node):
    """The host with one accelerator provider on ``node``."""
    stats = {numa_filter.STATS_KEY: json.dumps({uuids.accel: node})}
    return fakes.FakeHostState('host1', 'node1', {
        'uuid': uuids.compute, 'numa_topology': host_topology(),
        'pci_stats': pci_stats.PciDeviceStats(host_topology()),
        'stats': stats, 'cpu_allocation_ratio': 16.0,
        'ram_allocation_ratio': 1.5,
        'allocation_candidates': [candidate(uuids.accel)]})


def nova_pci_verdict(node, policy):
    """Nova's own filter on the same host with a PCI device on ``node``.

    The device is in Placement (its pool has a provider), requested by a
    flavor alias as Nova's PCI-in-Placement requests it.
    """
    stats = pci_stats.PciDeviceStats(host_topology())
    stats.pools.append({
        'vendor_id': '10de', 'product_id': '1eb8',
        'numa_node': None if node == -1 else node,
        'dev_type': fields.PciDeviceType.STANDARD, 'count': 1,
        'devices': [], 'rp_uuid': uuids.pci})
    request = objects.InstancePCIRequest(
        count=1, spec=[{'vendor_id': '10de', 'product_id': '1eb8'}],
        request_id=uuids.request, alias_name='gpu')
    if policy:
        request.numa_policy = policy
    spec_obj = spec(policy)
    spec_obj.pci_requests = objects.InstancePCIRequests(requests=[request])
    host = fakes.FakeHostState('host1', 'node1', {
        'uuid': uuids.compute, 'numa_topology': host_topology(),
        'pci_stats': stats, 'cpu_allocation_ratio': 16.0,
        'ram_allocation_ratio': 1.5,
        'allocation_candidates': [{
            'allocations': {uuids.compute: {'resources': {'PCPU': 2}},
                            uuids.pci: {'resources': {
                                'CUSTOM_PCI_10DE_1EB8': 1}}},
            'mappings': {'': [uuids.compute],
                         uuids.request + '-0': [uuids.pci]}}]})
    return numa_topology_filter.NUMATopologyFilter().host_passes(host,
                                                                 spec_obj)


class TestSameOutcomeAsNovaPci(testtools.TestCase):

    def verdict(self, node, policy):
        host = accelerator_host(None if node == -1 else node)
        ours = numa_filter.AcceleratorNUMATopologyFilter().host_passes(
            host, spec(policy))
        return ours, nova_pci_verdict(node, policy), host

    def test_each_policy_and_node(self):
        expected = {
            # (policy, node): passes. Cell 1 is the guest's only cell.
            ('required', 1): True, ('required', 0): False,
            ('required', -1): False,
            ('legacy', 1): True, ('legacy', 0): False,
            ('legacy', -1): True,
            (None, 1): True, (None, 0): False, (None, -1): True,
            ('preferred', 1): True, ('preferred', 0): True,
            ('preferred', -1): True,
            ('socket', 1): True, ('socket', 0): True,
            ('socket', -1): False,
        }
        for (policy, node), passes in sorted(
                expected.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
            ours, novas, host = self.verdict(node, policy)
            self.assertEqual((passes, passes), (ours, novas),
                             'policy %s, node %s' % (policy, node))
            self.assertEqual(passes, bool(host.allocation_candidates))

    def test_no_numa_topology_is_nova_behaviour(self):
        spec_obj = spec('required')
        spec_obj.numa_topology = None
        host = accelerator_host(0)
        self.assertTrue(numa_filter.AcceleratorNUMATopologyFilter()
                        .host_passes(host, spec_obj))
        self.assertEqual(1, len(host.allocation_candidates))

    def test_only_fitting_candidates_are_kept(self):
        stats = {numa_filter.STATS_KEY: json.dumps(
            {uuids.accel0: 0, uuids.accel1: 1})}
        host = fakes.FakeHostState('host1', 'node1', {
            'uuid': uuids.compute, 'numa_topology': host_topology(),
            'pci_stats': pci_stats.PciDeviceStats(host_topology()),
            'stats': stats, 'cpu_allocation_ratio': 16.0,
            'ram_allocation_ratio': 1.5,
            'allocation_candidates': [candidate(uuids.accel0),
                                      candidate(uuids.accel1)]})
        self.assertTrue(numa_filter.AcceleratorNUMATopologyFilter()
                        .host_passes(host, spec('required')))
        self.assertEqual([uuids.accel1], [
            rp for c in host.allocation_candidates
            for rp in c['allocations'] if rp != uuids.compute])

    def test_unreadable_stats_are_no_accelerators(self):
        self.assertEqual({}, numa_filter.accelerator_nodes(
            {numa_filter.STATS_KEY: '{not json'}))
        self.assertEqual({uuids.a: None, uuids.b: 1},
                         numa_filter.accelerator_nodes({
                             numa_filter.STATS_KEY: json.dumps(
                                 {uuids.a: -1, uuids.b: 1})}))
