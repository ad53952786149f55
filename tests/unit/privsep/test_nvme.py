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

"""privsep.nvme: what is checked before a freed NVMe VF's namespaces go.

The privileged code runs on a fake tree of an SR-IOV NVMe drive; the
controllers' answers to its admin commands are given (tests/nvmehost).
The real ioctl is exercised on the nested VM's real kernel and QEMU's
NVMe controller (tests/realkernel/inside_privsep.py).
"""

import ctypes
import errno
import os
import threading
import time

import pytest

from cyborg_drivers.fake import hosttree
import privsep
from privsep import nvme
from tests import nvmehost

VF0, VF1 = nvmehost.VFS


@pytest.fixture(scope='module')
def root(tmp_path_factory):
    path = str(tmp_path_factory.mktemp('nvme') / 'sys')
    hosttree.build_tree(nvmehost.PROFILE, path)
    return path


@pytest.fixture
def own_root(tmp_path):
    path = str(tmp_path / 'sys')
    hosttree.build_tree(nvmehost.PROFILE, path)
    return path


def controller(root, address):
    return os.listdir(os.path.join(root, 'bus', 'pci', 'devices', address,
                                   'nvme'))[0]


def test_every_namespace_of_the_vf_is_erased_in_its_own_format(root):
    name = controller(root, VF0)
    other = controller(root, VF1)
    # Format 2 with metadata at the end of each block, protection type 1
    # in the first bytes; a plain namespace beside it.
    kernel = nvmehost.Controllers({
        name: {1: nvmehost.Namespace(flbas=0x12, dps=0x09),
               3: nvmehost.Namespace()},
        other: {2: nvmehost.Namespace()}})
    assert nvme._format_namespaces(root, VF0, opener=kernel) == [1, 3]
    ses = 1 << 9
    assert kernel.formats() == [
        (name, 1, 2 | 1 << 4 | 1 << 5 | 1 << 8 | ses),
        (name, 3, ses)]
    # Only the VF's own controller was spoken to, by its device number,
    # opened once for every command of the call.
    numbers = '240:%s' % name[len('nvme'):]
    assert {c[:2] for c in kernel.commands} == {(name, numbers)}
    assert kernel.opened == [(name, numbers, name)]
    assert kernel.namespaces[name][1].data == b''
    assert kernel.namespaces[other][2].data == b'tenant data'


def test_the_format_index_above_16_is_kept():
    # FLBAS bits 6:5 are the index's upper bits (LBAFU in CDW10 13:12).
    assert nvme._keep_format(0x61, 0) == 1 | 3 << 12


def test_a_vf_without_namespaces_formats_nothing(root):
    kernel = nvmehost.Controllers()
    assert nvme._format_namespaces(root, VF1, opener=kernel) == []
    assert kernel.formats() == []


@pytest.mark.parametrize('address, match', [
    (nvmehost.PF, 'is not a VF'),
    (nvmehost.BOOT, 'is not a VF'),
    ('0000:3a:00.0', 'is not an NVMe controller'),
    ('0000:3b:00.7', 'no PCI device'),
    ('../3b:00.1', 'path'),
])
def test_anything_but_an_nvme_vf_is_refused_before_a_command(root, address,
                                                             match):
    kernel = nvmehost.Controllers()
    with pytest.raises(privsep.InvalidArgument, match=match):
        nvme._format_namespaces(root, address, opener=kernel)
    assert kernel.commands == []


def test_a_vf_not_on_the_nvme_driver_is_not_reached(own_root):
    dev = os.path.join(own_root, 'bus', 'pci', 'devices', VF0)
    # Given to a guest: vfio-pci has it, and no host controller exists.
    os.unlink(os.path.join(dev, 'driver'))
    os.makedirs(os.path.join(own_root, 'bus', 'pci', 'drivers', 'vfio-pci'))
    os.symlink('../../../../bus/pci/drivers/vfio-pci',
               os.path.join(dev, 'driver'))
    name = controller(own_root, VF0)
    os.rename(os.path.join(dev, 'nvme', name), os.path.join(own_root, name))
    kernel = nvmehost.Controllers()
    with pytest.raises(privsep.NotPossible,
                       match='no controller of the nvme driver .it is bound '
                             'to vfio-pci'):
        nvme._format_namespaces(own_root, VF0, opener=kernel)
    assert kernel.commands == []


