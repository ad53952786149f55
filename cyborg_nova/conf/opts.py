"""The ``oslo.config.opts`` entry point: every option, for the sample."""

from cyborg_drivers import loader
from cyborg_nova.conf import agent
from cyborg_nova.conf import conductor
from cyborg_nova.conf import cyborg_nova
from cyborg_nova.conf import privsep as privsep_conf


def list_opts():
    opts = [(group, options)
            for group, options in cyborg_nova.list_opts().items()]
    opts.extend(agent.list_opts().items())
    opts.extend(conductor.list_opts().items())
    opts.extend(privsep_conf.list_opts().items())
    opts.extend(loader.list_opts())
    return opts
