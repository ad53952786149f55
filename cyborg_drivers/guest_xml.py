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

"""An accelerator unit in a libvirt guest: its device XML, without Nova.

What a PCI function becomes in a domain (a managed ``<hostdev>``), and
how to find it there again, built with :mod:`xml.etree` so that the
privileged helper (:mod:`privsep.libvirt`) and the attach commands need
neither Nova nor its config classes. The text is the one Nova's
``LibvirtConfigGuestHostdevPCI.to_xml()`` gives, byte for byte (a test
in ``tests/functional/nova/test_guest_xml.py`` compares them), so a
device hot-plugged here and one the guest got at spawn are the same XML
and detach the same way.

The helpers at the end read a domain through libvirt-python; they take
the ``libvirt`` module as an argument and never import it.
"""

from __future__ import annotations

from typing import Callable
from xml.etree import ElementTree

from cyborg_drivers import device as device_model

#: libvirt detaches the function from its host driver (binding vfio-pci)
#: when the guest starts and gives it back when it stops.
MANAGED = 'yes'
#: The function stays bound to the driver it has: a vendor-VFIO vGPU VF,
#: whose host driver (NVIDIA's) is its VFIO driver.
UNMANAGED = 'no'

_ADDRESS_KEYS = ('domain', 'bus', 'slot', 'function')
_INDENT = '  '
_ATTR_ESCAPES = (('&', '&amp;'), ('<', '&lt;'), ('>', '&gt;'),
                 ('"', '&quot;'), ('\n', '&#10;'), ('\r', '&#13;'),
                 ('\t', '&#9;'))
_TEXT_ESCAPES = (('&', '&amp;'), ('<', '&lt;'), ('>', '&gt;'))


def pci_address_fields(address: str) -> tuple[str, str, str, str]:
    """Domain, bus, slot and function of ``address``, as written in it.

    :raises ValueError: ``address`` is not a full, lowercase PCI address.
    """
    if not isinstance(address, str) or not device_model.is_pci_address(
            address):
        raise ValueError('not a PCI address: %r' % (address,))
    domain, bus, slot_function = address.split(':')
    slot, function = slot_function.split('.')
    return domain, bus, slot, function


def pci_hostdev(address: str, managed: bool = True) -> ElementTree.Element:
    """A PCI ``<hostdev>`` for the function at ``address``.

    :param managed: libvirt binds vfio-pci at start (``managed='yes'``);
        False for a function that must keep its driver.
    :raises ValueError: ``address`` is not a PCI address.
    """
    fields = pci_address_fields(address)
    dev = ElementTree.Element('hostdev')
    dev.set('mode', 'subsystem')
    dev.set('type', 'pci')
    dev.set('managed', MANAGED if managed else UNMANAGED)
    source = ElementTree.SubElement(dev, 'source')
    source_address = ElementTree.SubElement(source, 'address')
    for key, value in zip(_ADDRESS_KEYS, fields):
        source_address.set(key, '0x' + value)
    return dev


def pci_hostdev_xml(address: str, pretty_print: bool = True) -> str:
    """:func:`pci_hostdev` as text, as libvirt's attach and detach take it.

    :raises ValueError: ``address`` is not a PCI address.
    """
    return to_xml(pci_hostdev(address), pretty_print)


def to_xml(element: ElementTree.Element, pretty_print: bool = True) -> str:
    """``element`` as text, formatted as lxml's ``tostring`` formats it.

    Pretty printed: each child on a line of its own, indented two
    spaces, and a newline at the end; empty elements as ``<tag/>``.
    Elements with text keep it inline (device XML has no mixed content).
    """
    out: list[str] = []
    _write(element, out, 0 if pretty_print else None)
    if pretty_print:
        out.append('\n')
    return ''.join(out)


def _escape(value: str, escapes) -> str:
    for char, entity in escapes:
        value = value.replace(char, entity)
    return value


def _write(element: ElementTree.Element, out: list[str],
           level: int | None) -> None:
    attrs = ''.join(' %s="%s"' % (key, _escape(str(value), _ATTR_ESCAPES))
                    for key, value in element.attrib.items())
    children = list(element)
    if not children and not element.text:
        out.append('<%s%s/>' % (element.tag, attrs))
    else:
        out.append('<%s%s>' % (element.tag, attrs))
        if element.text:
            out.append(_escape(element.text, _TEXT_ESCAPES))
        for child in children:
            if level is not None:
                out.append('\n' + _INDENT * (level + 1))
            _write(child, out, None if level is None else level + 1)
        if children and level is not None:
            out.append('\n' + _INDENT * level)
        out.append('</%s>' % element.tag)
    if element.tail:
        out.append(_escape(element.tail, _TEXT_ESCAPES))


# -- finding a device in a domain --------------------------------------------

def _address_tuple(address: str) -> tuple[int, int, int, int]:
    domain, bus, slot_function = address.split(':')
    slot, function = slot_function.split('.')
    return int(domain, 16), int(bus, 16), int(slot, 16), int(function, 16)


def hostdev_in_domain(domain: ElementTree.Element, unit: str) -> bool:
    """Whether a PCI ``<hostdev>`` of the function ``unit`` is in it."""
    wanted = _address_tuple(unit)
    for source in domain.iterfind(
            "./devices/hostdev[@type='pci']/source/address"):
        try:
            found = tuple(int(source.get(k), 16) for k in _ADDRESS_KEYS)
        except (TypeError, ValueError):
            continue
        if found == wanted:
            return True
    return False


# -- a domain through libvirt-python (the module is passed in) ---------------

def hotplug_flags(libvirt, dom) -> int:
    """The running guest and its persistent definition, where they exist.

    A stopped instance gets the device in its definition only; a
    transient domain has no definition to change.
    """
    flags = 0
    if dom.isActive():
        flags |= libvirt.VIR_DOMAIN_AFFECT_LIVE
    if dom.isPersistent():
        flags |= libvirt.VIR_DOMAIN_AFFECT_CONFIG
    return flags


def domain_xml(dom, flags: int) -> ElementTree.Element:
    """The domain's XML description, parsed."""
    # The local libvirtd's own description of a domain, not a user's
    # input; and the expat Python ships refuses entity-expansion bombs.
    return ElementTree.fromstring(dom.XMLDesc(flags))  # nosec B314


def where_attached(libvirt, dom,
                   found: Callable[[ElementTree.Element], bool]) -> int:
    """Where a device is: the running guest and/or the definition.

    :param found: tells whether a parsed domain XML holds the device.
    :returns: the ``VIR_DOMAIN_AFFECT_*`` flags of the places it is in
        (0: not attached), which are what detaching it must name.
    :raises libvirt.libvirtError: the domain cannot be read.
    """
    flags = 0
    if dom.isActive() and found(domain_xml(dom, 0)):
        flags |= libvirt.VIR_DOMAIN_AFFECT_LIVE
    if dom.isPersistent() and found(domain_xml(
            dom, libvirt.VIR_DOMAIN_XML_INACTIVE)):
        flags |= libvirt.VIR_DOMAIN_AFFECT_CONFIG
    return flags


def libvirt_reason(exc) -> str:
    """libvirt's own one-line message for ``exc``."""
    try:
        message = exc.get_error_message()
    except Exception:
        message = None
    return ' '.join(str(message or exc).split())
