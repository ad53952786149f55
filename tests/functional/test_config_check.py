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

"""Config mistakes, as the installed console scripts report them.

``cyborg-nova config-check``, ``oslo-config-validator --namespace
cyborg_nova`` and ``cyborg-nova-status upgrade check``, each run as an
operator runs it; and the agent's start, which logs the same findings.
"""

import json
import os
import sqlite3
import subprocess
import sys

import pytest

from cyborg_drivers.fake import hosttree
from cyborg_nova import store as state_store
from cyborg_nova.store import migrations

BIN = os.path.dirname(sys.executable)


def run(name, *args):
    proc = subprocess.run([os.path.join(BIN, name)] + list(args),
                          capture_output=True, text=True, timeout=60)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture(scope='module')
def root(tmp_path_factory):
    path = str(tmp_path_factory.mktemp('host') / 'sys')
    hosttree.build_tree(hosttree.profile_path('crypto-nic-host'), path)
    return path


def config(tmp_path, root, text=''):
    """A good file, nic_sriov configured and enabled; then ``text``."""
    path = tmp_path / 'nova.conf'
    path.write_text(
        '[cyborg_nova]\nenabled_drivers = nic_sriov\nsysfs_root = %s\n'
        'state_path = %s\n[cyborg_nic_sriov]\n'
        'physical_device_mappings = physnet1:ens1f0\n%s\n'
        % (root, tmp_path / 'state' / 'state.sqlite', text))
    return str(path)


#: (what is added to a good file (a repeated option wins), the finding's
#: line, whether oslo-config-validator sees it: it compares names with
#: the sample config, values are not its business).
MISTAKES = {
    'option typo': (
        '[cyborg_nova]\nenabled_driver = nic_sriov',
        'error: [cyborg_nova] enabled_driver: unknown option (in {path}), '
        'ignored; did you mean enabled_drivers?', True),
    'group typo': (
        '[cyborg-nova]\nenabled_drivers = nvidia_gpu',
        'error: [cyborg-nova]: unknown group (in {path}), its options are '
        'ignored; did you mean [cyborg_nova]?', True),
    'unknown driver option': (
        '[cyborg_nic_sriov]\nfoo = 1',
        'error: [cyborg_nic_sriov] foo: unknown option (in {path}), ignored; '
        'the group has: function_device_mappings, physical_device_mappings',
        True),
    'not a number': (
        '[cyborg_nova]\nprogram_timeout = abc',
        "error: [cyborg_nova] program_timeout: invalid value 'abc' (in "
        "{path}): invalid literal for int() with base 10: 'abc'", False),
    'not a boolean': (
        '[cyborg_nova]\nauto_ready = maybe',
        "error: [cyborg_nova] auto_ready: invalid value 'maybe' (in {path}): "
        "Unexpected boolean value 'maybe'", False),
    'not a vGPU type': (
        '[cyborg_nvidia_gpu]\nenabled_vgpu_types = nosuch',
        "error: [cyborg_nvidia_gpu] enabled_vgpu_types: 'nosuch' is not an "
        "NVIDIA mdev type (nvidia-<number>, e.g. nvidia-222: a directory "
        "name under a GPU's mdev_supported_types)", False),
    'malformed mapping': (
        '[cyborg_nic_sriov]\nphysical_device_mappings = ens1f0',
        "error: [cyborg_nic_sriov] physical_device_mappings: 'ens1f0' is not "
        "<name>:<device>", False),
    'empty sysfs root': (
        '[cyborg_nova]\nsysfs_root =',
        'error: [cyborg_nova] sysfs_root: empty: discovery would read '
        'bus/pci relative to the current directory; leave it unset for '
        '/sys', False),
    'driver not installed': (
        '[cyborg_nova]\nenabled_drivers = nic_sriov,warp_drive',
        "error: [cyborg_nova] enabled_drivers: driver 'warp_drive' is not "
        "installed (installed: fake, generic, intel_fpga, intel_qat, "
        "nic_sriov, nvidia_gpu, xilinx_fpga)", False),
}


def test_other_commands_stop_at_a_bad_value_in_one_line(tmp_path, root):
    """Any command but config-check refuses to run on a bad value."""
    path = config(tmp_path, root, '[cyborg_nova]\nprogram_timeout = abc')
    rc, out, err = run('cyborg-nova', '--config-file', path, 'driver-list')
    assert rc == 1 and out == '', out
    assert err.splitlines() == [
        "%s: [cyborg_nova] program_timeout = 'abc' is not valid: not an "
        "integer; fix it, or remove the line for the default (900)" % path]


def test_a_good_config_passes_every_check(tmp_path, root):
    path = config(tmp_path, root)
    assert run('cyborg-nova', 'config-check', '--config-file', path) == (
        0, 'no problems found in %s\n' % path, '')
    rc, _, err = run('oslo-config-validator', '--namespace', 'cyborg_nova',
                     '--input-file', path)
    assert rc == 0, err


