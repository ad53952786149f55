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

"""Accelerators reported by nova-compute and scheduled by flavor specs."""

from tests.functional.nova import base
from tests.functional.nova import compat


class TestFpgaScheduling(base.AcceleratorTestCase):

    def setUp(self):
        super().setUp()
        self.compute = self.start_accelerator_compute('fpga1', 'fpga-host')

    def test_providers_reported(self):
        rps = self.accelerator_providers('fpga1')
        self.assertEqual(['0000:5e:00.0', '0000:af:00.0', '0000:d8:00.0'],
                         sorted(rps))
        pac = rps['0000:5e:00.0']
        self.assertEqual(self._get_provider_uuid_by_host('fpga1'),
                         pac['parent_provider_uuid'])
        inv = self._get_provider_inventory(pac['uuid'])
        self.assertEqual({'FPGA'}, set(inv))
        self.assertEqual(1, inv['FPGA']['total'])
        self.assertEqual(0, inv['FPGA']['reserved'])
        traits = set(self._get_provider_traits(pac['uuid']))
        self.assertIn('CUSTOM_FPGA_INTEL', traits)
        self.assertIn('CUSTOM_FPGA_INTEL_PAC_ARRIA10', traits)
        self.assertIn('OWNER_CYBORG', traits)

    def test_flavor_lands_on_fpga_provider_until_full(self):
        flavor = self.flavor({'resources:FPGA': '1',
                              'trait:CUSTOM_FPGA_INTEL': 'required'})
        rps = self.accelerator_providers('fpga1')
        intel = {rps[a]['uuid'] for a in ('0000:5e:00.0', '0000:af:00.0')}
        used = set()
        for _ in range(2):
            server = self._create_server(flavor_id=flavor, networks='none')
            allocs = self.server_allocations(server)
            fpga = [rp for rp, res in allocs.items() if 'FPGA' in res]
            self.assertEqual(1, len(fpga))
            self.assertIn(fpga[0], intel)
            self.assertEqual({'FPGA': 1}, allocs[fpga[0]])
            used.add(fpga[0])
        self.assertEqual(intel, used)
        # Two Intel FPGAs, both taken: the Alveo (no CUSTOM_FPGA_INTEL)
        # must not be picked.
        server = self._create_server(flavor_id=flavor, networks='none',
                                     expected_state='ERROR')
        self.assertIn('No valid host', server['fault']['message'])

    def test_owner_nova_prefilter_does_not_hide_accelerators(self):
        # Nova 34 requires OWNER_NOVA on the root provider of every
        # candidate; accelerator children (OWNER_CYBORG) under a Nova
        # root still match. A Nova without that prefilter must schedule
        # the same.
        flavor = self.flavor({'resources:FPGA': '1',
                              'trait:CUSTOM_FPGA_XILINX': 'required'})
        self.counter.reset()
        server = self._create_server(flavor_id=flavor, networks='none')
        queries = [p for m, p in self.counter.requests
                   if p.startswith('/allocation_candidates')]
        self.assertEqual(1, len(queries))
        if compat.HAS_OWNER_NOVA_FILTER:
            self.assertIn('root_required=OWNER_NOVA', queries[0])
        else:
            # Fails if Nova sends OWNER_NOVA under another filter name:
            # then the detection above needs updating.
            self.assertNotIn('OWNER_NOVA', queries[0])
        alveo = self.accelerator_providers('fpga1')['0000:d8:00.0']
        self.assertEqual({'FPGA': 1},
                         self.server_allocations(server)[alveo['uuid']])


class TestTwoHosts(base.AcceleratorTestCase):

    def setUp(self):
        super().setUp()
        self.start_accelerator_compute('gpu1', 'gpu-host')
        self.start_accelerator_compute('fpga1', 'fpga-host')

    def test_gpu_flavors_never_land_on_the_fpga_host(self):
        flavor = self.flavor({'resources:PGPU': '1',
                              'trait:CUSTOM_NVIDIA_1EB8': 'required'})
        gpus = {rp['uuid'] for rp in
                self.accelerator_providers('gpu1').values()}
        # gpu-host has four T4s (10de:1eb8) reported as whole GPUs.
        for _ in range(4):
            server = self._create_server(flavor_id=flavor, networks='none')
            self.assertEqual('gpu1', server['OS-EXT-SRV-ATTR:host'])
            allocs = self.server_allocations(server)
            self.assertEqual(1, len(gpus & set(allocs)))
        server = self._create_server(flavor_id=flavor, networks='none',
                                     expected_state='ERROR')
        self.assertIn('No valid host', server['fault']['message'])

    def test_fpga_flavor_lands_on_the_fpga_host(self):
        flavor = self.flavor({'resources:FPGA': '1'})
        server = self._create_server(flavor_id=flavor, networks='none')
        self.assertEqual('fpga1', server['OS-EXT-SRV-ATTR:host'])


class TestQat(base.AcceleratorTestCase):

    def test_two_units_of_one_pf(self):
        self.start_accelerator_compute('crypto1', 'crypto-nic-host')
        rps = self.accelerator_providers('crypto1')
        self.assertEqual(['0000:6b:00.0', '0000:70:00.0', '0000:e8:00.0'],
                         sorted(rps))
        inv = self._get_provider_inventory(rps['0000:6b:00.0']['uuid'])
        self.assertEqual({'CUSTOM_QAT': {
            'total': 16, 'reserved': 0, 'min_unit': 1, 'max_unit': 16,
            'step_size': 1, 'allocation_ratio': 1.0}}, inv)
        flavor = self.flavor({'resources:CUSTOM_QAT': '2',
                              'trait:CUSTOM_QAT_DC': 'required'})
        server = self._create_server(flavor_id=flavor, networks='none')
        allocs = self.server_allocations(server)
        # Only 0000:70:00.0 offers the compression (dc) service.
        self.assertEqual({'CUSTOM_QAT': 2},
                         allocs[rps['0000:70:00.0']['uuid']])
        self.assertEqual(
            2, self._get_provider_usages(
                rps['0000:70:00.0']['uuid'])['CUSTOM_QAT'])


class TestBrokenHost(base.AcceleratorTestCase):

    def test_unreadable_sysfs_does_not_take_the_compute_down(self):
        self.build_host('broken1', 'fpga-host')
        self.configure_host('broken1')
        self.flags(sysfs_root='/nonexistent/sys', group='cyborg_nova')
        self._start_compute('broken1')
        root = self._get_provider_uuid_by_host('broken1')
        self.assertIn('VCPU', self._get_provider_inventory(root))
        self.assertEqual({}, self.accelerator_providers('broken1'))
        self.assertIn('accelerator providers of broken1 not updated',
                      self.stdlog.logger.output)
        # And why, once, when the compute started (cyborg_nova.config_check).
        self.assertEqual(1, self.stdlog.logger.output.count(
            'cyborg-nova config check: [cyborg_nova] sysfs_root: '
            '/nonexistent/sys is not a sysfs tree with a PCI bus'))
        # An ordinary flavor still boots there.
        server = self._create_server(flavor_id=self.flavor({}),
                                     networks='none')
        self.assertEqual('broken1', server['OS-EXT-SRV-ATTR:host'])
