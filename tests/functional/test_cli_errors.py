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

"""An operator's mistakes end every command and service in one line.

The console scripts run in a subprocess, on config files written here
and a fake sysfs tree: each mistake exits non-zero with one line on
stderr (no traceback) saying what is wrong.
"""

import json
import os
import socket

import pytest

from cyborg_drivers.fake import hosttree
from cyborg_nova import store as state_store
from tests.functional.clirun import cli
from tests.functional.clirun import run

SERVICE_ARGS = {
    'cyborg-nova-agent': [],
    'cyborg-nova-conductor': [],
    'cyborg-nova-driver': ['--driver', 'fake', '--agent-url',
                           'http://127.0.0.1:9', '--agent-token', 't'],
}
INSTALLED = ('fake, generic, intel_fpga, intel_qat, nic_sriov, nvidia_gpu, '
             'xilinx_fpga')


def one_line(err):
    """The one line of ``err``: no traceback, nothing else."""
    assert 'Traceback' not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def write(tmp_path, text, name='nova.conf'):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.fixture(scope='module')
def sysfs_root(tmp_path_factory):
    """A crypto + NIC host's sysfs, built once: the tests only read it."""
    root = str(tmp_path_factory.mktemp('host') / 'sys')
    hosttree.build_tree(hosttree.profile_path('crypto-nic-host'), root)
    return root


@pytest.fixture
def host(tmp_path, sysfs_root):
    """A config on the crypto + NIC host; ``host(extra)`` adds lines."""
    root = sysfs_root

    def config(extra=''):
        return write(tmp_path, '[cyborg_nova]\nsysfs_root = %s\n'
                     'state_path = %s\n%s'
                     % (root, tmp_path / 'state.sqlite', extra))
    config.state_path = str(tmp_path / 'state.sqlite')
    return config


# -- config files -------------------------------------------------------------

@pytest.mark.parametrize('script, bad', [
    ('cyborg-nova-agent', None),
    ('cyborg-nova-agent', 'this is not ini\n'),
    ('cyborg-nova-agent', 'auto_ready = true\n'),
    ('cyborg-nova-conductor', 'auto_ready = true\n'),
    ('cyborg-nova-driver', 'this is not ini\n'),
])
def test_service_with_a_bad_config_file(tmp_path, script, bad):
    path = (write(tmp_path, bad) if bad
            else str(tmp_path / 'nonexistent' / 'nova.conf'))
    rc, out, err = run(script, *SERVICE_ARGS[script], '--config-file', path)
    line = one_line(err)
    assert rc == 2 and out == ''
    assert line.startswith('%s: error: ' % script)
    assert path in line
    assert ('Failed to find' if bad is None else 'Failed to parse') in line


@pytest.mark.parametrize('bad', [None, 'auto_ready = true\n'])
def test_command_with_a_bad_config_file(tmp_path, bad):
    path = (write(tmp_path, bad) if bad
            else str(tmp_path / 'nonexistent' / 'nova.conf'))
    rc, out, err = cli('driver-list', config=path)
    line = one_line(err)
    assert rc == 1 and out == ''
    assert path in line
    assert ('Failed to find' if bad is None
            else 'every option goes under a [group] line') in line


# -- bad values ---------------------------------------------------------------

@pytest.mark.parametrize('line, shown', [
    ('program_timeout = abc',
     "[cyborg_nova] program_timeout = 'abc' is not valid: not an integer"),
    ('auto_ready = maybe',
     "[cyborg_nova] auto_ready = 'maybe' is not valid: Unexpected boolean "
     "value 'maybe'"),
])
@pytest.mark.parametrize('script', ['cyborg-nova', 'cyborg-nova-agent',
                                    'cyborg-nova-driver'])
def test_bad_value(host, script, line, shown):
    path = host(line + '\n')
    args = (['--config-file', path, 'driver-list'] if script == 'cyborg-nova'
            else SERVICE_ARGS[script] + ['--config-file', path])
    rc, out, err = run(script, *args)
    message = one_line(err)
    assert rc == (1 if script == 'cyborg-nova' else 2) and out == ''
    assert '%s: %s' % (path, shown) in message
    assert 'remove the line for the default' in message


def test_bad_value_of_the_conductor(tmp_path):
    path = write(tmp_path, '[cyborg_conductor]\nagent_timeout = soon\n')
    rc, _, err = run('cyborg-nova-conductor', '--config-file', path)
    assert rc == 2
    assert one_line(err) == (
        "cyborg-nova-conductor: error: %s: [cyborg_conductor] agent_timeout "
        "= 'soon' is not valid: not a number; fix it, or remove the line "
        "for the default (5.0)" % path)