@pytest.mark.parametrize('mistake', sorted(MISTAKES))
def test_each_mistake_is_one_line(tmp_path, root, mistake):
    text, line, validator_sees = MISTAKES[mistake]
    path = config(tmp_path, root, text)
    rc, out, err = run('cyborg-nova', 'config-check', '--config-file', path)
    assert rc == 1, out + err
    assert 'Traceback' not in err
    lines = out.splitlines()
    # The drivers' messages may go on with an example.
    assert any(printed.startswith(line.format(path=path))
               for printed in lines), out
    assert lines[-1].startswith('1 error, ')
    rc, _, err = run('oslo-config-validator', '--namespace', 'cyborg_nova',
                     '--input-file', path)
    # The validator compares names with the sample config: values, the
    # drivers and sysfs are for config-check.
    assert (rc != 0) == validator_sees, err


def test_warnings_alone_exit_0_unless_fatal(tmp_path, root):
    path = config(tmp_path, root, '[cyborg_nova]\n'
                  'enabled_drivers = nic_sriov,intel_fpga')
    warning = ('warning: [cyborg_nova] enabled_drivers: driver intel_fpga '
               'found no device under %s' % root)
    rc, out, _ = run('cyborg-nova', 'config-check', '--config-file', path)
    assert (rc, out) == (0, '%s\n0 errors, 1 warning in %s\n'
                         % (warning, path))
    rc, _, _ = run('cyborg-nova', 'config-check', '--config-file', path,
                   '--fatal-warnings')
    assert rc == 1


def test_empty_sysfs_root_argument(tmp_path, root):
    path = config(tmp_path, root)
    rc, out, err = run('cyborg-nova', 'config-check', '--config-file', path,
                       '--sysfs-root', '')
    assert rc == 1 and 'Traceback' not in err
    assert out.splitlines()[0] == (
        'error: --sysfs-root: empty: give a directory, or leave the option '
        'out for [cyborg_nova] sysfs_root')
    # discover no longer takes it for "not given".
    rc, _, err = run('cyborg-nova', '--config-file', path, 'discover',
                     '--sysfs-root', '')
    assert rc == 2
    assert 'argument --sysfs-root: must not be empty' in err


def _status(path):
    rc, out, err = run('cyborg-nova-status', 'upgrade', 'check',
                       '--config-file', path, '--json')
    assert 'Traceback' not in out + err
    return rc, {c['check']: (c['result'], c['details'])
                for c in json.loads(out)['checks']}


def test_status_with_no_store(tmp_path, root):
    rc, checks = _status(config(tmp_path, root))
    assert rc == 0, checks
    assert checks['State store schema'][1].startswith(
        'No state store at %s yet' % (tmp_path / 'state' / 'state.sqlite'))
    assert checks['Configuration'][0] == 0
    assert checks['Nova release'][0] == 0
    # Read-only: nothing created.
    assert not (tmp_path / 'state').exists()


def test_status_with_a_current_store_and_a_bad_config(tmp_path, root):
    path = config(tmp_path, root, '[cyborg_nova]\nprogram_timeout = abc')
    store = tmp_path / 'state' / 'state.sqlite'
    state_store.StateStore(str(store))
    rc, checks = _status(path)
    assert rc == 2
    assert checks['State store schema'] == (0, (
        'The state store %s has schema version %d, the current one.'
        % (store, migrations.LATEST)))
    result, details = checks['Configuration']
    assert result == 2
    assert "[cyborg_nova] program_timeout: invalid value 'abc'" in details


def test_status_with_a_store_too_new(tmp_path, root):
    store = tmp_path / 'state' / 'state.sqlite'
    state_store.StateStore(str(store))
    db = sqlite3.connect(str(store))
    db.execute('PRAGMA user_version = %d' % (migrations.LATEST + 1))
    db.commit()
    db.close()
    rc, checks = _status(config(tmp_path, root))
    assert rc == 2
    result, details = checks['State store schema']
    assert result == 2
    assert ('The state store %s has schema version %d, newer than the %d'
            % (store, migrations.LATEST + 1, migrations.LATEST)) in details


def test_status_with_a_missing_config_file(tmp_path):
    rc, out, err = run('cyborg-nova-status', 'upgrade', 'check',
                       '--config-file', str(tmp_path / 'nope.conf'))
    assert rc == 255 and 'Traceback' not in err
    assert err.strip() == ('cyborg-nova-status: error: Failed to find some '
                           'config files: %s' % (tmp_path / 'nope.conf'))


def test_the_agent_logs_the_findings_at_start(tmp_path, root):
    # An unknown driver stops the start at once, after the findings.
    path = config(tmp_path, root, '[cyborg_nova]\n'
                  'enabled_driver = nic_sriov\nenabled_drivers = warp_drive\n'
                  '[cyborg_agent]\nwatch_udev = false')
    proc = subprocess.run(
        [sys.executable, '-m', 'cyborg_nova.cmd.agent', '--config-file',
         path], capture_output=True, text=True, timeout=60, cwd=str(tmp_path))
    assert proc.returncode == 1
    errors = [line.split(' [-] ', 1)[1] for line in
              proc.stderr.splitlines() if ' ERROR ' in line]
    assert errors[:2] == [
        'cyborg-nova config check: [cyborg_nova] enabled_driver: unknown '
        'option (in %s), ignored; did you mean enabled_drivers?' % path,
        "cyborg-nova config check: [cyborg_nova] enabled_drivers: driver "
        "'warp_drive' is not installed (installed: fake, generic, "
        "intel_fpga, intel_qat, nic_sriov, nvidia_gpu, xilinx_fpga)"]
    assert 'Cannot start' in errors[2] and 'warp_drive' in errors[2]
