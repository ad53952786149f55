"""The SQLite state store shared by nova-compute, the agent and the CLI."""

import multiprocessing
import os
import sqlite3
import stat
import threading

import pytest

from cyborg_nova import state


@pytest.fixture
def store(tmp_path):
    return state.StateStore(str(tmp_path / 'lib' / 'state.sqlite'))


def test_created_private_in_wal_mode(store):
    mode = stat.S_IMODE(os.stat(store.path).st_mode)
    assert mode == 0o600
    dmode = stat.S_IMODE(os.stat(os.path.dirname(store.path)).st_mode)
    assert dmode & 0o007 == 0
    db = sqlite3.connect(store.path)
    assert db.execute('PRAGMA journal_mode').fetchone()[0] == 'wal'


def test_sync_adds_new_devices_once(store):
    rows = store.sync('cn1', ['0000:3b:00.0', '0000:af:00.0'],
                      state.INACTIVE)
    assert {a: r.state for a, r in rows.items()} == {
        '0000:3b:00.0': 'inactive', '0000:af:00.0': 'inactive'}
    store.set_state('cn1', '0000:3b:00.0', state.READY)
    # Known devices keep their state; a new one gets the initial state.
    rows = store.sync('cn1', ['0000:3b:00.0', '0000:d8:00.0'], state.READY)
    assert rows['0000:3b:00.0'].state == 'ready'
    assert rows['0000:af:00.0'].state == 'inactive'  # vanished, kept
    assert rows['0000:d8:00.0'].state == 'ready'
    # Another node's devices are separate.
    assert store.devices('cn2') == {}


class CountingStore(state.StateStore):
    writes = 0

    def _transaction(self):
        self.writes += 1
        return super()._transaction()


def test_sync_of_known_devices_writes_nothing(tmp_path):
    store = CountingStore(str(tmp_path / 'state.sqlite'))
    store.sync('cn1', ['0000:3b:00.0'], state.INACTIVE)
    assert store.writes == 1
    for _ in range(5):
        store.sync('cn1', ['0000:3b:00.0'], state.INACTIVE)
    assert store.writes == 1


def test_set_state_checks(store):
    store.sync('cn1', ['0000:3b:00.0'], state.INACTIVE)
    with pytest.raises(state.InvalidState) as exc:
        store.set_state('cn1', '0000:3b:00.0', 'sleepy')
    assert 'unknown state' in str(exc.value)
    with pytest.raises(KeyError):
        store.set_state('cn1', '0000:99:00.0', state.READY)
    store.set_state('cn1', '0000:3b:00.0', state.UNHEALTHY, 'fell off')
    row = store.devices('cn1')['0000:3b:00.0']
    assert (row.state, row.reason) == ('unhealthy', 'fell off')


def test_owned_traits_and_forget(store):
    store.sync('cn1', ['0000:3b:00.0'], state.INACTIVE)
    store.set_owned_traits('cn1', '0000:3b:00.0', {'CUSTOM_B', 'CUSTOM_A'})
    assert store.devices('cn1')['0000:3b:00.0'].owned_traits == (
        'CUSTOM_A', 'CUSTOM_B')
    store.forget('cn1', '0000:3b:00.0')
    assert store.devices('cn1') == {}


def test_threads_share_it(store):
    addresses = ['0000:%02x:00.0' % i for i in range(40)]
    errors = []

    def worker(chunk):
        try:
            for address in chunk:
                store.sync('cn1', [address], state.INACTIVE)
                store.set_state('cn1', address, state.READY)
        except Exception as exc:  # the assertion below reports it
            errors.append(exc)
    threads = [threading.Thread(target=worker, args=(addresses[i::4],))
               for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert {r.state for r in store.devices('cn1').values()} == {'ready'}
    assert len(store.devices('cn1')) == 40


def _process_worker(path, node, count):
    s = state.StateStore(path)
    for i in range(count):
        s.sync(node, ['0000:%02x:00.0' % i], state.INACTIVE)
        s.set_state(node, '0000:%02x:00.0' % i, state.HELD)


def test_processes_share_it(store):
    ctx = multiprocessing.get_context('spawn')
    procs = [ctx.Process(target=_process_worker,
                         args=(store.path, 'cn%d' % n, 25))
             for n in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    for n in range(3):
        rows = store.devices('cn%d' % n)
        assert len(rows) == 25
        assert {r.state for r in rows.values()} == {'held'}
    db = sqlite3.connect(store.path)
    assert db.execute('PRAGMA integrity_check').fetchone()[0] == 'ok'
