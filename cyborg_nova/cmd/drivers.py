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

"""``cyborg-nova driver-list``: the installed accelerator drivers."""

from __future__ import annotations

from cliff import lister

from cyborg_drivers import loader
from cyborg_nova.cmd import hostargs
from cyborg_nova import lifecycle


class DriverList(hostargs.HostCommand, lister.Lister):
    """List installed accelerator drivers and whether they are enabled.

    Drivers are entry points in the cyborg_nova.drivers namespace;
    "enabled" means nova-compute runs it: listed in [cyborg_nova]
    enabled_drivers of the config read, with this host's driver-install /
    driver-uninstall choices applied; "needs config" drivers report
    nothing until their option group is filled in.
    """

    def take_action(self, parsed_args):
        conf = hostargs.conf(self.app)
        # What nova-compute runs: the configuration with this host's
        # driver-install / driver-uninstall choices applied.
        enabled = lifecycle.effective_names(
            conf, hostargs.read_store(conf))
        rows = []
        for name, cls in loader.installed().items():
            rows.append((name, name in enabled, cls.needs_config,
                         cls.group_name() if cls.CONFIG_OPTS else '',
                         cls.description))
        return (('name', 'enabled', 'needs_config', 'config_group',
                 'description'), rows)
