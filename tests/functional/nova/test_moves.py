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

"""Every Nova lifecycle operation keeps units, allocations and XML in step.

Two computes from the ``crypto-nic-host`` profile, the real
LibvirtDriver on fakelibvirt, real Placement. Each step is followed by
:meth:`~tests.functional.nova.moves.MovesTestCase.check`: per provider
and consumer the store's units equal Placement's allocation, no unit
serves two consumers, and every guest's XML has exactly its units.
"""

import os
import shutil

import fixtures
from nova import context as nova_context
from nova import objects
from nova.scheduler.client import report
from nova.tests.fixtures import libvirt as fakelibvirt

from cyborg_nova.hotplug import flow
from cyborg_nova.hotplug import guest as hotplug_guest
from cyborg_nova import store as state_store
from cyborg_nova.virt import extension
from tests.functional.nova import moves


class TestEvacuate(moves.MovesTestCase):

    def _evacuate(self, server):
        self.stop_host('host1')
        # Since microversion 2.95 an evacuated server arrives stopped.
        server = self._evacuate_server(server, expected_host='host2')
        self.assertEqual('host2', server['OS-EXT-SRV-ATTR:host'])
        self._start_server(server)
        return self._wait_for_state_change(server, 'ACTIVE')

    def test_evacuated_guest_keeps_distinct_units_and_source_cleans_up(self):
        flavor = self.qat_flavor(2)
        server = self.start_on('host1', flavor)
        source_units = self.units(server, 'host1')
        self.assertEqual(2, len(source_units))
        self.check()
        server = self._evacuate(server)
        # Placement holds both hosts' providers for the instance until
        # the source comes back; each host's units follow its own.
        dest_units = self.units(server, 'host2')
        self.assertEqual(2, len(dest_units))
        self.assertEqual(dest_units, self.xml_units(server, 'host2'))
        # A new server on the destination never gets the same VFs.
        other = self.start_on('host2', flavor)
        self.assertEqual([], sorted(set(self.units(other, 'host2')) &
                                    set(dest_units)))
        self.check()
        # The evacuated server keeps its VFs across stop and start.
        self._stop_server(server)
        server = self._start_server(server)
        server = self._wait_for_state_change(server, 'ACTIVE')
        self.assertEqual(dest_units, self.xml_units(server, 'host2'))
        self.assertEqual(dest_units, self.units(server, 'host2'))
        # The source still records its units while it is down ...
        self.assertEqual(source_units, self.units(server, 'host1'))
        # ... and releases them when it comes back.
        self.restart_host('host1')
        self.assertEqual([], self.units(server, 'host1'))
        self.check()

    def test_source_back_while_the_destination_is_down(self):
        # The source asks the destination whether their storage is
        # shared; with the destination down that call fails after
        # rpc_response_timeout and Nova destroys the guest all the same.
        self.flags(rpc_response_timeout=2)
        flavor = self.qat_flavor(2)
        server = self.start_on('host1', flavor)
        source_units = self.units(server, 'host1')
        server = self._evacuate(server)
        dest_units = self.units(server, 'host2')
        self.stop_host('host2')
        self.restart_host('host1')
        self.cycle()
        self.assertEqual([], self.units(server, 'host1'))
        self.assertEqual({}, self.kept('host1'))
        # Its old units are free on the source: a new server may get
        # them, while the destination keeps the evacuee's.
        other = self.start_on('host1', self.qat_flavor(16))
        self.assertTrue(set(source_units) <= set(self.units(other)))
        self.assertEqual(dest_units, self.units(server, 'host2'))
        self.restart_host('host2')
        self.cycle()
        self.assertEqual(dest_units, self.units(server, 'host2'))
        self.check()

    def test_source_down_and_instance_deleted_meanwhile(self):
        flavor = self.qat_flavor(2)
        server = self.start_on('host1', flavor)
        server = self._evacuate(server)
        self.delete(server)
        self.restart_host('host1')
        self.cycle()
        self.assertEqual([], self.units(server))
        self.check()


