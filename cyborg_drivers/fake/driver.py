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

"""The fake driver: hardware from a host profile, for clouds without any.

It builds a sysfs tree from a host profile (see
:mod:`cyborg_drivers.fake.hosttree`) once, then runs the real drivers
over that tree. Devices therefore look exactly as the real drivers report
them, and operations that change hardware (FPGA programming) change the
tree, where the next discovery sees them: programming a fake FPGA writes
the bitstream's function id where the card shows what is loaded (OPAE
``fpga/intel-fpga-dev.N/intel-fpga-port.N/afu_id``, DFL
``fpga_region/regionN/dfl-port.N/afu_id``, an Alveo's ``logic_uuids``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import tempfile
from typing import Iterable

from oslo_config import cfg

from cyborg_drivers import base
from cyborg_drivers import bitstreams
from cyborg_drivers import device as device_model
from cyborg_drivers import discovery
from cyborg_drivers.fake import hosttree
from cyborg_drivers import loader
from cyborg_drivers import sysfs

_STAMP = '.cyborg-nova-profile'


class FakeDriver(base.AcceleratorDriver):
    """Reports the accelerators of ``[cyborg_fake] host_profile``."""

    name = 'fake'
    description = 'Accelerators of a host profile file (test clouds)'
    needs_config = True
    on_host_bus = False
    CONFIG_OPTS = [
        cfg.StrOpt(
            'host_profile',
            help="""
The host profile to emulate: a shipped profile name (``gpu-host``,
``fpga-host``, ``crypto-nic-host``, ``mixed-host``) or a path to a YAML
profile. Unset by default: the driver reports nothing.

Related options:

* ``tree_path``, ``emulated_drivers``
"""),
        cfg.StrOpt(
            'tree_path',
            help="""
Where the profile's sysfs tree is built. Default: ``fake-sysfs/<profile
name>`` next to ``[cyborg_nova] state_path``. The tree is rebuilt only
when the profile changes, so what was done to the fake hardware (e.g. an
FPGA programmed) persists across restarts.
"""),
        cfg.ListOpt(
            'emulated_drivers',
            default=['nvidia_gpu', 'intel_fpga', 'xilinx_fpga', 'intel_qat'],
            help="""
