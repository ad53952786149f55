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

"""The libvirt domain of an instance: devices hot-plugged in and out.

:func:`open_guest` gives a :class:`LibvirtGuest` (a direct connection,
with libvirt's event loop for ``DEVICE_REMOVED`` events) or, when the
caller may not open libvirt's socket, a :class:`PrivsepGuest` (through
the ``libvirt_hotplug`` privsep daemon, polling). Both attach a unit,
tell whether it is present, and detach units waiting until the guest
released them (:func:`wait_gone`).

What a unit becomes in the domain XML is the job of a small strategy
object (:class:`PciHostdev` in production), so the whole flow can be
exercised with any device the hypervisor at hand can hot-plug.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Callable, Protocol
from xml.etree import ElementTree

from cyborg_drivers import guest_xml
from cyborg_nova.hotplug.errors import AttachError

LOG = logging.getLogger(__name__)

#: Nova's default for the kvm and qemu virt types.
DEFAULT_URI = 'qemu:///system'
#: Seconds to wait for the guest to release a device.
DEFAULT_TIMEOUT = 20.0
#: How often the domain XML is re-read while waiting, in case an event
#: never arrives (no event loop, or a lost connection).
POLL_INTERVAL = 1.0
#: How often it is re-read just after a device-removed event.
EVENT_RECHECK = 0.05


class DeviceStrategy(Protocol):
    """What a unit becomes in the domain XML, and how to find it there."""

    def device_xml(self, unit: str) -> str:
        """The ``<devices>`` child to attach (and detach) for ``unit``."""

    def in_domain(self, domain: ElementTree.Element, unit: str) -> bool:
        """Whether the parsed domain XML holds the device of ``unit``."""


class PciHostdev:
    """Each unit as a managed PCI ``<hostdev>``, as Nova's spawn adds it.

    Built by :func:`cyborg_drivers.guest_xml.pci_hostdev_xml`, the same
    text Nova's config classes give, so a device attached here and one
    the guest got at spawn are the same XML and detach the same way.
    """

    def device_xml(self, unit: str) -> str:
        return guest_xml.pci_hostdev_xml(unit)

    def in_domain(self, domain: ElementTree.Element, unit: str) -> bool:
        return guest_xml.hostdev_in_domain(domain, unit)


def _import_libvirt():
    try:
        import libvirt
    except ImportError:
        raise AttachError('libvirt-python is not installed here; install '
                          'it (it is what nova-compute uses) to attach '
                          'devices')
    return libvirt


_loop_lock = threading.Lock()
_loop_started = False


def start_event_loop(libvirt) -> None:
    """libvirt's default event loop in a daemon thread, once per process.

    Must run before the connection whose events are wanted is opened.
    """
    global _loop_started
    with _loop_lock:
        if _loop_started:
            return
        libvirt.virEventRegisterDefaultImpl()

        def run() -> None:
            while True:
                libvirt.virEventRunDefaultImpl()
        threading.Thread(target=run, name='libvirt-events',
                         daemon=True).start()
        _loop_started = True


def is_permission_error(libvirt, exc) -> bool:
    """Whether opening a connection failed for lack of permission."""
    code = exc.get_error_code()
    if code in (libvirt.VIR_ERR_AUTH_FAILED, libvirt.VIR_ERR_AUTH_CANCELLED,
                getattr(libvirt, 'VIR_ERR_AUTH_UNAVAILABLE', -1),
                libvirt.VIR_ERR_OPERATION_DENIED):
        return True
    return 'Permission denied' in guest_xml.libvirt_reason(exc)


def wait_gone(present: Callable[[str], bool], units: list[str],
              timeout: float, started: float, server: str,
              woken: threading.Event) -> str:
    """Wait until no unit is ``present``; how that was learnt.

    Re-checks when ``woken`` is set (by a device-removed event), then
    every :data:`EVENT_RECHECK` seconds for a moment (libvirt sends the
    event just before the domain XML shows the device gone), and every
    :data:`POLL_INTERVAL` seconds otherwise, until ``timeout`` seconds
    after ``started`` (monotonic: when the detach was asked for).

    :returns: 'immediate', 'event' or 'poll' (what led to the check that
        found them gone).
    :raises AttachError: some were still there at the deadline.
    """
    deadline = started + timeout
    how = 'immediate'
    last_event = None
    while True:
        left = [u for u in units if present(u)]
        if not left:
            return how
        now = time.monotonic()
        if now >= deadline:
            raise AttachError('the guest of instance %s did not release %s '
                              'within %gs' % (server, ', '.join(left),
                                              timeout))
        settling = last_event is not None and now - last_event < 1.0
        interval = EVENT_RECHECK if settling else POLL_INTERVAL
        if woken.wait(min(interval, deadline - now)):
            woken.clear()
            last_event = time.monotonic()
            how = 'event'
        elif not settling:
            how = 'poll'


@dataclasses.dataclass
class RemovalWait:
    """How a detach learned that the devices were gone."""

    #: 'event' (a DEVICE_REMOVED event woke the check that found them
    #: gone), 'poll' (a periodic re-read did) or 'immediate' (gone by the
    #: time libvirt's detach call returned).
    confirmed_by: str
    #: Aliases of the DEVICE_REMOVED events received.
    events: list[str]


class LibvirtGuest:
    """The libvirt domain of one instance, through a direct connection.

    :param strategy: turns units into device XML; :class:`PciHostdev`
        unless a test hot-plugs something this host can.
    """

    def __init__(self, libvirt, conn, dom, server: str,
                 strategy: DeviceStrategy) -> None:
        self.libvirt = libvirt
        self.conn = conn
        self.dom = dom
        self.server = server
        self.strategy = strategy

    def close(self) -> None:
        try:
            self.conn.close()
        except self.libvirt.libvirtError:
            pass

    def _where(self, unit: str) -> int:
        try:
            return guest_xml.where_attached(
                self.libvirt, self.dom,
                lambda root: self.strategy.in_domain(root, unit))
        except self.libvirt.libvirtError as exc:
            raise AttachError('cannot read the domain of instance %s: %s'
                              % (self.server, guest_xml.libvirt_reason(exc)))

    def present(self, unit: str) -> bool:
        """Whether ``unit``'s device is in the guest or its definition."""
        return bool(self._where(unit))

    def attach(self, unit: str) -> None:
        """Hot-plug ``unit`` into the guest and its definition.

        libvirt changes the definition only once the guest took the
        device, so a refusal leaves both as they were.

        :raises AttachError: libvirt refused; its reason is the message.
        """
        xml = self.strategy.device_xml(unit)
        try:
            self.dom.attachDeviceFlags(
                xml, guest_xml.hotplug_flags(self.libvirt, self.dom))
        except self.libvirt.libvirtError as exc:
            raise AttachError(guest_xml.libvirt_reason(exc))

    def detach_and_wait(self, units: list[str], timeout: float
                        ) -> RemovalWait:
        """Ask the guest to release ``units``; wait until they are gone.

        The definition loses a device at once; a running guest releases
        it when it acknowledges the unplug (at once for USB devices, only
        with the guest's cooperation for PCI ones), which libvirt reports
        with a ``DEVICE_REMOVED`` event.

        :raises AttachError: libvirt refused (its reason is the message),
            or the devices were still there after ``timeout`` seconds.
        """
        libvirt = self.libvirt
        started = time.monotonic()
        woken = threading.Event()
        events: list[str] = []

        def removed(conn, dom, alias, opaque) -> None:
            events.append(alias)
            woken.set()
        callback = None
        if self.dom.isActive():
            try:
                callback = self.conn.domainEventRegisterAny(
                    self.dom, libvirt.VIR_DOMAIN_EVENT_ID_DEVICE_REMOVED,
                    removed, None)
            except libvirt.libvirtError as exc:
                LOG.warning('No device-removed events (%s): polling the '
                            'domain XML instead',
                            guest_xml.libvirt_reason(exc))
        try:
            live = 0
            for unit in units:
                flags = self._where(unit)
                live += bool(flags & libvirt.VIR_DOMAIN_AFFECT_LIVE)
                try:
                    self.dom.detachDeviceFlags(
                        self.strategy.device_xml(unit), flags)
                except libvirt.libvirtError as exc:
                    raise AttachError(
                        'libvirt refused to detach %s from instance %s: %s'
                        % (unit, self.server, guest_xml.libvirt_reason(exc)))
            how = wait_gone(self.present, units, timeout, started,
                            self.server, woken)
            # The guest let go; let the events of that reach the log.
            settle = min(time.monotonic() + 1.0, started + timeout)
            while (callback is not None and len(events) < live
                   and time.monotonic() < settle):
                woken.wait(0.05)
                woken.clear()
            return RemovalWait(how, list(events))
        finally:
            if callback is not None:
                try:
                    self.conn.domainEventDeregisterAny(callback)
                except libvirt.libvirtError:
                    pass


