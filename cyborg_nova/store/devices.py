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


"""The store as its callers know it; the devices, drivers and VF counts.

:class:`StateStore` holds each device's lifecycle state, which decides
the ``reserved`` value its provider gets, the traits this project last
set on the provider (so it removes only traits it owns), the drivers the
operator installed or uninstalled, and the VF count the operator set on
each SR-IOV PF (which the kernel forgets at every boot). The unit table
(:attr:`StateStore.units`), the programming journal's tables
(:attr:`StateStore.jobs`) and the PCIe AER tables
(:attr:`StateStore.aer`) are reached through it.
"""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Iterable

from cyborg_nova.store import database
from cyborg_nova.store import health
from cyborg_nova.store import jobs
from cyborg_nova.store import remote
from cyborg_nova.store import services
from cyborg_nova.store import units

INACTIVE = 'inactive'
READY = 'ready'
UNHEALTHY = 'unhealthy'
HELD = 'held'
PROGRAMMING = 'programming'
FAILED = 'failed'
STATES = (INACTIVE, READY, UNHEALTHY, HELD, PROGRAMMING, FAILED)


class InvalidState(ValueError):
    """A state name that is not one of :data:`STATES`."""


@dataclasses.dataclass(frozen=True)
class DeviceState:
    """One device's row in the store."""

    address: str
    state: str
    reason: str | None
    owned_traits: tuple[str, ...]
    updated_at: float
    #: vendor:device:subsystem ids of the device last seen at the address.
    identity: str = ''
    driver: str = ''
    #: Whether the last update did not find the device on the bus.
    missing: bool = False


def identity_of(accelerator) -> str:
    """What tells one card from another in the same slot."""
    return ':'.join(str(x) for x in (
        accelerator.vendor_id, accelerator.product_id,
        accelerator.subsystem_vendor_id, accelerator.subsystem_product_id))


