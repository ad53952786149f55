"""Arguments and objects shared by the commands that act on one host."""

import os
import socket

from oslo_config import cfg

from cyborg_nova.conf import privsep as privsep_conf
from cyborg_nova import placement
from cyborg_nova import state as state_store


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


def start_privsep(conf, context_name: str):
    """The privsep context ``context_name``, reading this command's files.

    oslo.privsep builds the daemon from the global ``cfg.CONF`` (the
    context's section, and the config files it passes to privsep-helper),
    while the command reads its own ConfigOpts; so the global one is
    loaded from the same files, as a service's main() would. Run as root
    without a ``helper_command``, the daemon is forked (it still drops to
    the context's capabilities) instead of being started through sudo.
    """
    from cyborg_nova import whitelist
    priv_context = whitelist.quiet_import('oslo_privsep.priv_context')
    privsep = whitelist.quiet_import('privsep')
    privsep_conf.register_opts(cfg.CONF)
    cfg.CONF([], project='nova',
             default_config_files=list(conf.config_file or []),
             default_config_dirs=[])
    context = getattr(privsep, context_name)
    if (os.geteuid() == 0 and not context.conf.helper_command
            and context.channel is None):
        context.start(priv_context.Method.FORK)
    return context
