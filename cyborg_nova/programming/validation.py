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

"""Validating a programming request, before anything is touched.

Step 1 of :mod:`cyborg_nova.programming`: the device is an FPGA region a
loaded driver can program; the bitstream is a file under ``[cyborg_nova]
bitstream_dir`` whose header (GBS or xclbin2) names the region's
interface id. Every refusal is a :class:`~cyborg_nova.programming.Refused`
with the HTTP status it maps to.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Callable, Iterable

from cyborg_drivers import base
from cyborg_drivers import bitstreams
from cyborg_drivers import discovery
from cyborg_drivers import sysfs
from cyborg_nova.programming.journal import Refused
from cyborg_nova import providers

LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Plan:
    """What a valid request programs: where, with which driver and file."""

    accelerator: object
    driver: base.AcceleratorDriver
    region: object
    header: bitstreams.Bitstream


class Validator:
    """Checks requests against this host's FPGAs and bitstream library.

    :param bitstream_dir: ``[cyborg_nova] bitstream_dir``.
    :param drivers: returns the loaded drivers (the agent's change when
        drivers are installed).
    :param sysfs_root: what discovery reads.
    """

    def __init__(self, bitstream_dir: str,
                 drivers: Callable[[], Iterable[base.AcceleratorDriver]],
                 sysfs_root: str) -> None:
        self.bitstream_dir = bitstream_dir
        self._drivers = drivers
        self.sysfs_root = sysfs_root

    def discover(self) -> dict:
        """This host's accelerators by PCI address; {} without a PCI bus."""
        try:
            return discovery.Discoverer(
                self._drivers(), self.sysfs_root).discover().by_address()
        except sysfs.NoSysfs as exc:
            LOG.error('Programming finds no device: %s', exc)
            return {}

    def library_file(self, name: object) -> object:
        """The file of library entry ``name``; a file name as it is.

        :raises Refused: the library's manifest is broken.
        """
        try:
            return bitstreams.file_of(self.bitstream_dir, name)
        except bitstreams.InvalidManifest as exc:
            raise Refused(409, 'the bitstream library is broken: %s' % exc)

    def bitstream(self, name: str) -> bitstreams.Bitstream:
        """The header of bitstream file ``name``, checked.

        :raises Refused: outside the directory, a bad name, no such file,
            or not a usable bitstream.
        """
        try:
            return bitstreams.load(self.bitstream_dir, name)[1]
        except bitstreams.Outside as exc:
            raise Refused(409, str(exc))
        except bitstreams.BadName as exc:
            raise Refused(400, str(exc))
        except bitstreams.NotFound as exc:
            raise Refused(404, str(exc))
        except bitstreams.InvalidBitstream as exc:
            raise Refused(409, 'not a usable bitstream: %s' % exc)

    @staticmethod
    def find(nodename: str, device: str, found: dict):
        """The accelerator ``device`` names in ``found``.

        :param device: PCI address, provider uuid or provider name.
        :raises Refused: no such accelerator on ``nodename``.
        """
        if device in found:
            return found[device]
        for address, acc in found.items():
            if device in (providers.provider_uuid(nodename, address),
                          providers.provider_name(nodename, address)):
                return acc
        raise Refused(404, 'no accelerator %s on %s (a PCI address, '
                      'provider uuid or provider name)' % (device, nodename))

    def plan(self, nodename: str, device: str, bitstream: str,
             region: str | None = None) -> Plan:
        """Everything validation checks, before anything is touched.

        :param bitstream: a file name under the bitstream directory (see
            :meth:`library_file` for library entries).

        :raises Refused: see :class:`~cyborg_nova.programming.Refused`.
        """
        header = self.bitstream(bitstream)
        acc = self.find(nodename, device, self.discover())
        drivers = {d.name: d for d in self._drivers()}
        driver = drivers.get(acc.driver)
        if not acc.fpga_regions or driver is None or (
                type(driver).program is base.AcceleratorDriver.program):
            raise Refused(409, '%s (%s, %s) is not an FPGA region this '
                          'host\'s drivers can program'
                          % (acc.address, acc.driver, acc.device_type))
        kind = (bitstreams.XCLBIN if acc.fpga_regions[0].layout == 'xrt'
                else bitstreams.GBS)
        if header.kind != kind:
            raise Refused(409, 'bitstream %s is a %s; %s takes a %s'
                          % (bitstream, header.kind, acc.address, kind))
        regions = [r for r in acc.fpga_regions
                   if region is None or r.name == region]
        if not regions:
            raise Refused(404, '%s has no FPGA region %s' % (acc.address,
                                                             region))
        fits = [r for r in regions if r.interface_id == header.interface_id]
        if not fits:
            raise Refused(409, 'bitstream %s was built for interface %s; '
                          '%s offers %s: incompatible, nothing was changed'
                          % (bitstream, header.interface_id, acc.address,
                             ', '.join('%s (region %s)' % (
                                 r.interface_id or 'no interface id',
                                 r.name) for r in regions)))
        if fits[0].layout in ('opae', 'dfl') and acc.sriov and (
                acc.sriov.num_vfs):
            raise Refused(409, 'the FPGA port of %s is on its VF (%d VFs '
                          'enabled); disable SR-IOV first'
                          % (acc.address, acc.sriov.num_vfs))
        return Plan(acc, driver, fits[0], header)
