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

"""What programming reads from Placement, and the trait writes.

Inventory (``reserved``) is written by the agent's
:class:`~cyborg_nova.fencing.Fencer`, reused as is.
"""

from __future__ import annotations

import random
import time
from typing import Callable, Iterable

from keystoneauth1 import exceptions as ks_exc
import os_traits

from cyborg_nova import fencing
from cyborg_nova.programming.journal import ProgrammingError

#: Reads and writes tried on conflicts or transient failures.
ATTEMPTS = 5


class PlacementOps:
    """The reads and trait writes programming makes, through keystoneauth.

    Inventory (``reserved``) is written by :class:`fencing.Fencer`.
    """

    def __init__(self, client, attempts: int = ATTEMPTS,
                 backoff: float = 0.05) -> None:
        self.client = client
        self.attempts = attempts
        self.backoff = backoff
        session = getattr(client, 'session', None)
        self.timeout = getattr(session, 'timeout', None) or 10.0
        self._known_traits: set[str] = set()

    def _call(self, method: str, url: str, **kwargs):
        try:
            return getattr(self.client, method)(
                url, raise_exc=False, microversion=fencing.MICROVERSION,
                timeout=self.timeout, **kwargs)
        except ks_exc.ClientException as exc:
            raise ProgrammingError('cannot reach Placement: %s' % exc)

    @staticmethod
    def _error(resp, method: str, url: str) -> ProgrammingError:
        return ProgrammingError('Placement answered %s to %s %s: %s' % (
            resp.status_code, method, url, resp.text[:300]))

    def allocations(self, uuid: str) -> tuple[dict, int | None]:
        """Consumers of provider ``uuid`` and its generation.

        ``({}, None)`` when there is no such provider.

        :raises ProgrammingError: Placement cannot tell.
        """
        url = '/resource_providers/%s/allocations' % uuid
        resp = self._call('get', url)
        if resp.status_code == 404:
            return {}, None
        if resp.status_code != 200:
            raise self._error(resp, 'GET', url)
        body = resp.json()
        return body['allocations'], body['resource_provider_generation']

    def traits(self, uuid: str) -> tuple[int, set[str]] | None:
        """Provider ``uuid``'s generation and traits (None: no provider).

        :raises ProgrammingError: Placement cannot tell.
        """
        url = '/resource_providers/%s/traits' % uuid
        resp = self._call('get', url)
        if resp.status_code == 404:
            return None
        if resp.status_code != 200:
            raise self._error(resp, 'GET', url)
        body = resp.json()
        return body['resource_provider_generation'], set(body['traits'])

    def replace_traits(self, uuid: str, owned: set[str], stale: set[str],
                       add: set[str] = frozenset(),
                       remove: set[str] = frozenset(),
                       unchanged_since: int | None = None,
                       changed: Callable[[], None] | None = None,
                       read: tuple[int, set[str]] | None = None
                       ) -> tuple[set[str], int] | None:
        """Set ``uuid``'s traits, generation-checked.

        The traits become ``(current - stale - remove) | owned | add``.
        New custom traits are created first; none is deleted. Returns the
        traits the provider has and its generation afterwards (None when
        there is no such provider).

        :param changed: called before the write when the provider's
            generation is not ``unchanged_since`` (an allocation, or
            another writer, has been there since); it may raise.
        :param read: what :meth:`traits` answered a moment ago: the first
            attempt writes from it; a conflict makes the next one read.
        :raises ProgrammingError: Placement failed or kept conflicting.
        """
        url = '/resource_providers/%s/traits' % uuid
        error = ''
        for attempt in range(self.attempts):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1)
                           * random.uniform(0.5, 1.5))
            found = read if read is not None and not attempt else (
                self.traits(uuid))
            if found is None:
                return None
            generation, current = found
            if changed is not None and generation != unchanged_since:
                changed()
                unchanged_since = generation
            wanted = (current - stale - remove) | owned | add
            if wanted == current:
                return current, generation
            self.create_traits(wanted - current)
            resp = self._call('put', url, json={
                'traits': sorted(wanted),
                'resource_provider_generation': generation})
            if resp.status_code == 200:
                return wanted, resp.json()['resource_provider_generation']
            if resp.status_code == 404:
                return None
            if resp.status_code == 400 and 'No such trait' in resp.text:
                # Deleted since this process created it: again.
                self._known_traits.clear()
            elif resp.status_code != 409:
                raise self._error(resp, 'PUT', url)
            error = resp.text[:300]
        raise ProgrammingError('traits of provider %s kept conflicting '
                               'after %d attempts: %s'
                               % (uuid, self.attempts, error))

    def create_traits(self, names: Iterable[str]) -> None:
        """Create the custom traits among ``names`` (PUT /traits/{name}).

        Trait definitions are never deleted, so those this process
        created or found are remembered and not created again.
        """
        for name in sorted(names):
            if not os_traits.is_custom(name) or name in self._known_traits:
                continue
            url = '/traits/%s' % name
            resp = self._call('put', url)
            if resp.status_code not in (201, 204):
                raise self._error(resp, 'PUT', url)
            self._known_traits.add(name)
