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

"""A real Placement killed (SIGKILL) and started again mid-operation.

Each test kills the Placement server process at moments that fall in
the middle of an operation (an update cycle of nova-compute, an attach,
a reprogramming, a driver uninstall) and starts it again on the same
port and database. Required of every operation: no crash, a bounded
time per attempt, nothing lost from the host's state store, and the
same end state once Placement is back as without the outage.
"""

import random
import threading
import time

import pytest

from cyborg_nova.cmd import cli
from cyborg_nova.cmd import hostargs
from cyborg_nova import lifecycle
from cyborg_nova import placement
from cyborg_nova import programming
from cyborg_nova import providers
from cyborg_nova import store as state_store
from tests import counts
from tests.functional.programming import base
from tests.functional.reliability import common
from tests.functional.reliability import placement as placement_mod
from tests.unit.programming import fakes

PAC0, PAC1 = fakes.PAC0, fakes.PAC1
OUTAGES = 2


def test_update_cycles_survive_outages_and_converge(host, live_placement):
    """nova-compute's update through Placement restarts.

    While Placement is down, the host changes (a device is held in the
    state store); once it is back, the next cycles report exactly the
    tree an undisturbed host reports, with the change, and the instance
    holding a device keeps its allocation.
    """
    rng = random.Random()
    instance = host.allocate(PAC0)
    expected = common.snapshot(host)
    worker = common.UpdateWorker(host)
    try:
        worker.wait_ok(2)
        for outage in range(OUTAGES):
            # Somewhere in a cycle (one takes ~0.1-0.3 s here).
            time.sleep(rng.uniform(0.0, 0.4))
            live_placement.kill()
            if outage == OUTAGES - 1:
                state_store.StateStore(host.state_path).set_state(
                    host.nodename, PAC1, state_store.HELD, 'held in an outage')
            time.sleep(rng.uniform(0.2, 1.0))
            live_placement.start()
            worker.wait_ok(2)
    finally:
        code = worker.kill()
    assert code == -9, worker.stderr[-3000:]
    cycles = worker.cycles
    failed = [c for c in cycles if not c['ok']]
    # The outages were seen (cycles failed), and none hung: each cycle
    # took bounded time (keystoneauth's timeout, no endless retry).
    assert failed, cycles
    assert max(c['seconds'] for c in cycles) < 30, cycles
    # Failed in Nova's report client (which the resource tracker's
    # periodic task logs), never in cyborg-nova's own code.
    assert not [c for c in failed if common.raised_by_us(c)], failed
    # Converged: the same tree, plus the change made during the outage.
    pac1 = providers.provider_name(host.nodename, PAC1)
    expected[pac1]['inventories']['FPGA']['reserved'] = 1
    assert common.snapshot(host) == expected
    assert common.allocations(host, instance) == {
        host.uuid(PAC0): {'FPGA': 1}}
    row = state_store.StateStore(host.state_path).devices(host.nodename)[PAC1]
    assert (row.state, row.reason) == (state_store.HELD, 'held in an outage')
    assert placement_mod.integrity(host.state_path) == 'ok'
    counts.record('outages during update cycles: %d cycles, failed during '
                  '%d outages: %d' % (len(cycles), OUTAGES, len(failed)))


@pytest.fixture
def programmer(host):
    """The Programmer ``cyborg-nova program`` builds, its client hooked."""
    with base.hooked_programmer(host, common.Hooked) as programmer:
        yield programmer


# Placement killed right before the nth request of a reprogramming:
# (method, url fragment, nth, whether the fencer's retries are given
# time to wait out the outage, what becomes of the job).
PROGRAM_POINTS = [
    ('PUT', '/inventories/', 1, False, 'refused'),    # fencing
    ('GET', '/allocations', 1, False, 'refused'),     # proving it free
    ('PUT', '/traits', 1, False, 'succeeded'),        # swapping traits
    ('PUT', '/inventories/', 2, False, 'succeeded'),  # unfencing
    ('PUT', '/inventories/', 1, True, 'succeeded'),   # fencing, patient
]
BITSTREAMS = [('intel/nlb3.gbs', fakes.NLB3), ('intel/dma.gbs',
                                               fakes.DMA_AFU)]
# Fencer retries that outlast any restart of Placement here: the delays
# before attempts 2..8 add up to at least 0.5 * 127 * 0.5 s (jitter).
PATIENT = {'attempts': 8, 'backoff': 0.5}


