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

"""The ``nvme_format`` scrub step of the generic driver's NVMe units.

Operators describe NVMe drives with SR-IOV to the generic driver (a
matcher on the drive's IDs, ``"units": "vfs"``). What a guest wrote to
its VF's namespaces outlives both the guest and a reset of the VF, so
the step erases them (:func:`privsep.nvme.format_namespaces`) before the
reset. Units of other classes have nothing to format; a whole drive
given to one guest is not erased (only a VF's namespaces are, so that
no call can name a host's own drive), and the log says so.
"""

from __future__ import annotations

import logging
import os

from cyborg_drivers import base
from cyborg_drivers import device as device_model

LOG = logging.getLogger(__name__)

#: The scrub step that erases a freed NVMe VF's namespaces.
SCRUB_NVME_FORMAT = 'nvme_format'
#: The PCI class of an NVM Express controller.
NVME_CLASS = 0x010802


class NvmeOps:
    """The NVMe erase, through :mod:`privsep.nvme`.

    Tests put an object with the same methods in its place.
    """

    def format_namespaces(self, address: str) -> list[int]:
        """:func:`privsep.nvme.format_namespaces`."""
        # Imported here: loading the driver starts no privsep daemon.
        import privsep.nvme
        return privsep.nvme.format_namespaces(address)


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ''


class NvmeFormatScrub:
    """The ``nvme_format`` step, for a driver that may report NVMe VFs.

    Put before :class:`~cyborg_drivers.base.AcceleratorDriver` in the
    bases.
    """

    #: The namespaces first: a reset of the VF while its controller is
    #: formatting would abort the format.
    SCRUB_STEPS = (SCRUB_NVME_FORMAT, base.SCRUB_FLR)

    @classmethod
    def unit_ops(cls) -> NvmeOps:
        """The namespace erase (:mod:`privsep.nvme`)."""
        return NvmeOps()

    def scrub(self, sysfs_root: str, accelerator: device_model.Accelerator,
              unit: str, step: str, ops: object | None = None) -> str:
        """Scrub step ``nvme_format``, or ``flr`` as every family."""
        if step != SCRUB_NVME_FORMAT:
            return super().scrub(sysfs_root, accelerator, unit, step, ops)
        if not device_model.is_pci_address(unit):
            return 'nothing to format: %s is not a PCI function' % unit
        dev = os.path.join(sysfs_root, 'bus', 'pci', 'devices', unit)
        cls = _read(os.path.join(dev, 'class'))
        try:
            is_nvme = int(cls, 16) == NVME_CLASS
        except ValueError:
            is_nvme = False
        if not is_nvme:
            return 'nothing to format: %s is not an NVMe controller' % unit
        if not os.path.islink(os.path.join(dev, 'physfn')):
            done = ('not formatted: %s is a whole NVMe drive, and only a '
                    "VF's namespaces are erased; list the device in "
                    '[cyborg_scrub] one_time_use to clean it yourself'
                    % unit)
            # The next tenant gets what this one left: say so louder
            # than the scrub's own line.
            LOG.warning('NVMe unit %s: %s', unit, done)
            return done
        nsids = (ops or NvmeOps()).format_namespaces(unit)
        if not nsids:
            return 'nothing to format: no namespace is attached to %s' % unit
        return 'erased namespace%s %s of %s (Format NVM, user data erase)' % (
            's' if len(nsids) > 1 else '', ', '.join(map(str, nsids)), unit)
