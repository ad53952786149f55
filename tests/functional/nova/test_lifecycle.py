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

"""Accelerator providers through device changes, restarts and updates."""

import os
import shutil

from cyborg_nova import store as state_store
from tests.functional.nova import base

PAC = '0000:5e:00.0'
NLB0 = 'CUSTOM_FPGA_FUNCTION_ID_INTEL_D8424DC4A4A3C413F89E433683F9040B'
NLB3 = 'CUSTOM_FPGA_FUNCTION_ID_INTEL_F7DF405CBD7ACF7222F144B0B93ACD18'


class TestDeviceLifecycle(base.AcceleratorTestCase):

    def setUp(self):
        super().setUp()
        self.compute = self.start_accelerator_compute('fpga1', 'fpga-host')
        self.flavor_id = self.flavor({
            'resources:FPGA': '1', 'trait:CUSTOM_FPGA_INTEL': 'required'})

    def remove_device(self, address):
        """The device leaves the bus (hot-unplug, or it fell off)."""
        bus = os.path.join(self.trees['fpga1'], 'bus', 'pci', 'devices')
        target = os.path.realpath(os.path.join(bus, address))
        os.unlink(os.path.join(bus, address))
        shutil.rmtree(target)

    def test_vanished_device_kept_while_allocated(self):
        server = self._create_server(flavor_id=self.flavor_id,
                                     networks='none')
        rps = self.accelerator_providers('fpga1')
        held = [a for a, rp in rps.items()
                if rp['uuid'] in self.server_allocations(server)]
        self.assertEqual(1, len(held))
        address = held[0]
        uuid = rps[address]['uuid']
        self.remove_device(address)
        self._run_periodics()
        # Still there, fully reserved: the allocation stays valid and
        # nothing new can land on it.
        self.assertIn(address, self.accelerator_providers('fpga1'))
        inv = self._get_provider_inventory(uuid)['FPGA']
        self.assertEqual((1, 1), (inv['total'], inv['reserved']))
        self.assertEqual({'FPGA': 1}, self.server_allocations(server)[uuid])
        # The other Intel FPGA still takes one more server, then full.
        self._create_server(flavor_id=self.flavor_id, networks='none')
        self._create_server(flavor_id=self.flavor_id, networks='none',
                            expected_state='ERROR')
        self._delete_server(server)
        self._run_periodics()
        self.assertNotIn(address, self.accelerator_providers('fpga1'))
        self.assertNotIn(address, self.store().devices('fpga1'))

    def test_vanished_free_device_fenced_then_removed(self):
        uuid = self.accelerator_providers('fpga1')['0000:af:00.0']['uuid']
        self.remove_device('0000:af:00.0')
        self._run_periodics()
        # First update without it: fenced, so nothing lands on it while
        # the next update checks that nothing holds it.
        inv = self._get_provider_inventory(uuid)['FPGA']
        self.assertEqual(inv['total'], inv['reserved'])
        self._run_periodics()
        self.assertEqual(['0000:5e:00.0', '0000:d8:00.0'],
                         sorted(self.accelerator_providers('fpga1')))

    def store(self):
        return state_store.StateStore(
            os.path.join(self.workdir, 'fpga1', 'state.sqlite'))

    def test_restart_same_uuids_and_steady_cycle_writes_nothing(self):
        before = {a: rp['uuid']
                  for a, rp in self.accelerator_providers('fpga1').items()}
        self.counter.reset()
        self._run_periodics()
        self.assertEqual([], self.counter.writes())
        steady = len(self.counter.requests)
        self.compute = self.restart_compute_service(self.compute)
        after = {a: rp['uuid']
                 for a, rp in self.accelerator_providers('fpga1').items()}
        self.assertEqual(before, after)
        self.counter.reset()
        self._run_periodics()
        self.assertEqual([], self.counter.writes())
        self.assertEqual(steady, len(self.counter.requests))

    def test_foreign_traits_survive_updates(self):
        root = self._get_provider_uuid_by_host('fpga1')
        pac = self.accelerator_providers('fpga1')[PAC]['uuid']
        self.add_trait(root, 'CUSTOM_RACK_7')
        self.add_trait(pac, 'CUSTOM_TENANT_BLUE')
        self._run_periodics()
        self.compute = self.restart_compute_service(self.compute)
        self._run_periodics()
        self.assertIn('CUSTOM_RACK_7', self._get_provider_traits(root))
        self.assertIn('COMPUTE_NODE', self._get_provider_traits(root))
        self.assertIn('CUSTOM_TENANT_BLUE', self._get_provider_traits(pac))

    def test_new_function_swaps_only_our_trait(self):
        pac = self.accelerator_providers('fpga1')[PAC]['uuid']
        self.add_trait(pac, 'CUSTOM_TENANT_BLUE')
        # The FPGA now holds another function (what reprogramming does).
        afu = os.path.join(self.trees['fpga1'], 'bus', 'pci', 'devices',
                           PAC, 'fpga', 'intel-fpga-dev.0',
                           'intel-fpga-port.0', 'afu_id')
        with open(afu, 'w') as f:
            f.write('f7df405cbd7acf7222f144b0b93acd18\n')
        self._run_periodics()
        traits = set(self._get_provider_traits(pac))
        self.assertIn(NLB3, traits)
        self.assertNotIn(NLB0, traits)
        self.assertIn('CUSTOM_TENANT_BLUE', traits)
        self.assertIn('CUSTOM_FPGA_INTEL', traits)
        old = self.flavor({'resources:FPGA': '1', 'trait:%s' % NLB0:
                           'required'}, name='old-function')
        new = self.flavor({'resources:FPGA': '1', 'trait:%s' % NLB3:
                           'required'}, name='new-function')
        # Both PACs now hold the new function (0000:af:00.0 always did).
        landed = set()
        for _ in range(2):
            server = self._create_server(flavor_id=new, networks='none')
            landed |= set(self.server_allocations(server))
        self.assertIn(pac, landed)
        self._create_server(flavor_id=old, networks='none',
                            expected_state='ERROR')


