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

"""privsep on a real kernel's sysfs (runs inside L1).

The ``sysfs_admin`` daemon is started by the venv's ``privsep-helper``
from the host's config, as a deployment starts it, and writes L1's real
``sriov_numvfs``, ``driver_override``, ``unbind`` and ``drivers_probe``.
Every refusal must come before any write: the kernel's attributes read
the same afterwards.
"""

import json
import os
import subprocess
import time

import pytest

from cyborg_nova import scrub
import privsep
from privsep import nvme as privsep_nvme
from tests.realkernel import l1
from tests.realkernel import scrubl1


def helper_daemons() -> list[str]:
    """Command lines of the running privsep-helper processes."""
    found = []
    for pid in filter(str.isdigit, os.listdir('/proc')):
        try:
            with open('/proc/%s/cmdline' % pid, 'rb') as f:
                argv = f.read().split(b'\0')
        except OSError:
            continue
        if any(a.endswith(b'privsep-helper') for a in argv):
            found.append(b' '.join(argv).decode())
    return found


def snapshot(*addresses: str) -> dict:
    """What a refused call must leave as it was."""
    state = {}
    for address in addresses:
        for name in ('sriov_numvfs', 'driver_override'):
            path = os.path.join(l1.DEVICES, address, name)
            if os.path.exists(path):
                state[(address, name)] = l1.read(path)
        state[(address, 'driver')] = l1.driver(address)
    return state


def test_update_driver_changes_the_vf_count(pci):
    pf = l1.pf(l1.IGB)
    assert len(l1.vfs(pf)) == 2
    started = time.monotonic()
    rc, out, err = l1.cli('driver-update', 'nic_sriov', '--num-vfs', '4')
    l1.record('update_driver_cli_s', l1.elapsed(started))
    assert rc == 0, err
    assert '%s: 2 -> 4 VFs' % pf in out
    assert l1.attr(pf, 'sriov_numvfs') == '4'
    assert len(l1.wait_vfs(pf, 4)) == 4
    # Back to two, as the other tests expect.
    rc, out, err = l1.cli('driver-update', 'nic_sriov', '--num-vfs', '2')
    assert rc == 0, err
    assert len(l1.wait_vfs(pf, 2)) == 2


def test_vfs_bound_to_vfio_and_back(pci):
    vf = l1.vfs(l1.pf(l1.IGB))[1]
    assert l1.driver(vf) == 'igbvf'
    assert pci.bind_vfio(vf) == 'vfio-pci'
    assert helper_daemons(), 'no privsep-helper daemon runs'
    assert l1.driver(vf) == 'vfio-pci'
    assert l1.attr(vf, 'driver_override') == 'vfio-pci'
    assert os.path.exists('/dev/vfio/%d' % l1.iommu_group(vf))
    assert pci.unbind(vf) == 'vfio-pci'
    assert l1.driver(vf) is None
    assert l1.attr(vf, 'driver_override') == '(null)'
    # The host driver takes it back at the next probe.
    with open('/sys/bus/pci/drivers_probe', 'w') as f:
        f.write(vf)
    l1.wait_for(lambda: l1.driver(vf) == 'igbvf', what='igbvf back')


@pytest.mark.parametrize('call, args, error', [
    ('set_num_vfs', ('igb', 99), privsep.OutOfRange),
    ('set_num_vfs', ('igb', -1), privsep.OutOfRange),
    ('set_num_vfs', ('igb', '3'), privsep.InvalidArgument),
    ('set_num_vfs', ('vf', 1), privsep.InvalidArgument),
    ('set_num_vfs', ('0000:00:00.0/../..', 1), privsep.InvalidArgument),
    ('set_num_vfs', ('0000:ff:1f.7', 1), privsep.NoSuchDevice),
    ('bind_vfio', ('bridge',), privsep.InvalidArgument),
    ('bind_vfio', ('0000:AB:00.0',), privsep.NotAPciAddress),
    ('unbind', ('../../../../dev',), privsep.InvalidArgument),
])
def test_refused_before_any_write(pci, call, args, error):
    pf = l1.pf(l1.IGB)
    vf = l1.vfs(pf)[0]
    bridge = os.path.basename(os.path.dirname(os.path.realpath(
        os.path.join(l1.DEVICES, pf))))
    named = {'igb': pf, 'vf': vf, 'bridge': bridge}
    args = tuple(named.get(a, a) if isinstance(a, str) else a
                 for a in args)
    before = snapshot(pf, vf, bridge)
    with pytest.raises(error):
        getattr(pci, call)(*args)
    assert snapshot(pf, vf, bridge) == before


def vf_info(pf_if: str, index: int) -> dict:
    """VF ``index``'s settings on PF ``pf_if``, as rtnetlink reports them."""
    out = subprocess.run(['ip', '-j', 'link', 'show', 'dev', pf_if],
                         capture_output=True, text=True, check=True).stdout
    (link,) = json.loads(out)
    return [vf for vf in link['vfinfo_list'] if vf['vf'] == index][0]


