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

"""Commands never change who owns the state store.

As on a compute host: the store belongs to the user nova-compute runs
as (here a real second user, ``cyborgtest``, created if missing), which
creates and writes it; the operator runs ``cyborg-nova`` as root, through
the real console script. Commands that only read leave the store to its
user (nothing created, nothing migrated, nothing owned by root);
commands that write and create it, run as root, give it to
``[cyborg_nova] state_owner``; a user who may not read or write it gets
one line saying why. Needs root and ``runuser``; skipped otherwise.

The second user runs the store's own code (what nova-compute runs) with
a Python it can execute, ``-S`` and the source tree on its path; its
``cyborg-nova`` runs (for the permission errors) need that Python to be
of the virtualenv's version, to import its packages.
"""

import hashlib
import json
import os
import pwd
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import textwrap

import pytest

from cyborg_drivers.fake import hosttree
from cyborg_nova.store import migrations

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
CLI = os.path.join(os.path.dirname(sys.executable), 'cyborg-nova')
USER = 'cyborgtest'
NODE = 'cn-own'
ADDRESS = '0000:3b:00.0'
#: The pre-versioning devices table, as the first release created it.
DEVICES_V0 = (
    'CREATE TABLE devices (nodename TEXT NOT NULL, address TEXT NOT NULL, '
    'state TEXT NOT NULL, reason TEXT, owned_traits TEXT NOT NULL DEFAULT '
    "'[]', created_at REAL NOT NULL, updated_at REAL NOT NULL, PRIMARY KEY "
    '(nodename, address))')


def _runuser(args, **kwargs):
    return subprocess.run(['runuser', '-u', USER, '--'] + args, cwd='/',
                          capture_output=True, text=True, timeout=60,
                          **kwargs)


def _user_python():
    """(python, 'X.Y') the second user can run, or None."""
    for exe in (sys.executable, '/usr/bin/python3'):
        if not os.path.exists(exe):
            continue
        proc = _runuser([exe, '-S', '-c', 'import sqlite3, sys; '
                         'print("%d.%d" % sys.version_info[:2])'])
        if proc.returncode == 0:
            return exe, proc.stdout.strip()
    return None


@pytest.fixture(scope='module')
def user():
    """The second user's passwd entry; created for this module if missing."""
    if os.geteuid() != 0:
        pytest.skip('needs root, to run commands as root and as a second '
                    'user')
    if not (shutil.which('runuser') and shutil.which('useradd')):
        pytest.skip('needs runuser and useradd, to act as a second user')
    try:
        entry, created = pwd.getpwnam(USER), False
    except KeyError:
        subprocess.run(['useradd', '--system', '--no-create-home',
                        '--shell', '/usr/sbin/nologin', USER], check=True)
        entry, created = pwd.getpwnam(USER), True
    try:
        yield entry
    finally:
        if created:
            subprocess.run(['userdel', USER], check=False)


@pytest.fixture
def host(user):
    found = _user_python()
    if found is None:
        pytest.skip('no Python %s can run (the one running the tests is '
                    'not reachable by it, and no /usr/bin/python3)' % USER)
    # pytest's tmp_path is root's alone (0700): the second user's files
    # live under a directory it can reach.
    work = tempfile.mkdtemp(prefix='cyborg-nova-ownership-')
    os.chmod(work, 0o755)
    try:
        yield Host(work, user, *found)
    finally:
        shutil.rmtree(work)


