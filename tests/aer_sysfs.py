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

"""PCIe AER counter files as the kernel writes them, for fake trees.

The layout is that of Documentation/ABI/testing/sysfs-bus-pci-devices-
aer_stats and of the kernel's ``aer_stats_dev_attr`` show functions: one
``<error type> <count>`` line per type the kernel names, in its order,
then the severity's total line. Written here from the kernel's tables,
so a test's tree reads as a real host's does.
"""

import os

#: The correctable error types, in the kernel's order.
CORRECTABLE_TYPES = ('RxErr', 'BadTLP', 'BadDLLP', 'Rollover', 'Timeout',
                     'NonFatalErr', 'CorrIntErr', 'HeaderOF')
#: The uncorrectable (fatal and non-fatal) error types, in its order.
UNCORRECTABLE_TYPES = ('Undefined', 'DLP', 'SDES', 'TLP', 'FCP', 'CmpltTO',
                       'CmpltAbrt', 'UnxCmplt', 'RxOF', 'MalfTLP', 'ECRC',
                       'UnsupReq', 'ACSViol', 'UncorrIntErr', 'BlockedTLP',
                       'AtomicOpBlocked', 'TLPBlockedErr',
                       'PoisonTLPBlocked')

#: severity -> (file, its types, its total line)
FILES = {
    'fatal': ('aer_dev_fatal', UNCORRECTABLE_TYPES, 'TOTAL_ERR_FATAL'),
    'nonfatal': ('aer_dev_nonfatal', UNCORRECTABLE_TYPES,
                 'TOTAL_ERR_NONFATAL'),
    'correctable': ('aer_dev_correctable', CORRECTABLE_TYPES,
                    'TOTAL_ERR_COR'),
}


def text(severity: str, total: int, **types: int) -> str:
    """One file's content: ``types`` {error type: count}, the rest 0.

    :raises KeyError: a type the kernel does not name for the severity.
    """
    _, names, total_name = FILES[severity]
    unknown = set(types) - set(names)
    if unknown:
        raise KeyError('not %s error types: %s' % (severity,
                                                   sorted(unknown)))
    lines = ['%s %d' % (name, types.get(name, 0)) for name in names]
    lines.append('%s %d' % (total_name, total))
    return '\n'.join(lines) + '\n'


def function_dir(root: str, address: str) -> str:
    return os.path.join(root, 'bus', 'pci', 'devices', address)


def write(root: str, address: str, fatal: int = 0, nonfatal: int = 0,
          correctable: int = 0, **types: int) -> None:
    """Give the function at ``address`` of the tree at ``root`` counters.

    Each total is put on one error type (``CmpltTO`` for the
    uncorrectable ones, ``RxErr`` for correctable) unless ``types`` says
    otherwise, as ``fatal_DLP=1``, ``correctable_BadTLP=2``.
    """
    path = function_dir(root, address)
    for severity, total in (('fatal', fatal), ('nonfatal', nonfatal),
                            ('correctable', correctable)):
        name, _, _ = FILES[severity]
        mine = {k.split('_', 1)[1]: v for k, v in types.items()
                if k.startswith(severity + '_')}
        if not mine and total:
            mine = {'RxErr' if severity == 'correctable'
                    else 'CmpltTO': total}
        with open(os.path.join(path, name), 'w') as f:
            f.write(text(severity, total, **mine))


def remove(root: str, address: str) -> None:
    """Take the counters away, as on a function without AER."""
    for name, _, _ in FILES.values():
        try:
            os.unlink(os.path.join(function_dir(root, address), name))
        except FileNotFoundError:
            pass
