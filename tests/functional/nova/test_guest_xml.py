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

"""Every device XML the project emits validates against libvirt's schemas.

libvirt has no standalone device schema, so each device is wrapped in a
minimal domain and checked with ``virt-xml-validate`` (Debian
libvirt-clients and libxml2-utils).
"""

import shutil
import subprocess
import tempfile
import unittest

from lxml import etree
import testtools

from cyborg_drivers import guest_xml
from cyborg_nova.virt import hostdevs

DOMAIN = """<domain type='kvm'>
  <name>validate</name>
  <memory>131072</memory>
  <os><type arch='x86_64'>hvm</type></os>
  <devices>%s</devices>
</domain>"""


class TestHostdevSchema(testtools.TestCase):

    def setUp(self):
        super().setUp()
        if not shutil.which('virt-xml-validate'):
            raise unittest.SkipTest(
                'virt-xml-validate not found (Debian packages '
                'libvirt-clients and libxml2-utils)')

    def validate(self, device_xml):
        with tempfile.NamedTemporaryFile('w', suffix='.xml') as f:
            f.write(DOMAIN % device_xml)
            f.flush()
            proc = subprocess.run(['virt-xml-validate', f.name, 'domain'],
                                  capture_output=True, text=True)
        return proc.returncode, proc.stdout + proc.stderr

    def test_pci_hostdevs_validate(self):
        for address in ('0000:3b:00.0', '0000:af:01.7', '0001:00:1f.3',
                        '10000:01:00.0'):
            xml = etree.tostring(hostdevs.pci_hostdev(address).format_dom(),
                                 encoding='unicode')
            rc, out = self.validate(xml)
            self.assertEqual(0, rc, '%s: %s\n%s' % (address, out, xml))
            self.assertIn("managed=\"yes\"", xml)

    def test_the_check_can_fail(self):
        # A hostdev without its source address is not valid: the
        # validator above really checks.
        rc, _ = self.validate("<hostdev mode='subsystem' type='pci'>"
                              "<source/></hostdev>")
        self.assertNotEqual(0, rc)

    def test_not_an_address(self):
        for bad in ('3b:00.0', '0000:3b:00.8', '../../etc', ''):
            self.assertRaises(ValueError, hostdevs.pci_hostdev, bad)
            self.assertRaises(ValueError, guest_xml.pci_hostdev, bad)


class TestSameXmlWithoutNova(testtools.TestCase):
    """The hot-plug paths build the hostdev without Nova: same text."""

    def test_byte_for_byte_what_nova_renders(self):
        for address in ('0000:3b:00.0', '0000:af:01.7', '0001:00:1f.3',
                        '10000:01:00.0', '0000:d8:00.1', 'ffff:ff:1f.7'):
            for pretty in (True, False):
                self.assertEqual(
                    hostdevs.pci_hostdev(address).to_xml(pretty_print=pretty),
                    guest_xml.pci_hostdev_xml(address, pretty))
