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

"""What Nova knows of moves, and Placement's allocations, for the units.

The unit store mirrors Placement's allocations; Placement does not say
that a migration record's allocation belongs to an instance, Nova's
migration records do. These helpers read both through Nova's own
clients, so nova-compute's credentials and retries apply.
"""

from __future__ import annotations

import logging

from nova.compute import task_states
from nova import exception
from nova import objects
from nova.scheduler.client import report
from nova.scheduler import utils as scheduler_utils

from cyborg_nova import assignments

LOG = logging.getLogger(__name__)

# Moves for which Nova's conductor gives the instance's allocation to the
# migration record (evacuations keep it on the instance).
_MOVES_WITH_MIGRATION_CONSUMER = ('migration', 'resize', 'live-migration')
# Task states in which cleanup() destroys a guest that comes back on
# this host at once, so it keeps its units.
_COMES_BACK = (task_states.REBUILDING,
               task_states.REBUILD_BLOCK_DEVICE_MAPPING,
               task_states.REBUILD_SPAWNING)
# Statuses after which a migration record holds nothing any more.
_ENDED = ('confirmed', 'reverted', 'error', 'failed', 'completed',
          'cancelled', 'done')


def links(context) -> assignments.LinkLookup:
    """A lookup of the move a consumer takes part in, cached per call."""
    cache: dict[str, assignments.Link | None] = {}

    def lookup(consumer: str) -> assignments.Link | None:
        if consumer not in cache:
            cache[consumer] = _link(context, consumer)
        return cache[consumer]
    return lookup


def _link(context, consumer: str) -> assignments.Link | None:
    try:
        migration = objects.Migration.get_by_uuid(context, consumer)
    except exception.MigrationNotFound:
        migration = None
    if migration is None:
        moving = [m for m in objects.MigrationList.get_by_filters(
            context, {'instance_uuid': consumer})
            if m.migration_type in _MOVES_WITH_MIGRATION_CONSUMER
            and m.status not in _ENDED]
        if not moving:
            return None
        migration = max(moving, key=lambda m: m.id)
    return assignments.Link(migration.uuid, migration.instance_uuid,
                            migration.status)


def provider_allocations(context, rp_uuid: str) -> dict | None:
    """{consumer: allocation} on a provider; None if unknown."""
    try:
        info = report.report_client_singleton(
        ).get_allocations_for_resource_provider(context, rp_uuid)
    except Exception as exc:
        LOG.warning('cyborg-nova: cannot read the allocations of provider '
                    '%s: %s', rp_uuid, exc)
        return None
    return info.allocations


def provider_holders(context, rp_uuid: str) -> dict[str, int] | None:
    """{consumer: units allocated} on a provider; None if unknown."""
    allocations = provider_allocations(context, rp_uuid)
    if allocations is None:
        return None
    return {consumer: sum(alloc.get('resources', {}).values())
            for consumer, alloc in allocations.items()}


def consumer_allocations(context, consumer: str) -> dict | None:
    """{provider: {'resources': ...}} of ``consumer``; None if unknown."""
    try:
        return report.report_client_singleton().get_allocs_for_consumer(
            context, consumer).get('allocations', {})
    except Exception as exc:
        LOG.warning('cyborg-nova: cannot read the allocations of %s: %s',
                    consumer, exc)
        return None


def live_attached(context, instance, ours: dict[str, tuple[str, str]]
                  ) -> str | None:
    """Why a cold move of ``instance`` cannot carry its units, or None.

    Units ``cyborg-nova instance-attach`` added to a running guest are
    allocated to the instance but asked for by no flavor: Nova's
    scheduler does not claim them on a destination, and its move deletes
    them with the source's allocation. Each resource class held on
    ``ours`` beyond what the flavor asks for (Nova's own reading of the
    flavor, ``resources_from_flavor``) is named, with the accelerators
    that hold it.
    """
    allocations = consumer_allocations(
        context, move_consumer(context, instance.uuid))
    held: dict[str, dict[str, int]] = {}
    for rp, alloc in (allocations or {}).items():
        if rp not in ours:
            continue
        for rc, amount in alloc.get('resources', {}).items():
            held.setdefault(rc, {})[ours[rp][1]] = amount
    if not held:
        return None
    asked = scheduler_utils.resources_from_flavor(instance, instance.flavor)
    extra = ['%d %s on %s, its flavor asks for %d'
             % (sum(by.values()), rc, ', '.join(sorted(by)),
                asked.get(rc, 0))
             for rc, by in sorted(held.items())
             if sum(by.values()) > asked.get(rc, 0)]
    if not extra:
        return None
    return ('instance %s holds accelerators attached to it live '
            '(instance-attach), which a resize or cold migration cannot '
            'carry: %s; detach them first (cyborg-nova instance-detach), '
            'or give the instance a flavor that asks for them'
            % (instance.uuid, '; '.join(extra)))


def move_consumer(context, instance_uuid: str) -> str:
    """The consumer holding the instance's allocation here now.

    The migration record while a move that gave it the allocation is
    under way, else the instance.
    """
    link = links(context)(instance_uuid)
    return (link.migration if link is not None
            and link.instance == instance_uuid else instance_uuid)


def leaving(instance, our_nodes, destroy_disks: bool) -> str | None:
    """Why a guest cleaned up leaves this host for good, or None.

    Its units are freed then (delete, shelve offload, revert on the
    destination, the source after an evacuation), kept when it comes
    back (hard reboot, rebuild).
    """
    if instance.task_state == task_states.RESIZE_REVERTING:
        return 'resize reverted away from this host'
    if instance.node not in our_nodes:
        return 'the instance lives on %s now' % instance.node
    if destroy_disks and instance.task_state not in _COMES_BACK:
        return 'guest destroyed with its disks'
    return None


def no_live_migration(instance, units: list[str]) -> str:
    """Why ``instance``, holding ``units`` here, is not live-migrated."""
    return ('instance %s holds accelerator units %s on this host; '
            'cyborg-nova cannot live-migrate them: cold migrate or resize '
            'it instead' % (instance.uuid, ', '.join(units)))
