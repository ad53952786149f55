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

import socket

from oslo_config import cfg

from cyborg_nova.cmd import errors
from cyborg_nova import placement
# In the library (the agent starts privsep too); the commands call it here.
from cyborg_nova import store as state_store


class HostCommand(errors.CommandOutcome):
    """Mixin of every operator command: it acts on this host alone.

    ``openstack`` (osc-lib) logs in to Keystone before a command unless
    the command says ``auth_required = False``; these need no cloud
    login, and those that talk to Placement log in on their own. How a
    command ends (exit status, one-line errors) is
    :class:`~cyborg_nova.cmd.errors.CommandOutcome`'s.
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
    """The host's store, for a command that writes it.

    Created if missing (run as root: given to ``[cyborg_nova]
    state_owner``) and migrated.
    """
    return state_store.StateStore(conf.cyborg_nova.state_path,
                                  owner=conf.cyborg_nova.state_owner)


def read_store(conf) -> state_store.StateStore | None:
    """The host's store opened read-only; None if there is none yet.

    For the commands that only read: nothing is created or migrated.

    :raises state_store.StoreTooOld: the store is not migrated yet.
    :raises state_store.StorePermissionError: this user cannot read it.
    """
    try:
        return state_store.StateStore(conf.cyborg_nova.state_path,
                                      read_only=True)
    except state_store.StoreMissing:
        return None


def existing_store(conf) -> state_store.StateStore | None:
    """The host's store for writing, if any; never created here."""
    path = conf.cyborg_nova.state_path
    return store(conf) if state_store.exists(path) else None


def missing_store(conf) -> str:
    """What a reading command says when the host has no store yet."""
    return ('the state store %s does not exist yet (nova-compute creates '
            'it at its first update)' % conf.cyborg_nova.state_path)


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