def test_reprogramming_through_outages(host, live_placement, programmer):
    """Reprogramming with Placement killed at one request after another.

    One device is reprogrammed again and again; each time Placement is
    killed right before another of the requests. Either it stays down
    until the job has given up (the outcome then does not hang on how
    fast Placement restarts), or it comes back while the fencer, given
    long retries, is still trying.

    Whatever the retries could not wait out, the job is journaled and
    finished by the recovery: refused with the device as it was, or
    programmed, and either way unfenced with traits matching sysfs.
    """
    loaded = host.loaded(PAC0)
    before = common.snapshot(host)
    quick = {k: getattr(programmer.fencer, k) for k in PATIENT}
    for i, (method, fragment, nth, patient, outcome) in enumerate(
            PROGRAM_POINTS):
        bitstream, afu = BITSTREAMS[i % 2]
        point = (method, fragment, nth, patient)
        restarted = threading.Event()

        def restart(delay=0.0):
            # Back only once the fencer's first backoff (at most 0.75 s)
            # is over, so at least two attempts meet the outage however
            # fast Placement starts on this machine.
            time.sleep(delay)
            live_placement.start()
            restarted.set()

        def kill(patient=patient):
            live_placement.kill()
            if patient:
                # Back after a moment, as a restarted Placement is.
                threading.Thread(target=restart,
                                 args=(2 * PATIENT['backoff'],)).start()
        for k, v in (PATIENT if patient else quick).items():
            setattr(programmer.fencer, k, v)
        programmer.client.on('before', method, fragment, kill, nth)
        started = time.monotonic()
        job = programmer.program(host.nodename, PAC0, bitstream)
        took = time.monotonic() - started
        unanswered = [t for t, _, _, answered in programmer.client.sent
                      if t >= started and not answered]
        counts.record('outage during reprogramming at %s: %s after %.1f s, '
                      '%d requests unanswered'
                      % (point, job.status, took, len(unanswered)))
        assert took < 120, point
        assert not programmer.client.pending(), point
        if patient:
            # Retried while Placement restarted, each wait longer than the
            # one before (doubled, jittered by 0.5-1.5), within the bound.
            assert 2 <= len(unanswered) <= PATIENT['attempts'], unanswered
            gaps = [b - a for a, b in zip(unanswered, unanswered[1:])]
            for k, gap in enumerate(gaps):
                assert gap >= PATIENT['backoff'] * 2 ** k * 0.5, gaps
        if not patient:
            restart()
        assert restarted.wait(60), point
        if job.status == programming.RUNNING:
            # Left for the recovery (the agent runs it at its start).
            (job,) = programmer.recover()
        assert job.status == outcome, (point, job)
        if outcome == 'refused':
            assert 'cannot reach Placement' in job.error, job.error
        else:
            loaded = fakes.hexid(afu)
        assert host.loaded(PAC0) == loaded
        assert host.reserved(PAC0) == 0
        assert base.check_consistent(host, PAC0) in ('programmed',
                                                     'unchanged')
    # Nova's next update agrees: nothing but the function trait moved.
    after = common.snapshot(host)
    host.report()
    assert common.snapshot(host) == after
    name = providers.provider_name(host.nodename, PAC0)
    before[name]['traits'] = after[name]['traits']
    assert after == before
    assert [j['status'] for j in host.jobs()] == [
        p[-1] for p in PROGRAM_POINTS]


def test_driver_uninstall_through_outages(host, live_placement):
    """``driver-uninstall`` and its provider removal through outages.

    Placement is killed in the middle of the uninstall, then during the
    updates of nova-compute that remove the driver's providers.

    Placement gone while the driver's devices are checked for instances
    refuses the uninstall and changes nothing on the host; once it is
    back the uninstall goes through, and the updates that an outage
    interrupts remove the driver's providers, leaving the rest as it was.
    """
    conf = cli.load_config([host.conf])
    store = state_store.StateStore(host.state_path)
    before = common.snapshot(host)
    rows = store.devices(host.nodename)
    placement.register_opts(conf)
    client = common.Hooked(placement.from_conf(conf))
    lookup = hostargs.allocations_lookup(client)
    # intel_fpga has two PACs: Placement dies between their checks.
    client.on('after', 'GET', '/allocations', live_placement.kill)
    with pytest.raises(lifecycle.LifecycleError) as refused:
        lifecycle.uninstall(conf, store, host.nodename, 'intel_fpga',
                            lookup)
    assert 'cannot read the allocations' in str(refused.value)
    assert 'nothing was changed' in str(refused.value)
    assert store.driver_choices() == {}
    assert store.devices(host.nodename) == rows
    live_placement.start()
    assert common.snapshot(host) == before

    _, (alveo,) = lifecycle.discover_with(conf, 'xilinx_fpga')
    lifecycle.uninstall(conf, store, host.nodename, 'xilinx_fpga', lookup)
    assert store.driver_choices() == {'xilinx_fpga': False}
    live_placement.kill()
    worker = common.UpdateWorker(host)
    try:
        worker.wait_cycles(3)
        live_placement.start()
        worker.wait_ok(2)
    finally:
        worker.kill()
    failed = [c for c in worker.cycles if not c['ok']]
    assert len(failed) >= 3, worker.cycles
    assert not [c for c in failed if common.raised_by_us(c)], failed
    gone = providers.provider_name(host.nodename, alveo.address)
    del before[gone]
    assert common.snapshot(host) == before
    # The host's choice stayed; the other devices' rows are as they were.
    assert store.driver_choices() == {'xilinx_fpga': False}
    now = store.devices(host.nodename)
    assert alveo.address not in now
    assert {a: (r.state, r.owned_traits) for a, r in now.items()} == {
        a: (r.state, r.owned_traits) for a, r in rows.items()
        if a != alveo.address}
    assert placement_mod.integrity(host.state_path) == 'ok'
