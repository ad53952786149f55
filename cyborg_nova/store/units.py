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


"""The unit table: which PCI function serves which Placement consumer.

Rows are keyed ``(provider, unit)``; :mod:`cyborg_nova.assignments`
decides which rows to write. Reads open a connection each; writes that
must see and change the table at once go through :meth:`UnitTable.change`.

Units a consumer freed can be held back from the next one
(``unit_holds``, see :class:`Hold`): the hold is written in the very
transaction that frees the unit, and a held unit is neither free nor
unreserved until its hold is lifted.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sqlite3
import time
from typing import Iterable, Iterator, Mapping, Sequence

from cyborg_nova.store import database

_SELECT = ('SELECT unit, consumer, provider, created_at, kept_for, '
           'hostdev FROM unit_assignments')
_SELECT_HOLDS = ('SELECT provider, unit, state, reason, consumer, owner, '
                 'since, updated_at FROM unit_holds')

#: A freed unit whose scrub has not finished.
SCRUBBING = 'scrubbing'
#: A freed one-time-use unit, scrubbed if its family scrubs, that waits
#: for the operator to mark it ready.
USED = 'used'
#: A freed unit whose scrub failed; its device is fenced.
FAILED = 'failed'
HOLD_STATES = (SCRUBBING, USED, FAILED)


@dataclasses.dataclass(frozen=True)
class Assignment:
    """One row: ``unit`` of ``provider`` serves ``consumer``.

    ``kept_for`` names the libvirt domain that still has the unit as a
    hostdev although ``consumer`` holds nothing of ``provider`` in
    Placement any more: the unit stays taken, and reserved, until the
    domain is gone (see :meth:`cyborg_nova.assignments.Assignments.
    reconcile`). None for every unit that serves an allocation.

    ``hostdev`` is what the unit becomes in the guest (see
    :mod:`cyborg_nova.guests`), recorded when it is assigned; None for a
    row of an earlier release.
    """

    unit: str
    consumer: str
    provider: str
    created_at: float = 0.0
    kept_for: str | None = None
    hostdev: str | None = None


@dataclasses.dataclass(frozen=True)
class Hold:
    """``unit`` of ``provider``, freed by ``consumer``, held back.

    ``state`` is one of :data:`HOLD_STATES`; ``reason`` says why a scrub
    failed; ``owner`` (``pid@host``) is the process scrubbing it, None
    until one takes it.
    """

    provider: str
    unit: str
    state: str
    reason: str | None
    consumer: str | None
    owner: str | None
    since: float
    updated_at: float


class UnitTable:
    """The ``unit_assignments`` and ``unit_holds`` tables of ``store``."""

    def __init__(self, store: database.Database) -> None:
        self._store = store

    def all(self) -> list[Assignment]:
        """Every row, ordered by provider and unit."""
        return self._select('ORDER BY provider, unit', ())

    def of_provider(self, provider: str) -> list[Assignment]:
        """The rows of ``provider``, ordered by unit."""
        return self._select('WHERE provider = ? ORDER BY unit', (provider,))

    def of_consumer(self, consumer: str) -> list[Assignment]:
        """The rows of ``consumer``, ordered by unit."""
        return self._select('WHERE consumer = ? ORDER BY unit', (consumer,))

    def kept(self) -> dict[str, int]:
        """{provider: its units nobody may be given}: those to reserve.

        The units kept for a domain (see :class:`Assignment`) and the
        held ones (see :class:`Hold`).
        """
        with self._store._connect() as db:
            return dict(db.execute(
                'SELECT provider, COUNT(*) FROM (SELECT provider FROM '
                'unit_assignments WHERE kept_for IS NOT NULL UNION ALL '
                'SELECT provider FROM unit_holds) GROUP BY provider'))

    def holds(self, provider: str | None = None,
              state: str | None = None) -> list[Hold]:
        """The held units (of ``provider``, in ``state``), by provider."""
        clauses, args = [], []
        for column, value in (('provider', provider), ('state', state)):
            if value is not None:
                clauses.append('%s = ?' % column)
                args.append(value)
        where = ('WHERE %s ' % ' AND '.join(clauses)) if clauses else ''
        with self._store._connect() as db:
            # Only this module's column names are formatted in.
            return [Hold(*row) for row in db.execute(
                '%s %sORDER BY provider, unit' % (_SELECT_HOLDS, where),
                args)]

    def hold(self, unit: str) -> Hold | None:
        """The hold of ``unit`` (on whichever provider), if any."""
        with self._store._connect() as db:
            row = db.execute('%s WHERE unit = ?' % _SELECT_HOLDS,
                             (unit,)).fetchone()
        return Hold(*row) if row else None

    def _select(self, clause: str, args: Sequence) -> list[Assignment]:
        with self._store._connect() as db:
            # ``clause`` is one of the constants above; values are bound.
            return [Assignment(*row) for row in db.execute(
                '%s %s' % (_SELECT, clause), args)]

    @contextlib.contextmanager
    def change(self) -> Iterator[UnitChange]:
        """One write transaction; the table as it sees it.

        Holds the store's write lock until the block ends: what it reads
        cannot change before what it writes is committed. An exception
        out of the block rolls everything back.
        """
        with self._store._transaction() as db:
            yield UnitChange(db)


class UnitChange:
    """The unit table inside one transaction; see :meth:`UnitTable.change`.

    It holds the store's write lock: what it reads stays as read until
    the transaction ends.
    """

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def holders(self, provider: str) -> dict[str, str]:
        """``{unit: consumer}`` of every unit of ``provider`` taken."""
        return dict(self._db.execute(
            'SELECT unit, consumer FROM unit_assignments '
            'WHERE provider = ?', (provider,)))

    def held(self, provider: str) -> set[str]:
        """The units of ``provider`` held back (see :class:`Hold`)."""
        return {unit for (unit,) in self._db.execute(
            'SELECT unit FROM unit_holds WHERE provider = ?', (provider,))}

    def claim(self, provider: str, unit: str, owner: str,
              stale: Iterable[str] = ()) -> bool:
        """Make ``owner`` the one scrubbing ``unit``; whether it is.

        A unit nobody scrubs, or whose scrubber is in ``stale`` (a
        process known to be gone), is taken.
        """
        stale = list(stale)
        # '?' placeholders only are formatted in; every value is bound.
        query = ('UPDATE unit_holds SET owner = ?, '  # nosec B608
                 'updated_at = ? WHERE provider = ? AND unit = ? AND '
                 'state = ? AND (owner IS NULL OR owner = ? OR owner IN '
                 '(%s))' % ','.join('?' * len(stale)))
        return bool(self._db.execute(
            query, [owner, time.time(), provider, unit, SCRUBBING, owner]
            + stale).rowcount)

    def set_hold(self, provider: str, unit: str, state: str,
                 reason: str | None = None, owner: str | None = None
                 ) -> bool:
        """Move ``unit``'s hold to ``state``; whether it was there.

        :param owner: only if this process holds its scrub.
        """
        query = ('UPDATE unit_holds SET state = ?, reason = ?, owner = '
                 'NULL, updated_at = ? WHERE provider = ? AND unit = ?')
        args = [state, reason, time.time(), provider, unit]
        if owner is not None:
            query += ' AND owner = ?'
            args.append(owner)
        return bool(self._db.execute(query, args).rowcount)

    def lift(self, provider: str, unit: str,
             states: Sequence[str] = HOLD_STATES,
             owner: str | None = None) -> bool:
        """Free ``unit``'s hold if it is in ``states``; whether it was.

        :param owner: only if this process holds its scrub.
        """
        # '?' placeholders only are formatted in; every value is bound.
        query = ('DELETE FROM unit_holds WHERE provider = ? '  # nosec B608
                 'AND unit = ? AND state IN (%s)'
                 % ','.join('?' * len(states)))
        args = [provider, unit, *states]
        if owner is not None:
            query += ' AND owner = ?'
            args.append(owner)
        return bool(self._db.execute(query, args).rowcount)

    def add(self, provider: str, consumer: str, units: Sequence[str],
            at: float, hostdevs: Mapping[str, str] | None = None) -> None:
        """Give ``consumer`` the ``units`` of ``provider``.

        :param hostdevs: {unit: what it is in the guest}, recorded.
        :raises sqlite3.IntegrityError: a unit is taken already.
        """
        kinds = hostdevs or {}
        self._db.executemany(
            'INSERT INTO unit_assignments (provider, unit, consumer, '
            'created_at, hostdev) VALUES (?, ?, ?, ?, ?)',
            [(provider, unit, consumer, at, kinds.get(unit))
             for unit in units])

    def fill_hostdevs(self, provider: str,
                      hostdevs: Mapping[str, str]) -> int:
        """Record what units of ``provider`` are in the guest, where unset.

        Rows of an earlier release have none. How many rows changed.
        """
        return sum(self._db.execute(
            'UPDATE unit_assignments SET hostdev = ? WHERE provider = ? '
            'AND unit = ? AND hostdev IS NULL',
            (kind, provider, unit)).rowcount
            for unit, kind in sorted(hostdevs.items()))

    def remove(self, consumer: str, providers: Sequence[str] | None = None,
               units: Sequence[str] | None = None,
               created_before: float | None = None,
               hold: bool = False) -> int:
        """Free what ``consumer`` holds; how many units were freed.

        :param providers: only on these providers (none: on every one).
        :param units: only these units.
        :param created_before: only units assigned before this time.
        :param hold: hold each freed unit back, :data:`SCRUBBING`, in
            this transaction (see :class:`Hold`).
        """
        where = ' WHERE consumer = ?'
        args: list = [consumer]
        for column, values in (('provider', providers), ('unit', units)):
            if values is None:
                continue
            if not values:
                return 0
            where += ' AND %s IN (%s)' % (column,
                                          ','.join('?' * len(values)))
            args.extend(values)
        if created_before is not None:
            where += ' AND created_at < ?'
            args.append(created_before)
        if hold:
            now = time.time()
            # Only this module's column names and '?' placeholders are
            # formatted into the queries; every value is bound.
            hold_query = ('INSERT OR REPLACE INTO unit_holds (provider, '
                          'unit, state, consumer, since, updated_at) '
                          'SELECT provider, unit, ?, consumer, ?, ? '
                          'FROM unit_assignments' + where)  # nosec B608
            self._db.execute(hold_query, [SCRUBBING, now, now] + args)
        # As above: column names and placeholders only.
        query = 'DELETE FROM unit_assignments' + where  # nosec B608
        return self._db.execute(query, args).rowcount

    def reassign(self, provider: str, source: str, dest: str) -> int:
        """Give ``source``'s units of ``provider`` to ``dest``; how many.

        They serve ``dest``'s allocation now: none is kept any more.
        """
        return self._db.execute(
            'UPDATE unit_assignments SET consumer = ?, kept_for = NULL '
            'WHERE provider = ? AND consumer = ?',
            (dest, provider, source)).rowcount

    def keep(self, provider: str, units: dict[str, str | None]) -> int:
        """Set ``kept_for`` of ``provider``'s ``units``: {unit: domain}.

        None clears it (the unit serves an allocation again). How many
        rows changed.
        """
        return sum(self._db.execute(
            'UPDATE unit_assignments SET kept_for = ? WHERE provider = ? '
            'AND unit = ? AND kept_for IS NOT ?',
            (domain, provider, unit, domain)).rowcount
            for unit, domain in sorted(units.items()))
