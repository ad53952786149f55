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

"""``cyborg-nova-conductor``: the process.

Reads ``--config-file`` (``[cyborg_conductor]``, ``[database]``,
``[placement]``, oslo.log's options) and runs the conductor-lite
(:class:`cyborg_nova.conductor.service.Conductor`) until SIGTERM or
SIGINT. Once it accepts requests it prints ``listening <url>`` on stdout,
which is how tests (and scripts using port 0) learn the port. Also
``python -m cyborg_nova.cmd.conductor``.
"""

from __future__ import annotations

import logging as py_logging
import signal
import sys
import threading

from oslo_config import cfg
from oslo_log import log as logging

from cyborg_nova.cmd import errors
from cyborg_nova.cmd import serving
from cyborg_nova.conductor import service
from cyborg_nova.conf import conductor as conductor_conf
from cyborg_nova import version

# The service's logger: the process's own lines keep the name they had
# when main() lived there (and run with -m, __name__ is __main__).
LOG = service.LOG


def parse_config(argv: list[str]) -> cfg.ConfigOpts:
    """The service's config from ``argv`` (without the program name).

    :raises oslo_config.cfg.Error: bad arguments or config file.
    """
    conf = cfg.ConfigOpts()
    logging.register_options(conf)
    conductor_conf.register_opts(conf)
    conf(argv, project='cyborg-nova', prog=service.NAME,
         version=version.version_string())
    # oslo.config checks values when they are read: read them all now, so
    # a bad value is a start-up error, not a failure deep in a request.
    return errors.check_values(conf)


def main(argv: list[str] | None = None) -> int:
    """Run the service until SIGTERM/SIGINT; the exit status."""
    conf = serving.read_config(service.NAME, lambda: parse_config(
        sys.argv[1:] if argv is None else argv))
    if conf is None:
        return errors.CONFIG_ERROR
    logging.setup(conf, service.NAME)
    conf.log_opt_values(LOG, py_logging.DEBUG)
    try:
        conductor = service.Conductor(conf)
    except service.StartError as exc:
        LOG.error('%s', exc)
        return 1

    stop = threading.Event()

    def _on_signal(signum, frame):
        LOG.info('Signal %s: stopping', signal.Signals(signum).name)
        stop.set()
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)

    try:
        conductor.start()
    except service.StartError as exc:
        LOG.error('%s', exc)
        return 1
    print('listening %s' % conductor.server.url, flush=True)
    try:
        # A timeout keeps the main thread waking up, so signal handlers
        # run promptly whatever the platform's lock semantics.
        while not stop.wait(1.0):
            pass
    finally:
        conductor.stop()
        LOG.info('Stopped')
    return 0


if __name__ == '__main__':
    sys.exit(main())
