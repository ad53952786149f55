"""Units given to instances: never twice, the same ones every time."""

import concurrent.futures
import multiprocessing

import pytest

from cyborg_nova import assignments
from cyborg_nova import state

VFS = ['0000:3b:%02x.%x' % (1 + n // 8, n % 8) for n in range(64)]
PF = 'pf-provider-uuid'


@pytest.fixture
def store_path(tmp_path):
    return str(tmp_path / 'state.sqlite')


def make(path):
    return assignments.Assignments(state.StateStore(path))


def test_deterministic_and_idempotent(store_path):
    a = make(store_path)
    assert a.assign('cn1', 'vm1', PF, VFS, 2) == VFS[:2]
    # Called again at every guest rebuild: the same units.
    assert a.assign('cn1', 'vm1', PF, VFS, 2) == VFS[:2]
    assert a.assign('cn1', 'vm2', PF, VFS, 1) == VFS[2:3]
    assert a.of_consumer('cn1', 'vm1') == {PF: VFS[:2]}
    assert a.release('cn1', 'vm1') == 2
    assert a.assign('cn1', 'vm3', PF, VFS, 3) == [VFS[0], VFS[1], VFS[3]]
    # Another node's units are separate.
    assert a.assign('cn2', 'vm9', PF, VFS, 1) == VFS[:1]


def test_not_enough_units_assigns_nothing(store_path):
    a = make(store_path)
    a.assign('cn1', 'vm1', PF, VFS, 63)
    with pytest.raises(assignments.NoFreeUnits) as exc:
        a.assign('cn1', 'vm2', PF, VFS, 2)
    assert '1 free' in str(exc.value)
    assert a.of_consumer('cn1', 'vm2') == {}
    with pytest.raises(assignments.NoFreeUnits):
        a.assign('cn1', 'vm2', PF, [], 1)


def _one(args):
    path, consumer = args
    try:
        return consumer, make(path).assign('cn1', consumer, PF, VFS, 1)
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
