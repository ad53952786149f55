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

"""The internal API spec's example bodies, as printed, on real services.

Each body is the spec's text copied verbatim. Two of them are not JSON
as printed: the conductor's ``POST /hello`` has a trailing comma (sent
verbatim it is a clear 400; without that comma it is accepted) and the
driver's ``GET /hardware`` misses commas (served here with only those
fixed). doc/source/api/index.rst lists these deviations.
"""

import http.server
import json
import os
import threading

import pytest

from cyborg_drivers.fake import hosttree
from tests.functional.agent import base as agent_base
from tests.functional.conductor import conductor_fixture

# Driver 'POST /hello' (to the agent), verbatim.
DRIVER_HELLO = '''{
   "status":"READY",
   "endpoint":"localhost:1337",
   "type":"CRYPTO"
}'''

# Conductor 'POST /hello' (from an agent), verbatim: not JSON.
AGENT_HELLO = '''{
   "status":"READY",
   "endpoint":"compute-whatever:1337",
}'''

# Driver 'GET /hardware', with the four commas that make it JSON fixed
# (three missing after "CRYPTO", "num":2 and acc_specs; one trailing
# after "num":1 removed); "reboot_equired" is the spec's spelling.
HARDWARE = '''{
   "hardware":[
    {
      "uuid":"8e45a2ea-5364-4b0d-a252-bf8becaa606e",
      "acc_specs":
      {
         "remote":0,
         "num":1,
         "device_type":"CRYPTO",
         "acc_capability":
         {
            "num":2,
            "ipsec":
            {
               "aes":
               {
                  "3des":50,
                  "num":1
               }
            }
         }
       },
       "acc_status":
       {
         "setup_required":true,
         "reboot_equired":false
       }
     }]
}'''

JSON = {'Content-Type': 'application/json'}


@pytest.fixture(scope='module')
def agent(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp('seed-agent'))
    sysfs_root = os.path.join(directory, 'sys')
    hosttree.build_tree('fpga-host', sysfs_root)
    agent = agent_base.AgentProcess(directory, {
        'cyborg_agent': {'discovery_interval': '0',
                         'driver_poll_interval': '1'},
        'cyborg_nova': {'sysfs_root': sysfs_root,
                        'state_path': os.path.join(directory,
                                                   'state.sqlite')},
    })
    agent.setUp()
    yield agent
    agent.cleanUp()


@pytest.fixture
def seed_driver():
    """A driver serving the spec's hardware document on loopback."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format, *args):
            pass

        def _answer(self, status, text):
            data = text.encode()
            self.send_response(status)
            self.send_header('Content-Type', 'application/json')
            self.send_header('Content-Length', str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self._answer(200 if self.path == '/hardware' else 404,
                         HARDWARE if self.path == '/hardware' else '{}')

        def do_POST(self):
            self._answer(202, '{"status":"IN-PROGRESS"}')

    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_port
    server.shutdown()
    server.server_close()


def test_the_spec_bodies_are_json_or_not():
    json.loads(DRIVER_HELLO)
    json.loads(HARDWARE)
    with pytest.raises(ValueError):
        json.loads(AGENT_HELLO)


def test_driver_hello_verbatim(agent):
    resp = agent.call('POST', '/hello', data=DRIVER_HELLO, headers=JSON)
    assert resp.status_code == 200, resp.text
    driver = resp.json()['driver']
    # The bare host:port is stored as the URL the agent calls.
    assert driver['endpoint'] == 'http://localhost:1337'
    assert driver['type'] == 'CRYPTO'
    listed = agent.call('GET', '/drivers', agent_base.READER).json()
    assert 'http://localhost:1337' in [
        d['endpoint'] for d in listed['drivers']]


def test_driver_serving_the_spec_hardware(agent, seed_driver):
    # The spec's hello shape, on the port this driver serves.
    resp = agent.call('POST', '/hello', data=DRIVER_HELLO.replace(
        'localhost:1337', '127.0.0.1:%d' % seed_driver), headers=JSON)
    assert resp.status_code == 200, resp.text
    entry = agent_base.wait_for(lambda: next(
        (e for e in agent.hardware()
         if e['uuid'] == '8e45a2ea-5364-4b0d-a252-bf8becaa606e'), None),
        what='the spec\'s hardware entry at the agent')
    assert entry['driver'] == 'CRYPTO@http://127.0.0.1:%d' % seed_driver
    assert entry['acc_specs'] == {
        'remote': 1, 'num': 1, 'device_type': 'CRYPTO',
        'acc_capability': {'num': 2, 'ipsec': {'aes': {'3des': 50,
                                                       'num': 1}}}}
    # The spec's misspelt key is read as reboot_required.
    assert entry['acc_status'] == {'setup_required': True,
                                   'reboot_required': False}
    assert entry['health'] == {'healthy': True, 'problems': []}


@pytest.fixture(scope='module')
def conductor(tmp_path_factory):
    conductor = conductor_fixture.Conductor(
        tmp_path_factory.mktemp('seed-conductor')).start()
    yield conductor
    assert conductor.stop() == 0


def test_agent_hello_verbatim_is_a_clear_400(conductor):
    status, body, _ = conductor.call('POST', '/hello',
                                     raw=AGENT_HELLO.encode())
    assert status == 400, body
    message = body['error']['message']
    # Names the JSON error and where it is: the trailing comma.
    assert message.startswith('the request body is not valid JSON: ')
    assert 'line 4 column 1' in message
    assert 'Traceback' not in conductor.log()
    assert 'ERROR' not in conductor.log()


def test_agent_hello_without_the_trailing_comma(conductor):
    text = AGENT_HELLO.replace('"compute-whatever:1337",',
                               '"compute-whatever:1337"')
    status, agent, _ = conductor.call('POST', '/hello', raw=text.encode())
    assert status == 200, agent
    # No host in the spec's body: the endpoint's host is taken.
    assert agent['host'] == 'compute-whatever'
    assert agent['endpoint'] == 'http://compute-whatever:1337'
    assert agent['status'] == 'READY' and agent['state'] == 'UP'
    status, body, _ = conductor.call('GET', '/agents',
                                     token=conductor_fixture.READER)
    assert [a['host'] for a in body['agents']] == ['compute-whatever']
