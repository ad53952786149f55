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

"""Fencing: writing an accelerator provider's ``reserved`` at once.

Nova's resource tracker owns the provider tree and reports it on its own
schedule (every minute by default). A device that vanishes or turns
unhealthy in between must stop being scheduled now, so the agent (and the
FPGA programmer, around a load) writes ``reserved`` itself, and only
``reserved``: the value comes from the same pure function Nova's update
uses (:func:`cyborg_nova.providers.reserved`), so when Nova's update
comes it computes the same number and the two writers converge instead
of fighting. Totals, other inventory fields, traits and the providers
themselves are left to Nova: a provider that does not exist is not
created, and one that is deleted meanwhile is not recreated.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Callable

from keystoneauth1 import adapter as ks_adapter

from cyborg_drivers import device as device_model
from cyborg_nova import placement
from cyborg_nova import providers

LOG = logging.getLogger(__name__)

#: The fields of an inventory record a PUT must carry unchanged.
INVENTORY_FIELDS = ('total', 'reserved', 'min_unit', 'max_unit',
                    'step_size', 'allocation_ratio')

WRITTEN = 'written'
UNCHANGED = 'unchanged'
NO_PROVIDER = 'no-provider'
FAILED = 'failed'


def wanted_reserved(state: str,
                    accelerator: device_model.Accelerator | None,
                    resource_class: str, total: int, kept: int = 0) -> int:
    """The ``reserved`` Nova's next update gives this inventory record.

    :param state: the device's lifecycle state in the state store.
    :param accelerator: the device as discovered now; None if it is gone.
    :param resource_class: the record's class on the provider.
    :param total: the record's total in Placement (never changed here).
    :param kept: the provider's units a domain holds without an
        allocation (the unit store's ``kept_for`` rows).
    """
    if accelerator is None or resource_class != accelerator.resource_class:
        # Gone, or a class the device no longer offers: Nova keeps such a
        # class only while instances hold it, and then fully reserved.
        return total
    reserved = providers.reserved(state, accelerator, total, kept)
    # Units that left the device (fewer VFs than Placement's total) stay
    # held until Nova's update shrinks the total; the capacity offered is
    # then what the device has now, as after that update.
    return min(total, max(reserved, total - accelerator.total))


def plan(inventories: dict[str, dict], state: str,
         accelerator: device_model.Accelerator | None,
         kept: int = 0) -> dict[str, int]:
    """Resource class -> new ``reserved``, for records that must change."""
    changes = {}
    for rc, record in sorted(inventories.items()):
        wanted = wanted_reserved(state, accelerator, rc, record['total'],
                                 kept)
        if record.get('reserved', 0) != wanted:
            changes[rc] = wanted
    return changes


@dataclasses.dataclass(frozen=True)
class FenceResult:
    """What one fence of one provider did."""

    address: str
    uuid: str
    #: WRITTEN, UNCHANGED, NO_PROVIDER or FAILED.
    outcome: str
    #: Resource class -> reserved, as Placement has it afterwards (what
    #: was written, or read when nothing had to be).
    reserved: dict[str, int] = dataclasses.field(default_factory=dict)
    error: str | None = None
    #: time.monotonic() when Placement confirmed the last write.
    at: float = 0.0
    #: The provider's generation and inventory records afterwards (None
    #: when not known): a caller's next write can start from them.
    generation: int | None = None
    inventories: dict[str, dict] | None = None


def retryable(exc: placement.PlacementError) -> bool:
    """A conflict or a transient failure: read again and retry."""
    return exc.status is None or exc.status == 409 or exc.server_error


class Fencer:
    """Writes ``reserved`` of accelerator providers through keystoneauth.

    :param client: an adapter for Placement (``placement.from_conf``).
    :param attempts: reads-and-writes tried per provider before giving up
        on conflicts or transient errors.
    :param backoff: first delay between attempts, doubled each time.
    :param timeout: seconds per request when ``[placement] timeout`` is
        unset: a Placement that hangs must not hold the udev thread.
    :param kept: provider uuid -> its units kept for a domain (the unit
        store's :meth:`~cyborg_nova.store.units.UnitTable.kept`), so an
        unfence leaves those reserved as Nova's update does.
    """

    def __init__(self, client: ks_adapter.Adapter, attempts: int = 5,
                 backoff: float = 0.05, timeout: float = 10.0,
                 kept: Callable[[], dict[str, int]] | None = None) -> None:
        self.client = client
        self.attempts = attempts
        self.backoff = backoff
        self.timeout = timeout
        self.kept = kept

    @property
    def api(self) -> placement.Client:
        """The Placement client over :attr:`client`, as it is now."""
        # Built at each use: a client swapped in after construction (a
        # test wrapping it to fault requests) is the one used.
        return placement.Client(self.client, timeout=self.timeout)

    def apply(self, address: str, uuid: str, state: str,
              accelerator: device_model.Accelerator | None,
              known: tuple[int, dict[str, dict]] | None = None
              ) -> FenceResult:
        """Bring provider ``uuid``'s ``reserved`` to what it should be.

        Never raises for Placement's answers or its absence: the result
        says what happened (and it is logged).

        :param known: the provider's generation and inventory records as
            the caller last saw them (its own last write): the first
            attempt writes from them without reading; a conflict makes
            the next attempt read.
        """
        def attempt(number: int) -> FenceResult:
            return self._attempt(address, uuid, state, accelerator,
                                 known if not number else None)

        def failed(number: int, exc: placement.PlacementError) -> None:
            LOG.debug('Fencing %s (provider %s), attempt %d: %s',
                      address, uuid, number, exc)
        try:
            return placement.retry(attempt, self.attempts, self.backoff,
                                   retry_on=retryable, after=failed)
        except placement.PlacementError as exc:
            LOG.warning('Could not fence accelerator %s (provider %s) '
                        'after %d attempts: %s; it is retried after the '
                        'next discovery', address, uuid, self.attempts, exc)
            return FenceResult(address, uuid, FAILED, error=str(exc))

    def _attempt(self, address: str, uuid: str, state: str,
                 accelerator: device_model.Accelerator | None,
                 known: tuple[int, dict[str, dict]] | None = None
                 ) -> FenceResult:
        if known is not None:
            generation, inventories = known
            inventories = {rc: dict(r) for rc, r in inventories.items()}
        else:
            try:
                body = self.api.provider_inventories(uuid)
            except placement.PlacementError as exc:
                return self._refused(address, uuid, exc)
            generation = body['resource_provider_generation']
            inventories = body['inventories']
        kept = self.kept().get(uuid, 0) if self.kept is not None else 0
        changes = plan(inventories, state, accelerator, kept)
        now = {rc: r.get('reserved', 0) for rc, r in inventories.items()}
        if not changes:
            return FenceResult(address, uuid, UNCHANGED, now,
                               generation=generation,
                               inventories=inventories)
        for rc, reserved in changes.items():
            record = {k: inventories[rc][k] for k in INVENTORY_FIELDS
                      if k in inventories[rc]}
            record['reserved'] = reserved
            try:
                generation = self.api.put_provider_inventory(
                    uuid, rc, record, generation)
            except placement.PlacementError as exc:
                return self._refused(address, uuid, exc)
            now[rc] = reserved
            inventories[rc] = dict(inventories[rc], reserved=reserved)
            LOG.info('Accelerator %s: %s reserved %d of %d on provider %s '
                     '(%s)', address, rc, reserved, record['total'], uuid,
                     'fenced' if reserved else 'unfenced')
        return FenceResult(address, uuid, WRITTEN, now, at=time.monotonic(),
                           generation=generation, inventories=inventories)

    @staticmethod
    def _refused(address: str, uuid: str,
                 exc: placement.PlacementError) -> FenceResult:
        """The result of a request Placement refused.

        :raises placement.PlacementError: ``exc``, when it is worth
            another attempt.
        """
        if exc.not_found:
            # Nova has not created it yet, or has removed it: either
            # way it is Nova's to create, and nothing can land on it.
            return FenceResult(address, uuid, NO_PROVIDER)
        if retryable(exc):
            raise exc
        LOG.error('Cannot fence accelerator %s (provider %s): %s', address,
                  uuid, exc)
        return FenceResult(address, uuid, FAILED, error=str(exc))
