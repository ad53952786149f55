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


"""Opening the store read-only, and who owns what an opening creates.

A read-only opening (the commands that only read) creates nothing,
migrates nothing and writes nothing. An opening that may write, run as
root, gives what it creates to the owner asked for (``[cyborg_nova]
state_owner``, else the owner of the store's directory), never a file
that was already there. The tests of ownership change owners, which only
root can: they are skipped otherwise. Real files, real SQLite.
"""

import hashlib
import os
import pwd
import shutil
import sqlite3
import tempfile

import pytest

from cyborg_nova import store as state_store
from cyborg_nova.store import migrations
from tests.unit.store import test_migrations as shapes

ROOT_ONLY = pytest.mark.skipif(
    os.geteuid() != 0, reason='changing a file\'s owner needs root')


def _digest(path):
    with open(path, 'rb') as f:
        return hashlib.sha256(f.read()).hexdigest()


def _version(path):
    db = sqlite3.connect(path)
    try:
        return db.execute('PRAGMA user_version').fetchone()[0]
    finally:
        db.close()


# -- read-only ---------------------------------------------------------------

def test_a_missing_store_read_only_creates_nothing(tmp_path):
    path = tmp_path / 'state' / 'state.sqlite'
    with pytest.raises(state_store.StoreMissing):
        state_store.StateStore(str(path), read_only=True)
    assert not path.parent.exists()
    path.parent.mkdir()
    with pytest.raises(state_store.StoreMissing):
        state_store.StateStore(str(path), read_only=True)
    assert os.listdir(path.parent) == []
    assert not state_store.exists(str(path))


def test_read_only_reads_what_a_writer_wrote_and_writes_nothing(tmp_path):
    path = str(tmp_path / 'state.sqlite')
    writer = state_store.StateStore(path)
    writer.set_driver('intel_qat', False)
    writer.set_vf_count('cn1', '0000:3b:00.0', 4)
    before = _digest(path)
    reader = state_store.StateStore(path, read_only=True)
    assert reader.migrated == [] and reader.given == []
    assert reader.driver_choices() == {'intel_qat': False}
    assert reader.vf_counts('cn1') == {'0000:3b:00.0': 4}
    with pytest.raises(state_store.StoreReadOnly):
        reader.set_driver('intel_qat', True)
    with reader.keep_open():
        assert reader.devices('cn1') == {}
    assert _digest(path) == before
    # What SQLite keeps beside a WAL store for a reader, at most.
    assert set(os.listdir(tmp_path)) <= {
        'state.sqlite', 'state.sqlite-wal', 'state.sqlite-shm'}
    # The writer is not in the way of, nor stopped by, the reader.
    writer.set_driver('intel_qat', True)
    assert reader.driver_choices() == {'intel_qat': True}


@pytest.mark.parametrize('wal', [True, False])
def test_read_only_does_not_migrate_an_old_store(tmp_path, wal):
    path = str(tmp_path / 'state.sqlite')
    shapes.build(path, *shapes.SHAPES['unversioned'], wal=wal)
    before = _digest(path)
    with pytest.raises(state_store.StoreTooOld) as exc:
        state_store.StateStore(path, read_only=True)
    message = str(exc.value)
    assert len(message.splitlines()) == 1
    assert 'schema version 0, older than the %d' % migrations.LATEST \
        in message
    assert 'nova-compute' in message and 'left as it is' in message
    # Not migrated, not switched to WAL: the file is as it was.
    assert _digest(path) == before
    assert _version(path) == 0
    if not wal:
        # A rollback-journal store needs nothing beside it to be read.
        assert os.listdir(tmp_path) == ['state.sqlite']
    # An opening that may write migrates it as before.
    assert state_store.StateStore(path).migrated[-1] == migrations.LATEST
    assert state_store.StateStore(path, read_only=True).driver_choices() \
        == {'intel_qat': False}


def test_read_only_refuses_a_store_of_a_later_release(tmp_path):
    path = str(tmp_path / 'state.sqlite')
    shapes.build(path, *shapes.SHAPES['unversioned'],
                 user_version=migrations.LATEST + 1)
    before = _digest(path)
    with pytest.raises(state_store.StoreTooNew):
        state_store.StateStore(path, read_only=True)
    assert _digest(path) == before


