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


"""The state store's schema versions: every store on disk upgrades.

The old shapes are built here with raw SQL, as each earlier release of
this code left them (its modules created their tables with ``CREATE
TABLE IF NOT EXISTS`` when first used), rows included.
"""

import hashlib
import multiprocessing
import os
import sqlite3

import pytest

from cyborg_nova import assignments
from cyborg_nova import programming
from cyborg_nova import store as state_store
from cyborg_nova.store import migrations

PF = 'pf-provider-uuid'

# -- the tables as the releases before versioning created them ---------------

DEVICES_V0 = (
    'CREATE TABLE IF NOT EXISTS devices (nodename TEXT NOT NULL, address '
    'TEXT NOT NULL, state TEXT NOT NULL, reason TEXT, owned_traits TEXT '
    "NOT NULL DEFAULT '[]', created_at REAL NOT NULL, updated_at REAL NOT "
    'NULL, PRIMARY KEY (nodename, address))')
DEVICES_COLUMNS = (
    "ALTER TABLE devices ADD COLUMN identity TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE devices ADD COLUMN driver TEXT NOT NULL DEFAULT ''",
    'ALTER TABLE devices ADD COLUMN missing INTEGER NOT NULL DEFAULT 0',
)
DRIVERS = ('CREATE TABLE IF NOT EXISTS drivers (name TEXT PRIMARY KEY, '
           'enabled INTEGER NOT NULL, updated_at REAL NOT NULL)')
VF_COUNTS = ('CREATE TABLE IF NOT EXISTS vf_counts (nodename TEXT NOT '
             'NULL, address TEXT NOT NULL, num_vfs INTEGER NOT NULL, '
             'updated_at REAL NOT NULL, PRIMARY KEY (nodename, address))')
OLD_UNITS = ('CREATE TABLE IF NOT EXISTS assignments (nodename TEXT NOT '
             'NULL, unit TEXT NOT NULL, consumer TEXT NOT NULL, provider '
             'TEXT NOT NULL, created_at REAL NOT NULL, PRIMARY KEY '
             '(nodename, unit))')
UNITS = (
    'CREATE TABLE IF NOT EXISTS unit_assignments (provider TEXT NOT NULL, '
    'unit TEXT NOT NULL, consumer TEXT NOT NULL, created_at REAL NOT '
    'NULL, PRIMARY KEY (provider, unit))',
    'CREATE INDEX IF NOT EXISTS unit_assignments_consumer ON '
    'unit_assignments (consumer)',
)
JOURNAL = (
    'CREATE TABLE IF NOT EXISTS program_jobs (id TEXT PRIMARY KEY, '
    'nodename TEXT NOT NULL, address TEXT NOT NULL, provider TEXT NOT '
    'NULL, driver TEXT NOT NULL, region TEXT NOT NULL, bitstream TEXT NOT '
    'NULL, kind TEXT NOT NULL, interface_id TEXT NOT NULL, function_id '
    'TEXT NOT NULL, old_function_id TEXT, prev_state TEXT NOT NULL, '
    'prev_reason TEXT, target_state TEXT NOT NULL, step TEXT NOT NULL, '
    'status TEXT NOT NULL, error TEXT, attempts INTEGER NOT NULL DEFAULT '
    '0, owner TEXT, created_at REAL NOT NULL, updated_at REAL NOT NULL, '
    'finished_at REAL, consumer TEXT)',
    "CREATE UNIQUE INDEX IF NOT EXISTS program_jobs_running ON "
    "program_jobs (nodename, address) WHERE status = 'running'",
    'CREATE TABLE IF NOT EXISTS program_steps (job TEXT NOT NULL, step '
    'TEXT NOT NULL, at REAL NOT NULL, detail TEXT)',
    'CREATE INDEX IF NOT EXISTS program_steps_job ON program_steps (job)',
)

A_JOB = ("INSERT INTO program_jobs (id, nodename, address, provider, "
         "driver, region, bitstream, kind, interface_id, function_id, "
         "prev_state, target_state, step, status, created_at, updated_at) "
         "VALUES ('j1', 'cn1', '0000:5e:00.0', 'rp', 'intel_fpga', 'r0', "
         "'nlb.gbs', 'gbs', 'if', 'fn', 'ready', 'ready', 'programmed', "
         "'running', 5, 6)",
         "INSERT INTO program_steps VALUES ('j1', 'created', 5, NULL)")

