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

"""The host's own accelerators: inventory, state, health and fencing.

:class:`LocalHost` ties :class:`~cyborg_drivers.inventory.HostInventory`
(what is on the bus now) to the state store (what each device's lifecycle
state is) and to the :class:`~cyborg_nova.fencing.Fencer` (what
Placement is told at once). The service calls :meth:`LocalHost.refresh`
for full discoveries and hands udev events to
:meth:`LocalHost.handle_event`; the API lists :meth:`LocalHost.hardware`.
"""

from __future__ import annotations

import logging
import threading
from typing import Iterable

from cyborg_drivers import base
from cyborg_drivers import device as device_model
from cyborg_drivers import discovery
from cyborg_drivers import events
from cyborg_drivers import inventory
from cyborg_nova import fencing
from cyborg_nova import health
from cyborg_nova import notifications
from cyborg_nova import providers
from cyborg_nova import store as state_store

LOG = logging.getLogger(__name__)


class _RecordingDiscoverer(discovery.Discoverer):
    """A Discoverer that remembers, per thread, its last result.

    HostInventory hands back only what changed; fencing also needs to
    know why a device was not found (a driver failing is not the device
    leaving). Per thread, because the udev thread and the discovery
    thread discover concurrently and each reads its own result.
    """

    def __init__(self, drivers: list[base.AcceleratorDriver],
                 sysfs_root: str) -> None:
        super().__init__(drivers, sysfs_root)
        self._local = threading.local()

    def discover(self, only=None, gone=()) -> discovery.DiscoveryResult:
        result = super().discover(only, gone)
        self._local.result = result
        return result

    @property
    def last_result(self) -> discovery.DiscoveryResult | None:
        return getattr(self._local, 'result', None)