class TestResize(moves.MovesTestCase):

    def test_revert_on_another_host_frees_the_destination(self):
        # The harness's computes share instance storage: Nova reverts
        # with destroy_disks=False, which used to keep the units.
        big = self.qat_flavor(16)
        server = self.start_on('host1', self.qat_flavor(2))
        before = self.units(server, 'host1')
        server = self.resize(server, self.qat_flavor(4), host='host2')
        self.assertEqual(4, len(self.units(server, 'host2')))
        # The source's units now serve the migration record.
        self.assertEqual(before,
                         self.units(self.migration_uuid(server), 'host1'))
        self.check()
        server = self._revert_resize(server)
        self.assertEqual('host1', server['OS-EXT-SRV-ATTR:host'])
        self.assertEqual(before, self.xml_units(server, 'host1'))
        self.assertEqual([], self.units(server, 'host2'))
        self.check()
        # All 16 VFs of the destination's PF can be taken again.
        full = self.start_on('host2', big)
        self.assertEqual(16, len(self.units(full, 'host2')))
        self.check()

    def test_confirm_on_another_host(self):
        server = self.start_on('host1', self.qat_flavor(2))
        server = self.resize(server, self.qat_flavor(1), host='host2')
        server = self._confirm_resize(server)
        self.assertEqual([], self.units(server, 'host1'))
        self.assertEqual(1, len(self.units(server, 'host2')))
        self.check()

    def _same_host(self, old, new, confirm):
        server = self.start_on('host1', old)
        before = self.units(server, 'host1')
        server = self.resize(server, new, host='host1')
        migration = self.migration_uuid(server)
        # The stopped guest's units serve the migration record, the new
        # guest's are its own: never the same VF twice.
        self.assertEqual(before, self.units(migration, 'host1'))
        after = self.units(server, 'host1')
        self.assertEqual([], sorted(set(before) & set(after)))
        self.check()
        if confirm:
            server = self._confirm_resize(server)
            self.assertEqual(after, self.units(server, 'host1'))
        else:
            server = self._revert_resize(server)
            self.assertEqual(before, self.units(server, 'host1'))
        self.assertEqual([], self.units(migration))
        self.check()
        # The next server never gets a VF the guest still uses.
        other = self.start_on('host1', self.qat_flavor(2), )
        self.assertEqual([], sorted(set(self.units(other)) &
                                    set(self.units(server))))
        self.check()
        return server

    def test_same_host_confirm_same_count(self):
        self._same_host(self.qat_flavor(2), self.qat_flavor(2, 'qat2b'),
                        confirm=True)

    def test_same_host_confirm_more(self):
        self._same_host(self.qat_flavor(2), self.qat_flavor(3), True)

    def test_same_host_confirm_fewer(self):
        self._same_host(self.qat_flavor(3), self.qat_flavor(1), True)

    def test_same_host_confirm_to_no_accelerator(self):
        server = self._same_host(self.qat_flavor(2),
                                 self.flavor({}, name='plain'), True)
        self.assertEqual([], self.units(server))
        self.assertEqual([], self.xml_units(server, 'host1'))

    def test_same_host_revert_same_count(self):
        self._same_host(self.qat_flavor(2), self.qat_flavor(2, 'qat2b'),
                        confirm=False)

    def test_same_host_revert_more(self):
        self._same_host(self.qat_flavor(2), self.qat_flavor(3), False)

    def test_same_host_revert_fewer(self):
        self._same_host(self.qat_flavor(3), self.qat_flavor(1), False)

    def test_same_host_revert_from_no_accelerator(self):
        self._same_host(self.qat_flavor(2), self.flavor({}, name='plain'),
                        False)

    def test_other_host_to_more_and_to_none(self):
        server = self.start_on('host1', self.qat_flavor(2))
        server = self.resize(server, self.qat_flavor(3), host='host2')
        server = self._confirm_resize(server)
        self.assertEqual(3, len(self.xml_units(server, 'host2')))
        self.check()
        server = self.resize(server, self.flavor({}, name='plain'),
                             host='host1')
        self.assertEqual([], self.xml_units(server, 'host1'))
        server = self._confirm_resize(server)
        self.assertEqual([], self.units(server))
        self.check()

    def test_cold_migrate_confirm_and_revert(self):
        server = self.start_on('host1', self.qat_flavor(2))
        before = self.units(server, 'host1')
        server = self._migrate_server(server)
        self.assertEqual('host2', server['OS-EXT-SRV-ATTR:host'])
        self.check()
        server = self._revert_resize(server)
        self.assertEqual(before, self.xml_units(server, 'host1'))
        self.check()
        server = self._migrate_server(server)
        server = self._confirm_resize(server)
        self.assertEqual([], self.units(server, 'host1'))
        self.assertEqual(2, len(self.xml_units(server, 'host2')))
        self.check()


