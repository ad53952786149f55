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
import random
import time

from keystoneauth1 import adapter as ks_adapter
from keystoneauth1 import exceptions as ks_exc

from cyborg_drivers import device as device_model
from cyborg_nova import providers

LOG = logging.getLogger(__name__)

#: reserved may equal total from 1.26 on (before, reserved < total).
MICROVERSION = '1.26'
#: The fields of an inventory record a PUT must carry unchanged.
INVENTORY_FIELDS = ('total', 'reserved', 'min_unit', 'max_unit',
                    'step_size', 'allocation_ratio')

WRITTEN = 'written'
UNCHANGED = 'unchanged'
NO_PROVIDER = 'no-provider'
FAILED = 'failed'


def wanted_reserved(state: str,
                    accelerator: device_model.Accelerator | None,
                    resource_class: str, total: int) -> int:
    """The ``reserved`` Nova's next update gives this inventory record.

    :param state: the device's lifecycle state in the state store.
    :param accelerator: the device as discovered now; None if it is gone.
    :param resource_class: the record's class on the provider.
    :param total: the record's total in Placement (never changed here).
    """
    if accelerator is None or resource_class != accelerator.resource_class:
        # Gone, or a class the device no longer offers: Nova keeps such a
        # class only while instances hold it, and then fully reserved.
        return total
    reserved = providers.reserved(state, accelerator, total)
    # Units that left the device (fewer VFs than Placement's total) stay
    # held until Nova's update shrinks the total; the capacity offered is
    # then what the device has now, as after that update.
    return min(total, max(reserved, total - accelerator.total))


def plan(inventories: dict[str, dict], state: str,
         accelerator: device_model.Accelerator | None) -> dict[str, int]:
    """Resource class -> new ``reserved``, for records that must change."""
    changes = {}
    for rc, record in sorted(inventories.items()):
        wanted = wanted_reserved(state, accelerator, rc, record['total'])
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


class _Retry(Exception):
    """A conflict or a transient failure: read again and retry."""


class Fencer:
    """Writes ``reserved`` of accelerator providers through keystoneauth.

    :param client: an adapter for Placement (``placement.from_conf``).
    :param attempts: reads-and-writes tried per provider before giving up
        on conflicts or transient errors.
    :param backoff: first delay between attempts, doubled each time.
    :param timeout: seconds per request when ``[placement] timeout`` is
        unset: a Placement that hangs must not hold the udev thread.
    """

    def __init__(self, client: ks_adapter.Adapter, attempts: int = 5,
                 backoff: float = 0.05, timeout: float = 10.0) -> None:
        self.client = client
        self.attempts = attempts
        self.backoff = backoff
        session = getattr(client, 'session', None)
        self.timeout = getattr(session, 'timeout', None) or timeout

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
        error = ''
        for attempt in range(self.attempts):
            if attempt:
                # Jittered, so two writers that collided do not collide
                # again in lockstep.
                time.sleep(self.backoff * 2 ** (attempt - 1)
                           * random.uniform(0.5, 1.5))
            try:
                return self._attempt(address, uuid, state, accelerator,
                                     known if not attempt else None)
            except _Retry as exc:
                error = str(exc)
                LOG.debug('Fencing %s (provider %s), attempt %d: %s',
                          address, uuid, attempt + 1, error)
        LOG.warning('Could not fence accelerator %s (provider %s) after %d '
                    'attempts: %s; it is retried after the next discovery',
                    address, uuid, self.attempts, error)
        return FenceResult(address, uuid, FAILED, error=error)

    def _request(self, method: str, url: str, **kwargs):
        try:
            resp = getattr(self.client, method)(
                url, raise_exc=False, microversion=MICROVERSION,
                timeout=self.timeout, **kwargs)
        except ks_exc.ClientException as exc:
            raise _Retry('cannot reach Placement: %s' % exc)
        if resp.status_code == 409 or resp.status_code >= 500:
            raise _Retry('Placement answered %s to %s %s: %s' % (
                resp.status_code, method.upper(), url, resp.text[:200]))
        return resp

    def _attempt(self, address: str, uuid: str, state: str,
                 accelerator: device_model.Accelerator | None,
                 known: tuple[int, dict[str, dict]] | None = None
                 ) -> FenceResult:
        url = '/resource_providers/%s/inventories' % uuid
        if known is not None:
            generation, inventories = known
            inventories = {rc: dict(r) for rc, r in inventories.items()}
        else:
            resp = self._request('get', url)
            if resp.status_code == 404:
                # Nova has not created it yet, or has removed it: either
                # way it is Nova's to create, and nothing can land on it.
                return FenceResult(address, uuid, NO_PROVIDER)
            if resp.status_code != 200:
                return self._failed(address, uuid, 'GET', url, resp)
            body = resp.json()
            generation = body['resource_provider_generation']
            inventories = body['inventories']
        changes = plan(inventories, state, accelerator)
        now = {rc: r.get('reserved', 0) for rc, r in inventories.items()}
        if not changes:
            return FenceResult(address, uuid, UNCHANGED, now,
                               generation=generation,
                               inventories=inventories)
        for rc, reserved in changes.items():
            record = {k: inventories[rc][k] for k in INVENTORY_FIELDS
                      if k in inventories[rc]}
            record['reserved'] = reserved
            record['resource_provider_generation'] = generation
            resp = self._request('put', '%s/%s' % (url, rc), json=record)
            if resp.status_code == 404:
                return FenceResult(address, uuid, NO_PROVIDER)
            if resp.status_code != 200:
                return self._failed(address, uuid, 'PUT', url, resp)
            generation = resp.json()['resource_provider_generation']
            now[rc] = reserved
            inventories[rc] = dict(inventories[rc], reserved=reserved)
            LOG.info('Accelerator %s: %s reserved %d of %d on provider %s '
                     '(%s)', address, rc, reserved, record['total'], uuid,
                     'fenced' if reserved else 'unfenced')
        return FenceResult(address, uuid, WRITTEN, now, at=time.monotonic(),
                           generation=generation, inventories=inventories)

    @staticmethod
    def _failed(address: str, uuid: str, method: str, url: str,
                resp) -> FenceResult:
        error = 'Placement answered %s to %s %s: %s' % (
            resp.status_code, method, url, resp.text[:300])
        LOG.error('Cannot fence accelerator %s (provider %s): %s', address,
                  uuid, error)
        return FenceResult(address, uuid, FAILED, error=error)
