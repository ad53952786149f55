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

"""NVIDIA GPUs: whole GPUs (PGPU), and vGPUs (VGPU) by mdev or VFIO VF."""

from __future__ import annotations

import dataclasses
import glob
import os
import re
from typing import Iterable

from oslo_config import cfg

from cyborg_drivers import base
from cyborg_drivers import device as device_model
from cyborg_drivers import names
from cyborg_drivers.nvidia import nova_mdev
from cyborg_drivers.nvidia import units as vgpu_units
from cyborg_drivers.nvidia import vgpu
from cyborg_drivers import sysfs

VENDOR_NVIDIA = 0x10de
# VGA compatible controller and 3D controller. The audio and USB-C
# functions NVIDIA boards also expose are not accelerators.
GPU_SUBCLASSES = (0x0300, 0x0302)

_PRODUCT_RE = re.compile(r'^10de:[0-9a-f]{4}$')
#: The name of every mdev type an NVIDIA GPU offers: the kernel names a
#: type ``<parent driver>-<type>``, and the types of NVIDIA's vGPU
#: manager (driver ``nvidia``) are numbers.
_MDEV_TYPE_RE = re.compile(r'^nvidia-[0-9]+$')

FRAMEWORK, MDEV, VFIO = vgpu.FRAMEWORK, vgpu.MDEV, vgpu.VFIO


