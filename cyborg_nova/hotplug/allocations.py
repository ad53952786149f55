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

"""An instance's allocations in Placement, read and changed for hot-plug.

The first of the three records an attach changes (and the last a detach
does): the consumer's allocations, a read-modify-write guarded by its
``consumer_generation`` and retried on generation conflicts, through
:class:`cyborg_nova.placement.Client`.
"""

from __future__ import annotations

import copy
import logging
from typing import Callable

from cyborg_nova.hotplug.errors import AttachError
from cyborg_nova import placement

LOG = logging.getLogger(__name__)

#: Read-modify-write attempts before giving up on a busy consumer.
CONFLICT_RETRIES = 8
#: Seconds before the second attempt, doubled before each next one.
CONFLICT_BACKOFF = 0.02

Allocations = dict  # {rp uuid: {'resources': {rc: amount}}}


def _refused(exc: placement.PlacementError) -> AttachError:
    """``exc`` as one line saying what Placement answered, or that none."""
    if exc.status is None:
        return AttachError(str(exc))
    return AttachError('Placement answered %s to %s %s: %s' % (
        exc.status, exc.method, exc.url, exc.detail))


def read_allocations(client, consumer: str) -> dict:
    """The consumer's allocations body (``consumer_allocations``).

    :raises AttachError: Placement is unreachable or refused.
    """
    try:
        return placement.Client(client).consumer_allocations(consumer)
    except placement.PlacementError as exc:
        raise _refused(exc) from exc


def _consumer_type(body: dict) -> str:
    """The type to write back: the consumer's own, or ``INSTANCE``.

    Placement answers ``unknown`` for a consumer written without a type
    (Nova's scheduler claims at a microversion before 1.38) and refuses
    that value in a PUT; the consumer of an attach is an instance, which
    is what Nova writes where it gives a type.
    """
    found = body.get('consumer_type')
    return found if found and found != 'unknown' else 'INSTANCE'


def change_allocations(client, consumer: str,
                       mutate: Callable[[Allocations], Allocations | None],
                       retries: int = CONFLICT_RETRIES
                       ) -> tuple[dict, Allocations]:
    """Read-modify-write the allocations of ``consumer``.

    ``mutate`` gets the current allocations (``{rp: {'resources': ...}}``,
    a copy) and returns what they should be, or None to write nothing;
    it may raise to refuse. The PUT carries the consumer generation read
    and keeps the consumer's project, user and type, so a concurrent
    change (Nova's, or another attach) makes it fail with a generation
    conflict rather than be lost: it is then read and mutated again.

    :returns: the body read last and the allocations now in Placement.
    :raises AttachError: the consumer has no allocations, Placement
        refused the change, or conflicts went on ``retries`` times.
    """
    def attempt(number: int) -> tuple[dict, Allocations]:
        body = read_allocations(client, consumer)
        if body.get('consumer_generation') is None:
            raise AttachError(
                'instance %s has no allocations in Placement; is it an '
                'instance of this cloud?' % consumer)
        current = {rp: {'resources': dict(alloc['resources'])}
                   for rp, alloc in body['allocations'].items()}
        wanted = mutate(copy.deepcopy(current))
        if wanted is None or wanted == current:
            return body, current
        placement.Client(client).put_consumer_allocations(consumer, {
            'allocations': wanted,
            'consumer_generation': body['consumer_generation'],
            'project_id': body['project_id'],
            'user_id': body['user_id'],
            'consumer_type': _consumer_type(body),
        })
        return body, wanted

    def conflicted(number: int, exc: placement.PlacementError) -> None:
        LOG.debug('Consumer %s changed under us (attempt %d): %s',
                  consumer, number, exc.detail)
    try:
        return placement.retry(attempt, retries, CONFLICT_BACKOFF,
                               after=conflicted)
    except placement.PlacementError as exc:
        if exc.conflict:
            raise AttachError(
                'the allocations of instance %s kept changing (%d consumer '
                'generation conflicts); nothing was changed, try again'
                % (consumer, retries)) from exc
        if exc.status is None:
            raise _refused(exc) from exc
        raise AttachError('Placement refused the allocation change of '
                          'instance %s: %s' % (consumer, exc.detail)) from exc


def without(rp: str) -> Callable[[Allocations], Allocations]:
    """A mutation taking provider ``rp`` out of the allocations."""
    def mutate(allocs: Allocations) -> Allocations:
        allocs.pop(rp, None)
        return allocs
    return mutate
