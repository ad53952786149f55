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

"""A second writer changing provider generations under every operation.

Nova's update cycles, attaches and detaches, and the agent's fencing run
against a real Placement while another writer keeps changing the same
providers (their traits) or the same instance's allocations, each write
bumping a generation. Every operation must converge or fail cleanly and
no write may be lost: the other writer's last traits and allocations are
all there at the end, and so are ours.
"""

import functools
import random
import threading
import time

from cyborg_drivers import discovery
from cyborg_drivers import loader
from cyborg_nova.cmd import cli
from cyborg_nova import fencing
from cyborg_nova.hotplug import errors as hotplug_errors
from cyborg_nova.hotplug import flow as hotplug_flow
from cyborg_nova.hotplug import guest as hotplug_guest
from cyborg_nova import providers
from cyborg_nova import store as state_store
from tests import counts
from tests.functional.libvirt import libvirtd_fixture
from tests.functional.reliability import common
from tests.unit.programming import fakes

PAC0, PAC1 = fakes.PAC0, fakes.PAC1
WRITES = 60
ATTACHES = 20
FENCES = 60
# Between the other writer's writes: Placement here is one thread on
# SQLite, which a writer in a tight loop would have mostly to itself.
PAUSE = 0.02


def test_update_cycles_against_another_writer(host, live_placement):
    """Nova's update cycles while the host's state changes under them.

    A third actor (the CLI) flips PAC1 between held and ready in the
    state store, so nearly every cycle writes an inventory; the other
    writer changes traits on the accelerator providers at the same time.
    """
    # The accelerator providers (the compute node's own traits are the
    # virt driver's to set, wholesale).
    uuids = [host.uuid(PAC0), host.uuid(PAC1)]
    before = common.snapshot(host)
    store = state_store.StateStore(host.state_path)
    writer = common.TraitWriter(host.placement_url, uuids, PAUSE).start()
    worker = common.UpdateWorker(host, interval=0)
    flips = 0
    try:
        try:
            deadline = time.monotonic() + 300
            while writer.writes < WRITES and writer.running():
                assert time.monotonic() < deadline, (
                    'the other writer made %d writes in 300 s'
                    % writer.writes)
                flips += 1
                store.set_state(
                    host.nodename, PAC1,
                    state_store.HELD if flips % 2 else state_store.READY)
                worker.wait_cycles(len(worker.cycles) + 1)
        finally:
            writer.stop()
        worker.wait_ok(2)
    finally:
        worker.kill()
    failed = [c for c in worker.cycles if not c['ok']]
    assert not [c for c in failed if common.raised_by_us(c)], failed
    # The writers did collide (a cycle or the other writer conflicted).
    assert failed or writer.conflicts, 'the writers never collided'
    after = common.snapshot(host)
    # No lost update: the other writer's last trait on each provider...
    by_uuid = {host.uuid(PAC0): PAC0, host.uuid(PAC1): PAC1}
    for uuid, trait in writer.last.items():
        name = providers.provider_name(host.nodename, by_uuid[uuid])
        assert [t for t in after[name]['traits']
                if t.startswith('CUSTOM_OPERATOR_')] == [trait], name
    # ...and ours: the tree is the same, with PAC1 as last set.
    held = store.devices(host.nodename)[PAC1].state == state_store.HELD
    pac1 = providers.provider_name(host.nodename, PAC1)
    before[pac1]['inventories']['FPGA']['reserved'] = int(held)
    assert common.without_operator_traits(after) == before
    counts.record('conflicts in update cycles: %d cycles (%d failed and '
                  'retried next cycle), other writer: %d writes, %d '
                  'conflicts, state flips: %d'
                  % (len(worker.cycles), len(failed), writer.writes,
                     writer.conflicts, flips))


def test_fences_against_another_writer(host, live_placement):
    """The agent's Fencer flipping ``reserved`` under trait writes."""
    conf = cli.load_config([host.conf])
    accelerator = discovery.Discoverer(
        loader.load(conf, host.sections['cyborg_nova'][
            'enabled_drivers'].split(',')), host.root
    ).discover().by_address()[PAC0]
    uuid = host.uuid(PAC0)
    from cyborg_nova import placement
    placement.register_opts(conf)
    # Hooked: its inventory writes are counted; a write beyond one per
    # fence written met the other writer (a 409, retried).
    client = common.Hooked(placement.from_conf(conf))
    fencer = fencing.Fencer(client)
    writer = common.TraitWriter(host.placement_url, [uuid], PAUSE).start()
    outcomes = {}
    written = 0

    def inventory_puts():
        return [s for s in client.sent
                if s[1] == 'PUT' and '/inventories' in s[2]]

    def collided():
        return writer.conflicts or len(inventory_puts()) > written
    try:
        # FENCES fences, and more (up to five times as many) until the
        # two writers have met: on a loaded machine the thread's timing
        # can keep them apart for a while, which proves nothing.
        i = 0
        while i < FENCES or (not collided() and i < 5 * FENCES):
            wanted = state_store.HELD if i % 2 == 0 else state_store.READY
            i += 1
            result = fencer.apply(PAC0, uuid, wanted, accelerator)
            outcomes[result.outcome] = outcomes.get(result.outcome, 0) + 1
            if result.outcome == fencing.FAILED:
                # Kept conflicting: the agent retries after its next
                # discovery; so does this.
                assert 'conflict' in result.error or '409' in (
                    result.error), result.error
                result = fencer.apply(PAC0, uuid, wanted, accelerator)
            assert result.outcome == fencing.WRITTEN, result
            written += 1
            # Only this writer writes reserved: it is what was written.
            assert host.reserved(PAC0) == int(wanted == state_store.HELD)
    finally:
        writer.stop()
    assert writer.last[uuid] in host.traits(PAC0)
    assert [t for t in host.traits(PAC0)
            if t.startswith('CUSTOM_OPERATOR_')] == [writer.last[uuid]]
    fencer_conflicts = len(inventory_puts()) - written
    counts.record('conflicting fences: %d %s, %d of their writes met a '
                  'conflict; other writer: %d writes, %d conflicts'
                  % (i, outcomes, fencer_conflicts, writer.writes,
                     writer.conflicts))
    assert writer.conflicts or fencer_conflicts, 'the writers never collided'


