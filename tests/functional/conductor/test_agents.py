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

"""Agents register, heartbeat, go DOWN and survive a restart.

On each database backend: SQLite, and the session's private MariaDB and
PostgreSQL servers.
"""

import re
import time

import pytest

from tests import dbservers
from tests.functional.conductor import conductor_fixture as cf

DOWN_TIME = 2
HEARTBEAT = 0.5


@pytest.fixture(scope='module', params=dbservers.BACKENDS)
def conductor(request, tmp_path_factory):
    workdir = tmp_path_factory.mktemp('conductor')
    with dbservers.database(request, request.param, workdir) as url:
        conductor = cf.Conductor(workdir, down_time=DOWN_TIME,
                                 connection=url).start()
        yield conductor
        assert conductor.stop() == 0


def hello(conductor, host, status='READY', endpoint=None):
    status_code, agent, _ = conductor.call('POST', '/hello', body={
        'host': host, 'status': status,
        'endpoint': endpoint or 'http://%s.example.org:6666' % host})
    assert status_code == 200, agent
    return agent


def agents(conductor, token=cf.READER):
    status, body, _ = conductor.call('GET', '/agents', token=token)
    assert status == 200, body
    return {agent['host']: agent for agent in body['agents']}


def test_hello_heartbeat_listing(conductor):
    first = hello(conductor, 'cn-list')
    assert first['state'] == 'UP'
    assert first['first_seen'] == first['last_seen']
    time.sleep(0.05)
    beat = hello(conductor, 'cn-list', status='DRAINING',
                 endpoint='https://10.0.0.7:6666/agent')
    assert beat['first_seen'] == first['first_seen']
    assert beat['last_seen'] > first['last_seen']
    listed = agents(conductor)['cn-list']
    assert listed == beat
    assert listed['status'] == 'DRAINING'
    assert listed['endpoint'] == 'https://10.0.0.7:6666/agent'
    # The admin may list too.
    assert agents(conductor, token=cf.ADMIN)['cn-list'] == listed
    assert 'Agent cn-list registered' in conductor.log()


def alarms(conductor, host):
    return re.findall(r'WARNING \S+ \[-\] Agent %s is DOWN: .*' % host,
                      conductor.log())


def heartbeats(conductor, host, count):
    """``count`` heartbeats a HEARTBEAT apart.

    When the last was sent and when its answer came: the conductor saw
    it in between (how long after sending depends on the machine's load).
    """
    for _ in range(count - 1):
        hello(conductor, host)
        assert agents(conductor)[host]['state'] == 'UP'
        time.sleep(HEARTBEAT)
    sent = time.monotonic()
    hello(conductor, host)
    return sent, time.monotonic()


def test_silent_agent_turns_down_and_alarms_once(conductor):
    # Nobody lists: the monitor thread alone raises the alarm.
    sent, answered = heartbeats(conductor, 'cn-silent', 4)
    while not alarms(conductor, 'cn-silent'):
        assert time.monotonic() - answered < DOWN_TIME + 5
        time.sleep(0.02)
    now = time.monotonic()
    print('\nDOWN alarm logged by the monitor %.2f-%.2f s after the last '
          'heartbeat (agent_down_time %d s, heartbeat interval %.1f s)'
          % (now - answered, now - sent, DOWN_TIME, HEARTBEAT))
    # Not before agent_down_time had passed since the conductor saw the
    # heartbeat (after it was sent). The monitor thread checks once per
    # heartbeat interval, and the log line reaches the file after that:
    # one more interval of slack than the listing below, which decides
    # DOWN on the request.
    assert DOWN_TIME <= now - sent
    assert now - answered <= DOWN_TIME + 2 * HEARTBEAT
    assert agents(conductor)['cn-silent']['state'] == 'DOWN'
    # More monitor rounds and listings add nothing.
    for _ in range(4):
        agents(conductor)
        time.sleep(HEARTBEAT)
    found = alarms(conductor, 'cn-silent')
    assert len(found) == 1, found
    assert 'no heartbeat since' in found[0]
    assert 'agent_down_time is 2 s' in found[0]

    # Back UP, and said so; silent again: listed DOWN in time, with a
    # second alarm.
    sent, answered = heartbeats(conductor, 'cn-silent', 2)
    assert 'Agent cn-silent is UP again' in conductor.log()
    while agents(conductor)['cn-silent']['state'] == 'UP':
        assert time.monotonic() - answered < DOWN_TIME + 5
        time.sleep(0.02)
    now = time.monotonic()
    print('GET /agents shows DOWN %.2f-%.2f s after the last heartbeat'
          % (now - answered, now - sent))
    assert DOWN_TIME <= now - sent
    assert now - answered <= DOWN_TIME + HEARTBEAT
    # A listing that shows DOWN has had the alarm logged.
    assert len(alarms(conductor, 'cn-silent')) == 2
    time.sleep(2 * HEARTBEAT)
    assert len(alarms(conductor, 'cn-silent')) == 2


def test_restart_keeps_agents(tmp_path, db_url):
    conductor = cf.Conductor(tmp_path, connection=db_url).start()
    try:
        hello(conductor, 'cn-one')
        hello(conductor, 'cn-two', status='DRAINING')
        before = agents(conductor)
    finally:
        assert conductor.stop() == 0
    assert 'Signal SIGTERM: stopping' in conductor.log()
    assert 'Stopped' in conductor.log()
    conductor.start()
    try:
        assert agents(conductor) == before
        assert set(before) == {'cn-one', 'cn-two'}
        # A heartbeat after the restart continues the same record.
        beat = hello(conductor, 'cn-one')
        assert beat['first_seen'] == before['cn-one']['first_seen']
    finally:
        assert conductor.stop() == 0
