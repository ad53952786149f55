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

"""Scrub before reuse, in Nova's own flows on the real libvirt driver.

Two computes from the ``crypto-nic-host`` profile, real Placement. A
unit a guest gives up (delete, resize confirm and revert) is held by
nova-compute, reserved in Placement, and reset through the privileged
function (``privsep.pci._reset_function`` on the compute's tree, see
:class:`~tests.scrubhost.ScrubKernel`) before anyone else
can get it. The test holds the resets (``scrub_kernel.gate``) to look
at the units while they are held.
"""

import subprocess
import sys
import time

from cyborg_nova import assignments
from cyborg_nova import scrub
from cyborg_nova import store as state_store
from tests.functional.nova import moves

DC_PF = moves.DC_PF


class TestScrub(moves.MovesTestCase):

    def setUp(self):
        super().setUp()
        self.dc = {host: self.accelerator_providers(host)[DC_PF]['uuid']
                   for host in self.hosts}

    def holds(self, host, state=None):
        return {h.unit: h for h in self.store(host).store.units.holds(
            provider=self.dc[host], state=state)}

    def wait_holds(self, host, predicate, what):
        for _ in range(400):
            holds = self.holds(host)
            if predicate(holds):
                return holds
            time.sleep(0.05)
        self.fail('%s: never happened; holds of %s: %s'
                  % (what, host, holds))

    def resets(self, host):
        root = self.trees[host]
        return [unit for tree, unit in self.scrub_kernel.resets
                if tree == root]

    def dc_reserved(self, host):
        return self.reserved(host, DC_PF)

    def wait_dc_reserved(self, host, expected, what):
        """Wait for the scrubber's own ``reserved`` write, no cycle run.

        It comes after the holds it follows from are written (the value
        is computed from them), so a test that saw the holds change may
        read Placement before it.
        """
        for _ in range(400):
            reserved = self.dc_reserved(host)
            if reserved == expected:
                return
            time.sleep(0.05)
        self.fail('%s: reserved of %s stayed %d, not %d'
                  % (what, host, reserved, expected))

    def test_deleted_units_are_held_reserved_and_reset_before_reuse(self):
        all16 = self.qat_flavor(16)
        server = self.start_on('host1', all16)
        units = self.units(server, 'host1')
        self.scrub_kernel.gate.clear()
        self.delete(server)
        # Held in the release itself; Nova's update after the destroy
        # reported them reserved before the allocation went.
        held = self.holds('host1')
        self.assertEqual(units, sorted(held))
        self.assertEqual({'scrubbing'}, {h.state for h in held.values()})
        self.assertEqual({server['id']}, {h.consumer for h in held.values()})
        self.assertEqual(16, self.dc_reserved('host1'))
        # A server built meanwhile never gets them: nothing of the PF is
        # free in Placement, so the scheduler finds no host for it.
        waiting = self.start_on('host1', self.qat_flavor(1),
                                expected_state='ERROR')
        self.assertIn('No valid host', waiting['fault']['message'])
        self.assertEqual([], self.units(waiting))
        self.assertEqual([], self.resets('host1'))
        self.scrub_kernel.gate.set()
        self.wait_holds('host1', lambda h: not h, 'the scrub ending')
        self.assertEqual(units, sorted(self.resets('host1')))
        # The scrub's end writes reserved back itself, before any cycle.
        self.wait_dc_reserved('host1', 0, 'the scrub ending')
        again = self.start_on('host1', all16)
        self.assertEqual(units, self.units(again, 'host1'))
        self.check()

    def test_confirm_and_revert_hold_what_each_side_gave_up(self):
        server = self.start_on('host1', self.qat_flavor(2))
        source = self.units(server, 'host1')
        server = self.resize(server, self.qat_flavor(1), host='host2')
        dest = self.units(server, 'host2')
        self.scrub_kernel.gate.clear()
        server = self._confirm_resize(server)
        # The source's units, which the migration record held.
        held = self.wait_holds('host1', bool, 'the source holding units')
        self.assertEqual(source, sorted(held))
        self.assertEqual({self.migration_uuid(server)},
                         {h.consumer for h in held.values()})
        self.assertEqual({}, self.holds('host2'))
        self.scrub_kernel.gate.set()
        self.wait_holds('host1', lambda h: not h, 'the scrub ending')
        self.check()
        # Back to host1, then reverted: host1's new units are held.
        server = self.resize(server, self.qat_flavor(2), host='host1')
        new = self.units(server, 'host1')
        self.scrub_kernel.gate.clear()
        server = self._revert_resize(server)
        self.assertEqual('host2', server['OS-EXT-SRV-ATTR:host'])
        self.assertEqual(dest, self.units(server, 'host2'))
        held = self.wait_holds('host1', bool, 'the reverted side holding')
        self.assertEqual(new, sorted(held))
        self.scrub_kernel.gate.set()
        self.wait_holds('host1', lambda h: not h, 'the scrub ending')
        self.assertEqual(sorted(source + new), sorted(self.resets('host1')))
        self.check()

    def test_a_failed_scrub_fences_the_device_until_the_operator(self):
        server = self.start_on('host1', self.qat_flavor(1))
        (unit,) = self.units(server, 'host1')
        self.scrub_kernel.failing.add(unit)
        self.delete(server)
        held = self.wait_holds(
            'host1', lambda h: h.get(unit) and h[unit].state == 'failed',
            'the scrub failing')
        self.assertIn('step flr', held[unit].reason)
        self.assertIn('Input/output error', held[unit].reason)
        store = self.store('host1').store
        row = store.devices('host1')[DC_PF]
        self.assertEqual(state_store.FAILED, row.state)
        self.assertIn('scrub of unit %s failed' % unit, row.reason)
        # Fenced by the scrub itself: nothing of the PF can be scheduled.
        self.wait_dc_reserved('host1', 16, 'the failed scrub fencing')
        self.start_on('host1', self.qat_flavor(1), expected_state='ERROR')
        # Marking the device ready leaves the dirty unit held.
        store.set_state('host1', DC_PF, state_store.READY, None)
        self.cycle()
        self.assertEqual(1, self.dc_reserved('host1'))
        other = self.start_on('host1', self.qat_flavor(15))
        self.assertNotIn(unit, self.units(other, 'host1'))
        self.assertEqual('failed', scrub.mark_ready(store, unit).state)
        self.cycle()
        self.assertEqual(0, self.dc_reserved('host1'))
        last = self.start_on('host1', self.qat_flavor(1))
        self.assertEqual([unit], self.units(last, 'host1'))
        self.check()

    def test_one_time_use_units_wait_for_the_operator(self):
        self.flags(one_time_use=[DC_PF], group='cyborg_scrub')
        server = self.start_on('host1', self.qat_flavor(2))
        units = self.units(server, 'host1')
        self.delete(server)
        held = self.wait_holds(
            'host1', lambda h: h and all(x.state == 'used'
                                         for x in h.values()),
            'the units waiting for the operator')
        self.assertEqual(units, sorted(held))
        self.assertEqual(units, sorted(self.resets('host1')))
        self.cycle()
        self.assertEqual(2, self.dc_reserved('host1'))
        self.assertIn('HW_PCI_ONE_TIME_USE',
                      self._get_provider_traits(self.dc['host1']))
        other = self.start_on('host1', self.qat_flavor(14))
        self.assertEqual([], sorted(set(units) & set(self.units(other))))
        self.start_on('host1', self.qat_flavor(1), expected_state='ERROR')
        store = self.store('host1').store
        self.assertEqual('used', scrub.mark_ready(store, units[0]).state)
        self.cycle()
        self.assertEqual(1, self.dc_reserved('host1'))
        last = self.start_on('host1', self.qat_flavor(1))
        self.assertEqual([units[0]], self.units(last, 'host1'))
        self.check()

    def test_scrub_disabled_hands_units_back_at_once(self):
        self.flags(enabled=False, group='cyborg_scrub')
        for host in self.hosts:
            self.restart_host(host)
        server = self.start_on('host1', self.qat_flavor(16))
        units = self.units(server, 'host1')
        self.scrub_kernel.gate.clear()
        self.delete(server)
        self.assertEqual({}, self.holds('host1'))
        self.assertEqual(0, self.dc_reserved('host1'))
        again = self.start_on('host1', self.qat_flavor(16))
        self.assertEqual(units, self.units(again, 'host1'))
        self.assertEqual([], self.resets('host1'))
        self.scrub_kernel.gate.set()
        self.check()

    def test_a_scrub_a_dead_process_left_ends_at_the_next_update(self):
        # What a nova-compute killed mid-scrub leaves: a held unit
        # claimed by a process that is gone.
        store = self.store('host1').store
        books = assignments.Assignments(store, hold_freed=True)
        (unit,) = books.assign('gone-guest', self.dc['host1'],
                               ['0000:70:00.3'], 1)
        books.release('gone-guest', self.dc['host1'])
        child = subprocess.Popen([sys.executable, '-c', 'pass'])
        self.assertEqual(0, child.wait())
        dead = '%d@%s' % (child.pid, scrub.this_process().split('@')[1])
        with store.units.change() as table:
            self.assertTrue(table.claim(self.dc['host1'], unit, dead))
        self.cycle()
        self.wait_holds('host1', lambda h: not h, 'the scrub ending')
        self.assertEqual([unit], self.resets('host1'))
        self.wait_dc_reserved('host1', 0, 'the scrub ending')