class Host:
    """A fake sysfs tree, and config files pointing at a state path."""

    def __init__(self, work, user, python, version):
        self.work = work
        self.user = user
        self.python = python
        self.version = version
        self.sysfs = os.path.join(work, 'sys')
        hosttree.build_tree(hosttree.profile_path('gpu-host'), self.sysfs)

    def state_dir(self, name, owned=True):
        """A state directory (0750), the second user's unless not owned."""
        path = os.path.join(self.work, name)
        os.mkdir(path, 0o750)
        if owned:
            os.chown(path, self.user.pw_uid, self.user.pw_gid)
        return path

    def config(self, state_path, **extra):
        conf = os.path.join(self.work, 'nova-%d.conf' % len(
            os.listdir(self.work)))
        with open(conf, 'w') as f:
            f.write('[cyborg_nova]\nsysfs_root = %s\nstate_path = %s\n'
                    'enabled_drivers = nvidia_gpu,intel_qat\n'
                    % (self.sysfs, state_path))
            f.writelines('%s = %s\n' % item for item in extra.items())
        os.chmod(conf, 0o644)
        return conf

    def cli(self, conf, *args):
        """``cyborg-nova`` as root, the real console script."""
        proc = subprocess.run([CLI, '--config-file', conf] + list(args),
                              capture_output=True, text=True, timeout=60)
        return proc.returncode, proc.stdout, proc.stderr

    def user_cli(self, conf, *args):
        """``cyborg-nova`` as the second user."""
        venv = '%d.%d' % sys.version_info[:2]
        if self.version != venv:
            pytest.skip('%s\'s Python is %s, not %s: it cannot import the '
                        'virtualenv\'s packages' % (USER, self.version, venv))
        code = ('import site, sys; site.addsitedir(%r); '
                'from cyborg_nova.cmd import cli; sys.exit(cli.main())'
                % sysconfig.get_paths()['purelib'])
        proc = _runuser([self.python, '-S', '-c', code, '--config-file',
                         conf] + list(args))
        return proc.returncode, proc.stdout, proc.stderr

    def as_user(self, path, code):
        """Run ``code`` with ``store``, the store at ``path``, as the user.

        What nova-compute does: open the store (creating and migrating it
        if need be) and write it. With no ``path``, ``code`` alone. Its
        stdout.
        """
        prelude = textwrap.dedent('''\
            import sys, types
            sys.path.insert(0, %r)
            from cyborg_nova import store as state_store
            ''' % REPO)
        if path:
            prelude += 'store = state_store.StateStore(%r)\n' % path
        proc = _runuser([self.python, '-S', '-c', prelude + code])
        assert proc.returncode == 0, proc.stderr
        return proc.stdout


#: As the second user: record the device at ADDRESS, uninstall intel_qat.
RECORD = '''
gpu = types.SimpleNamespace(
    address=%r, vendor_id='10de', product_id='2236',
    subsystem_vendor_id='10de', subsystem_product_id='1482',
    driver='nvidia_gpu')
store.sync(%r, [gpu], state_store.INACTIVE)
store.set_driver('intel_qat', False)
''' % (ADDRESS, NODE)
#: As the second user: a write, then what is read back.
WRITE_READY = '''
store.set_state(%r, %r, state_store.READY, 'by its user')
print(store.devices(%r)[%r].state)
''' % (NODE, ADDRESS, NODE, ADDRESS)


def _digest(path):
    with open(path, 'rb') as f:
        return hashlib.sha256(f.read()).hexdigest()


def _owners(directory):
    """{path: uid} of the directory and everything under it."""
    found = {directory: os.lstat(directory).st_uid}
    for top, dirs, files in os.walk(directory):
        for name in dirs + files:
            path = os.path.join(top, name)
            found[path] = os.lstat(path).st_uid
    return found


def _one_line(err):
    assert 'Traceback' not in err
    assert len(err.strip().splitlines()) == 1, err
    return err.strip()


def test_read_commands_as_root_leave_the_store_to_its_user(host):
    state = host.state_dir('state')
    path = os.path.join(state, 'state.sqlite')
    host.as_user(path, RECORD)
    conf = host.config(path)
    before = _digest(path)

    rc, out, err = host.cli(conf, 'device-list', '--nodename', NODE,
                            '-f', 'json')
    assert rc == 0, err
    assert [(r['address'], r['state']) for r in json.loads(out)] == [
        (ADDRESS, 'inactive')]
    rc, out, err = host.cli(conf, 'device-show', ADDRESS, '--nodename',
                            NODE, '-f', 'json')
    assert rc == 0, err
    assert json.loads(out)['state'] == 'inactive'
    # The user's driver-uninstall choice, read from its store.
    rc, out, err = host.cli(conf, 'driver-list', '-f', 'json')
    assert rc == 0, err
    enabled = {r['name']: r['enabled'] for r in json.loads(out)}
    assert enabled['nvidia_gpu'] and not enabled['intel_qat']
    rc, out, err = host.cli(conf, 'discover', '--enabled', '--long',
                            '--nodename', NODE, '-f', 'json')
    assert rc == 0, err
    assert ADDRESS in [r['address'] for r in json.loads(out)]
    rc, _, err = host.cli(conf, 'program-show', 'no-such-job')
    assert rc == 1
    assert _one_line(err) == 'no programming job no-such-job on this host'

    # Nothing of root's, the store's content as it was; at most the
    # files SQLite keeps beside a WAL store, which it gave the user.
    owners = _owners(state)
    assert set(owners.values()) == {host.user.pw_uid}, owners
    assert set(os.listdir(state)) <= {
        'state.sqlite', 'state.sqlite-wal', 'state.sqlite-shm'}
    assert _digest(path) == before
    # nova-compute's user still opens and writes its store.
    assert host.as_user(path, WRITE_READY).split() == ['ready']
    assert set(_owners(state).values()) == {host.user.pw_uid}


