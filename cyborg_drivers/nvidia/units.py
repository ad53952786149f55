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


"""A guest's vGPU units made real when given, undone when freed.

- an mdev unit (its uuid) is a mediated device, created on its parent
  when a guest is given it (spawn, a move's destination, a hard reboot
  after the host rebooted and lost it) and removed once freed;
- a vendor-VFIO unit (a VF's address) holds the GPU's configured vGPU
  type, written when a guest is given it and cleared (0) once freed.

The NVIDIA driver's unit hooks (:meth:`~cyborg_drivers.base.
AcceleratorDriver.prepare_units`, ``clear_unit``); the writes go through
the privileged helpers (:mod:`privsep.mdev`, :mod:`privsep.nvidia`).
Which unit serves which guest is decided by the caller.
"""

from __future__ import annotations

from typing import Iterable

from cyborg_drivers import base
from cyborg_drivers import device as device_model
from cyborg_drivers.nvidia import vgpu


class PrivsepOps:
    """The privileged writes, through the ``sysfs_admin`` daemon.

    Tests put an object with the same methods in its place (a fake
    kernel on a sysfs tree).
    """

    def create_mdev(self, parent: str, type_id: str, mdev: str) -> None:
        import privsep.mdev
        privsep.mdev.create(parent, type_id, mdev)

    def remove_mdev(self, parent: str, mdev: str) -> None:
        import privsep.mdev
        privsep.mdev.remove(parent, mdev)

    def set_vgpu_type(self, vf: str, type_id: int) -> None:
        import privsep.nvidia
        privsep.nvidia.set_vgpu_type(vf, type_id)

    def clear_vgpu_type(self, vf: str, type_id: int) -> None:
        import privsep.nvidia
        privsep.nvidia.clear_vgpu_type(vf, type_id)


def framework(accelerator: device_model.Accelerator) -> str | None:
    """``'mdev'``, ``'vfio'`` or None (not a vGPU accelerator)."""
    return dict(accelerator.capabilities).get(vgpu.FRAMEWORK)


def prepare(sysfs_root: str, accelerator: device_model.Accelerator,
            units: Iterable[str], ops) -> list[str]:
    """Make ``units`` of ``accelerator`` usable by a guest; what was made.

    Units that are ready already are left alone, so calling it at every
    guest build changes nothing.

    :raises base.UnitError: a unit could not be made (the message names
        it); units made before it stay (they are freed with the
        allocation).
    """
    kind = framework(accelerator)
    if kind == vgpu.MDEV:
        return _prepare_mdevs(sysfs_root, accelerator, units, ops)
    if kind == vgpu.VFIO:
        type_id = int(dict(accelerator.capabilities)['vgpu_type'])
        made = []
        for vf in units:
            if vgpu.held_type(sysfs_root, vf) == type_id:
                continue
            _call(ops.set_vgpu_type, 'vGPU type %d on VF %s'
                  % (type_id, vf), vf, type_id)
            if vgpu.held_type(sysfs_root, vf) != type_id:
                raise base.UnitError('VF %s does not hold vGPU type %d '
                                     'after it was written' % (vf, type_id))
            made.append(vf)
        return made
    return []


def _prepare_mdevs(sysfs_root, accelerator, units, ops) -> list[str]:
    known = {u.uuid: u for u in accelerator.mdev_units}
    made = []
    for mdev in units:
        if vgpu.mdev_parent(sysfs_root, mdev) is not None:
            continue
        unit = known.get(mdev)
        if unit is None:
            raise base.UnitError(
                'mediated device %s is gone and is not one %s can create '
                'again' % (mdev, accelerator.address))
        _call(ops.create_mdev, 'mediated device %s of type %s on %s'
              % (mdev, unit.type_id, unit.parent),
              unit.parent, unit.type_id, mdev)
        if vgpu.mdev_parent(sysfs_root, mdev) is None:
            raise base.UnitError('mediated device %s was written to %s\'s '
                                 '%s create but does not exist'
                                 % (mdev, unit.parent, unit.type_id))
        made.append(mdev)
    return made


def clear(sysfs_root: str, unit: str, ops) -> bool:
    """Undo what :func:`prepare` made of a freed ``unit``; whether it did.

    A vendor-VFIO VF holding a type is cleared and an mdev that exists
    removed; any other unit (a VF of a NIC, a whole GPU) is left alone.

    :raises Exception: the privileged write failed.
    """
    if device_model.is_pci_address(unit):
        held = vgpu.held_type(sysfs_root, unit)
        if held:
            ops.clear_vgpu_type(unit, held)
            return True
        return False
    where = vgpu.mdev_parent(sysfs_root, unit)
    if where is not None:
        ops.remove_mdev(where[0], unit)
        return True
    return False


def _call(fn, what: str, *args) -> None:
    try:
        fn(*args)
    except Exception as exc:
        raise base.UnitError('%s: %s' % (what, exc))
