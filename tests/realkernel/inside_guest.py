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

"""A real guest (L2) gets the VF Placement gave it (runs inside L1).

As at a spawn: the instance's allocation of one igb VF (CUSTOM_NIC) is
in the host's Placement, the project's unit store picks the VF, and the
guest definition gets it as the project's managed ``<hostdev>``; L1's
libvirtd starts L2 under KVM (nested, inside the emulated L1). L2's own
kernel reports the PCI functions it sees on its serial console.

Then: a hard reboot (the guest destroyed and rebuilt from the store, as
Nova's does) keeps the same VF; ``cyborg-nova instance-attach`` hot-plugs
an NVMe VF into the running L2, which sees it, and ``instance-detach``
takes it away and gives it back to L1's nvme driver; a VF another guest
holds is refused, by the unit store and by the kernel's and libvirt's
own checks.
"""

from __future__ import annotations

import os
import re
import time
import uuid

from oslo_config import cfg
import pytest

from cyborg_drivers import discovery
from cyborg_drivers import guest_xml
from cyborg_drivers import loader
from cyborg_nova import assignments
from cyborg_nova.conf import cyborg_nova as cn_opts
from cyborg_nova import store as state_store
from tests.realkernel import l1

URI = 'qemu:///system'
NVME_VF = '0x1b36:0x0010'
#: Seconds for L2 to boot (under KVM in an emulated L1) and report.
BOOT = 600


def accelerators() -> dict:
    conf = cfg.ConfigOpts()
    conf(['--config-file', l1.host()])
    cn_opts.register_opts(conf)
    drivers = loader.load(conf, conf.cyborg_nova.enabled_drivers)
    return discovery.Discoverer(drivers, '/sys').discover().by_address()


def domain_xml(server: str, name: str, console: str,
               units: list[str]) -> str:
    """A tiny guest: L2's kernel and initramfs, and ``units`` as hostdevs.

    Three spare PCIe root ports take hot-plugged functions (a q35 root
    bus takes none).
    """
    kvm = os.path.exists('/dev/kvm')
    hostdevs = ''.join(guest_xml.pci_hostdev_xml(u, pretty_print=False)
                       for u in units)
    nested = os.environ.get('NESTED', '/nested')
    kernel = os.path.join(nested, 'vmlinux.elf')
    if not os.path.exists(kernel):
        kernel = sorted(
            os.path.join(nested, 'kernel', 'boot', n) for n in os.listdir(
                os.path.join(nested, 'kernel', 'boot'))
            if n.startswith('vmlinuz-'))[0]
    return """<domain type='%(type)s'>
  <name>%(name)s</name><uuid>%(uuid)s</uuid>
  <memory unit='MiB'>256</memory><vcpu>1</vcpu>
  <os><type arch='x86_64' machine='q35'>hvm</type>
    <loader type='rom'>/usr/share/qemu/qboot.rom</loader>
    <kernel>%(kernel)s</kernel><initrd>%(initrd)s</initrd>
    <cmdline>console=ttyS0 panic=-1 loglevel=3</cmdline></os>
  <features><acpi/></features>%(cpu)s
  <on_poweroff>destroy</on_poweroff><on_reboot>destroy</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <controller type='usb' model='none'/>
    <controller type='pci' index='0' model='pcie-root'/>
    <controller type='pci' model='pcie-root-port'/>
    <controller type='pci' model='pcie-root-port'/>
    <controller type='pci' model='pcie-root-port'/>
    <serial type='file'><source path='%(console)s' append='on'/>
      <target port='0'/></serial>
    %(hostdevs)s
    <memballoon model='none'/>
  </devices>
</domain>""" % {
        'type': 'kvm' if kvm else 'qemu', 'name': name, 'uuid': server,
        'cpu': "<cpu mode='host-passthrough'/>" if kvm else '',
        'kernel': kernel,
        'initrd': os.path.join(nested, 'initramfs-l2.gz'),
        'console': console, 'hostdevs': hostdevs}


#: "<vendor>:<device> driver=<name>" of a line ``L2: pci <address> ...``
#: (the ids as sysfs shows them: ``0x1b36:0x0010``).
FUNCTION = re.compile(r'\b(0x[0-9a-f]{4}:0x[0-9a-f]{4}) +driver=(\S+)')


def pci_set(console: str) -> list[tuple[str, str]] | None:
    """(vendor:device, driver) of each function L2 saw last; None if none.

    The last complete ``pci-set`` after L2's last boot.
    """
    try:
        with open(console, errors='replace') as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    boots = [i for i, line in enumerate(lines) if line.startswith('L2: up')]
    if not boots:
        return None
    found, current = None, None
    for line in lines[boots[-1]:]:
        if line.startswith('L2: pci-set begin'):
            current = []
        elif line.startswith('L2: pci-set end') and current is not None:
            # The kernel's own messages share the serial console and can
            # cut into L2's lines (a detach logs while L2 lists its
            # functions): the pairs are read from the set's whole text.
            found = FUNCTION.findall(' '.join(current))
            current = None
        elif current is not None:
            current.append(line)
    return found


