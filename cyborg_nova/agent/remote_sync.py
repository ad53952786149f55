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

"""Out-of-process drivers into the state store, and fenced at once.

:class:`RemoteRecorder` is the registry's ``on_change``
(:class:`cyborg_nova.agent.remote.Registry`): each time a driver's state
or devices change it records them in the host's state store, where
nova-compute's next update reads them, and has the fencer write
``reserved`` on their providers now (total while the driver is DOWN, 0
once it answers again): the value nova-compute's update computes from
the same record, so the two writers agree.
"""

from __future__ import annotations

import logging
from typing import Callable, Iterable

from cyborg_drivers import device as device_model
from cyborg_nova import fencing
from cyborg_nova import remote_devices
from cyborg_nova import store as state_store

LOG = logging.getLogger(__name__)


class RemoteRecorder:
    """Records drivers' devices and fences them when they go DOWN.

    :param local: the host's own accelerators now (a remote device that
        shares a function with one of them is never reported).
    :param fencer: writes ``reserved``; None: Placement learns at
        nova-compute's next update.
    """

    def __init__(self, store: state_store.StateStore, nodename: str,
                 fencer: fencing.Fencer | None,
                 local: Callable[[], Iterable[device_model.Accelerator]]
                 ) -> None:
        self.store = store
        self.nodename = nodename
        self.fencer = fencer
        self.local = local

    def __call__(self, endpoint: str, type_: str, state: str,
                 hardware: list[dict]) -> list[fencing.FenceResult]:
        """Record one driver and fence its providers; the fence results.

        :raises sqlite3.Error: the store cannot be written (the registry
            retries at the driver's next poll).
        """
        remote_devices.record(self.store, self.nodename, endpoint, type_,
                              state, hardware)
        LOG.info('Out-of-process driver %s at %s recorded %s with %d '
                 'devices', type_, endpoint, state, len(hardware))
        if self.fencer is None:
            return []
        results = []
        for device in remote_devices.devices(self.store, self.nodename,
                                             self.local()):
            if device.endpoint == endpoint:
                results.append(self.fencer.apply(
                    device.address, device.uuid(self.nodename),
                    device.state, device.accelerator))
        return results

    def known(self) -> list[tuple[str, str]]:
        """(endpoint, type) of the drivers recorded for this node.

        The agent registers them again at its start: a driver that died
        while the agent was away is then polled, found DOWN and fenced.
        """
        return [(row.endpoint, row.type)
                for row in self.store.remote.of_node(self.nodename)]
