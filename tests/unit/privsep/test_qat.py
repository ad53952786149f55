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

"""privsep.qat: a QAT device's services, on a fake sysfs tree."""

import os
import shutil

import pytest

import privsep
from privsep import qat
from tests.unit.privsep import fakesysfs

C62X = '0000:3d:00.0'        # no qat/ in its kernel
QAT_4XXX = '0000:6b:00.0'    # up, sym;asym, 16 VFs
QAT_4XXX_DC = '0000:70:00.0'  # up, dc, SR-IOV off
QAT_420XX = '0000:e8:00.0'   # up, asym;dc
QAT_6XXX = '0000:f7:00.0'    # down, decomp
NVME = '0000:18:00.0'
IB = '0000:af:00.0'


@pytest.fixture
def tree(tmp_path):
    return fakesysfs.build(str(tmp_path / 'sys'), 'qat-gen4-host')


def services_file(root, address):
    return fakesysfs.device(root, address, 'qat', 'cfg_services')


def down(root, address):
    with open(fakesysfs.device(root, address, 'qat', 'state'), 'w') as f:
        f.write('down\n')


@pytest.mark.parametrize('address, services, written', [
    (QAT_6XXX, 'sym;dc;decomp', 'sym;dc;decomp'),
    (QAT_6XXX, 'decomp;asym', 'asym;decomp'),
    (QAT_6XXX, 'dcc', 'dcc'),
    (QAT_4XXX, 'sym;asym', 'asym;sym'),
    (QAT_4XXX, 'dc', 'dc'),
    (QAT_420XX, 'sym;dc', 'sym;dc'),
])
def test_services_written_in_the_kernels_order(tree, writes, address,
                                               services, written):
    down(tree, address)
    assert qat._set_services(tree, address, services) == written
    assert writes == [('bus/pci/devices/%s/qat/cfg_services' % address,
                       written)]
    assert fakesysfs.read(services_file(tree, address)) == written


@pytest.mark.parametrize('address', [QAT_4XXX, QAT_4XXX_DC, QAT_420XX])
def test_refused_while_the_device_is_up(tree, address):
    before = fakesysfs.snapshot(tree)
    with pytest.raises(privsep.NotPossible) as info:
        qat._set_services(tree, address, 'sym')
    assert str(info.value) == (
        'QAT device %s is up (qat/state): the kernel changes its services '
        'only while it is down' % address)
    assert fakesysfs.snapshot(tree) == before


@pytest.mark.parametrize('address, services, error, reason', [
    (QAT_6XXX, 'sym;asym;dc;decomp', privsep.InvalidArgument,
     'at most 3'),
    (QAT_6XXX, 'dcc;sym', privsep.InvalidArgument, 'dcc cannot be'),
    (QAT_6XXX, 'sym;sym', privsep.InvalidArgument, 'twice'),
    (QAT_6XXX, 'crypto', privsep.InvalidArgument, "'crypto' not accepted"),
    (QAT_6XXX, 'SYM', privsep.InvalidArgument, "'SYM' not accepted"),
    (QAT_6XXX, 'sym\n', privsep.InvalidArgument, 'not accepted'),
    (QAT_6XXX, '', privsep.InvalidArgument, 'are not services'),
    (QAT_6XXX, None, privsep.InvalidArgument, 'must be a string'),
    (QAT_6XXX, ['sym'], privsep.InvalidArgument, 'must be a string'),
    (QAT_6XXX, '../state', privsep.PathLikeArgument, 'looks like a path'),
    (QAT_6XXX, 'sym/dc', privsep.PathLikeArgument, 'looks like a path'),
    (QAT_6XXX, 'sym\0', privsep.PathLikeArgument, 'looks like a path'),
    (QAT_4XXX, 'decomp', privsep.InvalidArgument,
     "'decomp' not accepted by a 4XXX"),
    (QAT_420XX, 'sym;asym;dc', privsep.InvalidArgument, 'at most 2'),
    (C62X, 'sym', privsep.InvalidArgument,
     'is a QAT C62X: its kernel driver \\(c6xx\\) has no configurable'),
    (NVME, 'sym', privsep.InvalidArgument,
     'is not a QAT physical function \\(vendor 144d, device a808\\)'),
    (IB, 'sym', privsep.InvalidArgument, 'not a QAT physical function'),
    # A VF of a 4xxx.
    ('0000:6b:00.1', 'sym', privsep.InvalidArgument,
     'device 4941'),
    ('../../../etc', 'sym', privsep.PathLikeArgument, 'looks like a path'),
    ('0000:F7:00.0', 'sym', privsep.NotAPciAddress, 'not a PCI address'),
    ('0000:f7:00.0/qat', 'sym', privsep.PathLikeArgument,
     'looks like a path'),
    ('0000:99:00.0', 'sym', privsep.NoSuchDevice, 'no PCI device'),
    (None, 'sym', privsep.InvalidArgument, 'must be a string'),
])
def test_bad_arguments_refused_before_any_write(tree, address, services,
                                                error, reason):
    for device in (QAT_4XXX, QAT_420XX):
        # Down, so the state is never the reason for a refusal here.
        down(tree, device)
    before = fakesysfs.snapshot(tree)
    with pytest.raises(error, match=reason) as info:
        qat._set_services(tree, address, services)
    assert isinstance(info.value, ValueError)
    assert fakesysfs.snapshot(tree) == before


def test_qat_directory_missing(tree):
    # The PF's driver was unbound: the kernel removed qat/.
    shutil.rmtree(fakesysfs.device(tree, QAT_6XXX, 'qat'))
    before = fakesysfs.snapshot(tree)
    with pytest.raises(privsep.UnknownAttribute,
                       match='has no qat/cfg_services: its kernel driver '
                             '6xxx is not bound'):
        qat._set_services(tree, QAT_6XXX, 'sym')
    assert fakesysfs.snapshot(tree) == before


def test_the_entrypoint_writes_the_daemons_tree(tree, daemon_conf):
    assert qat.set_services(QAT_6XXX, 'dc;sym') == 'sym;dc'
    assert fakesysfs.read(services_file(tree, QAT_6XXX)) == 'sym;dc'
    with pytest.raises(privsep.NotPossible):
        qat.set_services(QAT_4XXX, 'dc')
    assert fakesysfs.read(services_file(tree, QAT_4XXX)) == 'sym;asym\n'
    assert os.path.isfile(services_file(tree, QAT_4XXX))
