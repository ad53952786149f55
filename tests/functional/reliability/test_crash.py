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

"""SIGKILL of the agent, nova-compute's update and the conductor under load.

Each process is killed (``kill -9``) at random moments while requests
keep coming, and started again. After every kill the SQLite files pass
``PRAGMA integrity_check``; after the restarts, nothing acknowledged is
lost and interrupted work is finished from the journal.

nova-compute itself is not killed here: Nova's functional harness runs
in-process (with eventlet) in a pytest run of its own. Its stand-in is
update_worker.py, a process running the same update path (Nova's report
client and cyborg-nova's provider code over the host's state store).
tests/functional/programming/test_crash.py kills a reprogramming at each
journal step; here the kills fall anywhere, under load.
"""

import http.client
import http.server
import json
import random
import re
import threading
import time
import urllib.error
import urllib.request

import requests

from tests import counts
from tests.functional.conductor import conductor_fixture
from tests.functional.programming import base
from tests.functional.reliability import common
from tests.functional.reliability import placement as placement_mod
from tests.unit.programming import fakes

# Rounds of kills: the agent, then both, in turn (a restarted update
# process takes seconds to import Nova).
AGENT_ROUNDS = 4
VICTIMS = [('agent',), ('agent', 'update')]
CONDUCTOR_KILLS = 6
JOBS = [(fakes.PAC0, 'intel/nlb3.gbs'), (fakes.PAC1, 'intel/dma.gbs'),
        (fakes.PAC0, 'intel/dma.gbs'), (fakes.PAC1, 'intel/nlb3.gbs')]


class Load:
    """Threads calling ``target(n)`` over and over until stopped."""

    def __init__(self, *targets) -> None:
        self._stop = threading.Event()
        self.calls = 0
        self.errors: list[str] = []
        self._threads = [threading.Thread(target=self._run, args=(t,),
                                          daemon=True) for t in targets]

    def _run(self, target) -> None:
        n = 0
        while not self._stop.is_set():
            n += 1
            try:
                target(n)
            except (requests.RequestException, urllib.error.URLError,
                    http.client.HTTPException, ConnectionError,
                    TimeoutError):
                # The process is down, or was killed mid-answer (what it
                # did then is not acknowledged, and not counted on).
                time.sleep(0.05)
            except Exception as exc:
                self.errors.append(repr(exc))
                return
            self.calls += 1

    def start(self) -> 'Load':
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)
        assert not self.errors, self.errors


def test_agent_and_update_killed_under_load(host):
    """The agent and nova-compute's update, killed at random, restarted.

    Load: full discoveries asked of the agent (each syncs the store and
    fences), FPGA reprogramming jobs posted to it (journaled in the same
    store), and the update cycles writing the store and Placement.
    """
    rng = random.Random()
    holder = {}

    def discover(n):
        agent = holder['agent']
        resp = agent.call('POST', '/discovery')
        assert resp.status_code in (200, 202), resp.text

    def program(n):
        agent = holder['agent']
        device, bitstream = JOBS[n % len(JOBS)]
        resp = agent.call('POST', '/program', json={
            'device': device, 'bitstream': bitstream})
        # Accepted, or refused while the device is busy with another.
        assert resp.status_code in (202, 409), resp.text
        time.sleep(0.1)

    # Agents started and not yet stopped: a failing assertion must not
    # leave one running after the test.
    running = []

    def start_agent():
        agent = host.agent(extra={'cyborg_agent': {
            'discovery_interval': '1'}})
        agent.setUp()
        running.append(agent)
        holder['agent'] = agent
        return agent

    def stop_agent(agent):
        if agent in running:
            running.remove(agent)
            agent.cleanUp()
    try:
        _agent_and_update_killed(host, rng, holder, start_agent,
                                 stop_agent, discover, program)
    finally:
        for agent in list(running):
            stop_agent(agent)


def _agent_and_update_killed(host, rng, holder, start_agent, stop_agent,
                             discover, program):
    agent = start_agent()
    worker = common.UpdateWorker(host, interval=0.05)
    load = Load(discover, program).start()
    interrupted = cycles = 0
    kills = {'agent': 0, 'update': 0}
    try:
        for i in range(AGENT_ROUNDS):
            time.sleep(rng.uniform(0.3, 1.5))
            victims = VICTIMS[i % len(VICTIMS)]
            if 'agent' in victims:
                agent.proc.kill()
                stop_agent(agent)
            if 'update' in victims:
                # Killed while it cycles, not while it imports Nova.
                worker.wait_cycles(3, timeout=120)
                worker.kill()
                assert worker.cycles
                cycles += len(worker.cycles)
            for victim in victims:
                kills[victim] += 1
            assert placement_mod.integrity(host.state_path) == 'ok'
            interrupted += sum(j['status'] == 'running'
                               for j in host.jobs())
            if 'agent' in victims:
                agent = start_agent()
            if 'update' in victims:
                worker = common.UpdateWorker(host, interval=0.05)
    finally:
        load.stop()
        worker.kill()
        cycles += len(worker.cycles)
    try:
        # The last agent finishes what was interrupted, from the journal.
        host.wait_finished(120)
        jobs = host.jobs()
        assert all(j['status'] != 'running' for j in jobs), jobs
    finally:
        stop_agent(agent)
    assert placement_mod.integrity(host.state_path) == 'ok'
    # Each device ends consistent: traits match what is loaded and it is
    # offered, or fenced and failed.
    ends = {device: base.check_consistent(host, device)
            for device in (fakes.PAC0, fakes.PAC1)}
    # And nova-compute's next updates agree with what the agent left.
    host.report()
    tree = common.snapshot(host)
    host.report()
    assert common.snapshot(host) == tree
    assert ends == {device: base.check_consistent(host, device)
                    for device in (fakes.PAC0, fakes.PAC1)}
    # A job fails only for a load interrupted again and again (the
    # journal's rule: a device is not loaded a third time blind).
    assert not [j for j in jobs if j['status'] == 'failed'
                and 'interrupted' not in j['error']], jobs
    statuses = {}
    for job in jobs:
        statuses[job['status']] = statuses.get(job['status'], 0) + 1
    counts.record('agent/update kills: %s; load calls: %d; jobs: %s '
                  '(running at a kill: %d); update cycles: %d; devices: %s'
                  % (kills, load.calls, statuses, interrupted, cycles, ends))
    # The kills met load: calls were made and jobs were posted.
    assert load.calls and jobs, (load.calls, jobs)


