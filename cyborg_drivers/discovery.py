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

"""One discovery cycle: every enabled driver over one PCI snapshot."""

from __future__ import annotations

import dataclasses
import logging
from typing import Iterable

from cyborg_drivers import aer
from cyborg_drivers import base
from cyborg_drivers import device as device_model
from cyborg_drivers import sysfs

LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class DiscoveryResult:
    """What a cycle found, and what it had to leave out and why."""

    accelerators: tuple[device_model.Accelerator, ...]
    #: PCI address (or configured name) -> why it is not reported.
    problems: dict[str, str]
    #: driver name -> why the driver found nothing this cycle.
    driver_errors: dict[str, str]

    def by_address(self) -> dict[str, device_model.Accelerator]:
        return {a.address: a for a in self.accelerators}


class Discoverer:
    """Runs ``drivers`` over the sysfs tree at ``sysfs_root``."""

    def __init__(self, drivers: list[base.AcceleratorDriver],
                 sysfs_root: str = '/sys') -> None:
        self.drivers = drivers
        self.sysfs_root = sysfs_root

    def _claims(self, function: sysfs.PciFunction) -> bool:
        return any(driver.claims(function) for driver in self.drivers)

    @staticmethod
    def _checked(driver: base.AcceleratorDriver,
                 accelerator: device_model.Accelerator,
                 snapshot: sysfs.PciSnapshot) -> device_model.Accelerator:
        """The accelerator with its driver's health findings as problems."""
        try:
            reasons = driver.health(accelerator, snapshot)
        except Exception as exc:
            # Health unknown is not healthy.
            reasons = ['health cannot be read: %s' % exc]
        if not reasons:
            return accelerator
        return dataclasses.replace(
            accelerator, problems=accelerator.problems + tuple(reasons))

    @staticmethod
    def _with_aer(accelerator: device_model.Accelerator,
                  snapshot: sysfs.PciSnapshot) -> device_model.Accelerator:
        """The accelerator with the AER counters of its PCI functions.

        Its own functions first, then those of its units that are PCI
        functions (a vGPU's units can be mdevs, which have none), then
        the PCIe port above it, whose counters are its link's errors.
        """
        if accelerator.remote:
            return accelerator
        functions = dict.fromkeys(accelerator.addresses)
        functions.update(dict.fromkeys(
            u for u in accelerator.units
            if u not in functions and device_model.is_pci_address(u)))
        return dataclasses.replace(accelerator, aer=aer.read_functions(
            snapshot.devices_dir, functions, aer.upstream_port(
                snapshot.devices_dir, accelerator.address)))

    def discover(self, only: Iterable[str] | None = None,
                 gone: Iterable[str] = ()) -> DiscoveryResult:
        """Discover the whole host, or only the functions in ``only``.

        Functions in ``gone`` are taken as removed (see PciSnapshot).

        :raises sysfs.NoSysfs: the root has no PCI bus at all.
        """
        snapshot = sysfs.PciSnapshot(self.sysfs_root, only, self._claims,
                                     gone)
        owners: dict[str, str] = {}
        found: list[device_model.Accelerator] = []
        errors: dict[str, str] = {}
        for driver in self.drivers:
            try:
                accelerators = driver.discover(snapshot)
            except base.DriverError as exc:
                errors[driver.name] = str(exc)
                # Tagged: a command that reports the failure itself takes
                # this line off its console (cyborg_nova.cmd.errors).
                LOG.error('Driver %s found nothing: %s', driver.name, exc,
                          extra={'driver_failure': (driver.name,
                                                    errors[driver.name])})
                continue
            except Exception as exc:
                # A driver bug must not hide the other drivers' devices.
                errors[driver.name] = 'internal error: %s' % exc
                LOG.exception('Driver %s failed', driver.name,
                              extra={'driver_failure': (driver.name,
                                                        errors[driver.name])})
                continue
            for accelerator in accelerators:
                accelerator = self._checked(driver, accelerator, snapshot)
                taken = [a for a in accelerator.addresses if a in owners]
                if taken:
                    snapshot.problem(
                        accelerator.address,
                        'claimed by drivers %s and %s; the first enabled '
                        'wins' % (owners[taken[0]], driver.name))
                    continue
                owners.update(dict.fromkeys(accelerator.addresses,
                                            driver.name))
                found.append(self._with_aer(accelerator, snapshot))
        found.sort(key=lambda a: a.address)
        return DiscoveryResult(tuple(found), dict(snapshot.problems),
                               errors)
