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
"""A host whose freed units are scrubbed, for the scrub tests.

The ``crypto-nic-host`` profile as a sysfs tree, its QAT devices
discovered by the real ``intel_qat`` driver and recorded in a real state
store as nova-compute's cycle records them, and a
:class:`~cyborg_nova.scrub.Scrubber` over them whose function resets run
the privileged code itself (``privsep.pci._reset_function``) on the
tree. ``python -m tests.scrubhost DIR hang`` is a scrubbing process whose
reset hangs, for the crash test to kill. :class:`ScrubKernel` does the
same for every nova-compute of a test (or benchmark) run in Nova's
harness.
"""

import os
import subprocess
import sys
import threading
import time

import fixtures
from oslo_config import cfg

from cyborg_drivers import discovery
from cyborg_drivers.fake import hosttree
from cyborg_drivers import loader
from cyborg_nova import assignments
from cyborg_nova import conf as cn_conf
from cyborg_nova import provider_devices
from cyborg_nova import scrub
from cyborg_nova import store as state_store
from privsep import net as privsep_net
from privsep import pci as privsep_pci

NODE = 'cn1'
DC_PF = '0000:70:00.0'


class TreeOps:
    """Function resets on ``root``; each unit reset is in ``resets``."""

    def __init__(self, root, fail=(), hang_marker=None, hang=None):
        self.root = root
        self.resets = []
        self.fail = set(fail)
        self.hang_marker = hang_marker
        #: A threading.Event a reset waits for (hangs until it is set).
        self.hang = hang

    def reset_function(self, address):
        if self.hang_marker:
            with open(self.hang_marker, 'w') as f:
                f.write(address)
            while True:
                time.sleep(1)
        if self.hang is not None:
            self.hang.wait()
        if address in self.fail:
            raise OSError(5, "writing '1' to reset: Input/output error")
        self.resets.append(address)
        return privsep_pci._reset_function(self.root, address)

    def reset_vf_settings(self, address):
        return reset_vf_settings(self.root, address)


def reset_vf_settings(root, address):
    """privsep.net's VF reset on the tree ``root``, up to rtnetlink.

    The PF's interface and the VF's index come from the tree by the
    privileged code itself; a fake tree has no NIC to take the settings,
    so each ``ip`` call is answered as a kernel that took it.
    """
    return privsep_net._reset_vf_settings(
        root, address,
        run=lambda argv: subprocess.CompletedProcess(argv, 0, '', ''))


class ScrubKernel(fixtures.Fixture):
    """The scrub's privileged writes on the tree of each nova-compute.

    Each compute of a test runs in this process with its own sysfs tree,
    and one privsep daemon serves one root (Nova's harness refuses to
    start one at all), so the privileged function itself
    (``privsep.pci._reset_function``) runs here, on the tree of the
    compute that asks. ``resets`` records (host tree, unit) of each
    reset; ``gate``, when cleared, holds every reset until it is set;
    units in ``failing`` fail as the kernel would refuse them.
    """

    def __init__(self):
        super().__init__()
        self.resets = []
        self.vf_resets = []
        self.gate = threading.Event()
        self.gate.set()
        self.failing = set()

    def _setUp(self):
        # Imported here: the rest of this module runs without Nova.
        from cyborg_nova.virt import guest
        real_init = guest.GuestAcceleratorsMixin.__init__
        kernel = self

        def init(driver, *args, **kwargs):
            real_init(driver, *args, **kwargs)
            driver._scrub_ops = kernel.for_driver(driver)
        self.useFixture(fixtures.MonkeyPatch(
            'cyborg_nova.virt.guest.GuestAcceleratorsMixin.__init__', init))

    def for_driver(self, driver):
        kernel = self

        class Ops:
            def reset_function(self, address):
                if not kernel.gate.wait(60):
                    raise TimeoutError('the test never opened the gate')
                if address in kernel.failing:
                    raise OSError(5, "writing '1' to reset: Input/output "
                                  "error")
                root = driver._sysfs_root()
                kernel.resets.append((root, address))
                return privsep_pci._reset_function(root, address)

            def reset_vf_settings(self, address):
                root = driver._sysfs_root()
                kernel.vf_resets.append((root, address))
                return reset_vf_settings(root, address)
        return Ops()


class Host:
    """The host under ``directory`` (built on first use, reused after).

    The ``crypto-nic-host`` profile (a shipped profile's name, or a
    profile dict) and its QAT devices by default; the
    device under test (``dc``) is the one at ``address``. ``options``:
    {group: {option: value}} set besides the ``[cyborg_scrub]`` ones.
    """

    def __init__(self, directory, profile='crypto-nic-host',
                 drivers=('intel_qat',), address=DC_PF, options=None,
                 **scrub_flags):
        self.root = os.path.join(directory, 'sys')
        if not os.path.isdir(self.root):
            # A shipped profile's name, or a profile dict of the test's.
            hosttree.build_tree(profile, self.root)
        self.conf = cfg.ConfigOpts()
        cn_conf.register_opts(self.conf)
        self.conf([], default_config_files=[])
        for name, value in scrub_flags.items():
            self.conf.set_override(name, value, group='cyborg_scrub')
        self.store = state_store.StateStore(
            os.path.join(directory, 'state.sqlite'))
        installed = loader.installed()
        loader.register_opts(self.conf, [installed[d] for d in drivers])
        # Before the drivers are made: some read their options then.
        for group, values in (options or {}).items():
            for name, value in values.items():
                self.conf.set_override(name, value, group=group)
        self.drivers = loader.load(self.conf, list(drivers))
        found = discovery.Discoverer(self.drivers, self.root).discover()
        self.store.sync(NODE, found.accelerators, state_store.READY)
        provider_devices.record(self.store, NODE, found.accelerators)
        self.devices = provider_devices.found(self.store, NODE,
                                              found.accelerators)
        self.dc = next(d for d in self.devices.values()
                       if d.address == address)
        self.books = assignments.Assignments(self.store, hold_freed=True)
        self.fenced = []

    def scrubber(self, ops):
        return scrub.Scrubber(
            self.conf, self.store, lambda: self.drivers,
            lambda: self.root, lambda: ops,
            lambda rps: {rp: self.devices[rp] for rp in rps
                         if rp in self.devices},
            lambda device, state: self.fenced.append(
                (device.address, state)))

    def give_and_free(self, consumer, count):
        """``count`` units of ``dc`` given to ``consumer``, then freed."""
        units = self.books.assign(consumer, self.dc.provider,
                                  self.dc.accelerator.units, count)
        self.books.release(consumer, self.dc.provider)
        return units


def main(argv):
    directory, mode = argv
    host = Host(directory)
    marker = os.path.join(directory, 'resetting')
    host.scrubber(TreeOps(host.root, hang_marker=marker)).run()
    return 1  # never reached: the reset hangs until the process is killed


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
