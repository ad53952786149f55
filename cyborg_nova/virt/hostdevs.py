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

"""Units as Nova's libvirt objects: hostdev configs, domains, unplugging.

What :mod:`cyborg_nova.virt.guest` needs of Nova's libvirt layer: the
``<hostdev>`` config object of each unit (from the kind its unit row
records, :mod:`cyborg_nova.guests`, so no sysfs is read), the units the
host's domains hold (for the unit books' reconcile), and unplugging
units from a running guest and plugging them in again (suspend and
resume).
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Iterable
from xml.etree import ElementTree

from nova import exception
from nova.virt.libvirt import config as vconfig

from cyborg_drivers import device as device_model
from cyborg_drivers import guest_xml
from cyborg_nova import assignments
from cyborg_nova import audit
from cyborg_nova import guests

LOG = logging.getLogger(__name__)

#: Seconds a suspending guest has to release each PCI unit unplugged
#: from it (a Linux guest's PCIe hot-plug driver waits 5 s first).
SUSPEND_DETACH_TIMEOUT = 60


def pci_hostdev(address: str, managed: bool = True
                ) -> vconfig.LibvirtConfigGuestHostdevPCI:
    """A PCI ``<hostdev>`` for the function at ``address``.

    Nova's config object (what its guest config holds), made of the same
    fields as :func:`cyborg_drivers.guest_xml.pci_hostdev`, whose text
    the hot-plug paths use: the two render the same XML.

    :param managed: False for a vendor-VFIO vGPU VF, which keeps the
        NVIDIA driver (its VFIO driver) instead of getting vfio-pci.
    :raises ValueError: ``address`` is not a PCI address.
    """
    dev = vconfig.LibvirtConfigGuestHostdevPCI()
    dev.domain, dev.bus, dev.slot, dev.function = (
        guest_xml.pci_address_fields(address))
    dev.managed = guest_xml.MANAGED if managed else guest_xml.UNMANAGED
    return dev


def mdev_hostdev(mdev: str) -> vconfig.LibvirtConfigGuestHostdevMDEV:
    """An mdev ``<hostdev>`` (a vGPU) for mediated device ``mdev``."""
    dev = vconfig.LibvirtConfigGuestHostdevMDEV()
    dev.uuid = mdev
    return dev


def config(hostdev: guests.Hostdev):
    """Nova's config object of one unit, as its row says it is."""
    if hostdev.kind == device_model.HOSTDEV_MDEV:
        return mdev_hostdev(hostdev.unit)
    unmanaged = hostdev.kind == device_model.HOSTDEV_PCI_UNMANAGED
    return pci_hostdev(hostdev.unit, managed=not unmanaged)


def add_to_guest(guest: vconfig.LibvirtConfigGuest,
                 units: Iterable[guests.Hostdev]) -> None:
    """Add the units' hostdevs to Nova's guest config.

    Nova's hard reboot passes the mdevs of the old definition back in:
    ours among them are not added twice.
    """
    present = {d.uuid for d in guest.devices
               if isinstance(d, vconfig.LibvirtConfigGuestHostdevMDEV)}
    for hostdev in units:
        if (hostdev.kind == device_model.HOSTDEV_MDEV
                and hostdev.unit in present):
            continue
        guest.add_device(config(hostdev))


def domain_units(host) -> assignments.DomainLookup:
    """The units the host's domains hold, read once when first asked.

    Every domain counts, running or only defined (a stopped guest gets
    its hostdevs back at its next start), as ``cyborg-nova audit``
    counts them.

    :param host: Nova's libvirt ``Host``.
    """
    cache: list = []

    def lookup():
        if not cache:
            cache.append(_read_domain_units(host))
        return cache[0]
    return lookup


def _read_domain_units(host) -> dict[str, str] | None:
    try:
        found: dict[str, str] = {}
        for guest in host.list_guests(only_running=False):
            for unit in audit.hostdev_addresses(guest.get_xml_desc()):
                found.setdefault(unit, guest.uuid)
        return found
    except Exception as exc:
        LOG.warning('cyborg-nova: cannot list the hostdevs of this '
                    "host's domains: %s", exc)
        return None


def in_guest(guest, unit: str) -> bool:
    """Whether the running guest has ``unit`` now."""
    # The libvirtd's own description of its domain, not user input.
    return guest_xml.hostdev_in_domain(
        ElementTree.fromstring(guest.get_xml_desc()),  # nosec B314
        unit)


def suspend_without(guest, instance, units: list[guests.Hostdev],
                    suspend: Callable[[], None]) -> None:
    """``suspend()`` the guest with PCI ``units`` unplugged first.

    QEMU cannot save a guest with a VFIO device lacking migration
    support (libvirt refuses the managed save): as Nova does for its own
    devices, the units are unplugged from the running guest (its
    definition, allocation and units stay) and plugged in again at
    resume (:func:`replug`); on a failure, at once.

    :raises nova.exception.InstanceFaultRollback: the guest did not
        release a unit in time, or the suspend failed.
    """
    unplugged: list[guests.Hostdev] = []
    try:
        for hostdev in units:
            if not in_guest(guest, hostdev.unit):
                continue
            guest.detach_device(config(hostdev), live=True)
            deadline = time.monotonic() + SUSPEND_DETACH_TIMEOUT
            while in_guest(guest, hostdev.unit):
                if time.monotonic() > deadline:
                    raise exception.InstanceSuspendFailure(
                        reason='the guest did not release accelerator '
                               'unit %s within %d s'
                               % (hostdev.unit, SUSPEND_DETACH_TIMEOUT))
                time.sleep(0.5)
            unplugged.append(hostdev)
        if unplugged:
            LOG.info('Instance %s: accelerator units %s unplugged for the '
                     'suspend', instance.uuid,
                     ', '.join(h.unit for h in unplugged))
        suspend()
    except Exception as exc:
        replug(guest, instance, unplugged)
        if isinstance(exc, exception.InstanceFaultRollback):
            raise
        raise exception.InstanceFaultRollback(
            inner_exception=exception.InstanceSuspendFailure(
                reason='accelerator units of instance %s: %s'
                       % (instance.uuid, exc)))


def replug(guest, instance, units: list[guests.Hostdev]) -> list[str]:
    """Plug ``units`` into the running guest where missing; which."""
    plugged = []
    for hostdev in units:
        try:
            if not in_guest(guest, hostdev.unit):
                guest.attach_device(config(hostdev), live=True)
                plugged.append(hostdev.unit)
        except Exception as exc:
            LOG.error('Instance %s: accelerator unit %s could not be '
                      'plugged in again: %s; a hard reboot gives the guest '
                      'its units', instance.uuid, hostdev.unit, exc)
    if plugged:
        LOG.info('Instance %s: accelerator units %s plugged in again '
                 'after the resume', instance.uuid, ', '.join(plugged))
    return plugged


def pci_only(units: Iterable[guests.Hostdev]) -> list[guests.Hostdev]:
    """The PCI functions of ``units`` (what suspend unplugs), sorted."""
    return sorted((h for h in units if device_model.is_pci_address(h.unit)),
                  key=lambda h: h.unit)
