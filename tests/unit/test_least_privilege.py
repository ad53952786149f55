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

"""Least privilege in the code: bandit, no shell, private files.

(The privsep contexts' capabilities against the documented table, and
the entrypoints' argument checks, are tested in ``tests/unit/privsep``,
``tests/functional/privsep`` and ``tests/unit/fuzz``.)
"""

import ast
import json
import os
import re
import sqlite3
import stat
import subprocess
import sys

import pytest

from cyborg_nova.conductor import db as conductor_db
from cyborg_nova.programming import journal
from cyborg_nova import store as state_store
from privsep import nova_conf
from tests.unit.privsep import fakesysfs

TOP = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
#: What bandit scans: everything that ships.
PACKAGES = ['cyborg_nova', 'cyborg_drivers', 'privsep', 'nova',
            'cyborg_nova_tempest_plugin']
#: Where shell=True may appear nowhere: all Python of the repository.
SKIP_DIRS = {'.venv', '.venv-nova31', 'build', '.git', '.tox', 'doc',
             'releasenotes', '__pycache__', '.eggs'}


def python_files(*tops):
    for top in tops or (TOP,):
        for directory, dirs, files in os.walk(os.path.join(TOP, top)):
            dirs[:] = [d for d in dirs if d not in SKIP_DIRS
                       and not d.startswith('.venv')
                       and not d.endswith('.egg-info')]
            for name in files:
                if name.endswith('.py'):
                    yield os.path.join(directory, name)


def _bandit():
    try:
        import bandit  # noqa: F401
    except ImportError:
        return None
    return [sys.executable, '-m', 'bandit']


@pytest.mark.skipif(_bandit() is None, reason='bandit is not installed '
                    '(it is in test-requirements.txt)')
def test_bandit_finds_nothing_at_medium_severity(tmp_path):
    report = str(tmp_path / 'bandit.json')
    proc = subprocess.run(
        _bandit() + ['-r', *PACKAGES, '--severity-level', 'medium',
                     '--format', 'json', '--output', report, '--quiet'],
        cwd=TOP, capture_output=True, text=True, timeout=600)
    with open(report) as f:
        result = json.load(f)
    issues = ['%s:%s %s %s' % (os.path.relpath(r['filename'], TOP),
                               r['line_number'], r['test_id'],
                               r['issue_text'])
              for r in result['results']]
    totals = result['metrics']['_totals']
    print('\nbandit (medium and high) over %s: %d lines, %d findings, '
          '%d justified exceptions (# nosec), low-severity notes: %d'
          % (', '.join(PACKAGES), totals['loc'], len(issues),
             totals['skipped_tests'], totals['SEVERITY.LOW']))
    assert not result['errors'], result['errors']
    assert not issues, '\n'.join(issues)
    assert proc.returncode == 0, proc.stderr[-2000:]
    # It did scan the code.
    assert totals['loc'] > 5000


NOSEC = re.compile(r'#\s*nosec\b(.*)')


def test_every_nosec_names_the_check_and_says_why():
    found = 0
    for path in python_files(*PACKAGES):
        with open(path) as f:
            lines = f.read().splitlines()
        for n, line in enumerate(lines):
            match = NOSEC.search(line)
            if not match:
                continue
            found += 1
            where = '%s:%d' % (os.path.relpath(path, TOP), n + 1)
            assert re.match(r'\s*B\d{3}\b', match.group(1)), (
                '%s: a # nosec must name the check (# nosec BXXX)' % where)
            # A comment on one of the lines before says why.
            before = [lines[i].strip() for i in range(max(0, n - 4), n)]
            assert any(b.startswith('#') for b in before), (
                '%s: no comment above saying why' % where)
    assert found  # there are some, each justified


#: Calls that run a command line through a shell.
SHELL_CALLS = {('os', 'system'), ('os', 'popen'), ('os', 'popen2'),
               ('subprocess', 'getoutput'),
               ('subprocess', 'getstatusoutput'), ('commands', 'getoutput')}


