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

"""NVIDIA vGPUs in sysfs: mdev units, vendor-specific VFIO state, traits.

Two ways a GPU is split into vGPUs:

- **mdev** (vGPU up to 16: Turing, Ampere): the GPU, or each of its
  SR-IOV VFs, offers types in ``mdev_supported_types/<type>/``; a vGPU is
  a mediated device created by writing a uuid to the type's ``create``
  and given to a guest as ``<hostdev type='mdev'>``
  (``Documentation/ABI/testing/sysfs-bus-vfio-mdev``).
- **vendor-specific VFIO** (vGPU 17+ on Ada, Hopper, Blackwell, kernel
  6.8+): no mdev; each VF has ``nvidia/creatable_vgpu_types`` (``<id> :
  <name>`` lines under a header, only what can be created on it now) and
  ``nvidia/current_vgpu_type`` (the type id it holds, 0 for none). A
  vGPU is made by writing a type id there, removed by writing 0, and the
  VF is given to the guest as a PCI hostdev with ``managed='no'`` (it
  stays bound to NVIDIA's driver, which is its VFIO driver).

Kept apart from the driver so the privileged helpers
(:mod:`privsep.nvidia`) and the guest code check the same facts.
"""

from __future__ import annotations

import dataclasses
import os
import re
import uuid

from cyborg_drivers import device as device_model
from cyborg_drivers import names
from cyborg_drivers import sysfs

# Stable across releases: the uuids of the mdevs this project creates are
# derived from it, so that a unit keeps its name across restarts and host
# reboots (and an mdev can be made again under the name a guest has).
MDEV_NAMESPACE = uuid.UUID('0f4b9c1e-6a2d-5e83-b7c4-19d2e8a3f650')

#: ``capabilities`` key of a vGPU accelerator saying how its vGPUs are
#: made: :data:`MDEV` or :data:`VFIO`.
FRAMEWORK = 'vgpu_framework'
MDEV, VFIO = 'mdev', 'vfio'

VFIO_DIR = 'nvidia'
CREATABLE = 'creatable_vgpu_types'
CURRENT = 'current_vgpu_type'
#: NVIDIA's type ids are unsigned 32-bit; 0 means "no vGPU".
TYPE_ID_MAX = 0xffffffff

_CREATABLE_LINE = re.compile(r'^\s*(\d+)\s*:\s*(\S.*?)\s*$')


#: One vGPU unit of an mdev type (the device model's, re-exported).
MdevUnit = device_model.MdevUnit


def mdev_uuid(parent: str, type_id: str, index: int) -> str:
    """The uuid of this project's ``index``-th mdev of a type on a parent."""
    return str(uuid.uuid5(MDEV_NAMESPACE,
                          '%s/%s/%d' % (parent, type_id, index)))


def mdev_units(parent: str, type_id: str, existing: list[str],
               available: int) -> list[MdevUnit]:
    """The units of ``type_id`` on ``parent``: existing mdevs, then free.

    Every existing mdev of the type is a unit (those made before the
    compute started are adopted). The ``available`` instances the parent
    can still create are named by :func:`mdev_uuid`, skipping names in
    use, so the list keeps its names as mdevs are created and removed:
    an mdev this project made is the same unit before and after.
    """
    existing = sorted(set(existing))
    units = [MdevUnit(u, parent, type_id, True) for u in existing]
    index = 0
    while available > 0:
        name = mdev_uuid(parent, type_id, index)
        index += 1
        if name in existing:
            continue
        units.append(MdevUnit(name, parent, type_id, False))
        available -= 1
    # This project's own first, in index order, then the adopted: the
    # order units are handed out in.
    ours = {mdev_uuid(parent, type_id, i): i for i in range(index)}
    return sorted(units, key=lambda u: (u.uuid not in ours,
                                        ours.get(u.uuid, 0), u.uuid))


