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
"""Scrub before reuse (cyborg_nova.scrub) on a fake host and a real store.

The units are the VFs of a QAT PF of the ``crypto-nic-host`` tree, found
by the real ``intel_qat`` driver; resets run the privileged function's
own code on the tree (:class:`tests.scrubhost.TreeOps`).
"""

import dataclasses
import os
import subprocess
import sys
import threading

import pytest

from cyborg_nova import assignments
from cyborg_nova import scrub
from cyborg_nova import store as state_store
from tests import scrubhost


def reset_file(host, unit):
    path = os.path.join(host.root, 'bus', 'pci', 'devices', unit, 'reset')
    with open(path) as f:
        return f.read()


@pytest.fixture
def host(tmp_path):
    return scrubhost.Host(str(tmp_path))


def test_freed_units_are_held_by_the_release_itself(host):
    units = host.give_and_free('c1', 2)
    holds = host.store.units.holds()
    assert [(h.unit, h.state, h.consumer) for h in holds] == [
        (u, 'scrubbing', 'c1') for u in units]
    # Reserved in Placement from the next report on.
    assert host.store.units.kept() == {host.dc.provider: 2}
    # Nobody can be given them: 14 of the 16 VFs are free.
    with pytest.raises(assignments.NoFreeUnits,
                       match='14 free \\(2 held back'):
        host.books.assign('c2', host.dc.provider, host.dc.accelerator.units,
                          15)
    other = host.books.assign('c2', host.dc.provider,
                              host.dc.accelerator.units, 14)
    assert not set(other) & set(units)


def test_a_scrub_resets_each_unit_then_frees_it(host):
    units = host.give_and_free('c1', 2)
    ops = scrubhost.TreeOps(host.root)
    outcomes = host.scrubber(ops).run()
    assert [(o.unit, o.result) for o in outcomes] == [
        (u, scrub.FREE) for u in units]
    assert outcomes[0].done == ('flr: reset %s (flr)' % units[0],)
    assert ops.resets == units
    assert [reset_file(host, u) for u in units] == ['1', '1']
    assert host.store.units.holds() == []
    assert host.store.units.kept() == {}
    # reserved written at once, for the device's state.
    assert host.fenced == [(scrubhost.DC_PF, 'ready')]
    # Nothing left to do.
    assert host.scrubber(ops).run() == []


def test_no_steps_configured_frees_at_once(tmp_path):
    host = scrubhost.Host(str(tmp_path), steps={'intel_qat': ''})
    host.give_and_free('c1', 1)
    ops = scrubhost.TreeOps(host.root)
    assert [o.result for o in host.scrubber(ops).run()] == [scrub.FREE]
    assert ops.resets == []
    assert host.store.units.holds() == []


def test_a_step_the_family_lacks_fails_and_fences(tmp_path):
    host = scrubhost.Host(str(tmp_path), steps={'intel_qat': 'flr+wipe'})
    (unit,) = host.give_and_free('c1', 1)
    ops = scrubhost.TreeOps(host.root)
    (outcome,) = host.scrubber(ops).run()
    assert outcome.result == scrub.FAILED
    assert "step wipe: intel_qat units have no scrub step 'wipe'" in (
        outcome.reason)
    # The steps before it ran.
    assert outcome.done == ('flr: reset %s (flr)' % unit,)
    row = host.store.devices(scrubhost.NODE)[scrubhost.DC_PF]
    assert row.state == state_store.FAILED
    assert row.reason == outcome.reason


def test_a_reset_the_kernel_refuses_keeps_the_unit_and_fences(host):
    units = host.give_and_free('c1', 2)
    ops = scrubhost.TreeOps(host.root, fail=[units[1]])
    outcomes = host.scrubber(ops).run()
    assert [o.result for o in outcomes] == [scrub.FREE, scrub.FAILED]
    (hold,) = host.store.units.holds()
    assert (hold.unit, hold.state) == (units[1], 'failed')
    assert 'step flr: ' in hold.reason
    assert 'Input/output error' in hold.reason
    assert 'device-set-state %s ready' % units[1] in hold.reason
    assert host.store.devices(scrubhost.NODE)[
        scrubhost.DC_PF].state == state_store.FAILED
    assert host.fenced == [(scrubhost.DC_PF, 'failed')]
    # Still held: never given, and counted as reserved.
    assert host.store.units.kept() == {host.dc.provider: 1}
    given = host.books.assign('c2', host.dc.provider,
                              host.dc.accelerator.units, 15)
    assert units[1] not in given


