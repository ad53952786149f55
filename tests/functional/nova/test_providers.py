"""Accelerators reported by nova-compute and scheduled by flavor specs."""

from tests.functional.nova import base


class TestFpgaScheduling(base.AcceleratorTestCase):

    def setUp(self):
        super().setUp()
        self.compute = self.start_accelerator_compute('fpga1', 'fpga-host')

    def test_providers_reported(self):
        rps = self.accelerator_providers('fpga1')
        self.assertEqual(['0000:5e:00.0', '0000:af:00.0', '0000:d8:00.1'],
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
