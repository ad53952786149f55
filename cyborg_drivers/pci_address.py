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

"""PCI function addresses, as the kernel names them in sysfs.

The one rule every layer checks an address by (discovery, the udev
events, the AER port lookup, the privileged helpers): a module of its
own, below all of them, so that none of them imports another for it.
"""

from __future__ import annotations

import re

# Domains are 16 bits on most hosts, but devices behind Intel VMD sit in
# domains from 10000 on: the kernel prints the domain with at least four
# digits, so accept four to eight.
PCI_ADDRESS_RE = re.compile(
    r'^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$')


def is_pci_address(value: str) -> bool:
    """True for a full, lowercase PCI address such as ``0000:3b:00.0``.

    The domain has four to eight hex digits (``10000:01:00.0`` is a device
    behind an Intel VMD controller). Host bridges (``pci0000:00``) are
    not functions.
    """
    # fullmatch: with match, "$" also matches before a final newline.
    return bool(PCI_ADDRESS_RE.fullmatch(value))
