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

"""privsep.net: a VF found from its address alone, its settings reset.

The sysfs side (which PF, which VF index, which interface) runs on the
crypto-nic-host tree; rtnetlink cannot exist on a fake tree, so each
``ip`` call gets the answer a kernel gives (the nested VM's test runs
the real one, tests/realkernel/inside_privsep.py).
"""

import os
import shutil
import subprocess

import pytest

import privsep
from privsep import net
from tests.unit.privsep import fakesysfs

PF = '0000:3b:00.0'


def vf(tree, index):
    return os.path.basename(os.path.realpath(
        fakesysfs.device(tree, PF, 'virtfn%d' % index)))


class Kernel:
    """rtnetlink's answers: every call taken, but those in ``refuse``."""

    def __init__(self, refuse=None):
        self.calls = []
        self.refuse = refuse or {}

    def __call__(self, argv):
        self.calls.append(argv)
        for word, answer in self.refuse.items():
            if word in argv:
                return subprocess.CompletedProcess(argv, 2, '', answer)
        return subprocess.CompletedProcess(argv, 0, '', '')


def test_the_vf_is_found_by_its_address(nic_tree):
    assert net.vf_of(nic_tree, vf(nic_tree, 5)) == ('ens1f0', 5)
    assert net.vf_of(nic_tree, vf(nic_tree, 12)) == ('ens1f0', 12)


def test_every_setting_back_to_its_default(nic_tree):
    kernel = Kernel()
    done = net._reset_vf_settings(nic_tree, vf(nic_tree, 3), run=kernel)
    assert done == {name: 'reset' for name, _ in net.DEFAULTS}
    prefix = ['ip', 'link', 'set', 'dev', 'ens1f0', 'vf', '3']
    assert kernel.calls == [prefix + list(words)
                            for _, words in net.DEFAULTS]
    # MAC and VLAN before spoof checking, as some drivers need.
    assert [c[7] for c in kernel.calls][:3] == ['vlan', 'mac', 'spoofchk']


def test_a_setting_the_driver_lacks_is_skipped(nic_tree):
    kernel = Kernel({'state': 'RTNETLINK answers: Operation not supported'})
    done = net._reset_vf_settings(nic_tree, vf(nic_tree, 0), run=kernel)
    assert done['link_state'] == 'not supported'
    assert done['trust'] == 'reset'


def test_a_refused_setting_fails_with_the_kernels_answer(nic_tree):
    kernel = Kernel({'mac': 'RTNETLINK answers: Invalid argument'})
    with pytest.raises(privsep.NotPossible,
                       match=r'resetting mac of VF 0000:3b:02.1 \(ens1f0 '
                             r'vf 1\) failed: RTNETLINK answers: Invalid'):
        net._reset_vf_settings(nic_tree, vf(nic_tree, 1), run=kernel)
    # The VLAN went first; nothing after the refusal was tried.
    assert [c[7] for c in kernel.calls] == ['vlan', 'mac']


@pytest.mark.parametrize('address, error, match', [
    (PF, privsep.InvalidArgument, 'is not a VF'),
    ('0000:3b:02.1/../..', privsep.InvalidArgument, ''),
    ('0000:ff:1f.7', privsep.NoSuchDevice, ''),
    ('ens1f0', privsep.NotAPciAddress, ''),
])
def test_anything_but_a_vf_is_refused_before_a_call(nic_tree, address,
                                                    error, match):
    kernel = Kernel()
    with pytest.raises(error, match=match):
        net._reset_vf_settings(nic_tree, address, run=kernel)
    assert kernel.calls == []


def test_a_pf_without_its_interface_is_not_possible(nic_tree):
    netdir = fakesysfs.device(nic_tree, PF, 'net')
    for name in os.listdir(netdir):
        shutil.rmtree(os.path.join(netdir, name))
    kernel = Kernel()
    with pytest.raises(privsep.NotPossible, match='no network interface'):
        net._reset_vf_settings(nic_tree, vf(nic_tree, 2), run=kernel)
    assert kernel.calls == []
