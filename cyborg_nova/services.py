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

"""The services each accelerator offers, and their discovery.

The generic-driver spec's "discover services" / "service-list": what a
tenant can ask for from each device (QAT services such as sym, asym and
dc; an FPGA's loaded function; a NIC's physical network; a GPU's vGPU
type), with the traits that request them. :func:`discover` runs the
drivers over sysfs once and stores every device's services, with the
time, in the host's state store, where ``cyborg-nova service-list``
reads them.
"""

from __future__ import annotations

import time
from typing import Iterable

from cyborg_drivers import discovery
from cyborg_nova.store import services as service_table


def offered(accelerator) -> list[str]:
    """The services of one accelerator, as service-list shows them."""
    caps = dict(accelerator.capabilities)
    found = []
    if 'services' in caps:
        found += caps['services'].lower().split(';')
    if 'physical_network' in caps:
        found.append('network %s' % caps['physical_network'])
    if 'vgpu_type' in caps:
        found.append('vGPU %s' % caps['vgpu_type'])
    found += ['function %s' % r.function_id
              for r in accelerator.fpga_regions if r.function_id]
    if not found:
        found.append('whole device (%s)' % accelerator.resource_class)
    return found


def rows(accelerators: Iterable, now: float
         ) -> list[service_table.Offered]:
    """What the table holds for these accelerators, found at ``now``."""
    return [service_table.Offered(a.address, a.driver, tuple(offered(a)),
                                  tuple(a.traits), now)
            for a in sorted(accelerators, key=lambda a: a.address)]


def discover(store, nodename: str, drivers: list, sysfs_root: str) -> int:
    """Discover ``nodename``'s devices and store their services.

    :returns: how many devices were refreshed.
    :raises cyborg_drivers.sysfs.NoSysfs: there is no PCI bus to read.
    """
    found = discovery.Discoverer(drivers, sysfs_root).discover()
    return store.services.replace(nodename,
                                  rows(found.accelerators, time.time()))
