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

"""``cyborg-nova-conductor``: the conductor-lite service.

Reads ``--config-file`` (``[cyborg_conductor]``, ``[database]``,
``[placement]``, oslo.log's options), opens the database (creating its
tables), serves the REST API with cheroot and watches for agents going
DOWN in a background thread, until SIGTERM or SIGINT. Once it accepts
requests it prints ``listening <url>`` on stdout, which is how tests
(and scripts using port 0) learn the port.
"""

from __future__ import annotations

import logging as py_logging
import signal
import ssl
import sys
import threading

from oslo_config import cfg
from oslo_db import exception as db_exc
from oslo_log import log as logging

from cyborg_nova.api import server as api_server
from cyborg_nova.conductor import api
from cyborg_nova.conductor import db
from cyborg_nova.conductor import hardware
from cyborg_nova.conductor import registry
from cyborg_nova.conf import api as api_conf
from cyborg_nova.conf import conductor as conductor_conf
from cyborg_nova import placement
from cyborg_nova import version

# Named, not __name__: run with -m, that would be __main__.
LOG = logging.getLogger('cyborg_nova.conductor.service')

NAME = 'cyborg-nova-conductor'


def parse_config(argv: list[str]) -> cfg.ConfigOpts:
    """The service's config from ``argv`` (without the program name).

    :raises oslo_config.cfg.Error: bad arguments or config file.
    """
    conf = cfg.ConfigOpts()
    logging.register_options(conf)
    conductor_conf.register_opts(conf)
    conf(argv, project='cyborg-nova', prog=NAME,
         version=version.version_string())
    # oslo.config checks values when they are read: read ours now, so a
    # bad value is a start-up error, not a failure deep in a request.
    for opt in api_conf.API_OPTS + conductor_conf.OPTS:
        getattr(conf[conductor_conf.GROUP.name], opt.dest)
    return conf


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


def main(argv: list[str] | None = None) -> int:
    """Run the service until SIGTERM/SIGINT; the exit status."""
    try:
        conf = parse_config(sys.argv[1:] if argv is None else argv)
    except cfg.Error as exc:
        print('%s: %s' % (NAME, exc), file=sys.stderr)
        return 2
    logging.setup(conf, NAME)
    conf.log_opt_values(LOG, py_logging.DEBUG)
    opts = conf[conductor_conf.GROUP.name]

    try:
        engine = db.engine_from_conf(conf)
        store = db.AgentStore(engine)
    except (db_exc.DBError, OSError) as exc:
        LOG.error('Cannot open the database: %s', exc)
        return 1
    agents = registry.Registry(store, opts.agent_down_time)
    try:
        collector = make_collector(conf)
    except (OSError, ssl.SSLError) as exc:
        LOG.error('Cannot read agent_ca_file %s: %s', opts.agent_ca_file,
                  exc)
        engine.dispose()
        return 1
    application = api.make_app(conf, agents, collector)

    stop = threading.Event()

    def _on_signal(signum, frame):
        LOG.info('Signal %s: stopping', signal.Signals(signum).name)
        stop.set()
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)

    try:
        server = api_server.Server(
            api_server.with_auth(conf, conductor_conf.GROUP.name,
                                 application),
            opts, conductor_conf.DEFAULT_PORT, NAME)
    except (OSError, ValueError) as exc:
        LOG.error('Cannot serve the API: %s', exc)
        engine.dispose()
        return 1
    monitor = registry.Monitor(agents, registry.check_interval(
        opts.agent_down_time))
    monitor.start()
    print('listening %s' % server.url, flush=True)
    try:
        # A timeout keeps the main thread waking up, so signal handlers
        # run promptly whatever the platform's lock semantics.
        while not stop.wait(1.0):
            pass
    finally:
        monitor.stop()
        server.stop()
        engine.dispose()
        LOG.info('Stopped')
    return 0


if __name__ == '__main__':
    sys.exit(main())