# -- ownership ---------------------------------------------------------------

@pytest.fixture
def nobody():
    try:
        return pwd.getpwnam('nobody')
    except KeyError:
        pytest.skip('no user "nobody" on this host to give files to')


def _owners(*paths):
    return {str(p): (os.lstat(p).st_uid, os.lstat(p).st_gid) for p in paths}


@ROOT_ONLY
def test_root_gives_what_it_creates_to_state_owner(tmp_path, nobody):
    top = tmp_path / 'lib'
    path = top / 'cyborg-nova' / 'state.sqlite'
    store = state_store.StateStore(str(path), owner='nobody')
    ids = (nobody.pw_uid, nobody.pw_gid)
    assert store.given == [str(top), str(path.parent), str(path)]
    assert _owners(top, path.parent, path) == {
        str(p): ids for p in (top, path.parent, path)}
    assert oct(path.stat().st_mode & 0o777) == oct(0o600)
    assert oct(path.parent.stat().st_mode & 0o777) == oct(0o750)
    # The files SQLite creates beside it, as root, get the store's owner.
    with store.keep_open():
        store.set_driver('intel_qat', True)
        sidecars = [p for p in path.parent.iterdir() if p != path]
        assert sidecars
        assert set(_owners(*sidecars).values()) == {ids}
    assert tmp_path.stat().st_uid == 0


@ROOT_ONLY
def test_by_default_the_store_goes_to_its_directory_s_owner(tmp_path,
                                                            nobody):
    os.chown(tmp_path, nobody.pw_uid, nobody.pw_gid)
    path = tmp_path / 'state.sqlite'
    store = state_store.StateStore(str(path), owner='')
    assert store.given == [str(path)]
    assert _owners(path) == {str(path): (nobody.pw_uid, nobody.pw_gid)}


@ROOT_ONLY
def test_a_file_that_was_there_is_never_given_away(tmp_path, nobody):
    path = tmp_path / 'state.sqlite'
    state_store.StateStore(str(path))
    os.chown(tmp_path, nobody.pw_uid, nobody.pw_gid)
    store = state_store.StateStore(str(path), owner='nobody')
    store.set_driver('intel_qat', True)
    assert store.given == []
    assert _owners(path) == {str(path): (0, 0)}


@ROOT_ONLY
def test_without_owner_or_directory_root_keeps_what_it_creates(tmp_path):
    path = tmp_path / 'state' / 'state.sqlite'
    store = state_store.StateStore(str(path), owner='')
    assert store.given == []
    assert _owners(path.parent, path) == {str(path.parent): (0, 0),
                                          str(path): (0, 0)}


@ROOT_ONLY
def test_an_unknown_state_owner_is_refused_before_anything_is_made(
        tmp_path):
    path = tmp_path / 'state' / 'state.sqlite'
    with pytest.raises(state_store.StoreOwnerError) as exc:
        state_store.StateStore(str(path), owner='no-such-user-cn')
    assert "state_owner is 'no-such-user-cn'" in str(exc.value)
    assert not path.parent.exists()


def _not_root_opens(directory):
    """Exit status 0 if a store made here by this user kept its owner."""
    path = os.path.join(directory, 'state.sqlite')
    store = state_store.StateStore(path, owner='root')
    return 0 if (store.given == []
                 and os.stat(path).st_uid == os.geteuid()) else 3


def test_not_root_owner_is_ignored(nobody):
    """Not root, state_owner is ignored: the store is the user's.

    Run as root, the check runs in a child that has become ``nobody``.
    """
    directory = tempfile.mkdtemp(prefix='cn-owner-')
    try:
        if os.geteuid() != 0:
            assert _not_root_opens(directory) == 0
            return
        # pytest's own directories are 0700: nobody gets one of its own.
        os.chmod(directory, 0o777)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.setgid(nobody.pw_gid)
                os.setuid(nobody.pw_uid)
                code = _not_root_opens(directory)
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
        assert os.stat(os.path.join(directory, 'state.sqlite')).st_uid == (
            nobody.pw_uid)
    finally:
        shutil.rmtree(directory)
