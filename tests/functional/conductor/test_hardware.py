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

"""``GET /hardware`` of a conductor process: agents and real Placement.

One host's accelerators are reported to a real Placement as
nova-compute does (tools/report_host.py), and one of them is allocated
to a consumer; the fake agents serve the ``GET /hardware`` that
discovery computes from the same fake hosts.
"""

import json
import os
import subprocess
import sys
import time
import urllib.request
import uuid

from oslo_config import cfg
import pytest

from cyborg_drivers import discovery
from cyborg_drivers.fake import hosttree
from cyborg_drivers import loader
from cyborg_nova import conf as cn_conf
from tests.functional.conductor import conductor_fixture as cf
from tests.functional.conductor import fake_agent
from tests.functional import placement_fixture

DRIVERS = ['nvidia_gpu', 'intel_fpga', 'xilinx_fpga', 'intel_qat']
TIMEOUT = 1


def placement_call(placement, method, path, body=None):
    request = urllib.request.Request(
        placement.endpoint + path, method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={'X-Auth-Token': 'admin', 'Content-Type': 'application/json',
                 'OpenStack-API-Version': 'placement 1.39'})
    with urllib.request.urlopen(request) as resp:
        raw = resp.read()
    return json.loads(raw) if raw else None


def host_hardware(root, nodename):
    """What an agent on that host answers to ``GET /hardware``."""
    conf = cfg.ConfigOpts()
    conf([])
    cn_conf.register_opts(conf)
    found = discovery.Discoverer(loader.load(conf, DRIVERS),
                                 root).discover()
    # As it travels: JSON has lists, not tuples.
    return json.loads(json.dumps([a.to_hardware(nodename)
                                  for a in found.accelerators]))


