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

"""``cyborg-nova discover``: the accelerators the drivers find now."""

from __future__ import annotations

from cliff import columns as cliff_columns
from cliff import lister

from cyborg_drivers import aer
from cyborg_drivers import discovery
from cyborg_drivers import loader
from cyborg_nova.cmd import columns
from cyborg_nova.cmd import config_check
from cyborg_nova.cmd import hostargs
from cyborg_nova import lifecycle

COLUMNS = ('address', 'vendor_id', 'product_id', 'driver', 'resource_class',
           'traits', 'total', 'numa_node')
LONG_COLUMNS = COLUMNS + ('device_type', 'class_code', 'kernel_driver',
                          'iommu_group', 'units', 'setup_required',
                          'problems', 'aer', 'aer_effect')
#: The columns from the host's state store, not from the device model.
STORE_COLUMNS = ('aer_effect',)


class AerColumn(cliff_columns.FormattableColumn):
    """Each function's AER counters: a line each, or the dicts."""

    def human_readable(self):
        return '\n'.join(aer.AerCounters.from_dict(c).summary()
                         for c in self._value)

    def machine_readable(self):
        return list(self._value)


class Discover(hostargs.HostCommand, lister.Lister):
    """Discover this host's accelerators from sysfs and list them.

    Runs the drivers over one snapshot of <sysfs-root>/bus/pci and prints
    one row per accelerator: a whole device, or a PF whose VFs are its
    units. Devices that cannot be read are skipped with a warning on
    stderr; nothing is written anywhere. A driver that fails (e.g. it
    rejects its options) is reported once on stderr, after the other
    drivers' rows, and the exit status is 1. With --long, "aer" shows the
    PCIe AER error counts of each of its PCI functions (unknown where
    they cannot be read) and "aer_effect" the effect they had, as the
    host's state store records it for --nodename.
    """

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument(
            '--sysfs-root', metavar='DIR', type=config_check.nonempty,
            help='Read sysfs from DIR instead of [cyborg_nova] sysfs_root '
                 '(default /sys); e.g. a tree built from a host profile.')
        which = parser.add_mutually_exclusive_group()
        which.add_argument(
            '--driver', metavar='NAME', action='append', dest='drivers',
            help='Run only this driver (repeat for more). Default: every '
                 'installed driver that needs no configuration; see '
                 '"cyborg-nova driver-list".')
        which.add_argument(
            '--enabled', action='store_true',
            help='Run the drivers of [cyborg_nova] enabled_drivers, as '
                 'nova-compute does with the same config file.')
        parser.add_argument(
            '--long', action='store_true',
            help='Also show device type, class, kernel driver, IOMMU '
                 'group, units, problems and PCIe AER errors.')
        hostargs.add_nodename(parser)
        return parser

    def take_action(self, parsed_args):
        conf = hostargs.conf(self.app)
        if parsed_args.enabled:
            names = lifecycle.effective_names(
                conf, hostargs.read_store(conf))
        else:
            names = parsed_args.drivers or loader.default_names()
        drivers = loader.load(conf, names)
        root = parsed_args.sysfs_root or conf.cyborg_nova.sysfs_root
        result = discovery.Discoverer(drivers, root).discover()
        warn = self.app.stderr.write
        for driver in drivers:
            if not driver.is_configured():
                warn('warning: driver %s reports nothing until [%s] is '
                     'configured\n' % (driver.name, driver.group_name()))
        # A driver that failed is reported once, after the rows, and
        # makes the status 1 (hostargs.HostCommand).
        ran = [n for n in names if n not in result.driver_errors]
        if not result.accelerators and ran:
            warn('no accelerators found under %s by %s\n'
                 % (root, ', '.join(ran)))
        wanted = LONG_COLUMNS if parsed_args.long else COLUMNS
        store = hostargs.read_store(conf) if parsed_args.long else None
        effects = (store.aer.effects(parsed_args.nodename)
                   if store is not None else {})
        rows = []
        for accelerator in result.accelerators:
            data = accelerator.to_dict()
            effect = effects.get(accelerator.address)
            data['aer_effect'] = ('%s: %s' % (effect.effect, effect.reason)
                                  if effect else 'none')
            rows.append(tuple(
                AerColumn(data[c]) if c == 'aer'
                else columns.ListColumn(data[c])
                if isinstance(data[c], list) else data[c]
                for c in wanted))
        return wanted, rows
