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

"""Private MariaDB and PostgreSQL servers for the tests (never the system's).

Each server is initialised in a temporary directory and listens on a free
loopback port; it is started once per test session (see the
``db_server`` fixture in tests/conftest.py) and every test gets a fresh
database on it. As root, MariaDB runs with ``--user=root`` and
PostgreSQL (which refuses root) as the ``postgres`` system user.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pwd
import shutil
import signal
import socket
import subprocess
import time

PG_BIN = '/usr/lib/postgresql/15/bin'

#: The database backends the conductor's database tests run on.
BACKENDS = ('sqlite', 'mysql', 'postgresql')
_names = itertools.count(1)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def _wait_gone(pid: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


class Server:
    """One database server in ``workdir``; :meth:`start`, :meth:`stop`.

    ``start_seconds`` is how long the first start took (initialisation of
    the data directory included), ``restart_seconds`` the last restart.
    """

    backend = ''
    label = ''

    def __init__(self, workdir: str) -> None:
        self.dir = os.path.join(workdir, self.backend)
        self.port = free_port()
        self.start_seconds = None
        self.restart_seconds = None
        self.server_version = ''

    @classmethod
    def unavailable(cls) -> str | None:
        """Why this server cannot run here, or None."""
        raise NotImplementedError

    def start(self) -> None:
        first = self.start_seconds is None
        began = time.monotonic()
        if first:
            os.makedirs(self.dir)
            self._init()
        self._run()
        deadline = time.monotonic() + 60
        while True:
            try:
                self.server_version = self.execute(
                    self._version_sql)[0][0]
                break
            except Exception:
                if time.monotonic() > deadline or not self._alive():
                    raise RuntimeError('%s did not start:\n%s' % (
                        self.label, self.log()))
                time.sleep(0.1)
        took = time.monotonic() - began
        if first:
            self.start_seconds = took
        else:
            self.restart_seconds = took

    def execute(self, sql: str, database: str | None = None) -> list:
        """Run ``sql`` as the administrator, outside any transaction."""
        conn = self._connect(database)
        try:
            cur = conn.cursor()
            cur.execute(sql)
            rows = cur.fetchall() if cur.description else []
            cur.close()
            return rows
        finally:
            conn.close()

    def create_db(self, name: str) -> str:
        """A new empty database ``name``; its SQLAlchemy URL."""
        self.execute('DROP DATABASE IF EXISTS %s' % name)
        self.execute(self._create_sql % name)
        return self.url(name)

    def drop_db(self, name: str) -> None:
        self.execute('DROP DATABASE IF EXISTS %s' % name)

    def log(self) -> str:
        try:
            with open(self._log_file) as f:
                return f.read()[-4000:]
        except OSError:
            return ''

    def summary(self) -> str:
        line = ('%s %s: started in %.1f s (data directory initialised '
                'included)' % (self.label, self.server_version,
                               self.start_seconds))
        if self.restart_seconds is not None:
            line += ', restarted in %.1f s' % self.restart_seconds
        return line


class MariaDB(Server):
    """mariadbd (or mysqld) with its own data directory and socket."""

    backend = 'mysql'
    label = 'MariaDB'
    _version_sql = 'SELECT VERSION()'
    _create_sql = 'CREATE DATABASE %s CHARACTER SET utf8mb4'

    def __init__(self, workdir: str) -> None:
        super().__init__(workdir)
        self.data = os.path.join(self.dir, 'data')
        self.socket = os.path.join(self.dir, 'mysqld.sock')
        self._log_file = os.path.join(self.dir, 'error.log')
        self.proc = None

    @staticmethod
    def _binaries():
        server = shutil.which('mariadbd', path='/usr/sbin:/usr/bin') or \
            shutil.which('mysqld', path='/usr/sbin:/usr/bin')
        install = shutil.which('mariadb-install-db') or \
            shutil.which('mysql_install_db')
        return server, install

    @classmethod
    def unavailable(cls) -> str | None:
        if None in cls._binaries():
            return ('MariaDB is not installed (mariadbd and '
                    'mariadb-install-db; Debian package mariadb-server)')
        try:
            import pymysql  # noqa: F401
        except ImportError:
            return 'PyMySQL is not installed'
        return None

    def _user(self) -> list[str]:
        return ['--user=root'] if os.geteuid() == 0 else []

    def _init(self) -> None:
        server, install = self._binaries()
        subprocess.run(
            [install, '--no-defaults', '--datadir=%s' % self.data,
             '--auth-root-authentication-method=normal', '--skip-test-db',
             '--skip-name-resolve'] + self._user(),
            check=True, capture_output=True, text=True)

    def _run(self) -> None:
        server, _ = self._binaries()
        self._out = open(os.path.join(self.dir, 'stdout'), 'ab')
        self.proc = subprocess.Popen(
            [server, '--no-defaults', '--datadir=%s' % self.data,
             '--socket=%s' % self.socket, '--port=%d' % self.port,
             '--bind-address=127.0.0.1', '--skip-grant-tables',
             '--skip-name-resolve', '--skip-log-bin',
             '--pid-file=%s' % os.path.join(self.dir, 'mysqld.pid'),
             '--log-error=%s' % self._log_file,
             '--innodb-buffer-pool-size=64M',
             '--innodb-log-file-size=16M',
             '--innodb-flush-log-at-trx-commit=2',
             '--max-connections=300'] + self._user(),
            stdout=self._out, stderr=subprocess.STDOUT,
            start_new_session=True)

    def _alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _connect(self, database):
        import pymysql
        return pymysql.connect(host='127.0.0.1', port=self.port,
                               user='root', database=database,
                               autocommit=True, connect_timeout=5)

    def url(self, name: str) -> str:
        return 'mysql+pymysql://root@127.0.0.1:%d/%s?charset=utf8mb4' % (
            self.port, name)

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._out.close()
        self.proc = None


class PostgreSQL(Server):
    """PostgreSQL 15 by initdb and pg_ctl, as a user other than root."""

    backend = 'postgresql'
    label = 'PostgreSQL'
    _version_sql = 'SHOW server_version'
    _create_sql = "CREATE DATABASE %s ENCODING 'UTF8'"
    #: Server settings: the tests want speed, not durability.
    settings = ('-c max_connections=300 -c fsync=off '
                '-c synchronous_commit=off -c full_page_writes=off')

    def __init__(self, workdir: str) -> None:
        super().__init__(workdir)
        self.data = os.path.join(self.dir, 'data')
        self._log_file = os.path.join(self.dir, 'log')
        self.pid = None

    @classmethod
    def unavailable(cls) -> str | None:
        if not os.path.exists(os.path.join(PG_BIN, 'initdb')):
            return ('PostgreSQL 15 is not installed (%s/initdb; Debian '
                    'package postgresql)' % PG_BIN)
        if os.geteuid() == 0:
            try:
                pwd.getpwnam('postgres')
            except KeyError:
                return 'root, and no postgres user to run PostgreSQL as'
            if not shutil.which('runuser'):
                return 'root, and no runuser to run PostgreSQL as postgres'
        try:
            import psycopg2  # noqa: F401
        except ImportError:
            return 'psycopg2 is not installed'
        return None

    def _as_owner(self, *cmd) -> None:
        prefix = (['runuser', '-u', 'postgres', '--']
                  if os.geteuid() == 0 else [])
        subprocess.run(prefix + list(cmd), check=True, capture_output=True,
                       text=True)

    def _init(self) -> None:
        if os.geteuid() == 0:
            shutil.chown(self.dir, 'postgres', 'postgres')
            # The postgres user must reach its directory: the work
            # directory is one of tempfile.mkdtemp's, right under /tmp.
            os.chmod(os.path.dirname(self.dir), 0o755)
        self._as_owner(os.path.join(PG_BIN, 'initdb'), '-D', self.data,
                       '-A', 'trust', '-U', 'postgres', '-E', 'UTF8',
                       '--no-sync')

    def _run(self) -> None:
        opts = '-p %d -k %s -c listen_addresses=127.0.0.1 %s' % (
            self.port, self.dir, self.settings)
        self._as_owner(os.path.join(PG_BIN, 'pg_ctl'), '-D', self.data,
                       '-o', opts, '-l', self._log_file, '-w', 'start')
        with open(os.path.join(self.data, 'postmaster.pid')) as f:
            self.pid = int(f.readline())

    def _alive(self) -> bool:
        return self.pid is not None

    def _connect(self, database):
        import psycopg2
        conn = psycopg2.connect(host='127.0.0.1', port=self.port,
                                user='postgres',
                                dbname=database or 'postgres',
                                connect_timeout=5)
        conn.autocommit = True
        return conn

    def drop_db(self, name: str) -> None:
        # Connections left open (a killed conductor's) must not block it.
        self.execute('DROP DATABASE IF EXISTS %s WITH (FORCE)' % name)

    def create_db(self, name: str) -> str:
        self.drop_db(name)
        self.execute(self._create_sql % name)
        return self.url(name)

    def url(self, name: str) -> str:
        return 'postgresql+psycopg2://postgres@127.0.0.1:%d/%s' % (
            self.port, name)

    def stop(self) -> None:
        if self.pid is None:
            return
        try:
            os.kill(self.pid, signal.SIGINT)  # fast shutdown
        except ProcessLookupError:
            pass
        _wait_gone(self.pid)
        self.pid = None


SERVERS = {cls.backend: cls for cls in (MariaDB, PostgreSQL)}


class Pool:
    """The servers of a test session, each started when first asked for.

    A server that cannot run (or did not start) is remembered with the
    reason, so the tests that want it are skipped, not failed.
    """

    def __init__(self) -> None:
        self.workdir = None
        self.servers = {}
        self.missing = {}

    def get(self, backend: str) -> Server | str:
        """The running server of ``backend``, or why there is none."""
        if backend in self.servers:
            return self.servers[backend]
        if backend not in self.missing:
            cls = SERVERS[backend]
            reason = cls.unavailable()
            if reason is None:
                if self.workdir is None:
                    import tempfile
                    self.workdir = tempfile.mkdtemp(prefix='cyborg-nova-db-')
                server = cls(self.workdir)
                try:
                    server.start()
                except Exception as exc:
                    server.stop()
                    reason = '%s did not start: %s %s' % (
                        cls.label, exc, getattr(exc, 'stderr', '') or '')
                else:
                    self.servers[backend] = server
                    return server
            self.missing[backend] = reason
        return self.missing[backend]

    def require(self, backend: str) -> Server:
        """The running server of ``backend``; skips the test without."""
        server = self.get(backend)
        if isinstance(server, str):
            import pytest
            pytest.skip('%s: %s' % (backend, server))
        return server

    def stop(self) -> None:
        for server in self.servers.values():
            server.stop()
        self.servers = {}
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)


@contextlib.contextmanager
def database(request, backend: str, directory):
    """The URL of a fresh database of ``backend`` for a test or a module.

    :param request: the pytest request, for the session's ``db_pool``.
    :param directory: where SQLite's file goes (in a subdirectory not
        created yet).
    """
    if backend == 'sqlite':
        yield 'sqlite:///%s' % os.path.join(str(directory), 'sub',
                                            'conductor.sqlite')
        return
    server = request.getfixturevalue('db_pool').require(backend)
    name = 'cn_test_%d' % next(_names)
    yield server.create_db(name)
    server.drop_db(name)
