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

"""The remote drivers table: out-of-process drivers, as the agent saw them.

The agent writes one row per registered driver (its endpoint, device
type, UP or DOWN, and its last ``GET /hardware`` entries);
nova-compute's update reads them (:mod:`cyborg_nova.remote_devices`
decides what they become in Placement).
"""

from __future__ import annotations

import dataclasses
import json

from cyborg_nova.store import database


@dataclasses.dataclass(frozen=True)
class RemoteDriverRow:
    """One out-of-process driver of a node."""

    endpoint: str
    type: str
    #: ``UP`` or ``DOWN``.
    state: str
    #: Its ``GET /hardware`` entries, as last answered.
    hardware: tuple[dict, ...]
    updated_at: float


class RemoteDriverTable:
    """The ``remote_drivers`` table of ``store``."""

    def __init__(self, store: database.Database) -> None:
        self._store = store

    def of_node(self, nodename: str) -> list[RemoteDriverRow]:
        """The drivers of ``nodename``, by endpoint."""
        with self._store._connect() as db:
            rows = db.execute(
                'SELECT endpoint, type, state, hardware, updated_at FROM '
                'remote_drivers WHERE nodename = ? ORDER BY endpoint',
                (nodename,)).fetchall()
        return [RemoteDriverRow(r[0], r[1], r[2], tuple(json.loads(r[3])),
                                r[4]) for r in rows]

    def put(self, nodename: str, row: RemoteDriverRow) -> None:
        """Record ``row`` as the driver at its endpoint now is."""
        with self._store._transaction() as db:
            db.execute(
                'INSERT OR REPLACE INTO remote_drivers (nodename, endpoint, '
                'type, state, hardware, updated_at) VALUES (?, ?, ?, ?, ?, '
                '?)', (nodename, row.endpoint, row.type, row.state,
                       json.dumps(list(row.hardware)), row.updated_at))

    def forget(self, nodename: str, endpoint: str) -> None:
        with self._store._transaction() as db:
            db.execute('DELETE FROM remote_drivers WHERE nodename = ? AND '
                       'endpoint = ?', (nodename, endpoint))
