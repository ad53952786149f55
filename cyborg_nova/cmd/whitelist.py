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

"""``whitelist-show`` and ``whitelist-sync``: Nova's [pci] device_spec."""

from __future__ import annotations


from cliff import command
from cliff import lister

from cyborg_nova.cmd import columns
from cyborg_nova.cmd import hostargs
from cyborg_nova import privileged
from cyborg_nova import whitelist


def nova_parser() -> whitelist.SpecParser:
    """Nova's device_spec parser, imported only by these two commands.

    :raises WhitelistError: Nova is not importable here.
    """
    try:
        from cyborg_nova.virt import pci_spec
    except ImportError as exc:
        raise whitelist.WhitelistError(
            'the whitelist commands need Nova importable (they parse '
            '[pci] device_spec with Nova\'s own code): %s' % exc)
    return pci_spec.NovaSpecParser()


class WhitelistShow(hostargs.HostCommand, lister.Lister):
    """List Nova's [pci] device_spec entries and what they match here.

    Reads device_spec from the configuration files (and the drop-in that
    "whitelist-sync" writes, [cyborg_nova_privsep] pci_device_spec_file)
    with Nova's own parser, and matches each entry against this host's PCI
    functions as Nova would. "conflicts" lists the functions an entry
    matches that cyborg-nova manages (the accelerators of the drivers
    nova-compute runs, and their units); each conflict is also reported
    on stderr. Writes nothing. A driver that finds nothing (its devices
    are then not checked) is reported on stderr and the exit status is 1.
    """

    driver_failure_note = '; its devices are not checked'

    def take_action(self, parsed_args):
        conf = hostargs.conf(self.app)
        root = conf.cyborg_nova.sysfs_root
        entries = whitelist.read_device_spec(nova_parser(),
                                             whitelist.config_files(conf))
        # A driver that finds nothing is reported by HostCommand, once.
        managed, _ = whitelist.managed_functions(
            conf, root, whitelist.driver_names(conf))
        host = whitelist.host_functions(root)
        warn = self.app.stderr.write
        rows = []
        for entry in entries:
            clashes = whitelist.conflicts([entry], managed)
            for clash in clashes:
                warn('conflict: %s\n' % clash.message())
            rows.append((
                entry.source, entry.text,
                columns.ListColumn([f.address for f in host
                                    if entry.matches(f)]),
                columns.ListColumn([c.function.address for c in clashes])))
        if not entries:
            warn('no [pci] device_spec entries in %s: the list is empty\n'
                 % (', '.join(whitelist.config_files(conf))
                    or 'the configuration read'))
        return ('source', 'entry', 'matches', 'conflicts'), rows


class WhitelistSync(hostargs.HostCommand, command.Command):
    """Hand devices to Nova's PCI passthrough, never managed ones.

    Writes [pci] device_spec for the devices given with --passthrough to
    the drop-in [cyborg_nova_privsep] pci_device_spec_file (through the
    nova_config privsep daemon), replacing what an earlier sync wrote;
    with no --passthrough the drop-in is emptied. Refused, with nothing
    written, when a device given is managed by cyborg-nova, when a
    device_spec entry elsewhere in the configuration matches a managed
    device, or when a driver fails to discover. nova-compute reads
    device_spec only when it starts: the command says when to restart it.
    """

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument(
            '--passthrough', action='append', default=[],
            metavar='ADDRESS[:RESOURCE_CLASS[:TRAIT,...]]',
            help='A device for Nova to pass through, by full PCI address, '
                 'optionally with the resource class and traits Nova '
                 'reports it with in Placement ([pci] '
                 'report_in_placement). Repeat for more.')
        parser.add_argument(
            '--dry-run', action='store_true',
            help='Check and print the drop-in; write nothing.')
        return parser

    def take_action(self, parsed_args):
        conf = hostargs.conf(self.app)
        plan = whitelist.plan_sync(nova_parser(), conf,
                                   conf.cyborg_nova.sysfs_root,
                                   whitelist.driver_names(conf),
                                   parsed_args.passthrough)
        out = self.app.stdout.write
        for warning in plan.warnings:
            self.app.stderr.write('warning: %s\n' % warning)
        if parsed_args.dry_run:
            out(plan.content)
            return
        privileged.start_privsep(conf, 'nova_config')
        result = whitelist.sync(plan)
        if not result['changed']:
            out('%s is up to date; nothing to restart\n' % result['path'])
            return
        out('wrote %d device_spec entr%s to %s\n'
            % (result['entries'], 'y' if result['entries'] == 1 else 'ies',
               result['path']))
        out(whitelist.RESTART_NOTE + '\n')
