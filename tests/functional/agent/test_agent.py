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

"""cyborg-nova-agent as a process on loopback, against a real Placement.

No Nova runs here after the first report: what changes in Placement
during a test is the agent's doing.
"""

import json
import os
import signal
import subprocess
import sys
import uuid

import pytest

from cyborg_drivers import device as device_model
from cyborg_nova import store as state_store
from tests.functional.agent import base

SPEC_KEYS = {'uuid', 'acc_specs', 'acc_status'}


def by_address(hardware):
    return {h['pci']['address']: h for h in hardware
            if not h['acc_specs']['remote']}


def reserved(host, address):
    uuid_ = device_model.device_uuid(base.NODENAME, address)
    return {rc: (inv['reserved'], inv['total'])
            for rc, inv in host.placement.inventories(uuid_).items()}


# -- listing -----------------------------------------------------------------

def test_hardware_lists_the_profile_in_the_spec_format(host):
    hardware = host.agent.hardware()
    local = by_address(hardware)
    assert sorted(local) == host.expected
    for address, entry in local.items():
        assert SPEC_KEYS <= set(entry)
        # The spec's uuid is the Placement provider nova-compute made.
        assert entry['uuid'] == device_model.device_uuid(base.NODENAME,
                                                         address)
        host.placement.get('/resource_providers/%s' % entry['uuid'])
        specs = entry['acc_specs']
        assert specs['remote'] == 0
        assert specs['device_type'] == 'FPGA'
        assert specs['num'] == entry['placement']['total'] == 1
        assert specs['acc_capability']['num'] == 1
        assert set(entry['acc_status']) == {'setup_required',
                                            'reboot_required'}
        assert entry['state'] == state_store.READY
        assert entry['health'] == {'healthy': True, 'problems': []}
        assert reserved(host, address) == {'FPGA': (0, 1)}


# -- discovery and fencing ---------------------------------------------------

def test_discovery_sees_a_removed_device_and_fences_it(host):
    address = '0000:af:00.0'
    uuid_ = device_model.device_uuid(base.NODENAME, address)
    traits = host.placement.traits(uuid_)
    consumer = str(uuid.uuid4())
    # An instance holds it: the provider must stay, fully reserved.
    host.placement.allocate(consumer, uuid_, {'FPGA': 1})
    link = host.device_link(address)
    parked = os.path.join(host.directory, 'parked')
    os.rename(link, parked)
    try:
        resp = host.agent.call('POST', '/discovery')
        assert resp.status_code == 202
        assert resp.json() == {'status': 'IN-PROGRESS'}
        base.wait_for(lambda: address not in by_address(
            host.agent.hardware()), what='the device to leave the listing')
        base.wait_for(lambda: reserved(host, address) == {'FPGA': (1, 1)},
                      what='the provider to be fenced')
        # Only reserved changed: the provider, its traits, its allocation
        # and the other devices are as Nova left them.
        assert host.placement.traits(uuid_) == traits
        usages = host.placement.get('/resource_providers/%s/usages'
                                    % uuid_)['usages']
        assert usages == {'FPGA': 1}
        for other in set(host.expected) - {address}:
            assert reserved(host, other) == {'FPGA': (0, 1)}
    finally:
        os.rename(parked, link)
        host.placement.deallocate(consumer)
    assert host.agent.call('POST', '/discovery').status_code == 202
    base.wait_for(lambda: address in by_address(host.agent.hardware()),
                  what='the device to be listed again')
    base.wait_for(lambda: reserved(host, address) == {'FPGA': (0, 1)},
                  what='the provider to be unfenced')
    assert host.placement.traits(uuid_) == traits
    # Versioned lifecycle notifications (log driver): gone, then back.
    log = host.agent.log()
    removed = log.index('accelerator.removed')
    assert address in log[removed:removed + 2000]
    assert 'AcceleratorPayload' in log[removed:removed + 2000]
    assert log.index('accelerator.discovered', removed) > removed


