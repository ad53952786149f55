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

"""Accelerators' NUMA affinity, decided as Nova decides it for PCI devices.

``AcceleratorNUMATopologyFilter`` takes the place of Nova's
``NUMATopologyFilter`` in ``[filter_scheduler] enabled_filters``. For an
instance with a NUMA topology, each allocation candidate's accelerator
providers join the fit as PCI device pools of their NUMA node, and the
candidate's allocations as PCI requests with the instance's
``hw:pci_numa_affinity_policy``: Nova's own ``numa_fit_instance_to_host``
and ``PciDeviceStats`` then choose the cells and apply the policy
(required, preferred, legacy, socket) exactly as they do for Nova's own
PCI devices. A candidate that does not fit is dropped.

Each provider's NUMA node comes from the compute node's ``stats``
(:data:`STATS_KEY`, written by the virt driver every update): the
scheduler sees no provider traits. A host whose stats name no provider
yet (the first minute of a new compute) is fitted as Nova's own filter
fits it.
"""

from __future__ import annotations

import copy
import json
import uuid

from nova import objects
from nova.objects import fields
from nova.scheduler.filters import numa_topology_filter
from nova.virt import hardware
from oslo_log import log as logging

LOG = logging.getLogger(__name__)

#: The compute node's ``stats`` key: JSON {provider uuid: NUMA node or
#: null} of the host's accelerator providers.
STATS_KEY = 'cyborg_nova_accelerator_numa'
#: The fake pools' vendor: no PCI device has it.
_VENDOR = 'cyborg-nova'
#: A physical network name each host NUMA cell of a cyborg-nova compute
#: carries (:func:`mark_cells`); no Neutron network has it.
CELL_PHYSNET = 'cyborg-nova-numa-cell-%d'


def mark_cells(topology) -> None:
    """Give each cell of a host NUMA topology its :data:`CELL_PHYSNET`.

    The compute's claim fits the guest's cells again, without the
    accelerators; the scheduler pins it to the cells this filter chose
    by requiring their physnets in the limits it sends (Nova's own
    physnet NUMA affinity then keeps the claim on those cells).
    """
    for cell in topology.cells:
        metadata = (cell.network_metadata if 'network_metadata' in cell
                    else objects.NetworkMetadata(physnets=set(),
                                                 tunneled=False))
        metadata.physnets = set(metadata.physnets) | {CELL_PHYSNET
                                                      % cell.id}
        cell.network_metadata = metadata


def pinned(limits, network_metadata, cells) -> None:
    """Require ``cells`` of the claim through ``limits``."""
    physnets = {CELL_PHYSNET % cell.id for cell in cells}
    tunneled = False
    if network_metadata:
        physnets |= set(network_metadata.physnets)
        tunneled = network_metadata.tunneled
    limits.network_metadata = objects.NetworkMetadata(physnets=physnets,
                                                      tunneled=tunneled)


def accelerator_nodes(stats: dict | None) -> dict[str, int | None]:
    """{provider uuid: NUMA node} from a compute node's ``stats``."""
    text = (stats or {}).get(STATS_KEY)
    if not text:
        return {}
    try:
        nodes = json.loads(text)
    except ValueError:
        LOG.warning('Unreadable %s in a compute node\'s stats', STATS_KEY)
        return {}
    return {rp: node if isinstance(node, int) and node >= 0 else None
            for rp, node in nodes.items()} if isinstance(nodes, dict) \
        else {}


def accelerator_allocations(candidate: dict,
                            nodes: dict[str, int | None]
                            ) -> dict[str, tuple[str, int]]:
    """What a candidate takes from the accelerator providers ``nodes``.

    {provider uuid: (resource class, amount)}.
    """
    taken = {}
    for rp, allocation in candidate.get('allocations', {}).items():
        if rp in nodes:
            for rc, amount in allocation.get('resources', {}).items():
                taken[rp] = (rc, amount)
    return taken


def with_accelerators(host_state, candidates: list[dict],
                      nodes: dict[str, int | None]):
    """A copy of the host's PCI stats, with the accelerators' pools.

    One pool per accelerator provider any candidate takes from, on the
    provider's NUMA node.
    """
    stats = copy.deepcopy(host_state.pci_stats)
    seen: dict[str, tuple[str, int]] = {}
    for candidate in candidates:
        taken = accelerator_allocations(candidate, nodes)
        for rp, (rc, amount) in taken.items():
            if rp not in seen or seen[rp][1] < amount:
                seen[rp] = (rc, amount)
    for rp, (rc, count) in sorted(seen.items()):
        # A lower bound of what is free: the scheduler sees no usage.
        stats.pools.append({
            'vendor_id': _VENDOR, 'product_id': rc,
            'numa_node': nodes.get(rp), 'dev_type': fields.PciDeviceType.
            STANDARD, 'count': count, 'devices': [], 'rp_uuid': rp})
    return stats


