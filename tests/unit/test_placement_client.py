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

"""The Placement client against a real Placement.

Placement runs in this process (openstack-placement's own
``PlacementFixture``: its WSGI application behind wsgi-intercept, on an
in-memory database), so the statuses, error codes and generation
conflicts the client sees are Placement's own.
"""

import socket
import time
import uuid as uuid_lib

from keystoneauth1 import adapter as ks_adapter
from keystoneauth1 import session as ks_session
from keystoneauth1 import token_endpoint
from placement.tests.functional.fixtures import placement as fixture
import pytest

from cyborg_nova import placement

INVENTORY = {'total': 4, 'reserved': 0, 'min_unit': 1, 'max_unit': 4,
             'step_size': 1, 'allocation_ratio': 1.0}


def adapter(endpoint: str) -> ks_adapter.Adapter:
    auth = token_endpoint.Token(endpoint, 'admin')
    return ks_adapter.Adapter(ks_session.Session(auth=auth),
                              service_type='placement',
                              default_microversion=placement.MICROVERSION)


@pytest.fixture(scope='module')
def endpoint():
    server = fixture.PlacementFixture()
    server.setUp()
    yield server.endpoint
    server.cleanUp()


@pytest.fixture
def raw(endpoint):
    """An adapter for setting Placement up behind the client's back."""
    return adapter(endpoint)


@pytest.fixture
def client(endpoint):
    return placement.Client(adapter(endpoint))


def new_provider(raw, name=None, parent=None) -> str:
    """A provider with a VCPU inventory; its uuid."""
    uuid = str(uuid_lib.uuid4())
    body = {'uuid': uuid, 'name': name or uuid}
    if parent:
        body['parent_provider_uuid'] = parent
    raw.post('/resource_providers', json=body)
    raw.put('/resource_providers/%s/inventories' % uuid, json={
        'inventories': {'VCPU': INVENTORY},
        'resource_provider_generation': 0})
    return uuid


def bump(raw, uuid: str) -> None:
    """Another writer changes the provider (its generation moves)."""
    body = raw.get('/resource_providers/%s/traits' % uuid).json()
    traits = set(body['traits']) ^ {'HW_CPU_X86_AVX'}
    raw.put('/resource_providers/%s/traits' % uuid, json={
        'traits': sorted(traits),
        'resource_provider_generation': body['resource_provider_generation']})


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


# -- errors -------------------------------------------------------------------

def test_a_generation_conflict_carries_status_and_code(client, raw):
    uuid = new_provider(raw)
    body = client.provider_inventories(uuid)
    bump(raw, uuid)
    with pytest.raises(placement.PlacementError) as caught:
        client.put_provider_inventory(uuid, 'VCPU', dict(INVENTORY,
                                                         reserved=4),
                                      body['resource_provider_generation'])
    exc = caught.value
    assert (exc.status, exc.code) == (409, placement.CONCURRENT_UPDATE)
    assert exc.conflict and not exc.not_found and not exc.server_error
    assert (exc.method, exc.url) == (
        'PUT', '/resource_providers/%s/inventories/VCPU' % uuid)
    assert str(exc).startswith('Placement answered 409 to PUT /resource_'
                               'providers/%s/inventories/VCPU: ' % uuid)
    assert 'resource provider generation conflict' in exc.detail
    assert '\n' not in exc.detail
    # Nothing was written.
    assert client.provider_inventories(uuid)['inventories']['VCPU'][
        'reserved'] == 0


def test_a_missing_provider_is_not_found(client):
    missing = str(uuid_lib.uuid4())
    with pytest.raises(placement.PlacementError) as caught:
        client.provider_inventories(missing)
    exc = caught.value
    assert exc.status == 404 and exc.not_found and not exc.conflict
    assert exc.code == 'placement.undefined_code'
    assert 'No resource provider with uuid %s' % missing in exc.detail


def test_another_409_is_not_a_generation_conflict(client, raw):
    uuid = new_provider(raw)
    raw.put('/allocations/%s' % uuid_lib.uuid4(), json={
        'allocations': {uuid: {'resources': {'VCPU': 1}}},
        'project_id': 'p', 'user_id': 'u', 'consumer_generation': None,
        'consumer_type': 'INSTANCE'})
    generation = client.provider_inventories(uuid)[
        'resource_provider_generation']
    with pytest.raises(placement.PlacementError) as caught:
        # A class that is allocated cannot be taken off the provider.
        client.request('PUT', '/resource_providers/%s/inventories' % uuid,
                       json={'inventories': {},
                             'resource_provider_generation': generation})
    assert caught.value.status == 409
    assert caught.value.code == 'placement.inventory.inuse'
    assert not caught.value.conflict


def test_an_unreachable_placement_has_no_status():
    client = placement.Client(adapter('http://127.0.0.1:%d'
                                      % closed_port()))
    with pytest.raises(placement.PlacementError) as caught:
        client.provider_usages(str(uuid_lib.uuid4()))
    exc = caught.value
    assert exc.status is None and exc.code is None
    assert not (exc.conflict or exc.not_found or exc.server_error)
    assert str(exc).startswith('cannot reach Placement: ')


