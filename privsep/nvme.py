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

"""A freed NVMe VF's namespaces, erased for the next tenant.

What a guest wrote to the namespaces of its NVMe VF stays on the drive
when the guest goes, and a reset of the VF does not touch it. The scrub
of a freed NVMe VF sends the NVMe Format NVM command, with Secure Erase
Settings "user data erase" and the namespace's own LBA format, for every
namespace active on the VF's controller.

The command goes to the VF's own controller (``/dev/nvmeN`` of the
host's ``nvme`` driver, which libvirt gives a managed hostdev back to
when the guest lets it go), through the kernel's admin passthrough
ioctl. The kernel allows that only with CAP_SYS_ADMIN, so this runs in
a context of its own, ``nvme_admin``, whose one entrypoint takes a PCI
address and nothing else. Before anything is erased, every check must
pass:

- the function is an NVMe controller (class 0x010802) and a VF: a whole
  drive is never named (a host's boot drive is one);
- its controller is live under the host's ``nvme`` driver (a function
  still bound to vfio-pci may be a guest's), and stays open for the
  whole call, so its number cannot pass to another controller;
- no namespace disk of the controller is in use on the host (each is
  held open with O_EXCL, which the kernel refuses while it is mounted
  or held by LVM, md, dm or swap);
- the controller formats per namespace (Identify Controller's FNA bits
  0 and 1 clear): otherwise a format or erase of one namespace erases
  every namespace of the subsystem, other tenants' and the host's;
- no namespace to erase is shared (Identify Namespace's NMIC bit 0
  clear): a shared namespace is attached to other controllers too.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import re
import stat
import struct
import time
from typing import Callable

import privsep
from privsep import _common

#: The PCI class of an NVM Express controller. The generic driver's step
#: checks it too (cyborg_drivers.generic.nvme, which imports this module
#: when it runs, so this cannot import it); the daemon checks for itself.
NVME_CLASS = 0x010802
#: The kernel's admin passthrough: _IOWR('N', 0x41, struct
#: nvme_passthru_cmd) (include/uapi/linux/nvme_ioctl.h).
_ADMIN_CMD = 0xC0484E41
_IDENTIFY = 0x06
_FORMAT_NVM = 0x80
_CNS_NAMESPACE = 0x00
_CNS_CONTROLLER = 0x01
_CNS_ACTIVE_NSIDS = 0x02
#: Format NVM's Secure Erase Settings: user data erase (NVMe base spec,
#: Format NVM command, CDW10 bits 11:9).
_SES_USER_DATA = 1
#: How long a controller the nvme driver is bringing up (or is about to
#: bind, while libvirt gives the VF back) may take to become live.
LIVE_WAIT = 30.0
#: How long the kernel lets one format run before it aborts it and resets
#: the controller: a drive's user data erase of a large namespace takes
#: minutes. ``[cyborg_scrub] step_timeout`` must be raised to match.
FORMAT_TIMEOUT_MS = 3_600_000
#: Status codes worth a word: (type << 8) | code, as the ioctl returns
#: them (type 0 generic, type 1 command specific).
_STATUS = {
    0x0002: 'Invalid Field in Command',
    0x000b: 'Invalid Namespace or Format',
    0x010a: 'Invalid Format',
    0x0180: 'Conflicting Attributes',
    0x0182: 'Attempted Write to Read Only Range',
}
_CONTROLLER = re.compile(r'nvme\d+')


class _PassthruCmd(ctypes.Structure):
    # struct nvme_passthru_cmd of include/uapi/linux/nvme_ioctl.h.
    _fields_ = [('opcode', ctypes.c_uint8), ('flags', ctypes.c_uint8),
                ('rsvd1', ctypes.c_uint16), ('nsid', ctypes.c_uint32),
                ('cdw2', ctypes.c_uint32), ('cdw3', ctypes.c_uint32),
                ('metadata', ctypes.c_uint64), ('addr', ctypes.c_uint64),
                ('metadata_len', ctypes.c_uint32),
                ('data_len', ctypes.c_uint32),
                ('cdw10', ctypes.c_uint32), ('cdw11', ctypes.c_uint32),
                ('cdw12', ctypes.c_uint32), ('cdw13', ctypes.c_uint32),
                ('cdw14', ctypes.c_uint32), ('cdw15', ctypes.c_uint32),
                ('timeout_ms', ctypes.c_uint32), ('result', ctypes.c_uint32)]


#: Opens controller ``name`` whose sysfs directory is ``ctrl_dir`` and
#: whose character device is ``numbers`` ("major:minor"): a context
#: manager giving ``command(opcode, nsid, cdw10, data_len, timeout_ms)``,
#: which returns the data the controller sent back and raises
#: NotPossible with its status.
Opener = Callable[[str, str, str], contextlib.AbstractContextManager]


@privsep.nvme_admin.entrypoint
def format_namespaces(address: str) -> list[int]:
    """Erase every namespace active on the controller of NVMe VF ``address``.

    :returns: the namespace IDs formatted, in order; empty when no
        namespace is attached to the VF's controller.
    :raises InvalidArgument: (or a subclass) a bad or unknown address, a
        function that is not an NVMe VF; nothing was sent.
    :raises NotPossible: the VF has no live controller of the host's
        ``nvme`` driver, its controller does not format per namespace, a
        namespace is shared or in use on this host, or the controller
        refused a command (the message has its status); namespaces
        before the refused one were erased.
    """
    return _format_namespaces(_common.sysfs_root(), address)


def controller_of(sysfs_root: str, address: str,
                  wait: float = LIVE_WAIT) -> tuple[str, str, str]:
    """The controller of NVMe VF ``address``: name, number, directory.

    Returns (its name, "major:minor", its sysfs directory). Waits up to
    ``wait`` seconds for a controller the ``nvme`` driver is still
    bringing up to become live, and for an unbound VF to get one (libvirt
    gives a managed hostdev back to its driver after the guest lets it
    go).

    :raises InvalidArgument: not an NVMe controller, or not a VF.
    :raises NotPossible: no live controller of the ``nvme`` driver (one
        bound to another driver, vfio-pci above all, is not waited for).
    """
    dev = _common.device_dir(sysfs_root, address)
    text = _common.read_attr(os.path.join(dev, 'class')) or ''
    try:
        cls = int(text, 16)
    except ValueError:
        cls = None
    if cls != NVME_CLASS:
        raise privsep.InvalidArgument(
            '%s is not an NVMe controller (class %s, not 0x%06x)'
            % (address, text or 'unknown', NVME_CLASS))
    if not os.path.islink(os.path.join(dev, 'physfn')):
        raise privsep.InvalidArgument(
            '%s is not a VF (it has no physfn): only the namespaces of a '
            "VF's controller are erased, never those of a whole drive"
            % address)
    deadline = time.monotonic() + wait
    while True:
        driver = _driver(dev)
        names = _controllers(dev)
        state = (_common.read_attr(os.path.join(dev, 'nvme', names[0],
                                                'state'))
                 if len(names) == 1 else None)
        if state == 'live' or time.monotonic() >= deadline or (
                driver not in (None, 'nvme')):
            break
        time.sleep(0.2)
    if len(names) != 1:
        raise privsep.NotPossible(
            'VF %s has no controller of the nvme driver (it is %s), so '
            'its namespaces cannot be reached from this host'
            % (address, 'bound to %s' % driver if driver else 'unbound'))
    name = names[0]
    ctrl = os.path.join(dev, 'nvme', name)
    if state != 'live':
        raise privsep.NotPossible(
            'the controller %s of VF %s is %s, not live, after %.0f s'
            % (name, address, state or 'gone', wait))
    numbers = _common.read_attr(os.path.join(ctrl, 'dev')) or ''
    if not re.fullmatch(r'\d+:\d+', numbers):
        raise privsep.NotPossible('the controller %s of VF %s has no '
                                  'device number' % (name, address))
    return name, numbers, ctrl


def _driver(dev: str) -> str | None:
    try:
        return os.path.basename(os.readlink(os.path.join(dev, 'driver')))
    except OSError:
        return None


def _controllers(dev: str) -> list[str]:
    try:
        return [n for n in os.listdir(os.path.join(dev, 'nvme'))
                if _CONTROLLER.fullmatch(n)]
    except OSError:
        return []


def namespace_disks(ctrl_dir: str) -> list[str]:
    """The block devices of the namespaces of controller ``ctrl_dir``.

    A namespace's disk is a child of its controller; with native NVMe
    multipath the child is the hidden path ``nvmeXcYnZ``, whose disk (the
    one the host opens and mounts) is its head ``nvmeXnZ``.
    """
    disks = []
    try:
        entries = sorted(os.listdir(ctrl_dir))
    except OSError:
        return []
    for entry in entries:
        match = re.fullmatch(r'(nvme\d+)(?:c\d+)?(n\d+)', entry)
        if match:
            disks.append(match.group(1) + match.group(2))
    return disks


def _open_node(path: str, numbers: str, what: str, flags: int = 0) -> int:
    """An fd of the device node ``path``, which must be ``numbers``.

    A character device, or a block device with ``O_EXCL`` in ``flags``.
    NotPossible (naming ``what``) when it is not, or cannot be opened.
    """
    try:
        # O_NONBLOCK: a FIFO planted in /dev does not block the daemon.
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW
                     | os.O_NONBLOCK | flags)
    except OSError as exc:
        if exc.errno == errno.EBUSY:
            raise privsep.NotPossible(
                '%s is in use on this host (mounted, or held by LVM, md, '
                'dm or swap): %s is not erased' % (path, what))
        raise privsep.NotPossible('cannot open %s of %s: %s'
                                  % (path, what, exc.strerror))
    st = os.fstat(fd)
    major, minor = (int(n) for n in numbers.split(':'))
    # The node must be the device sysfs named, not a stale or planted
    # file of the same name.
    kind = stat.S_ISBLK if flags & os.O_EXCL else stat.S_ISCHR
    if not kind(st.st_mode) or st.st_rdev != os.makedev(major, minor):
        os.close(fd)
        raise privsep.NotPossible(
            '%s is not the device %s of %s' % (path, numbers, what))
    return fd


@contextlib.contextmanager
def _open_controller(name: str, numbers: str, ctrl_dir: str,
                     dev_dir: str = '/dev'):
    """The controller's node, open for the whole call.

    One fd for every command: while it is open the controller cannot go
    away and its number be given to another controller, which the next
    open would then reach. Each namespace's disk is held open with
    O_EXCL meanwhile: the kernel refuses that while the host mounts it
    or LVM, md or dm holds it, and nobody can mount it during the erase.
    """
    fds = [_open_node(os.path.join(dev_dir, name), numbers,
                      'controller %s' % name)]
    try:
        # Opened: re-read what was checked before, now that it cannot
        # change under the fd.
        if (_common.read_attr(os.path.join(ctrl_dir, 'dev')) != numbers
                or _common.read_attr(os.path.join(ctrl_dir, 'state'))
                != 'live'):
            raise privsep.NotPossible('controller %s changed while it was '
                                      'opened' % name)
        for disk in namespace_disks(ctrl_dir):
            disk_numbers = _disk_numbers(ctrl_dir, disk)
            fds.append(_open_node(os.path.join(dev_dir, disk), disk_numbers,
                                  'namespace disk %s' % disk, os.O_EXCL))

        def command(opcode: int, nsid: int, cdw10: int, data_len: int,
                    timeout_ms: int) -> bytes:
            return _ioctl(fds[0], name, opcode, nsid, cdw10, data_len,
                          timeout_ms)
        yield command
    finally:
        for fd in fds:
            os.close(fd)


def _disk_numbers(ctrl_dir: str, disk: str) -> str:
    """"major:minor" of namespace disk ``disk`` (from sysfs)."""
    # The disk's own directory: under the controller without multipath,
    # in /sys/block (the head) with it.
    for path in (os.path.join(ctrl_dir, disk, 'dev'),
                 os.path.join(_sysfs_of(ctrl_dir), 'block', disk, 'dev')):
        numbers = _common.read_attr(path)
        if numbers and re.fullmatch(r'\d+:\d+', numbers):
            return numbers
    raise privsep.NotPossible('namespace disk %s has no device number'
                              % disk)


def _sysfs_of(path: str) -> str:
    """The sysfs root ``path`` (a device's directory) lies under."""
    real = os.path.realpath(path)
    return real[:real.index(os.sep + 'devices' + os.sep)]


def _ioctl(fd: int, name: str, opcode: int, nsid: int, cdw10: int,
           data_len: int, timeout_ms: int) -> bytes:
    data = ctypes.create_string_buffer(data_len) if data_len else None
    cmd = _PassthruCmd(opcode=opcode, nsid=nsid, cdw10=cdw10,
                       addr=ctypes.addressof(data) if data else 0,
                       data_len=data_len, timeout_ms=timeout_ms)
    try:
        status = fcntl.ioctl(fd, _ADMIN_CMD, cmd)
    except OSError as exc:
        raise privsep.NotPossible('controller %s failed %s: %s'
                                  % (name, _command_name(opcode, nsid),
                                     exc.strerror))
    if status:
        code = status & 0x7ff
        raise privsep.NotPossible(
            'controller %s refused %s: NVMe status 0x%03x (%s)'
            % (name, _command_name(opcode, nsid), code,
               _STATUS.get(code, 'see the NVMe base specification')))
    return data.raw if data else b''


def _command_name(opcode: int, nsid: int) -> str:
    if opcode == _FORMAT_NVM:
        return 'Format NVM of namespace %d' % nsid
    return 'Identify (nsid %d)' % nsid


def _format_namespaces(sysfs_root: str, address: str,
                       opener: Opener = _open_controller,
                       wait: float = LIVE_WAIT) -> list[int]:
    name, numbers, ctrl_dir = controller_of(sysfs_root, address, wait)
    with opener(name, numbers, ctrl_dir) as command:
        def identify(cns: int, nsid: int = 0) -> bytes:
            return command(_IDENTIFY, nsid, cns, 4096, 0)

        fna = identify(_CNS_CONTROLLER)[524]
        if fna & 0x3:
            raise privsep.NotPossible(
                'the controller %s of VF %s does not format per namespace '
                '(Identify Controller FNA 0x%02x): erasing one namespace '
                'would erase every namespace of its subsystem'
                % (name, address, fna))
        listed = struct.unpack('<1024I', identify(_CNS_ACTIVE_NSIDS))
        if listed[-1]:
            raise privsep.NotPossible(
                'the controller %s of VF %s has more than 1,023 active '
                'namespaces; they are not erased one list at a time'
                % (name, address))
        nsids = [n for n in listed if n]
        formats = {}
        for nsid in nsids:
            ns = identify(_CNS_NAMESPACE, nsid)
            if ns[30] & 0x1:
                raise privsep.NotPossible(
                    'namespace %d of VF %s (controller %s) is shared with '
                    'other controllers (NMIC 0x%02x): erasing it would '
                    'erase what they hold; give each VF a private namespace'
                    % (nsid, address, name, ns[30]))
            formats[nsid] = _keep_format(ns[26], ns[29])
        for nsid in nsids:
            command(_FORMAT_NVM, nsid, formats[nsid] | _SES_USER_DATA << 9,
                    0, FORMAT_TIMEOUT_MS)
    return nsids


def _keep_format(flbas: int, dps: int) -> int:
    """Format NVM's CDW10 that keeps a namespace's format and protection.

    FLBAS (Identify Namespace byte 26): the format index in bits 3:0 and
    6:5, metadata at the end of each block in bit 4. DPS (byte 29): the
    protection type in bits 2:0, its location in bit 3.
    """
    return ((flbas & 0xf) | (flbas >> 4 & 0x1) << 4 | (dps & 0x7) << 5
            | (dps >> 3 & 0x1) << 8 | (flbas >> 5 & 0x3) << 12)
