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


"""The programming journal's tables: jobs and their steps.

A job is a row of ``program_jobs`` (its columns are :data:`COLUMNS`),
and each step it reaches a row of ``program_steps``.
:mod:`cyborg_nova.programming.journal` gives them their meaning.
"""

from __future__ import annotations

import sqlite3
from typing import Any, Iterable, Mapping

from cyborg_nova.store import database

#: The status of a job not finished yet; the store lets a device have
#: one such job at a time.
RUNNING = 'running'

COLUMNS = ('id', 'nodename', 'address', 'provider', 'driver', 'region',
           'bitstream', 'kind', 'interface_id', 'function_id',
           'old_function_id', 'prev_state', 'prev_reason', 'target_state',
           'step', 'status', 'error', 'attempts', 'owner', 'created_at',
           'updated_at', 'finished_at', 'consumer')

#: A step as journaled: (step, time, detail).
Step = tuple[str, float, 'str | None']


class DuplicateJob(Exception):
    """The job's id is taken, or its device has a running job already.

    :attr:`running` is the id of the device's running job, read in the
    same transaction (None: the id was the problem).
    """

    def __init__(self, message: str, running: str | None) -> None:
        super().__init__(message)
        self.running = running


class JobTable:
    """The ``program_jobs`` and ``program_steps`` tables of ``store``."""

    def __init__(self, store: database.Database) -> None:
        self._store = store

    def insert(self, job: Mapping[str, Any]) -> None:
        """Record a new job (every column) and its first step.

        :raises DuplicateJob: nothing was written.
        """
        with self._store._transaction() as db:
            try:
                # Column names of this module and '?' placeholders only.
                db.execute('INSERT INTO program_jobs '  # nosec B608
                           '(%s) VALUES (%s)' % (
                               ', '.join(COLUMNS),
                               ', '.join('?' * len(COLUMNS))),
                           [job[c] for c in COLUMNS])
            except sqlite3.IntegrityError as exc:
                # Still in the transaction: the running job read is the
                # one that refused this one.
                running = self._running(db, job['nodename'],
                                        job['address'])
                raise DuplicateJob(
                    str(exc), None if running is None else running['id']
                ) from exc
            db.execute('INSERT INTO program_steps VALUES (?, ?, ?, ?)',
                       (job['id'], job['step'], job['created_at'], None))

    def update(self, job_id: str, fields: Mapping[str, Any],
               detail: str | None = None) -> None:
        """Set a job's ``fields`` and journal the step they name.

        ``fields`` has the new ``step`` and ``updated_at``: the step's
        row is (step, updated_at, ``detail``).

        :raises ValueError: a field is not a column; nothing was written.
        """
        unknown = set(fields) - set(COLUMNS)
        if unknown:
            raise ValueError('not columns of a job: %s'
                             % ', '.join(sorted(unknown)))
        with self._store._transaction() as db:
            # Checked column names; the values are bound.
            db.execute('UPDATE program_jobs SET %s '  # nosec B608
                       'WHERE id = ?' % ', '.join(
                           '%s = ?' % k for k in fields),
                       [*fields.values(), job_id])
            db.execute('INSERT INTO program_steps VALUES (?, ?, ?, ?)',
                       (job_id, fields['step'], fields['updated_at'],
                        detail))

    def get(self, job_id: str) -> tuple[dict[str, Any], list[Step]] | None:
        """The job's columns and its steps in order; None: no such job."""
        with self._store._connect() as db:
            found = self._select(db, 'id = ?', (job_id,))
            if not found:
                return None
            return found[0], db.execute(
                'SELECT step, at, detail FROM program_steps WHERE '
                'job = ? ORDER BY rowid', (job_id,)).fetchall()

    def running(self, nodename: str, address: str) -> dict[str, Any] | None:
        """The device's running job, if it has one."""
        with self._store._connect() as db:
            return self._running(db, nodename, address)

    def unfinished(self) -> list[dict[str, Any]]:
        """Every running job, oldest first."""
        with self._store._connect() as db:
            return self._select(db, 'status = ?', (RUNNING,),
                                'ORDER BY created_at')

    def latest(self, nodename: str | None = None,
               address: str | None = None,
               limit: int = 50) -> list[dict[str, Any]]:
        """The latest jobs (of a node, of a device), newest first."""
        where, args = ['1 = 1'], []
        for column, value in (('nodename', nodename), ('address', address)):
            if value is not None:
                where.append('%s = ?' % column)
                args.append(value)
        with self._store._connect() as db:
            return self._select(db, ' AND '.join(where), args,
                                'ORDER BY created_at DESC LIMIT %d'
                                % int(limit))

    @classmethod
    def _running(cls, db: sqlite3.Connection, nodename: str,
                 address: str) -> dict[str, Any] | None:
        found = cls._select(db, 'nodename = ? AND address = ? AND '
                            'status = ?', (nodename, address, RUNNING))
        return found[0] if found else None

    @staticmethod
    def _select(db: sqlite3.Connection, where: str, args: Iterable,
                suffix: str = '') -> list[dict[str, Any]]:
        # ``where`` and ``suffix`` are this module's own SQL with '?'
        # placeholders; the values are bound.
        rows = db.execute('SELECT %s FROM program_jobs '  # nosec B608
                          'WHERE %s %s' % (', '.join(COLUMNS), where,
                                           suffix),
                          list(args)).fetchall()
        return [dict(zip(COLUMNS, row)) for row in rows]