class TestLiveAttached(moves.MovesTestCase):
    """A device attached live (instance-attach) and a cold move."""

    OTHER_PF = '0000:e8:00.0'
    # Casts stay casts, as in a real cloud: the source's refusal reaches
    # the API as the instance's rollback, not as an error of the call.
    CAST_AS_CALL = False

    def attach(self, server):
        """What ``cyborg-nova instance-attach`` does, on fakelibvirt."""
        driver = self.computes['host1'].driver
        accelerator = driver._updater().discoverer.discover().by_address()[
            self.OTHER_PF]
        guest = hotplug_guest.LibvirtGuest(
            fakelibvirt, driver._host.get_connection(),
            self.domain('host1', server), server['id'],
            hotplug_guest.PciHostdev())
        client = extension.ReportClientAdapter(
            report.report_client_singleton())
        store = state_store.StateStore(
            os.path.join(self.workdir, 'host1', 'state.sqlite'))
        return client, store, guest, accelerator

    def test_a_live_attached_device_refuses_the_move_naming_it(self):
        server = self.start_on('host1', self.qat_flavor(2))
        client, store, guest, acc = self.attach(server)
        result = flow.attach(client, store, 'host1', guest, acc, 1)
        self.assertEqual(1, len(result.units))
        usage = self.usage()
        held = self.units(server, 'host1')
        self.assertEqual(3, len(held))
        # The cold migration is refused on the source before the guest
        # is touched; Nova puts everything back.
        self.api.post_server_action(server['id'], {'migrate': None})
        # The source's event ends once Nova gave the allocations back.
        self._wait_for_instance_action_event(
            server, 'migrate', 'compute_resize_instance', 'Error')
        server = self._wait_for_state_change(server, 'ACTIVE')
        self.assertEqual('host1', server['OS-EXT-SRV-ATTR:host'])
        self.assertIn('which a resize or cold migration cannot carry: 3 '
                      'CUSTOM_QAT on 0000:70:00.0, %s, its flavor asks for '
                      '2; detach them first' % self.OTHER_PF,
                      self.stdlog.logger.output)
        self.assertEqual(usage, self.usage())
        self.assertEqual(held, self.units(server, 'host1'))
        self.assertEqual(3, len(moves.hostdevs(self.domain(
            'host1', server).XMLDesc(0))))
        # A resize likewise.
        self.api.post_server_action(
            server['id'], {'resize': {'flavorRef': self.qat_flavor(4)}})
        self._wait_for_instance_action_event(
            server, 'resize', 'compute_resize_instance', 'Error')
        server = self._wait_for_state_change(server, 'ACTIVE')
        server = self._wait_for_state_change(server, 'ACTIVE')
        self.assertEqual(usage, self.usage())
        # Detached, the move goes through and the guest keeps its two.
        detached = flow.detach(client, store, 'host1', guest, acc,
                               timeout=5)
        self.assertEqual(2, len(self.units(server, 'host1')))
        # The detached unit is held for its scrub, and was reserved in
        # Placement before its allocation went.
        rp = detached.provider
        self.assertEqual(list(detached.units), [
            h.unit for h in store.units.holds(provider=rp)])
        self.assertEqual(1, self._get_provider_inventory(rp)[
            'CUSTOM_QAT']['reserved'])
        # nova-compute scrubs it at its next update.
        self.cycle()
        self.wait_scrubbed()
        self.assertEqual([], store.units.holds(provider=rp))
        self.assertEqual(0, self._get_provider_inventory(rp)[
            'CUSTOM_QAT']['reserved'])
        server = self._migrate_server(server)
        self.assertEqual('host2', server['OS-EXT-SRV-ATTR:host'])
        self._confirm_resize(server)
        self.assertEqual(2, len(self.units(server, 'host2')))
        self.check()