#: Each shape an earlier release can have left, by the release's work:
#: (statements, rows).
SHAPES = {
    # The first release: device states only.
    'devices': ([DEVICES_V0], [
        "INSERT INTO devices (nodename, address, state, created_at, "
        "updated_at) VALUES ('cn1', '0000:3b:00.0', 'ready', 1, 2)"]),
    # Card identities, installed drivers, the first unit table (keyed by
    # nodename); no journal yet.
    'first-units': ([DEVICES_V0, *DEVICES_COLUMNS, DRIVERS, OLD_UNITS], [
        "INSERT INTO devices VALUES ('cn1', '0000:3b:00.0', 'held', "
        "'maintenance', '[\"CUSTOM_A\"]', 1, 2, '8086:4940:8086:0000', "
        "'intel_qat', 1)",
        "INSERT INTO drivers VALUES ('intel_qat', 0, 3)",
        "INSERT INTO assignments VALUES ('cn1', '0000:3b:01.0', 'vm1', "
        "'%s', 4)" % PF]),
    # The same, with the programming journal.
    'first-units-and-journal': (
        [DEVICES_V0, *DEVICES_COLUMNS, DRIVERS, OLD_UNITS, *JOURNAL], [
            "INSERT INTO devices VALUES ('cn1', '0000:3b:00.0', 'held', "
            "'maintenance', '[\"CUSTOM_A\"]', 1, 2, '8086:4940:8086:0000', "
            "'intel_qat', 1)",
            "INSERT INTO assignments VALUES ('cn1', '0000:3b:01.0', 'vm1', "
            "'%s', 4)" % PF, *A_JOB]),
    # Both unit tables: a converted one, and the first one created again
    # by a process of an older release still running.
    'both-unit-tables': ([DEVICES_V0, *DEVICES_COLUMNS, *UNITS, OLD_UNITS], [
        "INSERT INTO unit_assignments VALUES ('%s', '0000:3b:01.0', "
        "'vm1', 4)" % PF,
        "INSERT INTO assignments VALUES ('cn1', '0000:3b:01.0', 'vm2', "
        "'%s', 5)" % PF,
        "INSERT INTO assignments VALUES ('cn1', '0000:3b:01.1', 'vm1', "
        "'%s', 6)" % PF]),
    # The last release before versioning: every table, no version.
    'unversioned': (
        [DEVICES_V0, *DEVICES_COLUMNS, DRIVERS, *UNITS, *JOURNAL, VF_COUNTS],
        ["INSERT INTO devices VALUES ('cn1', '0000:3b:00.0', 'held', "
         "'maintenance', '[\"CUSTOM_A\"]', 1, 2, '8086:4940:8086:0000', "
         "'intel_qat', 1)",
         "INSERT INTO drivers VALUES ('intel_qat', 0, 3)",
         "INSERT INTO unit_assignments VALUES ('%s', '0000:3b:01.0', "
         "'vm1', 4)" % PF,
         "INSERT INTO vf_counts VALUES ('cn1', '0000:3b:00.0', 8, 7)",
         *A_JOB]),
}


def build(path, statements, rows=(), user_version=0, wal=True):
    db = sqlite3.connect(path)
    if wal:
        db.execute('PRAGMA journal_mode=WAL')
    for statement in [*statements, *rows]:
        db.execute(statement)
    if user_version:
        db.execute('PRAGMA user_version = %d' % user_version)
    db.commit()
    db.close()


def schema(path):
    """Every table's columns and every index, as SQLite reports them."""
    db = sqlite3.connect(path)
    try:
        tables = [r[0] for r in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' "
            "ORDER BY name")]
        return {
            'version': db.execute('PRAGMA user_version').fetchone()[0],
            'columns': {t: db.execute('PRAGMA table_info(%s)' % t).fetchall()
                        for t in tables},
            'indexes': {t: sorted(
                (r[1], r[2], r[3]) for r in db.execute(
                    'PRAGMA index_list(%s)' % t)) for t in tables},
        }
    finally:
        db.close()


@pytest.fixture
def fresh(tmp_path):
    """The schema of a store created by this code."""
    return schema(state_store.StateStore(str(tmp_path / 'fresh.sqlite')).path)


def test_a_new_store_is_at_the_latest_version(fresh):
    assert fresh['version'] == migrations.LATEST == 7
    assert sorted(fresh['columns']) == [
        'aer_counters', 'aer_effects', 'device_services', 'devices',
        'drivers', 'program_jobs', 'program_steps', 'remote_drivers',
        'unit_assignments', 'unit_holds', 'vf_counts']
    assert [c[1] for c in fresh['columns']['devices']][-4:] == [
        'identity', 'driver', 'missing', 'reported']
    assert [c[1] for c in fresh['columns']['unit_assignments']][-2:] == [
        'kept_for', 'hostdev']


