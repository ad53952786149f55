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

from cyborg_nova.virt import guest

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
            xml = etree.tostring(guest.pci_hostdev(address).format_dom(),
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
            self.assertRaises(ValueError, guest.pci_hostdev, bad)
