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

"""The conductor-lite's state in SQL: the agents it knows.

SQLite by default; MySQL or PostgreSQL by URL (``[database]
connection``, as oslo.db registers it). The engine comes from oslo.db,
which sets the per-backend connection options (SQL mode, pool, ping)
and turns driver errors into ``oslo_db.exception`` classes. Tables are
created when the store opens; a later table (such as :data:`PROGRAMS`,
the jobs of FPGA reprogramming) is added to :data:`METADATA` and created
the same way; schema changes to existing tables will need migrations.

Every write is a single conditional statement, so several API threads
(or several conductors sharing one database) cannot both "win" the
same transition: the DOWN alarm of an agent is claimed by exactly one
of them.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import os

from oslo_config import cfg
from oslo_db import api as oslo_db_api
from oslo_db import exception as db_exc
from oslo_db.sqlalchemy import engines
import sqlalchemy as sa
from sqlalchemy.dialects import mysql

LOG = logging.getLogger(__name__)

#: Longest host name (a Nova nodename) and agent endpoint stored.
HOST_LENGTH = 255
ENDPOINT_LENGTH = 1024
STATUS_LENGTH = 32

# MySQL's DATETIME drops the fraction of a second unless asked for it;
# heartbeats a second apart would then compare equal.
_DateTime = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), 'mysql')

# Nova nodenames are case-sensitive; MySQL's default collation is not.
_Host = sa.String(HOST_LENGTH).with_variant(
    mysql.VARCHAR(HOST_LENGTH, collation='utf8mb4_bin'), 'mysql')

METADATA = sa.MetaData()

AGENTS = sa.Table(
    'agents', METADATA,
    sa.Column('host', _Host, primary_key=True),
    sa.Column('endpoint', sa.String(ENDPOINT_LENGTH), nullable=False),
    # The status the agent last reported (READY, DRAINING...).
    sa.Column('status', sa.String(STATUS_LENGTH), nullable=False),
    sa.Column('first_seen', _DateTime, nullable=False),
    sa.Column('last_seen', _DateTime, nullable=False),
    # Whether the DOWN alarm of the current silence has been raised.
    sa.Column('down_alarmed', sa.Boolean, nullable=False, default=False),
    mysql_engine='InnoDB',
    mysql_charset='utf8mb4',
)

#: Longest bitstream name and device reference of a programming job.
BITSTREAM_LENGTH = 1024
DEVICE_LENGTH = 255

# FPGA programming jobs relayed to agents. The agent journals and runs
# the job under the same id; this row is what the conductor-lite last
# learned of it ("pending" until the agent accepted it).
PROGRAMS = sa.Table(
    'programs', METADATA,
    sa.Column('id', sa.String(36), primary_key=True),
    sa.Column('host', _Host, nullable=False),
    sa.Column('device', sa.String(DEVICE_LENGTH), nullable=False),
    sa.Column('bitstream', sa.String(BITSTREAM_LENGTH), nullable=False),
    sa.Column('region', sa.String(64), nullable=True),
    sa.Column('status', sa.String(STATUS_LENGTH), nullable=False),
    # The agent's view of the job, as JSON.
    sa.Column('job', sa.Text, nullable=True),
    sa.Column('error', sa.Text, nullable=True),
    sa.Column('created_at', _DateTime, nullable=False),
    sa.Column('updated_at', _DateTime, nullable=False),
    mysql_engine='InnoDB',
    mysql_charset='utf8mb4',
)


#: A write transaction run again when it lost a race: a deadlock (InnoDB
#: chooses a victim when two first hellos of one host both take gap
#: locks, then both insert) or the duplicate key of a row another
#: conductor, or thread, inserted meanwhile. The transaction was rolled
#: back; running it again sees the winner's row.
_retry_races = oslo_db_api.wrap_db_retry(
    max_retries=10, retry_interval=0.01, inc_retry_interval=True,
    max_retry_interval=0.2, retry_on_deadlock=True, jitter=True,
    exception_checker=lambda exc: isinstance(exc, db_exc.DBDuplicateEntry))


@dataclasses.dataclass(frozen=True)
class Agent:
    """One row of ``agents``; times are naive UTC datetimes."""

    host: str
    endpoint: str
    status: str
    first_seen: datetime.datetime
    last_seen: datetime.datetime
    down_alarmed: bool

    def is_down(self, now: datetime.datetime,
                down_time: datetime.timedelta) -> bool:
        """Silent for longer than ``down_time`` at ``now``."""
        return now - self.last_seen > down_time


def utcnow() -> datetime.datetime:
    """Now, as the naive UTC datetime the tables hold."""
    return datetime.datetime.now(datetime.timezone.utc).replace(
        tzinfo=None)


def engine_from_conf(conf: cfg.ConfigOpts) -> sa.engine.Engine:
    """An engine for ``[database] connection`` with oslo.db's settings.

    The directory of a SQLite file is created (mode 0700) if missing, and
    the file (mode 0600).

    :raises oslo_db.exception.DBConnectionError: the database cannot be
        reached (after ``[database] max_retries``).
    """
    db = conf.database
    url = sa.engine.make_url(db.connection)
    if url.get_backend_name() == 'sqlite' and url.database not in (
            None, '', ':memory:'):
        os.makedirs(os.path.dirname(os.path.abspath(url.database)),
                    mode=0o700, exist_ok=True)
        # Created here, not by sqlite, so it is never readable by others,
        # whatever the umask or the directory; -wal and -shm inherit it.
        os.close(os.open(url.database, os.O_CREAT | os.O_WRONLY, 0o600))
    engine = engines.create_engine(
        db.connection,
        mysql_sql_mode=db.mysql_sql_mode,
        mysql_wsrep_sync_wait=db.mysql_wsrep_sync_wait,
        connection_recycle_time=db.connection_recycle_time,
        connection_debug=db.connection_debug,
        max_pool_size=db.max_pool_size,
        max_overflow=db.max_overflow,
        pool_timeout=db.pool_timeout,
        sqlite_synchronous=db.sqlite_synchronous,
        connection_trace=db.connection_trace,
        max_retries=db.max_retries,
        retry_interval=db.retry_interval,
        connection_parameters=db.connection_parameters)
    if url.get_backend_name() == 'sqlite':
        # Readers (listings) then do not wait for writers (heartbeats).
        @sa.event.listens_for(engine, 'connect')
        def _wal(dbapi_connection, connection_record):
            if url.database not in (None, '', ':memory:'):
                dbapi_connection.execute('PRAGMA journal_mode=WAL')
    return engine


class AgentStore:
    """The ``agents`` table on ``engine``; creates missing tables."""

    def __init__(self, engine: sa.engine.Engine) -> None:
        self.engine = engine
        METADATA.create_all(engine)

    @staticmethod
    def _agent(row) -> Agent:
        return Agent(host=row.host, endpoint=row.endpoint,
                     status=row.status, first_seen=row.first_seen,
                     last_seen=row.last_seen,
                     down_alarmed=bool(row.down_alarmed))

    def get(self, host: str) -> Agent | None:
        """The agent called ``host``, or None."""
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(AGENTS).where(
                AGENTS.c.host == host)).first()
        return self._agent(row) if row is not None else None

    def list(self) -> list[Agent]:
        """Every agent, by host name."""
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(AGENTS).order_by(AGENTS.c.host))
            return [self._agent(row) for row in rows]

    @_retry_races
    def heartbeat(self, host: str, endpoint: str, status: str,
                  now: datetime.datetime) -> tuple[Agent, bool]:
        """Register ``host`` or record its heartbeat at ``now``.

        :returns: the agent, and whether its DOWN alarm had been raised
            (it has now come back); the alarm is cleared.

        Run again when it lost a race with another first hello of the
        same host (see :data:`_retry_races`).
        """
        values = {'endpoint': endpoint, 'status': status,
                  'last_seen': now, 'down_alarmed': False}
        by_host = AGENTS.c.host == host
        with self.engine.begin() as conn:
            # Clearing the alarm only where it was raised tells, in one
            # statement, whether this is the comeback.
            came_back = conn.execute(
                AGENTS.update().where(
                    by_host, AGENTS.c.down_alarmed == sa.true())
                .values(**values)).rowcount == 1
            if not came_back and not conn.execute(
                    AGENTS.update().where(by_host).values(
                        **values)).rowcount:
                conn.execute(AGENTS.insert().values(
                    host=host, first_seen=now, **values))
            row = conn.execute(sa.select(AGENTS).where(by_host)).one()
        return self._agent(row), came_back

    def claim_down_alarms(self, cutoff: datetime.datetime) -> list[Agent]:
        """Mark the agents silent since before ``cutoff`` as alarmed.

        :returns: the agents this call marked (not those already
            marked), so each silence is alarmed exactly once.
        """
        silent = sa.and_(AGENTS.c.last_seen < cutoff,
                         AGENTS.c.down_alarmed == sa.false())
        with self.engine.connect() as conn:
            hosts = conn.execute(sa.select(AGENTS.c.host).where(
                silent).order_by(AGENTS.c.host)).scalars().all()
        claimed = [self._claim(host, silent) for host in hosts]
        return [agent for agent in claimed if agent is not None]

    @_retry_races
    def _claim(self, host: str, silent) -> Agent | None:
        with self.engine.begin() as conn:
            # The condition is checked again: a heartbeat, another thread
            # or another conductor may have come in since the select.
            won = conn.execute(AGENTS.update().where(
                AGENTS.c.host == host, silent).values(
                    down_alarmed=True)).rowcount == 1
            if won:
                return self._agent(conn.execute(sa.select(AGENTS).where(
                    AGENTS.c.host == host)).one())
        return None


@dataclasses.dataclass(frozen=True)
class Program:
    """One row of ``programs``."""

    id: str
    host: str
    device: str
    bitstream: str
    region: str | None
    status: str
    job: str | None
    error: str | None
    created_at: datetime.datetime
    updated_at: datetime.datetime


class ProgramStore:
    """The ``programs`` table on ``engine`` (created with the others)."""

    def __init__(self, engine: sa.engine.Engine) -> None:
        self.engine = engine
        METADATA.create_all(engine)

    def create(self, program_id: str, host: str, device: str,
               bitstream: str, region: str | None,
               now: datetime.datetime) -> Program:
        with self.engine.begin() as conn:
            conn.execute(PROGRAMS.insert().values(
                id=program_id, host=host, device=device,
                bitstream=bitstream, region=region, status='pending',
                created_at=now, updated_at=now))
        return self.get(program_id)

    @_retry_races
    def update(self, program_id: str, now: datetime.datetime,
               **values) -> Program | None:
        with self.engine.begin() as conn:
            conn.execute(PROGRAMS.update().where(
                PROGRAMS.c.id == program_id).values(updated_at=now,
                                                    **values))
        return self.get(program_id)

    def get(self, program_id: str) -> Program | None:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(PROGRAMS).where(
                PROGRAMS.c.id == program_id)).first()
        return Program(**row._mapping) if row is not None else None

    def pending(self) -> list[Program]:
        """Jobs no agent has accepted yet, oldest first."""
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(PROGRAMS).where(
                PROGRAMS.c.status == 'pending').order_by(
                    PROGRAMS.c.created_at))
            return [Program(**row._mapping) for row in rows]
