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

"""The fence computation, and the Fencer's conversation with Placement.

The Fencer is driven against a small in-memory Placement that keeps
inventories and generations the way Placement does (a PUT with a stale
generation is a 409), so conflicts and retries are real, not scripted.
"""

import dataclasses

from keystoneauth1 import exceptions as ks_exc
import pytest

from cyborg_drivers import device as device_model
from cyborg_nova import fencing
from cyborg_nova import placement
from cyborg_nova import providers
from cyborg_nova import store as state_store

UUID = '7b7c7a3e-9f1d-4c71-8d0e-2f6b5a4c3d21'
URL = '/resource_providers/%s/inventories' % UUID


def accelerator(**fields):
    values = dict(address='0000:3b:00.0', driver='nvidia_gpu',
                  device_type='GPU', resource_class='PGPU',
                  traits=('CUSTOM_NVIDIA_1EB8',), total=1, vendor_id='10de',
                  product_id='1eb8', class_code='0x030200')
    values.update(fields)
    return device_model.Accelerator(**values)


def record(total, reserved=0):
    return {'total': total, 'reserved': reserved, 'min_unit': 1,
            'max_unit': total, 'step_size': 1, 'allocation_ratio': 1.0}


# -- the computation ---------------------------------------------------------

@pytest.mark.parametrize('state, acc, expected', [
    (state_store.READY, accelerator(), 0),
    (state_store.READY, None, 1),                      # vanished
    (state_store.INACTIVE, accelerator(), 1),
    (state_store.HELD, accelerator(), 1),
    (state_store.UNHEALTHY, accelerator(), 1),
    (state_store.PROGRAMMING, accelerator(), 1),
    (state_store.READY, accelerator(problems=('qat down',)), 1),
    (state_store.READY, accelerator(setup_required=True), 1),
])
def test_wanted_reserved_matches_novas_function(state, acc, expected):
    assert fencing.wanted_reserved(state, acc, 'PGPU', 1) == expected
    # The very function Nova's update uses, for the devices it reports.
    if acc is not None:
        assert expected == providers.reserved(state, acc, 1)


def test_a_class_the_device_no_longer_offers_stays_fully_reserved():
    # Nova keeps such a class only while it is allocated, fully reserved.
    assert fencing.wanted_reserved(state_store.READY, accelerator(),
                                   'VGPU', 4) == 4


def test_units_that_left_the_device_stay_held():
    acc = accelerator(resource_class='CUSTOM_QAT', total=4)
    assert fencing.wanted_reserved(state_store.READY, acc, 'CUSTOM_QAT',
                                   16) == 12
    assert fencing.wanted_reserved(state_store.READY, acc, 'CUSTOM_QAT',
                                   2) == 0
    assert fencing.wanted_reserved(state_store.HELD, acc, 'CUSTOM_QAT',
                                   16) == 16


def test_units_kept_for_a_domain_stay_reserved_on_a_ready_device():
    acc = accelerator(resource_class='CUSTOM_QAT', total=16)
    assert fencing.wanted_reserved(state_store.READY, acc, 'CUSTOM_QAT',
                                   16, kept=3) == 3
    assert providers.reserved(state_store.READY, acc, 16, 3) == 3
    assert providers.inventory(acc, state_store.READY, 3)['CUSTOM_QAT'][
        'reserved'] == 3
    # Fenced: everything, whatever is kept.
    assert fencing.wanted_reserved(state_store.HELD, acc, 'CUSTOM_QAT',
                                   16, kept=3) == 16


def test_plan_lists_only_what_differs():
    inventories = {'PGPU': record(1, 0), 'VGPU': record(4, 4)}
    assert fencing.plan(inventories, state_store.READY, accelerator()) == {}
    assert fencing.plan(inventories, state_store.READY, None) == {'PGPU': 1}
    assert fencing.plan({'PGPU': record(1, 1)}, state_store.READY,
                        accelerator()) == {'PGPU': 0}


# -- the Fencer ---------------------------------------------------------------

class Response:
    def __init__(self, status_code, body=None):
        self.status_code = status_code
        self._body = body or {}
        self.text = str(body)

    def json(self):
        return self._body


