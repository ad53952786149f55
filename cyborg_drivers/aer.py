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

"""PCIe Advanced Error Reporting (AER) counters of a PCI function.

A function with the AER capability, on a kernel built with
``CONFIG_PCIEAER``, has three files in its sysfs directory
(Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats):
``aer_dev_fatal``, ``aer_dev_nonfatal`` and ``aer_dev_correctable``.
Each holds one ``<error type> <count>`` line per error type and a last
line with the total of its severity (``TOTAL_ERR_FATAL``,
``TOTAL_ERR_NONFATAL``, ``TOTAL_ERR_COR``). The counts start at 0 when
the kernel adds the function and only grow.

A function without the files has counters nobody can read: its health
by AER is unknown, which is never the same as healthy, so
:class:`AerCounters` says why it is unknown instead of reporting zeros.

Errors of the link to a device (a Surprise Down, a Data Link Protocol
error, a receiver error) are reported by the PCIe port at the other end
of that link, the root port or switch downstream port above the device,
and counted in that port's files, not the device's. :func:`upstream_port`
finds that port; its counters are read with the device's when it has
them (``upstream_port`` set).
"""

from __future__ import annotations

import dataclasses
import errno
import os
from typing import Iterable

from cyborg_drivers import pci_address

FATAL = 'fatal'
NONFATAL = 'nonfatal'
CORRECTABLE = 'correctable'
#: The severities, most severe first.
SEVERITIES = (FATAL, NONFATAL, CORRECTABLE)

#: severity -> (its sysfs file, the name of its total line).
FILES = {
    FATAL: ('aer_dev_fatal', 'TOTAL_ERR_FATAL'),
    NONFATAL: ('aer_dev_nonfatal', 'TOTAL_ERR_NONFATAL'),
    CORRECTABLE: ('aer_dev_correctable', 'TOTAL_ERR_COR'),
}

#: The per-type counts of one file: ``((error type, count), ...)``.
TypeCounts = tuple[tuple[str, int], ...]

#: Why the counters of a function without the files are unknown.
NO_AER = ('no AER counters in sysfs: no AER capability, or a kernel '
          'without CONFIG_PCIEAER')

# The files are a few hundred bytes; anything much longer is not them.
_MAX_BYTES = 4096
# A function's directory name under /sys/devices: its PCI address (a
# host bridge's directory, 'pci0000:00', is not one).
# PCI class 0x0604xx: a PCI-to-PCI bridge, which a PCIe root port or
# switch port presents.
_BRIDGE_CLASS = 0x0604


@dataclasses.dataclass(frozen=True)
class AerCounters:
    """The AER counters of one PCI function, or why they are unknown.

    ``fatal``, ``nonfatal`` and ``correctable`` are the totals the kernel
    reports; None for a severity that could not be read, with ``reason``
    saying why. ``errors`` lists the error types with a count above 0
    as ``(severity, type, count)``, e.g. ``('fatal', 'CmpltTO', 1)``.
    """

    address: str
    fatal: int | None = None
    nonfatal: int | None = None
    correctable: int | None = None
    errors: tuple[tuple[str, str, int], ...] = ()
    reason: str | None = None
    #: The counters are those of the PCIe port above the device: the
    #: errors of the device's link.
    upstream_port: bool = False

    @property
    def known(self) -> bool:
        """Whether every severity was read."""
        return None not in (self.fatal, self.nonfatal, self.correctable)

    def total(self, severity: str) -> int | None:
        """The total of ``severity`` (one of :data:`SEVERITIES`)."""
        return getattr(self, severity)

    def summary(self) -> str:
        """One line for an operator: the totals, or unknown and why."""
        name = self.address + (' (the port above)' if self.upstream_port
                               else '')
        if self.fatal is None and self.nonfatal is None and (
                self.correctable is None):
            return '%s: unknown (%s)' % (name, self.reason)
        counts = ', '.join(
            '%s %s' % (severity, 'unknown' if count is None else count)
            for severity, count in zip(SEVERITIES, (
                self.fatal, self.nonfatal, self.correctable)))
        details = ', '.join('%s %d' % (name, count)
                            for _, name, count in self.errors)
        return '%s: %s%s%s' % (
            name, counts, ' (%s)' % details if details else '',
            '; %s' % self.reason if self.reason else '')

    def to_dict(self) -> dict:
        """JSON-able: what ``discover`` and ``GET /hardware`` show."""
        return {
            'address': self.address,
            'known': self.known,
            FATAL: self.fatal,
            NONFATAL: self.nonfatal,
            CORRECTABLE: self.correctable,
            'errors': [list(e) for e in self.errors],
            'reason': self.reason,
            'upstream_port': self.upstream_port,
        }

    @classmethod
    def from_dict(cls, data: dict) -> AerCounters:
        """The counters a :meth:`to_dict` describes.

        :raises ValueError: a count that is not an integer of 0 or more,
            or an error entry that is not (severity, type, count).
        """
        counts = []
        for severity in SEVERITIES:
            value = data.get(severity)
            if value is not None and (type(value) is not int or value < 0):
                raise ValueError('AER %s count of %s is not a count: %r'
                                 % (severity, data.get('address'), value))
            counts.append(value)
        errors = []
        for entry in data.get('errors') or ():
            severity, name, count = entry
            if (severity not in SEVERITIES or not isinstance(name, str)
                    or type(count) is not int or count < 0):
                raise ValueError('not an AER error entry: %r' % (entry,))
            errors.append((severity, name, count))
        reason = data.get('reason')
        return cls(str(data['address']), *counts, tuple(errors),
                   None if reason is None else str(reason),
                   data.get('upstream_port') is True)


