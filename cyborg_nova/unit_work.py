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

"""A guest's units made real when given, undone when freed.

The unit store says which unit serves which allocation; some units are
also something the host must make: a vGPU (a mediated device, or a VF
given a vGPU type) is made when a guest is given it (spawn, a move's
destination, a hard reboot after the host rebooted and lost it) and
undone once freed. How is the family's knowledge: this module finds the
accelerator's driver and asks its unit hooks
(:meth:`~cyborg_drivers.base.AcceleratorDriver.prepare_units`,
:meth:`~cyborg_drivers.base.AcceleratorDriver.clear_unit`); every
decision about who holds a unit stays with :mod:`cyborg_nova.assignments`.
"""

from __future__ import annotations

import logging
from typing import Iterable, Sequence

from cyborg_drivers import base
from cyborg_drivers import device as device_model
from cyborg_drivers import loader

LOG = logging.getLogger(__name__)


class UnitWorkError(Exception):
    """A unit cannot be made; the message says which and why."""


class PrivsepOps:
    """Every family's privileged unit writes, through its privsep module.

    One object serves the units of every family on the host: a write is
    looked up on each installed driver's :meth:`~cyborg_drivers.base.
    AcceleratorDriver.unit_ops`, in name order. Tests put an object
    with the same methods (a fake kernel) in its place.
    """

    def __getattr__(self, name: str):
        for cls in loader.installed().values():
            ops = cls.unit_ops()
            if ops is not None and hasattr(ops, name):
                return getattr(ops, name)
        if hasattr(base.PciOps, name):
            # Every family's writes (a scrub's function reset).
            return getattr(base.PciOps(), name)
        raise AttributeError('no installed driver has a privileged unit '
                             'write %r' % name)


def prepare(sysfs_root: str, accelerator: device_model.Accelerator,
            units: Iterable[str], ops,
            drivers: Sequence[base.AcceleratorDriver] | None = None
            ) -> list[str]:
    """Make ``units`` of ``accelerator`` usable by a guest; what was made.

    Units that are ready already are left alone, so calling it at every
    guest build changes nothing; units of a family that makes nothing
    (a NIC's VF, a whole GPU) need nothing.

    :param drivers: the loaded drivers, of which the one named
        ``accelerator.driver`` is asked; by default that installed
        driver, loaded without options (unit work reads none).
    :raises UnitWorkError: a unit could not be made (the message names it);
        units made before it stay (they are freed with the allocation).
    """
    driver = loader.named(accelerator.driver, drivers)
    if driver is None:
        return []
    try:
        return driver.prepare_units(sysfs_root, accelerator, list(units),
                                    ops)
    except base.UnitError as exc:
        raise UnitWorkError(str(exc))


def retire(sysfs_root: str, units: Iterable[str], ops,
           drivers: Sequence[base.AcceleratorDriver] | None = None
           ) -> list[str]:
    """Undo what :func:`prepare` made of freed ``units``; what was undone.

    Each driver that makes units is asked in turn (a freed unit no
    longer says whose it was): mediated devices are removed, vGPU types
    cleared; any other unit needs nothing. Never raises: a unit left as
    it was is logged, and the next guest given it gets it as it is.

    :param drivers: the loaded drivers to ask; by default every
        installed driver that makes units, loaded without options.
    """
    makers = _unit_makers(drivers)
    undone = []
    for unit in units:
        try:
            if any(d.clear_unit(sysfs_root, unit, ops) for d in makers):
                undone.append(unit)
        except Exception as exc:
            LOG.warning('Unit %s is free but was left as it is: %s',
                        unit, exc)
    if undone:
        LOG.info('Freed units undone: %s', ', '.join(undone))
    return undone


def hostdev_kind(accelerator: device_model.Accelerator | None, unit: str,
                 drivers: Sequence[base.AcceleratorDriver] | None = None
                 ) -> str:
    """How ``unit`` goes into a guest, as its driver says.

    One of :data:`~cyborg_drivers.device.HOSTDEV_KINDS`; the contract's
    default where the accelerator is unknown or its driver is not
    installed here (an out-of-process driver's device).
    """
    driver = (loader.named(accelerator.driver, drivers)
              if accelerator is not None else None)
    if driver is None:
        return device_model.default_hostdev(unit)
    return driver.unit_hostdev(accelerator, unit)


def hotplug_refusal(accelerator: device_model.Accelerator,
                    drivers: Sequence[base.AcceleratorDriver] | None = None
                    ) -> str | None:
    """Why ``accelerator``'s driver will not have its units hot-plugged.

    None: they can be (also where its driver is not installed here).
    """
    driver = loader.named(accelerator.driver, drivers)
    return driver.hotplug_refusal(accelerator) if driver else None


def _makes_units(cls: type[base.AcceleratorDriver]) -> bool:
    return cls.clear_unit is not base.AcceleratorDriver.clear_unit


def _unit_makers(drivers) -> list[base.AcceleratorDriver]:
    if drivers is not None:
        return [d for d in drivers if _makes_units(type(d))]
    return [loader.unconfigured(name)
            for name, cls in loader.installed().items()
            if _makes_units(cls)]
