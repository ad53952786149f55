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

Who owns what: nova-compute runs as its own user (``nova``), while
``cyborg-nova`` commands are often run as root. An opening that may
write creates what is missing (directory 0750, file 0600) and, run as
root, gives what it created to ``[cyborg_nova] state_owner`` (default:
the owner of the store's directory), never a file that was already
there; SQLite gives the ``-wal`` and ``-shm`` files it creates as root
to the owner of the store. A read-only opening (``read_only=True``, the
commands that only read) creates nothing, migrates nothing and never
changes the journal mode. A permission problem is one
:class:`StorePermissionError` naming the file, its owner and the fix.
"""

from __future__ import annotations

import contextlib
import errno
import grp
import logging
import os
import pwd
import sqlite3
import stat
import time
from typing import Iterator
from urllib import parse

from cyborg_nova.store import migrations

LOG = logging.getLogger(__name__)
#: How long an operation waits for another process's write lock.
_BUSY_TIMEOUT = 30.0
#: How long an opener waits before trying again to set WAL mode.
_WAL_RETRY = 0.05
#: What SQLite says when the OS refused it a file (among other causes:
#: :func:`_blocked` tells whether permissions were the cause).
_SQLITE_DENIED = ('unable to open database file',
                  'attempt to write a readonly database')
#: The files SQLite keeps beside a store in WAL mode.
_SIDECARS = ('-wal', '-shm')


class StorePermissionError(PermissionError):
    """This user may not read or write the store, or a file beside it.

    Its message is one line: the file, its owner, and the fix.
    """


class StoreMissing(FileNotFoundError):
    """A read-only opening found no store; nothing was created."""


class StoreOwnerError(OSError):
    """What an opening created could not be given to its owner.

    ``[cyborg_nova] state_owner`` names no user of this host, or the
    change of owner was refused.
    """


class StoreReadOnly(RuntimeError):
    """A write through a store that was opened read-only (a bug)."""


class Database:
    """The store at ``path``, brought to the current schema when opened.

    The file is created (mode 0600, its directory 0750) if missing, put in
    WAL mode, and migrated (see :mod:`cyborg_nova.store.migrations`). Run
    as root, what was created is given to ``owner`` (a user name; when
    empty, the owner of the store's directory if it already exists) and
    that user's group; files and directories that existed are never
    given away.

    With ``read_only``, nothing is created, migrated or written: the store
    is opened with SQLite's ``mode=ro``, and writes raise
    :class:`StoreReadOnly`. On a WAL store SQLite may still create the
    ``-wal`` and ``-shm`` files a reader needs (as root: owned by the
    store's owner); a reader that cannot gets :class:`StorePermissionError`.

    :raises StoreMissing: read-only, and there is no store at ``path``.
    :raises StorePermissionError: this user may not read (or write) the
        store, its directory or a file beside it.
    :raises StoreOwnerError: what was created could not be given to
        ``owner``.
    :raises OSError: the directory or the file cannot be created.
    :raises migrations.StoreTooNew: the store was written by a later
        release; it is left as it is.
    :raises migrations.StoreTooOld: read-only, and the store was not
        migrated yet; it is left as it is.
    :raises sqlite3.Error: the file is not a database, or a migration
        failed (and was rolled back).
    """

    def __init__(self, path: str, *, read_only: bool = False,
                 owner: str | None = None) -> None:
        self.path = path
        self.read_only = read_only
        #: The migrations this opening applied (none: another process
        #: did, the store was current, or it was opened read-only).
        self.migrated: list[int] = []
        #: What this opening created and gave to ``owner``.
        self.given: list[str] = []
        with _explained(path, not read_only):
            if read_only:
                if not exists(path):
                    raise StoreMissing(
                        errno.ENOENT, 'there is no state store yet', path)
                with self._connect() as db:
                    migrations.require_current(db, path)
                return
            self._open_for_writing(owner)
        if self.migrated:
            LOG.info('State store %s migrated to schema version %d '
                     '(steps %s)', path, self.migrated[-1],
                     ', '.join(map(str, self.migrated)))

    def _open_for_writing(self, owner: str | None) -> None:
        target = _Owner.resolve(self.path, owner)
        created = _create_private(self.path, target)
        with self._connect() as db:
            # Before anything is written, WAL mode included.
            migrations.refuse_newer(db, self.path)
            _use_wal(db)
            self.migrated = migrations.upgrade(db, self.path)
        if target is None:
            return
        if self.path in created:
            # SQLite gives them the store's owner itself; made sure of.
            created += [self.path + s for s in _SIDECARS
                        if target.give(self.path + s)]
        self.given = created
        if created:
            LOG.info('Created %s owned by %s (%s), not by root, so that '
                     'nova-compute can open the store',
                     ', '.join(created), target, target.why)

    @contextlib.contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        with _explained(self.path, not self.read_only):
            db = _open(self.path, read_only=self.read_only)
            try:
                yield db
            finally:
                db.close()

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        if self.read_only:
            raise StoreReadOnly('the state store %s was opened read-only'
                                % self.path)
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

        :raises StorePermissionError: this user may not open the store.
        :raises sqlite3.Error: the store cannot be read.
        """
        with _explained(self.path, not self.read_only):
            return KeptOpen(self.path, self.read_only)


class KeptOpen:
    """An idle connection to the store; see :meth:`Database.keep_open`.

    Usable as a context manager; closing it twice is harmless.
    """

    def __init__(self, path: str, read_only: bool = False) -> None:
        # Closed from whichever thread stops its holder.
        self._db: sqlite3.Connection | None = _open(
            path, check_same_thread=False, read_only=read_only)
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


def _open(path: str, check_same_thread: bool = True,
          read_only: bool = False) -> sqlite3.Connection:
    target = path
    if read_only:
        # mode=ro: SQLite never creates the file, nor writes it.
        target = 'file:%s?mode=ro' % parse.quote(os.path.abspath(path))
    # Autocommit (isolation_level=None): transactions are begun
    # explicitly, IMMEDIATE, never implicitly by the sqlite3 module.
    db = sqlite3.connect(target, timeout=_BUSY_TIMEOUT,
                         isolation_level=None,
                         check_same_thread=check_same_thread,
                         uri=read_only)
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


def _create_private(path: str, owner: _Owner | None) -> list[str]:
    """Create the directory and the file if missing.

    What was created is given to ``owner``, if any; the paths given.
    """
    directory = os.path.dirname(os.path.abspath(path))
    missing = []
    parent = directory
    while not os.path.lexists(parent):
        missing.append(parent)
        parent = os.path.dirname(parent)
    os.makedirs(directory, mode=0o750, exist_ok=True)
    given = [d for d in reversed(missing) if owner and owner.give(d)]
    try:
        # Created here, not by sqlite, so it never exists world-readable;
        # the -wal and -shm files inherit its mode (and its owner).
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        return given
    if owner and owner.give(path):
        given.append(path)
    return given


class _Owner:
    """The user (and group) what an opening creates is given to."""

    def __init__(self, uid: int, gid: int, why: str) -> None:
        self.uid = uid
        self.gid = gid
        #: Where the owner came from, for the log.
        self.why = why

    def __str__(self) -> str:
        return '%s:%s' % (_user(self.uid), _group(self.gid))

    @classmethod
    def resolve(cls, path: str, name: str | None) -> _Owner | None:
        """Who gets what is created at ``path``; None: whoever runs this.

        Only root can give files away, so None unless run as root.

        :raises StoreOwnerError: ``name`` is no user of this host.
        """
        if os.geteuid() != 0:
            return None
        if name:
            try:
                entry = pwd.getpwnam(name)
            except KeyError:
                raise StoreOwnerError(
                    '[cyborg_nova] state_owner is %r, which is no user of '
                    'this host: set it to the user nova-compute runs as'
                    % name) from None
            uid, gid = entry.pw_uid, entry.pw_gid
            why = '[cyborg_nova] state_owner'
        else:
            directory = os.path.dirname(os.path.abspath(path))
            try:
                found = os.stat(directory)
            except FileNotFoundError:
                return None
            uid, gid = found.st_uid, found.st_gid
            with contextlib.suppress(KeyError):
                gid = pwd.getpwuid(uid).pw_gid
            why = 'the owner of %s' % directory
        return None if uid == os.geteuid() else cls(uid, gid, why)

    def give(self, path: str) -> bool:
        """Give ``path`` to this owner if this process owns it.

        Never what another user owns. Whether it was given.

        :raises StoreOwnerError: the change of owner was refused.
        """
        try:
            found = os.lstat(path)
        except FileNotFoundError:
            return False
        if (found.st_uid != os.geteuid()
                or (found.st_uid, found.st_gid) == (self.uid, self.gid)):
            return False
        try:
            os.chown(path, self.uid, self.gid, follow_symlinks=False)
        except OSError as exc:
            raise StoreOwnerError('cannot give %s to %s (%s): %s'
                                  % (path, self, self.why, exc.strerror))
        return True


def exists(path: str) -> bool:
    """Whether there is a store at ``path``; creates nothing.

    :raises StorePermissionError: this user cannot tell (a directory on
        the way is not searchable).
    """
    with _explained(path, False):
        try:
            os.stat(path)
        except FileNotFoundError:
            return False
    return True


@contextlib.contextmanager
def _explained(path: str, writing: bool) -> Iterator[None]:
    """Turn a permission problem with the store into one clear error.

    :raises StorePermissionError: the OS or SQLite refused a file and
        this user's permissions are why.
    """
    try:
        yield
    except StorePermissionError:
        raise
    except (OSError, sqlite3.OperationalError) as exc:
        if isinstance(exc, OSError):
            if exc.errno not in (errno.EACCES, errno.EPERM):
                raise
        elif str(exc) not in _SQLITE_DENIED:
            raise
        message = _denial(path, writing)
        if message is None:
            raise
        raise StorePermissionError(message) from exc


def _denial(path: str, writing: bool) -> str | None:
    """One line: which file stops this user, its owner, and the fix.

    None when permissions stop nothing (the error had another cause).
    """
    blocked = _blocked(path, writing)
    if blocked is None:
        return None
    where, cannot = blocked
    found = os.stat(where)
    me = _user(os.geteuid())
    directory = os.path.dirname(os.path.abspath(path))
    try:
        store_owner: str | None = _user(os.stat(path).st_uid)
    except FileNotFoundError:
        store_owner = None
    except OSError:
        # Cannot even be looked at: whoever owns what is in the way.
        store_owner = _user(found.st_uid)
    if store_owner is None:
        fix = ('run it as root with [cyborg_nova] state_owner set to the '
               'user nova-compute runs as, or create %s owned by that user'
               % directory)
    elif store_owner != me:
        fix = ('run it as root (sudo cyborg-nova ...)' if store_owner == 'root'
               else 'run it as %s (sudo -u %s cyborg-nova ...) or as root'
               % (store_owner, store_owner))
        fix += ('; if nova-compute runs as %s, give it the store: chown -R '
                '%s: %s' % (me, me, directory))
    else:
        fix = ('run it as root, or give the store back to %s: chown -R '
               '%s: %s' % (me, me, directory))
    return ('cannot %s the state store %s: %s is owned by %s (mode %04o) '
            'and this runs as %s, who cannot %s it; %s'
            % ('write' if writing else 'read', path, where,
               _user(found.st_uid), stat.S_IMODE(found.st_mode), me, cannot,
               fix))


def _blocked(path: str, writing: bool) -> tuple[str, str] | None:
    """(path, what this user cannot do to it) of the first file in the way.

    The directories on the way, the store, and the files SQLite keeps or
    creates beside it, as ``access(2)`` judges them; None if none is.
    """
    path = os.path.abspath(path)
    directory = os.path.dirname(path)
    ancestors = [directory]
    while os.path.dirname(ancestors[-1]) != ancestors[-1]:
        ancestors.append(os.path.dirname(ancestors[-1]))
    for current in reversed(ancestors):
        if not os.path.lexists(current):
            # Creating it is needed: its parent must be writable.
            parent = os.path.dirname(current)
            if writing and not os.access(parent, os.W_OK | os.X_OK):
                return parent, 'write in'
            return None
        if not os.access(current, os.X_OK):
            return current, 'search'
    if not os.path.lexists(path):
        if writing and not os.access(directory, os.W_OK | os.X_OK):
            return directory, 'write in'
        return None
    if not os.access(path, os.R_OK | (os.W_OK if writing else 0)):
        return path, 'write' if writing else 'read'
    for suffix in _SIDECARS:
        sidecar = path + suffix
        if os.path.lexists(sidecar):
            if not os.access(sidecar, os.R_OK | os.W_OK):
                return sidecar, 'write'
        elif not os.access(directory, os.W_OK | os.X_OK):
            # SQLite creates it for readers of a WAL store too.
            return directory, 'write in'
    return None


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _group(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)
