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

"""``cyborg-nova-agent``: the process.

``cyborg-nova-agent --config-file /etc/nova/nova.conf --config-file
/etc/cyborg-nova/agent.conf`` reads ``[cyborg_agent]``, ``[cyborg_nova]``
(the drivers, sysfs root and state store nova-compute uses) and
``[placement]``, then runs the agent (:class:`cyborg_nova.agent.service.
Agent`) until SIGTERM or SIGINT. Also ``python -m cyborg_nova.cmd.agent``.

It prints ``listening <url>`` on stdout once it serves.
"""

from __future__ import annotations

import sys

from keystoneauth1 import exceptions as ks_exc
from oslo_config import cfg
from oslo_log import log as oslo_logging

from cyborg_drivers import base
from cyborg_drivers import loader
from cyborg_nova.agent import service
from cyborg_nova.cmd import errors
from cyborg_nova.cmd import serving
from cyborg_nova import conf as cn_conf
from cyborg_nova.conf import agent as agent_conf
from cyborg_nova import config_check
from cyborg_nova import placement

# The service's logger: the process's own lines keep the name they had
# when main() lived there (and run with -m, __name__ is __main__).
LOG = service.LOG


def load_config(argv: list[str]) -> cfg.ConfigOpts:
    """A ConfigOpts with every option the agent reads, parsed from argv.

    Every installed driver's options included, so that
    :func:`~cyborg_nova.cmd.serving.read_config` checks their values at
    start too.

    :raises oslo_config.cfg.Error: bad arguments or config file.
    """
    conf = cfg.ConfigOpts()
    cn_conf.register_opts(conf)
    agent_conf.register_opts(conf)
    placement.register_opts(conf)
    loader.register_opts(conf, list(loader.installed().values()))
    oslo_logging.register_options(conf)
    # Logs to stderr by default: stdout carries the "listening" line.
    conf.set_default('use_stderr', True)
    conf(argv, project='cyborg-nova', prog=service.PROG)
    return conf


def main(argv: list[str] | None = None) -> int:
    """Run the agent until SIGTERM or SIGINT; the exit status."""
    # A missing or malformed file, or a bad value: one line, status 2.
    conf = serving.read_config(service.PROG, lambda: load_config(
        sys.argv[1:] if argv is None else argv))
    if conf is None:
        return errors.CONFIG_ERROR
    oslo_logging.setup(conf, service.PROG)
    # Once, before anything reads an option: what the files get wrong and
    # oslo.config lets pass is logged, also when it stops the start below.
    config_check.log_findings(conf, LOG)
    try:
        agent = service.Agent(conf)
    except (base.DriverError, OSError, ks_exc.ClientException,
            cfg.ConfigFileValueError) as exc:
        # Unknown drivers, an unwritable state store, [placement]
        # credentials that cannot be loaded (fencing is a safety
        # function, so a broken [placement] is not silently ignored), or
        # a value that does not parse.
        LOG.error('Cannot start: %s', serving.start_error(conf, exc))
        return 1
    stopping = serving.on_signals(LOG)
    try:
        agent.start()
    except (OSError, ValueError) as exc:
        # Typically the port is taken; or an exposure without auth, a
        # certificate without its key.
        LOG.error('Cannot start: %s', exc)
        agent.stop()
        return 1
    return serving.serve(LOG, agent.server.url, stopping, agent.stop)


if __name__ == '__main__':
    sys.exit(main())
