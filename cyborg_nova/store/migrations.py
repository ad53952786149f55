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


"""The state store's schema and its versioned migrations.

The schema is a single ordered list of numbered steps,
:data:`MIGRATIONS`. Opening a store applies the steps it has not had, in
one ``BEGIN IMMEDIATE`` transaction, and records the number of the last
one in ``PRAGMA user_version`` in that same transaction: a store is
either at its old version or fully at the new one, never in between.

Why ``PRAGMA user_version`` and not alembic (as the conductor-lite's
database, on oslo.db, could use): the store is one SQLite file per host,
opened by several processes (nova-compute, the agent, every
``cyborg-nova`` command), each of which may be the first to open it
after an upgrade, and there is no database server and no operator step
that runs "db sync" before them. SQLite's header holds the version
itself, so reading it costs one statement and needs no table of its own;
the write lock taken by ``BEGIN IMMEDIATE`` makes the first opener
migrate while the others wait, then find the new version and do
nothing.

Step 1 is the baseline. Before versioning, each module created its own
tables with ``CREATE TABLE IF NOT EXISTS`` when it was first used, so a
store left by an earlier release has any subset of the tables below, a
``devices`` table possibly without the ``identity``, ``driver`` and
``missing`` columns, and possibly the first unit table
(``assignments``, keyed by nodename). The baseline brings every such
store, and an empty file, to one schema; it is the only step that has to
look before it acts. A later step is plain DDL/DML against that schema,
appended with the next number; a released step is never edited.

A store whose version is newer than :data:`LATEST` was written by a
later release: it is refused (:class:`StoreTooNew`) and left untouched,
as a downgrade is not supported.

A store opened read-only (the ``cyborg-nova`` commands that only read)
is never migrated: one older than :data:`LATEST` is refused
(:class:`StoreTooOld`) and left for nova-compute, or a command that
writes the store, to migrate.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from typing import Callable, Sequence


class StoreTooNew(RuntimeError):
    """The store's schema is newer than this code knows (a downgrade)."""


class StoreTooOld(RuntimeError):
    """A store opened read-only has a schema older than this code reads.

    Only an opening that may write migrates (see :func:`upgrade`); a
    read-only one leaves the store as it is and says who will.
    """


@dataclasses.dataclass(frozen=True)
class Migration:
    """One numbered step of the schema."""

    number: int
    summary: str
    apply: Callable[[sqlite3.Connection], None]


# -- step 1: the baseline ----------------------------------------------------