def test_an_empty_file_becomes_a_store(tmp_path, fresh):
    path = tmp_path / 'empty.sqlite'
    path.touch()
    store = state_store.StateStore(str(path))
    assert store.migrated == list(range(1, migrations.LATEST + 1))
    assert schema(str(path)) == fresh
    assert store.devices('cn1') == {}


@pytest.mark.parametrize('shape', sorted(SHAPES))
def test_every_earlier_shape_upgrades_to_the_same_schema(tmp_path, fresh,
                                                         shape):
    path = str(tmp_path / 'old.sqlite')
    build(path, *SHAPES[shape])
    store = state_store.StateStore(path)
    assert store.migrated == list(range(1, migrations.LATEST + 1))
    assert schema(path) == fresh


def test_first_release_rows_get_the_defaults_of_the_new_columns(tmp_path):
    path = str(tmp_path / 'old.sqlite')
    build(path, *SHAPES['devices'])
    store = state_store.StateStore(path)
    row = store.devices('cn1')['0000:3b:00.0']
    assert (row.state, row.reason, row.owned_traits, row.updated_at) == (
        'ready', None, (), 2)
    assert (row.identity, row.driver, row.missing) == ('', '', False)
    assert store.driver_choices() == {}
    assert store.vf_counts('cn1') == {}
    assert assignments.Assignments(store).all() == []
    assert programming.Journal(store).unfinished() == []


@pytest.mark.parametrize('shape', ['first-units', 'first-units-and-journal'])
def test_rows_of_the_first_unit_table_carry_over(tmp_path, shape):
    path = str(tmp_path / 'old.sqlite')
    build(path, *SHAPES[shape])
    store = state_store.StateStore(path)
    assert assignments.Assignments(store).all() == [
        assignments.Assignment('0000:3b:01.0', 'vm1', PF, 4)]
    row = store.devices('cn1')['0000:3b:00.0']
    assert (row.state, row.reason, row.owned_traits, row.identity,
            row.driver, row.missing) == (
        'held', 'maintenance', ('CUSTOM_A',), '8086:4940:8086:0000',
        'intel_qat', True)


def test_a_unit_in_both_tables_keeps_its_converted_row(tmp_path):
    path = str(tmp_path / 'old.sqlite')
    build(path, *SHAPES['both-unit-tables'])
    store = state_store.StateStore(path)
    # The key (provider, unit) holds: the row already converted wins.
    assert assignments.Assignments(store).of_consumer('vm1') == {
        PF: ['0000:3b:01.0', '0000:3b:01.1']}
    assert assignments.Assignments(store).of_consumer('vm2') == {}


def test_every_row_of_the_last_unversioned_release_survives(tmp_path):
    path = str(tmp_path / 'old.sqlite')
    build(path, *SHAPES['unversioned'])
    store = state_store.StateStore(path)
    assert store.devices('cn1')['0000:3b:00.0'].state == 'held'
    assert store.driver_choices() == {'intel_qat': False}
    assert store.vf_counts('cn1') == {'0000:3b:00.0': 8}
    assert assignments.Assignments(store).of_consumer('vm1') == {
        PF: ['0000:3b:01.0']}
    job = programming.Journal(store).get('j1')
    assert (job.step, job.status, job.attempts, job.consumer) == (
        'programmed', 'running', 0, None)
    assert job.steps == (('created', 5.0, None),)
    # And the journal's index still allows one running job per device.
    assert programming.Journal(store).active('cn1', '0000:5e:00.0').id == (
        'j1')


def test_opening_again_changes_nothing(tmp_path):
    path = str(tmp_path / 'state.sqlite')
    build(path, *SHAPES['unversioned'])
    assert state_store.StateStore(path).migrated == list(
        range(1, migrations.LATEST + 1))
    before = schema(path)
    again = state_store.StateStore(path)
    assert again.migrated == []
    assert schema(path) == before
    assert again.vf_counts('cn1') == {'0000:3b:00.0': 8}


def test_opening_a_current_store_takes_no_write_lock(tmp_path):
    path = str(tmp_path / 'state.sqlite')
    state_store.StateStore(path)
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute('BEGIN IMMEDIATE')
    try:
        # It would wait out the 30 s busy timeout if it wanted the lock.
        assert state_store.StateStore(path).migrated == []
    finally:
        writer.execute('ROLLBACK')
        writer.close()


