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


"""Opening the host's state store: its file, its connections, its schema.

:class:`Database` is the only place that connects to the store. A
connection is opened per operation, which is safe for nova-compute's
threads and for several processes, with SQLite doing the locking; the
table modules of this package take their connections from it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import time
from typing import Iterator

from cyborg_nova.store import migrations

LOG = logging.getLogger(__name__)
#: How long an operation waits for another process's write lock.
_BUSY_TIMEOUT = 30.0
#: How long an opener waits before trying again to set WAL mode.
_WAL_RETRY = 0.05


class Database:
    """The store at ``path``, brought to the current schema when opened.

    The file is created (mode 0600, its directory 0750) if missing, put in
    WAL mode, and migrated (see :mod:`cyborg_nova.store.migrations`).

    :raises OSError: the directory or the file cannot be created.
    :raises migrations.StoreTooNew: the store was written by a later
        release; it is left as it is.
    :raises sqlite3.Error: the file is not a database, or a migration
        failed (and was rolled back).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        _create_private(path)
        with self._connect() as db:
            # Before anything is written, WAL mode included.
            migrations.refuse_newer(db, path)
            _use_wal(db)
            #: The migrations this opening applied (none: another process
            #: did, or the store was current).
            self.migrated = migrations.upgrade(db, path)
        if self.migrated:
            LOG.info('State store %s migrated to schema version %d '
                     '(steps %s)', path, self.migrated[-1],
                     ', '.join(map(str, self.migrated)))

    @contextlib.contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        db = _open(self.path)
        try:
            yield db
        finally:
            db.close()

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._connect() as db:
            # IMMEDIATE: take the write lock up front, so two processes
            # writing at once serialise instead of failing to upgrade.
            db.execute('BEGIN IMMEDIATE')
            try:
                yield db
            except BaseException:
                db.execute('ROLLBACK')
                raise
            db.execute('COMMIT')

    def keep_open(self) -> KeptOpen:
        """A connection held until :meth:`KeptOpen.close`.

        SQLite checkpoints the WAL into the database (and syncs it)
        whenever the last connection to it closes, and the store opens
        one per operation: a process that writes often (the programmer's
        journal) holds one open meanwhile so that happens once, not at
        every step.

        :raises sqlite3.Error: the store cannot be read.
        """
        return KeptOpen(self.path)


class KeptOpen:
    """An idle connection to the store; see :meth:`Database.keep_open`.

    Usable as a context manager; closing it twice is harmless.
    """

    def __init__(self, path: str) -> None:
        # Closed from whichever thread stops its holder.
        self._db: sqlite3.Connection | None = _open(
            path, check_same_thread=False)
        # A read maps the WAL index: from then on it counts as open. Read
        # to the end, so no statement keeps a snapshot (which would stop
        # checkpoints instead).
        self._db.execute('SELECT count(*) FROM sqlite_master').fetchall()

    @property
    def closed(self) -> bool:
        return self._db is None

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def __enter__(self) -> KeptOpen:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def _open(path: str, check_same_thread: bool = True) -> sqlite3.Connection:
    # Autocommit (isolation_level=None): transactions are begun
    # explicitly, IMMEDIATE, never implicitly by the sqlite3 module.
    db = sqlite3.connect(path, timeout=_BUSY_TIMEOUT, isolation_level=None,
                         check_same_thread=check_same_thread)
    try:
        db.execute('PRAGMA busy_timeout=%d' % (_BUSY_TIMEOUT * 1000))
        # Durable at each checkpoint, not at each commit: WAL keeps the
        # database consistent either way.
        db.execute('PRAGMA synchronous=NORMAL')
    except BaseException:
        db.close()
        raise
    return db


def _use_wal(db: sqlite3.Connection) -> None:
    """Put the store in WAL mode (it stays so), waiting for other openers.

    :raises sqlite3.OperationalError: still locked after the busy timeout.
    """
    deadline = time.monotonic() + _BUSY_TIMEOUT
    while True:
        try:
            db.execute('PRAGMA journal_mode=WAL').fetchall()
            return
        except sqlite3.OperationalError as exc:
            # Changing the mode takes the exclusive lock from a shared
            # one; of two processes opening a new store at once, SQLite
            # fails one at once instead of waiting (the busy handler
            # would deadlock them), so the waiting is done here.
            if (str(exc) != 'database is locked'
                    or time.monotonic() > deadline):
                raise
        time.sleep(_WAL_RETRY)


def _create_private(path: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, mode=0o750, exist_ok=True)
    if not os.path.exists(path):
        # Created here, not by sqlite, so it never exists world-readable;
        # the -wal and -shm files inherit its mode.
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
