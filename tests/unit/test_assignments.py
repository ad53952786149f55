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

"""Units given to instances: never twice, the same ones every time."""

import concurrent.futures
import multiprocessing
import sqlite3
import time

import pytest

from cyborg_nova import assignments
from cyborg_nova import store as state_store

VFS = ['0000:3b:%02x.%x' % (1 + n // 8, n % 8) for n in range(64)]
PF = 'pf-provider-uuid'


@pytest.fixture
def store_path(tmp_path):
    return str(tmp_path / 'state.sqlite')


def make(path):
    return assignments.Assignments(state_store.StateStore(path))


def test_deterministic_and_idempotent(store_path):
    a = make(store_path)
    assert a.assign('vm1', PF, VFS, 2) == VFS[:2]
    # Called again at every guest rebuild: the same units.
    assert a.assign('vm1', PF, VFS, 2) == VFS[:2]
    assert a.assign('vm2', PF, VFS, 1) == VFS[2:3]
    assert a.of_consumer('vm1') == {PF: VFS[:2]}
    assert a.release('vm1') == 2
    assert a.assign('vm3', PF, VFS, 3) == [VFS[0], VFS[1], VFS[3]]
    # Another provider's units are separate.
    assert a.assign('vm9', 'other-pf', VFS, 1) == VFS[:1]
    assert a.of_consumer('vm9', ['other-pf']) == {'other-pf': VFS[:1]}
    assert a.of_consumer('vm9', [PF]) == {}


def test_not_enough_units_assigns_nothing(store_path):
    a = make(store_path)
    a.assign('vm1', PF, VFS, 63)
    with pytest.raises(assignments.NoFreeUnits) as exc:
        a.assign('vm2', PF, VFS, 2)
    assert '1 free' in str(exc.value)
    assert a.of_consumer('vm2') == {}
    with pytest.raises(assignments.NoFreeUnits):
        a.assign('vm2', PF, [], 1)


def _one(args):
    path, consumer = args
    try:
        return consumer, make(path).assign(consumer, PF, VFS, 1)
    except assignments.NoFreeUnits:
        return consumer, None


@pytest.mark.parametrize('pool', ['threads', 'processes'])
def test_200_concurrent_assignments_never_share_a_vf(store_path, pool):
    make(store_path)
    work = [(store_path, 'vm%03d' % i) for i in range(200)]
    if pool == 'threads':
        executor = concurrent.futures.ThreadPoolExecutor(16)
    else:
        executor = concurrent.futures.ProcessPoolExecutor(
            4, mp_context=multiprocessing.get_context('spawn'))
    with executor:
        results = dict(executor.map(_one, work))
    given = [units[0] for units in results.values() if units]
    refused = [c for c, units in results.items() if units is None]
    print('%s: %d assigned, %d refused' % (pool, len(given), len(refused)))
    assert len(given) == 64
    assert len(set(given)) == 64
    assert set(given) == set(VFS)
    assert len(refused) == 136


MIG = 'migration-uuid'


def links(status='post-migrating'):
    table = {'vm1': assignments.Link(MIG, 'vm1', status),
             MIG: assignments.Link(MIG, 'vm1', status)}
    return table.get


def test_move_replaces_what_the_destination_held(store_path):
    a = make(store_path)
    a.assign('vm1', PF, VFS, 2)
    a.assign(MIG, PF, VFS, 1)
    assert a.move('vm1', MIG) == 2
    # As Placement's move: the destination's own allocation is replaced.
    assert a.of_consumer(MIG) == {PF: VFS[:2]}
    assert a.of_consumer('vm1') == {}
    assert [r.unit for r in a.all()] == VFS[:2]
    assert a.move('vm1', MIG) == 0


def test_trim_keeps_the_first_units(store_path):
    a = make(store_path)
    a.assign('vm1', PF, VFS, 3)
    assert a.trim('vm1', PF, 1) == VFS[1:3]
    assert a.of_consumer('vm1') == {PF: VFS[:1]}
    assert a.trim('vm1', PF, 1) == []


def no_domains():
    return {}


def test_reconcile_frees_units_of_gone_consumers_only(store_path):
    a = make(store_path)
    a.assign('vm1', PF, VFS, 2)
    a.assign('vm2', PF, VFS, 1)
    result = a.reconcile(PF, {'vm2': 1, 'vm3': 2}, time.time(), links(),
                         no_domains)
    assert result.released == {'vm1': VFS[:2]}
    assert result.short == {'vm3': (2, 0)}
    assert a.of_consumer('vm2') == {PF: VFS[2:3]}
    assert a.of_consumer('vm1') == {}


def test_reconcile_keeps_units_assigned_after_the_read(store_path):
    a = make(store_path)
    read_at = time.time()
    time.sleep(0.01)
    a.assign('vm1', PF, VFS, 2)
    result = a.reconcile(PF, {}, read_at)
    assert not result
    assert a.of_consumer('vm1') == {PF: VFS[:2]}


def test_reconcile_follows_a_move_to_the_migration(store_path):
    # The conductor moved vm1's allocation to its migration record before
    # the source compute said so: the units follow, never freed.
    a = make(store_path)
    a.assign('vm1', PF, VFS, 2)
    result = a.reconcile(PF, {MIG: 2}, time.time(), links())
    assert result.moved == [('vm1', MIG, VFS[:2])]
    assert a.of_consumer(MIG) == {PF: VFS[:2]}
    # Without knowing the move it would have freed them.
    assert not result.released


def test_reconcile_follows_a_revert_back_to_the_instance(store_path):
    a = make(store_path)
    a.assign(MIG, PF, VFS, 2)
    result = a.reconcile(PF, {'vm1': 2}, time.time(), links('reverted'))
    assert result.moved == [(MIG, 'vm1', VFS[:2])]
    assert a.of_consumer('vm1') == {PF: VFS[:2]}


def test_reconcile_after_a_same_host_confirm_frees_the_old_units(store_path):
    a = make(store_path)
    a.assign(MIG, PF, VFS, 2)
    a.assign('vm1', PF, VFS, 2)
    result = a.reconcile(PF, {'vm1': 2}, time.time(), links('confirmed'),
                         no_domains)
    assert result.released == {MIG: VFS[:2]}
    assert a.of_consumer('vm1') == {PF: VFS[2:4]}


def test_reconcile_after_a_same_host_revert_gives_the_old_units_back(
        store_path):
    a = make(store_path)
    a.assign(MIG, PF, VFS, 2)
    a.assign('vm1', PF, VFS, 1)
    result = a.reconcile(PF, {'vm1': 2}, time.time(), links('reverted'))
    assert result.moved == [(MIG, 'vm1', VFS[:2])]
    assert a.of_consumer('vm1') == {PF: VFS[:2]}
    assert len(a.all()) == 2


def test_reconcile_keeps_units_a_domain_still_holds(store_path):
    # vm1's allocation was deleted (by hand, or by Nova's API while it
    # took the compute for down) but its domain still runs with two of
    # its three VFs: those stay vm1's, marked kept for the domain; the
    # third is freed.
    a = make(store_path)
    a.assign('vm1', PF, VFS, 3)
    asked = []

    def in_domains():
        asked.append(1)
        return {VFS[0]: 'vm1', VFS[1]: 'vm1', VFS[40]: 'other'}
    result = a.reconcile(PF, {}, time.time(), links(), in_domains)
    assert result.released == {'vm1': [VFS[2]]}
    assert result.kept == {'vm1': {VFS[0]: 'vm1', VFS[1]: 'vm1'}}
    assert a.of_consumer('vm1') == {PF: VFS[:2]}
    assert {r.unit: r.kept_for for r in a.all()} == {
        VFS[0]: 'vm1', VFS[1]: 'vm1'}
    assert a.store.units.kept() == {PF: 2}
    # Never handed out while kept: the next consumer gets other VFs.
    assert a.assign('vm2', PF, VFS, 2) == VFS[2:4]
    # A later cycle with the domain still there: nothing new to say.
    result = a.reconcile(PF, {'vm2': 2}, time.time(), links(), in_domains)
    assert not result
    assert a.of_consumer('vm1') == {PF: VFS[:2]}
    # Once the domain is gone, they are freed.
    result = a.reconcile(PF, {'vm2': 2}, time.time(), links(), no_domains)
    assert result.released == {'vm1': VFS[:2]}
    assert a.store.units.kept() == {}
    assert a.of_consumer('vm1') == {}


def test_reconcile_asks_the_domains_only_for_gone_consumers(store_path):
    a = make(store_path)
    a.assign('vm1', PF, VFS, 2)

    def in_domains():
        raise AssertionError('asked without a gone consumer')
    assert not a.reconcile(PF, {'vm1': 2}, time.time(), links(), in_domains)


def test_reconcile_frees_nothing_when_the_domains_cannot_be_read(
        store_path):
    a = make(store_path)
    a.assign('vm1', PF, VFS, 2)
    for in_domains in (None, lambda: None):
        result = a.reconcile(PF, {}, time.time(), links(), in_domains)
        assert not result.released
        assert a.of_consumer('vm1') == {PF: VFS[:2]}


def test_a_kept_unit_serving_an_allocation_again_is_no_longer_kept(
        store_path):
    # The operator put the deleted allocation back.
    a = make(store_path)
    a.assign('vm1', PF, VFS, 1)
    a.reconcile(PF, {}, time.time(), links(), lambda: {VFS[0]: 'vm1'})
    assert a.store.units.kept() == {PF: 1}
    result = a.reconcile(PF, {'vm1': 1}, time.time(), links(), no_domains)
    assert not result.released
    assert a.store.units.kept() == {}
    assert a.of_consumer('vm1') == {PF: VFS[:1]}


def test_rows_of_the_first_schema_carry_over(store_path):
    # The first unit table, left by an earlier release: opening the store
    # converts it (the store's first migration).
    db = sqlite3.connect(store_path)
    db.execute('CREATE TABLE assignments (nodename TEXT NOT NULL, '
               'unit TEXT NOT NULL, consumer TEXT NOT NULL, provider '
               'TEXT NOT NULL, created_at REAL NOT NULL, PRIMARY KEY '
               '(nodename, unit))')
    db.execute("INSERT INTO assignments VALUES ('cn1', ?, 'vm1', ?, 1)",
               (VFS[0], PF))
    db.commit()
    db.close()
    a = assignments.Assignments(state_store.StateStore(store_path))
    assert a.of_consumer('vm1') == {PF: VFS[:1]}
    db = sqlite3.connect(store_path)
    tables = {r[0] for r in db.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table'")}
    db.close()
    assert 'assignments' not in tables
