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

"""The device model: what discovery knows about one accelerator.

An :class:`Accelerator` is immutable. Discovery builds a fresh set every
cycle and callers compare sets, so nothing downstream can mutate what a
driver reported and have it silently persist.
"""

from __future__ import annotations

import dataclasses
import functools
import uuid

from cyborg_drivers import aer as aer_lib
from cyborg_drivers import pci_address

# Stable across releases: provider uuids are derived from it, and changing
# it would orphan every provider an upgrade had already registered.
DEVICE_NAMESPACE = uuid.UUID('6b2f9d0e-3c4a-5d1e-9f8a-2b7c6d5e4f3a')

PCI_ADDRESS_RE = pci_address.PCI_ADDRESS_RE
is_pci_address = pci_address.is_pci_address

# Device types of the internal API spec's ``acc_specs.device_type``.
DEVICE_TYPES = ('GPU', 'FPGA', 'CRYPTO', 'NIC', 'GENERIC')


#: How a unit is put into a guest (a libvirt ``<hostdev>``): a PCI
#: function libvirt binds to vfio-pci (``managed='yes'``) ...
HOSTDEV_PCI = 'pci'
#: ... a PCI function that keeps its own driver, which is already its
#: VFIO driver (``managed='no'``, e.g. a vendor-VFIO vGPU VF) ...
HOSTDEV_PCI_UNMANAGED = 'pci-unmanaged'
#: ... or a mediated device, by its uuid.
HOSTDEV_MDEV = 'mdev'
HOSTDEV_KINDS = (HOSTDEV_PCI, HOSTDEV_PCI_UNMANAGED, HOSTDEV_MDEV)


def default_hostdev(unit: str) -> str:
    """How ``unit`` goes into a guest unless its driver says otherwise.

    A PCI address is a managed PCI hostdev; anything else (a uuid) is a
    mediated device.
    """
    return HOSTDEV_PCI if is_pci_address(unit) else HOSTDEV_MDEV


@functools.lru_cache(maxsize=65536)
def device_uuid(nodename: str, address: str) -> str:
    """The stable uuid of the accelerator at ``address`` on ``nodename``.

    Derived, not stored, so a restarted or rebuilt host reports the same
    uuid for the same slot without any local state. Cached: every cycle
    and guest build asks it of every device of the host.
    """
    return str(uuid.uuid5(DEVICE_NAMESPACE, '%s/%s' % (nodename, address)))


@dataclasses.dataclass(frozen=True)
class SriovInfo:
    """SR-IOV state of a physical function."""

    total_vfs: int
    num_vfs: int
    vf_addresses: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class FpgaRegion:
    """A reconfigurable region and the function currently loaded in it."""

    name: str
    interface_id: str | None
    function_id: str | None
    layout: str  # 'opae', 'dfl' or 'xrt'


@dataclasses.dataclass(frozen=True)
class MdevType:
    """A mediated device type a parent device offers (e.g. a vGPU type)."""

    type_id: str
    name: str
    available_instances: int
    existing_instances: int = 0
    device_api: str = 'vfio-pci'


@dataclasses.dataclass(frozen=True)
class MdevUnit:
    """One vGPU unit of an mdev type: a mediated device, made or to be.

    :attr exists: whether the mdev exists now (else it is made when a
        guest is given the unit).
    """

    uuid: str
    parent: str
    type_id: str
    exists: bool


