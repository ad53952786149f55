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

"""privsep.pci: vfio-pci binding and VF counts, on a fake sysfs tree."""

import os

import pytest

import privsep
from privsep import _common
from privsep import pci
from tests.unit.privsep import fakesysfs

T4 = '0000:3c:00.0'          # Tesla T4, bound to nvidia
A100 = '0000:5f:00.0'        # A100, SR-IOV: 4 of 16 VFs enabled
A10 = '0000:af:00.0'         # A10, no SR-IOV
ICE = '0000:3b:00.0'         # crypto-nic-host: E810, 64 of 128 VFs
ROOT_PORT = '0000:3a:00.0'   # a bridge (pcieport)

BAD_ADDRESSES = [
    ('../../../etc', privsep.PathLikeArgument),
    ('0000:3c:00.0/../../..', privsep.PathLikeArgument),
    ('/sys/bus/pci/devices/0000:3c:00.0', privsep.PathLikeArgument),
    ('0000:3c:00.0\0', privsep.PathLikeArgument),
    ('0000:3C:00.0', privsep.NotAPciAddress),
    ('3c:00.0', privsep.NotAPciAddress),
    ('0000:3c:00.8', privsep.NotAPciAddress),
    ('', privsep.NotAPciAddress),
    ('0000:3c:00.0 ', privsep.NotAPciAddress),
    (None, privsep.InvalidArgument),
    (0x3c00, privsep.InvalidArgument),
    ('0000:ff:1f.7', privsep.NoSuchDevice),
]
CALLS = {
    'bind_vfio': lambda root, address: pci._bind_vfio(root, address),
    'unbind': lambda root, address: pci._unbind(root, address),
    'set_num_vfs': lambda root, address: pci._set_num_vfs(root, address, 1),
    'reset_function': lambda root, address: pci._reset_function(root,
                                                                address),
}


@pytest.mark.parametrize('call', sorted(CALLS))
@pytest.mark.parametrize('address, error', BAD_ADDRESSES)
def test_bad_address_refused_before_any_write(tree, call, address, error):
    before = fakesysfs.snapshot(tree)
    with pytest.raises(error) as info:
        CALLS[call](tree, address)
    assert isinstance(info.value, ValueError)
    message = str(info.value)
    if isinstance(address, str):
        # The message names what was refused.
        assert repr(address) in message or address in message
    else:
        assert 'must be a string' in message
    assert fakesysfs.snapshot(tree) == before


def test_errors_survive_the_privsep_channel():
    # The client re-raises ``cls(*args)``: one message argument each.
    for cls in (privsep.InvalidArgument, privsep.NotAPciAddress,
                privsep.NoSuchDevice, privsep.PathLikeArgument,
                privsep.UnknownAttribute, privsep.OutOfRange,
                privsep.NotPossible):
        error = cls('why')
        assert str(type(error)(*error.args)) == 'why'
    assert issubclass(privsep.OutOfRange, ValueError)


def test_bind_vfio_overrides_unbinds_and_probes(tree, writes):
    assert pci._bind_vfio(tree, T4) == 'nvidia'  # no kernel to rebind
    assert writes == [
        ('bus/pci/devices/%s/driver_override' % T4, 'vfio-pci'),
        ('bus/pci/devices/%s/driver/unbind' % T4, T4),
        ('bus/pci/drivers_probe', T4),
    ]
    assert fakesysfs.read(fakesysfs.device(tree, T4,
                                           'driver_override')) == 'vfio-pci'
    assert fakesysfs.read(os.path.join(tree, 'bus', 'pci', 'drivers',
                                       'nvidia', 'unbind')) == T4
    assert fakesysfs.read(os.path.join(tree, 'bus', 'pci',
                                       'drivers_probe')) == T4


def test_bind_vfio_of_an_unbound_device_skips_the_unbind(tree, writes):
    os.unlink(fakesysfs.device(tree, A10, 'driver'))
    pci._bind_vfio(tree, A10)
    assert [value for _, value in writes] == ['vfio-pci', A10]
    assert writes[1][0] == 'bus/pci/drivers_probe'


def test_bind_vfio_when_already_bound_writes_nothing(tree, writes):
    link = fakesysfs.device(tree, A10, 'driver')
    os.unlink(link)
    os.symlink(os.path.join(tree, 'bus', 'pci', 'drivers', 'vfio-pci'),
               link)
    with open(fakesysfs.device(tree, A10, 'driver_override'), 'w') as f:
        f.write('vfio-pci\n')
    assert pci._bind_vfio(tree, A10) == 'vfio-pci'
    assert writes == []