def test_an_undefined_trait_is_told_apart(client, raw):
    uuid = new_provider(raw)
    generation = client.provider_traits(uuid)['resource_provider_generation']
    with pytest.raises(placement.PlacementError) as caught:
        client.put_provider_traits(uuid, {'CUSTOM_NOT_YET'}, generation)
    assert caught.value.status == 400 and caught.value.no_such_trait
    client.ensure_traits(['CUSTOM_NOT_YET'])
    client.ensure_traits(['CUSTOM_NOT_YET'])  # already there: fine
    after = client.put_provider_traits(uuid, {'CUSTOM_NOT_YET'}, generation)
    assert client.provider_traits(uuid) == {
        'traits': ['CUSTOM_NOT_YET'], 'resource_provider_generation': after}


# -- reads and writes -----------------------------------------------------

def test_providers_by_name_and_tree(client, raw):
    root = new_provider(raw, name='compute 1/a&b')
    child = new_provider(raw, name='compute 1/a&b_child', parent=root)
    (found,) = client.providers(name='compute 1/a&b')
    assert found['uuid'] == root
    assert {rp['uuid'] for rp in client.providers(in_tree=root)} == {
        root, child}
    assert client.providers(name='no such host') == []
    assert client.provider_usages(child) == {'VCPU': 0}


def test_consumer_allocations_round_trip(client, raw):
    uuid = new_provider(raw)
    consumer = str(uuid_lib.uuid4())
    assert client.consumer_allocations(consumer)['allocations'] == {}
    client.put_consumer_allocations(consumer, {
        'allocations': {uuid: {'resources': {'VCPU': 2}}},
        'project_id': 'p', 'user_id': 'u', 'consumer_generation': None,
        'consumer_type': 'INSTANCE'})
    body = client.consumer_allocations(consumer)
    # What a read-modify-write carries back (1.28 and 1.38 fields).
    assert body['consumer_generation'] == 1
    assert body['consumer_type'] == 'INSTANCE'
    assert (body['project_id'], body['user_id']) == ('p', 'u')
    held = client.provider_allocations(uuid)['allocations']
    assert {c: a['resources'] for c, a in held.items()} == {
        consumer: {'VCPU': 2}}
    assert client.provider_usages(uuid) == {'VCPU': 2}


# -- retry ----------------------------------------------------------------

def fence(client, raw, uuid, beaten: int):
    """A read-modify-write of ``reserved``, beaten ``beaten`` times."""
    calls = []

    def attempt(number):
        calls.append(number)
        body = client.provider_inventories(uuid)
        if len(calls) <= beaten:
            bump(raw, uuid)
        return client.put_provider_inventory(
            uuid, 'VCPU', dict(INVENTORY, reserved=4),
            body['resource_provider_generation'])
    return attempt, calls


def test_retry_reads_again_after_a_conflict_and_succeeds(client, raw):
    uuid = new_provider(raw)
    attempt, calls = fence(client, raw, uuid, beaten=2)
    noted = []
    generation = placement.retry(attempt, 5, 0.001,
                                 after=lambda n, e: noted.append((n, e)))
    assert calls == [0, 1, 2]
    assert [n for n, _ in noted] == [1, 2]
    assert all(e.conflict for _, e in noted)
    body = client.provider_inventories(uuid)
    assert body['inventories']['VCPU']['reserved'] == 4
    assert body['resource_provider_generation'] == generation


def test_retry_gives_up_with_the_last_error(client, raw):
    uuid = new_provider(raw)
    attempt, calls = fence(client, raw, uuid, beaten=100)
    noted = []
    with pytest.raises(placement.PlacementError) as caught:
        placement.retry(attempt, 3, 0.001,
                        after=lambda n, e: noted.append(e))
    assert calls == [0, 1, 2]
    assert caught.value.conflict
    assert caught.value is noted[-1] and len(noted) == 3
    assert client.provider_inventories(uuid)['inventories']['VCPU'][
        'reserved'] == 0


def test_retry_waits_longer_each_time(client, raw):
    uuid = new_provider(raw)
    attempt, calls = fence(client, raw, uuid, beaten=100)
    started = []

    def timed(number):
        started.append(time.monotonic())
        return attempt(number)
    with pytest.raises(placement.PlacementError):
        placement.retry(timed, 4, 0.05)
    gaps = [b - a for a, b in zip(started, started[1:])]
    assert len(gaps) == 3
    for k, gap in enumerate(gaps):
        # Doubled each time, jittered by 0.5 to 1.5.
        assert gap >= 0.05 * 2 ** k * 0.5, gaps


def test_retry_passes_other_errors_at_once(client, raw):
    calls = []

    def missing(number):
        calls.append(number)
        return client.provider_inventories(str(uuid_lib.uuid4()))
    with pytest.raises(placement.PlacementError) as caught:
        placement.retry(missing, 5, 0.001)
    assert caught.value.not_found and calls == [0]

    def refused(number):
        calls.append(number)
        raise ValueError('refused by the caller')
    with pytest.raises(ValueError):
        placement.retry(refused, 5, 0.001)
    assert calls == [0, 0]


def test_retry_on_says_what_is_retried(client, raw):
    calls = []

    def missing(number):
        calls.append(number)
        return client.provider_inventories(str(uuid_lib.uuid4()))
    with pytest.raises(placement.PlacementError):
        placement.retry(missing, 3, 0.001,
                        retry_on=lambda exc: exc.not_found)
    assert calls == [0, 1, 2]
