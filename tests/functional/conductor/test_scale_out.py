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

"""Two conductors on one MariaDB or PostgreSQL, behind haproxy.

Real conductor processes share the session's private database server;
a private haproxy balances them round-robin with health checks. One
conductor is killed (SIGKILL) in a burst of registrations and in a
programming job, and the database is restarted under them: nothing is
lost, nothing is done twice, and no answer is a traceback.
"""

import concurrent.futures
import http.client
import json
import os
import shutil
import signal
import subprocess
import threading
import time

import psutil
import pytest
import sqlalchemy as sa

from tests import counts
from tests import dbservers
from tests.functional.conductor import conductor_fixture as cf
from tests.functional.conductor import fake_agent

HAPROXY = shutil.which('haproxy', path='/usr/sbin:/usr/bin:/sbin:/bin')

pytestmark = pytest.mark.skipif(
    HAPROXY is None, reason='haproxy is not installed (Debian package '
                            'haproxy)')

#: agent_down_time: both conductors' monitors look every 0.25 s.
DOWN_TIME = 2

HAPROXY_CONFIG = '''\
global
    maxconn 512
defaults
    mode http
    timeout connect 1s
    timeout client 30s
    timeout server 30s
    retries 2
    option redispatch
frontend conductors
    bind 127.0.0.1:%(port)d
    default_backend conductors
backend conductors
    balance roundrobin
    # Alive when it answers HTTP at all (401: no token).
    option httpchk GET /agents
    http-check expect rstatus ^[234]
    default-server inter 200ms fall 2 rise 1
%(servers)s
'''


class Balancer:
    """haproxy in the foreground in front of ``ports``; :meth:`stop`."""

    def __init__(self, workdir, ports):
        self.port = dbservers.free_port()
        self.url = 'http://127.0.0.1:%d' % self.port
        config = os.path.join(workdir, 'haproxy.cfg')
        with open(config, 'w') as f:
            f.write(HAPROXY_CONFIG % {'port': self.port, 'servers': '\n'.join(
                '    server c%d 127.0.0.1:%d check' % (i, port)
                for i, port in enumerate(ports))})
        self._log = open(os.path.join(workdir, 'haproxy.log'), 'ab')
        self.proc = subprocess.Popen([HAPROXY, '-db', '-f', config],
                                     stdout=self._log,
                                     stderr=subprocess.STDOUT)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)
        self._log.close()


class Cluster:
    """Two conductors on ``url`` behind a balancer."""

    def __init__(self, workdir, url):
        self.db_url = url
        self.conductors = [
            cf.Conductor(os.path.join(workdir, 'c%d' % i), connection=url,
                         bind_port=dbservers.free_port(), agent_timeout=5,
                         down_time=DOWN_TIME)
            for i in range(2)]
        for conductor in self.conductors:
            conductor.start()
        self.balancer = Balancer(workdir, [
            int(c.url.rpartition(':')[2]) for c in self.conductors])
        self.url = self.balancer.url
        self.wait_all_up()

    def call(self, method, path, token=cf.ADMIN, body=None, timeout=30):
        """``(status, body)`` through the balancer; status 0: no answer."""
        conn = http.client.HTTPConnection('127.0.0.1', self.balancer.port,
                                          timeout=timeout)
        headers = {'X-Auth-Token': token,
                   'Content-Type': 'application/json'}
        try:
            conn.request(method, path, headers=headers, body=json.dumps(
                body).encode() if body is not None else None)
            resp = conn.getresponse()
            raw = resp.read()
        except (OSError, http.client.HTTPException) as exc:
            return 0, repr(exc)
        finally:
            conn.close()
        try:
            return resp.status, json.loads(raw)
        except ValueError:
            return resp.status, raw.decode(errors='replace')

    def wait_all_up(self):
        """Until haproxy has seen every conductor answer its check."""
        for conductor in self.conductors:
            status, _, _ = conductor.call('GET', '/agents', token=cf.READER)
            assert status == 200
        # Three health check intervals: rise 1.
        time.sleep(0.6)

    def revive(self):
        """Start again any conductor killed, on its port."""
        for conductor in self.conductors:
            if conductor.proc is None:
                conductor.start()

    def rows(self, sql):
        engine = sa.create_engine(self.db_url, poolclass=sa.pool.NullPool)
        try:
            with engine.connect() as conn:
                return conn.execute(sa.text(sql)).all()
        finally:
            engine.dispose()

    def stop(self):
        self.balancer.stop()
        for conductor in self.conductors:
            conductor.stop()


@pytest.fixture(scope='module', params=['mysql', 'postgresql'])
def cluster(request, db_pool, tmp_path_factory):
    server = db_pool.require(request.param)
    name = 'cn_scale_out'
    cluster = Cluster(str(tmp_path_factory.mktemp(request.param)),
                      server.create_db(name))
    cluster.server = server
    yield cluster
    cluster.stop()
    server.drop_db(name)


def hello_until_ok(cluster, host, endpoint, retries):
    """An agent's hello, retried through the balancer until it is taken."""
    for _ in range(100):
        status, body = cluster.call('POST', '/hello', body={
            'host': host, 'status': 'READY', 'endpoint': endpoint},
            timeout=10)
        if status == 200:
            return body
        assert status in (0, 502, 503, 504), (status, body)
        assert 'Traceback' not in str(body)
        retries.append((host, status))
        time.sleep(0.05)
    raise AssertionError('%s never registered' % host)