def sees(console: str, ids: str, count: int) -> list:
    """Waits until L2 shows ``count`` functions ``ids``, each with a driver.

    :returns: everything L2 showed then.
    """
    def ready():
        found = pci_set(console)
        if found is None:
            return None
        matching = [d for i, d in found if i == ids]
        if len(matching) == count and 'none' not in matching:
            return found
        return None
    return l1.wait_for(ready, timeout=BOOT, interval=1,
                       what='L2 to show %d %s functions (console %s)'
                       % (count, ids, console))


class Guest:
    """An instance: its allocation, units, libvirt domain and console."""

    def __init__(self, name: str) -> None:
        import libvirt
        self.libvirt = libvirt
        self.server = str(uuid.uuid4())
        self.name = name
        self.console = '/run/%s-console.log' % name
        self.conn = libvirt.open(URI)
        self.store = assignments.Assignments(state_store.StateStore(l1.STATE))
        self.dom = None

    def units(self) -> list[str]:
        return sorted(u for us in self.store.of_consumer(self.server).values()
                      for u in us)

    def define(self) -> None:
        """(Re)defines the domain from the units the store holds."""
        self.dom = self.conn.defineXML(domain_xml(
            self.server, self.name, self.console, self.units()))

    def start(self) -> None:
        if os.path.exists(self.console):
            os.unlink(self.console)
        self.define()
        self.dom.create()

    def hostdevs(self) -> list[str]:
        from xml.etree import ElementTree
        root = ElementTree.fromstring(self.dom.XMLDesc(0))
        return sorted(u for u in l1.vfs(l1.pf(l1.IGB)) + l1.vfs(
            l1.pf(l1.NVME)) if guest_xml.hostdev_in_domain(root, u))

    def close(self) -> None:
        if self.dom is not None:
            try:
                if self.dom.isActive():
                    self.dom.destroy()
                self.dom.undefine()
            except self.libvirt.libvirtError:
                pass
        if os.path.exists(self.console):
            with open(self.console, 'rb') as f, open(os.path.join(
                    l1.RUN, os.path.basename(self.console)), 'wb') as out:
                out.write(f.read())
        self.store.release(self.server)
        l1.placement().deallocate(self.server)
        self.conn.close()


@pytest.fixture(scope='module')
def guest():
    l1.reported()
    g = Guest('l2a')
    yield g
    g.close()


@pytest.fixture(scope='module')
def igb():
    pf = l1.pf(l1.IGB)
    return pf, l1.provider(pf), accelerators()[pf]


def test_spawn_gives_the_allocated_vf(guest, igb):
    pf, provider, accelerator = igb
    # The scheduler's allocation, as Nova's conductor writes it.
    l1.placement().allocate(guest.server, provider, {'CUSTOM_NIC': 1})
    # The unit store picks the function, as the virt driver does at spawn.
    units = guest.store.assign(guest.server, provider, accelerator.units, 1)
    assert len(units) == 1 and units[0] in l1.vfs(pf)
    started = time.monotonic()
    guest.start()
    sees(guest.console, l1.IGB_VF, 1)
    l1.record('l2_boot_to_vf_seen_s', l1.elapsed(started))
    assert guest.hostdevs() == units
    # libvirt took the VF from igbvf to vfio-pci for the guest.
    assert l1.driver(units[0]) == 'vfio-pci'


def test_hard_reboot_keeps_the_same_vf(guest, igb):
    before = guest.units()
    guest.dom.destroy()
    started = time.monotonic()
    guest.start()
    sees(guest.console, l1.IGB_VF, 1)
    l1.record('l2_hard_reboot_to_vf_seen_s', l1.elapsed(started))
    assert guest.units() == before
    assert guest.hostdevs() == before


def boots(console: str) -> int:
    """How many times L2 has booted, by its console."""
    with open(console, errors='replace') as f:
        return sum(1 for line in f if line.startswith('L2: up'))