def test_bind_vfio_needs_vfio_pci_loaded(tmp_path):
    root = fakesysfs.build(str(tmp_path / 'sys'), vfio=False)
    before = fakesysfs.snapshot(root)
    with pytest.raises(privsep.NotPossible, match='modprobe vfio-pci'):
        pci._bind_vfio(root, T4)
    assert fakesysfs.snapshot(root) == before


def test_bridges_are_never_rebound(tree):
    before = fakesysfs.snapshot(tree)
    for call in (pci._bind_vfio, pci._unbind):
        with pytest.raises(privsep.InvalidArgument, match='bridge'):
            call(tree, ROOT_PORT)
    assert fakesysfs.snapshot(tree) == before


def test_device_without_driver_override_is_refused(tree):
    os.unlink(fakesysfs.device(tree, T4, 'driver_override'))
    before = fakesysfs.snapshot(tree)
    with pytest.raises(privsep.UnknownAttribute, match='driver_override'):
        pci._bind_vfio(tree, T4)
    assert fakesysfs.snapshot(tree) == before


def test_unbind_clears_the_override_and_unbinds(tree, writes):
    pci._bind_vfio(tree, T4)
    del writes[:]
    assert pci._unbind(tree, T4) == 'nvidia'
    assert writes == [
        ('bus/pci/devices/%s/driver_override' % T4, '\n'),
        ('bus/pci/devices/%s/driver/unbind' % T4, T4),
    ]


def test_unbind_of_an_unbound_device_writes_nothing(tree, writes):
    os.unlink(fakesysfs.device(tree, A10, 'driver'))
    assert pci._unbind(tree, A10) is None
    assert writes == []


def test_set_num_vfs_goes_through_zero(nic_tree, nic_writes):
    assert pci._set_num_vfs(nic_tree, ICE, 32) == 32
    numvfs = 'bus/pci/devices/%s/sriov_numvfs' % ICE
    assert nic_writes == [(numvfs, '0'), (numvfs, '32')]
    assert fakesysfs.read(os.path.join(nic_tree, numvfs)) == '32'


@pytest.mark.parametrize('count, expected', [
    (0, ['0']), (64, []), (128, ['0', '128'])])
def test_set_num_vfs_writes_only_what_is_needed(nic_tree, nic_writes, count,
                                                expected):
    pci._set_num_vfs(nic_tree, ICE, count)
    assert [value for _, value in nic_writes] == expected


def test_set_num_vfs_from_zero_writes_once(nic_tree, nic_writes):
    pci._set_num_vfs(nic_tree, ICE, 0)
    del nic_writes[:]
    pci._set_num_vfs(nic_tree, ICE, 3)
    assert [value for _, value in nic_writes] == ['3']


@pytest.mark.parametrize('count, error', [
    (129, privsep.OutOfRange),
    (-1, privsep.OutOfRange),
    (2 ** 64, privsep.OutOfRange),
    (True, privsep.InvalidArgument),
    ('8', privsep.InvalidArgument),
    (8.0, privsep.InvalidArgument),
    (None, privsep.InvalidArgument),
])
def test_bad_counts_refused_before_any_write(nic_tree, count, error):
    before = fakesysfs.snapshot(nic_tree)
    with pytest.raises(error):
        pci._set_num_vfs(nic_tree, ICE, count)
    assert fakesysfs.snapshot(nic_tree) == before


# -- an NVIDIA GPU: its VFs through NVIDIA's sriov-manage --------------------

def test_an_nvidia_gpus_vfs_are_enabled_with_sriov_manage(tree, tmp_path,
                                                          writes):
    tool = fakesysfs.sriov_manage(tmp_path, tree)
    numvfs = fakesysfs.device(tree, A100, 'sriov_numvfs')
    # As after a host reboot: no VFs.
    with open(numvfs, 'w') as f:
        f.write('0\n')
    assert pci._set_num_vfs(tree, A100, 16, sriov_manage=tool) == 16
    assert fakesysfs.calls(tool) == ['-e %s' % A100]
    assert fakesysfs.read(numvfs).strip() == '16'
    # Never a sysfs write of its own.
    assert writes == []
    # Already there: nothing run.
    assert pci._set_num_vfs(tree, A100, 16, sriov_manage=tool) == 16
    assert pci._set_num_vfs(tree, A100, 0, sriov_manage=tool) == 0
    assert fakesysfs.calls(tool) == ['-e %s' % A100, '-d %s' % A100]
    assert fakesysfs.read(numvfs).strip() == '0'
    assert writes == []