def _files(directory):
    """Every file of ``directory`` and its content's digest."""
    return {name: hashlib.sha256(
        (directory / name).read_bytes()).hexdigest()
        for name in sorted(os.listdir(directory))}


@pytest.mark.parametrize('wal', [True, False])
def test_a_store_of_a_later_release_is_refused_untouched(tmp_path, wal):
    path = tmp_path / 'state.sqlite'
    # Rollback-journal mode too: the opener must not even switch it to
    # WAL (which would rewrite the header).
    build(str(path), *SHAPES['unversioned'],
          user_version=migrations.LATEST + 1, wal=wal)
    before = _files(tmp_path)
    with pytest.raises(state_store.StoreTooNew) as exc:
        state_store.StateStore(str(path))
    message = str(exc.value)
    assert str(path) in message
    assert 'schema version %d, newer than the %d' % (
        migrations.LATEST + 1, migrations.LATEST) in message
    assert 'not supported' in message
    assert _files(tmp_path) == before


# -- the mechanism, with steps of a test's own -------------------------------

def _add_colour(db):
    db.execute("ALTER TABLE drivers ADD COLUMN colour TEXT NOT NULL "
               "DEFAULT 'blue'")


def _fail_after_a_change(db):
    db.execute('CREATE TABLE half_done (x INTEGER)')
    raise sqlite3.OperationalError('step 3 breaks')


# The step after this code's last.
NEXT = migrations.LATEST + 1
STEP_NEXT = migrations.Migration(NEXT, 'drivers get a colour',
                                 _add_colour)


@pytest.fixture
def current(tmp_path):
    """(path, raw connection) of a store at the code's version."""
    path = str(tmp_path / 'state.sqlite')
    state_store.StateStore(path).set_driver('intel_qat', True)
    db = sqlite3.connect(path, isolation_level=None)
    db.execute('PRAGMA busy_timeout=5000')
    yield path, db
    db.close()


def test_a_later_step_runs_once_on_a_store_of_the_version_before(current):
    path, db = current
    steps = (*migrations.MIGRATIONS, STEP_NEXT)
    assert migrations.upgrade(db, path, steps) == [NEXT]
    assert migrations.upgrade(db, path, steps) == []
    assert migrations.version(db) == NEXT
    assert db.execute('SELECT name, enabled, colour FROM drivers'
                      ).fetchall() == [('intel_qat', 1, 'blue')]
    # This code knows the versions before only: now it refuses it.
    with pytest.raises(migrations.StoreTooNew):
        migrations.upgrade(db, path)


def test_a_failing_step_leaves_the_store_as_it_was(current):
    path, db = current
    before = schema(path)
    steps = (*migrations.MIGRATIONS, STEP_NEXT,
             migrations.Migration(NEXT + 1, 'breaks', _fail_after_a_change))
    with pytest.raises(sqlite3.OperationalError, match='step 3'):
        migrations.upgrade(db, path, steps)
    # STEP_NEXT too: all the steps and the version are one transaction.
    assert schema(path) == before
    assert not db.in_transaction


def test_steps_are_numbered_in_order(current):
    path, db = current
    gap = migrations.Migration(NEXT + 1, 'a gap', _add_colour)
    numbers = ', '.join(map(str, range(1, NEXT)))
    with pytest.raises(ValueError,
                       match=r'not \[%s, %d\]' % (numbers, NEXT + 1)):
        migrations.upgrade(db, path, (*migrations.MIGRATIONS, gap))
    assert [m.number for m in migrations.MIGRATIONS] == list(
        range(1, migrations.LATEST + 1))


# -- several processes opening one new store at once -------------------------

def _open_at_once(paths, barrier, results):
    for path in paths:
        barrier.wait()
        results.put((path, state_store.StateStore(path).migrated))


def test_two_processes_opening_a_new_store_at_once_both_succeed(tmp_path):
    ctx = multiprocessing.get_context('spawn')
    paths = [str(tmp_path / ('s%d.sqlite' % i)) for i in range(8)]
    barrier = ctx.Barrier(2)
    results = ctx.Queue()
    procs = [ctx.Process(target=_open_at_once,
                         args=(paths, barrier, results))
             for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    found: dict = {}
    for _ in range(2 * len(paths)):
        path, migrated = results.get(timeout=10)
        found.setdefault(path, []).append(migrated)
    # Of each pair, one migrated; the other found the new version.
    assert {p: sorted(m) for p, m in found.items()} == dict.fromkeys(
        paths, [[], list(range(1, migrations.LATEST + 1))])
    for path in paths:
        assert schema(path)['version'] == migrations.LATEST
