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

"""Reading PCI functions from sysfs with plain file reads.

One :class:`PciSnapshot` is taken per discovery cycle and shared by every
driver, so the bus is walked once however many drivers are enabled. The
walk reads one file per function (``uevent``, which carries vendor,
device, class, subsystem and bound driver together); everything else is
read lazily, only for the functions some driver is interested in. That is
what keeps a cycle on a host with hundreds of VFs far cheaper than one
``lspci`` run.

Nothing here raises for a malformed tree: a function that cannot be read
is left out with a reason (see :meth:`PciSnapshot.problem`), logged once
per tree, address and reason, and the rest of the host is still read.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from typing import Callable, Iterable, Iterator

from cyborg_drivers import device as device_model

LOG = logging.getLogger(__name__)

#: The most VFs a PF can have (``sriov_totalvfs`` is a u16).
MAX_VFS = 0xffff

# (root, address, reason) already logged; discovery runs every minute and
# a broken device should not fill the log.
_logged: set[tuple[str, str, str]] = set()
_logged_lock = threading.Lock()


def _log_once(root: str, address: str, reason: str) -> None:
    key = (root, address, reason)
    with _logged_lock:
        if key in _logged:
            return
        _logged.add(key)
    LOG.warning('Not reporting %s (sysfs %s): %s', address, root, reason)


@dataclasses.dataclass(frozen=True)
class PciFunction:
    """The cheap identity of one PCI function, read in the bus walk."""

    address: str
    vendor: int
    device: int
    class_code: int
    subsystem_vendor: int | None
    subsystem_device: int | None
    driver: str | None
    path: str

    @property
    def vendor_id(self) -> str:
        return '%04x' % self.vendor

    @property
    def product_id(self) -> str:
        return '%04x' % self.device

    @property
    def class_hex(self) -> str:
        return '0x%06x' % self.class_code

    @property
    def base_class(self) -> int:
        return self.class_code >> 16

    @property
    def subclass(self) -> int:
        """Base class and subclass together, e.g. 0x0302."""
        return self.class_code >> 8


def _read(path: str) -> str | None:
    try:
        with open(path, 'rb') as f:
            return f.read().decode('ascii', 'replace').strip()
    except OSError:
        return None


def _hex(value: str | None, bits: int) -> int | None:
    if value is None:
        return None
    try:
        number = int(value, 16)
    except ValueError:
        return None
    if number < 0 or number >= 1 << bits:
        return None
    return number


class PciSnapshot:
    """The PCI functions of one sysfs tree at one moment."""

    def __init__(self, root: str, only: Iterable[str] | None = None,
                 claims: Callable[[PciFunction], bool] | None = None,
                 gone: Iterable[str] = ()) -> None:
        """Walk ``root``'s PCI bus, or only the functions in ``only``.

        ``claims`` says which functions some driver may report. The VFs
        of a claimed SR-IOV PF are that PF's units: they are named from
        the PF (``sriov_offset``/``sriov_stride``) instead of being read
        one by one, which is most of the bus on a host full of VFs.

        ``gone`` names functions the kernel has announced removed: they
        are treated as absent even while their sysfs entries linger.

        :raises NoSysfs: ``root`` has no ``bus/pci/devices`` to list.
        """
        self.root = root
        self.devices_dir = os.path.join(root, 'bus', 'pci', 'devices')
        self.functions: dict[str, PciFunction] = {}
        self.problems: dict[str, str] = {}
        self._cache: dict[tuple[str, str], object] = {}
        self._names: set[str] | None = None
        self._gone = frozenset(gone)
        self._scan(only, claims)

    # -- the walk ----------------------------------------------------------

    def _scan(self, only: Iterable[str] | None,
              claims: Callable[[PciFunction], bool] | None) -> None:
        if not self.root.strip():
            raise NoSysfs(self.root, 'empty')
        if only is None:
            try:
                names = os.listdir(self.devices_dir)
            except OSError as exc:
                raise NoSysfs(self.root, exc.strerror or str(exc))
            self._names = set(names)
        else:
            names = list(only)
        base = self.devices_dir + os.sep
        units: set[str] = set()
        # Sorted, a PF comes before its VFs: a VF's routing id is the
        # PF's plus a positive offset.
        for name in sorted(names):
            if name in units or name in self._gone:
                continue
            if not device_model.is_pci_address(name):
                self.problem(name, 'not a PCI address')
                continue
            function = self._read_function(name, base + name)
            if function is None:
                continue
            self.functions[name] = function
            if claims is not None and claims(function):
                info = self.sriov(name)
                if info is not None:
                    units.update(info.vf_addresses)

    def _read_function(self, address: str, path: str) -> PciFunction | None:
        uevent = _read(path + '/uevent')
        if uevent is None and not os.path.isdir(path):
            # A removed device (or a dangling bus link): nothing to report.
            if os.path.lexists(path):
                self.problem(address, 'dangling link in bus/pci/devices')
            return None
        props = {}
        if uevent:
            for line in uevent.splitlines():
                key, sep, value = line.partition('=')
                if sep:
                    props[key] = value
        vendor = device = subsys_vendor = subsys_device = None
        if 'PCI_ID' in props:
            vendor_s, _, device_s = props['PCI_ID'].partition(':')
            vendor, device = _hex(vendor_s, 16), _hex(device_s, 16)
        if 'PCI_SUBSYS_ID' in props:
            sv, _, sd = props['PCI_SUBSYS_ID'].partition(':')
            subsys_vendor, subsys_device = _hex(sv, 16), _hex(sd, 16)
        class_code = _hex(props.get('PCI_CLASS'), 24)
        driver = props.get('DRIVER')
        # Older kernels and hand-built trees may lack uevent or some keys:
        # fall back to the individual attribute files.
        if vendor is None:
            vendor = _hex(_read(path + '/vendor'), 16)
        if device is None:
            device = _hex(_read(path + '/device'), 16)
        if class_code is None:
            class_code = _hex(_read(path + '/class'), 24)
        if uevent is None:
            subsys_vendor = _hex(_read(path + '/subsystem_vendor'), 16)
            subsys_device = _hex(_read(path + '/subsystem_device'), 16)
            link = self._readlink(path + '/driver')
            driver = os.path.basename(link) if link else None
        missing = [name for name, value in (('vendor', vendor),
                                            ('device', device),
                                            ('class', class_code))
                   if value is None]
        if missing:
            self.problem(address, 'unreadable or invalid %s'
                         % ', '.join(missing))
            return None
        return PciFunction(address, vendor, device, class_code,
                           subsys_vendor, subsys_device, driver, path)

    # -- problems ----------------------------------------------------------

    def problem(self, address: str, reason: str) -> None:
        """Record (and log once) why ``address`` is not reported."""
        self.problems.setdefault(address, reason)
        _log_once(self.root, address, reason)

    # -- access ------------------------------------------------------------

    @property
    def is_full(self) -> bool:
        """Whether the whole bus was listed, not only some functions.

        A partial snapshot (``only=...``, an event's re-discovery) cannot
        tell that something is absent from the host: drivers report what
        they did not find only on full snapshots.
        """
        return self._names is not None

    def __iter__(self) -> Iterator[PciFunction]:
        return iter(self.functions.values())

    def __len__(self) -> int:
        return len(self.functions)

    def get(self, address: str) -> PciFunction | None:
        return self.functions.get(address)

    def lookup(self, address: str) -> PciFunction | None:
        """The identity of ``address``, read now if the walk left it out.

        A partial snapshot, or one whose walk skipped the function (a VF
        taken as its PF's unit), does not have every function in
        :attr:`functions`; this reads one on demand (and remembers it)
        without adding it to the functions drivers iterate over. None if
        it is not on the bus or cannot be read.
        """
        function = self.functions.get(address)
        if function is not None:
            return function
        if not self.exists(address) or not device_model.is_pci_address(
                address):
            return None
        return self._cached(address, 'function', lambda: self._read_function(
            address, self.path(address)))

    def path(self, address: str, *parts: str) -> str:
        # Plain joins: this is on the hot path of every cycle.
        return '/'.join((self.devices_dir, address) + parts)

    def exists(self, address: str) -> bool:
        """Whether the function is (still) on the bus."""
        if address in self._gone:
            return False
        if self._names is not None:
            return address in self._names
        return os.path.isdir(self.path(address))

    def attr(self, address: str, *parts: str) -> str | None:
        """An attribute file's stripped text, or None if unreadable."""
        return _read(self.path(address, *parts))

    def int_attr(self, address: str, *parts: str) -> int | None:
        value = self.attr(address, *parts)
        try:
            return int(value, 0) if value is not None else None
        except ValueError:
            return None

    def listdir(self, address: str, *parts: str) -> list[str]:
        try:
            return sorted(os.listdir(self.path(address, *parts)))
        except OSError:
            return []

    @staticmethod
    def _readlink(path: str) -> str | None:
        try:
            return os.readlink(path)
        except OSError:
            return None

    def link_name(self, address: str, name: str) -> str | None:
        """The last component of a symlink attribute (driver, physfn...)."""
        target = self._readlink(self.path(address, name))
        return os.path.basename(target) if target else None

    def _cached(self, address: str, key: str, compute):
        try:
            return self._cache[(address, key)]
        except KeyError:
            value = self._cache[(address, key)] = compute()
            return value

    # -- details, read on demand --------------------------------------------

    def numa_node(self, address: str) -> int | None:
        """NUMA node of the function; None where the platform has none."""
        def compute():
            node = self.int_attr(address, 'numa_node')
            return node if node is not None and node >= 0 else None
        return self._cached(address, 'numa_node', compute)

    def iommu_group(self, address: str) -> int | None:
        def compute():
            name = self.link_name(address, 'iommu_group')
            return int(name) if name and name.isdigit() else None
        return self._cached(address, 'iommu_group', compute)

    def physfn(self, address: str) -> str | None:
        """The PF address of a VF; None for anything that is not a VF."""
        return self._cached(address, 'physfn',
                            lambda: self.link_name(address, 'physfn'))

    def is_vf(self, address: str) -> bool:
        return os.path.lexists(self.path(address, 'physfn'))

    def sriov(self, address: str) -> device_model.SriovInfo | None:
        """SR-IOV state of a PF, None if the function cannot do SR-IOV.

        VF addresses are computed as the kernel assigns them (VF n's
        routing id is the PF's + ``sriov_offset`` + n * ``sriov_stride``),
        in VF index order, and kept only if the VF is on the bus; kernels
        without those attributes are read through the ``virtfnN`` links.
        """
        def compute():
            total = self.int_attr(address, 'sriov_totalvfs')
            # The kernel's counts are 16-bit and never more VFs enabled
            # than the total: other values are a broken tree, and a huge
            # count must not make the loop below run for ever.
            if total is None or not 0 <= total <= MAX_VFS:
                return None
            num = self.int_attr(address, 'sriov_numvfs') or 0
            num = min(max(num, 0), total)
            offset = self.int_attr(address, 'sriov_offset')
            stride = self.int_attr(address, 'sriov_stride')
            if num <= 0:
                vfs = ()
            elif offset and stride is not None:
                vfs = tuple(vf_address(address, offset, stride, n)
                            for n in range(num))
            else:
                vfs = self._virtfn_links(address)
            vfs = tuple(vf for vf in vfs if self.exists(vf))
            return device_model.SriovInfo(total, num, vfs)
        return self._cached(address, 'sriov', compute)

    def _virtfn_links(self, address: str) -> tuple[str, ...]:
        links = []
        for entry in self.listdir(address):
            if entry.startswith('virtfn') and entry[6:].isdigit():
                target = self.link_name(address, entry)
                if target and device_model.is_pci_address(target):
                    links.append((int(entry[6:]), target))
        return tuple(addr for _, addr in sorted(links))


def vf_address(pf: str, offset: int, stride: int, index: int) -> str:
    """The address of VF ``index`` (0-based) of the PF at ``pf``.

    ``pf`` is a full address; its domain may be wider than four digits
    (behind Intel VMD), so it is split, not sliced.
    """
    domain, bus, devfn = pf.split(':')
    slot, func = devfn.split('.')
    rid = ((int(bus, 16) << 8 | int(slot, 16) << 3 | int(func, 16))
           + offset + index * stride)
    return '%s:%02x:%02x.%x' % (domain, rid >> 8 & 0xff, rid >> 3 & 0x1f,
                                rid & 0x7)


class NoSysfs(Exception):
    """The sysfs root has no PCI bus to read."""

    def __init__(self, root: str, reason: str) -> None:
        if not root.strip():
            # Read relative to the current directory otherwise.
            message = ('the sysfs root is empty: set it to the directory '
                       'sysfs is mounted at (/sys), or leave it unset')
        else:
            message = ('%s is not a sysfs tree with a PCI bus '
                       '(bus/pci/devices: %s)' % (root, reason))
        super().__init__(message)
        self.root = root
