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

"""Devices of out-of-process drivers, as providers and guest units.

The agent records each registered driver in the state store
(:mod:`cyborg_nova.store.remote`): UP or DOWN and its last ``GET
/hardware`` entries. An entry carrying this project's extension
(``pci``, ``placement``: see :meth:`cyborg_drivers.device.Accelerator.
to_hardware`) is a device like a local one: nova-compute's update makes
it a child provider of the compute node, its units are assigned at
spawn, and it is fenced (``reserved`` = total) while its driver is
DOWN. Entries without the extension (the seed's bare shape) are only
listed by the agent.

Names and uuids are those of local providers with ``remote`` in them,
so the two never collide; a remote device at an address a local driver
reports (or whose functions overlap a local one's) is left out: one
function must never be handed out twice.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Iterable

from cyborg_drivers import device as device_model
from cyborg_nova import store as state_store
from cyborg_nova.store import remote as remote_table

LOG = logging.getLogger(__name__)

UP = 'UP'
DOWN = 'DOWN'
NAME_INFIX = '_remote_accelerator_'


def provider_name(nodename: str, address: str) -> str:
    return '%s%s%s' % (nodename, NAME_INFIX, address)


def provider_uuid(nodename: str, address: str) -> str:
    """Stable and distinct from the local provider of the same address."""
    return device_model.device_uuid(nodename, 'remote/%s' % address)


def lifecycle_state(driver_state: str) -> str:
    """The device state :func:`cyborg_nova.providers.reserved` reads.

    A driver that said hello and answers vouches for its devices (ready);
    a DOWN one cannot, so its devices count as unhealthy: fenced.
    """
    return state_store.READY if driver_state == UP else (
        state_store.UNHEALTHY)


@dataclasses.dataclass(frozen=True)
class RemoteDevice:
    """One device of an out-of-process driver."""

    endpoint: str
    driver_state: str
    accelerator: device_model.Accelerator

    @property
    def address(self) -> str:
        return self.accelerator.address

    @property
    def state(self) -> str:
        return lifecycle_state(self.driver_state)

    def uuid(self, nodename: str) -> str:
        return provider_uuid(nodename, self.address)


def record(store: state_store.StateStore, nodename: str, endpoint: str,
           type_: str, driver_state: str, hardware: Iterable[dict]) -> None:
    """Write what the agent knows of one driver into the store."""
    store.remote.put(nodename, remote_table.RemoteDriverRow(
        endpoint, type_, driver_state, tuple(hardware), time.time()))


def devices(store: state_store.StateStore, nodename: str,
            local: Iterable[device_model.Accelerator] = ()
            ) -> list[RemoteDevice]:
    """The remote devices of ``nodename`` that can become providers.

    :param local: the host's own accelerators: a remote device sharing
        a PCI function with one of them is left out (and logged), as is
        one an UP driver reports too (a DOWN driver's, at its old
        endpoint), or, of two UP drivers, the second endpoint's.
    """
    taken = {a for acc in local for a in (*acc.addresses, *acc.units)}
    found = []
    # A driver restarted on another port registers anew while its old
    # endpoint is DOWN: the answering one's devices win.
    rows = sorted(store.remote.of_node(nodename),
                  key=lambda r: (r.state != UP, r.endpoint))
    for row in rows:
        for entry in row.hardware:
            if 'pci' not in entry or 'placement' not in entry:
                continue  # the seed's bare shape: listed, not reported
            try:
                accelerator = device_model.from_hardware(entry)
            except ValueError as exc:
                LOG.warning('Out-of-process driver %s: device %s left '
                            'out: %s', row.endpoint, entry.get('uuid'), exc)
                continue
            mine = {accelerator.address, *accelerator.addresses,
                    *accelerator.units}
            if mine & taken:
                LOG.warning('Out-of-process driver %s reports %s, whose '
                            'functions %s another driver reports: left '
                            'out', row.endpoint, accelerator.address,
                            ', '.join(sorted(mine & taken)))
                continue
            taken |= mine
            found.append(RemoteDevice(row.endpoint, row.state, accelerator))
    return found


def by_provider(store: state_store.StateStore, nodename: str,
                local: Iterable[device_model.Accelerator] = ()
                ) -> dict[str, RemoteDevice]:
    """{provider uuid: device} of :func:`devices`."""
    return {d.uuid(nodename): d for d in devices(store, nodename, local)}
