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

"""Accelerators in Placement: child providers of the compute nodes."""

from tempest import config
from tempest.lib import decorators

from cyborg_nova_tempest_plugin.common import accelerators as acc
from cyborg_nova_tempest_plugin.tests import base

CONF = config.CONF


class AcceleratorProvidersTest(base.BaseAcceleratorTest):
    """Each accelerator is a child provider of its compute node.

    Read with Placement's API as an admin; nothing is changed.
    """

    @decorators.idempotent_id('2b0c8f3e-5d0a-4c55-9a53-6f3a0c1d7e01')
    def test_providers_are_children_of_compute_nodes(self):
        """Named ``<nodename>_accelerator_<PCI address>``, under the node.

        The parent is the root of the tree, a compute node Nova knows of
        (a hypervisor), whose name starts the provider's name; the uuid
        is derived from node and address, so it survives restarts.
        """
        providers, found = self.require_accelerator_providers()
        hypervisors = {
            h['hypervisor_hostname'] for h in
            self.admin_hypervisors.list_hypervisors()['hypervisors']}
        for rp_uuid, rp in sorted(found.items()):
            parent = providers.get(rp['parent_provider_uuid'])
            self.assertIsNotNone(parent, '%s has no parent' % rp['name'])
            self.assertEqual(rp['root_provider_uuid'], parent['uuid'],
                             '%s is not a child of a root provider'
                             % rp['name'])
            self.assertIn(parent['name'], hypervisors,
                          'the parent of %s is no compute node'
                          % rp['name'])
            address = acc.provider_address(rp['name'], parent['name'])
            self.assertIsNotNone(
                address, '%s is not named %s%s<PCI address>'
                % (rp['name'], parent['name'], acc.NAME_INFIX))
            self.assertEqual(acc.provider_uuid(parent['name'], address),
                             rp_uuid, 'uuid of %s' % rp['name'])

    @decorators.idempotent_id('8e4f6a1c-2a7b-4a90-8b7c-3d1f5e9a0b12')
    def test_providers_have_documented_resource_classes(self):
        """Inventories of documented (or configured) resource classes."""
        _, found = self.require_accelerator_providers()
        allowed = acc.DOCUMENTED_RESOURCE_CLASSES | set(
            CONF.accelerators.operator_resource_classes)
        for rp in found.values():
            for rc, inventory in sorted(rp['inventories'].items()):
                self.assertIn(rc, allowed,
                              '%s has resource class %s, which is neither '
                              'documented nor in [accelerators] '
                              'operator_resource_classes' % (rp['name'], rc))
                self.assertGreaterEqual(inventory['total'], 1)
                self.assertLessEqual(inventory['reserved'],
                                     inventory['total'])
                self.assertEqual(1.0, inventory['allocation_ratio'],
                                 '%s: devices are not overcommitted'
                                 % rp['name'])
                self.assertLessEqual(inventory['max_unit'],
                                     inventory['total'])

    @decorators.idempotent_id('c3a9d2e7-91f4-4b6e-a8d0-5f2b7c4e1a23')
    def test_providers_have_owner_and_family_traits(self):
        """``OWNER_CYBORG`` and the trait of the driver family, on each."""
        _, found = self.require_accelerator_providers()
        problems = {}
        for rp in found.values():
            found_problems = acc.trait_problems(rp['inventories'],
                                                rp['traits'])
            if found_problems:
                problems[rp['name']] = (found_problems, sorted(rp['traits']))
        self.assertEqual({}, problems)

    @decorators.idempotent_id('5a7e0b3d-6c2f-4d18-9e41-0b8c2f6d3a34')
    def test_expected_resource_classes_and_traits_reported(self):
        """What ``[accelerators]`` expects is on some accelerator."""
        expected_rcs = set(CONF.accelerators.expected_resource_classes)
        expected_traits = set(CONF.accelerators.expected_traits)
        if not expected_rcs and not expected_traits:
            self.skipTest('[accelerators] expected_resource_classes and '
                          'expected_traits are empty')
        _, found = self.require_accelerator_providers()
        rcs, traits = set(), set()
        for rp in found.values():
            rcs.update(rp['inventories'])
            traits.update(rp['traits'])
        self.assertEqual(set(), expected_rcs - rcs,
                         'expected resource classes missing; reported: %s'
                         % sorted(rcs))
        self.assertEqual(set(), expected_traits - traits,
                         'expected traits missing; reported: %s'
                         % sorted(traits))

    @decorators.idempotent_id('e1d4b8a2-3f6c-4e07-b5a9-7c2d0e8f4b45')
    def test_owner_trait_only_on_accelerator_providers(self):
        """No provider outside the accelerator naming is marked as ours.

        A provider with ``OWNER_CYBORG`` that is not named
        ``<nodename>_accelerator_<PCI address>`` is one cyborg-nova would
        not recognise, and would never update nor remove.
        """
        providers, found = self.require_accelerator_providers()
        owned = self.admin_providers.list_resource_providers(
            required=acc.OWNER_TRAIT)['resource_providers']
        strays = sorted(rp['name'] for rp in owned
                        if rp['uuid'] not in found)
        self.assertEqual([], strays)