def test_bad_value_read_only_by_one_command(host):
    # [cyborg_agent] is registered only when agent-list needs it.
    path = host('[cyborg_agent]\nconductor_url = ftp://conductor\n')
    rc, _, err = cli('agent-list', config=path)
    assert rc == 1
    assert one_line(err).startswith(
        "%s: [cyborg_agent] conductor_url = 'ftp://conductor' is not valid: "
        "scheme was required to be one of ['http', 'https']" % path)


# -- unknown drivers ----------------------------------------------------------

@pytest.mark.parametrize('args', [
    ['driver-install', 'bogus'],
    ['driver-uninstall', 'bogus'],
    ['driver-update', 'bogus', '--num-vfs', '1'],
])
def test_unknown_driver_is_refused_first(host, monkeypatch, args):
    # No Placement credentials: the unknown driver is said first anyway.
    for key in [k for k in os.environ if k.startswith('OS_')]:
        monkeypatch.delenv(key)
    rc, out, err = cli(*args, config=host())
    assert rc == 1 and out == ''
    assert one_line(err) == ("unknown driver 'bogus'; installed drivers: %s"
                             % INSTALLED)
    # Refused before anything was opened.
    assert not os.path.exists(host.state_path)


# -- hosts --------------------------------------------------------------------

def test_devices_of_an_unknown_host(host):
    path = host()
    this = socket.gethostname()
    rc, _, err = cli('driver-install', 'intel_qat', config=path)
    assert rc == 0, err
    rc, out, err = cli('device-list', '--nodename', 'wrong', config=path)
    assert rc == 1 and out == ''
    assert one_line(err) == ('no devices recorded for host wrong; known '
                             'hosts: %s (give one with --nodename)' % this)
    rc, _, err = cli('device-show', '0000:6b:00.0', '--nodename', 'wrong',
                     config=path)
    assert rc == 1
    assert one_line(err) == ('no device 0000:6b:00.0 on wrong; known hosts: '
                             '%s (give one with --nodename)' % this)


def test_devices_of_a_host_with_none(host):
    path = host()
    state_store.StateStore(host.state_path)
    this = socket.gethostname()
    rc, out, err = cli('device-list', config=path)
    assert (rc, out) == (0, '')
    assert one_line(err).startswith(
        'no devices recorded for host %s: the list is empty' % this)
    # Not this host, and none recorded: a mistake.
    rc, out, err = cli('device-list', '--nodename', 'elsewhere',
                       config=path)
    assert rc == 1 and out == ''
    assert one_line(err) == (
        'no devices recorded for host elsewhere; elsewhere is not this host '
        '(%s): give this host\'s hypervisor hostname with --nodename' % this)


# -- a driver that rejects its options ----------------------------------------

@pytest.mark.parametrize('mapping, args', [
    ('physnet1', ['discover', '--enabled', '-f', 'json']),
    ('physnet1:', ['discover', '--driver', 'nic_sriov', '-f', 'json']),
    ('physnet1', ['service-list', '-f', 'json']),
])
def test_malformed_nic_mapping_fails_once(host, mapping, args):
    path = host('enabled_drivers = intel_qat,nic_sriov\n'
                '[cyborg_nic_sriov]\nphysical_device_mappings = %s\n'
                % mapping)
    rc, out, err = cli(*args, config=path)
    assert rc == 1
    # The other drivers' rows are still there.
    rows = json.loads(out)
    assert {r['driver'] for r in rows} == (
        set() if 'nic_sriov' in args else {'intel_qat'})
    lines = err.strip().splitlines()
    assert 'Traceback' not in err
    assert err.count('physical_device_mappings') == 1, err
    assert lines[-1] == (
        "error: driver nic_sriov: [cyborg_nic_sriov] physical_device_mappings"
        ": %r is not <name>:<device> (e.g. physnet1:ens1f0, or "
        "physnet1:0000:5e:00.0)" % mapping)
    if args[0] == 'discover':
        assert len(lines) == 1, err


# -- an empty sysfs root ------------------------------------------------------

@pytest.mark.parametrize('script, args', [
    ('cyborg-nova', ['discover']),
    ('cyborg-nova-driver', SERVICE_ARGS['cyborg-nova-driver']),
])
def test_empty_sysfs_root_argument(host, script, args):
    rc, out, err = run(script, '--config-file', host(), *args,
                       '--sysfs-root', '')
    assert rc == 2 and out == ''
    prog = 'cyborg-nova discover' if script == 'cyborg-nova' else script
    assert one_line(err) == (
        '%s: error: argument --sysfs-root: must not be empty (see "%s '
        '--help")' % (prog, prog))


def test_empty_sysfs_root_option(tmp_path):
    path = write(tmp_path, '[cyborg_nova]\nsysfs_root =\n')
    rc, out, err = cli('discover', config=path)
    assert rc == 1 and out == ''
    assert one_line(err).startswith('the sysfs root is empty')