class StateStore(database.Database):
    """The host's state store at ``path``.

    ``read_only``: open it without creating, migrating or writing
    anything; ``owner``: who gets what the opening creates when run as
    root (see :class:`~cyborg_nova.store.database.Database`).

    :raises StoreMissing: read-only, and there is no store yet.
    :raises StorePermissionError: this user may not read or write it.
    :raises OSError: the directory or the file cannot be created.
    :raises StoreTooNew: the store was written by a later release.
    :raises StoreTooOld: read-only, and the store is not migrated yet.
    """

    def __init__(self, path: str, *, read_only: bool = False,
                 owner: str | None = None) -> None:
        super().__init__(path, read_only=read_only, owner=owner)
        #: Which PCI functions serve which Placement allocation.
        self.units = units.UnitTable(self)
        #: The programming journal's jobs and steps.
        self.jobs = jobs.JobTable(self)
        #: The services of each device, as discover-services last found.
        self.services = services.ServiceTable(self)
        #: The out-of-process drivers the agent registered, and devices.
        self.remote = remote.RemoteDriverTable(self)
        #: The PCIe AER counts of each device and the effects they had.
        self.aer = health.AerTable(self)

    @staticmethod
    def _row(row) -> DeviceState:
        return DeviceState(row[0], row[1], row[2],
                           tuple(json.loads(row[3])), row[4], row[5],
                           row[6], bool(row[7]))

    _COLUMNS = ('address, state, reason, owned_traits, updated_at, '
                'identity, driver, missing')

    def devices(self, nodename: str) -> dict[str, DeviceState]:
        """Every device of ``nodename``, by address."""
        with self._connect() as db:
            # _COLUMNS is a constant of this class; the nodename is bound.
            rows = db.execute(
                'SELECT %s FROM devices '  # nosec B608
                'WHERE nodename = ?' % self._COLUMNS,
                (nodename,)).fetchall()
        return {r[0]: self._row(r) for r in rows}

    def nodenames(self) -> list[str]:
        """The nodes that have devices recorded here, sorted.

        One host's store normally holds one node; more when the hostname
        changed or an agent names the host differently.
        """
        with self._connect() as db:
            rows = db.execute('SELECT DISTINCT nodename FROM devices '
                              'ORDER BY nodename').fetchall()
        return [r[0] for r in rows]

    def sync(self, nodename: str, accelerators: Iterable,
             initial_state: str) -> dict[str, DeviceState]:
        """Record the devices found now; every row of ``nodename``.

        A device not seen before starts in ``initial_state``. A device
        whose ids differ from what was last seen at its address is a
        different card: it starts over in ``initial_state`` too, so a card
        swapped in while the host was off never inherits ``ready``. Rows
        of devices not found are kept (see :meth:`mark_missing`). Writes
        nothing when nothing changed.

        :raises InvalidState: ``initial_state`` is not one of
            :data:`STATES`.
        """
        _check(initial_state)
        known = self.devices(nodename)
        inserts, resets, found_again = [], [], []
        for accelerator in accelerators:
            identity = identity_of(accelerator)
            row = known.get(accelerator.address)
            if row is None:
                inserts.append((accelerator, identity))
            elif row.identity and row.identity != identity:
                resets.append((accelerator, identity, row.identity))
            elif (row.missing or row.identity != identity
                    or row.driver != accelerator.driver):
                found_again.append((accelerator, identity))
        if not (inserts or resets or found_again):
            return known
        now = time.time()
        with self._transaction() as db:
            db.executemany(
                'INSERT OR IGNORE INTO devices (nodename, address, state, '
                'identity, driver, created_at, updated_at) '
                'VALUES (?, ?, ?, ?, ?, ?, ?)',
                [(nodename, a.address, initial_state, identity, a.driver,
                  now, now) for a, identity in inserts])
            db.executemany(
                'UPDATE devices SET state = ?, reason = ?, identity = ?, '
                'driver = ?, missing = 0, updated_at = ? '
                'WHERE nodename = ? AND address = ?',
                [(initial_state, 'replaced: %s was %s' % (identity, old),
                  identity, a.driver, now, nodename, a.address)
                 for a, identity, old in resets])
            db.executemany(
                'UPDATE devices SET identity = ?, driver = ?, missing = 0, '
                'updated_at = ? WHERE nodename = ? AND address = ?',
                [(identity, a.driver, now, nodename, a.address)
                 for a, identity in found_again])
        return self.devices(nodename)

    def reported(self, nodename: str,
                 addresses: Iterable[str] | None = None) -> dict[str, dict]:
        """{address: entry} each device's last reported accelerator.

        The entry is what :meth:`set_reported` recorded (the device's
        ``GET /hardware`` entry); devices without one are left out.
        ``addresses``, when given, limits it to those devices: a guest
        build decodes the few it was allocated, not the whole host.
        """
        with self._connect() as db:
            rows = db.execute(
                'SELECT address, reported FROM devices WHERE nodename = ? '
                'AND reported IS NOT NULL', (nodename,)).fetchall()
        wanted = None if addresses is None else set(addresses)
        return {address: json.loads(text) for address, text in rows
                if wanted is None or address in wanted}

    def set_reported(self, nodename: str, entries: dict[str, dict]) -> int:
        """Record the accelerator reported for each known device.

        ``entries``: {address: JSON-able entry}. Only rows whose entry
        changed are written (an unchanged cycle writes nothing); devices
        without a row are skipped (:meth:`sync` adds rows). How many
        rows changed.
        """
        with self._connect() as db:
            known = dict(db.execute(
                'SELECT address, reported FROM devices WHERE nodename = ?',
                (nodename,)).fetchall())
        changed = [(text, nodename, address) for address, text in (
            (a, json.dumps(e)) for a, e in entries.items())
            if address in known and known[address] != text]
        if changed:
            with self._transaction() as db:
                db.executemany('UPDATE devices SET reported = ? WHERE '
                               'nodename = ? AND address = ?', changed)
        return len(changed)

    def clear_reported(self, nodename: str) -> None:
        """Forget what was reported for the devices of ``nodename``."""
        with self._transaction() as db:
            db.execute('UPDATE devices SET reported = NULL WHERE nodename = '
                       '? AND reported IS NOT NULL', (nodename,))

    def mark_missing(self, nodename: str, address: str) -> None:
        """Note that an update did not find the device on the bus."""
        with self._transaction() as db:
            db.execute('UPDATE devices SET missing = 1, updated_at = ? '
                       'WHERE nodename = ? AND address = ?',
                       (time.time(), nodename, address))

    def set_state(self, nodename: str, address: str, state: str,
                  reason: str | None = None) -> None:
        """Set a known device's state.

        :raises InvalidState: ``state`` is not one of :data:`STATES`.
        :raises KeyError: the store has no such device.
        """
        _check(state)
        with self._transaction() as db:
            cursor = db.execute(
                'UPDATE devices SET state = ?, reason = ?, updated_at = ? '
                'WHERE nodename = ? AND address = ?',
                (state, reason, time.time(), nodename, address))
            if cursor.rowcount == 0:
                raise KeyError('no device %s on %s' % (address, nodename))

    def set_owned_traits(self, nodename: str, address: str,
                         traits: Iterable[str]) -> None:
        with self._transaction() as db:
            db.execute(
                'UPDATE devices SET owned_traits = ?, updated_at = ? '
                'WHERE nodename = ? AND address = ?',
                (json.dumps(sorted(traits)), time.time(), nodename,
                 address))

    def driver_choices(self) -> dict[str, bool]:
        """Drivers installed (True) or uninstalled (False) on this host.

        These override ``[cyborg_nova] enabled_drivers``: the operator's
        driver-install / driver-uninstall commands record them here, so
        nova.conf is never edited.
        """
        with self._connect() as db:
            return {name: bool(enabled) for name, enabled in db.execute(
                'SELECT name, enabled FROM drivers')}

    def set_driver(self, name: str, enabled: bool) -> None:
        with self._transaction() as db:
            db.execute('INSERT OR REPLACE INTO drivers (name, enabled, '
                       'updated_at) VALUES (?, ?, ?)',
                       (name, int(enabled), time.time()))

    def vf_counts(self, nodename: str) -> dict[str, int]:
        """The VF count last set on each PF of ``nodename``, by address."""
        with self._connect() as db:
            return dict(db.execute(
                'SELECT address, num_vfs FROM vf_counts WHERE nodename = ?',
                (nodename,)).fetchall())

    def set_vf_count(self, nodename: str, address: str,
                     num_vfs: int) -> None:
        """Record the VF count the operator set on the PF at ``address``."""
        with self._transaction() as db:
            db.execute('INSERT OR REPLACE INTO vf_counts (nodename, '
                       'address, num_vfs, updated_at) VALUES (?, ?, ?, ?)',
                       (nodename, address, num_vfs, time.time()))

    def forget(self, nodename: str, address: str) -> None:
        """Drop a device whose provider has been removed.

        Its recorded VF count goes with it: a card found in the slot
        later is set up anew, not given VFs meant for the one that left.
        """
        with self._transaction() as db:
            db.execute('DELETE FROM devices WHERE nodename = ? AND '
                       'address = ?', (nodename, address))
            db.execute('DELETE FROM vf_counts WHERE nodename = ? AND '
                       'address = ?', (nodename, address))


def _check(state: str) -> None:
    if state not in STATES:
        raise InvalidState('unknown state %r; states are %s'
                           % (state, ', '.join(STATES)))
