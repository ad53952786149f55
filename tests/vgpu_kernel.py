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

"""The kernel's side of vGPU writes on a fake sysfs tree.

A tree from :mod:`cyborg_drivers.fake.hosttree` has no kernel behind it:
writing an mdev type's ``create`` leaves a uuid in that file and nothing
else. :class:`VgpuKernel` wraps the privileged calls (which go to a real
privsep daemon) and then does what the kernel would: an mdev appears or
goes, the type's ``available_instances`` follows, and a vendor-VFIO VF's
``creatable_vgpu_types`` empties while it holds a type.
"""

import os
import shutil

from cyborg_drivers.fake import hosttree
from cyborg_drivers.nvidia import vgpu
import privsep.mdev
import privsep.nvidia


class HostOps:
    """The privsep entrypoints' own code, run in process on one tree.

    For tests with several hosts in one process: one privsep daemon
    serves one sysfs root, so each host's writes go through this instead
    (the daemon's path is tested on its own).
    """

    def __init__(self, root: str) -> None:
        self.root = root

    def create_mdev(self, parent: str, type_id: str, mdev: str) -> None:
        privsep.mdev._create(self.root, parent, type_id, mdev)

    def remove_mdev(self, parent: str, mdev: str) -> None:
        privsep.mdev._remove(self.root, parent, mdev)

    def set_vgpu_type(self, vf: str, type_id: int) -> None:
        privsep.nvidia._set_vgpu_type(self.root, vf, type_id)

    def clear_vgpu_type(self, vf: str, type_id: int) -> None:
        privsep.nvidia._clear_vgpu_type(self.root, vf, type_id)


class VgpuKernel:
    """``ops`` (e.g. :class:`cyborg_nova.unit_work.PrivsepOps`) and a kernel.

    :attr writes: ``(file below the tree, text)`` of every privileged
        write, read back from the tree after the daemon made it.
    """

    def __init__(self, root: str, ops) -> None:
        self.root = root
        self.ops = ops
        self.writes = []
        self._creatable = {}
        #: Called with (vf, type_id) before a type is written, to play
        #: what changes on the host in between.
        self.before_set = None

    def _dev(self, address: str) -> str:
        return os.path.realpath(os.path.join(self.root, 'bus', 'pci',
                                             'devices', address))

    def _record(self, path: str) -> None:
        with open(path) as f:
            self.writes.append((os.path.relpath(path, self.root),
                                f.read().strip()))

    def _available(self, parent: str, type_id: str, delta: int) -> None:
        path = os.path.join(self._dev(parent), 'mdev_supported_types',
                            type_id, 'available_instances')
        with open(path) as f:
            count = int(f.read())
        with open(path, 'w') as f:
            f.write('%d\n' % (count + delta))

    # -- mdev ----------------------------------------------------------------

    def create_mdev(self, parent: str, type_id: str, mdev: str) -> None:
        self.ops.create_mdev(parent, type_id, mdev)
        self._record(os.path.join(self._dev(parent), 'mdev_supported_types',
                                  type_id, 'create'))
        groups = os.path.join(self.root, 'kernel', 'iommu_groups')
        group = max(int(n) for n in os.listdir(groups)) + 1
        hosttree.write_mdev_device(self.root, self._dev(parent), type_id,
                                   mdev, group)
        self._available(parent, type_id, -1)

    def remove_mdev(self, parent: str, mdev: str) -> None:
        self.ops.remove_mdev(parent, mdev)
        path = os.path.join(self._dev(parent), mdev)
        self._record(os.path.join(path, 'remove'))
        self.forget(mdev)
        self._available(parent, os.path.basename(os.path.realpath(
            os.path.join(path, 'mdev_type'))), +1)
        shutil.rmtree(path)

    def forget(self, mdev: str) -> None:
        """Remove every link to an mdev (as removal or a reboot does)."""
        path = os.path.realpath(os.path.join(self.root, 'bus', 'mdev',
                                             'devices', mdev))
        type_dir = os.path.realpath(os.path.join(path, 'mdev_type'))
        group = os.path.realpath(os.path.join(path, 'iommu_group'))
        os.unlink(os.path.join(type_dir, 'devices', mdev))
        os.unlink(os.path.join(self.root, 'bus', 'mdev', 'devices', mdev))
        shutil.rmtree(group)

    def reboot(self) -> None:
        """The host rebooted: every mdev is gone (types keep their count)."""
        bus = os.path.join(self.root, 'bus', 'mdev', 'devices')
        for mdev in sorted(os.listdir(bus)) if os.path.isdir(bus) else ():
            path = os.path.realpath(os.path.join(bus, mdev))
            parent = os.path.basename(os.path.dirname(path))
            type_id = os.path.basename(os.path.realpath(
                os.path.join(path, 'mdev_type')))
            self.forget(mdev)
            shutil.rmtree(path)
            self._available(parent, type_id, +1)

    # -- vendor-specific VFIO -----------------------------------------------

    def _vf_file(self, vf: str, name: str) -> str:
        return os.path.join(self._dev(vf), vgpu.VFIO_DIR, name)

    def set_vgpu_type(self, vf: str, type_id: int) -> None:
        if self.before_set is not None:
            self.before_set(vf, type_id)
        self.ops.set_vgpu_type(vf, type_id)
        self._record(self._vf_file(vf, vgpu.CURRENT))
        creatable = self._vf_file(vf, vgpu.CREATABLE)
        with open(creatable) as f:
            self._creatable[vf] = f.read()
        with open(creatable, 'w') as f:
            f.write(hosttree.creatable_vgpu_types_text({}))

    def clear_vgpu_type(self, vf: str, type_id: int) -> None:
        self.ops.clear_vgpu_type(vf, type_id)
        self._record(self._vf_file(vf, vgpu.CURRENT))
        text = self._creatable.pop(vf, None)
        if text is None:
            # A VF that held its type before this kernel saw it write
            # one: free again, it offers what its free siblings offer.
            text = self._free_sibling_offer(vf)
        if text is not None:
            with open(self._vf_file(vf, vgpu.CREATABLE), 'w') as f:
                f.write(text)

    def _free_sibling_offer(self, vf: str) -> str | None:
        pf = os.path.basename(os.path.realpath(os.path.join(
            self._dev(vf), 'physfn')))
        pf_dir = self._dev(pf)
        for name in sorted(os.listdir(pf_dir)):
            if not name.startswith('virtfn'):
                continue
            sibling = os.path.basename(os.path.realpath(
                os.path.join(pf_dir, name)))
            if sibling == vf or vgpu.held_type(self.root, sibling):
                continue
            with open(self._vf_file(sibling, vgpu.CREATABLE)) as f:
                text = f.read()
            if vgpu.parse_creatable(text):
                return text
        return None
