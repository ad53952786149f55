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

"""``cyborg-nova tree``: the provider tree(s) as Placement holds them."""

from __future__ import annotations

from cliff import lister

from cyborg_nova.cmd import columns
from cyborg_nova.cmd import hostargs
from cyborg_nova import placement


class Tree(hostargs.HostCommand, lister.Lister):
    """Show the nested resource provider tree of one host, or of all.

    One row per provider, children under their parent: its inventory
    (resource class, total, reserved, used) and traits, read from
    Placement. Credentials: [placement] in --config-file (as in
    nova.conf), else the openstack CLI's OS_* environment (e.g.
    OS_AUTH_TYPE=admin_token OS_TOKEN=... OS_ENDPOINT=...). Read-only.
    """

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument(
            '--nodename', '--host', dest='host', metavar='NODENAME',
            help='Only the tree of this compute node (Nova\'s hypervisor '
                 'hostname, the root provider\'s name), as --nodename '
                 'names it in the other commands; --host is the same '
                 'option. Default: every tree in Placement.')
        placement.register_argparse(parser)
        return parser

    def take_action(self, parsed_args):
        client = hostargs.placement_client(self.app, parsed_args)
        providers = placement.provider_tree(client, parsed_args.host)
        rows = []
        for rp in providers:
            inventory = {
                rc: {'total': inv['total'], 'reserved': inv['reserved'],
                     'used': rp['usages'].get(rc, 0)}
                for rc, inv in rp['inventories'].items()}
            rows.append((
                '  ' * rp['depth'] + rp['name'],
                rp['uuid'],
                rp['parent_provider_uuid'],
                columns.InventoryColumn(inventory),
                columns.ListColumn(rp['traits']),
            ))
        if not rows:
            self.app.stderr.write(
                'no resource providers in Placement: the tree is empty '
                '(nova-compute creates them at its first update)\n')
        return (('name', 'uuid', 'parent_provider_uuid', 'inventory',
                 'traits'), rows)