The real drivers run over the fake tree. Their own option groups apply
(e.g. ``[cyborg_nvidia_gpu] enabled_vgpu_types``).
"""),
    ]

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        super().__init__(conf)
        self._inner = None
        self._where: tuple[str, str | None, str] | None = None

    def _options(self) -> tuple[str, str | None, str]:
        """(host_profile, tree_path, state_path), as first read.

        The emulated hardware stays where it was first found for the
        driver's life, as a real card stays in its slot; a changed
        option takes effect when the driver is loaded again. (Several
        computes of Nova's functional harness share one config, each
        with a driver of its own bound to its own tree.)
        """
        if self._where is None:
            self._where = (self.options.host_profile,
                           self.options.tree_path,
                           self.conf.cyborg_nova.state_path)
        return self._where

    def is_configured(self) -> bool:
        return bool(self.options.host_profile)

    def profile_file(self) -> str:
        value = self._options()[0]
        if value in hosttree.PROFILE_NAMES:
            return hosttree.profile_path(value)
        return value

    def tree_path(self, profile: dict) -> str:
        _profile, tree_path, state_path = self._options()
        if tree_path:
            return tree_path
        state_dir = os.path.dirname(state_path)
        return os.path.join(state_dir, 'fake-sysfs', profile['name'])

    def ensure_tree(self) -> str:
        """Build the profile's tree unless it is already built; its root.

        :raises base.DriverError: the profile cannot be read or built.
        """
        path = self.profile_file()
        try:
            with open(path, 'rb') as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            profile = hosttree.load_profile(path)
        except (OSError, hosttree.ProfileError) as exc:
            raise base.DriverError('[cyborg_fake] host_profile %s: %s'
                                   % (path, exc))
        root = self.tree_path(profile)
        try:
            with open(os.path.join(root, _STAMP)) as f:
                if f.read() == digest:
                    return root
        except OSError:
            pass
        parent = os.path.dirname(os.path.abspath(root))
        try:
            os.makedirs(parent, exist_ok=True)
            # Built aside and renamed in, so a crash never leaves a
            # half-built tree that would be taken for the hardware.
            staging = tempfile.mkdtemp(prefix='.build-', dir=parent)
            hosttree.build_tree(profile, os.path.join(staging, 'sys'))
            with open(os.path.join(staging, 'sys', _STAMP), 'w') as f:
                f.write(digest)
            if os.path.isdir(root):
                shutil.rmtree(root)
            os.rename(os.path.join(staging, 'sys'), root)
            os.rmdir(staging)
        except OSError as exc:
            raise base.DriverError('cannot build the fake sysfs tree at %s: '
                                   '%s' % (root, exc))
        return root

    def claims(self, function: sysfs.PciFunction) -> bool:
        # The emulated hardware is not on the host's bus.
        return False

    def discover(self, snapshot: sysfs.PciSnapshot
                 ) -> list[device_model.Accelerator]:
        if not self.is_configured():
            return []
        root = self.ensure_tree()
        result = discovery.Discoverer(self._emulated(), root).discover()
        return [dataclasses.replace(
            a, driver=self.name,
            capabilities=a.capabilities + (('emulates', a.driver),))
            for a in result.accelerators]

    def _emulated(self) -> list[base.AcceleratorDriver]:
        if self._inner is None:
            self._inner = loader.load(self.conf,
                                      self.options.emulated_drivers)
        return self._inner

    def _emulating(self, accelerator: device_model.Accelerator
                   ) -> base.AcceleratorDriver | None:
        emulates = dict(accelerator.capabilities).get('emulates')
        return next((d for d in self._emulated() if d.name == emulates),
                    None)

    def offered(self, accelerator: device_model.Accelerator) -> list[str]:
        driver = self._emulating(accelerator)
        return driver.offered(accelerator) if driver else []

    def prepare_units(self, sysfs_root: str,
                      accelerator: device_model.Accelerator,
                      units: Iterable[str], ops: object | None = None
                      ) -> list[str]:
        """What the emulated driver makes (e.g. an emulated GPU's vGPUs).

        :raises base.UnitError: a unit could not be made.
        """
        driver = self._emulating(accelerator)
        if driver is None:
            return []
        return driver.prepare_units(sysfs_root, accelerator, units, ops)

    def clear_unit(self, sysfs_root: str, unit: str,
                   ops: object | None = None) -> bool:
        """Asks each emulated driver in turn, as for real hardware."""
        return any(driver.clear_unit(sysfs_root, unit, ops)
                   for driver in self._emulated())

    def program(self, accelerator: device_model.Accelerator,
                region: str, bitstream: str) -> None:
        """Load ``bitstream`` (a name under ``[cyborg_nova] bitstream_dir``).

        As the card and its tool would: the header must be the card's
        format (GBS for Intel, xclbin2 for Xilinx) and built for the
        region's interface id; the function id then replaces the loaded
        one in the tree, atomically.

        :raises base.DriverError: no such region, a bad, unknown or
            incompatible bitstream, or the tree cannot be written.
        """
        regions = {r.name: r for r in accelerator.fpga_regions}
        if region not in regions:
            raise base.DriverError('%s has no FPGA region %r'
                                   % (accelerator.address, region))
        target = regions[region]
        try:
            _path, header = bitstreams.load(
                self.conf.cyborg_nova.bitstream_dir, bitstream)
        except (bitstreams.BadName, bitstreams.NotFound,
                bitstreams.InvalidBitstream) as exc:
            raise base.DriverError(str(exc))
        kind = bitstreams.XCLBIN if target.layout == 'xrt' else (
            bitstreams.GBS)
        if header.kind != kind:
            raise base.DriverError('a %s cannot be loaded into %s: it '
                                   'takes a %s' % (header.kind,
                                                   accelerator.address, kind))
        if header.interface_id != target.interface_id:
            raise base.DriverError(
                'bitstream %s was built for interface %s, region %s of %s '
                'is %s' % (bitstream, header.interface_id, region,
                           accelerator.address, target.interface_id))
        try:
            write_function(self.ensure_tree(), accelerator.address, target,
                           header.function_id)
        except OSError as exc:
            raise base.DriverError('cannot load %s into the fake %s: %s'
                                   % (bitstream, accelerator.address, exc))


def write_function(root: str, address: str,
                   region: device_model.FpgaRegion,
                   function_id: str) -> str:
    """Make the fake card at ``address`` show ``function_id`` as loaded.

    The file is replaced by a rename, so it always holds the old or the
    new id, as a card's register does. Returns the file written.

    :raises OSError: the tree has no such card, region or port (e.g. the
        port is on a VF because SR-IOV is on).
    """
    device = os.path.join(root, 'bus', 'pci', 'devices', address)
    if region.layout == 'xrt':
        path = os.path.join(device, 'logic_uuids')
        text = function_id + '\n'
    else:
        if region.layout == 'opae':
            base_dir, prefix = os.path.join(device, 'fpga', region.name), (
                'intel-fpga-port.')
        else:
            base_dir, prefix = os.path.join(device, 'fpga_region',
                                            region.name), 'dfl-port.'
        ports = sorted(n for n in os.listdir(base_dir)
                       if n.startswith(prefix))
        if not ports:
            raise FileNotFoundError(
                'no %s* port under %s (is SR-IOV on?)' % (prefix, base_dir))
        path = os.path.join(base_dir, ports[0], 'afu_id')
        text = function_id + '\n'
    fd, staging = tempfile.mkstemp(prefix='.afu-', dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, 'w') as f:
            f.write(text)
        os.chmod(staging, 0o444)
        os.rename(staging, path)
    except BaseException:
        if os.path.exists(staging):
            os.unlink(staging)
        raise
    return path