class ProgramAgent:
    """An agent API that accepts every programming job (and records it)."""

    def __init__(self) -> None:
        self.received: set[str] = set()
        agent = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format, *args):
                pass

            def _answer(self, code, body):
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header('Content-Type', 'application/json')
                self.send_header('Content-Length', str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _job(self, job_id, status):
                return {'program': {'id': job_id, 'status': status,
                                    'error': None}}

            def do_POST(self):
                body = json.loads(self.rfile.read(
                    int(self.headers['Content-Length'])))
                agent.received.add(body['job_id'])
                self._answer(202, self._job(body['job_id'], 'running'))

            def do_GET(self):
                match = re.fullmatch(r'/program/([0-9a-f-]+)', self.path)
                if match:
                    return self._answer(200, self._job(match.group(1),
                                                       'succeeded'))
                self._answer(200, {'hardware': []})
        self.server = http.server.ThreadingHTTPServer(('127.0.0.1', 0),
                                                      Handler)
        self.url = 'http://127.0.0.1:%d' % self.server.server_port
        threading.Thread(target=self.server.serve_forever,
                         daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_conductor_killed_under_load(tmp_path):
    """The conductor killed at random under heartbeats and jobs.

    Nothing it acknowledged is lost, and every job reaches its agent.
    """
    rng = random.Random()
    agent = ProgramAgent()
    conductor = conductor_fixture.Conductor(tmp_path).start()
    hosts = ['compute-%02d' % i for i in range(20)]
    acked_hosts: set[str] = set()
    acked_jobs: set[str] = set()

    def hello(n):
        host = hosts[n % len(hosts)]
        status, body, _ = conductor.call(
            'POST', '/hello', body={'host': host, 'endpoint': agent.url,
                                    'status': 'READY'},
            timeout=10)
        assert status == 200, body
        acked_hosts.add(host)

    def post_job(n):
        if hosts[0] not in acked_hosts:
            return time.sleep(0.05)
        status, body, _ = conductor.call(
            'POST', '/programs', body={
                'host': hosts[0], 'device': fakes.PAC0,
                'bitstream': 'intel/nlb3.gbs'}, timeout=10)
        assert status == 202, body
        acked_jobs.add(body['program']['id'])
    try:
        _conductor_killed(rng, agent, conductor, hosts, acked_hosts,
                          acked_jobs, hello, post_job)
    finally:
        # Idempotent: nothing outlives a failed assertion.
        conductor.stop()
        agent.stop()


def _conductor_killed(rng, agent, conductor, hosts, acked_hosts,
                      acked_jobs, hello, post_job):
    load = Load(hello, hello, post_job).start()
    try:
        for _ in range(CONDUCTOR_KILLS):
            time.sleep(rng.uniform(0.2, 1.0))
            conductor.proc.kill()
            conductor.stop()
            assert placement_mod.integrity(conductor.database) == 'ok'
            conductor.start()
        time.sleep(0.5)
    finally:
        load.stop()
    try:
        status, body, _ = conductor.call('GET', '/agents',
                                         conductor_fixture.READER)
        assert status == 200
        assert {a['host'] for a in body['agents']} == acked_hosts
        assert acked_hosts == set(hosts)
        for job in acked_jobs:
            status, body, _ = conductor.call('GET', '/programs/%s' % job)
            assert status == 200, body
        # Every job acknowledged reached the agent (posted again after a
        # restart when the conductor died before it had).
        assert acked_jobs <= agent.received
    finally:
        conductor.stop()
        agent.stop()
    assert placement_mod.integrity(conductor.database) == 'ok'
    counts.record('conductor kills: %d; load calls: %d; agents: %d; jobs '
                  'acknowledged: %d, relayed: %d'
                  % (CONDUCTOR_KILLS, load.calls, len(acked_hosts),
                     len(acked_jobs), len(agent.received)))
    # The kills met load: jobs were acknowledged (and so had to survive).
    assert load.calls and acked_jobs, (load.calls, acked_jobs)