def test_a_suspend_needs_the_vf_out_of_the_guest(guest, igb):
    """Why cyborg-nova's suspend unplugs units, on real libvirt and QEMU.

    The steps of ``GuestAcceleratorsMixin.suspend`` and ``resume`` (and
    of Nova's libvirt driver around them), on the guest's real VF.
    """
    libvirt = guest.libvirt
    (vf,) = guest.units()
    booted = boots(guest.console)
    # A managed save of a guest with the VF in it: refused, and the
    # guest runs on with its VF.
    with pytest.raises(libvirt.libvirtError) as caught:
        guest.dom.managedSave(0)
    l1.record('managed_save_with_a_vf_refused', str(caught.value))
    assert guest.dom.isActive()
    assert not guest.dom.hasManagedSaveImage(0)
    sees(guest.console, l1.IGB_VF, 1)

    # Unplugged from the running guest only: the definition keeps it.
    started = time.monotonic()
    guest.dom.detachDeviceFlags(guest_xml.pci_hostdev_xml(vf),
                                libvirt.VIR_DOMAIN_AFFECT_LIVE)
    l1.wait_for(lambda: guest.hostdevs() == [], timeout=BOOT,
                what='the VF out of the running guest')
    sees(guest.console, l1.IGB_VF, 0)
    from xml.etree import ElementTree
    assert guest_xml.hostdev_in_domain(ElementTree.fromstring(
        guest.dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)), vf)
    # Saved, the VF back on L1's driver and still the instance's.
    guest.dom.managedSave(0)
    l1.record('l2_unplug_and_save_s', l1.elapsed(started))
    assert not guest.dom.isActive()
    assert guest.dom.hasManagedSaveImage(0)
    l1.wait_for(lambda: l1.driver(vf) == 'igbvf', what='igbvf back')
    assert guest.units() == [vf]

    # Resumed as Nova resumes: its definition written again (with the
    # VF), started from the save image, which has none ...
    started = time.monotonic()
    guest.dom = guest.conn.defineXML(guest.dom.XMLDesc(
        libvirt.VIR_DOMAIN_XML_INACTIVE))
    guest.dom.create()
    assert guest.dom.isActive()
    assert guest.hostdevs() == []
    # ... then the VF plugged in again: L2 sees it, and was never
    # booted again.
    guest.dom.attachDeviceFlags(guest_xml.pci_hostdev_xml(vf),
                                libvirt.VIR_DOMAIN_AFFECT_LIVE)
    sees(guest.console, l1.IGB_VF, 1)
    l1.record('l2_resume_and_replug_to_vf_seen_s', l1.elapsed(started))
    assert guest.hostdevs() == [vf]
    assert l1.driver(vf) == 'vfio-pci'
    assert boots(guest.console) == booted


def test_live_attach_and_detach_of_a_second_vf(guest):
    nvme = l1.pf(l1.NVME)
    provider = l1.provider(nvme)
    held = guest.units()
    started = time.monotonic()
    rc, out, err = l1.cli('instance-attach', guest.server, '--device', nvme,
                          '--libvirt-uri', URI)
    assert rc == 0, err
    sees(guest.console, NVME_VF, 1)
    l1.record('l2_live_attach_to_vf_seen_s', l1.elapsed(started))
    (unit,) = [u for u in guest.units() if u not in held]
    assert unit in l1.vfs(nvme)
    assert l1.driver(unit) == 'vfio-pci'
    assert guest.hostdevs() == sorted(held + [unit])
    allocations = l1.placement().get('/allocations/%s' % guest.server)[
        'allocations']
    assert allocations[provider]['resources'] == {'CUSTOM_NVME_FN': 1}

    started = time.monotonic()
    rc, out, err = l1.cli('instance-detach', guest.server, '--device', nvme,
                          '--libvirt-uri', URI)
    assert rc == 0, err
    l1.record('l2_live_detach_s', l1.elapsed(started))
    sees(guest.console, NVME_VF, 0)
    # Back on L1's own driver, out of the guest and its allocation.
    l1.wait_for(lambda: l1.driver(unit) == 'nvme', what='nvme back')
    assert guest.units() == held
    assert guest.hostdevs() == held
    allocations = l1.placement().get('/allocations/%s' % guest.server)[
        'allocations']
    assert provider not in allocations


def test_a_vf_another_guest_holds_is_refused(guest, igb):
    pf, provider, accelerator = igb
    (taken,) = guest.units()
    other = Guest('l2b')
    try:
        # The store: the only free VF is not two.
        before = l1.placement().get('/allocations/%s' % other.server)
        with pytest.raises(assignments.NoFreeUnits):
            other.store.assign(other.server, provider, accelerator.units, 2)
        assert other.units() == []
        # libvirt and the kernel: a guest defined with the taken VF
        # (which nothing here would write) does not start.
        other.dom = other.conn.defineXML(domain_xml(
            other.server, other.name, other.console, [taken]))
        with pytest.raises(other.libvirt.libvirtError) as caught:
            other.dom.create()
        assert 'in use' in str(caught.value), caught.value
        assert l1.driver(taken) == 'vfio-pci'
        assert not other.dom.isActive()
        assert l1.placement().get('/allocations/%s' % other.server) == (
            before)
    finally:
        other.close()
    # The first guest still has it.
    sees(guest.console, l1.IGB_VF, 1)
