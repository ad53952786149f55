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

"""Accelerator units in the guest's libvirt XML, from the allocations.

The real LibvirtDriver on Nova's fakelibvirt: every XML Nova defines is
captured and its <hostdev> elements compared with what Placement
allocated.
"""

import builtins
import os

import fixtures
from nova import context as nova_context
from nova import objects

from cyborg_nova import assignments
from cyborg_nova import store as state_store
from tests.functional.nova import base
from tests.functional.nova.moves import capture_xmls
from tests.functional.nova.moves import hostdevs


class TestGuestDevices(base.LibvirtAcceleratorTestCase):

    def setUp(self):
        super().setUp()
        self.xmls = capture_xmls(self)

    def store(self, host):
        return assignments.Assignments(state_store.StateStore(
            os.path.join(self.workdir, host, 'state.sqlite')))

    def test_fpga_and_qat_units_in_the_xml_and_kept_on_reboot(self):
        self.start_accelerator_compute('crypto1', 'crypto-nic-host')
        rps = self.accelerator_providers('crypto1')
        flavor = self.flavor({'resources:CUSTOM_QAT': '2',
                              'trait:CUSTOM_QAT_DC': 'required'})
        server = self._create_server(flavor_id=flavor, networks='none')
        devs = hostdevs(self.xmls[-1])
        # Two VFs of the one PF offering dc, the first free ones in VF
        # index order.
        self.assertEqual(['0000:70:00.1', '0000:70:00.2'], devs)
        held = self.store('crypto1').of_consumer(server['id'])
        self.assertEqual({rps['0000:70:00.0']['uuid']: devs}, held)

        # A second server gets the next two, never the same.
        other = self._create_server(flavor_id=flavor, networks='none')
        self.assertEqual(['0000:70:00.3', '0000:70:00.4'],
                         hostdevs(self.xmls[-1]))

        self._reboot_server(server, hard=True)
        self.assertEqual(devs, hostdevs(self.xmls[-1]))

        # Host reboot: Nova resumes the guest from scratch.
        compute = self.computes['crypto1']
        ctxt = nova_context.get_admin_context()
        instance = objects.Instance.get_by_uuid(ctxt, server['id'])
        compute.driver.resume_state_on_host_boot(ctxt, instance, [], None)
        self.assertEqual(devs, hostdevs(self.xmls[-1]))

        self._delete_server(server)
        self.assertEqual({}, self.store('crypto1').of_consumer(
            server['id']))
        third = self._create_server(flavor_id=flavor, networks='none')
        # The freed VFs are the first free ones again.
        self.assertEqual(['0000:70:00.1', '0000:70:00.2'],
                         hostdevs(self.xmls[-1]))
        self.assertNotEqual(other['id'], third['id'])

    def count_sysfs_reads(self, host, method, before=None):
        """Reads under ``host``'s sysfs while its driver's ``method`` runs.

        A list of (call, path) that grows as they happen; ``before`` is
        called as the method starts.
        """
        root = self.trees[host]
        driver = self.computes[host].driver
        reads, active = [], []

        def counting(name, real):
            def wrapper(path, *args, **kwargs):
                if active and isinstance(path, (str, os.PathLike)) and (
                        os.fspath(path).startswith(root)):
                    reads.append((name, os.fspath(path)))
                return real(path, *args, **kwargs)
            return wrapper
        for module, name in ((builtins, 'open'), (os, 'listdir'),
                             (os, 'scandir'), (os, 'readlink'),
                             (os, 'stat'), (os, 'lstat')):
            self.useFixture(fixtures.MonkeyPatch(
                '%s.%s' % (module.__name__, name),
                counting(name, getattr(module, name))))
        real = getattr(driver, method)

        def watched(*args, **kwargs):
            if before is not None:
                before()
            active.append(True)
            try:
                return real(*args, **kwargs)
            finally:
                active.pop()
        setattr(driver, method, watched)
        self.addCleanup(delattr, driver, method)
        return reads

    def test_spawn_reads_no_sysfs(self):
        # The update cycle recorded the devices; spawn finds the VFs
        # behind the provider, and builds their hostdevs, from the store
        # alone.
        self.start_accelerator_compute('crypto1', 'crypto-nic-host')
        unrecord = []
        store = state_store.StateStore(
            os.path.join(self.workdir, 'crypto1', 'state.sqlite'))

        def forget_records():
            if unrecord:
                # As a store written before records were kept.
                store.clear_reported('crypto1')
        reads = self.count_sysfs_reads('crypto1', 'spawn', forget_records)
        flavor = self.flavor({'resources:CUSTOM_QAT': '2',
                              'trait:CUSTOM_QAT_DC': 'required'})
        server = self._create_server(flavor_id=flavor, networks='none')
        self.assertEqual('ACTIVE', server['status'])
        self.assertEqual(['0000:70:00.1', '0000:70:00.2'],
                         hostdevs(self.xmls[-1]))
        self.assertEqual(2, self.xmls[-1].count('managed="yes"'))
        self.assertEqual([], reads)

        # Without a record spawn still works: it discovers the host, and
        # says so.
        unrecord.append(True)
        self._create_server(flavor_id=flavor, networks='none')
        self.assertEqual(['0000:70:00.3', '0000:70:00.4'],
                         hostdevs(self.xmls[-1]))
        self.assertNotEqual([], reads)
        self.assertIn('no record of accelerator(s)',
                      self.stdlog.logger.output)

    def test_whole_fpga(self):
        self.start_accelerator_compute('fpga1', 'fpga-host')
        flavor = self.flavor({'resources:FPGA': '1',
                              'trait:CUSTOM_FPGA_XILINX': 'required'})
        self._create_server(flavor_id=flavor, networks='none')
        # The Alveo's user function, never its management function.
        self.assertEqual(['0000:d8:00.1'], hostdevs(self.xmls[-1]))

    def test_plain_server_gets_no_hostdev(self):
        self.start_accelerator_compute('fpga1', 'fpga-host')
        self._create_server(flavor_id=self.flavor({}), networks='none')
        self.assertEqual([], hostdevs(self.xmls[-1]))