@dataclasses.dataclass(frozen=True)
class Accelerator:
    """One accelerator as discovery sees it; one resource provider later.

    ``total`` is the number of assignable units: 1 for a whole device, the
    number of enabled VFs of a PF whose VFs are handed out, or the number
    of instances of a vGPU type. ``units`` names those units by PCI
    address (the VFs, the device itself, or the parents that create the
    vGPU type's mdevs) so the attach path never has to rediscover them.
    """

    address: str
    driver: str
    device_type: str
    resource_class: str
    traits: tuple[str, ...]
    total: int
    vendor_id: str
    product_id: str
    class_code: str
    subsystem_vendor_id: str | None = None
    subsystem_product_id: str | None = None
    numa_node: int | None = None
    iommu_group: int | None = None
    kernel_driver: str | None = None
    functions: tuple[str, ...] = ()
    units: tuple[str, ...] = ()
    sriov: SriovInfo | None = None
    fpga_regions: tuple[FpgaRegion, ...] = ()
    mdev_types: tuple[MdevType, ...] = ()
    #: For mdev vGPUs: each unit's mediated device (a
    #: :class:`cyborg_drivers.nvidia.vgpu.MdevUnit`), in ``units`` order.
    mdev_units: tuple = ()
    capabilities: tuple[tuple[str, str], ...] = ()
    setup_required: bool = False
    reboot_required: bool = False
    problems: tuple[str, ...] = ()
    remote: bool = False
    #: The PCIe AER counters of each of its PCI functions (itself, its
    #: other functions and its units), as discovery last read them; empty
    #: when not read (an out-of-process driver's device).
    aer: tuple[aer_lib.AerCounters, ...] = ()

    def __post_init__(self) -> None:
        if self.device_type not in DEVICE_TYPES:
            raise ValueError('unknown device type %r' % self.device_type)
        if self.total < 0:
            raise ValueError('total must not be negative')
        # Sorted and de-duplicated so two discoveries of the same hardware
        # compare equal and serialise identically.
        object.__setattr__(self, 'traits', tuple(sorted(set(self.traits))))

    @property
    def addresses(self) -> tuple[str, ...]:
        """Every PCI function this accelerator is made of, itself first."""
        extra = [a for a in self.functions if a != self.address]
        vfs = self.sriov.vf_addresses if self.sriov else ()
        return (self.address, *extra, *vfs)

    def _pci(self) -> dict:
        return {
            'address': self.address,
            'vendor_id': self.vendor_id,
            'product_id': self.product_id,
            'class_code': self.class_code,
            'subsystem_vendor_id': self.subsystem_vendor_id,
            'subsystem_product_id': self.subsystem_product_id,
            'numa_node': self.numa_node,
            'iommu_group': self.iommu_group,
            'kernel_driver': self.kernel_driver,
            'functions': list(self.functions),
            'sriov': (dataclasses.asdict(self.sriov)
                      if self.sriov else None),
        }

    def _placement(self) -> dict:
        return {
            'resource_class': self.resource_class,
            'traits': list(self.traits),
            'total': self.total,
            'units': list(self.units),
        }

    def _details(self) -> dict:
        return {
            'fpga_regions': [dataclasses.asdict(r)
                             for r in self.fpga_regions],
            'mdev_types': [dataclasses.asdict(m) for m in self.mdev_types],
            'mdev_units': [dataclasses.asdict(u) for u in self.mdev_units],
            'problems': list(self.problems),
            'aer': [c.to_dict() for c in self.aer],
        }

    def to_dict(self) -> dict:
        """A flat JSON-able view (the CLI's ``discover`` columns)."""
        return {
            **self._pci(),
            'driver': self.driver,
            'device_type': self.device_type,
            **self._placement(),
            'setup_required': self.setup_required,
            'reboot_required': self.reboot_required,
            **self._details(),
        }

    #: The keys of a :meth:`to_hardware` entry beyond the internal API
    #: spec's (``uuid``, ``acc_specs``, ``acc_status``): this project's
    #: extension, all of which :func:`from_hardware` reads back.
    HARDWARE_EXTENSION_KEYS = ('driver', 'pci', 'placement', 'fpga_regions',
                               'mdev_types', 'mdev_units', 'problems',
                               'aer')

    def to_hardware(self, nodename: str) -> dict:
        """One entry of the internal API's ``GET /hardware`` list.

        The spec's keys (``uuid``, ``acc_specs``, ``acc_status``) come
        first; ``pci`` and ``placement`` carry what the spec leaves to
        drivers and what the Nova side needs.
        """
        capability = {'num': self.total}
        capability.update(dict(self.capabilities))
        return {
            'uuid': device_uuid(nodename, self.address),
            'acc_specs': {
                'remote': int(self.remote),
                'num': self.total,
                'device_type': self.device_type,
                'acc_capability': capability,
            },
            'acc_status': {
                'setup_required': self.setup_required,
                'reboot_required': self.reboot_required,
            },
            'driver': self.driver,
            'pci': self._pci(),
            'placement': self._placement(),
            **self._details(),
        }


