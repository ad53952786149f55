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

"""Placement failing or racing at given moments of a reprogramming.

The Programmer runs in this process against the real Placement, its
client wrapped (``common.Hooked``) so a test can fail a request or act
(as another writer) right before one is sent.
"""

import uuid

from keystoneauth1 import exceptions as ks_exc
import pytest

from cyborg_nova import programming
from tests.functional.programming import base
from tests.functional.reliability import common
from tests.unit.programming import fakes

PAC0 = fakes.PAC0


@pytest.fixture
def programmer(host):
    with base.hooked_programmer(host, common.Hooked) as programmer:
        yield programmer


def down():
    return ks_exc.ConnectFailure('Placement is down')


def test_unfence_waits_for_placement_then_recovery_finishes(host,
                                                            programmer):
    # Traits swapped, then Placement goes away for the unfence (the
    # fence's inventory write comes before the load, which writes the
    # new trait).
    programmer.client.on(
        'before', 'PUT', '/traits', lambda: programmer.client.on(
            'before', 'PUT', '/inventories', down))
    programmer.placement.attempts = 1
    programmer.fencer.attempts = 1
    job = programmer.program(host.nodename, PAC0, 'intel/nlb3.gbs')
    assert job.status == programming.RUNNING
    assert job.step == programming.UNFENCING
    # Fenced still, with the new traits: safe, just not offered yet.
    assert host.reserved(PAC0) == 1
    assert base.function_trait(fakes.NLB3) in host.traits(PAC0)
    (done,) = programmer.recover()
    assert done.status == programming.SUCCEEDED
    assert base.check_consistent(host, PAC0) == 'programmed'


def test_trait_conflicts_are_retried_and_other_traits_kept(host,
                                                           programmer):
    def operator_writes():
        # Another writer (an operator) adds a trait between our read and
        # our write: our write conflicts (409) and is retried.
        traits = host.get('/resource_providers/%s/traits'
                          % host.uuid(PAC0))
        host.http.put(host.placement_url + '/traits/CUSTOM_RACK_7')
        resp = host.http.put(
            host.placement_url + '/resource_providers/%s/traits'
            % host.uuid(PAC0), json={
                'traits': traits['traits'] + ['CUSTOM_RACK_7'],
                'resource_provider_generation': traits[
                    'resource_provider_generation']})
        assert resp.status_code == 200, resp.text
    hooked = []

    def after_get():
        hooked.append(1)
        if len(hooked) == 1:
            # The first GET of the traits happened; write before the PUT.
            programmer.client.on('before', 'PUT', '/traits',
                                 operator_writes)
    programmer.client.on('before', 'GET', '/traits', after_get)
    job = programmer.program(host.nodename, PAC0, 'intel/nlb3.gbs')
    assert job.status == programming.SUCCEEDED, job
    traits = host.traits(PAC0)
    assert 'CUSTOM_RACK_7' in traits
    assert base.function_trait(fakes.NLB3) in traits
    assert base.function_trait(fakes.NLB0) not in traits


def test_an_allocation_behind_a_stale_unfence_fails_the_job(host,
                                                            programmer):
    """An instance landing behind a stale unfence fails the job.

    Another writer unfences with a stale view after the proof, and an
    instance lands: the swap sees the provider changed, finds the
    instance, and the device ends fenced, failed, naming it.
    """
    consumer = str(uuid.uuid4())

    def stale_writer():
        inv = host.get('/resource_providers/%s/inventories'
                       % host.uuid(PAC0))
        record = dict(inv['inventories']['FPGA'], reserved=0,
                      resource_provider_generation=inv[
                          'resource_provider_generation'])
        resp = host.http.put(host.placement_url +
                             '/resource_providers/%s/inventories/FPGA'
                             % host.uuid(PAC0), json=record)
        assert resp.status_code == 200, resp.text
        host.allocate(PAC0, consumer)
    # Armed by the proof (GET allocations); acts after the load, right
    # before the swap reads the provider's traits.
    programmer.client.on(
        'before', 'GET', '/allocations', lambda: programmer.client.on(
            'before', 'GET', '/traits', stale_writer))
    job = programmer.program(host.nodename, PAC0, 'intel/nlb3.gbs')
    assert job.status == programming.FAILED
    assert consumer in job.error and 'while fenced' in job.error
    assert host.reserved(PAC0) == 1
    assert base.check_consistent(host, PAC0) == 'failed'
    host.deallocate(consumer)


def test_a_fence_that_cannot_be_written_refuses(host, programmer):
    programmer.fencer.attempts = 2
    programmer.client.on('before', 'PUT', '/inventories/FPGA', down)
    programmer.client.on('before', 'PUT', '/inventories/FPGA', down)
    generation = host.generation(PAC0)
    job = programmer.program(host.nodename, PAC0, 'intel/nlb3.gbs')
    assert job.status == programming.REFUSED
    assert 'cannot fence' in job.error
    assert host.generation(PAC0) == generation
    assert base.check_consistent(host, PAC0) == 'unchanged'


def test_placement_unreadable_at_the_proof_refuses(host, programmer):
    programmer.client.on('before', 'GET', '/allocations', down)
    job = programmer.program(host.nodename, PAC0, 'intel/nlb3.gbs')
    assert job.status == programming.REFUSED
    assert 'cannot prove' in job.error
    assert base.check_consistent(host, PAC0) == 'unchanged'


def test_the_instance_a_device_is_programmed_for(host, programmer):
    """The hook for programming at spawn: ``consumer`` may hold it.

    Any other consumer still refuses the job.
    """
    instance = host.allocate(PAC0)
    job = programmer.program(host.nodename, PAC0, 'intel/nlb3.gbs',
                             consumer=instance)
    assert job.status == programming.SUCCEEDED, job
    assert job.consumer == instance
    assert programmer.job(job.id).to_dict()['consumer'] == instance
    other = str(uuid.uuid4())
    host.allocate(fakes.PAC1, other)
    job = programmer.program(host.nodename, fakes.PAC1, 'intel/nlb3.gbs',
                             consumer=instance)
    assert job.status == programming.REFUSED
    assert other in job.error and instance not in job.error
    host.deallocate(instance)
    host.deallocate(other)
