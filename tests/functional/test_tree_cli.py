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

"""``cyborg-nova tree`` against a real Placement filled as Nova fills it."""

import json
import os
import subprocess
import sys

import pytest

from cyborg_drivers.fake import hosttree
from tests.functional import placement_fixture

BIN = os.path.dirname(sys.executable)
TOOLS = placement_fixture.TOOLS


@pytest.fixture(scope='module')
def reported(placement, tmp_path_factory):
    work = tmp_path_factory.mktemp('host')
    root = str(work / 'sys')
    hosttree.build_tree(hosttree.profile_path('fpga-host'), root)
    proc = subprocess.run(
        [sys.executable, '-W', 'ignore',
         os.path.join(TOOLS, 'report_host.py'),
         '--placement', placement.endpoint, '--nodename', 'cn-tree',
         '--sysfs-root', root, '--state-path', str(work / 'state.sqlite'),
         '--cycles', '2'],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def cli(args, env=None, config=None):
    full_env = {k: v for k, v in os.environ.items()
                if not k.startswith('OS_')}
    full_env.update(env or {})
    argv = [os.path.join(BIN, 'cyborg-nova')]
    if config:
        argv += ['--config-file', config]
    proc = subprocess.run(argv + args, capture_output=True, text=True,
                          env=full_env, timeout=60)
    return proc.returncode, proc.stdout, proc.stderr


def test_tree_of_one_host(placement, reported):
    rc, out, err = cli(['tree', '--nodename', 'cn-tree', '-f', 'json'],
                       placement.env())
    assert rc == 0, err
    rows = json.loads(out)
    assert [r['name'].strip() for r in rows] == [
        'cn-tree',
        'cn-tree_accelerator_0000:5e:00.0',
        'cn-tree_accelerator_0000:af:00.0',
        'cn-tree_accelerator_0000:d8:00.0']
    assert rows[0]['uuid'] == reported['root']
    assert all(r['parent_provider_uuid'] == reported['root']
               for r in rows[1:])
    assert rows[1]['inventory'] == {
        'FPGA': {'total': 1, 'reserved': 0, 'used': 0}}
    assert 'CUSTOM_FPGA_INTEL_PAC_ARRIA10' in rows[1]['traits']
    assert 'COMPUTE_NODE' in rows[0]['traits']


def test_tree_from_config_file(placement, reported, tmp_path):
    conf = tmp_path / 'nova.conf'
    conf.write_text('[placement]\nauth_type = admin_token\n'
                    'endpoint = %s\ntoken = admin\n' % placement.endpoint)
    rc, out, err = cli(['tree', '-f', 'value', '-c', 'name'],
                       config=str(conf))
    assert rc == 0, err
    assert 'cn-tree_accelerator_0000:d8:00.0' in out


@pytest.mark.parametrize('args, env, message', [
    # --host is the option's other name.
    (['tree', '--host', 'nope'], 'placement',
     "no resource provider named 'nope'"),
    (['tree'], {'OS_AUTH_TYPE': 'admin_token', 'OS_TOKEN': 'admin',
                'OS_ENDPOINT': 'http://127.0.0.1:9'},
     'cannot reach Placement'),
    (['tree'], {}, 'no usable Placement credentials'),
])
def test_tree_errors_are_one_line(placement, args, env, message):
    rc, out, err = cli(args, placement.env() if env == 'placement' else env)
    assert rc == 1
    assert 'Traceback' not in err
    assert message in err
    assert len(err.strip().splitlines()) == 1