class TestShrinkUnderAllocation(base.AcceleratorTestCase):

    def test_vfs_disabled_while_allocated(self):
        self.start_accelerator_compute('crypto1', 'crypto-nic-host')
        qat = self.accelerator_providers('crypto1')['0000:70:00.0']['uuid']
        flavor = self.flavor({'resources:CUSTOM_QAT': '2',
                              'trait:CUSTOM_QAT_DC': 'required'})
        server = self._create_server(flavor_id=flavor, networks='none')
        self.assertIn(qat, self.server_allocations(server))
        # The operator turns SR-IOV off under the running instance.
        dev = os.path.join(self.trees['crypto1'], 'bus', 'pci', 'devices',
                           '0000:70:00.0')
        with open(os.path.join(dev, 'sriov_numvfs'), 'w') as f:
            f.write('0\n')
        self._run_periodics()
        # What is held stays, fully reserved; the compute keeps working.
        inv = self._get_provider_inventory(qat)['CUSTOM_QAT']
        self.assertEqual((2, 2), (inv['total'], inv['reserved']))
        plain = self._create_server(flavor_id=self.flavor({}, name='plain'),
                                    networks='none')
        self.assertEqual('ACTIVE', plain['status'])
        self._create_server(flavor_id=flavor, networks='none',
                            expected_state='ERROR')
        self._delete_server(server)
        self._run_periodics()
        self.assertEqual({}, self._get_provider_inventory(qat))


class TestInactiveUntilReady(base.AcceleratorTestCase):
    auto_ready = False

    def test_new_devices_reserved_until_marked_ready(self):
        self.compute = self.start_accelerator_compute('fpga1', 'fpga-host')
        rps = self.accelerator_providers('fpga1')
        for rp in rps.values():
            inv = self._get_provider_inventory(rp['uuid'])['FPGA']
            self.assertEqual(inv['total'], inv['reserved'])
        flavor = self.flavor({'resources:FPGA': '1'})
        self._create_server(flavor_id=flavor, networks='none',
                            expected_state='ERROR')
        store = state_store.StateStore(
            os.path.join(self.workdir, 'fpga1', 'state.sqlite'))
        self.assertEqual({'inactive'},
                         {d.state for d in store.devices('fpga1').values()})
        store.set_state('fpga1', PAC, state_store.READY)
        self._run_periodics()
        inv = self._get_provider_inventory(rps[PAC]['uuid'])['FPGA']
        self.assertEqual(0, inv['reserved'])
        server = self._create_server(flavor_id=flavor, networks='none')
        self.assertEqual({'FPGA': 1},
                         self.server_allocations(server)[rps[PAC]['uuid']])