def test_a_freed_vf_is_scrubbed_by_the_kernel(tmp_path):
    """A VF a guest freed, scrubbed as nova-compute scrubs it.

    The real scrubber over a store of its own: the igb VF is given to a
    consumer, the host sets its MAC, VLAN and trust on the PF, and the
    VF is freed (held in that transaction). Its settings are put back by
    the ``net_admin`` daemon through L1's rtnetlink, the VF is reset by
    the ``sysfs_admin`` daemon through L1's kernel (``reset``, the
    methods in ``reset_method``), and it is free again. How long the
    unit was kept from the next guest is recorded.
    """
    host = scrubl1.ScrubHost(str(tmp_path))
    nic = host.device(l1.IGB)
    unit = host.give('guest-a', nic)
    assert l1.driver(unit) == 'igbvf'
    # What the host set for the tenant's VF through the PF (as Neutron's
    # SR-IOV agent sets it for a port): it survives a reset of the VF.
    tenant_mac = '02:00:00:00:00:01'
    pf_if, index = scrubl1.set_tenant_vf(unit, tenant_mac)
    assert vf_info(pf_if, index)['trust'] is True
    methods = l1.attr(unit, 'reset_method')
    with host.daemons():
        host.books.release('guest-a', nic.provider)
        assert host.store.units.kept() == {nic.provider: 1}
        outcome = host.scrub_one()
    l1.record('igb_vf_reset_method', methods)
    assert outcome.result == scrub.FREE, outcome.reason
    settings, flr = outcome.done
    assert flr == 'flr: reset %s (%s)' % (unit, methods)
    assert settings.startswith('vf_settings: settings of VF %s on its '
                               'PF: ' % unit), settings
    l1.record('igb_vf_settings_step', settings)
    # igb has every setting but the minimum rate.
    assert 'mac reset' in settings and 'vlan reset' in settings
    assert 'trust reset' in settings
    after = vf_info(pf_if, index)
    l1.record('igb_vf_after_scrub', after)
    assert after['trust'] is False and after['spoofchk'] is True, after
    assert not [v for v in after.get('vlan_list', ())
                if v.get('vlan')], after
    # The host-set MAC is gone (the VF's own driver may pick a new one).
    assert after['address'] != tenant_mac, after
    assert host.store.units.holds() == []
    l1.record('igb_vf_scrub_held_s', round(outcome.held_for, 3))
    # The kernel reset it under its driver, which still has it.
    assert l1.driver(unit) == 'igbvf'


def test_a_freed_nvme_vf_has_its_namespace_erased(tmp_path):
    """An NVMe VF a guest freed, its namespace erased by its controller.

    Each VF of QEMU's NVMe controller has a private namespace. What the
    tenant wrote to its VF's namespace is there when the VF is freed;
    the real scrubber then erases it through the ``nvme_admin`` daemon
    (Format NVM, user data erase, sent by L1's kernel to QEMU's
    controller) and resets the VF. The tenant's data is gone, the other
    VF's tenant keeps its own, and the unit is free again. The daemon
    refuses the PF, a whole drive (``ScrubHost.daemons``), and a VF whose
    namespace disk the host holds open exclusively.
    """
    host = scrubl1.ScrubHost(str(tmp_path))
    drive = host.device(l1.NVME)
    unit = host.give('guest-a', drive)
    (other,) = [u for u in drive.accelerator.units if u != unit]
    assert l1.driver(unit) == l1.driver(other) == 'nvme'
    nsid, disk = scrubl1.namespace_disk(unit)
    other_nsid, other_disk = scrubl1.namespace_disk(other)
    assert nsid != other_nsid
    # What the tenants wrote, through their VFs' namespaces.
    scrubl1.write_block(disk, b'tenant a secret')
    scrubl1.write_block(other_disk, b'tenant b keeps this')
    assert scrubl1.read_block(disk).startswith(b'tenant a secret')
    with host.daemons():
        host.books.release('guest-a', drive.provider)
        outcome = host.scrub_one()
        # A namespace disk the host holds (as a mount or LVM would) is
        # refused by the kernel's exclusive open, before any Format.
        held = os.open(other_disk, os.O_RDONLY | os.O_EXCL)
        try:
            with pytest.raises(privsep.NotPossible, match='in use on this '
                               'host'):
                privsep_nvme.format_namespaces(other)
        finally:
            os.close(held)
    assert outcome.result == scrub.FREE, outcome.reason
    erase, flr = outcome.done
    l1.record('nvme_vf_format_step', erase)
    assert erase == ('nvme_format: erased namespace %d of %s (Format NVM, '
                     'user data erase)' % (nsid, unit))
    assert flr.startswith('flr: reset %s' % unit), flr
    after = scrubl1.read_block(disk)
    assert b'tenant a secret' not in after
    assert after == bytes(4096)
    assert scrubl1.read_block(other_disk).startswith(b'tenant b keeps this')
    assert host.store.units.holds() == []
    l1.record('nvme_vf_scrub_held_s', round(outcome.held_for, 3))
    assert l1.driver(unit) == 'nvme'