class TestInPlace(moves.MovesTestCase):
    """Operations that keep the instance on its host."""

    hosts = ('host1',)

    def setUp(self):
        super().setUp()
        self.server = self.start_on('host1', self.qat_flavor(2))
        self.before = self.units(self.server, 'host1')
        self.assertEqual(2, len(self.before))

    def assert_same_units(self, server):
        server = self.api.get_server(server['id'])
        self.assertEqual(self.before, self.units(server, 'host1'))
        self.assertEqual(self.before, self.xml_units(server, 'host1'))
        self.check()

    def test_hard_and_soft_reboot(self):
        self._reboot_server(self.server, hard=True)
        self.assert_same_units(self.server)
        self._reboot_server(self.server, hard=False)
        self.assert_same_units(self.server)

    def test_stop_start(self):
        self._stop_server(self.server)
        self._start_server(self.server)
        self._wait_for_state_change(self.server, 'ACTIVE')
        self.assert_same_units(self.server)

    def test_suspend_resume(self):
        dom = self.domain('host1', self.server)
        self.assertEqual(self.before, moves.hostdevs(dom.XMLDesc(0)))
        usage = self.usage()
        unplugged = []
        real = fakelibvirt.Domain.detachDeviceFlags

        def detach(dom, xml, flags):
            # Unplugged from the running guest only: its definition
            # keeps them for the resume.
            unplugged.append((moves.hostdevs('<domain><devices>%s'
                                             '</devices></domain>' % xml),
                              flags))
            return real(dom, xml, flags)
        self.useFixture(fixtures.MonkeyPatch(
            'nova.tests.fixtures.libvirt.Domain.detachDeviceFlags', detach))
        self._suspend_server(self.server)
        self.assertEqual([([u], fakelibvirt.VIR_DOMAIN_AFFECT_LIVE)
                          for u in self.before], unplugged)
        # Still the instance's, in the store and in Placement.
        self.assertEqual(self.before, self.units(self.server, 'host1'))
        self.assertEqual(usage, self.usage())
        self._resume_server(self.server)
        # Plugged into the running guest again.
        self.assertEqual(self.before, moves.hostdevs(
            self.domain('host1', self.server).XMLDesc(0)))
        self.assertIn('accelerator units %s plugged in again after the '
                      'resume' % ', '.join(self.before),
                      self.stdlog.logger.output)
        self.assertEqual(usage, self.check())

    def test_a_guest_that_keeps_its_units_is_not_suspended(self):
        # The guest never releases the VFs (a real guest without PCIe
        # hot-plug support does not).
        self.useFixture(fixtures.MonkeyPatch(
            'nova.tests.fixtures.libvirt.Domain.detachDeviceFlags',
            lambda dom, xml, flags: None))
        self.useFixture(fixtures.MonkeyPatch(
            'cyborg_nova.virt.hostdevs.SUSPEND_DETACH_TIMEOUT', 1))
        usage = self.usage()
        # The harness turns casts into calls: the failure reaches the
        # API (a real cloud answers 202 and records it).
        self.api.api_post('/servers/%s/action' % self.server['id'],
                          {'suspend': {}}, check_response_status=[202, 500])
        server = self._wait_for_state_change(self.server, 'ACTIVE')
        self.assertIn('did not release accelerator unit %s within 1 s'
                      % self.before[0], self.stdlog.logger.output)
        # Still running, with its units, allocations unchanged.
        self.assertEqual(fakelibvirt.VIR_DOMAIN_RUNNING,
                         self.domain('host1', server).info()[0])
        self.assertEqual(self.before, moves.hostdevs(
            self.domain('host1', server).XMLDesc(0)))
        self.assertEqual(usage, self.check())

    def test_rebuild(self):
        server = self._rebuild_server(self.server,
                                      self.server['image']['id'])
        self.assert_same_units(server)

    def test_host_reboot(self):
        compute = self.computes['host1']
        ctxt = nova_context.get_admin_context()
        instance = objects.Instance.get_by_uuid(ctxt, self.server['id'])
        compute.driver.resume_state_on_host_boot(ctxt, instance, [], None)
        self.assert_same_units(self.server)

    def test_shelve_offload_and_unshelve(self):
        server = self._shelve_server(self.server)
        self.assertEqual([], self.units(server))
        self.check()
        server = self._unshelve_server(server)
        self.assertEqual(2, len(self.xml_units(server, 'host1')))
        self.check()

    def test_delete_and_delete_while_the_compute_is_down(self):
        self.delete(self.server)
        self.assertEqual([], self.units(self.server))
        self.check()
        server = self.start_on('host1', self.qat_flavor(2))
        self.stop_host('host1')
        units = self.units(server)
        self.delete(server)
        # Deleted by the API while the compute was down: Placement holds
        # nothing of it, but its domain is still on the host. Once the
        # compute is back, the units stay the domain's, reserved, and a
        # server asking for every VF finds no room ...
        self.assertEqual(2, len(units))
        self.restart_host('host1')
        self.cycle()
        self.assertEqual(units, self.units(server))
        self.assertEqual(dict.fromkeys(units, server['id']),
                         self.kept('host1'))
        self.assertEqual(2, self.reserved('host1', moves.DC_PF))
        self.assertIn('kept, and reserved, until the domain is gone',
                      self.stdlog.logger.output)
        self.check()
        self.start_on('host1', self.qat_flavor(16), expected_state='ERROR')
        # ... until Nova reaps the domain of the deleted instance; then
        # they are freed, and the whole PF is offered again.
        self.reap('host1')
        self.cycle()
        self.assertEqual([], self.units(server))
        self.assertEqual(0, self.reserved('host1', moves.DC_PF))
        self.check()
        full = self.start_on('host1', self.qat_flavor(16))
        self.assertEqual(16, len(self.units(full)))

    def test_a_running_guest_whose_allocation_is_deleted_keeps_its_units(
            self):
        # An operator deletes the running server's allocation by hand.
        resp = self.placement.delete('/allocations/%s' % self.server['id'])
        self.assertEqual(204, resp.status)
        self.cycle()
        # Its guest still has both VFs: they stay its own, kept for its
        # domain and reserved in Placement ...
        self.assertEqual(self.before, self.units(self.server))
        self.assertEqual(dict.fromkeys(self.before, self.server['id']),
                         self.kept('host1'))
        self.assertEqual(2, self.reserved('host1', moves.DC_PF))
        self.assertEqual(self.before, self.xml_units(self.server))
        # ... so a 16-VF server finds no room, and a 14-VF one gets the
        # other VFs, never these.
        self.start_on('host1', self.qat_flavor(16), expected_state='ERROR')
        other = self.start_on('host1', self.qat_flavor(14))
        self.assertEqual([], sorted(set(self.units(other)) &
                                    set(self.before)))
        self.check()
        # The operator destroys the domain: at the next cycle the units
        # are freed and the reservation goes.
        dom = self.domain('host1', self.server)
        dom.destroy()
        dom.undefine()
        self.cycle()
        self.assertEqual([], self.units(self.server))
        self.assertEqual({}, self.kept('host1'))
        self.assertEqual(0, self.reserved('host1', moves.DC_PF))
        self.delete(other)
        full = self.start_on('host1', self.qat_flavor(16))
        self.assertEqual(16, len(self.units(full)))

    def test_lost_units_repaired_at_the_next_guest_build(self):
        self.store('host1').release(self.server['id'])
        self._reboot_server(self.server, hard=True)
        self.assertEqual(2, len(self.xml_units(self.server, 'host1')))
        self.check()