def test_a_state_change_in_the_store_is_fenced_at_the_next_discovery(host):
    # What the CLI or the conductor does: hold a device in the store.
    address = host.expected[-1]
    store = state_store.StateStore(host.state_path)
    store.set_state(base.NODENAME, address, state_store.HELD, 'test')
    try:
        host.agent.call('POST', '/discovery')
        base.wait_for(lambda: reserved(host, address) == {'FPGA': (1, 1)},
                      what='the held device to be fenced')
        entry = by_address(host.agent.hardware())[address]
        assert entry['state'] == state_store.HELD
    finally:
        store.set_state(base.NODENAME, address, state_store.READY)
    host.agent.call('POST', '/discovery')
    base.wait_for(lambda: reserved(host, address) == {'FPGA': (0, 1)},
                  what='the ready device to be unfenced')


def test_concurrent_discovery_requests_are_coalesced(host):
    for _ in range(20):
        assert host.agent.call('POST', '/discovery').status_code == 202
    # Still answering, and still listing the whole host.
    assert sorted(by_address(host.agent.hardware())) == host.expected


# -- out-of-process drivers --------------------------------------------------

def remote_entries(host):
    return [h for h in host.agent.hardware() if h['acc_specs']['remote']]


def driver_state(host, endpoint):
    drivers = host.agent.call('GET', '/drivers', base.READER).json()
    for driver in drivers['drivers']:
        if driver['endpoint'] == endpoint:
            return driver
    return None


def test_remote_driver_registers_goes_down_and_comes_back(host):
    driver = base.DriverProcess(host.agent.url, devices=2)
    driver.setUp()
    try:
        endpoint = driver.url
        # The agent fetched its hardware and asked it to discover.
        driver.wait_line(lambda s: s == 'hardware')
        driver.wait_line(lambda s: s == 'discovery')
        entries = base.wait_for(lambda: remote_entries(host),
                                what='remote devices')
        assert len(entries) == 2
        for entry in entries:
            assert SPEC_KEYS <= set(entry)
            assert entry['acc_specs']['remote'] == 1
            assert entry['acc_specs']['device_type'] == 'CRYPTO'
            assert entry['driver'] == 'CRYPTO@%s' % endpoint
            assert entry['health'] == {'healthy': True, 'problems': []}
        assert driver_state(host, endpoint)['state'] == 'UP'

        port = int(endpoint.rsplit(':', 1)[1])
        driver.kill()
        down = base.wait_for(
            lambda: (driver_state(host, endpoint) or {}).get(
                'state') == 'DOWN' and driver_state(host, endpoint),
            what='the driver to be DOWN')
        assert down['failures'] >= 2 and down['last_error']
        for entry in remote_entries(host):
            assert entry['health']['healthy'] is False
            assert 'DOWN' in entry['health']['problems'][0]
        # Local devices are not affected.
        assert sorted(by_address(host.agent.hardware())) == host.expected
    finally:
        driver.cleanUp()
    # Back on the same port: UP again at the next poll.
    again = base.DriverProcess(host.agent.url, port=port, devices=2)
    again.setUp()
    try:
        base.wait_for(lambda: driver_state(host, endpoint)['state'] == 'UP',
                      what='the driver to be UP again')
        base.wait_for(lambda: all(e['health']['healthy']
                                  for e in remote_entries(host)),
                      what='remote devices healthy again')
    finally:
        again.cleanUp()
    # The outage was logged once, however many polls failed.
    assert host.agent.log().count('CRYPTO@%s is DOWN' % endpoint) == 1


def test_unreachable_endpoint_is_accepted_and_never_breaks_the_agent(host):
    # Nothing listens on port 9 (discard) of loopback.
    endpoint = 'http://127.0.0.1:9'
    resp = host.agent.call('POST', '/hello', json={
        'status': 'READY', 'endpoint': endpoint, 'type': 'GPU'})
    assert resp.status_code == 200, resp.text
    assert resp.json()['driver']['endpoint'] == endpoint
    base.wait_for(lambda: driver_state(host, endpoint)['state'] == 'DOWN',
                  what='the unreachable driver to be DOWN')
    assert host.agent.call('GET', '/hardware', base.READER).ok
    assert host.agent.call('POST', '/discovery').status_code == 202


# -- bad requests ------------------------------------------------------------

def error(resp, status):
    assert resp.status_code == status, resp.text
    assert resp.headers['Content-Type'].startswith('application/json')
    body = resp.json()['error']
    assert body['code'] == status and body['message']
    return body['message']


