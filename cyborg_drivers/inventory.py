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

"""The host's current accelerators, kept up to date by udev events.

A full discovery runs at start and on request; a PCI uevent re-discovers
only the accelerator the event's function belongs to (its PF, its card's
other functions), so a hot-plug or a VF count change is seen within the
event's latency, not the next periodic cycle.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading

from cyborg_drivers import device as device_model
from cyborg_drivers import discovery
from cyborg_drivers import events
from cyborg_drivers import sysfs

LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Change:
    """What one refresh changed, by accelerator address."""

    added: tuple[device_model.Accelerator, ...] = ()
    removed: tuple[device_model.Accelerator, ...] = ()
    changed: tuple[device_model.Accelerator, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)


class HostInventory:
    """Accelerators by address, refreshed whole or per event.

    Thread-safe: the udev watcher calls :meth:`handle_event` from its own
    thread while readers call :meth:`accelerators`.
    """

    def __init__(self, discoverer: discovery.Discoverer) -> None:
        self.discoverer = discoverer
        self._devices: dict[str, device_model.Accelerator] = {}
        self._lock = threading.Lock()
        # One discovery at a time, applied before the next starts: a full
        # refresh read before an event must not be applied after it.
        self._discovering = threading.Lock()

    def accelerators(self) -> list[device_model.Accelerator]:
        with self._lock:
            return [self._devices[a] for a in sorted(self._devices)]

    def refresh(self) -> Change:
        """Re-discover the whole host."""
        with self._discovering:
            result = self.discoverer.discover()
            with self._lock:
                return self._apply(result.by_address(), set(self._devices))

    def handle_event(self, event: events.PciEvent) -> Change:
        """Re-discover the accelerator ``event``'s function belongs to."""
        with self._discovering:
            return self._handle_event(event)

    def _handle_event(self, event: events.PciEvent) -> Change:
        with self._lock:
            owners = [a for a in self._devices.values()
                      if event.address in a.addresses]
            scope = {event.address}
            for owner in owners:
                scope.update(owner.addresses)
        scope.update(self._relatives(event.address))
        # The kernel sends "remove" as it deletes the device; its sysfs
        # entries may not be gone yet when the event is handled.
        gone = [event.address] if event.action == 'remove' else []
        result = self.discoverer.discover(only=sorted(scope), gone=gone)
        with self._lock:
            # Only accelerators rooted in the scope can have changed.
            stale = {a for a in self._devices if a in scope}
            change = self._apply(result.by_address(), stale)
        if change:
            LOG.info('PCI %s of %s: %d added, %d removed, %d changed',
                     event.action, event.address, len(change.added),
                     len(change.removed), len(change.changed))
        return change

    def _relatives(self, address: str) -> set[str]:
        """The PF of a VF and the other functions of its slot.

        A VF event must re-read its PF (the accelerator), and a new
        function of a multi-function card (an Alveo's user function)
        changes the card.
        """
        snapshot = sysfs.PciSnapshot(self.discoverer.sysfs_root, only=())
        related = set()
        pf = snapshot.physfn(address)
        if pf:
            related.add(pf)
        slot = address.rpartition('.')[0]
        try:
            names = os.listdir(snapshot.devices_dir)
        except OSError:
            names = []
        related.update(n for n in names if n.rpartition('.')[0] == slot)
        return related

    def _apply(self, fresh: dict[str, device_model.Accelerator],
               stale: set[str]) -> Change:
        added, removed, changed = [], [], []
        for address in sorted(stale - set(fresh)):
            removed.append(self._devices.pop(address))
        for address, accelerator in sorted(fresh.items()):
            old = self._devices.get(address)
            if old is None:
                added.append(accelerator)
            elif old != accelerator:
                changed.append(accelerator)
            self._devices[address] = accelerator
        return Change(tuple(added), tuple(removed), tuple(changed))
