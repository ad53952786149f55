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

from cyborg_drivers import base
from cyborg_drivers import discovery
from cyborg_drivers import loader
from cyborg_nova.store import services as service_table


def offered(accelerator,
            driver: base.AcceleratorDriver | None = None) -> list[str]:
    """The services of one accelerator, as service-list shows them.

    Its driver says (:meth:`~cyborg_drivers.base.AcceleratorDriver.
    offered`); by default the installed driver it names, loaded without
    options. A device whose driver names nothing (or is not installed
    here) offers the whole device.
    """
    if driver is None:
        driver = loader.named(accelerator.driver)
    found = driver.offered(accelerator) if driver is not None else []
    return found or ['whole device (%s)' % accelerator.resource_class]


def rows(accelerators: Iterable, now: float,
         drivers: Iterable[base.AcceleratorDriver] = ()
         ) -> list[service_table.Offered]:
    """What the table holds for these accelerators, found at ``now``.

    :param drivers: the loaded drivers, asked before the installed ones.
    """
    by_name = {d.name: d for d in drivers}
    return [service_table.Offered(
        a.address, a.driver, tuple(offered(a, by_name.get(a.driver))),
        tuple(a.traits), now)
        for a in sorted(accelerators, key=lambda a: a.address)]


def discover(store, nodename: str, drivers: list, sysfs_root: str) -> int:
    """Discover ``nodename``'s devices and store their services.

    :returns: how many devices were refreshed.
    :raises cyborg_drivers.sysfs.NoSysfs: there is no PCI bus to read.
    """
    found = discovery.Discoverer(drivers, sysfs_root).discover()
    return store.services.replace(
        nodename, rows(found.accelerators, time.time(), drivers))