def shell_uses(source, filename='<source>'):
    """``(line, what)`` of every shell use in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if not isinstance(node, ast.Call):
            continue
        for keyword in node.keywords:
            if keyword.arg == 'shell' and not (
                    isinstance(keyword.value, ast.Constant)
                    and keyword.value.value is False):
                found.append((node.lineno, 'shell=%s'
                              % ast.unparse(keyword.value)))
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(
                func.value, ast.Name) and (
                func.value.id, func.attr) in SHELL_CALLS:
            found.append((node.lineno, '%s.%s' % (func.value.id,
                                                  func.attr)))
    return found


def test_the_shell_detector_detects():
    assert [w for _, w in shell_uses(
        'import os, subprocess\n'
        'subprocess.run("ls", shell=True)\n'
        'subprocess.Popen(cmd, shell=flag)\n'
        'subprocess.run(["ls"], shell=False)\n'
        'os.system("ls")\n'
        'subprocess.getoutput("ls")\n')] == [
        'shell=True', 'shell=flag', 'os.system', 'subprocess.getoutput']


def test_no_shell_anywhere():
    scanned, found = 0, []
    for path in python_files():
        with open(path, encoding='utf-8') as f:
            source = f.read()
        scanned += 1
        found += ['%s:%d %s' % (os.path.relpath(path, TOP), line, what)
                  for line, what in shell_uses(source, path)]
    print('\nno shell: %d Python files scanned' % scanned)
    assert scanned > 100
    assert not found, '\n'.join(found)


# -- files created private, whatever the umask -----------------------------

@pytest.fixture
def no_umask():
    """Umask 0: a file's mode is then only what the code asked for."""
    old = os.umask(0)
    yield
    os.umask(old)


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_state_store_and_its_wal_are_0600(tmp_path, no_umask):
    path = str(tmp_path / 'lib' / 'state.sqlite')
    store = state_store.StateStore(path)
    # A reader holding the store open keeps its -wal and -shm files.
    db = sqlite3.connect(path)
    db.execute('SELECT count(*) FROM devices').fetchall()
    store.set_driver('intel_qat', True)
    try:
        files = [p for p in (path, path + '-wal', path + '-shm')
                 if os.path.exists(p)]
        assert path + '-wal' in files
        assert {f: mode(f) for f in files} == dict.fromkeys(files, 0o600)
        assert mode(os.path.dirname(path)) & 0o007 == 0
    finally:
        db.close()


def test_program_job_locks_are_0600(tmp_path, no_umask):
    lock = journal.JobLock(str(tmp_path), 'job')
    assert lock.acquire(blocking=False)
    try:
        assert mode(lock.path) == 0o600
    finally:
        lock.release(remove=True)


def test_device_spec_drop_in_is_0640(tmp_path, no_umask):
    root = fakesysfs.build(str(tmp_path / 'sys'))
    directory = tmp_path / 'nova.conf.d'
    directory.mkdir()
    spec_file = str(directory / '60-cyborg-nova-pci.conf')
    address = sorted(os.listdir(os.path.join(root, 'bus', 'pci',
                                             'devices')))[-1]
    nova_conf._write_device_spec(root, spec_file, [{'address': address}])
    assert mode(spec_file) == 0o640
    # No temporary file left behind, readable or not.
    assert os.listdir(str(directory)) == [os.path.basename(spec_file)]


def test_conductor_database_is_0600_in_a_0700_directory(tmp_path,
                                                        no_umask):
    from oslo_config import cfg

    from cyborg_nova.conf import conductor as conductor_conf
    conf = cfg.ConfigOpts()
    conductor_conf.register_opts(conf)
    conf([])
    database = tmp_path / 'lib' / 'conductor.sqlite'
    conf.set_override('connection', 'sqlite:///%s' % database,
                      group='database')
    engine = conductor_db.engine_from_conf(conf)
    try:
        store = conductor_db.AgentStore(engine)
        with engine.connect():
            store.get('cn1')
            files = [str(database) + suffix for suffix in ('', '-wal',
                                                           '-shm')]
            assert {f: mode(f) for f in files if os.path.exists(f)} == \
                dict.fromkeys(files, 0o600)
        assert mode(str(database.parent)) == 0o700
    finally:
        engine.dispose()