class TestLiveMigration(moves.MovesTestCase):

    def test_refused_and_nothing_changes(self):
        server = self.start_on('host1', self.qat_flavor(2))
        usage = self.check()
        # As in Nova's own tests: the harness turns casts into calls, so
        # the conductor's pre-check failure reaches the API as a 500 (a
        # real cloud answers 202 and records the failure).
        self.api.api_post(
            '/servers/%s/action' % server['id'],
            {'os-migrateLive': {'host': 'host2', 'block_migration': 'auto'}},
            check_response_status=[500])
        self._wait_for_migration_status(server, ['error'])
        server = self._wait_for_state_change(server, 'ACTIVE')
        self.assertEqual('host1', server['OS-EXT-SRV-ATTR:host'])
        self.assertIn('cannot live-migrate them: cold migrate or resize it '
                      'instead', self.stdlog.logger.output)
        # Nothing moved: allocations, units and the guest are as before.
        self.assertEqual(usage, self.check())
        self.assertEqual(2, len(self.xml_units(server, 'host1')))


class TestUnreadableSysfs(moves.MovesTestCase):

    hosts = ('host1',)

    def test_ordinary_flavors_still_build(self):
        shutil.rmtree(os.path.join(self.trees['host1'], 'bus'))
        server = self.start_on('host1', self.flavor({}, name='plain'))
        self.assertEqual([], self.xml_units(server, 'host1'))
        # An accelerator flavor fails with a reason, and is not left
        # holding anything.
        failed = self.start_on('host1', self.qat_flavor(2),
                               expected_state='ERROR')
        self.assertIn('cannot read the accelerators of this host',
                      self.stdlog.logger.output)
        self.assertEqual([], self.units(failed))


class TestSteadyCycle(moves.MovesTestCase):

    hosts = ('host1',)

    def test_reads_each_provider_in_use_once_and_writes_nothing(self):
        server = self.start_on('host1', self.qat_flavor(2))
        self.cycle()
        self.counter.reset()
        self.cycle()
        # The reconciliation costs one read of the allocations of each
        # accelerator provider with units assigned here, per cycle; a
        # steady cycle writes nothing, and the store is left as it was.
        self.assertEqual([], self.counter.writes())
        reads = [path.split('/')[-2] for method, path in self.counter.requests
                 if method == 'GET' and path.endswith('/allocations')
                 and path.split('/')[-2] in self.providers]
        in_use = set(self.store('host1').of_consumer(server['id']))
        self.assertEqual(1, len(in_use))
        self.assertGreater(len(self.providers), len(in_use))
        # Nova's resource tracker reads every provider of the tree once
        # itself (get_allocations_for_provider_tree); the reconciliation
        # reads the one in use once more, and no other.
        self.assertEqual(
            sorted(list(self.providers) + list(in_use)), sorted(reads))
        self.check()
