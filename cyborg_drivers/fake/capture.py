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

"""Capture a real host's PCI sysfs as a tree discovery can read again.

An operator whose accelerator is not reported as expected can send the
capture instead of describing the host; the project's tests read such
captures of real hosts the same way they read the trees built from
profiles (:mod:`cyborg_drivers.fake.hosttree`), in the same layout:

- ``devices/<path>/<address>/``: each captured function's readable
  attribute files (the first 4 KiB of each), the bridges above it with
  their own attributes, and the subfolders accelerator drivers add
  (``nvidia/``, ``mdev_supported_types/``, ``qat/``, ``fpga_region/``...)
  and the function's mdevs;
- relative ``driver``, ``subsystem``, ``iommu_group``, ``physfn`` and
  ``virtfnN`` links, with ``bus/pci/devices``, ``bus/pci/drivers``,
  ``bus/mdev/devices`` and ``kernel/iommu_groups`` pointing back;
- ``devices/system/node``'s NUMA files, and ``capture.json`` saying what
  was captured, from which kernel, when.

A card's PCIe serial number (``serial_number``) is written as zeros.

The capture only reads, and never opens a file whose read has an effect
or can hang: BAR (``resourceN``) and ROM files, ``vpd``, and files
without read permission (``reset``, ``remove``, ``bind``...) are left
out. It needs nothing but the standard library, so it runs on a host
where the project is not installed.

Usage: ``python -m cyborg_drivers.fake.capture [--sysfs-root /sys]
[--address ADDR ...] DEST``.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import re
import stat
import sys
import time

from cyborg_drivers.fake import staging

_ADDRESS = re.compile(r'^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$')
_UUID = re.compile(r'^[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}$')
# Reading a BAR or the ROM maps device memory (or needs the ROM enabled
# by a write first), and reading VPD can stall on a misbehaving card.
_NEVER_READ = re.compile(r'^(resource\d+(_wc|_resize)?|rom|vpd)$')
# The config space of PCIe is 4 KiB; no text attribute comes near it.
_MAX_BYTES = 4096
# Folders of a function that drivers of accelerators add, captured whole
# (files and the links inside them), to this depth: a DFL card's PR region
# sits six folders below its PCI function.
_SUBDIRS = ('nvidia', 'mdev_supported_types', 'qat', 'fpga_region', 'fpga',
            'power', 'link', 'msi_irqs', 'sriov')
_MAX_DEPTH = 8
# Attributes that identify one card, not a kind of card: written as
# zeros of the kernel's format, so a capture can be shared.
_REDACTED = {'serial_number': b'00-00-00-00-00-00-00-00\n'}

__all__ = ['CaptureError', 'capture', 'main']


class CaptureError(Exception):
    """The capture cannot be made (nothing to capture, bad destination)."""


def _read_bytes(path: str) -> bytes | None:
    try:
        with open(path, 'rb', buffering=0) as f:
            return f.read(_MAX_BYTES)
    except OSError:
        # Many attributes refuse reads in some states (EIO, EINVAL,
        # ENODEV); the kernel would show them as unreadable too.
        return None


def _readable(st: os.stat_result) -> bool:
    return stat.S_ISREG(st.st_mode) and bool(st.st_mode & 0o444)


class _Capture:

    def __init__(self, root: str, dest: str) -> None:
        self.root = os.path.realpath(root)
        self.dest = dest
        self.done: set[str] = set()
        self.skipped: dict[str, str] = {}

    # -- paths --------------------------------------------------------------

    def _rel(self, real: str) -> str:
        return os.path.relpath(real, self.root)

    def _link(self, rel_target: str, rel_link: str) -> None:
        link = os.path.join(self.dest, rel_link)
        os.makedirs(os.path.dirname(link), exist_ok=True)
        if os.path.lexists(link):
            return
        os.symlink(os.path.relpath(os.path.join(self.dest, rel_target),
                                   os.path.dirname(link)), link)

    def _copy_files(self, real_dir: str, top: str, depth: int = 0,
                    subdirs: tuple[str, ...] = ()) -> None:
        """A folder's readable files and its links that stay in the tree.

        ``top`` is the device the folder belongs to: links into it are
        kept (an mdev's ``mdev_type``, ``mdev_supported_types``'s
        ``devices/<uuid>``, a DFL device's ``device``), as are the links
        to a bus, class, driver or IOMMU group, which the kernel mirrors
        from there; links elsewhere (``firmware_node``...) would dangle
        and are left out. Subfolders are taken at depth 0 only if named
        in ``subdirs``, below that all of them, to :data:`_MAX_DEPTH`.
        """
        out = os.path.join(self.dest, self._rel(real_dir))
        os.makedirs(out, exist_ok=True)
        try:
            names = sorted(os.listdir(real_dir))
        except OSError as exc:
            self.skipped[self._rel(real_dir)] = exc.strerror or str(exc)
            return
        for name in names:
            path = os.path.join(real_dir, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISLNK(st.st_mode):
                self._copy_link(path, top)
                continue
            if stat.S_ISDIR(st.st_mode):
                if (depth or name in subdirs) and depth < _MAX_DEPTH:
                    self._copy_files(path, top, depth + 1)
                continue
            if _NEVER_READ.match(name) or not _readable(st):
                continue
            data = _read_bytes(path)
            if data is None:
                continue
            data = _REDACTED.get(name, data)
            with open(os.path.join(out, name), 'wb') as f:
                f.write(data)

    def _copy_link(self, path: str, top: str) -> None:
        target = os.path.realpath(path)
        if not target.startswith(self.root + os.sep):
            return
        name = os.path.basename(path)
        owner = os.path.dirname(path)
        rel_target = self._rel(target)
        # What the kernel links back from the bus, class, driver or group.
        if name == 'subsystem':
            back = ([rel_target, 'devices'] if rel_target.startswith(
                'bus' + os.sep) else [rel_target])
        elif name == 'driver':
            back = [rel_target]
        elif name == 'iommu_group':
            back = [rel_target, 'devices']
        elif target == top or target.startswith(top + os.sep):
            back = None
        else:
            return
        if back is not None:
            os.makedirs(os.path.join(self.dest, *back), exist_ok=True)
            self._link(self._rel(owner),
                       os.path.join(*back, os.path.basename(owner)))
        self._link(rel_target, self._rel(path))

    # -- functions ----------------------------------------------------------

    def function(self, address: str) -> None:
        if address in self.done:
            return
        self.done.add(address)
        bus_link = os.path.join(self.root, 'bus', 'pci', 'devices', address)
        real = os.path.realpath(bus_link)
        if not os.path.isdir(real):
            self.skipped[address] = 'not on the bus'
            return
        self._ancestors(real)
        self._copy_files(real, real, subdirs=_SUBDIRS)
        rel = self._rel(real)
        for name in sorted(os.listdir(real)):
            path = os.path.join(real, name)
            # The PF and the VFs are functions of their own, siblings.
            if name == 'physfn' or name.startswith('virtfn'):
                other = os.path.realpath(path)
                self.function(os.path.basename(other))
                self._link(self._rel(other), os.path.join(rel, name))
            elif _UUID.match(name):
                # An mdev: its type is its parent's.
                self._copy_files(path, real, subdirs=('power',))

    def _ancestors(self, real: str) -> None:
        """The bridges and the host bridge above a function, attributes only.

        The topology of the PCIe tree (root ports, switches) is read from
        them; their other children are not the capture's business.
        """
        parent = os.path.dirname(real)
        chain = []
        while parent.startswith(os.path.join(self.root, 'devices') + os.sep):
            chain.append(parent)
            parent = os.path.dirname(parent)
        for path in reversed(chain):
            name = os.path.basename(path)
            if _ADDRESS.match(name):
                self.function(name)
            elif self._rel(path) not in self.done:
                self.done.add(self._rel(path))
                self._copy_files(path, path)

    def numa(self) -> None:
        base = os.path.join(self.root, 'devices', 'system', 'node')
        if not os.path.isdir(base):
            return
        for name in ('online', 'possible', 'has_cpu', 'has_memory'):
            self._copy_one(os.path.join(base, name))
        for name in sorted(os.listdir(base)):
            if re.match(r'^node\d+$', name):
                for attr in ('cpulist', 'cpumap', 'distance'):
                    self._copy_one(os.path.join(base, name, attr))

    def _copy_one(self, path: str) -> None:
        data = _read_bytes(path)
        if data is None:
            return
        out = os.path.join(self.dest, self._rel(path))
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, 'wb') as f:
            f.write(data)


def _kernel(root: str) -> str | None:
    # /proc beside the sysfs root: only meaningful for the live /sys.
    if os.path.realpath(root) != '/sys':
        return None
    data = _read_bytes('/proc/sys/kernel/osrelease')
    return data.decode('ascii', 'replace').strip() if data else None


def capture(dest: str, root: str = '/sys',
            addresses: list[str] | None = None) -> dict:
    """Capture the PCI functions ``addresses`` (default: all) to ``dest``.

    Each function's SR-IOV VFs and PF, its bridges, and its mdevs come
    along. ``dest`` must be absent or an empty directory; the capture is
    written beside it and renamed into place, so ``dest`` is either
    complete or untouched.

    :returns: the manifest, also written to ``dest/capture.json``.
    :raises CaptureError: an address is malformed or not on the bus,
        there is no PCI bus under ``root``, or ``dest`` is not empty.
    """
    devices = os.path.join(root, 'bus', 'pci', 'devices')
    try:
        present = sorted(os.listdir(devices))
    except OSError as exc:
        raise CaptureError('%s: no PCI bus to capture (%s)'
                           % (devices, exc.strerror or exc))
    if addresses:
        bad = [a for a in addresses if not _ADDRESS.match(a)]
        if bad:
            raise CaptureError('not a PCI address (DDDD:BB:SS.F, lower '
                               'case): %s' % ', '.join(bad))
        missing = [a for a in addresses if a not in present]
        if missing:
            raise CaptureError('not on the bus under %s: %s'
                               % (devices, ', '.join(missing)))
    wanted = addresses or present
    try:
        with staging.staged(os.path.abspath(dest)) as tmp:
            job = _Capture(root, tmp)
            for address in wanted:
                job.function(address)
            job.numa()
            manifest = {
                'requested': list(addresses or []),
                'functions': sorted(a for a in job.done
                                    if _ADDRESS.match(a)),
                'skipped': job.skipped,
                'kernel': _kernel(root),
                'captured_at': time.strftime('%Y-%m-%dT%H:%M:%SZ',
                                             time.gmtime()),
            }
            with open(os.path.join(tmp, 'capture.json'), 'w') as f:
                json.dump(manifest, f, indent=1, sort_keys=True)
                f.write('\n')
    except FileExistsError:
        raise CaptureError('%s exists and is not an empty directory' % dest)
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog='python -m cyborg_drivers.fake.capture',
        description='Copy PCI functions of this host\'s sysfs, read-only, '
                    'into DEST as a tree "cyborg-nova discover '
                    '--sysfs-root DEST" reads like the host. BAR, ROM and '
                    'VPD files are never read.')
    parser.add_argument('dest', metavar='DEST',
                        help='Where to write the tree (absent or empty).')
    parser.add_argument('--sysfs-root', default='/sys', metavar='DIR',
                        help='The sysfs to read (default /sys).')
    parser.add_argument('--address', action='append', dest='addresses',
                        metavar='DDDD:BB:SS.F',
                        help='Capture this function (repeat for more); its '
                             'VFs, PF and bridges come along. Default: '
                             'every PCI function.')
    args = parser.parse_args(argv)
    try:
        manifest = capture(args.dest, args.sysfs_root, args.addresses)
    except (CaptureError, OSError) as exc:
        if isinstance(exc, OSError) and exc.errno not in (
                errno.EACCES, errno.ENOSPC, errno.EROFS, errno.EEXIST):
            raise
        print('capture: %s' % exc, file=sys.stderr)
        return 2
    print('captured %d PCI functions into %s'
          % (len(manifest['functions']), args.dest))
    for what, why in sorted(manifest['skipped'].items()):
        print('  left out %s: %s' % (what, why), file=sys.stderr)
    return 0


if __name__ == '__main__':
    sys.exit(main())