class NvidiaGpuDriver(base.AcceleratorDriver):
    """Reports each NVIDIA GPU as one accelerator.

    - no vGPU type enabled, SR-IOV off: ``PGPU``, one unit, trait
      ``CUSTOM_NVIDIA_<PID>`` (upstream Cyborg's name);
    - an mdev type of ``enabled_vgpu_types`` offered by the GPU (or its
      VFs): ``VGPU`` whose units are the type's mediated devices (those
      that exist, then those the parents can still create), traits
      ``CUSTOM_NVIDIA_<PID>_VGPU_<TYPE ID>_<NAME>`` and, for two-word names,
      upstream Cyborg's ``CUSTOM_NVIDIA_<PID>_<TYPE NAME>`` (e.g.
      ``CUSTOM_NVIDIA_1EB8_T4_2B``);
    - VFs with NVIDIA's vendor-specific VFIO files (vGPU 17+) and a type
      in ``vfio_vgpu_types`` for the GPU: ``VGPU`` whose units are the VFs
      that hold or can hold that type, traits ``CUSTOM_NVIDIA_<PID>``,
      ``CUSTOM_NVIDIA_<PID>_VGPU_<TYPE ID>`` and, once a VF's creatable
      list has shown the type's name, ``CUSTOM_NVIDIA_<PID>_VGPU_<TYPE
      ID>_<NAME>``;
    - SR-IOV enabled and no type enabled: ``VGPU`` whose units are the VFs,
      traits ``CUSTOM_NVIDIA_<PID>`` and ``CUSTOM_VF``, with
      ``setup_required`` and a problem naming the option to set: a VF
      without a vGPU type cannot be used by a guest.
    """

    name = 'nvidia_gpu'
    description = 'NVIDIA GPUs (10de): PGPU, or VGPU by mdev type or VFIO VF'
    CONFIG_OPTS = [
        cfg.ListOpt(
            'enabled_vgpu_types',
            default=[],
            help="""
mdev types (e.g. ``nvidia-222``) to report as ``VGPU`` inventory.

For GPUs that offer vGPU types as mediated devices (vGPU 16 and older:
Turing, Ampere). A GPU that offers one of these types in
``mdev_supported_types`` (on itself or on its SR-IOV VFs) is reported as
``VGPU`` with one unit per mediated device of that type it has or can
create; when a GPU offers several, the first listed here wins. A guest
allocated a unit gets the mdev, created at spawn if it does not exist yet
and removed when the guest leaves. GPUs offering none of them are
reported as whole ``PGPU`` devices. Default: empty.

Related options:

* ``vfio_vgpu_types``, for GPUs with NVIDIA's vendor-specific VFIO.
* ``[cyborg_nova] enabled_drivers`` must contain ``nvidia_gpu``.
* Nova's own ``[devices] enabled_mdev_types`` must not give a type to the
  same GPU or its VFs: such a GPU is held back, with a problem naming
  Nova's option.
"""),
        cfg.ListOpt(
            'vfio_vgpu_types',
            default=[],
            help="""
vGPU type each GPU with NVIDIA's vendor-specific VFIO serves.

For vGPU 17 and later on Ada, Hopper and Blackwell GPUs, whose VFs carry
``nvidia/creatable_vgpu_types`` and ``nvidia/current_vgpu_type`` instead
of mdev types. Each entry is ``<GPU>=<type id>``, where ``<GPU>`` is the
PF's PCI address (``0000:41:00.0``) or a product, ``10de:<device id>``
(``10de:2335``: every GPU of that product), and ``<type id>`` the number
``creatable_vgpu_types`` lists (``1414``). An address wins over a
product. The GPU is reported as ``VGPU`` with one unit per VF that holds
or can create that type; the type is written to a VF when a guest is
given it and cleared (0) when the VF is free again. VFs that hold the type
when the compute starts are used as they are; VFs holding another type are
left out and never reset. Default: empty, which reports such GPUs' VFs
held back (``setup_required``) with the types they offer.

Related options:

* ``enabled_vgpu_types``, for GPUs whose vGPUs are mdevs.
"""),
    ]

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        super().__init__(conf)
        # Type names seen in a creatable list, for when every VF holds
        # the type and no list shows it any more.
        self._type_names: dict[tuple[str, int], str] = {}

    def check_options(self) -> list[base.ConfigProblem]:
        """mdev types are ``nvidia-<number>``; VFIO types ``<GPU>=<id>``."""
        problems = []
        for option, check in (('enabled_vgpu_types', check_mdev_types),
                              ('vfio_vgpu_types', parse_vfio_types)):
            try:
                check(getattr(self.options, option), self.group_name())
            except base.DriverError as exc:
                problems.append(base.ConfigProblem(option, str(exc)))
        return problems

    def check_host(self, sysfs_root: str) -> list[base.ConfigProblem]:
        """Each ``enabled_vgpu_types`` entry some device offers."""
        wanted = self.options.enabled_vgpu_types
        if not wanted:
            return []
        offered = {os.path.basename(path) for path in glob.glob(
            os.path.join(glob.escape(sysfs_root), 'bus', 'pci', 'devices',
                         '*', 'mdev_supported_types', '*'))}
        return [base.ConfigProblem(
            'enabled_vgpu_types', '%s is offered by no device under %s '
            '(offered: %s)' % (t, sysfs_root,
                               ', '.join(sorted(offered)) or 'none'),
            warning=True) for t in wanted if t not in offered]

    def offered(self, accelerator: device_model.Accelerator) -> list[str]:
        """The vGPU type its units are, if it is split into vGPUs."""
        type_id = dict(accelerator.capabilities).get('vgpu_type')
        return ['vGPU %s' % type_id] if type_id else []

    def claims(self, function: sysfs.PciFunction) -> bool:
        return _is_gpu(function)

    def unit_hostdev(self, accelerator: device_model.Accelerator,
                     unit: str) -> str:
        """A vendor-VFIO VF stays on nvidia (its VFIO driver): unmanaged."""
        if (device_model.is_pci_address(unit)
                and dict(accelerator.capabilities).get(FRAMEWORK) == VFIO):
            return device_model.HOSTDEV_PCI_UNMANAGED
        return super().unit_hostdev(accelerator, unit)

    def hotplug_refusal(self, accelerator: device_model.Accelerator
                        ) -> str | None:
        if dict(accelerator.capabilities).get('vgpu_type'):
            return ('it offers vGPU units, which are given at spawn only '
                    '(a flavor with resources:VGPU), never hot-plugged')
        return None

    @classmethod
    def unit_ops(cls) -> vgpu_units.PrivsepOps:
        """mdev create and remove, vGPU type writes (:mod:`.units`)."""
        return vgpu_units.PrivsepOps()

    def prepare_units(self, sysfs_root: str,
                      accelerator: device_model.Accelerator,
                      units: Iterable[str], ops: object | None = None
                      ) -> list[str]:
        """Create the mdevs, or write the vGPU type to the VFs, not yet made.

        A whole GPU (no vGPU) needs nothing.

        :raises base.UnitError: a unit could not be made.
        """
        return vgpu_units.prepare(sysfs_root, accelerator, units,
                                  ops or self.unit_ops())

    def clear_unit(self, sysfs_root: str, unit: str,
                   ops: object | None = None) -> bool:
        """Remove an mdev that exists, clear a VF's vGPU type.

        :raises Exception: the privileged write failed.
        """
        return vgpu_units.clear(sysfs_root, unit, ops or self.unit_ops())

    def discover(self, snapshot: sysfs.PciSnapshot
                 ) -> list[device_model.Accelerator]:
        wanted = parse_vfio_types(self.options.vfio_vgpu_types,
                                  self.group_name())
        nova = nova_mdev.read(self.conf)
        found = []
        for function in self.physical_functions(snapshot):
            gpu = self._gpu(snapshot, function, wanted)
            problem = _nova_problem(snapshot, nova, gpu)
            if problem:
                # Held back (a problem fully reserves the provider), but
                # still reported with its units, so that a guest already
                # given one keeps it.
                gpu = dataclasses.replace(
                    gpu, problems=gpu.problems + (problem,))
            found.append(gpu)
        return found

    def _gpu(self, snapshot: sysfs.PciSnapshot,
             function: sysfs.PciFunction,
             wanted: dict[str, int]) -> device_model.Accelerator:
        address = function.address
        pid = function.product_id.upper()
        sriov, vfs = self.vf_units(snapshot, address)
        if vfs and vgpu.has_vendor_vfio(snapshot, vfs[0]):
            vfio_type = wanted.get(address, wanted.get(
                '%s:%s' % (function.vendor_id, function.product_id)))
            return self._vfio_gpu(snapshot, function, sriov, vfs, vfio_type)
        # On SR-IOV GPUs the types are offered by the VFs, one instance
        # each; on older GPUs by the PF itself. VFs are only looked at
        # when a type is enabled: a listdir per VF adds up on big hosts.
        parents = (vfs if vfs and self.options.enabled_vgpu_types
                   else (address,))
        offered: dict[str, list[tuple[str, device_model.MdevType,
                                      list[str]]]] = {}
        for parent in parents:
            for mdev, existing in _mdev_types(snapshot, parent):
                offered.setdefault(mdev.type_id, []).append(
                    (parent, mdev, existing))
        enabled = [t for t in self.options.enabled_vgpu_types
                   if t in offered]
        if enabled:
            chosen = offered[enabled[0]]
            mdev = chosen[0][1]
            units = [unit for parent, m, existing in chosen
                     for unit in vgpu.mdev_units(parent, m.type_id, existing,
                                                 m.available_instances)]
            traits = [vgpu.type_trait(pid, mdev.type_id, mdev.name)]
            cyborg = vgpu.cyborg_type_trait(pid, mdev.name)
            if cyborg:
                traits.append(cyborg)
            return self.accelerator(
                snapshot, function,
                device_type='GPU',
                resource_class=names.RC_VGPU,
                traits=tuple(traits),
                total=len(units),
                units=tuple(u.uuid for u in units),
                mdev_units=tuple(units),
                sriov=sriov,
                mdev_types=tuple(m for _, m, _ in chosen),
                capabilities=(('vgpu_type', mdev.type_id),
                              (FRAMEWORK, MDEV)))
        if vfs:
            # A VF is only usable once a vGPU type is created on it: until
            # a type is enabled the VFs are reported but held back.
            types = (sorted(offered) if parents == vfs else
                     [m.type_id for m, _ in _mdev_types(snapshot, vfs[0])])
            return self._held_back(
                snapshot, function, sriov, vfs, _no_type_problem(
                    self.group_name(), 'enabled_vgpu_types', types))
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
                             for _, m, _ in chosen))

    def _held_back(self, snapshot, function, sriov, vfs, problem,
                   capabilities=()) -> device_model.Accelerator:
        return self.accelerator(
            snapshot, function,
            device_type='GPU',
            resource_class=names.RC_VGPU,
            traits=(names.custom('NVIDIA', function.product_id.upper()),
                    names.TRAIT_VF),
            total=len(vfs),
            units=vfs,
            sriov=sriov,
            setup_required=True,
            capabilities=capabilities,
            problems=(problem,))

    def _vfio_gpu(self, snapshot: sysfs.PciSnapshot,
                  function: sysfs.PciFunction,
                  sriov: device_model.SriovInfo, vfs: tuple[str, ...],
                  wanted: int | None) -> device_model.Accelerator:
        pid = function.product_id.upper()
        states = {vf: vgpu.vfio_state(snapshot, vf) for vf in vfs}
        known: dict[int, str] = {}
        for state in states.values():
            known.update(state.creatable)
        for type_id, name in known.items():
            self._type_names[(pid, type_id)] = name
        held = sorted({s.current for s in states.values() if s.current})
        if wanted is None:
            text = ('VFs with NVIDIA vendor-specific VFIO vGPU and no type '
                    'for this GPU: set [%s] vfio_vgpu_types = %s=<type id>'
                    % (self.group_name(), function.address))
            if known:
                text += ' (creatable: %s)' % _type_list(known)
            if held:
                text += '; VFs already hold %s' % ', '.join(map(str, held))
            return self._held_back(snapshot, function, sriov, vfs, text,
                                   ((FRAMEWORK, VFIO),))
        units = []
        for vf, state in states.items():
            # A VF that is not a unit is recorded against the VF, not the
            # GPU: its other VFs stay usable.
            if state.current is None:
                snapshot.problem(vf, 'VF of %s left out: unreadable %s/%s'
                                 % (function.address, vgpu.VFIO_DIR,
                                    vgpu.CURRENT))
            elif state.current == wanted or (
                    state.current == 0 and wanted in state.creatable):
                units.append(vf)
            elif state.current:
                snapshot.problem(
                    vf, 'VF of %s left out: it holds vGPU type %d, not %d '
                    '(a type this project did not set is never reset)'
                    % (function.address, state.current, wanted))
        # The id alone is always known; the name only while some VF's
        # creatable list (or an earlier cycle) showed it: a GPU whose
        # every VF already holds the type lists it nowhere.
        traits = [names.custom('NVIDIA', pid), vgpu.type_id_trait(pid,
                                                                  wanted)]
        name = self._type_names.get((pid, wanted))
        if name is not None:
            traits.append(vgpu.type_trait(pid, wanted, name))
        capabilities = (('vgpu_type', str(wanted)), (FRAMEWORK, VFIO))
        if not units:
            return self._held_back(
                snapshot, function, sriov, vfs,
                'vGPU type %d (from [%s] vfio_vgpu_types) cannot be '
                'created on any VF of %s%s' % (
                    wanted, self.group_name(), function.address,
                    ' (creatable: %s)' % _type_list(known) if known
                    else ''), capabilities)
        return self.accelerator(
            snapshot, function,
            device_type='GPU',
            resource_class=names.RC_VGPU,
            traits=tuple(traits),
            total=len(units),
            units=tuple(units),
            sriov=sriov,
            capabilities=capabilities)


