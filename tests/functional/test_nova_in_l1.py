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

"""Through Nova onto a real VF: ``tools/mini-cloud.sh --nova-in-l1``.

The mini-cloud on this machine; a nova-compute with ``compute_driver =
cyborg_nova.LibvirtDriver`` in L1 (a VM with Debian's kernel and an
emulated igb SR-IOV NIC), registered with it; a flavor asking for one
VF; a server booted through Nova's API from an image of L2's kernel
lands on L1 with its allocation on the NIC's provider and a real VF
(bound to vfio-pci in L1) in its libvirt guest, which L2's own kernel
sees; hard and soft reboot, stop/start, suspend/resume, rebuild,
shelve (offloaded)/unshelve and a resize on the same host keep L2 seeing
exactly its VF; deleted, its allocation is gone and the VF is back on
igbvf, and every VF freed on the way was scrubbed by L1's nova-compute
(tools/mini_cloud_l1.py checks each step). L1 boots once for all of it.
"""

import os
import re
import subprocess

import pytest

from tests import counts

# A whole cloud or VM: minutes, many more on a loaded machine than the
# test command's limit for one test.
pytestmark = pytest.mark.timeout(3000)

TOP = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def test_a_server_lands_on_a_real_vf_through_nova(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith('OS_')}
    proc = subprocess.run(
        [os.path.join(TOP, 'tools', 'mini-cloud.sh'), '--nova-in-l1',
         '--work-dir', str(tmp_path / 'cloud')],
        capture_output=True, text=True, timeout=3000, env=env,
        stdin=subprocess.DEVNULL)
    out = proc.stdout
    lines = [line for line in out.splitlines()
             if line.startswith(('mini-cloud:', 'NOVA-IN-L1:'))]
    counts.record('nova in L1: %s' % ' | '.join(
        line for line in lines if line.startswith('NOVA-IN-L1:')))
    tail = out[-6000:] + proc.stderr[-3000:]
    assert proc.returncode == 0, tail
    assert 'NOVA-IN-L1: ok' in lines, tail
    assert re.search(r'NOVA-IN-L1: its NIC in Placement '
                     r'\(nested-l1_accelerator_0000:[0-9a-f:.]+\)', out), tail
    held = re.search(r'NOVA-IN-L1: server \S+ on nested-l1 holds VF '
                     r'(\S+) of (\S+) \(vfio-pci in L1\)', out)
    assert held, tail
    vf = held.group(1)
    # Each operation, on the real kernel, libvirt and QEMU of L1: L2's
    # own kernel sees exactly the one VF L1's domain has.
    for what in ('hard reboot', 'soft reboot', 'stop and start',
                 'suspend and resume', 'rebuild'):
        assert 'NOVA-IN-L1: %s: L2 sees its VF %s (' % (what, vf) in out, (
            what, tail)
    assert ('NOVA-IN-L1: suspended: the guest saved, VF %s back on igbvf '
            "and still the server's" % vf) in out, tail
    assert re.search(r'NOVA-IN-L1: shelve \(offloaded\) and unshelve: L2 '
                     r'sees its VF 0000:\S+ \(', out), tail
    assert re.search(r'NOVA-IN-L1: resize on the same host, confirmed: L2 '
                     r'sees its VF 0000:\S+ \(', out), tail
    assert re.search(r'NOVA-IN-L1: after the delete VF 0000:\S+ is back on '
                     r'igbvf, no guest in L1, no allocation', out), tail
    # Each VF freed on the way (shelve, the confirmed resize, the delete)
    # was held and scrubbed by L1's nova-compute through its privsep
    # daemon, on L1's kernel: nothing is left held or reserved.
    assert re.search(r"NOVA-IN-L1: the freed VFs were scrubbed by L1's "
                     r'nova-compute \(nothing held \d+ s after the delete, '
                     r'nothing reserved\)', out), tail
    # What the operator typed.
    assert '$ openstack server create --flavor accel.nic.vf' in out, tail
    assert "resources:CUSTOM_NIC='1'" in out, tail
