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

"""Arguments and objects shared by the commands that act on one host."""

import os
import socket

from oslo_config import cfg

from cyborg_nova import placement
# In the library (the agent starts privsep too); the commands call it here.
from cyborg_nova import store as state_store


class HostCommand:
    """Mixin of every operator command: it acts on this host alone.

    ``openstack`` (osc-lib) logs in to Keystone before a command unless
    the command says ``auth_required = False``; these need no cloud
    login, and those that talk to Placement log in on their own.
    """

    auth_required = False


def conf(app) -> cfg.ConfigOpts:
    """The config a command reads: ``cyborg-nova``'s ``--config-file``.

    Under ``openstack`` the app has no ``conf``: the plugin's client
    (``app.client_manager.cyborg_nova``) is the config, read from
    ``--cyborg-nova-config-file``.
    """
    loaded = getattr(app, 'conf', None)
    return loaded if loaded is not None else app.client_manager.cyborg_nova


def add_nodename(parser):
    parser.add_argument(
        '--nodename', default=socket.gethostname(),
        help='The compute node (Nova\'s hypervisor hostname) whose devices '
             'to act on. Default: this host\'s name.')


def store(conf) -> state_store.StateStore:
    return state_store.StateStore(conf.cyborg_nova.state_path)


def existing_store(conf) -> state_store.StateStore | None:
    """The host's store, if any: read-only commands never create it."""
    path = conf.cyborg_nova.state_path
    return state_store.StateStore(path) if os.path.exists(path) else None


def placement_client(app, parsed_args):
    loaded = conf(app)
    placement.register_opts(loaded)
    return placement.from_conf(loaded) or placement.from_args(parsed_args)


def allocations_lookup(client):
    """``rp_uuid -> {consumer: allocation}``, {} if no such provider.

    None when Placement cannot tell.
    """
    api = placement.Client(client)

    def lookup(rp_uuid):
        try:
            return api.provider_allocations(rp_uuid)['allocations']
        except placement.PlacementError as exc:
            return {} if exc.not_found else None
    return lookup
