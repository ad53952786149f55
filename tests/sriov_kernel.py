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

"""The kernel's side of ``sriov_numvfs`` on a fake sysfs tree.

A tree from :mod:`cyborg_drivers.fake.hosttree` has no kernel behind it:
writing ``sriov_numvfs`` changes that file and nothing else. Here the VFs
follow the count as the kernel makes them: VFs beyond it leave the bus
(their directory and every link to them are moved out of the tree) and
come back when the count grows again. Only VFs the tree was built with
can come back.
"""

import os

from privsep import pci


class FakeSriovKernel:
    """VF creation and removal on the tree at ``root``.

    :attr calls: ``(address, count)`` of every :meth:`set_num_vfs`.
    :param sriov_manage: the stand-in of NVIDIA's ``sriov-manage`` that
        privsep runs for an NVIDIA GPU's VFs
        (:func:`tests.unit.privsep.fakesysfs.sriov_manage`).
    :attr failures: ``address -> exception`` the next write to that PF
        raises, before anything is changed (as the kernel's EBUSY does).
    """

    def __init__(self, root: str, sriov_manage: str | None = None) -> None:
        self.root = root
        #: NVIDIA's script for NVIDIA GPUs (see :mod:`privsep.nvidia`).
        self.sriov_manage = sriov_manage
        self.bus = os.path.join(root, 'bus', 'pci', 'devices')
        # Beside the tree, not in it: parked VFs are off the bus.
        self.parking = root + '.parked-vfs'
        self.calls = []
        self.failures = {}
        self._parked = {}
        self.vfs = {}
        for pf in sorted(os.listdir(self.bus)):
            links = {}
            for entry in os.listdir(os.path.join(self.bus, pf)):
                if entry.startswith('virtfn') and entry[6:].isdigit():
                    target = os.readlink(os.path.join(self.bus, pf, entry))
                    links[int(entry[6:])] = os.path.basename(target)
            if links:
                self.vfs[pf] = [links[n] for n in sorted(links)]

    def set_num_vfs(self, address: str, count: int) -> int:
        """privsep's write (its checks, through 0), then the kernel's."""
        self.calls.append((address, count))
        error = self.failures.pop(address, None)
        if error is not None:
            raise error
        kwargs = ({'sriov_manage': self.sriov_manage}
                  if self.sriov_manage else {})
        result = pci._set_num_vfs(self.root, address, count, **kwargs)
        self._show(address, count)
        return result

    def reboot(self) -> None:
        """Every PF with 0 VFs, as the kernel starts them."""
        for pf in self.vfs:
            with open(os.path.join(self.bus, pf, 'sriov_numvfs'), 'w') as f:
                f.write('0\n')
            self._show(pf, 0)

    def _show(self, pf: str, count: int) -> None:
        vfs = self.vfs.get(pf, [])
        if count > len(vfs):
            raise AssertionError('the tree has %d VFs of %s to show, not %d'
                                 % (len(vfs), pf, count))
        for n, vf in enumerate(vfs):
            if n < count:
                self._unpark(vf)
            else:
                self._park(pf, n, vf)

    def _links_to(self, pf: str, n: int, vf: str) -> list[str]:
        path = os.path.realpath(os.path.join(self.bus, vf))
        paths = [os.path.join(self.bus, pf, 'virtfn%d' % n)]
        driver = os.path.join(path, 'driver')
        if os.path.lexists(driver):
            paths.append(os.path.join(os.path.realpath(driver), vf))
        group = os.path.realpath(os.path.join(path, 'iommu_group'))
        paths.append(os.path.join(group, 'devices', vf))
        # The bus link last: what points through it is resolved above.
        return paths + [os.path.join(self.bus, vf), path]

    def _park(self, pf: str, n: int, vf: str) -> None:
        if vf in self._parked:
            return
        moved = []
        for i, path in enumerate(self._links_to(pf, n, vf)):
            parked = os.path.join(self.parking, vf, str(i))
            os.makedirs(os.path.dirname(parked), exist_ok=True)
            # Moved, not deleted: relative links point right again once
            # they are back where they were.
            os.rename(path, parked)
            moved.append((path, parked))
        self._parked[vf] = moved

    def _unpark(self, vf: str) -> None:
        for path, parked in reversed(self._parked.pop(vf, [])):
            os.rename(parked, path)
