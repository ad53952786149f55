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

"""privsep.nvidia on a vendor-specific VFIO tree: writes and refusals."""

import os
import shutil

import pytest

from cyborg_drivers.fake import hosttree
import privsep
from privsep import nvidia

VF0, VF1 = '0000:41:00.4', '0000:41:00.5'   # VF0 holds 1414 at boot


@pytest.fixture
def root(tmp_path):
    path = str(tmp_path / 'sys')
    hosttree.build_tree('vgpu-vfio-host', path)
    return path


def current(root, vf):
    with open(os.path.join(root, 'bus', 'pci', 'devices', vf, 'nvidia',
                           'current_vgpu_type')) as f:
        return f.read().strip()


def snapshot(root):
    """Every VF's current type, to prove a refusal wrote nothing."""
    devices = os.path.join(root, 'bus', 'pci', 'devices')
    return {vf: current(root, vf) for vf in sorted(os.listdir(devices))
            if os.path.isdir(os.path.join(devices, vf, 'nvidia'))}


def test_set_and_clear(root):
    assert nvidia._set_vgpu_type(root, VF1, 1428) == 1428
    assert current(root, VF1) == '1428'
    # Already holding it: nothing to write.
    assert nvidia._set_vgpu_type(root, VF1, 1428) == 1428
    nvidia._clear_vgpu_type(root, VF1, 1428)
    assert current(root, VF1) == '0'
    # Holding nothing: clearing writes nothing.
    nvidia._clear_vgpu_type(root, VF1, 1428)
    assert current(root, VF1) == '0'


@pytest.mark.parametrize('call, args, error, message', [
    (nvidia._set_vgpu_type, (VF1, 999), privsep.UnknownAttribute,
     'vGPU type 999 cannot be created on VF 0000:41:00.5 now '
     r'\(creatable: 1414, 1428\)'),
    (nvidia._set_vgpu_type, (VF0, 1428), privsep.InvalidArgument,
     'VF 0000:41:00.4 holds vGPU type 1414; it is not changed to 1428'),
    (nvidia._set_vgpu_type, (VF1, '1414'), privsep.InvalidArgument,
     'type_id must be an integer'),
    (nvidia._set_vgpu_type, (VF1, True), privsep.InvalidArgument,
     'type_id must be an integer'),
    (nvidia._set_vgpu_type, (VF1, 0), privsep.OutOfRange, 'not a vGPU'),
    (nvidia._set_vgpu_type, (VF1, 2 ** 32), privsep.OutOfRange,
     'not a vGPU'),
    (nvidia._set_vgpu_type, ('0000:41:00.0', 1414),
     privsep.InvalidArgument, 'is not an NVIDIA SR-IOV VF'),
    (nvidia._set_vgpu_type, ('0000:c2:00.0', 1414),
     privsep.InvalidArgument, 'is not an NVIDIA SR-IOV VF'),
    (nvidia._set_vgpu_type, ('0000:18:00.0', 1414),
     privsep.InvalidArgument, 'is not an NVIDIA SR-IOV VF'),
    (nvidia._set_vgpu_type, ('../../etc', 1414),
     privsep.PathLikeArgument, 'looks like a path'),
    (nvidia._set_vgpu_type, ('0000:41:00.05', 1414),
     privsep.NotAPciAddress, 'not a PCI address'),
    (nvidia._clear_vgpu_type, (VF0, 1428), privsep.InvalidArgument,
     'VF 0000:41:00.4 holds vGPU type 1414, not 1428; it is left as it'),
])
def test_refusals_write_nothing(root, call, args, error, message):
    before = snapshot(root)
    with pytest.raises(error, match=message):
        call(root, *args)
    assert snapshot(root) == before


def test_a_vanished_vf(root):
    # The VF left the bus (SR-IOV turned off) between discovery and now.
    os.unlink(os.path.join(root, 'bus', 'pci', 'devices', VF1))
    with pytest.raises(privsep.NoSuchDevice, match='no PCI device'):
        nvidia._set_vgpu_type(root, VF1, 1414)


def test_a_vf_without_the_vendor_files(root):
    path = os.path.realpath(os.path.join(root, 'bus', 'pci', 'devices',
                                         VF1, 'nvidia'))
    shutil.rmtree(path)
    with pytest.raises(privsep.UnknownAttribute,
                       match='has no NVIDIA vendor-specific VFIO vGPU'):
        nvidia._set_vgpu_type(root, VF1, 1414)


def test_an_unreadable_current_type(root):
    path = os.path.join(root, 'bus', 'pci', 'devices', VF1, 'nvidia',
                        'current_vgpu_type')
    with open(path, 'w') as f:
        f.write('garbage\n')
    with pytest.raises(privsep.NotPossible, match='unreadable'):
        nvidia._set_vgpu_type(root, VF1, 1414)
    with open(path) as f:
        assert f.read() == 'garbage\n'