def test_attaches_against_another_writer(qat_host, live_placement,
                                         domains):
    """Attach and detach while the instance's allocations keep changing.

    The other writer is Nova resizing the instance (its VCPU on the
    root provider, a consumer-generation-guarded read-modify-write)
    and an operator changing the accelerator provider's traits.
    """
    pf = '0000:70:00.0'
    rc = 'CUSTOM_QAT'
    domain = domains(running=False)
    qat_host.boot(domain.server)
    rp = qat_host.provider(pf)
    accelerator = qat_host.accelerators[pf]
    stop = threading.Event()
    resized = {'last': 1, 'writes': 0, 'conflicts': 0}

    def resize():
        rng = random.Random()
        while not stop.is_set():
            vcpus = rng.randint(1, 8)
            status, body = qat_host.placement(
                'GET', '/allocations/%s' % domain.server, version='1.38')
            allocs = {k: {'resources': dict(v['resources'])}
                      for k, v in body['allocations'].items()}
            allocs[qat_host.root]['resources']['VCPU'] = vcpus
            status, _ = qat_host.placement(
                'PUT', '/allocations/%s' % domain.server, {
                    'allocations': allocs,
                    'consumer_generation': body['consumer_generation'],
                    'project_id': body['project_id'],
                    'user_id': body['user_id'],
                    'consumer_type': body['consumer_type']},
                version='1.38')
            if status == 204:
                resized['last'] = vcpus
                resized['writes'] += 1
            else:
                assert status == 409, status
                resized['conflicts'] += 1
            stop.wait(PAUSE)
    resizer = threading.Thread(target=resize, daemon=True)
    writer = common.TraitWriter(qat_host.endpoint, [rp], PAUSE)
    resizer.start()
    writer.start()
    outcomes = {'attached': 0, 'detached': 0, 'gave up': 0}
    guest = hotplug_guest.open_guest(libvirtd_fixture.URI, domain.server)
    try:
        for i in range(ATTACHES * 2):
            # No nova-compute runs here to scrub what a detach frees
            # (held units would fill the PF): scrubbing is
            # tests/functional/nova/test_scrub.py's.
            operation = functools.partial(
                hotplug_flow.attach if i % 2 == 0 else hotplug_flow.detach,
                hold_freed=False)
            try:
                operation(qat_host.client, qat_host.store,
                          qat_host.nodename, guest, accelerator)
                outcomes['attached' if i % 2 == 0 else 'detached'] += 1
            except hotplug_errors.AttachError as exc:
                # Only for conflicts that went on and on, and nothing
                # was changed: the same operation again goes through.
                assert 'kept changing' in str(exc), exc
                outcomes['gave up'] += 1
                operation(qat_host.client, qat_host.store,
                          qat_host.nodename, guest, accelerator)
            units = libvirt_units(qat_host, domain.server)
            allocated = qat_host.allocations(domain.server)[
                'allocations'].get(rp, {}).get('resources')
            if i % 2 == 0:
                assert allocated == {rc: 1} and len(units) == 1
                assert domain.xml(inactive=True).count('<hostdev') == 1
            else:
                assert allocated is None and units == []
                assert '<hostdev' not in domain.xml(inactive=True)
    finally:
        guest.close()
        stop.set()
        resizer.join(30)
        writer.stop()
    final = qat_host.allocations(domain.server)['allocations']
    # The resize that was written last is there: nothing overwrote it.
    assert final[qat_host.root]['resources']['VCPU'] == resized['last']
    assert rp not in final
    assert writer.last[rp] in qat_host.placement(
        'GET', '/resource_providers/%s/traits' % rp)[1]['traits']
    assert resized['writes'] and resized['conflicts'] + writer.conflicts
    counts.record('conflicting attach+detach: %d each %s; resizes: %d '
                  'written, %d conflicts; trait writes: %d, %d conflicts'
                  % (ATTACHES, outcomes, resized['writes'],
                     resized['conflicts'], writer.writes, writer.conflicts))


def libvirt_units(qat_host, server):
    from cyborg_nova import assignments
    return [u for units in assignments.Assignments(
        qat_host.store).of_consumer(server).values()
        for u in units]
