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

"""Hot-plugging accelerators into instances and out again.

The generic-driver spec's ``attach-instance`` / ``detach-instance``, run on
the compute host of the instance. Three records must agree about which
instance holds which device:

- the instance's allocations in Placement (what the scheduler counts);
- the units recorded in the host's state store (:mod:`cyborg_nova.
  assignments`; what the guest gets after a hard reboot);
- the devices in the libvirt domain (what the guest sees).

An attach changes them in that order and a failure at any step undoes the
earlier ones, so nothing stays changed: the allocation first (a
read-modify-write of the consumer's allocations, guarded by its
``consumer_generation``), then the units, then libvirt. A detach goes the
other way: the allocation is freed only once libvirt confirms the device
left the guest (a ``DEVICE_REMOVED`` event, or the live XML without it),
because a device the guest has not released is still in use.

What a unit becomes in the domain XML is the job of a small strategy
object (:class:`PciHostdev` in production), so the whole flow can be
exercised with any device the hypervisor at hand can hot-plug.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import threading
import time
import uuid as uuid_lib
from typing import Callable, Iterable, Protocol
from xml.etree import ElementTree

from cyborg_drivers import device as device_model
from cyborg_drivers import guest_xml
from cyborg_nova import assignments as assignments_lib
from cyborg_nova import placement
from cyborg_nova import providers
from cyborg_nova import state as state_store

LOG = logging.getLogger(__name__)

#: Read-modify-write attempts before giving up on a busy consumer.
CONFLICT_RETRIES = 8
#: Seconds before the second attempt, doubled before each next one.
CONFLICT_BACKOFF = 0.02
#: Nova's default for the kvm and qemu virt types.
DEFAULT_URI = 'qemu:///system'
#: Seconds to wait for the guest to release a device.
DEFAULT_TIMEOUT = 20.0
#: How often the domain XML is re-read while waiting, in case an event
#: never arrives (no event loop, or a lost connection).
POLL_INTERVAL = 1.0
#: How often it is re-read just after a device-removed event.
EVENT_RECHECK = 0.05


class AttachError(Exception):
    """An attach or detach was refused or failed.

    The message is one line saying what happened, what was left as it was
    (or what was not) and, where there is one, what to do.
    """


# -- input ------------------------------------------------------------------

def server_uuid(value: str) -> str:
    """``value`` as a canonical instance uuid.

    :raises AttachError: not a uuid.
    """
    try:
        return str(uuid_lib.UUID(value))
    except (ValueError, AttributeError, TypeError):
        raise AttachError('%r is not an instance uuid' % (value,))


def find_accelerator(accelerators: Iterable[device_model.Accelerator],
                     nodename: str, device: str
                     ) -> device_model.Accelerator:
    """The accelerator named by a PCI address or its provider uuid.

    :param accelerators: what discovery finds on this host now.
    :raises AttachError: ``device`` is neither form, names a function no
        enabled driver manages, or names no provider of this host.
    """
    found = list(accelerators)
    value = device.strip().lower()
    if device_model.is_pci_address(value):
        for accelerator in found:
            if accelerator.address == value:
                return accelerator
        for accelerator in found:
            if value in accelerator.units or value in accelerator.addresses:
                raise AttachError(
                    '%s is a unit of accelerator %s; give the '
                    'accelerator\'s address (and --count)'
                    % (value, accelerator.address))
        raise AttachError(
            '%s is not an accelerator cyborg-nova manages on this host; '
            'see "cyborg-nova device-list"' % value)
    try:
        wanted = str(uuid_lib.UUID(value))
    except ValueError:
        raise AttachError(
            '%r is neither a PCI address (e.g. 0000:3b:00.0) nor a '
            'resource provider uuid' % device)
    for accelerator in found:
        if providers.provider_uuid(nodename, accelerator.address) == wanted:
            return accelerator
    raise AttachError(
        'no accelerator of %s has provider %s; see "cyborg-nova '
        'device-list --nodename %s"' % (nodename, wanted, nodename))


def check_attachable(store: state_store.StateStore, nodename: str,
                     accelerator: device_model.Accelerator,
                     count: int) -> None:
    """Refuse a device that may not be given to a guest now.

    :raises AttachError: the device is not ready, has problems, offers
        units this release cannot attach, or fewer than ``count`` units.
    """
    address = accelerator.address
    row = store.devices(nodename).get(address)
    if row is None:
        raise AttachError('accelerator %s is not known to nova-compute on %s '
                          'yet' % (address, nodename))
    if providers.reserved(row.state, accelerator, 1):
        why = '; '.join(accelerator.problems) or row.reason or ''
        raise AttachError(
            'accelerator %s is %s%s; only a ready device is attached'
            % (address, row.state, ' (%s)' % why if why else ''))
    if dict(accelerator.capabilities).get('vgpu_type'):
        raise AttachError('accelerator %s offers vGPU (mdev) units, which '
                          'this release cannot attach' % address)
    if count < 1 or count > len(accelerator.units):
        raise AttachError('accelerator %s has %d unit(s); cannot attach %d'
                          % (address, len(accelerator.units), count))


# -- Placement ----------------------------------------------------------------

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
            'consumer_type': body.get('consumer_type', 'INSTANCE'),
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


def _without(rp: str):
    """A mutation taking provider ``rp`` out of the allocations."""
    def mutate(allocs: Allocations) -> Allocations:
        allocs.pop(rp, None)
        return allocs
    return mutate


# -- the device in the domain -------------------------------------------------

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


# -- attach and detach ---------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Result:
    """What an attach or detach did."""

    server: str
    address: str
    provider: str
    resource_class: str
    units: tuple[str, ...]
    #: Detach only: how removal was confirmed (see :class:`RemovalWait`).
    confirmed_by: str | None = None
    events: tuple[str, ...] = ()


def attach(client, store: state_store.StateStore, nodename: str, guest,
           accelerator: device_model.Accelerator, count: int = 1,
           timeout: float = DEFAULT_TIMEOUT) -> Result:
    """Give ``count`` units of ``accelerator`` to the guest.

    :param client: a keystoneauth adapter for Placement.
    :param guest: :class:`LibvirtGuest` or :class:`PrivsepGuest` of the
        instance.
    :param timeout: seconds to wait for the guest to release units already
        plugged in when a later one is refused.
    :raises AttachError: refused or failed; everything is as it was
        (unless the message says what could not be undone).
    """
    server = guest.server
    check_attachable(store, nodename, accelerator, count)
    provider = providers.provider_uuid(nodename, accelerator.address)
    rc = accelerator.resource_class
    store_assignments = assignments_lib.Assignments(store)
    held = store_assignments.of_consumer(server, [provider]).get(provider)
    if held:
        raise AttachError('instance %s already holds %s of accelerator %s; '
                          'nothing was changed' % (server, ', '.join(held),
                                                   accelerator.address))

    written = []

    def add(allocs: Allocations) -> Allocations:
        if provider in allocs:
            raise AttachError(
                'instance %s already has %s on accelerator %s (provider '
                '%s); nothing was changed' % (
                    server, allocs[provider]['resources'],
                    accelerator.address, provider))
        allocs[provider] = {'resources': {rc: count}}
        written.append(provider)
        return allocs
    try:
        change_allocations(client, server, add)
    except AttachError as exc:
        if not written or not str(exc).startswith('cannot reach'):
            raise
        # The write was sent and its answer lost: Placement may have
        # made it. Take it back rather than leave an allocation that no
        # device goes with.
        try:
            change_allocations(client, server, _without(provider))
        except AttachError as again:
            raise AttachError(
                '%s; the allocation of %s %s on provider %s may have been '
                'written and could not be checked (%s): run '
                'detach-instance once Placement answers'
                % (exc, count, rc, provider, again))
        raise AttachError('%s; nothing was changed' % exc)

    def undo(reason: str, plugged: list[str] = ()) -> AttachError:
        """Undo what was done; the error to raise, saying so."""
        if plugged:
            try:
                guest.detach_and_wait(list(plugged), timeout)
            except AttachError as exc:
                return AttachError(
                    '%s; and %s could not be unplugged again (%s): they '
                    'stay attached and allocated, run detach-instance '
                    'once the guest answers' % (reason, ', '.join(plugged),
                                                exc))
        store_assignments.release(server, provider)
        try:
            change_allocations(client, server, _without(provider))
        except AttachError as exc:
            return AttachError('%s; and the allocation of %s %s on '
                               'provider %s could not be removed again: %s'
                               % (reason, count, rc, provider, exc))
        return AttachError('%s; nothing was changed' % reason)

    try:
        units = store_assignments.assign(server, provider,
                                         accelerator.units, count)
    except assignments_lib.NoFreeUnits as exc:
        raise undo(str(exc))
    except Exception as exc:
        raise undo('recording the units failed: %s' % exc)
    plugged: list[str] = []
    for unit in units:
        try:
            guest.attach(unit)
        except AttachError as exc:
            raise undo('libvirt refused to attach %s to instance %s: %s'
                       % (unit, server, exc), plugged)
        except Exception as exc:
            raise undo('attaching %s failed: %s' % (unit, exc), plugged)
        plugged.append(unit)
    LOG.info('Attached %s (%s) of accelerator %s to instance %s',
             ', '.join(units), rc, accelerator.address, server)
    return Result(server, accelerator.address, provider, rc, tuple(units))


def detach(client, store: state_store.StateStore, nodename: str, guest,
           accelerator: device_model.Accelerator,
           timeout: float = DEFAULT_TIMEOUT) -> Result:
    """Take the units of ``accelerator`` the instance holds away from it.

    The allocation on the accelerator's provider is removed only after
    the guest released every unit. Units already gone from the guest
    (e.g. a detach that timed out, then completed) are not unplugged
    again: running detach again finishes the cleanup.

    :raises AttachError: the device is not attached, libvirt refused, or
        the guest did not release it within ``timeout`` seconds; the
        allocation and the units are then unchanged.
    """
    server = guest.server
    provider = providers.provider_uuid(nodename, accelerator.address)
    store_assignments = assignments_lib.Assignments(store)
    units = store_assignments.of_consumer(server, [provider]).get(
        provider, [])
    allocated = provider in read_allocations(client, server).get(
        'allocations', {})
    if not units and not allocated:
        raise AttachError('accelerator %s is not attached to instance %s; '
                          'nothing was changed' % (accelerator.address,
                                                   server))
    plugged = [u for u in units if guest.present(u)]
    wait = RemovalWait('immediate', [])
    if plugged:
        try:
            wait = guest.detach_and_wait(plugged, timeout)
        except AttachError as exc:
            raise AttachError('%s; its allocation and units are unchanged'
                              % exc)
    store_assignments.release(server, provider)
    try:
        change_allocations(client, server, _without(provider))
    except AttachError as exc:
        raise AttachError('%s left instance %s but its allocation could not '
                          'be removed: %s; run detach-instance again'
                          % (accelerator.address, server, exc))
    LOG.info('Detached %s of accelerator %s from instance %s (%s)',
             ', '.join(units) or 'nothing', accelerator.address, server,
             wait.confirmed_by)
    return Result(server, accelerator.address, provider,
                  accelerator.resource_class, tuple(units),
                  wait.confirmed_by, tuple(wait.events))