@pytest.fixture(scope='module')
def hosts(placement, tmp_path_factory):
    """cn-fpga reported to Placement (one FPGA allocated); cn-gpu not."""
    work = tmp_path_factory.mktemp('hosts')
    roots = {}
    for nodename, profile in (('cn-fpga', 'fpga-host'),
                              ('cn-gpu', 'gpu-host')):
        roots[nodename] = str(work / nodename / 'sys')
        hosttree.build_tree(hosttree.profile_path(profile),
                            roots[nodename])
    proc = subprocess.run(
        [sys.executable, '-W', 'ignore',
         os.path.join(placement_fixture.TOOLS, 'report_host.py'),
         '--placement', placement.endpoint, '--nodename', 'cn-fpga',
         '--sysfs-root', roots['cn-fpga'],
         '--state-path', str(work / 'state.sqlite')],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    reported = json.loads(proc.stdout.splitlines()[-1])
    hardware = {n: host_hardware(r, n) for n, r in roots.items()}
    fpgas = [e['uuid'] for e in hardware['cn-fpga']]
    assert sorted(fpgas) == sorted(
        set(reported['providers']) - {reported['root']})
    allocated = fpgas[0]
    placement_call(placement, 'PUT', '/allocations/%s' % uuid.uuid4(), {
        'allocations': {allocated: {'resources': {'FPGA': 1}}},
        'project_id': str(uuid.uuid4()), 'user_id': str(uuid.uuid4()),
        'consumer_generation': None, 'consumer_type': 'INSTANCE'})
    return {'hardware': hardware, 'allocated': allocated}


@pytest.fixture
def agents():
    started = []

    def start(**kwargs):
        agent = fake_agent.FakeAgent(token=cf.AGENT_TOKEN, **kwargs)
        started.append(agent)
        return agent
    yield start
    for agent in started:
        agent.stop()


def start_conductor(path, placement_options, **kwargs):
    return cf.Conductor(path, agent_timeout=TIMEOUT,
                        placement=placement_options, **kwargs).start()


def hello(conductor, host, agent):
    status, body, _ = conductor.call('POST', '/hello', body={
        'host': host, 'endpoint': agent.url, 'status': 'READY'})
    assert status == 200, body


def get_hardware(conductor):
    start = time.monotonic()
    status, body, _ = conductor.call('GET', '/hardware', token=cf.READER)
    took = time.monotonic() - start
    assert status == 200, body
    return body, took


def test_hardware_with_usage(placement, hosts, agents, tmp_path):
    conductor = start_conductor(tmp_path, {
        'auth_type': 'admin_token', 'endpoint': placement.endpoint,
        'token': 'admin'})
    try:
        served = {host: json.loads(json.dumps(entries))
                  for host, entries in hosts['hardware'].items()}
        # Another spelling of a provider's uuid is still that provider.
        other = served['cn-fpga'][-1]
        other['uuid'] = '{%s}' % other['uuid'].upper()
        fpga = agents(hardware=served['cn-fpga'])
        gpu = agents(hardware=served['cn-gpu'])
        hello(conductor, 'cn-fpga', fpga)
        hello(conductor, 'cn-gpu', gpu)
        hello(conductor, 'cn-slow-1', agents(delay=10))
        hello(conductor, 'cn-slow-2', agents(delay=10))
        hello(conductor, 'cn-bad-token',
              fake_agent.FakeAgent(token='another'))
        body, took = get_hardware(conductor)
    finally:
        assert conductor.stop() == 0
    print('\nGET /hardware of 5 agents (2 silent) took %.2f s '
          '(agent_timeout %d s)' % (took, TIMEOUT))
    # Asked concurrently: the two silent agents cost one timeout.
    assert took < 2 * TIMEOUT

    by_host = {}
    for entry in body['hardware']:
        by_host.setdefault(entry['host'], []).append(entry)
    assert sorted(by_host) == ['cn-fpga', 'cn-gpu']
    for host, entries in by_host.items():
        # The agent's entries, every key kept, plus host and usage.
        assert [{k: v for k, v in e.items() if k not in ('host', 'usage')}
                for e in entries] == served[host]
    usage = {e['uuid']: e['usage'] for e in by_host['cn-fpga']}
    assert usage.pop(hosts['allocated']) == {'FPGA': 1}
    assert usage == {served['cn-fpga'][1]['uuid']: {'FPGA': 0},
                     other['uuid']: {'FPGA': 0}}
    # Not Placement providers: no usage, and nothing wrong with that.
    assert [e['usage'] for e in by_host['cn-gpu']] == [None] * 8

    errors = {e['host']: e['message'] for e in body['errors']}
    assert sorted(errors) == ['cn-bad-token', 'cn-slow-1', 'cn-slow-2']
    assert errors['cn-slow-1'].startswith('agent cn-slow-1: GET ')
    assert 'failed: no answer within 1 s; ' in errors['cn-slow-1']
    assert 'answered 401: authentication required' in errors[
        'cn-bad-token']
    # The conductor authenticated with agent_token.
    assert fpga.requests == [('/hardware', cf.AGENT_TOKEN)]


def test_placement_unreachable_or_unset(placement, hosts, agents,
                                        tmp_path):
    fpga = agents(hardware=hosts['hardware']['cn-fpga'])
    for name, options, message in (
            ('unset', None, 'Placement is not configured'),
            # A port nobody listens on (Placement's own, closed).
            ('closed', {'auth_type': 'admin_token', 'token': 'admin',
                        'endpoint': 'http://127.0.0.1:9'},
             'cannot reach Placement')):
        conductor = start_conductor(tmp_path / name, options)
        try:
            hello(conductor, 'cn-fpga', fpga)
            body, _ = get_hardware(conductor)
        finally:
            assert conductor.stop() == 0
        assert [e['usage'] for e in body['hardware']] == [None] * 3
        assert [(e['host'], e['message'].split(': ')[0])
                for e in body['errors']] == [
            ('cn-fpga', 'usage of 3 device(s) unknown')]
        assert message in body['errors'][0]['message']


def test_down_agents_not_asked(agents, tmp_path):
    conductor = cf.Conductor(tmp_path, down_time=1).start()
    try:
        gone = agents(hardware=[])
        hello(conductor, 'cn-gone', gone)
        time.sleep(1.2)
        hello(conductor, 'cn-here', agents(hardware=[]))
        body, _ = get_hardware(conductor)
    finally:
        assert conductor.stop() == 0
    assert gone.requests == []
    assert body == {'hardware': [], 'errors': []}