def test_a_controller_coming_up_is_waited_for(own_root):
    name = controller(own_root, VF0)
    state = os.path.join(own_root, 'bus', 'pci', 'devices', VF0, 'nvme',
                         name, 'state')
    with open(state, 'w') as f:
        f.write('connecting\n')
    kernel = nvmehost.Controllers({name: {1: nvmehost.Namespace()}})
    with pytest.raises(privsep.NotPossible, match='is connecting, not live'):
        nvme._format_namespaces(own_root, VF0, opener=kernel, wait=0.3)
    assert kernel.commands == []

    def live():
        time.sleep(0.5)
        with open(state, 'w') as f:
            f.write('live\n')
    thread = threading.Thread(target=live)
    thread.start()
    assert nvme._format_namespaces(own_root, VF0, opener=kernel,
                                   wait=10) == [1]
    thread.join()


def test_a_controller_that_erases_the_whole_subsystem_is_refused(root):
    name = controller(root, VF0)
    for fna in (0x1, 0x2):
        kernel = nvmehost.Controllers({name: {1: nvmehost.Namespace()}},
                                      fna=fna)
        with pytest.raises(privsep.NotPossible,
                           match='does not format per namespace'):
            nvme._format_namespaces(root, VF0, opener=kernel)
        assert kernel.formats() == []
    # Bit 2 (crypto erase supported) changes nothing of that.
    kernel = nvmehost.Controllers({name: {1: nvmehost.Namespace()}}, fna=4)
    assert nvme._format_namespaces(root, VF0, opener=kernel) == [1]


def test_a_shared_namespace_is_refused_before_any_format(root):
    name = controller(root, VF0)
    kernel = nvmehost.Controllers({name: {
        1: nvmehost.Namespace(), 2: nvmehost.Namespace(nmic=1)}})
    with pytest.raises(privsep.NotPossible,
                       match='namespace 2 of VF %s .* is shared' % VF0):
        nvme._format_namespaces(root, VF0, opener=kernel)
    # Not even the private one: the VF stays as the tenant left it.
    assert kernel.formats() == []
    assert kernel.namespaces[name][1].data == b'tenant data'


def test_a_refused_format_says_which_namespace(root):
    name = controller(root, VF0)
    kernel = nvmehost.Controllers(
        {name: {1: nvmehost.Namespace(), 2: nvmehost.Namespace()}},
        refuse={(name, 2): 0x10a})
    with pytest.raises(privsep.NotPossible,
                       match='Format NVM of namespace 2: NVMe status 0x10a'):
        nvme._format_namespaces(root, VF0, opener=kernel)
    assert [f[1] for f in kernel.formats()] == [1, 2]


def open_controller(dev_dir, name='nvme7', numbers='240:7'):
    ctrl = os.path.join(str(dev_dir), 'sys-ctrl')
    return nvme._open_controller(name, numbers, ctrl, dev_dir=str(dev_dir))


def test_the_node_must_be_the_controllers_character_device(tmp_path):
    # A regular file where /dev/nvmeN should be: nothing is sent to it.
    (tmp_path / 'nvme7').write_text('')
    with pytest.raises(privsep.NotPossible,
                       match='nvme7 is not the device 240:7 of controller'):
        with open_controller(tmp_path):
            pass


def test_a_character_device_of_another_number_is_not_spoken_to():
    # /dev/null is a character device, 1:3: not controller 240:7.
    with pytest.raises(privsep.NotPossible,
                       match='/dev/null is not the device 240:7'):
        with open_controller('/dev', name='null'):
            pass