def test_a_step_that_hangs_fails_after_the_timeout(tmp_path):
    host = scrubhost.Host(str(tmp_path), step_timeout=1)
    (unit,) = host.give_and_free('c1', 1)
    hang = threading.Event()
    try:
        (outcome,) = host.scrubber(scrubhost.TreeOps(
            host.root, hang=hang)).run()
    finally:
        hang.set()
    assert outcome.result == scrub.FAILED
    assert 'step flr: did not finish within 1 s' in outcome.reason
    assert host.store.units.hold(unit).state == 'failed'


def test_one_time_use_units_wait_for_the_operator(tmp_path):
    host = scrubhost.Host(str(tmp_path), one_time_use=['intel_qat'])
    (unit,) = host.give_and_free('c1', 1)
    with pytest.raises(scrub.MarkRefused, match='still being scrubbed'):
        scrub.mark_ready(host.store, unit)
    ops = scrubhost.TreeOps(host.root)
    (outcome,) = host.scrubber(ops).run()
    assert (outcome.result, ops.resets) == (scrub.USED, [unit])
    assert host.store.units.kept() == {host.dc.provider: 1}
    assert scrub.mark_ready(host.store, unit).state == 'used'
    assert host.store.units.holds() == []
    with pytest.raises(scrub.MarkRefused, match='is not held back'):
        scrub.mark_ready(host.store, unit)


def test_one_time_use_by_device_address(tmp_path):
    host = scrubhost.Host(str(tmp_path), one_time_use=[scrubhost.DC_PF])
    assert scrub.one_time_use(host.conf, host.dc.accelerator)
    other = next(d for d in host.devices.values() if d is not host.dc)
    assert not scrub.one_time_use(host.conf, other.accelerator)


def test_a_device_not_on_the_host_keeps_its_units_held(host):
    (unit,) = host.give_and_free('c1', 1)
    host.devices.clear()
    ops = scrubhost.TreeOps(host.root)
    (outcome,) = host.scrubber(ops).run()
    assert outcome.result == scrub.WAITING
    hold = host.store.units.hold(unit)
    assert (hold.state, hold.owner) == ('scrubbing', None)
    assert ops.resets == []


def test_a_scrub_another_live_process_runs_is_left_to_it(host):
    (unit,) = host.give_and_free('c1', 1)
    alive = '%d@%s' % (os.getppid(), scrub.this_process().split('@')[1])
    with host.store.units.change() as table:
        assert table.claim(host.dc.provider, unit, alive)
    ops = scrubhost.TreeOps(host.root)
    assert host.scrubber(ops).run() == []
    assert host.store.units.hold(unit).owner == alive
    # A process that is gone (exited and reaped) leaves it to the next.
    child = subprocess.Popen([sys.executable, '-c', 'pass'])
    assert child.wait() == 0
    gone = '%d@%s' % (child.pid, scrub.this_process().split('@')[1])
    with host.store.units.change() as table:
        assert table.set_hold(host.dc.provider, unit, 'scrubbing')
        assert table.claim(host.dc.provider, unit, gone)
    assert scrub.gone_owners([gone, alive, 'x@elsewhere']) == [gone]
    (outcome,) = host.scrubber(ops).run()
    assert outcome.result == scrub.FREE


def test_a_unit_no_longer_on_its_device_is_let_go(host):
    (unit,) = host.give_and_free('c1', 1)
    # The device's VFs were removed since (driver-update --num-vfs).
    host.devices[host.dc.provider] = dataclasses.replace(
        host.dc, accelerator=dataclasses.replace(
            host.dc.accelerator, units=tuple(
                u for u in host.dc.accelerator.units if u != unit)))
    ops = scrubhost.TreeOps(host.root)
    (outcome,) = host.scrubber(ops).run()
    assert (outcome.result, outcome.reason) == (
        scrub.FREE, 'nothing to scrub: no longer a unit of the device')
    assert ops.resets == []
    assert host.store.units.holds() == []


def test_a_run_asked_for_while_one_runs_is_done_by_it(host):
    (first,) = host.give_and_free('c1', 1)
    hang = threading.Event()
    ops = scrubhost.TreeOps(host.root, hang=hang)
    scrubber = host.scrubber(ops)
    done = []
    running = threading.Thread(target=lambda: done.extend(scrubber.run()))
    running.start()
    try:
        # The first run is inside its reset; units freed now are left
        # to it: this call returns at once.
        for _ in range(200):
            if host.store.units.hold(first).owner is not None:
                break
            threading.Event().wait(0.01)
        (second,) = host.give_and_free('c2', 1)
        assert scrubber.run() == []
    finally:
        hang.set()
        running.join(30)
    assert [(o.unit, o.result) for o in done] == [
        (first, scrub.FREE), (second, scrub.FREE)]
    assert host.store.units.holds() == []