# The tables as the releases before versioning created them. Frozen: a
# change to the schema is a new step, never an edit here.
_BASELINE_TABLES = (
    # Each device's lifecycle state and the traits this project set on its
    # provider (so it removes only traits it owns).
    """CREATE TABLE IF NOT EXISTS devices (
        nodename TEXT NOT NULL,
        address TEXT NOT NULL,
        state TEXT NOT NULL,
        reason TEXT,
        owned_traits TEXT NOT NULL DEFAULT '[]',
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        PRIMARY KEY (nodename, address))""",
    """CREATE TABLE IF NOT EXISTS drivers (
        name TEXT PRIMARY KEY,
        enabled INTEGER NOT NULL,
        updated_at REAL NOT NULL)""",
    # The operator's VF count per PF: sysfs resets sriov_numvfs to 0 at
    # boot, so this is what is written back.
    """CREATE TABLE IF NOT EXISTS vf_counts (
        nodename TEXT NOT NULL,
        address TEXT NOT NULL,
        num_vfs INTEGER NOT NULL,
        updated_at REAL NOT NULL,
        PRIMARY KEY (nodename, address))""",
    # (provider, unit) is the key: two consumers can never be given the
    # same function, whichever process assigns them.
    """CREATE TABLE IF NOT EXISTS unit_assignments (
        provider TEXT NOT NULL,
        unit TEXT NOT NULL,
        consumer TEXT NOT NULL,
        created_at REAL NOT NULL,
        PRIMARY KEY (provider, unit))""",
    """CREATE INDEX IF NOT EXISTS unit_assignments_consumer
        ON unit_assignments (consumer)""",
    """CREATE TABLE IF NOT EXISTS program_jobs (
        id TEXT PRIMARY KEY, nodename TEXT NOT NULL, address TEXT NOT NULL,
        provider TEXT NOT NULL, driver TEXT NOT NULL, region TEXT NOT NULL,
        bitstream TEXT NOT NULL, kind TEXT NOT NULL,
        interface_id TEXT NOT NULL, function_id TEXT NOT NULL,
        old_function_id TEXT, prev_state TEXT NOT NULL, prev_reason TEXT,
        target_state TEXT NOT NULL, step TEXT NOT NULL,
        status TEXT NOT NULL, error TEXT,
        attempts INTEGER NOT NULL DEFAULT 0, owner TEXT,
        created_at REAL NOT NULL, updated_at REAL NOT NULL,
        finished_at REAL, consumer TEXT)""",
    # One running job per device, whichever process starts it.
    """CREATE UNIQUE INDEX IF NOT EXISTS program_jobs_running
        ON program_jobs (nodename, address) WHERE status = 'running'""",
    """CREATE TABLE IF NOT EXISTS program_steps (
        job TEXT NOT NULL, step TEXT NOT NULL, at REAL NOT NULL,
        detail TEXT)""",
    """CREATE INDEX IF NOT EXISTS program_steps_job
        ON program_steps (job)""",
)
# Columns the first releases added to ``devices`` when they found them
# missing; added the same way to a fresh table, so that a fresh store and
# an upgraded one have the very same columns in the same order.
_BASELINE_DEVICE_COLUMNS = (
    ('identity', "TEXT NOT NULL DEFAULT ''"),
    ('driver', "TEXT NOT NULL DEFAULT ''"),
    ('missing', 'INTEGER NOT NULL DEFAULT 0'),
)