def test_read_commands_without_a_store_create_nothing(host):
    state = host.state_dir('state')
    missing = os.path.join(host.work, 'not-there')
    for path in (os.path.join(state, 'state.sqlite'),
                 os.path.join(missing, 'state.sqlite')):
        conf = host.config(path)
        rc, out, err = host.cli(conf, 'device-list', '-f', 'json')
        assert rc == 0, err
        assert json.loads(out) == []
        assert _one_line(err) == (
            'no devices recorded: the state store %s does not exist yet '
            '(nova-compute creates it at its first update)' % path)
    rc, _, err = host.cli(conf, 'device-show', ADDRESS)
    assert rc == 1
    assert 'does not exist yet' in _one_line(err)
    rc, out, err = host.cli(conf, 'driver-list', '-f', 'json')
    assert rc == 0, err
    assert os.listdir(state) == []
    assert not os.path.exists(missing)


def test_a_read_command_leaves_an_old_store_to_be_migrated(host):
    state = host.state_dir('state')
    path = os.path.join(state, 'state.sqlite')
    # A store of the first release, in WAL mode, with one device.
    host.as_user(None, textwrap.dedent('''
        import sqlite3
        db = sqlite3.connect(%r)
        db.execute('PRAGMA journal_mode=WAL')
        db.execute(%r)
        db.execute("INSERT INTO devices (nodename, address, state, "
                   "created_at, updated_at) VALUES (%r, %r, 'held', 1, 2)")
        db.commit()
        db.close()
        ''' % (path, DEVICES_V0, NODE, ADDRESS)))
    conf = host.config(path)
    before = _digest(path)

    rc, _, err = host.cli(conf, 'device-list', '--nodename', NODE)
    assert rc == 1
    assert _one_line(err).startswith(
        'the state store %s has schema version 0, older than the %d this '
        'cyborg-nova reads, and this command only reads: it does not '
        'migrate it; nova-compute' % (path, migrations.LATEST))
    assert _digest(path) == before
    assert set(_owners(state).values()) == {host.user.pw_uid}

    # A command that writes migrates it, and leaves it to its user.
    rc, out, err = host.cli(conf, 'device-set-state', ADDRESS, 'ready',
                            '--nodename', NODE)
    assert rc == 0, err
    assert 'migrated to schema version %d' % migrations.LATEST in err
    assert set(_owners(state).values()) == {host.user.pw_uid}
    assert host.as_user(path, WRITE_READY).split() == ['ready']


def test_a_writing_command_as_root_gives_a_new_store_to_its_user(host):
    # Named by state_owner, the directory not there yet.
    top = os.path.join(host.work, 'lib')
    path = os.path.join(top, 'cyborg-nova', 'state.sqlite')
    conf = host.config(path, state_owner=USER)
    rc, out, err = host.cli(conf, 'driver-install', 'nvidia_gpu',
                            '--nodename', NODE)
    assert rc == 0, err
    assert ('Created %s, %s, %s owned by %s:' % (
        top, os.path.dirname(path), path, USER)) in err
    assert set(_owners(top).values()) == {host.user.pw_uid}
    assert host.as_user(path, WRITE_READY).split() == ['ready']

    # By default: the owner of the directory the store goes in.
    state = host.state_dir('state')
    path = os.path.join(state, 'state.sqlite')
    rc, out, err = host.cli(host.config(path), 'driver-install',
                            'nvidia_gpu', '--nodename', NODE)
    assert rc == 0, err
    assert set(_owners(state).values()) == {host.user.pw_uid}
    assert host.as_user(path, WRITE_READY).split() == ['ready']


def test_a_permission_problem_is_one_line(host):
    # Created by root with neither state_owner nor a directory of the
    # user's: root's, as the operator found it. The user can reach it.
    state = host.state_dir('state', owned=False)
    os.chmod(state, 0o755)
    path = os.path.join(state, 'state.sqlite')
    conf = host.config(path)
    rc, out, err = host.cli(conf, 'driver-install', 'nvidia_gpu',
                            '--nodename', NODE)
    assert rc == 0, err
    assert set(_owners(state).values()) == {0}

    rc, out, err = host.user_cli(conf, 'device-list', '--nodename', NODE)
    assert rc == 1 and out == ''
    assert _one_line(err) == (
        'cannot read the state store %s: %s is owned by root (mode 0600) '
        'and this runs as %s, who cannot read it; run it as root (sudo '
        'cyborg-nova ...); if nova-compute runs as %s, give it the store: '
        'chown -R %s: %s' % (path, path, USER, USER, USER, state))
    rc, out, err = host.user_cli(conf, 'device-set-state', ADDRESS, 'held',
                                 '--nodename', NODE)
    assert rc == 1
    assert _one_line(err).startswith(
        'cannot write the state store %s: %s is owned by root'
        % (path, path))
    assert set(_owners(state).values()) == {0}
