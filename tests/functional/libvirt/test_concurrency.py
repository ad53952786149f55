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

"""Concurrent attaches to one PF never give a unit twice.

Nine instances ask at once for two VFs each of a PF with sixteen: eight
get theirs, the ninth is refused by Placement and changes nothing. Real
threads, a real state store, a real Placement and real libvirt (the
instances are stopped, so libvirt writes each PCI hostdev into their
definitions, which it does without VFIO).
"""

import threading

from cyborg_nova import assignments
from cyborg_nova.hotplug import errors as hotplug_errors
from cyborg_nova.hotplug import flow as hotplug_flow
from cyborg_nova.hotplug import guest as hotplug_guest
from cyborg_nova import store as state_store
from tests.functional.libvirt import conftest
from tests.functional.libvirt import libvirtd_fixture

PF = '0000:e8:00.0'
RC = 'CUSTOM_QAT'
INSTANCES = 9
COUNT = 2


def _run_all(target, items):
    barrier = threading.Barrier(len(items))
    results = {}

    def run(item):
        barrier.wait()
        try:
            results[item] = target(item)
        except hotplug_errors.AttachError as exc:
            results[item] = exc
    threads = [threading.Thread(target=run, args=(i,)) for i in items]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return results


def test_concurrent_attaches_never_share_a_unit(host, domains):
    accelerator = host.accelerators[PF]
    assert len(accelerator.units) == 16
    rp = host.provider(PF)
    instances = [domains(running=False) for _ in range(INSTANCES)]
    booted = {d.server: host.boot(d.server) for d in instances}
    by_server = {d.server: d for d in instances}

    def attach_one(server):
        # Each thread as its own process would: own store handle, own
        # libvirt connection.
        store = state_store.StateStore(host.state_path)
        guest = hotplug_guest.open_guest(libvirtd_fixture.URI, server)
        try:
            return hotplug_flow.attach(host.client, store, host.nodename,
                                       guest, accelerator, count=COUNT)
        finally:
            guest.close()

    results = _run_all(attach_one, list(by_server))
    done = {s: r for s, r in results.items()
            if isinstance(r, hotplug_flow.Result)}
    refused = {s: r for s, r in results.items()
               if isinstance(r, hotplug_errors.AttachError)}
    assert len(done) == 16 // COUNT and len(refused) == 1, results

    units = [u for r in done.values() for u in r.units]
    assert len(units) == len(set(units)) == 16
    assert set(units) == set(accelerator.units)
    recorded = assignments.Assignments(host.store).of_provider(rp)
    assert sorted(a.unit for a in recorded) == sorted(units)
    for server, result in done.items():
        assert {a.unit for a in recorded if a.consumer == server} == set(
            result.units)
        definition = by_server[server].xml(inactive=True)
        for unit in accelerator.units:
            bus, rest = unit.split(':')[1:]
            slot, function = rest.split('.')
            hostdev = ("<address domain='0x0000' bus='0x%s' slot='0x%s' "
                       "function='0x%s'/>" % (bus, slot, function))
            assert (hostdev in definition) == (unit in result.units)
        assert host.allocations(server)['allocations'][rp][
            'resources'] == {RC: COUNT}
    assert host.usage(PF) == {RC: 16}

    (server, error), = refused.items()
    assert 'Placement refused the allocation change' in str(error)
    after = host.allocations(server)
    # Nothing written (the root provider's generation moves with the
    # other instances' boots).
    assert after['consumer_generation'] == booted[server][
        'consumer_generation']
    assert conftest.without_generations(after) == (
        conftest.without_generations(booted[server]))
    assert assignments.Assignments(host.store).of_consumer(server) == {}
    assert '<hostdev' not in by_server[server].xml(inactive=True)

    # And all detached at once: everything is free again.
    def detach_one(server):
        store = state_store.StateStore(host.state_path)
        guest = hotplug_guest.open_guest(libvirtd_fixture.URI, server)
        try:
            return hotplug_flow.detach(host.client, store, host.nodename,
                                       guest, accelerator, timeout=10)
        finally:
            guest.close()
    results = _run_all(detach_one, list(done))
    assert all(isinstance(r, hotplug_flow.Result)
               for r in results.values()), results
    assert host.usage(PF) == {RC: 0}
    assert assignments.Assignments(host.store).of_provider(
        rp) == []
    for server in done:
        assert conftest.without_generations(host.allocations(server)) == (
            conftest.without_generations(booted[server]))
        assert '<hostdev' not in by_server[server].xml(inactive=True)