def parse_vfio_types(entries: list[str], group: str) -> dict[str, int]:
    """``['0000:41:00.0=1414', '10de:2335=1428']`` -> {GPU: type id}.

    :raises base.DriverError: an entry that is not ``<PF address or
        10de:<device id>>=<type id>``, naming the option.
    """
    result = {}
    for entry in entries:
        target, sep, type_id = entry.strip().rpartition('=')
        target = target.strip().lower()
        type_id = type_id.strip()
        if (not sep or not (device_model.is_pci_address(target)
                            or _PRODUCT_RE.match(target))
                or not type_id.isdigit()
                or not 0 < int(type_id) <= vgpu.TYPE_ID_MAX):
            raise base.DriverError(
                '[%s] vfio_vgpu_types: %r is not <PF address or '
                '10de:<device id>>=<type id> (e.g. 0000:41:00.0=1414); the '
                'type id is the number creatable_vgpu_types lists'
                % (group, entry))
        result[target] = int(type_id)
    return result


def check_mdev_types(entries: list[str], group: str) -> None:
    """Refuse an ``enabled_vgpu_types`` entry no NVIDIA GPU can offer.

    Only the form is checked (``nvidia-<number>``, e.g. ``nvidia-222``);
    whether a GPU of the host offers the type is for discovery to see.

    :raises base.DriverError: the first entry of another form, naming
        the option.
    """
    for entry in entries:
        if not _MDEV_TYPE_RE.match(entry.strip()):
            raise base.DriverError(
                '[%s] enabled_vgpu_types: %r is not an NVIDIA mdev type '
                '(nvidia-<number>, e.g. nvidia-222: a directory name under '
                'a GPU\'s mdev_supported_types)' % (group, entry))