def from_hardware(entry: dict) -> Accelerator:
    """The accelerator a :meth:`Accelerator.to_hardware` entry describes.

    What an out-of-process driver serves comes back as the device model,
    with every field ``to_hardware`` writes (its capabilities, such as a
    vGPU's type and framework, its FPGA regions, mdev types and mdev
    units included), so its devices reach Placement and the guest as
    local ones do; the result is ``remote``.

    :raises ValueError: the entry lacks the ``pci`` or ``placement``
        extension, or a field is of the wrong kind (say which).
    """
    try:
        pci = entry['pci']
        placed = entry['placement']
        specs = entry['acc_specs']
        sriov = pci.get('sriov')
        capability = dict(specs.get('acc_capability') or {})
        capability.pop('num', None)
        accelerator = Accelerator(
            address=pci['address'],
            driver=str(entry.get('driver') or 'remote'),
            device_type=specs['device_type'],
            resource_class=placed['resource_class'],
            traits=tuple(placed.get('traits', ())),
            total=int(placed['total']),
            vendor_id=pci['vendor_id'],
            product_id=pci['product_id'],
            class_code=pci['class_code'],
            subsystem_vendor_id=pci.get('subsystem_vendor_id'),
            subsystem_product_id=pci.get('subsystem_product_id'),
            numa_node=pci.get('numa_node'),
            iommu_group=pci.get('iommu_group'),
            kernel_driver=pci.get('kernel_driver'),
            functions=tuple(pci.get('functions', ())),
            units=tuple(placed.get('units', ())),
            sriov=(SriovInfo(sriov['total_vfs'], sriov['num_vfs'],
                             tuple(sriov.get('vf_addresses', ())))
                   if sriov else None),
            fpga_regions=tuple(FpgaRegion(**r) for r in entry.get(
                'fpga_regions', ())),
            mdev_types=tuple(MdevType(**m) for m in entry.get(
                'mdev_types', ())),
            mdev_units=tuple(MdevUnit(**u) for u in entry.get(
                'mdev_units', ())),
            capabilities=tuple((str(k), str(v))
                               for k, v in capability.items()),
            setup_required=bool(entry.get('acc_status', {}).get(
                'setup_required', False)),
            reboot_required=bool(entry.get('acc_status', {}).get(
                'reboot_required', False)),
            problems=tuple(entry.get('problems', ())),
            remote=True,
            aer=tuple(aer_lib.AerCounters.from_dict(c)
                      for c in entry.get('aer', ())))
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise ValueError('not a device of this project\'s /hardware '
                         'shape: %s %s' % (type(exc).__name__, exc))
    mdevs = {u.uuid for u in accelerator.mdev_units}
    bad = [a for a in (accelerator.address, *accelerator.functions,
                       *(u.parent for u in accelerator.mdev_units))
           if not isinstance(a, str) or not is_pci_address(a)]
    # A unit is a PCI function, or one of the accelerator's mdevs.
    bad += [u for u in accelerator.units
            if not isinstance(u, str) or not (is_pci_address(u)
                                              or u in mdevs)]
    if bad:
        raise ValueError('not PCI addresses: %s' % ', '.join(map(str, bad)))
    if not isinstance(accelerator.resource_class, str) or not all(
            isinstance(t, str) for t in accelerator.traits):
        raise ValueError('resource class and traits must be strings')
    return accelerator
