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

"""The conductor-lite service: its parts, wired from its configuration.

:class:`Conductor` opens the database (creating its tables), serves the
REST API with cheroot and watches for agents going DOWN in a background
thread; ``cyborg-nova-conductor`` (:mod:`cyborg_nova.cmd.conductor`)
reads the options and runs it as a process.
"""

from __future__ import annotations

import logging
import ssl
import sys

from oslo_config import cfg
from oslo_db import exception as db_exc

from cyborg_nova.api import server as api_server
from cyborg_nova.conductor import api
from cyborg_nova.conductor import db
from cyborg_nova.conductor import hardware
from cyborg_nova.conductor import registry
from cyborg_nova.conf import conductor as conductor_conf
from cyborg_nova import placement

LOG = logging.getLogger(__name__)

NAME = 'cyborg-nova-conductor'


class StartError(Exception):
    """The service cannot start; the message says why."""


def make_collector(conf: cfg.ConfigOpts) -> hardware.Collector:
    """The hardware collector, with Placement when it is configured."""
    opts = conf[conductor_conf.GROUP.name]
    client, problem = None, ('Placement is not configured ([placement] '
                             'auth_type is unset)')
    try:
        client = placement.from_conf(conf)
    except Exception as exc:
        # Bad [placement] credentials must not keep agents from
        # registering; GET /hardware reports the problem with usages.
        problem = 'Placement is misconfigured: %s' % exc
        LOG.error('[placement]: %s', problem)
    if client is None:
        LOG.warning('%s: GET /hardware reports no usage', problem)
    return hardware.Collector(opts.agent_token, opts.agent_timeout,
                              opts.agent_ca_file, client, problem)


class Conductor:
    """Every part of the conductor-lite, wired from ``conf``.

    :raises StartError: the database cannot be opened or
        ``agent_ca_file`` read.
    """

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        self.conf = conf
        self.opts = conf[conductor_conf.GROUP.name]
        try:
            self.engine = db.engine_from_conf(conf)
            store = db.AgentStore(self.engine)
        except (db_exc.DBError, OSError) as exc:
            raise StartError('Cannot open the database: %s' % exc)
        self.agents = registry.Registry(store, self.opts.agent_down_time)
        try:
            collector = make_collector(conf)
        except (OSError, ssl.SSLError) as exc:
            self.engine.dispose()
            raise StartError('Cannot read agent_ca_file %s: %s'
                             % (self.opts.agent_ca_file, exc))
        self.app = api.make_app(conf, self.agents, collector)
        self.server: api_server.Server | None = None
        self.monitor: registry.Monitor | None = None

    def start(self) -> None:
        """Serve the API and watch for agents going DOWN.

        :raises StartError: the API cannot be served (the port is taken,
            an exposure without auth...); the database is closed.
        """
        try:
            self.server = api_server.Server(
                api_server.with_auth(self.conf, conductor_conf.GROUP.name,
                                     self.app),
                self.opts, conductor_conf.DEFAULT_PORT, NAME)
        except (OSError, ValueError) as exc:
            self.engine.dispose()
            raise StartError('Cannot serve the API: %s' % exc)
        self.monitor = registry.Monitor(self.agents, registry.check_interval(
            self.opts.agent_down_time))
        self.monitor.start()

    def stop(self) -> None:
        if self.monitor is not None:
            self.monitor.stop()
        if self.server is not None:
            self.server.stop()
        self.engine.dispose()


if __name__ == '__main__':
    # The process's entry is in the edges (cyborg_nova.cmd.conductor),
    # which may import the services; run here, this module would do
    # nothing.
    sys.exit('%s: run cyborg-nova-conductor, or python -m '
             'cyborg_nova.cmd.conductor' % NAME)