def _type_list(types: dict[int, str]) -> str:
    return ', '.join('%d (%s)' % (t, n) for t, n in sorted(types.items()))


def _no_type_problem(group: str, option: str, offered: list[str]) -> str:
    text = ('SR-IOV VFs without a vGPU type: a VF is unusable until a type '
            'is enabled in [%s] %s' % (group, option))
    if offered:
        text += ' (its VFs offer %s)' % ', '.join(offered)
    return text


def _nova_problem(snapshot: sysfs.PciSnapshot, nova: nova_mdev.NovaMdevTypes,
                  gpu: device_model.Accelerator) -> str | None:
    """Why ``gpu`` is Nova's too, or None.

    Nova's libvirt driver makes mdevs on every parent (the GPU, or on
    SR-IOV GPUs each VF) that offers the type nova.conf gives it.
    """
    if not nova:
        return None
    parents = (gpu.address,) + (gpu.sriov.vf_addresses if gpu.sriov
                                else ())
    # Only parents Nova gives a type are read: with types by address
    # alone, the other VFs cost no listdir.
    typed = [(parent, nova.type_for(parent)) for parent in parents]
    taken = [(parent, mdev_type) for parent, mdev_type in typed
             if mdev_type and mdev_type in snapshot.listdir(
                 parent, 'mdev_supported_types')]
    if not taken:
        return None
    parent, mdev_type = taken[0]
    more = ' and %d more of its VFs' % (len(taken) - 1) if len(
        taken) > 1 else ''
    return ('Nova\'s own vGPU support uses this GPU too: %s gives %s%s '
            'mdev type %s. One GPU takes one manager, or a device could '
            'serve two guests: take it out of that option, or leave '
            'nvidia_gpu out of [cyborg_nova] enabled_drivers. Held back '
            'until then.' % (nova.option_for(parent), parent, more,
                             mdev_type))


def _is_gpu(function: sysfs.PciFunction) -> bool:
    return (function.vendor == VENDOR_NVIDIA
            and function.subclass in GPU_SUBCLASSES)


#: More mdevs of one type than one GPU could ever offer.
MAX_INSTANCES = 0xffff


def _mdev_types(snapshot: sysfs.PciSnapshot, address: str
                ) -> list[tuple[device_model.MdevType, list[str]]]:
    """The types ``address`` offers, each with its existing mdevs."""
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
        existing = snapshot.listdir(address, 'mdev_supported_types',
                                    type_id, 'devices')
        types.append((device_model.MdevType(
            type_id=type_id,
            name=attr('name') or type_id,
            available_instances=int(available),
            existing_instances=len(existing),
            device_api=attr('device_api') or 'vfio-pci'), list(existing)))
    return types