def test_a_missing_node_says_so(tmp_path):
    with pytest.raises(privsep.NotPossible,
                       match='cannot open .*nvme7 of controller nvme7: No '
                             'such file'):
        with open_controller(tmp_path):
            pass


def test_a_disk_in_use_on_the_host_is_refused(monkeypatch):
    def busy(path, flags):
        raise OSError(errno.EBUSY, 'Device or resource busy')
    monkeypatch.setattr(nvme.os, 'open', busy)
    with pytest.raises(privsep.NotPossible,
                       match='/dev/nvme0n2 is in use on this host .*: '
                             'namespace disk nvme0n2 is not erased'):
        nvme._open_node('/dev/nvme0n2', '259:3', 'namespace disk nvme0n2',
                        os.O_EXCL)


def test_namespace_disks_are_the_heads_of_multipath_paths(tmp_path):
    for name in ('nvme0c2n2', 'nvme3n1', 'power', 'nvme0c2n2p1'):
        (tmp_path / name).mkdir()
    assert nvme.namespace_disks(str(tmp_path)) == ['nvme0n2', 'nvme3n1']


def test_the_command_is_the_kernels_layout():
    assert ctypes.sizeof(nvme._PassthruCmd) == 72
    # _IOWR('N', 0x41, 72): read-write, size, type, number.
    assert nvme._ADMIN_CMD == (3 << 30) | (72 << 16) | (ord('N') << 8) | 0x41
    assert nvme._PassthruCmd.cdw10.offset == 40
    assert nvme._PassthruCmd.timeout_ms.offset == 64


@pytest.mark.parametrize('answer, message', [
    # A positive return is the command's status; DNR (bit 14) set.
    (0x410a, 'refused Format NVM of namespace 1: NVMe status 0x10a '
             r'\(Invalid Format\)'),
    (0x0002, r'NVMe status 0x002 \(Invalid Field in Command\)'),
    (0x0107, r'NVMe status 0x107 \(see the NVMe base specification\)'),
    (OSError(errno.ENODEV, 'No such device'),
     'controller nvme7 failed Format NVM of namespace 1: No such device'),
])
def test_the_controllers_answer_is_named(monkeypatch, answer, message):
    def ioctl(fd, request, cmd):
        assert request == nvme._ADMIN_CMD
        assert (cmd.opcode, cmd.nsid) == (0x80, 1)
        if isinstance(answer, Exception):
            raise answer
        return answer
    monkeypatch.setattr(nvme.fcntl, 'ioctl', ioctl)
    with pytest.raises(privsep.NotPossible, match=message):
        nvme._ioctl(0, 'nvme7', 0x80, 1, 1 << 9, 0, 1000)


def test_a_vf_being_given_back_to_nvme_is_waited_for(own_root):
    dev = os.path.join(own_root, 'bus', 'pci', 'devices', VF0)
    name = controller(own_root, VF0)
    driver = os.readlink(os.path.join(dev, 'driver'))
    # Between libvirt's unbind from vfio-pci and the nvme driver's probe.
    os.unlink(os.path.join(dev, 'driver'))
    os.rename(os.path.join(dev, 'nvme'), os.path.join(own_root, 'nvme'))
    kernel = nvmehost.Controllers({name: {1: nvmehost.Namespace()}})

    def probe():
        time.sleep(0.5)
        os.rename(os.path.join(own_root, 'nvme'), os.path.join(dev, 'nvme'))
        os.symlink(driver, os.path.join(dev, 'driver'))
    thread = threading.Thread(target=probe)
    thread.start()
    assert nvme._format_namespaces(own_root, VF0, opener=kernel,
                                   wait=10) == [1]
    thread.join()


def test_a_full_namespace_list_is_refused(root):
    name = controller(root, VF0)
    kernel = nvmehost.Controllers(
        {name: {n: nvmehost.Namespace() for n in range(1, 1025)}})
    with pytest.raises(privsep.NotPossible,
                       match='more than 1,023 active namespaces'):
        nvme._format_namespaces(root, VF0, opener=kernel)
    assert kernel.formats() == []
