"""Arguments and objects shared by the commands that act on one host."""

import socket

from cyborg_nova import placement
from cyborg_nova import state as state_store


def add_nodename(parser):
    parser.add_argument(
        '--nodename', default=socket.gethostname(),
        help='The compute node (Nova\'s hypervisor hostname) whose devices '
             'to act on. Default: this host\'s name (%(default)s).')


def store(conf) -> state_store.StateStore:
    return state_store.StateStore(conf.cyborg_nova.state_path)


def placement_client(app, parsed_args):
    conf = app.conf
    placement.register_opts(conf)
    return placement.from_conf(conf) or placement.from_args(parsed_args)


def allocations_lookup(client):
    """``rp_uuid -> {consumer: allocation}``, {} if no such provider."""
    def lookup(rp_uuid):
        try:
            return placement.get(
                client, '/resource_providers/%s/allocations' % rp_uuid
            )['allocations']
        except placement.PlacementError as exc:
            if 'answered 404' in str(exc):
                return {}
            return None
    return lookup
