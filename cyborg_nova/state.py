"""The host's accelerator state store: SQLite in WAL mode.

nova-compute (the virt driver extension), the agent and the CLI on one
host share it. It holds each device's lifecycle state, which decides the
``reserved`` value its provider gets, and the traits this project last
set on the provider (so it removes only traits it owns). Connections are
opened per operation: safe for nova-compute's threads and for several
processes, with SQLite doing the locking.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sqlite3
import time
from typing import Iterable, Iterator

INACTIVE = 'inactive'
READY = 'ready'
UNHEALTHY = 'unhealthy'
HELD = 'held'
PROGRAMMING = 'programming'
FAILED = 'failed'
STATES = (INACTIVE, READY, UNHEALTHY, HELD, PROGRAMMING, FAILED)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS devices (
    nodename TEXT NOT NULL,
    address TEXT NOT NULL,
    state TEXT NOT NULL,
    reason TEXT,
    owned_traits TEXT NOT NULL DEFAULT '[]',
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (nodename, address)
)
"""


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


class StateStore:
    """The store at ``path``; the file is created (mode 0600) on first use.

    :raises OSError: the directory cannot be created.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, mode=0o750, exist_ok=True)
        if not os.path.exists(path):
            # Created here, not by sqlite, so it never exists world-
            # readable; the -wal and -shm files inherit its mode.
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
        with self._connect() as db:
            db.execute('PRAGMA journal_mode=WAL')
            db.execute(_SCHEMA)

    @contextlib.contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        try:
            db.execute('PRAGMA busy_timeout=30000')
            db.execute('PRAGMA synchronous=NORMAL')
            yield db
        finally:
            db.close()

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._connect() as db:
            # IMMEDIATE: take the write lock up front, so two processes
            # syncing at once serialise instead of failing to upgrade.
            db.execute('BEGIN IMMEDIATE')
            try:
                yield db
            except BaseException:
                db.execute('ROLLBACK')
                raise
            db.execute('COMMIT')

    @staticmethod
    def _row(row) -> DeviceState:
        return DeviceState(row[0], row[1], row[2],
                           tuple(json.loads(row[3])), row[4])

    _COLUMNS = 'address, state, reason, owned_traits, updated_at'

    def devices(self, nodename: str) -> dict[str, DeviceState]:
        """Every device of ``nodename``, by address."""
        with self._connect() as db:
            rows = db.execute(
                'SELECT %s FROM devices WHERE nodename = ?' % self._COLUMNS,
                (nodename,)).fetchall()
        return {r[0]: self._row(r) for r in rows}

    def sync(self, nodename: str, addresses: Iterable[str],
             initial_state: str) -> dict[str, DeviceState]:
        """Add devices not seen before in ``initial_state``; all rows.

        Rows of devices not in ``addresses`` are kept: a vanished device
        keeps its state until its provider is gone (see :meth:`forget`).
        Writes nothing when every address is known already.
        """
        _check(initial_state)
        known = self.devices(nodename)
        new = [a for a in addresses if a not in known]
        if not new:
            return known
        now = time.time()
        with self._transaction() as db:
            db.executemany(
                'INSERT OR IGNORE INTO devices (nodename, address, state, '
                'created_at, updated_at) VALUES (?, ?, ?, ?, ?)',
                [(nodename, a, initial_state, now, now) for a in new])
        return self.devices(nodename)

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

    def forget(self, nodename: str, address: str) -> None:
        """Drop a device whose provider has been removed."""
        with self._transaction() as db:
            db.execute('DELETE FROM devices WHERE nodename = ? AND '
                       'address = ?', (nodename, address))


def _check(state: str) -> None:
    if state not in STATES:
        raise InvalidState('unknown state %r; states are %s'
                           % (state, ', '.join(STATES)))
