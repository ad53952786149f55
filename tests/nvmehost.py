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

"""A host with an SR-IOV NVMe drive, and NVMe controllers that answer.

The tree is the fake builder's: a Samsung PM1735 (144d:a824) with two of
its VFs enabled, every function bound to the host's ``nvme`` driver
with a live controller, beside a boot drive without SR-IOV. What no
tree can hold is the controllers themselves: :class:`Controllers`, in
place of :mod:`privsep.nvme`'s opener of ``/dev/nvmeN``, answers the
admin commands it sends, as the NVMe base specification lays out
Identify's data, and records each format.
"""

import contextlib
import os
import struct

import privsep

PF = '0000:3b:00.0'
VFS = ('0000:3b:00.1', '0000:3b:00.2')
BOOT = '0000:18:00.0'

PROFILE = {
    'name': 'nvme-sriov-host',
    'description': 'an SR-IOV NVMe drive with two VFs, and a boot drive',
    'devices': [
        {'address': '0000:17:00.0', 'label': 'root port',
         'vendor': 0x8086, 'device': 0x2030, 'class': 0x060400,
         'driver': 'pcieport'},
        {'address': BOOT, 'label': 'boot drive', 'vendor': 0x144d,
         'device': 0xa808, 'class': 0x010802, 'subsystem_device': 0xa801,
         'driver': 'nvme', 'parent': '0000:17:00.0'},
        {'address': '0000:3a:00.0', 'label': 'root port',
         'vendor': 0x8086, 'device': 0x2032, 'class': 0x060400,
         'driver': 'pcieport'},
        {'address': PF, 'label': 'Samsung PM1735 with SR-IOV',
         'vendor': 0x144d, 'device': 0xa824, 'class': 0x010802,
         'subsystem_device': 0xa809, 'driver': 'nvme',
         'parent': '0000:3a:00.0',
         'sriov': {'totalvfs': 32, 'numvfs': 2, 'vf_device': 0xa824,
                   'vf_driver': 'nvme'}},
    ],
}

#: The generic driver's matcher for the drive's VFs.
DEVICE_SPEC = ('{"vendor_id": "144d", "product_id": "a824", '
               '"resource_class": "CUSTOM_NVME_VF", "units": "vfs"}')


class Namespace:
    def __init__(self, flbas=0, dps=0, nmic=0):
        self.flbas, self.dps, self.nmic = flbas, dps, nmic
        self.data = b'tenant data'


class Controllers:
    """Every controller of the host, by name (``nvme0``...).

    ``namespaces[name]`` maps each active namespace ID to a
    :class:`Namespace`; ``fna`` is Identify Controller's byte 524;
    ``refuse`` maps (controller, nsid) to a status its format returns.
    A format empties the namespace's ``data``.
    """

    def __init__(self, namespaces=None, fna=0, refuse=None):
        self.namespaces = namespaces or {}
        self.fna = fna
        self.refuse = refuse or {}
        self.commands = []
        self.opened = []

    @contextlib.contextmanager
    def __call__(self, name, numbers, ctrl_dir):
        """Opens controller ``name``, as privsep.nvme's opener does."""
        self.opened.append((name, numbers, os.path.basename(ctrl_dir)))

        def command(opcode, nsid, cdw10, data_len, timeout_ms):
            return self._answer(name, numbers, opcode, nsid, cdw10,
                                timeout_ms)
        yield command

    def _answer(self, name, numbers, opcode, nsid, cdw10, timeout_ms):
        self.commands.append((name, numbers, opcode, nsid, cdw10))
        spaces = self.namespaces.get(name, {})
        if opcode == 0x06 and cdw10 == 0x01:
            page = bytearray(4096)
            page[524] = self.fna
            return bytes(page)
        if opcode == 0x06 and cdw10 == 0x02:
            ids = sorted(spaces)
            return struct.pack('<1024I', *ids, *[0] * (1024 - len(ids)))
        if opcode == 0x06 and cdw10 == 0x00:
            page = bytearray(4096)
            ns = spaces[nsid]
            page[26], page[29], page[30] = ns.flbas, ns.dps, ns.nmic
            return bytes(page)
        if opcode == 0x80:
            assert timeout_ms > 0
            status = self.refuse.get((name, nsid))
            if status:
                raise privsep.NotPossible(
                    'controller %s refused Format NVM of namespace %d: '
                    'NVMe status 0x%03x' % (name, nsid, status))
            spaces[nsid].data = b''
            return b''
        raise AssertionError('unexpected command %r' % (opcode,))

    def formats(self):
        """(controller, nsid, CDW10) of each format sent, in order."""
        return [(name, nsid, cdw10) for name, _, opcode, nsid, cdw10
                in self.commands if opcode == 0x80]
