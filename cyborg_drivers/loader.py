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

"""Finding and loading drivers from the ``cyborg_nova.drivers`` namespace.

Drivers are entry points, so a vendor ships one in its own package and
enables it by name; nothing here lists drivers by hand.
"""

from __future__ import annotations

import functools
import logging
from typing import Iterable

from oslo_config import cfg
import stevedore

from cyborg_drivers import base

LOG = logging.getLogger(__name__)

NAMESPACE = 'cyborg_nova.drivers'


class UnknownDriver(base.DriverError):
    """A driver name that no installed entry point provides."""

    def __init__(self, name: str, available: list[str]) -> None:
        super().__init__('unknown driver %r; installed drivers: %s'
                         % (name, ', '.join(available) or 'none'))
        self.name = name


def _on_load_failure(manager, entry_point, exc) -> None:
    # A broken third-party driver must not take the others down with it.
    LOG.error('Cannot load accelerator driver %s (%s): %s',
              entry_point.name, entry_point.value, exc)


@functools.cache
def installed() -> dict[str, type[base.AcceleratorDriver]]:
    """Every installed driver class by name, sorted by name.

    Cached: entry points do not change while a process runs, and a
    broken one should be reported once, not every cycle.
    """
    manager = stevedore.ExtensionManager(
        NAMESPACE, invoke_on_load=False,
        on_load_failure_callback=_on_load_failure)
    return {ext.name: ext.plugin
            for ext in sorted(manager, key=lambda e: e.name)}


def register_opts(conf: cfg.ConfigOpts,
                  classes: list[type[base.AcceleratorDriver]]) -> None:
    """Register each driver's options under its own group."""
    for cls in classes:
        if cls.CONFIG_OPTS:
            conf.register_opts(cls.CONFIG_OPTS, group=cls.group_name())


def list_opts() -> list[tuple[str, list[cfg.Opt]]]:
    """(group, options) of every installed driver, for oslo.config."""
    return [(cls.group_name(), cls.CONFIG_OPTS)
            for cls in installed().values() if cls.CONFIG_OPTS]


def load(conf: cfg.ConfigOpts, names: list[str]
         ) -> list[base.AcceleratorDriver]:
    """Instantiate the named drivers, in the order given.

    :raises UnknownDriver: a name no installed entry point provides.
    :raises base.DriverError: a driver rejected its configuration.
    """
    available = installed()
    classes = []
    for name in names:
        if name not in available:
            raise UnknownDriver(name, list(available))
        classes.append(available[name])
    register_opts(conf, classes)
    return [cls(conf) for cls in classes]


def default_names() -> list[str]:
    """Installed drivers that find hardware without any configuration."""
    return [name for name, cls in installed().items()
            if not cls.needs_config]


@functools.cache
def unconfigured(name: str) -> base.AcceleratorDriver:
    """Installed driver ``name`` with its options at their defaults.

    For the hooks that read no option (units, what a device offers),
    asked by callers that have no configuration to hand; one instance
    per name and process.

    :raises UnknownDriver: no installed entry point provides ``name``.
    """
    conf = cfg.ConfigOpts()
    conf(args=[], default_config_files=[], default_config_dirs=[])
    (driver,) = load(conf, [name])
    return driver


def named(name: str, drivers: Iterable[base.AcceleratorDriver] | None = None
          ) -> base.AcceleratorDriver | None:
    """Driver ``name``, to ask one of its option-free hooks.

    Among ``drivers`` (the caller's loaded ones) when given; else the
    installed one, :func:`unconfigured`. None: not there (e.g. a device
    of an out-of-process driver).
    """
    if drivers is not None:
        return next((d for d in drivers if d.name == name), None)
    if name not in installed():
        return None
    return unconfigured(name)
