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

"""The internal API spec's flows, end to end between real processes.

A real Placement, a conductor-lite, two agents on two fake compute hosts
(each reported to Placement as nova-compute does), and a vendor's
out-of-process driver: driver hello, agent hello (heartbeats), discovery,
and the hardware of every host listed at the conductor with its usage.
"""

import os
import uuid

import pytest

from cyborg_drivers.fake import hosttree
from tests.functional.agent import base as agent_base
from tests.functional.conductor import conductor_fixture
from tests.functional import placement_fixture


@pytest.fixture
def cloud(tmp_path):
    placement = placement_fixture.PlacementServer()
    placement.setUp()
    conductor = conductor_fixture.Conductor(
        tmp_path / 'conductor', down_time=30, placement={
            'auth_type': 'admin_token', 'endpoint': placement.endpoint,
            'token': 'admin'})
    conductor.start()
    agents = {}
    for host, profile in (('compute-a', 'fpga-host'),
                          ('compute-b', 'crypto-nic-host')):
        directory = str(tmp_path / host)
        os.makedirs(directory)
        sysfs_root = os.path.join(directory, 'sys')
        state_path = os.path.join(directory, 'state.sqlite')
        hosttree.build_tree(profile, sysfs_root)
        agent_base.report_host(placement.endpoint, host, sysfs_root,
                               state_path)
        agent = agent_base.AgentProcess(directory, {
            'cyborg_agent': {
                'nodename': host,
                'conductor_url': conductor.url,
                'conductor_token': conductor_fixture.ADMIN,
                'heartbeat_interval': '1',
                'discovery_interval': '0',
                # The conductor calls agents with this token.
                'reader_token': conductor_fixture.AGENT_TOKEN},
            'cyborg_nova': {'sysfs_root': sysfs_root,
                            'state_path': state_path,
                            'auto_ready': 'True'},
            'placement': {'auth_type': 'admin_token',
                          'endpoint': placement.endpoint,
                          'token': 'admin'},
        }, name=host)
        agent.setUp()
        agents[host] = agent
    yield placement, conductor, agents
    for agent in agents.values():
        agent.cleanUp()
    conductor.stop()
    placement.cleanUp()


def test_driver_hello_agent_hello_discovery_and_hardware(cloud):
    placement, conductor, agents = cloud
    # Agent hello: both agents register with the conductor and are UP.
    listed = agent_base.wait_for(
        lambda: (lambda body: {a['host']: a for a in body['agents']}
                 if len(body['agents']) == 2 else None)(
            conductor.call('GET', '/agents')[1]),
        what='both agents registered')
    assert {a['state'] for a in listed.values()} == {'UP'}
    assert listed['compute-a']['endpoint'] == agents['compute-a'].url

    # Driver hello: a vendor's driver process registers with agent a.
    driver = agent_base.DriverProcess(agents['compute-a'].url, devices=2)
    driver.setUp()
    try:
        driver.wait_line(lambda s: s == 'hardware')
        # Discovery across all drivers, through the agent.
        resp = agents['compute-a'].call('POST', '/discovery')
        assert (resp.status_code, resp.json()) == (
            202, {'status': 'IN-PROGRESS'})
        driver.wait_line(lambda s: s == 'discovery')

        # An instance holds a device of host b.
        consumer = str(uuid.uuid4())
        qat = [h for h in agents['compute-b'].hardware()
               if h['pci']['address'] == '0000:70:00.0'][0]
        agent_base.Placement(placement.endpoint).allocate(
            consumer, qat['uuid'], {'CUSTOM_QAT': 2})

        # Hardware of every host at the conductor: local devices of both
        # hosts, the remote driver's devices, and Placement's usage.
        status, body = conductor.call('GET', '/hardware')[:2]
        assert status == 200, body
        assert body.get('errors', []) == []
        by_host = {}
        for entry in body['hardware']:
            by_host.setdefault(entry['host'], []).append(entry)
        a = by_host['compute-a']
        assert sorted(e['pci']['address'] for e in a
                      if not e['acc_specs']['remote']) == [
            '0000:5e:00.0', '0000:af:00.0', '0000:d8:00.0']
        assert len([e for e in a if e['acc_specs']['remote']]) == 2
        b = {e['pci']['address']: e for e in by_host['compute-b']}
        assert sorted(b) == ['0000:6b:00.0', '0000:70:00.0',
                             '0000:e8:00.0']
        assert b['0000:70:00.0']['usage'] == {'CUSTOM_QAT': 2}
        assert b['0000:6b:00.0']['usage'] == {'CUSTOM_QAT': 0}
    finally:
        driver.cleanUp()
