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

"""``agent-list`` and ``discover-services`` against real processes.

A conductor-lite and two agents on fake compute hosts (an FPGA host and
a QAT + NIC host), heartbeating; the commands run as an operator runs
them, in a subprocess, and ``service-list`` then shows what was
discovered on each host.
"""

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from cyborg_drivers.fake import hosttree
from tests.functional.agent import base as agent_base
from tests.functional.conductor import conductor_fixture as cf

DOWN_TIME = 4
HOSTS = (('compute-a', 'fpga-host'), ('compute-b', 'crypto-nic-host'))


@pytest.fixture(scope='module')
def cloud(tmp_path_factory):
    top = tmp_path_factory.mktemp('cloud')
    conductor = cf.Conductor(top / 'conductor', down_time=DOWN_TIME,
                             agent_timeout=2.0).start()
    agents = {}
    for host, profile in HOSTS:
        directory = str(top / host)
        os.makedirs(directory)
        sysfs_root = os.path.join(directory, 'sys')
        state_path = os.path.join(directory, 'state.sqlite')
        hosttree.build_tree(profile, sysfs_root)
        agent = agent_base.AgentProcess(directory, {
            'cyborg_agent': {
                'nodename': host, 'conductor_url': conductor.url,
                'conductor_token': cf.ADMIN, 'heartbeat_interval': '1',
                'discovery_interval': '0',
                # The conductor calls agents with this token;
                # POST /services needs the admin role.
                'admin_token': cf.AGENT_TOKEN},
            'cyborg_nova': {'sysfs_root': sysfs_root,
                            'state_path': state_path},
        }, name=host)
        agent.setUp()
        agent.sysfs_root, agent.state_path = sysfs_root, state_path
        agents[host] = agent
    agent_base.wait_for(lambda: len(cf_agents(conductor)) == 2,
                        what='both agents registered')
    yield conductor, agents
    for agent in agents.values():
        agent.cleanUp()
    conductor.stop()


def cf_agents(conductor):
    return conductor.call('GET', '/agents', token=cf.READER)[1]['agents']


def cli(*args, config=None):
    argv = [os.path.join(os.path.dirname(sys.executable), 'cyborg-nova')]
    if config:
        argv += ['--config-file', config]
    return subprocess.run(argv + list(args), capture_output=True,
                          text=True, timeout=120)


def conductor_args(conductor, token=cf.READER):
    return ['--conductor-url', conductor.url, '--conductor-token', token]


def register_unreachable(conductor, host):
    """Register ``host`` at an endpoint where nothing answers."""
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        port = s.getsockname()[1]
    status, _, _ = conductor.call('POST', '/hello', body={
        'status': 'READY', 'endpoint': '127.0.0.1:%d' % port,
        'host': host})
    assert status == 200


def test_agent_list_up_down_and_drivers(cloud):
    conductor, agents = cloud
    # A registered agent that then went silent: DOWN.
    register_unreachable(conductor, 'compute-gone')
    time.sleep(DOWN_TIME + 0.5)
    proc = cli('agent-list', '-f', 'json', *conductor_args(conductor))
    assert proc.returncode == 0, proc.stderr
    rows = {row['host']: row for row in json.loads(proc.stdout)}
    assert sorted(rows) == ['compute-a', 'compute-b', 'compute-gone']
    for host, _ in HOSTS:
        row = rows[host]
        assert row['state'] == 'UP' and row['status'] == 'READY'
        assert row['endpoint'] == agents[host].url
        assert row['last_heartbeat'] and row['error'] == ''
        # The drivers the agent runs.
        assert row['drivers'], row
    gone = rows['compute-gone']
    assert gone['state'] == 'DOWN'
    assert gone['drivers'] == []
    assert gone['error'].startswith('DOWN: no heartbeat since ')
    # The table form too, without a traceback.
    proc = cli('agent-list', *conductor_args(conductor))
    assert proc.returncode == 0 and 'compute-gone' in proc.stdout
    assert 'Traceback' not in proc.stderr


def test_agent_list_shows_out_of_process_drivers(cloud):
    conductor, agents = cloud
    driver = agent_base.DriverProcess(agents['compute-a'].url)
    # These agents' admin token is the one the conductor uses.
    driver.args[driver.args.index('--token') + 1] = cf.AGENT_TOKEN
    driver.setUp()
    try:
        proc = cli('agent-list', '-f', 'json', *conductor_args(conductor))
        assert proc.returncode == 0, proc.stderr
        row = {r['host']: r for r in json.loads(proc.stdout)}['compute-a']
        assert 'CRYPTO@%s (UP)' % driver.url in row['drivers']
    finally:
        driver.cleanUp()


def test_discover_services_then_service_list(cloud):
    conductor, agents = cloud
    # Registered and UP, but nothing answers there.
    register_unreachable(conductor, 'compute-unreachable')
    config = os.path.join(str(conductor.workdir), 'cli.conf')
    agent_base.write_config(config, {'cyborg_agent': {
        'conductor_url': conductor.url, 'conductor_token': cf.ADMIN}})
    proc = cli('discover-services', '-f', 'json', config=config)
    # The unreachable host fails the command, with its error, and no
    # traceback; the others are refreshed.
    assert proc.returncode == 1, proc.stderr
    assert 'Traceback' not in proc.stderr
    rows = {row['host']: row for row in json.loads(proc.stdout)}
    assert 'Connection refused' in rows['compute-unreachable']['error']
    assert rows['compute-unreachable']['devices'] is None
    for host, _ in HOSTS:
        assert rows[host]['error'] == '' and rows[host]['devices'] > 0
    # service-list on each host shows what was stored, and when.
    for host, _ in HOSTS:
        agent = agents[host]
        host_config = os.path.join(os.path.dirname(agent.state_path),
                                   'cli.conf')
        agent_base.write_config(host_config, {'cyborg_nova': {
            'sysfs_root': agent.sysfs_root,
            'state_path': agent.state_path}})
        proc = cli('service-list', '--nodename', host, '-f', 'json',
                   config=host_config)
        assert proc.returncode == 0, proc.stderr
        listed = json.loads(proc.stdout)
        assert len(listed) == rows[host]['devices']
        assert all(row['discovered_at'] for row in listed)
        services = [s for row in listed for s in row['services']]
        if host == 'compute-b':
            assert any(s in ('sym', 'asym', 'dc') for s in services), \
                services
        else:
            assert any(s.startswith('function ') for s in services), \
                services


def test_discover_services_local_and_no_conductor(cloud, tmp_path):
    _, agents = cloud
    agent = agents['compute-b']
    config = str(tmp_path / 'cli.conf')
    agent_base.write_config(config, {'cyborg_nova': {
        'sysfs_root': agent.sysfs_root,
        'state_path': str(tmp_path / 'state.sqlite')}})
    proc = cli('discover-services', '--local', '--nodename', 'compute-b',
               '-f', 'json', config=config)
    assert proc.returncode == 0, proc.stderr
    [row] = json.loads(proc.stdout)
    assert row['host'] == 'compute-b' and row['devices'] > 0
    # No conductor configured: a clear error, no traceback.
    proc = cli('discover-services', config=config)
    assert proc.returncode == 1
    assert 'no conductor' in proc.stderr
    assert 'Traceback' not in proc.stderr