def _baseline(db: sqlite3.Connection) -> None:
    """Any store of a release before versioning, or none, to schema 1."""
    for statement in _BASELINE_TABLES:
        db.execute(statement)
    have = {row[1] for row in db.execute('PRAGMA table_info(devices)')}
    for name, definition in _BASELINE_DEVICE_COLUMNS:
        if name not in have:
            # Both are constants of this module.
            db.execute('ALTER TABLE devices ADD COLUMN %s %s'
                       % (name, definition))
    tables = {row[0] for row in db.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table'")}
    if 'assignments' in tables:
        # The first unit table, keyed by nodename: the provider uuid
        # already names the node, so its rows carry over as they are.
        db.execute('INSERT OR IGNORE INTO unit_assignments (provider, '
                   'unit, consumer, created_at) SELECT provider, unit, '
                   'consumer, created_at FROM assignments')
        db.execute('DROP TABLE assignments')


# -- step 2: the services each device offers ---------------------------------

def _device_services(db: sqlite3.Connection) -> None:
    """What ``discover-services`` found, per device, and when."""
    db.execute("""CREATE TABLE IF NOT EXISTS device_services (
        nodename TEXT NOT NULL,
        address TEXT NOT NULL,
        driver TEXT NOT NULL,
        services TEXT NOT NULL,
        traits TEXT NOT NULL,
        discovered_at REAL NOT NULL,
        PRIMARY KEY (nodename, address))""")


# -- step 3: out-of-process drivers and their devices -----------------------

def _remote_drivers(db: sqlite3.Connection) -> None:
    """Each registered out-of-process driver: its state and its devices.

    The agent writes a row when a driver registers, goes DOWN, comes
    back UP or reports other devices; nova-compute's update reads them
    and reports the devices as providers, fenced while DOWN.
    """
    db.execute("""CREATE TABLE IF NOT EXISTS remote_drivers (
        nodename TEXT NOT NULL,
        endpoint TEXT NOT NULL,
        type TEXT NOT NULL,
        state TEXT NOT NULL,
        hardware TEXT NOT NULL,
        updated_at REAL NOT NULL,
        PRIMARY KEY (nodename, endpoint))""")


# -- step 4: units kept for a guest that lost its allocation -----------------

def _kept_units(db: sqlite3.Connection) -> None:
    """``unit_assignments.kept_for``: the domain still holding a unit.

    Set when the unit's consumer holds nothing of the provider in
    Placement any more but a libvirt domain on the host still has the
    unit as a hostdev; the unit then stays assigned and reserved until
    the domain is gone.
    """
    db.execute('ALTER TABLE unit_assignments ADD COLUMN kept_for TEXT')


# -- step 5: what the update cycle reported, and each unit's hostdev kind ----

def _unit_records(db: sqlite3.Connection) -> None:
    """``devices.reported`` and ``unit_assignments.hostdev``.

    ``reported`` holds the accelerator the last update cycle reported
    for the device (its ``GET /hardware`` entry, JSON), so a guest build
    finds the device behind a provider without reading sysfs again;
    ``hostdev`` says what a unit becomes in the guest (a managed or an
    unmanaged PCI ``<hostdev>``, or an mdev one), recorded when the unit
    is assigned. Both are NULL for rows written before this step.
    """
    db.execute('ALTER TABLE devices ADD COLUMN reported TEXT')
    db.execute('ALTER TABLE unit_assignments ADD COLUMN hostdev TEXT')


# -- step 6: freed units held back from the next tenant ----------------------

def _unit_holds(db: sqlite3.Connection) -> None:
    """``unit_holds``: freed units no guest may be given yet.

    A unit freed by its consumer gets a row in the same transaction that
    frees it, so no other consumer can take it in between: ``scrubbing``
    while its family's scrub runs, ``used`` when it is one-time-use and
    waits for the operator, ``failed`` when the scrub failed (its device
    is fenced). ``owner`` names the process running the scrub
    (``pid@host``), so two never scrub one unit. A held unit counts as
    reserved in Placement.
    """
    db.execute("""CREATE TABLE unit_holds (
        provider TEXT NOT NULL,
        unit TEXT NOT NULL,
        state TEXT NOT NULL,
        reason TEXT,
        consumer TEXT,
        owner TEXT,
        since REAL NOT NULL,
        updated_at REAL NOT NULL,
        PRIMARY KEY (provider, unit))""")


# -- step 7: PCIe AER counters and the effects they had ----------------------

def _aer_health(db: sqlite3.Connection) -> None:
    """``aer_counters`` and ``aer_effects``: PCIe AER health per device.

    ``aer_counters`` has a row per PCI function of a device and AER
    severity: the count the operator last acknowledged (``baseline``),
    the count at the start of the current rate window, and the last count
    read. ``aer_effects`` has a row per device whose counts took an
    effect (``inform`` or ``fence``), kept until the operator clears it,
    with the effect last notified.
    """
    db.execute("""CREATE TABLE aer_counters (
        nodename TEXT NOT NULL,
        device TEXT NOT NULL,
        function TEXT NOT NULL,
        severity TEXT NOT NULL,
        baseline INTEGER NOT NULL,
        baseline_at REAL NOT NULL,
        window INTEGER NOT NULL,
        window_at REAL NOT NULL,
        last INTEGER NOT NULL,
        last_at REAL NOT NULL,
        PRIMARY KEY (nodename, device, function, severity))""")
    db.execute("""CREATE TABLE aer_effects (
        nodename TEXT NOT NULL,
        device TEXT NOT NULL,
        effect TEXT NOT NULL,
        reason TEXT NOT NULL,
        notified TEXT NOT NULL,
        since REAL NOT NULL,
        updated_at REAL NOT NULL,
        PRIMARY KEY (nodename, device))""")


#: Every step, in order; the store's version is the number of the last
#: one applied.
MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, 'baseline: the tables of the releases before versioning',
              _baseline),
    Migration(2, 'device_services: the services discover-services found',
              _device_services),
    Migration(3, 'remote_drivers: out-of-process drivers, their state '
              'and devices', _remote_drivers),
    Migration(4, 'unit_assignments.kept_for: units a domain still holds '
              'after their allocation went', _kept_units),
    Migration(5, 'devices.reported, unit_assignments.hostdev: the device '
              'last reported and what each unit is in the guest',
              _unit_records),
    Migration(6, 'unit_holds: freed units scrubbing, one-time-use or '
              'failed, held back from the next guest', _unit_holds),
    Migration(7, 'aer_counters, aer_effects: PCIe AER counts and the '
              'effects they had', _aer_health),
)
#: The version this code writes and reads.
LATEST = MIGRATIONS[-1].number


