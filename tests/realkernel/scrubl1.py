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

"""L1 as nova-compute scrubs on it (runs inside L1).

The real drivers discover L1's devices into a state store of their own;
units are given and freed by the real unit books, which hold them, and
the real scrubber runs each family's steps through the privsep daemons
the host's configuration starts. Shared by the real-kernel scrub tests
and the scrub-hold benchmark (benchmarks/scrub_hold.py).
"""

from __future__ import annotations

import contextlib
import os
import re

from oslo_config import cfg

from cyborg_drivers import discovery
from cyborg_nova import assignments
from cyborg_nova import conf as cn_conf
from cyborg_nova import lifecycle
from cyborg_nova import privileged
from cyborg_nova import provider_devices
from cyborg_nova import scrub
from cyborg_nova import store as state_store
from cyborg_nova import unit_work
import privsep
from privsep import net as privsep_net
from privsep import nvme as privsep_nvme
from privsep import pci as privsep_pci
from tests.realkernel import l1


class ScrubHost:
    """L1's devices in a store under ``directory``, and a scrubber.

    ``steps``: ``[cyborg_scrub] steps`` (each family's own by default).
    """

    def __init__(self, directory: str, steps: dict | None = None) -> None:
        self.conf = cfg.ConfigOpts()
        cn_conf.register_opts(self.conf)
        self.conf(['--config-file', l1.host()])
        if steps is not None:
            self.conf.set_override('steps', steps, group='cyborg_scrub')
        self.store = state_store.StateStore(
            os.path.join(directory, 'state.sqlite'))
        drivers = lifecycle.host_drivers(self.conf, self.store)
        found = discovery.Discoverer(drivers, '/sys').discover().accelerators
        self.store.sync(l1.NODENAME, found, state_store.READY)
        provider_devices.record(self.store, l1.NODENAME, found)
        devices = provider_devices.found(self.store, l1.NODENAME, found)
        self.devices = devices
        self.books = assignments.Assignments(self.store, hold_freed=True)
        self.scrubber = scrub.Scrubber(
            self.conf, self.store, lambda: drivers, lambda: '/sys',
            unit_work.PrivsepOps,
            lambda rps: {rp: devices[rp] for rp in rps if rp in devices})

    def device(self, ids: tuple[str, str]):
        """The provider's device of the PF with PCI ``ids``."""
        address = l1.pf(ids)
        return [d for d in self.devices.values() if d.address == address][0]

    @contextlib.contextmanager
    def daemons(self):
        """nova-compute's privsep daemons, up before any unit is freed.

        Each is started by a call it refuses before it changes anything:
        a reset of the bridge above the NIC, the VF settings of the NIC's
        PF, the erase of the NVMe PF (a whole drive).
        """
        started = [privileged.start_privsep(self.conf, name) for name in (
            'sysfs_admin', 'net_admin', 'nvme_admin')]
        try:
            nic = l1.pf(l1.IGB)
            bridge = os.path.basename(os.path.dirname(os.path.realpath(
                os.path.join(l1.DEVICES, nic))))
            for call, argument, refusal in (
                    (privsep_pci.reset_function, bridge, 'is a bridge'),
                    (privsep_net.reset_vf_settings, nic, 'is not a VF'),
                    (privsep_nvme.format_namespaces, l1.pf(l1.NVME),
                     'is not a VF')):
                try:
                    call(argument)
                except privsep.InvalidArgument as exc:
                    assert refusal in str(exc), exc
                else:
                    raise AssertionError('%s(%s) was not refused'
                                         % (call.__name__, argument))
            yield
        finally:
            for context in started:
                if context.channel is not None:
                    context.stop()

    def give(self, consumer: str, device) -> str:
        """One unit of ``device`` given to ``consumer``: the unit."""
        (unit,) = self.books.assign(consumer, device.provider,
                                    device.accelerator.units, 1)
        return unit

    def scrub_one(self):
        """The scrub of the one unit held now: its outcome."""
        (outcome,) = self.scrubber.run()
        return outcome


def namespace_disk(unit: str) -> tuple[int, str]:
    """(namespace ID, its block device) of the one namespace of VF ``unit``.

    The namespace's disk is a child of the VF's controller; with native
    NVMe multipath (Debian's default) the child is the hidden path
    ``nvmeXcYnZ`` and the disk is its head ``nvmeXnZ``.
    """
    (ctrl,) = os.listdir(os.path.join(l1.DEVICES, unit, 'nvme'))
    found = []
    for name in os.listdir(os.path.join(l1.DEVICES, unit, 'nvme', ctrl)):
        match = re.fullmatch(r'(nvme\d+)(?:c\d+)?n(\d+)', name)
        if match:
            found.append((int(match.group(2)),
                          '/dev/%sn%s' % match.groups()))
    assert len(found) == 1, (unit, ctrl, found)
    return found[0]


def write_block(disk: str, data: bytes) -> None:
    """``data`` at the start of ``disk``, on the drive when it returns."""
    fd = os.open(disk, os.O_WRONLY)
    try:
        os.pwrite(fd, data.ljust(4096, b'\0'), 0)
        os.fsync(fd)
    finally:
        os.close(fd)


def read_block(disk: str) -> bytes:
    """The first 4 KiB as the drive has them, past the page cache."""
    import mmap
    buf = mmap.mmap(-1, 4096)
    fd = os.open(disk, os.O_RDONLY | os.O_DIRECT)
    try:
        os.preadv(fd, [buf], 0)
    finally:
        os.close(fd)
    return bytes(buf)


def set_tenant_vf(unit: str, mac: str) -> tuple[str, int]:
    """A tenant's NIC VF as the host sets it up through its PF.

    MAC ``mac``, VLAN 100 and trust on, as Neutron's SR-IOV agent sets a
    port's. Returns (the PF's interface, the VF's index).
    """
    import subprocess
    pf_if, index = privsep_net.vf_of('/sys', unit)
    subprocess.run(['ip', 'link', 'set', 'dev', pf_if, 'vf', str(index),
                    'mac', mac, 'vlan', '100', 'trust', 'on'], check=True)
    return pf_if, index