class LocalHost:
    """This host's accelerators as the agent sees and fences them.

    :param drivers: the accelerator drivers to run (see :meth:`set_drivers`).
    :param sysfs_root: where sysfs is (``[cyborg_nova] sysfs_root``).
    :param store: the host's state store, shared with nova-compute.
    :param nodename: Nova's hypervisor hostname of this host.
    :param fencer: writes ``reserved`` to Placement; None: no fencing.
    :param auto_ready: new devices start ``ready`` (else ``inactive``),
        as ``[cyborg_nova] auto_ready`` makes nova-compute do.
    :param aer: evaluates the devices' PCIe AER counts at each discovery
        and on the kernel's error-recovery events; None: not evaluated.
    """

    def __init__(self, drivers: list[base.AcceleratorDriver],
                 sysfs_root: str, store: state_store.StateStore,
                 nodename: str, fencer: fencing.Fencer | None = None,
                 auto_ready: bool = False,
                 notifier: notifications.Notifier | None = None,
                 aer: health.AerHealth | None = None) -> None:
        self._discoverer = _RecordingDiscoverer(drivers, sysfs_root)
        self.inventory = inventory.HostInventory(self._discoverer)
        self.store = store
        self.nodename = nodename
        self.fencer = fencer
        self.initial_state = (state_store.READY if auto_ready
                              else state_store.INACTIVE)
        # Serialises fencing: the udev thread and the discovery thread
        # must not interleave reads and writes of the same provider.
        self._fence_lock = threading.Lock()
        # Addresses whose last fence failed: retried after each discovery.
        self._pending: set[str] = set()
        # address -> state last fenced with: a state changed in the
        # store (by the CLI or the conductor) is fenced at the next
        # discovery even when the hardware did not change.
        self._fenced_state: dict[str, str] = {}
        self._refreshed = False
        self.last_errors: dict[str, str] = {}
        self.notifier = notifier
        # address -> state last seen, for the "ready" notification.
        self._seen_state: dict[str, str] = {}
        self.aer = aer

    @property
    def drivers(self) -> list[base.AcceleratorDriver]:
        return self._discoverer.drivers

    def set_drivers(self, drivers: list[base.AcceleratorDriver]) -> None:
        """Use these drivers from the next discovery on."""
        self._discoverer.drivers = drivers

    # -- the listing -------------------------------------------------------

    def accelerators(self) -> list[device_model.Accelerator]:
        return self.inventory.accelerators()

    def hardware(self) -> list[dict]:
        """The internal API's ``GET /hardware`` entries of this host."""
        rows = self.store.devices(self.nodename)
        effects = self.store.aer.effects(self.nodename)
        entries = []
        for accelerator in self.accelerators():
            entry = accelerator.to_hardware(self.nodename)
            row = rows.get(accelerator.address)
            entry['state'] = row.state if row else None
            problems = list(accelerator.problems)
            if row and row.state in (state_store.UNHEALTHY,
                                     state_store.FAILED):
                problems.append('state %s: %s' % (row.state,
                                                  row.reason or 'no reason'))
            entry['health'] = {'healthy': not problems,
                               'problems': problems}
            # Beside its counters (entry['aer']): what they did.
            effect = effects.get(accelerator.address)
            entry['aer_effect'] = {
                'effect': effect.effect, 'reason': effect.reason,
                'since': effect.since} if effect else None
            entries.append(entry)
        return entries

    # -- keeping up to date ------------------------------------------------

    def prime(self) -> None:
        """Discover the host and record it in the store, without fencing.

        So the API lists the host from its first request; the fencing
        that goes with it is the first :meth:`refresh`'s (which checks
        every device, changed or not), run where Placement's latency
        does not hold up the start.

        :raises sysfs.NoSysfs: there is no PCI bus to read.
        """
        self.inventory.refresh()
        self._sync(self.accelerators())

    def refresh(self) -> list[fencing.FenceResult]:
        """Discover the whole host; fence what changed.

        The first refresh checks every device the store knows of (and so
        every provider Nova made for this host): what changed while the
        agent was not running is fenced too.

        :raises sysfs.NoSysfs: there is no PCI bus to read.
        """
        before = self._by_address()
        change = self.inventory.refresh()
        result = self._discoverer.last_result
        self.last_errors = dict(result.driver_errors) if result else {}
        rows = self._sync(self.accelerators())
        rows = self._evaluate(self.accelerators(), rows)
        self._notify(before, change, rows)
        affected = self._addresses(change)
        if not self._refreshed:
            affected |= set(rows)
            self._refreshed = True
        with self._fence_lock:
            affected |= self._pending
            # Devices whose state changed in the store since last fenced.
            affected |= {a for a, row in rows.items()
                         if a in self._fenced_state
                         and self._fenced_state[a] != row.state}
        return self._fence(affected, rows, result)

    def handle_event(self, event: events.PciEvent
                     ) -> list[fencing.FenceResult]:
        """Re-discover the device of a udev event; fence what changed.

        An event of the kernel's PCIe error recovery (``ERROR_EVENT``)
        also has the AER counts of the device it is about evaluated, and
        the device fenced if they take it out, whether or not anything
        else about it changed; a failed recovery fences it whatever the
        counts say (:meth:`~cyborg_nova.health.AerHealth.recovery_failed`).
        """
        before = self._by_address()
        change = self.inventory.handle_event(event)
        erred = []
        if event.error_event:
            erred = [a for a in self.accelerators()
                     if event.address in a.addresses
                     or event.address in a.units]
            LOG.warning('PCIe error recovery event %s on %s (accelerator '
                        '%s)', event.error_event, event.address,
                        ', '.join(a.address for a in erred) or 'none')
        if not change and not erred:
            return []
        result = self._discoverer.last_result
        rows = self._sync(change.added + change.changed)
        seen = {a.address: a for a in change.added + change.changed}
        seen.update((a.address, a) for a in erred)
        rows = self._evaluate(seen.values(), rows)
        if event.error_event == events.FAILED_RECOVERY:
            rows = self._recovery_failed(erred, event.address, rows)
        self._notify(before, change, rows)
        return self._fence(self._addresses(change) | set(seen), rows,
                           result)

    def _by_address(self) -> dict[str, device_model.Accelerator]:
        return {a.address: a for a in self.accelerators()}

    def _notify(self, before: dict[str, device_model.Accelerator],
                change: inventory.Change,
                rows: dict[str, state_store.DeviceState]) -> None:
        """Lifecycle notifications for what this discovery changed."""
        if self.notifier is None:
            return

        def emit(event, accelerator, reason=None):
            row = rows.get(accelerator.address)
            self.notifier.emit(event, accelerator, self.nodename,
                               row.state if row else None, reason)
        for accelerator in change.added:
            emit('discovered', accelerator)
        for accelerator in change.removed:
            emit('removed', accelerator, 'not on the bus any more')
        for accelerator in change.changed:
            old = before.get(accelerator.address)
            if accelerator.problems and not (old and old.problems):
                emit('unhealthy', accelerator,
                     '; '.join(accelerator.problems))
            elif old and old.problems and not accelerator.problems:
                emit('healthy', accelerator)
        added = {a.address for a in change.added}
        for accelerator in self.accelerators():
            row = rows.get(accelerator.address)
            if row is None:
                continue
            previous = self._seen_state.get(accelerator.address)
            self._seen_state[accelerator.address] = row.state
            # Ready now and not before; a device the agent first sees at
            # its start is not news unless it was just discovered.
            became_ready = (previous not in (None, state_store.READY)
                            or (previous is None
                                and accelerator.address in added))
            if row.state == state_store.READY and became_ready:
                emit('ready', accelerator)

    @staticmethod
    def _addresses(change: inventory.Change) -> set[str]:
        return {a.address for a in
                change.added + change.removed + change.changed}

    def _sync(self, found: Iterable[device_model.Accelerator]
              ) -> dict[str, state_store.DeviceState]:
        """Record the devices found (as Nova's update does); every row."""
        return self.store.sync(self.nodename, found, self.initial_state)

    def _evaluate(self, found: Iterable[device_model.Accelerator],
                  rows: dict[str, state_store.DeviceState]
                  ) -> dict[str, state_store.DeviceState]:
        """``rows`` after the AER counts of ``found`` took their effects."""
        if self.aer is None:
            return rows
        try:
            return self.aer.evaluate(self.nodename, found, rows)
        except Exception:
            # Fencing what changed must not wait for a store or rule
            # failure here; the next discovery evaluates again.
            LOG.exception('PCIe AER counts not evaluated')
            return rows

    def _recovery_failed(self, found: Iterable[device_model.Accelerator],
                         function: str,
                         rows: dict[str, state_store.DeviceState]
                         ) -> dict[str, state_store.DeviceState]:
        """``rows`` after ``found`` were fenced for a failed recovery."""
        if self.aer is None:
            return rows
        for accelerator in found:
            try:
                rows = self.aer.recovery_failed(self.nodename, accelerator,
                                                function, rows)
            except Exception:
                # Fencing what changed must not wait for a store failure
                # here; discovery does not see a failed recovery again,
                # only the kernel's next such event does.
                LOG.exception('Failed recovery of %s not recorded',
                              function)
        return rows

    def _fence(self, addresses: set[str],
               rows: dict[str, state_store.DeviceState],
               result: discovery.DiscoveryResult | None
               ) -> list[fencing.FenceResult]:
        if self.fencer is None or not addresses:
            return []
        current = {a.address: a for a in self.accelerators()}
        results = []
        with self._fence_lock:
            for address in sorted(addresses):
                accelerator = current.get(address)
                if accelerator is None and result is not None and (
                        result.driver_errors or address in result.problems):
                    # Not found because a driver or a read failed, not
                    # because it left: Nova's update leaves such a
                    # provider alone, and so does the agent.
                    continue
                row = rows.get(address)
                # No row: nothing Nova reported from this store; fencing
                # is the safe reading of "unknown".
                state = row.state if row else state_store.INACTIVE
                outcome = self.fencer.apply(
                    address, providers.provider_uuid(self.nodename,
                                                     address),
                    state, accelerator)
                if outcome.outcome == fencing.FAILED:
                    self._pending.add(address)
                else:
                    self._pending.discard(address)
                    self._fenced_state[address] = state
                results.append(outcome)
        return results