def accelerator_requests(candidate: dict,
                         nodes: dict[str, int | None], policy: str | None
                         ) -> tuple[list, dict[str, list[str]]]:
    """PCI requests standing for a candidate's accelerators.

    Returns the requests and their request group mappings, as Nova's PCI
    prefilter names groups (``<request id>-<index>``).
    """
    requests, mappings = [], {}
    for rp, (rc, amount) in sorted(accelerator_allocations(
            candidate, nodes).items()):
        request_id = str(uuid.uuid4())
        request = objects.InstancePCIRequest(
            count=amount, spec=[{'vendor_id': _VENDOR, 'product_id': rc}],
            # An alias: Nova takes a request without one for a Neutron
            # port's, whose devices it does not match to providers.
            request_id=request_id, alias_name='%s:%s' % (_VENDOR, rc))
        if policy:
            request.numa_policy = policy
        requests.append(request)
        for index in range(amount):
            mappings['%s-%d' % (request_id, index)] = [rp]
    return requests, mappings


class AcceleratorNUMATopologyFilter(
        numa_topology_filter.NUMATopologyFilter):
    """Nova's NUMATopologyFilter, with the accelerators in the fit.

    Use it instead of ``NUMATopologyFilter``, not beside it.
    """

    def host_passes(self, host_state, spec_obj):
        nodes = accelerator_nodes(getattr(host_state, 'stats', None))
        requested = spec_obj.numa_topology
        if (not requested or not host_state.numa_topology
                or not any(accelerator_allocations(c, nodes)
                           for c in host_state.allocation_candidates)):
            return super().host_passes(host_state, spec_obj)
        if not self._satisfies_cpu_policy(host_state,
                                          spec_obj.flavor.extra_specs,
                                          spec_obj.image.properties):
            return False
        policy = hardware.get_pci_numa_policy_constraint(spec_obj.flavor,
                                                         spec_obj.image)
        limits = objects.NUMATopologyLimits(
            cpu_allocation_ratio=host_state.cpu_allocation_ratio,
            ram_allocation_ratio=host_state.ram_allocation_ratio)
        if 'network_metadata' in spec_obj and spec_obj.network_metadata:
            limits.network_metadata = spec_obj.network_metadata
        pci_requests = (spec_obj.pci_requests.requests
                        if spec_obj.pci_requests else [])
        stats = with_accelerators(host_state,
                                  host_state.allocation_candidates, nodes)

        def fits(candidate):
            requests, mappings = accelerator_requests(candidate, nodes,
                                                      policy)
            mapping = dict(candidate['mappings'], **mappings)
            # The fit writes the pinning into the topology it is given.
            fit = hardware.numa_fit_instance_to_host(
                host_state.numa_topology, requested.obj_clone(), mapping,
                limits=limits, pci_requests=list(pci_requests) + requests,
                pci_stats=stats)
            if fit is None:
                LOG.debug('%(host)s: allocation candidate dropped: no NUMA '
                          'cells of the instance fit beside its '
                          'accelerators %(nodes)s under PCI NUMA policy '
                          '%(policy)s',
                          {'host': host_state.host, 'policy':
                           policy or 'legacy', 'nodes': ', '.join(
                               '%s (NUMA node %s)' % (rp, nodes[rp])
                               for rp in sorted(accelerator_allocations(
                                   candidate, nodes)))},
                          instance_uuid=spec_obj.instance_uuid)
            return fit

        if not self.filter_candidates(host_state, fits):
            LOG.debug('%(host)s, %(node)s: no allocation candidate whose '
                      'accelerators fit the instance\'s NUMA cells '
                      '(policy %(policy)s)',
                      {'host': host_state.host, 'node': host_state.nodename,
                       'policy': policy or 'legacy'},
                      instance_uuid=spec_obj.instance_uuid)
            return False
        # The scheduler claims the first candidate left: its cells are the
        # ones the compute must use.
        fit = fits(host_state.allocation_candidates[0])
        pinned(limits, limits.network_metadata
               if 'network_metadata' in limits else None, fit.cells)
        host_state.limits['numa_topology'] = limits
        return True
