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


"""The store's connection held open (``StateStore.keep_open``)."""

import os
import threading

from cyborg_nova import store as state_store


def test_without_a_kept_connection_each_write_checkpoints(tmp_path):
    store = state_store.StateStore(str(tmp_path / 'state.sqlite'))
    store.set_driver('intel_qat', True)
    # The last connection closed: the WAL went into the database.
    assert not os.path.exists(store.path + '-wal')


def test_a_kept_connection_leaves_the_wal_to_later(tmp_path):
    store = state_store.StateStore(str(tmp_path / 'state.sqlite'))
    keeper = store.keep_open()
    try:
        for n in range(3):
            store.set_vf_count('cn1', '0000:3b:00.0', n)
        assert os.path.getsize(store.path + '-wal') > 0
        assert store.vf_counts('cn1') == {'0000:3b:00.0': 2}
    finally:
        keeper.close()
    assert keeper.closed
    keeper.close()
    store.set_driver('intel_qat', True)
    assert not os.path.exists(store.path + '-wal')
    assert state_store.StateStore(store.path).vf_counts('cn1') == {
        '0000:3b:00.0': 2}


def test_a_kept_connection_is_closed_by_another_thread(tmp_path):
    store = state_store.StateStore(str(tmp_path / 'state.sqlite'))
    with store.keep_open() as keeper:
        closer = threading.Thread(target=keeper.close)
        closer.start()
        closer.join()
        assert keeper.closed