def parse_creatable(text: str | None) -> dict[int, str]:
    """``creatable_vgpu_types`` text -> {type id: full name}.

    The header (``ID    : vGPU Name``) and anything else that is not an
    ``<id> : <name>`` line is skipped.
    """
    types = {}
    for line in (text or '').splitlines():
        m = _CREATABLE_LINE.match(line)
        if m and 0 < int(m.group(1)) <= TYPE_ID_MAX:
            types[int(m.group(1))] = m.group(2)
    return types


def parse_type_id(text: str | None) -> int | None:
    """``current_vgpu_type`` text -> the type id (0: none); None if bad."""
    value = (text or '').strip()
    if not value.isdigit() or int(value) > TYPE_ID_MAX:
        return None
    return int(value)


@dataclasses.dataclass(frozen=True)
class VfioState:
    """What a VF's vendor-specific VFIO files say."""

    current: int | None
    creatable: dict[int, str]


def has_vendor_vfio(snapshot: sysfs.PciSnapshot, address: str) -> bool:
    return CURRENT in snapshot.listdir(address, VFIO_DIR)


def vfio_state(snapshot: sysfs.PciSnapshot, address: str) -> VfioState:
    return VfioState(
        current=parse_type_id(snapshot.attr(address, VFIO_DIR, CURRENT)),
        creatable=parse_creatable(snapshot.attr(address, VFIO_DIR,
                                                CREATABLE)))


def _current_path(sysfs_root: str, address: str) -> str:
    return os.path.join(sysfs_root, 'bus', 'pci', 'devices', address,
                        VFIO_DIR, CURRENT)


def is_vendor_vfio(sysfs_root: str, address: str) -> bool:
    """Whether the function at ``address`` is a vendor-VFIO vGPU VF."""
    return os.path.exists(_current_path(sysfs_root, address))


def held_type(sysfs_root: str, address: str) -> int | None:
    """The type id a vendor-VFIO VF holds, 0 for none.

    None if ``address`` is no such VF or its type cannot be read.
    """
    try:
        with open(_current_path(sysfs_root, address)) as f:
            return parse_type_id(f.read())
    except OSError:
        return None


def mdev_parent(sysfs_root: str, mdev: str) -> tuple[str, str] | None:
    """(parent PCI address, type id) of an existing mdev; None if absent."""
    link = os.path.join(sysfs_root, 'bus', 'mdev', 'devices', mdev)
    if not os.path.isdir(link):
        return None
    path = os.path.realpath(link)
    type_id = os.path.basename(os.path.realpath(
        os.path.join(path, 'mdev_type')))
    return os.path.basename(os.path.dirname(path)), type_id


def type_trait(product_id: str, type_id: str | int, name: str) -> str:
    """The trait of one vGPU type, distinct and stable.

    Built from the type id and the whole name, so types whose names share
    their first words (``NVIDIA RTX Pro 6000 Blackwell DC-1-3Q``,
    ``...DC-2-48C``) never meet:
    ``CUSTOM_NVIDIA_<PID>_VGPU_<TYPE ID>_<NAME>``.
    """
    return names.custom('NVIDIA', product_id.upper(), 'VGPU', str(type_id),
                        name)


def type_id_trait(product_id: str, type_id: int) -> str:
    """``CUSTOM_NVIDIA_<PID>_VGPU_<TYPE ID>``: a vendor-VFIO type by id.

    Always reported for such a GPU's type, even when no sysfs file names
    the type any more (every VF holds it): NVIDIA's type ids are distinct
    per type, so this trait alone tells types apart.
    """
    return names.custom('NVIDIA', product_id.upper(), 'VGPU', str(type_id))


def cyborg_type_trait(product_id: str, name: str) -> str | None:
    """Upstream Cyborg's trait of an mdev type, where it is unambiguous.

    Cyborg names a type by the second word of its name (``GRID T4-2B``
    -> ``CUSTOM_NVIDIA_1EB8_T4_2B``). Only two-word names keep that
    trait: with more words the second one no longer tells types apart.
    """
    parts = name.split()
    if len(parts) != 2:
        return None
    return names.custom('NVIDIA', product_id.upper(),
                        parts[1].replace('-', '_'))
