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

"""The SQLite state store shared by nova-compute, the agent and the CLI."""

import multiprocessing
import os
import sqlite3
import stat
import threading

import pytest

from cyborg_drivers import device
from cyborg_nova import store as state_store


def acc(address, product='4940', driver='intel_qat'):
    return device.Accelerator(
        address=address, driver=driver, device_type='CRYPTO',
        resource_class='CUSTOM_QAT', traits=(), total=16, vendor_id='8086',
        product_id=product, class_code='0x0b4000',
        subsystem_vendor_id='8086', subsystem_product_id='0000')


def accs(*addresses):
    return [acc(a) for a in addresses]


@pytest.fixture
def store(tmp_path):
    return state_store.StateStore(str(tmp_path / 'lib' / 'state.sqlite'))


def test_created_private_in_wal_mode(store):
    mode = stat.S_IMODE(os.stat(store.path).st_mode)
    assert mode == 0o600
    dmode = stat.S_IMODE(os.stat(os.path.dirname(store.path)).st_mode)
    assert dmode & 0o007 == 0
    db = sqlite3.connect(store.path)
    assert db.execute('PRAGMA journal_mode').fetchone()[0] == 'wal'


def test_sync_adds_new_devices_once(store):
    rows = store.sync('cn1', accs('0000:3b:00.0', '0000:af:00.0'),
                      state_store.INACTIVE)
    assert {a: r.state for a, r in rows.items()} == {
        '0000:3b:00.0': 'inactive', '0000:af:00.0': 'inactive'}
    store.set_state('cn1', '0000:3b:00.0', state_store.READY)
    # Known devices keep their state; a new one gets the initial state.
    rows = store.sync('cn1', accs('0000:3b:00.0', '0000:d8:00.0'),
                      state_store.READY)
    assert rows['0000:3b:00.0'].state == 'ready'
    assert rows['0000:af:00.0'].state == 'inactive'  # vanished, kept
    assert rows['0000:d8:00.0'].state == 'ready'
    # Another node's devices are separate.
    assert store.devices('cn2') == {}


class CountingStore(state_store.StateStore):
    writes = 0

    def _transaction(self):
        self.writes += 1
        return super()._transaction()


def test_sync_of_known_devices_writes_nothing(tmp_path):
    store = CountingStore(str(tmp_path / 'state.sqlite'))
    store.sync('cn1', accs('0000:3b:00.0'), state_store.INACTIVE)
    assert store.writes == 1
    for _ in range(5):
        store.sync('cn1', accs('0000:3b:00.0'), state_store.INACTIVE)
    assert store.writes == 1


def test_set_state_checks(store):
    store.sync('cn1', accs('0000:3b:00.0'), state_store.INACTIVE)
    with pytest.raises(state_store.InvalidState) as exc:
        store.set_state('cn1', '0000:3b:00.0', 'sleepy')
    assert 'unknown state' in str(exc.value)
    with pytest.raises(KeyError):
        store.set_state('cn1', '0000:99:00.0', state_store.READY)
    store.set_state('cn1', '0000:3b:00.0', state_store.UNHEALTHY, 'fell off')
    row = store.devices('cn1')['0000:3b:00.0']
    assert (row.state, row.reason) == ('unhealthy', 'fell off')


def test_owned_traits_and_forget(store):
    store.sync('cn1', accs('0000:3b:00.0'), state_store.INACTIVE)
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
                store.sync('cn1', accs(address), state_store.INACTIVE)
                store.set_state('cn1', address, state_store.READY)
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
    s = state_store.StateStore(path)
    for i in range(count):
        s.sync(node, accs('0000:%02x:00.0' % i), state_store.INACTIVE)
        s.set_state(node, '0000:%02x:00.0' % i, state_store.HELD)


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


def test_another_card_in_the_slot_starts_over(store):
    store.sync('cn1', [acc('0000:3b:00.0')], state_store.INACTIVE)
    store.set_state('cn1', '0000:3b:00.0', state_store.READY)
    store.set_owned_traits('cn1', '0000:3b:00.0', ['CUSTOM_QAT'])
    rows = store.sync('cn1', [acc('0000:3b:00.0', product='4942')],
                      state_store.INACTIVE)
    row = rows['0000:3b:00.0']
    assert row.state == 'inactive'
    assert row.reason.startswith('replaced: 8086:4942:')
    # What we set on the provider is still known, so it can be removed.
    assert row.owned_traits == ('CUSTOM_QAT',)


def test_missing_and_found_again(store):
    store.sync('cn1', accs('0000:3b:00.0'), state_store.READY)
    store.mark_missing('cn1', '0000:3b:00.0')
    assert store.devices('cn1')['0000:3b:00.0'].missing
    rows = store.sync('cn1', accs('0000:3b:00.0'), state_store.INACTIVE)
    assert not rows['0000:3b:00.0'].missing
    assert rows['0000:3b:00.0'].state == 'ready'


def test_older_store_gains_new_columns(tmp_path):
    path = str(tmp_path / 'old.sqlite')
    db = sqlite3.connect(path)
    # The devices table as the first release created it.
    db.execute('CREATE TABLE devices (nodename TEXT NOT NULL, address TEXT '
               "NOT NULL, state TEXT NOT NULL, reason TEXT, owned_traits "
               "TEXT NOT NULL DEFAULT '[]', created_at REAL NOT NULL, "
               'updated_at REAL NOT NULL, PRIMARY KEY (nodename, address))')
    db.execute("INSERT INTO devices (nodename, address, state, created_at, "
               "updated_at) VALUES ('cn1', '0000:3b:00.0', 'ready', 0, 0)")
    db.commit()
    db.close()
    store = state_store.StateStore(path)
    row = store.devices('cn1')['0000:3b:00.0']
    assert (row.state, row.identity, row.missing) == ('ready', '', False)
    # And the tables added since, empty.
    assert store.vf_counts('cn1') == {}
    # A row without ids yet takes the ids of what is found, keeping state.
    rows = store.sync('cn1', accs('0000:3b:00.0'), state_store.INACTIVE)
    assert rows['0000:3b:00.0'].state == 'ready'
    assert rows['0000:3b:00.0'].identity == '8086:4940:8086:0000'


def test_vf_counts_per_node_replaced_and_forgotten(store):
    store.sync('cn1', accs('0000:3b:00.0', '0000:af:00.0'), state_store.READY)
    store.set_vf_count('cn1', '0000:3b:00.0', 16)
    store.set_vf_count('cn1', '0000:af:00.0', 4)
    store.set_vf_count('cn1', '0000:3b:00.0', 8)
    store.set_vf_count('cn2', '0000:3b:00.0', 2)
    assert store.vf_counts('cn1') == {'0000:3b:00.0': 8, '0000:af:00.0': 4}
    assert store.vf_counts('cn2') == {'0000:3b:00.0': 2}
    # A removed device's count goes with it, on that node only.
    store.forget('cn1', '0000:3b:00.0')
    assert store.vf_counts('cn1') == {'0000:af:00.0': 4}
    assert store.vf_counts('cn2') == {'0000:3b:00.0': 2}
    # Kept across opens: it is what a reboot needs.
    assert state_store.StateStore(store.path).vf_counts('cn1') == {
        '0000:af:00.0': 4}
