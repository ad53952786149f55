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

"""cyborg_drivers.guest_xml: the hostdev text, built without Nova.

``tests/functional/nova/test_guest_xml.py`` compares it with what Nova's
config classes give; here it is pinned without Nova.
"""

from xml.etree import ElementTree

import pytest

from cyborg_drivers import guest_xml

HOSTDEV = ('<hostdev mode="subsystem" type="pci" managed="yes">\n'
           '  <source>\n'
           '    <address domain="0x0000" bus="0x3b" slot="0x00" '
           'function="0x1"/>\n'
           '  </source>\n'
           '</hostdev>\n')


def test_the_hostdev_text():
    assert guest_xml.pci_hostdev_xml('0000:3b:00.1') == HOSTDEV
    assert guest_xml.pci_hostdev_xml('0000:3b:00.1', pretty_print=False) \
        == ('<hostdev mode="subsystem" type="pci" managed="yes"><source>'
            '<address domain="0x0000" bus="0x3b" slot="0x00" '
            'function="0x1"/></source></hostdev>')


@pytest.mark.parametrize('bad', ['3b:00.0', '0000:3b:00.8', '../../etc', '',
                                 '0000:3B:00.0', None, 7])
def test_not_an_address(bad):
    with pytest.raises(ValueError, match='not a PCI address'):
        guest_xml.pci_hostdev(bad)


def test_found_in_a_domain_however_libvirt_writes_it():
    domain = ElementTree.fromstring(
        "<domain><devices>%s<hostdev mode='subsystem' type='pci'>"
        "<source><address domain='0' bus='0xaf' slot='1' function='7'/>"
        "</source></hostdev><hostdev type='pci'><source><address "
        "bus='zz'/></source></hostdev></devices></domain>"
        % guest_xml.pci_hostdev_xml('0000:3b:00.1'))
    assert guest_xml.hostdev_in_domain(domain, '0000:3b:00.1')
    assert guest_xml.hostdev_in_domain(domain, '0000:af:01.7')
    assert not guest_xml.hostdev_in_domain(domain, '0000:3b:00.0')


def test_text_and_attributes_are_escaped():
    element = ElementTree.Element('alias', name='a"<&>\n')
    ElementTree.SubElement(element, 'note').text = '1 < 2 & 3'
    text = guest_xml.to_xml(element)
    assert text == ('<alias name="a&quot;&lt;&amp;&gt;&#10;">\n'
                    '  <note>1 &lt; 2 &amp; 3</note>\n'
                    '</alias>\n')
    again = ElementTree.fromstring(text)
    assert again.get('name') == 'a"<&>\n'
    assert again.find('note').text == '1 < 2 & 3'


class FakeDomain:
    def __init__(self, live, config, active=True, persistent=True):
        self.xml = {0: live, 1: config}
        self.active, self.persistent = active, persistent

    def isActive(self):
        return self.active

    def isPersistent(self):
        return self.persistent

    def XMLDesc(self, flags):
        return self.xml[flags]


class FakeLibvirt:
    VIR_DOMAIN_AFFECT_LIVE = 1
    VIR_DOMAIN_AFFECT_CONFIG = 2
    VIR_DOMAIN_XML_INACTIVE = 1


def test_where_attached_and_the_hotplug_flags():
    with_dev = ('<domain><devices>%s</devices></domain>'
                % guest_xml.pci_hostdev_xml('0000:3b:00.1'))
    without = '<domain><devices/></domain>'

    def found(root):
        return guest_xml.hostdev_in_domain(root, '0000:3b:00.1')
    lv = FakeLibvirt
    assert guest_xml.where_attached(lv, FakeDomain(with_dev, without),
                                    found) == 1
    assert guest_xml.where_attached(lv, FakeDomain(without, with_dev),
                                    found) == 2
    assert guest_xml.where_attached(
        lv, FakeDomain(with_dev, with_dev, persistent=False), found) == 1
    assert guest_xml.hotplug_flags(lv, FakeDomain('', '')) == 3
    assert guest_xml.hotplug_flags(lv, FakeDomain('', '', active=False)) \
        == 2


def test_libvirt_reason():
    class Error(Exception):
        def get_error_message(self):
            return 'Requested operation\n  is not valid'
    assert guest_xml.libvirt_reason(Error('x')) == (
        'Requested operation is not valid')
    assert guest_xml.libvirt_reason(ValueError('plain  error')) == (
        'plain error')
