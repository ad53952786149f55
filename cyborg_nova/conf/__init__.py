"""Configuration of cyborg-nova.

Nothing is registered at import time: callers pass their ``ConfigOpts``
to :func:`register_opts` (nova-compute passes Nova's own ``CONF``).
"""

from oslo_config import cfg

from cyborg_nova.conf import cyborg_nova


def register_opts(conf: cfg.ConfigOpts) -> None:
    cyborg_nova.register_opts(conf)
