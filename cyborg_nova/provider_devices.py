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

"""The device behind each accelerator provider of this host: one lookup.

A provider of this host is a local device (reported by
:mod:`cyborg_nova.providers`) or a device of an
out-of-process driver (:mod:`cyborg_nova.remote_devices`); both are
found here, under the provider uuid Placement knows them by:

- :func:`recorded`: from the state store alone, as nova-compute's last
  update cycle reported the local devices (:func:`record`) and as the
  agent recorded the remote ones. A guest build uses it, so it reads no
  sysfs;
- :func:`found`: from a discovery just made (the commands, and a guest
  build that finds no record), with the remote devices of the store;
- :func:`of_providers`: what a guest build uses, the first with the
  second as a fallback;
- :func:`known`: which providers are this host's (whether or not their
  device is on the bus now);
- :func:`find`: a device named by its PCI address or its provider uuid.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Callable, Iterable, Mapping
import uuid as uuid_lib

from cyborg_drivers import device as device_model
from cyborg_nova import remote_devices
from cyborg_nova import store as state_store

LOG = logging.getLogger(__name__)


class NotFound(LookupError):
    """No device of this host matches the name; the message says why."""


@dataclasses.dataclass(frozen=True)
class ProviderDevice:
    """The accelerator behind one provider of this host."""

    provider: str
    nodename: str
    accelerator: device_model.Accelerator
    #: The out-of-process driver serving it; None for a local device.
    endpoint: str | None = None

    @property
    def address(self) -> str:
        return self.accelerator.address


@dataclasses.dataclass
class HostDevices:
    """What :func:`recorded` finds."""

    #: {provider uuid: device} of every device with a record.
    devices: dict[str, ProviderDevice]
    #: {provider uuid: (nodename, address)} of local devices the store
    #: knows but holds no record of (none written since an upgrade).
    unrecorded: dict[str, tuple[str, str]]


def record(store: state_store.StateStore, nodename: str,
           accelerators: Iterable[device_model.Accelerator]) -> int:
    """Remember the local accelerators an update cycle reported.

    Writes only what changed (how many rows).
    """
    return store.set_reported(nodename, {
        a.address: a.to_hardware(nodename) for a in accelerators})


def _uuid(nodename: str, address: str) -> str:
    # providers.provider_uuid, which imports this module to record.
    return device_model.device_uuid(nodename, address)


def local(nodename: str, accelerator: device_model.Accelerator
          ) -> ProviderDevice:
    """A local accelerator of ``nodename`` under its provider uuid."""
    return ProviderDevice(_uuid(nodename, accelerator.address), nodename,
                          accelerator)


def _remote(store: state_store.StateStore, nodename: str,
            local: Iterable[device_model.Accelerator]
            ) -> dict[str, ProviderDevice]:
    return {uuid: ProviderDevice(uuid, nodename, d.accelerator, d.endpoint)
            for uuid, d in remote_devices.by_provider(
                store, nodename, local).items()}


def recorded(store: state_store.StateStore, nodenames: Iterable[str],
             only: Mapping[str, Iterable[str]] | None = None
             ) -> HostDevices:
    """The devices of ``nodenames`` as the store has them.

    A local device the last update found missing from the bus is left
    out (it has no device to give); one whose record cannot be read is
    reported ``unrecorded``.

    :param only: {nodename: addresses}: just these local devices, and
        no remote ones (whose lookup needs every local device).
    """
    result = HostDevices({}, {})
    for nodename in nodenames:
        rows = store.devices(nodename)
        wanted = None if only is None else set(only.get(nodename, ()))
        entries = store.reported(nodename, wanted)
        mine = []
        for address, row in sorted(rows.items()):
            if row.missing or (wanted is not None and address not in wanted):
                continue
            entry = entries.get(address)
            try:
                accelerator = (None if entry is None else dataclasses.replace(
                    device_model.from_hardware(entry), remote=False))
            except ValueError as exc:
                LOG.warning('The record of accelerator %s is unreadable: '
                            '%s', address, exc)
                accelerator = None
            if accelerator is None:
                uuid = _uuid(nodename, address)
                result.unrecorded[uuid] = (nodename, address)
                continue
            mine.append(accelerator)
            device = local(nodename, accelerator)
            result.devices[device.provider] = device
        if only is None:
            result.devices.update(_remote(store, nodename, mine))
    return result


def known(store: state_store.StateStore, nodename: str
          ) -> dict[str, str]:
    """{provider uuid: address} of every device of ``nodename``.

    The local devices the store knows (found on the bus or not: a
    vanished device's provider stays while it is allocated) and the
    remote devices; what says which providers are this host's.
    """
    ours = {_uuid(nodename, address): address
            for address in store.devices(nodename)}
    ours.update((d.uuid(nodename), d.address)
                for d in remote_devices.devices(store, nodename))
    return ours


def found(store: state_store.StateStore | None, nodename: str,
          accelerators: Iterable[device_model.Accelerator]
          ) -> dict[str, ProviderDevice]:
    """{provider uuid: device} of a discovery of ``nodename`` just made.

    The remote devices of the store, when there is one, are added (those
    whose functions a local one has are left out, see
    :func:`remote_devices.devices`).
    """
    mine = list(accelerators)
    result = {d.provider: d for d in (local(nodename, a) for a in mine)}
    if store is not None:
        result.update(_remote(store, nodename, mine))
    return result


def find(devices: Mapping[str, ProviderDevice], nodename: str,
         name: str) -> ProviderDevice:
    """The device named by a PCI address or a provider uuid.

    :param devices: {provider uuid: device}, e.g. of :func:`found`.
    :raises NotFound: ``name`` is neither form, is a unit of a device
        rather than the device, or names no device of ``nodename``.
    """
    value = name.strip().lower()
    mine = [d for d in devices.values() if d.nodename == nodename]
    if device_model.is_pci_address(value):
        for device in mine:
            if device.address == value:
                return device
        for device in mine:
            acc = device.accelerator
            if value in acc.units or value in acc.addresses:
                raise NotFound(
                    '%s is a unit of accelerator %s; give the '
                    'accelerator\'s address (and --count)'
                    % (value, device.address))
        raise NotFound(
            '%s is not an accelerator cyborg-nova manages on this host; '
            'see "cyborg-nova device-list"' % value)
    try:
        wanted = str(uuid_lib.UUID(value))
    except ValueError:
        raise NotFound(
            '%r is neither a PCI address (e.g. 0000:3b:00.0) nor a '
            'resource provider uuid' % name)
    device = devices.get(wanted)
    if device is None or device.nodename != nodename:
        raise NotFound(
            'no accelerator of %s has provider %s; see "cyborg-nova '
            'device-list --nodename %s"' % (nodename, wanted, nodename))
    return device


def of_providers(store: state_store.StateStore,
                 ours: Mapping[str, tuple[str, str]],
                 providers: Iterable[str],
                 discover: Callable[[], Iterable[device_model.Accelerator]]
                 ) -> dict[str, ProviderDevice]:
    """{provider: device} of ``providers``, as the store recorded them.

    :param ours: {provider uuid: (nodename, address)} of this host.
    :param discover: what a discovery finds now; called (and logged)
        only when a provider's device has no record yet.
    """
    providers = [rp for rp in providers if rp in ours]
    nodes = sorted({ours[rp][0] for rp in providers})
    local_only: dict[str, set[str]] | None = {}
    for rp in providers:
        nodename, address = ours[rp]
        if rp != _uuid(nodename, address):
            # A remote device: found among every device of its node.
            local_only = None
            break
        local_only.setdefault(nodename, set()).add(address)
    host = recorded(store, nodes, local_only)
    unrecorded = sorted(set(providers) & set(host.unrecorded))
    if unrecorded:
        # No update cycle recorded them yet (e.g. just upgraded).
        LOG.warning('cyborg-nova: no record of accelerator(s) %s yet: '
                    'discovering the host', ', '.join(
                        host.unrecorded[rp][1] for rp in unrecorded))
        accelerators = list(discover())
        for node in nodes:
            host.devices.update(found(store, node, accelerators))
    return host.devices
