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

"""``openstack cyborg-nova ...``: the real openstack command, no cloud.

Each command is run both ways, ``openstack cyborg-nova device list`` and
``cyborg-nova device-list``, on one fake host, and must print the same.
"""

import json
import os
import subprocess
import sys

from oslo_config import cfg
import pytest

from cyborg_drivers import discovery
from cyborg_drivers import loader
from cyborg_nova import store as state_store
from tests.functional import test_cli
from tests.unit import test_osc_plugin

OPENSTACK = os.path.join(os.path.dirname(sys.executable), 'openstack')
NODE = 'cn-osc'
GPU = '0000:3b:00.0'


def openstack(*args, env=None):
    """``openstack`` with no cloud in the environment (plus ``env``)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith('OS_')}
    clean.update(env or {})
    proc = subprocess.run([OPENSTACK] + list(args), capture_output=True,
                          text=True, env=clean, timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture
def conf(host_tree, tmp_path):
    """A nova.conf for a gpu-host whose devices are in its store."""
    root = host_tree('gpu-host')
    path = tmp_path / 'nova.conf'
    store_path = str(tmp_path / 'state.sqlite')
    path.write_text('[cyborg_nova]\nsysfs_root = %s\nstate_path = %s\n'
                    % (root, store_path))
    empty = cfg.ConfigOpts()
    empty([])
    found = discovery.Discoverer(loader.load(empty, ['nvidia_gpu']),
                                 root).discover().accelerators
    state_store.StateStore(store_path).sync(NODE, found, state_store.READY)
    return str(path)


@pytest.mark.parametrize('command, args', [
    ('device-list', ['--nodename', NODE, '-f', 'json']),
    ('device-show', [GPU, '--nodename', NODE, '-f', 'json']),
    ('driver-list', ['-f', 'json']),
    ('device-list', ['--nodename', NODE, '-f', 'value',
                     '-c', 'address', '-c', 'state']),
    ('device-show', [GPU, '--nodename', NODE, '-f', 'json',
                     '-c', 'state']),
])
def test_same_output_as_cyborg_nova(conf, command, args):
    rc, out, err = openstack('cyborg-nova', *command.split('-'), *args,
                             '--cyborg-nova-config-file', conf)
    assert rc == 0, err
    assert (rc, out) == test_cli.cli(command, *args, config=conf)[:2]
    assert out.strip()


def test_columns_select_fields(conf):
    rc, out, err = openstack('cyborg-nova', 'device', 'list', '--nodename',
                             NODE, '-f', 'json', '-c', 'address',
                             '--cyborg-nova-config-file', conf)
    assert rc == 0, err
    rows = json.loads(out)
    assert GPU in [row['address'] for row in rows]
    assert {key for row in rows for key in row} == {'address'}


def test_no_keystone_is_asked(conf):
    # A cloud in the environment whose Keystone cannot be reached: the
    # commands never log in.
    rc, out, err = openstack(
        'cyborg-nova', 'device', 'show', GPU, '--nodename', NODE,
        '-f', 'value', '-c', 'state', '--cyborg-nova-config-file', conf,
        env={'OS_AUTH_URL': 'http://127.0.0.1:9/v3', 'OS_USERNAME': 'admin',
             'OS_PASSWORD': 'secret', 'OS_PROJECT_NAME': 'admin'})
    assert (rc, out) == (0, 'ready\n'), err


def test_help_lists_every_command():
    rc, out, _ = openstack('help', 'cyborg-nova')
    assert rc == 0
    listed = {line.strip() for line in out.splitlines()[1:]}
    assert listed == {'cyborg-nova ' + name.replace('-', ' ')
                      for name in test_osc_plugin.current()}
    rc, out, _ = openstack('cyborg-nova', 'device', 'list', '--help')
    assert rc == 0
    assert 'usage: openstack cyborg-nova device list' in out
    rc, out, _ = openstack('--help')
    assert rc == 0 and '--cyborg-nova-config-file PATH' in out


@pytest.mark.parametrize('args, rc, message', [
    (['device', 'list', '--bogus'], 2,
     'unrecognized arguments: --bogus'),
    (['device', 'show'], 2,
     'the following arguments are required: address'),
    (['driver', 'list', '--cyborg-nova-config-file', '/nonexistent.conf'],
     1, 'Failed to find some config files: /nonexistent.conf'),
    (['driver', 'install', 'warp_drive'], 1, "unknown driver 'warp_drive'"),
])
def test_bad_arguments_are_one_clear_line(args, rc, message):
    got, _, err = openstack('cyborg-nova', *args)
    assert got == rc and 'Traceback' not in err
    assert message in err.strip().splitlines()[-1]
