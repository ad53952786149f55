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

"""The services table: what each accelerator offers, as last discovered.

``cyborg-nova discover-services`` (on this host, or through the
conductor-lite and the agent) replaces a node's rows; ``cyborg-nova
service-list`` reads them. :mod:`cyborg_nova.services` decides what the
services are.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Iterable

from cyborg_nova.store import database


@dataclasses.dataclass(frozen=True)
class Offered:
    """One device's services, traits, and when they were discovered."""

    address: str
    driver: str
    services: tuple[str, ...]
    traits: tuple[str, ...]
    discovered_at: float


class ServiceTable:
    """The ``device_services`` table of ``store``."""

    def __init__(self, store: database.Database) -> None:
        self._store = store

    def of_node(self, nodename: str) -> list[Offered]:
        """The rows of ``nodename``, by address."""
        with self._store._connect() as db:
            rows = db.execute(
                'SELECT address, driver, services, traits, discovered_at '
                'FROM device_services WHERE nodename = ? ORDER BY address',
                (nodename,)).fetchall()
        return [Offered(r[0], r[1], tuple(json.loads(r[2])),
                        tuple(json.loads(r[3])), r[4]) for r in rows]

    def replace(self, nodename: str, offered: Iterable[Offered]) -> int:
        """Make ``offered`` the rows of ``nodename``; how many."""
        rows = [(nodename, o.address, o.driver, json.dumps(o.services),
                 json.dumps(o.traits), o.discovered_at) for o in offered]
        with self._store._transaction() as db:
            db.execute('DELETE FROM device_services WHERE nodename = ?',
                       (nodename,))
            db.executemany(
                'INSERT INTO device_services (nodename, address, driver, '
                'services, traits, discovered_at) VALUES (?, ?, ?, ?, ?, ?)',
                rows)
        return len(rows)