def parse(severity: str, text: str) -> tuple[int, TypeCounts]:
    """The total and the per-type counts of one AER file's ``text``.

    :raises ValueError: the text is not in the kernel's format: a line
        that is not ``<name> <count>``, a count that is not a decimal
        number of 0 or more, or no total line for ``severity``.
    """
    _, total_name = FILES[severity]
    total = None
    counts = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
            raise ValueError('line %d is not "<error type> <count>": %r'
                             % (number, line[:80]))
        name, count = parts[0], int(parts[1])
        if name == total_name:
            total = count
        else:
            counts.append((name, count))
    if total is None:
        raise ValueError('no %s line' % total_name)
    return total, tuple(counts)


def _read(path: str) -> str:
    # os.open, not open(): most functions of a host full of VFs have no
    # AER files, and a failed os.open is about half the cost.
    fd = os.open(path, os.O_RDONLY)
    try:
        data = os.read(fd, _MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > _MAX_BYTES:
        raise ValueError('longer than %d bytes' % _MAX_BYTES)
    return data.decode('ascii')


def read_function(path: str, address: str) -> AerCounters:
    """The AER counters of the PCI function whose sysfs directory is ``path``.

    Never raises: a severity whose file cannot be read or parsed is None
    and the result's ``reason`` says why; a function without the files
    is unknown (:data:`NO_AER`).
    """
    totals: dict[str, int | None] = {}
    errors = []
    reasons = []
    for severity in SEVERITIES:
        name, _ = FILES[severity]
        try:
            total, counts = parse(severity, _read(path + '/' + name))
        except OSError as exc:
            if exc.errno == errno.ENOENT and severity == FATAL:
                # The kernel shows the three files together or none of
                # them: the other two need not be tried, which spares a
                # host with many VFs without AER two reads per VF.
                return AerCounters(address, reason=NO_AER)
            totals[severity] = None
            reasons.append('%s cannot be read: %s' % (
                name, exc.strerror or exc))
            continue
        except ValueError as exc:
            # UnicodeDecodeError included: garbage is not a count.
            totals[severity] = None
            reasons.append('%s is not in the kernel\'s format: %s'
                           % (name, exc))
            continue
        totals[severity] = total
        errors.extend((severity, n, c) for n, c in counts if c)
    return AerCounters(address, totals[FATAL], totals[NONFATAL],
                       totals[CORRECTABLE], tuple(errors),
                       '; '.join(reasons) or None)


def read_functions(devices_dir: str, addresses: Iterable[str],
                   port: str | None = None) -> tuple[AerCounters, ...]:
    """The counters of each function in ``addresses``, in that order.

    :param devices_dir: the ``bus/pci/devices`` directory of a sysfs
        tree.
    :param port: the PCIe port above them (:func:`upstream_port`), read
        last, and only if it has the files: a port without AER reports
        nothing of the link, and is left out rather than shown unknown
        beside every device below it.
    """
    addresses = list(dict.fromkeys(addresses))
    read = [read_function(devices_dir + '/' + address, address)
            for address in addresses]
    if port is not None and port not in addresses:
        counters = read_function(devices_dir + '/' + port, port)
        if counters.reason != NO_AER:
            read.append(dataclasses.replace(counters, upstream_port=True))
    return tuple(read)


def upstream_port(devices_dir: str, address: str) -> str | None:
    """The address of the PCIe port above the function at ``address``.

    The function's directory under ``/sys/devices`` sits in that of the
    bridge its bus hangs off (a root port, or a switch's downstream
    port); None for a function on a root bus (an integrated endpoint,
    whose link errors nobody reports), or a parent that is not a
    bridge.
    """
    parent = os.path.dirname(os.path.realpath(
        os.path.join(devices_dir, address)))
    name = os.path.basename(parent)
    if not pci_address.is_pci_address(name):
        return None
    try:
        with open(os.path.join(parent, 'class')) as f:
            code = int(f.read(32).strip(), 16)
    except (OSError, ValueError):
        return None
    return name if code >> 8 == _BRIDGE_CLASS else None