def test_conductor_killed_in_a_burst_of_registrations(cluster):
    hosts = ['burst-%02d' % i for i in range(40)]
    retries = []
    done = []
    killed = threading.Event()

    def agent(host):
        # A registration, then two heartbeats.
        for _ in range(3):
            hello_until_ok(cluster, host, 'http://%s.example.org:6666'
                           % host, retries)
            done.append(host)
            if len(done) == 30 and not killed.is_set():
                killed.set()
                cluster.conductors[0].stop(signal.SIGKILL)

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(agent, hosts))
    assert killed.is_set()
    status, body = cluster.call('GET', '/agents', token=cf.READER)
    assert status == 200, body
    listed = [a['host'] for a in body['agents'] if a['host'] in hosts]
    assert sorted(listed) == hosts
    rows = cluster.rows("SELECT host, COUNT(*) FROM agents WHERE host "
                        "LIKE 'burst-%' GROUP BY host")
    assert sorted(rows) == [(host, 1) for host in hosts]
    counts.LINES.append(
        'scale-out (%s): conductor killed after 30 of %d hellos; %d '
        'retried by the agents, all %d agents registered once'
        % (cluster.server.label, 3 * len(hosts), len(retries), len(hosts)))
    cluster.revive()
    cluster.wait_all_up()


def test_two_conductors_raise_one_down_alarm(cluster):
    hello_until_ok(cluster, 'cn-silent', 'http://cn-silent:6666', [])
    # Both monitors (and these listings) see the silence; the database
    # lets one of them claim the alarm.
    deadline = time.monotonic() + DOWN_TIME + 5
    while time.monotonic() < deadline:
        status, body = cluster.call('GET', '/agents', token=cf.READER)
        assert status == 200, body
        if {a['host']: a['state'] for a in body['agents']}[
                'cn-silent'] == 'DOWN':
            break
        time.sleep(0.1)
    else:
        raise AssertionError('cn-silent is not DOWN: %s' % body)
    time.sleep(0.6)
    alarms = [line for c in cluster.conductors for line in
              c.log().splitlines() if 'Agent cn-silent is DOWN' in line]
    assert len(alarms) == 1, alarms


def conductor_of(port, cluster):
    """The conductor whose connection comes from local ``port``."""
    for conductor in cluster.conductors:
        proc = psutil.Process(conductor.proc.pid)
        if any(c.laddr and c.laddr.port == port
               for c in proc.net_connections('tcp')):
            return conductor
    raise AssertionError('no conductor has local port %d' % port)


def test_conductor_killed_in_a_programming_job(cluster):
    agent = fake_agent.FakeAgent(program_time=0.5, program_delay=1.0)
    try:
        hello_until_ok(cluster, 'cn-prog', agent.url, [])
        answer = []
        post = threading.Thread(target=lambda: answer.append(cluster.call(
            'POST', '/programs', body={'host': 'cn-prog',
                                       'device': '0000:3b:00.0',
                                       'bitstream': 'gzip-v2'})))
        post.start()
        assert agent.program_posted.wait(20)
        # The conductor that relays the job dies before it hears back.
        victim = conductor_of(agent.program_posts[0][1], cluster)
        victim.stop(signal.SIGKILL)
        post.join(30)
        # The client sees the balancer's error, not a second job.
        assert answer[0][0] in (0, 502), answer
        (job_id, status), = cluster.rows('SELECT id, status FROM programs')
        assert status == 'pending'
        # The surviving conductor posts it again (the same job id: the
        # agent returns the same job) and follows it to its end.
        deadline = time.monotonic() + 20
        while True:
            code, body = cluster.call('GET', '/programs/%s' % job_id,
                                      token=cf.READER)
            assert code == 200, body
            if body['program']['status'] != 'pending' and \
                    body['program']['status'] != 'running':
                break
            assert time.monotonic() < deadline, body
            time.sleep(0.1)
        assert body['program']['status'] == 'succeeded'
        assert body['program']['job']['id'] == job_id
        assert list(agent.jobs) == [job_id]
        assert {job for job, _ in agent.program_posts} == {job_id}
        assert cluster.rows('SELECT id, status FROM programs') == [
            (job_id, 'succeeded')]
        counts.LINES.append(
            'scale-out (%s): conductor killed in a programming job: one '
            'row, succeeded; the agent got the job id %d time(s), one job'
            % (cluster.server.label, len(agent.program_posts)))
    finally:
        agent.stop()
    cluster.revive()
    cluster.wait_all_up()


def test_database_restart_under_the_conductors(cluster):
    retries = []
    hello_until_ok(cluster, 'cn-before', 'http://cn-before:6666', retries)
    cluster.server.stop()
    try:
        for _ in range(4):
            status, body = cluster.call('POST', '/hello', body={
                'host': 'cn-during', 'status': 'READY',
                'endpoint': 'http://cn-during:6666'}, timeout=30)
            # A clear answer: the database is unavailable, retry later.
            assert status == 503, (status, body)
            assert 'database is unavailable' in body['error']['message']
            assert 'Traceback' not in json.dumps(body)
    finally:
        cluster.server.start()
    began = time.monotonic()
    hello_until_ok(cluster, 'cn-during', 'http://cn-during:6666', retries)
    took = time.monotonic() - began
    status, body = cluster.call('GET', '/agents', token=cf.READER)
    assert status == 200, body
    assert {'cn-before', 'cn-during'} <= {a['host'] for a in body['agents']}
    counts.LINES.append(
        'scale-out (%s): database restarted in %.1f s under two '
        'conductors; 503 while down, the next hello taken %.1f s after '
        'the restart (%d retried)' % (
            cluster.server.label, cluster.server.restart_seconds, took,
            len(retries)))
