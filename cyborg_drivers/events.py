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

"""Host hardware events: PCI uevents from udev, handed to a callback.

Discovery (:mod:`cyborg_drivers.sysfs`) reads the whole bus on a timer;
this module lets an agent react to hot-plug, driver bind/unbind and
attribute changes between those cycles instead of waiting for the next
one. Each uevent of the ``pci`` subsystem becomes a :class:`PciEvent`;
what to do with it (typically: schedule a rediscovery) is up to the
callback.

pyudev (and so libudev) is imported only when a watcher starts, so the
rest of the package, and :func:`event_from_device`, work without it.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
from typing import Any, Callable, TYPE_CHECKING

from cyborg_drivers import pci_address

if TYPE_CHECKING:
    import pyudev

LOG = logging.getLogger(__name__)

# The kernel writes PCI_ID as '%04X:%04X'.
_PCI_ID = re.compile(r'^([0-9a-fA-F]{4}):([0-9a-fA-F]{4})$')

#: The ERROR_EVENT values of the kernel's PCIe error recovery
#: (pci_uevent_ers): sent as a recovery of a fatal or non-fatal error
#: begins, and as it succeeds or fails. Correctable errors send none.
FAILED_RECOVERY = 'FAILED_RECOVERY'
ERROR_EVENTS = ('BEGIN_RECOVERY', 'SUCCESSFUL_RECOVERY', FAILED_RECOVERY)


@dataclasses.dataclass(frozen=True)
class PciEvent:
    """One uevent of one PCI function.

    ``action`` is the kernel/udev action ('add', 'remove', 'change',
    'bind', 'unbind'); ``address`` the PCI address, e.g. '0000:3b:00.0'
    (the device's sys_name); ``vendor_id`` and ``product_id`` lowercase
    4-hex IDs from the PCI_ID property ('8086', '4940'), None when the
    event has none; ``seqnum`` the kernel sequence number, when known.
    ``error_event`` is the ERROR_EVENT property of the 'change' events
    the kernel's PCIe error recovery sends (one of
    :data:`ERROR_EVENTS` with today's kernels), None on any other event.
    """

    action: str
    address: str
    vendor_id: str | None
    product_id: str | None
    seqnum: int | None
    error_event: str | None = None


def _property(device: Any, name: str) -> str | None:
    # pyudev devices expose properties as a mapping on .properties; the
    # mapping interface on the device itself is deprecated there but is
    # what simpler stand-ins offer.
    properties = getattr(device, 'properties', None)
    if properties is None:
        properties = device
    try:
        value = properties.get(name)
    except Exception:
        return None
    return None if value is None else str(value)


def _seqnum(device: Any) -> int | None:
    # libudev reports 0 when the event has no sequence number.
    seqnum = getattr(device, 'sequence_number', None)
    if not seqnum:
        seqnum = _property(device, 'SEQNUM')
    try:
        seqnum = int(seqnum) if seqnum is not None else None
    except (TypeError, ValueError):
        return None
    return seqnum if seqnum else None


def event_from_device(action: str, device: Any) -> PciEvent | None:
    """Make a :class:`PciEvent` from a (pyudev-like) device, or None.

    :param action: the uevent action ('add', 'remove', ...).
    :param device: anything with ``sys_name``, ``properties`` (or ``get``)
        and optionally ``sequence_number`` and ``subsystem``, such as a
        ``pyudev.Device`` received from a monitor.
    :returns: None for anything that is not a PCI function: host bridges,
        devices of other subsystems, events without an action.
    """
    if not action:
        return None
    subsystem = getattr(device, 'subsystem', None)
    if subsystem is not None and subsystem != 'pci':
        return None
    address = getattr(device, 'sys_name', None)
    if not isinstance(address, str):
        return None
    address = address.lower()
    # Host bridges ('pci0000:00') and anything else on the bus are not
    # functions.
    if not pci_address.is_pci_address(address):
        return None
    vendor_id = product_id = None
    match = _PCI_ID.match(_property(device, 'PCI_ID') or '')
    if match:
        vendor_id, product_id = (part.lower() for part in match.groups())
    error_event = _property(device, 'ERROR_EVENT')
    return PciEvent(action=str(action), address=address,
                    vendor_id=vendor_id, product_id=product_id,
                    seqnum=_seqnum(device),
                    error_event=error_event or None)


class PciEventWatcher:
    """Watches udev for PCI uevents and hands each to a callback.

    The callback runs in a background (daemon) thread, one event at a
    time, in the order udev sent them. Exceptions it raises are logged
    and watching continues.

    Usable as a context manager::

        with PciEventWatcher(on_event):
            ...
    """

    def __init__(self, callback: Callable[[PciEvent], None], *,
                 source: str = 'udev',
                 context: pyudev.Context | None = None) -> None:
        """Prepare a watcher; nothing is opened until :meth:`start`.

        :param callback: called with each :class:`PciEvent`.
        :param source: 'udev' (events after udev rules ran, the normal
            choice) or 'kernel' (raw kernel uevents, before any rules).
        :param context: a ``pyudev.Context`` to use; a new one by default.
        """
        self._callback = callback
        self._source = source
        self._context = context
        self._lock = threading.Lock()
        self._observer: Any = None

    @property
    def running(self) -> bool:
        """Whether the observer thread is alive."""
        observer = self._observer
        return observer is not None and observer.is_alive()

    def start(self) -> None:
        """Open the udev netlink socket and start the observer thread.

        Does nothing if already started.
        """
        with self._lock:
            if self._observer is not None:
                return
            import pyudev

            context = self._context or pyudev.Context()
            monitor = pyudev.Monitor.from_netlink(context,
                                                  source=self._source)
            monitor.filter_by('pci')
            # The observer thread would start the monitor itself, but
            # only once it runs: events sent between start() returning
            # and that moment would be lost.
            monitor.start()
            observer = pyudev.MonitorObserver(
                monitor, callback=self._on_device,
                name='pci-event-watcher')
            observer.start()
            self._observer = observer
            LOG.debug('Watching %s for PCI events', self._source)

    def stop(self) -> None:
        """Stop the observer thread and wait for it to end.

        Does nothing if not started. Once this returns (when called from
        any thread but the observer's own) the callback is not called
        again. Can be called from the callback.
        """
        with self._lock:
            observer, self._observer = self._observer, None
        if observer is not None:
            # pyudev's stop() joins unless called from the observer thread.
            observer.stop()
            LOG.debug('Stopped watching for PCI events')

    def __enter__(self) -> PciEventWatcher:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _on_device(self, device: Any) -> None:
        # Runs in the observer thread: anything escaping from here would
        # end that thread and, silently, all further events.
        try:
            event = event_from_device(getattr(device, 'action', None),
                                      device)
            if event is None:
                return
            self._callback(event)
        except Exception:
            LOG.exception('PCI event callback failed for %s',
                          getattr(device, 'sys_path', device))
