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

"""The ``cyborg-nova`` command starts without importing Nova.

cliff imports every command module of the ``cyborg_nova.cli`` entry
points when the application starts, ``--version`` included, so one
command module importing Nova at load (seconds: its libvirt driver) makes
every command slow. Each case runs this tree's
``cyborg_nova.cmd.cli.main()`` in a fresh interpreter and lists the
``nova`` modules loaded afterwards.

This tree also holds a ``nova/virt/cyborg_nova.py`` shim (a namespace
directory, no ``nova/__init__.py``): with Nova installed, ``nova``
resolves to Nova's own package, which the control case checks, so a
``nova`` module found here is the real Nova; without Nova, any ``nova``
module found means something tried to import it.
"""

from importlib import metadata
import json
import os
import subprocess
import sys

import pytest

from cyborg_nova import version

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))

#: Runs ``cli.main(argv)`` (argv: a JSON list) after importing ``first``
#: (a JSON list of modules); prints a JSON report as its last line.
_RUN = r'''
import importlib
import json
import sys

root, first, argv = sys.argv[1], json.loads(sys.argv[2]), json.loads(
    sys.argv[3])
sys.path.insert(0, root)
for name in first:
    importlib.import_module(name)
from cyborg_nova.cmd import cli
try:
    rc = cli.main(argv)
except SystemExit as exc:
    rc = exc.code
sys.stdout.flush()
import cyborg_nova
nova = {name: getattr(module, '__file__', None)
        or list(getattr(module, '__path__', []))
        for name, module in list(sys.modules.items())
        if name == 'nova' or name.startswith('nova.')}
print('\n' + json.dumps({'rc': rc, 'nova': nova,
                         'cyborg_nova': cyborg_nova.__file__}))
'''

#: Imports the module of every ``cyborg_nova.cli`` entry point.
_COMMANDS = r'''
import json
import sys
from importlib import metadata

sys.path.insert(0, sys.argv[1])
loaded, importers = [], []
for ep in sorted(metadata.entry_points(group='cyborg_nova.cli'),
                 key=lambda ep: ep.value):
    had_nova = 'nova' in sys.modules
    loaded.append(ep.load().__module__)
    if not had_nova and 'nova' in sys.modules:
        importers.append(ep.value)
nova = sorted(name for name in sys.modules
              if name == 'nova' or name.startswith('nova.'))
print(json.dumps({'loaded': sorted(set(loaded)), 'nova': nova,
                  'importers': importers}))
'''


def _python(*args):
    # -I: no PYTHONPATH, no user site, not the working directory: this
    # tree comes first only because the script puts it there.
    proc = subprocess.run([sys.executable, '-I', '-W', 'ignore'] + list(args),
                          capture_output=True, text=True, timeout=300)
    output, _, last = proc.stdout.strip().rpartition('\n')
    assert last, proc.stderr[-3000:]
    # What the command printed, and the script's report.
    return output, proc.stderr, json.loads(last)


def run_cli(argv, first=()):
    """(output, stderr, report) of ``cli.main(argv)``, fresh interpreter."""
    return _python('-c', _RUN, ROOT, json.dumps(list(first)),
                   json.dumps(argv))


def offenders(report, most=30):
    found = sorted(report['nova'].items())
    return '\n'.join(['  %s: %s' % item for item in found[:most]] + (
        ['  ... and %d more' % (len(found) - most)]
        if len(found) > most else []))


def assert_no_nova(argv, report):
    # This tree's package, not an installed copy of it.
    assert report['cyborg_nova'].startswith(ROOT + os.sep), report
    assert not report['nova'], (
        'cyborg-nova %s imported %d nova module(s):\n%s' % (
            ' '.join(argv), len(report['nova']), offenders(report)))


def _nova_init():
    """Nova's own ``nova/__init__.py``, None if Nova is not installed."""
    try:
        dist = metadata.distribution('nova')
    except metadata.PackageNotFoundError:
        return None
    return os.path.realpath(str(dist.locate_file('nova/__init__.py')))


def test_version_imports_no_nova():
    out, err, report = run_cli(['--version'])
    assert report['rc'] in (0, None), err
    assert out.split()[-1] == version.version_string(), out
    assert_no_nova(['--version'], report)


def test_help_imports_no_nova():
    out, err, report = run_cli(['--help'])
    assert report['rc'] in (0, None), err
    # Every command was loaded to list its one-liner.
    assert 'discover' in out and 'instance-attach' in out, out
    assert 'Could not load' not in out, out
    assert_no_nova(['--help'], report)


def test_discover_imports_no_nova(host_tree):
    argv = ['discover', '--sysfs-root', host_tree('mixed-host'),
            '-f', 'json']
    out, err, report = run_cli(argv)
    assert report['rc'] == 0, err
    rows = json.loads(out)
    assert rows and all(row['address'] for row in rows), rows
    assert_no_nova(argv, report)


def test_discover_error_imports_no_nova(tmp_path):
    argv = ['discover', '--sysfs-root', str(tmp_path)]
    out, err, report = run_cli(argv)
    assert report['rc'] == 1, (out, err)
    assert 'is not a sysfs tree' in err, err
    assert_no_nova(argv, report)


def test_no_command_module_imports_nova():
    # Whether or not cliff keeps importing them all at start.
    _, err, report = _python('-c', _COMMANDS, ROOT)
    assert 'cyborg_nova.cmd.discover' in report['loaded'], (report, err)
    assert 'cyborg_nova.cmd.attach' in report['loaded'], (report, err)
    assert not report['nova'], (
        '%s imports nova at load (%d nova modules: %s)' % (
            ', '.join(report['importers']), len(report['nova']),
            ', '.join(report['nova'][:30])))


@pytest.mark.skipif(_nova_init() is None, reason='Nova is not installed')
def test_the_check_sees_the_real_nova():
    # The control: a Nova import before main() is reported, and the
    # ``nova`` found is Nova's own package, not this tree's shim folder.
    out, err, report = run_cli(['--version'],
                               first=['nova.virt.libvirt.config'])
    assert report['rc'] in (0, None), err
    assert 'nova.virt.libvirt.config' in report['nova'], offenders(report)
    assert isinstance(report['nova']['nova'], str), report['nova']['nova']
    assert os.path.realpath(report['nova']['nova']) == _nova_init()
    with pytest.raises(AssertionError, match=r'imported \d+ nova module'):
        assert_no_nova(['--version'], report)
