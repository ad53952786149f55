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

"""Programming through a real agent process and a real conductor-lite."""

import signal
import time

import pytest

from tests.functional.agent import base as agent_base
from tests.functional.conductor import conductor_fixture
from tests.functional.programming import base
from tests.unit.programming import fakes

PAC0, PAC1 = fakes.PAC0, fakes.PAC1


def wait_job(call, job_id, timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        job = call(job_id)
        if job['status'] != 'running' and job['status'] != 'pending':
            return job
        assert time.monotonic() < deadline, job
        time.sleep(0.1)


@pytest.fixture
def agent(host):
    agent = host.agent()
    agent.setUp()
    yield agent
    agent.cleanUp()


def agent_job(agent, job_id):
    resp = agent.call('GET', '/program/%s' % job_id, agent_base.READER)
    assert resp.status_code == 200, resp.text
    return resp.json()['program']


def test_agent_programs_and_shows_it_in_hardware(host, agent):
    resp = agent.call('POST', '/program', json={
        'device': host.uuid(PAC0), 'bitstream': 'intel/nlb3.gbs'})
    assert resp.status_code == 202, resp.text
    job = resp.json()['program']
    assert job['device'] == PAC0 and job['status'] == 'running'
    done = wait_job(lambda j: agent_job(agent, j), job['id'])
    assert done['status'] == 'succeeded', done
    assert base.check_consistent(host, PAC0) == 'programmed'
    # Posting the same job id again is that job, not a second load.
    again = agent.call('POST', '/program', json={
        'device': PAC0, 'bitstream': 'intel/nlb3.gbs', 'job_id': job['id']})
    assert again.status_code == 202
    assert again.json()['program']['status'] == 'succeeded'
    assert len(host.jobs()) == 1
    # The agent's discovery sees the new function.
    agent_base.wait_for(lambda: any(
        base.function_trait(fakes.NLB3) in h['placement']['traits']
        for h in agent.hardware()), what='the new function in /hardware')


def test_agent_refusals_and_failed_state(host, agent):
    for body, code, words in (
            ({'device': PAC0, 'bitstream': 'intel/other-fim.gbs'}, 409,
             'incompatible'),
            ({'device': PAC0, 'bitstream': 'escape.gbs'}, 409, 'outside'),
            ({'device': PAC0, 'bitstream': '../outside.gbs'}, 400,
             'bitstream'),
            ({'device': PAC0, 'bitstream': '/etc/passwd'}, 400,
             'bitstream'),
            ({'device': '0000:99:00.0', 'bitstream': 'intel/nlb3.gbs'}, 404,
             'no accelerator'),
            ({'device': PAC0, 'bitstream': 'nope.gbs'}, 404,
             'no bitstream')):
        resp = agent.call('POST', '/program', json=body)
        assert resp.status_code == code, (body, resp.text)
        assert words in resp.json()['error']['message']
    assert host.jobs() == []
    assert agent.call('GET', '/program/%s' % ('0' * 8 + '-0000-0000-0000-'
                                              + '0' * 12),
                      agent_base.READER).status_code == 404
    assert agent.call('POST', '/program', agent_base.READER, json={
        'device': PAC0, 'bitstream': 'intel/nlb3.gbs'}).status_code == 403
    # Allocated: refused, naming the instance.
    consumer = host.allocate(PAC1)
    resp = agent.call('POST', '/program', json={
        'device': PAC1, 'bitstream': 'intel/nlb3.gbs'})
    done = wait_job(lambda j: agent_job(agent, j), resp.json()['program'][
        'id'])
    assert done['status'] == 'refused' and consumer in done['error']
    host.deallocate(consumer)


def test_failed_load_is_visible_in_hardware(host, monkeypatch):
    monkeypatch.setenv('FAKE_FPGA_FAIL', 'checksum mismatch')
    agent = host.agent()
    agent.setUp()
    try:
        resp = agent.call('POST', '/program', json={
            'device': PAC0, 'bitstream': 'intel/nlb3.gbs'})
        job = wait_job(lambda j: agent_job(agent, j),
                       resp.json()['program']['id'])
        assert job['status'] == 'failed'
        assert 'checksum mismatch' in job['error']
        entry = agent_base.wait_for(lambda: [
            h for h in agent.hardware()
            if h['uuid'] == host.uuid(PAC0) and h['state'] == 'failed'],
            what='the failed state in /hardware')[0]
        assert not entry['health']['healthy']
        assert any(job['id'] in p for p in entry['health']['problems'])
    finally:
        agent.cleanUp()
    assert base.check_consistent(host, PAC0) == 'failed'


def test_agent_killed_mid_load_finishes_on_restart(host, monkeypatch):
    # A slow load; the agent dies (SIGKILL) while the tool runs.
    monkeypatch.setenv('FAKE_FPGA_DELAY', '2')
    agent = host.agent()
    agent.setUp()
    try:
        resp = agent.call('POST', '/program', json={
            'device': PAC0, 'bitstream': 'intel/nlb3.gbs'})
        assert resp.status_code == 202, resp.text
        host.wait_for_step('programming')
        agent.proc.send_signal(signal.SIGKILL)
        agent.proc.wait()
    finally:
        agent.cleanUp()
    assert host.reserved(PAC0) == 1     # fenced meanwhile
    monkeypatch.setenv('FAKE_FPGA_DELAY', '0')
    agent = host.agent(name='agent-restarted')
    agent.setUp()
    try:
        job = host.wait_finished()
    finally:
        agent.cleanUp()
    assert job['status'] == 'succeeded', job
    assert base.check_consistent(host, PAC0) == 'programmed'


@pytest.fixture
def conductor(tmp_path):
    conductor = conductor_fixture.Conductor(tmp_path / 'conductor')
    # The conductor posts programs with the agents' admin token.
    conductor_token = agent_base.ADMIN
    text = open(conductor.config).read().replace(
        'agent_token = %s' % conductor_fixture.AGENT_TOKEN,
        'agent_token = %s' % conductor_token)
    with open(conductor.config, 'w') as f:
        f.write(text)
    conductor.start()
    yield conductor
    conductor.stop()


def test_conductor_relays_to_the_agent(host, conductor):
    agent = host.agent(extra={'cyborg_agent': {
        'conductor_url': conductor.url,
        'conductor_token': conductor_fixture.ADMIN,
        'heartbeat_interval': '1'}})
    agent.setUp()
    try:
        agent_base.wait_for(lambda: conductor.call(
            'GET', '/agents', conductor_fixture.READER)[1]['agents'],
            what='the agent registered')
        status, body, _ = conductor.call('POST', '/programs', body={
            'host': host.nodename, 'device': PAC0,
            'bitstream': 'intel/nlb3.gbs'})
        assert status == 202, body
        program = body['program']
        done = wait_job(lambda j: conductor.call(
            'GET', '/programs/%s' % j, conductor_fixture.READER)[1][
                'program'], program['id'])
        assert done['status'] == 'succeeded', done
        assert done['job']['id'] == program['id']
        assert done['job']['function_id'] == fakes.hexid(fakes.NLB3)
        assert base.check_consistent(host, PAC0) == 'programmed'
        # Refusals come back as the agent's.
        status, body, _ = conductor.call('POST', '/programs', body={
            'host': host.nodename, 'device': PAC0,
            'bitstream': 'intel/other-fim.gbs'})
        assert status == 409 and 'incompatible' in body['error']['message']
        status, body, _ = conductor.call('POST', '/programs', body={
            'host': 'nohost', 'device': PAC0, 'bitstream': 'a.gbs'})
        assert status == 404
        assert conductor.call('GET', '/programs/%s' % ('0' * 8 + '-0000-'
                              '0000-0000-' + '0' * 12))[0] == 404
    finally:
        agent.cleanUp()


def test_conductor_restart_posts_what_it_had_not_relayed(host, tmp_path):
    """A job the conductor died before relaying is posted at its start.

    Its journal is the ``programs`` table.
    """
    import sqlalchemy as sa

    from cyborg_nova.conductor import db
    conductor = conductor_fixture.Conductor(tmp_path / 'conductor2')
    text = open(conductor.config).read().replace(
        'agent_token = %s' % conductor_fixture.AGENT_TOKEN,
        'agent_token = %s' % agent_base.ADMIN)
    with open(conductor.config, 'w') as f:
        f.write(text)
    conductor.start()
    agent = host.agent(extra={'cyborg_agent': {
        'conductor_url': conductor.url,
        'conductor_token': conductor_fixture.ADMIN,
        'heartbeat_interval': '1'}})
    agent.setUp()
    try:
        agent_base.wait_for(lambda: conductor.call(
            'GET', '/agents', conductor_fixture.READER)[1]['agents'],
            what='the agent registered')
        conductor.proc.send_signal(signal.SIGKILL)
        conductor.proc.wait()
        conductor.proc = None
        # As it was when it died: recorded, not yet posted.
        engine = sa.create_engine('sqlite:///%s' % conductor.database)
        job_id = '6c1f8a2e-3b5d-4e7f-9a1c-2d3e4f5a6b7c'
        db.ProgramStore(engine).create(job_id, host.nodename, PAC1,
                                       'intel/dma.gbs', None, db.utcnow())
        engine.dispose()
        conductor.start()
        job = wait_job(lambda j: agent_job(agent, j), job_id) if \
            agent_base.wait_for(lambda: any(
                j['id'] == job_id for j in host.jobs()),
                what='the job posted again') else None
        assert job['status'] == 'succeeded', job
        assert host.loaded(PAC1) == fakes.hexid(fakes.DMA_AFU)
        status, body, _ = conductor.call('GET', '/programs/%s' % job_id,
                                         conductor_fixture.READER)
        assert status == 200 and body['program']['status'] == 'succeeded'
    finally:
        agent.cleanUp()
        conductor.stop()