def version(db: sqlite3.Connection) -> int:
    """The store's schema version (0: never versioned, or empty)."""
    return db.execute('PRAGMA user_version').fetchone()[0]


def refuse_newer(db: sqlite3.Connection, path: str,
                 steps: Sequence[Migration] = MIGRATIONS) -> int:
    """The store's version, if this code can open it.

    :raises StoreTooNew: the store was written by a later release.
    """
    found = version(db)
    latest = steps[-1].number
    if found > latest:
        raise StoreTooNew(
            'the state store %s has schema version %d, newer than the %d '
            'this cyborg-nova knows: a later release wrote it, and going '
            'back is not supported (upgrade cyborg-nova on this host '
            'again, or restore the store saved before the upgrade); the '
            'store was left as it is' % (path, found, latest))
    return found


def require_current(db: sqlite3.Connection, path: str,
                    steps: Sequence[Migration] = MIGRATIONS) -> int:
    """The store's version, if it is the one this code reads.

    For read-only openings, which never migrate.

    :raises StoreTooNew: the store was written by a later release.
    :raises StoreTooOld: the store has not been migrated yet.
    """
    found = refuse_newer(db, path, steps)
    latest = steps[-1].number
    if found < latest:
        raise StoreTooOld(
            'the state store %s has schema version %d, older than the %d '
            'this cyborg-nova reads, and this command only reads: it does '
            'not migrate it; nova-compute (restarted after the upgrade) '
            'migrates it when it next opens it, as does any cyborg-nova '
            'command that writes the store; the store was left as it is'
            % (path, found, latest))
    return found


def upgrade(db: sqlite3.Connection, path: str,
            steps: Sequence[Migration] = MIGRATIONS) -> list[int]:
    """Apply the steps the store has not had; their numbers.

    ``db`` is in autocommit mode (``isolation_level=None``). The steps and
    the new version are written in one ``BEGIN IMMEDIATE`` transaction:
    of several processes opening an old store at once, one migrates and
    the others, once they have the lock, find the new version and apply
    nothing.

    :raises StoreTooNew: the store was written by a later release;
        nothing was changed.
    :raises sqlite3.Error: a step failed; nothing was changed.
    """
    _check_numbers(steps)
    latest = steps[-1].number
    if refuse_newer(db, path, steps) == latest:
        # The common case, without taking the write lock.
        return []
    db.execute('BEGIN IMMEDIATE')
    try:
        # Read again under the lock: another process may have migrated
        # while this one waited for it.
        found = refuse_newer(db, path, steps)
        applied = []
        for step in steps[found:]:
            step.apply(db)
            applied.append(step.number)
        # An int formatted, not bound: PRAGMA takes no parameters.
        db.execute('PRAGMA user_version = %d' % latest)
    except BaseException:
        db.execute('ROLLBACK')
        raise
    db.execute('COMMIT')
    return applied


def _check_numbers(steps: Sequence[Migration]) -> None:
    # upgrade() slices the list by version: step n must be at index n-1.
    numbers = [step.number for step in steps]
    if numbers != list(range(1, len(steps) + 1)):
        raise ValueError('migrations must be numbered 1, 2, ... in order, '
                         'not %s' % numbers)