class PrivsepGuest:
    """The domain of one instance through the ``libvirt_hotplug`` daemon.

    For callers that may not open libvirt's socket. Only PCI hostdevs of
    validated addresses cross the channel (the daemon builds the XML), and
    no events: removal is confirmed by polling the domain.
    """

    def __init__(self, server: str) -> None:
        import privsep.libvirt
        self.privileged = privsep.libvirt
        self.server = server
        # Unknown instances are refused here, before anything changes.
        self._call(self.privileged.check_domain)

    def _call(self, func, *args):
        import privsep
        try:
            return func(self.server, *args)
        except (privsep.InvalidArgument, privsep.NotPossible) as exc:
            raise AttachError(str(exc))

    def close(self) -> None:
        pass

    def present(self, unit: str) -> bool:
        return self._call(self.privileged.hostdev_attached, unit)

    def attach(self, unit: str) -> None:
        self._call(self.privileged.attach_hostdev, unit)

    def detach_and_wait(self, units: list[str], timeout: float
                        ) -> RemovalWait:
        started = time.monotonic()
        for unit in units:
            try:
                self._call(self.privileged.detach_hostdev, unit)
            except AttachError as exc:
                raise AttachError(
                    'libvirt refused to detach %s from instance %s: %s'
                    % (unit, self.server, exc))
        return RemovalWait(wait_gone(self.present, units, timeout, started,
                                     self.server, threading.Event()), [])


