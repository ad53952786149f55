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

"""NVIDIA GPUs: whole GPUs (PGPU), SR-IOV VFs and vGPU types (VGPU)."""

from __future__ import annotations

from oslo_config import cfg

from cyborg_drivers import base
from cyborg_drivers import device as device_model
from cyborg_drivers import names
from cyborg_drivers import sysfs

VENDOR_NVIDIA = 0x10de
# VGA compatible controller and 3D controller. The audio and USB-C
# functions NVIDIA boards also expose are not accelerators.
GPU_SUBCLASSES = (0x0300, 0x0302)


class NvidiaGpuDriver(base.AcceleratorDriver):
    """Reports each NVIDIA GPU as one accelerator.

    - no vGPU type enabled, SR-IOV off: ``PGPU``, one unit, trait
      ``CUSTOM_NVIDIA_<PID>`` (upstream Cyborg's name);
    - a type of ``enabled_vgpu_types`` offered by the GPU (or its VFs):
      ``VGPU`` with as many units as instances of that type, trait
      ``CUSTOM_NVIDIA_<PID>_<TYPE NAME>`` (e.g. ``CUSTOM_NVIDIA_1EB8_T4_2B``);
    - SR-IOV enabled and no type enabled: ``VGPU`` whose units are the VFs
      (on SR-IOV GPUs each VF carries one vGPU), traits
      ``CUSTOM_NVIDIA_<PID>`` and ``CUSTOM_VF``, with ``setup_required``
      and a problem: a VF without a vGPU type cannot be used by a guest,
      so the units are held back until a type is enabled.
    """

    name = 'nvidia_gpu'
    description = 'NVIDIA GPUs (10de): PGPU, or VGPU by VFs or mdev type'
    CONFIG_OPTS = [
        cfg.ListOpt(
            'enabled_vgpu_types',
            default=[],
            help="""
mdev types (e.g. ``nvidia-222``) to report as ``VGPU`` inventory.

A GPU that offers one of these types in ``mdev_supported_types`` is
reported as ``VGPU`` with as many units as it can create instances of
that type; when a GPU offers several, the first listed here wins. GPUs
offering none of them are reported as whole ``PGPU`` devices. The default,
empty, reports every GPU whole, except GPUs with SR-IOV VFs enabled: their
VFs are reported as ``VGPU`` units but held back (``setup_required``)
until one of the types their VFs offer is listed here.

Related options:

* ``[cyborg_nova] enabled_drivers`` must contain ``nvidia_gpu``.
"""),
    ]

    def claims(self, function: sysfs.PciFunction) -> bool:
        return _is_gpu(function)

    def discover(self, snapshot: sysfs.PciSnapshot
                 ) -> list[device_model.Accelerator]:
        found = []
        for function in self.physical_functions(snapshot):
            found.append(self._gpu(snapshot, function))
        return found

    def _gpu(self, snapshot: sysfs.PciSnapshot,
             function: sysfs.PciFunction) -> device_model.Accelerator:
        address = function.address
        pid = function.product_id.upper()
        sriov, vfs = self.vf_units(snapshot, address)
        # On SR-IOV GPUs the types are offered by the VFs, one instance
        # each; on older GPUs by the PF itself. VFs are only looked at
        # when a type is enabled: a listdir per VF adds up on big hosts.
        parents = (vfs if vfs and self.options.enabled_vgpu_types
                   else (address,))
        offered: dict[str, list[tuple[str, device_model.MdevType]]] = {}
        for parent in parents:
            for mdev in _mdev_types(snapshot, parent):
                offered.setdefault(mdev.type_id, []).append((parent, mdev))
        enabled = [t for t in self.options.enabled_vgpu_types
                   if t in offered]
        if enabled:
            chosen = offered[enabled[0]]
            mdev = chosen[0][1]
            total = sum(m.available_instances + m.existing_instances
                        for _, m in chosen)
            type_name = _vgpu_type_name(mdev.name)
            return self.accelerator(
                snapshot, function,
                device_type='GPU',
                resource_class=names.RC_VGPU,
                traits=(names.custom('NVIDIA', pid, type_name),),
                total=total,
                units=tuple(parent for parent, _ in chosen),
                sriov=sriov,
                mdev_types=tuple(m for _, m in chosen),
                capabilities=(('vgpu_type', mdev.type_id),))
        if vfs:
            # A VF is only usable once a vGPU type is created on it: until
            # a type is enabled the VFs are reported but held back.
            types = (sorted(offered) if parents == vfs else
                     [m.type_id for m in _mdev_types(snapshot, vfs[0])])
            return self.accelerator(
                snapshot, function,
                device_type='GPU',
                resource_class=names.RC_VGPU,
                traits=(names.custom('NVIDIA', pid), names.TRAIT_VF),
                total=len(vfs),
                units=vfs,
                sriov=sriov,
                setup_required=True,
                problems=(_no_type_problem(self.group_name(), types),))
        return self.accelerator(
            snapshot, function,
            device_type='GPU',
            resource_class=names.RC_PGPU,
            traits=(names.custom('NVIDIA', pid),),
            total=1,
            units=(address,),
            sriov=sriov,
            # Offered but not enabled: shown so operators see what they
            # could enable.
            mdev_types=tuple(m for chosen in offered.values()
                             for _, m in chosen))


def _no_type_problem(group: str, offered: list[str]) -> str:
    text = ('SR-IOV VFs without a vGPU type: a VF is unusable until a type '
            'is enabled in [%s] enabled_vgpu_types' % group)
    if offered:
        text += ' (its VFs offer %s)' % ', '.join(offered)
    return text


def _is_gpu(function: sysfs.PciFunction) -> bool:
    return (function.vendor == VENDOR_NVIDIA
            and function.subclass in GPU_SUBCLASSES)


#: More mdevs of one type than one GPU could ever offer.
MAX_INSTANCES = 0xffff


def _mdev_types(snapshot: sysfs.PciSnapshot, address: str
                ) -> list[device_model.MdevType]:
    types = []
    for type_id in snapshot.listdir(address, 'mdev_supported_types'):
        def attr(name):
            return snapshot.attr(address, 'mdev_supported_types', type_id,
                                 name)
        available = attr('available_instances')
        # Bounded: a garbage count must not become an inventory Placement
        # refuses (its totals are 32-bit), failing the whole host's update.
        if available is None or not available.isdigit() or \
                int(available) > MAX_INSTANCES:
            snapshot.problem(address, 'mdev type %s without a readable '
                             'available_instances' % type_id)
            continue
        existing = len(snapshot.listdir(address, 'mdev_supported_types',
                                        type_id, 'devices'))
        types.append(device_model.MdevType(
            type_id=type_id,
            name=attr('name') or type_id,
            available_instances=int(available),
            existing_instances=existing,
            device_api=attr('device_api') or 'vfio-pci'))
    return types


def _vgpu_type_name(name: str) -> str:
    """'GRID T4-2B' -> 'T4_2B', as upstream Cyborg names its traits."""
    parts = name.split()
    return (parts[1] if len(parts) > 1 else name).replace('-', '_')