@pytest.mark.parametrize('endpoint', [
    'localhost:99999',         # the spec's form, out-of-range port
    'ftp://127.0.0.1/driver',
    'http://',
    'not a url',
    'http://127.0.0.1:0',
    'http://127.0.0.1:99999',
    'http://user:secret@127.0.0.1:1337',
])
def test_hello_endpoint_must_be_an_http_url(host, endpoint):
    message = error(host.agent.call('POST', '/hello', json={
        'status': 'READY', 'endpoint': endpoint, 'type': 'CRYPTO'}), 400)
    assert 'endpoint' in message


def test_malformed_and_unexpected_bodies(host):
    headers = {'Content-Type': 'application/json'}
    assert 'JSON' in error(host.agent.call(
        'POST', '/hello', data=b'{"status": "READY",', headers=headers),
        400)
    assert 'additional' in error(host.agent.call('POST', '/hello', json={
        'status': 'READY', 'endpoint': 'http://127.0.0.1:1', 'type': 'GPU',
        'extra': 1}), 400).lower()
    error(host.agent.call('POST', '/hello', json={
        'status': 'READY', 'endpoint': 'http://127.0.0.1:1'}), 400)
    error(host.agent.call('POST', '/hello', json={
        'status': 'GONE', 'endpoint': 'http://127.0.0.1:1', 'type': 'GPU'}),
        400)
    error(host.agent.call('POST', '/hello', json=['READY']), 400)
    error(host.agent.call('POST', '/hello', data=b'status=READY',
                          headers={'Content-Type': 'text/plain'}), 415)
    error(host.agent.call('POST', '/hello', data=json.dumps({
        'status': 'READY', 'endpoint': 'http://x/' + 'a' * 70000,
        'type': 'GPU'}), headers=headers), 413)
    error(host.agent.call('POST', '/discovery', json={'drivers': 'all'}),
          400)
    error(host.agent.call('GET', '/nowhere'), 404)
    resp = host.agent.call('DELETE', '/hardware')
    error(resp, 405)
    assert resp.headers['Allow'] == 'GET'


def test_authentication_and_policy(host):
    for method, path in (('POST', '/discovery'), ('GET', '/hardware'),
                         ('POST', '/hello'), ('GET', '/drivers'),
                         ('GET', '/openapi.json')):
        error(host.agent.call(method, path, token=None), 401)
        error(host.agent.call(method, path, token='wrong'), 401)
    error(host.agent.call('POST', '/discovery', base.READER), 403)
    error(host.agent.call('POST', '/hello', base.READER, json={
        'status': 'READY', 'endpoint': 'http://127.0.0.1:1',
        'type': 'GPU'}), 403)
    for path in ('/hardware', '/drivers', '/openapi.json'):
        assert host.agent.call('GET', path, base.READER).status_code == 200


# -- the process -------------------------------------------------------------

@pytest.mark.parametrize('sig', [signal.SIGTERM, signal.SIGINT])
def test_stops_cleanly_on_signals(host, tmp_path, sig):
    # No Placement credentials: the agent runs, without fencing.
    agent = base.AgentProcess(str(tmp_path), {'cyborg_nova': {
        'sysfs_root': host.sysfs_root,
        'state_path': str(tmp_path / 'state.sqlite')}})
    agent.setUp()
    try:
        assert sorted(by_address(agent.hardware())) == host.expected
        assert agent.stop(sig) == 0
        assert 'Fencing is off' in agent.log()
    finally:
        agent.cleanUp()


@pytest.mark.parametrize('section, options, words', [
    ('cyborg_nova', {'enabled_drivers': 'no_such_driver'},
     "unknown driver 'no_such_driver'"),
    ('placement', {'auth_type': 'password'}, 'auth_url'),
])
def test_a_broken_config_is_refused_at_start(tmp_path, section, options,
                                             words):
    config = base.write_config(str(tmp_path / 'agent.conf'), {
        'cyborg_agent': {'bind_port': '0', 'watch_udev': 'False'},
        'cyborg_nova': {'state_path': str(tmp_path / 'state.sqlite')},
        section: options})
    proc = subprocess.run(
        [sys.executable, '-m', 'cyborg_nova.cmd.agent',
         '--config-file', config], capture_output=True, text=True,
        env=base.env(), cwd=base.REPO_ROOT, timeout=60)
    assert proc.returncode == 1
    assert 'listening' not in proc.stdout
    assert 'Cannot start' in proc.stderr and words in proc.stderr
