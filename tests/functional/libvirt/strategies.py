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

"""Devices this host's QEMU can hot-plug, standing in for PCI hostdevs.

Without an IOMMU libvirt refuses every PCI hostdev, so the attach and
detach machinery is exercised with devices it does take: each unit (a VF
address) becomes a device with a user alias derived from it.
"""

from __future__ import annotations

import os
import re
from xml.etree import ElementTree

from cyborg_nova.hotplug import guest as hotplug_guest


def alias(unit: str) -> str:
    """The libvirt user alias (``ua-`` prefix) of ``unit``'s device."""
    return 'ua-cn-' + re.sub(r'[^a-zA-Z0-9-]', '-', unit)


def _has_alias(domain: ElementTree.Element, tag: str, unit: str) -> bool:
    return any(a.get('name') == alias(unit) for a in
               domain.iterfind('./devices/%s/alias' % tag))


class UsbTablet:
    """A USB tablet per unit: unplugged at once, with a DEVICE_REMOVED."""

    def device_xml(self, unit: str) -> str:
        return ("<input type='tablet' bus='usb'><alias name='%s'/></input>"
                % alias(unit))

    def in_domain(self, domain: ElementTree.Element, unit: str) -> bool:
        return _has_alias(domain, 'input', unit)


class VirtioDisk:
    """A virtio disk per unit: a guest without an OS never lets it go."""

    def __init__(self, directory: str, units: tuple[str, ...]) -> None:
        self.directory = directory
        self.units = list(units)

    def device_xml(self, unit: str) -> str:
        image = os.path.join(self.directory, alias(unit) + '.img')
        if not os.path.exists(image):
            with open(image, 'wb') as f:
                f.truncate(1 << 20)
        target = 'vd' + 'bcdefghijklmnopq'[self.units.index(unit)]
        return ("<disk type='file' device='disk'><driver name='qemu' "
                "type='raw'/><source file='%s'/><target dev='%s' "
                "bus='virtio'/><alias name='%s'/></disk>"
                % (image, target, alias(unit)))

    def in_domain(self, domain: ElementTree.Element, unit: str) -> bool:
        return _has_alias(domain, 'disk', unit)


class TabletThenHostdev:
    """The first unit as a tablet, the others as (refused) PCI hostdevs."""

    def __init__(self, first: str) -> None:
        self.first = first
        self.tablet = UsbTablet()
        self.hostdev = hotplug_guest.PciHostdev()

    def _pick(self, unit: str):
        return self.tablet if unit == self.first else self.hostdev

    def device_xml(self, unit: str) -> str:
        return self._pick(unit).device_xml(unit)

    def in_domain(self, domain: ElementTree.Element, unit: str) -> bool:
        return self._pick(unit).in_domain(domain, unit)
