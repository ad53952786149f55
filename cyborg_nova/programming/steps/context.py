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

"""What the steps of the jobs share: the host, Placement, what was read.

One :class:`Context` per :class:`~cyborg_nova.programming.Programmer`:
the state store and journal, the fencer and Placement, the drivers, and
what this process last read of each running job's device and provider,
so that a step reuses it instead of reading again. Also the operations
several steps make: reading the device, fencing it to a state, writing
its traits.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

from cyborg_nova import fencing
from cyborg_nova.programming.journal import Job
from cyborg_nova.programming.journal import Journal
from cyborg_nova.programming.journal import ProgrammingError
from cyborg_nova.programming.placement import PlacementOps
from cyborg_nova import providers
from cyborg_nova import store as state_store

LOG = logging.getLogger(__name__)


class Stalled(ProgrammingError):
    """Placement cannot be written now; the job waits for recovery."""


class Context:
    """The host and services the steps act on, and what they read.

    :param drivers: returns the loaded drivers.
    :param discover: returns this host's accelerators by PCI address.
    :param timeout: seconds a load may take.
    :param privileged_setup: called once before the first load, or None.
    """

    def __init__(self, store: state_store.StateStore, journal: Journal,
                 fencer: fencing.Fencer | None,
                 placement: PlacementOps | None, drivers: Callable,
                 discover: Callable[[], dict], timeout: float,
                 privileged_setup: Callable[[], object] | None) -> None:
        self.store = store
        self.journal = journal
        self.fencer = fencer
        self.placement = placement
        self.drivers = drivers
        self.discover = discover
        self.timeout = timeout
        self._privileged_setup = privileged_setup
        self._setup_lock = threading.Lock()
        self._set_up = privileged_setup is None
        # Job id -> the device as last read (see device()).
        self._known: dict = {}
        # Job id -> what this process last read from or wrote to the
        # provider ('inventory': (generation, records) after the fence,
        # 'traits': (generation, traits) read during the load,
        # 'generation' after the trait swap). A write starts from them
        # instead of reading again; a conflict makes it read. Never
        # journaled: a resumed job reads everything afresh.
        self.seen: dict[str, dict] = {}

    def remember(self, job: Job, acc) -> None:
        """``acc`` is the device of ``job`` as validation just read it."""
        self._known[job.id] = acc

    def forget(self, job: Job) -> None:
        """Drop what was read for ``job`` (it stopped running here)."""
        self._known.pop(job.id, None)
        self.seen.pop(job.id, None)

    def device(self, job: Job, fresh: bool = False):
        """The device of ``job`` as sysfs shows it (None: gone).

        Read once and reused until the load may have changed it
        (``fresh``, or after a load).
        """
        if not fresh and job.id in self._known:
            return self._known[job.id]
        acc = self.discover().get(job.address)
        self._known[job.id] = acc
        return acc

    def device_changed(self, job: Job) -> None:
        """The load ran: the device must be read again."""
        self._known.pop(job.id, None)

    @staticmethod
    def loaded(acc, job: Job) -> str | None:
        """The function id ``acc`` shows in ``job``'s region, if any."""
        for region in (acc.fpga_regions if acc is not None else ()):
            if region.name == job.region:
                return region.function_id
        return None

    def apply(self, job: Job, state: str, acc,
              known=None) -> fencing.FenceResult:
        """Write the ``reserved`` that ``state`` gives to the provider."""
        result = self.fencer.apply(job.address, job.provider, state, acc,
                                   known=known)
        if result.generation is not None:
            self.seen.setdefault(job.id, {})['inventory'] = (
                result.generation, result.inventories)
        return result

    def setup_privileged(self) -> None:
        """Run ``privileged_setup`` once, whichever job gets here first.

        :raises Exception: whatever it raised (it runs again next time).
        """
        with self._setup_lock:
            if not self._set_up:
                self._privileged_setup()
                self._set_up = True

    def sync_traits(self, job: Job, acc, add=frozenset(),
                    remove=frozenset(), **check) -> None:
        """Write the provider's traits as Nova's update computes them.

        Plus ``add``, less ``remove``; the store's owned traits likewise.

        :raises Stalled: Placement cannot be written now.
        """
        row = self.store.devices(job.nodename).get(job.address)
        owned = (set(acc.traits) | {providers.OWNER_TRAIT}
                 if acc is not None else set())
        previous = set(row.owned_traits) if row else set()
        stale = previous - owned if acc is not None else set()
        seen = self.seen.setdefault(job.id, {})
        try:
            found = self.placement.replace_traits(
                job.provider, owned, stale, set(add), set(remove),
                read=seen.pop('traits', None), **check)
        except ProgrammingError as exc:
            raise Stalled(str(exc))
        now = None
        if found is not None:
            now, seen['generation'] = found
        if acc is not None and row is not None:
            remembered = owned | (stale & (now or set()))
            if remembered != previous:
                self.store.set_owned_traits(job.nodename, job.address,
                                            remembered)