def open_guest(uri: str, server: str,
               strategy: DeviceStrategy | None = None):
    """The libvirt domain of instance ``server``.

    Without a ``strategy`` (PCI hostdevs), falls back to the
    ``libvirt_hotplug`` privsep daemon when the connection is refused for
    lack of permission.

    :raises AttachError: libvirt is unreachable, or has no such domain.
    """
    libvirt = _import_libvirt()
    # Errors are reported through exceptions; the default handler would
    # also print each one on stderr.
    libvirt.registerErrorHandler(lambda ctx, err: None, None)
    start_event_loop(libvirt)
    try:
        conn = libvirt.open(uri)
    except libvirt.libvirtError as exc:
        if strategy is None and is_permission_error(libvirt, exc):
            LOG.info('Cannot open %s (%s): using the libvirt_hotplug '
                     'privsep daemon', uri, guest_xml.libvirt_reason(exc))
            return PrivsepGuest(server)
        raise AttachError('cannot connect to libvirt at %s: %s'
                          % (uri, guest_xml.libvirt_reason(exc)))
    try:
        dom = conn.lookupByUUIDString(server)
    except libvirt.libvirtError as exc:
        conn.close()
        if exc.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
            raise AttachError('no instance %s on this host (libvirt at %s '
                              'has no such domain)' % (server, uri))
        raise AttachError('cannot look up instance %s: %s'
                          % (server, guest_xml.libvirt_reason(exc)))
    return LibvirtGuest(libvirt, conn, dom, server,
                        strategy or PciHostdev())