class FakePlacement:
    """Inventories with generations, as Placement keeps them."""

    def __init__(self, inventories, concurrent_writes=0):
        self.inventories = inventories
        self.generation = 5
        self.concurrent_writes = concurrent_writes
        self.requests = []

    def get(self, url, raise_exc=True, microversion=None, timeout=None):
        self.requests.append(('GET', url, microversion))
        if self.inventories is None:
            return Response(404)
        body = {'resource_provider_generation': self.generation,
                'inventories': {k: dict(v)
                                for k, v in self.inventories.items()}}
        if self.concurrent_writes:
            # Someone else (Nova) writes between our GET and our PUT.
            self.concurrent_writes -= 1
            self.generation += 1
        return Response(200, body)

    def put(self, url, json=None, raise_exc=True, microversion=None,
            timeout=None):
        self.requests.append(('PUT', url, microversion))
        if json['resource_provider_generation'] != self.generation:
            return Response(409, {'errors': [
                {'code': 'placement.concurrent_update'}]})
        rc = url.rsplit('/', 1)[1]
        self.inventories[rc] = {k: v for k, v in json.items()
                                if k != 'resource_provider_generation'}
        self.generation += 1
        return Response(200, {'resource_provider_generation':
                              self.generation})


def fencer(client, attempts=5):
    return fencing.Fencer(client, attempts=attempts, backoff=0.001)


def test_fences_a_vanished_device_and_changes_nothing_else():
    before = record(1, 0)
    before.update(allocation_ratio=2.0, max_unit=1)
    client = FakePlacement({'PGPU': dict(before)})
    result = fencer(client).apply('0000:3b:00.0', UUID,
                                  state_store.READY, None)
    assert result.outcome == fencing.WRITTEN
    assert result.reserved == {'PGPU': 1}
    assert client.inventories['PGPU'] == dict(before, reserved=1)
    assert [r[0] for r in client.requests] == ['GET', 'PUT']
    # reserved == total needs microversion 1.26 or later; the client
    # sends one for every request.
    assert {r[2] for r in client.requests} == {placement.MICROVERSION}
    assert tuple(map(int, placement.MICROVERSION.split('.'))) >= (1, 26)


def test_nothing_is_written_when_placement_agrees():
    client = FakePlacement({'PGPU': record(1, 0)})
    result = fencer(client).apply('0000:3b:00.0', UUID, state_store.READY,
                                  accelerator())
    assert result.outcome == fencing.UNCHANGED
    assert [r[0] for r in client.requests] == ['GET']


def test_an_unfence_leaves_the_kept_units_reserved():
    client = FakePlacement({'CUSTOM_QAT': record(16, 16)})
    result = fencing.Fencer(client, backoff=0.001,
                            kept=lambda: {UUID: 2, 'other': 5}).apply(
        '0000:3b:00.0', UUID, state_store.READY,
        accelerator(resource_class='CUSTOM_QAT', total=16))
    assert result.reserved == {'CUSTOM_QAT': 2}
    assert client.inventories['CUSTOM_QAT']['reserved'] == 2


def test_a_conflict_is_reread_and_retried():
    client = FakePlacement({'PGPU': record(1, 0)}, concurrent_writes=2)
    result = fencer(client).apply('0000:3b:00.0', UUID, state_store.READY,
                                  None)
    assert result.outcome == fencing.WRITTEN
    assert client.inventories['PGPU']['reserved'] == 1
    assert [r[0] for r in client.requests] == ['GET', 'PUT'] * 3


def test_endless_conflicts_give_up_after_the_bound():
    client = FakePlacement({'PGPU': record(1, 0)}, concurrent_writes=100)
    result = fencer(client, attempts=3).apply('0000:3b:00.0', UUID,
                                              state_store.READY, None)
    assert result.outcome == fencing.FAILED
    assert '409' in result.error
    assert len(client.requests) == 6


def test_a_missing_provider_is_not_created():
    client = FakePlacement(None)
    result = fencer(client).apply('0000:3b:00.0', UUID, state_store.READY,
                                  None)
    assert result.outcome == fencing.NO_PROVIDER
    assert [r[0] for r in client.requests] == ['GET']


def test_unreachable_placement_is_a_result_not_an_exception():
    class Down:
        def get(self, *args, **kwargs):
            raise ks_exc.ConnectFailure('connection refused')
    result = fencer(Down(), attempts=2).apply('0000:3b:00.0', UUID,
                                              state_store.READY, None)
    assert result.outcome == fencing.FAILED
    assert 'cannot reach Placement' in result.error


def test_every_class_of_the_provider_is_considered():
    client = FakePlacement({'PGPU': record(1, 0), 'VGPU': record(4, 0)})
    result = fencer(client).apply('0000:3b:00.0', UUID, state_store.READY,
                                  accelerator())
    assert result.outcome == fencing.WRITTEN
    assert result.reserved == {'PGPU': 0, 'VGPU': 4}


def test_result_is_immutable():
    result = fencing.FenceResult('a', UUID, fencing.UNCHANGED)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.outcome = fencing.WRITTEN
