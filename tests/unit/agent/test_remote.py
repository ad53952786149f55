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

"""Out-of-process drivers: endpoint checks and the registry's states."""

import logging
import time

import pytest

from cyborg_nova.agent import remote

ENDPOINT = 'http://127.0.0.1:1337'


# -- endpoints ---------------------------------------------------------------

@pytest.mark.parametrize('endpoint, normalised', [
    ('http://127.0.0.1:1337', 'http://127.0.0.1:1337'),
    ('https://driver.example:8443/', 'https://driver.example:8443'),
    ('http://[::1]:1337/api', 'http://[::1]:1337/api'),
    ('http://driver', 'http://driver'),
    # The spec's bare forms are http://.
    ('localhost:1337', 'http://localhost:1337'),
    ('[::1]:1337', 'http://[::1]:1337'),
    ('driver', 'http://driver'),
])
def test_valid_endpoints(endpoint, normalised):
    assert remote.validate_endpoint(endpoint) == normalised


@pytest.mark.parametrize('endpoint, reason', [
    ('ftp://127.0.0.1', 'must be http or https'),
    ('http://', 'no host'),
    ('http://:80', 'no host'),
    ('http://127.0.0.1:0', 'from 1 to 65535'),
    ('http://127.0.0.1:70000', 'from 1 to 65535'),
    ('localhost:70000', 'from 1 to 65535'),
    ('http://127.0.0.1:x', 'from 1 to 65535'),
    ('http://[::1', 'not a URL'),
    ('http://127.0.0.1/?a=1', 'query'),
    ('http://u:p@127.0.0.1', 'credentials'),
    ('http://127.0.0.1/a b', 'whitespace'),
    ('', 'empty'),
])
def test_invalid_endpoints(endpoint, reason):
    with pytest.raises(remote.InvalidEndpoint) as error:
        remote.validate_endpoint(endpoint)
    assert reason in str(error.value)


# -- a driver's hardware -----------------------------------------------------

def entry(n=0, **specs):
    return {'uuid': 'uuid-%d' % n,
            'acc_specs': dict({'remote': 0, 'num': 1,
                               'device_type': 'CRYPTO'}, **specs),
            'acc_status': {'setup_required': True}}


def test_parse_hardware_keeps_the_spec_keys():
    document = {'hardware': [dict(entry(), vendor_secret='x')]}
    entries, problems = remote.parse_hardware(document)
    assert entries == [entry()]
    assert problems == []


def test_parse_hardware_leaves_out_bad_entries():
    entries, problems = remote.parse_hardware({'hardware': [
        entry(0), {'acc_specs': {}}, entry(2, device_type='TOASTER'),
        entry(3, num=-1)]})
    assert [e['uuid'] for e in entries] == ['uuid-0']
    assert len(problems) == 3


@pytest.mark.parametrize('document', [
    [], {}, {'hardware': {}}, {'hardware': [1]}, 'hardware'])
def test_parse_hardware_rejects_what_is_not_a_list(document):
    with pytest.raises(ValueError):
        remote.parse_hardware(document)


# -- the state machine -------------------------------------------------------

def test_driver_goes_down_after_the_threshold_and_comes_back():
    driver = remote.RemoteDriver(ENDPOINT, 'CRYPTO', 0.0)
    assert driver.failed('refused', now=0, interval=10, threshold=3) is False
    assert driver.failed('refused', now=10, interval=10,
                         threshold=3) is False
    assert driver.state == remote.UP
    assert driver.next_poll == 20
    assert driver.failed('refused', now=20, interval=10, threshold=3) is True
    assert driver.state == remote.DOWN
    # Further failures do not go down again, and space out the polls.
    assert driver.failed('refused', now=30, interval=10,
                         threshold=3) is False
    assert driver.next_poll == 30 + 20
    for now in range(40, 200, 10):
        driver.failed('refused', now=now, interval=10, threshold=3)
    assert driver.next_poll - 190 == 10 * remote.MAX_BACKOFF
    assert driver.succeeded([entry()], [], now=200, interval=10) is True
    assert (driver.state, driver.failures, driver.last_error) == (
        remote.UP, 0, None)
    assert driver.succeeded([entry()], [], now=210, interval=10) is False


def test_devices_of_a_down_driver_are_unhealthy():
    driver = remote.RemoteDriver(ENDPOINT, 'CRYPTO', 0.0)
    driver.succeeded([entry(0), entry(1)], [], now=0, interval=1)
    healthy = driver.devices()
    assert [d['acc_specs']['remote'] for d in healthy] == [1, 1]
    assert {d['driver'] for d in healthy} == {'CRYPTO@%s' % ENDPOINT}
    assert all(d['health'] == {'healthy': True, 'problems': []}
               for d in healthy)
    driver.failed('timed out', now=1, interval=1, threshold=1)
    for device in driver.devices():
        assert device['health']['healthy'] is False
        assert 'DOWN: timed out' in device['health']['problems'][0]


def test_hello_again_makes_it_up_and_due():
    driver = remote.RemoteDriver(ENDPOINT, 'CRYPTO', 0.0)
    driver.failed('refused', now=0, interval=10, threshold=1)
    driver.hello('GPU', now=5)
    assert (driver.state, driver.type, driver.failures,
            driver.next_poll) == (remote.UP, 'GPU', 0, 5)


# -- the registry -------------------------------------------------------------

