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
:class:`~cyborg_nova.fencing.Fencer`, reused as is. The requests are
:class:`cyborg_nova.placement.Client`'s.
"""

from __future__ import annotations

from typing import Callable, Iterable, TypeVar

import os_traits

from cyborg_nova import placement
from cyborg_nova.programming.journal import ProgrammingError

#: Reads and writes tried on conflicts or transient failures.
ATTEMPTS = 5

T = TypeVar('T')


def _retried(exc: placement.PlacementError) -> bool:
    # A trait this process created may have been deleted since: created
    # again by the next attempt.
    return exc.status == 409 or exc.no_such_trait


class PlacementOps:
    """The reads and trait writes programming makes, through keystoneauth.

    Inventory (``reserved``) is written by :class:`fencing.Fencer`.
    """

    def __init__(self, client, attempts: int = ATTEMPTS,
                 backoff: float = 0.05) -> None:
        self.client = client
        self.attempts = attempts
        self.backoff = backoff
        #: Seconds per request when ``[placement] timeout`` is unset.
        self.timeout = 10.0
        self._known_traits: set[str] = set()

    @property
    def api(self) -> placement.Client:
        """The Placement client over :attr:`client`, as it is now."""
        # Built at each use: a client swapped in after construction (a
        # test wrapping it to fault requests) is the one used.
        return placement.Client(self.client, timeout=self.timeout)

    @staticmethod
    def _read(read: Callable[[str], T], uuid: str) -> T | None:
        """``read(uuid)``; None when there is no such provider.

        :raises ProgrammingError: Placement cannot tell.
        """
        try:
            return read(uuid)
        except placement.PlacementError as exc:
            if exc.not_found:
                return None
            raise ProgrammingError(str(exc)) from exc

    def allocations(self, uuid: str) -> tuple[dict, int | None]:
        """Consumers of provider ``uuid`` and its generation.

        ``({}, None)`` when there is no such provider.

        :raises ProgrammingError: Placement cannot tell.
        """
        body = self._read(self.api.provider_allocations, uuid)
        if body is None:
            return {}, None
        return body['allocations'], body['resource_provider_generation']

    def traits(self, uuid: str) -> tuple[int, set[str]] | None:
        """Provider ``uuid``'s generation and traits (None: no provider).

        :raises ProgrammingError: Placement cannot tell.
        """
        body = self._read(self.api.provider_traits, uuid)
        if body is None:
            return None
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
        def attempt(number: int) -> tuple[set[str], int] | None:
            nonlocal unchanged_since
            found = read if read is not None and not number else (
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
            return self._write_traits(uuid, wanted, generation)
        try:
            return placement.retry(attempt, self.attempts, self.backoff,
                                   retry_on=_retried)
        except placement.PlacementError as exc:
            if not _retried(exc):
                raise ProgrammingError(str(exc)) from exc
            raise ProgrammingError(
                'traits of provider %s kept conflicting after %d attempts: '
                '%s' % (uuid, self.attempts,
                        exc.text[:placement.QUOTED])) from exc

    def _write_traits(self, uuid: str, wanted: set[str], generation: int
                      ) -> tuple[set[str], int] | None:
        """PUT ``wanted``; None when there is no such provider.

        :raises placement.PlacementError: any other refusal.
        """
        try:
            return wanted, self.api.put_provider_traits(
                uuid, wanted, generation)
        except placement.PlacementError as exc:
            if exc.not_found:
                return None
            if exc.no_such_trait:
                self._known_traits.clear()
            raise

    def create_traits(self, names: Iterable[str]) -> None:
        """Create the custom traits among ``names`` (``ensure_traits``).

        Trait definitions are never deleted, so those this process
        created or found are remembered and not created again.

        :raises ProgrammingError: Placement refused or cannot be reached.
        """
        new = sorted(name for name in names if os_traits.is_custom(name)
                     and name not in self._known_traits)
        try:
            self.api.ensure_traits(new)
        except placement.PlacementError as exc:
            raise ProgrammingError(str(exc)) from exc
        self._known_traits.update(new)
