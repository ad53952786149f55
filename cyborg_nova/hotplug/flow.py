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

"""Attach and detach: the three records changed in order, or undone.

``cyborg-nova instance-attach`` / ``instance-detach`` (the generic-driver
spec's attach and detach), run on the compute host of the instance. Three
records must agree about which instance holds which device:

- the instance's allocations in Placement (what the scheduler counts;
  :mod:`cyborg_nova.hotplug.allocations`);
- the units recorded in the host's state store (the unit books,
  :mod:`cyborg_nova.guests`, as nova-compute keeps them; what the guest
  gets after a hard reboot);
- the devices in the libvirt domain (what the guest sees;
  :mod:`cyborg_nova.hotplug.guest`).

An attach changes them in that order and a failure at any step undoes the
earlier ones, so nothing stays changed: the allocation first (a
read-modify-write of the consumer's allocations, guarded by its
``consumer_generation``), then the units, then libvirt. A detach goes the
other way: the allocation is freed only once libvirt confirms the device
left the guest (a ``DEVICE_REMOVED`` event, or the live XML without it),
because a device the guest has not released is still in use.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Iterable
import uuid as uuid_lib

from cyborg_drivers import device as device_model
from cyborg_nova import assignments as assignments_lib
from cyborg_nova import fencing
from cyborg_nova import guests
from cyborg_nova.hotplug.allocations import Allocations
from cyborg_nova.hotplug.allocations import change_allocations
from cyborg_nova.hotplug.allocations import read_allocations
from cyborg_nova.hotplug.allocations import without
from cyborg_nova.hotplug.errors import AttachError
from cyborg_nova.hotplug import guest as guest_lib
from cyborg_nova import provider_devices
from cyborg_nova import providers
from cyborg_nova import scrub
from cyborg_nova import store as state_store
from cyborg_nova import unit_work

LOG = logging.getLogger(__name__)


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
    devices = {d.provider: d for d in (
        provider_devices.local(nodename, a) for a in accelerators)}
    try:
        return provider_devices.find(devices, nodename, device).accelerator
    except provider_devices.NotFound as exc:
        raise AttachError(str(exc))


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
    refusal = unit_work.hotplug_refusal(accelerator)
    if refusal:
        raise AttachError('accelerator %s: %s' % (address, refusal))
    if count < 1 or count > len(accelerator.units):
        raise AttachError('accelerator %s has %d unit(s); cannot attach %d'
                          % (address, len(accelerator.units), count))


# -- attach and detach ---------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Result:
    """What an attach or detach did."""

    server: str
    address: str
    provider: str
    resource_class: str
    units: tuple[str, ...]
    #: Detach only: how removal was confirmed (see
    #: :class:`cyborg_nova.hotplug.guest.RemovalWait`).
    confirmed_by: str | None = None
    events: tuple[str, ...] = ()


def _books(client, store: state_store.StateStore, nodename: str,
           accelerator: device_model.Accelerator,
           hold_freed: bool) -> guests.UnitBooks:
    """The unit books; a unit freed is held and reserved at once.

    nova-compute scrubs the held units at its next update (see
    :mod:`cyborg_nova.scrub`); until then they count in ``reserved``,
    written here before the allocation goes, so nothing is scheduled
    onto them meanwhile.
    """
    device = provider_devices.local(nodename, accelerator)

    def reserve_held() -> None:
        result = fencing.Fencer(client, kept=store.units.kept).apply(
            device.address, device.provider,
            scrub.device_state(store, device), accelerator)
        if result.outcome == fencing.FAILED:
            LOG.warning('The units freed of accelerator %s are held, but '
                        'reserved could not be written now: nova-compute '
                        'writes it at its next update', accelerator.address)
    return guests.UnitBooks(
        assignments_lib.Assignments(store, hold_freed=hold_freed),
        on_freed=reserve_held if hold_freed else None)


def attach(client, store: state_store.StateStore, nodename: str, guest,
           accelerator: device_model.Accelerator, count: int = 1,
           timeout: float = guest_lib.DEFAULT_TIMEOUT,
           hold_freed: bool = True) -> Result:
    """Give ``count`` units of ``accelerator`` to the guest.

    :param client: a keystoneauth adapter for Placement.
    :param guest: :class:`~cyborg_nova.hotplug.guest.LibvirtGuest` or
        :class:`~cyborg_nova.hotplug.guest.PrivsepGuest` of the
        instance.
    :param timeout: seconds to wait for the guest to release units already
        plugged in when a later one is refused.
    :param hold_freed: units given back by a failed attach are held for
        their scrub (``[cyborg_scrub] enabled``).
    :raises AttachError: refused or failed; everything is as it was
        (unless the message says what could not be undone; units taken
        back are held for their scrub).
    """
    server = guest.server
    check_attachable(store, nodename, accelerator, count)
    device = provider_devices.local(nodename, accelerator)
    provider = device.provider
    rc = accelerator.resource_class
    books = _books(client, store, nodename, accelerator, hold_freed)
    held = books.units.of_consumer(server, [provider]).get(provider)
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
            change_allocations(client, server, without(provider))
        except AttachError as again:
            raise AttachError(
                '%s; the allocation of %s %s on provider %s may have been '
                'written and could not be checked (%s): run '
                'instance-detach once Placement answers'
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
                    'stay attached and allocated, run instance-detach '
                    'once the guest answers' % (reason, ', '.join(plugged),
                                                exc))
        # Units that never reached the guest need no scrub.
        books.units.hold_freed = hold_freed and bool(plugged)
        books.release(server, [provider])
        try:
            change_allocations(client, server, without(provider))
        except AttachError as exc:
            return AttachError('%s; and the allocation of %s %s on '
                               'provider %s could not be removed again: %s'
                               % (reason, count, rc, provider, exc))
        return AttachError('%s; nothing was changed' % reason)

    try:
        units = books.assign(server, device, count)
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
           timeout: float = guest_lib.DEFAULT_TIMEOUT,
           hold_freed: bool = True) -> Result:
    """Take the units of ``accelerator`` the instance holds away from it.

    The allocation on the accelerator's provider is removed only after
    the guest released every unit. Units already gone from the guest
    (e.g. a detach that timed out, then completed) are not unplugged
    again: running detach again finishes the cleanup. With
    ``hold_freed``, the freed units are held for their scrub and
    reserved in Placement before the allocation goes.

    :raises AttachError: the device is not attached, libvirt refused, or
        the guest did not release it within ``timeout`` seconds; the
        allocation and the units are then unchanged.
    """
    server = guest.server
    provider = provider_devices.local(nodename, accelerator).provider
    books = _books(client, store, nodename, accelerator, hold_freed)
    units = books.units.of_consumer(server, [provider]).get(provider, [])
    allocated = provider in read_allocations(client, server).get(
        'allocations', {})
    if not units and not allocated:
        raise AttachError('accelerator %s is not attached to instance %s; '
                          'nothing was changed' % (accelerator.address,
                                                   server))
    plugged = [u for u in units if guest.present(u)]
    wait = guest_lib.RemovalWait('immediate', [])
    if plugged:
        try:
            wait = guest.detach_and_wait(plugged, timeout)
        except AttachError as exc:
            raise AttachError('%s; its allocation and units are unchanged'
                              % exc)
    books.release(server, [provider])
    try:
        change_allocations(client, server, without(provider))
    except AttachError as exc:
        raise AttachError('%s left instance %s but its allocation could not '
                          'be removed: %s; run instance-detach again'
                          % (accelerator.address, server, exc))
    LOG.info('Detached %s of accelerator %s from instance %s (%s)',
             ', '.join(units) or 'nothing', accelerator.address, server,
             wait.confirmed_by)
    return Result(server, accelerator.address, provider,
                  accelerator.resource_class, tuple(units),
                  wait.confirmed_by, tuple(wait.events))