class Client:
    """A driver client whose drivers are up or down as the test says."""

    def __init__(self):
        self.down = set()
        self.calls = []

    def hardware(self, endpoint):
        self.calls.append(('hardware', endpoint))
        if endpoint in self.down:
            raise ValueError('GET /hardware failed: connection refused')
        return [entry(0)], []

    def discover(self, endpoint):
        self.calls.append(('discovery', endpoint))

    def forget(self, endpoint):
        self.calls.append(('forget', endpoint))


@pytest.fixture
def client():
    return Client()


def registry(client, **kwargs):
    clock = iter(range(10 ** 6))
    kwargs.setdefault('threshold', 2)
    return remote.Registry(interval=1, client=client,
                           clock=lambda: next(clock), **kwargs)


def test_registry_polls_and_logs_an_outage_once(client, caplog):
    reg = registry(client)
    view = reg.hello(ENDPOINT + '/', 'CRYPTO')
    assert view['endpoint'] == ENDPOINT and view['state'] == remote.UP
    reg.poll(ENDPOINT, discover=True)
    assert client.calls == [('hardware', ENDPOINT),
                            ('discovery', ENDPOINT)]
    assert [d['uuid'] for d in reg.hardware()] == ['uuid-0']
    client.down.add(ENDPOINT)
    with caplog.at_level(logging.DEBUG, logger=remote.__name__):
        for _ in range(5):
            reg.poll(ENDPOINT)
    assert reg.drivers()[0]['state'] == remote.DOWN
    assert reg.drivers()[0]['failures'] == 5
    down = [r for r in caplog.records if 'is DOWN' in r.getMessage()]
    assert len(down) == 1 and down[0].levelno == logging.WARNING
    assert reg.hardware()[0]['health']['healthy'] is False
    client.down.clear()
    reg.poll(ENDPOINT)
    assert reg.drivers()[0]['state'] == remote.UP
    assert reg.hardware()[0]['health']['healthy'] is True


def test_registry_refuses_bad_endpoints(client):
    with pytest.raises(remote.InvalidEndpoint):
        registry(client).hello('ftp://localhost:1337', 'CRYPTO')


def test_a_full_registry_makes_room_only_by_dropping_down_drivers(client):
    reg = registry(client, threshold=1, max_drivers=2)
    reg.hello('http://a', 'GPU')
    reg.hello('http://b', 'GPU')
    with pytest.raises(remote.RegistryFull):
        reg.hello('http://c', 'GPU')
    # Re-registering a known driver is always fine.
    reg.hello('http://a', 'FPGA')
    client.down.add('http://b')
    reg.poll('http://b')
    reg.hello('http://c', 'GPU')
    assert [d['endpoint'] for d in reg.drivers()] == ['http://a',
                                                      'http://c']
    # Its connection is closed with it.
    assert ('forget', 'http://b') in client.calls


def test_discover_all_asks_every_driver(client):
    reg = registry(client)
    reg.hello('http://a', 'GPU')
    reg.hello('http://b', 'GPU')
    assert reg.discover_all() == 2


def test_polling_in_the_background(client):
    reg = remote.Registry(threshold=1, interval=0.05, client=client)
    reg.start()
    try:
        reg.hello(ENDPOINT, 'CRYPTO')
        client.down.add(ENDPOINT)
        deadline = time.monotonic() + 5
        while (reg.drivers()[0]['state'] != remote.DOWN
               and time.monotonic() < deadline):
            time.sleep(0.02)
        assert reg.drivers()[0]['state'] == remote.DOWN
    finally:
        reg.stop()


def test_parse_hardware_keeps_the_project_extension():
    extended = dict(entry(), pci={'address': '0000:70:00.0'},
                    placement={'resource_class': 'CUSTOM_QAT'},
                    driver='intel_qat', vendor_secret='x')
    entries, _ = remote.parse_hardware({'hardware': [extended]})
    assert entries == [dict(entry(), pci=extended['pci'],
                            placement=extended['placement'],
                            driver='intel_qat')]
    assert remote.Registry(1, 1).hardware() == []


def test_on_change_gets_what_polls_proved(client):
    changes = []
    reg = registry(client, on_change=lambda *a: changes.append(a))
    reg.hello(ENDPOINT, 'CRYPTO')
    reg.poll(ENDPOINT)
    reg.poll(ENDPOINT)
    assert changes == [(ENDPOINT, 'CRYPTO', remote.UP, [entry(0)])]
    client.down.add(ENDPOINT)
    reg.poll(ENDPOINT)
    # One failure short of the threshold proves nothing yet.
    assert len(changes) == 1
    reg.poll(ENDPOINT)
    reg.poll(ENDPOINT)
    assert changes[1:] == [(ENDPOINT, 'CRYPTO', remote.DOWN, [entry(0)])]
    client.down.clear()
    reg.poll(ENDPOINT)
    assert changes[2:] == [(ENDPOINT, 'CRYPTO', remote.UP, [entry(0)])]


def test_a_failed_on_change_is_retried_at_the_next_poll(client):
    calls = []

    def on_change(*args):
        calls.append(args)
        if len(calls) == 1:
            raise OSError('store is read-only')
    reg = registry(client, on_change=on_change)
    reg.hello(ENDPOINT, 'CRYPTO')
    reg.poll(ENDPOINT)
    reg.poll(ENDPOINT)
    reg.poll(ENDPOINT)
    assert len(calls) == 2
