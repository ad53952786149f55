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

"""Heartbeats to the conductor, against a real HTTP server on loopback.

The conductor here is a stand-in that records each ``POST /hello`` and
refuses the first ones, as a conductor that is still starting would.
"""

import http.server
import json
import threading

import pytest

from tests.functional.agent import base

TOKEN = 'conductor-token'


class Conductor:
    """Records heartbeats; answers 503 to the first ``refuse`` of them."""

    def __init__(self, refuse: int) -> None:
        self.refuse = refuse
        self.received = []
        self.cond = threading.Condition()
        conductor = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers['Content-Length']))
                with conductor.cond:
                    conductor.received.append(
                        (self.path, self.headers.get('X-Auth-Token'),
                         json.loads(body)))
                    status = (503 if len(conductor.received)
                              <= conductor.refuse else 200)
                    conductor.cond.notify_all()
                self.send_response(status)
                self.send_header('Content-Type', 'application/json')
                self.send_header('Content-Length', '2')
                self.end_headers()
                self.wfile.write(b'{}')

        self.server = http.server.ThreadingHTTPServer(('127.0.0.1', 0),
                                                      Handler)
        self.url = 'http://127.0.0.1:%d' % self.server.server_port
        threading.Thread(target=self.server.serve_forever,
                         daemon=True).start()

    def wait(self, count: int, timeout: float = 20) -> list:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.received) >= count,
                                      timeout), self.received
            return list(self.received)

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def conductor():
    conductor = Conductor(refuse=1)
    yield conductor
    conductor.stop()


def test_heartbeats_reach_the_conductor_and_survive_its_errors(
        host, conductor, tmp_path):
    agent = base.AgentProcess(str(tmp_path), {
        'cyborg_agent': {'conductor_url': conductor.url,
                         'conductor_token': TOKEN,
                         'heartbeat_interval': '1'},
        'cyborg_nova': {'sysfs_root': host.sysfs_root,
                        'state_path': str(tmp_path / 'state.sqlite')}})
    agent.setUp()
    try:
        # The first is refused (503); the agent backs off and goes on.
        beats = conductor.wait(3)
        for path, token, body in beats:
            assert path == '/hello'
            assert token == TOKEN
            assert body == {'status': 'READY', 'endpoint': agent.url,
                            'host': base.NODENAME}
        assert agent.call('GET', '/hardware', base.READER).ok
        assert 'Heartbeat to %s/hello failed' % conductor.url in agent.log()
    finally:
        agent.cleanUp()


def test_no_conductor_is_not_fatal(host, tmp_path):
    # A port nothing listens on.
    agent = base.AgentProcess(str(tmp_path), {
        'cyborg_agent': {'conductor_url': 'http://127.0.0.1:9',
                         'heartbeat_interval': '1'},
        'cyborg_nova': {'sysfs_root': host.sysfs_root,
                        'state_path': str(tmp_path / 'state.sqlite')}})
    agent.setUp()
    try:
        base.wait_for(lambda: 'Heartbeat to' in agent.log(),
                      what='the failed heartbeat to be logged')
        assert agent.call('GET', '/hardware', base.READER).ok
        assert agent.stop() == 0
    finally:
        agent.cleanUp()
