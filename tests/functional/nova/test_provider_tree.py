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

"""ProviderTreeUpdater on Nova's own ProviderTree, no services needed."""

import dataclasses
import os
import shutil

import fixtures
from nova.compute import provider_tree
from oslo_config import cfg
import testtools

from cyborg_drivers import base
from cyborg_drivers import device
from cyborg_drivers import discovery
from cyborg_drivers.fake import hosttree
from cyborg_drivers import loader
from cyborg_drivers import sysfs
from cyborg_nova import providers
from cyborg_nova import store as state_store

NODE = 'cn1'
ROOT = 'c0c0c0c0-0000-4000-8000-000000000001'


class TestUpdater(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.tmp = self.useFixture(fixtures.TempDir()).path
        self.root = os.path.join(self.tmp, 'sys')
        hosttree.build_tree(hosttree.profile_path('fpga-host'), self.root)
        conf = cfg.ConfigOpts()
        conf([])
        self.store = state_store.StateStore(os.path.join(self.tmp, 's.sqlite'))
        self.lookups = []
        self.consumers = {}
        self.updater = providers.ProviderTreeUpdater(
            discovery.Discoverer(loader.load(conf, ['intel_fpga',
                                                    'xilinx_fpga']),
                                 self.root),
            self.store, self.lookup, auto_ready=True)
        self.tree = provider_tree.ProviderTree()
        self.tree.new_root(NODE, ROOT)

    def lookup(self, uuid):
        self.lookups.append(uuid)
        return self.consumers.get(uuid, {})

    def children(self):
        return sorted(self.tree.data(u).name[len(NODE) + 13:]
                      for u in self.tree.get_provider_uuids(NODE)[1:])

    def test_children_and_stable_uuids(self):
        self.updater.update(self.tree, NODE)
        self.assertEqual(['0000:5e:00.0', '0000:af:00.0', '0000:d8:00.0'],
                         self.children())
        uuid = providers.provider_uuid(NODE, '0000:5e:00.0')
        data = self.tree.data(uuid)
        self.assertEqual(ROOT, data.parent_uuid)
        self.assertEqual('cn1_accelerator_0000:5e:00.0', data.name)
        self.assertEqual(1, data.inventory['FPGA']['total'])
        self.assertIn('OWNER_CYBORG', data.traits)
        # Nothing on the compute node provider is touched.
        self.assertEqual(set(), set(self.tree.data(NODE).traits))
        self.assertEqual({}, self.tree.data(NODE).inventory)

    def test_discovery_failure_raises_and_changes_nothing(self):
        self.updater.update(self.tree, NODE)
        before = self.children()
        shutil.rmtree(os.path.join(self.root, 'bus'))
        # The virt-driver mixin catches this and logs it (test_providers).
        self.assertRaises(sysfs.NoSysfs, self.updater.update, self.tree,
                          NODE)
        self.assertEqual(before, self.children())

    def test_vanished_kept_when_placement_cannot_tell(self):
        self.updater.update(self.tree, NODE)
        uuid = providers.provider_uuid(NODE, '0000:af:00.0')
        os.unlink(os.path.join(self.root, 'bus', 'pci', 'devices',
                               '0000:af:00.0'))
        self.consumers[uuid] = None  # Placement unreachable
        self.updater.update(self.tree, NODE)
        # Fenced at once, without asking Placement.
        inv = self.tree.data(uuid).inventory['FPGA']
        self.assertEqual(inv['total'], inv['reserved'])
        self.assertEqual([], self.lookups)
        self.updater.update(self.tree, NODE)
        self.assertIn('0000:af:00.0', self.children())
        self.assertEqual([uuid], self.lookups)

    def test_reshape_allocations_used_instead_of_placement(self):
        self.updater.update(self.tree, NODE)
        uuid = providers.provider_uuid(NODE, '0000:af:00.0')
        os.unlink(os.path.join(self.root, 'bus', 'pci', 'devices',
                               '0000:af:00.0'))
        allocations = {'inst-1': {'allocations': {
            uuid: {'resources': {'FPGA': 1}}}}}
        self.updater.update(self.tree, NODE, allocations)
        self.updater.update(self.tree, NODE, allocations)
        self.assertIn('0000:af:00.0', self.children())
        self.assertEqual([], self.lookups)
        self.updater.update(self.tree, NODE, {})
        self.assertNotIn('0000:af:00.0', self.children())

    def gone(self, address):
        os.unlink(os.path.join(self.root, 'bus', 'pci', 'devices', address))

    def test_driver_error_removes_nothing(self):
        self.updater.update(self.tree, NODE)
        self.store.set_state(NODE, '0000:5e:00.0', state_store.READY)
        before = self.children()
        # A driver that cannot run this cycle finds nothing: that is not
        # the hardware leaving.
        self.updater.discoverer.drivers[0].discover = _raise
        for _ in range(3):
            self.updater.update(self.tree, NODE)
        self.assertEqual(before, self.children())
        self.assertEqual([], self.lookups)
        self.assertEqual('ready',
                         self.store.devices(NODE)['0000:5e:00.0'].state)

    def test_unreadable_device_is_not_taken_for_gone(self):
        self.updater.update(self.tree, NODE)
        dev = os.path.realpath(os.path.join(
            self.root, 'bus', 'pci', 'devices', '0000:af:00.0'))
        os.unlink(os.path.join(dev, 'uevent'))
        os.unlink(os.path.join(dev, 'vendor'))
        for _ in range(3):
            self.updater.update(self.tree, NODE)
        self.assertIn('0000:af:00.0', self.children())
        self.assertEqual([], self.lookups)

    def test_slot_with_another_card_starts_inactive(self):
        self.updater.auto_ready = False
        self.updater.update(self.tree, NODE)
        self.store.set_state(NODE, '0000:5e:00.0', state_store.READY)
        self.updater.update(self.tree, NODE)
        uuid = providers.provider_uuid(NODE, '0000:5e:00.0')
        self.assertEqual(0, self.tree.data(uuid).inventory['FPGA'][
            'reserved'])
        dev = os.path.realpath(os.path.join(
            self.root, 'bus', 'pci', 'devices', '0000:5e:00.0'))
        with open(os.path.join(dev, 'uevent')) as f:
            text = f.read()
        with open(os.path.join(dev, 'uevent'), 'w') as f:
            f.write(text.replace('PCI_SUBSYS_ID=8086:', 'PCI_SUBSYS_ID=1234:'))
        self.updater.update(self.tree, NODE)
        self.assertEqual(1, self.tree.data(uuid).inventory['FPGA'][
            'reserved'])
        self.assertEqual('inactive',
                         self.store.devices(NODE)['0000:5e:00.0'].state)

    def test_providers_of_others_untouched(self):
        # A child Nova (or an operator) owns: not ours by name, kept.
        self.tree.new_child('%s_0000:99:00.0' % NODE, ROOT)
        self.tree.new_child('cn2_accelerator_0000:5e:00.0', ROOT)
        self.updater.update(self.tree, NODE)
        names = {self.tree.data(u).name
                 for u in self.tree.get_provider_uuids(NODE)}
        self.assertIn('cn1_0000:99:00.0', names)
        self.assertIn('cn2_accelerator_0000:5e:00.0', names)
        self.assertEqual([], self.lookups)


def _raise(snapshot):
    raise base.DriverError('cannot run this cycle')


class TestReserved(testtools.TestCase):

    def test_reserved_is_a_function_of_state(self):
        acc = device.Accelerator(
            address='0000:3b:00.0', driver='x', device_type='GPU',
            resource_class='PGPU', traits=(), total=4, vendor_id='10de',
            product_id='1eb8', class_code='0x030200')
        for s in state_store.STATES:
            expected = 0 if s == state_store.READY else 4
            self.assertEqual(expected, providers.reserved(s, acc, 4), s)
        self.assertEqual(4, providers.reserved(state_store.READY, None, 4))
        broken = dataclasses.replace(acc, setup_required=True)
        self.assertEqual(4, providers.reserved(state_store.READY, broken, 4))
        self.assertEqual({}, providers.inventory(
            dataclasses.replace(acc, total=0), state_store.READY))
        sick = dataclasses.replace(acc, problems=('QAT state is down',))
        self.assertEqual(4, providers.reserved(state_store.READY, sick, 4))
