"""Which concrete units (PCI functions) each instance holds.

Placement allocates amounts ("2 CUSTOM_QAT from this PF's provider"); a
guest needs concrete functions ("VFs 0000:3b:00.1 and .2"). The choice is
made once, when the allocation first reaches the host, and recorded in
the host's state store, so the same instance gets the same functions
after a hard reboot, a host reboot, a rebuild or an unshelve. The unit is
the table's key: two instances can never be given the same function,
whichever process or thread assigns them.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Iterable

from cyborg_nova import state as state_store

_SCHEMA = """
CREATE TABLE IF NOT EXISTS assignments (
    nodename TEXT NOT NULL,
    unit TEXT NOT NULL,
    consumer TEXT NOT NULL,
    provider TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (nodename, unit)
)
"""


class NoFreeUnits(Exception):
    """The provider has fewer free units than the allocation asks for."""


@dataclasses.dataclass(frozen=True)
class Assignment:
    unit: str
    consumer: str
    provider: str


class Assignments:
    """Assignments kept in the host's state store."""

    def __init__(self, store: state_store.StateStore) -> None:
        self.store = store
        with store._connect() as db:
            db.execute(_SCHEMA)

    def of_consumer(self, nodename: str, consumer: str
                    ) -> dict[str, list[str]]:
        """{provider uuid: [units]} held by ``consumer``, units sorted."""
        with self.store._connect() as db:
            rows = db.execute(
                'SELECT provider, unit FROM assignments WHERE nodename = ? '
                'AND consumer = ? ORDER BY unit', (nodename, consumer))
            held: dict[str, list[str]] = {}
            for provider, unit in rows:
                held.setdefault(provider, []).append(unit)
        return held

    def of_provider(self, nodename: str, provider: str
                    ) -> list[Assignment]:
        with self.store._connect() as db:
            return [Assignment(u, c, p) for u, c, p in db.execute(
                'SELECT unit, consumer, provider FROM assignments WHERE '
                'nodename = ? AND provider = ? ORDER BY unit',
                (nodename, provider))]

    def assign(self, nodename: str, consumer: str, provider: str,
               candidates: Iterable[str], count: int) -> list[str]:
        """Give ``consumer`` ``count`` units of ``provider``; the units.

        Idempotent: units the consumer already holds on the provider are
        kept (and returned first), so calling it again at every guest
        rebuild changes nothing. New units are the first free ones in
        ``candidates`` order, which makes the choice deterministic.

        :raises NoFreeUnits: not enough free units; nothing is assigned.
        """
        candidates = list(candidates)
        if not candidates:
            raise NoFreeUnits('provider %s has no units' % provider)
        with self.store._transaction() as db:
            # Only '?' placeholders are formatted in; the values are bound.
            taken = dict(db.execute(
                'SELECT unit, consumer FROM assignments '  # nosec B608
                'WHERE nodename = ? AND unit IN (%s)'
                % ','.join('?' * len(candidates)),
                [nodename, *candidates]))
            mine = sorted(u for u, c in taken.items() if c == consumer)
            if len(mine) >= count:
                return mine[:count]
            free = [u for u in candidates if u not in taken]
            need = count - len(mine)
            if len(free) < need:
                raise NoFreeUnits(
                    '%d unit(s) of provider %s asked for %s, %d free'
                    % (count, provider, consumer, len(free) + len(mine)))
            new = free[:need]
            now = time.time()
            db.executemany(
                'INSERT INTO assignments (nodename, unit, consumer, '
                'provider, created_at) VALUES (?, ?, ?, ?, ?)',
                [(nodename, u, consumer, provider, now) for u in new])
        return mine + new

    def release(self, nodename: str, consumer: str,
                provider: str | None = None) -> int:
        """Free what ``consumer`` holds (on ``provider`` only, if given)."""
        query = 'DELETE FROM assignments WHERE nodename = ? AND consumer = ?'
        args = [nodename, consumer]
        if provider is not None:
            query += ' AND provider = ?'
            args.append(provider)
        with self.store._transaction() as db:
            return db.execute(query, args).rowcount
