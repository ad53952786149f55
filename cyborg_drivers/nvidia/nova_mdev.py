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

"""The mdev parents Nova's own vGPU support takes on this host.

Nova's libvirt driver makes mediated devices on every parent device that
offers the type ``[devices] enabled_mdev_types`` gives it: the type of the
``[mdev_<type>] device_addresses`` entry naming the parent, or else the
first enabled type listed without addresses. A GPU both Nova and
cyborg-nova report would be offered twice in Placement, and an mdev one
of them made could be handed to a guest of the other. The nvidia_gpu
driver therefore holds such a GPU back and says why.

The options are Nova's: they are read, never registered under Nova's
names on the caller's configuration (nova-compute has its own
definitions there). Where Nova has not registered them (the agent and
the commands, which read the same nova.conf), the configuration's own
files are read again with private definitions.
"""

from __future__ import annotations

import dataclasses

from oslo_config import cfg

GROUP = 'devices'
OPTION = 'enabled_mdev_types'


@dataclasses.dataclass(frozen=True)
class NovaMdevTypes:
    """Which mdev type Nova's libvirt driver gives each parent device."""

    #: The type of parents no ``device_addresses`` names; None if none.
    default: str | None = None
    #: Parent PCI address -> type.
    by_address: dict[str, str] = dataclasses.field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.default or self.by_address)

    def type_for(self, address: str) -> str | None:
        return self.by_address.get(address, self.default)

    def option_for(self, address: str) -> str:
        """The nova.conf line that gives ``address`` its type."""
        if address in self.by_address:
            return '[mdev_%s] device_addresses' % self.by_address[address]
        return '[devices] %s = %s (no device_addresses)' % (
            OPTION, self.default)


def _registered(conf: cfg.ConfigOpts, group: str, name: str) -> bool:
    try:
        return name in conf[group]
    except (cfg.NoSuchOptError, KeyError, AttributeError):
        return False


def _private(conf: cfg.ConfigOpts) -> cfg.ConfigOpts:
    private = cfg.ConfigOpts()
    private.register_opt(cfg.ListOpt(OPTION, default=[],
                                     deprecated_name='enabled_vgpu_types'),
                         group=GROUP)
    files = list(getattr(conf, 'config_file', None) or [])
    dirs = [getattr(conf, 'config_dir', None)]
    private(args=[], project='cyborg-nova', default_config_files=files,
            default_config_dirs=[d for d in dirs if d],
            use_env=False)
    return private


def read(conf: cfg.ConfigOpts) -> NovaMdevTypes:
    """Nova's vGPU types per parent, as nova-compute would take them.

    :raises cfg.Error: nova.conf cannot be read.
    """
    private: list[cfg.ConfigOpts] = []

    def files() -> cfg.ConfigOpts:
        if not private:
            private.append(_private(conf))
        return private[0]

    if _registered(conf, GROUP, OPTION):
        source = conf
    elif getattr(conf, 'config_file', None) or getattr(
            conf, 'config_dir', None):
        source = files()
    else:
        return NovaMdevTypes()
    default = None
    by_address: dict[str, str] = {}
    for mdev_type in source[GROUP][OPTION] or ():
        group = 'mdev_%s' % mdev_type
        # Nova registers these groups when its libvirt driver starts;
        # an option of its name is never registered on its CONF here.
        where = conf if _registered(conf, group, 'device_addresses') \
            else files()
        if not _registered(where, group, 'device_addresses'):
            where.register_opt(cfg.ListOpt(
                'device_addresses', default=[],
                deprecated_group='vgpu_%s' % mdev_type), group=group)
        addresses = where[group].device_addresses
        if not addresses:
            # Nova, likewise, uses only the first such type.
            default = default or mdev_type
        for address in addresses:
            by_address.setdefault(address, mdev_type)
    return NovaMdevTypes(default, by_address)