def test_an_nvidia_gpu_takes_all_of_its_vfs_or_none(tree, tmp_path):
    tool = fakesysfs.sriov_manage(tmp_path, tree)
    before = fakesysfs.snapshot(tree)
    with pytest.raises(privsep.OutOfRange,
                       match='enables all of its 16 VFs or none'):
        pci._set_num_vfs(tree, A100, 8, sriov_manage=tool)
    assert fakesysfs.calls(tool) == []
    assert fakesysfs.snapshot(tree) == before


def test_sriov_manage_missing_or_failing_is_said(tree, tmp_path):
    before = fakesysfs.snapshot(tree)
    with pytest.raises(privsep.NotPossible,
                       match="NVIDIA's sriov-manage is not at /nowhere/x"):
        pci._set_num_vfs(tree, A100, 16, sriov_manage='/nowhere/x')
    tool = fakesysfs.sriov_manage(tmp_path, tree)
    with open(tool + '.fail', 'w') as f:
        f.write(A100 + '\n')
    with pytest.raises(privsep.NotPossible,
                       match='exited with status 1: Cannot enable VFs'):
        pci._set_num_vfs(tree, A100, 16, sriov_manage=tool)
    assert fakesysfs.snapshot(tree) == before


def test_set_num_vfs_needs_an_sriov_pf(tree):
    before = fakesysfs.snapshot(tree)
    with pytest.raises(privsep.UnknownAttribute,
                       match='not an SR-IOV physical function'):
        pci._set_num_vfs(tree, A10, 1)
    assert fakesysfs.snapshot(tree) == before


def test_entrypoints_take_the_root_from_the_daemon_config(
        tree, daemon_conf, tmp_path):
    tool = fakesysfs.sriov_manage(tmp_path, tree)
    daemon_conf.config(nvidia_sriov_manage=tool,
                       group='cyborg_nova_privsep')
    assert privsep.pci.set_num_vfs(A100, 0) == 0
    assert fakesysfs.calls(tool) == ['-d %s' % A100]
    assert fakesysfs.read(fakesysfs.device(
        tree, A100, 'sriov_numvfs')).strip() == '0'
    privsep.pci.bind_vfio(T4)
    assert fakesysfs.read(fakesysfs.device(tree, T4,
                                           'driver_override')) == 'vfio-pci'
    assert privsep.pci.unbind(T4) == 'nvidia'
    daemon_conf.config(sysfs_root=str(tree) + '-elsewhere',
                       group='cyborg_nova_privsep')
    with pytest.raises(privsep.NoSuchDevice):
        privsep.pci.set_num_vfs(A100, 2)


def test_reset_function_writes_reset_once(tree, writes):
    assert pci._reset_function(tree, T4) == 'flr'
    assert writes == [('bus/pci/devices/%s/reset' % T4, '1')]


def test_reset_function_of_a_vf(nic_tree, nic_writes):
    vf = os.path.basename(os.readlink(os.path.join(
        nic_tree, 'bus', 'pci', 'devices', ICE, 'virtfn0')))
    assert pci._reset_function(nic_tree, vf) == 'flr'
    assert nic_writes == [('bus/pci/devices/%s/reset' % vf, '1')]


def test_reset_function_refuses_a_bridge(tree, writes):
    with pytest.raises(privsep.InvalidArgument, match='bridge'):
        pci._reset_function(tree, ROOT_PORT)
    assert writes == []


def test_a_function_without_a_reset_method_is_not_possible(tree, writes):
    os.unlink(os.path.join(tree, 'bus', 'pci', 'devices', T4, 'reset'))
    with pytest.raises(privsep.NotPossible,
                       match='offers no reset method'):
        pci._reset_function(tree, T4)
    assert writes == []


def test_a_reset_the_kernel_refuses_is_not_possible(tree, monkeypatch):
    def refuse(path, value):
        raise OSError(25, 'writing %r to %s: Inappropriate ioctl for '
                      'device' % (value, path))
    monkeypatch.setattr(_common, 'write_attr', refuse)
    with pytest.raises(privsep.NotPossible,
                       match='reset of %s failed \\(methods: flr\\)' % T4):
        pci._reset_function(tree, T4)
