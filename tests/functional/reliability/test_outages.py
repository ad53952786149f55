"""A real Placement killed (SIGKILL) and started again mid-operation.

Each test kills the Placement server process at moments that fall in
the middle of an operation (an update cycle of nova-compute, an attach,
a reprogramming, a driver uninstall) and starts it again on the same
port and database. Required of every operation: no crash, a bounded
time per attempt, nothing lost from the host's state store, and the
same end state once Placement is back as without the outage.
"""

import random
import time

from cyborg_nova import providers
from cyborg_nova import state
from tests.functional.reliability import common
from tests.functional.reliability import placement as placement_mod
from tests.unit.programming import fakes

PAC0, PAC1 = fakes.PAC0, fakes.PAC1
OUTAGES = 3


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
            if outage == 1:
                state.StateStore(host.state_path).set_state(
                    host.nodename, PAC1, state.HELD, 'held in an outage')
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
    row = state.StateStore(host.state_path).devices(host.nodename)[PAC1]
    assert (row.state, row.reason) == (state.HELD, 'held in an outage')
    assert placement_mod.integrity(host.state_path) == 'ok'
    print('update cycles: %d, failed during %d outages: %d'
          % (len(cycles), OUTAGES, len(failed)))
